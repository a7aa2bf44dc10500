//! What this machine lets one run hold, checked before the run starts: open files per
//! process (RLIMIT_NOFILE) and local ports per source address (the ephemeral-port range).
//!
//! Past either limit connects fail one by one (EMFILE, EADDRNOTAVAIL) and the run would only
//! report a count of failures; checked first, the user gets the reason and the fix.

use std::net::{IpAddr, SocketAddr};

use sockscale_sys::syscall;

/// Descriptors a load process holds besides its connections: stdio, one epoll per thread,
/// the `--json` file, the reachability probe, and some room for the runtime.
pub fn overhead(threads: usize) -> u64 {
    16 + 2 * threads as u64
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "-c {asked}: {per_process} connections in one process need {needed} open files, but the open-files limit \
         (RLIMIT_NOFILE) is {limit}; use --procs {procs_fit}{raise}"
    )]
    OpenFiles { asked: u64, per_process: u64, needed: u64, limit: u64, procs_fit: u64, raise: &'static str },
    #[error(
        "-c {asked} to {target} needs more local ports than there are: {ports} ephemeral ports \
         (net.ipv4.ip_local_port_range {low}-{high}) for each of {sources} source address(es); {fix}"
    )]
    Ports { asked: u64, target: SocketAddr, ports: u64, low: u16, high: u16, sources: usize, fix: String },
}

/// Raise the open-files soft limit to the hard limit, as far as allowed; returns the soft
/// limit in force afterwards (None: unlimited).
pub fn raise_open_files() -> std::io::Result<Option<u64>> {
    // SAFETY: rlimit is plain old data.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: limit is a valid, writable rlimit.
    syscall!(getrlimit(libc::RLIMIT_NOFILE, &mut limit))?;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: raised is a valid rlimit; a refusal leaves the limit as it was.
        if syscall!(setrlimit(libc::RLIMIT_NOFILE, &raised)).is_ok() {
            limit = raised;
        }
    }
    Ok((limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur))
}

/// The ephemeral-port range, from /proc/sys/net/ipv4/ip_local_port_range (it applies to IPv6
/// too); None when it cannot be read.
pub fn local_port_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut parts = text.split_whitespace().map(str::parse::<u16>);
    match (parts.next(), parts.next()) {
        (Some(Ok(low)), Some(Ok(high))) if low <= high => Some((low, high)),
        _ => None,
    }
}

/// One run's demands.
#[derive(Debug, Clone)]
pub struct Demand {
    /// Connections (UDP: sockets) of the whole run, all processes together.
    pub total_conns: u64,
    /// The most any one process holds.
    pub per_process: u64,
    pub threads: usize,
    /// The TCP target, whose ephemeral ports are checked; None for a Unix socket, which takes
    /// none.
    pub target: Option<SocketAddr>,
    /// `--source` addresses; empty: the one the route picks.
    pub sources: Vec<IpAddr>,
}

/// Check `demand` against an open-files limit (None: unlimited) and a port range (None: not
/// known, not checked).
pub fn check(demand: &Demand, open_files: Option<u64>, ports: Option<(u16, u16)>) -> Result<(), LimitError> {
    if let Some(limit) = open_files {
        let overhead = overhead(demand.threads);
        let needed = demand.per_process + overhead;
        if needed > limit {
            let fit = limit.saturating_sub(overhead).max(1);
            return Err(LimitError::OpenFiles {
                asked: demand.total_conns,
                per_process: demand.per_process,
                needed,
                limit,
                procs_fit: demand.total_conns.div_ceil(fit),
                raise: if limit < 1 << 20 { " (or raise the hard limit: ulimit -Hn)" } else { "" },
            });
        }
    }
    if let (Some((low, high)), Some(target)) = (ports, demand.target) {
        let per_source = u64::from(high - low) + 1;
        let sources = demand.sources.len().max(1);
        if demand.total_conns > per_source * sources as u64 {
            let needed = demand.total_conns.div_ceil(per_source);
            let fix = match target.ip() {
                IpAddr::V4(ip) if ip.is_loopback() && needed <= 254 => {
                    format!("add --source 127.0.0.1-127.0.0.{needed} (every 127.x address is this machine's)")
                }
                _ => format!(
                    "give --source {needed} addresses of this machine that reach {} (a list, or an IPv4 range)",
                    target.ip()
                ),
            };
            return Err(LimitError::Ports {
                asked: demand.total_conns,
                target,
                ports: per_source,
                low,
                high,
                sources,
                fix,
            });
        }
    }
    Ok(())
}

