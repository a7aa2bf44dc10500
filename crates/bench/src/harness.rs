//! Running one model through the bench: a fresh `sockscale serve` process for every row,
//! driven by `sockscale load` processes, watched through /proc.
//!
//! Every process the harness starts is registered, pinned (servers to the server cores, load
//! to the others) and put in its own process group, so that a Ctrl-C reaches only the bench,
//! which then kills them all and keeps the rows it has.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use sockscale_load::Report;

use crate::interference::InterferenceWindow;
use crate::profile::Profile;
use crate::results::{
    ConnectAttempts, HttpLatency, HttpPoint, HttpWorkload, Interference, KernelMemory, QuicConnections, Row, RowKind,
    SampleCounts, TlsHandshakes, UdpPoint, WsIdle, WsPoint,
};
use crate::sampler::{socket_slabs, sockstat_tcp, Sampler};

/// What an HTTP sweep speaks to its server.
#[derive(Debug, Clone, Copy)]
pub enum Scheme<'a> {
    Http,
    /// HTTPS, trusting the run's own CA (`--cacert`).
    Https {
        ca: &'a Path,
    },
}

/// `--connect-retries` of the rate-limited row: three attempts in all.
pub const RATE_ROW_CONNECT_RETRIES: u32 = 2;

/// The processes the bench has started and not yet reaped.
#[derive(Debug, Clone, Default)]
pub struct Children(Arc<Mutex<HashSet<u32>>>);

impl Children {
    pub(crate) fn add(&self, pid: u32) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
    }
    pub(crate) fn remove(&self, pid: u32) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&pid);
    }
    /// Kill every child: its process group, and its `--procs` children, which run in groups
    /// of their own.
    pub fn kill_all(&self) {
        for &pid in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            kill_tree(pid);
        }
    }
}

pub struct Harness<'a> {
    pub exe: PathBuf,
    pub profile: &'a Profile,
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub interrupted: &'a AtomicBool,
    pub children: Children,
    pub scratch: PathBuf,
    /// The run's certificate for the HTTPS points (a private CA and a leaf for 127.0.0.1,
    /// ECDSA P-256, made in the scratch directory), or why it could not be made.
    pub certificate: Result<sockscale_tls::CertificateFiles, String>,
    /// Other processes' CPU on the bench's cores, in cores, past which a measurement is disturbed.
    pub disturbed_above_cores: f64,
}

/// One measurement, and what the rest of the machine did meanwhile (`None`: /proc/stat could
/// not be read).
#[derive(Debug, Clone)]
pub struct Measured<T> {
    pub value: T,
    pub interference: Option<Interference>,
}

/// A server (one process, or a `--procs` supervisor and its workers), its port, and what its
/// own counters reported.
pub struct Server {
    child: Child,
    pub port: u16,
    counters: Arc<ServerCounters>,
}

/// What a server's stats lines reported: the peak of its `connections=` gauge (summed over its
/// worker processes, each at its latest line), how many lines reported it, so a server that
/// printed none is told from one that held none, and its `limit_*` counters.
#[derive(Debug, Default)]
pub struct ServerCounters {
    peak: AtomicU64,
    reports: AtomicU64,
    /// The latest `connections=` and `limit_*=` values of each worker (one for a single process),
    /// and the `final` line's sums once the server has printed it.
    latest: Mutex<Latest>,
    /// The reader has seen the end of the server's output.
    done: AtomicBool,
}

#[derive(Debug, Default)]
struct Latest {
    connections: BTreeMap<usize, u64>,
    limits: BTreeMap<usize, BTreeMap<String, u64>>,
    final_limits: Option<BTreeMap<String, u64>>,
    /// Every counter of the `final` line, by name.
    final_counters: Option<BTreeMap<String, u64>>,
}

