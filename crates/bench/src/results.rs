//! The raw results of a bench run: what `results.json` holds, read back with its schema
//! checked, and the accessors that say which figures were measured. Measure first, render
//! later: the tables and CSVs drawn from it are in `tables`, the charts in `report`.

use serde::{Deserialize, Serialize};

/// Schema 2 added repetitions (`repeats`), their `spread` and the machine's `interference` to
/// every row and point; schema 1 results still load, each figure standing as one repetition.
/// Schema 3 added each model's WebSocket points (`ws`: echo messages by concurrency) and its
/// idle WebSockets (`ws_idle`); results of schemas 1 and 2 load without them.
/// Schema 4 added the HTTP/3 sweep: points with `http3` and their `quic` block, and Caddy as
/// its peer server (`caddy`); results of schemas 1 to 3 load without them.
pub const SCHEMA: u32 = 4;

/// The schemas [`Results::load`] reads.
pub const READABLE_SCHEMAS: [u32; 4] = [1, 2, 3, 4];

/// The names of the figures each repetition keeps and each spread is taken of.
pub mod figure {
    /// Echo rows: bytes echoed back to the clients per second.
    pub const RECEIVED_BYTES_PER_S: &str = "received_bytes_per_s";
    /// Echo rows: bytes echoed back per second of server CPU.
    pub const BYTES_PER_CPU_SECOND: &str = "bytes_per_cpu_second";
    /// Echo rows: connections the server held at its peak.
    pub const CONNECTIONS_HELD: &str = "connections_held";
    /// Echo rows: server resident memory at its peak, KiB.
    pub const SERVER_RSS_KIB: &str = "server_rss_kib";
    /// Server CPU over the measurement, % of one core (the mean of its intervals for rows).
    pub const SERVER_CPU_PCT: &str = "server_cpu_pct";
    /// The load generator's CPU, % of one core.
    pub const CLIENT_CPU_PCT: &str = "client_cpu_pct";
    /// Echo rows: latency percentiles, µs.
    pub const P50_US: &str = "p50_us";
    pub const P99_US: &str = "p99_us";
    /// Sweep points: responses per second.
    pub const REQUESTS_PER_S: &str = "requests_per_s";
    /// Sweep points: responses per second of server CPU.
    pub const RESPONSES_PER_CPU_SECOND: &str = "responses_per_cpu_second";
    /// Sweep points: request latency percentiles, ms.
    pub const P50_MS: &str = "p50_ms";
    pub const P99_MS: &str = "p99_ms";
    /// UDP: answers per second.
    pub const UDP_RECEIVED_PER_S: &str = "received_per_s";
    /// WebSocket echo points: messages echoed back per second.
    pub const MESSAGES_PER_S: &str = "messages_per_s";
    /// WebSocket echo points: messages echoed back per second of server CPU.
    pub const MESSAGES_PER_CPU_SECOND: &str = "messages_per_cpu_second";
    /// Idle WebSockets: connections the server held (its own gauge, at its peak).
    pub const WS_IDLE_HELD: &str = "ws_idle_held";
    /// Idle WebSockets: server resident memory added per idle WebSocket held, bytes.
    pub const SERVER_BYTES_PER_IDLE_WS: &str = "server_bytes_per_idle_ws";
    /// Idle WebSockets: kernel memory (socket slab caches and buffers) added per TCP socket
    /// opened, bytes; both ends of each loopback connection are sockets.
    pub const KERNEL_BYTES_PER_SOCKET: &str = "kernel_bytes_per_socket";
}

/// The spread of one figure over a measurement's repetitions: the lowest, the median (the
/// figure the tables show) and the highest, of `n` repetitions.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// The spread of the finite values among `values`; `None` when there are none. The median
    /// of an even count is the mean of the middle two.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { min: v[0], median, max: v[n - 1], n })
    }

    /// One measured value, as results from before repetitions hold it.
    pub fn single(value: f64) -> Spread {
        Spread { min: value, median: value, max: value, n: 1 }
    }

    /// Whether the two ranges share a value: the numbers cannot tell the two apart.
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }

    /// The range is one value (one repetition, or all alike).
    pub fn is_single(&self) -> bool {
        self.min == self.max
    }

    /// The width of the range relative to the median (0 for one value).
    pub fn relative_width(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median.abs()
        }
    }
}

/// A figure's values by name (see [`figure`]).
pub type Figures = std::collections::BTreeMap<String, f64>;
/// A figure's spread over the repetitions, by name.
pub type Spreads = std::collections::BTreeMap<String, Spread>;

