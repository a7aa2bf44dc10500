//! `sockscale load` against servers started inside the test, on loopback. Counts and checks
//! only; rate tests use generous bounds and never assert speed.

mod support;

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::*;

/// Run `sockscale load ARGS --json FILE`; returns the parsed report.
fn load(args: &[&str]) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("sockscale-test-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out =
        Command::new(BIN).arg("load").args(args).arg("--json").arg(&json).env("RUST_LOG", "warn").output().unwrap();
    assert!(out.status.success(), "load {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn unique() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn n(v: &serde_json::Value, path: &str) -> u64 {
    path.split('.').fold(v, |v, k| &v[k]).as_u64().unwrap_or_else(|| panic!("no {path} in report"))
}

#[test]
fn exact_request_count() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let r = load(&["http", &url, "-c", "10", "-n", "1000", "-t", "2"]);
    assert_eq!(n(&r, "requests.completed"), 1000);
    assert_eq!(n(&r, "requests.sent"), 1000);
    assert_eq!(n(&r, "statuses.2xx"), 1000);
    assert_eq!(n(&r, "latency.count"), 1000);
    assert_eq!(n(&r, "errors.bad_response"), 0);
    let echo_target = server.addr.to_string().replace("0.0.0.0", "127.0.0.1");
    let r = load(&["echo", &echo_target, "-c", "1", "-n", "1", "-t", "1", "--allow-errors"]);
    assert_eq!(n(&r, "errors.verify_mismatch"), 1, "an HTTP server is not an echo server");
}

/// An echo server that alters one byte in every `every` it echoes (0: never).
fn corrupting_echo_server(every: usize) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let mut total = 0usize;
                while let Ok(len) = read_some(&mut stream, &mut buf) {
                    if len == 0 {
                        break;
                    }
                    for (i, b) in buf[..len].iter_mut().enumerate() {
                        if every > 0 && (total + i) % every == every - 1 {
                            *b ^= 0x20;
                        }
                    }
                    total += len;
                    if stream.write_all(&buf[..len]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn verification_catches_a_corrupting_server() {
    let honest = corrupting_echo_server(0).to_string();
    let r = load(&["echo", &honest, "-c", "4", "-d", "1", "-l", "1000", "-t", "1"]);
    assert!(n(&r, "requests.completed") > 0);
    assert_eq!(n(&r, "errors.verify_mismatch"), 0);
    let liar = corrupting_echo_server(5000).to_string();
    let r = load(&["echo", &liar, "-c", "4", "-d", "1", "-l", "1000", "-t", "1", "--allow-errors"]);
    assert!(n(&r, "errors.verify_mismatch") > 0, "corruption went unnoticed: {r}");
}

#[test]
fn no_keepalive_opens_one_connection_per_request() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let r = load(&["http", &url, "-c", "4", "-n", "50", "--no-keepalive", "-t", "1"]);
    assert_eq!(n(&r, "requests.completed"), 50, "errors: {}", r["errors"]);
    assert_eq!(n(&r, "connections.connected"), 50);
    let done = server.stop();
    // One more: the reachability probe made before the run.
    assert_eq!(done.counter("accepted"), 51);
    assert_eq!(done.counter("closed_done"), 50, "the server closed each after its response");
}

/// An HTTP server that answers every request with a tiny response and records the most
/// complete requests it found in one read.
fn batch_counting_http_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let most = Arc::new(AtomicUsize::new(0));
    let seen = most.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut pending = Vec::new();
                let mut buf = [0u8; 65536];
                while let Ok(len) = read_some(&mut stream, &mut buf) {
                    if len == 0 {
                        break;
                    }
                    pending.extend_from_slice(&buf[..len]);
                    let mut answers = 0;
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        answers += 1;
                    }
                    seen.fetch_max(answers, Ordering::Relaxed);
                    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".repeat(answers);
                    if stream.write_all(&reply).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, most)
}

#[test]
fn pipelining_sends_requests_together() {
    let (addr, most) = batch_counting_http_server();
    let url = format!("http://{addr}/");
    let r = load(&["http", &url, "-c", "2", "-n", "800", "--pipeline", "8", "-t", "1"]);
    assert_eq!(n(&r, "requests.completed"), 800);
    let batch = most.load(Ordering::Relaxed);
    assert!(batch >= 2, "the server never saw two requests in one read (most {batch})");
    assert!(batch <= 8, "more in flight than the pipeline depth: {batch}");
}

