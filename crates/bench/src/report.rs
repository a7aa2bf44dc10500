//! `sockscale report`: charts and an HTML page drawn from a results JSON alone.
//!
//! Six figures, each as SVG and PNG. Four for the echo rows (throughput, CPU, memory per
//! connection, threads), each with one panel per workload (flood, rate-limited, maximum) and
//! one labelled bar per model: the workloads differ in traffic and connections, so no line
//! joins them. One for the seed-003 HTTP sweep: responses per second against concurrency, with
//! and without keep-alive, one line per model (nginx included when it was measured). One for
//! the same sweep over TLS, with a panel for keep-alive and one for a full handshake per
//! request: HTTP and HTTPS never share a line, nor two workloads a panel. Every
//! model keeps one colour and marker in every figure. WebSocket has two: echo messages per server
//! CPU-second against concurrency, a line per model, and server bytes per idle WebSocket, a bar
//! per model (results from before WebSocket have neither). The HTML page inlines the SVGs and the
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

use crate::results::{figure, HttpPoint, HttpWorkload, Repeated, Results, Row, RowKind, Spread, WsIdle, WsPoint};
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
    /// One line per model against concurrency (log scale), all WebSocket echo points.
    WsLines { x_axis: String, series: Vec<Series> },
    /// One bar per model, all of idle WebSockets.
    WsBars { bars: Vec<Bar> },
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
    /// What else is drawn about the bar: its repetitions' range, its bottleneck, its machine.
    pub mark: PointMark,
}

/// What a bar or a point carries beside its value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PointMark {
    /// The lowest and highest of the repetitions, when there were several and they differ:
    /// drawn as an error bar.
    pub range: Option<(f64, f64)>,
    /// The load generator was the bottleneck (in any kept repetition): a lighter bar, a ring
    /// round the point.
    pub client_bound: bool,
    /// The machine disturbed a kept repetition: a † beside it.
    pub disturbed: bool,
}

impl PointMark {
    /// The marks of `item`: the range of `spread`'s figure (name, and the divisor the chart
    /// draws it by), if any, and its bottleneck and machine.
    fn of(item: &dyn Repeated, spread: Option<(&str, f64)>, client_bound: bool) -> PointMark {
        let range = spread.and_then(|(name, scale)| {
            item.spread_of(name).filter(|s| s.n > 1 && !s.is_single()).map(|s| (s.min / scale, s.max / scale))
        });
        PointMark {
            range,
            client_bound: client_bound || item.client_bound_repeats() > 0,
            disturbed: item.disturbed_repeats() > 0,
        }
    }

    /// What the label says of the marks: "; client-bound", " †".
    fn label_suffix(&self) -> String {
        let mut s = String::new();
        if self.client_bound {
            s.push_str("; client-bound");
        }
        if self.disturbed {
            s.push_str(" † machine busy");
        }
        s
    }
}

