//! `sockscale load ws` against WebSocket servers: `sockscale serve --proto ws` when the binary
//! has it, and small servers written here on sockscale-ws's server `Session` (one thread a
//! connection), well-behaved and hostile (an upgrade refused, a wrong Sec-WebSocket-Accept,
//! masked frames, a close never answered). Every wait is bounded.

mod support;

use support::tls::TestCert;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// How the test server behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// Echo every message (permessage-deflate agreed when offered).
    Echo,
    /// Echo, but alter one octet of every tenth message.
    Corrupt,
    /// Answer the upgrade with 404.
    Refuse,
    /// Answer with a 101 whose Sec-WebSocket-Accept is wrong.
    BadAccept,
    /// Upgrade, then send a masked frame (a server must not mask).
    Masked,
    /// Echo, but never answer a close (the socket stays open until the client ends it).
    NoCloseAnswer,
    /// Answer every second upgrade with 404, echo on the others.
    RefuseEverySecond,
    /// Echo, but answer the closes one at a time, [`SLOW_CLOSE`] apart across all connections
    /// (a server working through a burst of closes).
    SlowCloses,
}

const SLOW_CLOSE: Duration = Duration::from_millis(150);

/// When the next close may be answered (one `SlowCloses` server per test binary).
static NEXT_CLOSE: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

fn ws_server(behaviour: Behaviour) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().map_while(Result::ok).enumerate() {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = stream.set_nodelay(true);
            let behaviour = match behaviour {
                Behaviour::RefuseEverySecond if i % 2 == 1 => Behaviour::Refuse,
                Behaviour::RefuseEverySecond => Behaviour::Echo,
                other => other,
            };
            std::thread::spawn(move || serve(stream, behaviour));
        }
    });
    addr
}

/// A server over TLS with `cert` (wss://).
fn wss_server(cert: &TestCert, behaviour: Behaviour) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(&cert.cert).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(&cert.key).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let config = std::sync::Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            std::thread::spawn(move || serve(rustls::StreamOwned::new(conn, stream), behaviour));
        }
    });
    addr
}

/// An echoing server on a Unix socket at `path`.
fn unix_ws_server(path: &std::path::Path) {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            std::thread::spawn(move || serve(stream, Behaviour::Echo));
        }
    });
}

fn serve(mut stream: impl Read + Write, behaviour: Behaviour) {
    let mut head = Vec::new();
    let mut buf = [0u8; 16 << 10];
    let end = loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(&head[..end]), Ok(httparse::Status::Complete(_))) {
        return;
    }
    let pairs: Vec<(&str, &[u8])> = request.headers.iter().map(|h| (h.name, h.value)).collect();
    match behaviour {
        Behaviour::Refuse => {
            let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            return;
        }
        Behaviour::BadAccept => {
            let _ = stream.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
            );
            let _ = stream.read(&mut buf);
            return;
        }
        _ => {}
    }
    let deflate = sockscale_ws::DeflateConfig::default();
    let Ok(accepted) = sockscale_ws::accept(request.method.unwrap_or(""), pairs.iter().copied(), Some(&deflate)) else {
        return;
    };
    if stream.write_all(&accepted.response).is_err() {
        return;
    }
    if behaviour == Behaviour::Masked {
        // A binary frame of 3 octets, masked with key 1,2,3,4.
        let _ = stream.write_all(&[0x82, 0x83, 1, 2, 3, 4, b'a' ^ 1, b'b' ^ 2, b'c' ^ 3]);
        let _ = stream.read(&mut buf);
        return;
    }
    let config = sockscale_ws::Config::default();
    let mut session = sockscale_ws::Session::new(&config, accepted.deflate.as_ref(), Instant::now());
    // The counters the session's owner keeps (a server keeps them per thread).
    let mut stats = sockscale_ws::Stats::default();
    let mut input = head[end..].to_vec();
    let mut out = Vec::new();
    let mut messages = 0u64;
    loop {
        out.clear();
        let closes_before = stats.closes_received.total();
        let verdict = session.receive(&input, Instant::now(), &mut stats, &mut out);
        if behaviour == Behaviour::Corrupt {
            // Uncompressed binary frames from this server: header 2 or 4 octets, then payload.
            let echoed = stats.messages_sent;
            if echoed / 10 > messages / 10 && out.len() > 4 {
                let last = out.len() - 1;
                out[last] ^= 0x55;
            }
            messages = echoed;
        }
        if behaviour == Behaviour::SlowCloses && stats.closes_received.total() > closes_before {
            let at = {
                let mut next = NEXT_CLOSE.lock().unwrap();
                let at = next.map_or(Instant::now(), |t| t.max(Instant::now())) + SLOW_CLOSE;
                *next = Some(at);
                at
            };
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        if behaviour == Behaviour::NoCloseAnswer && stats.closes_received.total() > closes_before {
            // Hold the socket, answering nothing, until the client ends it.
            while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            return;
        }
        if !out.is_empty() && stream.write_all(&out).is_err() {
            return;
        }
        if verdict != sockscale_ws::Verdict::Continue {
            return;
        }
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        input.clear();
        input.extend_from_slice(&buf[..n]);
    }
}

