//! `load http --http3` against three independent HTTP/3 servers: quic-go's
//! (`tests/interop/quicgo_h3`), ngtcp2's `gtlsserver` and aioquic's example server (installed by
//! `.ci/run`; a missing one skips with the reason printed): the handshake and requests, 100
//! concurrent streams on one connection, a 10 MiB response and a 10 MiB request body, resumed
//! connections (as the server saw them), a key update, and 10 MiB under 5% loss each way.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::h3::{start_aioquic_server, start_gtlsserver, start_quicgo_server, H3Cert, PeerServer};

const BIN: &str = env!("CARGO_BIN_EXE_sockscale");
const TEN_MIB: u64 = 10 << 20;

/// The peer's server, or None (the case skipped, the reason printed).
fn peer(what: &str, started: Result<PeerServer, String>) -> Option<PeerServer> {
    match started {
        Ok(s) => Some(s),
        Err(why) => {
            eprintln!("skipped {what}: {why}");
            None
        }
    }
}

/// `sockscale load http --http3 ARGS URL` trusting `ca`; its JSON report.
fn load(url: &str, ca: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["load", "http", "--http3", "--connect-timeout", "5", "--json", "-", "--cacert"])
        .arg(ca)
        .args(args)
        .arg(url)
        .output()
        .expect("run sockscale load");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "load --http3 {args:?} {url}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

fn completed(r: &serde_json::Value) -> u64 {
    r["requests"]["completed"].as_u64().unwrap_or(0)
}

/// What every server gets: 100 requests as 100 concurrent streams on one connection, then a
/// 10 MiB response, then connections made anew for each request (a handshake each, resumed
/// after the first), each counted by the report and, where it says, the server.
fn against(server: &PeerServer, cert: &H3Cert) {
    let name = format!("{:?}", server.peer);
    let r = load(&server.url(&server.bytes_path(1000)), &cert.ca, &["-c", "1", "--pipeline", "100", "-n", "100"]);
    assert_eq!(completed(&r), 100, "{name}: {}", r["errors"]);
    assert_eq!(r["statuses"]["codes"]["200"], 100, "{name}");
    assert_eq!(r["quic"]["alpn"]["h3"], 1, "{name}: {}", r["quic"]);
    assert_eq!(r["quic"]["version"], 1, "{name}");
    assert!(r["bytes"]["received"].as_u64().unwrap_or(0) >= 100 * 1000, "{name}: {}", r["bytes"]);

    let r = load(&server.url(&server.bytes_path(TEN_MIB)), &cert.ca, &["-c", "1", "-n", "2"]);
    assert_eq!(completed(&r), 2, "{name}: 10 MiB: {}", r["errors"]);
    assert!(r["bytes"]["received"].as_u64().unwrap_or(0) >= 2 * TEN_MIB, "{name}: {}", r["bytes"]);

    let before = server.handshakes().map(|h| h.len());
    let r = load(&server.url(&server.bytes_path(100)), &cert.ca, &["-c", "1", "-n", "6", "--no-keepalive"]);
    assert_eq!(completed(&r), 6, "{name}: {}", r["errors"]);
    assert!(r["quic"]["handshakes"].as_u64().unwrap_or(0) >= 6, "{name}: {}", r["quic"]);
    if let (Some(before), Some(after)) = (before, server.handshakes()) {
        let resumed = after[before..].iter().filter(|h| h.resumed).count();
        assert!(resumed >= 5, "{name}: {resumed} of the new connections resumed: {:?}", &after[before..]);
        // The load generator reads the same from each ServerHello.
        assert_eq!(r["quic"]["resumed"].as_u64(), Some(resumed as u64), "{name}: {}", r["quic"]);
    }
}

#[test]
fn quic_go_server() {
    let cert = H3Cert::new("load-quicgo");
    let Some(server) = peer("quic-go", start_quicgo_server(&cert)) else { return };
    against(&server, &cert);
    // quic-go updates its keys after 100 packets: the 10 MiB responses went through one.
    assert!(server.wait_for(Duration::from_secs(3), |s| s.key_updates() >= 1), "no key update seen by quic-go");
    // A 10 MiB request body, echoed.
    let body = cert.cert.with_file_name("up.bin");
    std::fs::write(&body, support::pattern(11, TEN_MIB as usize)).expect("body");
    let body_arg = body.to_string_lossy().into_owned();
    let echo = server.echo_path().expect("quic-go echoes");
    let r = load(&server.url(echo), &cert.ca, &["-c", "1", "-n", "1", "-m", "POST", "--body", &body_arg]);
    assert_eq!(completed(&r), 1, "{}", r["errors"]);
    assert!(r["bytes"]["received"].as_u64().unwrap_or(0) >= TEN_MIB, "{}", r["bytes"]);
    assert!(r["bytes"]["sent"].as_u64().unwrap_or(0) >= TEN_MIB, "{}", r["bytes"]);
}

#[test]
fn aioquic_server() {
    let cert = H3Cert::new("load-aioquic");
    let Some(server) = peer("aioquic", start_aioquic_server(&cert)) else { return };
    against(&server, &cert);
}

#[test]
fn ngtcp2_server_and_five_percent_loss() {
    let cert = H3Cert::new("load-ngtcp2");
    let Some(server) = peer("gtlsserver", start_gtlsserver(&cert, None)) else { return };
    against(&server, &cert);
    drop(server);
    // gtlsserver drops 5% of its datagrams each way: 10 MiB still arrives whole, the losses
    // counted by the client's loss detection.
    let Some(lossy) = peer("gtlsserver -t/-r 0.05", start_gtlsserver(&cert, Some(0.05))) else { return };
    let r = load(&lossy.url(&lossy.bytes_path(TEN_MIB)), &cert.ca, &["-c", "1", "-n", "1", "--timeout", "60"]);
    assert_eq!(completed(&r), 1, "{}", r["errors"]);
    assert!(r["bytes"]["received"].as_u64().unwrap_or(0) >= TEN_MIB, "{}", r["bytes"]);
    assert!(r["quic"]["packets_lost"].as_u64().unwrap_or(0) > 0, "5% loss and none counted: {}", r["quic"]);
}
