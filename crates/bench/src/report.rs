//! `sockscale report`: charts and an HTML page drawn from a results JSON alone.
//!
//! Six figures, each as SVG and PNG. Four for the echo rows (throughput, CPU, memory per
//! connection, threads), each with one panel per workload (flood, rate-limited, maximum) and
//! one labelled bar per model: the workloads differ in traffic and connections, so no line
//! joins them. One for the seed-003 HTTP sweep: responses per second against concurrency, with
//! and without keep-alive, one line per model (nginx included when it was measured). One for
//! the same sweep over TLS, with a panel for keep-alive and one for a full handshake per
//! request: HTTP and HTTPS never share a line, nor two workloads a panel. Every
//! model keeps one colour and marker in every figure. The HTML page inlines the SVGs and the
//! tables, so it opens from disk with no network. Text is drawn with the DejaVu Sans font
//! built into the binary, so the PNGs render the same on a machine with no fonts installed.

use sockscale_load::page::{CHECK_SCRIPT, SORT_SCRIPT};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::{SegmentValue, ValueFormatter};
use plotters::coord::types::RangedCoordi32;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::results::{HttpWorkload, Results, Row, RowKind};
use crate::tables::{decimal, thousands};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {reason}")]
    Write { path: String, reason: String },
}

/// One figure, written as `{file}.svg` and `{file}.png`.
#[derive(Debug, Clone)]
pub struct Figure {
    pub file: &'static str,
    /// Drawn at the top of the image.
    pub title: String,
    /// The HTML page's caption under the figure: what was measured and how (the title is in
    /// the image already).
    pub caption: String,
    pub panels: Vec<Panel>,
}

#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    /// The axis the values are read on, with their unit.
    pub value_axis: String,
    /// Values on a log scale (they span orders of magnitude).
    pub log_values: bool,
    pub plot: Plot,
}

#[derive(Debug, Clone)]
pub enum Plot {
    /// One bar per model, all from rows of one workload.
    Bars { workload: RowKind, bars: Vec<Bar> },
    /// One line per model against concurrency (log scale), all of one HTTP workload.
    Lines { x_axis: String, workload: HttpWorkload, series: Vec<Series> },
    /// One line per model through a row of one workload: its latency spectrum, or a figure over
    /// the row's time.
    Curves { x_axis: String, x: XScale, workload: RowKind, series: Vec<Series> },
}

/// What the x axis of [`Plot::Curves`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    /// Percentiles as HdrHistogram plots them: x is log10(1 / (1 - p)), so 1 is 90%, 2 is 99%,
    /// 3 is 99.9%; the axis is labelled with the percentiles.
    Percentile,
    /// Seconds from the start of the row's sampling.
    Seconds,
}

#[derive(Debug, Clone)]
pub struct Bar {
    pub model: String,
    pub style: Style,
    /// `None` when the model has no row of this workload; `label` says why.
    pub value: Option<f64>,
    /// Printed at the end of the bar: the value with its unit, and what qualifies it.
    pub label: String,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub model: String,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
}

/// How one model is drawn, the same in every figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub colour: (u8, u8, u8),
    pub marker: Marker,
    pub dashed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
}

/// Ten colours that stay apart from each other (CIE76 ΔE above 30) and stand out on white
/// (contrast 3:1 or more, WCAG's minimum for graphics): the category10 palette, with its pale
/// orange, olive, pink, cyan and purple darkened and black instead of its grey.
const COLOURS: [(u8, u8, u8); 10] = [
    (0xd6, 0x27, 0x28),
    (0xe8, 0x71, 0x0a),
    (0x8c, 0x56, 0x4b),
    (0x94, 0x94, 0x14),
    (0xd5, 0x5f, 0xb0),
    (0x1f, 0x77, 0xb4),
    (0x13, 0x96, 0xa6),
    (0x7b, 0x4f, 0xb8),
    (0x2c, 0xa0, 0x2c),
    (0x00, 0x00, 0x00),
];
const MARKERS: [Marker; 5] = [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::Cross];

/// The style of the `i`th model: colours first, and markers and dashes so that even two
/// models of similar colour differ in shape.
pub fn style(i: usize) -> Style {
    Style {
        colour: COLOURS[i % COLOURS.len()],
        marker: MARKERS[i % MARKERS.len()],
        dashed: (i / MARKERS.len()) % 2 == 1,
    }
}

/// The style of a model by name: its place among all nine models (nginx tenth), so a model
/// looks the same in every report, whichever models a run measured. Names not known here
/// (results from another version) take the places after those.
fn styled_models(results: &Results) -> Vec<(String, Style)> {
    let mut known: Vec<String> = sockscale_server::Model::ALL.iter().map(|m| m.name().to_owned()).collect();
    known.push("nginx".into());
    for m in results.all_results() {
        if !known.contains(&m.model) {
            known.push(m.model.clone());
        }
    }
    known.into_iter().enumerate().map(|(i, name)| (name, style(i))).collect()
}

/// One echo metric: its value for a row (or why the row cannot give it) and the bar label.
struct Metric {
    file: &'static str,
    title: &'static str,
    caption: &'static str,
    value_axis: &'static str,
    log_values: bool,
    value: fn(&Row) -> Result<f64, &'static str>,
    label: fn(&Row, f64) -> String,
}

const NO_STATUS_SAMPLE: &str = "not measured (/proc/PID/status could not be read)";
const NO_STAT_SAMPLE: &str = "not measured (/proc/PID/stat could not be read)";

const ECHO_METRICS: [Metric; 4] = [
    Metric {
        file: "throughput",
        title: "Echo throughput received by the clients",
        caption: "Bytes per second the load generator received back, over each row's measured time (1 MB = 10⁶ bytes). One panel per workload: the workloads differ in connections and traffic, so their figures are not comparable with each other.",
        value_axis: "MB/s received by the clients",
        log_values: false,
        value: |r| Ok(r.received_bytes_per_s / 1e6),
        label: |_, v| format!("{} MB/s", decimal(v)),
    },
    Metric {
        file: "cpu",
        title: "Server CPU",
        caption: "Server process CPU (user + system, every thread) over one-second samples, as a percentage of one core: the bar reaches the highest sample, the label gives the lowest–highest range. The first second, while connections are set up, is left out when there are enough samples.",
        value_axis: "% of one core, highest 1 s sample",
        log_values: false,
        value: |r| r.server_cpu_pct().map(|(_, max)| max).ok_or(NO_STAT_SAMPLE),
        label: |r, _| format!("{:.0}–{:.0}%", r.cpu_min_pct, r.cpu_max_pct),
    },
    Metric {
        file: "memory_per_connection",
        title: "Server memory per connection",
        caption: "The server's resident memory (largest sample) divided by the connections it held at its peak. This includes the process's fixed memory, so it falls as connections grow; it is not the marginal cost of one connection.",
        value_axis: "KiB of server RSS per connection held",
        log_values: false,
        value: |r| {
            let held = r.connected_held().ok_or("not measured (the server printed no stats line)")?;
            let rss = r.server_rss().ok_or(NO_STATUS_SAMPLE)?;
            if held == 0 {
                return Err("not measured (no connection held)");
            }
            Ok(rss as f64 / held as f64)
        },
        label: |r, v| format!("{} KiB ({} KiB RSS)", decimal(v), thousands(r.server_rss_kib)),
    },
    Metric {
        file: "threads",
        title: "Server threads",
        caption: "Threads of the server process, largest sample, on a log scale. Three of them (main, signals, stats) belong to the command line.",
        value_axis: "threads (log scale)",
        log_values: true,
        value: |r| r.server_threads().map(|t| t as f64).ok_or(NO_STATUS_SAMPLE),
        label: |_, v| thousands(v as u64),
    },
];

