//! `serve --http3` as a user meets it: each misuse refused with one line naming the flag and
//! the fix, and a non-zero exit; a busy UDP port refused; the offload flags taken with it. What
//! every model does with `--http3` is the conformance suite's (`http3_beside_tcp_with_alt_svc`).

mod support;

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Run `sockscale serve ARGS` and expect it to exit with an error within 10 s: its exit code and
/// stderr. A server that wrongly starts is killed, and the test fails.
fn refused(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sockscale serve");
    let until = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{args:?} was accepted: still serving after 10 s; stdout: {}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success(), "{args:?} succeeded");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Each case: the arguments and the start of the one line it gets.
#[test]
fn each_misuse_of_http3_gets_one_line_and_a_non_zero_exit() {
    let cert = tls::TestCert::new("h3-refusals");
    let [c, cert_path, k, key_path] = cert.args();
    let tls = [c.as_str(), cert_path.as_str(), k.as_str(), key_path.as_str()];
    let with_tls = |args: &[&'static str]| -> Vec<String> {
        args.iter().map(|a| a.to_string()).chain(tls.iter().map(|a| a.to_string())).collect()
    };
    let local = ["--listen", "127.0.0.1:0"];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            with_tls(&["--proto", "echo", "--http3"]),
            "error: --http3 serves HTTP/3, and --proto echo is not HTTP: use --proto http",
        ),
        (
            with_tls(&["--proto", "ws", "--http3"]),
            "error: --http3 serves HTTP/3, and --proto ws is not HTTP: use --proto http",
        ),
        (
            vec!["--proto".into(), "udp".into(), "--http3".into()],
            "error: --http3 serves HTTP/3, and --proto udp is not HTTP: use --proto http",
        ),
        (
            vec!["--proto".into(), "http".into(), "--http3".into()],
            "error: --http3 needs --tls-cert and --tls-key: QUIC is always encrypted (TLS 1.3)",
        ),
        (
            with_tls(&["--proto", "http", "--http3", "--model", "uring64"]),
            "error: --http3 is not available with --model uring64: ",
        ),
        (with_tls(&["--proto", "http", "--quic-retry", "on"]), "error: --quic-retry applies to HTTP/3: add --http3"),
        (with_tls(&["--proto", "http", "--quic-0rtt"]), "error: --quic-0rtt applies to HTTP/3: add --http3"),
        (
            with_tls(&["--proto", "http", "--udp-gso", "off"]),
            "error: --udp-gso applies to --proto udp and --http3, and --proto http has no datagrams",
        ),
    ];
    for (args, expected) in cases {
        let mut all: Vec<&str> = local.to_vec();
        all.extend(args.iter().map(String::as_str));
        let (code, err) = refused(&all);
        assert_ne!(code, 0, "{all:?}");
        assert!(err.starts_with(expected), "{all:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{all:?}: {err}");
    }
    // On a Unix socket: the socket has no port for UDP to share.
    let path = std::env::temp_dir().join(format!("sockscale-h3-{}.sock", std::process::id()));
    let listen = format!("unix:{}", path.display());
    let mut all = vec!["--listen", listen.as_str(), "--proto", "http", "--http3"];
    all.extend(tls);
    let (_, err) = refused(&all);
    assert!(err.starts_with("error: --http3 does not apply to a Unix socket"), "{err}");
    assert!(err.contains("IP:PORT") && err.trim_end().lines().count() == 1, "{err}");
    assert!(!path.exists(), "a refused server left its socket file");
}

/// A UDP port someone else holds is refused with one line naming it, even though the TCP port
/// of the same number is free.
#[test]
fn a_busy_udp_port_is_refused() {
    let cert = tls::TestCert::new("h3-busy");
    // A UDP port whose TCP namesake is free (another test's server may hold a TCP port of
    // the number the kernel gave this UDP socket).
    let (_squatter, addr) = (0..50)
        .find_map(|_| {
            let udp = UdpSocket::bind("127.0.0.1:0").ok()?;
            let addr = udp.local_addr().ok()?;
            std::net::TcpListener::bind(addr).ok().map(|_| (udp, addr))
        })
        .expect("a UDP port with its TCP namesake free");
    let listen = addr.to_string();
    let mut args = vec!["--listen", listen.as_str(), "--proto", "http", "--http3"];
    let tls = cert.args();
    args.extend(tls.iter().map(String::as_str));
    let (code, err) = refused(&args);
    assert_ne!(code, 0);
    assert_eq!(err.trim_end(), format!("error: cannot serve HTTP/3 on UDP {addr}: address already in use"));
}