#[derive(Debug, Clone)]
pub struct Series {
    pub model: String,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
    /// Beside each point, in order (empty for curves through one row, which have none).
    pub marks: Vec<PointMark>,
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
/// models of similar colour differ in shape. Past the tenth (Caddy is the eleventh) the colours
/// and markers come round together, so the dash flips again to tell them apart.
pub fn style(i: usize) -> Style {
    Style {
        colour: COLOURS[i % COLOURS.len()],
        marker: MARKERS[i % MARKERS.len()],
        dashed: (i / MARKERS.len() + i / COLOURS.len()) % 2 == 1,
    }
}

/// The style of a model by name: its place among all nine models (nginx tenth, Caddy eleventh), so a model
/// looks the same in every report, whichever models a run measured. Names not known here
/// (results from another version) take the places after those.
fn styled_models(results: &Results) -> Vec<(String, Style)> {
    let mut known: Vec<String> = sockscale_server::Model::ALL.iter().map(|m| m.name().to_owned()).collect();
    known.extend(["nginx".into(), "caddy".into()]);
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
    /// The figure whose repetitions the bar's error bar spans, and the divisor the chart draws
    /// it by; `None` for a figure the repetitions do not keep.
    spread: Option<(&'static str, f64)>,
}

const NO_STATUS_SAMPLE: &str = "not measured (/proc/PID/status could not be read)";
const NO_STAT_SAMPLE: &str = "not measured (/proc/PID/stat could not be read)";

const ECHO_METRICS: [Metric; 4] = [
    Metric {
        file: "throughput",
        title: "Echo throughput received by the clients",
        caption: "Bytes per second the load generator received back, over each row's measured time (1 MB = 10⁶ bytes): the median of the repetitions, the error bar their lowest–highest; a lighter bar was client-bound, † measured while the machine was busy. One panel per workload: the workloads differ in connections and traffic, so their figures are not comparable with each other.",
        value_axis: "MB/s received by the clients",
        log_values: false,
        value: |r| {
            Ok(r.spread_of(figure::RECEIVED_BYTES_PER_S).map_or(r.received_bytes_per_s, |s| s.median) / 1e6)
        },
        label: |_, v| format!("{} MB/s", decimal(v)),
        spread: Some((figure::RECEIVED_BYTES_PER_S, 1e6)),
    },
    Metric {
        file: "cpu",
        title: "Server CPU",
        caption: "Server process CPU (user + system, every thread) over one-second samples, as a percentage of one core: the bar reaches the highest sample, the label gives the lowest–highest range. The first second, while connections are set up, is left out when there are enough samples.",
        value_axis: "% of one core, highest 1 s sample",
        log_values: false,
        value: |r| r.server_cpu_pct().map(|(_, max)| max).ok_or(NO_STAT_SAMPLE),
        label: |r, _| format!("{:.0}–{:.0}%", r.cpu_min_pct, r.cpu_max_pct),
        spread: None,
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
        spread: None,
    },
    Metric {
        file: "threads",
        title: "Server threads",
        caption: "Threads of the server process, largest sample, on a log scale. Three of them (main, signals, stats) belong to the command line.",
        value_axis: "threads (log scale)",
        log_values: true,
        value: |r| r.server_threads().map(|t| t as f64).ok_or(NO_STATUS_SAMPLE),
        label: |_, v| thousands(v as u64),
        spread: None,
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
                                let mark = row.map_or_else(PointMark::default, |r| {
                                    PointMark::of(r, metric.spread, r.client_bound)
                                });
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
                                        let range = mark.range.map_or_else(String::new, |(lo, hi)| {
                                            format!(" ({}–{})", decimal(lo), decimal(hi))
                                        });
                                        (
                                            Some(v),
                                            format!("{}{range}{held}{}", (metric.label)(r, v), mark.label_suffix()),
                                        )
                                    }
                                    Some((_, Err(why))) => (None, why.to_owned()),
                                    None if m.error.is_some() => {
                                        (None, "not measured (failed: see the table)".to_owned())
                                    }
                                    None => (None, "not measured".to_owned()),
                                };
                                Bar { model: m.model.clone(), style: style_of(&m.model), value, label, mark }
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
            HttpWorkload::H3 => "h3: HTTP/3 over QUIC, streams on each connection",
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
                    let mut at: Vec<&HttpPoint> = m.http.iter().filter(|p| p.workload() == workload).collect();
                    at.sort_by_key(|p| p.concurrency);
                    let points = at
                        .iter()
                        .map(|p| {
                            let rate = p.spread_of(figure::REQUESTS_PER_S).map_or(p.requests_per_s, |s| s.median);
                            (p.concurrency as f64, rate)
                        })
                        .collect();
                    let marks = at
                        .iter()
                        .map(|p| PointMark::of(*p, Some((figure::REQUESTS_PER_S, 1.0)), p.client_bound))
                        .collect();
                    Series { model: m.model.clone(), style: style_of(&m.model), points, marks }
                })
                .collect(),
        },
    };
    figures.push(Figure {
        file: "http",
        title: "HTTP 4 KiB responses per second by concurrency (seed 003)".to_owned(),
        caption: "Responses per second the load generator received for GET / of a 4,096-byte page, over each point's measured time, at each concurrency; nginx with one worker when it was installed. Each point is the median of its repetitions, its error bar their lowest–highest; a ring marks a client-bound point, † one measured while the machine was busy; errors are in the HTTP tables.".to_owned(),
        panels: vec![http_panel(HttpWorkload::KeepAlive), http_panel(HttpWorkload::NewConnection)],
    });
    figures.push(Figure {
        file: "https",
        title: "HTTPS 4 KiB responses per second by concurrency".to_owned(),
        caption: "The same page over TLS (an ECDSA P-256 certificate made for the run, verified by the load generator): with keep-alive, one handshake per connection when it opens; without, a new connection and a full handshake (no resumption) for every request, so that panel is the server's rate of full handshakes. sockscale with rustls, nginx (one worker) with OpenSSL when it was installed. Each point is the median of its repetitions, its error bar their lowest–highest; a ring marks a client-bound point, † one measured while the machine was busy; errors and handshakes are in the HTTPS tables.".to_owned(),
        panels: [HttpWorkload::TlsKeepAlive, HttpWorkload::TlsFullHandshake, HttpWorkload::TlsResumed]
            .into_iter()
            .map(http_panel)
            .collect(),
    });
    figures.push(Figure {
        file: "http2",
        title: "HTTP/2 4 KiB responses per second by concurrency".to_owned(),
        caption: "The same page over HTTP/2, as h2load drives it: concurrent streams on each connection (the point's `streams`), h2c with prior knowledge and h2 over TLS (ALPN); nginx (one worker) when it was installed. Each point is the median of its repetitions, its error bar their lowest–highest; a ring marks a client-bound point, † one measured while the machine was busy.".to_owned(),
        panels: [HttpWorkload::H2c, HttpWorkload::H2Tls].into_iter().map(http_panel).collect(),
    });
    figures.push(Figure {
        file: "http3",
        title: "HTTP/3 4 KiB responses per second by concurrency".to_owned(),
        caption: "The same page over HTTP/3 (QUIC v1 on UDP, ALPN h3, the run's certificate verified by the load generator): concurrent request streams on each connection (the point's `streams`), as the HTTP/2 figure has them; every model that serves HTTP/3 (uring64 cannot: see the HTTP/3 tables), and Caddy (one process, pinned like the servers) when it was found. Each point is the median of its repetitions, its error bar their lowest–highest; a ring marks a client-bound point, † one measured while the machine was busy; handshakes and packets lost are in the HTTP/3 tables.".to_owned(),
        panels: vec![http_panel(HttpWorkload::H3)],
    });
    figures.extend(websocket_figures(results, &style_of));
    figures.push(latency_figure(results, &style_of));
    for kind in [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum] {
        figures.push(over_time_figure(results, kind, &style_of));
    }
    // A panel with nothing to place (no model measured, or no HTTP point of that kind) is left
    // out, and a figure left with no panel is not drawn: an empty axis says nothing, and
    // plotters cannot lay out a bar axis of no bars.
    for figure in &mut figures {
        figure.panels.retain(|p| match &p.plot {
            Plot::Bars { bars, .. } | Plot::WsBars { bars } => !bars.is_empty(),
            Plot::Lines { series, .. } | Plot::Curves { series, .. } | Plot::WsLines { series, .. } => {
                series.iter().any(|s| !s.points.is_empty())
            }
        });
    }
    figures.retain(|f| !f.panels.is_empty());
    figures
}

