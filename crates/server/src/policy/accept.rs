//! Taking connections in when the process runs out of descriptors or memory.
//!
//! accept(2) fails with EMFILE, ENFILE, ENOBUFS or ENOMEM while the connection stays in the
//! queue, so the listener stays ready: an acceptor that tried again at once would spin. So
//! accepting pauses for a back-off that doubles from [`AcceptBackoff::FIRST`] up to
//! [`AcceptBackoff::MAX`], and resumes early when one of the server's connections closes and
//! frees a descriptor. Every acceptor (the readiness loop's, the thread engines', the groups',
//! tokio's and io_uring's) runs this one machine.
//!
//! Beyond `--max-conns` connections are refused at once, not paused: the seeds' "refuse clients
//! when busy" answers them (HTTP gets a 503) instead of leaving them waiting in the backlog.

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
}
