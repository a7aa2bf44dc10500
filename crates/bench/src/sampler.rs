//! Watching a server from outside, through /proc, while a row is measured: its CPU in fixed
//! intervals (the seed prints CPU as a min–max range), its resident memory and threads
//! (largest sample), each summed over the server's processes (a `serve --procs` server is its
//! supervisor and the workers in its process group), and the kernel's memory for sockets, the Linux counterpart of the seed's
//! non-paged pool: /proc/net/sockstat (socket buffer pages, socket counts) and the socket
//! caches of /proc/slabinfo (the socket structures themselves, which sockstat does not count).
//! Both are system-wide.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::results::{Interval, SlabCache, SockstatTcp, SOCKET_SLAB_CACHES};

/// Reads the connections the server holds now, when it has said.
pub type HeldNow = Box<dyn Fn() -> Option<u64> + Send>;

/// How often slabinfo is read while a row runs (it walks every cache; 10 ms would be costly).
const SLAB_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// CPU over each interval between two reads of /proc/PID/stat, as a percentage of one core.
    pub cpu_pct: Vec<f64>,
    /// The same intervals with the connections held and the resident memory when each ended.
    pub intervals: Vec<Interval>,
    /// The latest VmRSS read, KiB.
    pub rss_kib_last: Option<u64>,
    /// The largest VmRSS read, of `rss_samples` reads (0 when none: not measured).
    pub rss_kib_max: u64,
    pub rss_samples: u64,
    /// The largest Threads read, of `threads_samples` reads (0 when none: not measured).
    pub threads_max: u64,
    pub threads_samples: u64,
    /// The largest value of each sockstat TCP field; `None` when sockstat was never readable.
    pub sockstat_peak: Option<SockstatTcp>,
    /// The socket caches at the slabinfo sample where their total was largest; `None` when
    /// slabinfo was never readable.
    pub slab_peak: Option<BTreeMap<String, SlabCache>>,
    /// The most processes the server had at once (1 unless it runs `--procs`).
    pub processes: u64,
}

impl Samples {
    /// The CPU intervals the range is taken over: all of them but the first (connections
    /// being set up) when there are enough to spare one.
    pub fn cpu_steady(&self) -> &[f64] {
        if self.cpu_pct.len() >= 3 {
            &self.cpu_pct[1..]
        } else {
            &self.cpu_pct[..]
        }
    }

    /// The lowest and highest CPU interval of [`Samples::cpu_steady`]; `None` when no interval
    /// was measured.
    pub fn cpu_range(&self) -> Option<(f64, f64)> {
        let steady = self.cpu_steady();
        let min = steady.iter().copied().reduce(f64::min)?;
        let max = steady.iter().copied().reduce(f64::max)?;
        Some((min, max))
    }
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Samples>,
}

impl Sampler {
    /// Watch the process `leader` and every process in its process group.
    pub fn start(leader: u32, interval: Duration) -> Sampler {
        Sampler::start_with_held(leader, interval, Box::new(|| None))
    }