/// The WebSocket figures: echo messages per server CPU-second against concurrency, one line per
/// model; and server bytes per idle WebSocket, one bar per model. None for results without
/// WebSocket points (before schema 3).
fn websocket_figures(results: &Results, style_of: &dyn Fn(&str) -> Style) -> Vec<Figure> {
    let mut figures = Vec::new();
    let echo: Vec<Series> = results
        .models
        .iter()
        .filter(|m| m.ws.iter().any(|p| p.per_cpu_second().is_some()))
        .map(|m| {
            let mut at: Vec<&WsPoint> = m.ws.iter().filter(|p| p.per_cpu_second().is_some()).collect();
            at.sort_by_key(|p| p.concurrency);
            let points = at
                .iter()
                .map(|p| {
                    let v = p
                        .spread_of(figure::MESSAGES_PER_CPU_SECOND)
                        .map_or(p.per_cpu_second().unwrap_or(0.0), |s| s.median);
                    (p.concurrency as f64, v)
                })
                .collect();
            let marks = at
                .iter()
                .map(|p| PointMark::of(*p, Some((figure::MESSAGES_PER_CPU_SECOND, 1.0)), p.client_bound))
                .collect();
            Series { model: m.model.clone(), style: style_of(&m.model), points, marks }
        })
        .collect();
    let msg_len = results.models.iter().flat_map(|m| &m.ws).map(|p| p.msg_len).max().unwrap_or(0);
    figures.push(Figure {
        file: "websocket",
        title: "WebSocket echo messages per server CPU-second by concurrency".to_owned(),
        caption: format!("Messages echoed back per second of server CPU (user + system) at each concurrency: every connection upgraded from HTTP/1.1 (`serve --proto ws`) and sending a {} B binary message, masked, one at a time (`load ws --pipeline 1`); per CPU-second, so it measures the server even where the load generator was the limit. Each point is the median of its repetitions, its error bar their lowest–highest; a ring marks a client-bound point, † one measured while the machine was busy; messages per second are in the WebSocket tables.", thousands(msg_len)),
        panels: vec![Panel {
            title: "WebSocket echo: one message in flight on each connection".to_owned(),
            value_axis: "messages per server CPU-second".to_owned(),
            log_values: false,
            plot: Plot::WsLines { x_axis: "concurrent connections (log scale)".to_owned(), series: echo },
        }],
    });
    let idle: Vec<Bar> = results
        .models
        .iter()
        .filter_map(|m| Some((m, m.ws_idle.as_ref()?)))
        .map(|(m, w)| {
            let mark = PointMark::of(w, Some((figure::SERVER_BYTES_PER_IDLE_WS, 1.0)), w.client_bound);
            let (value, label) = match w.server_bytes_per_connection() {
                Some(own) => {
                    let v = w.spread_of(figure::SERVER_BYTES_PER_IDLE_WS).map_or(own, |s| s.median);
                    let held = match w.held {
                        Some(h) if h < w.attempted => {
                            format!("; {} of {} held", thousands(h), thousands(w.attempted))
                        }
                        _ => String::new(),
                    };
                    let range = mark.range.map_or_else(String::new, |(lo, hi)| {
                        format!(" ({}–{})", thousands(lo.round() as u64), thousands(hi.round() as u64))
                    });
                    (Some(v), format!("{} B{range}{held}{}", thousands(v.round() as u64), mark.label_suffix()))
                }
                None => (None, "not measured".to_owned()),
            };
            Bar { model: m.model.clone(), style: style_of(&m.model), value, label, mark }
        })
        .collect();
    let attempted = results.models.iter().find_map(|m| m.ws_idle.as_ref()).map_or(0, |w| w.attempted);
    figures.push(Figure {
        file: "websocket_idle",
        title: "Server memory per idle WebSocket".to_owned(),
        caption: "The server's resident memory while the idle WebSockets were held (largest sample) minus before any connected, over the connections it held: user-space bytes per idle WebSocket (the kernel's socket memory is not in RSS; it is in the WebSocket tables). Each connection was pinged and answered; lower is better.".to_owned(),
        panels: vec![Panel {
            title: format!("idle WebSockets: {} upgraded and held, pinged", thousands(attempted)),
            value_axis: "server bytes per idle WebSocket".to_owned(),
            log_values: false,
            plot: Plot::WsBars { bars: idle },
        }],
    });
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
                            Some(Series { model: m.model.clone(), style: style_of(&m.model), points, marks: Vec::new() })
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
                        Some(Series { model: m.model.clone(), style: style_of(&m.model), points, marks: Vec::new() })
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
                            Some(Series { model: m.model.clone(), style: style_of(&m.model), points, marks: Vec::new() })
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
        Plot::Bars { bars, .. } | Plot::WsBars { bars } => 110 + 30 * bars.len() as u32,
        Plot::Lines { .. } | Plot::WsLines { .. } => 400,
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
    let lines =
        figure.panels.iter().any(|p| matches!(p.plot, Plot::Lines { .. } | Plot::Curves { .. } | Plot::WsLines { .. }));
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
            Plot::Bars { bars, .. } | Plot::WsBars { bars } => draw_bars(&area, panel, bars)?,
            Plot::Lines { x_axis, series, .. } | Plot::WsLines { x_axis, series } => {
                draw_lines(&area, panel, x_axis, series)?
            }
            Plot::Curves { x_axis, x, series, .. } => draw_curves(&area, panel, x_axis, *x, series)?,
        }
    }
    if let Some(legend) = legend_area {
        let mut seen = Vec::new();
        let series = figure.panels.iter().flat_map(|p| match &p.plot {
            Plot::Lines { series, .. } | Plot::Curves { series, .. } | Plot::WsLines { series, .. } => {
                series.as_slice()
            }
            Plot::Bars { .. } | Plot::WsBars { .. } => &[],
        });
        for s in series {
            if !seen.iter().any(|(m, _)| m == &s.model) {
                seen.push((s.model.clone(), s.style));
            }
        }
        let marks = || {
            figure.panels.iter().flat_map(|p| match &p.plot {
                Plot::Lines { series, .. } | Plot::WsLines { series, .. } => {
                    series.iter().flat_map(|s| s.marks.iter()).collect::<Vec<_>>()
                }
                Plot::Bars { .. } | Plot::Curves { .. } | Plot::WsBars { .. } => Vec::new(),
            })
        };
        let flagged = (marks().any(|m| m.client_bound), marks().any(|m| m.disturbed));
        draw_legend(&legend, &seen, flagged)?;
    }
    root.present().map_err(err)
}

fn colour(style: Style) -> RGBColor {
    RGBColor(style.colour.0, style.colour.1, style.colour.2)
}

/// The top of a linear value axis for data reaching `max`: a little headroom, rounded up to a
/// whole number of nice steps (1, 2, 2.5 or 5 times a power of ten, about six of them), so the
/// axis ends near the data and not at a fixed multiple of it.
pub fn axis_top(max: f64) -> f64 {
    if !max.is_finite() || max <= 0.0 {
        return 1.0;
    }
    let want = max * 1.05;
    let raw = want / 6.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|&s| s >= raw).unwrap_or(raw);
    (want / step).ceil() * step
}

/// About how wide a bar's label is drawn, in pixels (13 px DejaVu Sans).
fn label_px(label: &str) -> i32 {
    (label.chars().count() as f64 * 7.2).ceil() as i32
}

