//! `sockscale report` on a results.json with repetitions (three models and nginx, a disturbed
//! point, a client-bound point, HTTP/2 points): the page reads top-down — the verdict in the
//! first screen, then the contents, the summary, the charts, the long tables — and opens in a
//! real browser with no script error.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::BIN;

/// The spread of `values` as results.json holds it.
fn spread(values: &[f64]) -> Value {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    json!({"min": v[0], "median": median, "max": v[n - 1], "n": n})
}

/// Three repetitions of figures `base` scaled by `factors`, and their spreads; the repetition
/// `disturbed` (if any) measured while the machine was busy.
fn repeats(base: &[(&str, f64)], factors: [f64; 3], client_bound: bool, disturbed: Option<usize>) -> (Value, Value) {
    let reps: Vec<Value> = factors
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let figures: serde_json::Map<String, Value> =
                base.iter().map(|(k, v)| ((*k).to_owned(), json!(v * f))).collect();
            let busy = disturbed == Some(i);
            json!({
                "round": i + 1, "figures": figures, "client_bound": client_bound, "server_bound": !client_bound,
                "errors": 0,
                "interference": {"seconds": 2.0, "server_cores": if busy { 0.9 } else { 0.02 }, "client_cores": 0.01,
                                 "disturbed": busy}
            })
        })
        .collect();
    let spreads: serde_json::Map<String, Value> = base
        .iter()
        .map(|(k, v)| ((*k).to_owned(), spread(&factors.iter().map(|f| v * f).collect::<Vec<_>>())))
        .collect();
    (Value::Array(reps), Value::Object(spreads))
}

fn row(kind: &str, connections: u64, bytes: f64, cpu: f64) -> Value {
    let (reps, spreads) = repeats(
        &[
            ("received_bytes_per_s", bytes),
            ("bytes_per_cpu_second", bytes * 100.0 / cpu),
            ("connections_held", connections as f64),
            ("server_rss_kib", 4000.0 + connections as f64),
            ("server_cpu_pct", cpu),
            ("client_cpu_pct", 40.0),
        ],
        [0.97, 1.0, 1.03],
        false,
        None,
    );
    json!({
        "kind": kind, "attempted": connections, "connected": connections, "client_peak_open": connections,
        "server_rss_kib": 4000 + connections, "kernel_tcp_kib": 0, "cpu_min_pct": cpu * 0.8, "cpu_max_pct": cpu * 1.2,
        "threads": 5, "sent_bytes_per_s": bytes, "received_bytes_per_s": bytes, "p50_us": 100.0, "p99_us": 900.0,
        "errors": {}, "client_cpu_pct": 40.0, "client_cores": 1, "client_bound": false, "duration_s": 2.0,
        "repeats": reps, "spread": spreads
    })
}

/// One sweep point, `kind` "keepalive", "close", "tls", "tls_close", "h2c" or "h2".
fn point(kind: &str, rate: f64, client_bound: bool, disturbed: Option<usize>) -> Value {
    let cpu = if client_bound { 60.0 } else { 95.0 };
    let (reps, spreads) = repeats(
        &[("requests_per_s", rate), ("responses_per_cpu_second", rate * 100.0 / cpu), ("server_cpu_pct", cpu)],
        [0.98, 1.0, 1.02],
        client_bound,
        disturbed,
    );
    let (keepalive, tls, http2) = match kind {
        "keepalive" => (true, false, false),
        "close" => (false, false, false),
        "tls" => (true, true, false),
        "tls_close" => (false, true, false),
        "h2c" => (true, false, true),
        _ => (true, true, true),
    };
    let mut p = json!({
        "concurrency": 10, "keepalive": keepalive, "requests_per_s": rate, "mean_ms": 0.2,
        "ms_per_request": 1000.0 / rate, "errors": 0, "client_bound": client_bound, "tls": tls,
        "server_cpu_pct": cpu,
        "latency": {"count": 1000, "mean_ms": 0.2, "p50_ms": 0.15, "p90_ms": 0.3, "p99_ms": 0.9, "max_ms": 4.0},
        "repeats": reps, "spread": spreads
    });
    if tls {
        p["tls_resume"] = json!(false);
    }
    if http2 {
        p["http2"] = json!(true);
        p["streams"] = json!(16);
    }
    if disturbed.is_some() {
        p["interference"] = json!({"seconds": 1.0, "server_cores": 0.9, "client_cores": 0.01, "disturbed": true});
    }
    p
}

