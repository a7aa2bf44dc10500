//! The command line as a user meets it: one clear line and a non-zero exit for every mistake,
//! and the observability flags doing what they say.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Run `sockscale ARGS`, expecting failure; returns (exit code, stderr).
fn fails(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).args(args).env("RUST_LOG", "off").output().expect("run sockscale");
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout: {}", String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// As `fails`, for arguments a broken build might accept and serve with: a process still
/// running after 10 s is killed and the test fails, instead of waiting forever.
fn fails_quickly(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sockscale");
    let until = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > until {
            // `serve --procs` workers have their own process groups and hold our stderr pipe:
            // they go too, or reading the output would wait for them.
            let workers = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()));
            for pid in workers.unwrap_or_default().split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill has no memory arguments; these are our child's children.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{args:?} was accepted: still running after 10 s; stdout: {}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout: {}", String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    lines[0]
}

#[test]
fn bad_flags_get_one_line_naming_them() {
    let (code, err) = fails(&["serve", "--no-such-flag"]);
    assert_eq!(code, 2);
    assert!(one_line(&err).contains("--no-such-flag"), "{err}");
    let (_, err) = fails(&["serve", "--threads", "many"]);
    assert!(one_line(&err).contains("--threads"), "{err}");
    let (_, err) = fails(&["serve", "--model", "carrier-pigeon"]);
    assert!(one_line(&err).contains("carrier-pigeon") && err.contains("epoll"), "{err}");
    let (_, err) = fails(&["serve", "--buffer-size", "5000"]);
    assert!(one_line(&err).contains("--buffer-size 5000"), "{err}");
    let (_, err) = fails(&["serve", "--max-pending-send", "lots"]);
    assert!(one_line(&err).contains("--max-pending-send"), "{err}");
    let (_, err) = fails(&["serve", "--threads", "0"]);
    assert!(one_line(&err).contains("--threads"), "{err}");
}

/// The WebSocket flags: a bad value, a protocol without WebSocket, deflate's shape without it.
#[test]
fn websocket_flags_get_one_line_naming_them() {
    let (code, err) = fails(&["serve", "--proto", "ws", "--ws-deflate-window", "16"]);
    assert_eq!(code, 2);
    assert!(one_line(&err).contains("--ws-deflate-window"), "{err}");
    let (_, err) = fails(&["serve", "--proto", "echo", "--ws-deflate-takeover", "off"]);
    assert!(one_line(&err).contains("--ws-deflate-takeover applies to --proto ws"), "{err}");
    let (_, err) = fails(&["serve", "--proto", "ws", "--ws-deflate", "off", "--ws-deflate-window", "10"]);
    assert!(one_line(&err).contains("--ws-deflate-window shapes permessage-deflate"), "{err}");
    let (_, err) = fails(&["serve", "--proto", "ws", "--ws-max-message", "0"]);
    assert!(one_line(&err).contains("--ws-max-message 0"), "{err}");
}

/// Run `sockscale ARGS`, expecting success; returns stdout.
fn succeeds(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).env("RUST_LOG", "off").output().expect("run sockscale");
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Every model's name, as `sockscale models --json` lists them: the tests follow the table, so a
/// new model is checked here without an edit.
fn model_names() -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(&succeeds(&["models", "--json"])).expect("JSON");
    let models = json.as_array().expect("an array");
    models.iter().map(|m| m["name"].as_str().expect("a name").to_owned()).collect()
}
const URING64_NO_UDP: &str = "a UDP socket is one descriptor: there are no connections to put in groups of 64";

/// The policies each model cannot honour, in the capability data's order.
fn cannot(model: &str) -> &'static [&'static str] {
    match model {
        "blocking" | "threadpool" | "poll64" => &["active-set"],
        "signal" => &["abort-storm-shed"],
        "uring64" => &["active-set", "udp", "http3"],
        _ => &[],
    }
}

#[test]
fn an_unknown_model_gets_one_line_listing_the_valid_names() {
    let (code, err) = fails(&["serve", "--model", "x"]);
    assert_eq!(code, 2);
    let line = one_line(&err);
    assert!(line.contains("'x'") && line.contains("--model"), "{line}");
    let listed = line.split_once("expected one of: ").map(|(_, names)| names).unwrap_or_default();
    assert_eq!(listed, format!("{})", model_names().join(", ")), "{line}");
}

