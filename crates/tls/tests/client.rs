//! The client stage against the server stage, both in memory: what the load generator and the
//! server will do over a socket, with every byte visible.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use sockscale_tls::{
    ClientSession, ClientTls, FailureReason, ServerOptions, ServerSession, ServerTls, TlsConfigError, Trust,
};

/// A CA file on disk (removed with the returned directory), and a server configuration with a
/// leaf it signed.
fn setup(name: &str) -> (tempfile::TempDir, PathBuf, ServerTls) {
    let (ca, leaf, key) = common::certificates();
    let dir = tempfile::Builder::new().prefix(&format!("sockscale-tls-client-{name}-")).tempdir().expect("dir");
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca).expect("write");
    let options = ServerOptions { alpn: vec![b"http/1.1".to_vec()], ..ServerOptions::default() };
    let tls = ServerTls::from_pem(
        leaf.as_bytes(),
        Path::new("c"),
        key.as_bytes(),
        Path::new("k"),
        SystemTime::now(),
        &options,
    )
    .expect("server tls");
    (dir, ca_path, tls)
}

/// Exchange records until both are quiet; returns (plaintext the server got, plaintext the
/// client got, the client's failure if any).
fn pump(
    client: &mut ClientSession,
    server: &mut ServerSession,
    mut to_server: Vec<u8>,
    now: Instant,
    answer: &[u8],
) -> (Vec<u8>, Vec<u8>, Option<FailureReason>) {
    let (mut server_got, mut client_got) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let mut to_client = Vec::new();
        if !to_server.is_empty() {
            let before = server_got.len();
            if server.receive(&mut to_server, now, &mut server_got, &mut to_client).is_err() {
                return (server_got, client_got, None);
            }
            if server_got.len() > before && !answer.is_empty() {
                server.send(answer, &mut to_client).expect("answer");
            }
        }
        to_server = Vec::new();
        if !to_client.is_empty() {
            if let Err(failure) = client.receive(&mut to_client, now, &mut client_got, &mut to_server) {
                return (server_got, client_got, Some(failure.reason));
            }
        }
        if to_server.is_empty() && to_client.is_empty() {
            break;
        }
    }
    (server_got, client_got, None)
}

#[test]
fn a_request_and_its_answer_cross_and_both_sides_agree() {
    let (_dir, ca, server_tls) = setup("cross");
    let tls = ClientTls::new(&Trust::CaFile(ca), vec![b"http/1.1".to_vec()], true).expect("client tls");
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut client = ClientSession::start(&tls, "localhost", t0, &mut out).expect("hello");
    assert!(!out.is_empty(), "the ClientHello");
    client.send(b"GET / HTTP/1.1\r\n\r\n", &mut out).expect("held until the handshake");
    let mut server = ServerSession::new(&server_tls, t0).expect("room").expect("session");
    let (server_got, client_got, failure) = pump(&mut client, &mut server, out, t0, b"HTTP/1.1 200 OK\r\n\r\n");
    assert_eq!(failure, None);
    assert_eq!(server_got, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(client_got, b"HTTP/1.1 200 OK\r\n\r\n");
    let (c, s) = (client.negotiated().expect("client done"), server.negotiated().expect("server done"));
    assert_eq!((c.version, c.alpn.as_deref()), ("TLSv1.3", Some(&b"http/1.1"[..])));
    assert_eq!((c.suite, c.version), (s.suite, s.version));
}

#[test]
fn resumption_is_the_client_s_choice() {
    let (_dir, ca, server_tls) = setup("resume");
    for resume in [true, false] {
        let tls = ClientTls::new(&Trust::CaFile(ca.clone()), Vec::new(), resume).expect("client tls");
        let mut resumed = Vec::new();
        for _ in 0..2 {
            let now = Instant::now();
            let mut out = Vec::new();
            let mut client = ClientSession::start(&tls, "localhost", now, &mut out).expect("hello");
            client.send(b"x", &mut out).expect("send");
            let mut server = ServerSession::new(&server_tls, now).expect("room").expect("session");
            let (_, _, failure) = pump(&mut client, &mut server, out, now, b"y");
            assert_eq!(failure, None);
            resumed.push(client.negotiated().expect("done").resumed);
        }
        assert_eq!(resumed, [false, resume], "resume {resume}");
    }
}

#[test]
fn an_untrusted_certificate_fails_with_its_reason_and_insecure_accepts_it() {
    let (_dir, _, server_tls) = setup("untrusted");
    let (_other_dir, other_ca, _) = setup("other");
    let now = Instant::now();
    let tls = ClientTls::new(&Trust::CaFile(other_ca), Vec::new(), false).expect("client tls");
    let mut out = Vec::new();
    let mut client = ClientSession::start(&tls, "localhost", now, &mut out).expect("hello");
    let mut server = ServerSession::new(&server_tls, now).expect("room").expect("session");
    let (_, _, failure) = pump(&mut client, &mut server, out, now, b"");
    assert_eq!(failure, Some(FailureReason::Certificate));

    let insecure = ClientTls::new(&Trust::Insecure, Vec::new(), false).expect("client tls");
    let mut out = Vec::new();
    let mut client = ClientSession::start(&insecure, "localhost", now, &mut out).expect("hello");
    client.send(b"x", &mut out).expect("send");
    let mut server = ServerSession::new(&server_tls, now).expect("room").expect("session");
    let (server_got, _, failure) = pump(&mut client, &mut server, out, now, b"");
    assert_eq!((failure, server_got.as_slice()), (None, &b"x"[..]));
}

#[test]
fn a_missing_ca_file_is_named() {
    let err = ClientTls::new(&Trust::CaFile("/nonexistent/ca.pem".into()), Vec::new(), true).expect_err("missing");
    assert!(matches!(err, TlsConfigError::Read { .. }) && err.to_string().contains("/nonexistent/ca.pem"), "{err}");
}

#[test]
fn the_client_times_its_handshake_from_its_hello() {
    let (_dir, ca, server_tls) = setup("timing");
    let tls = ClientTls::new(&Trust::CaFile(ca), Vec::new(), false).expect("client tls");
    let t0 = Instant::now();
    let mut hello = Vec::new();
    let mut client = ClientSession::start(&tls, "localhost", t0, &mut hello).expect("hello");
    let mut server = ServerSession::new(&server_tls, t0).expect("room").expect("session");
    let mut flight = Vec::new();
    server.receive(&mut hello, t0, &mut Vec::new(), &mut flight).expect("hello taken");
    let mut finished = Vec::new();
    let got =
        client.receive(&mut flight, t0 + Duration::from_millis(5), &mut Vec::new(), &mut finished).expect("flight");
    assert_eq!(got.handshake_done, Some(Duration::from_millis(5)));
}