#[test]
fn rate_limits_hold_within_generous_bounds() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let addr = server.addr.to_string();
    // -r: 100 kB/s for the one block of 20 connections, over 3 s.
    let r = load(&["echo", &addr, "-c", "20", "-d", "3", "-l", "1000", "-r", "100000", "-t", "2"]);
    let sent = n(&r, "bytes.sent");
    assert!((150_000..=450_000).contains(&sent), "-r 100000 for 3 s sent {sent} bytes");
    // -R: 500 messages per second in total, over 3 s.
    let r = load(&["echo", &addr, "-c", "10", "-d", "3", "-R", "500", "-t", "2"]);
    let done = n(&r, "requests.completed");
    assert!((900..=2100).contains(&done), "-R 500 for 3 s completed {done}");
}

#[test]
fn the_rate_holds_with_a_connection_per_request() {
    // Each request on a new connection: the reconnect keeps the schedule of the connection it
    // replaces, rather than sending at once.
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let r = load(&["http", &url, "-c", "8", "-d", "2", "-R", "150", "--no-keepalive", "-t", "2"]);
    let done = n(&r, "requests.completed");
    assert!((150..=450).contains(&done), "-R 150 for 2 s completed {done} requests");
    // One connection per request, and at the end each of the 8 may be open, waiting its turn.
    let (connected, sent) = (n(&r, "connections.connected"), n(&r, "requests.sent"));
    assert!((sent..=sent + 8).contains(&connected), "{connected} connections for {sent} requests");
}

/// A UDP echo server that drops every datagram whose sequence number is odd.
fn dropping_udp_server() -> std::net::SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            let seq = u64::from_le_bytes(buf[..8].try_into().unwrap_or([0; 8]));
            if seq % 2 == 0 {
                let _ = socket.send_to(&buf[..len], from);
            }
        }
    });
    addr
}

#[test]
fn udp_loss_is_counted() {
    let server = ServerProc::start("epoll", &["--proto", "udp"]);
    let r = load(&["udp", &server.addr.to_string(), "-c", "4", "-d", "1", "-t", "1"]);
    assert!(n(&r, "udp.received") > 0);
    assert_eq!(n(&r, "udp.lost"), 0, "nothing is lost through a server that drops nothing");

    let addr = dropping_udp_server().to_string();
    let r =
        load(&["udp", &addr, "-c", "4", "-d", "2", "-t", "1", "--timeout", "0.1", "--depth", "4", "--allow-errors"]);
    let (sent, received, lost) = (n(&r, "udp.sent"), n(&r, "udp.received"), n(&r, "udp.lost"));
    assert!(lost > 0, "drops went uncounted: {r}");
    // Every datagram is received, lost, or still in flight at the end (at most depth x sockets).
    assert!(sent >= received + lost && sent - received - lost <= 16, "sent {sent} received {received} lost {lost}");
    assert!(lost * 3 >= sent && lost * 3 <= 2 * sent, "half should be lost: sent {sent}, lost {lost}");
}

