//! `sockscale bench --profile tiny` end to end on two models, then `report` and `plan`.

mod support;

use std::process::Command;

use support::BIN;

#[test]
fn tiny_bench_writes_plausible_results_and_a_report() {
    // The models this run measures, named once (the checks below go through them).
    const MODELS: &str = "epoll,select";
    let name = format!("sockscale-bench-test-{}", std::process::id());
    let dir = std::env::temp_dir().join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    // A relative --out, as the default is: every path bench hands to a child must still work.
    let out = Command::new(BIN)
        .current_dir(std::env::temp_dir())
        .args(["bench", "--profile", "tiny", "--models", MODELS, "--out"])
        .arg(&name)
        .output()
        .expect("run bench");
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    // stdout ends with the verdict and where the files are, not the long tables.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("| I/O model | Attempted/Connected |"), "{stdout}");
    assert!(stdout.trim_end().lines().last().is_some_and(|l| l.starts_with("report:  ")), "{stdout}");
    assert!(stdout.contains("Verdict"), "{stdout}");

    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    let r: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(r["schema"], 4);
    assert_eq!(r["profile"], "tiny");
    assert_eq!(r["rounds"], 3);
    assert_eq!(r["interrupted"], false);
    for key in ["cpu_model", "cores", "kernel", "somaxconn", "tcp_mem_pages", "open_files_limit"] {
        assert!(!r["machine"][key].is_null(), "machine.{key} missing");
    }
    let models = r["models"].as_array().expect("models");
    assert_eq!(models.len(), 2);
    for m in models {
        let name = m["model"].as_str().unwrap_or("?");
        let rows = m["rows"].as_array().expect("rows");
        if !m["error"].is_null() {
            // A model that is not built or not available says so; its row stays in the table.
            assert!(rows.is_empty() || rows.len() < 3, "{name}: error with all rows: {}", m["error"]);
            continue;
        }
        assert_eq!(rows.len(), 3, "{name}: flood, rate-limited, maximum");
        let kinds: Vec<&str> = rows.iter().map(|row| row["kind"].as_str().unwrap_or("")).collect();
        assert_eq!(kinds, ["flood", "rate_limited", "maximum"]);
        for row in rows {
            // The paced rows of the tiny profile use less than a clock tick of server CPU in an
            // interval, so only the flood row always has work per CPU-second.
            let figures: &[&str] = match row["kind"].as_str() {
                Some("flood") => &["received_bytes_per_s", "bytes_per_cpu_second", "connections_held"],
                _ => &["received_bytes_per_s", "connections_held"],
            };
            assert_repeated(name, row, figures);
            let n = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{name}: {k} missing in {row}"));
            assert!(n("connected") <= n("attempted"), "{name}: connected > attempted");
            assert!(n("attempted") > 0.0);
            assert!(n("connected") > 0.0, "{name}: nothing connected");
            assert!(n("server_rss_kib") > 0.0);
            assert!(n("threads") >= 1.0);
            assert!(
                (0.0..=200.0).contains(&n("cpu_min_pct")) && n("cpu_min_pct") <= n("cpu_max_pct"),
                "{name}: cpu {row}"
            );
            assert!((0.0..=200.0).contains(&n("cpu_max_pct")), "{name}: cpu {row}");
            assert!(n("sent_bytes_per_s") > 0.0 && n("received_bytes_per_s") > 0.0, "{name}: no throughput");
            assert!(n("p50_us") > 0.0 && n("p50_us") <= n("p99_us"));
            assert!(n("client_cpu_pct") >= 0.0);
            assert!(row["errors"].is_object());
            assert!(row["client_bound"].is_boolean());
            // The load's latency histogram is kept, for the report's spectrum, and each interval
            // says when it ended, for the figures over time.
            assert!(row["latency_hdr"].as_str().is_some_and(|h| !h.is_empty()), "{name}: no latency_hdr: {row}");
            let intervals = row["intervals"].as_array().unwrap_or_else(|| panic!("{name}: no intervals: {row}"));
            assert!(!intervals.is_empty() && intervals.iter().all(|i| i["at_s"].as_f64().is_some_and(|t| t > 0.0)));
            // Each server figure says how many samples it came from, and here every one had some.
            for figure in ["connections", "rss", "threads", "cpu"] {
                let count = row["samples"][figure].as_u64();
                assert!(count.is_some_and(|c| c > 0), "{name}: samples of {figure}: {row}");
            }
        }
        let http = m["http"].as_array().expect("http");
        let h3 = usize::from(serves_http3(name));
        assert_eq!(
            http.len(),
            8 + h3,
            "{name}: HTTP at 2 concurrencies x keep-alive on/off, HTTPS at 1 x 2, HTTP/2 at 1 x h2c/h2, HTTP/3 at 1 where the model serves it: {http:?}"
        );
        for p in http {
            assert!(p["requests_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{name}: {p}");
            assert_repeated(name, p, &["requests_per_s", "responses_per_cpu_second"]);
        }
        assert_https_points(name, http);
        assert_h2_points(name, http);
        assert_h3_points(name, http, h3);
        assert_ws(name, m);
        assert!(m["udp"]["received_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{name}: UDP");
        assert!(m["udp"]["sent"].as_u64().is_some_and(|n| n > 0), "{name}: UDP datagrams sent kept");
    }
    assert!(!r["nginx"].is_null(), "nginx is measured or skipped with a note");
    let nginx_installed = ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().any(|p| std::path::Path::new(p).exists());
    if nginx_installed {
        assert!(r["nginx"]["error"].is_null(), "nginx is installed but was not measured: {}", r["nginx"]);
        let http = r["nginx"]["http"].as_array().expect("nginx's points");
        assert_eq!(http.len(), 8, "{}", r["nginx"]);
        assert_https_points("nginx", http);
        assert_h2_points("nginx", http);
        assert_h3_points("nginx", http, 0);
    }
    // Caddy, the HTTP/3 sweep's peer: measured when found, else skipped with why.
    if caddy_found() {
        assert!(r["caddy"]["error"].is_null(), "caddy was found but not measured: {}", r["caddy"]);
        let http = r["caddy"]["http"].as_array().expect("caddy's points");
        assert_h3_points("caddy", http, 1);
        assert_eq!(http.len(), 1, "caddy serves the HTTP/3 sweep only: {http:?}");
    } else {
        let why = r["caddy"]["error"].as_str().unwrap_or_default();
        assert!(why.starts_with("skipped: caddy was not found"), "{}", r["caddy"]);
        println!("skipped: caddy is not on PATH and SOCKSCALE_CADDY is not set; its HTTP/3 point is not checked");
    }
    for file in [
        "rows.csv",
        "http.csv",
        "ws.csv",
        "table.md",
        "report.html",
        "throughput.svg",
        "throughput.png",
        "cpu.png",
        "memory_per_connection.png",
        "threads.png",
        "http.png",
        "https.png",
        "https.svg",
        "latency.png",
        "latency.svg",
        "over_time_flood.png",
        "over_time_rate_limited.png",
        "over_time_maximum.svg",
        "websocket.png",
        "websocket.svg",
        "websocket_idle.png",
        "websocket_idle.svg",
        "http3.png",
        "http3.svg",
    ] {
        let meta = std::fs::metadata(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(meta.len() > 0, "{file} is empty");
    }
    // HTTPS rows in a section of their own, labelled by connection, in the table and the page.
    let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
    let (plain, https) = table.split_once("## HTTPS 4 KiB responses by concurrency").expect("an HTTPS section");
    let https = https.split("## UDP echo").next().unwrap_or_default();
    assert!(!plain.contains("full handshake |"), "HTTPS rows among the HTTP ones: {plain}");
    for label in ["keep-alive", "new connection per request, full handshake"] {
        let row = format!("| epoll | {label} | ");
        let line = https.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("no {row} in {https}"));
        assert!(!line.contains("errors") && !line.contains("| — |"), "{line}");
    }
    // The WebSocket tables: both models' echo at c=10 with messages per server CPU-second, and
    // their idle WebSockets, every one held and answering a ping.
    let ws = table.split_once("## WebSocket").expect("a WebSocket section").1;
    let ws = ws.split("## UDP echo").next().unwrap_or_default();
    for model in MODELS.split(',') {
        let echo = ws.lines().find(|l| l.starts_with(&format!("| {model} | "))).unwrap_or_else(|| panic!("{ws}"));
        assert!(echo.contains("/s") && echo.contains("per CPU-s") && !echo.contains("errors"), "{echo}");
        let idle = ws
            .lines()
            .find(|l| l.starts_with(&format!("| {model} | 100 of 100 |")))
            .unwrap_or_else(|| panic!("no idle row of {model}: {ws}"));
        assert!(idle.contains("| yes |"), "{idle}");
    }
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<h2>WebSocket</h2>"), "the page has the WebSocket tables");
    assert!(
        html.contains("WebSocket echo messages per second, and per server CPU-second")
            || html.contains("Echo messages per second, and per server CPU-second")
    );
    assert!(html.contains("WebSocket echo messages per server CPU-second by concurrency"), "the WebSocket chart");
    assert!(html.contains("Server memory per idle WebSocket"), "the idle WebSocket chart");
    assert!(
        html.contains("<h3>WebSocket echo points</h3>") && html.contains("<h3>Idle WebSockets</h3>"),
        "the summary"
    );
    assert!(
        html.contains("WebSocket messages") && html.contains("Many idle WebSockets"),
        "the verdict lists WebSocket"
    );
    assert!(html.contains("<h2>HTTPS 4 KiB responses by concurrency</h2>"), "the page has the HTTPS tables");
    assert!(
        html.contains("<td>epoll</td><td>new connection per request, full handshake</td>"),
        "the page's HTTPS rows"
    );
    assert!(html.contains("HTTPS 4 KiB responses per second by concurrency"), "the page has the HTTPS chart");
    assert!(html.contains("<h2>HTTP/3 4 KiB responses by concurrency</h2>"), "the page has the HTTP/3 tables");
    assert!(html.contains("HTTP/3 4 KiB responses per second by concurrency"), "the page has the HTTP/3 chart");
    assert!(html.contains("HTTP/3 streams"), "the verdict lists HTTP/3");
    // The HTTP/3 rows, with their QUIC handshakes, in a section of their own.
    let h3 = table.split_once("## HTTP/3 4 KiB responses by concurrency").expect("an HTTP/3 section").1;
    let h3 = h3.split("## WebSocket").next().unwrap_or_default();
    for model in MODELS.split(',').filter(|m| serves_http3(m)) {
        let row = format!("| {model} | h3 (QUIC), 16 streams | ");
        assert!(h3.lines().filter(|l| l.starts_with(&row)).count() >= 5, "no {row} in every table of {h3}");
    }
    assert!(h3.contains("### QUIC: handshakes completed / failed"), "{h3}");
    assert!(html.contains("<svg") && html.contains("<table>"), "the page inlines charts and tables");
    assert!(
        !html.contains("http://") && !html.contains("https://") || html.matches("xmlns").count() > 0,
        "no network resources"
    );
    let png = std::fs::read(dir.join("http.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    // report redraws from the JSON alone, elsewhere.
    let again = dir.join("again");
    let out = Command::new(BIN).arg("report").arg(dir.join("results.json")).arg("--out").arg(&again).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(again.join("report.html").exists() && again.join("cpu.svg").exists());
    // The page opens with its summary, and both pages load in a real browser.
    assert!(html.find("<h2 id=\"summary\">Summary</h2>") < html.find("<h2>I/O models"), "the summary comes first");
    assert!(html.contains("Echo latency by percentile") && html.contains("The flood row over time"));
    check_in_browser(&dir.join("report.html"), "bench-report.png");
    check_in_browser(&again.join("report.html"), "bench-report-redrawn.png");

    // plan predicts from the same results.
    let out = Command::new(BIN)
        .arg("plan")
        .arg("--from")
        .arg(dir.join("results.json"))
        .args(["--target", "50000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.contains("| epoll |"), "{plan}");
    // The HTTP capacity table, with HTTPS: epoll's HTTPS keep-alive and full-handshake cells
    // are measured rates, and the handshakes of 50,000 connections a measured cost.
    let capacity = plan.split("HTTP and HTTPS on one server core").nth(1).expect("the HTTP capacity table");
    let epoll = capacity.lines().find(|l| l.starts_with("| epoll |")).expect("epoll's capacity");
    let cells: Vec<&str> = epoll.trim_matches('|').split('|').map(str::trim).collect();
    for (i, cell) in cells.iter().enumerate().take(5).skip(1) {
        assert!(cell.contains("/s at c="), "cell {i} of {epoll}");
    }
    assert!(cells[5].ends_with("of its core)") && cells[5].contains(" s ("), "{epoll}");
    // The WebSocket capacity: epoll's idle WebSockets, each answering a ping, scaled to 50,000.
    let ws = plan.split("WebSocket, as measured").nth(1).expect("the WebSocket capacity table");
    let epoll = ws.lines().find(|l| l.starts_with("| epoll |")).expect("epoll's WebSocket capacity");
    assert!(epoll.contains("| 100 held, each answered a ping |") && epoll.contains(" B each) |"), "{epoll}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A row or point measured in three rounds: a repetition for each, with its figures and what
/// the rest of the machine did meanwhile, and the spread of each headline figure around the
/// median the row or point itself holds.
fn assert_repeated(name: &str, v: &serde_json::Value, figures: &[&str]) {
    let repeats = v["repeats"].as_array().unwrap_or_else(|| panic!("{name}: no repeats: {v}"));
    let kept: Vec<&serde_json::Value> = repeats.iter().filter(|r| r["replaced"] != true).collect();
    assert_eq!(kept.len(), 3, "{name}: three kept repetitions: {v}");
    let rounds: Vec<u64> = kept.iter().filter_map(|r| r["round"].as_u64()).collect();
    assert_eq!(rounds, [1, 2, 3], "{name}: one per round: {v}");
    for r in &kept {
        let i = &r["interference"];
        assert!(i["server_cores"].as_f64().is_some_and(|c| c >= 0.0), "{name}: interference measured: {r}");
        assert!(i["client_cores"].as_f64().is_some_and(|c| c >= 0.0), "{name}: {r}");
        assert!(i["disturbed"].is_boolean(), "{name}: {r}");
    }
    for figure in figures {
        let s = &v["spread"][figure];
        let (min, median, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        let (Some(min), Some(median), Some(max)) = (min, median, max) else {
            panic!("{name}: no spread of {figure}: {v}")
        };
        assert!(min <= median && median <= max && s["n"] == 3, "{name}: {figure}: {s}");
        let each: Vec<f64> = kept.iter().filter_map(|r| r["figures"][figure].as_f64()).collect();
        assert_eq!(each.len(), 3, "{name}: every repetition has {figure}: {v}");
        assert!(each.iter().all(|x| (min..=max).contains(x)), "{name}: {figure} {each:?} outside {s}");
    }
    assert!(v["interference"].is_object(), "{name}: the point's interference: {v}");
}

/// The WebSocket points of one model: the echo at the tiny profile's one concurrency, every
/// connection upgraded and messages echoed with the server's CPU measured; the idle
/// WebSockets, all 100 held by the server's count, every one answering a ping, its memory read.
fn assert_ws(name: &str, m: &serde_json::Value) {
    let ws = m["ws"].as_array().unwrap_or_else(|| panic!("{name}: no WebSocket points: {m}"));
    assert_eq!(ws.len(), 1, "{name}: WebSocket echo at c=10: {ws:?}");
    let p = &ws[0];
    assert_eq!((&p["concurrency"], &p["upgrades"], &p["errors"]), (&10.into(), &10.into(), &0.into()), "{name}: {p}");
    assert!(p["messages_per_s"].as_f64().is_some_and(|r| r > 0.0), "{name}: {p}");
    assert!(p["latency"]["count"].as_u64().is_some_and(|n| n > 0), "{name}: no message timed: {p}");
    assert_repeated(name, p, &["messages_per_s", "messages_per_cpu_second"]);
    let idle = &m["ws_idle"];
    assert_eq!(
        (&idle["attempted"], &idle["upgrades"], &idle["held"]),
        (&100.into(), &100.into(), &100.into()),
        "{name}: {idle}"
    );
    let (pings, pongs) = (idle["pings_sent"].as_u64().unwrap_or(0), idle["pongs_received"].as_u64().unwrap_or(0));
    assert!(pongs >= 100 && pongs <= pings, "{name}: every connection answered a ping: {idle}");
    assert_eq!((&idle["ping_timeouts"], &idle["errors"]), (&0.into(), &0.into()), "{name}: {idle}");
    let rss = |k: &str| idle[k].as_u64().unwrap_or_else(|| panic!("{name}: {k}: {idle}"));
    assert!(rss("server_rss_baseline_kib") > 0 && rss("server_rss_peak_kib") >= rss("server_rss_baseline_kib"));
    assert_repeated(name, idle, &["ws_idle_held", "server_bytes_per_idle_ws"]);
}

/// Whether `model` serves HTTP/3 (its capability row).
fn serves_http3(model: &str) -> bool {
    model.parse::<sockscale_server::Model>().is_ok_and(|m| m.serves_http3())
}

/// Whether the bench finds Caddy: `SOCKSCALE_CADDY`, else `caddy` on PATH.
fn caddy_found() -> bool {
    if let Some(path) = std::env::var_os("SOCKSCALE_CADDY").filter(|p| !p.is_empty()) {
        return std::path::Path::new(&path).is_file();
    }
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("caddy").is_file()))
}

/// The HTTP/3 points: `expected` of them (the tiny profile's one concurrency, or none), 16
/// streams a connection over QUIC with ALPN h3, every request answered, no handshake failed.
fn assert_h3_points(name: &str, http: &[serde_json::Value], expected: usize) {
    let h3: Vec<&serde_json::Value> = http.iter().filter(|p| p["http3"] == true).collect();
    assert_eq!(h3.len(), expected, "{name}: {http:?}");
    for p in h3 {
        assert_eq!((&p["concurrency"], &p["streams"]), (&10.into(), &16.into()), "{name}: {p}");
        assert_eq!((&p["tls"], &p["http2"]), (&true.into(), &serde_json::Value::Null), "{name}: {p}");
        assert_eq!(p["errors"], 0, "{name}: {p}");
        assert!(p["latency"]["count"].as_u64().is_some_and(|n| n > 0), "{name}: no request completed: {p}");
        assert_repeated(name, p, &["requests_per_s", "responses_per_cpu_second"]);
        let q = &p["quic"];
        assert_eq!(q["version"], 1, "{name}: {p}");
        assert!(q["alpn"]["h3"].as_u64().is_some_and(|n| n >= 10), "{name}: every connection agreed on h3: {p}");
        assert!(q["handshakes"].as_u64().is_some_and(|n| n >= 10), "{name}: {p}");
        assert_eq!(q["handshakes_failed"], 0, "{name}: {p}");
        assert!(q["packets_sent"].as_u64().is_some_and(|n| n > 0), "{name}: {p}");
        // A sockscale server's own counts: every request the load timed answered, every
        // connection's handshake; Caddy prints none.
        let server = &p["server_quic"];
        if name == "caddy" {
            assert!(server.is_null(), "{p}");
        } else {
            let count = |k: &str| server[k].as_u64().unwrap_or_else(|| panic!("{name}: no server_quic.{k}: {p}"));
            assert!(count("h3_requests") >= p["latency"]["count"].as_u64().unwrap_or(u64::MAX), "{name}: {p}");
            assert!(count("quic_handshakes") >= 10, "{name}: {p}");
        }
    }
}

/// The HTTP/2 points: h2c and h2 over TLS, 16 streams a connection, every request answered.
fn assert_h2_points(name: &str, http: &[serde_json::Value]) {
    let h2: Vec<&serde_json::Value> = http.iter().filter(|p| p["http2"] == true).collect();
    let tls: Vec<bool> = h2.iter().map(|p| p["tls"] == true).collect();
    assert_eq!(tls, [false, true], "{name}: h2c, then h2 over TLS: {http:?}");
    for p in h2 {
        assert_eq!(p["streams"], 16, "{name}: {p}");
        assert_eq!(p["errors"], 0, "{name}: {p}");
        assert!(p["latency"]["count"].as_u64().is_some_and(|n| n > 0), "{name}: no request completed: {p}");
    }
}

/// The HTTPS points of one model's sweep: keep-alive and a full handshake per request at the
/// tiny profile's one concurrency, every request answered, none failed.
fn assert_https_points(name: &str, http: &[serde_json::Value]) {
    let https: Vec<&serde_json::Value> =
        http.iter().filter(|p| p["tls"] == true && p["http2"] != true && p["http3"] != true).collect();
    let keepalive: Vec<bool> = https.iter().map(|p| p["keepalive"] == true).collect();
    assert_eq!(keepalive, [true, false], "{name}: HTTPS keep-alive, then a new connection per request: {http:?}");
    for p in https {
        assert_eq!(p["concurrency"], 10, "{name}: {p}");
        assert_eq!(p["tls_resume"], false, "{name}: every new connection a full handshake: {p}");
        assert_eq!(p["errors"], 0, "{name}: {p}");
        assert!(p["latency"]["count"].as_u64().is_some_and(|n| n > 0), "{name}: no request completed: {p}");
        assert!(p["requests_per_s"].as_f64().is_some_and(|r| r > 0.0), "{name}: {p}");
        let h = &p["handshakes"];
        assert_eq!((&h["resumed"], &h["failed"]), (&0.into(), &0.into()), "{name}: none resumed, none failed: {p}");
        let (full, requests) = (h["full"].as_u64().unwrap_or(0), p["latency"]["count"].as_u64().unwrap_or(0));
        if p["keepalive"] == true {
            // One handshake per connection: 10 connections (and a few more, when a request
            // still in flight as the run ended closed its connection).
            assert!((10..requests).contains(&full), "{name}: {full} handshakes, {requests} requests: {p}");
        } else {
            assert!(full >= requests, "{name}: a full handshake per request: {full} for {requests}: {p}");
        }
        assert!(h["negotiated"][0]["version"].as_str().is_some_and(|v| v.starts_with("TLSv1.")), "{name}: {p}");
    }
    let plain = http.iter().filter(|p| p["tls"] == false && p["http2"] != true).count();
    assert_eq!(plain, 4, "{name}: the plain points stay plain: {http:?}");
}

#[test]
fn plan_prints_the_seed_tables() {
    let out = Command::new(BIN).arg("plan").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    // Table 14-1 and 14-2 of seed 004, figure for figure.
    for line in [
        "| 10 | 10 | 1,658,400 |",
        "| 1,000 | 10 | 165,840,000 |",
        "| 50,000 | 10 | 8,292,000,000 |",
        "| 10 | 2 | 331,680 |",
        "| 1,000 | 2 | 33,168,000 |",
        "| 50,000 | 2 | 1,658,400,000 |",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    for line in ["| 100 | 10 | 12,500 |", "| 50,000 | 10 | 25 |", "| 1,000 | 100 | 12,500 |", "| 50,000 | 100 | 250 |"]
    {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

#[test]
fn bench_rejects_bad_input_in_one_line() {
    for args in [
        vec!["bench", "--profile", "huge"],
        vec!["bench", "--models", "epoll,nonesuch"],
        vec!["report", "/nonexistent/results.json"],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// Bad --models and an --out that cannot take the results fail at once, before any step runs
/// (the tiny profile, so that a check made only after the run still ends the test quickly).
#[test]
fn bench_checks_models_and_out_before_the_run() {
    let taken = std::env::temp_dir().join(format!("sockscale-bench-taken-{}", std::process::id()));
    std::fs::create_dir_all(&taken).unwrap();
    std::fs::write(taken.join("results.json"), "{}").unwrap();
    let file = taken.join("a-file");
    std::fs::write(&file, "").unwrap();
    let (taken_s, under_file) = (taken.display().to_string(), file.join("out").display().to_string());
    for (args, expect) in [
        (
            vec!["--models", "epoll,nonesuch"],
            "invalid value 'nonesuch' for '--models <MODELS>': unknown model 'nonesuch' (expected one of: blocking,",
        ),
        (vec!["--models", ""], "invalid value '' for '--models <MODELS>': unknown model ''"),
        (vec!["--models", "epoll,select,epoll"], "--models names epoll twice: list each model once"),
        (vec!["--models", "epoll", "--out", &under_file], "cannot create the directory: Not a directory (os error 20)"),
        (
            vec!["--models", "epoll", "--out", "/proc/sys/sockscale-out"],
            "--out /proc/sys/sockscale-out: cannot create the directory",
        ),
        (vec!["--models", "epoll", "--out", "/proc/sys"], "--out /proc/sys: cannot write files there"),
        (vec!["--models", "epoll", "--out", &taken_s], "already holds a bench's results.json"),
    ] {
        let out = Command::new(BIN).args(["bench", "--profile", "tiny"]).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "bench {args:?} was accepted");
        assert_eq!(err.lines().count(), 1, "bench {args:?}: one line, before any step: {err}");
        assert!(err.contains(expect), "bench {args:?}: {err}");
        assert_eq!(err.matches("os error").count(), err.contains("os error") as usize, "{err}");
    }
    assert_eq!(std::fs::read_to_string(taken.join("results.json")).unwrap(), "{}", "the old results are untouched");
    let _ = std::fs::remove_dir_all(&taken);
}

/// Every process under `pid`, recursively.
fn descendants(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        let text = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for child in text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
            all.push(child);
            queue.push(child);
        }
    }
    all
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn interrupted_bench_kills_its_processes_and_keeps_its_rows() {
    let dir = std::env::temp_dir().join(format!("sockscale-bench-int-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut bench = Command::new(BIN)
        .args(["bench", "--profile", "tiny", "--rounds", "1", "--models", "epoll,poll64,select,signal", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the rows are written (the steps go row by row, every model in turn), then
    // interrupt while the sweeps run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut started = Vec::new();
    loop {
        let done = std::fs::read_to_string(dir.join("results.json")).unwrap_or_default();
        started.extend(descendants(bench.id()));
        if done.contains("\"kind\": \"maximum\"") && !descendants(bench.id()).is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "bench never got past its rows");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let running = descendants(bench.id());
    assert!(!running.is_empty(), "the bench has a server or a load running");
    sockscale_sys::signal_process(bench.id(), libc::SIGINT).unwrap();
    let status = bench.wait().unwrap();
    assert!(!status.success(), "an interrupted bench exits non-zero");
    std::thread::sleep(std::time::Duration::from_millis(300));
    for pid in running {
        assert!(!alive(pid), "process {pid} started by the bench is still running");
    }
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["interrupted"], true);
    let epoll = &r["models"][0];
    assert_eq!(epoll["model"], "epoll");
    assert_eq!(epoll["rows"].as_array().map(Vec::len), Some(3), "the rows measured before are kept");
    assert!(epoll["error"].as_str().is_some_and(|e| e.starts_with("interrupted during")), "{epoll}");
    assert!(
        r["models"].as_array().into_iter().flatten().all(|m| m["udp"].is_null()),
        "the run stopped before its last step: {r}"
    );
    assert!(dir.join("report.html").exists(), "the report is drawn from what was measured");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A results.json as bench writes it, with plain values: a fixed-thread model (3,000 KiB +
/// 1 KiB per connection, 5 threads, kernel memory measured in one row only), select (held
/// 1,017 at most), and a model that failed.
fn synthetic_results(dir: &std::path::Path) -> std::path::PathBuf {
    let row = |kind: &str, connected: u64, rss: u64, kernel: u64, threads: u64, cpu: f64| {
        serde_json::json!({
            "kind": kind, "attempted": connected, "connected": connected, "client_peak_open": connected,
            "server_rss_kib": rss, "kernel_tcp_kib": kernel, "cpu_min_pct": cpu * 0.8, "cpu_max_pct": cpu,
            "threads": threads, "sent_bytes_per_s": 1.0, "received_bytes_per_s": 1.0, "p50_us": 1.0,
            "p99_us": 1.0, "errors": {}, "client_cpu_pct": 1.0, "client_cores": 1, "client_bound": false,
            "duration_s": 1.0
        })
    };
    let model = |name: &str, rows: Vec<serde_json::Value>| serde_json::json!({"model": name, "error": null, "rows": rows, "http": [], "udp": null});
    let results = serde_json::json!({
        "schema": 1, "profile": "default", "started": "2026-11-22 08:00:41 UTC", "finished": "", "interrupted": false,
        "machine": {"cpu_model": "test", "cores": 2, "memory_kib": 16u64 << 20, "kernel": "6", "somaxconn": "4096",
                    "tcp_mem_pages": "", "open_files_limit": 1_000_000, "io_uring": "available"},
        "parameters": {"block": 1000, "block_rate": 200000},
        "models": [
            model("epoll", vec![
                row("flood", 1000, 4000, 7168, 5, 90.0),
                row("rate_limited", 3000, 6000, 0, 5, 20.0),
                row("maximum", 8000, 11000, 2048, 5, 45.0),
            ]),
            model("select", vec![row("flood", 1000, 5280, 7168, 4, 100.0), row("maximum", 1017, 5264, 2048, 4, 57.0)]),
            {"model": "tokio", "error": "flood row: the server did not start", "rows": [], "http": [], "udp": null},
        ],
        "nginx": null
    });
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    path
}

/// Open `page` in headless Chromium: no error, nothing missing, a screenshot kept under
/// target/. Skipped, saying why, when there is no Chromium here.
fn check_in_browser(page: &std::path::Path, screenshot: &str) {
    let browser = match support::browser::chromium() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped: the browser check of {}: {why}", page.display());
            return;
        }
    };
    let shot = support::browser::screenshot_dir().join(screenshot);
    let started = std::time::Instant::now();
    match support::browser::check_page(&browser, page, &shot) {
        Ok(checked) => eprintln!(
            "browser check of {}: {} in {:.1} s; screenshot {}",
            page.display(),
            checked.resources,
            started.elapsed().as_secs_f64(),
            checked.screenshot.display()
        ),
        Err(e) => panic!("browser check failed: {e}"),
    }
}

/// The browser check fails on a page with a script error, a `console.error` or a missing
/// image, and says which: a page drawn by `report`, then broken on purpose.
#[test]
fn browser_check_fails_on_an_error_or_a_missing_image() {
    let Ok(browser) = support::browser::chromium().map_err(|why| eprintln!("skipped: {why}")) else { return };
    let dir = std::env::temp_dir().join(format!("sockscale-browser-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let results = synthetic_results(&dir);
    let out = Command::new(BIN).arg("report").arg(&results).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = dir.join("report.html");
    let shots = support::browser::screenshot_dir();
    let checked = support::browser::check_page(&browser, &page, &shots.join("synthetic-report.png"))
        .unwrap_or_else(|e| panic!("a good page failed: {e}"));
    assert!(checked.resources.contains("figures=") && !checked.resources.contains("figures=0 "), "{checked:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    for (breakage, expect) in [
        ("<img src=\"missing-chart.png\" alt=\"\">", "missing-chart.png"),
        ("<script>undefinedFunction();</script>", "undefinedFunction"),
        ("<script>console.error(\"something went wrong\");</script>", "console.error: something went wrong"),
    ] {
        std::fs::write(&page, html.replace("<h1>", &format!("{breakage}<h1>"))).unwrap();
        let err = support::browser::check_page(&browser, &page, &shots.join("broken-report.png"))
            .expect_err(&format!("the check passed a page with {breakage}"));
        assert!(err.contains(expect), "{breakage}: {err}");
        eprintln!("as it should, the check failed the page with {breakage}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The case: select predicted 0 MiB and 0 threads at 50,000 connections, fixed-thread
/// models 0 threads, and unmeasured kernel memory 0 MiB.
#[test]
fn plan_derives_every_figure_from_measured_rows_and_refuses_what_a_model_cannot_hold() {
    let dir = std::env::temp_dir().join(format!("sockscale-plan-test-{}", std::process::id()));
    let results = synthetic_results(&dir);
    let out = Command::new(BIN).arg("plan").arg("--from").arg(&results).args(["--target", "50000"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // 3,000 KiB + 50,000 × 1 KiB = 52 MiB; five threads whatever the load; CPU in proportion
    // to the paced rows' traffic, within both rows' spreads (16–20% at 3,000, 36–45% at 8,000):
    // 16/3,000 to 45/8,000 of a core a connection, 2.67–2.81 cores; kernel memory not measured.
    assert!(
        text.contains("| epoll | 52 MiB (1.00 KiB/connection) | not measured | 2.67–2.81 (26.7–28.1% of a core per MB/s) | 5 (fixed) | 1,000, 3,000, 8,000; extrapolated ×6.2 |"),
        "{text}"
    );
    assert!(
        text.contains(
            "epoll, kernel socket memory: not measured (no kernel socket memory recorded with 3,000 connections open)"
        ),
        "{text}"
    );
    assert!(text.contains("select cannot hold 50,000 connections: FD_SETSIZE is 1,024."), "{text}");
    assert!(text.contains("| tokio | not measured: flood row: the server did not start |"), "{text}");
    assert!(text.contains("at 200 B/s per connection"), "{text}");
    for line in text.lines().filter(|l| l.starts_with("| ")) {
        assert!(!line.contains("| 0 MiB") && !line.contains("| 0 |"), "a zero that was not measured: {line}");
    }
}

#[test]
fn plan_rejects_impossible_input_in_one_line() {
    let dir = std::env::temp_dir().join(format!("sockscale-plan-bad-{}", std::process::id()));
    let results = synthetic_results(&dir);
    let not_results = dir.join("not-results.json");
    std::fs::write(&not_results, "{\"requests\": 3}").unwrap();
    let empty = dir.join("empty.json");
    let text = std::fs::read_to_string(&results).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["models"] = serde_json::json!([]);
    std::fs::write(&empty, value.to_string()).unwrap();
    let (results, not_results, empty) =
        (results.display().to_string(), not_results.display().to_string(), empty.display().to_string());
    for (args, expect) in [
        (vec!["--connections", "0"], "'--connections <CONNECTIONS>': must be 1 or more"),
        (vec!["--connections", "10,-5"], "invalid value '-5' for '--connections <CONNECTIONS>'"),
        (vec!["--ops", "0"], "'--ops <OPS>': must be 1 or more"),
        (vec!["--buffer-size", "0"], "'--buffer-size <BUFFER_SIZE>': must be more than 0"),
        (vec!["--link", "-100"], "'--link <LINK>': expected megabits per second, more than 0"),
        (vec!["--link-connections", "0"], "'--link-connections <LINK_CONNECTIONS>': must be 1 or more"),
        (vec!["--from", &results, "--target", "0"], "'--target <TARGET>': must be 1 or more"),
        (vec!["--from", &results, "--target", "-50000"], "invalid value '-50000' for '--target <TARGET>'"),
        (vec!["--target", "50000"], "--target 50000 predicts from measured results: add --from RESULTS"),
        (vec!["--from", &results, "--ops", "4"], "'--from <RESULTS>' cannot be used with '--ops <OPS>'"),
        (vec!["--from", &not_results], "is not a sockscale bench result"),
        (vec!["--from", &empty], "the results hold nothing to predict from: it lists no models"),
    ] {
        let out = Command::new(BIN).arg("plan").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "plan {args:?} was accepted: {}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(err.lines().count(), 1, "plan {args:?}: {err}");
        assert!(err.contains(expect), "plan {args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With stderr not a terminal (CI logs), every step prints a plain line as it ends.
#[test]
fn bench_prints_a_line_per_step_when_not_a_terminal() {
    let dir = std::env::temp_dir().join(format!("sockscale-bench-progress-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args(["bench", "--profile", "tiny", "--rounds", "2", "--models", "epoll", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // One model in two rounds: 3 rows, HTTP at 2 concurrencies × keep-alive on/off, HTTPS at 1
    // × keep-alive and a full handshake per request, HTTP/2 at 1 × h2c and h2, WebSocket echo at
    // 1, idle WebSockets, UDP; nginx takes its turn at each of the 8 HTTP sweep points when it is
    // installed (it serves no WebSocket). Re-runs of disturbed
    // measurements add steps at the end of theirs.
    // HTTP/3 at 1, where the model serves it, and Caddy's turn at it when found.
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().any(|p| std::path::Path::new(p).exists());
    let caddy = caddy_found();
    let h3 = usize::from(serves_http3("epoll"));
    let planned = 2 * (14 + h3 + if nginx { 8 } else { 0 } + if caddy { 1 } else { 0 });
    let reruns = err.lines().filter(|l| l.contains("] re-run ")).count();
    let total = planned + reruns;
    let per_round = planned / 2;
    // The counter's total grows by one with each re-run.
    if reruns == 0 {
        let width = total.to_string().len();
        for (k, line) in err.lines().filter(|l| l.contains(" … done in ")).enumerate() {
            assert!(line.starts_with(&format!("[{:>width$}/{total}] round ", k + 1)), "{line}");
        }
    }
    let mut expected = vec![
        "round 1/2 · flood, 20 connections · epoll … done in ".to_owned(),
        "round 2/2 · flood, 20 connections · epoll … done in ".to_owned(),
        "round 1/2 · rate-limited, 40 connections · epoll … done in ".to_owned(),
        "round 2/2 · maximum, up to 120 connections · epoll … done in ".to_owned(),
        "round 1/2 · HTTP keep-alive, 10 connections · epoll … done in ".to_owned(),
        "round 2/2 · HTTPS full handshake per request, 10 connections · epoll … done in ".to_owned(),
        "round 1/2 · HTTP/2 h2c, 10 connections · epoll … done in ".to_owned(),
        "round 2/2 · HTTP/2 over TLS, 10 connections · epoll … done in ".to_owned(),
        "round 1/2 · WebSocket echo, 10 connections · epoll … done in ".to_owned(),
        "round 2/2 · idle WebSockets, 100 connections · epoll … done in ".to_owned(),
        "round 2/2 · UDP echo · epoll … done in ".to_owned(),
    ];
    if nginx {
        expected.push("round 2/2 · HTTP/2 over TLS, 10 connections · nginx … done in ".to_owned());
    } else {
        assert!(err.lines().any(|l| l.starts_with("nginx: skipped: nginx is not installed")), "{err}");
    }
    if h3 == 1 {
        expected.push("round 2/2 · HTTP/3 over QUIC, 10 connections · epoll … done in ".to_owned());
    }
    if caddy {
        expected.push("round 1/2 · HTTP/3 over QUIC, 10 connections · caddy … done in ".to_owned());
    } else {
        assert!(err.lines().any(|l| l.starts_with("caddy: skipped: caddy was not found")), "{err}");
    }
    for line in expected {
        assert!(err.lines().any(|l| l.contains(&line) && l.ends_with(" s")), "no line {line:?} in\n{err}");
    }
    assert_eq!(err.lines().filter(|l| l.contains(" … done in ")).count(), total, "{per_round} a round: {err}");
    assert!(err.lines().last().is_some_and(|l| l == format!("bench finished: {total} of {total} steps")), "{err}");
    assert!(!err.contains('\r'), "no live bar when stderr is not a terminal: {err:?}");
}

/// Every markdown table in `text` has as many cells in each row as its header has.
fn assert_tables_well_formed(text: &str) {
    let cells = |line: &str| line.trim().trim_matches('|').split('|').count();
    for block in text.split("\n\n") {
        let lines: Vec<&str> = block.lines().filter(|l| l.starts_with('|')).collect();
        let Some(header) = lines.first() else { continue };
        assert!(lines.len() >= 2, "a table header with no separator: {block}");
        let n = cells(header);
        assert!(
            header.trim().trim_matches('|').split('|').all(|c| !c.trim().is_empty()),
            "an empty header cell: {header}"
        );
        assert!(lines[1].trim().trim_matches('|').split('|').all(|c| c == "---"), "not a separator: {}", lines[1]);
        for line in &lines[1..] {
            assert_eq!(cells(line), n, "{line} under {header}");
        }
    }
}

/// What an interrupted bench left in `dir`: nothing, or a complete report marked partial.
fn assert_nothing_or_complete_and_partial(dir: &std::path::Path, when: &str) {
    let reports = ["results.json", "table.md", "report.html", "rows.csv", "http.csv"];
    let present: Vec<&str> = reports.iter().copied().filter(|f| dir.join(f).exists()).collect();
    if present.is_empty() {
        return;
    }
    assert_eq!(present, reports, "{when}: some reports are missing");
    let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
    // Well-formed tables first: an interrupted run used to write an HTTP header with no columns.
    assert_tables_well_formed(&table);
    assert!(
        table.starts_with("## Partial results\n\nThese results are partial: the run was interrupted."),
        "{when}: {table}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).expect("whole JSON");
    assert_eq!(r["interrupted"], true, "{when}");
    assert_eq!(r["in_progress"], false, "{when}: the run ended");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<h2>Partial results</h2>"), "{when}: report.html is not marked partial");
    assert!(html.contains("(partial results)</title>"), "{when}: the page title hides that it is partial");
    assert!(html.trim_end().ends_with("</html>"), "{when}: report.html is whole");
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{when}: temporary files left: {leftovers:?}");
}

/// SIGINT very early and after the first step: what is left is nothing, or every report,
/// whole, marked partial, with well-formed tables.
#[test]
fn interrupted_bench_leaves_nothing_or_a_complete_partial_report() {
    for (i, when) in ["at once", "after 100 ms", "after the first step"].into_iter().enumerate() {
        let dir = std::env::temp_dir().join(format!("sockscale-bench-partial-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut bench = Command::new(BIN);
        bench
            .args(["bench", "--profile", "tiny", "--rounds", "1", "--models", "epoll,select", "--out"])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // SIGINT with its default action, whatever this test inherited: a test run started in
        // the background by a script (`cargo test &`) ignores SIGINT, and a process that
        // inherits that drops a SIGINT sent before its main() has run, so the "at once" case
        // would race the bench's start-up instead of testing it.
        // SAFETY: signal(2) is async-signal-safe; SIG_DFL installs no handler code.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut bench, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut bench = bench.spawn().unwrap();
        let stderr = bench.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut stderr = stderr;
            let mut seen = Vec::new();
            let mut byte = [0u8];
            while stderr.read(&mut byte).is_ok_and(|n| n == 1) {
                seen.push(byte[0]);
                if byte[0] == b'\n' {
                    let _ = tx.send(String::from_utf8_lossy(&seen).into_owned());
                }
            }
        });
        match i {
            0 => {}
            1 => std::thread::sleep(std::time::Duration::from_millis(100)),
            _ => {
                // Notes may come before the steps (a peer server skipped, and why): wait past
                // them. Each message is all of stderr so far, its last line the newest.
                let line = loop {
                    let seen = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("a first step line");
                    let last = seen.trim_end().lines().last().unwrap_or_default().to_owned();
                    if !last.contains(": skipped") && !last.contains(": no HTTP/3 sweep") {
                        break last;
                    }
                };
                assert!(line.contains("[ 1/"), "{line}");
            }
        }
        sockscale_sys::signal_process(bench.id(), libc::SIGINT).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(status) = bench.try_wait().unwrap() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "{when}: the bench did not stop");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(!status.success(), "{when}: an interrupted bench exits non-zero");
        assert_nothing_or_complete_and_partial(&dir, when);
        if i == 2 {
            let r: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
            let error = r["models"][0]["error"].as_str().unwrap_or("");
            assert!(error.starts_with("interrupted"), "the stopped model says so: {error}");
            let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
            assert!(table.contains("Not measured: select."), "{table}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
