//! Connections in groups of a fixed size, a thread per group, threads growing with connections:
//! the shape of the seeds' WSAEventSelect and overlapped-with-events servers, whose threads
//! could each wait on at most 64 events. `poll64` and `uring64` share it and differ only in what
//! a group runs.
//!
//! The model's own thread is the acceptor: it waits in poll(2) on the listener and its shutdown
//! waker, takes up to `--accept-batch` connections per wake-up, asks its worker core
//! (`policy::WorkerCore`) whether to admit each (beyond `--max-conns` it is refused: a 503 in
//! clear, nothing under TLS, then a FIN) and hands it to the first group with room through that group's `Inbox`. When every group is full
//! it starts another. Empty groups stay: a parked group thread costs no CPU, and refilling the
//! lowest-numbered groups first keeps the threads of the busiest moment instead of starting and
//! stopping threads while the load oscillates around a multiple of the group size.
//!
//! When accept fails for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) the
//! acceptor stops watching the listener for a back-off that doubles from 10 ms to 1 s, logging
//! at most once a second; a group closing a connection wakes it to try again at once. A group
//! that cannot be started (no thread, no eventfd, no ring) refuses the connection that needed it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

use socket2::Socket;
use sockscale_proto::{Protocol, Responder};
use sockscale_sys::{self as sys, Waker};

use crate::admission::{self, accept_paused, LogLimiter, Refusal};
use crate::clock::unix_now;
use crate::config::Config;
use crate::inbox::Inbox;
use crate::policy::{AcceptFailed, AcceptGate, AcceptNext, Handover, Refused, WorkerCore};
use crate::shutdown::Shutdown;
use crate::stats::{Counters, Stats};

/// What a group shares with the acceptor.
#[derive(Debug)]
pub struct GroupLoad {
    /// Connections handed to the group and not yet closed: the acceptor adds one before handing
    /// a connection over, the group takes it away when the connection closes.
    connections: AtomicUsize,
    acceptor: Arc<AcceptorWake>,
}

impl GroupLoad {
    /// A connection of this group has closed (or is about to): its slot is free, and a
    /// descriptor is free for an acceptor paused on EMFILE.
    pub fn release(&self) {
        self.connections.fetch_sub(1, Ordering::AcqRel);
        if self.acceptor.paused.load(Ordering::Acquire) {
            self.acceptor.waker.wake();
        }
    }

    /// Connections handed to the group and not yet closed (read by the groups' unit tests).
    #[cfg(test)]
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A group load without an acceptor thread, for the groups' own unit tests.
    use super::*;

    pub fn load() -> Arc<GroupLoad> {
        let waker = Arc::new(Waker::new().unwrap_or_else(|e| panic!("eventfd: {e}")));
        Arc::new(GroupLoad {
            connections: AtomicUsize::new(0),
            acceptor: Arc::new(AcceptorWake { paused: AtomicBool::new(false), waker }),
        })
    }

    /// As if the acceptor had handed over `n` connections.
    pub fn hand_over(load: &GroupLoad, n: usize) {
        load.connections.fetch_add(n, Ordering::AcqRel);
    }

    pub fn pause_acceptor(load: &GroupLoad) {
        load.acceptor.paused.store(true, Ordering::Release);
    }

    pub fn acceptor_waker(load: &GroupLoad) -> RawFd {
        load.acceptor.waker.fd().as_raw_fd()
    }
}

/// How a group tells a paused acceptor that a descriptor was freed.
#[derive(Debug)]
struct AcceptorWake {
    paused: AtomicBool,
    waker: Arc<Waker>,
}

/// What a new group gets: its number, where its connections arrive, and the load it releases.
pub struct NewGroup {
    pub index: usize,
    pub inbox: Arc<Inbox<OwnedFd>>,
    pub load: Arc<GroupLoad>,
}

/// One group as the acceptor sees it.
struct Group<'scope> {
    inbox: Arc<Inbox<OwnedFd>>,
    load: Arc<GroupLoad>,
    thread: ScopedJoinHandle<'scope, io::Result<()>>,
}

