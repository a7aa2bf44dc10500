//! Taking connections in: one gate for every acceptor.
//!
//! [`AcceptGate`] answers the one question every acceptor asks (the readiness loop's, the
//! thread engines', the groups', tokio's and io_uring's): what next? Admit a connection it
//! held, take one from the queue, stop because the batch is spent, or take none until a time.
//! The acceptors keep only their waiting code. It is told what happened: a connection taken, an
//! accept error, a descriptor freed. Its rules:
//! - **Batch**: up to `--accept-batch` connections per turn (the AcceptEx low/high watermark,
//!   turned around: instead of keeping N accepts posted, take up to N each time the listener is
//!   ready), then the connections already ready have theirs. A retried accept (a connection
//!   that died in the queue, a signal) counts in the batch, so aborts cannot spin an acceptor.
//! - **Back-off**: accept(2) fails with EMFILE, ENFILE, ENOBUFS or ENOMEM while the connection
//!   stays in the queue, so the listener stays ready and an acceptor that tried again at once
//!   would spin. Accepting pauses for a back-off that doubles from [`AcceptBackoff::FIRST`] up
//!   to [`AcceptBackoff::MAX`], and resumes early when one of the server's connections closes
//!   and frees a descriptor.
//! - **Abort storm** (`--abort-storm`): while the storm policy holds accepting, connections are
//!   left in the backlog; the gate looks again every [`AcceptBackoff::STORM_RECHECK`] and when a
//!   connection closes. A connection taken anyway (the kernel completes io_uring's multishot
//!   accept, and tokio's pending accept, without asking) waits in the gate, unserved as it
//!   would have in the backlog, and is admitted first when the storm is over.
//!
//! Beyond `--max-conns`, connections are refused at once after the take, not paused: the seeds'
//! "refuse clients when busy" answers them (HTTP gets a 503) instead of leaving them waiting in
//! the backlog (see `admission`).

use std::io;
use std::time::{Duration, Instant};

/// What an acceptor does after accept(2) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStep {
    /// Nothing is queued: wait for the listener to be ready again.
    Empty,
    /// A connection died in the queue, or a signal came: accept again now.
    Retry,
    /// Stop accepting (stop watching the listener) until `until`, or until a descriptor is
    /// freed. `exhausted`: the error was a lack of descriptors or memory, which is expected
    /// under load (logged as a warning); anything else is logged as an error.
    Pause { until: Instant, pause: Duration, exhausted: bool },
}

/// The accept back-off state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptBackoff {
    next: Duration,
    paused_until: Option<Instant>,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff { next: Self::FIRST, paused_until: None }
    }
}

impl AcceptBackoff {
    /// The first pause.
    pub const FIRST: Duration = Duration::from_millis(10);
    /// The longest pause: a server out of descriptors looks again at least once a second.
    pub const MAX: Duration = Duration::from_secs(1);

    /// A connection was accepted: the next failure starts from the first pause again.
    pub fn on_accepted(&mut self) {
        self.next = Self::FIRST;
    }

    /// accept(2) failed with `err` at `now`.
    pub fn on_error(&mut self, now: Instant, err: &io::Error) -> AcceptStep {
        if err.kind() == io::ErrorKind::WouldBlock {
            return AcceptStep::Empty;
        }
        match err.raw_os_error() {
            // io_uring's multishot accept ends with ECANCELED when it is cancelled.
            Some(libc::ECANCELED) => return AcceptStep::Empty,
            Some(libc::ECONNABORTED | libc::EPROTO | libc::EINTR) => return AcceptStep::Retry,
            _ => {}
        }
        let pause = self.next;
        let until = now + pause;
        self.paused_until = Some(until);
        self.next = (pause * 2).min(Self::MAX);
        let exhausted = matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM));
        AcceptStep::Pause { until, pause, exhausted }
    }

    /// Pause accepting for `pause` without an error: the abort-storm policy holds accepting,
    /// and the acceptor looks again when due or when a connection closes.
    pub fn hold(&mut self, now: Instant, pause: Duration) {
        self.paused_until = Some(now + pause);
    }

    /// How often an acceptor held by an abort storm looks again, besides when a connection
    /// closes.
    pub const STORM_RECHECK: Duration = Duration::from_millis(100);

    /// When a paused acceptor should look again, if it is paused.
    pub fn paused_until(&self) -> Option<Instant> {
        self.paused_until
    }

    pub fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }

    /// End the pause if it is over at `now`, or at once if `freed` (a connection closed, so a
    /// descriptor is free). Returns true when accepting resumes now.
    pub fn resume(&mut self, now: Instant, freed: bool) -> bool {
        match self.paused_until {
            Some(until) if freed || until <= now => {
                self.paused_until = None;
                true
            }
            _ => false,
        }
    }
}

