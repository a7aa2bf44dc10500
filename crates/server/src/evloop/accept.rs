//! Taking connections in: the accept policy of the seeds, on a readiness selector.
//!
//! - Up to `--accept-batch` accepts per wake-up (the AcceptEx low/high watermark, turned
//!   around: instead of keeping N accepts posted, take up to N each time the listener is
//!   ready); if the batch ran out before the queue did, the listener is driven again on the
//!   next turn, after the connections already ready have had theirs.
//! - Beyond `--max-conns`, a connection is refused (`admission::refuse`).
//! - When accept fails for lack of descriptors or memory, `policy::AcceptBackoff` says for how
//!   long to pause; meanwhile the listener is taken out of the selector, so the loop never
//!   spins on a listener it cannot serve, and it comes back early when one of this worker's
//!   connections closes and frees a descriptor.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use socket2::Socket;
use sockscale_sys::{self as sys, Interest, RegisterError, Selector, Waker};

use super::{token, Worker, LISTENER};
use crate::admission::{self, accept_paused, LogLimiter, Refusal};
use crate::conn::Conn;
use crate::policy::{AcceptBackoff, AcceptStep};

/// A listener as one worker sees it.
pub struct Acceptor {
    socket: Arc<Socket>,
    /// EPOLLEXCLUSIVE-style sharing with other workers.
    exclusive: bool,
    registered: bool,
    backoff: AcceptBackoff,
    log: LogLimiter,
}

impl Acceptor {
    pub fn new(socket: Arc<Socket>, exclusive: bool) -> Self {
        Acceptor {
            socket,
            exclusive,
            registered: false,
            backoff: AcceptBackoff::default(),
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

impl<S: Selector> Worker<'_, S> {
    pub(super) fn accept_ready(&mut self) {
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        if acceptor.backoff.is_paused() {
            return;
        }
        if self.stats.storm_holds() {
            // An abort storm: leave connections in the backlog; look again when one of ours
            // closes, or soon.
            acceptor.backoff.hold(self.now, AcceptBackoff::STORM_RECHECK);
            acceptor.deregister(&mut self.selector);
            return;
        }
        let fd = acceptor.fd();
        for _ in 0..self.cfg.accept_batch {
            match sys::accept(fd) {
                Ok(conn) => {
                    if let Some(super::Source::Listener(acceptor)) = &mut self.source {
                        acceptor.backoff.on_accepted();
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
        let (now, stats) = (self.now, self.stats);
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        match acceptor.backoff.on_error(now, &err) {
            AcceptStep::Empty => {}
            AcceptStep::Retry => self.resume_accept = true,
            step @ AcceptStep::Pause { .. } => {
                accept_paused(&mut acceptor.log, stats, now, &err, step);
                acceptor.deregister(&mut self.selector);
            }
        }
    }

    pub(super) fn accept_resumes_at(&self) -> Option<Instant> {
        match &self.source {
            Some(super::Source::Listener(acceptor)) => acceptor.backoff.paused_until(),
            _ => None,
        }
    }

    /// Listen again if the back-off is over, or at once if `freed` (a connection closed, so a
    /// descriptor is free), and look at the queue.
    pub(super) fn resume_accepting(&mut self, freed: bool) {
        let now = self.now;
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        if !acceptor.backoff.resume(now, freed) {
            return;
        }
        if let Err(e) = acceptor.register(&mut self.selector) {
            tracing::error!(error = %e, "cannot watch the listener again");
            acceptor.backoff.on_error(now, &e);
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
            self.refuse(fd, Refusal::MaxConns);
            return;
        }
        let entry = self.conns.vacant_entry();
        let index = entry.key();
        let generation = self.next_generation;
        let tok = token(index, generation);
        // Input only: a new socket is writable at once, and asking to hear it would cost a
        // wake-up per connection for nothing. Write interest is added when output is refused.
        match self.selector.register(fd.as_raw_fd(), tok, Interest::READ, false) {
            Ok(()) => {}
            Err(RegisterError::Full(reason)) => {
                self.stats.close();
                self.refuse(fd, Refusal::Full(&reason));
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
        let fd_raw = fd.as_raw_fd();
        let mut conn = Conn::new(fd, self.kit.engine.new_session(), self.now, generation);
        conn.registered = Interest::READ;
        let deadline = conn.x.deadline(&self.kit.engine, &self.limits);
        self.timers.schedule(&mut conn.timer_at, deadline, tok);
        entry.insert(conn);
        self.counters.accepted();
        self.stats.enlist(fd_raw);
        self.enter_active_set(tok);
        // Data that arrived with the connection is read now rather than after another wait:
        // epoll reports it anyway, but level-triggered selectors would need a full turn.
        if !self.edge {
            self.drive(tok);
        }
    }

    /// Close a connection the server will not serve, after the protocol's refusal.
    fn refuse(&mut self, fd: OwnedFd, why: Refusal<'_>) {
        admission::refuse(fd.as_raw_fd(), &mut self.kit.engine, self.counters, self.stats, &mut self.refusal_log, why);
    }
}
