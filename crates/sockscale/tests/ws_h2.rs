//! WebSocket over HTTP/2 (RFC 8441, extended CONNECT) on every model, with an independent peer:
//! tests/interop/ws_h2_client.py (Python hyper-h2 for HTTP/2, wsproto for the WebSocket frames)
//! against `serve --proto http`, over h2c with prior knowledge and over TLS with ALPN h2. On one
//! connection each: the SETTINGS enable extended CONNECT, two WebSockets (one with
//! permessage-deflate) and GETs share it, messages of 0 to 300,000 octets are echoed, a ping is
//! answered, closes end the streams both ways, one WebSocket is reset mid-message and a
//! `:protocol` other than websocket gets 400. The server's counters must say so when it stops.
//! Without python3, h2 or wsproto the case is skipped with the reason (`.ci/run` installs them).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sockscale_server::Policy;
use support::{tls::TestCert, ServerProc};

/// The client's run must finish within this (it takes well under a second).
const CLIENT_LIMIT: Duration = Duration::from_secs(30);

/// python3 with h2 and wsproto, or why not.
fn python() -> Result<&'static str, String> {
    static PYTHON: OnceLock<Result<&'static str, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let out = Command::new("python3")
                .args(["-c", "import h2.connection, h2.settings, wsproto.frame_protocol"])
                .output()
                .map_err(|e| format!("no python3: {e}"))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let line = err.lines().last().unwrap_or("").trim().to_owned();
                return Err(format!(
                    "python3 lacks h2 or wsproto ({line}); install: python3 -m pip install h2 wsproto"
                ));
            }
            Ok("python3")
        })
        .clone()
}

fn ws_over_h2(model: &str) {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let cert = TestCert::new(&format!("ws-h2-{model}"));
    let mut argv = vec!["--proto", "http"];
    let tls = !support::skip(model, Policy::Tls);
    let args = cert.args();
    if tls {
        argv.extend(args.iter().map(String::as_str));
    }
    // One server: with TLS on, h2c is not served on the same port, so a second one for h2c.
    let plain = ServerProc::start(model, &["--proto", "http"]);
    let secure = tls.then(|| ServerProc::start(model, &argv));
    let mut urls = vec![format!("h2c://{}", plain.addr)];
    if let Some(server) = &secure {
        urls.push(format!("h2://localhost:{}", server.addr.port()));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ws_h2_client.py");
    let started = Instant::now();
    let mut child = Command::new(python)
        .arg(&script)
        .arg(&cert.ca_file)
        .args(&urls)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the client");
    let finished = support::eventually(CLIENT_LIMIT, || matches!(child.try_wait(), Ok(Some(_))));
    if !finished {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("the client's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("ws over h2 against {model} in {:.1?}:\n{stdout}{stderr}", started.elapsed());
    assert!(finished, "{model}: the client did not finish within {CLIENT_LIMIT:?}");
    assert!(out.status.success(), "{model}: {}\n{stdout}{stderr}", out.status);
    assert_eq!(stdout.lines().filter(|l| l.ends_with(": ok")).count(), urls.len(), "{stdout}");
    for server in std::iter::once(plain).chain(secure) {
        let done = server.stop_within(Duration::from_secs(10));
        // Three WebSockets accepted (one reset by the peer), each also an upgrade; all ended.
        let counts = ["ws_upgrades_h2", "ws_resets_h2", "ws_upgrades", "ws_connections"].map(|c| done.counter(c));
        assert_eq!(counts, [3, 1, 3, 3], "{model}: ws_upgrades_h2, ws_resets_h2, ws_upgrades, ws_connections");
        // Two WebSockets, five sizes, text and binary: 20 messages each way.
        let messages = ["ws_messages_in", "ws_messages_out"].map(|c| done.counter(c));
        assert_eq!(messages, [20, 20], "{model}: messages in and out");
    }
}

/// `serve --proto ws` speaks HTTP/2 too, on every model: WebSockets by extended CONNECT (the load
/// generator's, h2c, two a connection, every echo verified) and any other request 405 (a GET by
/// `load http --http2`), counted as the server says.
fn ws_port_over_h2(model: &str) {
    let server = ServerProc::start(model, &["--proto", "ws"]);
    let load = |args: &[&str]| {
        let json =
            std::env::temp_dir().join(format!("sockscale-ws-h2-{model}-{}-{}.json", args[0], std::process::id()));
        let path = json.display().to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_sockscale"))
            .arg("load")
            .args(args)
            .args(["-t", "1", "--connect-timeout", "5", "--json", &path])
            .output()
            .expect("run load");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or_default();
        let _ = std::fs::remove_file(&json);
        (out, report)
    };
    let ws_url = format!("ws://{}/", server.addr);
    let (out, r) = load(&["ws", &ws_url, "--http2", "--streams", "2", "-c", "2", "-n", "200", "-s", "700"]);
    assert!(out.status.success(), "{model}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((r["requests"]["completed"].as_u64(), r["errors"]["verify_mismatch"].as_u64()), (Some(200), Some(0)));
    let http_url = format!("http://{}/", server.addr);
    let (_, r) = load(&["http", &http_url, "--http2", "-c", "1", "-n", "5"]);
    assert_eq!(r["statuses"]["4xx"].as_u64(), Some(5), "{model}: {}", r["statuses"]);
    let done = server.stop_within(Duration::from_secs(10));
    assert_eq!(done.counter("ws_refused_405"), 5, "{model}");
    // Four WebSockets measured, and the probe's.
    assert_eq!(done.counter("ws_upgrades_h2"), 5, "{model}");
}

macro_rules! ws_h2 {
    ($($model:ident),* $(,)?) => {
    $(
        mod $model {
            const MODEL: &str = stringify!($model);
            #[test] fn websocket_over_http2() { if !super::support::unavailable(MODEL) { super::ws_over_h2(MODEL) } }
            #[test] fn a_websocket_port_over_http2() { if !super::support::unavailable(MODEL) { super::ws_port_over_h2(MODEL) } }
        }
    )*};
}

support::for_every_model!(ws_h2);