/// What the rest of the machine did while one measurement ran, from /proc/stat per core with
/// the bench's own processes (the server, the load, the bench itself) taken out.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Interference {
    /// How long the measurement's window was, seconds.
    pub seconds: f64,
    /// CPU that other processes used on the server's cores, in cores (0.5: half a core).
    pub server_cores: f64,
    /// CPU that other processes used on the load generator's cores, in cores.
    pub client_cores: f64,
    /// Interrupt and softirq time on the bench's cores, in cores: on loopback mostly the
    /// bench's own packets, so it is recorded beside, not counted as interference.
    #[serde(default)]
    pub softirq_cores: f64,
    /// Kernel threads (ksoftirqd, kworkers, kdamond, …) on the bench's cores, in cores: on a
    /// quiet machine the bench's own packets, socket teardown and memory, so recorded beside,
    /// not counted as interference.
    #[serde(default)]
    pub kernel_threads_cores: f64,
    /// Time the hypervisor gave to other guests, over all cores, in cores.
    #[serde(default)]
    pub steal_cores: f64,
    /// The 1-minute load average when the measurement ended, where readable.
    #[serde(default)]
    pub load_avg_1m: Option<f64>,
    /// The mean current frequency of the bench's cores, MHz, where readable.
    #[serde(default)]
    pub cpu_mhz: Option<f64>,
    /// Past the run's threshold on either side (or in steal): the figures are not the model's alone.
    pub disturbed: bool,
}

impl Interference {
    /// The most of each figure over `all` (a point's summary over its repetitions); disturbed
    /// when any was.
    pub fn worst<'a>(all: impl IntoIterator<Item = &'a Interference>) -> Option<Interference> {
        let mut out: Option<Interference> = None;
        for i in all {
            let o = out.get_or_insert(*i);
            o.seconds = o.seconds.max(i.seconds);
            o.server_cores = o.server_cores.max(i.server_cores);
            o.client_cores = o.client_cores.max(i.client_cores);
            o.softirq_cores = o.softirq_cores.max(i.softirq_cores);
            o.kernel_threads_cores = o.kernel_threads_cores.max(i.kernel_threads_cores);
            o.steal_cores = o.steal_cores.max(i.steal_cores);
            o.load_avg_1m = match (o.load_avg_1m, i.load_avg_1m) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            o.cpu_mhz = match (o.cpu_mhz, i.cpu_mhz) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            o.disturbed |= i.disturbed;
        }
        out
    }
}

/// One repetition of a row or a point: its headline figures, and what the machine did meanwhile.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Repeat {
    /// Which round of the run it was measured in, from 1 (rounds go through every model in turn).
    pub round: u32,
    pub figures: Figures,
    /// The load generator used 90% or more of its cores.
    pub client_bound: bool,
    /// The server used 90% or more of its cores.
    #[serde(default)]
    pub server_bound: bool,
    /// Failed requests or exchanges, all kinds.
    #[serde(default)]
    pub errors: u64,
    /// `None` when /proc/stat could not be read.
    #[serde(default)]
    pub interference: Option<Interference>,
    /// Disturbed, and measured again: kept to show, left out of the spread.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replaced: bool,
    /// Echo rows: the server's sampling intervals of this repetition (the plan reads the
    /// steady CPU of each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<Interval>>,
}

/// What every row and point keeps of its repetitions.
pub trait Repeated {
    /// Every repetition, those replaced by a re-run included.
    fn repeats(&self) -> &[Repeat];
    /// The spread of each headline figure over the kept repetitions.
    fn spreads(&self) -> &Spreads;
    /// The measured value of figure `name` of the result itself (the median repetition's),
    /// for results from before repetitions.
    fn own_figure(&self, name: &str) -> Option<f64>;

    /// The spread of figure `name`: over the repetitions, or the one value older results have.
    fn spread_of(&self, name: &str) -> Option<Spread> {
        match self.spreads().get(name) {
            Some(s) => Some(*s),
            None if self.spreads().is_empty() => self.own_figure(name).map(Spread::single),
            None => None,
        }
    }

    /// The repetitions the spread is taken over.
    fn kept(&self) -> Vec<&Repeat> {
        self.repeats().iter().filter(|r| !r.replaced).collect()
    }

    /// Kept repetitions the machine disturbed past the threshold (a re-run was disturbed too, or
    /// the run's re-runs were spent).
    fn disturbed_repeats(&self) -> usize {
        self.kept().iter().filter(|r| r.interference.is_some_and(|i| i.disturbed)).count()
    }

    /// Kept repetitions the load generator was the bottleneck for.
    fn client_bound_repeats(&self) -> usize {
        self.kept().iter().filter(|r| r.client_bound).count()
    }

    /// Kept repetitions the server's cores were the bottleneck for.
    fn server_bound_repeats(&self) -> usize {
        self.kept().iter().filter(|r| r.server_bound).count()
    }
}

