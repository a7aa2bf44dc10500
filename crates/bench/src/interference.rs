//! What the rest of the machine did on the bench's cores while one measurement ran.
//!
//! /proc/stat counts, per core, the ticks spent in user, nice, system, interrupts and steal. Over
//! one window the busy ticks of the server's cores less the server's own CPU (its process group,
//! from /proc/PID/stat), and the busy ticks of the load generator's cores less the load's and
//! the bench's own CPU (getrusage of the reaped load processes and of the bench itself, whose
//! threads are pinned there), is what other processes took from the measurement.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use crate::results::Interference;
use crate::sampler::{cpu_ticks, group_of};

/// Past this many cores of other processes on either side (or of steal), a measurement is
/// disturbed.
///
/// Calibrated on the 2-core development machine (a firecracker VM whose kernel charges
/// interrupts to tasks), core 0 the server's, core 1 the load's: `sockscale serve --model epoll
/// --proto http --threads 1` pinned to core 0, `sockscale load http URL -c 100 -d 0.5 -t 1`
/// pinned to core 1, an InterferenceWindow around each load (the `calibrate` test below), 0.51–0.52 s windows:
/// - quiet (both cores idle before; 24 windows): others read 0.00 median, 0.06 most on the
///   server's side, 0.00–0.05 on the load's: at most 3 ticks of /proc/stat, with the server
///   near a full core and 0.7–0.9 cores of softirq on the two cores;
/// - a busy loop pinned to core 0: 0.48–0.54 on the server's side (21 windows), the load's side
///   at most 0.07; pinned to core 1: 0.49–0.52 on the load's side (12), the server's at most 0.04
///   (two cores' runnable tasks share each core about evenly);
/// - other sessions' builds starting mid-run read 0.5–0.8 cores on both sides.
///
/// Whole bench runs on the same quiet machine read more than that calibration: in a `--quick`
/// run of epoll, uring and blocking (86 measurements, 0.3–2.5 s windows, kernel threads taken
/// out) most read 0.00–0.08, four read 0.14–0.16 on one side (5 ticks of a 0.3 s window), one
/// 0.35 (blocking's maximum row; its re-run read 0.00). Before kernel threads were taken out,
/// the default profile's maximum rows read 0.24–0.34 on the load's side with nothing else
/// running (ksoftirqd and kdamond; see [`OwnCpu`]).
///
/// 0.25 is above every quiet window but that one, and half of what a single busy loop takes: a
/// process taking a quarter of a core from a model pinned to one core is flagged, the tick and
/// the kernel's own housekeeping are not.
pub const DEFAULT_DISTURBED_ABOVE_CORES: f64 = 0.25;

/// One core's line of /proc/stat, in clock ticks (USER_HZ). Guest time is not kept: the kernel
/// counts it in `user` and `nice` already.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    /// Absent before Linux 2.6 (0 then), as are `irq` and `softirq`.
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    /// Absent before Linux 2.6.11 (0 then).
    pub steal: u64,
}

impl CpuTicks {
    /// Time the core ran tasks: user, nice and system.
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system
    }

    /// Time the core served interrupts: irq and softirq.
    pub fn interrupts(&self) -> u64 {
        self.irq + self.softirq
    }

    /// What each counter grew by since `before`; a counter that went back (iowait may, on some
    /// kernels) grew by nothing.
    pub fn since(&self, before: &CpuTicks) -> CpuTicks {
        CpuTicks {
            user: self.user.saturating_sub(before.user),
            nice: self.nice.saturating_sub(before.nice),
            system: self.system.saturating_sub(before.system),
            idle: self.idle.saturating_sub(before.idle),
            iowait: self.iowait.saturating_sub(before.iowait),
            irq: self.irq.saturating_sub(before.irq),
            softirq: self.softirq.saturating_sub(before.softirq),
            steal: self.steal.saturating_sub(before.steal),
        }
    }
}

/// The per-core `cpuN` lines of a /proc/stat text, by core number. The aggregate `cpu` line is
/// left out (a core's own lines add up to it). A line may have as few as the four fields of
/// Linux 2.4 (user nice system idle): the fields it lacks are 0.
pub fn parse_proc_stat(text: &str) -> Result<BTreeMap<usize, CpuTicks>, String> {
    let mut cores = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let Some(number) = name.strip_prefix("cpu") else { continue };
        if number.is_empty() {
            continue;
        }
        let core: usize = number.parse().map_err(|_| format!("/proc/stat: a line named {name:?}"))?;
        let fields: Vec<u64> = words
            .map(|w| w.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("/proc/stat: {name}: {e}"))?;
        if fields.len() < 4 {
            return Err(format!("/proc/stat: {name} has {} fields, not the 4 or more of any kernel", fields.len()));
        }
        let field = |i: usize| fields.get(i).copied().unwrap_or(0);
        let ticks = CpuTicks {
            user: field(0),
            nice: field(1),
            system: field(2),
            idle: field(3),
            iowait: field(4),
            irq: field(5),
            softirq: field(6),
            steal: field(7),
        };
        if cores.insert(core, ticks).is_some() {
            return Err(format!("/proc/stat: {name} twice"));
        }
    }
    if cores.is_empty() {
        return Err("/proc/stat: no cpuN line".into());
    }
    Ok(cores)
}

