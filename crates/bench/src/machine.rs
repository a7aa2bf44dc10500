//! What the machine is, recorded with every run: results mean nothing without it.

use std::collections::BTreeMap;

use crate::results::Machine;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
}

pub fn describe() -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or_else(|| "unknown".into(), |(_, v)| v.trim().to_owned());
    let memory_kib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Machine {
        cpu_model,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_kib,
        kernel: read("/proc/sys/kernel/osrelease"),
        somaxconn: read("/proc/sys/net/core/somaxconn"),
        tcp_mem_pages: read("/proc/sys/net/ipv4/tcp_mem").split_whitespace().collect::<Vec<_>>().join(" "),
        open_files_limit: sockscale_sys::soft_limit(libc::RLIMIT_NOFILE).ok().flatten().unwrap_or(0),
        io_uring: sockscale_server::io_uring_unavailable().unwrap_or_else(|| "available".into()),
        thread_limits: thread_limits(),
        max_map_count: read("/proc/sys/vm/max_map_count").parse().ok(),
    }
}

/// Every limit on the threads a server may start, that is set (a thread-per-connection model
/// meets the smallest of them).
fn thread_limits() -> BTreeMap<String, u64> {
    let mut limits = BTreeMap::new();
    if let Ok(n) = read("/proc/sys/kernel/threads-max").parse() {
        limits.insert("kernel.threads-max".to_owned(), n);
    }
    // Every thread takes a process ID, system-wide: on a machine with 24 GiB this (32,768 by
    // default) is smaller than threads-max.
    if let Ok(n) = read("/proc/sys/kernel/pid_max").parse() {
        limits.insert("kernel.pid_max".to_owned(), n);
    }
    if let Ok(Some(n)) = sockscale_sys::soft_limit(libc::RLIMIT_NPROC) {
        limits.insert("RLIMIT_NPROC".to_owned(), n);
    }
    // cgroup v2: "0::/path"; pids.max is "max" when unlimited, which does not parse.
    let cgroup = read("/proc/self/cgroup");
    if let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) {
        if let Ok(n) = read(&format!("/sys/fs/cgroup{}/pids.max", path.trim_end_matches('/'))).parse() {
            limits.insert("pids.max".to_owned(), n);
        }
    }
    limits
}