/// What the panel of one workload measured, from the profile the run used.
fn workload_title(results: &Results, kind: RowKind) -> String {
    let attempted = results
        .models
        .iter()
        .flat_map(|m| &m.rows)
        .find(|r| r.kind == Some(kind))
        .map_or_else(|| "no".to_owned(), |r| thousands(r.attempted));
    let p = &results.parameters;
    let n = |k: &str| p.get(k).and_then(serde_json::Value::as_u64).map_or_else(|| "?".to_owned(), thousands);
    match kind {
        RowKind::Flood => {
            format!("flood: {attempted} connections, each sending {} B messages as fast as echoes return", n("msg_len"))
        }
        RowKind::RateLimited => format!(
            "rate-limited: {attempted} connections, blocks of {} sending {} B/s in total",
            n("block"),
            n("block_rate")
        ),
        RowKind::Maximum => {
            format!("maximum: up to {attempted} connections, added at {}/s, rate-limited", n("ramp_rate"))
        }
    }
}

/// The figures, as data: what is drawn, from the results alone.
pub fn figures(results: &Results) -> Vec<Figure> {
    let styles = styled_models(results);
    let style_of = |name: &str| styles.iter().find(|(n, _)| n == name).map_or(style(0), |(_, s)| *s);
    let mut figures: Vec<Figure> = ECHO_METRICS
        .iter()
        .map(|metric| Figure {
            file: metric.file,
            title: metric.title.to_owned(),
            caption: metric.caption.to_owned(),
            panels: [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum]
                .into_iter()
                .map(|kind| Panel {
                    title: workload_title(results, kind),
                    value_axis: metric.value_axis.to_owned(),
                    log_values: metric.log_values,
                    plot: Plot::Bars {
                        workload: kind,
                        bars: results
                            .models
                            .iter()
                            .map(|m| {
                                let row = m.rows.iter().find(|r| r.kind == Some(kind));
                                let (value, label) = match row.map(|r| (r, (metric.value)(r))) {
                                    Some((r, Ok(v))) => {
                                        let held = match r.connected_held() {
                                            Some(held) if held < r.attempted => format!(
                                                "; {} of {} connections held",
                                                thousands(held),
                                                thousands(r.attempted)
                                            ),
                                            Some(_) => String::new(),
                                            None => "; connections held not measured".to_owned(),
                                        };
                                        (Some(v), format!("{}{held}", (metric.label)(r, v)))
                                    }
                                    Some((_, Err(why))) => (None, why.to_owned()),
                                    None if m.error.is_some() => {
                                        (None, "not measured (failed: see the table)".to_owned())
                                    }
                                    None => (None, "not measured".to_owned()),
                                };
                                Bar { model: m.model.clone(), style: style_of(&m.model), value, label }
                            })
                            .collect(),
                    },
                })
                .collect(),
        })
        .collect();
    let http_panel = |workload: HttpWorkload| Panel {
        title: match workload {
            HttpWorkload::KeepAlive => "keep-alive: requests over open connections",
            HttpWorkload::NewConnection => "no keep-alive: a new connection for every request",
            HttpWorkload::TlsKeepAlive => "HTTPS keep-alive: requests over open TLS connections",
            HttpWorkload::TlsFullHandshake => "HTTPS, a new connection for every request: a full handshake each",
            HttpWorkload::TlsResumed => "HTTPS, a new connection for every request: a resumed handshake each",
            HttpWorkload::H2c => "h2c: HTTP/2 without TLS, streams on each connection",
            HttpWorkload::H2Tls => "h2: HTTP/2 over TLS, streams on each connection",
        }
        .to_owned(),
        value_axis: "responses per second".to_owned(),
        log_values: false,
        plot: Plot::Lines {
            x_axis: "concurrent connections (log scale)".to_owned(),
            workload,
            series: results
                .all_results()
                .filter(|m| m.http.iter().any(|p| p.workload() == workload))
                .map(|m| {
                    let mut points: Vec<(f64, f64)> = m
                        .http
                        .iter()
                        .filter(|p| p.workload() == workload)
                        .map(|p| (p.concurrency as f64, p.requests_per_s))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series { model: m.model.clone(), style: style_of(&m.model), points }
                })
                .collect(),
        },
    };
    figures.push(Figure {
        file: "http",
        title: "HTTP 4 KiB responses per second by concurrency (seed 003)".to_owned(),
        caption: "Responses per second the load generator received for GET / of a 4,096-byte page, over each point's measured time, at each concurrency; nginx with one worker when it was installed. Errors and client-bound points are marked in the HTTP tables.".to_owned(),
        panels: vec![http_panel(HttpWorkload::KeepAlive), http_panel(HttpWorkload::NewConnection)],
    });
    figures.push(Figure {
        file: "https",
        title: "HTTPS 4 KiB responses per second by concurrency".to_owned(),
        caption: "The same page over TLS (an ECDSA P-256 certificate made for the run, verified by the load generator): with keep-alive, one handshake per connection when it opens; without, a new connection and a full handshake (no resumption) for every request, so that panel is the server's rate of full handshakes. sockscale with rustls, nginx (one worker) with OpenSSL when it was installed. Errors and client-bound points are marked in the HTTPS tables.".to_owned(),
        panels: [HttpWorkload::TlsKeepAlive, HttpWorkload::TlsFullHandshake, HttpWorkload::TlsResumed]
            .into_iter()
            .map(http_panel)
            .collect(),
    });
    figures.push(Figure {
        file: "http2",
        title: "HTTP/2 4 KiB responses per second by concurrency".to_owned(),
        caption: "The same page over HTTP/2, as h2load drives it: concurrent streams on each connection (the point's `streams`), h2c with prior knowledge and h2 over TLS (ALPN); nginx (one worker) when it was installed.".to_owned(),
        panels: [HttpWorkload::H2c, HttpWorkload::H2Tls].into_iter().map(http_panel).collect(),
    });
    figures.push(latency_figure(results, &style_of));
    for kind in [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum] {
        figures.push(over_time_figure(results, kind, &style_of));
    }
    // A panel with nothing to place (no model measured, or no HTTP point of that kind) is left
    // out, and a figure left with no panel is not drawn: an empty axis says nothing, and
    // plotters cannot lay out a bar axis of no bars.
    for figure in &mut figures {
        figure.panels.retain(|p| match &p.plot {
            Plot::Bars { bars, .. } => !bars.is_empty(),
            Plot::Lines { series, .. } | Plot::Curves { series, .. } => series.iter().any(|s| !s.points.is_empty()),
        });
    }
    figures.retain(|f| !f.panels.is_empty());
    figures
}

/// The latency spectrum of a row's histogram (`latency_hdr`), as HdrHistogram plots it: each
/// point (log10(1 / (1 - p)), latency in ms at percentile p), from p = 0 to the largest value,
/// which stands at the percentile of the last sample (1 - 1/count). `None` when the row kept
/// no histogram, or it does not decode.
pub fn latency_spectrum(hdr: &str) -> Option<Vec<(f64, f64)>> {
    let latency = sockscale_load::report::Latency { hdr: hdr.to_owned(), ..Default::default() };
    let h = latency.histogram().ok().filter(|h| !h.is_empty())?;
    let last = (h.len() as f64).log10();
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut points = vec![(0.0, ms(h.min()))];
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q >= 1.0 { last } else { (1.0 / (1.0 - q)).log10().min(last) };
        let y = ms(h.highest_equivalent(v.value_iterated_to()));
        if points.last().is_some_and(|&(px, _)| x < px) {
            continue;
        }
        points.push((x, y));
    }
    if points.last().is_some_and(|&(x, _)| x < last) {
        points.push((last, ms(h.max())));
    }
    Some(points)
}

/// The percentile at `x` = log10(1 / (1 - p)) on a spectrum's axis, as a label: 0%, 90%,
/// 99%, 99.9%…; none between whole numbers.
pub fn percentile_label(x: f64) -> String {
    if (x - x.round()).abs() > 1e-6 || x < -1e-6 {
        return String::new();
    }
    let k = x.round() as usize;
    match k {
        0 => "0%".to_owned(),
        1 => "90%".to_owned(),
        _ => format!("99.{}%", "9".repeat(k - 2)).replace(".%", "%"),
    }
}