/// The index of the median of `values` (the lower middle of an even count): which repetition a
/// row or point keeps whole.
pub fn median_index(values: &[f64]) -> usize {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    order.get(values.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// The spread of every figure over `repeats` (those not replaced).
pub fn spreads_of(repeats: &[Repeat]) -> Spreads {
    let mut names: Vec<&String> = repeats.iter().flat_map(|r| r.figures.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let values = repeats.iter().filter(|r| !r.replaced).filter_map(|r| r.figures.get(name).copied());
            Some((name.clone(), Spread::of(values)?))
        })
        .collect()
}

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
    /// The limits on threads this run was under, by name (`kernel.threads-max`, `kernel.pid_max`, the soft
    /// `RLIMIT_NPROC`, the cgroup's `pids.max`), those that are set; absent in older results.
    #[serde(default)]
    pub thread_limits: std::collections::BTreeMap<String, u64>,
    /// vm.max_map_count: the memory maps one process may hold (a thread takes 4). Absent in
    /// older results, or when it cannot be read.
    #[serde(default)]
    pub max_map_count: Option<u64>,
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
    /// The server's processes (`serve --procs`): its memory, CPU and threads are sums over
    /// them. Absent in results written before rows could take several (one).
    #[serde(default)]
    pub server_procs: Option<u64>,
    /// Connections the server refused, and accept pauses, by the limit that caused them
    /// (`open_files`, `threads`, `ceiling`, …; its own `limit_*` counters), those above 0.
    /// Absent when the server reported no counters, or in results written before they were
    /// kept.
    #[serde(default)]
    pub server_limits: Option<std::collections::BTreeMap<String, u64>>,
    /// The server's sampling intervals in order (about a second each; the first, taken while
    /// connections were being set up, included): its CPU over each, and the connections it held
    /// when each ended. Absent in results written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<Interval>>,
    /// The load generator's latency histogram of the row as its report had it (`latency.hdr`:
    /// nanoseconds, HdrHistogram V2 deflate, base64), from which the report draws the row's
    /// percentile spectrum. Absent in results written before it was kept, and when nothing was
    /// timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_hdr: Option<String>,
    /// Exchanges completed each second of the load's measured phase (its report's timeline).
    /// Absent in results written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Vec<PerSecond>>,
    /// Every repetition of this row, one entry each with its headline figures (the fields
    /// above are the median repetition's: see [`Repeated`]). Empty in results written before
    /// repetitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Repeat>,
    /// The spread of each headline figure over the kept repetitions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spread: Spreads,
    /// The most the rest of the machine used over the kept repetitions; `None` when not
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<Interference>,
}

/// One second of a row's throughput.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct PerSecond {
    /// When the second ended, seconds from the start of the load's measured phase.
    pub at_s: f64,
    /// Exchanges (messages, requests) completed per second in it.
    pub per_s: f64,
}

/// One sampling interval of a row.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Interval {
    /// Server CPU over the interval, % of one core.
    pub cpu_pct: f64,
    /// Connections the server held when the interval ended (its `connections=` gauge, summed
    /// over its processes); `None` when it had reported none yet.
    pub held: Option<u64>,
    /// Server resident memory when the interval ended, KiB; `None` when it could not be read.
    pub rss_kib: Option<u64>,
    /// When the interval ended, seconds from the start of sampling (just before the load
    /// started). Absent in results written before it was kept: the intervals are about a
    /// second each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_s: Option<f64>,
}

/// A held count within this fraction of the row's peak counts as the peak: the gauge of a
/// server whose connections are all set up still moves by a connection or two.
const STEADY_FRACTION: f64 = 0.99;

