//! The server stage against a rustls client, in memory: handshakes (TLS 1.3 and 1.2, ALPN,
//! resumption), data both ways, and what a client that is not speaking TLS gets. Certificates
//! are made here, at test time.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

mod common;

use common::certificates;
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConnection;
use sockscale_tls::{FailureReason, ServerOptions, ServerSession, ServerTls, TlsConfigError};

fn server(alpn: &[&[u8]]) -> (ServerTls, String) {
    let (ca, cert, key) = certificates();
    let options = ServerOptions { alpn: alpn.iter().map(|p| p.to_vec()).collect(), ..ServerOptions::default() };
    let tls = ServerTls::from_pem(
        cert.as_bytes(),
        Path::new("cert.pem"),
        key.as_bytes(),
        Path::new("key.pem"),
        SystemTime::now(),
        &options,
    )
    .expect("a valid certificate and key");
    (tls, ca)
}

fn client_config(
    ca: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice_compat(ca);
    roots.add(ca).expect("the CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

trait FromPem {
    fn from_pem_slice_compat(pem: &str) -> CertificateDer<'static>;
}

impl FromPem for CertificateDer<'static> {
    fn from_pem_slice_compat(pem: &str) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes()).expect("a PEM certificate")
    }
}

/// Move records both ways until neither side has any; returns the plaintext the server got.
fn pump(client: &mut ClientConnection, server: &mut ServerSession, now: Instant) -> Vec<u8> {
    let mut plaintext = Vec::new();
    for _ in 0..20 {
        let mut to_server = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut to_server).expect("client records");
        }
        let mut to_client = Vec::new();
        if !to_server.is_empty() {
            server
                .receive(&mut to_server, now, &mut plaintext, &mut to_client)
                .expect("the server takes the client's records");
        }
        if !to_client.is_empty() {
            let mut slice = to_client.as_slice();
            while !slice.is_empty() {
                client.read_tls(&mut slice).expect("client reads");
                client.process_new_packets().expect("the client takes the server's records");
            }
        }
        if to_server.is_empty() && to_client.is_empty() {
            return plaintext;
        }
    }
    panic!("the two sides never went quiet");
}

fn connect(config: &Arc<rustls::ClientConfig>, tls: &ServerTls) -> (ClientConnection, ServerSession) {
    let client =
        ClientConnection::new(config.clone(), ServerName::try_from("localhost").expect("name")).expect("client");
    (client, ServerSession::new(tls, Instant::now()).expect("session").expect("session"))
}

#[test]
fn a_request_and_its_answer_cross_tls13_with_alpn() {
    let (tls, ca) = server(&[b"http/1.1"]);
    let config = client_config(&ca, &[&rustls::version::TLS13], &[b"http/1.1"]);
    let (mut client, mut session) = connect(&config, &tls);
    let t0 = Instant::now();
    client.writer().write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("client write");
    let got = pump(&mut client, &mut session, t0);
    assert_eq!(got, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "early plaintext arrives once the handshake is done");
    let agreed = session.negotiated().expect("handshake done");
    assert_eq!((agreed.version, agreed.alpn.as_deref(), agreed.resumed), ("TLSv1.3", Some(&b"http/1.1"[..]), false));
    assert!(agreed.suite.starts_with("TLS13_"), "{}", agreed.suite);

    let mut records = Vec::new();
    session.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", &mut records).expect("send");
    client.read_tls(&mut records.as_slice()).expect("read");
    client.process_new_packets().expect("records");
    let mut answer = vec![0; 64];
    let n = client.reader().read(&mut answer).expect("the answer");
    assert_eq!(&answer[..n], b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
}

#[test]
fn tls12_is_served_too() {
    let (tls, ca) = server(&[]);
    let config = client_config(&ca, &[&rustls::version::TLS12], &[]);
    let (mut client, mut session) = connect(&config, &tls);
    client.writer().write_all(b"ping").expect("write");
    assert_eq!(pump(&mut client, &mut session, Instant::now()), b"ping");
    assert_eq!(session.negotiated().expect("done").version, "TLSv1.2");
}

#[test]
fn the_handshake_is_timed_from_its_first_byte() {
    let (tls, ca) = server(&[]);
    let config = client_config(&ca, &[&rustls::version::TLS13], &[]);
    let (mut client, mut session) = connect(&config, &tls);
    let t0 = Instant::now();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).expect("hello");
    let mut plain = Vec::new();
    let mut flight = Vec::new();
    let first = session.receive(&mut hello, t0, &mut plain, &mut flight).expect("hello taken");
    assert_eq!(first.handshake_done, None);
    client.read_tls(&mut flight.as_slice()).expect("read");
    client.process_new_packets().expect("server flight");
    let mut finished = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut finished).expect("finished");
    }
    let done = session
        .receive(&mut finished, t0 + Duration::from_millis(30), &mut plain, &mut Vec::new())
        .expect("finished taken");
    assert_eq!(done.handshake_done, Some(Duration::from_millis(30)));
}