/// A colour halfway to white: a client-bound bar.
fn lighter(c: RGBColor) -> RGBColor {
    let mix = |v: u8| ((u16::from(v) + 255 * 3) / 4) as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// Horizontal bars, one per model, the first at the top, each labelled with its value, its
/// repetitions' range drawn as an error bar. The value axis ends near the largest value (or
/// range); a label with no room after its bar is written inside it.
fn draw_bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel, bars: &[Bar]) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let n = bars.len().max(1) as i32;
    let reach = |b: &Bar| b.value.map(|v| b.mark.range.map_or(v, |(_, hi)| hi.max(v)));
    let max = bars.iter().filter_map(reach).fold(0.0f64, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder.caption(&panel.title, ("sans-serif", 16)).margin(12).x_label_area_size(44).y_label_area_size(100);
    let rows = (0..n).into_segmented();
    if panel.log_values {
        // Room to the right of the longest bar for its label: a log axis needs a factor.
        let built = builder.build_cartesian_2d((0.8f64..(max.max(1.0) * 15.0)).log_scale(), rows).map_err(err)?;
        bars_into(built, panel, bars, 0.8)
    } else {
        let built = builder.build_cartesian_2d(0.0f64..axis_top(max), rows).map_err(err)?;
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
    let right_edge = ctx.plotting_area().get_pixel_range().0.end;
    for (i, bar) in bars.iter().enumerate() {
        let s = slot(i);
        let text_style = ("sans-serif", 13).into_font().color(&BLACK);
        match bar.value {
            Some(v) => {
                let full = colour(bar.style);
                let fill = if bar.mark.client_bound { lighter(full) } else { full };
                let end = v.max(origin);
                let mut rect = Rectangle::new(
                    [(origin, SegmentValue::Exact(s)), (end, SegmentValue::Exact(s + 1))],
                    fill.filled(),
                );
                // A gap between neighbouring bars.
                rect.set_margin(3, 3, 0, 0);
                ctx.draw_series(std::iter::once(rect)).map_err(err)?;
                if bar.mark.client_bound {
                    let mut outline = Rectangle::new(
                        [(origin, SegmentValue::Exact(s)), (end, SegmentValue::Exact(s + 1))],
                        full.stroke_width(1),
                    );
                    outline.set_margin(3, 3, 0, 0);
                    ctx.draw_series(std::iter::once(outline)).map_err(err)?;
                }
                let mut after = end;
                if let Some((lo, hi)) = bar.mark.range {
                    let (lo, hi) = (lo.max(origin), hi.max(origin));
                    let centre = |x: f64| (x, SegmentValue::CenterOf(s));
                    let whisker = BLACK.stroke_width(1);
                    ctx.draw_series(std::iter::once(PathElement::new(vec![centre(lo), centre(hi)], whisker)))
                        .map_err(err)?;
                    for x in [lo, hi] {
                        ctx.draw_series(std::iter::once(
                            EmptyElement::at(centre(x)) + PathElement::new(vec![(0, -6), (0, 6)], whisker),
                        ))
                        .map_err(err)?;
                    }
                    after = after.max(hi);
                }
                let at = |x: f64| ctx.backend_coord(&(x, SegmentValue::CenterOf(s))).0;
                let width = label_px(&bar.label);
                let room_after = right_edge - at(after) - 6;
                let room_inside = at(bar.mark.range.map_or(end, |(lo, _)| lo.min(end))) - at(origin) - 12;
                if width > room_after && width <= room_inside {
                    let ink = if bar.mark.client_bound { BLACK } else { WHITE };
                    ctx.draw_series(std::iter::once(
                        EmptyElement::at((origin, SegmentValue::CenterOf(s)))
                            + Text::new(bar.label.clone(), (6, -7), text_style.color(&ink)),
                    ))
                    .map_err(err)?;
                } else {
                    ctx.draw_series(std::iter::once(
                        EmptyElement::at((after, SegmentValue::CenterOf(s)))
                            + Text::new(bar.label.clone(), (6, -7), text_style),
                    ))
                    .map_err(err)?;
                }
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
    let ranges = || series.iter().flat_map(|s| s.marks.iter().filter_map(|m| m.range));
    let y_max = points().map(|p| p.1).chain(ranges().map(|r| r.1)).fold(0.0f64, f64::max);
    let x_min = if x_min.is_finite() { x_min * 0.7 } else { 1.0 };
    let mut ctx = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max * 1.4).log_scale(), 0.0..axis_top(y_max))
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
        for (i, &p) in s.points.iter().enumerate() {
            let mark = s.marks.get(i).copied().unwrap_or_default();
            if let Some((lo, hi)) = mark.range {
                let whisker = colour(s.style).stroke_width(1);
                ctx.draw_series(std::iter::once(PathElement::new(vec![(p.0, lo), (p.0, hi)], whisker))).map_err(err)?;
                for y in [lo, hi] {
                    ctx.draw_series(std::iter::once(
                        EmptyElement::at((p.0, y)) + PathElement::new(vec![(-5, 0), (5, 0)], whisker),
                    ))
                    .map_err(err)?;
                }
            }
            draw_marker(ctx.plotting_area(), p, s.style, 5)?;
            if mark.client_bound {
                ctx.draw_series(std::iter::once(
                    EmptyElement::at(p) + Circle::new((0, 0), 10, RGBColor(0x60, 0x60, 0x60).stroke_width(1)),
                ))
                .map_err(err)?;
            }
            if mark.disturbed {
                ctx.draw_series(std::iter::once(
                    EmptyElement::at(p) + Text::new("†", (8, -20), ("sans-serif", 15).into_font().color(&BLACK)),
                ))
                .map_err(err)?;
            }
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
        finish!(builder.build_cartesian_2d(0.0..x_end, 0.0..axis_top(y_max)).map_err(err)?);
    }
    Ok(())
}

/// The legend of a line figure, in its own column: it covers no point.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, Style)],
    (client_bound, disturbed): (bool, bool),
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let below = 60 + 26 * entries.len() as i32 + 14;
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    if client_bound {
        area.draw(&Circle::new((23, below), 10, RGBColor(0x60, 0x60, 0x60).stroke_width(1))).map_err(err)?;
        area.draw(&Text::new("client-bound", (46, below - 8), font.clone())).map_err(err)?;
    }
    if disturbed {
        let y = below + if client_bound { 28 } else { 0 };
        area.draw(&Text::new("†", (19, y - 9), font.clone())).map_err(err)?;
        area.draw(&Text::new("machine busy", (46, y - 8), font.clone())).map_err(err)?;
    }
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
        svgs.push(Inlined { file: figure.file.to_owned(), title: figure.title, caption: figure.caption, svg: text });
        written.push(svg);
        written.push(png);
    }
    let html = dir.join("report.html");
    std::fs::write(&html, page(results, &svgs)).map_err(|e| fail(&html, e.to_string()))?;
    written.push(html);
    Ok(written)
}

/// A figure as the page inlines it: its file name (the anchor), title, caption and SVG text.
pub struct Inlined {
    pub file: String,
    pub title: String,
    pub caption: String,
    pub svg: String,
}

/// Run on `?check` (as the browser test opens the page): where the verdict, the first figure
/// and the first table after it stand against the window, written into `<pre id="layout-check">`, so a
/// test can say the verdict is in the first screen.
const LAYOUT_CHECK_SCRIPT: &str = r##"
(function () {
  if (!/[?&]check\b/.test(location.search)) return;
  window.addEventListener("load", function () {
    // The first element outside the verdict, which has a compact table of its own.
    function top(sel) {
      var all = document.querySelectorAll(sel), e = null;
      for (var i = 0; i < all.length && !e; i++) { if (sel === "#verdict" || !all[i].closest("#verdict")) e = all[i]; }
      return e ? Math.round(e.getBoundingClientRect().top + window.scrollY) : -1;
    }
    var v = document.getElementById("verdict");
    var pre = document.createElement("pre");
    pre.id = "layout-check";
    pre.textContent = "viewport=" + window.innerHeight + " verdict_top=" + top("#verdict") +
      " verdict_bottom=" + (v ? Math.round(v.getBoundingClientRect().bottom + window.scrollY) : -1) +
      " first_figure=" + top("figure") + " first_table=" + top("table");
    document.body.appendChild(pre);
  });
})();
"##;