/// Connect attempts of one row, from the load's report.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConnectAttempts {
    pub attempts: u64,
    pub retries: u64,
    /// Connections the load gave up after `--connect-retries` failures in a row (the
    /// rate-limited row); absent in older results.
    #[serde(default)]
    pub given_up: u64,
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

    /// The CPU of the steady part of the row, % of one core per interval: the intervals after
    /// the last connect, those that began and ended with the server holding its peak count of
    /// connections (within 1%). Why there are none otherwise.
    pub fn steady_cpu(&self) -> Result<Vec<f64>, &'static str> {
        let intervals =
            self.intervals.as_ref().ok_or("no per-interval samples (results written before they were kept)")?;
        let peak = intervals
            .iter()
            .filter_map(|i| i.held)
            .max()
            .filter(|&p| p > 0)
            .ok_or("no interval with the server's count of its connections")?;
        let at_peak = |i: &Interval| i.held.is_some_and(|h| h as f64 >= STEADY_FRACTION * peak as f64);
        let steady: Vec<f64> =
            intervals.windows(2).filter(|w| at_peak(&w[0]) && at_peak(&w[1])).map(|w| w[1].cpu_pct).collect();
        if steady.is_empty() {
            return Err("no interval after the last connect (the count of connections never settled)");
        }
        Ok(steady)
    }

    /// Kernel slab memory of the socket caches, KiB, when measured.
    pub fn kernel_slab_kib(&self) -> Option<i64> {
        self.kernel.as_ref().and_then(KernelMemory::slab_kib)
    }

    /// The server's mean CPU over the row, % of one core: the mean of its intervals when it has
    /// them (all of them: the work of setting connections up is work too), else the middle of
    /// its lowest–highest range; `None` when not sampled or 0.
    pub fn mean_cpu_pct(&self) -> Option<f64> {
        let mean = match self.intervals.as_deref() {
            Some(iv) if !iv.is_empty() => iv.iter().map(|i| i.cpu_pct).sum::<f64>() / iv.len() as f64,
            _ => {
                let (min, max) = self.server_cpu_pct()?;
                (min + max) / 2.0
            }
        };
        (mean > 0.0).then_some(mean)
    }

    /// Bytes echoed back to the clients per second of server CPU; `None` when the server's CPU
    /// was not measured.
    pub fn bytes_per_cpu_second(&self) -> Option<f64> {
        Some(self.received_bytes_per_s / (self.mean_cpu_pct()? / 100.0))
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
    /// Over TLS (HTTPS). False for plain HTTP, and in results written before HTTPS was measured.
    #[serde(default)]
    pub tls: bool,
    /// HTTPS only: whether the load resumed TLS sessions when it opened a new connection
    /// (`--tls-resume`). The bench runs its HTTPS points with it off, so that every new
    /// connection is a full handshake. Absent for plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_resume: Option<bool>,
    /// The server's CPU over the point (user + system, from /proc/PID/stat before and after
    /// the load ran), as a percentage of one core. Absent when it could not be read, and in
    /// results written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_pct: Option<f64>,
    /// HTTPS only: the handshakes the load generator made, and what they agreed on. Absent for
    /// plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshakes: Option<TlsHandshakes>,
    /// HTTP/2 (h2c with prior knowledge, or ALPN h2 over TLS), with `streams` concurrent
    /// streams on each connection. False for HTTP/1.1 and in results from before HTTP/2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub http2: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<u64>,
    /// HTTP/3 over QUIC (`load http --http3`), with `streams` concurrent request streams on
    /// each connection. False for every other point, and in results from before schema 4.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub http3: bool,
    /// HTTP/3 only: the QUIC connections the load generator made, as its report's `quic`
    /// block counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicConnections>,
    /// HTTP/3 only: what the server itself counted, from its `final` line; absent for Caddy,
    /// and when the server printed no final line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_quic: Option<ServerQuic>,
    /// Every repetition of this point, one entry each with its headline figures (the fields
    /// above are the median repetition's: see [`Repeated`]). Empty in results written before
    /// repetitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Repeat>,
    /// The spread of each headline figure over the kept repetitions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spread: Spreads,
    /// The most the rest of the machine used over the kept repetitions; `None` when not
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<Interference>,
}

/// The QUIC connections of one HTTP/3 point, as the load generator counted them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct QuicConnections {
    /// The QUIC version the connections used (1: RFC 9000).
    pub version: u32,
    /// The ALPN the handshakes agreed on, with the connections that agreed on it.
    pub alpn: std::collections::BTreeMap<String, u64>,
    /// Handshakes completed (quinn-proto does not say which resumed a session).
    pub handshakes: u64,
    /// Handshakes that failed, and connections that failed by reason, those above 0.
    pub handshakes_failed: u64,
    #[serde(default)]
    pub failures: std::collections::BTreeMap<String, u64>,
    /// From the first Initial to the handshake's completion; `None` when none completed.
    pub handshake_latency: Option<HttpLatency>,
    /// Each connection's smoothed RTT as it ended; `None` when none was sampled.
    pub rtt: Option<HttpLatency>,
    /// Packets the load sent, and those its loss detection declared lost (their frames were
    /// sent again).
    pub packets_sent: u64,
    pub packets_lost: u64,
    /// UDP datagrams each way.
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
}

impl QuicConnections {
    pub fn from_report(q: &sockscale_load::quic_report::Quic) -> QuicConnections {
        QuicConnections {
            version: q.version,
            alpn: q.alpn.clone(),
            handshakes: q.handshakes,
            handshakes_failed: q.handshakes_failed,
            failures: q.failures.iter().filter(|&(_, &n)| n > 0).map(|(k, &n)| (k.clone(), n)).collect(),
            handshake_latency: HttpLatency::from_report(&q.handshake_latency),
            rtt: HttpLatency::from_report(&q.rtt),
            packets_sent: q.packets_sent,
            packets_lost: q.packets_lost,
            datagrams_sent: q.datagrams.sent,
            datagrams_received: q.datagrams.received,
        }
    }
}

/// A sockscale server's own HTTP/3 counts over one point (its `final` line): requests
/// answered (every request of the point's repetition, and any still in flight as it ended),
/// QUIC handshakes completed, and packets its loss detection declared lost.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerQuic {
    pub h3_requests: u64,
    pub quic_handshakes: u64,
    pub quic_packets_lost: u64,
}

/// The TLS handshakes of one HTTPS point, as the load generator counted them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TlsHandshakes {
    /// Full handshakes: a certificate sent and verified, a key exchanged.
    pub full: u64,
    /// Handshakes that resumed an earlier session.
    pub resumed: u64,
    /// Handshakes that failed or did not finish (each also a request error).
    pub failed: u64,
    /// Failed handshakes by reason (`certificate`, `protocol`, `timeout`, …), those above 0.
    #[serde(default)]
    pub failures: std::collections::BTreeMap<String, u64>,
    /// From the ClientHello to the handshake's end, for those that completed; `None` when none
    /// did.
    pub latency: Option<HttpLatency>,
    /// What the handshakes agreed on, with the connections that agreed on each.
    pub negotiated: Vec<Negotiated>,
}

