//! The event loop every readiness model shares.
//!
//! select, poll, real-time signals and epoll differ only in how a thread learns that a socket
//! is ready. That difference is the [`Selector`] trait (register, reregister, deregister,
//! select, in `sockscale-sys`), one file per mechanism under `models/` (epoll's, shared with
//! the load generator, in `sockscale-sys`). Everything else — accepting under the accept
//! policy, reading into pool buffers within the fairness budget, feeding the protocol, writing
//! and queueing, timers, flood control, draining — is here, written once.
//!
//! Edge- and level-triggered selectors are both supported. The loop remembers readiness it
//! has not consumed (in each connection's `policy::Lifecycle`) and re-drives a connection whose read budget
//! ran out from its own `resume` list, so an edge is never lost; for level-triggered selectors
//! it keeps the registered interest minimal (no write interest without pending output, no read
//! interest while a connection is paused) so that waiting never spins.

mod accept;
mod drive;
pub mod epoll;
pub mod poll64;
pub mod select;
pub mod signal;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slab::Slab;
use sockscale_proto::Protocol;
use sockscale_sys::{Event, Interest, RegisterError, Selector, Timers, Waker};

use crate::active_places;
use crate::admission::LogLimiter;
use crate::clock::DateClock;
use crate::config::Config;
use crate::policy::{ActiveConfig, DrainStep, Entry, Handover, Limits, WorkerCore};
use crate::pool::BufferPool;
use crate::resources::Resources;
use crate::shutdown::{Phase, Shutdown};
use crate::socket_turn::ThreadState;
use crate::stats::{Counters, Stats};
use crate::udp::UdpService;

pub use crate::inbox::Inbox;
pub use accept::Acceptor;

pub(crate) const WAKER: u64 = u64::MAX;
pub(crate) const LISTENER: u64 = u64::MAX - 1;
pub(crate) const UDP: u64 = u64::MAX - 2;
pub(crate) const INBOX: u64 = u64::MAX - 3;

fn token(index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | index as u64
}

fn split(token: u64) -> (usize, u32) {
    ((token & 0xffff_ffff) as usize, (token >> 32) as u32)
}

/// Where a worker's connections come from.
pub enum Source {
    /// It accepts from its own (or a shared) listener.
    Listener(Acceptor),
    /// Connections accepted by another thread (the groups' acceptor), counted against
    /// `--max-conns` already.
    Inbox(Arc<Inbox<OwnedFd>>),
    /// It serves UDP datagrams instead (the worker moves the socket to [`WorkerParts::udp`]'s
    /// place: it has no connections to take).
    Udp(Box<UdpService>),
}

impl Source {
    /// A worker's own socket: the UDP socket under `--proto udp`, else a listener it accepts
    /// from (`exclusive`: shared with other workers under EPOLLEXCLUSIVE).
    pub fn own(socket: Arc<socket2::Socket>, udp: bool, exclusive: bool, cfg: &Config) -> Source {
        if udp {
            Source::Udp(Box::new(UdpService::new(socket, cfg)))
        } else {
            Source::Listener(Acceptor::new(socket, exclusive, cfg.accept_batch))
        }
    }
}

/// What a model hands a worker.
pub struct WorkerParts<'a> {
    pub cfg: &'a Config,
    pub protocol: Protocol,
    /// The server's loaded files: the body file, the TLS configuration.
    pub resources: &'a Arc<Resources>,
    pub stats: &'a Stats,
    pub counters: &'a Counters,
    pub pool: &'a BufferPool,
    pub shutdown: Shutdown,
    pub source: Source,
    /// This worker's share of `--active-set`.
    pub active: Option<ActiveConfig>,
    /// A UDP socket served beside the source: `--http3`'s, this worker's own (no other thread
    /// reads it, so each QUIC connection's datagrams reach one endpoint).
    pub udp: Option<Box<UdpService>>,
}