/// An anchor for a heading: lower case, words joined by '-'.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// Text with `code` spans, escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in escape(text).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The page, read top-down: what was run (one line); a partial run's note; the verdict, in
/// the first screen; the contents; the summary; the charts; then the long tables (each
/// sortable by a click on a column's heading), the seed's own table among them, beside ours.
fn page(results: &Results, figures: &[Inlined]) -> String {
    let mut body = String::new();
    let run = crate::tables::run_line(results);
    let _ = writeln!(body, "<p class=\"run\">{}</p>", inline(&run));
    if let Some(note) = crate::tables::partial_note(results) {
        let _ = writeln!(body, "<section id=\"partial\"><h2>Partial results</h2>\n<p>{}</p></section>", inline(&note));
    }
    let verdict = crate::verdict::html(results);
    body.push_str("<section id=\"verdict\">\n");
    if !verdict.contains("<h2") {
        body.push_str("<h2>Verdict</h2>\n");
    }
    if verdict.trim().is_empty() {
        body.push_str("<p>No verdict was drawn from these results.</p>\n");
    } else {
        body.push_str(&verdict);
    }
    body.push_str("</section>\n");

    // The long tables, as sections, each with its anchor for the contents.
    let markdown = crate::tables::tables_body_markdown(results);
    let markdown = markdown.strip_prefix(run.as_str()).unwrap_or(&markdown);
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut tables = String::new();
    for block in markdown.split("\n\n") {
        if let Some(heading) = block.strip_prefix("### ") {
            let _ = writeln!(tables, "<h3>{}</h3>", inline(heading));
        } else if let Some(heading) = block.strip_prefix("## ") {
            let id = format!("t-{}", slug(heading));
            if !sections.is_empty() {
                tables.push_str("</section>\n");
            }
            let _ = writeln!(tables, "<section id=\"{id}\"><h2>{}</h2>", inline(heading));
            sections.push((id, heading.to_owned()));
        } else if block.starts_with('|') {
            tables.push_str(&markdown_table_to_html(block));
        } else if !block.trim().is_empty() {
            let _ = writeln!(tables, "<p>{}</p>", inline(block.trim()));
        }
    }
    if !sections.is_empty() {
        tables.push_str("</section>\n");
    }

    body.push_str("<nav id=\"contents\"><h2>Contents</h2>\n<ul>\n<li><a href=\"#verdict\">Verdict</a></li>\n<li><a href=\"#summary\">Summary</a></li>\n<li><a href=\"#charts\">Charts</a><ul>\n");
    for f in figures {
        let _ = writeln!(body, "<li><a href=\"#{}\">{}</a></li>", f.file, escape(&f.title));
    }
    body.push_str("</ul></li>\n<li><a href=\"#tables\">Tables</a><ul>\n");
    for (id, heading) in &sections {
        let _ = writeln!(body, "<li><a href=\"#{id}\">{}</a></li>", inline(heading));
    }
    body.push_str("</ul></li>\n</ul></nav>\n");

    body.push_str(&summary_html(results));
    body.push_str("<section id=\"charts\"><h2>Charts</h2>\n");
    if figures.is_empty() {
        body.push_str("<p>No charts: no model was measured.</p>\n");
    } else {
        body.push_str("<p>Bars and points are the median of the repetitions; an error bar spans their lowest–highest. A lighter bar, or a ring round a point, was client-bound (the load generator, not the server, was the limit); † marks a measurement made while the machine was busy.</p>\n");
    }
    for f in figures {
        let inline_svg = f.svg.find("<svg").map_or(f.svg.as_str(), |i| &f.svg[i..]);
        let _ = writeln!(
            body,
            "<figure id=\"{file}\">{inline_svg}<figcaption>{}</figcaption><p class=\"files\"><a href=\"{file}.png\">{file}.png</a> · <a href=\"{file}.svg\">{file}.svg</a></p></figure>",
            escape(&f.caption),
            file = f.file,
        );
    }
    body.push_str("</section>\n<div id=\"tables\">\n");
    body.push_str(&tables);
    body.push_str("</div>\n");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sockscale bench: {profile} profile, {started}{partial}</title>\n<script>{CHECK_SCRIPT}</script>\n<script>{LAYOUT_CHECK_SCRIPT}</script>\n<style>\nbody {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}\n.run {{ color: #444; }}\n#verdict {{ border-left: 4px solid #1f77b4; padding: 0 1em; margin: 1em 0; }}\nnav ul {{ margin: 0.2em 0; }} nav > ul > li > ul {{ columns: 2; }}\n.scroll {{ overflow-x: auto; }}\ntable {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}\nth, td {{ border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }}\nth {{ background: #eee; cursor: pointer; }} th[aria-sort=ascending]::after {{ content: \" ▲\"; }} th[aria-sort=descending]::after {{ content: \" ▼\"; }}\ntd:first-child, th:first-child, .summary td, .summary th {{ text-align: left; }}\nfigure {{ margin: 1em 0; }} figure svg {{ max-width: 100%; height: auto; }} .files {{ font-size: 0.8em; }} td.repeat {{ color: #888; }}\n</style></head><body>\n<h1>sockscale bench</h1>\n{body}<script>{SORT_SCRIPT}</script>\n</body></html>\n",
        profile = escape(&results.profile),
        started = escape(&results.started),
        // A tab or a bookmark shows only the title: a partial run says so there too.
        partial = if results.interrupted || results.in_progress { " (partial results)" } else { "" },
    )
}

/// One model's figure in the summary: its spread, and whether the machine disturbed it.
#[derive(Debug, Clone)]
struct Entry {
    model: String,
    spread: Spread,
    disturbed: bool,
}

impl Entry {
    fn of(model: &str, item: &dyn Repeated, name: &str, own: Option<f64>) -> Option<Entry> {
        let spread = crate::tables::measured_spread(item, name, own)?;
        Some(Entry { model: model.to_owned(), spread, disturbed: item.disturbed_repeats() > 0 })
    }

    fn name(&self) -> String {
        format!("{}{}", self.model, if self.disturbed { " †" } else { "" })
    }
}

/// Who leads among `entries`, and by how much: the leader with its figure (the median of its
/// repetitions, with their range), then "N× the next" only when the numbers can tell the two
/// apart (the leader's lowest above the next's highest), else a tie with every model whose
/// range reaches the leader's.
fn lead(mut entries: Vec<Entry>, show: &dyn Fn(f64) -> String, unit: &str) -> (String, String) {
    entries.retain(|e| e.spread.median.is_finite());
    entries.sort_by(|a, b| b.spread.median.total_cmp(&a.spread.median));
    let Some(top) = entries.first().cloned() else {
        return ("not measured".to_owned(), String::new());
    };
    let leader = format!("{}: {}", top.name(), crate::tables::spread_cell(&top.spread, show, unit));
    let tied: Vec<&Entry> = entries[1..].iter().filter(|e| e.spread.overlaps(&top.spread)).collect();
    let ahead = match entries.get(1) {
        None => "the only model measured".to_owned(),
        Some(_) if !tied.is_empty() => {
            let names: Vec<String> = tied.iter().map(|e| e.name()).collect();
            let why = if top.spread.is_single() && tied.iter().all(|e| e.spread.is_single()) {
                "the same figure"
            } else {
                "ranges overlap"
            };
            format!("tie with {} ({why})", names.join(", "))
        }
        Some(next) if next.spread.median > 0.0 => {
            let single = top.spread.n < 2 || next.spread.n < 2;
            format!(
                "ahead of {} by {:.2}× ({}){}",
                next.name(),
                top.spread.median / next.spread.median,
                crate::tables::spread_cell(&next.spread, show, unit),
                if single { "; one repetition, no range to judge noise by" } else { "" }
            )
        }
        Some(next) => format!("{} had {}{unit}", next.name(), show(next.spread.median)),
    };
    (leader, ahead)
}

/// Which side limited each model at a row or point, from its kept repetitions: "epoll, tokio:
/// client-bound; select: server-bound; uring: neither".
fn bottleneck(at: &[(&str, &dyn Repeated, bool)]) -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for &(model, item, client_bound) in at {
        let mut note = crate::tables::bound_note(item, client_bound);
        if note.is_empty() {
            // Results from before repetitions say only whether the client was the limit.
            note = if item.kept().is_empty() { "not client-bound" } else { "neither" }.to_owned();
        }
        match groups.iter_mut().find(|(n, _)| *n == note) {
            Some((_, models)) => models.push(model),
            None => groups.push((note, vec![model])),
        }
    }
    groups.iter().map(|(note, models)| format!("{}: {note}", models.join(", "))).collect::<Vec<_>>().join("; ")
}