/// A protocol version, cipher suite and ALPN protocol the handshakes of a point agreed on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Negotiated {
    pub version: String,
    pub suite: String,
    pub alpn: Option<String>,
    pub connections: u64,
}

impl TlsHandshakes {
    pub fn from_report(t: &sockscale_load::report::Tls) -> TlsHandshakes {
        TlsHandshakes {
            full: t.handshakes.full,
            resumed: t.handshakes.resumed,
            failed: t.handshakes.failed,
            failures: t.failures.iter().filter(|&(_, &n)| n > 0).map(|(k, &n)| (k.clone(), n)).collect(),
            latency: HttpLatency::from_report(&t.handshake_latency),
            negotiated: t
                .negotiated
                .iter()
                .map(|a| Negotiated {
                    version: a.version.clone(),
                    suite: a.suite.clone(),
                    alpn: a.alpn.clone(),
                    connections: a.connections,
                })
                .collect(),
        }
    }
}

/// What one HTTP point measured, as the tables and charts name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HttpWorkload {
    /// Plain HTTP, requests over open connections.
    KeepAlive,
    /// Plain HTTP, a new TCP connection for every request.
    NewConnection,
    /// HTTPS, requests over open connections (one handshake each, when it opened).
    TlsKeepAlive,
    /// HTTPS, a new connection for every request, each a full handshake.
    TlsFullHandshake,
    /// HTTPS, a new connection for every request, each resuming the session of an earlier one.
    TlsResumed,
    /// HTTP/2 without TLS (h2c, prior knowledge), many streams on each connection.
    H2c,
    /// HTTP/2 over TLS (ALPN h2), many streams on each connection.
    H2Tls,
    /// HTTP/3 over QUIC (ALPN h3, UDP), many streams on each connection.
    H3,
}

impl HttpWorkload {
    /// Every workload, in the order the tables list them.
    pub const ALL: [HttpWorkload; 8] = [
        HttpWorkload::KeepAlive,
        HttpWorkload::NewConnection,
        HttpWorkload::TlsKeepAlive,
        HttpWorkload::TlsFullHandshake,
        HttpWorkload::TlsResumed,
        HttpWorkload::H2c,
        HttpWorkload::H2Tls,
        HttpWorkload::H3,
    ];

    pub fn tls(self) -> bool {
        !matches!(self, HttpWorkload::KeepAlive | HttpWorkload::NewConnection | HttpWorkload::H2c)
    }

    pub fn keepalive(self) -> bool {
        matches!(
            self,
            HttpWorkload::KeepAlive
                | HttpWorkload::TlsKeepAlive
                | HttpWorkload::H2c
                | HttpWorkload::H2Tls
                | HttpWorkload::H3
        )
    }

    pub fn http2(self) -> bool {
        matches!(self, HttpWorkload::H2c | HttpWorkload::H2Tls)
    }

    pub fn http3(self) -> bool {
        self == HttpWorkload::H3
    }

    /// Many concurrent streams on each connection (HTTP/2 and HTTP/3).
    pub fn multiplexed(self) -> bool {
        self.http2() || self.http3()
    }

    /// Which sweep it belongs to: "HTTP", "HTTPS", "HTTP/2" or "HTTP/3".
    pub fn sweep(self) -> &'static str {
        if self.http3() {
            "HTTP/3"
        } else if self.http2() {
            "HTTP/2"
        } else if self.tls() {
            "HTTPS"
        } else {
            "HTTP"
        }
    }

    /// How each request reaches the server, as the tables' second column says it.
    pub fn connection(self) -> &'static str {
        match self {
            HttpWorkload::KeepAlive | HttpWorkload::TlsKeepAlive => "keep-alive",
            HttpWorkload::NewConnection => "new connection per request",
            HttpWorkload::TlsFullHandshake => "new connection per request, full handshake",
            HttpWorkload::TlsResumed => "new connection per request, resumed handshake",
            HttpWorkload::H2c => "h2c (prior knowledge), streams on each connection",
            HttpWorkload::H2Tls => "h2 over TLS, streams on each connection",
            HttpWorkload::H3 => "h3 over QUIC, streams on each connection",
        }
    }
}

impl HttpPoint {
    pub fn workload(&self) -> HttpWorkload {
        if self.http3 {
            return HttpWorkload::H3;
        }
        if self.http2 {
            return if self.tls { HttpWorkload::H2Tls } else { HttpWorkload::H2c };
        }
        match (self.tls, self.keepalive, self.tls_resume) {
            (false, true, _) => HttpWorkload::KeepAlive,
            (false, false, _) => HttpWorkload::NewConnection,
            (true, true, _) => HttpWorkload::TlsKeepAlive,
            (true, false, Some(true)) => HttpWorkload::TlsResumed,
            (true, false, _) => HttpWorkload::TlsFullHandshake,
        }
    }
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
    /// Every repetition of this point, one entry each with its headline figures (the fields
    /// above are the median repetition's: see [`Repeated`]). Empty in results written before
    /// repetitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Repeat>,
    /// The spread of each headline figure over the kept repetitions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spread: Spreads,
    /// The most the rest of the machine used over the kept repetitions; `None` when not
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<Interference>,
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
    /// WebSocket echo points by concurrency. Empty in results from before schema 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ws: Vec<WsPoint>,
    /// Idle WebSockets held. Absent in results from before schema 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ws_idle: Option<WsIdle>,
}

