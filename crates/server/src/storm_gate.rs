//! The abort-storm gate (`--abort-storm`, `--abort-storm-shed`): the process's one detector,
//! fed by every close and asked by every acceptor, and the roster of connections that a storm
//! may shed. The decisions are `policy::AbortStorm` and `policy::shed_choice`; this carries
//! them out across threads (a lock, a flag acceptors read without it, and the shutdowns of a
//! shed). Kept out of the counters file: counting is not deciding.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use crate::policy::{shed_choice, AbortStorm, CloseReason, StormConfig, StormEvent};

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
    waiting: HashSet<RawFd>,
}

/// The abort-storm policy shared by every worker: aborts are rare, so a lock; acceptors read
/// one flag while no storm is on.
#[derive(Debug)]
pub struct StormGate {
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
    pub fn new(cfg: StormConfig) -> Self {
        StormGate {
            policy: Mutex::new(AbortStorm::new(cfg, Instant::now())),
            paused: AtomicBool::new(false),
            pauses: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            roster: cfg.shed.then(|| Mutex::new(Roster::default())),
        }
    }

    /// Whether connections are listed for shedding (`--abort-storm-shed`).
    pub fn sheds(&self) -> bool {
        self.roster.is_some()
    }

    /// Storms begun, storms ended, connections shed.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.pauses.load(Relaxed), self.resumes.load(Relaxed), self.shed.load(Relaxed))
    }

    /// A connection closed for `reason`, `open` now established: an abort may start a storm,
    /// any close may end one.
    pub fn closed(&self, reason: CloseReason, open: usize) {
        if reason == CloseReason::Aborted {
            let event = self.policy().on_abort(Instant::now(), open);
            self.record(event);
        }
        if self.paused.load(Relaxed) {
            let event = self.policy().on_open_count(open);
            self.record(event);
        }
    }

    /// Whether the storm holds accepting with `open` established; ends it if they have fallen
    /// below its threshold meanwhile.
    pub fn holds(&self, open: usize) -> bool {
        if !self.paused.load(Relaxed) {
            return false;
        }
        let event = self.policy().on_open_count(open);
        self.record(event);
        self.paused.load(Relaxed)
    }

    /// Connection `fd` is open and served; it may be shed from now until [`StormGate::delist`].
    pub fn enlist(&self, fd: RawFd) {
        let Some(mut roster) = self.roster() else { return };
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

    /// Connection `fd` is about to close its descriptor: it can no longer be shed.
    pub fn delist(&self, fd: RawFd) {
        let Some(mut roster) = self.roster() else { return };
        if let Some(order) = roster.by_fd.remove(&fd) {
            roster.by_order.remove(&order);
        }
        roster.waiting.remove(&fd);
    }

    /// Listed connection `fd` waits for an active-set place (`true`: it is not shed) or has
    /// one again.
    pub fn shed_waiting(&self, fd: RawFd, waiting: bool) {
        let Some(mut roster) = self.roster() else { return };
        if !roster.by_fd.contains_key(&fd) {
            return;
        }
        if waiting {
            roster.waiting.insert(fd);
        } else {
            roster.waiting.remove(&fd);
        }
    }

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

#[cfg(test)]
mod tests {
    use crate::policy::StormConfig;
    use crate::stats::Stats;

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
        let gate = stats.storm_gate().expect("storm");
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
}