impl ServerCounters {
    /// Take one line of the server's output: `stats …` from a single process, `[worker K]
    /// stats …` from a `--procs` worker, `final …` when it stops.
    pub fn observe(&self, line: &str) {
        let (worker, rest) = match line.strip_prefix("[worker ").and_then(|r| r.split_once("] ")) {
            Some((k, rest)) => match k.parse::<usize>() {
                Ok(k) => (k, rest),
                Err(_) => return,
            },
            None => (0, line),
        };
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(counters) = rest.strip_prefix("final ") {
            latest.final_limits = Some(limits_of(counters));
            latest.final_counters = Some(
                counters
                    .split_whitespace()
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_owned(), v.parse().ok()?))
                    })
                    .collect(),
            );
            return;
        }
        let Some(counters) = rest.strip_prefix("stats ") else { return };
        latest.limits.insert(worker, limits_of(counters));
        if let Some(open) = gauge(counters, "connections") {
            latest.connections.insert(worker, open);
            let sum = latest.connections.values().sum();
            self.peak.fetch_max(sum, Ordering::Relaxed);
            self.reports.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The connections held now (each worker at its latest line), `None` before any line.
    pub fn held_now(&self) -> Option<u64> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        (!latest.connections.is_empty()).then(|| latest.connections.values().sum())
    }

    /// The peak, and the number of stats lines it was taken from.
    pub fn read(&self) -> (u64, u64) {
        (self.peak.load(Ordering::Relaxed), self.reports.load(Ordering::Relaxed))
    }

    /// The counter `name` of the server's `final` line; `None` before it printed one, or when
    /// the line has no such counter.
    pub fn final_counter(&self, name: &str) -> Option<u64> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest.final_counters.as_ref()?.get(name).copied()
    }

    /// The limits that kept connections out, with their counts (those above 0): the `final`
    /// line's when the server printed one, else the sum of each worker's latest stats line;
    /// `None` when the server printed neither.
    pub fn limits(&self) -> Option<BTreeMap<String, u64>> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let all = match &latest.final_limits {
            Some(f) => f.clone(),
            None if latest.limits.is_empty() => return None,
            None => {
                let mut sum: BTreeMap<String, u64> = BTreeMap::new();
                for (name, n) in latest.limits.values().flatten() {
                    *sum.entry(name.clone()).or_default() += n;
                }
                sum
            }
        };
        Some(all.into_iter().filter(|&(_, n)| n > 0).collect())
    }
}

/// The `limit_NAME=N` counters of a `key=value` line, by NAME.
fn limits_of(counters: &str) -> BTreeMap<String, u64> {
    counters
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.strip_prefix("limit_")?.to_owned(), v.parse().ok()?))
        })
        .collect()
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What its stats lines report, as they come.
    pub fn counters(&self) -> Arc<ServerCounters> {
        self.counters.clone()
    }
}