/// How the bench's cores' counters grew over one window, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreDeltas {
    /// user + nice + system over the server's cores.
    pub server_busy: u64,
    /// user + nice + system over the load generator's cores.
    pub client_busy: u64,
    /// The server and the load share cores: both busy figures are over the union of the two
    /// sets, and the bench's own CPU on either side is taken from that one figure.
    pub shared: bool,
    /// irq + softirq over the bench's cores (the union of both sets).
    pub interrupts: u64,
    /// irq + softirq over the server's cores (over the union when `shared`).
    pub server_interrupts: u64,
    /// irq + softirq over the load generator's cores (over the union when `shared`).
    pub client_interrupts: u64,
    /// steal over every core.
    pub steal: u64,
}

/// The counters' growth from `before` to `after` over the bench's cores. A core missing from
/// either read (taken offline meanwhile) counts nothing.
pub fn core_deltas(
    before: &BTreeMap<usize, CpuTicks>,
    after: &BTreeMap<usize, CpuTicks>,
    server_cpus: &[usize],
    client_cpus: &[usize],
) -> CoreDeltas {
    let delta = |core: &usize| Some(after.get(core)?.since(before.get(core)?));
    let sum = |cores: &BTreeSet<usize>, f: fn(&CpuTicks) -> u64| -> u64 {
        cores.iter().filter_map(delta).map(|d| f(&d)).sum()
    };
    let server: BTreeSet<usize> = server_cpus.iter().copied().collect();
    let client: BTreeSet<usize> = client_cpus.iter().copied().collect();
    let union: BTreeSet<usize> = server.union(&client).copied().collect();
    let shared = !server.is_disjoint(&client);
    let (server, client) = if shared { (&union, &union) } else { (&server, &client) };
    let all: BTreeSet<usize> = after.keys().copied().collect();
    CoreDeltas {
        server_busy: sum(server, CpuTicks::busy),
        client_busy: sum(client, CpuTicks::busy),
        shared,
        interrupts: sum(&union, CpuTicks::interrupts),
        server_interrupts: sum(server, CpuTicks::interrupts),
        client_interrupts: sum(client, CpuTicks::interrupts),
        steal: sum(&all, |t| t.steal),
    }
}

/// What the bench's own processes used over the window, and the kernel's threads beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnCpu {
    /// The server's process group, utime + stime, in ticks.
    pub server_ticks: u64,
    /// The load processes reaped in the window and the bench itself, seconds.
    pub client_seconds: f64,
    /// Kernel threads (children of kthreadd: ksoftirqd, kworkers, kdamond, …) last seen on the
    /// server's cores, and on the load's, utime + stime in ticks. They are not another job:
    /// on a quiet machine they are the bench's own packets (softirq work that overflowed into
    /// ksoftirqd), its sockets' teardown and timers (kworkers), and DAMON sampling the memory
    /// it touches (kdamond) — 0.24–0.34 of a core on the load's side while 8,000 connections
    /// came and went, with nothing else running. So they are recorded apart
    /// ([`Interference::kernel_threads_cores`]) and not counted as interference.
    pub server_kernel_ticks: u64,
    pub client_kernel_ticks: u64,
}

/// The attribution itself, on plain numbers: other = busy less own (never below 0), in cores
/// over `seconds`, and the disturbed flag against `disturbed_above_cores`. `load_avg_1m` and
/// `cpu_mhz` are left for the caller.
///
/// `irq_in_task_time`: the kernel charges the interrupts a task was interrupted by to that
/// task (no CONFIG_IRQ_TIME_ACCOUNTING; see [`irq_time_in_task_time`]). /proc/stat still counts
/// those ticks as irq/softirq, not as busy, so the side's interrupts are added to its busy time
/// before the bench's own is taken out; otherwise the bench's own packet work (a third of a core
/// on loopback) would hide as much interference.
pub fn attribute(
    deltas: &CoreDeltas,
    own: &OwnCpu,
    seconds: f64,
    ticks_per_second: f64,
    irq_in_task_time: bool,
    disturbed_above_cores: f64,
) -> Interference {
    let cores = |s: f64| if seconds > 0.0 && seconds.is_finite() { s / seconds } else { 0.0 };
    let secs = |ticks: u64| ticks as f64 / ticks_per_second;
    let charged = |busy: u64, interrupts: u64| secs(if irq_in_task_time { busy + interrupts } else { busy });
    let server_own = secs(own.server_ticks) + secs(own.server_kernel_ticks);
    let client_own = own.client_seconds + secs(own.client_kernel_ticks);
    let server_charged = charged(deltas.server_busy, deltas.server_interrupts);
    let (server_cores, client_cores) = if deltas.shared {
        let other = cores((server_charged - server_own - client_own).max(0.0));
        (other, other)
    } else {
        (
            cores((server_charged - server_own).max(0.0)),
            cores((charged(deltas.client_busy, deltas.client_interrupts) - client_own).max(0.0)),
        )
    };
    let steal_cores = cores(secs(deltas.steal));
    Interference {
        seconds,
        server_cores,
        client_cores,
        softirq_cores: cores(secs(deltas.interrupts)),
        kernel_threads_cores: cores(secs(own.server_kernel_ticks + own.client_kernel_ticks)),
        steal_cores,
        load_avg_1m: None,
        cpu_mhz: None,
        disturbed: server_cores > disturbed_above_cores
            || client_cores > disturbed_above_cores
            || steal_cores > disturbed_above_cores,
    }
}