const ROW_KINDS: [RowKind; 3] = [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum];

/// The latency distribution of every row: one panel per workload, one line per model.
fn latency_figure(results: &Results, style_of: &dyn Fn(&str) -> Style) -> Figure {
    Figure {
        file: "latency",
        title: "Echo latency by percentile (HdrHistogram spectrum)".to_owned(),
        caption: "Each message's round trip, from the load generator's HDR histogram of the row (nanosecond resolution, three significant digits), plotted by percentile as HdrHistogram does: the x axis stretches the tail (0%, 90%, 99%, 99.9%…), the y axis is on a log scale. Each line ends at the row's largest latency. A model whose row kept no histogram (results from before it was kept) has no line.".to_owned(),
        panels: ROW_KINDS
            .into_iter()
            .map(|kind| Panel {
                title: workload_title(results, kind),
                value_axis: "latency, ms (log scale)".to_owned(),
                log_values: true,
                plot: Plot::Curves {
                    x_axis: "percentile".to_owned(),
                    x: XScale::Percentile,
                    workload: kind,
                    series: results
                        .models
                        .iter()
                        .filter_map(|m| {
                            let row = m.rows.iter().find(|r| r.kind == Some(kind))?;
                            let points = latency_spectrum(row.latency_hdr.as_deref()?)?;
                            Some(Series { model: m.model.clone(), style: style_of(&m.model), points })
                        })
                        .collect(),
                },
            })
            .collect(),
    }
}

/// One row's intervals over time: connections held, server CPU and RSS, one line per model.
fn over_time_figure(results: &Results, kind: RowKind, style_of: &dyn Fn(&str) -> Style) -> Figure {
    type Value = fn(&crate::results::Interval) -> Option<f64>;
    let measures: [(&str, &str, Value); 3] = [
        ("connections held by the server", "connections held", |i| i.held.map(|h| h as f64)),
        ("server CPU", "% of one core", |i| Some(i.cpu_pct)),
        ("server resident memory (RSS)", "MiB", |i| i.rss_kib.map(|k| k as f64 / 1024.0)),
    ];
    let (file, name) = match kind {
        RowKind::Flood => ("over_time_flood", "flood"),
        RowKind::RateLimited => ("over_time_rate_limited", "rate-limited"),
        RowKind::Maximum => ("over_time_maximum", "maximum"),
    };
    Figure {
        file,
        title: format!("The {name} row over time"),
        caption: format!(
            "{}. The server sampled about once a second through the row (each point ends an interval; the first includes setting connections up): the connections it held (its own gauge), its CPU over the interval, and its resident memory; the load generator counted the exchanges completed each second of its measured phase (its clock starts when the load does, just after the server's sampling). A model whose row kept no per-second samples (results from before they were kept) has no line.",
            capitalized(&workload_title(results, kind))
        ),
        panels: std::iter::once(Panel {
            title: "throughput (the load generator's count)".to_owned(),
            value_axis: "exchanges completed per second".to_owned(),
            log_values: false,
            plot: Plot::Curves {
                x_axis: "seconds from the start of the row".to_owned(),
                x: XScale::Seconds,
                workload: kind,
                series: results
                    .models
                    .iter()
                    .filter_map(|m| {
                        let row = m.rows.iter().find(|r| r.kind == Some(kind))?;
                        let points = row.throughput.as_ref()?.iter().map(|p| (p.at_s, p.per_s)).collect();
                        Some(Series { model: m.model.clone(), style: style_of(&m.model), points })
                    })
                    .collect(),
            },
        })
        .chain(measures.into_iter().map(|(title, axis, value)| Panel {
                title: title.to_owned(),
                value_axis: axis.to_owned(),
                log_values: false,
                plot: Plot::Curves {
                    x_axis: "seconds from the start of the row".to_owned(),
                    x: XScale::Seconds,
                    workload: kind,
                    series: results
                        .models
                        .iter()
                        .filter_map(|m| {
                            let row = m.rows.iter().find(|r| r.kind == Some(kind))?;
                            let intervals = row.intervals.as_ref()?;
                            let points: Vec<(f64, f64)> = intervals
                                .iter()
                                .enumerate()
                                .filter_map(|(i, iv)| Some((iv.at_s.unwrap_or((i + 1) as f64), value(iv)?)))
                                .collect();
                            Some(Series { model: m.model.clone(), style: style_of(&m.model), points })
                        })
                        .collect(),
                },
            }))
            .collect(),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in; it is a valid TrueType font, so this cannot fail.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

const WIDTH: u32 = 1000;
/// Room for the legend of a line figure, right of its panels.
const LEGEND_WIDTH: u32 = 170;

/// A panel's height in pixels: bar panels grow with the number of models.
fn panel_height(panel: &Panel) -> u32 {
    match &panel.plot {
        Plot::Bars { bars, .. } => 110 + 30 * bars.len() as u32,
        Plot::Lines { .. } => 400,
        Plot::Curves { x: XScale::Percentile, .. } => 380,
        Plot::Curves { x: XScale::Seconds, .. } => 280,
    }
}

/// The pixel size a figure is drawn at: its title and its panels, one under the other.
fn size(figure: &Figure) -> (u32, u32) {
    (WIDTH, 60 + figure.panels.iter().map(panel_height).sum::<u32>())
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, figure: &Figure) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let body = root.titled(&figure.title, ("sans-serif", 24)).map_err(err)?;
    let lines = figure.panels.iter().any(|p| matches!(p.plot, Plot::Lines { .. } | Plot::Curves { .. }));
    let (panels_area, legend_area) = if lines {
        let (w, _) = body.dim_in_pixel();
        let (left, right) = body.split_horizontally(w.saturating_sub(LEGEND_WIDTH));
        (left, Some(right))
    } else {
        (body, None)
    };
    let mut rest = panels_area;
    for panel in &figure.panels {
        let (area, below) = rest.split_vertically(panel_height(panel));
        rest = below;
        match &panel.plot {
            Plot::Bars { bars, .. } => draw_bars(&area, panel, bars)?,
            Plot::Lines { x_axis, series, .. } => draw_lines(&area, panel, x_axis, series)?,
            Plot::Curves { x_axis, x, series, .. } => draw_curves(&area, panel, x_axis, *x, series)?,
        }
    }
    if let Some(legend) = legend_area {
        let mut seen = Vec::new();
        let series = figure.panels.iter().flat_map(|p| match &p.plot {
            Plot::Lines { series, .. } | Plot::Curves { series, .. } => series.as_slice(),
            Plot::Bars { .. } => &[],
        });
        for s in series {
            if !seen.iter().any(|(m, _)| m == &s.model) {
                seen.push((s.model.clone(), s.style));
            }
        }
        draw_legend(&legend, &seen)?;
    }
    root.present().map_err(err)
}

fn colour(style: Style) -> RGBColor {
    RGBColor(style.colour.0, style.colour.1, style.colour.2)
}

/// Horizontal bars, one per model, the first at the top, each labelled with its value.
fn draw_bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel, bars: &[Bar]) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let n = bars.len().max(1) as i32;
    let max = bars.iter().filter_map(|b| b.value).fold(0.0f64, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder.caption(&panel.title, ("sans-serif", 16)).margin(12).x_label_area_size(44).y_label_area_size(100);
    let rows = (0..n).into_segmented();
    if panel.log_values {
        // Room to the right of the longest bar for its label: a log axis needs a factor.
        let built = builder.build_cartesian_2d((0.8f64..(max.max(1.0) * 15.0)).log_scale(), rows).map_err(err)?;
        bars_into(built, panel, bars, 0.8)
    } else {
        let built = builder.build_cartesian_2d(0.0f64..(max.max(1e-9) * 1.6), rows).map_err(err)?;
        bars_into(built, panel, bars, 0.0)
    }
}

