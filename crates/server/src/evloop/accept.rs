//! Taking connections in: the accept policy of the seeds.
//!
//! - Up to `--accept-batch` accepts per wake-up (the AcceptEx low/high watermark, turned
//!   around: instead of keeping N accepts posted, take up to N each time the listener is
//!   ready); if the batch ran out before the queue did, the listener is driven again on the
//!   next turn, after the connections already ready have had theirs.
//! - Beyond `--max-conns`, a connection is accepted and closed at once, after the protocol's
//!   refusal (HTTP 503), and counted as refused.
//! - When accept fails for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), the
//!   listener is taken out of the selector for a back-off that doubles up to one second, so the
//!   loop never spins on a listener it cannot serve; it comes back early when one of this
//!   worker's connections closes and frees a descriptor. The error is logged at most once a
//!   second per process, with a count of what was suppressed.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::Socket;
use sockscale_sys::{self as sys, Interest, RegisterError, Selector, Waker};

use super::{token, Worker, LISTENER};
use crate::conn::Conn;

/// The accept back-off after EMFILE and the like, shared by every model's acceptor.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(10);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A listener as one worker sees it.
pub struct Acceptor {
    socket: Arc<Socket>,
    /// EPOLLEXCLUSIVE-style sharing with other workers.
    exclusive: bool,
    registered: bool,
    paused_until: Option<Instant>,
    backoff: Duration,
    log: LogLimiter,
}

impl Acceptor {
    pub fn new(socket: Arc<Socket>, exclusive: bool) -> Self {
        Acceptor {
            socket,
            exclusive,
            registered: false,
            paused_until: None,
            backoff: FIRST_BACKOFF,
            log: LogLimiter::accept_errors(),
        }
    }

    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    pub(super) fn register<S: Selector>(&mut self, selector: &mut S) -> io::Result<()> {
        if !self.registered {
            selector.register(self.fd(), LISTENER, Interest::READ, self.exclusive).map_err(super::into_io)?;
            self.registered = true;
        }
        Ok(())
    }

    pub(super) fn deregister<S: Selector>(&mut self, selector: &mut S) {
        if self.registered {
            let _ = selector.deregister(self.fd());
            self.registered = false;
        }
    }
}

/// Connections accepted by another thread, waiting for a worker to take them. The acceptor
/// has already counted them against `--max-conns`.
#[derive(Debug)]
pub struct Inbox {
    queue: Mutex<VecDeque<OwnedFd>>,
    waker: Waker,
    closed: AtomicBool,
}

impl Inbox {
    pub fn new() -> io::Result<Self> {
        Ok(Inbox { queue: Mutex::new(VecDeque::new()), waker: Waker::new()?, closed: AtomicBool::new(false) })
    }

    /// Hand a connection over; gives it back if the worker has stopped taking connections.
    pub fn push(&self, fd: OwnedFd) -> Result<(), OwnedFd> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return Err(fd);
        }
        queue.push_back(fd);
        drop(queue);
        self.waker.wake();
        Ok(())
    }

    pub fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Stop taking connections; returns those never taken.
    pub fn close(&self) -> Vec<OwnedFd> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, Ordering::Release);
        queue.drain(..).collect()
    }

    pub(crate) fn take_all(&self) -> Vec<OwnedFd> {
        self.waker.reset();
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect()
    }
}

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

