//! `sockscale report`: charts and an HTML page drawn from a results JSON alone.
//!
//! Five charts, each as SVG and PNG: throughput, CPU, memory per connection and threads
//! against connections (one line per model, through its flood, rate-limited and maximum
//! rows), and HTTP responses per second against concurrency (the seed-003 figure, nginx
//! included when it was measured). The HTML page inlines the SVGs and the tables, so it opens
//! from disk with no network. Text is drawn with the DejaVu Sans font built into the binary, so
//! the PNGs render the same on a machine with no fonts installed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::results::{ModelResult, Results};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {reason}")]
    Write { path: String, reason: String },
}

/// One chart: named series of (x, y) points.
struct Chart {
    file: &'static str,
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    log_x: bool,
    log_y: bool,
    series: Vec<(String, Vec<(f64, f64)>)>,
}

fn charts(results: &Results) -> Vec<Chart> {
    let rows_series = |f: &dyn Fn(&crate::results::Row, f64) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        results
            .models
            .iter()
            .filter(|m| !m.rows.is_empty())
            .map(|m: &ModelResult| {
                let mut points: Vec<(f64, f64)> = m
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let n = r.connected as f64;
                        (n > 0.0).then(|| f(r, n).map(|y| (n, y))).flatten()
                    })
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                (m.model.clone(), points)
            })
            .collect()
    };
    let http: Vec<(String, Vec<(f64, f64)>)> = results
        .all_results()
        .filter(|m| !m.http.is_empty())
        .map(|m| {
            let mut points: Vec<(f64, f64)> =
                m.http.iter().filter(|p| p.keepalive).map(|p| (p.concurrency as f64, p.requests_per_s)).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (m.model.clone(), points)
        })
        .collect();
    vec![
        Chart {
            file: "throughput",
            title: "Echo throughput received by the clients",
            x_label: "connections",
            y_label: "bytes/s",
            log_x: false,
            log_y: false,
            series: rows_series(&|r, _| Some(r.received_bytes_per_s)),
        },
        Chart {
            file: "cpu",
            title: "Server CPU (highest 1 s sample)",
            x_label: "connections",
            y_label: "% of one core",
            log_x: false,
            log_y: false,
            series: rows_series(&|r, _| Some(r.cpu_max_pct)),
        },
        Chart {
            file: "memory_per_connection",
            title: "Server memory per connection",
            x_label: "connections",
            y_label: "KiB per connection",
            log_x: false,
            log_y: false,
            series: rows_series(&|r, n| Some(r.server_rss_kib as f64 / n)),
        },
        Chart {
            file: "threads",
            title: "Server threads",
            x_label: "connections",
            y_label: "threads (log scale)",
            log_x: false,
            log_y: true,
            series: rows_series(&|r, _| Some(r.threads as f64)),
        },
        Chart {
            file: "http",
            title: "HTTP 4 KiB responses per second, keep-alive (seed 003)",
            x_label: "concurrent connections",
            y_label: "responses/s",
            log_x: true,
            log_y: false,
            series: http,
        },
    ]
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in; it is a valid TrueType font, so this cannot fail.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
    let points = chart.series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::INFINITY, 1.0f64, f64::INFINITY, 1.0f64);
    for &(x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    let mut builder = ChartBuilder::on(&root);
    builder.caption(chart.title, ("sans-serif", 22)).margin(16).x_label_area_size(48).y_label_area_size(90);
    // Log axes start a little below the smallest value (never at zero); linear ones at zero.
    let log_floor = |min: f64| if min.is_finite() { (min * 0.8).max(0.5) } else { 1.0 };
    let err = |e: String| e;
    match (chart.log_x, chart.log_y) {
        (false, false) => plot(builder.build_cartesian_2d(0.0..x_max * 1.05, 0.0..y_max * 1.1), chart).map_err(err)?,
        (true, false) => {
            plot(builder.build_cartesian_2d((log_floor(x_min)..x_max * 1.25).log_scale(), 0.0..y_max * 1.1), chart)
                .map_err(err)?
        }
        (false, true) => {
            plot(builder.build_cartesian_2d(0.0..x_max * 1.05, (log_floor(y_min)..y_max * 2.0).log_scale()), chart)
                .map_err(err)?
        }
        (true, true) => plot(
            builder.build_cartesian_2d(
                (log_floor(x_min)..x_max * 1.25).log_scale(),
                (log_floor(y_min)..y_max * 2.0).log_scale(),
            ),
            chart,
        )
        .map_err(err)?,
    }
    root.present().map_err(|e| format!("{e:?}"))
}