/// The most TCP connections one source address should hold to one target with connect()
/// staying cheap: half the ephemeral range, less a tenth for other users of the ports.
///
/// Why half: connect() with no port bound (or IP_BIND_ADDRESS_NO_PORT) picks one by walking the
/// range from a random offset, ports of one parity first, checking each candidate's 4-tuple.
/// While that half has room the walk is short; once it is full every connect walks all of it
/// before trying the other half. Measured here (50,000 connections, 5,000 new a second): on 2
/// source addresses (25,000 each) the load generator spent 17.8 s of system time in
/// `__inet_check_established` and reached 37,850 connections in 16 s; on 4 (12,500 each,
/// below the 14,116 ports of a half) it reached all 50,000 on 6.3 s of system time.
pub fn cheap_conns_per_source((low, high): (u16, u16)) -> u64 {
    let ports = u64::from(high - low) + 1;
    (ports / 2 * 9 / 10).max(1)
}

/// Source addresses that keep `conns` TCP connections to one target cheap to open.
pub fn cheap_sources(conns: u64, ports: (u16, u16)) -> u64 {
    conns.div_ceil(cheap_conns_per_source(ports)).max(1)
}

/// A warning when `demand` puts more TCP connections on each source address than
/// [`cheap_conns_per_source`]: the run works, but connect() grows costly.
pub fn crowded_ports(demand: &Demand, ports: Option<(u16, u16)>) -> Option<String> {
    let ports = ports?;
    let target = demand.target?;
    let sources = demand.sources.len().max(1) as u64;
    let cheap = cheap_conns_per_source(ports);
    let per_source = demand.total_conns.div_ceil(sources);
    if per_source <= cheap {
        return None;
    }
    let needed = cheap_sources(demand.total_conns, ports);
    let fix = match target.ip() {
        IpAddr::V4(ip) if ip.is_loopback() && needed <= 254 => format!("--source 127.0.0.1-127.0.0.{needed}"),
        _ => format!("--source with {needed} addresses"),
    };
    Some(format!(
        "{per_source} connections per source address fill more than half of the ephemeral ports \
         (net.ipv4.ip_local_port_range {}-{}), where each connect() searches the range and the load \
         generator, not the target, becomes the bottleneck; use {fix}",
        ports.0, ports.1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(total: u64, procs: u64) -> Demand {
        Demand {
            total_conns: total,
            per_process: total.div_ceil(procs),
            threads: 2,
            target: Some("127.0.0.1:8080".parse().unwrap()),
            sources: Vec::new(),
        }
    }

    #[test]
    fn open_files_name_the_limit_and_the_procs_that_fit() {
        let err = check(&demand(100_000, 1), Some(20_000), None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("-c 100000") && text.contains("RLIMIT_NOFILE) is 20000"), "{text}");
        // 20,000 less 20 of overhead per process: 6 processes hold 100,000.
        assert!(text.contains("--procs 6"), "{text}");
        assert_eq!(check(&demand(100_000, 6), Some(20_000), None), Ok(()));
        assert_eq!(check(&demand(100_000, 1), None, None), Ok(()), "unlimited");
    }

    #[test]
    fn ports_name_the_range_and_the_sources_that_fit() {
        let range = Some((32768, 60999));
        let text = check(&demand(60_000, 4), None, range).unwrap_err().to_string();
        assert!(text.contains("28232 ephemeral ports") && text.contains("32768-60999"), "{text}");
        assert!(text.contains("--source 127.0.0.1-127.0.0.3"), "{text}");
        let mut d = demand(60_000, 4);
        d.sources = (1..=3).map(|i| IpAddr::from([127, 0, 0, i])).collect();
        assert_eq!(check(&d, None, range), Ok(()));
        d.target = Some("10.1.2.3:80".parse().unwrap());
        d.sources.truncate(1);
        let text = check(&d, None, range).unwrap_err().to_string();
        assert!(text.contains("3 addresses of this machine that reach 10.1.2.3"), "{text}");
    }

    #[test]
    fn more_than_half_the_ports_per_source_is_crowded() {
        let range = (32768, 60999);
        assert_eq!(cheap_conns_per_source(range), 12_704);
        assert_eq!(cheap_sources(50_000, range), 4);
        assert_eq!(cheap_sources(1, range), 1);
        let mut d = demand(12_704, 12_704);
        assert_eq!(crowded_ports(&d, Some(range)), None);
        assert_eq!(crowded_ports(&d, None), None);
        d.total_conns = 25_000;
        let text = crowded_ports(&d, Some(range)).expect("25,000 on one source is crowded");
        assert!(
            text.contains("25000 connections per source") && text.contains("--source 127.0.0.1-127.0.0.2"),
            "{text}"
        );
        d.sources = vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()];
        assert_eq!(crowded_ports(&d, Some(range)), None);
    }

    /// A Unix socket takes no ephemeral port: no port check, no warning, only open files.
    #[test]
    fn a_unix_socket_needs_no_ports() {
        let range = Some((32768, 60999));
        let mut d = demand(100_000, 1);
        d.target = None;
        assert_eq!(check(&d, None, range), Ok(()));
        assert_eq!(crowded_ports(&d, range), None);
        assert!(check(&d, Some(20_000), range).is_err(), "open files still count");
    }
}