impl<S: Selector> Worker<'_, S> {
    pub(super) fn accept_ready(&mut self) {
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        if acceptor.paused_until.is_some() {
            return;
        }
        let fd = acceptor.fd();
        for _ in 0..self.cfg.accept_batch {
            match sys::accept(fd) {
                Ok(conn) => {
                    if let Some(super::Source::Listener(acceptor)) = &mut self.source {
                        acceptor.backoff = FIRST_BACKOFF;
                    }
                    self.on_accepted(conn, false);
                }
                Err(e) => {
                    self.on_accept_error(e);
                    return;
                }
            }
        }
        // The batch ran out first: more may be queued, and an edge-triggered listener will
        // not say so again.
        self.resume_accept = true;
    }

    fn on_accept_error(&mut self, err: io::Error) {
        if err.kind() == io::ErrorKind::WouldBlock {
            return;
        }
        // A connection that died in the queue, or a signal: try again on the next turn.
        if matches!(err.raw_os_error(), Some(libc::ECONNABORTED | libc::EPROTO | libc::EINTR)) {
            self.resume_accept = true;
            return;
        }
        let now = self.now;
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        let backoff = acceptor.backoff;
        acceptor.paused_until = Some(now + backoff);
        acceptor.backoff = (backoff * 2).min(MAX_BACKOFF);
        if let Some(suppressed) = acceptor.log.allow(now) {
            let open = self.stats.current();
            if sys::is_resource_exhaustion(&err) {
                tracing::warn!(error = %err, open, suppressed, "accept failed: out of resources; pausing accepts for {backoff:?}");
            } else {
                tracing::error!(error = %err, open, suppressed, "accept failed; pausing accepts for {backoff:?}");
            }
        }
        acceptor.deregister(&mut self.selector);
    }

    pub(super) fn accept_resumes_at(&self) -> Option<Instant> {
        match &self.source {
            Some(super::Source::Listener(acceptor)) => acceptor.paused_until,
            _ => None,
        }
    }

    /// Put a paused listener back if its back-off is over.
    pub(super) fn resume_accept_if_due(&mut self) {
        if self.accept_resumes_at().is_some_and(|at| at <= self.now) {
            self.resume_accepting();
        }
    }

    /// A descriptor was freed, or the back-off ended: listen again and look at the queue.
    pub(super) fn resume_accepting(&mut self) {
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        if acceptor.paused_until.take().is_none() {
            return;
        }
        if let Err(e) = acceptor.register(&mut self.selector) {
            tracing::error!(error = %e, "cannot watch the listener again");
            acceptor.paused_until = Some(self.now + MAX_BACKOFF);
            return;
        }
        self.resume_accept = true;
    }

    pub(super) fn take_inbox(&mut self) {
        let Some(super::Source::Inbox(inbox)) = &self.source else {
            return;
        };
        let inbox = inbox.clone();
        for fd in inbox.take_all() {
            self.on_accepted(fd, true);
        }
    }

    /// Admit one accepted connection, or refuse it. `counted`: the max-conns slot was already
    /// taken by whoever accepted it.
    pub(super) fn on_accepted(&mut self, fd: OwnedFd, counted: bool) {
        if !counted && !self.stats.try_open(self.cfg.max_conns) {
            self.refuse(fd, "--max-conns reached");
            return;
        }
        let entry = self.conns.vacant_entry();
        let index = entry.key();
        let generation = self.next_generation;
        let tok = token(index, generation);
        let interest = if self.edge { Interest::BOTH } else { Interest::READ };
        match self.selector.register(fd.as_raw_fd(), tok, interest, false) {
            Ok(()) => {}
            Err(RegisterError::Full(reason)) => {
                self.stats.close();
                self.refuse(fd, &reason);
                return;
            }
            Err(RegisterError::Io(e)) => {
                self.stats.close();
                self.counters.refused();
                tracing::warn!(error = %e, "cannot watch an accepted connection; closing it");
                return;
            }
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        let mut conn = Conn::new(fd, self.engine.new_session(), self.now, generation);
        conn.registered = interest;
        let deadline = conn.clocks.deadline(self.cfg.idle_timeout, self.cfg.send_timeout, None);
        self.timers.schedule(&mut conn.timer_at, deadline, tok);
        entry.insert(conn);
        self.counters.accepted();
        // Data that arrived with the connection is read now rather than after another wait:
        // epoll reports it anyway, but level-triggered selectors would need a full turn.
        if !self.edge {
            self.drive(tok);
        }
    }

    /// Close a connection the server will not serve, after the protocol's refusal.
    fn refuse(&mut self, fd: OwnedFd, why: &str) {
        refuse(fd, &mut self.engine, self.counters, self.stats, &mut self.refusal_log, self.now, why);
    }
}

/// Close a connection the server will not serve: send the protocol's refusal (HTTP's 503),
/// count it as refused, and log at most once a second. Every model refuses through this.
pub(crate) fn refuse(
    fd: OwnedFd,
    engine: &mut sockscale_proto::Engine,
    counters: &crate::stats::Counters,
    stats: &crate::stats::Stats,
    log: &mut LogLimiter,
    now: Instant,
    why: &str,
) {
    counters.refused();
    if let Some(refusal) = engine.refusal() {
        send_refusal(fd.as_raw_fd(), &refusal);
    }
    drop(fd);
    if let Some(suppressed) = log.allow(now) {
        tracing::warn!(open = stats.current(), suppressed, "refusing connections: {why}");
    }
}

/// Send the protocol's refusal on a connection about to be closed, with raw non-blocking calls
/// (a runtime that has not yet seen the socket writable would not try).
pub(crate) fn send_refusal(fd: RawFd, refusal: &[u8]) {
    let _ = sys::send(fd, refusal);
    let _ = sys::shutdown_write(fd);
    // Read what the client already sent: closing with unread data would reset the connection
    // and could destroy the 503 before the client reads it.
    let mut sink = [0u8; 2048];
    let _ = sys::recv(fd, &mut sink);
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