#[test]
fn serve_help_names_every_model_and_what_it_cannot_do() {
    let help = succeeds(&["serve", "--help"]);
    // One entry per model under --model's possible values, each saying what it cannot honour.
    let entries: Vec<String> = help
        .split("\n          - ")
        .skip(1)
        .map(|entry| entry.split("\n\n").next().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for model in model_names() {
        let model = model.as_str();
        let entry = entries
            .iter()
            .find(|e| e.starts_with(&format!("{model}: ")))
            .unwrap_or_else(|| panic!("serve --help has no line for {model}:\n{help}"));
        match cannot(model) {
            [] => assert!(entry.contains("honours every policy"), "{entry}"),
            policies => {
                let first = policies[0];
                assert!(entry.contains(&format!("; cannot: {first} (")), "{entry}");
                for policy in &policies[1..] {
                    assert!(entry.contains(&format!("), {policy} (")), "{entry}");
                }
            }
        }
        if model == "uring64" {
            assert!(entry.contains(&format!("udp ({URING64_NO_UDP})")), "{entry}");
        }
        // A model with a ceiling of its own says so beside its policies.
        let ceiling = "at most 1024 descriptors per process (FD_SETSIZE)";
        assert_eq!(entry.contains(ceiling), model == "select", "{entry}");
    }
    assert!(help.contains("sockscale models"), "--model's help should point to sockscale models");
}

#[test]
fn models_lists_every_model_with_what_it_cannot_do() {
    let text = succeeds(&["models"]);
    // The summary table: a row per model, UDP "no" for uring64 only, and what it cannot honour.
    let names = model_names();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).take(names.len()).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), names.len(), "{text}");
    for (row, model) in rows.iter().zip(names.iter().map(String::as_str)) {
        assert_eq!(row[0], model, "{text}");
        // The last columns: UDP, cannot honour (one or more words), available here.
        let available = row[row.len() - 1];
        let udp_at = row[..row.len() - 1].iter().rposition(|c| *c == "yes" || *c == "no");
        let Some(udp_at) = udp_at else { panic!("{model}: {row:?}") };
        let cannot_cell = row[udp_at + 1..row.len() - 1].join(" ");
        let expected = if cannot(model).is_empty() { "—".to_owned() } else { cannot(model).join(", ") };
        assert_eq!(
            (row[udp_at], cannot_cell.as_str()),
            (if model == "uring64" { "no" } else { "yes" }, expected.as_str()),
            "{model}: {row:?}"
        );
        assert!(available == "yes" || available == "no", "{model}: {row:?}");
    }
    // The details, with the reason.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&format!("udp: {URING64_NO_UDP}")), "{text}");
    let honour_all = names.iter().filter(|m| cannot(m).is_empty()).count();
    assert_eq!(flat.matches("cannot honour: nothing: every policy is honoured").count(), honour_all, "{text}");
    for field in ["seed counterpart", "threads", "waits:", "known limits:", "available here"] {
        assert!(text.contains(field), "sockscale models lacks {field}:\n{text}");
    }

    let json: serde_json::Value = serde_json::from_str(&succeeds(&["models", "--json"])).expect("JSON");
    let models = json.as_array().expect("an array");
    let library: Vec<&str> = sockscale_server::Model::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(names, library, "the binary lists the library's models, in order");
    for m in models {
        let name = m["name"].as_str().unwrap_or_default();
        // The family is where the model's file lives: the layout and the data agree.
        let family = m["family"].as_str().unwrap_or_default();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/src/");
        let file =
            if family == "runtime" { format!("{dir}runtime/mod.rs") } else { format!("{dir}{family}/{name}.rs") };
        assert!(std::path::Path::new(&file).is_file(), "{name} is a {family} model, but {file} does not exist");
        assert_eq!(m["udp"], name != "uring64", "{m}");
        let listed: Vec<&str> = m["cannot_honour"]
            .as_array()
            .expect("cannot_honour")
            .iter()
            .map(|c| c["policy"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(listed, cannot(name), "{m}");
        if name == "uring64" {
            assert_eq!(m["cannot_honour"][1], serde_json::json!({ "policy": "udp", "why": URING64_NO_UDP }));
        }
        assert!(m["available"].is_boolean() && m["known_limits"].is_array() && m["waits"].is_string(), "{m}");
        assert_eq!(m["available"], m["unavailable"].is_null(), "{m}");
    }
}

#[test]
fn the_docs_models_table_is_the_codes() {
    let table = succeeds(&["models", "--markdown"]);
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/models.md")).expect("docs/models.md");
    assert!(
        page.contains(table.trim_end()),
        "docs/models.md's models table differs from `sockscale models --markdown`; paste this in:\n{table}"
    );
}

#[test]
fn busy_port_names_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = fails(&["serve", "--listen", &addr]);
    assert_ne!(code, 0);
    assert_eq!(one_line(&err), format!("error: cannot listen on {addr}: address already in use"));
    let (_, err) = fails(&["serve", "--listen", "127.0.0.1:0", "--metrics", &addr]);
    assert!(one_line(&err).contains(&format!("--metrics on {addr}")), "{err}");
}