/// `serve -h` says what 0-RTT costs where the flag is listed, not only in the long help.
#[test]
fn the_short_help_says_0rtt_is_replayable() {
    let out = Command::new(BIN).args(["serve", "-h"]).output().expect("run sockscale serve -h");
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help.lines().find(|l| l.trim_start().starts_with("--quic-0rtt")).expect("--quic-0rtt listed");
    assert!(line.contains("replayable"), "{line}");
    assert!(help.contains("--http3") && help.contains("--quic-retry <auto|on|off>"), "{help}");
}

/// `--udp-gso`, `--udp-gro` and the QUIC options are taken with `--http3`, and act: with
/// `--quic-retry on` every new connection is sent a Retry first, and with GSO off no datagram
/// goes out in a GSO message; HTTP/3 is served (`load http --http3`, the server's counts).
#[test]
fn http3_takes_the_offload_and_quic_flags() {
    let cert = tls::TestCert::new("h3-flags");
    let tls = cert.args();
    let mut args = vec!["--proto", "http", "--http3", "--udp-gso", "off", "--udp-gro", "off"];
    args.extend(["--quic-retry", "on", "--quic-0rtt"]);
    args.extend(tls.iter().map(String::as_str));
    let server = ServerProc::start("epoll", &args);
    let url = format!("https://127.0.0.1:{}/", server.addr.port());
    let out = Command::new(BIN)
        .args(["load", "http", "--http3", "-c", "1", "-n", "20", "--sni", "localhost", "--cacert"])
        .arg(&cert.ca_file)
        .arg(&url)
        .output()
        .expect("run sockscale load");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(done.counter("h3_requests"), 20, "{:?}", done.stdout);
    assert_eq!(done.counter("udp_gso_sends"), 0, "--udp-gso off: {:?}", done.stdout);
    // The load generator's probe and its connection: each sent a Retry, each then admitted.
    let (retries, handshakes) = (done.counter("quic_retries"), done.counter("quic_handshakes"));
    assert!(retries >= 2 && retries == handshakes, "--quic-retry on: {retries} retries, {handshakes} handshakes");
}

/// `--quic-max-mtu` is taken by both ends and a run goes through with it; by default the
/// server's datagrams stay within Ethernet's 1,452 bytes. (That path MTU discovery then grows
/// the packets is the endpoint's, tested in memory: `quic::tests::
/// path_mtu_discovery_grows_the_packets_up_to_the_ceiling`; on a loaded machine the kernel drops
/// large datagrams often enough for quinn-proto's black-hole detection to fall back, so how far
/// it grew in one second here is not a stable fact.)
#[test]
fn quic_max_mtu_is_taken_by_both_ends() {
    let cert = tls::TestCert::new("h3-mtu");
    let mut mean_datagram = Vec::new();
    for mtu in [None, Some("8952")] {
        let tls = cert.args();
        let mut args = vec!["--proto", "http", "--http3", "--udp-gso", "off"];
        args.extend(tls.iter().map(String::as_str));
        if let Some(m) = mtu {
            args.extend(["--quic-max-mtu", m]);
        }
        let server = ServerProc::start("epoll", &args);
        let url = format!("https://127.0.0.1:{}/", server.addr.port());
        let mut load = Command::new(BIN);
        load.args(["load", "http", "--http3", "-c", "1", "-n", "200", "--sni", "localhost", "--cacert"])
            .arg(&cert.ca_file);
        if let Some(m) = mtu {
            load.args(["--quic-max-mtu", m]);
        }
        let out = load.arg(&url).output().expect("run sockscale load");
        assert!(out.status.success(), "{mtu:?}: {}", String::from_utf8_lossy(&out.stderr));
        let done = server.stop();
        assert_eq!(done.counter("h3_requests"), 200, "{mtu:?}");
        mean_datagram.push(done.counter("bytes_out") / done.counter("datagrams_out").max(1));
    }
    assert!(mean_datagram[0] <= 1452, "default: {mean_datagram:?}");
}