/// Whether this kernel charges interrupt time to the task it interrupted, from its build
/// configuration (/boot/config-RELEASE, else /proc/config.gz) and command line; `None` when
/// neither configuration can be read. Read once.
///
/// With CONFIG_IRQ_TIME_ACCOUNTING (most distributions' kernels) interrupt time is measured
/// apart and taken out of the tasks' time; without it (tick accounting alone, as on the
/// firecracker kernel of the development machine) a tick that lands in a softirq is counted as
/// softirq in /proc/stat and as system time of the task it interrupted. Unknown is taken as
/// accounted apart: other = busy less own, which can only read low (by the bench's own
/// interrupts) and never takes the bench's own packets for another process.
pub fn irq_time_in_task_time() -> Option<bool> {
    static FOUND: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        parse_irq_accounting(&kernel_config()?, &cmdline)
    })
}

/// The running kernel's build configuration, as text.
fn kernel_config() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    if let Ok(text) = std::fs::read_to_string(format!("/boot/config-{}", release.trim())) {
        return Some(text);
    }
    // gzip rather than a decompressor crate: the bench already runs programs, and without
    // gzip the answer is only unknown.
    let out = std::process::Command::new("gzip")
        .args(["-dc", "/proc/config.gz"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`irq_time_in_task_time`] from a kernel configuration text and the kernel command line.
pub fn parse_irq_accounting(config: &str, cmdline: &str) -> Option<bool> {
    let set = |name: &str| config.lines().any(|l| l.trim() == format!("{name}=y"));
    let named = |name: &str| config.lines().any(|l| l.contains(name));
    if set("CONFIG_VIRT_CPU_ACCOUNTING_NATIVE") {
        // Time is measured at every kernel entry and exit, interrupts apart.
        return Some(false);
    }
    if set("CONFIG_IRQ_TIME_ACCOUNTING") {
        // x86 `tsc=noirqtime` turns it off at boot.
        return Some(cmdline.split_whitespace().any(|w| w == "tsc=noirqtime"));
    }
    // Said not set (`# CONFIG_IRQ_TIME_ACCOUNTING is not set`), or tick accounting alone; a
    // text that names neither is not a configuration this can read.
    (named("CONFIG_IRQ_TIME_ACCOUNTING") || set("CONFIG_TICK_CPU_ACCOUNTING")).then_some(true)
}

/// The ticks a process group used between two reads, pid -> utime + stime: a process read at
/// both ends by its growth, one that appeared meanwhile (a `--procs` worker restarted) whole,
/// one that vanished not at all.
pub fn group_delta(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after.iter().map(|(pid, t)| before.get(pid).map_or(*t, |b| t.saturating_sub(*b))).sum()
}

/// utime + stime of `leader` and the rest of its group, each process that could be read.
fn server_group_ticks(leader: Option<u32>) -> HashMap<u32, u64> {
    let Some(leader) = leader else { return HashMap::new() };
    group_of(leader).into_iter().filter_map(|pid| Some((pid, cpu_ticks(pid)?))).collect()
}

/// Every kernel thread (kthreadd, pid 2, and its children): its utime + stime in ticks, and the
/// core it last ran on.
fn kernel_threads() -> HashMap<u32, (u64, usize)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((ppid, ticks, cpu)) = parse_thread_stat(&stat) {
            if pid == 2 || ppid == 2 {
                out.insert(pid, (ticks, cpu));
            }
        }
    }
    out
}

/// From a /proc/PID/stat line: the parent's pid, utime + stime, and the core it last ran on.
pub fn parse_thread_stat(stat: &str) -> Option<(u32, u64, usize)> {
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some((u32::try_from(num(1)?).ok()?, num(11)? + num(12)?, usize::try_from(num(36)?).ok()?))
}

/// The kernel threads' ticks over the window, on the server's cores and on the load's (by the
/// core each was last seen on; one new in the window counts whole).
fn kernel_deltas(
    before: &HashMap<u32, (u64, usize)>,
    after: &HashMap<u32, (u64, usize)>,
    server_cpus: &[usize],
    client_cpus: &[usize],
) -> (u64, u64) {
    let (mut server, mut client) = (0, 0);
    for (pid, &(ticks, cpu)) in after {
        let used = before.get(pid).map_or(ticks, |&(b, _)| ticks.saturating_sub(b));
        if server_cpus.contains(&cpu) {
            server += used;
        } else if client_cpus.contains(&cpu) {
            client += used;
        }
    }
    (server, client)
}