fn bars_into<DB, X>(
    mut ctx: ChartContext<'_, DB, Cartesian2d<X, plotters::coord::ranged1d::SegmentedCoord<RangedCoordi32>>>,
    panel: &Panel,
    bars: &[Bar],
    origin: f64,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let n = bars.len() as i32;
    // Segment 0 is at the bottom; the first model goes at the top.
    let slot = |i: usize| n - 1 - i as i32;
    let name = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(s) | SegmentValue::Exact(s) => {
            usize::try_from(n - 1 - s).ok().and_then(|i| bars.get(i)).map_or_else(String::new, |b| b.model.clone())
        }
        SegmentValue::Last => String::new(),
    };
    ctx.configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len())
        .y_label_formatter(&name)
        .x_desc(panel.value_axis.as_str())
        .x_label_formatter(&|x| short(*x))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, bar) in bars.iter().enumerate() {
        let s = slot(i);
        let text_style = ("sans-serif", 13).into_font().color(&BLACK);
        match bar.value {
            Some(v) => {
                let fill = colour(bar.style).filled();
                let end = v.max(origin);
                let mut rect =
                    Rectangle::new([(origin, SegmentValue::Exact(s)), (end, SegmentValue::Exact(s + 1))], fill);
                // A gap between neighbouring bars.
                rect.set_margin(3, 3, 0, 0);
                ctx.draw_series(std::iter::once(rect)).map_err(err)?;
                ctx.draw_series(std::iter::once(
                    EmptyElement::at((end, SegmentValue::CenterOf(s)))
                        + Text::new(bar.label.clone(), (6, -7), text_style),
                ))
                .map_err(err)?;
            }
            None => {
                ctx.draw_series(std::iter::once(
                    EmptyElement::at((origin, SegmentValue::CenterOf(s)))
                        + Text::new(bar.label.clone(), (6, -7), text_style.color(&RGBColor(0x80, 0x80, 0x80))),
                ))
                .map_err(err)?;
            }
        }
    }
    Ok(())
}

/// A marker of `style` centred on `at`, `size` pixels from its centre to its edge.
fn draw_marker<DB, CT>(area: &DrawingArea<DB, CT>, at: CT::From, style: Style, size: i32) -> Result<(), String>
where
    DB: DrawingBackend,
    CT: CoordTranslate,
    CT::From: Clone + 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let c = colour(style);
    let here = || EmptyElement::<CT::From, DB>::at(at.clone());
    match style.marker {
        Marker::Circle => area.draw(&(here() + Circle::new((0, 0), size, c.filled()))),
        Marker::Square => area.draw(&(here() + Rectangle::new([(-size, -size), (size, size)], c.filled()))),
        Marker::Triangle => {
            area.draw(&(here() + Polygon::new(vec![(0, -size - 1), (size + 1, size), (-size - 1, size)], c.filled())))
        }
        Marker::Diamond => area.draw(
            &(here() + Polygon::new(vec![(0, -size - 2), (size + 1, 0), (0, size + 2), (-size - 1, 0)], c.filled())),
        ),
        Marker::Cross => area.draw(
            &(here()
                + PathElement::new(vec![(-size, -size), (size, size)], c.stroke_width(3))
                + PathElement::new(vec![(-size, size), (size, -size)], c.stroke_width(3))),
        ),
    }
    .map_err(err)
}

/// One line per model against concurrency on a log axis, every point marked.
fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_axis: &str,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let points = || series.iter().flat_map(|s| s.points.iter());
    let x_min = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = points().map(|p| p.0).fold(1.0f64, f64::max);
    let y_max = points().map(|p| p.1).fold(0.0f64, f64::max);
    let x_min = if x_min.is_finite() { x_min * 0.7 } else { 1.0 };
    let mut ctx = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max * 1.4).log_scale(), 0.0..(y_max.max(1.0) * 1.1))
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc(x_axis)
        .y_desc(panel.value_axis.as_str())
        .x_label_formatter(&|x| short(*x))
        .y_label_formatter(&|y| short(*y))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for s in series {
        let line = colour(s.style).stroke_width(2);
        if s.style.dashed {
            ctx.draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 5, line)).map_err(err)?;
        } else {
            ctx.draw_series(LineSeries::new(s.points.iter().copied(), line)).map_err(err)?;
        }
        for &p in &s.points {
            draw_marker(ctx.plotting_area(), p, s.style, 5)?;
        }
    }
    Ok(())
}

/// Lines through a row, one per model: a latency spectrum (markers at 90%, 99%, 99.9%… and at
/// the largest value) or figures over time (every interval marked).
fn draw_curves<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_axis: &str,
    x: XScale,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let points = || series.iter().flat_map(|s| s.points.iter());
    let x_max = points().map(|p| p.0).fold(0.0f64, f64::max);
    let y_max = points().map(|p| p.1).fold(0.0f64, f64::max);
    let x_end = match x {
        // Whole decades, so the last label (99.9…%) is on the axis.
        XScale::Percentile => x_max.ceil().max(1.0),
        XScale::Seconds => (x_max * 1.05).max(1.0),
    };
    let marks = |s: &Series| -> Vec<(f64, f64)> {
        match x {
            XScale::Seconds => s.points.clone(),
            XScale::Percentile => {
                let mut marks: Vec<(f64, f64)> = (1..=x_end as usize)
                    .filter_map(|k| s.points.iter().find(|p| p.0 >= k as f64 - 1e-9).copied())
                    .collect();
                marks.extend(s.points.last().copied());
                marks.dedup();
                marks
            }
        }
    };
    let mut builder = ChartBuilder::on(area);
    builder.caption(&panel.title, ("sans-serif", 16)).margin(12).x_label_area_size(44).y_label_area_size(70);
    let x_format = |v: &f64| match x {
        XScale::Percentile => percentile_label(*v),
        XScale::Seconds => short(*v),
    };
    let x_labels = match x {
        XScale::Percentile => x_end as usize + 1,
        XScale::Seconds => 10,
    };
    macro_rules! finish {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(x_axis)
                .y_desc(panel.value_axis.as_str())
                .x_labels(x_labels)
                .x_label_formatter(&x_format)
                .y_label_formatter(&|y| short(*y))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 14))
                .draw()
                .map_err(err)?;
            for s in series {
                let line = colour(s.style).stroke_width(2);
                if s.style.dashed {
                    ctx.draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 5, line)).map_err(err)?;
                } else {
                    ctx.draw_series(LineSeries::new(s.points.iter().copied(), line)).map_err(err)?;
                }
                for p in marks(s) {
                    draw_marker(ctx.plotting_area(), p, s.style, 4)?;
                }
            }
        }};
    }
    if panel.log_values {
        let y_min = points().map(|p| p.1).filter(|&y| y > 0.0).fold(f64::INFINITY, f64::min);
        let y_min = if y_min.is_finite() { y_min * 0.7 } else { 1e-3 };
        finish!(builder.build_cartesian_2d(0.0..x_end, (y_min..(y_max.max(y_min) * 1.5)).log_scale()).map_err(err)?);
    } else {
        finish!(builder.build_cartesian_2d(0.0..x_end, 0.0..(y_max.max(1e-9) * 1.15)).map_err(err)?);
    }
    Ok(())
}

/// The legend of a line figure, in its own column: it covers no point.
fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[(String, Style)]) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    for (i, (name, style)) in entries.iter().enumerate() {
        let y = 60 + 26 * i as i32;
        let line = colour(*style).stroke_width(2);
        if style.dashed {
            area.draw(&PathElement::new(vec![(8, y), (14, y)], line)).map_err(err)?;
            area.draw(&PathElement::new(vec![(20, y), (26, y)], line)).map_err(err)?;
            area.draw(&PathElement::new(vec![(32, y), (38, y)], line)).map_err(err)?;
        } else {
            area.draw(&PathElement::new(vec![(8, y), (38, y)], line)).map_err(err)?;
        }
        draw_marker(area, (23, y), *style, 5)?;
        area.draw(&Text::new(name.clone(), (46, y - 8), ("sans-serif", 15).into_font().color(&BLACK))).map_err(err)?;
    }
    Ok(())
}

