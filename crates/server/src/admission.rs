//! What every acceptor shares besides the accept gate (`policy::AcceptGate`): carrying out a
//! refusal, and logging at most once a second.
//!
//! Refusing is the seeds' "refuse clients when busy": the connection is accepted, given the
//! protocol's refusal (HTTP's 503 in clear; nothing for TLS or echo), ended in good order and
//! counted as refused. Whom to refuse, and with which bytes and ending, is the worker core's
//! (`policy::WorkerCore`); [`refuse`] only carries its answer out.

use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::policy::AcceptStep;
pub use crate::policy::Refusal;
use crate::policy::{Limit, Refused, Slots};
use crate::stats::{Counters, Stats};

/// Let a kind of message through at most once a second per process, counting the ones held
/// back. A handle is cheap and every worker holds its own, but all handles of one kind share
/// one window: with N workers out of descriptors at once, the log still gets one line a
/// second, not N (a flood of identical warnings is itself a resource a client could exhaust).
#[derive(Debug, Clone, Copy)]
pub struct LogLimiter {
    window: &'static LogWindow,
}

/// The shared state of one kind of message: when one was last let through, and how many
/// were held back since. Only contended when messages are, so a mutex is cheap enough.
#[derive(Debug)]
pub struct LogWindow(Mutex<(Option<Instant>, u64)>);

impl LogWindow {
    const fn new() -> Self {
        LogWindow(Mutex::new((None, 0)))
    }
}

static ACCEPT_ERRORS: LogWindow = LogWindow::new();
static REFUSALS: LogWindow = LogWindow::new();
static UDP_ERRORS: LogWindow = LogWindow::new();
static SIGNAL_OVERFLOWS: LogWindow = LogWindow::new();

impl LogLimiter {
    /// accept(2) failures (EMFILE and the like).
    pub fn accept_errors() -> Self {
        LogLimiter { window: &ACCEPT_ERRORS }
    }

    /// Connections refused at `--max-conns` or for want of a slot.
    pub fn refusals() -> Self {
        LogLimiter { window: &REFUSALS }
    }

    /// Failed UDP receives.
    pub fn udp_errors() -> Self {
        LogLimiter { window: &UDP_ERRORS }
    }

    /// Real-time signal queue overflows.
    pub fn signal_overflows() -> Self {
        LogLimiter { window: &SIGNAL_OVERFLOWS }
    }

    /// Some(suppressed since the last message) if a message may be logged now.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        let mut window = self.window.0.lock().unwrap_or_else(|e| e.into_inner());
        let (last, suppressed) = &mut *window;
        match *last {
            Some(at) if now.saturating_duration_since(at) < Duration::from_secs(1) => {
                *suppressed += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(suppressed))
            }
        }
    }
}

/// Count an accept failure that paused accepting against its limit, and log it at most once a
/// second per process.
pub fn accept_paused(log: &mut LogLimiter, stats: &Stats, now: Instant, err: &io::Error, step: AcceptStep) {
    let AcceptStep::Pause { pause, exhausted, .. } = step else {
        return;
    };
    if let Some(limit) = Limit::of_error(err) {
        stats.limit_hit(limit);
    }
    let Some(suppressed) = log.allow(now) else {
        return;
    };
    let open = stats.current();
    if exhausted {
        tracing::warn!(error = %err, open, suppressed, "accept failed: out of resources; pausing accepts for {pause:?}");
    } else {
        tracing::error!(error = %err, open, suppressed, "accept failed; pausing accepts for {pause:?}");
    }
}

/// Carry out a refusal the worker core answered (`policy::WorkerCore`) on `fd`, which the
/// caller closes right after: send its last bytes and end the socket as it says, count it as
/// refused and against its limit, and log why at most once a second. Every acceptor refuses
/// through this.
pub fn refuse(fd: RawFd, refused: Refused<'_>, counters: &Counters, stats: &Stats, log: &mut LogLimiter) {
    counters.refused();
    if let Some(limit) = refused.why.limit() {
        stats.limit_hit(limit);
    }
    sockscale_sys::end_socket(fd, refused.last.as_deref().unwrap_or_default(), refused.ending);
    if let Some(suppressed) = log.allow(Instant::now()) {
        tracing::warn!(open = stats.current(), suppressed, "refusing connections: {}", refused.why);
    }
}

/// The process's `--max-conns` count is the one `Stats` keeps.
impl Slots for Stats {
    fn try_take(&self, max: usize) -> bool {
        self.try_open(max)
    }

    fn give_back(&self) {
        self.close();
    }

    fn taken(&self) -> usize {
        self.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_of_one_kind_share_one_window_a_second() {
        let window: &'static LogWindow = Box::leak(Box::new(LogWindow::new()));
        let (mut first, mut second) = (LogLimiter { window }, LogLimiter { window });
        let start = Instant::now();
        assert_eq!(first.allow(start), Some(0));
        // Another worker, a moment later: held back, and counted.
        assert_eq!(second.allow(start + Duration::from_millis(10)), None);
        assert_eq!(first.allow(start + Duration::from_millis(999)), None);
        assert_eq!(second.allow(start + Duration::from_millis(1000)), Some(2));
        assert_eq!(first.allow(start + Duration::from_millis(1500)), None);
    }
}
