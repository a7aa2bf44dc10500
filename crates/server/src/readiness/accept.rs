//! Taking connections in on a readiness selector: the loop carries out what the accept gate
//! (`policy::AcceptGate`: batch, back-off, abort-storm hold) answers. While the gate is closed
//! the listener is taken out of the selector, so the loop never spins on a listener it cannot
//! serve; it comes back when the gate's time is due or one of this worker's connections
//! closes. A spent batch drives the listener again on the next turn, after the connections
//! already ready have had theirs. Whether a connection taken is served, waits for an
//! active-set place or is refused (and with which bytes) is the worker core's
//! (`policy::WorkerCore`); a refusal is carried out by `admission::refuse`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use socket2::Socket;
use sockscale_sys::{self as sys, Interest, RegisterError, Selector};

use super::{token, Worker, LISTENER};
use crate::admission::{self, accept_paused, LogLimiter, Refusal};
use crate::policy::{AcceptFailed, AcceptGate, AcceptNext, Refused};
use crate::socket_turn::Conn;

/// A listener as one worker sees it.
pub struct Acceptor {
    socket: Arc<Socket>,
    /// EPOLLEXCLUSIVE-style sharing with other workers.
    exclusive: bool,
    registered: bool,
    gate: AcceptGate<OwnedFd>,
    log: LogLimiter,
}

impl Acceptor {
    pub fn new(socket: Arc<Socket>, exclusive: bool, batch: usize) -> Self {
        Acceptor {
            socket,
            exclusive,
            registered: false,
            gate: AcceptGate::new(batch),
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

impl<S: Selector> Worker<'_, S> {
    pub(super) fn accept_ready(&mut self) {
        loop {
            let (now, stats) = (self.now, self.stats);
            let storm = stats.storm_holds();
            let Some(super::Source::Listener(acceptor)) = &mut self.source else {
                return;
            };
            match acceptor.gate.next(now, storm) {
                AcceptNext::Admit(fd) => self.on_accepted(fd, false),
                AcceptNext::Accept => {
                    if let Err(e) = acceptor.register(&mut self.selector) {
                        tracing::error!(error = %e, "cannot watch the listener again");
                        let (_, step) = acceptor.gate.on_error(now, &e);
                        accept_paused(&mut acceptor.log, stats, now, &e, step);
                        continue;
                    }
                    match sys::accept(acceptor.fd()) {
                        Ok(fd) => {
                            if let Some(fd) = acceptor.gate.on_taken(fd, storm) {
                                self.on_accepted(fd, false);
                            }
                        }
                        Err(e) => {
                            let (failed, step) = acceptor.gate.on_error(now, &e);
                            accept_paused(&mut acceptor.log, stats, now, &e, step);
                            if failed == AcceptFailed::Empty {
                                return;
                            }
                        }
                    }
                }
                AcceptNext::Spent => {
                    self.resume_accept = true;
                    return;
                }
                AcceptNext::Closed { .. } => {
                    acceptor.deregister(&mut self.selector);
                    return;
                }
            }
        }
    }

    pub(super) fn accept_resumes_at(&self) -> Option<Instant> {
        match &self.source {
            Some(super::Source::Listener(acceptor)) => acceptor.gate.resumes_at(),
            _ => None,
        }
    }

    /// Look at the queue again if the gate's time is due, or at once if `freed` (a connection
    /// closed: a descriptor is free, and a storm may be over).
    pub(super) fn resume_accepting(&mut self, freed: bool) {
        let now = self.now;
        let Some(super::Source::Listener(acceptor)) = &mut self.source else {
            return;
        };
        if !acceptor.gate.is_closed() {
            return;
        }
        let open =
            if freed { acceptor.gate.on_freed(now) } else { acceptor.gate.resumes_at().is_some_and(|at| at <= now) };
        if open {
            self.resume_accept = true;
        }
    }

    pub(super) fn take_inbox(&mut self) {
        let Some(super::Source::Inbox(inbox)) = &self.source else {
            return;
        };
        let inbox = inbox.clone();
        let mut fds = Vec::new();
        inbox.take_into(&mut fds);
        for fd in fds {
            self.on_accepted(fd, true);
        }
    }

    /// Set up one accepted connection, or refuse it, as the worker core answers. `counted`: the
    /// max-conns slot was already taken by whoever accepted it.
    pub(super) fn on_accepted(&mut self, fd: OwnedFd, counted: bool) {
        let responder = &mut self.kit.responder;
        if let Some(refused) = self.core.on_accepted(counted, self.stats, || responder.refusal()) {
            return self.refuse(fd, refused);
        }
        let x = match self.kit.open(self.now, self.counters) {
            Ok(x) => x,
            Err(refusal) => return self.unserved(fd, refusal),
        };
        let entry = self.conns.vacant_entry();
        let index = entry.key();
        let generation = self.next_generation;
        let tok = token(index, generation);
        // Input only: a new socket is writable at once, and asking to hear it would cost a
        // wake-up per connection for nothing. Write interest is added when output is refused.
        match self.selector.register(fd.as_raw_fd(), tok, Interest::READ, false) {
            Ok(()) => {}
            Err(RegisterError::Full(reason)) => return self.unserved(fd, Refusal::Full(&reason)),
            Err(RegisterError::Io(e)) => return self.unserved(fd, Refusal::Unwatchable(&e)),
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        let fd_raw = fd.as_raw_fd();
        let mut conn = Conn::new(fd, x, generation);
        conn.registered = Interest::READ;
        let deadline = conn.x.deadline(&self.kit.responder, &self.limits);
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

    /// An admitted connection could not be set up, for `why`: refuse it as the core answers.
    fn unserved(&mut self, fd: OwnedFd, why: Refusal<'_>) {
        let responder = &mut self.kit.responder;
        let refused = self.core.on_unserved(why, self.stats, || responder.refusal());
        self.refuse(fd, refused);
    }

    /// Carry out a refusal: its last bytes, its ending, its count.
    fn refuse(&mut self, fd: OwnedFd, refused: Refused<'_>) {
        admission::refuse(fd.as_raw_fd(), refused, self.counters, self.stats, &mut self.refusal_log);
    }
}