/// `serve --http3` on epoll with a certificate of its own: the server, its URL, the certificate.
fn http3_server(name: &str) -> (ServerProc, String, tls::TestCert) {
    let cert = tls::TestCert::new(name);
    let tls = cert.args();
    let mut args = vec!["--proto", "http", "--http3"];
    args.extend(tls.iter().map(String::as_str));
    let server = ServerProc::start("epoll", &args);
    let url = format!("https://127.0.0.1:{}/", server.addr.port());
    (server, url, cert)
}

/// `load http --http3 ARGS URL`, which must succeed: its `--json` report and its summary.
fn load_http3(cert: &tls::TestCert, url: &str, args: &[&str]) -> (serde_json::Value, String) {
    let json =
        std::env::temp_dir().join(format!("sockscale-h3-load-{}-{}.json", std::process::id(), fastrand::u64(..)));
    let out = Command::new(BIN)
        .args(["load", "http", "--http3", "--sni", "localhost", "--cacert"])
        .arg(&cert.ca_file)
        .arg("--json")
        .arg(&json)
        .args(args)
        .arg(url)
        .output()
        .expect("run sockscale load");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let report = serde_json::from_str(&std::fs::read_to_string(&json).expect("the --json report")).expect("json");
    let _ = std::fs::remove_file(&json);
    (report, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `load http --http3` asks the kernel for GRO by default, so the server's GSO messages come to
/// it whole (on loopback the kernel then need not cut them, which spares the server's CPU as a
/// quinn, quic-go or ngtcp2 client does); `--udp-gro off` reads one datagram at a time. The
/// report says how many came coalesced, and says nothing of GRO when none did.
#[test]
fn load_http3_takes_gro_by_default_and_udp_gro_off() {
    let (server, url, cert) = http3_server("h3-load-gro");
    let mut coalesced = Vec::new();
    for gro in [None, Some("off")] {
        let mut args = vec!["-c", "2", "--pipeline", "16", "-n", "400"];
        if let Some(g) = gro {
            args.extend(["--udp-gro", g]);
        }
        let (report, text) = load_http3(&cert, &url, &args);
        assert_eq!(report["options"]["udp_gro"], serde_json::json!(gro.is_none()), "{gro:?}");
        let n = report["udp"]["gro_datagrams"].as_u64().expect("udp.gro_datagrams");
        assert_eq!(text.contains("received coalesced by GRO"), n > 0, "{gro:?}: {text}");
        coalesced.push(n);
    }
    assert!(coalesced[0] > 0, "GRO on: the server's GSO messages (4 KiB answers, 16 at once) came coalesced");
    assert_eq!(coalesced[1], 0, "--udp-gro off");
    let done = server.stop();
    assert_eq!(done.counter("h3_requests"), 800);
}

/// Handshakes are told apart, full and resumed, by both ends, and they agree: a connection a
/// request (`--no-keepalive`) resumes the session of the one before. The load generator's probe
/// (one full handshake before the run, resuming nothing) is the server's one extra.
#[test]
fn both_ends_count_the_same_resumed_handshakes() {
    let (server, url, cert) = http3_server("h3-resumed");
    let (report, text) = load_http3(&cert, &url, &["-c", "1", "--no-keepalive", "-n", "12"]);
    let quic = &report["quic"];
    let (handshakes, resumed) = (quic["handshakes"].as_i64().unwrap_or(0), quic["resumed"].as_i64().unwrap_or(0));
    assert_eq!(handshakes, 12, "a handshake a request: {quic}");
    // The first connection may resume the probe's ticket or not; every later one resumes.
    assert!(resumed >= 11, "{quic}");
    assert!(text.contains(&format!("12 completed ({} full, {resumed} resumed;", 12 - resumed)), "{text}");
    let done = server.stop();
    assert_eq!(done.counter("quic_handshakes"), handshakes + 1, "the probe's too");
    assert_eq!(done.counter("quic_resumed"), resumed, "{:?}", done.stdout);
}