    /// [`Sampler::start`], reading with `held` the connections the server holds at the end of
    /// each interval.
    pub fn start_with_held(leader: u32, interval: Duration, held: HeldNow) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let ticks = sockscale_sys::clock_ticks_per_second() as f64;
            let mut samples = Samples::default();
            let mut members = Members::new(leader);
            // The start of the current interval: when the processes' CPU was last read, and
            // what it said. An interval is measured only between two reads that succeeded; a
            // failed read is no sample (its 0 ticks would be a 0% interval, and the next one an
            // impossible jump).
            let started = Instant::now();
            let mut last = group_ticks(members.pids()).map(|t| (started, t));
            let mut next = started + interval;
            let mut next_slab = started;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10).min(interval));
                members.refresh();
                sample_levels(members.pids(), &mut samples);
                let now = Instant::now();
                if now >= next_slab {
                    sample_slab(&mut samples);
                    next_slab = now + SLAB_INTERVAL;
                }
                if now >= next {
                    let read = group_ticks(members.pids());
                    // Timed when the ticks were read, not when the turn began: reading slabinfo,
                    // or the stat of a process with thousands of threads (the kernel sums them
                    // all), takes long enough to shorten one interval against its ticks (a
                    // blocking server pinned to one core read as 147%).
                    let read_at = Instant::now();
                    if let (Some((then, before)), Some(after)) = (&last, &read) {
                        // Only processes read at both ends: a worker that started or exited
                        // between them has no interval.
                        let used: u64 =
                            after.iter().filter_map(|(pid, t)| before.get(pid).map(|b| t.saturating_sub(*b))).sum();
                        let used = used as f64 / ticks;
                        let cpu_pct = 100.0 * used / read_at.duration_since(*then).as_secs_f64();
                        samples.cpu_pct.push(cpu_pct);
                        samples.intervals.push(Interval {
                            cpu_pct,
                            held: held(),
                            rss_kib: samples.rss_kib_last,
                            at_s: Some(read_at.duration_since(started).as_secs_f64()),
                        });
                    }
                    last = read.map(|t| (read_at, t));
                    next += interval;
                }
            }
            samples.processes = members.most;
            samples
        });
        Sampler { stop, handle }
    }

    pub fn finish(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// The server's processes: the one the harness started (first) and the others in its process
/// group, looked up again every [`Members::REFRESH`] (a `--procs` supervisor restarts a worker
/// that dies).
struct Members {
    pids: Vec<u32>,
    refreshed: Instant,
    /// The most processes seen at once.
    most: u64,
}

impl Members {
    const REFRESH: Duration = Duration::from_millis(250);

    fn new(leader: u32) -> Members {
        let pids = group_of(leader);
        Members { most: pids.len() as u64, pids, refreshed: Instant::now() }
    }

    fn refresh(&mut self) {
        if self.refreshed.elapsed() >= Self::REFRESH {
            self.pids = group_of(self.pids[0]);
            self.most = self.most.max(self.pids.len() as u64);
            self.refreshed = Instant::now();
        }
    }

    fn pids(&self) -> &[u32] {
        &self.pids
    }
}

/// `leader` and every other process in its process group or started by it (a `--procs`
/// supervisor starts each worker in a process group of its own, so that a terminal's Ctrl-C
/// reaches only the supervisor).
pub fn group_of(leader: u32) -> Vec<u32> {
    let mut pids = vec![leader];
    let Ok(dir) = std::fs::read_dir("/proc") else { return pids };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == leader {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if parse_stat_group(&stat) == Some(leader) || parse_stat_parent(&stat) == Some(leader) {
            pids.push(pid);
        }
    }
    pids
}

/// The resident memory of `leader` and its group (see [`group_of`]) summed, KiB, read once in
/// the same way the sampler reads it; `None` when the leader's could not be read.
pub fn group_rss_kib(leader: u32) -> Option<u64> {
    let mut samples = Samples::default();
    sample_levels(&group_of(leader), &mut samples);
    samples.rss_kib_last
}

/// The CPU ticks of each process of `pids` that could be read; `None` when the first (the
/// process the harness started) could not.
fn group_ticks(pids: &[u32]) -> Option<HashMap<u32, u64>> {
    let mut ticks = HashMap::new();
    ticks.insert(pids[0], cpu_ticks(pids[0])?);
    for &pid in &pids[1..] {
        if let Some(t) = cpu_ticks(pid) {
            ticks.insert(pid, t);
        }
    }
    Some(ticks)
}

fn sample_levels(pids: &[u32], samples: &mut Samples) {
    // A sample is the sum over the processes read; a field that is absent in the first
    // process (a zombie has no VmRSS) or unreadable makes it no sample, not a 0.
    let mut rss = None::<u64>;
    let mut threads = None::<u64>;
    for (i, pid) in pids.iter().enumerate() {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let (r, t) = parse_status(&status);
        if i == 0 {
            rss = r;
            threads = t;
        } else {
            rss = rss.map(|sum| sum + r.unwrap_or(0));
            threads = threads.map(|sum| sum + t.unwrap_or(0));
        }
        if i == 0 && rss.is_none() && threads.is_none() {
            break;
        }
    }
    samples.rss_kib_last = rss;
    if let Some(rss) = rss {
        samples.rss_kib_max = samples.rss_kib_max.max(rss);
        samples.rss_samples += 1;
    }
    if let Some(threads) = threads {
        samples.threads_max = samples.threads_max.max(threads);
        samples.threads_samples += 1;
    }
    if let Some(now) = sockstat_tcp() {
        let peak = samples.sockstat_peak.get_or_insert(now);
        peak.inuse = peak.inuse.max(now.inuse);
        peak.orphan = peak.orphan.max(now.orphan);
        peak.tw = peak.tw.max(now.tw);
        peak.alloc = peak.alloc.max(now.alloc);
        peak.mem_pages = peak.mem_pages.max(now.mem_pages);
    }
}

fn sample_slab(samples: &mut Samples) {
    let Ok(now) = socket_slabs() else { return };
    let page = sockscale_sys::page_size() as u64;
    let total = |caches: &BTreeMap<String, SlabCache>| caches.values().map(|c| c.bytes(page)).sum::<u64>();
    if samples.slab_peak.as_ref().is_none_or(|peak| total(&now) > total(peak)) {
        samples.slab_peak = Some(now);
    }
}

/// VmRSS (KiB) and Threads of a /proc/PID/status text, each `None` when absent or unreadable.
pub fn parse_status(status: &str) -> (Option<u64>, Option<u64>) {
    let field =
        |name: &str| status.lines().find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse::<u64>().ok());
    (field("VmRSS:"), field("Threads:"))
}

