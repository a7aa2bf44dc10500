//! What the machine is, recorded with every run: results mean nothing without it.

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
    }
}