/// One WebSocket echo point: `concurrency` connections upgraded from HTTP/1.1 (`serve --proto
/// ws`), each sending a `msg_len`-byte binary message and waiting for its echo before the next
/// (`load ws --pipeline 1`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WsPoint {
    pub concurrency: u64,
    pub msg_len: u64,
    /// Messages echoed back per second (each compared whole with what was sent).
    pub messages_per_s: f64,
    /// Connections that completed the upgrade.
    pub upgrades: u64,
    /// Message latency, from its send to its echo's last byte; `None` when nothing was timed.
    pub latency: Option<HttpLatency>,
    /// Failed exchanges and connections, all kinds, and WebSocket protocol errors.
    pub errors: u64,
    pub client_bound: bool,
    /// The server's CPU over the point (user + system), % of one core; `None` when it could
    /// not be read.
    pub server_cpu_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Repeat>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spread: Spreads,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<Interference>,
}

impl WsPoint {
    /// Messages echoed per second of server CPU; `None` when the server's CPU was not measured.
    pub fn per_cpu_second(&self) -> Option<f64> {
        let cpu = self.server_cpu_pct.filter(|&c| c > 0.0)?;
        Some(self.messages_per_s / (cpu / 100.0))
    }

    pub fn figures(&self) -> Figures {
        let mut f = Figures::new();
        f.insert(figure::MESSAGES_PER_S.into(), self.messages_per_s);
        if let Some(v) = self.per_cpu_second() {
            f.insert(figure::MESSAGES_PER_CPU_SECOND.into(), v);
        }
        if let Some(v) = self.server_cpu_pct {
            f.insert(figure::SERVER_CPU_PCT.into(), v);
        }
        if let Some(l) = &self.latency {
            f.insert(figure::P50_MS.into(), l.p50_ms);
            f.insert(figure::P99_MS.into(), l.p99_ms);
        }
        f
    }

    /// Messages per server CPU-second, else per second.
    pub fn headline(&self) -> &'static str {
        if self.per_cpu_second().is_some() {
            figure::MESSAGES_PER_CPU_SECOND
        } else {
            figure::MESSAGES_PER_S
        }
    }
}

/// Idle WebSockets: `attempted` connections upgraded and then held with no message, each
/// pinged every `ping_interval_s` (`load ws --idle --ping S`), the server's memory read before
/// they opened and while they were held.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WsIdle {
    pub attempted: u64,
    /// Connections that completed the upgrade (the load's count).
    pub upgrades: u64,
    /// Connections the server held at its peak (its own gauge); `None` when it printed no stats
    /// line.
    pub held: Option<u64>,
    /// Server resident memory with the server listening and nothing connected, KiB.
    pub server_rss_baseline_kib: Option<u64>,
    /// Server resident memory at its largest sample while the connections were held, KiB.
    pub server_rss_peak_kib: Option<u64>,
    /// Kernel memory for sockets, raw (system-wide: both ends of every loopback connection).
    pub kernel: Option<KernelMemory>,
    pub ping_interval_s: f64,
    /// Pings the load sent and pongs the server answered with, over the whole hold.
    pub pings_sent: u64,
    pub pongs_received: u64,
    /// Pings left unanswered past the next one (each closed the connection).
    pub ping_timeouts: u64,
    /// Failed connections and exchanges, all kinds, and WebSocket protocol errors.
    pub errors: u64,
    pub client_bound: bool,
    pub duration_s: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Repeat>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spread: Spreads,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<Interference>,
}

impl WsIdle {
    /// Server resident memory added per idle WebSocket held, bytes: (peak − baseline) / held.
    /// `None` when either memory reading or the server's count is missing, or it held none.
    pub fn server_bytes_per_connection(&self) -> Option<f64> {
        let held = self.held.filter(|&h| h > 0)?;
        let added = self.server_rss_peak_kib?.saturating_sub(self.server_rss_baseline_kib?);
        Some(added as f64 * 1024.0 / held as f64)
    }

    /// Kernel memory added per TCP socket opened, bytes: the socket slab caches (when
    /// /proc/slabinfo was readable) plus socket buffers (sockstat), over the sockets added.
    /// Both ends of a loopback connection are sockets, so a connection costs the server's
    /// kernel about one of these. `None` when not measured.
    pub fn kernel_bytes_per_socket(&self) -> Option<f64> {
        let k = self.kernel.as_ref()?;
        let sockets = k.sockets_added().filter(|&n| n > 0)?;
        let slab = k.slab_kib()?.max(0) as f64;
        let buffers = k.buffers_kib()? as f64;
        Some((slab + buffers) * 1024.0 / sockets as f64)
    }