#[test]
fn a_second_connection_resumes_with_tickets_and_with_the_session_cache() {
    for (version, tickets) in
        [(&rustls::version::TLS13, true), (&rustls::version::TLS12, true), (&rustls::version::TLS12, false)]
    {
        let (ca, cert, key) = certificates();
        let options = ServerOptions { tickets, ..ServerOptions::default() };
        let tls = ServerTls::from_pem(
            cert.as_bytes(),
            Path::new("c"),
            key.as_bytes(),
            Path::new("k"),
            SystemTime::now(),
            &options,
        )
        .expect("tls");
        let config = client_config(&ca, &[version], &[]);
        for expect_resumed in [false, true] {
            let (mut client, mut session) = connect(&config, &tls);
            client.writer().write_all(b"x").expect("write");
            pump(&mut client, &mut session, Instant::now());
            let resumed = session.negotiated().expect("done").resumed;
            assert_eq!(resumed, expect_resumed, "{version:?}, tickets {tickets}");
        }
    }
}

#[test]
fn plain_http_or_garbage_on_a_tls_port_is_named_and_gets_no_answer() {
    let (tls, _) = server(&[b"http/1.1"]);
    for junk in [&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..], &[0u8; 64][..], b"\x16\x03\x01\x00\x05hello"] {
        let mut session = ServerSession::new(&tls, Instant::now()).expect("session").expect("session");
        let (mut plain, mut alert) = (Vec::new(), Vec::new());
        let failure =
            session.receive(&mut junk.to_vec(), Instant::now(), &mut plain, &mut alert).expect_err("not a handshake");
        let expected = if junk[0] == 0x16 { FailureReason::Protocol } else { FailureReason::NotTls };
        assert_eq!(failure.reason, expected, "{failure}");
        assert!(plain.is_empty());
        if junk[0] == 0x16 {
            // A handshake record that is not one: at most a fatal alert (RFC 8446 §6.2).
            assert!(alert.is_empty() || alert[0] == 0x15, "{alert:?}");
        } else {
            assert!(alert.is_empty(), "nothing is sent to a peer not speaking TLS: {alert:?}");
        }
        assert!(session.send(b"x", &mut alert).is_err(), "a failed session sends nothing more");
    }
}

#[test]
fn an_alpn_the_server_does_not_speak_is_refused() {
    let (tls, ca) = server(&[b"http/1.1"]);
    let config = client_config(&ca, &[&rustls::version::TLS13], &[b"h2"]);
    let (mut client, mut session) = connect(&config, &tls);
    let mut hello = Vec::new();
    client.write_tls(&mut hello).expect("hello");
    let mut out = Vec::new();
    let failure =
        session.receive(&mut hello, Instant::now(), &mut Vec::new(), &mut out).expect_err("no common protocol");
    assert_eq!(failure.reason, FailureReason::Incompatible, "{failure}");
    // The client is told why: the ServerHello, then no_application_protocol (encrypted).
    client.read_tls(&mut out.as_slice()).expect("the server's records");
    assert_eq!(
        client.process_new_packets().map(drop),
        Err(rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol))
    );
}