/// User + system CPU of `who` (RUSAGE_SELF or RUSAGE_CHILDREN), seconds.
fn rusage_seconds(who: libc::c_int) -> Option<f64> {
    // SAFETY: rusage is plain old data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: usage is a live, writable rusage; getrusage writes only inside it.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// The bench's and its reaped children's CPU so far, seconds.
fn client_own_seconds() -> Option<f64> {
    Some(rusage_seconds(libc::RUSAGE_SELF)? + rusage_seconds(libc::RUSAGE_CHILDREN)?)
}

fn read_proc_stat() -> Option<BTreeMap<usize, CpuTicks>> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?).ok()
}

/// The first field of /proc/loadavg.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok().filter(|l: &f64| l.is_finite())
}

/// `cpu MHz` by core (its `processor` line) from a /proc/cpuinfo text.
pub fn parse_cpuinfo_mhz(text: &str) -> BTreeMap<usize, f64> {
    let mut out = BTreeMap::new();
    let mut core = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        match key.trim() {
            "processor" => core = value.trim().parse::<usize>().ok(),
            "cpu MHz" => {
                if let (Some(c), Ok(mhz)) = (core, value.trim().parse::<f64>()) {
                    out.insert(c, mhz);
                }
            }
            _ => {}
        }
    }
    out
}

/// The mean current frequency of `cores`, MHz: cpufreq's scaling_cur_freq where the kernel has
/// it, else the core's `cpu MHz` in /proc/cpuinfo; `None` when neither says for any core.
fn mean_mhz(cores: &BTreeSet<usize>) -> Option<f64> {
    let mut cpuinfo: Option<BTreeMap<usize, f64>> = None;
    let mut read = Vec::new();
    for &core in cores {
        let sysfs = std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq"))
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .map(|khz| khz / 1000.0);
        let mhz = sysfs.or_else(|| {
            cpuinfo
                .get_or_insert_with(|| {
                    std::fs::read_to_string("/proc/cpuinfo").map(|t| parse_cpuinfo_mhz(&t)).unwrap_or_default()
                })
                .get(&core)
                .copied()
        });
        read.extend(mhz.filter(|m| *m > 0.0));
    }
    (!read.is_empty()).then(|| read.iter().sum::<f64>() / read.len() as f64)
}

/// One measurement's window, opened before its load starts.
#[derive(Debug)]
pub struct InterferenceWindow {
    server_cpus: Vec<usize>,
    client_cpus: Vec<usize>,
    server_leader: Option<u32>,
    server_ticks: HashMap<u32, u64>,
    client_seconds: Option<f64>,
    kernel_threads: HashMap<u32, (u64, usize)>,
    stat: Option<BTreeMap<usize, CpuTicks>>,
    started: Instant,
}

impl InterferenceWindow {
    /// Before the load starts: the server group's ticks, the bench's and its reaped children's
    /// CPU, then /proc/stat and the clock. The bench's own reads lie outside the window, so its
    /// walk of /proc is not taken for another process.
    pub fn start(server_cpus: &[usize], client_cpus: &[usize], server_leader: Option<u32>) -> InterferenceWindow {
        let server_ticks = server_group_ticks(server_leader);
        let kernel_threads = kernel_threads();
        let client_seconds = client_own_seconds();
        let stat = read_proc_stat();
        InterferenceWindow {
            server_cpus: server_cpus.to_vec(),
            client_cpus: client_cpus.to_vec(),
            server_leader,
            server_ticks,
            client_seconds,
            kernel_threads,
            stat,
            started: Instant::now(),
        }
    }

    /// After the load process has been reaped, while the server still runs. `None` when
    /// /proc/stat could not be read at either end.
    pub fn finish(self, disturbed_above_cores: f64) -> Option<Interference> {
        let (deltas, own, seconds, cores) = self.finish_counts()?;
        let ticks_per_second = sockscale_sys::clock_ticks_per_second() as f64;
        let irq_in_task_time = irq_time_in_task_time().unwrap_or(false);
        let mut out = attribute(&deltas, &own, seconds, ticks_per_second, irq_in_task_time, disturbed_above_cores);
        out.load_avg_1m = std::fs::read_to_string("/proc/loadavg").ok().and_then(|t| parse_loadavg(&t));
        out.cpu_mhz = mean_mhz(&cores);
        Some(out)
    }