    /// Every connection answered a ping: pongs at least the connections upgraded, and none
    /// timed out.
    pub fn every_connection_answered(&self) -> bool {
        self.upgrades > 0 && self.pongs_received >= self.upgrades && self.ping_timeouts == 0
    }

    pub fn figures(&self) -> Figures {
        let mut f = Figures::new();
        if let Some(h) = self.held {
            f.insert(figure::WS_IDLE_HELD.into(), h as f64);
        }
        if let Some(v) = self.server_bytes_per_connection() {
            f.insert(figure::SERVER_BYTES_PER_IDLE_WS.into(), v);
        }
        if let Some(v) = self.kernel_bytes_per_socket() {
            f.insert(figure::KERNEL_BYTES_PER_SOCKET.into(), v);
        }
        f
    }

    /// Server bytes per idle WebSocket, else the connections held.
    pub fn headline(&self) -> &'static str {
        if self.server_bytes_per_connection().is_some() {
            figure::SERVER_BYTES_PER_IDLE_WS
        } else {
            figure::WS_IDLE_HELD
        }
    }
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
    /// Caddy in the HTTP/3 sweep, when it was found; otherwise why not. Absent in results from
    /// before schema 4.
    #[serde(default)]
    pub caddy: Option<ModelResult>,
    /// Rounds the run was asked for: every row and point measured this many times, the models
    /// in turn in each round. 1 in results from before repetitions.
    #[serde(default = "one")]
    pub rounds: u32,
    /// Other processes' CPU on the server's or the load's cores, in cores, past which a
    /// repetition counts as disturbed (and is measured again while the run's re-runs last).
    #[serde(default)]
    pub disturbed_above_cores: Option<f64>,
    /// Re-runs of disturbed repetitions the run made, of the most it allowed itself.
    #[serde(default)]
    pub reruns: Option<Reruns>,
    /// The cores the servers and the load were pinned to (absent in older results).
    #[serde(default)]
    pub server_cpus: Vec<usize>,
    #[serde(default)]
    pub client_cpus: Vec<usize>,
}

fn one() -> u32 {
    1
}

/// Re-runs of disturbed repetitions: how many were made, of the most the run allowed.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reruns {
    pub made: u32,
    pub budget: u32,
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
        if !READABLE_SCHEMAS.contains(&results.schema) {
            return Err(ResultsError::Format {
                path: path.into(),
                reason: format!("schema {} (this sockscale reads {READABLE_SCHEMAS:?})", results.schema),
            });
        }
        Ok(results)
    }

    /// Every model's results, then nginx's and Caddy's if measured.
    pub fn all_results(&self) -> impl Iterator<Item = &ModelResult> {
        self.models.iter().chain(self.peers().filter(|n| n.error.is_none()))
    }

    /// The peer servers' results, measured or skipped with why: nginx, then Caddy.
    pub fn peers(&self) -> impl Iterator<Item = &ModelResult> {
        self.nginx.iter().chain(&self.caddy)
    }

    /// Why `model` takes no part in the HTTP/3 sweep, when it cannot serve HTTP/3 (its
    /// capability row says why); `None` for a model that can, and for names not known here.
    pub fn cannot_serve_http3(model: &str) -> Option<&'static str> {
        let m: sockscale_server::Model = model.parse().ok()?;
        m.limitation(sockscale_server::Policy::Http3)
    }
}

impl Row {
    /// This row's headline figures, as a repetition keeps them.
    pub fn figures(&self) -> Figures {
        let mut f = Figures::new();
        f.insert(figure::RECEIVED_BYTES_PER_S.into(), self.received_bytes_per_s);
        if let Some(v) = self.bytes_per_cpu_second() {
            f.insert(figure::BYTES_PER_CPU_SECOND.into(), v);
        }
        if let Some(v) = self.connected_held() {
            f.insert(figure::CONNECTIONS_HELD.into(), v as f64);
        }
        if let Some(v) = self.server_rss() {
            f.insert(figure::SERVER_RSS_KIB.into(), v as f64);
        }
        if let Some(v) = self.mean_cpu_pct() {
            f.insert(figure::SERVER_CPU_PCT.into(), v);
        }
        f.insert(figure::CLIENT_CPU_PCT.into(), self.client_cpu_pct);
        if latency_was_timed(self.p50_us, self.p99_us) {
            f.insert(figure::P50_US.into(), self.p50_us);
            f.insert(figure::P99_US.into(), self.p99_us);
        }
        f
    }

    /// The figure the median repetition is chosen by: connections held for the maximum row,
    /// bytes per server CPU-second (else per second) for the others.
    pub fn headline(&self) -> &'static str {
        match self.kind {
            Some(RowKind::Maximum) => figure::CONNECTIONS_HELD,
            _ if self.bytes_per_cpu_second().is_some() => figure::BYTES_PER_CPU_SECOND,
            _ => figure::RECEIVED_BYTES_PER_S,
        }
    }
}