/// The model's own thread: accepts, and hands connections to groups.
pub struct GroupAcceptor<'scope, 'env> {
    stats: &'env Stats,
    counters: &'env Counters,
    shutdown: &'env Shutdown,
    /// Only for the protocol's refusal (HTTP's 503).
    responder: Responder,
    listener: Arc<Socket>,
    group_size: usize,
    wake: Arc<AcceptorWake>,
    groups: Vec<Group<'scope>>,
    /// While it backs off after EMFILE and the like, the listener is not watched.
    gate: AcceptGate<OwnedFd>,
    accept_log: LogLimiter,
    refusal_log: LogLimiter,
    /// Whom to admit and how to refuse (the groups keep their own active sets and drains).
    core: WorkerCore<u64>,
}

impl<'scope, 'env> GroupAcceptor<'scope, 'env> {
    pub fn new(
        cfg: &'env Config,
        stats: &'env Stats,
        shutdown: &'env Shutdown,
        protocol: &Protocol,
        listener: Arc<Socket>,
        group_size: usize,
    ) -> io::Result<Self> {
        let waker = Arc::new(Waker::new()?);
        shutdown.register(waker.clone());
        Ok(GroupAcceptor {
            stats,
            counters: stats.shard(0),
            shutdown,
            responder: protocol.responder(unix_now()),
            listener,
            group_size,
            wake: Arc::new(AcceptorWake { paused: AtomicBool::new(false), waker }),
            groups: Vec::new(),
            gate: AcceptGate::new(cfg.accept_batch),
            accept_log: LogLimiter::accept_errors(),
            refusal_log: LogLimiter::refusals(),
            core: WorkerCore::new(cfg.max_conns, cfg.tls.is_some(), None, Handover::AtOnce),
        })
    }