#[test]
fn unreadable_body_names_the_file() {
    let (_, err) = fails(&["serve", "--proto", "http", "--body", "/nonexistent/page.html"]);
    assert!(one_line(&err).contains("--body /nonexistent/page.html"), "{err}");
}

/// The certificate is read when the server starts, in a `--procs` parent before any worker:
/// one line naming the file either way.
#[test]
fn an_unreadable_certificate_names_the_file() {
    let tls = ["--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"];
    for procs in ["1", "2"] {
        let (_, err) = fails_quickly(&[&["serve", "--listen", "127.0.0.1:0", "--procs", procs][..], &tls].concat());
        assert!(one_line(&err).contains("/nonexistent/cert.pem: cannot read it"), "--procs {procs}: {err}");
    }
}

#[test]
fn lock_memory_beyond_rlimit_says_so() {
    // Root may lock any amount, so drop to nobody with a 64 KiB RLIMIT_MEMLOCK when we can.
    let have = |tool: &str| {
        Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
    };
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 && !(have("setpriv") && have("prlimit")) {
        eprintln!("skipped: running as root without setpriv/prlimit to drop the privilege to lock memory");
        return;
    }
    let mut cmd = Command::new("prlimit");
    cmd.arg("--memlock=65536:65536");
    // SAFETY: as above.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]);
    }
    let out = cmd
        .args([BIN, "serve", "--listen", "127.0.0.1:0", "--lock-memory", "--pool-buffers", "64", "--threads", "1"])
        .env("RUST_LOG", "off")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line = one_line(&err);
    assert!(line.contains("--lock-memory") && line.contains("RLIMIT_MEMLOCK allows 65536 bytes"), "{line}");
}

#[test]
fn help_documents_every_policy_flag() {
    let out = Command::new(BIN).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--model",
        "--threads",
        "--proto",
        "--read-budget",
        "--max-conns",
        "--backlog",
        "--accept-batch",
        "--idle-timeout",
        "--header-timeout",
        "--max-pending-send",
        "--send-timeout",
        "--buffer-size",
        "--lock-memory",
        "--sndbuf",
        "--rcvbuf",
        "--nodelay",
        "--stats-interval",
        "--metrics",
        "--drain-timeout",
        "--body",
        "--max-header-bytes",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}");
    }
}