/// Echo latency was timed: a row with nothing timed reports 0 for both.
fn latency_was_timed(p50_us: f64, p99_us: f64) -> bool {
    p50_us > 0.0 || p99_us > 0.0
}

impl HttpPoint {
    /// Responses per second of server CPU; `None` when the server's CPU was not measured.
    pub fn per_cpu_second(&self) -> Option<f64> {
        let cpu = self.server_cpu_pct.filter(|&c| c > 0.0)?;
        Some(self.requests_per_s / (cpu / 100.0))
    }

    /// This point's headline figures, as a repetition keeps them.
    pub fn figures(&self) -> Figures {
        let mut f = Figures::new();
        f.insert(figure::REQUESTS_PER_S.into(), self.requests_per_s);
        if let Some(v) = self.per_cpu_second() {
            f.insert(figure::RESPONSES_PER_CPU_SECOND.into(), v);
        }
        if let Some(v) = self.server_cpu_pct {
            f.insert(figure::SERVER_CPU_PCT.into(), v);
        }
        if let Some(l) = &self.latency {
            f.insert(figure::P50_MS.into(), l.p50_ms);
            f.insert(figure::P99_MS.into(), l.p99_ms);
        }
        f
    }

    /// The figure the median repetition is chosen by: responses per server CPU-second, else per
    /// second.
    pub fn headline(&self) -> &'static str {
        if self.per_cpu_second().is_some() {
            figure::RESPONSES_PER_CPU_SECOND
        } else {
            figure::REQUESTS_PER_S
        }
    }
}

impl UdpPoint {
    pub fn figures(&self) -> Figures {
        let mut f = Figures::new();
        if !self.sent_nothing() {
            f.insert(figure::UDP_RECEIVED_PER_S.into(), self.received_per_s);
        }
        f
    }
}

/// Rows and points keep their repetitions in the same three fields and name their own figures
/// with `figures()`.
macro_rules! repeated {
    ($($t:ty),*) => {$(
        impl Repeated for $t {
            fn repeats(&self) -> &[Repeat] {
                &self.repeats
            }
            fn spreads(&self) -> &Spreads {
                &self.spread
            }
            fn own_figure(&self, name: &str) -> Option<f64> {
                self.figures().get(name).copied()
            }
        }
    )*};
}

repeated!(Row, HttpPoint, UdpPoint, WsPoint, WsIdle);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_and_overlap() {
        let s = Spread::of([3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.n), (1.0, 2.0, 3.0, 3));
        assert_eq!(Spread::of([4.0, 1.0]).unwrap().median, 2.5);
        assert!(Spread::of([f64::NAN]).is_none());
        let a = Spread::of([10.0, 12.0]).unwrap();
        assert!(a.overlaps(&Spread::of([12.0, 14.0]).unwrap()), "touching ranges cannot be told apart");
        assert!(!a.overlaps(&Spread::of([12.5, 14.0]).unwrap()));
        assert_eq!(median_index(&[5.0, 1.0, 3.0]), 2);
        assert_eq!(median_index(&[5.0, 1.0, 3.0, 4.0]), 2, "the lower middle of an even count");
    }

    #[test]
    fn replaced_repeats_are_left_out_of_the_spread() {
        let rep = |v: f64, replaced: bool| Repeat {
            figures: Figures::from([(figure::REQUESTS_PER_S.to_owned(), v)]),
            replaced,
            ..Repeat::default()
        };
        let spreads = spreads_of(&[rep(10.0, false), rep(1.0, true), rep(12.0, false)]);
        let s = spreads[figure::REQUESTS_PER_S];
        assert_eq!((s.min, s.max, s.n), (10.0, 12.0, 2));
        let old = HttpPoint { requests_per_s: 7.0, ..HttpPoint::default() };
        assert_eq!(old.spread_of(figure::REQUESTS_PER_S), Some(Spread::single(7.0)), "older results: one value");
    }

    /// The steady part of a ramp: the intervals after the count stopped rising, not the ones
    /// with connects in them, nor the last while connections closed.
    #[test]
    fn steady_cpu_is_the_intervals_after_the_last_connect() {
        let iv = |cpu_pct: f64, held: u64| Interval { cpu_pct, held: Some(held), rss_kib: None, at_s: None };
        let mut row = Row::default();
        assert!(row.steady_cpu().unwrap_err().contains("no per-interval samples"));
        row.intervals = Some(vec![
            iv(60.0, 5000),
            iv(69.0, 10_000),
            iv(30.0, 14_900),
            iv(24.0, 15_000),
            iv(26.0, 14_990),
            iv(9.0, 300),
        ]);
        // 14,900 is within 1% of 15,000: the interval ending there had its last connects.
        assert_eq!(row.steady_cpu(), Ok(vec![24.0, 26.0]));
        row.intervals = Some(vec![iv(60.0, 5000), iv(69.0, 10_000), iv(30.0, 15_000)]);
        assert!(row.steady_cpu().unwrap_err().contains("no interval after the last connect"));
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
}