    /// The window's counts before attribution, and the bench's cores.
    fn finish_counts(self) -> Option<(CoreDeltas, OwnCpu, f64, BTreeSet<usize>)> {
        let seconds = self.started.elapsed().as_secs_f64();
        let after = read_proc_stat()?;
        let before = self.stat?;
        let client_after = client_own_seconds();
        let server_after = server_group_ticks(self.server_leader);
        let (server_kernel_ticks, client_kernel_ticks) =
            kernel_deltas(&self.kernel_threads, &kernel_threads(), &self.server_cpus, &self.client_cpus);
        let own = OwnCpu {
            server_kernel_ticks,
            client_kernel_ticks,
            server_ticks: group_delta(&self.server_ticks, &server_after),
            // Unreadable (getrusage does not fail on a live process): nothing is taken out,
            // so the figure errs towards disturbed.
            client_seconds: match (self.client_seconds, client_after) {
                (Some(b), Some(a)) => (a - b).max(0.0),
                _ => 0.0,
            },
        };
        let deltas = core_deltas(&before, &after, &self.server_cpus, &self.client_cpus);
        let cores: BTreeSet<usize> = self.server_cpus.iter().chain(&self.client_cpus).copied().collect();
        Some((deltas, own, seconds, cores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel thread's ticks (ksoftirqd doing the bench's own packets) are taken out of the
    /// side it ran on and recorded apart; a user process beside them is still interference.
    #[test]
    fn kernel_threads_are_recorded_apart_not_as_interference() {
        let deltas = CoreDeltas { server_busy: 50, client_busy: 80, ..CoreDeltas::default() };
        let own = OwnCpu { server_ticks: 50, client_seconds: 0.5, client_kernel_ticks: 30, ..OwnCpu::default() };
        let i = attribute(&deltas, &own, 1.0, 100.0, false, 0.15);
        assert!(i.client_cores.abs() < 1e-9 && !i.disturbed, "{i:?}");
        assert!((i.kernel_threads_cores - 0.3).abs() < 1e-9, "{i:?}");
        let hog = CoreDeltas { server_busy: 100, ..deltas };
        let i = attribute(&hog, &own, 1.0, 100.0, false, 0.15);
        assert!((i.server_cores - 0.5).abs() < 1e-9 && i.disturbed, "{i:?}");
    }

    #[test]
    fn thread_stat_fields() {
        let ksoftirqd = "22 (ksoftirqd/1) S 2 0 0 0 -1 69238848 0 0 0 0 48 219 0 0 20 0 1 0 12 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert_eq!(parse_thread_stat(ksoftirqd), Some((2, 267, 1)));
        let odd = "7 (a) b (c)) R 1 0 0 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 12 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert_eq!(parse_thread_stat(odd), Some((1, 11, 0)));
        assert_eq!(parse_thread_stat("garbage"), None);
    }

    const STAT_NEW: &str = "\
cpu  58355 0 13099 71285 801 0 360 17 0 0
cpu0 28445 0 6192 36937 224 0 135 5 0 0
cpu1 29909 0 6906 34348 576 0 224 11 0 0
intr 500959 0 0 0
ctxt 562349
btime 1700000000
processes 16000
procs_running 2
";

    #[test]
    fn parses_a_current_kernel() {
        let cores = parse_proc_stat(STAT_NEW).unwrap();
        assert_eq!(cores.len(), 2);
        let c1 = cores[&1];
        assert_eq!(
            c1,
            CpuTicks { user: 29909, nice: 0, system: 6906, idle: 34348, iowait: 576, irq: 0, softirq: 224, steal: 11 }
        );
        assert_eq!(c1.busy(), 29909 + 6906);
        assert_eq!(c1.interrupts(), 224);
    }

    #[test]
    fn parses_old_kernels_with_fewer_fields() {
        // Linux 2.4: four fields; 2.6.0: seven; 2.6.11: eight (steal).
        let text = "cpu  10 20 30 40\ncpu0 1 2 3 4\ncpu1 5 6 7 8 9 10 11\ncpu2 1 1 1 1 1 1 1 7\n";
        let cores = parse_proc_stat(text).unwrap();
        assert_eq!(cores[&0], CpuTicks { user: 1, nice: 2, system: 3, idle: 4, ..Default::default() });
        assert_eq!(cores[&1].softirq, 11);
        assert_eq!(cores[&1].steal, 0);
        assert_eq!(cores[&2].steal, 7);
    }

    #[test]
    fn parses_sparse_core_numbers() {
        // An offline core has no line: cores 0 and 3 only.
        let cores = parse_proc_stat("cpu 2 0 0 2\ncpu0 1 0 0 1\ncpu3 1 0 0 1\n").unwrap();
        assert_eq!(cores.keys().copied().collect::<Vec<_>>(), vec![0, 3]);
    }

    #[test]
    fn rejects_what_is_not_proc_stat() {
        assert!(parse_proc_stat("").is_err());
        assert!(parse_proc_stat("cpu 1 2 3 4\n").is_err(), "the aggregate alone names no core");
        assert!(parse_proc_stat("cpu0 1 2 3\n").is_err(), "three fields");
        assert!(parse_proc_stat("cpu0 1 2 x 4\n").is_err());
        assert!(parse_proc_stat("cpuX 1 2 3 4\n").is_err());
        assert!(parse_proc_stat("cpu0 1 2 3 4\ncpu0 1 2 3 4\n").is_err());
    }

    fn ticks(user: u64, system: u64, softirq: u64, steal: u64) -> CpuTicks {
        CpuTicks { user, system, softirq, steal, ..Default::default() }
    }

    #[test]
    fn deltas_per_side_on_separate_cores() {
        let before = BTreeMap::from([(0, ticks(100, 50, 10, 1)), (1, ticks(200, 20, 5, 2)), (2, ticks(0, 0, 0, 0))]);
        let after = BTreeMap::from([(0, ticks(150, 70, 30, 3)), (1, ticks(230, 40, 6, 2)), (2, ticks(90, 0, 0, 5))]);
        let d = core_deltas(&before, &after, &[0], &[1]);
        assert_eq!(
            d,
            CoreDeltas {
                server_busy: 70,
                client_busy: 50,
                shared: false,
                interrupts: 21,
                server_interrupts: 20,
                client_interrupts: 1,
                // Steal over every core, the bench's or not.
                steal: 2 + 5,
            }
        );
    }

    #[test]
    fn a_core_gone_offline_counts_nothing() {
        let before = BTreeMap::from([(0, ticks(100, 0, 0, 0)), (1, ticks(100, 0, 0, 0))]);
        let after = BTreeMap::from([(0, ticks(120, 0, 0, 0))]);
        let d = core_deltas(&before, &after, &[0, 1], &[]);
        assert_eq!(d.server_busy, 20);
    }

    #[test]
    fn overlapping_sets_are_one_set() {
        // A 1-core machine: server and load both on core 0.
        let before = BTreeMap::from([(0, ticks(100, 0, 0, 0)), (1, ticks(0, 0, 0, 0))]);
        let after = BTreeMap::from([(0, ticks(190, 0, 4, 0)), (1, ticks(50, 0, 0, 0))]);
        let d = core_deltas(&before, &after, &[0], &[0]);
        assert!(d.shared);
        assert_eq!((d.server_busy, d.client_busy, d.interrupts), (90, 90, 4));
        assert_eq!((d.server_interrupts, d.client_interrupts), (4, 4));
        // Partly overlapping: the union of [0, 1] and [1].
        let d = core_deltas(&before, &after, &[0, 1], &[1]);
        assert!(d.shared);
        assert_eq!((d.server_busy, d.client_busy), (140, 140));
        // 90 busy ticks = 0.9 s over 1 s; the server used 0.5 s, the load and bench 0.3 s:
        // 0.1 cores of others, reported on both sides.
        let d = core_deltas(&before, &after, &[0], &[0]);
        let own = OwnCpu { server_ticks: 50, client_seconds: 0.3, ..OwnCpu::default() };
        let i = attribute(&d, &own, 1.0, 100.0, false, 0.05);
        assert!((i.server_cores - 0.1).abs() < 1e-9, "{i:?}");
        assert_eq!(i.server_cores, i.client_cores);
        assert!(i.disturbed);
    }

    #[test]
    fn attribution_takes_the_bench_out() {
        let d = CoreDeltas { server_busy: 100, client_busy: 80, interrupts: 20, steal: 10, ..Default::default() };
        // 0.5 s window at 100 ticks/s. Server side: 1.0 s busy, the server's 0.7 s -> 0.3 s of
        // others = 0.6 cores. Load side: 0.8 s busy, load and bench 0.75 s -> 0.1 cores.
        let own = OwnCpu { server_ticks: 70, client_seconds: 0.75, ..OwnCpu::default() };
        let i = attribute(&d, &own, 0.5, 100.0, false, 0.2);
        assert!((i.server_cores - 0.6).abs() < 1e-9, "{i:?}");
        assert!((i.client_cores - 0.1).abs() < 1e-9, "{i:?}");
        assert!((i.softirq_cores - 0.4).abs() < 1e-9, "{i:?}");
        assert!((i.steal_cores - 0.2).abs() < 1e-9, "{i:?}");
        assert_eq!(i.seconds, 0.5);
        assert!(i.disturbed);
        assert_eq!((i.load_avg_1m, i.cpu_mhz), (None, None));
    }

    #[test]
    fn own_cpu_above_busy_is_no_negative_interference() {
        // The bench's own CPU can exceed the cores' busy ticks (tick sampling, or softirq time
        // charged to the task but counted apart in /proc/stat): other is 0, not below.
        let d = CoreDeltas { server_busy: 40, client_busy: 10, ..Default::default() };
        let own = OwnCpu { server_ticks: 55, client_seconds: 0.3, ..OwnCpu::default() };
        let i = attribute(&d, &own, 1.0, 100.0, false, 0.2);
        assert_eq!((i.server_cores, i.client_cores), (0.0, 0.0));
        assert!(!i.disturbed);
    }

    #[test]
    fn disturbed_by_either_side_or_steal_and_only_above_the_threshold() {
        let own = OwnCpu::default();
        let at = |server: u64, client: u64, steal: u64| {
            let d = CoreDeltas { server_busy: server, client_busy: client, steal, ..Default::default() };
            attribute(&d, &own, 1.0, 100.0, false, 0.2).disturbed
        };
        assert!(!at(20, 20, 20), "at the threshold is not past it");
        assert!(at(21, 0, 0));
        assert!(at(0, 21, 0));
        assert!(at(0, 0, 21));
        // Interrupts alone never disturb.
        let d = CoreDeltas { interrupts: 500, ..Default::default() };
        assert!(!attribute(&d, &own, 1.0, 100.0, false, 0.2).disturbed);
    }

    #[test]
    fn interrupts_charged_to_tasks_are_added_back_before_own_is_taken_out() {
        // A quiet window on a kernel without IRQ time accounting (figures from the development
        // machine): the server's 49 ticks include the 20 of softirq /proc/stat counts apart.
        let d = CoreDeltas {
            server_busy: 29,
            client_busy: 33,
            interrupts: 37,
            server_interrupts: 20,
            client_interrupts: 17,
            ..Default::default()
        };
        let own = OwnCpu { server_ticks: 49, client_seconds: 0.5, ..OwnCpu::default() };
        let i = attribute(&d, &own, 0.5, 100.0, true, 0.2);
        assert_eq!((i.server_cores, i.client_cores), (0.0, 0.0), "{i:?}");
        // A hog beside it: 25 more busy ticks on the server's core are 0.5 cores of others;
        // without adding the interrupts back they would read 0.1.
        let d = CoreDeltas { server_busy: 54, ..d };
        let i = attribute(&d, &own, 0.5, 100.0, true, 0.2);
        assert!((i.server_cores - 0.5).abs() < 1e-9, "{i:?}");
        assert!(i.disturbed);
        let i = attribute(&d, &own, 0.5, 100.0, false, 0.2);
        assert!((i.server_cores - 0.1).abs() < 1e-9, "{i:?}");
        // Interrupts are recorded beside either way.
        assert!((i.softirq_cores - 0.74).abs() < 1e-9, "{i:?}");
    }

    #[test]
    fn reads_the_irq_accounting_of_a_kernel_config() {
        let tick_only = "CONFIG_TICK_CPU_ACCOUNTING=y\n# CONFIG_VIRT_CPU_ACCOUNTING_GEN is not set\n# CONFIG_IRQ_TIME_ACCOUNTING is not set\n";
        assert_eq!(parse_irq_accounting(tick_only, ""), Some(true));
        let distro = "CONFIG_TICK_CPU_ACCOUNTING=y\nCONFIG_IRQ_TIME_ACCOUNTING=y\n";
        assert_eq!(parse_irq_accounting(distro, "ro quiet"), Some(false));
        assert_eq!(parse_irq_accounting(distro, "ro tsc=noirqtime quiet"), Some(true));
        assert_eq!(parse_irq_accounting("CONFIG_VIRT_CPU_ACCOUNTING_NATIVE=y\n", ""), Some(false));
        assert_eq!(parse_irq_accounting("", ""), None);
        assert_eq!(parse_irq_accounting("CONFIG_HZ=250\n", ""), None);
    }

    #[test]
    fn an_empty_window_reads_nothing() {
        let d = CoreDeltas { server_busy: 5, ..Default::default() };
        let i = attribute(&d, &OwnCpu::default(), 0.0, 100.0, false, 0.2);
        assert_eq!(i.server_cores, 0.0);
        assert!(!i.disturbed);
    }

    #[test]
    fn server_group_counts_new_processes_whole_and_gone_ones_not() {
        let before = HashMap::from([(10, 100), (11, 50), (12, 30)]);
        // 11 exited; 13 started during the window; 10 grew by 20, 12 by 5.
        let after = HashMap::from([(10, 120), (12, 35), (13, 8)]);
        assert_eq!(group_delta(&before, &after), 20 + 5 + 8);
        // A pid whose counter went back (reused by a new process) is not negative.
        assert_eq!(group_delta(&HashMap::from([(10, 100)]), &HashMap::from([(10, 3)])), 0);
    }

    #[test]
    fn parses_loadavg_and_cpuinfo() {
        assert_eq!(parse_loadavg("1.18 1.28 0.72 5/102 14920\n"), Some(1.18));
        assert_eq!(parse_loadavg(""), None);
        let info = "processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2596.124\n\nprocessor\t: 1\ncpu MHz\t\t: 1200.5\n\nprocessor\t: 2\n";
        let mhz = parse_cpuinfo_mhz(info);
        assert_eq!(mhz.get(&0), Some(&2596.124));
        assert_eq!(mhz.get(&1), Some(&1200.5));
        assert_eq!(mhz.get(&2), None);
    }

    #[test]
    fn reads_this_machine() {
        // /proc/stat is there on any Linux this runs on; its cores are the ones it lists.
        let stat = read_proc_stat().expect("/proc/stat");
        let core = *stat.keys().next().unwrap();
        let watch = InterferenceWindow::start(&[core], &[], None);
        let i = watch.finish(DEFAULT_DISTURBED_ABOVE_CORES).expect("a window");
        assert!(i.seconds >= 0.0 && i.server_cores >= 0.0 && i.client_cores == 0.0, "{i:?}");
    }

    /// A busy loop pinned to `core`: through pre_exec, else taskset; `None` (and why) when
    /// neither starts it.
    fn spawn_hog(core: usize) -> Result<std::process::Child, String> {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "while :; do :; done"]);
        let cpus = vec![core];
        // SAFETY: runs in the child between fork and exec; pin_to_cpus is one
        // sched_setaffinity call on a set built before the fork.
        unsafe {
            cmd.pre_exec(move || sockscale_sys::pin_to_cpus(&cpus));
        }
        match cmd.spawn() {
            Ok(child) => Ok(child),
            Err(pinned) => std::process::Command::new("taskset")
                .args(["-c", &core.to_string(), "sh", "-c", "while :; do :; done"])
                .spawn()
                .map_err(|e| format!("sched_setaffinity: {pinned}; taskset: {e}")),
        }
    }

