//! What every acceptor shares besides the accept gate (`policy::AcceptGate`): refusing a
//! connection the server will not serve, and logging at most once a second.
//!
//! Refusing is the seeds' "refuse clients when busy": the connection is accepted, given the
//! protocol's refusal (HTTP's 503, nothing for echo), closed at once and counted as refused.

use std::fmt::Display;
use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sockscale_proto::Engine;

use crate::policy::AcceptStep;
use crate::policy::Limit;
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

/// Why a connection is refused. Each acceptor says which; the words and the [`Limit`] counted
/// are said here once.
#[derive(Debug)]
pub enum Refusal<'a> {
    /// `--max-conns` connections are open.
    MaxConns,
    /// The model cannot watch another descriptor; the selector's reason.
    Full(&'a str),
    /// The selector failed to watch this one (ENOMEM, ENOSPC: `max_user_watches`). Once a
    /// connection is served, the same failure is a close with `CloseReason::Error`.
    Unwatchable(&'a io::Error),
    /// No thread could be started for the connection.
    Thread(&'a io::Error),
    /// No thread could be started for another connection group.
    Group(&'a io::Error),
    /// The connection's threads would take the process past `max_map_count` memory maps.
    MemoryMaps { max_map_count: u64 },
    /// `bound` connections already wait for a worker.
    QueueFull { bound: usize },
    /// `max` TLS handshakes are in progress (`--max-handshakes`).
    Handshakes { max: usize },
    /// No TLS session could be made for the connection.
    TlsUnavailable,
    /// The server is draining.
    ShuttingDown,
}

impl Refusal<'_> {
    /// The limit this refusal is counted against, if any.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            Refusal::MaxConns => Some(Limit::MaxConns),
            Refusal::Full(_) => Some(Limit::Ceiling),
            Refusal::Thread(e) | Refusal::Group(e) => Some(Limit::of_error(e).unwrap_or(Limit::Threads)),
            Refusal::Unwatchable(e) => Limit::of_error(e),
            Refusal::QueueFull { .. } => Some(Limit::Queue),
            Refusal::MemoryMaps { .. } => Some(Limit::MemoryMaps),
            Refusal::Handshakes { .. } => Some(Limit::Handshakes),
            Refusal::TlsUnavailable => None,
            Refusal::ShuttingDown => None,
        }
    }
}

impl Display for Refusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::MaxConns => f.write_str("--max-conns reached"),
            Refusal::Full(reason) => f.write_str(reason),
            Refusal::Unwatchable(e) => write!(f, "cannot watch an accepted connection: {e}"),
            Refusal::Thread(e) => write!(f, "cannot start a thread for a connection: {e}"),
            Refusal::Group(e) => write!(f, "cannot start another connection group: {e}"),
            Refusal::QueueFull { bound } => {
                write!(f, "{bound} connections already wait for a worker (the queue is full)")
            }
            Refusal::MemoryMaps { max_map_count } => write!(
                f,
                "another connection's threads would pass the process's memory-map limit (vm.max_map_count {max_map_count})"
            ),
            Refusal::Handshakes { max } => write!(f, "{max} TLS handshakes are in progress (--max-handshakes)"),
            Refusal::TlsUnavailable => f.write_str("no TLS session could be made for the connection"),
            Refusal::ShuttingDown => f.write_str("the server is shutting down"),
        }
    }
}

/// Refuse the connection on `fd`, which the caller closes right after: send the protocol's
/// refusal (HTTP's 503), count it as refused and against its limit, and log why at most once a
/// second. Every acceptor refuses through this.
pub fn refuse(
    fd: RawFd,
    engine: Option<&mut Engine>,
    counters: &Counters,
    stats: &Stats,
    log: &mut LogLimiter,
    why: Refusal<'_>,
) {
    counters.refused();
    if let Some(limit) = why.limit() {
        stats.limit_hit(limit);
    }
    // A TLS server passes no engine: its protocol's refusal cannot be sent in clear before a
    // handshake, and a handshake is what a refused connection is not given.
    // Either way in good order: closing with the client's first bytes unread would reset the
    // connection, and could destroy the 503 before the client reads it.
    let refusal = engine.and_then(Engine::refusal);
    sockscale_sys::end_socket(fd, refusal.as_deref().unwrap_or_default(), sockscale_sys::Ending::Orderly);
    if let Some(suppressed) = log.allow(Instant::now()) {
        tracing::warn!(open = stats.current(), suppressed, "refusing connections: {why}");
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