fn html_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut html = String::from("<div class=\"scroll summary\"><table>\n<thead><tr>");
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
    html.push_str("</tbody>\n</table></div>\n");
    html
}

/// What a sweep point measured, in a few words.
fn point_label(workload: HttpWorkload, streams: Option<u64>) -> String {
    let what = match workload {
        HttpWorkload::KeepAlive => "HTTP keep-alive",
        HttpWorkload::NewConnection => "HTTP, new connection per request",
        HttpWorkload::TlsKeepAlive => "HTTPS keep-alive",
        HttpWorkload::TlsFullHandshake => "HTTPS, full handshake per request",
        HttpWorkload::TlsResumed => "HTTPS, resumed handshake per request",
        HttpWorkload::H2c => "HTTP/2 h2c",
        HttpWorkload::H2Tls => "HTTP/2 h2 (TLS)",
        HttpWorkload::H3 => "HTTP/3 h3 (QUIC)",
    };
    match streams.filter(|_| workload.multiplexed()) {
        Some(n) => format!("{what}, {n} streams"),
        None => what.to_owned(),
    }
}

/// The page's summary: per row of Table 6-3 and per sweep point, the model that did the most
/// work per second of server CPU (robust when the client is the limit) and whether the numbers
/// tell it from the next, the same for connections held or responses per second, and which
/// side was the bottleneck for each model.
pub fn summary_html(results: &Results) -> String {
    let mut html = String::from("<h2 id=\"summary\">Summary</h2>\n");
    let measured: Vec<_> = results.models.iter().filter(|m| !m.rows.is_empty()).collect();
    html.push_str("<p>Ranked by work per server CPU-second: the work done for each second of CPU the server used (bytes echoed back to the clients in Table 6-3, responses in the sweeps), which stays a measure of the server even when the load generator is the limit. Each figure is the median of the repetitions, with their lowest–highest in brackets; \"ahead by\" is said only when the leader's lowest is above the next's highest, otherwise the models are named as a tie. Client-bound: the load generator used 90% or more of its cores, so the model's rates say what the load could drive; server-bound: the server used 90% or more of its cores.</p>\n");
    let items = results
        .models
        .iter()
        .flat_map(|m| m.rows.iter().map(|r| r as &dyn Repeated))
        .chain(results.all_results().flat_map(|m| m.http.iter().map(|p| p as &dyn Repeated)))
        .chain(results.models.iter().flat_map(|m| m.ws.iter().map(|p| p as &dyn Repeated)))
        .chain(results.models.iter().filter_map(|m| m.ws_idle.as_ref().map(|w| w as &dyn Repeated)));
    let (total, disturbed) = items.fold((0, 0), |(t, d), i| (t + 1, d + usize::from(i.disturbed_repeats() > 0)));
    if disturbed > 0 {
        let _ = writeln!(
            html,
            "<p>The machine was busy during {disturbed} of {total} rows and points: their figures are marked † (see results.json <code>interference</code>).</p>"
        );
    }
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
                of_kind
                    .iter()
                    .filter_map(|(m, r)| Entry::of(m, *r, figure::BYTES_PER_CPU_SECOND, r.bytes_per_cpu_second()))
                    .collect(),
                &|v| decimal(v / 1e6),
                " MB",
            );
            let held = lead(
                of_kind
                    .iter()
                    .filter_map(|(m, r)| {
                        Entry::of(m, *r, figure::CONNECTIONS_HELD, r.connected_held().map(|c| c as f64))
                    })
                    .collect(),
                &|v| thousands(v.round() as u64),
                "",
            );
            let bound: Vec<(&str, &dyn Repeated, bool)> =
                of_kind.iter().map(|(m, r)| (*m, *r as &dyn Repeated, r.client_bound)).collect();
            rows.push(vec![
                format!("{} ({} connections)", kind.label(), thousands(attempted)),
                per_cpu.0,
                per_cpu.1,
                held.0,
                held.1,
                bottleneck(&bound),
            ]);
        }
        html.push_str("<h3>Table 6-3 rows</h3>\n");
        html.push_str(&html_table(
            &[
                "Row",
                "Most received per server CPU-second",
                "Against the next",
                "Most connections held",
                "Against the next",
                "Bottleneck",
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
            let at: Vec<(&str, &HttpPoint)> = results
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
                    .filter_map(|(m, p)| Entry::of(m, *p, figure::RESPONSES_PER_CPU_SECOND, p.per_cpu_second()))
                    .collect(),
                &|v| thousands(v.round() as u64),
                "",
            );
            let rate = lead(
                at.iter()
                    .filter_map(|(m, p)| Entry::of(m, *p, figure::REQUESTS_PER_S, Some(p.requests_per_s)))
                    .collect(),
                &|v| thousands(v.round() as u64),
                "/s",
            );
            let bound: Vec<(&str, &dyn Repeated, bool)> =
                at.iter().map(|(m, p)| (*m, *p as &dyn Repeated, p.client_bound)).collect();
            let streams = at.iter().find_map(|(_, p)| p.streams);
            rows.push(vec![
                format!("{}, {} connections", point_label(workload, streams), thousands(concurrency)),
                per_cpu.0,
                per_cpu.1,
                rate.0,
                rate.1,
                bottleneck(&bound),
            ]);
        }
        html.push_str("<h3>HTTP, HTTPS, HTTP/2 and HTTP/3 sweep points</h3>\n<p>Every model holds the same connections at a sweep point (its concurrency), so the points compare responses: per server CPU-second, and per second.</p>\n");
        html.push_str(&html_table(
            &[
                "Sweep point",
                "Most responses per server CPU-second",
                "Against the next",
                "Most responses per second",
                "Against the next",
                "Bottleneck",
            ],
            &rows,
        ));
    }
    html.push_str(&ws_summary_html(results));
    if disturbed > 0 {
        let _ = writeln!(html, "<p>{}</p>", inline(crate::tables::DISTURBED_NOTE));
    }
    html
}