/// One thread's event loop over selector `S`.
pub struct Worker<'a, S: Selector> {
    selector: S,
    stats: &'a Stats,
    counters: &'a Counters,
    pool: &'a BufferPool,
    shutdown: Shutdown,
    waker: Arc<Waker>,
    source: Option<Source>,
    /// The UDP socket this worker serves (`--proto udp`'s, or `--http3`'s beside the listener);
    /// during a drain, until its endpoint has drained.
    udp: Option<Box<UdpService>>,
    /// The protocol engine, the output it writes into, and the body file.
    kit: ThreadState,
    conns: Slab<crate::socket_turn::Conn>,
    next_generation: u32,
    timers: Timers,
    /// The UDP socket's entry in `timers` (token [`UDP`]): its endpoint's wake-up.
    udp_timer_at: Option<Instant>,
    /// Connections (and the listener) to drive again without waiting for an event.
    resume: Vec<u64>,
    resume_accept: bool,
    events: Vec<Event>,
    now: Instant,
    edge: bool,
    refusal_log: LogLimiter,
    /// The per-connection limits of `cfg`.
    limits: Limits,
    /// When to read the wall clock again (see `turn`).
    date: DateClock,
    /// Admission, the active set (keyed by token) and the drain: this worker's core decides.
    core: WorkerCore<u64>,
}

impl<'a, S: Selector> Worker<'a, S> {
    pub fn new(mut selector: S, parts: WorkerParts<'a>) -> io::Result<Self> {
        let waker = Arc::new(Waker::new()?);
        selector.register(waker.fd().as_raw_fd(), WAKER, Interest::READ, false).map_err(into_io)?;
        let (source, udp) = match parts.source {
            Source::Udp(udp) => (None, Some(udp)),
            source => (Some(source), parts.udp),
        };
        let mut source = source;
        match &mut source {
            Some(Source::Listener(acceptor)) => acceptor.register(&mut selector)?,
            Some(Source::Inbox(inbox)) => {
                selector.register(inbox.waker().fd().as_raw_fd(), INBOX, Interest::READ, false).map_err(into_io)?
            }
            Some(Source::Udp(_)) | None => {}
        }
        if let Some(udp) = &udp {
            selector.register(udp.fd(), UDP, Interest::READ, false).map_err(into_io)?;
        }
        parts.shutdown.register(waker.clone());
        let edge = selector.edge_triggered();
        let now = Instant::now();
        Ok(Worker {
            selector,
            stats: parts.stats,
            counters: parts.counters,
            pool: parts.pool,
            shutdown: parts.shutdown,
            waker,
            source,
            udp,
            kit: ThreadState::new(&parts.protocol, parts.resources),
            conns: Slab::new(),
            next_generation: 0,
            timers: Timers::default(),
            udp_timer_at: None,
            resume: Vec::new(),
            resume_accept: false,
            events: Vec::with_capacity(1024),
            now,
            edge,
            refusal_log: LogLimiter::refusals(),
            limits: parts.cfg.limits(),
            date: DateClock::new(now),
            core: WorkerCore::new(parts.cfg.max_conns, parts.cfg.tls.is_some(), parts.active, Handover::AtOnce),
        })
    }

    /// Serve until shutdown has drained every connection.
    pub fn run(mut self) -> io::Result<()> {
        loop {
            self.turn()?;
            let forced = self.shutdown.phase() == Phase::Forced;
            // A UDP socket still draining (its endpoint has requests in flight) counts as open.
            let open = self.conns.len() + usize::from(self.udp.is_some());
            match self.core.drain_step(self.now, open, forced) {
                DrainStep::Serving | DrainStep::Draining => {}
                DrainStep::Done => return Ok(()),
                DrainStep::CloseAll => {
                    self.close_all();
                    return Ok(());
                }
            }
        }
    }