fn model(name: &str, scale: f64, client_bound_keepalive: bool, disturbed_keepalive: bool) -> Value {
    json!({
        "model": name, "error": null, "udp": null,
        "rows": [
            row("flood", 20, 30e6 * scale, 90.0),
            row("rate_limited", 40, 2e6, 20.0 * scale),
            row("maximum", 120, 1e6, 30.0),
        ],
        "http": [
            point("keepalive", 100_000.0 * scale, client_bound_keepalive, disturbed_keepalive.then_some(1)),
            point("close", 20_000.0 * scale, false, None),
            point("tls", 60_000.0 * scale, false, None),
            point("tls_close", 2_000.0 * scale, false, None),
            point("h2c", 150_000.0 * scale, false, None),
            point("h2", 120_000.0 * scale, false, None),
        ]
    })
}

fn synthetic_results(dir: &Path) -> PathBuf {
    let nginx = json!({"model": "nginx", "error": null, "rows": [], "udp": null, "http": [
        point("keepalive", 100_500.0, false, None),
        point("close", 25_000.0, false, None),
        point("h2c", 160_000.0, false, None),
    ]});
    let results = json!({
        "schema": 2, "profile": "default", "started": "2026-12-01 09:00:00 UTC", "finished": "2026-12-01 09:07:00 UTC",
        "interrupted": false, "rounds": 3, "disturbed_above_cores": 0.25,
        "machine": {"cpu_model": "test CPU", "cores": 2, "memory_kib": 16u64 << 20, "kernel": "6.1", "somaxconn": "4096",
                    "tcp_mem_pages": "", "open_files_limit": 1_000_000, "io_uring": "available"},
        "parameters": {"block": 20, "block_rate": 200000, "msg_len": 64, "ramp_rate": 100},
        "models": [
            model("epoll", 1.0, false, true),
            model("select", 0.4, true, false),
            model("uring", 1.01, false, false),
        ],
        "nginx": nginx,
        "server_cpus": [0], "client_cpus": [1]
    });
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    path
}

/// The text of `<pre id="ID">` in a dumped DOM.
fn pre(dom: &str, id: &str) -> Option<String> {
    let open = format!("<pre id=\"{id}\">");
    let start = dom.find(&open)? + open.len();
    let end = dom[start..].find("</pre>")? + start;
    Some(dom[start..end].to_owned())
}

/// `name=N` in the layout check's line.
fn field(line: &str, name: &str) -> i64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

