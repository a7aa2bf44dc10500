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
    /// The limits on threads this run was under, by name (`kernel.threads-max`, the soft
    /// `RLIMIT_NPROC`, the cgroup's `pids.max`), those that are set; absent in older results.
    #[serde(default)]
    pub thread_limits: std::collections::BTreeMap<String, u64>,
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
    /// the client reconnected. 0 when the server printed no stats line: see [`Row::samples`]
    /// and [`Row::connected_held`].
    pub connected: u64,
    /// Most connections the client had open at once, from its side (it counts connections
    /// still waiting in the server's accept queue).
    pub client_peak_open: u64,
    /// Server resident memory, the largest sample (0 when none: see [`Row::server_rss`]).
    pub server_rss_kib: u64,
    /// Kernel TCP socket buffers (/proc/net/sockstat "mem"), the largest sample minus the
    /// baseline taken before the load started. Kept for older readers; [`Row::kernel`] says
    /// whether it was measured at all, and holds the raw numbers.
    pub kernel_tcp_kib: u64,
    /// Server CPU over one-second samples, as a percentage of one core (0 when none: see
    /// [`Row::server_cpu_pct`]).
    pub cpu_min_pct: f64,
    pub cpu_max_pct: f64,
    /// Server threads, the largest sample (0 when none: see [`Row::server_threads`]).
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
    /// Kernel memory for sockets, raw: sockstat and slabinfo before the load and at their
    /// peak. Absent in results written before it was measured.
    #[serde(default)]
    pub kernel: Option<KernelMemory>,
    /// How many samples each server figure above came from. Absent in results written before
    /// they were counted, whose figures stand as written.
    #[serde(default)]
    pub samples: Option<SampleCounts>,
    /// The load's connect attempts and, of them, retries of a connection whose connect or
    /// exchange had failed (each connection backs off between them). Absent in results written
    /// before they were counted.
    #[serde(default)]
    pub connects: Option<ConnectAttempts>,
}

/// Connect attempts of one row, from the load's report.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConnectAttempts {
    pub attempts: u64,
    pub retries: u64,
}

/// How many samples each figure the harness takes from the server came from. A figure with
/// none was not measured: the field holding it keeps the 0 it started at, for older readers.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SampleCounts {
    /// Stats lines with a `connections=` gauge the server printed while the row ran
    /// ([`Row::connected`]).
    pub connections: u64,
    /// Reads of /proc/PID/status that gave VmRSS ([`Row::server_rss_kib`]).
    pub rss: u64,
    /// Reads of /proc/PID/status that gave Threads ([`Row::threads`]).
    pub threads: u64,
    /// CPU intervals the min–max range was taken over ([`Row::cpu_min_pct`],
    /// [`Row::cpu_max_pct`]): each between two reads of /proc/PID/stat.
    pub cpu: u64,
}

/// The TCP line of /proc/net/sockstat. System-wide: with the load generator on the same
/// machine it counts both ends of every loopback connection.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SockstatTcp {
    pub inuse: u64,
    pub orphan: u64,
    pub tw: u64,
    pub alloc: u64,
    /// Pages holding socket buffer data (not the socket structures themselves).
    pub mem_pages: u64,
}

/// The slab caches that grow with TCP connections: the socket (TCP, TCPv6), its inode and
/// dentry in sockfs, its open file, handshake and TIME-WAIT minisocks, port bind buckets,
/// epoll items, and socket buffer heads. Caches the kernel merged into another do not appear
/// in slabinfo under their own name and are skipped. General-purpose kmalloc caches are left
/// out: too much else uses them.
pub const SOCKET_SLAB_CACHES: [&str; 17] = [
    "TCP",
    "TCPv6",
    "request_sock_TCP",
    "request_sock_TCPv6",
    "tw_sock_TCP",
    "tw_sock_TCPv6",
    "tcp_bind_bucket",
    "tcp_bind2_bucket",
    "sock_inode_cache",
    "filp",
    "dentry",
    "eventpoll_epi",
    "eventpoll_pwq",
    "skbuff_head_cache",
    "skbuff_small_head",
    "skbuff_fclone_cache",
    "inet_peer_cache",
];

/// One cache of /proc/slabinfo.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SlabCache {
    pub active_objs: u64,
    pub num_objs: u64,
    pub objsize: u64,
    pub objperslab: u64,
    pub pagesperslab: u64,
    pub num_slabs: u64,
}

impl SlabCache {
    /// Memory the cache holds: its slabs, whole pages, used or not.
    pub fn bytes(&self, page_size: u64) -> u64 {
        self.num_slabs * self.pagesperslab * page_size
    }
}