/// What an acceptor does next (see [`AcceptGate::next`]).
#[derive(Debug, PartialEq, Eq)]
pub enum AcceptNext<T> {
    /// Admit this connection, taken while an abort storm held accepting.
    Admit(T),
    /// Take one connection from the queue (accept(2)), or, for an acceptor the kernel completes
    /// without asking (io_uring's multishot accept), keep accepting.
    Accept,
    /// The batch is spent: let the connections already ready have their turn, then come back
    /// (more may be queued; an edge-triggered listener will not say so again).
    Spent,
    /// Take none, and stop watching the listener (it stays ready, so watching would spin), until
    /// `until` or until one of the server's connections closes ([`AcceptGate::on_freed`]).
    Closed { until: Instant },
}

/// What an acceptor does after an accept error (see [`AcceptGate::on_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptFailed {
    /// Nothing is queued: wait for the listener to be ready again.
    Empty,
    /// Ask [`AcceptGate::next`] again: a retry within the batch, or a pause it reports.
    Next,
}

/// The accept policy of one acceptor: batch, back-off and abort-storm hold (see the module).
/// `T` is what the acceptor holds a connection by (a descriptor, a tokio stream).
#[derive(Debug)]
pub struct AcceptGate<T> {
    backoff: AcceptBackoff,
    batch: usize,
    /// Connections left in this turn's batch.
    left: usize,
    /// Connections taken while a storm held accepting, oldest first.
    held: std::collections::VecDeque<T>,
}

impl<T> AcceptGate<T> {
    /// A gate taking up to `batch` connections a turn (at least one).
    pub fn new(batch: usize) -> Self {
        let batch = batch.max(1);
        AcceptGate { backoff: AcceptBackoff::default(), batch, left: batch, held: Default::default() }
    }

    /// What to do next, at `now`. `storm`: the abort-storm policy holds accepting
    /// (`Stats::storm_holds`).
    pub fn next(&mut self, now: Instant, storm: bool) -> AcceptNext<T> {
        if let Some(until) = self.backoff.paused_until() {
            if !self.backoff.resume(now, false) {
                return AcceptNext::Closed { until };
            }
        }
        if storm {
            self.backoff.hold(now, AcceptBackoff::STORM_RECHECK);
            return AcceptNext::Closed { until: now + AcceptBackoff::STORM_RECHECK };
        }
        if let Some(held) = self.held.pop_front() {
            return AcceptNext::Admit(held);
        }
        if self.left == 0 {
            self.left = self.batch;
            return AcceptNext::Spent;
        }
        self.left -= 1;
        AcceptNext::Accept
    }

    /// A connection was taken at `now`: admit it (Some), or the gate holds it until a storm is
    /// over (None; the acceptor should stop accepting: [`AcceptGate::next`] says until when).
    pub fn on_taken(&mut self, taken: T, storm: bool) -> Option<T> {
        self.backoff.on_accepted();
        if storm || !self.held.is_empty() {
            // Behind those held before it: first come, first admitted.
            self.held.push_back(taken);
            return None;
        }
        Some(taken)
    }

    /// accept(2) failed with `err` at `now`. A pause the error calls for is also returned, for
    /// the acceptor to count and log (`admission::accept_paused`); [`AcceptGate::next`] then
    /// answers `Closed`.
    pub fn on_error(&mut self, now: Instant, err: &io::Error) -> (AcceptFailed, AcceptStep) {
        let step = self.backoff.on_error(now, err);
        match step {
            AcceptStep::Empty => {
                self.left = self.batch;
                (AcceptFailed::Empty, step)
            }
            AcceptStep::Retry | AcceptStep::Pause { .. } => (AcceptFailed::Next, step),
        }
    }

    /// One of the server's connections closed at `now`: a descriptor is free, and a storm may
    /// be over. True when accepting resumes now (the acceptor watches the listener again).
    pub fn on_freed(&mut self, now: Instant) -> bool {
        self.backoff.resume(now, true)
    }

    /// Whether accepting is closed (the listener unwatched) until [`AcceptGate::resumes_at`].
    pub fn is_closed(&self) -> bool {
        self.backoff.is_paused()
    }