#[test]
fn the_report_reads_top_down_with_the_verdict_in_the_first_screen() {
    let dir = std::env::temp_dir().join(format!("sockscale-report-top-down-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let results = synthetic_results(&dir);
    let out = Command::new(BIN).arg("report").arg(&results).arg("--out").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["report.html", "http2.svg", "http2.png", "throughput.svg", "cpu.svg"] {
        assert!(std::fs::metadata(dir.join(file)).is_ok_and(|m| m.len() > 0), "{file}");
    }
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();

    // In the document: the run, the verdict, the contents, the summary, the charts, the tables.
    let at = |what: &str| html.find(what).unwrap_or_else(|| panic!("no {what} in the page"));
    let order = [
        "<h1>sockscale bench</h1>",
        "<p class=\"run\">Profile <code>default</code>, 3 rounds",
        "<section id=\"verdict\">",
        "<nav id=\"contents\">",
        "<h2 id=\"summary\">Summary</h2>",
        "<section id=\"charts\">",
        "<h2>I/O models (Table 6-3)</h2>",
        "<h2>The seed's Table 6-3, as printed</h2>",
        "<h2>HTTP 4 KiB responses by concurrency (seed 003)</h2>",
        "<h2>HTTPS 4 KiB responses by concurrency</h2>",
        "<h2>HTTP/2 4 KiB responses by concurrency</h2>",
    ];
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{} comes before {}", pair[0], pair[1]);
    }
    let verdict = at("<section id=\"verdict\">");
    assert!(verdict < at("<table>") && verdict < at("<svg") && verdict < at("<figure"), "nothing before the verdict");
    // Every chart before the first long table; the contents link both.
    let last_figure = html.rfind("<figure").unwrap();
    assert!(last_figure < at("<h2>I/O models (Table 6-3)</h2>"), "the charts come before the long tables");
    for link in ["#verdict", "#summary", "#charts", "#http2", "#t-http-2-4-kib-responses-by-concurrency"] {
        assert!(html.contains(&format!("<a href=\"{link}\">")), "the contents link {link}");
    }

    // Spread, marks and ties, as the page says them.
    assert!(
        html.contains("<td>epoll</td><td>yes</td><td>100,000 (98,000–102,000) † (server-bound)</td>"),
        "a disturbed point"
    );
    assert!(html.contains("<td>select</td><td>yes</td><td>40,000 (39,200–40,800) (client-bound)</td>"), "client-bound");
    assert!(html.contains("<td>epoll</td><td>h2c, 16 streams</td>"), "an HTTP/2 row");
    // uring, nginx and epoll (within 1% of each other, ranges of ±2%) are a tie, never "ahead".
    assert!(
        html.contains("<td>uring: 106,316 (104,189–108,442)</td><td>tie with nginx, epoll † (ranges overlap)</td>"),
        "the keep-alive tie names the disturbed epoll"
    );
    assert!(!html.contains("ahead of nginx by 1.0"), "no win inside the noise");
    assert!(html.contains("select: client-bound"), "the bottleneck per model");
    assert!(html.contains("The machine was busy during 1 of"), "the disturbed point is counted");
    // No seed row among ours; seed cells and every other cell on one line.
    assert!(!html.contains("<td>seed: "), "seed rows are a table of their own");
    assert!(html.contains("white-space: nowrap"));

    // In a real browser: no script error, nothing broken, and the verdict in the first screen.
    let browser = match support::browser::chromium() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped: the browser checks of the report: {why}");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    };
    let page = dir.join("report.html");
    let shot = support::browser::screenshot_dir().join("bench-report-top-down.png");
    let checked = support::browser::check_page(&browser, &page, &shot)
        .unwrap_or_else(|e| panic!("the browser check failed: {e}"));
    assert!(checked.resources.contains(" figures=") && !checked.resources.contains(" figures=0 "), "{checked:?}");
    eprintln!("browser check: {}; screenshot {}", checked.resources, checked.screenshot.display());

    // The first screen of a laptop: 1280 × 800. The page's own ?check hook measures where the
    // verdict stands (the shared check hook reports no positions).
    let layout = first_screen_layout(&browser, &page, (1280, 800));
    eprintln!("layout at 1280 × 800: {layout}");
    let viewport = field(&layout, "viewport");
    let top = field(&layout, "verdict_top");
    assert!((0..viewport / 2).contains(&top), "the verdict starts in the upper half of the first screen: {layout}");
    assert!(field(&layout, "first_figure") > field(&layout, "verdict_bottom"), "{layout}");
    assert!(field(&layout, "first_table") > field(&layout, "verdict_bottom"), "{layout}");
    if std::env::var_os("SOCKSCALE_KEEP_REPORT").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The page's layout line (`<pre id="layout-check">`), opened with `?check` in a window of
/// `size`.
fn first_screen_layout(browser: &Path, page: &Path, (width, height): (u32, u32)) -> String {
    let profile = std::env::temp_dir().join(format!("sockscale-chromium-layout-{}", std::process::id()));
    let url = format!("file://{}?check", page.canonicalize().unwrap().display());
    let out = Command::new(browser)
        .args(["--headless=new", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=5000", &format!("--window-size={width},{height}"), "--dump-dom", &url])
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout);
    pre(&dom, "layout-check").unwrap_or_else(|| panic!("no layout check in the page: {dom:.2000}"))
}