#[test]
fn merge_adds_histograms() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let addr = server.addr.to_string();
    let dir: PathBuf = std::env::temp_dir().join(format!("sockscale-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (i, count) in ["300", "700"].iter().enumerate() {
        let path = dir.join(format!("{i}.json"));
        let out = Command::new(BIN)
            .args(["load", "echo", &addr, "-c", "2", "-n", count, "-t", "1", "--json"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        files.push(path);
    }
    let merged = dir.join("merged.json");
    // The two runs were made one after another: merged only when asked.
    let out = Command::new(BIN)
        .args(["load", "merge", "--allow-disjoint"])
        .args(&files)
        .arg("--json")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1,000 completed"));
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    assert_eq!(n(&m, "requests.completed"), 1000);
    assert_eq!(n(&m, "latency.count"), 1000);
    assert_eq!(n(&m, "procs"), 2);
    let parts: Vec<serde_json::Value> =
        files.iter().map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()).collect();
    let max_part = parts.iter().map(|p| p["latency"]["max_us"].as_f64().unwrap()).fold(0.0, f64::max);
    assert_eq!(m["latency"]["max_us"].as_f64().unwrap(), max_part, "the merged max is the larger max");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--segment I/N`: three agents (one taking its index from JOB_COMPLETION_INDEX, as a
/// Kubernetes Indexed Job's pods do) split 7 connections and 701 requests exactly (3+2+2,
/// 234+234+233); their merge counts what one process running the whole workload counts. A
/// merge missing a segment, or holding one twice, is refused in one line.
#[test]
fn segments_of_one_run_add_up_and_merge_like_the_whole() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let addr = server.addr.to_string();
    let dir: PathBuf = std::env::temp_dir().join(format!("sockscale-segments-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let workload = ["load", "echo", &addr, "-c", "7", "-n", "701", "-t", "1", "-l", "64"];
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let start_at = format!("{:.3}", now + 1.5);
    let agents: Vec<(PathBuf, std::process::Child)> = (0..3)
        .map(|i| {
            let path = dir.join(format!("agent-{i}.json"));
            let mut cmd = Command::new(BIN);
            cmd.args(workload).args(["--start-at", &start_at]).arg("--json").arg(&path);
            cmd.stdout(std::process::Stdio::null());
            if i == 2 {
                cmd.args(["--segment", "auto/3"]).env("JOB_COMPLETION_INDEX", "2");
            } else {
                cmd.args(["--segment", &format!("{i}/3")]).env_remove("JOB_COMPLETION_INDEX");
            }
            (path, cmd.spawn().unwrap())
        })
        .collect();
    let mut files = Vec::new();
    for (i, (path, mut child)) in agents.into_iter().enumerate() {
        assert!(child.wait().unwrap().success(), "agent {i}");
        let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(r["segment"], serde_json::json!({ "index": i, "count": 3 }), "{r}");
        assert_eq!(n(&r, "connections.connected"), [3, 2, 2][i], "agent {i}");
        assert_eq!(n(&r, "requests.completed"), [234, 234, 233][i], "agent {i}");
        // Each began at --start-at, give or take a process's wake-up.
        let late = r["window"]["started_unix_s"].as_f64().unwrap() - r["window"]["start_at_unix_s"].as_f64().unwrap();
        assert!((-0.001..0.5).contains(&late), "agent {i} began {late} s from --start-at");
        files.push(path);
    }
    let merged = dir.join("merged.json");
    let out = Command::new(BIN).args(["load", "merge"]).args(&files).arg("--json").arg(&merged).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let whole = load(&workload[1..]);
    for field in
        ["connections.connected", "connections.attempted", "requests.sent", "requests.completed", "latency.count"]
    {
        assert_eq!(n(&m, field), n(&whole, field), "{field}");
    }
    assert!(m.get("segment").is_none(), "the merge of every segment is the whole run: {m}");
    let agents = m["agents"].as_array().expect("every agent");
    assert_eq!(agents.iter().map(|a| a["completed"].as_u64().unwrap()).collect::<Vec<_>>(), [234, 234, 233]);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("agent 2/3 on ") && summary.contains("from --start-at"), "{summary}");
    // Agents run one after another, with no common start: their windows do not overlap.
    let apart: Vec<PathBuf> = (0..2)
        .map(|i| {
            let path = dir.join(format!("apart-{i}.json"));
            let st = Command::new(BIN)
                .args([
                    "load",
                    "echo",
                    &addr,
                    "-c",
                    "2",
                    "-n",
                    "20",
                    "-t",
                    "1",
                    "--segment",
                    &format!("{i}/2"),
                    "--json",
                ])
                .arg(&path)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
            path
        })
        .collect();
    let out = Command::new(BIN).args(["load", "merge"]).args(&apart).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("do not overlap") && err.lines().count() == 1, "{err}");
    for (files, why) in [
        (vec![&files[0], &files[1]], "segment 2/3 missing"),
        (vec![&files[0], &files[1], &files[1], &files[2]], "segment 1/3 is given twice"),
    ] {
        let out = Command::new(BIN).args(["load", "merge"]).args(files).output().unwrap();
        assert!(!out.status.success(), "{why}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    for args in [
        vec!["load".to_owned(), "echo".into(), closed.to_string(), "-d".into(), "1".into()],
        vec!["load".into(), "http".into(), "https://127.0.0.1/".into()],
        vec!["load".into(), "echo".into(), "127.0.0.1:1".into(), "--bogus".into()],
        vec!["load".into(), "udp".into(), "127.0.0.1:9".into(), "-l".into(), "4".into()],
        vec!["load".into(), "merge".into(), "/nonexistent.json".into()],
    ] {
        let out = Command::new(BIN).args(&args).env("RUST_LOG", "off").output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error"), "{args:?}: {err}");
    }
    let out = Command::new(BIN).args(["load", "echo", &closed.to_string(), "-d", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&closed.to_string()) && err.contains("refused"), "{err}");
}

/// One connection as [`timing_echo_server`] saw it.
struct Seen {
    accepted: std::time::Instant,
    first_byte: Option<std::time::Instant>,
    echoed: usize,
}

/// An echo server that notes when it accepted each connection, when its first byte came and
/// how many bytes it echoed (once the connection closed).
fn timing_echo_server() -> (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<Seen>>>) {
    use std::io::Read;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let all = seen.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let accepted = std::time::Instant::now();
            let all = all.clone();
            std::thread::spawn(move || {
                let (mut buf, mut echoed, mut first_byte) = ([0u8; 4096], 0, None);
                while let Ok(n) = stream.read(&mut buf) {
                    first_byte.get_or_insert_with(std::time::Instant::now);
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    echoed += n;
                }
                all.lock().unwrap().push(Seen { accepted, first_byte: first_byte.filter(|_| echoed > 0), echoed });
            });
        }
    });
    (addr, seen)
}

/// `--connect-before-start`: with connections paced over about 2 s, nothing is sent until the
/// last is open (across `--procs` children too, which begin at the parent's word), and
/// `--per-conn 1` then makes exactly one verified echo on each and ends the run. Without the
/// flag the first bytes come about 2 s before the last connection, so the check can fail.
#[test]
fn connect_before_start_sends_nothing_until_every_connection_is_open() {
    for (procs, first) in [("1", true), ("2", true), ("1", false)] {
        let (addr, seen) = timing_echo_server();
        let addr = addr.to_string();
        let mut args = vec!["echo", &addr, "-c", "20", "-t", "2", "-l", "64", "--procs", procs, "--connect-rate", "10"];
        if first {
            args.extend(["--connect-before-start", "--per-conn", "1"]);
        } else {
            args.extend(["-d", "3"]);
        }
        let r = load(&args);
        // Every connection (and every process's probe) reported once closed.
        let closed = || seen.lock().unwrap().len();
        let expected = 20 + if procs == "1" { 1 } else { 3 };
        assert!(eventually(std::time::Duration::from_secs(5), || closed() >= expected), "{} closed", closed());
        let seen = seen.lock().unwrap();
        let last_accept = seen.iter().map(|s| s.accepted).max().unwrap();
        let first_byte = seen.iter().filter_map(|s| s.first_byte).min().unwrap();
        // A byte read before the last accept by more than a thread's wake-up was sent early.
        let early = last_accept.checked_duration_since(first_byte).unwrap_or_default();
        if !first {
            assert!(early > std::time::Duration::from_secs(1), "the control run sent only {early:?} early");
            continue;
        }
        assert!(
            early < std::time::Duration::from_millis(200),
            "--procs {procs}: a byte came {early:?} before the last connection"
        );
        assert_eq!(n(&r, "requests.completed"), 20, "{r}");
        assert_eq!(n(&r, "latency.count"), 20, "{r}");
        assert_eq!(n(&r, "pre_start.open"), 20, "{r}");
        assert_eq!(n(&r, "pre_start.wanted"), 20, "{r}");
        let mut echoed: Vec<usize> = seen.iter().map(|s| s.echoed).filter(|&b| b > 0).collect();
        echoed.sort();
        assert_eq!(echoed, vec![64; 20], "--procs {procs}: one 64-byte echo on each connection");
    }
}

/// Over TLS: every echoed byte is verified through the session; two processes' reports merge
/// their TLS blocks (one handshake per connection, the bytes on the wire beyond the echoed
/// ones); an open-loop HTTPS run keeps its rate and times handshakes apart from requests.
#[test]
fn tls_echo_across_processes_and_open_loop_https() {
    let cert = tls::TestCert::new("load-echo");
    let args = cert.args();
    let ca = cert.ca_file.to_str().expect("path");
    let echo = ServerProc::start("epoll", &["--proto", "echo", &args[0], &args[1], &args[2], &args[3]]);
    let target = format!("localhost:{}", echo.addr.port());
    let r = load(&[
        "echo", &target, "--tls", "--cacert", ca, "-c", "4", "--procs", "2", "-t", "1", "-l", "100000", "-n", "40",
    ]);
    assert_eq!(n(&r, "requests.completed"), 40);
    assert_eq!(n(&r, "bytes.received"), 40 * 100_000);
    assert_eq!(n(&r, "errors.verify_mismatch") + n(&r, "errors.tls"), 0);
    assert_eq!(n(&r, "tls.handshakes.full") + n(&r, "tls.handshakes.resumed"), 4, "{}", r["tls"]);
    assert!(n(&r, "tls.wire.received") > 40 * 100_000, "{}", r["tls"]);
    assert_eq!(r["tls"]["negotiated"][0]["alpn"], serde_json::Value::Null, "echo offers no ALPN");

    let http = ServerProc::start("epoll", &["--proto", "http", &args[0], &args[1], &args[2], &args[3]]);
    let url = format!("https://localhost:{}/", http.addr.port());
    let r = load(&["http", &url, "--cacert", ca, "-c", "4", "-R", "200", "-d", "2", "-t", "1"]);
    let completed = n(&r, "requests.completed");
    assert!((300..=440).contains(&completed), "200/s for 2 s: {completed}");
    assert_eq!(n(&r, "errors.tls"), 0);
    assert_eq!(n(&r, "tls.handshake_latency.count"), 4, "{}", r["tls"]);
    assert_eq!(r["tls"]["negotiated"][0]["version"], "TLSv1.3");

    // 50 connections reconnecting together each want a ticket of their own (a TLS 1.3 ticket is
    // used once): only the first handshake of each is full.
    let r = load(&["http", &url, "--cacert", ca, "-c", "50", "-n", "400", "--no-keepalive", "-t", "1"]);
    assert_eq!(n(&r, "requests.completed"), 400);
    assert_eq!(n(&r, "tls.handshakes.full"), 50, "{}", r["tls"]);
    assert_eq!(n(&r, "tls.handshakes.resumed"), 350, "{}", r["tls"]);
    let r = load(&[
        "http",
        &url,
        "--cacert",
        ca,
        "-c",
        "5",
        "-n",
        "20",
        "--no-keepalive",
        "--tls-resume",
        "off",
        "-t",
        "1",
    ]);
    assert_eq!((n(&r, "tls.handshakes.full"), n(&r, "tls.handshakes.resumed")), (20, 0), "{}", r["tls"]);
    let plain_server = ServerProc::start("epoll", &["--proto", "http"]);
    let plain = load(&["http", &format!("http://{}/", plain_server.addr), "-c", "1", "-n", "1", "-t", "1"]);
    assert!(plain.get("tls").is_none(), "no TLS block for a plaintext run");
    let out =
        Command::new(BIN).args(["load", "http", &url, "--insecure", "--cacert", ca, "-n", "1"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "--insecure and --cacert conflict");
    let out = Command::new(BIN)
        .args(["load", "http", "http://127.0.0.1:1/", "--cacert", ca, "-n", "1"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--cacert is for an https:// URL"), "{stderr}");
}

/// HTTPS over a Unix socket (`https://` with `--unix-socket`): the TLS stage is above the
/// socket, so the certificate is checked against the URL's host and no request fails.
#[test]
fn https_over_a_unix_socket() {
    let cert = tls::TestCert::new("load-uds");
    let args = cert.args();
    let dir = std::env::temp_dir().join(format!("sockscale-load-uds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tls.sock");
    let listen = format!("unix:{}", path.display());
    let server = ServerProc::start_at("epoll", &listen, &["--proto", "http", &args[0], &args[1], &args[2], &args[3]]);
    let socket = path.to_str().unwrap();
    let ca = cert.ca_file.to_str().unwrap();
    let r = load(&[
        "http",
        "https://localhost/",
        "--unix-socket",
        socket,
        "--cacert",
        ca,
        "-c",
        "4",
        "-n",
        "200",
        "-t",
        "1",
    ]);
    assert_eq!(n(&r, "requests.completed"), 200);
    assert_eq!(n(&r, "errors.tls"), 0);
    assert_eq!(n(&r, "tls.handshakes.full") + n(&r, "tls.handshakes.resumed"), 4, "{}", r["tls"]);
    assert_eq!(r["target"], format!("https://localhost/ via unix:{socket}"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// HTTP/2 (`--http2`): exact counts in clear (h2c) and over TLS (ALPN h2) across processes,
/// the server's stream limit honoured whatever `--pipeline` asks, an open-loop rate kept, and a
/// server without HTTP/2 refused in one line before the run.
#[test]
fn http2_counts_h2c_and_tls_across_processes_and_refuses_a_server_without_it() {
    let cert = tls::TestCert::new("load-h2");
    let args = cert.args();
    let ca = cert.ca_file.to_str().expect("path");
    let server = ServerProc::start("epoll", &["--proto", "http", "--max-streams", "3"]);
    let url = format!("http://127.0.0.1:{}/", server.addr.port());
    let r = load(&["http", "--http2", &url, "-c", "4", "--pipeline", "8", "-n", "2000", "-t", "2"]);
    assert_eq!(n(&r, "requests.completed"), 2000);
    assert_eq!(n(&r, "statuses.2xx"), 2000);
    let per_response = n(&r, "bytes.received") / 2000;
    assert!((4096 + 18..4096 + 200).contains(&per_response), "a 4 KiB body and its frames: {per_response}");
    assert_eq!(r["h2"]["protocol"], "h2c");
    assert_eq!((n(&r, "h2.connections"), n(&r, "h2.streams")), (4, 2000), "{}", r["h2"]);
    assert_eq!(n(&r, "h2.server_max_streams"), 3, "{}", r["h2"]);
    assert_eq!(r["errors"].as_object().expect("errors").values().filter_map(|v| v.as_u64()).sum::<u64>(), 0);

    let tls_server = ServerProc::start("uring", &["--proto", "http", &args[0], &args[1], &args[2], &args[3]]);
    let tls_url = format!("https://localhost:{}/", tls_server.addr.port());
    let r = load(&["http", "--http2", &tls_url, "--cacert", ca, "-c", "4", "--procs", "2", "-t", "1", "-n", "1000"]);
    assert_eq!(n(&r, "requests.completed"), 1000);
    assert_eq!(r["h2"]["protocol"], "h2");
    assert_eq!((n(&r, "h2.connections"), n(&r, "h2.streams")), (4, 1000), "{}", r["h2"]);
    assert_eq!(r["tls"]["negotiated"][0]["alpn"], "h2", "{}", r["tls"]);

    let r = load(&["http", "--http2", &url, "-c", "4", "--pipeline", "4", "-R", "400", "-d", "2", "-t", "1"]);
    let completed = n(&r, "requests.completed");
    assert!((640..=880).contains(&completed), "400/s for 2 s: {completed}");
    drop((server, tls_server));

    let plain = ServerProc::start("epoll", &["--proto", "http", "--http2", "off"]);
    let plain_tls =
        ServerProc::start("epoll", &["--proto", "http", "--http2", "off", &args[0], &args[1], &args[2], &args[3]]);
    let h2c = format!("http://127.0.0.1:{}/", plain.addr.port());
    let h2 = format!("https://localhost:{}/", plain_tls.addr.port());
    for (args, expect) in [
        (vec![h2c.as_str()], "with 'HTTP/1.1 400 Bad Request'"),
        (vec![h2.as_str(), "--cacert", ca], "it chose ALPN http/1.1"),
    ] {
        let out = Command::new(BIN).args(["load", "http", "--http2", "-n", "1"]).args(&args).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr = stderr.trim();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("does not speak HTTP/2") && stderr.contains(expect), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    let out =
        Command::new(BIN).args(["load", "http", "--http2", "--no-keepalive", &url, "-n", "1"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-keepalive"));
}

/// An HTTP/2 server written frame by frame: stream 1 answered, stream 3 reset
/// (INTERNAL_ERROR), and at stream 5 a GOAWAY saying 3 was the last it processed, then close.
fn resetting_h2_server() -> std::net::SocketAddr {
    use std::io::Read;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut preface = [0u8; 24];
                if s.read_exact(&mut preface).is_err() {
                    return;
                }
                let _ = s.write_all(&h2::settings(&[]));
                loop {
                    let mut head = [0u8; 9];
                    if s.read_exact(&mut head).is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let mut payload = vec![0u8; len];
                    if s.read_exact(&mut payload).is_err() {
                        return;
                    }
                    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    if head[3] != h2::kind::HEADERS {
                        continue;
                    }
                    let reply = match id {
                        // :status 200 (static index 8), no body.
                        1 => h2::frame(h2::kind::HEADERS, h2::END_HEADERS | h2::END_STREAM, 1, &[0x88]),
                        3 => h2::frame(h2::kind::RST_STREAM, 0, 3, &2u32.to_be_bytes()),
                        _ => {
                            let goaway = [3u32.to_be_bytes(), 0u32.to_be_bytes()].concat();
                            let _ = s.write_all(&h2::frame(h2::kind::GOAWAY, 0, 0, &goaway));
                            return;
                        }
                    };
                    if s.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// RST_STREAM and GOAWAY received are counted as errors by kind, with their codes.
#[test]
fn http2_resets_and_goaway_refusals_are_counted_by_kind() {
    let addr = resetting_h2_server();
    let url = format!("http://{addr}/");
    let r = load(&["http", "--http2", &url, "-c", "1", "--pipeline", "1", "-n", "3", "-t", "1", "--allow-errors"]);
    assert_eq!(n(&r, "requests.sent"), 3, "{r}");
    assert_eq!(n(&r, "requests.completed"), 1, "{r}");
    assert_eq!(n(&r, "errors.h2_reset"), 1, "{}", r["errors"]);
    assert_eq!(n(&r, "errors.h2_refused"), 1, "{}", r["errors"]);
    assert_eq!(n(&r, "h2.resets.INTERNAL_ERROR"), 1, "{}", r["h2"]);
    assert_eq!(n(&r, "h2.goaways.NO_ERROR"), 1, "{}", r["h2"]);
}

/// Python hdrh's HistogramLogReader over a log: (interval histograms, latencies counted).
fn python_hdrh_counts(path: &std::path::Path) -> Option<(u64, u64)> {
    let script = "import sys\nfrom hdrh.log import HistogramLogReader\nfrom hdrh.histogram import HdrHistogram\n\
        r = HistogramLogReader(sys.argv[1], HdrHistogram(1, 3600 * 10**9, 3))\nn = t = 0\n\
        while True:\n    h = r.get_next_interval_histogram()\n    if h is None: break\n    n += 1; t += h.get_total_count()\n\
        print(n, t)\n";
    let out = Command::new("python3").args(["-c", script]).arg(path).output().ok()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("No module named"), "hdrh failed on {}: {err}", path.display());
        eprintln!("skipping the Python hdrh check: hdrh is not installed (pip install hdrhistogram)");
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().expect("a count"));
    Some((it.next()?, it.next()?))
}

/// `--hdr-log`: an HdrHistogram interval log with every request counted once per tag, across
/// processes; logs of segments merge into one with `load merge --hdr-log`; HdrHistogram's own
/// Python reader reads them; open loop reports uncorrected latency and the schedule's slip.
#[test]
fn hdr_interval_logs_count_every_request_and_merge() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let dir = std::env::temp_dir().join(format!("sockscale-hlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("open.hlog");
    let r = load(&[
        "http",
        &url,
        "-c",
        "4",
        "--procs",
        "2",
        "-t",
        "1",
        "-R",
        "400",
        "-d",
        "2.5",
        "--hdr-log",
        log.to_str().unwrap(),
    ]);
    let completed = n(&r, "requests.completed");
    assert_eq!(n(&r, "latency_uncorrected.count"), completed, "uncorrected beside corrected");
    assert_eq!(n(&r, "schedule_slip.count"), n(&r, "requests.sent"), "a slip for every send");
    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("#[Histogram log format version 1.3]"), "{text}");
    let parsed = sockscale_load::hlog::read(&bytes, "open.hlog").expect("a log");
    let count = |tag: &str| parsed.intervals.iter().filter(|i| i.tag == tag).map(|i| i.histogram.len()).sum::<u64>();
    assert_eq!((count("corrected"), count("uncorrected")), (completed, completed), "{text}");
    let seconds = parsed.intervals.iter().filter(|i| i.tag == "corrected").count();
    assert!((3..=4).contains(&seconds), "one interval a second over 2.5 s: {seconds}");
    if let Some((histograms, total)) = python_hdrh_counts(&log) {
        assert_eq!(total, 2 * completed, "Python hdrh reads every latency of both tags");
        assert_eq!(histograms as usize, parsed.intervals.len());
    }

    // Two segments of one closed-loop run, merged.
    let mut segment_logs = Vec::new();
    let mut total = 0;
    for i in 0..2 {
        let path = dir.join(format!("seg{i}.hlog"));
        let seg = format!("{i}/2");
        let r = load(&[
            "http",
            &url,
            "-c",
            "4",
            "-t",
            "1",
            "-n",
            "1000",
            "--segment",
            &seg,
            "--hdr-log",
            path.to_str().unwrap(),
        ]);
        total += n(&r, "requests.completed");
        segment_logs.push(path);
    }
    assert_eq!(total, 1000);
    let merged = dir.join("all.hlog");
    let out = Command::new(BIN)
        .args(["load", "merge", "--hdr-log", merged.to_str().unwrap()])
        .args(&segment_logs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&merged).unwrap();
    let parsed = sockscale_load::hlog::read(&bytes, "all.hlog").expect("a merged log");
    assert!(parsed.intervals.iter().all(|i| i.tag.is_empty()), "closed loop: untagged");
    assert_eq!(parsed.intervals.iter().map(|i| i.histogram.len()).sum::<u64>(), 1000);
    if let Some((_, total)) = python_hdrh_counts(&merged) {
        assert_eq!(total, 1000);
    }
    let bad = dir.join("bad.hlog");
    std::fs::write(&bad, "not a log\n").unwrap();
    let out =
        Command::new(BIN).args(["load", "merge", "--hdr-log", merged.to_str().unwrap()]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("not an HdrHistogram interval log"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--html`: the run's page, checked in a real browser: no console error, no missing resource,
/// every chart drawn (its screenshot kept in target/); the check itself fails on a page with a
/// missing image and a script error. The page's timeline counts every request.
#[test]
fn the_run_page_opens_clean_in_a_browser() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let dir = std::env::temp_dir().join(format!("sockscale-page-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("run.html");
    let r = load(&["http", &url, "-c", "8", "-t", "1", "-R", "1000", "-d", "3", "--html", page.to_str().unwrap()]);
    let timeline = r["timeline"].as_array().expect("a timeline");
    let completed: u64 = timeline.iter().map(|s| s["completed"].as_u64().unwrap()).sum();
    assert_eq!(completed, n(&r, "requests.completed"), "the seconds add up to the run");
    assert!(timeline.iter().all(|s| s["latency"]["count"].as_u64().is_some()), "latency each second: {timeline:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("latency percentile spectrum") && html.contains("uncorrected"), "the page has its charts");
    assert!(!html.contains("<script src") && !html.contains("<link ") && !html.contains("<img"), "nothing fetched");

    let browser = match browser::chromium() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped the browser check: {why}");
            return;
        }
    };
    let shot = browser::screenshot_dir().join("load-run-page.png");
    let checked = browser::check_page(&browser, &page, &shot).unwrap_or_else(|e| panic!("{e}"));
    assert!(checked.resources.contains("figures=5 "), "every chart drawn: {}", checked.resources);
    eprintln!("screenshot of the run page: {}", shot.display());
    // The check can fail: the same page with a missing image and a script error.
    let broken = dir.join("broken.html");
    std::fs::write(
        &broken,
        html.replace("</body>", "<img src=\"nowhere.png\"><script>undefinedCall()</script></body>"),
    )
    .unwrap();
    let err = browser::check_page(&browser, &broken, &dir.join("broken.png")).expect_err("a broken page fails");
    assert!(err.contains("nowhere.png") && err.contains("undefinedCall"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--slo`: a target the server meets at its ceiling ends the search at once; one no rate
/// meets fails it after a bounded number of steps, each reported; a malformed target or -R
/// beside it is refused in one line.
#[test]
fn the_slo_search_reports_each_step_and_its_answer() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let dir = std::env::temp_dir().join(format!("sockscale-slo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("slo.json");
    let run = |target: &str| {
        Command::new(BIN)
            .args(["load", "http", &url, "-c", "4", "-t", "1", "-d", "0.3", "--slo", target, "--json"])
            .arg(&json)
            .output()
            .unwrap()
    };
    let out = run("p50<=10s");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("closed loop:") && stdout.contains("holds"), "{stdout}");
    let answer: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let steps = stdout.lines().filter(|l| l.starts_with("step")).count();
    assert_eq!(answer["slo"]["steps"].as_array().map(Vec::len), Some(steps), "{answer}");
    // A generous target: only the rate the server (and this client) can complete limits it.
    assert!(answer["slo"]["rate_per_s"].as_f64().unwrap() > 100.0, "{answer}");
    if let Some(failed) = answer["slo"]["failed_at_per_s"].as_f64() {
        let passed = answer["slo"]["rate_per_s"].as_f64().unwrap();
        assert!(failed > passed, "{answer}");
    }

    let out = run("p99<=1us");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("failed at every rate tried"), "{stdout}");
    let steps = stdout.lines().filter(|l| l.starts_with("step")).count();
    assert!((2..=sockscale_load::slo::MAX_STEPS).contains(&steps), "{stdout}");
    let answer: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(answer["slo"]["steps"].as_array().map(Vec::len), Some(steps));

    for (args, expect) in
        [(vec!["--slo", "p99=1ms"], "--slo 'p99=1ms'"), (vec!["--slo", "p99<=1ms", "-R", "100"], "leave out -R")]
    {
        let out = Command::new(BIN).args(["load", "http", &url, "-d", "1"]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expect) && stderr.trim().lines().count() == 1, "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--slo` over a run split with `--segment`: two agents meet in a shared directory each step,
/// both judge the same merged report, and so take the same steps to the same answer.
#[test]
fn the_slo_search_split_over_agents_takes_the_same_steps() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let dir = std::env::temp_dir().join(format!("sockscale-slo-agents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() + 1.0;
    let start = format!("{start:.3}");
    let agents: Vec<_> = (0..2)
        .map(|i| {
            let json = dir.join(format!("agent{i}.json"));
            let child = Command::new(BIN)
                .args(["load", "http", &url, "-c", "4", "-t", "1", "-d", "0.3", "--slo", "p50<=10s"])
                .args(["--segment", &format!("{i}/2"), "--start-at", &start, "--slo-dir"])
                .arg(dir.join("shared"))
                .arg("--json")
                .arg(&json)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (child, json)
        })
        .collect();
    let mut answers = Vec::new();
    for (child, json) in agents {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        answers.push(v["slo"].clone());
    }
    let steps = |a: &serde_json::Value| -> Vec<f64> {
        a["steps"].as_array().unwrap().iter().map(|s| s["asked_per_s"].as_f64().unwrap()).collect()
    };
    assert_eq!(steps(&answers[0]), steps(&answers[1]), "both agents took the same steps");
    assert_eq!(answers[0]["rate_per_s"], answers[1]["rate_per_s"]);
    assert!(answers[0]["rate_per_s"].as_f64().unwrap() > 100.0, "{}", answers[0]);
    let out = Command::new(BIN)
        .args(["load", "http", &url, "-d", "1", "--slo", "p50<=1s", "--segment", "0/2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--slo-dir"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