    /// One wait and everything it made ready.
    fn turn(&mut self) -> io::Result<()> {
        let timeout = self.wait_timeout();
        self.events.clear();
        match self.selector.select(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        self.now = Instant::now();
        self.date.tick(self.now, &mut self.kit.responder);
        let mut events = std::mem::take(&mut self.events);
        for event in events.drain(..) {
            self.dispatch(event);
        }
        self.events = events;
        self.run_resumed();
        self.fire_timers();
        Ok(())
    }

    fn wait_timeout(&self) -> Option<Duration> {
        if !self.resume.is_empty() || self.resume_accept {
            return Some(Duration::ZERO);
        }
        let mut wake_at = self.timers.next();
        for candidate in [self.core.next_wake(), self.accept_resumes_at()].into_iter().flatten() {
            wake_at = Some(wake_at.map_or(candidate, |at| at.min(candidate)));
        }
        // Round up so a timer is never woken for a microsecond early and left unfired.
        wake_at.map(|at| at.saturating_duration_since(Instant::now()) + Duration::from_millis(1))
    }

    fn dispatch(&mut self, event: Event) {
        match event.token {
            WAKER => {
                self.waker.reset();
                self.on_phase_change();
            }
            LISTENER => self.accept_ready(),
            INBOX => self.take_inbox(),
            UDP => self.udp_ready(),
            token => {
                let (index, generation) = split(token);
                let Some(conn) = self.conns.get_mut(index) else {
                    return;
                };
                if conn.generation != generation {
                    return;
                }
                conn.x.lc.on_ready(event.readable, event.writable, event.closed);
                self.drive(token);
            }
        }
    }

    fn run_resumed(&mut self) {
        if std::mem::take(&mut self.resume_accept) {
            self.accept_ready();
        }
        let resumed = std::mem::take(&mut self.resume);
        for token in resumed {
            if token == UDP {
                self.udp_ready();
            } else {
                self.drive(token);
            }
        }
    }

    fn fire_timers(&mut self) {
        self.resume_accepting(false);
        self.review_active_set();
        while let Some((at, token)) = self.timers.pop_due(self.now) {
            if token == UDP {
                if self.udp_timer_at == Some(at) {
                    self.udp_timer_at = None;
                    self.udp_ready();
                }
                continue;
            }
            let (index, generation) = split(token);
            let Some(conn) = self.conns.get_mut(index) else {
                continue;
            };
            if conn.generation != generation || conn.timer_at != Some(at) {
                continue;
            }
            conn.timer_at = None;
            self.on_deadline(token);
        }
    }

    fn on_phase_change(&mut self) {
        match self.shutdown.phase() {
            Phase::Running => {}
            Phase::Draining | Phase::Forced => self.begin_drain(),
        }
    }

    /// `--active-set`: a new connection (token `tok`) takes a place or waits for one.
    pub(super) fn enter_active_set(&mut self, tok: u64) {
        if self.core.on_started(tok, self.now) == Entry::Waiting {
            if let Some(conn) = self.conns.get_mut(split(tok).0) {
                active_places::stop(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, self.stats);
            }
        }
    }

    /// `--active-set`: connection `tok` is closing; the first waiting one takes its place.
    pub(super) fn leave_active_set(&mut self, tok: u64, was_waiting: bool) {
        active_places::closed(was_waiting, self.stats);
        if let Some(next) = self.core.on_closed(&tok, self.now) {
            self.start_reading(next);
        }
    }

    /// Give places up to waiting connections when a review is due.
    fn review_active_set(&mut self) {
        if !self.core.review_due(self.now) {
            return;
        }
        let conns = &self.conns;
        let swaps =
            self.core.review(self.now, |tok| conns.get(split(*tok).0).is_some_and(|c| c.x.lc.is_between_requests()));
        self.stats.rotated(swaps.stop.len());
        for tok in swaps.stop {
            if let Some(conn) = self.conns.get_mut(split(tok).0) {
                active_places::stop(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, self.stats);
            }
            // Level-triggered selectors stop watching its input.
            self.drive(tok);
        }
        for tok in swaps.start {
            self.start_reading(tok);
        }
    }

    /// A waiting connection was given a place: read what it has sent, after the others.
    fn start_reading(&mut self, tok: u64) {
        let Some(conn) = self.conns.get_mut(split(tok).0) else { return };
        active_places::start(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, self.stats);
        self.resume.push(tok);
    }

    /// Stop taking connections and let each one end at its next request boundary.
    fn begin_drain(&mut self) {
        let until = self.shutdown.drain_until().unwrap_or(self.now);
        // The drain ends the active set (see `Lifecycle::begin_drain`): a waiting connection
        // reads what it sent before the drain, or closes now if it sent nothing.
        if !self.core.begin_drain(until) {
            return;
        }
        match self.source.take() {
            Some(Source::Listener(mut acceptor)) => acceptor.deregister(&mut self.selector),
            Some(Source::Inbox(inbox)) => {
                let _ = self.selector.deregister(inbox.waker().fd().as_raw_fd());
                // Connections handed over but not yet taken are refused (the core answers how,
                // and gives back the --max-conns slots their acceptor took).
                for fd in inbox.close() {
                    self.on_accepted(fd, true);
                }
            }
            // Moved to `self.udp` when the worker was made.
            Some(Source::Udp(_)) | None => {}
        }
        // The UDP socket is served on through the drain (datagrams, timers), until its endpoint
        // says it has drained (`udp_ready`) or the deadline closes everything.
        if let Some(udp) = &mut self.udp {
            udp.begin_drain(self.now, self.counters);
            self.resume.push(UDP);
        }
        let tokens: Vec<u64> = self.conns.iter().map(|(i, c)| token(i, c.generation)).collect();
        for t in tokens {
            if let Some(conn) = self.conns.get_mut(split(t).0) {
                active_places::drain(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, until, self.stats);
            }
            self.drive(t);
        }
    }
}

fn into_io(e: RegisterError) -> io::Error {
    match e {
        RegisterError::Io(e) => e,
        RegisterError::Full(reason) => io::Error::other(reason),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::os::fd::{OwnedFd, RawFd};
    use std::os::unix::net::UnixStream;
    use std::rc::Rc;

    use super::*;

    /// A selector that records what it is asked to watch and never reports anything.
    struct Recording {
        edge: bool,
        watched: Rc<RefCell<Vec<(u64, Interest)>>>,
    }

    impl Selector for Recording {
        fn edge_triggered(&self) -> bool {
            self.edge
        }

        fn register(
            &mut self,
            _fd: RawFd,
            token: u64,
            interest: Interest,
            _exclusive: bool,
        ) -> Result<(), RegisterError> {
            self.watched.borrow_mut().push((token, interest));
            Ok(())
        }

        fn reregister(&mut self, _fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
            self.watched.borrow_mut().push((token, interest));
            Ok(())
        }

        fn deregister(&mut self, _fd: RawFd) -> io::Result<()> {
            Ok(())
        }

        fn select(&mut self, _events: &mut Vec<Event>, _timeout: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
    }

    /// A new socket is writable at once: watching it for that would wake the loop once per
    /// connection for nothing, on edge- and level-triggered selectors alike.
    #[test]
    fn a_new_connection_is_watched_for_input_only() {
        for edge in [true, false] {
            let cfg = Config::default();
            let stats = Stats::new(1);
            let pool = BufferPool::new(sockscale_sys::page_size(), 4, false).expect("pool");
            let inbox = Arc::new(Inbox::new().expect("inbox"));
            let (server_end, _client) = UnixStream::pair().expect("pair");
            server_end.set_nonblocking(true).expect("nonblocking");
            assert!(stats.try_open(cfg.max_conns));
            inbox.push(OwnedFd::from(server_end)).expect("hand over");
            let watched = Rc::new(RefCell::new(Vec::new()));
            let parts = WorkerParts {
                cfg: &cfg,
                protocol: Protocol::Echo,
                resources: &Arc::default(),
                stats: &stats,
                counters: stats.shard(0),
                pool: &pool,
                shutdown: Shutdown::new(),
                source: Source::Inbox(inbox),
                active: None,
                udp: None,
            };
            let mut worker = Worker::new(Recording { edge, watched: watched.clone() }, parts).expect("worker");
            worker.take_inbox();
            let conns: Vec<Interest> =
                watched.borrow().iter().filter(|(token, _)| *token < INBOX).map(|&(_, interest)| interest).collect();
            assert_eq!(conns, [Interest::READ], "edge-triggered: {edge}");
        }
    }
}