    #[test]
    fn a_busy_loop_on_the_server_core_is_interference() {
        let Some(stat) = read_proc_stat() else {
            println!("skipped: /proc/stat is not readable here");
            return;
        };
        let core = *stat.keys().next_back().unwrap();
        let mut hog = match spawn_hog(core) {
            Ok(child) => child,
            Err(why) => {
                println!("skipped: cannot start a busy loop pinned to core {core}: {why}");
                return;
            }
        };
        // Let it get going before the window opens.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let watch = InterferenceWindow::start(&[core], &[], None);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let i = watch.finish(DEFAULT_DISTURBED_ABOVE_CORES);
        let _ = hog.kill();
        let _ = hog.wait();
        let i = i.expect("/proc/stat was readable at the start");
        // Alone the hog takes the whole core; against one other runnable task, half of it.
        assert!(i.server_cores > 0.3, "{i:?}");
        assert!(i.disturbed, "{i:?}");
        assert!((0.45..1.0).contains(&i.seconds), "{i:?}");
    }

    /// The threshold's calibration (run by hand, release build first):
    /// `cargo build --release -p sockscale && cargo test -p sockscale-bench --lib
    /// interference::tests::calibrate -- --ignored --nocapture`. A server pinned to core 0, the
    /// load pinned to core 1, the InterferenceWindow around each load; quiet, then with a busy loop on core 0,
    /// then on core 1. Prints every window; asserts nothing about the machine.
    #[test]
    #[ignore]
    fn calibrate() {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let rounds: usize = std::env::var("CALIBRATE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(12);
        let exe = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/sockscale");
        assert!(exe.exists(), "build {} first", exe.display());
        // The bench's threads run on the load's core, as the bench pins them.
        sockscale_sys::pin_to_cpus(&[1]).expect("pin to core 1");
        let pinned = |program: &std::path::Path, args: &[&str], core: usize| {
            let mut cmd = Command::new(program);
            cmd.args(args).stdin(Stdio::null()).env("RUST_LOG", "error").process_group(0);
            // SAFETY: between fork and exec; one sched_setaffinity call.
            unsafe {
                cmd.pre_exec(move || sockscale_sys::pin_to_cpus(&[core]));
            }
            cmd
        };
        let mut server = pinned(
            &exe,
            &["serve", "--model", "epoll", "--proto", "http", "--listen", "127.0.0.1:0", "--threads", "1"],
            0,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
        let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("server output").expect("server line");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.rsplit(':').next().unwrap().trim().parse::<u16>().unwrap();
            }
        };
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        let url = format!("http://127.0.0.1:{port}/");
        let tps = sockscale_sys::clock_ticks_per_second() as f64;
        // CALIBRATE_ONLY=quiet|0|1: one scenario (the quiet one, or a hog on that core).
        let only = std::env::var("CALIBRATE_ONLY").ok();
        for (scenario, hog_core) in [("quiet", None), ("hog on core 0", Some(0)), ("hog on core 1", Some(1))] {
            let name = hog_core.map_or("quiet".to_string(), |c: usize| c.to_string());
            if only.as_ref().is_some_and(|o| *o != name) {
                continue;
            }
            let mut hog = hog_core.map(|c| spawn_hog(c).expect("hog"));
            std::thread::sleep(std::time::Duration::from_millis(100));
            let (mut server_side, mut client_side) = (Vec::new(), Vec::new());
            for round in 1..=rounds {
                let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
                let watch = InterferenceWindow::start(&[0], &[1], Some(server.id()));
                let status = pinned(&exe, &["load", "http", &url, "-c", "100", "-d", "0.5", "-t", "1"], 1)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("load");
                let (d, own, seconds, _) = watch.finish_counts().expect("/proc/stat");
                let (irq0, irq1) = (d.server_interrupts, d.client_interrupts);
                let irq_in_task_time = irq_time_in_task_time().unwrap_or(false);
                let i = attribute(&d, &own, seconds, tps, irq_in_task_time, DEFAULT_DISTURBED_ABOVE_CORES);
                // busy less own without the interrupts added back, for comparison.
                let raw = |busy: u64, own: f64| (busy as f64 / tps - own) / seconds;
                println!(
                    "{scenario:14} {round:2} load {status} {seconds:.3}s server {:.3} (raw {:+.3}, busy {} own {} irq {irq0}) client {:.3} (raw {:+.3}, busy {} own {:.2}s irq {irq1}) softirq {:.3} steal {:.3} loadavg {}",
                    i.server_cores,
                    raw(d.server_busy, own.server_ticks as f64 / tps),
                    d.server_busy,
                    own.server_ticks,
                    i.client_cores,
                    raw(d.client_busy, own.client_seconds),
                    d.client_busy,
                    own.client_seconds,
                    i.softirq_cores,
                    i.steal_cores,
                    loadavg.split_whitespace().next().unwrap_or("?"),
                );
                server_side.push(i.server_cores);
                client_side.push(i.client_cores);
            }
            if let Some(h) = hog.as_mut() {
                let _ = h.kill();
                let _ = h.wait();
            }
            for (side, v) in [("server", &mut server_side), ("client", &mut client_side)] {
                v.sort_by(f64::total_cmp);
                println!(
                    "{scenario}: {side} cores min {:.3} median {:.3} max {:.3}",
                    v[0],
                    v[v.len() / 2],
                    v[v.len() - 1]
                );
            }
        }
        let _ = server.kill();
        let _ = server.wait();
    }
}