    /// When a closed gate opens by itself: the acceptor's timer.
    pub fn resumes_at(&self) -> Option<Instant> {
        self.backoff.paused_until()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(e: i32) -> io::Error {
        io::Error::from_raw_os_error(e)
    }

    #[test]
    fn transient_errors_never_pause() {
        let mut b = AcceptBackoff::default();
        let now = Instant::now();
        assert_eq!(b.on_error(now, &errno(libc::EAGAIN)), AcceptStep::Empty);
        assert_eq!(b.on_error(now, &errno(libc::ECANCELED)), AcceptStep::Empty);
        for e in [libc::ECONNABORTED, libc::EPROTO, libc::EINTR] {
            assert_eq!(b.on_error(now, &errno(e)), AcceptStep::Retry);
        }
        assert!(!b.is_paused());
    }

    #[test]
    fn exhaustion_pauses_for_a_doubling_capped_backoff_that_an_accept_resets() {
        let mut b = AcceptBackoff::default();
        let t0 = Instant::now();
        let mut pauses = Vec::new();
        for _ in 0..10 {
            match b.on_error(t0, &errno(libc::EMFILE)) {
                AcceptStep::Pause { pause, exhausted, .. } => {
                    assert!(exhausted);
                    pauses.push(pause.as_millis());
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        b.on_accepted();
        assert_eq!(
            b.on_error(t0, &errno(libc::ENOBUFS)),
            AcceptStep::Pause { until: t0 + AcceptBackoff::FIRST, pause: AcceptBackoff::FIRST, exhausted: true }
        );
        assert!(matches!(b.on_error(t0, &errno(libc::EINVAL)), AcceptStep::Pause { exhausted: false, .. }));
    }

    #[test]
    fn a_pause_ends_when_due_or_when_a_descriptor_is_freed() {
        let mut b = AcceptBackoff::default();
        let t0 = Instant::now();
        assert!(!b.resume(t0, true), "not paused: nothing to resume");
        b.on_error(t0, &errno(libc::ENFILE));
        assert_eq!(b.paused_until(), Some(t0 + AcceptBackoff::FIRST));
        assert!(!b.resume(t0 + Duration::from_millis(9), false));
        assert!(b.resume(t0 + Duration::from_millis(10), false));
        assert!(!b.is_paused());
        b.on_error(t0, &errno(libc::ENFILE));
        assert!(b.resume(t0, true), "a freed descriptor ends the pause early");
    }

    fn gate(batch: usize) -> AcceptGate<u32> {
        AcceptGate::new(batch)
    }

    #[test]
    fn the_gate_takes_a_batch_then_lets_the_others_run() {
        let (mut g, now) = (gate(3), Instant::now());
        for _ in 0..3 {
            assert_eq!(g.next(now, false), AcceptNext::Accept);
            assert_eq!(g.on_taken(1, false), Some(1));
        }
        assert_eq!(g.next(now, false), AcceptNext::Spent);
        assert_eq!(g.next(now, false), AcceptNext::Accept, "a new turn, a new batch");
        assert_eq!(g.on_error(now, &errno(libc::EAGAIN)).0, AcceptFailed::Empty);
        for _ in 0..3 {
            assert_eq!(g.next(now, false), AcceptNext::Accept, "an empty queue ends the turn: the next is whole");
        }
    }

    #[test]
    fn retries_count_in_the_batch_so_aborts_cannot_spin_an_acceptor() {
        let (mut g, now) = (gate(2), Instant::now());
        for _ in 0..2 {
            assert_eq!(g.next(now, false), AcceptNext::Accept);
            assert_eq!(g.on_error(now, &errno(libc::ECONNABORTED)), (AcceptFailed::Next, AcceptStep::Retry));
        }
        assert_eq!(g.next(now, false), AcceptNext::Spent);
    }

    #[test]
    fn exhaustion_closes_the_gate_until_due_or_a_descriptor_is_freed() {
        let (mut g, t0) = (gate(4), Instant::now());
        assert_eq!(g.next(t0, false), AcceptNext::Accept);
        let (failed, step) = g.on_error(t0, &errno(libc::EMFILE));
        assert_eq!(failed, AcceptFailed::Next);
        assert!(matches!(step, AcceptStep::Pause { exhausted: true, .. }));
        let until = t0 + AcceptBackoff::FIRST;
        assert_eq!(g.next(t0, false), AcceptNext::Closed { until });
        assert!(g.is_closed());
        assert_eq!(g.next(until, false), AcceptNext::Accept, "due: open again");
        assert_eq!(g.on_error(until, &errno(libc::EMFILE)).0, AcceptFailed::Next);
        assert!(g.on_freed(until), "a freed descriptor opens it early");
        assert_eq!(g.next(until, false), AcceptNext::Accept);
    }

    #[test]
    fn a_storm_leaves_connections_queued_and_admits_the_held_first_when_over() {
        let (mut g, t0) = (gate(8), Instant::now());
        let recheck = t0 + AcceptBackoff::STORM_RECHECK;
        assert_eq!(g.next(t0, true), AcceptNext::Closed { until: recheck });
        // The kernel completed two accepts anyway (io_uring's multishot): they wait.
        assert_eq!(g.on_taken(1, true), None);
        assert_eq!(g.on_taken(2, false), None, "behind the first held: first come, first admitted");
        assert_eq!(g.next(t0, false), AcceptNext::Closed { until: recheck }, "held until the recheck");
        assert!(g.on_freed(t0));
        assert_eq!(g.next(t0, true), AcceptNext::Closed { until: recheck }, "the storm still holds");
        assert_eq!(g.next(recheck, false), AcceptNext::Admit(1));
        assert_eq!(g.next(recheck, false), AcceptNext::Admit(2));
        assert_eq!(g.next(recheck, false), AcceptNext::Accept);
        assert_eq!(g.on_taken(3, false), Some(3));
    }
}
