//! Counters every model keeps, readable at any time from any thread.
//!
//! Counters are sharded: each worker increments its own cache line, so counting costs an
//! uncontended relaxed add. Readers sum the shards. The current-connection count is the one
//! global counter, because `--max-conns` must compare against the whole process.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use crate::policy::{shed_choice, AbortStorm, StormConfig, StormEvent};

use crate::policy::{CloseReason, Limit};

/// One worker's counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    closed: [AtomicU64; CloseReason::ALL.len()],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    datagrams_in: AtomicU64,
    datagrams_out: AtomicU64,
    datagrams_dropped: AtomicU64,
    datagrams_overflowed: AtomicU64,
    buffers_in_use: AtomicI64,
}

impl Counters {
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Relaxed);
    }
    pub fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }
    pub fn closed(&self, reason: CloseReason) {
        self.closed[reason as usize].fetch_add(1, Relaxed);
    }
    pub fn bytes_in(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Relaxed);
    }
    pub fn bytes_out(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Relaxed);
    }
    pub fn datagrams(&self, received: usize, sent: usize, dropped: usize) {
        self.datagrams_in.fetch_add(received as u64, Relaxed);
        self.datagrams_out.fetch_add(sent as u64, Relaxed);
        self.datagrams_dropped.fetch_add(dropped as u64, Relaxed);
    }
    /// Datagrams the kernel dropped before the server saw them (receive queue full).
    pub fn datagrams_overflowed(&self, n: u64) {
        self.datagrams_overflowed.fetch_add(n, Relaxed);
    }
    pub(crate) fn buffer_taken(&self) {
        self.buffers_in_use.fetch_add(1, Relaxed);
    }
    pub(crate) fn buffer_returned(&self) {
        self.buffers_in_use.fetch_sub(1, Relaxed);
    }
}

#[derive(Debug)]
pub struct Stats {
    shards: Box<[Counters]>,
    current: AtomicUsize,
    /// Indexed by `Limit as usize`; rare events, so not sharded.
    limits: [AtomicU64; Limit::ALL.len()],
    /// `--abort-storm`: the process's one detector, fed by every close.
    storm: Option<StormGate>,
    /// `--active-set`: connections waiting for a place now, and places given by rotation.
    waiting: AtomicI64,
    rotations: AtomicU64,
}

/// `--abort-storm-shed`: every open connection's descriptor in accept order, so that the
/// newest can be shed. Engines enlist a connection once it is theirs and delist it before its
/// descriptor closes, so every descriptor here is open and is the connection enlisted (a
/// shed holds the lock while it shuts descriptors down; a close waits for it).
#[derive(Debug, Default)]
struct Roster {
    next: u64,
    by_order: BTreeMap<u64, RawFd>,
    by_fd: HashMap<RawFd, u64>,
    /// Listed connections waiting for a place in the active set: not shed. They carry no
    /// traffic, and reading nothing, their engine would not see the shed until their turn.
    waiting: std::collections::HashSet<RawFd>,
}

/// The abort-storm policy shared by every worker: aborts are rare, so a lock; acceptors read
/// one flag while no storm is on.
#[derive(Debug)]
struct StormGate {
    policy: Mutex<AbortStorm>,
    paused: AtomicBool,
    pauses: AtomicU64,
    resumes: AtomicU64,
    /// Connections closed to bring the congestion down (`--abort-storm-shed`).
    shed: AtomicU64,
    /// With `--abort-storm-shed`.
    roster: Option<Mutex<Roster>>,
}

