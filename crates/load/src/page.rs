//! `load … --html FILE`: one run as a page, drawn from its [`Report`] alone (so `load merge
//! --html` draws a merged run the same way). One offline file: inline SVG charts, inline CSS, a
//! few lines of inline script that sort tables and, opened with `?check`, report errors and
//! broken figures into the page (which the browser check reads); nothing is fetched. The two
//! scripts are the bench report's too.
//!
//! What it shows: the summary figures; the latency percentile spectrum (HdrHistogram's plot:
//! percentile on a log 1/(1-p) axis), corrected and uncorrected; requests, errors and latency
//! second by second; connections and client CPU second by second; errors by kind; the settings.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::report::{human_us, Report};

/// Colours, one a line, in order.
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

/// One line of a chart.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// How a chart's x axis is labelled.
enum XAxis {
    /// Plain numbers with this unit.
    Linear(&'static str),
    /// The percentile spectrum: x is log10(1/(1-p)); ticks at 0%, 90%, 99%, 99.9%…
    Percentile,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" step for about `n` ticks over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn label(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_owned()
    }
}

/// An SVG line chart; empty series are left out, and a chart with none says so.
fn chart(title: &str, x_axis: XAxis, y_label: &str, series: &[Series]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 300.0, 64.0, 16.0, 28.0, 44.0);
    let series: Vec<&Series> = series.iter().filter(|s| !s.points.is_empty()).collect();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<figure><svg class="chart" role="img" aria-label="{t}" viewBox="0 0 {w} {h}" width="{w}" height="{h}"><title>{t}</title><text x="{left}" y="18" class="title">{t}</text>"#,
        t = escape(title)
    );
    if series.is_empty() {
        let _ = write!(svg, r#"<text x="{left}" y="{}" class="none">nothing measured</text></svg></figure>"#, h / 2.0);
        return svg;
    }
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_min = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max).max(x_min + 1e-9);
    let y_max = all().map(|p| p.1).fold(0.0, f64::max);
    let y_step = nice_step(y_max, 5.0);
    let y_top = ((y_max / y_step).ceil() * y_step).max(y_step);
    let px = |x: f64| left + (x - x_min) / (x_max - x_min) * (w - left - right);
    let py = |y: f64| top + (1.0 - y / y_top) * (h - top - bottom);
    // Grid and y ticks.
    let mut y = 0.0;
    while y <= y_top + y_step / 2.0 {
        let _ = write!(
            svg,
            r#"<line x1="{left}" x2="{}" y1="{py:.1}" y2="{py:.1}" class="grid"/><text x="{}" y="{:.1}" class="tick" text-anchor="end">{}</text>"#,
            w - right,
            left - 6.0,
            py(y) + 4.0,
            label(y),
            py = py(y)
        );
        y += y_step;
    }
    // X ticks.
    let ticks: Vec<(f64, String)> = match x_axis {
        XAxis::Linear(_) => {
            let step = nice_step(x_max - x_min, 8.0);
            let mut x = (x_min / step).ceil() * step;
            let mut ticks = Vec::new();
            while x <= x_max + step / 1000.0 {
                ticks.push((x, label(x)));
                x += step;
            }
            ticks
        }
        XAxis::Percentile => (0..=(x_max.floor() as i32))
            .map(|k| {
                let p = 100.0 * (1.0 - 10f64.powi(-k));
                let text = if k <= 2 { format!("{p:.0}%") } else { format!("{p:.*}%", (k - 2) as usize) };
                (f64::from(k), text)
            })
            .collect(),
    };
    for (x, text) in ticks {
        let _ = write!(
            svg,
            r#"<line x1="{px:.1}" x2="{px:.1}" y1="{top}" y2="{}" class="grid"/><text x="{px:.1}" y="{}" class="tick" text-anchor="middle">{}</text>"#,
            h - bottom,
            h - bottom + 16.0,
            escape(&text),
            px = px(x)
        );
    }
    let x_label = match x_axis {
        XAxis::Linear(unit) => unit,
        XAxis::Percentile => "percentile (log scale of 1/(1-p))",
    };
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" class="axis" text-anchor="middle">{}</text><text x="14" y="{}" class="axis" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        (left + w - right) / 2.0,
        h - 6.0,
        escape(x_label),
        h / 2.0,
        h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ =
            write!(svg, r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#, points.join(" "));
        let ly = top + 4.0 + 16.0 * i as f64;
        let _ = write!(
            svg,
            r#"<rect x="{}" y="{ly}" width="12" height="4" fill="{colour}"/><text x="{}" y="{}" class="legend">{}</text>"#,
            w - right - 230.0,
            w - right - 212.0,
            ly + 6.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

/// HdrHistogram's percentile spectrum of `h`, in ms: x = log10(1/(1-p)), up to the percentile
/// its count resolves.
fn spectrum(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let x_max = (h.len() as f64).log10().max(1.0);
    let mut points = Vec::new();
    let mut x = 0.0;
    while x <= x_max + 1e-9 {
        let q = 1.0 - 10f64.powf(-x);
        points.push((x, h.value_at_quantile(q) as f64 / 1e6));
        x += 0.05;
    }
    points.push((x_max, h.max() as f64 / 1e6));
    points
}

fn row(cells: &[String]) -> String {
    let mut s = String::from("<tr>");
    for c in cells {
        let _ = write!(s, "<td>{c}</td>");
    }
    s.push_str("</tr>");
    s
}

/// Remove every `hdr` field (a [`crate::figures::Latency`]'s base64 histogram) from `value`.
fn strip_encoded_histograms(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(o) => {
            o.remove("hdr");
            o.values_mut().for_each(strip_encoded_histograms);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_encoded_histograms),
        _ => {}
    }
}

fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::from(r#"<table class="sortable"><thead><tr>"#);
    for h in header {
        let _ = write!(s, "<th>{}</th>", escape(h));
    }
    s.push_str("</tr></thead><tbody>");
    for r in rows {
        s.push_str(&row(r));
    }
    s.push_str("</tbody></table>");
    s
}

fn latency_row(name: &str, l: &crate::report::Latency) -> Vec<String> {
    [name.to_owned()]
        .into_iter()
        .chain([l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us].map(human_us))
        .chain([l.count.to_string()])
        .collect()
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}\
td:first-child,th:first-child{text-align:left}th{background:#f4f4f4;cursor:pointer}\
.chart .grid{stroke:#eee}.chart .tick,.chart .legend{font-size:11px;fill:#444}.chart .axis{font-size:12px;fill:#222}\
.chart .title{font-size:13px;font-weight:600}.chart .none{fill:#888}figure{margin:8px 0}\
.note{color:#555}#console-errors:empty{display:none}#console-errors{color:#b00020}.bad{color:#b00020;font-weight:600}pre{background:#f8f8f8;padding:8px;overflow:auto}";

// The pages' scripts (this page's and the bench report's): sorting tables, and the check a
// headless browser reads.

/// Sorts a table by the column whose heading is clicked (again: the other way): numbers by
/// value (thousands separators and units after the number ignored), other cells as text, a
/// cell of neither after the numbers. A row whose first cell is empty continues the row above
/// (a model's further rows): before the first sort it is given that name, greyed, so a sorted
/// row still says whose it is. Inline, so the page needs no network.
pub const SORT_SCRIPT: &str = r#"
(function () {
  function key(text) {
    var m = text.replace(/,/g, "").match(/^\s*[-+]?\d+(\.\d+)?/);
    return m ? parseFloat(m[0]) : null;
  }
  document.querySelectorAll("table").forEach(function (table) {
    var head = table.tHead && table.tHead.rows[0];
    var body = table.tBodies[0];
    if (!head || !body) return;
    Array.prototype.forEach.call(head.cells, function (th, col) {
      th.title = "Sort by this column";
      th.addEventListener("click", function () {
        var up = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(head.cells, function (c) { c.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        var rows = Array.prototype.slice.call(body.rows), group = "";
        rows.forEach(function (r) {
          var first = r.cells[0];
          if (!first) return;
          if (first.textContent.trim() === "" && group !== "") {
            first.textContent = group;
            first.className = "repeat";
          } else {
            group = first.textContent;
          }
        });
        rows.sort(function (a, b) {
          var x = a.cells[col] ? a.cells[col].textContent : "", y = b.cells[col] ? b.cells[col].textContent : "";
          var p = key(x), q = key(y), c;
          if (p !== null && q !== null) c = p - q;
          else if (p !== null) c = -1;
          else if (q !== null) c = 1;
          else c = x.localeCompare(y);
          return up ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"#;

/// Only with `?check` in the page's address (as the browser test opens it): every error the
/// page raises (a script error, `console.error`, a resource that failed to load) is written
/// into `<pre id="console-errors">`, and once the page has loaded `<pre id="resource-check">`
/// says how many images and figures it has and which are broken (an image with no pixels, a
/// figure drawn at no size), so a headless browser's `--dump-dom` shows both.
pub const CHECK_SCRIPT: &str = r#"
(function () {
  if (!/[?&]check\b/.test(location.search)) return;
  var errors = [];
  function show() {
    var pre = document.getElementById("console-errors");
    if (!pre) {
      pre = document.createElement("pre");
      pre.id = "console-errors";
      (document.body || document.documentElement).appendChild(pre);
    }
    pre.textContent = errors.join("\n");
  }
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) errors.push("failed to load: " + (t.src || t.href));
    else errors.push("error: " + e.message + " (" + e.filename + ":" + e.lineno + ")");
    show();
  }, true);
  window.addEventListener("unhandledrejection", function (e) { errors.push("unhandled rejection: " + e.reason); show(); });
  var consoleError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    show();
    return consoleError.apply(console, arguments);
  };
  window.addEventListener("load", function () {
    show();
    var broken = [];
    Array.prototype.forEach.call(document.images, function (img) {
      if (!img.complete || img.naturalWidth === 0) broken.push("image " + img.getAttribute("src"));
    });
    var figures = document.querySelectorAll("figure svg");
    Array.prototype.forEach.call(figures, function (svg, i) {
      var box = svg.getBoundingClientRect();
      if (!(box.width > 0 && box.height > 0)) broken.push("figure " + (i + 1) + " drawn at no size");
    });
    // Every table sorted by each column, both ways, and back: a script error shows above.
    var sorts = 0;
    document.querySelectorAll("thead th").forEach(function (th) { th.click(); th.click(); sorts += 2; });
    var pre = document.createElement("pre");
    pre.id = "resource-check";
    pre.textContent = "images=" + document.images.length + " figures=" + figures.length + " tables=" +
      document.querySelectorAll("table").length + " sorts=" + sorts + " broken=" + broken.length + (broken.length ? ": " + broken.join("; ") : "");
    document.body.appendChild(pre);
  });
})();
"#;

/// A Unix time as people read a date: `2026-11-26 13:54:47 UTC` (the report keeps the exact
/// seconds).
fn utc(unix_s: f64) -> String {
    let at = std::time::Duration::try_from_secs_f64(unix_s).ok().and_then(|d| std::time::UNIX_EPOCH.checked_add(d));
    match at {
        // RFC 3339's `2026-11-26T13:54:47Z`, with a space and the zone's name.
        Some(at) => humantime::format_rfc3339_seconds(at).to_string().replacen('T', " ", 1).replace('Z', " UTC"),
        None => format!("Unix time {unix_s:.3}"),
    }
}

/// The page of one run.
pub fn render(report: &Report) -> String {
    let mut html = String::new();
    let title = format!("sockscale load: {} on {}", report.mode, report.target);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style><script>{CHECK_SCRIPT}</script></head><body><h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    let started = report.window.as_ref().map(|w| format!(" from {}", utc(w.started_unix_s))).unwrap_or_default();
    let _ = write!(
        html,
        r#"<p class="note">{:.2} s measured{started}, {} process(es), {} thread(s) on {} ({} CPU(s) allowed)</p>"#,
        report.duration_s,
        report.procs,
        report.threads,
        escape(report.host.as_deref().unwrap_or("this host")),
        report.cpus
    );
    // Summary.
    html.push_str("<h2>Summary</h2>");
    let failures = report.failures();
    let mut summary = vec![
        vec!["requests sent".into(), report.requests.sent.to_string()],
        vec!["requests completed".into(), report.requests.completed.to_string()],
        vec!["completed per second".into(), format!("{:.0}", report.rates.requests_per_s)],
    ];
    if let Some(asked) = report.asked_rate() {
        summary.push(vec!["rate asked (-R)".into(), format!("{asked:.0}/s")]);
    }
    summary.push(vec![
        "errors".into(),
        if failures == 0 {
            "none".into()
        } else {
            format!("<span class=\"bad\">{failures}: {}</span>", escape(&report.failure_list()))
        },
    ]);
    summary.push(vec![
        "client CPU".into(),
        format!(
            "{:.2} s ({:.0}% of a core){}",
            report.cpu.user_s + report.cpu.system_s,
            report.rates.cpu_percent,
            if report.rates.client_bound { ": client-bound, figures may measure the client" } else { "" }
        ),
    ]);
    html.push_str(&table(&["figure", "value"], &summary));
    let mut latencies = vec![latency_row(
        if report.asked_rate().is_some() { "corrected (from the schedule)" } else { "from each send" },
        &report.latency,
    )];
    if !report.latency_uncorrected.is_empty() {
        latencies.push(latency_row("uncorrected (from each actual send)", &report.latency_uncorrected));
    }
    if !report.schedule_slip.is_empty() {
        latencies.push(latency_row("schedule slip (how late sends left)", &report.schedule_slip));
    }
    if !report.connect_latency.is_empty() {
        latencies.push(latency_row("connect", &report.connect_latency));
    }
    html.push_str(&table(&["latency", "p50", "p90", "p99", "p99.9", "max", "mean", "samples"], &latencies));

    // The percentile spectrum.
    html.push_str("<h2>Latency by percentile</h2>");
    let mut spectra = Vec::new();
    for (name, l) in [("corrected", &report.latency), ("uncorrected", &report.latency_uncorrected)] {
        if let Ok(h) = l.histogram() {
            let name = if report.asked_rate().is_none() && name == "corrected" { "from each send" } else { name };
            spectra.push(Series { name: name.into(), points: spectrum(&h) });
        }
    }
    html.push_str(&chart("latency percentile spectrum", XAxis::Percentile, "latency (ms)", &spectra));

    // Over time.
    html.push_str("<h2>Over time</h2>");
    let t = |s: &crate::report::Second| s.t as f64 + s.length_s;
    let per_s = |n: u64, s: &crate::report::Second| n as f64 / s.length_s.max(1e-3);
    let tl = &report.timeline;
    html.push_str(&chart(
        "requests per second",
        XAxis::Linear("seconds into the run"),
        "per second",
        &[
            Series { name: "completed".into(), points: tl.iter().map(|s| (t(s), per_s(s.completed, s))).collect() },
            Series {
                name: "errors".into(),
                points: if tl.iter().any(|s| s.errors > 0) {
                    tl.iter().map(|s| (t(s), per_s(s.errors, s))).collect()
                } else {
                    Vec::new()
                },
            },
        ],
    ));
    let lat = |f: fn(&crate::report::SecondLatency) -> Option<f64>| -> Vec<(f64, f64)> {
        tl.iter().filter_map(|s| Some((t(s), f(s.latency.as_ref()?)? / 1000.0))).collect()
    };
    let latency_series = [
        Series { name: "p50".into(), points: lat(|l| Some(l.p50_us)) },
        Series { name: "p99".into(), points: lat(|l| Some(l.p99_us)) },
        Series { name: "max".into(), points: lat(|l| Some(l.max_us)) },
        Series { name: "uncorrected p99".into(), points: lat(|l| l.uncorrected_p99_us) },
    ];
    if latency_series.iter().all(|s| s.points.is_empty()) {
        html.push_str(
            "<p class=\"note\">Latency second by second comes from the interval log, which this report was not given (a merge of reports without their logs).</p>",
        );
    } else {
        html.push_str(&chart(
            "latency per second",
            XAxis::Linear("seconds into the run"),
            "latency (ms)",
            &latency_series,
        ));
    }
    html.push_str(&chart(
        "connections open",
        XAxis::Linear("seconds into the run"),
        "connections",
        &[Series { name: "open".into(), points: tl.iter().map(|s| (t(s), s.open as f64)).collect() }],
    ));
    html.push_str(&chart(
        "client CPU",
        XAxis::Linear("seconds into the run"),
        "% of one core",
        &[Series {
            name: "client CPU".into(),
            points: tl.iter().map(|s| (t(s), 100.0 * s.cpu_s / s.length_s.max(1e-3))).collect(),
        }],
    ));

    // Errors by kind.
    html.push_str("<h2>Errors by kind</h2>");
    let errors = serde_json::to_value(&report.errors).unwrap_or_default();
    let mut rows: Vec<Vec<String>> =
        errors.as_object().map(|o| o.iter().map(|(k, v)| vec![escape(k), v.to_string()]).collect()).unwrap_or_default();
    if report.udp.lost > 0 {
        rows.push(vec!["udp lost".into(), report.udp.lost.to_string()]);
    }
    html.push_str(&table(&["kind", "count"], &rows));
    for (name, block) in [
        ("TLS", report.tls.as_ref().and_then(|t| serde_json::to_value(t).ok())),
        ("HTTP/2", report.h2.as_ref().and_then(|h| serde_json::to_value(h).ok())),
        ("WebSocket", report.ws.as_ref().and_then(|w| serde_json::to_value(w).ok())),
        ("QUIC", report.quic.as_ref().and_then(|q| serde_json::to_value(q).ok())),
    ] {
        if let Some(mut block) = block {
            // A latency's encoded histogram is for `merge`, not for reading: its percentiles stay.
            strip_encoded_histograms(&mut block);
            let text = serde_json::to_string_pretty(&block).unwrap_or_default();
            let _ = write!(html, "<h2>{name}</h2><pre>{}</pre>", escape(&text));
        }
    }

    // Settings.
    html.push_str("<h2>Settings</h2>");
    let options = report.options.as_object().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = options
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| vec![escape(k), escape(v.to_string().trim_matches('"'))])
        .collect();
    html.push_str(&table(&["option", "value"], &rows));
    let _ = writeln!(html, "<script>{SORT_SCRIPT}</script></body></html>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spectrum_reaches_the_percentile_the_count_resolves() {
        let mut h = crate::report::new_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap();
        }
        let points = spectrum(&h);
        assert_eq!(points.first().map(|p| p.0), Some(0.0));
        let last = points.last().unwrap();
        assert!((last.0 - 4.0).abs() < 1e-9, "10,000 samples resolve 99.99%: {last:?}");
        assert!((last.1 - 10.0).abs() < 0.01, "the max, 10 ms: {last:?}");
        // p90 is at x = 1: 9 ms.
        let p90 = points.iter().find(|p| (p.0 - 1.0).abs() < 1e-6).unwrap();
        assert!((p90.1 - 9.0).abs() < 0.01, "{p90:?}");
    }

    #[test]
    fn a_page_escapes_what_it_shows_and_says_when_nothing_was_measured() {
        let report = Report { target: "<x>".into(), mode: "http".into(), ..Report::default() };
        let page = render(&report);
        assert!(page.contains("&lt;x&gt;") && !page.contains("<x>"));
        assert!(page.contains("nothing measured"));
        assert!(page.starts_with("<!doctype html>") && page.ends_with("</html>\n"));
    }

    #[test]
    fn an_http3_run_shows_its_quic_block_with_latency_percentiles_but_no_encoded_histogram() {
        let mut h = crate::report::new_histogram();
        h.record(1_500_000).unwrap();
        let handshake = crate::figures::Latency::from_histogram(&h);
        assert!(!handshake.hdr.is_empty());
        let quic = crate::quic_report::Quic {
            version: 1,
            handshakes: 7,
            packets_lost: 3,
            handshake_latency: handshake.clone(),
            ..Default::default()
        };
        let report = Report { mode: "http".into(), quic: Some(quic), ..Report::default() };
        let page = render(&report);
        assert!(page.contains("<h2>QUIC</h2>"), "no QUIC section");
        assert!(page.contains("&quot;handshakes&quot;: 7") && page.contains("&quot;packets_lost&quot;: 3"));
        assert!(page.contains("&quot;p50_us&quot;: 1500"), "the handshake latency's percentiles are shown");
        assert!(!page.contains(&handshake.hdr), "the base64 histogram is not");
    }

    #[test]
    fn the_header_shows_the_start_as_a_date() {
        let window = crate::report::Window {
            start_at_unix_s: None,
            started_unix_s: 1_795_701_287.925,
            ended_unix_s: 1_795_701_297.0,
        };
        let report = Report { mode: "echo".into(), window: Some(window), ..Report::default() };
        let page = render(&report);
        assert!(page.contains(" measured from 2026-11-26 13:54:47 UTC, "), "{}", &page[..page.len().min(4000)]);
        assert!(!page.contains("Unix time"));
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
    }
}