fn unique() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Run `sockscale load ws ARGS --json FILE`: the output and the report (if written).
fn load_ws(args: &[&str]) -> (Output, Option<serde_json::Value>) {
    let dir = std::env::temp_dir().join(format!("sockscale-ws-test-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out = Command::new(BIN)
        .args(["load", "ws"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json).ok().and_then(|text| serde_json::from_str(&text).ok());
    let _ = std::fs::remove_dir_all(&dir);
    (out, report)
}

fn n(v: &serde_json::Value, path: &str) -> u64 {
    path.split('.').fold(v, |v, k| &v[k]).as_u64().unwrap_or_else(|| panic!("no {path} in report: {v}"))
}

fn ok_report(args: &[&str]) -> serde_json::Value {
    let (out, report) = load_ws(args);
    assert!(
        out.status.success(),
        "load ws {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    report.expect("a report")
}

#[test]
fn exact_message_count_every_echo_verified() {
    let url = format!("ws://{}/chat", ws_server(Behaviour::Echo));
    for kind in ["--binary", "--text"] {
        let r = ok_report(&[&url, "-c", "4", "-n", "400", "-s", "300", "--pipeline", "4", "-t", "1", kind]);
        assert_eq!(n(&r, "requests.completed"), 400, "{kind}");
        assert_eq!(n(&r, "latency.count"), 400);
        assert_eq!(n(&r, "ws.upgrades"), 4);
        assert_eq!(n(&r, "ws.messages_sent"), 400);
        assert_eq!(n(&r, "ws.messages_received"), 400);
        assert_eq!(n(&r, "ws.bytes_received"), 400 * 300);
        assert_eq!(n(&r, "errors.verify_mismatch"), 0);
        assert_eq!(n(&r, "ws.closes_sent.1000"), 4, "a -n run closes in order too: {}", r["ws"]);
        assert_eq!(n(&r, "ws.closes_received.1000"), 4);
    }
}

#[test]
fn a_duration_run_ends_with_a_close_handshake_on_every_connection() {
    let url = format!("ws://{}/", ws_server(Behaviour::Echo));
    let page = std::env::temp_dir().join(format!("sockscale-ws-page-{}.html", std::process::id()));
    let page_arg = page.display().to_string();
    let r = ok_report(&[&url, "-c", "3", "-d", "1", "-t", "1", "--deflate", "-s", "2000", "--html", &page_arg]);
    let html = std::fs::read_to_string(&page).expect("the page");
    let _ = std::fs::remove_file(&page);
    assert!(html.contains("<h2>WebSocket</h2>") && html.contains("deflate_agreed"), "the page has the ws block");
    assert_eq!(n(&r, "ws.upgrades"), 3);
    assert_eq!(n(&r, "ws.deflate_agreed"), 3);
    assert_eq!(n(&r, "ws.closes_sent.1000"), 3, "{}", r["ws"]);
    assert_eq!(n(&r, "ws.closes_received.1000"), 3, "{}", r["ws"]);
    assert!(n(&r, "requests.completed") > 10);
    assert_eq!(n(&r, "ws.messages_received"), n(&r, "requests.completed"));
}

#[test]
fn open_loop_reports_corrected_and_uncorrected_latency() {
    let url = format!("ws://{}/", ws_server(Behaviour::Echo));
    let r = ok_report(&[&url, "-c", "2", "-d", "1", "-R", "200", "-t", "1"]);
    let completed = n(&r, "requests.completed");
    assert!((150..=260).contains(&completed), "{completed} at -R 200 for 1 s");
    assert_eq!(n(&r, "latency_uncorrected.count"), completed);
}

#[test]
fn a_corrupted_echo_is_counted_as_a_mismatch() {
    let url = format!("ws://{}/", ws_server(Behaviour::Corrupt));
    let (out, report) = load_ws(&[&url, "-c", "1", "-n", "30", "-t", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report.expect("a report");
    assert!(n(&r, "errors.verify_mismatch") >= 1, "{}", r["errors"]);
}

#[test]
fn every_upgrade_refused_fails_with_one_line_naming_the_status() {
    let url = format!("ws://{}/", ws_server(Behaviour::Refuse));
    let (out, _) = load_ws(&[&url, "-c", "2", "-d", "1", "-t", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("refused") && lines[0].contains("404"), "{stderr}");
}

#[test]
fn a_bad_accept_and_masked_server_frames_are_said_in_one_line_never_hang() {
    // A wrong 101 fails the probe: the run would fail every connection alike.
    let url = format!("ws://{}/", ws_server(Behaviour::BadAccept));
    let began = Instant::now();
    let (out, _) = load_ws(&[&url, "-c", "1", "-d", "1", "-t", "1"]);
    assert!(began.elapsed() < Duration::from_secs(15), "took {:?}", began.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{stderr}");
    assert!(stderr.contains("Sec-WebSocket-Accept"), "{stderr}");

    // Masked frames come after the upgrade: every connection meets them, each is counted.
    let url = format!("ws://{}/", ws_server(Behaviour::Masked));
    let began = Instant::now();
    let (out, report) = load_ws(&[&url, "-c", "1", "-d", "1", "-t", "1"]);
    assert!(began.elapsed() < Duration::from_secs(15), "took {:?}", began.elapsed());
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report.expect("a report");
    assert!(n(&r, "errors.ws_protocol") >= 1, "{}", r["errors"]);
    assert_eq!(n(&r, "errors.ws_protocol"), n(&r, "ws.protocol_errors.1002"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("closed with 1002"));
}

#[test]
fn a_close_the_server_never_answers_is_counted_within_the_grace() {
    let url = format!("ws://{}/", ws_server(Behaviour::NoCloseAnswer));
    let began = Instant::now();
    let (out, report) = load_ws(&[&url, "-c", "2", "-d", "1", "-t", "1", "--timeout", "2"]);
    assert!(began.elapsed() < Duration::from_secs(10), "took {:?}", began.elapsed());
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report.expect("a report");
    assert_eq!(n(&r, "errors.ws_close_unanswered"), 2, "{}", r["errors"]);
    assert_eq!(n(&r, "ws.closes_sent.1000"), 2);
    // `--close-timeout`: waited that long, at least, then counted the same.
    let began = Instant::now();
    let (_, report) = load_ws(&[&url, "-c", "2", "-d", "0.3", "-t", "1", "--close-timeout", "2.5"]);
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(2800) && took < Duration::from_secs(10), "took {took:?}");
    let r = report.expect("a report");
    assert_eq!(n(&r, "errors.ws_close_unanswered"), 2, "{}", r["errors"]);
    assert_eq!(r["at_end"]["grace_s"].as_f64(), Some(2.5), "{}", r["at_end"]);
}

/// The end's closes are a burst a server answers at its own pace: 20 answered 150 ms apart
/// take 3 s, past the 1 s grace, and are all waited for while they keep coming (a million took
/// about 30 s); a server that stops answering is not (the test above).
#[test]
fn closes_answered_slowly_but_steadily_are_all_waited_for() {
    let url = format!("ws://{}/", ws_server(Behaviour::SlowCloses));
    let began = Instant::now();
    let r = ok_report(&[&url, "-c", "20", "-d", "0.5", "-t", "1", "--timeout", "10"]);
    let took = began.elapsed();
    assert_eq!(n(&r, "ws.closes_received.1000"), 20, "{}", r["ws"]);
    assert_eq!(n(&r, "errors.ws_close_unanswered"), 0, "{}", r["errors"]);
    assert!(took >= Duration::from_millis(3000) && took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn idle_connections_are_held_with_pings_answered() {
    let url = format!("ws://{}/", ws_server(Behaviour::Echo));
    let r = ok_report(&[&url, "-c", "5", "-d", "1.2", "-t", "1", "--idle", "--ping", "0.25"]);
    assert_eq!(n(&r, "ws.upgrades"), 5);
    assert_eq!(n(&r, "ws.messages_sent"), 0);
    let pings = n(&r, "ws.pings_sent");
    assert!(pings >= 5 * 3, "{pings} pings in 1.2 s every 0.25 s on 5 connections");
    assert!(n(&r, "ws.pongs_received") + 5 >= pings, "{}", r["ws"]);
    assert_eq!(n(&r, "ws.closes_received.1000"), 5);
}

/// `serve --ws-deflate-takeover off --ws-deflate-window 10`: the 101 asks no context takeover
/// of both sides and the client's window where it offered one, and `load ws --deflate` (which
/// offers client_max_window_bits) agrees and has every echo verified.
#[test]
fn a_lean_deflate_server_answers_its_terms_and_load_ws_follows_them() {
    let server =
        ServerProc::start("epoll", &["--proto", "ws", "--ws-deflate-takeover", "off", "--ws-deflate-window", "10"]);
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
        .write_all(
            b"GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
        )
        .unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the 101: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains(
            "sec-websocket-extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover; \
             client_max_window_bits=10\r\n"
        ),
        "{head}"
    );
    drop(stream);
    let url = format!("ws://{}/", server.addr);
    let r = ok_report(&[&url, "-c", "4", "-n", "400", "-s", "3000", "--text", "--deflate", "-t", "1"]);
    assert_eq!(n(&r, "ws.deflate_agreed"), 4, "{}", r["ws"]);
    assert_eq!(n(&r, "requests.completed"), 400);
    assert_eq!(n(&r, "errors.verify_mismatch"), 0);
}

#[test]
fn sockscale_serve_proto_ws_when_the_binary_has_it() {
    let help = Command::new(BIN).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let has_ws = help.lines().any(|l| l.trim_start().starts_with("- ws") || l.trim_start().starts_with("ws:"));
    if !has_ws {
        eprintln!("skipped: this sockscale serve has no --proto ws (the server side is built apart)");
        return;
    }
    let server = ServerProc::start("epoll", &["--proto", "ws"]);
    let url = format!("ws://{}/", server.addr.to_string().replace("0.0.0.0", "127.0.0.1"));
    let r = ok_report(&[&url, "-c", "4", "-n", "400", "-t", "1", "--pipeline", "2"]);
    assert_eq!(n(&r, "requests.completed"), 400);
    assert_eq!(n(&r, "ws.upgrades"), 4);
}

#[test]
fn refusals_are_counted_by_status_beside_the_upgrades() {
    let url = format!("ws://{}/", ws_server(Behaviour::RefuseEverySecond));
    // The probe takes the first connection (upgraded); of the run's, every second is refused.
    let (out, report) = load_ws(&[&url, "-c", "4", "-d", "1", "-t", "1", "--connect-retries", "0"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report.expect("a report");
    assert_eq!(n(&r, "ws.upgrades"), 2, "{}", r["ws"]);
    assert_eq!(n(&r, "ws.refused.404"), 2, "{}", r["ws"]);
    assert_eq!(n(&r, "errors.ws_refused"), 2);
    assert!(String::from_utf8_lossy(&out.stdout).contains("refused by status: 404 2"));
}

#[test]
fn wss_with_cacert_and_a_unix_socket() {
    let cert = TestCert::new("load-ws");
    let url = format!("wss://localhost:{}/", wss_server(&cert, Behaviour::Echo).port());
    let ca = cert.ca_file.display().to_string();
    let r = ok_report(&[&url, "--cacert", &ca, "-c", "2", "-n", "200", "-t", "1", "--pipeline", "2"]);
    assert_eq!(n(&r, "requests.completed"), 200);
    assert_eq!(n(&r, "ws.upgrades"), 2);
    assert_eq!(n(&r, "tls.handshakes.full") + n(&r, "tls.handshakes.resumed"), 2, "{}", r["tls"]);

    let dir = std::env::temp_dir().join(format!("sockscale-ws-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ws.sock");
    let _ = std::fs::remove_file(&path);
    unix_ws_server(&path);
    let socket = path.display().to_string();
    let r = ok_report(&["ws://app/x", "--unix-socket", &socket, "-c", "2", "-n", "100", "-t", "1"]);
    assert_eq!(n(&r, "requests.completed"), 100);
    assert_eq!(n(&r, "ws.upgrades"), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_upgrade_refused_over_tls_fails_after_the_run_with_one_line() {
    // Over TLS the probe does not upgrade: the run finds every upgrade refused, and says so.
    let cert = TestCert::new("load-ws-refused");
    let url = format!("wss://localhost:{}/", wss_server(&cert, Behaviour::Refuse).port());
    let ca = cert.ca_file.display().to_string();
    let (out, report) = load_ws(&[&url, "--cacert", &ca, "-c", "2", "-d", "1", "-t", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("every WebSocket upgrade was refused") && lines[0].contains("404"), "{stderr}");
    let r = report.expect("the report is written before the verdict");
    assert_eq!(n(&r, "ws.upgrades"), 0);
    assert!(n(&r, "ws.refused.404") >= 2);
}

#[test]
fn per_conn_messages_then_every_connection_closes() {
    let url = format!("ws://{}/", ws_server(Behaviour::Echo));
    let r = ok_report(&[&url, "-c", "3", "--per-conn", "5", "-t", "1", "--connect-rate", "100"]);
    assert_eq!(n(&r, "requests.completed"), 15);
    assert_eq!(n(&r, "ws.upgrades"), 3);
    assert_eq!(n(&r, "ws.closes_received.1000"), 3, "{}", r["ws"]);
}