/// Write every chart as SVG and PNG and the HTML page into `dir`; returns the files written.
pub fn render(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    register_font();
    let fail = |path: &Path, reason: String| ReportError::Write { path: path.display().to_string(), reason };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e.to_string()))?;
    let mut written = Vec::new();
    let mut svgs = Vec::new();
    for figure in figures(results) {
        let svg = dir.join(format!("{}.svg", figure.file));
        draw(SVGBackend::new(&svg, size(&figure)).into_drawing_area(), &figure).map_err(|e| fail(&svg, e))?;
        let png = dir.join(format!("{}.png", figure.file));
        draw(BitMapBackend::new(&png, size(&figure)).into_drawing_area(), &figure).map_err(|e| fail(&png, e))?;
        let text = std::fs::read_to_string(&svg).map_err(|e| fail(&svg, e.to_string()))?;
        svgs.push((figure.file.to_owned(), figure.caption, text));
        written.push(svg);
        written.push(png);
    }
    let html = dir.join("report.html");
    std::fs::write(&html, page(results, &svgs)).map_err(|e| fail(&html, e.to_string()))?;
    written.push(html);
    Ok(written)
}

/// The page: the summary, the tables (each sortable by a click on a column's heading), then
/// each figure's SVG with its caption (what was measured; the figure's title is inside the SVG,
/// so it is not repeated) and links to its PNG and SVG files.
fn page(results: &Results, svgs: &[(String, String, String)]) -> String {
    let mut body = summary_html(results);
    let tables = crate::tables::tables_markdown(results);
    for block in tables.split("\n\n") {
        if let Some(heading) = block.strip_prefix("### ") {
            let _ = writeln!(body, "<h3>{}</h3>", escape(heading));
        } else if let Some(heading) = block.strip_prefix("## ") {
            let _ = writeln!(body, "<h2>{}</h2>", escape(heading));
        } else if block.starts_with('|') {
            body.push_str(&markdown_table_to_html(block));
        } else if !block.trim().is_empty() {
            let _ = writeln!(body, "<p>{}</p>", escape(block));
        }
    }
    body.push_str("<h2>Charts</h2>\n");
    if svgs.is_empty() {
        body.push_str("<p>No charts: no model was measured.</p>\n");
    }
    for (file, caption, svg) in svgs {
        let inline = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
        let _ = writeln!(
            body,
            "<figure id=\"{file}\">{inline}<figcaption>{}</figcaption><p class=\"files\"><a href=\"{file}.png\">{file}.png</a> · <a href=\"{file}.svg\">{file}.svg</a></p></figure>",
            escape(caption)
        );
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sockscale bench: {profile} profile, {started}{partial}</title>\n<script>{CHECK_SCRIPT}</script>\n<style>\nbody {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}\ntable {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}\nth, td {{ border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: right; }}\nth {{ background: #eee; cursor: pointer; }} th[aria-sort=ascending]::after {{ content: \" ▲\"; }} th[aria-sort=descending]::after {{ content: \" ▼\"; }}\ntd:first-child, th:first-child {{ text-align: left; }}\nfigure {{ margin: 1em 0; }} figure svg {{ max-width: 100%; height: auto; }} .files {{ font-size: 0.8em; }} td.repeat {{ color: #888; }}\n</style></head><body>\n<h1>sockscale bench</h1>\n{body}<script>{SORT_SCRIPT}</script>\n</body></html>\n",
        profile = escape(&results.profile),
        started = escape(&results.started),
        // A tab or a bookmark shows only the title: a partial run says so there too.
        partial = if results.interrupted || results.in_progress { " (partial results)" } else { "" },
    )
}

/// Who leads among `entries` (model, value), the highest first: the leader (several when tied)
/// with its value, and by how much it is ahead of the next. `tied` says when two values are the
/// same.
fn lead(
    mut entries: Vec<(String, f64)>,
    show: &dyn Fn(f64) -> String,
    tied: &dyn Fn(f64, f64) -> bool,
) -> (String, String) {
    entries.retain(|(_, v)| v.is_finite());
    entries.sort_by(|a, b| b.1.total_cmp(&a.1));
    let Some((_, top)) = entries.first().cloned() else {
        return ("not measured".to_owned(), String::new());
    };
    let (leaders, rest): (Vec<_>, Vec<_>) = entries.iter().partition(|(_, v)| tied(*v, top));
    let names: Vec<&str> = leaders.iter().map(|(m, _)| m.as_str()).collect();
    let leader = format!("{}: {}", names.join(", "), show(top));
    let ahead = match rest.first() {
        _ if entries.len() == 1 => "the only model measured".to_owned(),
        None => format!("tied: all {} models", entries.len()),
        Some((next, v)) if *v > 0.0 => format!("{:.2}× {next} ({})", top / v, show(*v)),
        Some((next, v)) => format!("{next} had {}", show(*v)),
    };
    (leader, ahead)
}

/// Within 1% of each other.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.01 * a.abs().max(b.abs())
}

/// The models a row or point was client-bound for, in words.
fn bottleneck(bound: &[&str], measured: usize) -> String {
    match bound.len() {
        0 => "no".to_owned(),
        n if n == measured && n > 1 => format!("yes, for every model ({})", bound.join(", ")),
        _ => format!("yes, for {}", bound.join(", ")),
    }
}

fn html_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut html = String::from("<table>\n<thead><tr>");
    for h in header {
        let _ = write!(html, "<th>{}</th>", escape(h));
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{}</td>", escape(cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n</table>\n");
    html
}

/// The page's opening: per row of Table 6-3 and per sweep point, the leading model and by how
/// much (per second of server CPU, and in connections held or responses per second), and where
/// the load generator, not the server, was the bottleneck.
pub fn summary_html(results: &Results) -> String {
    let mut html = String::from("<h2 id=\"summary\">Summary</h2>\n");
    let measured: Vec<_> = results.models.iter().filter(|m| !m.rows.is_empty()).collect();
    html.push_str("<p>Per server CPU-second is the work done for each second of CPU the server used (the mean of its samples): bytes echoed back to the clients in Table 6-3, responses in the sweeps. Where the client was the bottleneck (the load generator used 90% or more of its cores), the model's figures say what the load could drive, not what the server could do.</p>\n");
    if measured.is_empty() {
        html.push_str("<p>No row of Table 6-3 was measured.</p>\n");
    } else {
        let mut rows = Vec::new();
        for kind in ROW_KINDS {
            let of_kind: Vec<(&str, &Row)> = measured
                .iter()
                .filter_map(|m| m.rows.iter().find(|r| r.kind == Some(kind)).map(|r| (m.model.as_str(), r)))
                .collect();
            if of_kind.is_empty() {
                continue;
            }
            let attempted = of_kind.iter().map(|(_, r)| r.attempted).max().unwrap_or(0);
            let per_cpu = lead(
                of_kind.iter().filter_map(|(m, r)| Some((m.to_string(), r.bytes_per_cpu_second()?))).collect(),
                &|v| format!("{} MB per CPU-second", decimal(v / 1e6)),
                &close,
            );
            let held = lead(
                of_kind.iter().filter_map(|(m, r)| Some((m.to_string(), r.connected_held()? as f64))).collect(),
                &|v| format!("{} of {}", thousands(v as u64), thousands(attempted)),
                &|a, b| a == b,
            );
            let bound: Vec<&str> = of_kind.iter().filter(|(_, r)| r.client_bound).map(|(m, _)| *m).collect();
            rows.push(vec![
                format!("{} ({} connections)", kind.label(), thousands(attempted)),
                per_cpu.0,
                per_cpu.1,
                held.0,
                held.1,
                bottleneck(&bound, of_kind.len()),
            ]);
        }
        html.push_str("<h3>Table 6-3 rows</h3>\n");
        html.push_str(&html_table(
            &[
                "Row",
                "Most bytes per server CPU-second",
                "Ahead of the next by",
                "Most connections held",
                "Ahead of the next by",
                "Client the bottleneck",
            ],
            &rows,
        ));
    }
    let mut points: Vec<(HttpWorkload, u64)> =
        results.all_results().flat_map(|m| m.http.iter().map(|p| (p.workload(), p.concurrency))).collect();
    points.sort();
    points.dedup();
    if !points.is_empty() {
        let mut rows = Vec::new();
        for (workload, concurrency) in points {
            let at: Vec<(&str, &crate::results::HttpPoint)> = results
                .all_results()
                .filter_map(|m| {
                    m.http
                        .iter()
                        .find(|p| p.workload() == workload && p.concurrency == concurrency)
                        .map(|p| (m.model.as_str(), p))
                })
                .collect();
            let per_cpu = lead(
                at.iter()
                    .filter_map(|(m, p)| {
                        let cpu = p.server_cpu_pct.filter(|&c| c > 0.0)?;
                        Some((m.to_string(), p.requests_per_s / (cpu / 100.0)))
                    })
                    .collect(),
                &|v| format!("{} responses per CPU-second", thousands(v.round() as u64)),
                &close,
            );
            let rate = lead(
                at.iter().map(|(m, p)| (m.to_string(), p.requests_per_s)).collect(),
                &|v| format!("{}/s", thousands(v.round() as u64)),
                &close,
            );
            let bound: Vec<&str> = at.iter().filter(|(_, p)| p.client_bound).map(|(m, _)| *m).collect();
            rows.push(vec![
                format!(
                    "{}{}, {} connections",
                    if workload.tls() { "HTTPS " } else { "HTTP " },
                    workload.connection(),
                    thousands(concurrency)
                ),
                per_cpu.0,
                per_cpu.1,
                rate.0,
                rate.1,
                bottleneck(&bound, at.len()),
            ]);
        }
        html.push_str("<h3>HTTP and HTTPS sweep points</h3>\n<p>Every model holds the same connections at a sweep point (its concurrency), so the points compare responses: per server CPU-second, and per second.</p>\n");
        html.push_str(&html_table(
            &[
                "Sweep point",
                "Most responses per server CPU-second",
                "Ahead of the next by",
                "Most responses per second",
                "Ahead of the next by",
                "Client the bottleneck",
            ],
            &rows,
        ));
    }
    html
}

