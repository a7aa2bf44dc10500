//! `sockscale load ws --http2` (WebSocket over HTTP/2, RFC 8441) against an independent server:
//! tests/interop/ws_h2_server.py (hyper-h2 with SETTINGS_ENABLE_CONNECT_PROTOCOL, wsproto), h2c
//! with prior knowledge and TLS with ALPN h2; and against servers without the setting. Needs
//! python3 with `h2` and `wsproto` (`python3 -m pip install h2 wsproto`; `.ci/run` installs
//! them): without them those tests are skipped, saying why. Every wait is bounded.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::tls::TestCert;
use support::ServerProc;

const BIN: &str = env!("CARGO_BIN_EXE_sockscale");

/// The Python server, killed when dropped.
struct PyServer {
    child: Child,
    port: u16,
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why the Python server cannot run here, if it cannot.
fn python_missing() -> Option<String> {
    let out = Command::new("python3").args(["-c", "import h2, wsproto"]).output();
    match out {
        Err(e) => Some(format!("no python3 ({e})")),
        Ok(out) if !out.status.success() => Some(format!(
            "python3 lacks h2 or wsproto ({}); install: python3 -m pip install h2 wsproto",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default()
        )),
        Ok(_) => None,
    }
}

/// ws_h2_server.py with `args`, or None (the test is skipped, saying why).
fn py_server(args: &[&str]) -> Option<PyServer> {
    if let Some(why) = python_missing() {
        eprintln!("skipped: {why}");
        return None;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ws_h2_server.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("the server prints its port within 20 s");
    let port = line.trim().parse().unwrap_or_else(|_| panic!("a port, not {line:?}"));
    Some(PyServer { child, port })
}

fn unique() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn load_ws(args: &[&str]) -> (Output, Option<serde_json::Value>) {
    let dir = std::env::temp_dir().join(format!("sockscale-ws-h2-test-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out = Command::new(BIN)
        .args(["load", "ws", "--http2"])
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

fn ok_report(args: &[&str]) -> (serde_json::Value, String) {
    let (out, report) = load_ws(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "load ws --http2 {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    (report.expect("a report"), stdout)
}

/// Every message echoed and verified, every WebSocket closed 1000 both ways, nothing else.
fn assert_clean(r: &serde_json::Value, messages: u64, size: u64, websockets: u64, protocol: &str) {
    assert_eq!(n(r, "requests.completed"), messages, "{}", r["errors"]);
    assert_eq!(n(r, "latency.count"), messages);
    assert_eq!(n(r, "ws.upgrades"), websockets, "{}", r["ws"]);
    assert_eq!(n(r, "ws.messages_sent"), messages);
    assert_eq!(n(r, "ws.messages_received"), messages);
    assert_eq!(n(r, "ws.bytes_sent"), messages * size);
    assert_eq!(n(r, "ws.bytes_received"), messages * size);
    assert_eq!(n(r, "errors.verify_mismatch"), 0);
    assert_eq!(n(r, "ws.closes_sent.1000"), websockets, "{}", r["ws"]);
    assert_eq!(n(r, "ws.closes_received.1000"), websockets, "{}", r["ws"]);
    assert_eq!(r["h2"]["protocol"], protocol);
    assert_eq!(n(r, "h2.streams"), websockets);
    assert_eq!(r["h2"]["resets"], serde_json::json!({}));
    let errors = r["errors"].as_object().expect("errors");
    assert!(errors.values().all(|v| v.as_u64() == Some(0)), "{errors:?}");
}

#[test]
fn h2c_every_echo_verified_and_every_websocket_closed_1000() {
    let Some(server) = py_server(&[]) else { return };
    let url = format!("ws://127.0.0.1:{}/chat", server.port);
    for kind in ["--binary", "--text"] {
        let (r, stdout) = ok_report(&[&url, "-c", "3", "-n", "600", "-s", "700", "--pipeline", "3", "-t", "1", kind]);
        assert_clean(&r, 600, 700, 3, "h2c");
        assert!(stdout.contains("3 upgrades (200 to extended CONNECT)"), "{stdout}");
        assert_eq!(r["options"]["http2"], true);
    }
    // Several WebSockets a connection, permessage-deflate agreed on each.
    let (r, _) = ok_report(&[&url, "-c", "2", "--streams", "4", "-n", "800", "-s", "5000", "--deflate", "-t", "1"]);
    assert_clean(&r, 800, 5000, 8, "h2c");
    assert_eq!(n(&r, "h2.connections"), 2);
    assert_eq!(n(&r, "ws.deflate_agreed"), 8);
}

#[test]
fn tls_with_alpn_h2_and_a_duration_run_with_pings() {
    let cert = TestCert::new("load-ws-h2");
    let (cert_path, key_path) = (cert.cert.display().to_string(), cert.key.display().to_string());
    let Some(server) = py_server(&["--tls", &cert_path, &key_path]) else { return };
    let url = format!("wss://localhost:{}/chat", server.port);
    let ca = cert.ca_file.display().to_string();
    let (r, _) =
        ok_report(&[&url, "--cacert", &ca, "-c", "2", "-n", "300", "-s", "1000", "--pipeline", "2", "-t", "1"]);
    assert_clean(&r, 300, 1000, 2, "h2");
    assert_eq!(r["tls"]["negotiated"][0]["alpn"], "h2", "{}", r["tls"]);

    let (r, _) = ok_report(&[&url, "--cacert", &ca, "-c", "2", "-d", "1", "--ping", "0.2", "-t", "1"]);
    assert!(n(&r, "requests.completed") > 10);
    assert_eq!(n(&r, "ws.messages_received"), n(&r, "requests.completed"));
    assert!(n(&r, "ws.pings_sent") >= 2 * 3, "{}", r["ws"]);
    assert_eq!(n(&r, "ws.closes_received.1000"), 2, "{}", r["ws"]);
}

#[test]
fn over_a_unix_socket() {
    let dir = std::env::temp_dir().join(format!("sockscale-ws-h2-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ws.sock");
    let _ = std::fs::remove_file(&path);
    let socket = path.display().to_string();
    let Some(_server) = py_server(&["--unix", &socket]) else { return };
    let (r, _) =
        ok_report(&["ws://app/x", "--unix-socket", &socket, "-c", "2", "--streams", "2", "-n", "100", "-t", "1"]);
    assert_clean(&r, 100, 512, 4, "h2c");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One line on stderr, exit 1, well within `limit`.
fn assert_one_line_exit_1(args: &[&str], limit: Duration, wanted: &str) {
    let began = Instant::now();
    let (out, _) = load_ws(args);
    let took = began.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains(wanted), "{stderr}");
    assert!(took < limit, "took {took:?}");
}

const NO_SETTING: &str = "server does not support WebSocket over HTTP/2 (no SETTINGS_ENABLE_CONNECT_PROTOCOL)";

#[test]
fn a_server_without_enable_connect_protocol_ends_the_run_with_one_line() {
    // A bare HTTP/2 server written here: SETTINGS without the setting, then silence.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut preface = [0u8; 24];
                if stream.read_exact(&mut preface).is_ok() {
                    // SETTINGS: MAX_CONCURRENT_STREAMS 100.
                    let _ = stream.write_all(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
                }
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    let url = format!("ws://{addr}/chat");
    assert_one_line_exit_1(&[&url, "-c", "2", "-d", "5", "--connect-timeout", "3"], Duration::from_secs(3), NO_SETTING);

    // hyper-h2 saying ENABLE_CONNECT_PROTOCOL = 0, in clear and over TLS.
    let Some(server) = py_server(&["--no-connect-protocol"]) else { return };
    let url = format!("ws://127.0.0.1:{}/chat", server.port);
    assert_one_line_exit_1(&[&url, "-d", "5", "--connect-timeout", "3"], Duration::from_secs(3), NO_SETTING);
    let cert = TestCert::new("load-ws-h2-no-setting");
    let (cert_path, key_path) = (cert.cert.display().to_string(), cert.key.display().to_string());
    let Some(server) = py_server(&["--tls", &cert_path, &key_path, "--no-connect-protocol"]) else { return };
    let url = format!("wss://localhost:{}/chat", server.port);
    let ca = cert.ca_file.display().to_string();
    let args = [&url, "--cacert", &ca, "-d", "5", "--connect-timeout", "3"];
    assert_one_line_exit_1(&args, Duration::from_secs(3), NO_SETTING);
}

#[test]
fn a_refused_connect_and_reset_streams_are_reported() {
    let Some(server) = py_server(&["--refuse", "403"]) else { return };
    let url = format!("ws://127.0.0.1:{}/chat", server.port);
    assert_one_line_exit_1(&[&url, "-n", "5", "--connect-timeout", "3"], Duration::from_secs(3), ":status 403");

    // Every stream reset (RST_STREAM CANCEL) after 3 echoes: counted, said, exit 3.
    let Some(server) = py_server(&["--reset-after", "3"]) else { return };
    let url = format!("ws://127.0.0.1:{}/chat", server.port);
    let (out, report) = load_ws(&[&url, "-c", "2", "-d", "1", "-t", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report.expect("a report");
    let resets = n(&r, "h2.resets.CANCEL");
    assert!(resets >= 2, "{}", r["h2"]);
    assert_eq!(n(&r, "errors.h2_reset"), resets);
    let received = n(&r, "ws.messages_received");
    assert!(received >= 3 * resets && received <= 3 * n(&r, "ws.upgrades"), "{}", r["ws"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rst_stream   CANCEL"), "{stdout}");
}

/// `sockscale serve --proto ws` over HTTP/2: h2c and TLS (ALPN h2).
#[test]
fn sockscale_serve_proto_ws_over_http2() {
    let server = ServerProc::start("epoll", &["--proto", "ws"]);
    let url = format!("ws://127.0.0.1:{}/", server.addr.port());
    let (r, _) =
        ok_report(&[&url, "-c", "4", "--streams", "2", "-n", "800", "-s", "600", "--pipeline", "2", "-t", "1"]);
    assert_clean(&r, 800, 600, 8, "h2c");
    let (r, _) = ok_report(&[&url, "-c", "2", "-n", "200", "-s", "4000", "--deflate", "-t", "1"]);
    assert_clean(&r, 200, 4000, 2, "h2c");
    assert_eq!(n(&r, "ws.deflate_agreed"), 2);
    let done = server.stop();
    // 8 + 2 WebSockets measured, and each run's probe.
    assert!(done.counter("ws_upgrades_h2") >= 10, "{:?}", done.stdout);
    assert_eq!(done.counter("ws_upgrades_h2"), done.counter("ws_upgrades"), "{:?}", done.stdout);

    let cert = TestCert::new("load-ws-h2-serve");
    let mut args = vec!["--proto", "ws"];
    let tls = cert.args();
    args.extend(tls.iter().map(String::as_str));
    let server = ServerProc::start("epoll", &args);
    let url = format!("wss://localhost:{}/", server.addr.port());
    let ca = cert.ca_file.display().to_string();
    let (r, _) = ok_report(&[&url, "--cacert", &ca, "-c", "2", "-n", "400", "-t", "1", "--pipeline", "4"]);
    assert_clean(&r, 400, 512, 2, "h2");
    assert_eq!(r["tls"]["negotiated"][0]["alpn"], "h2", "{}", r["tls"]);
}
