//! The raw results of a bench run, and everything drawn from them: the seed-layout table and
//! the CSV. Measure first, render later: nothing here is computed from anything but this JSON.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

pub const SCHEMA: u32 = 1;

/// The machine a run was made on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub memory_kib: u64,
    pub kernel: String,
    pub somaxconn: String,
    pub tcp_mem_pages: String,
    pub open_files_limit: u64,
    pub io_uring: String,
}

/// Which of the seed's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// Every connection sends as fast as its echoes come back.
    Flood,
    /// Blocks of connections, each block limited to a total send rate.
    RateLimited,
    /// Connections added in blocks, rate-limited, until the server stops accepting or a cap.
    Maximum,
}

impl RowKind {
    pub fn label(self) -> &'static str {
        match self {
            RowKind::Flood => "flood",
            RowKind::RateLimited => "rate-limited",
            RowKind::Maximum => "maximum",
        }
    }
}

/// One row of Table 6-3.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub kind: Option<RowKind>,
    pub attempted: u64,
    /// Connections the server held at once, at the peak of its own `connections` gauge
    /// (sampled ten times a second). Connections it refused are not counted, however often
    /// the client reconnected.
    pub connected: u64,
    /// Most connections the client had open at once, from its side (it counts connections
    /// still waiting in the server's accept queue).
    pub client_peak_open: u64,
    /// Server resident memory, the largest sample.
    pub server_rss_kib: u64,
    /// Kernel TCP memory (/proc/net/sockstat), the largest sample minus the idle baseline: the
    /// counterpart of the seed's non-paged pool.
    pub kernel_tcp_kib: u64,
    /// Server CPU over one-second samples, as a percentage of one core.
    pub cpu_min_pct: f64,
    pub cpu_max_pct: f64,
    /// Server threads, the largest sample.
    pub threads: u64,
    pub sent_bytes_per_s: f64,
    pub received_bytes_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub errors: std::collections::BTreeMap<String, u64>,
    /// The load generator's CPU as a percentage of one core, and of the cores it had.
    pub client_cpu_pct: f64,
    pub client_cores: usize,
    /// The load generator was the bottleneck for this row (it used ≥ 90% of its cores).
    pub client_bound: bool,
    pub duration_s: f64,
}

/// One point of the seed-003 HTTP sweep.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HttpPoint {
    pub concurrency: u64,
    pub keepalive: bool,
    pub requests_per_s: f64,
    /// Mean latency of one request.
    pub mean_ms: f64,
    /// Time per request across all concurrent requests (1 / rate), as ab prints it.
    pub ms_per_request: f64,
    pub errors: u64,
    pub client_bound: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UdpPoint {
    pub sent_per_s: f64,
    pub received_per_s: f64,
    pub lost: u64,
}

/// Everything measured for one model (or nginx, in the HTTP sweep).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModelResult {
    pub model: String,
    /// Why the model failed or was skipped, if it did.
    pub error: Option<String>,
    pub rows: Vec<Row>,
    pub http: Vec<HttpPoint>,
    pub udp: Option<UdpPoint>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Results {
    pub schema: u32,
    pub profile: String,
    pub started: String,
    pub finished: String,
    /// The run was interrupted; what is here was measured before.
    pub interrupted: bool,
    pub machine: Machine,
    /// The parameters of the profile, so the table can say what each row means.
    pub parameters: serde_json::Value,
    pub models: Vec<ModelResult>,
    /// nginx in the HTTP sweep, when it was installed; otherwise why not.
    pub nginx: Option<ModelResult>,
}

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} is not a sockscale bench result: {reason}")]
    Format { path: String, reason: String },
}