/// A TLS 1.1 ClientHello (no supported_versions, no signature_algorithms: what `openssl
/// s_client -tls1_1` sends, trimmed) is answered with protocol_version, in clear.
#[test]
fn a_tls11_client_is_told_protocol_version() {
    let (tls, _) = server(&[b"http/1.1"]);
    let body: Vec<u8> = [
        &[0x03, 0x02][..],                     // client_version TLS 1.1
        &[0x42; 32],                           // random
        &[0x00],                               // session id
        &[0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f], // cipher suites
        &[0x01, 0x00],                         // compression: null
    ]
    .concat();
    let mut hello = vec![0x16, 0x03, 0x01];
    hello.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
    hello.extend_from_slice(&[0x01, 0x00]);
    hello.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hello.extend_from_slice(&body);
    let mut session = ServerSession::new(&tls, Instant::now()).expect("session").expect("session");
    let mut out = Vec::new();
    let failure = session.receive(&mut hello, Instant::now(), &mut Vec::new(), &mut out).expect_err("too old");
    assert_eq!(failure.reason, FailureReason::Incompatible, "{failure}");
    assert_eq!(out.len(), 7, "{out:?}");
    assert_eq!((out[0], &out[3..]), (0x15, &[0x00, 0x02, 0x02, 70][..]), "a fatal protocol_version alert: {out:?}");
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn a_bad_certificate_or_key_is_one_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("sockscale-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (_, cert, key) = certificates();
    let (_, _, other_key) = certificates();
    let cert_path = write(&dir, "cert.pem", &cert);
    let key_path = write(&dir, "key.pem", &key);
    let options = ServerOptions::default();
    let now = SystemTime::now();
    let load = |c: &Path, k: &Path| ServerTls::from_pem_files(c, k, now, &options).map(drop);

    assert!(load(&cert_path, &key_path).is_ok());
    let missing = dir.join("missing.pem");
    let err = load(&missing, &key_path).expect_err("missing");
    assert!(matches!(err, TlsConfigError::Read { .. }) && err.to_string().contains("missing.pem"), "{err}");
    let empty = write(&dir, "empty.pem", "");
    assert!(matches!(load(&empty, &key_path), Err(TlsConfigError::NoCertificate { .. })));
    assert!(matches!(load(&cert_path, &empty), Err(TlsConfigError::NoKey { .. })));
    let keyless = write(&dir, "keyless.pem", &cert);
    assert!(matches!(load(&cert_path, &keyless), Err(TlsConfigError::NoKey { .. })));
    let wrong = write(&dir, "other-key.pem", &other_key);
    let err = load(&cert_path, &wrong).expect_err("mismatch");
    assert!(matches!(err, TlsConfigError::Mismatch { .. }), "{err}");
    assert!(err.to_string().contains("other-key.pem") && err.to_string().contains("cert.pem"), "{err}");
    for e in [load(&missing, &key_path), load(&cert_path, &wrong)] {
        assert!(!e.expect_err("errors").to_string().contains('\n'), "one line");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_expired_or_not_yet_valid_certificate_is_refused_before_listening() {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).expect("cert").pem();
    let options = ServerOptions::default();
    let err = ServerTls::from_pem(
        cert.as_bytes(),
        Path::new("old.pem"),
        key.serialize_pem().as_bytes(),
        Path::new("k"),
        SystemTime::now(),
        &options,
    )
    .expect_err("expired");
    assert!(matches!(err, TlsConfigError::Expired { .. }) && err.to_string().contains("old.pem"), "{err}");
    let in_2020 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_590_000_000);
    assert!(ServerTls::from_pem(
        cert.as_bytes(),
        Path::new("c"),
        key.serialize_pem().as_bytes(),
        Path::new("k"),
        in_2020,
        &options
    )
    .is_ok());
    let in_2019 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_560_000_000);
    let err = ServerTls::from_pem(
        cert.as_bytes(),
        Path::new("c"),
        key.serialize_pem().as_bytes(),
        Path::new("k"),
        in_2019,
        &options,
    )
    .expect_err("not yet");
    assert!(matches!(err, TlsConfigError::NotYetValid { .. }), "{err}");
}

