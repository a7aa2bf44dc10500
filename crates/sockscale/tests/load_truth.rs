//! `sockscale load` tells the truth: input it cannot honour is refused in one line before any
//! load is sent, every failure is counted and fails the exit status, and the report shows only
//! what was measured. Servers run inside the test on loopback; every wait is bounded.

mod support;

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

/// Run `sockscale ARGS`, killing it (and failing) if it has not ended within `limit`.
fn run_within(limit: Duration, cmd: &mut Command) -> Output {
    // Quiet logs unless the test asked for them.
    if !cmd.get_envs().any(|(name, _)| name == "RUST_LOG") {
        cmd.env("RUST_LOG", "off");
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + limit;
    // Read both pipes on threads so a full pipe cannot stall the child.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

fn load(args: &[&str]) -> Output {
    run_within(Duration::from_secs(60), Command::new(BIN).arg("load").args(args))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sockscale-truth-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// One line on stderr, starting with "error", and a non-zero exit.
fn assert_one_line_error(out: &Output, what: &str) -> String {
    let err = stderr(out);
    assert!(!out.status.success(), "{what} succeeded: {err}{}", stdout(out));
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("error"), "{what}: {err}");
    err
}

/// An HTTP server answering every request with `status`, recording each request head.
fn http_server(status: u16) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
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
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = pending.drain(..end + 4).collect();
                        seen.lock().unwrap().push(String::from_utf8_lossy(&head).into_owned());
                        let reply = format!("HTTP/1.1 {status} Status\r\nContent-Length: 2\r\n\r\nok");
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, heads)
}

#[test]
fn meaningless_values_are_refused_in_one_line_naming_the_flag() {
    // A live server: before, `-n 0` and `-d 0` "succeeded" against it with zeros.
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let addr = server.addr.to_string();
    for (args, expect) in [
        (&["-n", "0"][..], "--requests"),
        (&["-d", "0"], "--duration"),
        (&["-d", "-1"], "--duration"),
        (&["-c", "0"], "--connections"),
        (&["-c", "-5"], "--connections"),
        (&["-t", "0"], "--threads"),
        (&["--procs", "0"], "--procs"),
        (&["--block", "0"], "--block"),
        (&["--depth", "0"], "--depth"),
        (&["-l", "0"], "--length"),
        (&["-r", "0"], "--byte-rate"),
        (&["-R", "0"], "--rate"),
        (&["-R", "-100"], "--rate"),
        (&["-R", "inf"], "--rate"),
        (&["--connect-rate", "0"], "--connect-rate"),
        (&["--timeout", "0"], "--timeout"),
        (&["--connect-timeout", "0ms"], "--connect-timeout"),
        (&["-c", "3", "--procs", "4"], "use --procs 3 or fewer"),
        (&["-n", "2", "--procs", "4"], "use --procs 2 or fewer"),
    ] {
        let mut all = vec!["echo", addr.as_str()];
        all.extend_from_slice(args);
        let err = assert_one_line_error(&load(&all), &format!("{args:?}"));
        assert!(err.contains(expect), "{args:?} does not name {expect}: {err}");
        assert!(err.contains(args[1]), "{args:?} does not name the value: {err}");
    }
    let udp = ServerProc::start("epoll", &["--proto", "udp"]);
    for (len, expect) in [("4", "at least 8"), ("70000", "65507")] {
        let err = assert_one_line_error(&load(&["udp", &udp.addr.to_string(), "-l", len, "-n", "1"]), len);
        assert!(err.contains("-l") && err.contains(expect), "{err}");
    }
    let http = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", http.addr);
    for (args, expect) in [
        (&["--pipeline", "0"][..], "--pipeline"),
        (&["--accept-status", "2xy"], "--accept-status"),
        (&["-m", "GET /x"], "-m"),
        (&["-H", "Content-Length: 5"], "the body is 0 bytes"),
        (&["-H", "Host: a", "-H", "host: b"], "twice"),
        (&["--no-keepalive", "-H", "Connection: keep-alive"], "--no-keepalive"),
    ] {
        let mut all = vec!["http", url.as_str(), "-n", "1", "--timeout", "1"];
        all.extend_from_slice(args);
        let err = assert_one_line_error(&load(&all), &format!("{args:?}"));
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

/// Run `sockscale load ARGS` with the open-files limit (soft and hard) set to `nofile`.
fn load_with_nofile(nofile: u64, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(BIN);
    cmd.arg("load").args(args);
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit { rlim_cur: nofile, rlim_max: nofile };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    run_within(Duration::from_secs(60), &mut cmd)
}

#[test]
fn connections_past_the_open_files_limit_are_refused_before_the_run_with_the_fix() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let addr = server.addr.to_string();
    // 256 descriptors, 18 of them overhead for one thread: 238 connections per process.
    let out = load_with_nofile(256, &["echo", &addr, "-c", "600", "-n", "600", "-t", "1"]);
    let err = assert_one_line_error(&out, "-c 600 under a limit of 256");
    assert!(err.contains("-c 600") && err.contains("RLIMIT_NOFILE") && err.contains("256"), "{err}");
    assert!(err.contains("--procs 3"), "{err}");
    // The fix it names works, under the same limit.
    let out = load_with_nofile(256, &["echo", &addr, "-c", "600", "-n", "600", "-t", "1", "--procs", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("600 completed"), "{}", stdout(&out));
}

#[test]
fn connections_past_the_ephemeral_ports_are_refused_with_the_fix() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let (low, high) = match range.split_whitespace().collect::<Vec<_>>()[..] {
        [l, h] => (l.parse::<u64>().unwrap(), h.parse::<u64>().unwrap()),
        _ => panic!("{range}"),
    };
    let ports = high - low + 1;
    let conns = (ports + 1).to_string();
    // Enough processes that the open-files check passes, so the port check speaks.
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the rlimit we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
    let per_process = if rl.rlim_max == libc::RLIM_INFINITY { ports + 1 } else { rl.rlim_max.saturating_sub(100) };
    let procs = (ports + 1).div_ceil(per_process.max(1)).to_string();
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let out = load(&["echo", &closed, "-c", &conns, "--procs", &procs, "-t", "1", "-n", &conns]);
    let err = assert_one_line_error(&out, "one port too many");
    assert!(err.contains("ip_local_port_range") && err.contains(&format!("{ports} ephemeral ports")), "{err}");
    assert!(err.contains("--source 127.0.0.1-127.0.0.2"), "{err}");
}

#[test]
fn a_server_gone_after_the_probe_ends_the_run_with_an_error() {
    // Takes the reachability probe, then closes: the connects of the run are refused. (A
    // connect that reached the accept queue before the close is reset instead: a counted
    // failure, and the run ends as well. Which one happens is up to the scheduler.)
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let probe = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let out = load(&["echo", &addr.to_string(), "-n", "1", "-c", "1", "-t", "1", "--connect-timeout", "1"]);
    drop(probe.join());
    let err = assert_one_line_error(&out, "-n 1 against a dead server");
    let refused = format!("cannot connect to {addr}: connection refused");
    assert!(err.contains(&refused) || err.contains("1 error (reset 1)"), "{err}");
}

/// An echo server that serves for `serve_for`, then closes its listener and every connection.
fn echo_server_that_dies(serve_for: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let until = Instant::now() + serve_for;
        let mut streams: Vec<TcpStream> = Vec::new();
        while Instant::now() < until {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    let mut echo = s.try_clone().unwrap();
                    streams.push(s);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 4096];
                        while let Ok(n) = read_some(&mut echo, &mut buf) {
                            if n == 0 || echo.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        drop(listener);
        for s in streams {
            let _ = s.shutdown(Shutdown::Both);
        }
    });
    addr
}