/// The summary's WebSocket part: per echo concurrency the model that echoed the most messages
/// per server CPU-second, and per second; then the idle WebSockets, least server memory per
/// connection first. Empty for results without WebSocket points.
fn ws_summary_html(results: &Results) -> String {
    let mut html = String::new();
    let mut concurrencies: Vec<u64> = results.models.iter().flat_map(|m| m.ws.iter().map(|p| p.concurrency)).collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    if !concurrencies.is_empty() {
        let mut rows = Vec::new();
        for c in concurrencies {
            let at: Vec<(&str, &WsPoint)> = results
                .models
                .iter()
                .filter_map(|m| m.ws.iter().find(|p| p.concurrency == c).map(|p| (m.model.as_str(), p)))
                .collect();
            let per_cpu = lead(
                at.iter()
                    .filter_map(|(m, p)| Entry::of(m, *p, figure::MESSAGES_PER_CPU_SECOND, p.per_cpu_second()))
                    .collect(),
                &|v| thousands(v.round() as u64),
                "",
            );
            let rate = lead(
                at.iter()
                    .filter_map(|(m, p)| Entry::of(m, *p, figure::MESSAGES_PER_S, Some(p.messages_per_s)))
                    .collect(),
                &|v| thousands(v.round() as u64),
                "/s",
            );
            let bound: Vec<(&str, &dyn Repeated, bool)> =
                at.iter().map(|(m, p)| (*m, *p as &dyn Repeated, p.client_bound)).collect();
            rows.push(vec![
                format!("WebSocket echo, {} connections", thousands(c)),
                per_cpu.0,
                per_cpu.1,
                rate.0,
                rate.1,
                bottleneck(&bound),
            ]);
        }
        html.push_str("<h3>WebSocket echo points</h3>\n<p>Messages, not requests: each connection sends one message and waits for its echo.</p>\n");
        html.push_str(&html_table(
            &[
                "Point",
                "Most messages per server CPU-second",
                "Against the next",
                "Most messages per second",
                "Against the next",
                "Bottleneck",
            ],
            &rows,
        ));
    }
    let mut idle: Vec<(&str, &WsIdle, f64)> = results
        .models
        .iter()
        .filter_map(|m| {
            let w = m.ws_idle.as_ref()?;
            let own = w.server_bytes_per_connection()?;
            Some((m.model.as_str(), w, w.spread_of(figure::SERVER_BYTES_PER_IDLE_WS).map_or(own, |s| s.median)))
        })
        .collect();
    if !idle.is_empty() {
        idle.sort_by(|a, b| a.2.total_cmp(&b.2));
        let attempted = idle.iter().map(|(_, w, _)| w.attempted).max().unwrap_or(0);
        let ranked: Vec<String> = idle
            .iter()
            .map(|(m, w, v)| {
                let held = w.held.map_or_else(|| "held not measured".to_owned(), |h| format!("{} held", thousands(h)));
                let answered = if w.every_connection_answered() {
                    "every one answered a ping"
                } else {
                    "not every one answered a ping"
                };
                format!(
                    "{m}{}: {} B ({held}, {answered})",
                    if w.disturbed_repeats() > 0 { " †" } else { "" },
                    thousands(v.round() as u64)
                )
            })
            .collect();
        let _ = writeln!(
            html,
            "<h3>Idle WebSockets</h3>\n<p>{} idle WebSockets per model; server bytes per idle WebSocket (resident memory added over the connections held), least first: {}.</p>",
            thousands(attempted),
            escape(&ranked.join("; "))
        );
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
    let mut html = String::from("<div class=\"scroll\"><table>\n");
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
    html.push_str("</table></div>\n");
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

    /// The README's default run of 2026-11-23, before repetitions (schema 1), kept as a fixture.
    fn readme_results() -> Results {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/default-2026-11-23-schema1.json");
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
                    Plot::Lines { .. } | Plot::Curves { .. } | Plot::WsLines { .. } | Plot::WsBars { .. } => {
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
                    Plot::Bars { .. } | Plot::Curves { .. } | Plot::WsLines { .. } | Plot::WsBars { .. } => {
                        panic!("{file} is drawn as lines against concurrency")
                    }
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
            // Once inside the figure's SVG, once as its link in the contents; the caption under
            // it says something else.
            assert_eq!(html.matches(&escape(&f.title)).count(), 2, "{}", f.title);
            assert!(html.contains(&format!("<li><a href=\"#{}\">{}</a></li>", f.file, escape(&f.title))), "{}", f.file);
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
        // One repetition each (results from before repetitions): the ratio, said to have no range.
        assert!(
            summary.contains("<td>epoll: 60.0 MB</td><td>ahead of select by 3.00× (20.0 MB); one repetition, no range to judge noise by</td>"),
            "{summary}"
        );
        assert!(
            summary.contains("<td>epoll: 20</td><td>tie with select (the same figure)</td><td>epoll: client-bound; select: not client-bound</td>"),
            "{summary}"
        );
        let html = page(&r, &[]);
        assert!(html.find("Summary") < html.find("I/O models"), "the page opens with the summary");
        assert!(html.contains("<script>") && !html.contains("src=\"http"), "inline scripts, no network");
    }

    #[test]
    fn value_axes_end_near_the_data() {
        // The CPU axis ran to 160% for a highest value of 101%.
        let top = axis_top(101.0);
        assert!((106.0..=125.0).contains(&top), "{top}");
        assert_eq!(axis_top(101.0), 120.0);
        assert_eq!(axis_top(9.5), 10.0);
        assert_eq!(axis_top(138_862.0), 150_000.0);
        assert_eq!(axis_top(0.0), 1.0, "no data: an axis still");
        for max in [0.3, 7.0, 55.0, 99.0, 1234.0, 73e6] {
            let top = axis_top(max);
            assert!(top >= max * 1.05 && top <= max * 1.4, "{max}: {top}");
        }
    }

    fn entry(model: &str, values: &[f64]) -> Entry {
        Entry { model: model.into(), spread: Spread::of(values.iter().copied()).unwrap(), disturbed: false }
    }

    /// "Ahead by" only when the leader's lowest is above the next's highest; otherwise a tie,
    /// named, with every model whose range reaches the leader's.
    #[test]
    fn ahead_only_when_the_ranges_do_not_overlap() {
        let show = |v: f64| thousands(v.round() as u64);
        let (leader, ahead) = lead(
            vec![
                entry("epoll", &[137_647.0, 138_862.0, 140_100.0]),
                entry("tokio", &[139_000.0, 144_000.0, 145_000.0]),
                entry("select", &[40_000.0, 41_000.0, 42_000.0]),
            ],
            &show,
            "",
        );
        assert_eq!(leader, "tokio: 144,000 (139,000–145,000)");
        assert_eq!(ahead, "tie with epoll (ranges overlap)");
        let (leader, ahead) = lead(
            vec![entry("select", &[40_000.0, 41_000.0, 42_000.0]), entry("epoll", &[137_647.0, 138_862.0, 140_100.0])],
            &show,
            "",
        );
        assert_eq!(leader, "epoll: 138,862 (137,647–140,100)");
        assert_eq!(ahead, "ahead of select by 3.39× (41,000 (40,000–42,000))");
        // Touching ranges cannot be told apart.
        let (_, ahead) = lead(vec![entry("a", &[10.0, 12.0]), entry("b", &[8.0, 10.0])], &show, "");
        assert!(ahead.starts_with("tie with b"), "{ahead}");
        // A disturbed model is marked where it is named.
        let mut busy = entry("uring", &[10.5, 10.8]);
        busy.disturbed = true;
        let (_, ahead) = lead(vec![entry("a", &[10.0, 12.0]), busy], &show, "");
        assert_eq!(ahead, "tie with uring † (ranges overlap)");
        assert_eq!(lead(Vec::new(), &show, "").0, "not measured");
        assert_eq!(lead(vec![entry("a", &[1.0])], &show, "").1, "the only model measured");
    }

    /// Repeated results: ranges and marks on the charts, the bottleneck per model in the
    /// summary, and the page in its order: verdict, contents, summary, charts, tables, with
    /// the seed's table after ours and never among its rows.
    #[test]
    fn repeated_results_draw_ranges_and_marks_and_read_top_down() {
        use crate::results::{spreads_of, Interference, Repeat};
        let repeat =
            |round: u32, figures: &[(&str, f64)], client_bound: bool, server_bound: bool, disturbed: bool| Repeat {
                round,
                figures: figures.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
                client_bound,
                server_bound,
                interference: Some(Interference { disturbed, ..Interference::default() }),
                ..Repeat::default()
            };
        let row = |bytes: [f64; 3], client_bound: bool, disturbed: bool| {
            let repeats: Vec<Repeat> = bytes
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    repeat(
                        i as u32 + 1,
                        &[(figure::RECEIVED_BYTES_PER_S, b), (figure::BYTES_PER_CPU_SECOND, b * 2.0)],
                        client_bound,
                        !client_bound,
                        disturbed && i == 0,
                    )
                })
                .collect();
            Row {
                kind: Some(RowKind::Flood),
                attempted: 20,
                connected: 20,
                received_bytes_per_s: bytes[1],
                cpu_min_pct: 40.0,
                cpu_max_pct: 101.0,
                client_bound,
                spread: spreads_of(&repeats),
                repeats,
                ..Row::default()
            }
        };
        let point = |rates: [f64; 3], client_bound: bool| {
            let repeats: Vec<Repeat> = rates
                .iter()
                .enumerate()
                .map(|(i, &r)| repeat(i as u32 + 1, &[(figure::REQUESTS_PER_S, r)], client_bound, false, false))
                .collect();
            HttpPoint {
                concurrency: 10,
                keepalive: true,
                requests_per_s: rates[1],
                client_bound,
                spread: spreads_of(&repeats),
                repeats,
                ..HttpPoint::default()
            }
        };
        let r = Results {
            rounds: 3,
            models: vec![
                ModelResult {
                    model: "epoll".into(),
                    rows: vec![row([30e6, 31e6, 33e6], true, false)],
                    http: vec![point([100.0, 110.0, 120.0], true)],
                    ..ModelResult::default()
                },
                ModelResult {
                    model: "uring".into(),
                    rows: vec![row([10e6, 11e6, 12e6], false, true)],
                    http: vec![point([50.0, 55.0, 60.0], false)],
                    ..ModelResult::default()
                },
            ],
            ..Results::default()
        };
        let figures = figures(&r);
        let throughput = figures.iter().find(|f| f.file == "throughput").unwrap();
        let Plot::Bars { bars, .. } = &throughput.panels[0].plot else { panic!() };
        assert_eq!(bars[0].value, Some(31.0));
        assert_eq!(bars[0].mark, PointMark { range: Some((30.0, 33.0)), client_bound: true, disturbed: false });
        assert!(
            bars[0].label.contains("31.0 MB/s (30.0–33.0)") && bars[0].label.ends_with("; client-bound"),
            "{}",
            bars[0].label
        );
        assert!(bars[1].mark.disturbed && bars[1].label.ends_with("† machine busy"), "{}", bars[1].label);
        let http = figures.iter().find(|f| f.file == "http").unwrap();
        let Plot::Lines { series, .. } = &http.panels[0].plot else { panic!() };
        assert_eq!(series[0].points, [(10.0, 110.0)]);
        assert_eq!(series[0].marks, [PointMark { range: Some((100.0, 120.0)), client_bound: true, disturbed: false }]);

        let summary = summary_html(&r);
        assert!(
            summary.contains(
                "<td>epoll: 62.0 MB (60.0–66.0)</td><td>ahead of uring † by 2.82× (22.0 MB (20.0–24.0))</td>"
            ),
            "{summary}"
        );
        assert!(summary.contains("<td>epoll: client-bound; uring: server-bound</td>"), "{summary}");
        assert!(summary.contains("The machine was busy during 1 of 4 rows and points"), "{summary}");

        let dir = std::env::temp_dir().join(format!("sockscale-report-order-{}", std::process::id()));
        render(&r, &dir).expect("render");
        let html = std::fs::read_to_string(dir.join("report.html")).expect("page");
        let _ = std::fs::remove_dir_all(&dir);
        let at = |what: &str| html.find(what).unwrap_or_else(|| panic!("no {what} in the page"));
        let order = [
            "<h1>",
            "<p class=\"run\">Profile",
            "<section id=\"verdict\">",
            "<nav id=\"contents\">",
            "<h2 id=\"summary\">",
            "<section id=\"charts\">",
            "<figure id=\"throughput\">",
            "<h2>I/O models (Table 6-3)</h2>",
            "<h2>The seed's Table 6-3, as printed</h2>",
            "<h2>HTTP 4 KiB responses by concurrency (seed 003)</h2>",
        ];
        for pair in order.windows(2) {
            assert!(at(pair[0]) < at(pair[1]), "{} before {}", pair[0], pair[1]);
        }
        // Nothing drawn or tabled before the verdict; every section linked from the contents.
        assert!(at("<section id=\"verdict\">") < at("<table>").min(at("<svg")), "the verdict first");
        assert!(html.contains("<a href=\"#t-the-seed-s-table-6-3-as-printed\">"), "the contents link the seed's table");
        assert!(html.contains("<section id=\"t-the-seed-s-table-6-3-as-printed\">"));
        assert!(!html.contains("seed: "), "no seed row among ours");
        assert!(html.contains("white-space: nowrap"), "cells do not wrap");
    }
}