impl StormGate {
    fn record(&self, event: Option<StormEvent>) {
        match event {
            Some(StormEvent::Paused { aborts, open, resume_below, shed }) => {
                self.paused.store(true, Relaxed);
                self.pauses.fetch_add(1, Relaxed);
                tracing::warn!(aborts, open, resume_below, "abort storm: {aborts} connections aborted within a second; accepting pauses until fewer than {resume_below} are established");
                if shed {
                    let done = self.shed_newest(resume_below);
                    self.shed.fetch_add(done as u64, Relaxed);
                    if done > 0 {
                        tracing::warn!(
                            shed = done,
                            "abort storm: closing the {done} newest connections to bring the congestion down"
                        );
                    }
                }
            }
            Some(StormEvent::Resumed { open }) => {
                self.paused.store(false, Relaxed);
                self.resumes.fetch_add(1, Relaxed);
                tracing::info!(open, "abort storm over: accepting again");
            }
            None => {}
        }
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, AbortStorm> {
        self.policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn roster(&self) -> Option<std::sync::MutexGuard<'_, Roster>> {
        Some(self.roster.as_ref()?.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Shut the newest connections down (both ways) until `keep` are left: each engine then
    /// sees its connection end as it would a client's close, on whichever thread serves it, and
    /// closes it. Returns how many were shut down. Counted from the roster, not the open count:
    /// a connection a thread is closing right now is no longer listed, though not yet counted
    /// closed, and must not make an older one go in its stead.
    fn shed_newest(&self, keep: usize) -> usize {
        let Some(mut roster) = self.roster() else { return 0 };
        let Roster { by_order, waiting, .. } = &*roster;
        let newest_first = by_order.iter().rev().map(|(order, fd)| ((*order, *fd), waiting.contains(fd)));
        let shed = shed_choice(newest_first, keep);
        for &(order, fd) in &shed {
            roster.by_order.remove(&order);
            roster.by_fd.remove(&fd);
            // The roster's lock is held: the engine cannot close this descriptor meanwhile.
            let _ = sockscale_sys::shutdown_both(fd);
        }
        shed.len()
    }
}

impl Stats {
    pub fn new(shards: usize) -> Self {
        Self::with_storm(shards, None)
    }

    /// Stats whose closes feed the abort-storm policy `storm` (`--abort-storm`).
    pub fn with_storm(shards: usize, storm: Option<StormConfig>) -> Self {
        Stats {
            shards: (0..shards.max(1)).map(|_| Counters::default()).collect(),
            current: AtomicUsize::new(0),
            limits: Default::default(),
            storm: storm.map(|cfg| StormGate {
                policy: Mutex::new(AbortStorm::new(cfg, Instant::now())),
                paused: AtomicBool::new(false),
                pauses: AtomicU64::new(0),
                resumes: AtomicU64::new(0),
                shed: AtomicU64::new(0),
                roster: cfg.shed.then(|| Mutex::new(Roster::default())),
            }),
            waiting: AtomicI64::new(0),
            rotations: AtomicU64::new(0),
        }
    }

    /// With `--abort-storm-shed`: connection `fd` is open and served (after it was admitted);
    /// it may be shed from now until [`Stats::delist`].
    pub fn enlist(&self, fd: RawFd) {
        let Some(mut roster) = self.storm.as_ref().and_then(StormGate::roster) else { return };
        let order = roster.next;
        roster.next += 1;
        roster.by_order.insert(order, fd);
        if let Some(stale) = roster.by_fd.insert(fd, order) {
            // A descriptor closed without being delisted (a worker that failed or panicked
            // dropped its connections): its old entry is another connection's no more.
            roster.by_order.remove(&stale);
            roster.waiting.remove(&fd);
            tracing::warn!(fd, "a descriptor was listed for shedding twice: a connection closed unlisted");
        }
    }

    /// Whether connections are listed for shedding (`--abort-storm-shed`).
    pub fn sheds(&self) -> bool {
        self.storm.as_ref().is_some_and(|g| g.roster.is_some())
    }

    /// Connection `fd` is about to close its descriptor: it can no longer be shed.
    pub fn delist(&self, fd: RawFd) {
        let Some(mut roster) = self.storm.as_ref().and_then(StormGate::roster) else { return };
        if let Some(order) = roster.by_fd.remove(&fd) {
            roster.by_order.remove(&order);
        }
        roster.waiting.remove(&fd);
    }

    /// With `--abort-storm-shed` and `--active-set`: listed connection `fd` waits for a place
    /// (`true`, it is not shed) or has one again.
    pub fn shed_waiting(&self, fd: RawFd, waiting: bool) {
        let Some(mut roster) = self.storm.as_ref().and_then(StormGate::roster) else { return };
        if !roster.by_fd.contains_key(&fd) {
            return;
        }
        if waiting {
            roster.waiting.insert(fd);
        } else {
            roster.waiting.remove(&fd);
        }
    }

    /// `--active-set`: `delta` connections started (+) or stopped (-) waiting for a place.
    pub fn waiting_changed(&self, delta: i64) {
        self.waiting.fetch_add(delta, Relaxed);
    }

    /// `--active-set`: `n` places were given by rotation (idleness or a turn's end).
    pub fn rotated(&self, n: usize) {
        self.rotations.fetch_add(n as u64, Relaxed);
    }

    /// A connection counted by `try_open` has closed for `reason`: counted in `counters`, and,
    /// with `--abort-storm`, told to the storm policy (an abort may start a storm; any close
    /// may end one).
    pub fn closed(&self, counters: &Counters, reason: CloseReason) {
        self.close();
        counters.closed(reason);
        let Some(gate) = &self.storm else { return };
        if reason == CloseReason::Aborted {
            let event = gate.policy().on_abort(Instant::now(), self.current());
            gate.record(event);
        }
        if gate.paused.load(Relaxed) {
            let event = gate.policy().on_open_count(self.current());
            gate.record(event);
        }
    }

    /// Whether an abort storm holds accepting now (`--abort-storm`); checked by every acceptor
    /// before it takes connections in. Ends the storm if the connections established have
    /// fallen below its threshold meanwhile.
    pub fn storm_holds(&self) -> bool {
        let Some(gate) = &self.storm else { return false };
        if !gate.paused.load(Relaxed) {
            return false;
        }
        let event = gate.policy().on_open_count(self.current());
        gate.record(event);
        gate.paused.load(Relaxed)
    }

    /// `limit` kept a connection out (a refusal), or paused accepting (an accept error).
    pub fn limit_hit(&self, limit: Limit) {
        self.limits[limit as usize].fetch_add(1, Relaxed);
    }

    /// The counters of shard `index` (wrapping), for a worker to keep.
    pub fn shard(&self, index: usize) -> &Counters {
        &self.shards[index % self.shards.len()]
    }

    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Count a new connection if that keeps the total within `max`; false means refuse it.
    pub fn try_open(&self, max: usize) -> bool {
        let before = self.current.fetch_add(1, Relaxed);
        if before >= max {
            self.current.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// A connection counted by `try_open` has closed.
    pub fn close(&self) {
        self.current.fetch_sub(1, Relaxed);
    }

    pub fn current(&self) -> usize {
        self.current.load(Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot { connections: self.current() as u64, ..Snapshot::default() };
        if let Some(gate) = &self.storm {
            s.storm_pauses = gate.pauses.load(Relaxed);
            s.storm_resumes = gate.resumes.load(Relaxed);
            s.storm_shed = gate.shed.load(Relaxed);
        }
        s.waiting = self.waiting.load(Relaxed).max(0) as u64;
        s.active_rotations = self.rotations.load(Relaxed);
        for (total, count) in s.limits.iter_mut().zip(&self.limits) {
            *total = count.load(Relaxed);
        }
        for c in self.shards.iter() {
            s.accepted += c.accepted.load(Relaxed);
            s.refused += c.refused.load(Relaxed);
            for (total, count) in s.closed.iter_mut().zip(&c.closed) {
                *total += count.load(Relaxed);
            }
            s.bytes_in += c.bytes_in.load(Relaxed);
            s.bytes_out += c.bytes_out.load(Relaxed);
            s.datagrams_in += c.datagrams_in.load(Relaxed);
            s.datagrams_out += c.datagrams_out.load(Relaxed);
            s.datagrams_dropped += c.datagrams_dropped.load(Relaxed);
            s.datagrams_overflowed += c.datagrams_overflowed.load(Relaxed);
            s.buffers_in_use += c.buffers_in_use.load(Relaxed);
        }
        s
    }
}

/// The counters at one moment, summed over shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub accepted: u64,
    pub refused: u64,
    /// Indexed by `CloseReason as usize`.
    pub closed: [u64; CloseReason::ALL.len()],
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub datagrams_dropped: u64,
    /// Datagrams the kernel dropped because the socket's receive queue was full (SO_RXQ_OVFL).
    pub datagrams_overflowed: u64,
    pub connections: u64,
    pub buffers_in_use: i64,
    /// Indexed by `Limit as usize`: refusals and accept pauses each limit caused.
    pub limits: [u64; Limit::ALL.len()],
    /// Abort storms that paused accepting, and the resumes after them (`--abort-storm`).
    pub storm_pauses: u64,
    pub storm_resumes: u64,
    /// Connections closed as a storm began (`--abort-storm-shed`).
    pub storm_shed: u64,
    /// Connections held without a read posted, waiting for a place in the active set, now
    /// (`--active-set`), and places given by rotation (idleness or a turn's end).
    pub waiting: u64,
    pub active_rotations: u64,
}

impl Snapshot {
    pub fn closed(&self, reason: CloseReason) -> u64 {
        self.closed[reason as usize]
    }

    pub fn closed_total(&self) -> u64 {
        self.closed.iter().sum()
    }

    pub fn limit(&self, limit: Limit) -> u64 {
        self.limits[limit as usize]
    }

    /// Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        let mut out = String::with_capacity(2048);
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, String)]| {
            out.push_str(&format!("# HELP sockscale_{name} {help}\n# TYPE sockscale_{name} {kind}\n"));
            for (labels, value) in samples {
                out.push_str(&format!("sockscale_{name}{labels} {value}\n"));
            }
        };
        let one = |v: u64| vec![(String::new(), v.to_string())];
        metric("accepted_total", "counter", "Connections accepted.", &one(self.accepted));
        metric("refused_total", "counter", "Connections refused because the server was full.", &one(self.refused));
        let closed: Vec<_> = CloseReason::ALL
            .iter()
            .map(|r| (format!("{{reason=\"{}\"}}", r.name()), self.closed(*r).to_string()))
            .collect();
        metric("closed_total", "counter", "Connections closed, by reason.", &closed);
        metric("received_bytes_total", "counter", "Bytes received from clients.", &one(self.bytes_in));
        metric("sent_bytes_total", "counter", "Bytes sent to clients.", &one(self.bytes_out));
        metric("datagrams_received_total", "counter", "UDP datagrams received.", &one(self.datagrams_in));
        metric("datagrams_sent_total", "counter", "UDP datagrams sent.", &one(self.datagrams_out));
        metric("datagrams_dropped_total", "counter", "UDP replies dropped.", &one(self.datagrams_dropped));
        metric(
            "datagrams_overflowed_total",
            "counter",
            "UDP datagrams the kernel dropped because the receive queue was full.",
            &one(self.datagrams_overflowed),
        );
        let limits: Vec<_> =
            Limit::ALL.iter().map(|l| (format!("{{limit=\"{}\"}}", l.name()), self.limit(*l).to_string())).collect();
        metric(
            "limit_hits_total",
            "counter",
            "Connections refused, and accept pauses, by the limit that caused them.",
            &limits,
        );
        metric(
            "storm_pauses_total",
            "counter",
            "Abort storms that paused accepting (--abort-storm).",
            &one(self.storm_pauses),
        );
        metric(
            "storm_resumes_total",
            "counter",
            "Resumes of accepting after an abort storm.",
            &one(self.storm_resumes),
        );
        metric(
            "storm_shed_total",
            "counter",
            "Connections closed as an abort storm began (--abort-storm-shed).",
            &one(self.storm_shed),
        );
        metric(
            "active_set_waiting",
            "gauge",
            "Connections held without a read, waiting for a place in the active set (--active-set).",
            &one(self.waiting),
        );
        metric(
            "active_set_rotations_total",
            "counter",
            "Places in the active set given by rotation: an idle connection or one whose turn ended.",
            &one(self.active_rotations),
        );
        metric("connections", "gauge", "Connections open now.", &one(self.connections));
        metric(
            "buffers_in_use",
            "gauge",
            "Receive buffers taken from the pool now.",
            &[(String::new(), self.buffers_in_use.to_string())],
        );
        out
    }
}

/// One line of `key=value` pairs, for periodic and final reports.
impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "accepted={} refused={} connections={}", self.accepted, self.refused, self.connections)?;
        for reason in CloseReason::ALL {
            write!(f, " closed_{}={}", reason.name(), self.closed(reason))?;
        }
        write!(
            f,
            " bytes_in={} bytes_out={} datagrams_in={} datagrams_out={} datagrams_dropped={} datagrams_overflowed={} buffers_in_use={}",
            self.bytes_in,
            self.bytes_out,
            self.datagrams_in,
            self.datagrams_out,
            self.datagrams_dropped,
            self.datagrams_overflowed,
            self.buffers_in_use
        )?;
        for limit in Limit::ALL {
            write!(f, " limit_{}={}", limit.name(), self.limit(limit))?;
        }
        write!(
            f,
            " storm_pauses={} storm_resumes={} storm_shed={} waiting={} active_rotations={}",
            self.storm_pauses, self.storm_resumes, self.storm_shed, self.waiting, self.active_rotations
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shed takes the newest listed connections down to the threshold, passing over those
    /// waiting for an active-set place, and never one already delisted.
    #[test]
    fn the_shed_takes_the_newest_listed_that_do_not_wait() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let stats = Stats::with_storm(1, Some(StormConfig { rate: 1, resume_below: Some(1), shed: true }));
        let pairs: Vec<(UnixStream, UnixStream)> = (0..4).map(|_| UnixStream::pair().expect("pair")).collect();
        for (server, _) in &pairs {
            stats.enlist(server.as_raw_fd());
        }
        stats.delist(pairs[1].0.as_raw_fd());
        stats.shed_waiting(pairs[3].0.as_raw_fd(), true);
        let gate = stats.storm.as_ref().expect("storm");
        // Listed: 0, 2 and 3 (waiting). Down to 2: 3 is passed over, 2 is shed, 0 stays.
        assert_eq!(gate.shed_newest(2), 1);
        let shut = |i: usize| {
            let mut client = &pairs[i].1;
            client.set_nonblocking(true).expect("nonblocking");
            matches!(client.read(&mut [0u8; 1]), Ok(0))
        };
        assert_eq!((shut(0), shut(1), shut(2), shut(3)), (false, false, true, false));
        // Down to 1: the waiting one counts as kept, so 0 goes.
        assert_eq!(gate.shed_newest(1), 1);
        assert!(shut(0) && !shut(3));
    }

    #[test]
    fn shards_sum_and_max_conns_is_enforced() {
        let stats = Stats::new(2);
        stats.shard(0).closed(CloseReason::Idle);
        stats.shard(3).closed(CloseReason::Idle);
        stats.shard(1).bytes_in(10);
        assert!(stats.try_open(2));
        assert!(stats.try_open(2));
        assert!(!stats.try_open(2));
        stats.close();
        let s = stats.snapshot();
        assert_eq!(s.closed(CloseReason::Idle), 2);
        assert_eq!(s.bytes_in, 10);
        assert_eq!(s.connections, 1);
        assert!(s.prometheus().contains("sockscale_closed_total{reason=\"idle\"} 2\n"));
        assert!(s.to_string().contains("closed_idle=2"));
        stats.limit_hit(Limit::Threads);
        stats.limit_hit(Limit::Threads);
        let s = stats.snapshot();
        assert_eq!(s.limit(Limit::Threads), 2);
        assert!(s.to_string().contains(" limit_threads=2 "), "{s}");
        assert!(s.prometheus().contains("sockscale_limit_hits_total{limit=\"threads\"} 2\n"));
    }
}