#[test]
fn a_server_that_dies_mid_run_ends_the_run_with_its_report() {
    let addr = echo_server_that_dies(Duration::from_millis(500));
    let dir = scratch("dies");
    let json = dir.join("r.json");
    let out = load(&[
        "echo",
        &addr.to_string(),
        "-c",
        "2",
        "-t",
        "1",
        "-n",
        "1000000000",
        "--connect-timeout",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = assert_one_line_error(&out, "-n past a server that died");
    assert!(err.contains("ended early") && err.contains("connection refused"), "{err}");
    assert!(stdout(&out).contains("ended early"), "{}", stdout(&out));
    let r = read_json(&json);
    assert_eq!(r["ended_early"]["why"], "no_connection", "{r}");
    assert!(r["requests"]["completed"].as_u64().unwrap() > 0, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An echo server that holds the load's probe and the first `n` connections of the run, then
/// closes its listener, so every later connect is refused (a server at its limit).
fn echo_server_holding(n: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..=n {
            let Ok((s, _)) = listener.accept() else { return };
            let mut echo = s.try_clone().unwrap();
            held.push(s);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = read_some(&mut echo, &mut buf) {
                    if n == 0 || echo.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
        drop(listener);
        std::thread::sleep(Duration::from_secs(30));
    });
    addr
}

#[test]
fn a_server_at_its_limit_does_not_end_the_run() {
    // The run goes on for its duration, counting the refusals (the bench's
    // select-past-FD_SETSIZE row).
    let addr = echo_server_holding(2);
    let out = load(&[
        "echo",
        &addr.to_string(),
        "-c",
        "4",
        "-t",
        "1",
        "-d",
        "2",
        "--connect-timeout",
        "0.3",
        "--allow-errors",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stdout(&out);
    assert!(!summary.contains("ended early"), "{summary}");
    assert!(summary.contains("connect refused"), "{summary}");
}

/// Refused connects back off, each connection on its own, and the report says how many
/// attempts were retries. Before, every refused connection came back every 50 ms: a bench row
/// counted a million refusals for 12,000 connections.
#[test]
fn refused_connects_back_off_and_retries_are_counted() {
    let addr = echo_server_holding(2);
    let dir = scratch("backoff");
    let json = dir.join("r.json");
    let out = load(&[
        "echo",
        &addr.to_string(),
        "-c",
        "20",
        "-t",
        "1",
        "-d",
        "3",
        "--allow-errors",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = read_json(&json);
    let _ = std::fs::remove_dir_all(&dir);
    let (attempted, retries) =
        (r["connections"]["attempted"].as_u64().unwrap(), r["connections"]["retries"].as_u64().unwrap());
    // 20 first attempts; every other attempt retried a refused connection.
    assert_eq!(attempted - retries, 20, "{r}");
    assert!(retries > 0, "refused connections were never retried: {r}");
    // 18 refused connections over 3 s: backing off from 50 ms, about 6 attempts each (a fixed
    // 50 ms pause made about 60 each, over 1,000 in all).
    assert!(retries <= 18 * 10, "{retries} retries in 3 s: refused connects are not backing off\n{r}");
    assert!(stdout(&out).contains("of them retries after a failure"), "{}", stdout(&out));
}

/// A server refusing when busy accepts and closes at once: the connect succeeds, the
/// connection does not. Those reconnects back off too (the handshake alone reset the back-off,
/// and a blocking server at its threads limit saw 240,000 reconnects in 16 s).
#[test]
fn connections_closed_before_any_answer_back_off_like_refused_connects() {
    let server = ServerProc::start("epoll", &["--proto", "echo", "--max-conns", "2"]);
    let dir = scratch("accept-close");
    let json = dir.join("r.json");
    let out = load(&[
        "echo",
        &server.addr.to_string(),
        "-c",
        "20",
        "-t",
        "1",
        "-d",
        "3",
        "--allow-errors",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = read_json(&json);
    let _ = std::fs::remove_dir_all(&dir);
    let retries = r["connections"]["retries"].as_u64().unwrap();
    assert!(r["errors"]["closed_by_peer"].as_u64().unwrap() > 0, "nothing was refused: {r}");
    assert!(r["requests"]["completed"].as_u64().unwrap() > 0, "the two admitted connections were not served: {r}");
    // 18 refused connections over 3 s, backing off from 50 ms: about 6 attempts each; a back-off
    // reset by every successful handshake made about 60 each.
    assert!(retries > 0 && retries <= 18 * 10, "{retries} reconnects in 3 s: closed connections do not back off\n{r}");
}

/// --connect-retries N: a connection refused N+1 times in a row is given up and counted, not
/// retried for the rest of the run; the connections the server admitted go on being served.
#[test]
fn connect_retries_give_a_refused_connection_up_and_count_it() {
    let server = ServerProc::start("epoll", &["--proto", "echo", "--max-conns", "2"]);
    let dir = scratch("give-up");
    let json = dir.join("r.json");
    let addr = server.addr.to_string();
    let args = ["echo", &addr, "-c", "20", "-t", "1", "-d", "3", "--connect-retries", "2", "--allow-errors", "--json"];
    let out = load(&[&args[..], &[json.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = read_json(&json);
    let c = &r["connections"];
    // Two are admitted and held; each of the other 18 is tried three times, then given up.
    assert_eq!(c["abandoned"].as_u64(), Some(18), "{r}");
    assert_eq!(c["retries"].as_u64(), Some(36), "{r}");
    assert_eq!(c["attempted"].as_u64(), Some(20 + 36), "{r}");
    assert!(r["ended_early"].is_null(), "two connections were still held: {r}");
    assert!(r["requests"]["completed"].as_u64().unwrap() > 0, "the admitted connections were not served: {r}");
    assert!(stdout(&out).contains("18 given up (--connect-retries)"), "{}", stdout(&out));

    // A -n run whose every connection is refused ends once they are all given up, and says
    // so, rather than waiting for a budget it can never spend.
    let full = ServerProc::start("epoll", &["--proto", "echo", "--max-conns", "1"]);
    let holder = TcpStream::connect(full.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let json = dir.join("none.json");
    let full_addr = full.addr.to_string();
    let started = Instant::now();
    let out = run_within(
        Duration::from_secs(30),
        Command::new(BIN).arg("load").args(["echo", &full_addr, "-c", "5", "-t", "1", "-n", "100"]).args([
            "--connect-retries",
            "1",
            "--json",
            json.to_str().unwrap(),
        ]),
    );
    drop(holder);
    assert!(!out.status.success(), "every request failed, yet exit 0: {}", stdout(&out));
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    let r = read_json(&json);
    assert_eq!(r["connections"]["abandoned"].as_u64(), Some(5), "{r}");
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("every connection was given up after 2 failed attempts in a row"), "{text}");

    // An HTTP server refusing when busy answers 503 and closes: a refusal too, given up.
    let http = ServerProc::start("epoll", &["--proto", "http", "--max-conns", "1"]);
    let holder = TcpStream::connect(http.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let json = dir.join("http.json");
    let url = format!("http://{}/", http.addr);
    let out = load(&[
        "http",
        &url,
        "-c",
        "4",
        "-t",
        "1",
        "-d",
        "3",
        "--connect-retries",
        "1",
        "--allow-errors",
        "--json",
        json.to_str().unwrap(),
    ]);
    drop(holder);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = read_json(&json);
    assert_eq!(r["connections"]["abandoned"].as_u64(), Some(4), "503s reconnected at once instead of backing off: {r}");
    assert!(r["connections"]["attempted"].as_u64().unwrap() <= 8, "{r}");

    // A target that takes no connection at all is an error, as without the flag.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = listener.local_addr().unwrap();
    let probe = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let out = load(&["echo", &dead.to_string(), "-d", "5", "-c", "3", "-t", "1", "--connect-retries", "1"]);
    drop(probe.join());
    let _ = std::fs::remove_dir_all(&dir);
    let refused = format!("cannot connect to {dead}: every connection failed 2 times in a row (--connect-retries 1)");
    // (A connect that reached the accept queue before the listener closed is reset instead, as
    // in a_server_gone_after_the_probe_ends_the_run_with_an_error.)
    if out.status.code() == Some(1) {
        let err = assert_one_line_error(&out, "a dead target with --connect-retries");
        assert!(err.contains(&refused), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(3), "{}{}", stdout(&out), stderr(&out));
    }
}

#[test]
fn the_json_path_is_checked_before_any_load_is_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let dir = scratch("json");
    let missing = dir.join("no-such-dir").join("r.json");
    let out = load(&["echo", &addr.to_string(), "-n", "5", "--json", missing.to_str().unwrap()]);
    let err = assert_one_line_error(&out, "--json into a missing directory");
    assert!(err.contains("--json") && err.contains("no-such-dir"), "{err}");
    assert!(listener.accept().is_err(), "a connection was made before the --json path was checked");
    // A run that fails leaves no empty file behind, and an existing report untouched.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let fresh = dir.join("fresh.json");
    assert!(!load(&["echo", &closed, "-n", "1", "--json", fresh.to_str().unwrap()]).status.success());
    assert!(!fresh.exists(), "a failed run left {}", fresh.display());
    let old = dir.join("old.json");
    std::fs::write(&old, "previous").unwrap();
    assert!(!load(&["echo", &closed, "-n", "1", "--json", old.to_str().unwrap()]).status.success());
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "previous");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_dash_is_standard_output_and_the_summary_goes_to_stderr() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let dir = scratch("dash");
    let out = run_within(
        Duration::from_secs(60),
        Command::new(BIN).current_dir(&dir).args(["load", "echo", &server.addr.to_string(), "-n", "50", "--json", "-"]),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON report alone");
    assert_eq!(r["requests"]["completed"], 50);
    assert!(stderr(&out).contains("50 completed"), "the summary is on stderr: {}", stderr(&out));
    assert!(!dir.join("-").exists(), "a file named '-' was written");
    // load merge --json - as well.
    let saved = dir.join("one.json");
    std::fs::write(&saved, &out.stdout).unwrap();
    let out = run_within(
        Duration::from_secs(30),
        Command::new(BIN).current_dir(&dir).args(["load", "merge", saved.to_str().unwrap(), "--json", "-"]),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is the merged report alone");
    assert_eq!(m["requests"]["completed"], 50);
    assert!(stderr(&out).contains("50 completed"));
    assert!(!dir.join("-").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_user_host_header_replaces_the_default() {
    let (addr, heads) = http_server(200);
    let out = load(&["http", &format!("http://{addr}/"), "-n", "5", "-c", "1", "-H", "host: example.test"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 5);
    for head in heads.iter() {
        let hosts: Vec<&str> = head.lines().filter(|l| l.to_ascii_lowercase().starts_with("host:")).collect();
        assert_eq!(hosts, ["host: example.test"], "{head}");
    }
}

#[test]
fn non_2xx_answers_are_errors_that_fail_the_run_unless_allowed() {
    let (addr, _) = http_server(404);
    let url = format!("http://{addr}/");
    let dir = scratch("status");
    let json = dir.join("r.json");
    let out = load(&["http", &url, "-n", "10", "-c", "2", "-t", "1", "--json", json.to_str().unwrap()]);
    let err = assert_one_line_error(&out, "ten 404s");
    assert!(err.contains("10 errors") && err.contains("--allow-errors"), "{err}");
    assert_eq!(out.status.code(), Some(3), "a run that counted errors exits 3, apart from one that never ran");
    let summary = stdout(&out);
    assert!(
        summary.contains("4xx 10") && summary.contains("errors       10: non-2xx responses 10 (404: 10)"),
        "{summary}"
    );
    assert!(!summary.contains("errors       none"), "{summary}");
    // Bytes with a human figure beside the exact count: "360 sent (360 B, 7.03 KiB/s)".
    let bytes = summary.lines().find(|l| l.starts_with("  bytes ")).unwrap_or_default();
    let sent: u64 = bytes.split_whitespace().nth(1).and_then(|n| n.replace(',', "").parse().ok()).unwrap_or(0);
    assert!(sent > 0 && bytes.contains(&format!("{sent} sent ({sent} B, ")) && bytes.contains("B/s)"), "{summary}");
    let r = read_json(&json);
    assert_eq!((r["statuses"]["4xx"].as_u64(), r["errors"]["http_status"].as_u64()), (Some(10), Some(10)), "{r}");
    assert_eq!(r["statuses"]["codes"]["404"].as_u64(), Some(10), "{r}");

    let out = load(&["http", &url, "-n", "10", "-c", "2", "-t", "1", "--allow-errors"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("non-2xx responses 10 (404: 10)"));
    let out = load(&["http", &url, "-n", "10", "-c", "2", "-t", "1", "--accept-status", "3xx"]);
    assert!(
        stdout(&out).contains("errors       10: responses outside --accept-status 3xx 10 (404: 10)"),
        "{}",
        stdout(&out)
    );
    let out = load(&["http", &url, "-n", "10", "-c", "2", "-t", "1", "--accept-status", "2xx,404"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("errors       none"), "{}", stdout(&out));

    // Merged, from --procs children or by `load merge`, the classes and errors stay.
    let procs_json = dir.join("procs.json");
    let out =
        load(&["http", &url, "-n", "10", "-c", "2", "-t", "1", "--procs", "2", "--json", procs_json.to_str().unwrap()]);
    assert_one_line_error(&out, "--procs 2, ten 404s");
    let r = read_json(&procs_json);
    assert_eq!((r["procs"].as_u64(), r["statuses"]["4xx"].as_u64()), (Some(2), Some(10)), "{r}");
    assert_eq!(r["errors"]["http_status"].as_u64(), Some(10), "{r}");
    // Two runs made one after another: merged only when asked.
    let merged = dir.join("merged.json");
    let out = run_within(
        Duration::from_secs(30),
        Command::new(BIN)
            .args(["load", "merge", "--allow-disjoint"])
            .arg(&json)
            .arg(&procs_json)
            .arg("--json")
            .arg(&merged),
    );
    assert_one_line_error(&out, "merge of failed runs");
    assert_eq!(out.status.code(), Some(3), "merged reports that counted errors exit 3");
    let m = read_json(&merged);
    assert_eq!((m["statuses"]["4xx"].as_u64(), m["errors"]["http_status"].as_u64()), (Some(20), Some(20)), "{m}");
    assert_eq!(m["statuses"]["codes"]["404"].as_u64(), Some(20), "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_report_has_blocks_only_for_what_ran_and_the_latency_stdev() {
    let echo = ServerProc::start("epoll", &["--proto", "echo"]);
    let udp = ServerProc::start("epoll", &["--proto", "udp"]);
    let http = ServerProc::start("epoll", &["--proto", "http"]);
    let dir = scratch("blocks");
    for (mode, target, absent, present) in [
        ("echo", echo.addr.to_string(), &["udp", "statuses"][..], &["connect_latency"][..]),
        ("udp", udp.addr.to_string(), &["statuses", "connect_latency"], &["udp"]),
        ("http", format!("http://{}/", http.addr), &["udp"], &["statuses", "connect_latency"]),
    ] {
        let json = dir.join(format!("{mode}.json"));
        let out = load(&[mode, &target, "-n", "20", "-c", "2", "-t", "1", "--json", json.to_str().unwrap()]);
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let r = read_json(&json);
        for key in absent {
            assert!(r.get(key).is_none(), "{mode}: a {key} block for what did not run: {}", r[key]);
        }
        for key in present {
            assert!(r.get(key).is_some(), "{mode}: no {key} block");
        }
        assert!(r["latency"]["stdev_us"].as_f64().is_some(), "{mode}: no latency stdev");
        assert!(stdout(&out).contains("stdev "), "{}", stdout(&out));
        if mode == "udp" {
            assert!(!stdout(&out).contains("  connect "), "UDP has no handshake to time: {}", stdout(&out));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rate_the_generator_cannot_reach_says_it_fell_short() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    // One connection, one message in flight: a million a second is out of reach.
    let out = load(&["echo", &server.addr.to_string(), "-c", "1", "-t", "1", "-d", "1", "-R", "1000000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stdout(&out);
    assert!(summary.contains("asked 1,000,000/s") && summary.contains("fell short"), "{summary}");
}

#[test]
fn sigint_ends_a_run_whose_stdout_is_a_closed_pipe() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    for extra in [&[][..], &["--procs", "2"]] {
        let mut child = Command::new(BIN)
            .args(["load", "echo", &server.addr.to_string(), "-d", "60", "-c", "4", "-t", "1"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        // Let the run start, then interrupt it.
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: kill only sends a signal to the child we started.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let ended = eventually(Duration::from_secs(20), || child.try_wait().unwrap().is_some());
        if !ended {
            let _ = child.kill();
        }
        let _ = child.wait();
        assert!(ended, "{extra:?}: load ignored SIGINT with its stdout closed");
    }
}

/// The percentile `q` of corrected latency when a server is paused for `pause_s` of a
/// constant-rate run of `duration_s`: the requests scheduled during the pause, a fraction
/// f = pause/duration, wait until it ends, uniformly from `pause_s` down to 0; the others wait
/// about nothing. So above 1 - f the percentile is pause * (q - (1 - f)) / f.
fn paused_percentile(q: f64, pause_s: f64, duration_s: f64) -> f64 {
    let f = pause_s / duration_s;
    (pause_s * (q - (1.0 - f)) / f).max(0.0)
}

/// The self-test of the correction for coordinated omission: a server stopped (SIGSTOP) for a
/// known time during an open-loop run; corrected p90, p99 and p99.9 match the analytic
/// percentiles within 2%, across two processes, while the uncorrected figures (what a
/// closed-loop tool shows) miss the pause almost entirely. `bench/pause_selftest.py` is the
/// same check with the numbers printed.
#[test]
fn a_paused_server_gives_the_analytic_percentiles_when_corrected() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let url = format!("http://{}/", server.addr);
    let dir = scratch("pause");
    let json = dir.join("run.json");
    let json_arg = json.to_str().unwrap().to_owned();
    let run = std::thread::spawn(move || {
        load(&["http", &url, "-c", "100", "-R", "2000", "-d", "6", "--procs", "2", "-t", "1", "--json", &json_arg])
    });
    std::thread::sleep(Duration::from_millis(2000));
    let stopped = Instant::now();
    server.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1800));
    server.signal(libc::SIGCONT);
    let pause_s = stopped.elapsed().as_secs_f64();
    let out = run.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let r = read_json(&json);
    let duration_s = r["duration_s"].as_f64().unwrap();
    let us = |block: &str, p: &str| r[block][p].as_f64().unwrap() / 1e6;
    for (q, key) in [(0.90, "p90_us"), (0.99, "p99_us"), (0.999, "p999_us")] {
        let want = paused_percentile(q, pause_s, duration_s);
        let got = us("latency", key);
        assert!(
            (got - want).abs() <= 0.02 * want,
            "corrected {key}: {got:.4} s, analytic {want:.4} s (pause {pause_s:.3} s of {duration_s:.3} s)"
        );
    }
    // Uncorrected, only the request in flight on each connection waited out the pause: 100
    // of about 12,000, under 1%, so p99 is far below the pause.
    assert!(us("latency_uncorrected", "p99_us") < 0.5 * pause_s, "{}", r["latency_uncorrected"]);
    assert!(
        us("schedule_slip", "max_us") > 0.9 * pause_s,
        "the sends due in the pause left late: {}",
        r["schedule_slip"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP server that answers every connection with `answer` once something arrives, and
/// closes.
fn answering_server(answer: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = [0u8; 4096];
                if matches!(read_some(&mut stream, &mut buf), Ok(n) if n > 0) {
                    let _ = stream.write_all(answer);
                }
                let _ = stream.shutdown(Shutdown::Both);
            });
        }
    });
    addr
}

#[test]
fn a_bad_response_shows_what_came_back() {
    let addr = answering_server(b"SSH-2.0-OpenSSH_9.2p1\r\nProtocol mismatch.\r\n");
    let dir = scratch("bad-response");
    let json = dir.join("r.json");
    let out = load(&["http", &format!("http://{addr}/"), "-d", "1", "-c", "1", "--json", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let summary = stdout(&out);
    let line = summary.lines().find(|l| l.contains("errors ")).unwrap_or_default();
    assert!(
        line.contains(r#"bad response "#)
            && line.contains(r#"(first: "SSH-2.0-OpenSSH_9.2p1\r\nProtocol mismatch.\r\n")"#),
        "{summary}"
    );
    assert_eq!(summary.matches("first:").count(), 1, "once a run: {summary}");
    let r = read_json(&json);
    assert!(r["errors"]["bad_response"].as_u64() > Some(0), "{r}");
    assert_eq!(r["first_bad_response"], r#"SSH-2.0-OpenSSH_9.2p1\r\nProtocol mismatch.\r\n"#, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plain_http_at_a_tls_port_fails_at_once_naming_https() {
    let cert = tls::TestCert::new("truth-tls-port");
    let args = cert.args();
    let tls_args = [args[0].as_str(), args[1].as_str(), args[2].as_str(), args[3].as_str()];
    let http = ServerProc::start("epoll", &[&["--proto", "http"][..], &tls_args].concat());
    let port = http.addr.port();
    let began = Instant::now();
    for (args, fix) in [
        (vec!["http".to_owned(), format!("http://127.0.0.1:{port}/")], format!("use https://127.0.0.1:{port}/")),
        (vec!["http".to_owned(), format!("http://localhost:{port}/a?b")], format!("use https://localhost:{port}/a?b")),
        (
            vec!["http".to_owned(), "--http2".to_owned(), format!("http://127.0.0.1:{port}/")],
            format!("use https://127.0.0.1:{port}/"),
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).chain(["-d", "30", "-c", "2"]).collect();
        let out = load(&args);
        let err = assert_one_line_error(&out, "plain HTTP at a TLS port");
        assert!(err.contains(&format!("this port speaks TLS: {fix}")), "{err}");
        assert_eq!(out.status.code(), Some(1), "{err}");
    }
    assert!(began.elapsed() < Duration::from_secs(20), "not fast: {:?}", began.elapsed());
}

#[test]
fn a_server_that_closes_without_a_word_is_told_apart_from_tls() {
    // Refuses plain bytes as a TLS server does, with a bare close, and answers a ClientHello
    // with a handshake record: TLS.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tls_like = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut first = [0u8; 1];
            if matches!(std::io::Read::read(&mut stream, &mut first), Ok(1)) && first[0] == 0x16 {
                let _ = stream.write_all(&[0x16, 0x03, 0x03, 0x00, 0x00]);
            }
            let _ = stream.shutdown(Shutdown::Both);
        }
    });
    let out = load(&["http", &format!("http://{tls_like}/"), "-d", "30", "-c", "1"]);
    let err = assert_one_line_error(&out, "a bare close at a TLS port");
    assert!(err.contains("this port speaks TLS"), "{err}");

    // Closes on everything, TLS or not: not called TLS; the run counts what happened.
    let closer = answering_server(b"");
    let out = load(&["http", &format!("http://{closer}/"), "-d", "1", "-c", "1"]);
    assert!(!stderr(&out).contains("TLS"), "{}", stderr(&out));
    assert!(stdout(&out).contains("closed by peer"), "{}", stdout(&out));
}

/// A report of a short run against a local server, to edit into others.
fn a_real_report(dir: &std::path::Path) -> serde_json::Value {
    let (addr, _) = http_server(200);
    let json = dir.join("real.json");
    let out = load(&[
        "http",
        &format!("http://{addr}/"),
        "-n",
        "200",
        "-c",
        "2",
        "-t",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    read_json(&json)
}

/// `report` with its measured window moved to start at `started` and to last `length`.
fn moved(report: &serde_json::Value, started: f64, length: f64, dir: &std::path::Path, name: &str) -> PathBuf {
    let mut r = report.clone();
    r["window"] = serde_json::json!({ "started_unix_s": started, "ended_unix_s": started + length });
    r["duration_s"] = serde_json::json!(length);
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
    path
}

fn merge(args: &[&std::ffi::OsStr]) -> Output {
    run_within(Duration::from_secs(30), Command::new(BIN).args(["load", "merge"]).args(args))
}

#[test]
fn merge_refuses_runs_made_apart_unless_asked_and_then_says_so() {
    let dir = scratch("disjoint");
    let real = a_real_report(&dir);
    let completed = real["requests"]["completed"].as_f64().unwrap();
    // 2026-11-26T18:00:00Z, and 140 s after the first run's end.
    let t0 = 1_795_716_000.0;
    let a = moved(&real, t0, 10.0, &dir, "a.json");
    let b = moved(&real, t0 + 150.0, 10.0, &dir, "b.json");
    let out = merge(&[a.as_os_str(), b.as_os_str()]);
    let err = assert_one_line_error(&out, "runs 140 s apart");
    assert_eq!(out.status.code(), Some(1), "as the other reports that do not belong together: {err}");
    for words in
        ["2026-11-26T18:00:00.000Z to 18:00:10.000Z", "2026-11-26T18:02:30.000Z to 18:02:40.000Z", "--allow-disjoint"]
    {
        assert!(err.contains(words), "{words} in {err}");
    }
    let merged = dir.join("merged.json");
    let out =
        merge(&[a.as_os_str(), b.as_os_str(), "--allow-disjoint".as_ref(), "--json".as_ref(), merged.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("windows do not overlap"), "{}", stdout(&out));
    let m = read_json(&merged);
    // Over the 20 s they ran: not 10 s as if side by side.
    assert_eq!(m["duration_s"].as_f64(), Some(20.0), "{m}");
    let rate = m["rates"]["requests_per_s"].as_f64().unwrap();
    assert!((rate - 2.0 * completed / 20.0).abs() < 1e-6, "{rate} {m}");
    assert_eq!(m["disjoint_windows"].as_array().map(Vec::len), Some(2), "{m}");

    // Started 4 ms apart (--start-at's skew): together, merged without a word.
    let c = moved(&real, t0 + 0.004, 10.0, &dir, "c.json");
    let out = merge(&[a.as_os_str(), c.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("overlap"), "{}", stdout(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The exit status of a run that counted errors (`RequestsFailed::EXIT`).
const ERRORS_EXIT: i32 = 3;

/// A TCP server that takes every connection and reads everything, answering with `greeting`
/// once (nothing, or an HTTP/2 SETTINGS frame) and never again.
fn silent_server(greeting: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut stream = stream;
                let _ = stream.write_all(greeting);
                let mut buf = [0u8; 65536];
                while matches!(read_some(&mut stream, &mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// An empty SETTINGS frame: all an HTTP/2 server must say before streams may open.
const EMPTY_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

/// A run whose requests are never answered fails: what was in flight when -d ended is waited
/// for (1 s here: nothing was ever answered), then counted as unanswered, by kind; never
/// "errors none" with nothing completed. Before, each of these said "errors none" and exited 0.
#[test]
fn a_server_that_never_answers_fails_the_run() {
    let tcp = silent_server(b"").to_string();
    let h2 = silent_server(EMPTY_SETTINGS).to_string();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_addr = udp.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while udp.recv(&mut buf).is_ok() {}
    });
    let dir = scratch("silent");
    let url = format!("http://{tcp}/");
    let h2_url = format!("http://{h2}/");
    let cases: [(&str, Vec<&str>, &str); 4] = [
        ("http", vec!["http", &url], "unanswered_waiting"),
        ("echo", vec!["echo", &tcp], "unanswered_waiting"),
        ("h2c", vec!["http", &h2_url, "--http2"], "unanswered_waiting"),
        ("udp", vec!["udp", &udp_addr], "lost"),
    ];
    for (name, target, kind) in cases {
        let json = dir.join(format!("{name}.json"));
        let mut args = target.clone();
        args.extend(["-c", "3", "-t", "1", "-d", "0.5", "--json", json.to_str().unwrap()]);
        let began = Instant::now();
        let out = load(&args);
        let summary = stdout(&out);
        assert_eq!(out.status.code(), Some(ERRORS_EXIT), "{name}: {summary}{}", stderr(&out));
        assert!(!summary.contains("errors       none"), "{name}: {summary}");
        assert!(summary.contains("at the end") && summary.contains("0 answered, 3 unanswered"), "{name}: {summary}");
        // The wait is bounded: 1 s when nothing was ever answered.
        assert!(began.elapsed() < Duration::from_secs(10), "{name} took {:?}", began.elapsed());
        let r = read_json(&json);
        let counted = if kind == "lost" { &r["udp"]["lost"] } else { &r["errors"][kind] };
        assert_eq!(counted.as_u64(), Some(3), "{name}: {r}");
        assert_eq!(r["at_end"]["unanswered"].as_u64(), Some(3), "{name}: {r}");
        assert_eq!(r["at_end"]["never_served"].as_u64(), Some(3), "{name}: {r}");
        let waited = r["at_end"]["waited_s"].as_f64().unwrap();
        assert!((0.9..3.0).contains(&waited), "{name}: waited {waited} s");
        if name != "udp" {
            assert!(summary.contains("unanswered at the end (nothing back) 3"), "{name}: {summary}");
        }
        // --allow-errors still exits 0, the errors still counted.
        args.push("--allow-errors");
        let out = load(&args);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert!(stdout(&out).contains("unanswered"), "{name}: {}", stdout(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that answers the first bytes of each connection with `answer`, then reads on
/// and says nothing more.
fn stalling_server(answer: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                if matches!(read_some(&mut stream, &mut buf), Ok(n) if n > 0) {
                    let _ = stream.write_all(answer);
                }
                while matches!(read_some(&mut stream, &mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// An answer cut off and a request the server does not read are told apart from nothing back.
#[test]
fn unanswered_requests_say_how_far_they_got() {
    // A head and part of the body, then silence.
    let cut_off = stalling_server(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart of it");
    let out = load(&["http", &format!("http://{cut_off}/"), "-c", "2", "-t", "1", "-d", "0.3"]);
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(ERRORS_EXIT), "{summary}{}", stderr(&out));
    assert!(summary.contains("unanswered at the end (answer cut off) 2"), "{summary}");
    // A server that accepts and never reads: a 64 MiB message fills its receive buffer and
    // this side's send buffer (a few MiB each) long before it is all sent.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let out = load(&["echo", &addr.to_string(), "-c", "1", "-t", "1", "-d", "0.3", "-l", "64MiB"]);
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(ERRORS_EXIT), "{summary}{}", stderr(&out));
    assert!(summary.contains("not all sent: the server stopped reading) 1"), "{summary}");
}

/// A healthy server answers what is in flight when -d ends: the run waits for those answers
/// (a moment), counts them, and passes.
#[test]
fn requests_in_flight_when_a_healthy_run_ends_are_answered_and_it_passes() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let dir = scratch("healthy-end");
    let json = dir.join("r.json");
    let url = format!("http://{}/", server.addr);
    for extra in [&[][..], &["--http2"][..], &["--no-keepalive"][..]] {
        let mut args = vec!["http", &url, "-c", "20", "-t", "1", "-d", "0.5", "--json", json.to_str().unwrap()];
        args.extend(extra);
        let out = load(&args);
        let summary = stdout(&out);
        assert!(out.status.success(), "{extra:?}: {summary}{}", stderr(&out));
        assert!(summary.contains("errors       none"), "{extra:?}: {summary}");
        // What was in flight (the last iteration may have seen every answer) was answered.
        let r = read_json(&json);
        let at_end = &r["at_end"];
        assert_eq!(at_end["unanswered"].as_u64().unwrap_or(0), 0, "{extra:?}: {r}");
        assert_eq!(at_end["answered"], at_end["in_flight"], "{extra:?}: {r}");
    }
    // A slow but healthy server (200 ms an answer): its last answers come after -d, within
    // the wait, and count; the rate over -d leaves them out.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let slow = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                while matches!(read_some(&mut stream, &mut buf), Ok(n) if n > 0) {
                    std::thread::sleep(Duration::from_millis(200));
                    if stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                        break;
                    }
                }
            });
        }
    });
    let out = load(&[
        "http",
        &format!("http://{slow}/"),
        "-c",
        "5",
        "-t",
        "1",
        "-d",
        "0.5",
        "--json",
        json.to_str().unwrap(),
    ]);
    let summary = stdout(&out);
    assert!(out.status.success(), "{summary}{}", stderr(&out));
    assert!(summary.contains("errors       none"), "{summary}");
    let r = read_json(&json);
    let at_end = &r["at_end"];
    assert_eq!((at_end["in_flight"].as_u64(), at_end["answered"].as_u64()), (Some(5), Some(5)), "{r}");
    let waited = at_end["waited_s"].as_f64().unwrap();
    assert!((0.01..0.5).contains(&waited), "waited {waited} s for answers due within 0.2 s: {r}");
    let completed = r["requests"]["completed"].as_f64().unwrap();
    let over_d = r["rates"]["requests_per_s"].as_f64().unwrap() * r["duration_s"].as_f64().unwrap();
    assert!((over_d - (completed - 5.0)).abs() < 0.5, "the rate counts {over_d} of {completed}: {r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The issue's run at a small scale: a server at its open-files limit (64) takes connections
/// into its accept queue and never serves them. Those are errors, and the run fails; before,
/// it said "errors none" and exited 0.
#[test]
fn connections_a_server_at_its_limit_never_serves_are_errors() {
    let server = ServerProc::start_limited("epoll", &["--proto", "echo"], Some(64));
    let dir = scratch("never-served");
    let json = dir.join("r.json");
    let out = load(&[
        "echo",
        &server.addr.to_string(),
        "-c",
        "300",
        "-t",
        "1",
        "-d",
        "0.5",
        "--json",
        json.to_str().unwrap(),
    ]);
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(ERRORS_EXIT), "{summary}{}", stderr(&out));
    assert!(summary.contains("never answered at all"), "{summary}");
    let r = read_json(&json);
    assert!(r["requests"]["completed"].as_u64().unwrap() > 0, "the first 50 or so were served: {r}");
    let never = r["at_end"]["never_served"].as_u64().unwrap();
    assert!(never >= 200, "300 connections, the server held fewer than 64 descriptors: {r}");
    assert!(r["errors"]["unanswered_waiting"].as_u64().unwrap() >= never, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A listener with an accept queue of `backlog` that never accepts: once the queue is full,
/// the kernel drops new SYNs and their connects stay in progress.
fn never_accepting(backlog: i32) -> (socket2::Socket, SocketAddr) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
    socket.listen(backlog).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    (socket, addr)
}

/// Connections asked for and never opened are counted with the limit that held them back;
/// connects still in progress at the end are errors.
#[test]
fn connections_never_opened_are_explained() {
    // 700 on one thread: 8 fill the queue, 512 connects stay in progress (the most a thread
    // keeps), the other 180 are never attempted.
    let (_listener, addr) = never_accepting(8);
    let dir = scratch("unopened");
    let json = dir.join("r.json");
    let out = load(&["echo", &addr.to_string(), "-c", "700", "-t", "1", "-d", "0.5", "--json", json.to_str().unwrap()]);
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(ERRORS_EXIT), "{summary}{}", stderr(&out));
    assert!(
        summary.contains("of the 700 asked (-c) never attempted")
            && summary.contains("connects per thread still in progress"),
        "{summary}"
    );
    assert!(summary.contains("connect unfinished at the end"), "{summary}");
    let r = read_json(&json);
    let c = &r["connections"];
    assert_eq!(c["asked"].as_u64(), Some(700), "{r}");
    let never = c["never_attempted"]["pending_connects"].as_u64().unwrap_or(0);
    assert!(never > 0, "{r}");
    // Every connection asked for is attempted or explained.
    let attempted_first = c["attempted"].as_u64().unwrap() - c["retries"].as_u64().unwrap_or(0);
    assert_eq!(attempted_first + never, 700, "{r}");
    assert!(r["errors"]["connect_unfinished"].as_u64().unwrap() >= 500, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ports warning of a --procs run is printed once, by the parent, not again by every
/// process (the issue's run printed it four times with --procs 3).
#[test]
fn a_procs_run_gives_its_warning_once() {
    raise_nofile();
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let bounds: Vec<u64> = range.split_whitespace().map(|p| p.parse().unwrap()).collect();
    let ports = bounds[1] - bounds[0] + 1;
    // Just past what one source address holds cheaply (half the range, less a tenth), so the
    // crowded-ports warning speaks.
    let conns = ports / 2 * 9 / 10 + 2;
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the rlimit we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
    if rl.rlim_max != libc::RLIM_INFINITY && rl.rlim_max < conns / 2 + 100 {
        eprintln!("skipped: the open-files hard limit {} is below {} for each of 2 processes", rl.rlim_max, conns / 2);
        return;
    }
    // A queue that never empties: the run is short and cheap (a thread keeps at most 512
    // connects in progress). A child's probe may find the queue full: the warning comes before.
    let (_listener, addr) = never_accepting(64);
    let conns = conns.to_string();
    let mut cmd = Command::new(BIN);
    cmd.args(["load", "echo", &addr.to_string(), "-c", &conns, "--procs", "2", "-t", "1", "-d", "0.3"])
        .args(["--connect-timeout", "1"])
        .env("RUST_LOG", "warn");
    let out = run_within(Duration::from_secs(60), &mut cmd);
    let err = stderr(&out);
    assert_eq!(err.matches("connections per source address").count(), 1, "{err}{}", stdout(&out));
    assert!(!out.status.success(), "nothing was served: {err}");
}