impl Results {
    pub fn load(path: &str) -> Result<Results, ResultsError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ResultsError::Read { path: path.into(), error: source })?;
        let results: Results = serde_json::from_str(&text)
            .map_err(|e| ResultsError::Format { path: path.into(), reason: e.to_string() })?;
        if results.schema != SCHEMA {
            return Err(ResultsError::Format {
                path: path.into(),
                reason: format!("schema {} (expected {SCHEMA})", results.schema),
            });
        }
        Ok(results)
    }

    /// Table 6-3 as the seed lays it out, one model per block of rows, in markdown.
    pub fn table_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| I/O model | Attempted/Connected | Memory Used (KB) | Kernel TCP memory (KB) | CPU Usage | Threads | Throughput (Send/Receive Bytes Per Second) | Latency p50/p99 | Errors | Client CPU |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for m in &self.models {
            if let Some(error) = &m.error {
                if m.rows.is_empty() {
                    let _ = writeln!(s, "| {} | failed: {} | | | | | | | | |", m.model, error.replace('|', "/"));
                    continue;
                }
            }
            for (i, r) in m.rows.iter().enumerate() {
                let name = if i == 0 { m.model.as_str() } else { "" };
                let errors: u64 = r.errors.values().sum();
                let client = format!("{:.0}%{}", r.client_cpu_pct, if r.client_bound { " (client-bound)" } else { "" });
                let _ = writeln!(
                    s,
                    "| {name} | {}/{} | {} | {} | {:.0}–{:.0}% | {} | {}/{} | {}/{} | {errors} | {client} |",
                    thousands(r.attempted),
                    thousands(r.connected),
                    thousands(r.server_rss_kib),
                    thousands(r.kernel_tcp_kib),
                    r.cpu_min_pct,
                    r.cpu_max_pct,
                    r.threads,
                    thousands(r.sent_bytes_per_s as u64),
                    thousands(r.received_bytes_per_s as u64),
                    latency(r.p50_us),
                    latency(r.p99_us),
                );
            }
        }
        s
    }

    /// The seed-003 sweep: HTTP responses per second and time per request by concurrency.
    pub fn http_markdown(&self) -> String {
        let mut concurrencies: Vec<u64> =
            self.all_results().flat_map(|m| m.http.iter().map(|p| p.concurrency)).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        let mut s = String::new();
        let header: Vec<String> = concurrencies.iter().map(|c| format!("c={c}")).collect();
        let _ = writeln!(s, "| model | keep-alive | {} |", header.join(" | "));
        let _ = writeln!(s, "|---|---|{}", "---|".repeat(concurrencies.len()));
        for m in self.all_results() {
            for keepalive in [true, false] {
                let cells: Vec<String> = concurrencies
                    .iter()
                    .map(|c| match m.http.iter().find(|p| p.concurrency == *c && p.keepalive == keepalive) {
                        Some(p) => format!(
                            "{} req/s, {:.3} ms{}{}",
                            thousands(p.requests_per_s as u64),
                            p.ms_per_request,
                            if p.errors > 0 { format!(", {} errors", p.errors) } else { String::new() },
                            if p.client_bound { " (client-bound)" } else { "" }
                        ),
                        None => "—".into(),
                    })
                    .collect();
                if m.http.iter().any(|p| p.keepalive == keepalive) {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} |",
                        m.model,
                        if keepalive { "yes" } else { "no" },
                        cells.join(" | ")
                    );
                }
            }
        }
        if let Some(nginx) = &self.nginx {
            if let Some(error) = &nginx.error {
                let _ = writeln!(s, "\nnginx: {error}");
            }
        }
        s
    }

    pub fn udp_markdown(&self) -> String {
        let mut s = String::from("| model | datagrams/s sent | datagrams/s received | lost |\n|---|---|---|---|\n");
        for m in &self.models {
            if let Some(u) = &m.udp {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} |",
                    m.model,
                    thousands(u.sent_per_s as u64),
                    thousands(u.received_per_s as u64),
                    u.lost
                );
            }
        }
        s
    }

    pub fn rows_csv(&self) -> String {
        let mut s = String::from(
            "model,row,attempted,connected,server_rss_kib,kernel_tcp_kib,cpu_min_pct,cpu_max_pct,threads,sent_bytes_per_s,received_bytes_per_s,p50_us,p99_us,errors,client_cpu_pct,client_bound,error\n",
        );
        for m in &self.models {
            if m.rows.is_empty() {
                let _ = writeln!(
                    s,
                    "{},,,,,,,,,,,,,,,,,\"{}\"",
                    m.model,
                    m.error.clone().unwrap_or_default().replace('"', "'")
                );
            }
            for r in &m.rows {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{:.1},{:.1},{},{:.0},{:.0},{:.1},{:.1},{},{:.1},{},",
                    m.model,
                    r.kind.map_or("", RowKind::label),
                    r.attempted,
                    r.connected,
                    r.server_rss_kib,
                    r.kernel_tcp_kib,
                    r.cpu_min_pct,
                    r.cpu_max_pct,
                    r.threads,
                    r.sent_bytes_per_s,
                    r.received_bytes_per_s,
                    r.p50_us,
                    r.p99_us,
                    r.errors.values().sum::<u64>(),
                    r.client_cpu_pct,
                    r.client_bound
                );
            }
        }
        s
    }

    pub fn http_csv(&self) -> String {
        let mut s =
            String::from("model,concurrency,keepalive,requests_per_s,mean_ms,ms_per_request,errors,client_bound\n");
        for m in self.all_results() {
            for p in &m.http {
                let _ = writeln!(
                    s,
                    "{},{},{},{:.0},{:.3},{:.4},{},{}",
                    m.model,
                    p.concurrency,
                    p.keepalive,
                    p.requests_per_s,
                    p.mean_ms,
                    p.ms_per_request,
                    p.errors,
                    p.client_bound
                );
            }
        }
        s
    }

    /// Every model's results, then nginx's if measured.
    pub fn all_results(&self) -> impl Iterator<Item = &ModelResult> {
        self.models.iter().chain(self.nginx.iter().filter(|n| n.error.is_none()))
    }
}

/// 1234567 → "1,234,567", as the seed prints numbers.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{us:.0}us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(2198148), "2,198,148");
    }

    #[test]
    fn table_uses_the_seed_layout() {
        let r = Results {
            models: vec![ModelResult {
                model: "epoll".into(),
                rows: vec![
                    Row {
                        kind: Some(RowKind::Flood),
                        attempted: 7000,
                        connected: 7000,
                        cpu_min_pct: 40.0,
                        cpu_max_pct: 50.0,
                        threads: 2,
                        ..Row::default()
                    },
                    Row { kind: Some(RowKind::Maximum), attempted: 50000, connected: 49997, ..Row::default() },
                ],
                ..ModelResult::default()
            }],
            ..Results::default()
        };
        let t = r.table_markdown();
        assert!(t.contains("| epoll | 7,000/7,000 |"), "{t}");
        assert!(t.contains("| 40–50% | 2 |"), "{t}");
        assert!(t.contains("|  | 50,000/49,997 |"), "{t}");
    }
}
