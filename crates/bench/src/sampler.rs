//! Watching a server process from outside, through /proc, while a row is measured: its CPU in
//! fixed intervals (the seed prints CPU as a min–max range), its resident memory and threads
//! (largest sample), and the kernel's TCP memory (/proc/net/sockstat), the Linux counterpart
//! of the seed's non-paged pool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// CPU over each interval, as a percentage of one core.
    pub cpu_pct: Vec<f64>,
    pub rss_kib_max: u64,
    pub threads_max: u64,
    pub tcp_pages_max: u64,
}

impl Samples {
    /// The CPU range, leaving out the first interval (connections being set up) when there are
    /// enough intervals to spare one.
    pub fn cpu_range(&self) -> (f64, f64) {
        let steady = if self.cpu_pct.len() >= 3 { &self.cpu_pct[1..] } else { &self.cpu_pct[..] };
        let min = steady.iter().copied().fold(f64::INFINITY, f64::min);
        let max = steady.iter().copied().fold(0.0, f64::max);
        if steady.is_empty() {
            (0.0, 0.0)
        } else {
            (min, max)
        }
    }
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Samples>,
}

impl Sampler {
    pub fn start(pid: u32, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let ticks = sockscale_sys::clock_ticks_per_second() as f64;
            let mut samples = Samples::default();
            let mut last = (Instant::now(), cpu_ticks(pid));
            let mut next = last.0 + interval;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10).min(interval));
                sample_levels(pid, &mut samples);
                let now = Instant::now();
                if now >= next {
                    let t = cpu_ticks(pid);
                    let used = t.saturating_sub(last.1) as f64 / ticks;
                    samples.cpu_pct.push(100.0 * used / now.duration_since(last.0).as_secs_f64());
                    last = (now, t);
                    next += interval;
                }
            }
            samples
        });
        Sampler { stop, handle }
    }

    pub fn finish(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn sample_levels(pid: u32, samples: &mut Samples) {
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in status.lines() {
            let value = || line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            if line.starts_with("VmRSS:") {
                samples.rss_kib_max = samples.rss_kib_max.max(value());
            } else if line.starts_with("Threads:") {
                samples.threads_max = samples.threads_max.max(value());
            }
        }
    }
    samples.tcp_pages_max = samples.tcp_pages_max.max(tcp_pages());
}

/// User plus system CPU ticks of a process, all threads.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

/// Pages of memory the kernel's TCP stack holds, system-wide.
pub fn tcp_pages() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("TCP:"))
        .and_then(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            parts.iter().position(|p| *p == "mem").and_then(|i| parts.get(i + 1)).and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
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
        assert!(s.rss_kib_max > 0);
        assert!(s.threads_max >= 2, "this thread and the sampler");
        assert!(!s.cpu_pct.is_empty());
        let (min, max) = s.cpu_range();
        assert!(min <= max && max <= 100.0 * 64.0);
    }
}