/// A chart's coordinate system as `ChartBuilder` builds it, linear or logarithmic.
type Built<'a, DB, X, Y> =
    Result<ChartContext<'a, DB, Cartesian2d<X, Y>>, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draw `chart`'s series into a built coordinate system of any kind (linear or log axes).
fn plot<'a, DB, X, Y>(built: Built<'a, DB, X, Y>, chart: &Chart) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let mut ctx = built.map_err(err)?;
    ctx.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_label_formatter(&|x| short(*x))
        .y_label_formatter(&|y| short(*y))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in chart.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        ctx.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(err)?;
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)
}

/// Write every chart as SVG and PNG and the HTML page into `dir`; returns the files written.
pub fn render(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    register_font();
    let fail = |path: &Path, reason: String| ReportError::Write { path: path.display().to_string(), reason };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e.to_string()))?;
    let mut written = Vec::new();
    let mut svgs = Vec::new();
    for chart in charts(results) {
        let svg = dir.join(format!("{}.svg", chart.file));
        draw(SVGBackend::new(&svg, (900, 560)).into_drawing_area(), &chart).map_err(|e| fail(&svg, e))?;
        let png = dir.join(format!("{}.png", chart.file));
        draw(BitMapBackend::new(&png, (900, 560)).into_drawing_area(), &chart).map_err(|e| fail(&png, e))?;
        svgs.push((chart.title, std::fs::read_to_string(&svg).map_err(|e| fail(&svg, e.to_string()))?));
        written.push(svg);
        written.push(png);
    }
    let html = dir.join("report.html");
    std::fs::write(&html, page(results, &svgs)).map_err(|e| fail(&html, e.to_string()))?;
    written.push(html);
    Ok(written)
}

fn page(results: &Results, svgs: &[(&str, String)]) -> String {
    let mut body = String::new();
    let tables = crate::run::tables_markdown(results);
    for block in tables.split("\n\n") {
        if let Some(heading) = block.strip_prefix("## ") {
            let _ = writeln!(body, "<h2>{}</h2>", escape(heading));
        } else if block.starts_with('|') {
            body.push_str(&markdown_table_to_html(block));
        } else if !block.trim().is_empty() {
            let _ = writeln!(body, "<p>{}</p>", escape(block));
        }
    }
    body.push_str("<h2>Charts</h2>\n");
    for (title, svg) in svgs {
        let inline = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
        let _ = writeln!(body, "<figure>{inline}<figcaption>{}</figcaption></figure>", escape(title));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sockscale bench: {profile} profile, {started}</title>\n<style>\nbody {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}\ntable {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}\nth, td {{ border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: right; }}\nth {{ background: #eee; }} td:first-child, th:first-child {{ text-align: left; }}\nfigure {{ margin: 1em 0; }} figure svg {{ max-width: 100%; height: auto; }}\n</style></head><body>\n<h1>sockscale bench</h1>\n{body}</body></html>\n",
        profile = escape(&results.profile),
        started = escape(&results.started),
    )
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
        html.push_str("<tr>");
        for cell in cells {
            let _ = write!(html, "<{tag}>{}</{tag}>", escape(cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_numbers() {
        assert_eq!(super::short(0.0), "0");
        assert_eq!(super::short(950.0), "950");
        assert_eq!(super::short(1500.0), "1.5k");
        assert_eq!(super::short(2_000_000.0), "2M");
        assert_eq!(super::short(12.5), "12.5");
    }
}