#[test]
fn records_that_arrive_a_few_bytes_at_a_time_are_joined() {
    let (tls, ca) = server(&[b"http/1.1"]);
    let config = client_config(&ca, &[&rustls::version::TLS13], &[b"http/1.1"]);
    let (mut client, mut session) = connect(&config, &tls);
    let request = vec![b'q'; 40_000];
    client.writer().write_all(&request).expect("write");
    let mut plaintext = Vec::new();
    for _ in 0..20 {
        let mut up = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut up).expect("records");
        }
        let mut down = Vec::new();
        // Seven bytes at a time: every record and handshake message arrives in pieces.
        for piece in up.chunks_mut(7) {
            session.receive(piece, Instant::now(), &mut plaintext, &mut down).expect("a piece");
        }
        let mut slice = down.as_slice();
        while !slice.is_empty() {
            client.read_tls(&mut slice).expect("read");
            client.process_new_packets().expect("records");
        }
        if up.is_empty() && down.is_empty() {
            break;
        }
    }
    assert_eq!(plaintext.len(), request.len());
    assert!(plaintext == request);
    assert_eq!(session.buffered(), 0, "nothing is kept once every record is whole");

    // A large answer becomes several records, and arrives whole.
    let answer: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let mut down = Vec::new();
    session.send(&answer, &mut down).expect("send");
    let mut slice = down.as_slice();
    let mut got = Vec::new();
    let mut chunk = vec![0; 65536];
    while !slice.is_empty() {
        client.read_tls(&mut slice).expect("read");
        client.process_new_packets().expect("records");
        while let Ok(n @ 1..) = client.reader().read(&mut chunk) {
            got.extend_from_slice(&chunk[..n]);
        }
    }
    assert!(got == answer, "got {} bytes of {}", got.len(), answer.len());
}

/// A hostile client gets a failure, never a panic: random bytes, and a real ClientHello with
/// random bytes spliced in, fed in random pieces.
#[test]
fn hostile_bytes_in_any_pieces_never_panic() {
    let (tls, ca) = server(&[b"http/1.1"]);
    let config = client_config(&ca, &[&rustls::version::TLS13, &rustls::version::TLS12], &[b"http/1.1"]);
    let mut hello = Vec::new();
    let mut client = ClientConnection::new(config, ServerName::try_from("localhost").expect("name")).expect("client");
    client.write_tls(&mut hello).expect("hello");
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..3000 {
        let mut input = if round % 2 == 0 {
            let len = (next() % 300) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 4 == 0 && bytes.len() > 5 {
                bytes[..3].copy_from_slice(&[0x16, 0x03, 0x01]);
            }
            bytes
        } else {
            let mut bytes = hello.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            bytes.truncate(1 + (next() as usize) % bytes.len());
            bytes
        };
        let mut session = ServerSession::new(&tls, Instant::now()).expect("session").expect("session");
        let (mut plain, mut out) = (Vec::new(), Vec::new());
        let mut rest = input.as_mut_slice();
        while !rest.is_empty() {
            let take = 1 + (next() as usize) % rest.len();
            let (piece, tail) = rest.split_at_mut(take);
            if session.receive(piece, Instant::now(), &mut plain, &mut out).is_err() {
                break;
            }
            rest = tail;
        }
        assert!(plain.is_empty(), "no plaintext before a handshake");
    }
}

/// `max_handshakes`: sessions beyond it are refused while that many handshakes are under way;
/// a place comes back when a handshake completes, or its session ends.
#[test]
fn handshakes_in_progress_are_bounded() {
    let (ca, cert, key) = certificates();
    let options = ServerOptions { max_handshakes: Some(2), ..ServerOptions::default() };
    let tls = ServerTls::from_pem(
        cert.as_bytes(),
        Path::new("c"),
        key.as_bytes(),
        Path::new("k"),
        SystemTime::now(),
        &options,
    )
    .expect("tls");
    let now = Instant::now();
    let first = ServerSession::new(&tls, now).expect("room").expect("session");
    let config = client_config(&ca, &[&rustls::version::TLS13], &[]);
    let (mut client, mut second) = connect(&config, &tls);
    assert_eq!(tls.handshakes_in_progress(), 2);
    assert_eq!(ServerSession::new(&tls, now).map(drop).expect_err("full").max, 2);
    client.writer().write_all(b"x").expect("write");
    pump(&mut client, &mut second, now);
    assert!(!second.is_handshaking());
    assert_eq!(tls.handshakes_in_progress(), 1, "a completed handshake gives its place back");
    let third = ServerSession::new(&tls, now).expect("room again").expect("session");
    assert!(ServerSession::new(&tls, now).is_err());
    drop(first);
    drop(third);
    assert_eq!(tls.handshakes_in_progress(), 0, "an ended session gives its place back");
}