/// User plus system CPU ticks of a process, all threads; `None` when /proc/PID/stat cannot be
/// read or parsed.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    parse_stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime of a /proc/PID/stat text (the fields after the command, which may hold
/// spaces and parentheses, so the text is split at its last ')').
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(field(11)? + field(12)?)
}

/// The parent of a /proc/PID/stat text.
pub fn parse_stat_parent(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The process group of a /proc/PID/stat text.
pub fn parse_stat_group(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

/// The TCP line of /proc/net/sockstat, system-wide; `None` when it cannot be read.
pub fn sockstat_tcp() -> Option<SockstatTcp> {
    parse_sockstat(&std::fs::read_to_string("/proc/net/sockstat").ok()?)
}

/// `TCP: inuse 4 orphan 0 tw 0 alloc 4 mem 0` → its fields; `None` without a complete line.
pub fn parse_sockstat(text: &str) -> Option<SockstatTcp> {
    let line = text.lines().find_map(|l| l.strip_prefix("TCP:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Option<u64> {
        words.chunks_exact(2).find(|kv| kv[0] == name).and_then(|kv| kv[1].parse().ok())
    };
    Some(SockstatTcp {
        inuse: field("inuse")?,
        orphan: field("orphan")?,
        tw: field("tw")?,
        alloc: field("alloc")?,
        mem_pages: field("mem")?,
    })
}

/// The socket caches of /proc/slabinfo, or why they cannot be read (it needs root).
pub fn socket_slabs() -> Result<BTreeMap<String, SlabCache>, String> {
    let text = std::fs::read_to_string("/proc/slabinfo").map_err(|e| format!("/proc/slabinfo: {e}"))?;
    parse_slabinfo(&text).ok_or_else(|| "/proc/slabinfo: not in the version 2.1 format".to_owned())
}

/// The [`SOCKET_SLAB_CACHES`] of a slabinfo 2.1 text; `None` when the text is not that format.
pub fn parse_slabinfo(text: &str) -> Option<BTreeMap<String, SlabCache>> {
    let mut lines = text.lines();
    if lines.next()?.trim() != "slabinfo - version: 2.1" {
        return None;
    }
    let mut caches = BTreeMap::new();
    for line in lines.filter(|l| !l.starts_with('#')) {
        // name active_objs num_objs objsize objperslab pagesperslab : tunables l b s : slabdata
        // active_slabs num_slabs sharedavail
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(&name) = words.first() else { continue };
        if !SOCKET_SLAB_CACHES.contains(&name) || words.len() < 16 {
            continue;
        }
        let n = |i: usize| words[i].parse::<u64>().ok();
        let cache = SlabCache {
            active_objs: n(1)?,
            num_objs: n(2)?,
            objsize: n(3)?,
            objperslab: n(4)?,
            pagesperslab: n(5)?,
            num_slabs: n(14)?,
        };
        caches.insert(name.to_owned(), cache);
    }
    Some(caches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let sampler = Sampler::start(std::process::id(), Duration::from_millis(50));
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(200) {
            std::hint::black_box(0u64.wrapping_add(1));
        }
        let s = sampler.finish();
        assert!(s.rss_kib_max > 0 && s.rss_samples > 0);
        assert_eq!(s.intervals.len(), s.cpu_pct.len(), "one interval for each CPU reading");
        assert!(s.intervals.iter().all(|i| i.held.is_none() && i.rss_kib.is_some()), "{:?}", s.intervals);
        assert!(s.threads_max >= 2 && s.threads_samples > 0, "this thread and the sampler");
        assert!(!s.cpu_pct.is_empty());
        let (min, max) = s.cpu_range().expect("CPU intervals");
        assert!(min <= max && max <= 100.0 * 64.0);
    }

    /// A `serve --procs` server is a supervisor and its workers in one process group: every
    /// figure is their sum.
    #[test]
    fn samples_every_process_of_the_group() {
        use std::os::unix::process::CommandExt;
        // A group leader with two children that spin, all in a group of their own.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "(while :; do :; done) & (while :; do :; done) & wait"])
            .process_group(0)
            .spawn()
            .expect("sh");
        std::thread::sleep(Duration::from_millis(100));
        let sampler = Sampler::start(leader.id(), Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(500));
        let ticks = group_ticks(&group_of(leader.id())).expect("the leader is readable");
        let s = sampler.finish();
        let _ = sockscale_sys::signal_process_group(leader.id() as i32, libc::SIGKILL);
        let _ = leader.wait();
        assert_eq!(s.processes, 3, "the leader and its two children");
        assert!(s.threads_max >= 3, "one thread each, summed: {}", s.threads_max);
        assert_eq!(ticks.len(), 3, "CPU is read for every process of the group: {ticks:?}");
        assert!(!s.cpu_pct.is_empty());
    }

    #[test]
    fn a_process_that_cannot_be_read_gives_no_samples_not_zeros() {
        // No process has this pid (it is above any pid_max), so /proc/PID cannot be read.
        let sampler = Sampler::start(u32::MAX, Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(120));
        let s = sampler.finish();
        assert!(s.cpu_pct.is_empty(), "CPU intervals of a process never read: {:?}", s.cpu_pct);
        assert_eq!(s.cpu_range(), None);
        assert_eq!((s.rss_samples, s.rss_kib_max, s.threads_samples, s.threads_max), (0, 0, 0, 0));
    }

    #[test]
    fn status_and_stat_fields_that_are_absent_are_no_sample() {
        let status = "Name:\tsockscale\nState:\tS (sleeping)\nVmRSS:\t    6768 kB\nThreads:\t5\n";
        assert_eq!(parse_status(status), (Some(6768), Some(5)));
        // A zombie has no VmRSS.
        assert_eq!(parse_status("Name:\tsockscale\nState:\tZ (zombie)\nThreads:\t1\n"), (None, Some(1)));
        assert_eq!(parse_status(""), (None, None));
        let stat = "42 (sock scale) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 5 0 1 0 0";
        assert_eq!(parse_stat_ticks(stat), Some(325), "utime + stime after the command's ')'");
        assert_eq!(parse_stat_group(stat), Some(42), "the process group, third after the ')'");
        assert_eq!(parse_stat_parent(stat), Some(1), "the parent, second after the ')'");
        assert_eq!(parse_stat_ticks("42 (sockscale) S 1"), None, "cut short: no sample");
        assert_eq!(parse_stat_ticks(""), None);
    }

    #[test]
    fn sockstat_tcp_line_is_read_field_by_field() {
        let text = "sockets: used 16\nTCP: inuse 4 orphan 1 tw 2 alloc 5 mem 7\nUDP: inuse 0 mem 0\n";
        let t = parse_sockstat(text).expect("a TCP line");
        assert_eq!(t, SockstatTcp { inuse: 4, orphan: 1, tw: 2, alloc: 5, mem_pages: 7 });
        assert_eq!(parse_sockstat("sockets: used 16\n"), None, "no TCP line: not measured, not zero");
        assert_eq!(parse_sockstat("TCP: inuse 4 orphan\n"), None);
    }

    #[test]
    fn slabinfo_keeps_the_socket_caches_and_their_slab_counts() {
        let text = "slabinfo - version: 2.1\n\
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>\n\
TCPv6                 13     13   2496   13    8 : tunables    0    0    0 : slabdata      1      1      0\n\
TCP                   26     26   2368   13    8 : tunables    0    0    0 : slabdata      2      3      0\n\
kmalloc-64          9000   9000     64   64    1 : tunables    0    0    0 : slabdata    141    141      0\n\
filp                 696    777    192   21    1 : tunables    0    0    0 : slabdata     37     37      0\n";
        let caches = parse_slabinfo(text).expect("version 2.1");
        assert_eq!(caches.keys().collect::<Vec<_>>(), ["TCP", "TCPv6", "filp"], "kmalloc is not a socket cache");
        let tcp = caches["TCP"];
        assert_eq!((tcp.active_objs, tcp.num_objs, tcp.objsize, tcp.pagesperslab, tcp.num_slabs), (26, 26, 2368, 8, 3));
        assert_eq!(tcp.bytes(4096), 3 * 8 * 4096);
        assert_eq!(parse_slabinfo("slabinfo - version: 1.1\n"), None, "an unknown format is not measured");
    }

    #[test]
    fn samples_kernel_socket_memory_when_it_can() {
        let sampler = Sampler::start(std::process::id(), Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(150));
        let s = sampler.finish();
        assert_eq!(s.sockstat_peak.is_some(), sockstat_tcp().is_some());
        assert_eq!(s.slab_peak.is_some(), socket_slabs().is_ok());
    }
}
