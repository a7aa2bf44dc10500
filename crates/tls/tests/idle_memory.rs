//! What an idle TLS session keeps on the heap once its handshake and a request are done: the
//! seeds' discipline says an idle connection holds no buffer. Counted by a global allocator, in
//! its own test binary so no other test allocates meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use sockscale_tls::{ServerOptions, ServerSession, ServerTls};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as for alloc and dealloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn an_idle_session_after_a_request_holds_little() {
    let (ca, leaf, leaf_key) = common::certificates();
    let options = ServerOptions { alpn: vec![b"http/1.1".to_vec()], ..ServerOptions::default() };
    let tls = ServerTls::from_pem(
        leaf.as_bytes(),
        Path::new("c"),
        leaf_key.as_bytes(),
        Path::new("k"),
        SystemTime::now(),
        &options,
    )
    .expect("tls");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("pem")).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No resumption: every session is a full handshake, and the client keeps no tickets.
    config.resumption = rustls::client::Resumption::disabled();
    let config = Arc::new(config);

    const SESSIONS: usize = 200;
    let mut sessions = Vec::with_capacity(SESSIONS);
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..SESSIONS {
        let mut client =
            rustls::ClientConnection::new(config.clone(), ServerName::try_from("localhost").expect("n")).expect("c");
        let mut session = ServerSession::new(&tls, Instant::now()).expect("s").expect("s");
        client.writer().write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("w");
        let mut plain = Vec::new();
        for _ in 0..10 {
            let mut up = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut up).expect("w");
            }
            let mut down = Vec::new();
            if !up.is_empty() {
                session.receive(&mut up, Instant::now(), &mut plain, &mut down).expect("r");
            }
            session.send(&plain, &mut down).expect("s");
            plain.clear();
            let mut slice = down.as_slice();
            while !slice.is_empty() {
                client.read_tls(&mut slice).expect("r");
                client.process_new_packets().expect("p");
            }
            if up.is_empty() && down.is_empty() {
                break;
            }
        }
        assert!(!session.is_handshaking());
        assert_eq!(session.buffered(), 0, "an idle session keeps no buffer");
        drop(client);
        sessions.push(session);
    }
    let per_session = (LIVE.load(Ordering::Relaxed) - before) as usize / SESSIONS;
    let inline = std::mem::size_of::<ServerSession>();
    println!("idle TLS session: {per_session} bytes on the heap each (the struct itself: {inline} bytes)");
    // The goal is at most 4 KiB of user space per idle TLS connection, all told. The session
    // lives boxed beside its connection, whose own state is about 300 bytes (docs/BENCHMARKS.md,
    // memory per idle connection): the session may take the rest, less a margin.
    let total = per_session + inline;
    assert!(total <= 3584, "an idle session costs {total} bytes ({per_session} on the heap, {inline} inline)");
}
