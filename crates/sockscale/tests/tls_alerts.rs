//! A TLS session that fails gets the fatal alert that says why before the close (RFC 8446
//! §6.2), as nginx sends it, on every model: protocol_version to a TLS 1.1 client,
//! no_application_protocol to an ALPN the server does not speak, handshake_failure to a client
//! with no cipher suite in common, bad_record_mac to a corrupted record after the handshake. A
//! peer that is not speaking TLS at all gets the close alone. `openssl s_client` is the client
//! where it can say what it received (skipped, saying why, where it is missing).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConnection};
use sockscale_server::{Model, Policy};
use support::tls::TestCert;
use support::{skip, unavailable, ServerProc};

/// Every model that can serve TLS here (the library's list, so a new model is covered).
fn tls_models() -> Vec<&'static str> {
    Model::ALL.iter().map(|m| m.name()).filter(|m| !unavailable(m) && !skip(m, Policy::Tls)).collect()
}

fn tls_server(model: &str, cert: &TestCert) -> ServerProc {
    let tls = cert.args();
    let mut args = vec!["--proto", "http"];
    args.extend(tls.iter().map(String::as_str));
    ServerProc::start(model, &args)
}

/// `openssl s_client` against `server` with `args`, its stdin closed; what it printed (stdout
/// and stderr), within 20 s. None: openssl is missing (the reason is printed).
fn s_client(server: &ServerProc, args: &[&str]) -> Option<String> {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: openssl is not installed (apt-get install openssl)");
        return None;
    }
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &server.addr.to_string(), "-servername", "localhost"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl s_client");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait for openssl").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("openssl output");
    Some(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn every_model_sends_the_alert_that_says_why_a_handshake_failed() {
    let cert = TestCert::new("alerts");
    for model in tls_models() {
        let server = tls_server(model, &cert);
        // OpenSSL 3 offers TLS 1.1 only at security level 0.
        let Some(old) = s_client(&server, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]) else { return };
        if old.contains("no protocols available") {
            eprintln!("skipped the TLS 1.1 case on {model}: this OpenSSL cannot offer TLS 1.1");
        } else {
            assert!(old.contains("alert protocol version"), "{model}: TLS 1.1 client:\n{old}");
        }
        for alpn in [&["-alpn", "foo"][..], &["-tls1_2", "-alpn", "foo"]] {
            let out = s_client(&server, alpn).expect("openssl");
            assert!(out.contains("alert no application protocol"), "{model}: {alpn:?}:\n{out}");
        }
        // A suite sockscale does not serve: AES-CBC with RSA key exchange (TLS 1.2), AES-CCM (1.3).
        for suites in
            [&["-tls1_2", "-cipher", "AES128-SHA"][..], &["-tls1_3", "-ciphersuites", "TLS_AES_128_CCM_SHA256"]]
        {
            let out = s_client(&server, suites).expect("openssl");
            assert!(out.contains("alert handshake failure"), "{model}: {suites:?}:\n{out}");
        }
        let done = server.stop();
        assert_eq!(done.counter("tls_failed_incompatible"), 5, "{model}: {:?}", done.stdout);
    }
}

/// A rustls client completes the handshake, then sends an application-data record of random
/// bytes: the server answers with bad_record_mac, encrypted (keys are in use), which the client
/// decrypts, and closes.
#[test]
fn every_model_answers_a_corrupted_record_with_bad_record_mac() {
    let cert = TestCert::new("bad-record");
    for model in tls_models() {
        let server = tls_server(model, &cert);
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let config = cert.client(&[version], &[b"http/1.1"]);
            let alert = corrupt_after_handshake(&server, &config);
            assert_eq!(
                alert,
                Ok(AlertDescription::BadRecordMac),
                "{model} {:?}: what the client saw after its corrupted record",
                version.version
            );
        }
        let done = server.stop();
        assert_eq!(done.counter("tls_failed_protocol"), 2, "{model}: {:?}", done.stdout);
    }
}

/// Handshake with `config`, send a record of garbage, and return the alert the server sent
/// (Err: what happened instead).
fn corrupt_after_handshake(
    server: &ServerProc,
    config: &Arc<rustls::ClientConfig>,
) -> Result<AlertDescription, String> {
    let mut tcp = server.connect();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let name = ServerName::try_from("localhost").expect("name");
    let mut conn = ClientConnection::new(config.clone(), name).expect("client");
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| format!("handshake: {e}"))?;
    }
    while conn.wants_write() {
        conn.write_tls(&mut tcp).map_err(|e| format!("write: {e}"))?;
    }
    // A record the size of a short request, of bytes no key sealed.
    let mut garbage = vec![0x17, 0x03, 0x03, 0x00, 0x40];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    garbage.extend((0..0x40).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    }));
    tcp.write_all(&garbage).map_err(|e| format!("write the garbage: {e}"))?;
    read_alert(&mut conn, &mut tcp)
}

/// Read what the server sends until rustls reports an error: the alert received, if that is
/// the error.
fn read_alert(conn: &mut ClientConnection, tcp: &mut TcpStream) -> Result<AlertDescription, String> {
    loop {
        match conn.read_tls(tcp) {
            Ok(0) => return Err("the server closed without an alert".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
        match conn.process_new_packets() {
            Ok(_) => {
                // Plaintext (none is expected) is read and dropped.
                let mut sink = Vec::new();
                let _ = conn.reader().read_to_end(&mut sink);
            }
            Err(rustls::Error::AlertReceived(alert)) => return Ok(alert),
            Err(other) => return Err(format!("rustls: {other}")),
        }
    }
}

/// A peer speaking plain HTTP to the TLS port gets no alert (it would not read one): the close
/// alone, as before.
#[test]
fn a_peer_not_speaking_tls_gets_no_alert() {
    let cert = TestCert::new("not-tls");
    for model in tls_models() {
        let server = tls_server(model, &cert);
        let mut tcp = server.connect();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
        let mut got = Vec::new();
        let _ = tcp.read_to_end(&mut got);
        assert!(got.is_empty(), "{model}: {got:?}");
        let done = server.stop();
        assert_eq!(done.counter("tls_failed_not_tls"), 1, "{model}: {:?}", done.stdout);
    }
}