impl Harness<'_> {
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    fn command(&self, program: &Path, args: &[String], cpus: &[usize]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).env("RUST_LOG", "error").process_group(0);
        let cpus = cpus.to_vec();
        // SAFETY: the closure runs in the child between fork and exec; sched_setaffinity is
        // async-signal-safe and pin_to_cpus allocates nothing (the list was built before fork).
        unsafe {
            cmd.pre_exec(move || sockscale_sys::pin_to_cpus(&cpus));
        }
        cmd
    }

    /// Start `sockscale serve` for `model` and wait for its "listening on" line.
    pub fn start_server(&self, model: &str, proto: &str, extra: &[&str]) -> Result<Server, String> {
        self.start_servers(model, proto, 1, extra)
    }

    /// Start `sockscale serve` for `model` as `procs` processes sharing the port (`--procs`)
    /// and wait for its "listening on" line.
    pub fn start_servers(&self, model: &str, proto: &str, procs: u64, extra: &[&str]) -> Result<Server, String> {
        let mut args: Vec<String> = ["serve", "--model", model, "--proto", proto, "--listen", "127.0.0.1:0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend([
            "--threads".to_string(),
            self.server_cpus.len().to_string(),
            "--max-conns".into(),
            "1000000".into(),
            "--idle-timeout".into(),
            "600".into(),
            "--drain-timeout".into(),
            "1".into(),
            // The server's own count of open connections, ten times a second.
            "--stats-interval".into(),
            "0.1".into(),
        ]);
        if procs > 1 {
            args.extend(["--procs".to_string(), procs.to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = self
            .command(&self.exe, &args, &self.server_cpus)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the server: {e}"))?;
        self.children.add(child.id());
        // As in `load`: a Ctrl-C that came before the registration did not reach it.
        if self.interrupted() {
            kill_tree(child.id());
        }
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take();
        let counters = Arc::new(ServerCounters::default());
        let seen = counters.clone();
        std::thread::spawn(move || {
            if let Some(out) = stdout {
                let mut lines = BufReader::new(out).lines();
                // A `--procs` worker's own lines may come before the supervisor's "listening
                // on", which it prints once every worker is serving.
                let mut first = None;
                for line in lines.by_ref() {
                    match line {
                        Ok(l) if l.starts_with("listening on ") => {
                            first = Some(Ok(l));
                            break;
                        }
                        Ok(l) => seen.observe(&l),
                        Err(e) => {
                            first = Some(Err(e));
                            break;
                        }
                    }
                }
                let _ = tx.send(first);
                // Keep reading, so the server never blocks on a full pipe, and keep its counters.
                for line in lines.map_while(Result::ok) {
                    seen.observe(&line);
                }
            }
            seen.done.store(true, Ordering::Release);
        });
        let first = rx.recv_timeout(Duration::from_secs(15));
        let port = match first {
            Ok(Some(Ok(line))) => line.rsplit(':').next().and_then(|p| p.trim().parse::<u16>().ok()),
            _ => None,
        };
        match port {
            Some(port) => Ok(Server { child, port, counters }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                self.children.remove(child.id());
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                let reason = err.lines().last().unwrap_or("it exited without saying why").to_owned();
                Err(format!("the server did not start: {reason}"))
            }
        }
    }

    /// SIGTERM, a moment to drain, then SIGKILL to its whole process group (a `--procs`
    /// server's workers too). Returns its counters, with its `final` line when it printed one.
    pub fn stop_server(&self, mut server: Server) -> Arc<ServerCounters> {
        let pid = server.child.id();
        let _ = sockscale_sys::signal_process(pid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match server.child.try_wait() {
                Ok(Some(_)) => break,
                _ if Instant::now() >= deadline => {
                    kill_tree(pid);
                    let _ = server.child.kill();
                    let _ = server.child.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        // The output ends when the last process holding it exits: wait for the reader to take
        // the `final` line, a little.
        let read_by = Instant::now() + Duration::from_secs(1);
        while !server.counters.done.load(Ordering::Acquire) && Instant::now() < read_by {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.children.remove(pid);
        server.counters
    }

    /// Run `sockscale load ARGS` and read its JSON report.
    pub fn load(&self, args: &[String]) -> Result<Report, String> {
        let json = self.scratch.join(format!("load-{}-{}.json", std::process::id(), unique()));
        let mut full: Vec<String> = vec!["load".into()];
        full.extend(args.iter().cloned());
        full.extend(["--allow-errors".into(), "--json".into(), json.display().to_string()]);
        let child = self
            .command(&self.exe, &full, &self.client_cpus)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the load: {e}"))?;
        let pid = child.id();
        self.children.add(pid);
        // A Ctrl-C between the spawn and the registration above killed every child but this
        // one: the flag was set before the kill, so it is seen here.
        if self.interrupted() {
            kill_tree(pid);
        }
        let out = child.wait_with_output();
        // Reaped: its pid may be reused by any process now, which a Ctrl-C must not kill.
        self.children.remove(pid);
        let out = out.map_err(|e| format!("load failed: {e}"))?;
        let report = Report::load(&json.display().to_string());
        let _ = std::fs::remove_file(&json);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("load failed: {}", err.lines().last().unwrap_or("no message")));
        }
        report.map_err(|e| e.to_string())
    }

    fn client_threads(&self) -> String {
        self.client_cpus.len().max(1).to_string()
    }

    /// Load processes and source addresses needed to hold `conns` connections here.
    fn spread(&self, conns: u64) -> Vec<String> {
        let limit = sockscale_sys::soft_limit(libc::RLIMIT_NOFILE).ok().flatten().unwrap_or(1024);
        let per_process = limit.saturating_sub(200).max(100);
        let procs = conns.div_ceil(per_process).max(1);
        // Few enough connections per source address that connect() stays cheap.
        let ports = sockscale_load::limits::local_port_range().unwrap_or((32768, 60999));
        let sources = sockscale_load::limits::cheap_sources(conns, ports);
        let mut args = Vec::new();
        if procs > 1 {
            args.extend(["--procs".to_string(), procs.to_string()]);
        }
        if sources > 1 {
            args.extend(["--source".to_string(), format!("127.0.0.1-127.0.0.{sources}")]);
        }
        args
    }

    /// Server processes for `conns` connections of `model`: as many as keep each within three
    /// quarters of the open-files limit (SO_REUSEPORT spreads connections unevenly), as nginx
    /// runs workers. A model with a ceiling of its own (select's FD_SETSIZE) runs as one: the
    /// row is there to show that ceiling.
    fn server_procs(&self, model: &str, conns: u64) -> u64 {
        let ceiling = model.parse::<sockscale_server::Model>().ok().and_then(|m| m.capabilities().ceiling);
        if ceiling.is_some() {
            return 1;
        }
        let limit = sockscale_sys::soft_limit(libc::RLIMIT_NOFILE).ok().flatten().unwrap_or(1024);
        let per_process = (limit * 3 / 4).max(100);
        conns.div_ceil(per_process).max(1)
    }

    /// Watch the machine while `load` runs against the server `server`.
    fn watched<T>(&self, server: Option<u32>, load: impl FnOnce() -> T) -> (T, Option<Interference>) {
        let watch = InterferenceWindow::start(&self.server_cpus, &self.client_cpus, server);
        let out = load();
        (out, watch.finish(self.disturbed_above_cores))
    }

    /// One row of the table: a fresh echo server, one load run, /proc samples.
    pub fn row(&self, model: &str, kind: RowKind) -> Result<Measured<Row>, String> {
        let p = self.profile;
        let conns = match kind {
            RowKind::Flood => p.flood_conns,
            RowKind::RateLimited => p.rate_conns,
            RowKind::Maximum => p.max_conns,
        };
        let procs = self.server_procs(model, conns);
        let server = self.start_servers(model, "echo", procs, &[])?;
        let addr = format!("127.0.0.1:{}", server.port);
        let mut args: Vec<String> =
            vec!["echo".into(), addr, "-l".into(), p.msg_len.to_string(), "-t".into(), self.client_threads()];
        // Time to connect everything, then the measured time.
        let connect_time = Duration::from_secs_f64(conns as f64 / 5_000.0);
        let duration = match kind {
            RowKind::Maximum => p.max_time,
            _ => p.row_time + connect_time,
        };
        args.extend(["-c".into(), conns.to_string(), "-d".into(), format!("{:.3}", duration.as_secs_f64())]);
        if kind != RowKind::Flood {
            args.extend(["--block".into(), p.block.to_string(), "-r".into(), p.block_rate.to_string()]);
        }
        if kind == RowKind::RateLimited {
            // The row measures paced connections, not reconnects: a connection the server
            // refused three times in a row (over about 0.15 s of back-off) is at the server's
            // limit, and is given up and counted. Each refused loopback connect costs the load
            // 47 µs (select) to 86 µs (blocking) of kernel time: retried for the whole row,
            // select's 11,000 refusals took 57% of the load's core; four attempts each, 16%
            // for select and 20.3% for blocking; three, 13% and 14% measured alone.
            args.extend(["--connect-retries".into(), RATE_ROW_CONNECT_RETRIES.to_string()]);
        }
        if kind == RowKind::Maximum {
            args.extend(["--connect-rate".into(), p.ramp_rate.to_string(), "--connect-timeout".into(), "2".into()]);
        }
        args.extend(self.spread(conns));
        // Kernel baselines with the server listening and no load yet.
        let sockstat_baseline = sockstat_tcp();
        let slab_baseline = socket_slabs();
        let interval = Duration::from_secs(1).min(duration / 4);
        let counters = server.counters();
        let sampler = Sampler::start_with_held(server.pid(), interval, Box::new(move || counters.held_now()));
        let (report, interference) = self.watched(Some(server.pid()), || self.load(&args));
        let samples = sampler.finish();
        // Let the last stats line (100 ms) in before reading the peak.
        std::thread::sleep(Duration::from_millis(150));
        let counters = self.stop_server(server);
        let (held, held_reports) = counters.read();
        let report = report?;
        // No interval measured: the range stays 0–0 for older readers, and `samples` says so.
        let (cpu_min, cpu_max) = samples.cpu_range().unwrap_or_default();
        let counts = SampleCounts {
            connections: held_reports,
            rss: samples.rss_samples,
            threads: samples.threads_samples,
            cpu: samples.cpu_steady().len() as u64,
        };
        let slab_unmeasured = match (&slab_baseline, &samples.slab_peak) {
            (Err(reason), _) => Some(reason.clone()),
            (Ok(_), None) => Some("/proc/slabinfo could not be read while the load ran".to_owned()),
            (Ok(_), Some(_)) => None,
        };
        let kernel = KernelMemory {
            page_size: sockscale_sys::page_size() as u64,
            sockstat_baseline,
            sockstat_peak: samples.sockstat_peak.filter(|_| sockstat_baseline.is_some()),
            slab_baseline: slab_baseline.ok().filter(|_| slab_unmeasured.is_none()),
            slab_peak: samples.slab_peak.filter(|_| slab_unmeasured.is_none()),
            slab_unmeasured,
        };
        let client_cores = self.client_cpus.len().max(1);
        let row = Row {
            kind: Some(kind),
            attempted: conns,
            connected: held.min(conns),
            client_peak_open: report.connections.peak_open,
            server_rss_kib: samples.rss_kib_max,
            kernel_tcp_kib: kernel.buffers_kib().unwrap_or(0),
            cpu_min_pct: cpu_min,
            cpu_max_pct: cpu_max,
            threads: samples.threads_max,
            sent_bytes_per_s: report.rates.sent_bytes_per_s,
            received_bytes_per_s: report.rates.received_bytes_per_s,
            p50_us: report.latency.p50_us,
            p99_us: report.latency.p99_us,
            errors: errors_of(&report),
            client_cpu_pct: report.rates.cpu_percent,
            client_cores,
            client_bound: report.rates.cpu_percent >= 90.0 * client_cores as f64,
            duration_s: report.duration_s,
            kernel: Some(kernel),
            samples: Some(counts),
            connects: Some(ConnectAttempts {
                attempts: report.connections.attempted,
                retries: report.connections.retries,
                given_up: report.connections.abandoned,
            }),
            server_procs: Some(procs),
            server_limits: counters.limits(),
            intervals: Some(samples.intervals),
            latency_hdr: Some(report.latency.hdr.clone()).filter(|h| !h.is_empty() && report.latency.count > 0),
            throughput: Some(
                report
                    .timeline
                    .iter()
                    .map(|s| crate::results::PerSecond {
                        at_s: s.t as f64 + s.length_s,
                        per_s: s.completed as f64 / s.length_s.max(1e-3),
                    })
                    .collect::<Vec<_>>(),
            )
            .filter(|v| !v.is_empty()),
            ..Row::default()
        };
        Ok(Measured { value: row, interference })
    }

    /// One point of the seed-003 sweep against a server already listening on `port`: `c`
    /// connections of `workload` (plain HTTP with or without keep-alive, HTTPS keep-alive or a
    /// full handshake per request, HTTP/2 or HTTP/3 with the profile's streams). `server` is the server's
    /// pid, whose CPU the point reads.
    pub fn http_point(
        &self,
        port: u16,
        server: Option<u32>,
        scheme: Scheme<'_>,
        workload: HttpWorkload,
        c: u64,
    ) -> Result<Measured<HttpPoint>, String> {
        let p = self.profile;
        let url = match scheme {
            Scheme::Http => format!("http://127.0.0.1:{port}/"),
            Scheme::Https { .. } => format!("https://127.0.0.1:{port}/"),
        };
        let mut args: Vec<String> = vec![
            "http".into(),
            url,
            "-c".into(),
            c.to_string(),
            "-d".into(),
            format!("{:.3}", (p.http_time + Duration::from_secs_f64(c as f64 / 10_000.0)).as_secs_f64()),
            "-t".into(),
            self.client_threads(),
        ];
        if !workload.keepalive() {
            args.push("--no-keepalive".into());
        }
        let streams = if workload.http3() { Some(p.h3_streams) } else { workload.http2().then_some(p.h2_streams) };
        match streams {
            Some(streams) if workload.http3() => {
                args.extend(["--http3".into(), "--pipeline".into(), streams.to_string()])
            }
            Some(streams) => args.extend(["--http2".into(), "--pipeline".into(), streams.to_string()]),
            None => {}
        }
        if let Scheme::Https { ca } = scheme {
            args.extend(["--cacert".into(), ca.display().to_string()]);
            // Every new connection a full handshake: the row measures what the issue asks,
            // and keep-alive rows pay one full handshake per connection, not a resumed one.
            // (HTTP/3's connections resume nothing unless asked to.)
            if !workload.http3() {
                args.extend(["--tls-resume".into(), "off".into()]);
            }
        }
        // QUIC connections are UDP sockets: no TCP port or accept queue to spread over.
        if !workload.http3() {
            args.extend(self.spread(c));
        }
        let before = server.and_then(|pid| crate::sampler::cpu_ticks(pid).map(|t| (Instant::now(), t)));
        let (report, interference) = self.watched(server, || self.load(&args));
        let report = report?;
        let server_cpu_pct = before.and_then(|(then, ticks)| {
            let used = crate::sampler::cpu_ticks(server?)?.checked_sub(ticks)? as f64;
            let secs = then.elapsed().as_secs_f64();
            (secs > 0.0).then(|| 100.0 * used / sockscale_sys::clock_ticks_per_second() as f64 / secs)
        });
        let rps = report.rates.requests_per_s;
        let point = HttpPoint {
            concurrency: c,
            keepalive: workload.keepalive(),
            requests_per_s: rps,
            mean_ms: report.latency.mean_us / 1000.0,
            ms_per_request: if rps > 0.0 { 1000.0 / rps } else { 0.0 },
            latency: HttpLatency::from_report(&report.latency),
            errors: report.errors.total(),
            client_bound: report.rates.cpu_percent >= 90.0 * self.client_cpus.len().max(1) as f64,
            tls: workload.tls(),
            tls_resume: (workload.tls() && !workload.multiplexed()).then_some(false),
            server_cpu_pct,
            handshakes: report.tls.as_ref().map(TlsHandshakes::from_report),
            http2: workload.http2(),
            streams,
            http3: workload.http3(),
            quic: report.quic.as_ref().map(QuicConnections::from_report),
            ..HttpPoint::default()
        };
        Ok(Measured { value: point, interference })
    }

    /// One point of the WebSocket echo sweep: a fresh `serve --proto ws` server for `model`, `c`
    /// connections upgraded to it, each sending the profile's `msg_len`-byte messages one at a
    /// time (`--pipeline 1`); the server's CPU read before and after.
    pub fn ws_point(&self, model: &str, c: u64) -> Result<Measured<WsPoint>, String> {
        let p = self.profile;
        let server = self.start_server(model, "ws", &[])?;
        let mut args: Vec<String> = vec![
            "ws".into(),
            format!("ws://127.0.0.1:{}/", server.port),
            "-c".into(),
            c.to_string(),
            "-s".into(),
            p.msg_len.to_string(),
            "--pipeline".into(),
            "1".into(),
            "-d".into(),
            format!("{:.3}", (p.http_time + Duration::from_secs_f64(c as f64 / 10_000.0)).as_secs_f64()),
            "-t".into(),
            self.client_threads(),
        ];
        args.extend(self.spread(c));
        let pid = server.pid();
        let before = crate::sampler::cpu_ticks(pid).map(|t| (Instant::now(), t));
        let (report, interference) = self.watched(Some(pid), || self.load(&args));
        let server_cpu_pct = before.and_then(|(then, ticks)| {
            let used = crate::sampler::cpu_ticks(pid)?.checked_sub(ticks)? as f64;
            let secs = then.elapsed().as_secs_f64();
            (secs > 0.0).then(|| 100.0 * used / sockscale_sys::clock_ticks_per_second() as f64 / secs)
        });
        let _ = self.stop_server(server);
        let report = report?;
        let ws = report.ws.clone().unwrap_or_default();
        let point = WsPoint {
            concurrency: c,
            msg_len: p.msg_len as u64,
            messages_per_s: report.rates.requests_per_s,
            upgrades: ws.upgrades,
            latency: HttpLatency::from_report(&report.latency),
            errors: report.errors.total() + ws.protocol_errors.values().sum::<u64>(),
            client_bound: report.rates.cpu_percent >= 90.0 * self.client_cpus.len().max(1) as f64,
            server_cpu_pct,
            ..WsPoint::default()
        };
        Ok(Measured { value: point, interference })
    }

    /// Idle WebSockets: a fresh `serve --proto ws` server for `model`, its memory read with
    /// nothing connected, then the profile's `ws_idle_conns` connections upgraded and held
    /// with no message (`load ws --idle`), each pinged every `ws_ping`, for long enough that
    /// the last to open is pinged too; the server's memory and the kernel's socket memory
    /// sampled meanwhile, as the echo rows sample them.
    pub fn ws_idle(&self, model: &str) -> Result<Measured<WsIdle>, String> {
        let p = self.profile;
        let conns = p.ws_idle_conns;
        let procs = self.server_procs(model, conns);
        let server = self.start_servers(model, "ws", procs, &[])?;
        // Every connection is opened first (`--connect-before-start`: however long a model takes
        // to accept them), then the hold: each is pinged one interval after its upgrade, so
        // within the first interval of the hold, and another interval and a half leaves room
        // for the last pong and for the samplers to see them all held.
        let duration = p.ws_ping * 5 / 2;
        let mut args: Vec<String> = vec![
            "ws".into(),
            format!("ws://127.0.0.1:{}/", server.port),
            "-c".into(),
            conns.to_string(),
            "--idle".into(),
            "--connect-before-start".into(),
            "--ping".into(),
            format!("{:.3}", p.ws_ping.as_secs_f64()),
            "-d".into(),
            format!("{:.3}", duration.as_secs_f64()),
            "-t".into(),
            self.client_threads(),
        ];
        args.extend(self.spread(conns));
        let rss_baseline = crate::sampler::group_rss_kib(server.pid());
        let sockstat_baseline = sockstat_tcp();
        let slab_baseline = socket_slabs();
        let interval = Duration::from_millis(250);
        let counters = server.counters();
        let sampler = Sampler::start_with_held(server.pid(), interval, Box::new(move || counters.held_now()));
        let (report, interference) = self.watched(Some(server.pid()), || self.load(&args));
        let samples = sampler.finish();
        std::thread::sleep(Duration::from_millis(150));
        let counters = self.stop_server(server);
        let (held, held_reports) = counters.read();
        let report = report?;
        let ws = report.ws.clone().unwrap_or_default();
        let slab_unmeasured = match (&slab_baseline, &samples.slab_peak) {
            (Err(reason), _) => Some(reason.clone()),
            (Ok(_), None) => Some("/proc/slabinfo could not be read while the load ran".to_owned()),
            (Ok(_), Some(_)) => None,
        };
        let kernel = KernelMemory {
            page_size: sockscale_sys::page_size() as u64,
            sockstat_baseline,
            sockstat_peak: samples.sockstat_peak.filter(|_| sockstat_baseline.is_some()),
            slab_baseline: slab_baseline.ok().filter(|_| slab_unmeasured.is_none()),
            slab_peak: samples.slab_peak.filter(|_| slab_unmeasured.is_none()),
            slab_unmeasured,
        };
        let idle = WsIdle {
            attempted: conns,
            upgrades: ws.upgrades,
            held: (held_reports > 0).then_some(held.min(conns)),
            server_rss_baseline_kib: rss_baseline,
            server_rss_peak_kib: (samples.rss_samples > 0).then_some(samples.rss_kib_max),
            kernel: Some(kernel),
            ping_interval_s: p.ws_ping.as_secs_f64(),
            pings_sent: ws.pings_sent,
            pongs_received: ws.pongs_received,
            ping_timeouts: ws.ping_timeouts,
            errors: report.errors.total() + ws.protocol_errors.values().sum::<u64>(),
            client_bound: report.rates.cpu_percent >= 90.0 * self.client_cpus.len().max(1) as f64,
            duration_s: report.duration_s,
            ..WsIdle::default()
        };
        Ok(Measured { value: idle, interference })
    }

    pub fn udp(&self, model: &str) -> Result<Measured<UdpPoint>, String> {
        let server = self.start_server(model, "udp", &[])?;
        let args: Vec<String> = vec![
            "udp".into(),
            format!("127.0.0.1:{}", server.port),
            "-c".into(),
            "8".into(),
            "-l".into(),
            "512".into(),
            "--depth".into(),
            "4".into(),
            "-d".into(),
            format!("{:.3}", self.profile.udp_time.as_secs_f64()),
            "-t".into(),
            self.client_threads(),
            "--timeout".into(),
            "0.2".into(),
        ];
        let (report, interference) = self.watched(Some(server.pid()), || self.load(&args));
        let _ = self.stop_server(server);
        let report = report?;
        let d = report.duration_s.max(1e-9);
        let point = UdpPoint {
            sent_per_s: report.udp.sent as f64 / d,
            received_per_s: report.udp.received as f64 / d,
            lost: report.udp.lost,
            sent: Some(report.udp.sent),
            ..UdpPoint::default()
        };
        Ok(Measured { value: point, interference })
    }
}

fn errors_of(report: &Report) -> BTreeMap<String, u64> {
    let value = serde_json::to_value(&report.errors).unwrap_or_default();
    value
        .as_object()
        .map(|o| o.iter().filter_map(|(k, v)| v.as_u64().filter(|&n| n > 0).map(|n| (k.clone(), n))).collect())
        .unwrap_or_default()
}

/// SIGKILL `pid`'s process group and the processes it started (found before it dies, while
/// they are still its children).
fn kill_tree(pid: u32) {
    for member in crate::sampler::group_of(pid).into_iter().rev() {
        if let Ok(group) = i32::try_from(member) {
            let _ = sockscale_sys::signal_process_group(group, libc::SIGKILL);
        }
        // A process that leads no group of its own is not reached by its pid as a group.
        let _ = sockscale_sys::signal_process(member, libc::SIGKILL);
    }
}

/// The value of `name=N` in a line of `key=value` pairs.
fn gauge(counters: &str, name: &str) -> Option<u64> {
    counters.split_whitespace().find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

fn unique() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_printed_no_stats_line_reported_no_connections() {
        let g = ServerCounters::default();
        g.observe("listening on 127.0.0.1:4000");
        assert_eq!(g.read(), (0, 0), "no stats line: nothing reported, not 0 connections held");
        assert_eq!(g.held_now(), None);
        assert_eq!(g.limits(), None, "no counters: no limits known, not none hit");
        g.observe("stats connections=0 accepted=0 limit_open_files=0");
        assert_eq!(g.read(), (0, 1), "a stats line reporting 0 held is a measured 0");
        assert_eq!(g.limits(), Some(BTreeMap::new()));
        g.observe("stats accepted=9 connections=120");
        g.observe("stats connections=80");
        g.observe("stats requests=5");
        assert_eq!(g.read(), (120, 3));
    }

    /// A `--procs` server: each worker's gauge at its latest line, summed; its limits summed,
    /// and the `final` line's sums once printed.
    #[test]
    fn worker_gauges_and_limits_add_up() {
        let g = ServerCounters::default();
        g.observe("[worker 0] stats connections=100 limit_threads=1 limit_open_files=0");
        g.observe("[worker 1] stats connections=150 limit_threads=2");
        assert_eq!(g.read(), (250, 2));
        g.observe("[worker 0] stats connections=90 limit_threads=3");
        assert_eq!(g.read().0, 250, "the peak of the sum stays");
        assert_eq!(g.held_now(), Some(240), "what is held now is each worker's latest, summed");
        g.observe("[worker 0] stats connections=200 limit_threads=3");
        assert_eq!(g.read().0, 350);
        assert_eq!(g.limits(), Some(BTreeMap::from([("threads".to_owned(), 5)])));
        g.observe("[worker 1] cannot start: something");
        assert_eq!(g.final_counter("accepted"), None, "no final line yet");
        g.observe("final accepted=9 limit_threads=7 limit_memory=1 limit_ceiling=0 h3_requests=40");
        assert_eq!(g.limits(), Some(BTreeMap::from([("memory".to_owned(), 1), ("threads".to_owned(), 7)])));
        assert_eq!((g.final_counter("h3_requests"), g.final_counter("quic_handshakes")), (Some(40), None));
    }
}