/// Kernel memory for sockets over one row, as raw snapshots: the baseline before the load
/// started and the peak while it ran. Both sources are system-wide.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelMemory {
    pub page_size: u64,
    /// /proc/net/sockstat before the load; `None` when it could not be read.
    pub sockstat_baseline: Option<SockstatTcp>,
    /// The largest value of each sockstat field while the load ran.
    pub sockstat_peak: Option<SockstatTcp>,
    /// The socket-related caches of /proc/slabinfo (see [`SOCKET_SLAB_CACHES`]) before
    /// the load; `None` when slabinfo could not be read (it needs root).
    pub slab_baseline: Option<std::collections::BTreeMap<String, SlabCache>>,
    /// The same caches at the sample where their total was largest.
    pub slab_peak: Option<std::collections::BTreeMap<String, SlabCache>>,
    /// Why slabinfo was not measured, when it was not.
    pub slab_unmeasured: Option<String>,
}

impl KernelMemory {
    /// Socket buffer memory added while the load ran (sockstat "mem"), KiB.
    pub fn buffers_kib(&self) -> Option<u64> {
        let (base, peak) = (self.sockstat_baseline?, self.sockstat_peak?);
        Some(peak.mem_pages.saturating_sub(base.mem_pages) * self.page_size / 1024)
    }

    /// TCP sockets added while the load ran (sockstat "alloc"), both ends of each connection.
    pub fn sockets_added(&self) -> Option<u64> {
        let (base, peak) = (self.sockstat_baseline?, self.sockstat_peak?);
        Some(peak.alloc.saturating_sub(base.alloc))
    }

    /// Slab memory of the socket-related caches added while the load ran, KiB. Signed: the
    /// caches are shared with the rest of the machine, which may free some meanwhile.
    pub fn slab_kib(&self) -> Option<i64> {
        let (base, peak) = (self.slab_baseline.as_ref()?, self.slab_peak.as_ref()?);
        let total = |caches: &std::collections::BTreeMap<String, SlabCache>| -> i64 {
            caches.values().map(|c| c.bytes(self.page_size) as i64).sum()
        };
        Some((total(peak) - total(base)) / 1024)
    }
}

impl Row {
    /// Whether the figure counted by `count` was sampled: results from before samples were
    /// counted are taken as written.
    fn sampled(&self, count: fn(&SampleCounts) -> u64) -> bool {
        self.samples.as_ref().is_none_or(|s| count(s) > 0)
    }

    /// Connections the server held at its peak, when it reported them.
    pub fn connected_held(&self) -> Option<u64> {
        self.sampled(|s| s.connections).then_some(self.connected)
    }

    /// Server resident memory, KiB, when sampled.
    pub fn server_rss(&self) -> Option<u64> {
        self.sampled(|s| s.rss).then_some(self.server_rss_kib)
    }

    /// Server threads, when sampled.
    pub fn server_threads(&self) -> Option<u64> {
        self.sampled(|s| s.threads).then_some(self.threads)
    }

    /// Server CPU, lowest and highest interval, % of one core, when sampled.
    pub fn server_cpu_pct(&self) -> Option<(f64, f64)> {
        self.sampled(|s| s.cpu).then_some((self.cpu_min_pct, self.cpu_max_pct))
    }

    /// Whether any server figure of this row went without a sample.
    pub fn has_unsampled(&self) -> bool {
        self.connected_held().is_none()
            || self.server_rss().is_none()
            || self.server_threads().is_none()
            || self.server_cpu_pct().is_none()
    }

    /// Kernel socket buffers, KiB, when measured. Results written before [`Row::kernel`]
    /// existed measured sockstat too, so their `kernel_tcp_kib` stands.
    pub fn kernel_buffers_kib(&self) -> Option<u64> {
        match &self.kernel {
            Some(k) => k.buffers_kib(),
            None => Some(self.kernel_tcp_kib),
        }
    }

    /// Kernel slab memory of the socket caches, KiB, when measured.
    pub fn kernel_slab_kib(&self) -> Option<i64> {
        self.kernel.as_ref().and_then(KernelMemory::slab_kib)
    }
}

/// One point of the seed-003 HTTP sweep.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HttpPoint {
    pub concurrency: u64,
    pub keepalive: bool,
    pub requests_per_s: f64,
    /// Mean latency of one request (0 when no request completed; see `latency`).
    pub mean_ms: f64,
    /// Time per request across all concurrent requests (1 / rate), as ab prints it: a
    /// throughput figure, not a latency.
    pub ms_per_request: f64,
    pub errors: u64,
    pub client_bound: bool,
    /// Measured request latency, from the load generator's histogram. Absent in results
    /// written before it was kept, and when no request completed.
    #[serde(default)]
    pub latency: Option<HttpLatency>,
}