/// Axis numbers as people read them: 1500 → "1.5k", 2000000 → "2M".
fn short(v: f64) -> String {
    let a = v.abs();
    let (scaled, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let text = format!("{scaled:.1}");
    format!("{}{unit}", text.trim_end_matches('0').trim_end_matches('.'))
}

fn markdown_table_to_html(block: &str) -> String {
    let mut html = String::from("<table>\n");
    for (i, line) in block.lines().filter(|l| l.starts_with('|')).enumerate() {
        if i == 1 {
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        let tag = if i == 0 { "th" } else { "td" };
        if i == 0 {
            html.push_str("<thead>");
        } else if i == 2 {
            html.push_str("<tbody>\n");
        }
        html.push_str("<tr>");
        for cell in cells {
            let _ = write!(html, "<{tag}>{}</{tag}>", escape(cell));
        }
        html.push_str("</tr>");
        html.push_str(if i == 0 { "</thead>\n" } else { "\n" });
    }
    if block.lines().filter(|l| l.starts_with('|')).count() > 2 {
        html.push_str("</tbody>\n");
    }
    html.push_str("</table>\n");
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::results::{HttpPoint, ModelResult};

    fn readme_results() -> Results {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/images/bench-default-results.json");
        Results::load(path).expect("the README's results load")
    }

    #[test]
    fn short_numbers() {
        assert_eq!(super::short(0.0), "0");
        assert_eq!(super::short(950.0), "950");
        assert_eq!(super::short(1500.0), "1.5k");
        assert_eq!(super::short(2_000_000.0), "2M");
        assert_eq!(super::short(12.5), "12.5");
    }

    #[test]
    fn every_echo_panel_holds_one_workload_with_one_bar_per_model() {
        let r = readme_results();
        let figures = figures(&r);
        let echo: Vec<&Figure> = figures.iter().filter(|f| !f.file.starts_with("http")).collect();
        assert_eq!(echo.len(), 4);
        for f in echo {
            let workloads: Vec<RowKind> = f
                .panels
                .iter()
                .map(|p| match &p.plot {
                    Plot::Bars { workload, .. } => *workload,
                    Plot::Lines { .. } | Plot::Curves { .. } => {
                        panic!("{}: echo rows of different workloads drawn as a line", f.file)
                    }
                })
                .collect();
            assert_eq!(workloads, [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum], "{}", f.file);
            for p in &f.panels {
                let Plot::Bars { workload, bars } = &p.plot else { unreachable!() };
                let models: Vec<&str> = bars.iter().map(|b| b.model.as_str()).collect();
                let expected: Vec<&str> = r.models.iter().map(|m| m.model.as_str()).collect();
                assert_eq!(models, expected, "{}: one bar per model, in order", f.file);
                for (bar, m) in bars.iter().zip(&r.models) {
                    // Each bar is that model's row of this panel's workload, and no other.
                    let row = m.rows.iter().find(|row| row.kind == Some(*workload)).expect("row");
                    let want = match f.file {
                        "throughput" => row.received_bytes_per_s / 1e6,
                        "cpu" => row.cpu_max_pct,
                        "memory_per_connection" => row.server_rss_kib as f64 / row.connected as f64,
                        "threads" => row.threads as f64,
                        other => panic!("unexpected figure {other}"),
                    };
                    assert_eq!(bar.value, Some(want), "{} {}: {workload:?}", f.file, m.model);
                    assert!(!bar.label.is_empty());
                }
                assert!(p.value_axis.chars().any(|c| c.is_alphabetic()), "{}: value axis named", f.file);
            }
        }
        let throughput = &figures[0];
        assert!(throughput.panels.iter().all(|p| p.value_axis.contains("MB/s")), "units on the axis");
    }

    #[test]
    fn a_row_that_was_not_measured_is_a_labelled_gap_not_a_zero_bar() {
        let mut r = readme_results();
        r.models[0].rows.truncate(1);
        r.models[0].error = Some("rate-limited row: the server did not start".into());
        for f in figures(&r).iter().filter(|f| !f.file.starts_with("http")) {
            let Plot::Bars { bars, .. } = &f.panels[1].plot else { panic!() };
            assert_eq!(bars[0].value, None, "{}", f.file);
            assert!(bars[0].label.starts_with("not measured"), "{}: {}", f.file, bars[0].label);
        }
    }

    /// A row as the harness writes it when the server printed no stats line and its /proc/PID
    /// could not be read: the server-side figures are the zeros they started at.
    fn unsampled(row: &Row) -> Row {
        let mut v = serde_json::to_value(row).expect("a row serializes");
        for zero in ["connected", "server_rss_kib", "threads"] {
            v[zero] = 0.into();
        }
        for zero in ["cpu_min_pct", "cpu_max_pct"] {
            v[zero] = 0.0.into();
        }
        v["samples"] = serde_json::json!({"connections": 0, "rss": 0, "threads": 0, "cpu": 0});
        serde_json::from_value(v).expect("a row deserializes")
    }

    #[test]
    fn server_figures_with_no_sample_are_labelled_gaps_not_zero_bars() {
        let mut r = readme_results();
        r.models[0].rows[0] = unsampled(&r.models[0].rows[0]);
        let figures = figures(&r);
        for f in figures.iter().filter(|f| !f.file.starts_with("http")) {
            let Plot::Bars { bars, .. } = &f.panels[0].plot else { panic!() };
            if f.file == "throughput" {
                // Measured by the load generator, not sampled from the server.
                assert!(bars[0].value.is_some_and(|v| v > 0.0), "{}: {:?}", f.file, bars[0]);
            } else {
                assert_eq!(bars[0].value, None, "{}", f.file);
                assert!(bars[0].label.starts_with("not measured"), "{}: {}", f.file, bars[0].label);
            }
            assert!(!bars[0].label.contains("0 of"), "{}: no count of connections held: {}", f.file, bars[0].label);
            if f.file == "throughput" {
                assert!(bars[0].label.ends_with("; connections held not measured"), "{}", bars[0].label);
            }
            // The other rows keep their bars.
            assert!(bars[1].value.is_some(), "{}", f.file);
        }
        // The page's table says so too.
        let html = page(&r, &[]);
        assert!(html.contains("<td>1,000/not measured</td><td>not measured</td>"), "{html}");
    }

    #[test]
    fn http_figure_has_a_line_per_model_for_each_keepalive_setting() {
        let r = readme_results();
        let figures = figures(&r);
        let http = figures.iter().find(|f| f.file == "http").expect("http figure");
        let expected: Vec<&str> = r.all_results().map(|m| m.model.as_str()).collect();
        assert_eq!(http.panels.len(), 2);
        for (panel, want_keepalive) in http.panels.iter().zip([true, false]) {
            let Plot::Lines { workload, series, x_axis } = &panel.plot else { panic!("http is drawn as lines") };
            assert_eq!(workload.keepalive(), want_keepalive);
            assert!(!workload.tls());
            assert!(x_axis.contains("concurrent connections") && panel.value_axis.contains("per second"));
            let names: Vec<&str> = series.iter().map(|s| s.model.as_str()).collect();
            assert_eq!(names, expected, "one line per model, nginx included");
            for s in series {
                let m = r.all_results().find(|m| m.model == s.model).unwrap();
                let want: Vec<(f64, f64)> = m
                    .http
                    .iter()
                    .filter(|p: &&HttpPoint| p.keepalive == want_keepalive && !p.tls)
                    .map(|p| (p.concurrency as f64, p.requests_per_s))
                    .collect();
                assert_eq!(s.points, want, "{}: keep-alive {want_keepalive}", s.model);
            }
        }
    }

    /// Results with HTTP and HTTPS points for epoll and nginx, plain values.
    fn with_https() -> Results {
        let point = |concurrency: u64, keepalive: bool, tls: bool, requests_per_s: f64| HttpPoint {
            concurrency,
            keepalive,
            tls,
            tls_resume: tls.then_some(false),
            requests_per_s,
            ..HttpPoint::default()
        };
        let sweep = |scale: f64| {
            let mut points = Vec::new();
            for c in [10, 100] {
                points.push(point(c, true, false, 50_000.0 * scale));
                points.push(point(c, false, false, 20_000.0 * scale));
                points.push(point(c, true, true, 40_000.0 * scale + c as f64));
                points.push(point(c, false, true, 2_000.0 * scale + c as f64));
            }
            points
        };
        Results {
            models: vec![ModelResult { model: "epoll".into(), http: sweep(1.0), ..ModelResult::default() }],
            nginx: Some(ModelResult { model: "nginx".into(), http: sweep(0.5), ..ModelResult::default() }),
            ..Results::default()
        }
    }

    /// A model's line: its name and its points.
    type ModelLine = (String, Vec<(f64, f64)>);

    #[test]
    fn https_has_a_figure_of_its_own_one_workload_a_panel_one_line_a_model() {
        let r = with_https();
        let figures = figures(&r);
        let lines = |file: &str| -> Vec<(HttpWorkload, Vec<ModelLine>)> {
            let f = figures.iter().find(|f| f.file == file).unwrap_or_else(|| panic!("no {file} figure"));
            f.panels
                .iter()
                .map(|p| match &p.plot {
                    Plot::Lines { workload, series, .. } => {
                        (*workload, series.iter().map(|s| (s.model.clone(), s.points.clone())).collect())
                    }
                    Plot::Bars { .. } | Plot::Curves { .. } => panic!("{file} is drawn as lines against concurrency"),
                })
                .collect()
        };
        let http = lines("http");
        assert_eq!(
            http.iter().map(|p| p.0).collect::<Vec<_>>(),
            [HttpWorkload::KeepAlive, HttpWorkload::NewConnection]
        );
        assert_eq!(http[0].1[0], ("epoll".to_owned(), vec![(10.0, 50_000.0), (100.0, 50_000.0)]));
        assert_eq!(http[1].1[1], ("nginx".to_owned(), vec![(10.0, 10_000.0), (100.0, 10_000.0)]));
        let https = lines("https");
        // The resumed panel has no point, so it is left out.
        assert_eq!(
            https.iter().map(|p| p.0).collect::<Vec<_>>(),
            [HttpWorkload::TlsKeepAlive, HttpWorkload::TlsFullHandshake]
        );
        assert_eq!(https[0].1[0], ("epoll".to_owned(), vec![(10.0, 40_010.0), (100.0, 40_100.0)]));
        assert_eq!(https[1].1[0], ("epoll".to_owned(), vec![(10.0, 2_010.0), (100.0, 2_100.0)]));
        assert_eq!(https[1].1[1], ("nginx".to_owned(), vec![(10.0, 1_010.0), (100.0, 1_100.0)]));
        let dir = std::env::temp_dir().join(format!("sockscale-report-https-{}", std::process::id()));
        let written = render(&r, &dir).expect("render");
        assert!(written.contains(&dir.join("https.png")) && written.contains(&dir.join("https.svg")), "{written:?}");
        let html = std::fs::read_to_string(dir.join("report.html")).expect("page");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(html.contains("<h2>HTTPS 4 KiB responses by concurrency</h2>"), "{html}");
        assert!(
            html.contains("<td>epoll</td><td>new connection per request, full handshake</td><td>2,010</td>"),
            "{html}"
        );
        // Results without HTTPS points draw no HTTPS figure.
        let files: Vec<&str> = figures_of(&readme_results());
        assert!(files.contains(&"http") && !files.contains(&"https"), "{files:?}");
    }

    fn figures_of(r: &Results) -> Vec<&'static str> {
        figures(r).iter().map(|f| f.file).collect()
    }

    fn linear(c: u8) -> f64 {
        let c = f64::from(c) / 255.0;
        if c > 0.04045 {
            ((c + 0.055) / 1.055).powf(2.4)
        } else {
            c / 12.92
        }
    }

    /// WCAG relative luminance.
    fn luminance((r, g, b): (u8, u8, u8)) -> f64 {
        0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)
    }

    /// CIE76 colour difference.
    fn delta_e(a: (u8, u8, u8), b: (u8, u8, u8)) -> f64 {
        fn lab((r, g, b): (u8, u8, u8)) -> [f64; 3] {
            let (r, g, b) = (linear(r), linear(g), linear(b));
            let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
            let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
            let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
            let f = |t: f64| if t > 0.008856 { t.cbrt() } else { 7.787 * t + 16.0 / 116.0 };
            [116.0 * f(y) - 16.0, 500.0 * (f(x) - f(y)), 200.0 * (f(y) - f(z))]
        }
        let (a, b) = (lab(a), lab(b));
        a.iter().zip(b).map(|(p, q)| (p - q).powi(2)).sum::<f64>().sqrt()
    }

    #[test]
    fn ten_models_are_told_apart_by_colour_and_shape() {
        let styles: Vec<Style> = (0..10).map(style).collect();
        for (i, a) in styles.iter().enumerate() {
            // Readable on white: no pale yellow or cyan line.
            let contrast = 1.05 / (luminance(a.colour) + 0.05);
            assert!(contrast >= 3.0, "colour {i} {:?} has contrast {contrast:.2} on white", a.colour);
            for (j, b) in styles.iter().enumerate().take(i) {
                let d = delta_e(a.colour, b.colour);
                assert!(d > 30.0, "colours {j} {:?} and {i} {:?} are only {d:.0} apart", b.colour, a.colour);
                assert!((a.marker, a.dashed) != (b.marker, b.dashed), "{i} and {j} share marker and dash");
            }
        }
    }

    #[test]
    fn every_title_is_unique_and_the_page_shows_each_once() {
        let r = readme_results();
        let figures = figures(&r);
        let titles: BTreeSet<&str> = figures.iter().map(|f| f.title.as_str()).collect();
        assert_eq!(titles.len(), figures.len(), "figure titles are unique");
        for f in &figures {
            let panels: BTreeSet<&str> = f.panels.iter().map(|p| p.title.as_str()).collect();
            assert_eq!(panels.len(), f.panels.len(), "{}: panel titles are unique", f.file);
            assert_ne!(f.caption, f.title);
        }
        let dir = std::env::temp_dir().join(format!("sockscale-report-test-{}", std::process::id()));
        render(&r, &dir).expect("render");
        let html = std::fs::read_to_string(dir.join("report.html")).expect("page");
        for f in &figures {
            // Once, inside the figure's SVG; the caption under it says something else.
            assert_eq!(html.matches(&escape(&f.title)).count(), 1, "{}", f.title);
            assert!(html.contains(&format!("<figcaption>{}</figcaption>", escape(&f.caption))), "{}", f.file);
        }
        for file in ["throughput.png", "http.svg"] {
            assert!(std::fs::metadata(dir.join(file)).is_ok_and(|m| m.len() > 0), "{file}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A run stopped before its first model ends has nothing to chart: the page says so, and
    /// drawing does not panic on an axis of no bars (it did, in a debug build).
    #[test]
    fn a_run_with_no_model_measured_draws_a_page_without_charts() {
        let r = Results { interrupted: true, ..Results::default() };
        assert!(figures(&r).is_empty(), "no figure of nothing");
        let dir = std::env::temp_dir().join(format!("sockscale-report-empty-{}", std::process::id()));
        let written = render(&r, &dir).expect("render");
        assert_eq!(written, vec![dir.join("report.html")]);
        let html = std::fs::read_to_string(dir.join("report.html")).expect("page");
        assert!(html.contains("<p>No charts: no model was measured.</p>"), "{html}");
        let _ = std::fs::remove_dir_all(&dir);
        // Models measured but no HTTP point: the echo figures, no HTTP figure.
        let r = Results {
            models: vec![ModelResult { model: "epoll".into(), ..ModelResult::default() }],
            ..Results::default()
        };
        let files: Vec<&str> = figures(&r).iter().map(|f| f.file).collect();
        assert_eq!(files, ["throughput", "cpu", "memory_per_connection", "threads"]);
    }

    #[test]
    fn a_model_that_failed_before_any_row_still_gets_its_labelled_place() {
        let r = Results {
            models: vec![ModelResult {
                model: "uring".into(),
                error: Some("unavailable here: io_uring is disabled".into()),
                ..ModelResult::default()
            }],
            ..Results::default()
        };
        let figures = figures(&r);
        let Plot::Bars { bars, .. } = &figures[0].panels[0].plot else { panic!() };
        assert_eq!(bars.len(), 1);
        assert_eq!(bars[0].value, None);
        assert_eq!(bars[0].style, style(6), "uring keeps its colour when measured alone");
        assert!(bars[0].label.contains("failed"), "{}", bars[0].label);
    }

    #[test]
    fn percentile_axis_labels() {
        let labels: Vec<String> = [0.0, 0.5, 1.0, 2.0, 3.0, 5.0].into_iter().map(percentile_label).collect();
        assert_eq!(labels, ["0%", "", "90%", "99%", "99.9%", "99.999%"]);
    }

    /// 1,000 values 1..=1,000 µs: the spectrum runs from the smallest to the largest, rising,
    /// with the median at x = log10(2) and the largest at the last sample's percentile (x = 3).
    #[test]
    fn latency_spectrum_is_the_histograms_percentiles() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let hdr = sockscale_load::report::Latency::from_histogram(&h).hdr;
        let points = latency_spectrum(&hdr).expect("a spectrum");
        assert_eq!(points[0], (0.0, 0.001));
        let last = *points.last().unwrap();
        assert!((last.0 - 3.0).abs() < 1e-9 && (last.1 - 1.0).abs() < 0.001, "{last:?}");
        assert!(points.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{points:?}");
        let median = points.iter().find(|p| p.0 >= 2f64.log10() - 1e-9).unwrap();
        assert!((median.1 - 0.5).abs() < 0.01, "{median:?}");
        assert_eq!(latency_spectrum(""), None, "no histogram, no line");
        assert_eq!(latency_spectrum("not base64!"), None);
    }

    /// Two models' flood rows with histograms and intervals: a latency line and an over-time
    /// line each, in each model's colour, the intervals at their own times; the summary names
    /// the leader per CPU-second and by how much, the tie in connections held, and the
    /// client-bound row.
    #[test]
    fn spectra_time_lines_and_summary_from_the_results_alone() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        h.record(100_000).unwrap();
        let hdr = sockscale_load::report::Latency::from_histogram(&h).hdr;
        let iv = |at_s: f64, cpu_pct: f64| crate::results::Interval {
            cpu_pct,
            held: Some(20),
            rss_kib: Some(2048),
            at_s: Some(at_s),
        };
        let row = |bytes: f64, cpu: f64, bound: bool| Row {
            kind: Some(RowKind::Flood),
            attempted: 20,
            connected: 20,
            received_bytes_per_s: bytes,
            client_bound: bound,
            latency_hdr: Some(hdr.clone()),
            intervals: Some(vec![iv(0.5, cpu), iv(1.0, cpu)]),
            throughput: Some(vec![crate::results::PerSecond { at_s: 1.0, per_s: bytes / 100.0 }]),
            ..Row::default()
        };
        let r = Results {
            models: vec![
                ModelResult { model: "epoll".into(), rows: vec![row(30e6, 50.0, true)], ..ModelResult::default() },
                ModelResult { model: "select".into(), rows: vec![row(20e6, 100.0, false)], ..ModelResult::default() },
            ],
            ..Results::default()
        };
        let figures = figures(&r);
        let styles = styled_models(&r);
        let style_of = |m: &str| styles.iter().find(|(n, _)| n == m).unwrap().1;
        let latency = figures.iter().find(|f| f.file == "latency").expect("a latency figure");
        assert_eq!(latency.panels.len(), 1, "only the flood row was measured");
        let Plot::Curves { x: XScale::Percentile, series, .. } = &latency.panels[0].plot else { panic!() };
        assert_eq!(
            series.iter().map(|s| (s.model.as_str(), s.style)).collect::<Vec<_>>(),
            [("epoll", style_of("epoll")), ("select", style_of("select"))]
        );
        let over = figures.iter().find(|f| f.file == "over_time_flood").expect("the flood row over time");
        let titles: Vec<&str> = over.panels.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "throughput (the load generator's count)",
                "connections held by the server",
                "server CPU",
                "server resident memory (RSS)"
            ]
        );
        let Plot::Curves { x: XScale::Seconds, series, .. } = &over.panels[0].plot else { panic!() };
        assert_eq!(series[1].points, [(1.0, 200_000.0)], "select's throughput per second");
        let Plot::Curves { x: XScale::Seconds, series, .. } = &over.panels[2].plot else { panic!() };
        assert_eq!(series[1].points, [(0.5, 100.0), (1.0, 100.0)]);
        assert!(over.caption.contains("exchanges completed each second"));
        assert!(!figures.iter().any(|f| f.file == "over_time_maximum"), "no maximum row, no figure");

        let summary = summary_html(&r);
        // epoll: 30 MB/s at 50% = 60 MB per CPU-second; select 20 MB per CPU-second.
        assert!(
            summary.contains("<td>epoll: 60.0 MB per CPU-second</td><td>3.00× select (20.0 MB per CPU-second)</td>"),
            "{summary}"
        );
        assert!(
            summary.contains("<td>epoll, select: 20 of 20</td><td>tied: all 2 models</td><td>yes, for epoll</td>"),
            "{summary}"
        );
        let html = page(&r, &[]);
        assert!(html.find("Summary") < html.find("I/O models"), "the page opens with the summary");
        assert!(html.contains("<script>") && !html.contains("src=\"http"), "inline scripts, no network");
    }
}