    /// Accept until shutdown, starting groups with `start`, then close the inboxes and wait for
    /// every group to drain.
    pub fn run<F>(mut self, scope: &'scope Scope<'scope, 'env>, mut start: F) -> io::Result<()>
    where
        F: FnMut(&'scope Scope<'scope, 'env>, NewGroup) -> io::Result<ScopedJoinHandle<'scope, io::Result<()>>>,
    {
        let mut result = self.accept_until_shutdown(scope, &mut start);
        if result.is_err() {
            // Without its acceptor the server would limp on deaf: stop everything.
            self.shutdown.force();
        }
        let unclaimed: Vec<OwnedFd> = self.groups.iter().flat_map(|g| g.inbox.close()).collect();
        for fd in unclaimed {
            self.abandon(fd);
        }
        for (index, group) in self.groups.into_iter().enumerate() {
            let outcome = group.thread.join().unwrap_or_else(|_| Err(io::Error::other("group thread panicked")));
            if let Err(e) = outcome {
                tracing::error!(group = index, error = %e, "connection group failed");
                result = result.and(Err(e));
            }
        }
        result
    }

    fn accept_until_shutdown<F>(&mut self, scope: &'scope Scope<'scope, 'env>, start: &mut F) -> io::Result<()>
    where
        F: FnMut(&'scope Scope<'scope, 'env>, NewGroup) -> io::Result<ScopedJoinHandle<'scope, io::Result<()>>>,
    {
        let listener = self.listener.as_raw_fd();
        let mut fds = [
            libc::pollfd { fd: self.wake.waker.fd().as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: listener, events: libc::POLLIN, revents: 0 },
        ];
        while self.shutdown.is_running() {
            let now = Instant::now();
            let closed_until = self.gate.is_closed().then(|| self.gate.resumes_at()).flatten().filter(|at| *at > now);
            // While the gate is closed, the listener (ready all the while) is not watched.
            let watched = if closed_until.is_some() { 1 } else { 2 };
            let timeout = closed_until.map(|at| at.saturating_duration_since(now));
            match sys::ppoll(&mut fds[..watched], timeout) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if fds[0].revents != 0 {
                // Shutdown (checked by the loop condition), or a group freed a descriptor.
                self.wake.waker.reset();
                self.gate.on_freed(Instant::now());
            }
            if watched == 1 || fds[1].revents != 0 {
                self.accept_turn(scope, listener, start);
            }
        }
        Ok(())
    }

    /// Carry out what the gate answers until the queue is empty, the batch spent (poll is
    /// level-triggered, so what it leaves is reported again at once) or the gate closed.
    fn accept_turn<F>(&mut self, scope: &'scope Scope<'scope, 'env>, listener: RawFd, start: &mut F)
    where
        F: FnMut(&'scope Scope<'scope, 'env>, NewGroup) -> io::Result<ScopedJoinHandle<'scope, io::Result<()>>>,
    {
        loop {
            let (now, storm) = (Instant::now(), self.stats.storm_holds());
            match self.gate.next(now, storm) {
                AcceptNext::Admit(fd) => self.hand_over(scope, fd, start),
                AcceptNext::Accept => match sys::accept(listener) {
                    Ok(fd) => {
                        if let Some(fd) = self.gate.on_taken(fd, storm) {
                            self.hand_over(scope, fd, start);
                        }
                    }
                    Err(e) => {
                        let (failed, step) = self.gate.on_error(now, &e);
                        accept_paused(&mut self.accept_log, self.stats, now, &e, step);
                        if failed == AcceptFailed::Empty {
                            break;
                        }
                    }
                },
                AcceptNext::Spent => break,
                AcceptNext::Closed { .. } => break,
            }
        }
        // Groups wake this thread when they free a descriptor only while it is closed: set
        // before any group can close a connection unseen.
        self.wake.paused.store(self.gate.is_closed(), Ordering::Release);
    }

    fn hand_over<F>(&mut self, scope: &'scope Scope<'scope, 'env>, fd: OwnedFd, start: &mut F)
    where
        F: FnMut(&'scope Scope<'scope, 'env>, NewGroup) -> io::Result<ScopedJoinHandle<'scope, io::Result<()>>>,
    {
        let responder = &mut self.responder;
        if let Some(refused) = self.core.on_accepted(false, self.stats, || refusal(responder)) {
            return self.refuse(fd, refused);
        }
        let group = match self.group_with_room(scope, start) {
            Ok(group) => group,
            Err(e) => return self.unserved(fd, Refusal::Group(&e)),
        };
        let load = self.groups[group].load.clone();
        load.connections.fetch_add(1, Ordering::AcqRel);
        if let Err(fd) = self.groups[group].inbox.push(fd) {
            // The group stopped taking connections: it is draining, or it failed.
            load.connections.fetch_sub(1, Ordering::AcqRel);
            self.unserved(fd, Refusal::ShuttingDown);
        }
    }

    /// The first group with room, starting one if every group is full. Only this thread adds
    /// to a group's load, so room seen here is still there when the connection is handed over.
    fn group_with_room<F>(&mut self, scope: &'scope Scope<'scope, 'env>, start: &mut F) -> io::Result<usize>
    where
        F: FnMut(&'scope Scope<'scope, 'env>, NewGroup) -> io::Result<ScopedJoinHandle<'scope, io::Result<()>>>,
    {
        let size = self.group_size;
        if let Some(index) = self.groups.iter().position(|g| g.load.connections.load(Ordering::Acquire) < size) {
            return Ok(index);
        }
        let index = self.groups.len();
        let inbox = Arc::new(Inbox::new()?);
        let load = Arc::new(GroupLoad { connections: AtomicUsize::new(0), acceptor: self.wake.clone() });
        let thread = start(scope, NewGroup { index, inbox: inbox.clone(), load: load.clone() })?;
        self.groups.push(Group { inbox, load, thread });
        Ok(index)
    }

    /// A connection counted against --max-conns that no group will serve.
    fn abandon(&mut self, fd: OwnedFd) {
        self.unserved(fd, Refusal::ShuttingDown);
    }

    /// A connection admitted (its slot taken) that will not be served, for `why`: refused as
    /// the core answers, its slot given back.
    fn unserved(&mut self, fd: OwnedFd, why: Refusal<'_>) {
        let responder = &mut self.responder;
        let refused = self.core.on_unserved(why, self.stats, || refusal(responder));
        self.refuse(fd, refused);
    }

    /// Carry out a refusal: its last bytes, its ending, its count.
    fn refuse(&mut self, fd: OwnedFd, refused: Refused<'_>) {
        admission::refuse(fd.as_raw_fd(), refused, self.counters, self.stats, &mut self.refusal_log);
    }
}

/// The protocol's refusal (HTTP's 503), dated now: this engine serves nothing else, so it is
/// brought to the current second only when a refusal is rendered.
fn refusal(responder: &mut Responder) -> Option<bytes::Bytes> {
    responder.tick(unix_now());
    responder.refusal()
}