/// One GET of `path` on the metrics endpoint, which answers and closes: the whole response.
fn scrape(metrics: std::net::SocketAddr, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(metrics).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: m\r\n\r\n").as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn metrics_and_stats_report_the_counters() {
    let metrics_port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut server = ServerProc::start(
        "epoll",
        &["--proto", "echo", "--metrics", &metrics_port.to_string(), "--stats-interval", "0.2"],
    );
    let mut c = server.connect();
    c.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    c.read_exact(&mut b).unwrap();

    let text = scrape(metrics_port, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.contains("# TYPE sockscale_accepted_total counter\nsockscale_accepted_total 1\n"), "{text}");
    assert!(text.contains("sockscale_connections 1\n"), "{text}");
    assert!(text.contains("sockscale_received_bytes_total 5\n"), "{text}");
    assert!(text.contains("sockscale_closed_total{reason=\"idle\"} 0\n"), "{text}");

    let text = scrape(metrics_port, "/other");
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");

    // A scraper that connects and sends nothing, and one that trickles its request, delay no
    // other scrape (they were answered one at a time: each held the next for its read timeout);
    // each is cut off at the scrape deadline.
    let silent = std::net::TcpStream::connect(metrics_port).unwrap();
    let mut trickle = std::net::TcpStream::connect(metrics_port).unwrap();
    trickle.write_all(b"GET /met").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let began = std::time::Instant::now();
    let text = scrape(metrics_port, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    let took = began.elapsed();
    assert!(took < Duration::from_millis(1000), "a scrape behind a silent one took {took:?}");
    for mut stalled in [silent, trickle] {
        stalled.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let began = std::time::Instant::now();
        let mut rest = Vec::new();
        let _ = stalled.read_to_end(&mut rest);
        let took = began.elapsed();
        assert!(rest.is_empty() && took < Duration::from_millis(4500), "closed at the deadline: {took:?} {rest:?}");
    }

    // The stats thread prints every 0.2 s from the start; a line taken before the accept says
    // accepted=0, so the test waits for one that counts the connection (instead of sleeping
    // for what would usually be two intervals: a starved thread may not have printed by then).
    let stats_line = |l: &str| l.starts_with("stats accepted=1 ");
    assert!(server.wait_for_line(Duration::from_secs(10), stats_line), "no stats line counts the connection");
    drop(c);
    // The client's FIN reaches the server's worker some time after `drop` returns (later still
    // on a loaded machine). A SIGTERM that gets there first starts the drain, which closes the
    // idle connection as `shutdown`, rightly: the server has not seen the peer close. So the
    // peer's close is awaited, as the metrics report it, before the server is stopped.
    let mut last = String::new();
    let seen = eventually(Duration::from_secs(10), || {
        last = scrape(metrics_port, "/metrics");
        last.contains("sockscale_closed_total{reason=\"peer\"} 1\n")
    });
    assert!(seen, "the client's close was never counted as the peer's: {last}");
    let done = server.stop();
    assert!(done.stdout.iter().any(|l| stats_line(l)), "{:?}", done.stdout);
    assert_eq!(done.counter("closed_peer"), 1, "{:?}", done.stdout);
}

#[test]
fn zero_and_negative_durations_are_refused_naming_the_flag() {
    for flag in [
        "--stats-interval",
        "--idle-timeout",
        "--send-timeout",
        "--header-timeout",
        "--drain-timeout",
        "--first-data-timeout",
        "--defer-accept",
    ] {
        for value in ["0", "0ms", "-1"] {
            if flag == "--drain-timeout" && value != "-1" {
                continue; // 0 has a meaning there: close every connection at once
            }
            let (code, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--proto", "http", flag, value]);
            assert_eq!(code, 2, "{flag} {value}: {err}");
            let why = if value.starts_with('-') { "must not be negative" } else { "must be longer than zero" };
            assert_eq!(
                one_line(&err),
                format!("error: invalid value '{value}' for '{flag} <SECS>': {why} (e.g. 10, 0.5 or 500ms)")
            );
        }
    }
    let help = succeeds(&["serve", "--help"]).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("; 0 closes every connection at once"), "--drain-timeout's help should say what 0 does");
}

/// A policy for TCP connections asked of a UDP server is refused, not silently ignored.
#[test]
fn connection_policies_are_refused_for_udp_in_one_line() {
    for flag in ["--first-data-timeout", "--defer-accept", "--abort-storm"] {
        let (code, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--proto", "udp", flag, "1"]);
        assert_ne!(code, 0);
        assert_eq!(one_line(&err), format!("error: {flag} applies to TCP connections, and --proto udp has none"));
    }
}

/// The abort-storm flags: a rate and a threshold of at least 1, and the threshold only with a
/// rate.
#[test]
fn abort_storm_flags_are_checked_in_one_line() {
    let (code, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--abort-storm-resume", "5"]);
    assert_ne!(code, 0);
    assert_eq!(one_line(&err), "error: --abort-storm-resume needs --abort-storm RATE");
    for (flag, other) in [("--abort-storm", "--abort-storm-resume"), ("--abort-storm-resume", "--abort-storm")] {
        let (code, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", other, "10", flag, "0"]);
        assert_eq!(code, 2, "{flag} 0: {err}");
        assert!(one_line(&err).starts_with(&format!("error: invalid value '0' for '{flag} ")), "{err}");
    }
}

#[test]
fn a_zero_drain_timeout_closes_at_once() {
    let server = ServerProc::start("epoll", &["--drain-timeout", "0"]);
    let _client = server.connect();
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
}

#[test]
fn meaningless_zeros_on_serve_are_refused_naming_the_flag() {
    for flag in [
        "--threads",
        "--max-conns",
        "--backlog",
        "--accept-batch",
        "--read-budget",
        "--max-pending-send",
        "--pool-buffers",
        "--max-outstanding-sends",
        "--queue-depth",
        "--stack-size",
        "--sndbuf",
        "--rcvbuf",
    ] {
        let (_, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", flag, "0"]);
        assert_eq!(one_line(&err), format!("error: {flag} must be at least 1"));
    }
    let (code, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--procs", "0"]);
    assert_eq!(code, 2);
    assert_eq!(one_line(&err), "error: invalid value '0' for '--procs <N>': 0 is not in 1..=65535");
}

#[test]
fn invalid_values_get_one_line_listing_the_valid_ones() {
    for (args, listed) in [
        (&["serve", "--proto", "ftp"][..], "echo, http, udp, ws"),
        (&["serve", "--listener", "shared"][..], "reuseport, exclusive"),
        (&["bench", "--profile", "huge"][..], "tiny, quick, default, full"),
    ] {
        let (code, err) = fails_quickly(args);
        assert_eq!(code, 2);
        let line = one_line(&err);
        assert!(line.contains(&format!("'{}'", args[2])) && line.contains(args[1]), "{line}");
        assert!(line.contains(&format!("[possible values: {listed}]")), "{line}");
    }
    // What clap puts under its message stays on the one line too.
    let (_, err) = fails_quickly(&["report"]);
    assert_eq!(one_line(&err), "error: the following required arguments were not provided: <RESULTS>");
    let (_, err) = fails_quickly(&["serve", "--thread", "2"]);
    assert!(one_line(&err).contains("a similar argument exists: '--threads'"), "{err}");
}

/// The OS's text of `errno`, as io::Error prints it.
fn os_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// `line` carries the OS error text exactly once.
fn says_once(line: &str, errno: i32) {
    let text = os_text(errno);
    assert_eq!(line.matches(&text).count(), 1, "{text:?} should appear once in: {line}");
}

#[test]
fn os_errors_are_printed_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (_, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--metrics", &addr]);
    says_once(one_line(&err), libc::EADDRINUSE);
    // 192.0.2.0/24 is TEST-NET-1: no interface has it.
    let (_, err) = fails_quickly(&["serve", "--listen", "192.0.2.1:8080"]);
    says_once(one_line(&err), libc::EADDRNOTAVAIL);
    let (_, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--proto", "http", "--body", "/nonexistent/x"]);
    says_once(one_line(&err), libc::ENOENT);
    let (_, err) = fails_quickly(&["report", "/nonexistent/results.json"]);
    says_once(one_line(&err), libc::ENOENT);
    let (_, err) = fails_quickly(&["load", "merge", "/nonexistent/a.json", "/nonexistent/b.json"]);
    says_once(one_line(&err), libc::ENOENT);
}

#[test]
fn a_closed_output_pipe_never_stops_shutdown() {
    // stdout and stderr on one pipe, as `serve 2>&1 | head -n1`; sh execs the server in place.
    let mut child = Command::new("sh")
        .args(["-c", &format!("exec {BIN} serve --listen 127.0.0.1:0 --stats-interval 0.05 2>&1")])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sockscale");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("first line");
    assert!(first.starts_with("listening on "), "{first}");
    drop(out); // `head -n1` exits: every later write meets a closed pipe
               // SAFETY: kill has no memory arguments; the pid is our live child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let until = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve ignored SIGINT once its output pipe was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn procs_metrics_ports_are_checked_and_port_zero_stays_free() {
    let (_, err) = fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--procs", "2", "--metrics", "127.0.0.1:65535"]);
    let line = one_line(&err);
    assert!(line.contains("--metrics 127.0.0.1:65535") && line.contains("past 65535"), "{line}");

    // Port 0: every worker picks a free port of its own (not port 0 + K).
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--threads", "1", "--procs", "2", "--metrics", "127.0.0.1:0"])
        .env("RUST_LOG", "info");
    let server = ServerProc::spawn(cmd);
    let done = server.stop();
    let ports: Vec<u16> = done
        .stderr
        .lines()
        .filter_map(|l| l.split_once("metrics at http://127.0.0.1:"))
        .filter_map(|(_, rest)| rest.split('/').next()?.parse().ok())
        .collect();
    assert_eq!(ports.len(), 2, "{}", done.stderr);
    assert!(ports.iter().all(|&p| p >= 1024), "{ports:?}");
}

#[test]
fn a_procs_worker_that_cannot_start_ends_the_run() {
    // Worker 1's metrics port is taken: it can never start, so restarting it cannot help.
    // Worker 0's (the port below) must be free: tests running beside this one hold ports too,
    // so take a port whose neighbour below could be bound a moment ago.
    let (taken, port) = (0..50)
        .find_map(|_| {
            let taken = TcpListener::bind("127.0.0.1:0").ok()?;
            let port = taken.local_addr().ok()?.port();
            TcpListener::bind(("127.0.0.1", port.checked_sub(1)?)).ok()?;
            Some((taken, port))
        })
        .expect("a free port with a free port below it");
    let metrics = format!("127.0.0.1:{}", port - 1);
    let (_, err) =
        fails_quickly(&["serve", "--listen", "127.0.0.1:0", "--threads", "1", "--procs", "2", "--metrics", &metrics]);
    assert!(err.contains(&format!("cannot serve --metrics on 127.0.0.1:{port}")), "{err}");
    assert!(err.lines().last().is_some_and(|l| l.contains("worker 1 of 2 exited before it was serving")), "{err}");
    drop(taken);
}

#[test]
fn a_port_held_by_another_serve_is_refused() {
    for proto in ["echo", "udp"] {
        let first = ServerProc::start("epoll", &["--proto", proto]);
        let addr = first.addr.to_string();
        let (code, err) = fails_quickly(&["serve", "--proto", proto, "--listen", &addr]);
        assert_ne!(code, 0);
        assert_eq!(one_line(&err), format!("error: cannot listen on {addr}: address already in use"));
        first.stop();
    }
}

/// `--listen unix:PATH` and `load --unix-socket` mistakes: one line naming the cause, non-zero.
#[test]
fn unix_socket_mistakes_get_one_line_naming_them() {
    let dir = std::env::temp_dir().join(format!("sockscale-cli-uds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plain");
    std::fs::write(&file, b"not a socket").unwrap();
    let at = |path: &std::path::Path| format!("unix:{}", path.display());
    let sock = at(&dir.join("s.sock"));
    let long = format!("unix:/tmp/{}", "l".repeat(110));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--listen", &long], "at most 107"),
        (vec!["--listen", "unix:"], "needs a path"),
        (vec!["--listen", "unixgram:/tmp/x.sock"], "not served"),
        (vec!["--listen", &sock, "--proto", "udp"], "--proto udp"),
        (vec!["--listen", &sock, "--defer-accept", "1"], "TCP_DEFER_ACCEPT"),
        (vec!["--listen", &sock, "--sndbuf", "64KiB"], "--sndbuf does not apply"),
        (vec!["--listen", &sock, "--no-nodelay"], "TCP_NODELAY"),
        (vec!["--listen", "127.0.0.1:0", "--unix-mode", "0600"], "needs --listen unix:PATH"),
        (vec!["--listen", &sock, "--unix-mode", "0800"], "not a permission mode"),
    ];
    for (args, says) in &cases {
        let (_, err) = fails_quickly(&[&["serve"], &args[..]].concat());
        assert!(one_line(&err).contains(says), "{args:?}: {err}");
    }
    let (_, err) = fails_quickly(&["serve", "--listen", &at(&file)]);
    assert!(one_line(&err).contains("is not a socket but a regular file"), "{err}");
    let (_, err) = fails_quickly(&["serve", "--listen", &at(&file.join("s.sock"))]);
    assert!(one_line(&err).contains("not a directory"), "{err}");
    let (_, err) = fails_quickly(&["serve", "--listen", &at(&dir.join("missing/s.sock"))]);
    assert!(one_line(&err).contains("its directory does not exist"), "{err}");
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let locked = dir.join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let (_, err) = fails_quickly(&["serve", "--listen", &at(&locked.join("s.sock"))]);
        assert!(one_line(&err).contains("needs write and search permission"), "{err}");
    } else {
        eprintln!("not checked: an unwritable directory (root writes anywhere)");
    }
    let missing = dir.join("nobody.sock");
    let (code, err) = fails(&["load", "http", "http://localhost/", "--unix-socket", missing.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(one_line(&err).contains("is the server running?"), "{err}");
    let (_, err) = fails(&["load", "echo", "--unix-socket", missing.to_str().unwrap(), "--source", "127.0.0.1"]);
    assert!(one_line(&err).contains("--source does not apply to --unix-socket"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// h2load's `-m 16` (streams) sent the method "16" (`16 / HTTP/1.1` on the wire) and ran one
/// stream; a method that is no HTTP token went out as it was.
#[test]
fn a_method_that_is_a_number_or_no_token_is_refused_in_one_line() {
    // A port nothing listens on: a method that got through would fail to connect, exit 1.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{closed}/");
    let (code, err) = fails(&["load", "http", &url, "-n", "1", "-m", "16"]);
    assert_eq!(code, 2, "{err}");
    assert!(one_line(&err).contains("did you mean --pipeline 16? (-m is the method here, as in oha)"), "{err}");
    for bad in ["GE T", "GET\r\nX: 1", "GET\t", ""] {
        let (code, err) = fails(&["load", "http", &url, "-n", "1", "--method", bad]);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(one_line(&err).contains("not an HTTP method: give a token such as GET"), "{bad:?}: {err}");
    }
}

/// An unknown host was "cannot resolve 'h:80' (expected HOST:PORT)", as if the form were wrong.
#[test]
fn targets_name_an_unknown_host_and_say_what_form_is_expected() {
    for args in [
        &["load", "http", "http://nosuchhost.invalid/", "-n", "1"][..],
        &["load", "http", "https://nosuchhost.invalid:8443/x", "-n", "1", "-k"],
        &["load", "echo", "nosuchhost.invalid:7", "-n", "1"],
        &["load", "udp", "nosuchhost.invalid:7", "-n", "1"],
    ] {
        let (code, err) = fails(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        let line = one_line(&err);
        assert!(line.contains("cannot resolve host 'nosuchhost.invalid': "), "{args:?}: {line}");
        assert!(!line.contains("expected HOST:PORT"), "{args:?}: {line}");
    }
    for (args, says) in [
        (&["load", "echo", "127.0.0.1", "-n", "1"][..], "'127.0.0.1' has no port: give HOST:PORT"),
        (&["load", "udp", "localhost", "-n", "1"], "'localhost' has no port: give HOST:PORT"),
        (&["load", "echo", "127.0.0.1:http", "-n", "1"], "'http' is not a number from 1 to 65535"),
        (&["load", "echo", "::1:7", "-n", "1"], "IPv6 address without brackets"),
        (&["load", "http", "127.0.0.1:8080/", "-n", "1"], "is not a URL: give http://HOST[:PORT]/PATH"),
        (&["load", "http", "http://127.0.0.1:0/", "-n", "1"], "'0' is not a number from 1 to 65535"),
    ] {
        let (_, err) = fails(args);
        assert!(one_line(&err).contains(says), "{args:?}: {err}");
    }
}

/// `serve` listening as `ADDR` with the short flags, its "listening on" address, and an echo
/// through it (to `connect_to`, on the port it printed).
fn serve_at(listen: &str, connect_to: std::net::IpAddr) -> std::net::SocketAddr {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "-l", listen, "-p", "echo", "-m", "epoll", "-t", "1"]).env("RUST_LOG", "warn");
    let server = ServerProc::spawn(cmd);
    let bound = server.addr;
    assert_ne!(bound.port(), 0, "{listen}: the port the OS chose is printed");
    let mut stream = std::net::TcpStream::connect((connect_to, bound.port())).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    stream.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping", "{listen}");
    server.stop();
    bound
}

/// `--listen :8080`, `0.0.0.0:8080`, `[::]:8080`, `localhost:0` and `8080` as nginx and Go
/// servers take them, and short flags for the common options.
#[test]
fn serve_listens_where_servers_do_with_short_flags() {
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    let any = std::net::IpAddr::from([0, 0, 0, 0]);
    // `:PORT` and `PORT`: every IPv4 address, as nginx's `listen 8080`, and printed so.
    assert_eq!(serve_at(":0", loopback).ip(), any);
    assert_eq!(serve_at("0", loopback).ip(), any);
    assert_eq!(serve_at("0.0.0.0:0", loopback).ip(), any);
    // A host name is resolved; its IPv4 address is taken first.
    assert!(serve_at("localhost:0", loopback).ip().is_loopback());
    if TcpListener::bind("[::1]:0").is_ok() {
        let v6 = serve_at("[::]:0", std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
        assert_eq!(v6.ip(), std::net::IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED));
    } else {
        eprintln!("not checked: [::]:0 (no IPv6 here)");
    }
    for (listen, says) in [
        ("127.0.0.1", "'127.0.0.1' has no port"),
        ("localhost", "'localhost' has no port"),
        (":http", "'http' is not a number from 0 to 65535"),
        ("65536", "'65536' is not a number from 0 to 65535"),
        ("::1", "IPv6 address without brackets"),
        ("[::1]", "'[::1]' has no port"),
        ("nosuchhost.invalid:80", "cannot resolve host 'nosuchhost.invalid'"),
        ("", "is empty"),
    ] {
        let (code, err) = fails_quickly(&["serve", "-l", listen]);
        assert_eq!(code, 2, "{listen}: {err}");
        assert!(one_line(&err).contains(says), "{listen}: {err}");
    }
    // `-p 8080`, a port where the protocol goes, is told where the port goes.
    let (code, err) = fails_quickly(&["serve", "-p", "8080"]);
    assert_eq!(code, 2);
    assert!(one_line(&err).contains("give --listen :8080 (-l :8080)"), "{err}");
    // --metrics takes the IP forms of --listen.
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "-l", "127.0.0.1:0", "--metrics", "localhost:0", "-t", "1"]).env("RUST_LOG", "info");
    let server = ServerProc::spawn(cmd);
    assert!(server.metrics_addr().ip().is_loopback());
    server.stop();
}

/// The flags `--procs` hands its workers: `-l` is replaced by the address reserved, not
/// given twice.
#[test]
fn serve_procs_with_the_short_listen_flag_starts_its_workers() {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "-l", "127.0.0.1:0", "--procs", "2", "-t", "1"]).env("RUST_LOG", "warn");
    let server = ServerProc::spawn(cmd);
    let mut stream = server.connect();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"hi").unwrap();
    let mut back = [0u8; 2];
    stream.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"hi");
    let finished = server.stop();
    assert!(!finished.stderr.contains("cannot be used multiple times"), "{}", finished.stderr);
}

/// The long options a help text defines (`--name` at the start of an entry) and the flags it
/// names in its prose (`-x`, `--name`).
fn defined_and_named(help: &str) -> (Vec<String>, Vec<String>) {
    let mut defined = Vec::new();
    let mut named = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        // Entries are indented 2 or 6 columns; their text wraps deeper.
        let indent = line.len() - trimmed.len();
        let entry = (2..=6).contains(&indent) && trimmed.starts_with('-');
        let words: Vec<&str> = trimmed.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')').collect();
        for (i, word) in words.iter().enumerate() {
            let word = word.trim_end_matches(['.', ';', ':', '\'', '`', ']']).trim_start_matches(['`', '\'', '[']);
            let flag = word.split('=').next().unwrap_or_default();
            let is_flag = (flag.starts_with("--")
                && flag.len() > 3
                && flag[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                || (flag.len() == 2 && flag.starts_with('-') && flag[1..].chars().all(|c| c.is_ascii_alphabetic()));
            if !is_flag {
                continue;
            }
            // An entry's own names come first: `-l, --listen <ADDR>`.
            if entry && (i == 0 || (i <= 2 && words[..i].iter().all(|w| w.is_empty() || w.starts_with('-')))) {
                defined.push(flag.to_owned());
            } else {
                named.push(flag.to_owned());
            }
        }
    }
    (defined, named)
}

/// `--block`'s help named a `-r` that `load http` refuses; every flag a command's help names
/// must be one that command takes.
#[test]
fn load_help_names_only_flags_the_command_takes() {
    for mode in ["echo", "http", "udp"] {
        let help = succeeds(&["load", mode, "--help"]);
        // The exit-status text after the options is shared by the three modes.
        let options = help.split("\nErrors:").next().unwrap_or_default();
        let (defined, named) = defined_and_named(options);
        assert!(defined.contains(&"--connections".to_owned()) && defined.contains(&"-c".to_owned()), "{defined:?}");
        for flag in &named {
            // h2load's -m is named as h2load's, beside this command's --pipeline.
            if flag == "-m" && mode == "http" {
                continue;
            }
            assert!(defined.contains(flag), "load {mode} --help names {flag}, which load {mode} does not take");
        }
    }
    let (code, err) = fails(&["load", "http", "http://127.0.0.1:1/", "-r", "100"]);
    assert_eq!(code, 2);
    assert!(one_line(&err).contains("'-r'"), "{err}");
    let (code, _) = fails(&["load", "http", "http://127.0.0.1:1/", "--block", "10"]);
    assert_eq!(code, 2, "--block applies to echo's -r only");
}

/// The help says what sockscale speaks today.
#[test]
fn help_says_what_sockscale_speaks() {
    let top = succeeds(&["-h"]);
    let serve = top.lines().find(|l| l.trim_start().starts_with("serve ")).unwrap_or_default();
    let load = top.lines().find(|l| l.trim_start().starts_with("load ")).unwrap_or_default();
    for (line, what) in [(serve, "serve"), (load, "load")] {
        for word in ["HTTP/1.1", "HTTP/2", "TLS", "Unix", "UDP", "echo"] {
            assert!(line.contains(word), "sockscale -h: {what} does not say {word}: {line}");
        }
    }
    let long = succeeds(&["--help"]);
    for word in ["HTTP/2", "TLS", "Unix sockets"] {
        assert!(long.contains(word), "sockscale --help does not say {word}");
    }
    let serve = succeeds(&["serve", "-h"]);
    assert!(serve.lines().next().is_some_and(|l| l.contains("HTTP/2") && l.contains("TLS")), "{serve}");
    let load_http = succeeds(&["load", "http", "-h"]);
    assert!(load_http.lines().next().is_some_and(|l| l.contains("HTTP/2") && l.contains("TLS")), "{load_http}");
}

/// `serve --help` was 291 lines with the policies in one heap: `-h` is a summary under
/// headings, pointing to the docs, and `--help` still has every flag.
#[test]
fn serve_short_help_is_a_grouped_summary_and_long_help_has_every_flag() {
    let short = succeeds(&["serve", "-h"]);
    let long = succeeds(&["serve", "--help"]);
    let lines = short.lines().count();
    assert!(lines <= 120, "serve -h is {lines} lines");
    let mut at = 0;
    for heading in [
        "Listening:",
        "Protocol:",
        "I/O model:",
        "Policies: timeouts:",
        "Policies: admission:",
        "Policies: buffers and sockets:",
        "TLS:",
        "Metrics and stats:",
    ] {
        let found = short[at..]
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("serve -h: no {heading} (in order)\n{short}"));
        at += found + 1;
        assert!(long.contains(&format!("\n{heading}\n")), "serve --help: no {heading}");
    }
    for short_flag in ["-l, --listen", "-p, --proto", "-m, --model", "-t, --threads"] {
        assert!(short.contains(short_flag), "serve -h lacks {short_flag}");
    }
    assert!(short.contains("docs/serve.md") && long.contains("docs/serve.md"), "serve help points to docs/serve.md");
    let (in_short, _) = defined_and_named(&short);
    let (in_long, _) = defined_and_named(&long);
    assert!(in_short.len() > 40, "{in_short:?}");
    assert_eq!(in_short, in_long, "serve -h and --help define the same flags");
    // -h is a summary: no flag's entry runs past three lines there.
    let mut entry_lines = 0;
    for line in short.lines() {
        if line.trim_start().starts_with('-') {
            entry_lines = 1;
        } else if !line.trim().is_empty() && line.starts_with("    ") && entry_lines > 0 {
            entry_lines += 1;
            assert!(entry_lines <= 3, "serve -h: an entry longer than 3 lines near: {line}");
        } else {
            entry_lines = 0;
        }
    }
}