/// Request latency of one HTTP point: each request from being sent to its whole response
/// being read, as the load generator's HDR histogram has it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct HttpLatency {
    /// Requests timed.
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl HttpLatency {
    /// `None` when nothing was timed: a histogram with no entries has no percentiles.
    pub fn from_report(l: &sockscale_load::report::Latency) -> Option<HttpLatency> {
        (l.count > 0).then(|| HttpLatency {
            count: l.count,
            mean_ms: l.mean_us / 1000.0,
            p50_ms: l.p50_us / 1000.0,
            p90_ms: l.p90_us / 1000.0,
            p99_ms: l.p99_us / 1000.0,
            max_ms: l.max_us / 1000.0,
        })
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UdpPoint {
    pub sent_per_s: f64,
    /// Answers per second (0 with nothing sent: see [`UdpPoint::sent`]).
    pub received_per_s: f64,
    /// Datagrams sent and not answered within the reply timeout (0 with nothing sent).
    pub lost: u64,
    /// Datagrams sent. With none, the server was asked nothing, so `received_per_s` and `lost`
    /// measured nothing. Absent in results written before it was kept.
    #[serde(default)]
    pub sent: Option<u64>,
}

impl UdpPoint {
    /// Nothing was sent, so nothing about the server was measured.
    pub fn sent_nothing(&self) -> bool {
        self.sent == Some(0)
    }
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
    /// Written while the run goes on (after each model): the models after the last one here
    /// are not measured yet. False once the run has ended, and in older results.
    #[serde(default)]
    pub in_progress: bool,
    /// The models the run was asked to measure, so a partial result says which are missing
    /// (empty in older results).
    #[serde(default)]
    pub planned_models: Vec<String>,
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
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ResultsError::Format { path: path.into(), reason: e.to_string() })?;
        // A load report is the JSON users most often hand over by mistake; name it, rather than
        // the first bench field it lacks.
        if value.get("mode").is_some() && value.get("requests").is_some() && value.get("models").is_none() {
            return Err(ResultsError::Format {
                path: path.into(),
                reason: "it is a `sockscale load` report (read it with `sockscale load merge`); give the results.json a bench run wrote".into(),
            });
        }
        let results: Results = serde_json::from_value(value)
            .map_err(|e| ResultsError::Format { path: path.into(), reason: e.to_string() })?;
        if results.schema != SCHEMA {
            return Err(ResultsError::Format {
                path: path.into(),
                reason: format!("schema {} (expected {SCHEMA})", results.schema),
            });
        }
        Ok(results)
    }

    /// Table 6-3 as the seed lays it out, one model per block of rows, in markdown, followed
    /// by a note on how the kernel columns were measured.
    pub fn table_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| I/O model | Attempted/Connected | Memory Used (KiB, server RSS) | Kernel socket buffers (KiB) | Kernel socket slab (KiB) | CPU Usage (% of one core) | Threads | Throughput (Send/Receive Bytes Per Second) | Latency p50/p99 | Errors | Client CPU (% of one core) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        for m in &self.models {
            if let Some(error) = &m.error {
                if m.rows.is_empty() {
                    let _ = writeln!(s, "| {} | failed: {} | | | | | | | | | |", m.model, error.replace('|', "/"));
                    continue;
                }
            }
            // A failure after some rows (a later row, the HTTP sweep, UDP) is said under them.
            let failure = m.error.as_ref().filter(|_| !m.rows.is_empty());
            for (i, r) in m.rows.iter().enumerate() {
                let name = if i == 0 { m.model.as_str() } else { "" };
                let errors: u64 = r.errors.values().sum();
                let client = format!("{:.0}%{}", r.client_cpu_pct, if r.client_bound { " (client-bound)" } else { "" });
                let count = |n: Option<u64>| n.map_or_else(|| NOT_MEASURED.to_owned(), thousands);
                let _ = writeln!(
                    s,
                    "| {name} | {}/{} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {client} |",
                    thousands(r.attempted),
                    count(r.connected_held()),
                    count(r.server_rss()),
                    r.kernel_buffers_kib().map_or_else(|| NOT_MEASURED.to_owned(), thousands),
                    r.kernel_slab_kib().map_or_else(|| NOT_MEASURED.to_owned(), signed_thousands),
                    r.server_cpu_pct()
                        .map_or_else(|| NOT_MEASURED.to_owned(), |(min, max)| format!("{min:.0}–{max:.0}%")),
                    count(r.server_threads()),
                    thousands(r.sent_bytes_per_s as u64),
                    thousands(r.received_bytes_per_s as u64),
                    latency_pair(r.p50_us, r.p99_us),
                    errors_cell(errors, r.connects),
                );
            }
            if let Some(error) = failure {
                let _ = writeln!(s, "|  | failed: {} | | | | | | | | | |", error.replace('|', "/"));
            }
            seed_rows(&mut s, &m.model);
        }
        if self.models.iter().any(|m| crate::seed::counterpart_of(&m.model).is_some()) {
            let _ = writeln!(s, "\n{SEED_NOTE}");
        }
        let _ = write!(s, "\n{}", self.kernel_note());
        if self.models.iter().flat_map(|m| &m.rows).any(Row::has_unsampled) {
            s.push_str(&format!("\n{UNSAMPLED_NOTE}\n"));
        }
        s
    }

    /// How the kernel columns were measured, and why a cell may say "not measured".
    fn kernel_note(&self) -> String {
        let mut note = format!(
            "Kernel socket buffers: /proc/net/sockstat TCP \"mem\" (pages holding socket buffer data, not the sockets themselves), the largest sample minus its value before the load started. Kernel socket slab: the slab caches that hold the sockets themselves ({}, where the kernel has them as caches of their own), from /proc/slabinfo (readable by root only): their slabs at the sample with the largest total minus before the load; a few connections may fit in slabs already there, so this reads true from hundreds of connections up. Both are system-wide: they count the load generator's end of every loopback connection too, and anything else the machine did meanwhile. \"{NOT_MEASURED}\" means the source could not be read, or the results were written before it was measured.",
            SOCKET_SLAB_CACHES.join(", ")
        );
        let reasons: std::collections::BTreeSet<&str> = self
            .models
            .iter()
            .flat_map(|m| &m.rows)
            .filter_map(|r| r.kernel.as_ref()?.slab_unmeasured.as_deref())
            .collect();
        for reason in reasons {
            let _ = write!(note, " Slab not measured: {reason}.");
        }
        note.push('\n');
        note
    }

    /// The seed-003 sweep by concurrency: responses per second, measured request latency, and
    /// ab's time per request (1 / throughput), each as its own table.
    pub fn http_markdown(&self) -> String {
        let mut concurrencies: Vec<u64> =
            self.all_results().flat_map(|m| m.http.iter().map(|p| p.concurrency)).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        let table = |cell: &dyn Fn(&HttpPoint) -> String| -> String {
            let mut s = String::new();
            let header: Vec<String> = concurrencies.iter().map(|c| format!("c={c}")).collect();
            let _ = writeln!(s, "| model | keep-alive | {} |", header.join(" | "));
            let _ = writeln!(s, "|---|---|{}", "---|".repeat(concurrencies.len()));
            for m in self.all_results() {
                for keepalive in [true, false] {
                    if !m.http.iter().any(|p| p.keepalive == keepalive) {
                        continue;
                    }
                    let cells: Vec<String> = concurrencies
                        .iter()
                        .map(|c| {
                            m.http
                                .iter()
                                .find(|p| p.concurrency == *c && p.keepalive == keepalive)
                                .map_or_else(|| "—".into(), cell)
                        })
                        .collect();
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} |",
                        m.model,
                        if keepalive { "yes" } else { "no" },
                        cells.join(" | ")
                    );
                }
            }
            s
        };
        let mut s = String::from("### Responses per second\n\nResponses the load generator received per second over the point's measured time; errors are requests that failed or were answered with an error.\n\n");
        s.push_str(&table(&|p| {
            format!(
                "{}{}{}",
                thousands(p.requests_per_s as u64),
                if p.errors > 0 { format!(", {} errors", thousands(p.errors)) } else { String::new() },
                if p.client_bound { " (client-bound)" } else { "" }
            )
        }));
        s.push_str(
            "\n### Request latency, ms: p50 / p99 (mean)\n\nEach request from being sent to its whole response being read, from the load generator's histogram.\n\n",
        );
        s.push_str(&table(&|p| match &p.latency {
            Some(l) => format!("{} / {} ({})", ms(l.p50_ms), ms(l.p99_ms), ms(l.mean_ms)),
            None if p.mean_ms > 0.0 => format!("{NOT_MEASURED} (mean {})", ms(p.mean_ms)),
            None => NOT_MEASURED.into(),
        }));
        s.push_str(
            "\n### Time per request, ms (1 / throughput, as ab reports it)\n\nThe run's duration divided by the responses of all concurrent connections together: a throughput figure, not how long any request took.\n\n",
        );
        s.push_str(&table(&|p| {
            if p.requests_per_s > 0.0 {
                format!("{:.3}", p.ms_per_request)
            } else {
                "no responses".into()
            }
        }));
        if let Some(nginx) = &self.nginx {
            if let Some(error) = &nginx.error {
                let _ = writeln!(s, "\nnginx: {error}");
            }
        }
        s
    }

    pub fn udp_markdown(&self) -> String {
        let nothing = "not measured (nothing sent)";
        let mut s = String::from("| model | datagrams/s sent | datagrams/s received | lost |\n|---|---|---|---|\n");
        for m in &self.models {
            match &m.udp {
                Some(u) if u.sent_nothing() => {
                    let _ = writeln!(s, "| {} | 0 | {nothing} | {nothing} |", m.model);
                }
                Some(u) => {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} |",
                        m.model,
                        thousands(u.sent_per_s as u64),
                        thousands(u.received_per_s as u64),
                        thousands(u.lost)
                    );
                }
                // A model left out of the UDP run still has its row, saying so.
                None => {
                    let _ = writeln!(s, "| {} | {NOT_MEASURED} | {NOT_MEASURED} | {NOT_MEASURED} |", m.model);
                }
            }
        }
        s
    }

    pub fn rows_csv(&self) -> String {
        let mut s = String::from(
            "model,row,attempted,connected,server_rss_kib,kernel_buffers_kib,kernel_slab_kib,cpu_min_pct,cpu_max_pct,threads,sent_bytes_per_s,received_bytes_per_s,p50_us,p99_us,errors,client_cpu_pct,client_bound,error\n",
        );
        for m in &self.models {
            if m.rows.is_empty() {
                let _ = writeln!(
                    s,
                    "{},,,,,,,,,,,,,,,,,,\"{}\"",
                    m.model,
                    m.error.clone().unwrap_or_default().replace('"', "'")
                );
            }
            // An empty cell, not 0, where nothing was measured.
            let cell = |v: Option<String>| v.unwrap_or_default();
            for r in &m.rows {
                let timed = latency_timed(r.p50_us, r.p99_us);
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{:.0},{:.0},{},{},{},{:.1},{},",
                    m.model,
                    r.kind.map_or("", RowKind::label),
                    r.attempted,
                    cell(r.connected_held().map(|c| c.to_string())),
                    cell(r.server_rss().map(|k| k.to_string())),
                    cell(r.kernel_buffers_kib().map(|k| k.to_string())),
                    cell(r.kernel_slab_kib().map(|k| k.to_string())),
                    cell(r.server_cpu_pct().map(|(min, _)| format!("{min:.1}"))),
                    cell(r.server_cpu_pct().map(|(_, max)| format!("{max:.1}"))),
                    cell(r.server_threads().map(|t| t.to_string())),
                    r.sent_bytes_per_s,
                    r.received_bytes_per_s,
                    cell(timed.then(|| format!("{:.1}", r.p50_us))),
                    cell(timed.then(|| format!("{:.1}", r.p99_us))),
                    r.errors.values().sum::<u64>(),
                    r.client_cpu_pct,
                    r.client_bound
                );
            }
        }
        s
    }

    pub fn http_csv(&self) -> String {
        let mut s = String::from(
            "model,concurrency,keepalive,requests_per_s,latency_mean_ms,latency_p50_ms,latency_p99_ms,ms_per_request_1_over_throughput,errors,client_bound\n",
        );
        // Empty cells, not 0, where nothing was measured.
        let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
        for m in self.all_results() {
            for p in &m.http {
                let measured_mean = p.latency.map(|l| l.mean_ms).or((p.mean_ms > 0.0).then_some(p.mean_ms));
                let _ = writeln!(
                    s,
                    "{},{},{},{:.0},{},{},{},{},{},{}",
                    m.model,
                    p.concurrency,
                    p.keepalive,
                    p.requests_per_s,
                    opt(measured_mean),
                    opt(p.latency.map(|l| l.p50_ms)),
                    opt(p.latency.map(|l| l.p99_ms)),
                    opt((p.requests_per_s > 0.0).then_some(p.ms_per_request)),
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

/// What a cell says for a figure that was not measured (never 0).
pub const NOT_MEASURED: &str = "not measured";

/// Under the table when some server figure of a row had no sample.
const UNSAMPLED_NOTE: &str = "\"not measured\" in Connected, Memory Used, CPU Usage or Threads: no sample was taken while the row ran. Connected comes from the server's own stats lines, and it printed no stats line; memory, threads and CPU come from /proc/PID/status and /proc/PID/stat, which could not be read (the server exited, or /proc is not readable).";

/// Like [`thousands`], with a minus sign when negative.
pub fn signed_thousands(n: i64) -> String {
    let sign = if n < 0 { "−" } else { "" };
    format!("{sign}{}", thousands(n.unsigned_abs()))
}

fn latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{us:.0}us")
    }
}

/// Whether an echo row timed anything. A histogram with nothing in it reports 0 for every
/// percentile, and no timed echo takes 0 µs, so 0/0 means nothing was timed.
fn latency_timed(p50_us: f64, p99_us: f64) -> bool {
    p50_us > 0.0 || p99_us > 0.0
}

/// The errors of a row, and the connect retries behind them when there were any: a refused
/// connection retried with back-off is one error per attempt.
fn errors_cell(errors: u64, connects: Option<ConnectAttempts>) -> String {
    match connects {
        Some(c) if c.retries > 0 => format!("{} ({} connect retries)", thousands(errors), thousands(c.retries)),
        _ => thousands(errors),
    }
}

/// Under the seed's rows, where they came from.
const SEED_NOTE: &str = "Rows named \"seed:\" are the seed's published Table 6-3 for the model's counterpart, as printed: an echo server on a Pentium 4 1.7 GHz Xeon with 768 MB under Windows XP, clients on three machines over a 100 Mb hub, connections in blocks of 1,000, rate-limited blocks at 200,000 B/s. Its non-paged pool (kernel memory for sockets and their buffers together) is in the slab column; its rows were limited by its clients as much as by its servers. threadpool, epoll and tokio have no counterpart.";

/// The seed's Table 6-3 rows for `model`'s counterpart, under its measured rows.
fn seed_rows(s: &mut String, model: &str) {
    let Some(seed) = crate::seed::counterpart_of(model) else { return };
    for r in seed.rows {
        let _ = writeln!(
            s,
            "| seed: {} | {}/{} | {} | — | {} non-paged pool | {} | {} | {}/{} | — | — | — |",
            seed.name,
            thousands(r.attempted),
            thousands(r.connected),
            thousands(r.memory_kb),
            thousands(r.non_paged_pool_kb),
            r.cpu,
            thousands(r.threads),
            thousands(r.sent_per_s),
            thousands(r.received_per_s),
        );
    }
}

/// Echo latency p50/p99, or "not measured" when nothing was timed.
fn latency_pair(p50_us: f64, p99_us: f64) -> String {
    if latency_timed(p50_us, p99_us) {
        format!("{}/{}", latency(p50_us), latency(p99_us))
    } else {
        NOT_MEASURED.into()
    }
}

/// Milliseconds with three significant digits or so: 0.0171 → "0.017", 12.93 → "12.9".
fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
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

    /// Results with one epoll model whose rows and points are given as JSON, the way a
    /// results.json of any age holds them.
    fn epoll_with(rows: &str, http: &str) -> Results {
        let text = format!(
            r#"{{"schema":1,"profile":"tiny","started":"","finished":"","interrupted":false,
            "machine":{{"cpu_model":"","cores":2,"memory_kib":0,"kernel":"","somaxconn":"","tcp_mem_pages":"","open_files_limit":0,"io_uring":""}},
            "parameters":null,"nginx":null,
            "models":[{{"model":"epoll","error":null,"udp":null,"rows":[{rows}],"http":[{http}]}}]}}"#
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    const ROW: &str = r#""kind":"maximum","attempted":8000,"connected":8000,"client_peak_open":8000,
        "server_rss_kib":6768,"cpu_min_pct":6.0,"cpu_max_pct":12.9,"threads":5,
        "sent_bytes_per_s":1192710.6,"received_bytes_per_s":1192710.6,"p50_us":425.9,"p99_us":3557.3,
        "errors":{},"client_cpu_pct":66.9,"client_cores":1,"client_bound":false,"duration_s":4.1"#;

    /// Each model with a seed counterpart has the seed's rows under its own, as printed, and
    /// a note says where they come from; a model without one has none.
    #[test]
    fn the_seeds_table_stands_beside_the_measured_rows() {
        let row = format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#);
        let mut r = epoll_with(&row, "");
        r.models[0].model = "uring".into();
        let t = r.table_markdown();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].starts_with("| uring | 8,000/8,000 |"), "{t}");
        assert_eq!(
            lines[3],
            "| seed: Overlapped (completion port) | 7,000/7,000 | 36,160 | — | 31,128 non-paged pool | 40–50% | 2 | 6,282,473/3,893,507 | — | — | — |"
        );
        assert!(lines[5].starts_with("| seed: Overlapped (completion port) | 50,000/49,997 |"), "{t}");
        assert!(t.contains("Rows named \"seed:\" are the seed's published Table 6-3"), "{t}");
        let cells = |l: &str| l.matches('|').count();
        assert!(lines[2..6].iter().all(|l| cells(l) == cells(lines[0])), "a seed row has the table's columns: {t}");
        let epoll = epoll_with(&row, "").table_markdown();
        assert!(!epoll.contains("seed:") && !epoll.contains("published Table 6-3"), "{epoll}");
    }

    /// A row's refusals are retries of a few connections, and the table says how many.
    #[test]
    fn connect_retries_are_shown_beside_the_errors() {
        let row = ROW.replace(r#""errors":{}"#, r#""errors":{"connect_refused":1200}"#);
        let r =
            epoll_with(&format!(r#"{{{row},"kernel_tcp_kib":0,"connects":{{"attempts":9200,"retries":1200}}}}"#), "");
        let t = r.table_markdown();
        assert!(t.contains("| 1,200 (1,200 connect retries) |"), "{t}");
        // Rows from before retries were counted show the errors alone.
        let t = epoll_with(&format!(r#"{{{row},"kernel_tcp_kib":0}}"#), "").table_markdown();
        assert!(t.contains("| 1,200 |") && !t.contains("retries"), "{t}");
    }

    /// The kernel cells of the first data row: (buffers, slab).
    fn kernel_cells(table: &str) -> (String, String) {
        let row = table.lines().nth(2).expect("a data row");
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        (cells[3].to_owned(), cells[4].to_owned())
    }

    #[test]
    fn kernel_memory_that_could_not_be_read_says_not_measured_never_zero() {
        let r = epoll_with(
            &format!(
                r#"{{{ROW},"kernel_tcp_kib":0,"kernel":{{"page_size":4096,"sockstat_baseline":null,"sockstat_peak":null,
                "slab_baseline":null,"slab_peak":null,"slab_unmeasured":"/proc/slabinfo: Permission denied (os error 13)"}}}}"#
            ),
            "",
        );
        let t = r.table_markdown();
        assert_eq!(kernel_cells(&t), ("not measured".into(), "not measured".into()), "{t}");
        assert!(t.contains("Slab not measured: /proc/slabinfo: Permission denied"), "{t}");
        let csv = r.rows_csv();
        assert!(csv.contains(",6768,,,6.0,"), "CSV leaves unmeasured cells empty: {csv}");
    }

    #[test]
    fn kernel_memory_is_the_peak_minus_the_baseline_of_sockstat_and_slabinfo() {
        let cache = |slabs: u64| {
            format!(
                r#"{{"active_objs":{n},"num_objs":{n},"objsize":2368,"objperslab":13,"pagesperslab":8,"num_slabs":{slabs}}}"#,
                n = slabs * 13
            )
        };
        let r = epoll_with(
            &format!(
                r#"{{{ROW},"kernel_tcp_kib":40,"kernel":{{"page_size":4096,
                "sockstat_baseline":{{"inuse":4,"orphan":0,"tw":0,"alloc":4,"mem_pages":10}},
                "sockstat_peak":{{"inuse":16004,"orphan":0,"tw":0,"alloc":16004,"mem_pages":20}},
                "slab_baseline":{{"TCP":{}}},"slab_peak":{{"TCP":{}}},"slab_unmeasured":null}}}}"#,
                cache(2),
                cache(1232)
            ),
            "",
        );
        let t = r.table_markdown();
        // (1232 - 2) slabs of 8 pages of 4 KiB.
        assert_eq!(kernel_cells(&t), ("40".into(), "39,360".into()), "{t}");
        assert_eq!(r.models[0].rows[0].kernel.as_ref().and_then(KernelMemory::sockets_added), Some(16_000));
        let csv = r.rows_csv();
        assert!(csv.contains(",6768,40,39360,6.0,"), "CSV and table agree: {csv}");
    }

    #[test]
    fn a_load_report_is_named_for_what_it_is() {
        let dir = std::env::temp_dir().join(format!("sockscale-results-load-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("load.json");
        std::fs::write(&path, r#"{"schema":1,"mode":"echo","target":"127.0.0.1:1","requests":{"completed":1}}"#)
            .unwrap();
        let err = Results::load(&path.display().to_string()).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(err.contains("is a `sockscale load` report"), "{err}");
    }

    #[test]
    fn results_from_before_kernel_slab_was_measured_still_load_and_say_so() {
        // The README's run of 2026-11-22, kept as written then.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/results-2026-11-22-before-slab.json");
        let r = Results::load(path).expect("results from before the slab was measured load");
        let t = r.table_markdown();
        // blocking at 8,000 connections: sockstat measured 0 buffer pages; slab was not measured.
        let row = t.lines().find(|l| l.contains("8,000/8,000 | 160,768")).expect("blocking maximum row");
        assert!(row.contains("| 160,768 | 0 | not measured |"), "{row}");
    }

    #[test]
    fn echo_rows_with_nothing_timed_say_not_measured_not_zero_latency() {
        let r =
            epoll_with(&format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#).replace("425.9", "0").replace("3557.3", "0"), "");
        let t = r.table_markdown();
        assert!(!t.contains("0us/0us"), "{t}");
        assert!(t.lines().nth(2).is_some_and(|l| l.contains("| not measured | 0 |")), "{t}");
        // The CSV leaves them empty too, not 0.0.
        let csv = r.rows_csv();
        assert!(csv.contains(",1192711,1192711,,,0,66.9,"), "{csv}");
    }

    /// The figures of [`ROW`] the server side measures, as a row whose server was never
    /// sampled holds them: it printed no stats line and its /proc/PID could not be read, so
    /// every one of them is the 0 it started at.
    fn unsampled_row() -> String {
        ROW.replace(r#""connected":8000"#, r#""connected":0"#)
            .replace(r#""server_rss_kib":6768"#, r#""server_rss_kib":0"#)
            .replace(
                r#""cpu_min_pct":6.0,"cpu_max_pct":12.9,"threads":5"#,
                r#""cpu_min_pct":0.0,"cpu_max_pct":0.0,"threads":0"#,
            )
    }

    const NO_KERNEL: &str = r#""kernel_tcp_kib":0,"kernel":{"page_size":4096,"sockstat_baseline":null,"sockstat_peak":null,
        "slab_baseline":null,"slab_peak":null,"slab_unmeasured":"/proc/slabinfo: Permission denied (os error 13)"}"#;

    #[test]
    fn server_figures_with_no_sample_say_not_measured_never_zero() {
        let r = epoll_with(
            &format!(
                r#"{{{},{NO_KERNEL},"samples":{{"connections":0,"rss":0,"threads":0,"cpu":0}}}}"#,
                unsampled_row()
            ),
            "",
        );
        let t = r.table_markdown();
        let row = t.lines().nth(2).expect("a data row");
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells[1], "8,000/not measured", "connected: {row}");
        assert_eq!(cells[2], "not measured", "server RSS: {row}");
        assert_eq!(cells[5], "not measured", "server CPU: {row}");
        assert_eq!(cells[6], "not measured", "threads: {row}");
        // What the load generator measured stands.
        assert_eq!(cells[7], "1,192,710/1,192,710", "{row}");
        assert!(t.contains("no stats line"), "the note says why: {t}");
        let csv = r.rows_csv();
        let line = csv.lines().nth(1).expect("a CSV row");
        assert!(line.starts_with("epoll,maximum,8000,,,,,,,,1192711,1192711,425.9,"), "{line}");
    }

    #[test]
    fn server_figures_sampled_in_part_show_what_was_sampled() {
        // CPU was sampled; the status file (RSS, threads) never read.
        let r = epoll_with(
            &format!(r#"{{{ROW},"kernel_tcp_kib":0,"samples":{{"connections":40,"rss":0,"threads":0,"cpu":3}}}}"#)
                .replace(r#""server_rss_kib":6768"#, r#""server_rss_kib":0"#)
                .replace(r#""threads":5"#, r#""threads":0"#),
            "",
        );
        let t = r.table_markdown();
        let row = t.lines().nth(2).expect("a data row");
        assert!(
            row.starts_with("| epoll | 8,000/8,000 | not measured | 0 | not measured | 6–13% | not measured |"),
            "{row}"
        );
        let csv = r.rows_csv();
        assert!(csv.contains("epoll,maximum,8000,8000,,0,,6.0,12.9,,"), "{csv}");
    }

    #[test]
    fn a_udp_point_that_sent_nothing_measured_no_loss() {
        let mut r = epoll_with("", "");
        r.models[0].udp =
            serde_json::from_str(r#"{"sent_per_s":0.0,"received_per_s":0.0,"lost":0,"sent":0}"#).expect("a UDP point");
        let u = r.udp_markdown();
        assert!(u.contains("| epoll | 0 | not measured (nothing sent) | not measured (nothing sent) |"), "{u}");
        // A point that sent and got nothing back measured exactly that.
        r.models[0].udp = serde_json::from_str(r#"{"sent_per_s":100.0,"received_per_s":0.0,"lost":50,"sent":100}"#)
            .expect("a UDP point");
        assert!(r.udp_markdown().contains("| epoll | 100 | 0 | 50 |"), "{}", r.udp_markdown());
    }

    const POINT: &str = r#""concurrency":10,"keepalive":true,"requests_per_s":58922.3,"mean_ms":0.1692,
        "ms_per_request":0.016971,"errors":0,"client_bound":false"#;

    #[test]
    fn http_tables_show_measured_latency_and_name_time_per_request_for_what_it_is() {
        let r = epoll_with(
            "",
            &format!(
                r#"{{{POINT},"latency":{{"count":58922,"mean_ms":0.1692,"p50_ms":0.151,"p90_ms":0.3,"p99_ms":0.903,"max_ms":4.1}}}}"#
            ),
        );
        let t = r.http_markdown();
        assert!(t.contains("| epoll | yes | 0.151 / 0.903 (0.169) |"), "{t}");
        assert!(t.contains("### Request latency, ms: p50 / p99 (mean)"), "{t}");
        assert!(t.contains("### Time per request, ms (1 / throughput, as ab reports it)"), "{t}");
        assert!(t.contains("| epoll | yes | 0.017 |"), "{t}");
        // 1/throughput never sits beside the rate as if it were a request's time.
        assert!(!t.contains("req/s, 0.017 ms"), "{t}");
        let csv = r.http_csv();
        assert!(csv.lines().next().is_some_and(|h| h.contains("latency_p50_ms,latency_p99_ms")), "{csv}");
        assert!(csv.contains(",0.169,0.151,0.903,0.017,"), "{csv}");
    }

    #[test]
    fn http_points_from_before_percentiles_were_kept_say_not_measured() {
        let r = epoll_with("", &format!("{{{POINT}}}"));
        let t = r.http_markdown();
        assert!(t.contains("| epoll | yes | not measured (mean 0.169) |"), "{t}");
        let csv = r.http_csv();
        assert!(csv.contains(",0.169,,,0.017,"), "{csv}");
    }

    #[test]
    fn a_failure_after_some_rows_is_shown_and_a_model_without_udp_keeps_its_row() {
        let mut r = epoll_with(&format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#), "");
        r.models[0].error = Some("HTTP sweep: the server did not start".into());
        let t = r.table_markdown();
        assert!(t.contains("|  | failed: HTTP sweep: the server did not start |"), "{t}");
        let u = r.udp_markdown();
        assert!(u.contains("| epoll | not measured | not measured | not measured |"), "{u}");
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
