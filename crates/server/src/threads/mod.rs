//! Serving connections from threads that block: what the two thread models share.
//!
//! `--model blocking` (two threads per connection) and `--model threadpool` (an accept thread,
//! a bounded queue, a fixed set of workers) wait differently, but every policy is the same as
//! in the readiness event loop (`readiness/drive.rs`), and so is the code that applies it, here:
//!
//! - [`ThreadShared`]: what every thread of the model shares — config, counters, the buffer pool, the
//!   shutdown latches, the count of live connections, pooled protocol engines;
//! - [`ThreadShared::accept_loop`]: an acceptor thread that waits in poll(2) on the listener and the
//!   drain latch and carries out what `policy::AcceptGate` answers (batch, back-off, storm
//!   hold; a pause is cut short when a connection closes), and [`Admission`] what the model's
//!   worker core (`policy::WorkerCore`) answers: admit, or refuse (beyond `--max-conns`, past
//!   the memory maps' budget, when no TLS session or thread can be had);
//! - [`ThreadShared::supervise`]: the model's own thread, which waits for a shutdown, stops the acceptor
//!   and returns when the core's drain says so: every connection drained, or the drain
//!   deadline (or a second signal) passed and the rest must close now;
//! - [`begin_drain`]: a connection noticing the drain; a connection's turns are its lifecycle's
//!   (`connection::Connection`, carried out by `conn`'s `Connection::turn`: a pool buffer taken only when
//!   it asks for a read, the output written straight from the buffer);
//! - [`serve_udp`]: UDP echo on a few threads blocked in poll(2).
//!
//! Connection sockets stay non-blocking, as `sys::accept` makes them: a thread "blocks" in
//! ppoll(2) on its one socket, plus a latch eventfd where it must hear about shutdown. A
//! blocking socket with SO_RCVTIMEO/SO_SNDTIMEO would behave the same but could not be woken by
//! a shutdown, and its timeouts would not follow deadlines that move (idle, header, send).

pub mod blocking;
pub mod threadpool;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use socket2::Socket;
use sockscale_proto::{Protocol, Responder};
use sockscale_sys::{self as sys, Waker};

use crate::admission::{self, accept_paused, LogLimiter, Refusal};
use crate::clock::unix_now;
use crate::config::Config;
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::policy::CloseReason;
use crate::policy::{AcceptFailed, AcceptGate, AcceptNext, DrainStep, Handover, Limits, MapBudget, Slots, WorkerCore};
use crate::pool::BufferPool;
use crate::resources::Resources;
use crate::shutdown::{Phase, Shutdown};
use crate::socket_turn::{self, Close, Conn, Connection, TlsScratch};
use crate::stats::{Counters, Stats};
use crate::udp::{self, UdpService, UdpTurn};

/// Idle protocol engines kept for reuse (see [`ThreadShared::take_kit`]); more are dropped. Enough for
/// the threads that may hold one at once (a thread preempted mid-read keeps its engine), at
/// about 13 KiB each for HTTP.
const KITS_KEPT: usize = 256;

/// A pollfd asking for `events` on `fd`.
pub fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

pub use crate::socket_turn::ThreadState;

/// Everything the threads of a thread model share.
pub struct ThreadShared<'a> {
    pub cfg: &'a Config,
    /// The per-connection limits of `cfg`.
    pub limits: Limits,
    pub protocol: Protocol,
    /// The server's loaded files: the body file, the TLS configuration.
    pub resources: &'a Arc<Resources>,
    pub stats: &'a Stats,
    pub pool: &'a BufferPool,
    pub shutdown: Shutdown,
    /// Signalled on every phase change and never reset, so any number of threads can keep it in
    /// their poll(2) sets and none can miss the start of a drain. A thread that has seen the
    /// drain must stop polling it (it stays readable).
    drain: Arc<Waker>,
    /// Signalled once, never reset, when whatever is left must close now.
    force: Waker,
    forced: AtomicBool,
    /// Wakes the supervisor: phase changes, and the last connection closing during a drain.
    supervisor: Arc<Waker>,
    /// Wakes an acceptor paused on EMFILE when a connection closes and frees a descriptor.
    accept_resume: Waker,
    accept_paused: AtomicBool,
    /// Connections admitted and not yet closed.
    live: AtomicUsize,
    /// Engines lent to connection threads only while they have input (see `take_kit`).
    kits: Mutex<Vec<ThreadState>>,
    /// Admission and the drain, for the model (its acceptor admits, its supervisor drains).
    core: Mutex<WorkerCore<u64>>,
}

impl<'a> ThreadShared<'a> {
    pub fn new(
        cfg: &'a Config,
        protocol: Protocol,
        resources: &'a Arc<Resources>,
        stats: &'a Stats,
        pool: &'a BufferPool,
        shutdown: Shutdown,
    ) -> io::Result<Self> {
        let drain = Arc::new(Waker::new()?);
        let supervisor = Arc::new(Waker::new()?);
        shutdown.register(drain.clone());
        shutdown.register(supervisor.clone());
        Ok(ThreadShared {
            cfg,
            limits: cfg.limits(),
            protocol,
            resources,
            stats,
            pool,
            shutdown,
            drain,
            force: Waker::new()?,
            forced: AtomicBool::new(false),
            supervisor,
            accept_resume: Waker::new()?,
            accept_paused: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            kits: Mutex::new(Vec::new()),
            core: Mutex::new(WorkerCore::new(cfg.max_conns, cfg.tls.is_some(), None, Handover::AtOnce)),
        })
    }

    pub fn is_draining(&self) -> bool {
        self.shutdown.phase() != Phase::Running
    }

    /// Whatever is left must close now: the drain deadline passed, or a second signal came.
    pub fn is_forced(&self) -> bool {
        self.forced.load(Ordering::Acquire)
    }

    /// The latch that is readable once a drain has started (never reset).
    pub fn drain_fd(&self) -> RawFd {
        self.drain.fd().as_raw_fd()
    }

    /// The latch that is readable once everything must close (never reset).
    pub fn force_fd(&self) -> RawFd {
        self.force.fd().as_raw_fd()
    }

    pub fn force_close(&self) {
        self.forced.store(true, Ordering::Release);
        self.force.wake();
    }

    /// Lend a protocol engine, brought to the current second. With a thread per connection,
    /// an engine per thread would cost every connection its own rendered HTTP responses (three
    /// 4 KiB pages) and a re-render every second it is active; lending them only while a thread
    /// has input keeps as many engines as threads working at once, as the pool does for buffers.
    pub fn take_kit(&self) -> ThreadState {
        let kept = self.kits.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut kit = kept.unwrap_or_else(|| self.new_kit());
        kit.tick();
        kit
    }

    /// A new protocol kit for a thread of this hub.
    pub fn new_kit(&self) -> ThreadState {
        ThreadState::new(&self.protocol, self.resources)
    }

    pub fn put_kit(&self, mut kit: ThreadState) {
        kit.scratch.clear();
        let mut kits = self.kits.lock().unwrap_or_else(|e| e.into_inner());
        if kits.len() < KITS_KEPT {
            kits.push(kit);
        }
    }

    fn core(&self) -> std::sync::MutexGuard<'_, WorkerCore<u64>> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admit a connection only while the memory maps of its threads fit in `budget`.
    pub fn limit_maps(&self, budget: MapBudget) {
        self.core().set_map_budget(budget);
    }

    /// Account for a connection whose descriptor has been closed.
    pub fn closed(&self, counters: &Counters, reason: CloseReason) {
        self.stats.closed(counters, reason);
        self.release();
    }

    /// Close `conn` for `reason`, with the last bytes its connection owes the client, and
    /// account for it.
    pub fn close(&self, mut conn: Conn, counters: &Counters, reason: CloseReason) {
        let close = conn.x.close(reason);
        self.end(conn, &close, &mut TlsScratch::default(), counters);
    }

    /// Carry out `close` on `conn` (`conn::end`; dropping it closes the descriptor) and
    /// account for it. `scratch`: the thread's, to seal queued output with.
    pub fn end(&self, mut conn: Conn, close: &Close, scratch: &mut TlsScratch, counters: &Counters) {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&conn.fd);
        socket_turn::end(fd, &mut conn.x, close, scratch, counters);
        self.stats.delist(fd);
        drop(conn);
        self.closed(counters, close.reason);
    }

    fn release(&self) {
        let before = self.live.fetch_sub(1, Ordering::AcqRel);
        if before == 1 && self.is_draining() {
            self.supervisor.wake();
        }
        // A descriptor is free again: an acceptor paused on EMFILE may take one more.
        if self.accept_paused.load(Ordering::Acquire) {
            self.accept_resume.wake();
        }
    }

    /// Accept until a drain starts, handing each connection to `admit` with a [`Admission`] for
    /// connections it will not serve. Returns Err only if waiting itself fails; the server then
    /// stops (forced) rather than limp along without an acceptor.
    pub fn accept_loop(
        &self,
        listener: &Socket,
        counters: &Counters,
        admit: impl FnMut(OwnedFd, &mut Admission<'_>),
    ) -> io::Result<()> {
        let result = self.accept_until_drain(listener, counters, admit);
        if let Err(e) = &result {
            tracing::error!(error = %e, "the accept thread failed; stopping the server");
            self.shutdown.force();
        }
        result
    }

    fn accept_until_drain(
        &self,
        listener: &Socket,
        counters: &Counters,
        mut admit: impl FnMut(OwnedFd, &mut Admission<'_>),
    ) -> io::Result<()> {
        let fd = listener.as_raw_fd();
        let mut refuser = Admission { responder: self.new_kit().responder, log: LogLimiter::refusals(), counters };
        let mut log = LogLimiter::accept_errors();
        let mut gate = AcceptGate::new(self.cfg.accept_batch);
        loop {
            let mut fds = [pollfd(fd, libc::POLLIN), pollfd(self.drain_fd(), libc::POLLIN)];
            match sys::ppoll(&mut fds, None) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if fds[1].revents != 0 || self.is_draining() {
                return Ok(());
            }
            // poll is level-triggered: what a spent batch leaves is reported again at once.
            loop {
                let (now, storm) = (Instant::now(), self.stats.storm_holds());
                match gate.next(now, storm) {
                    AcceptNext::Admit(conn) => admit(conn, &mut refuser),
                    AcceptNext::Accept => match sys::accept(fd) {
                        Ok(conn) => {
                            if let Some(conn) = gate.on_taken(conn, storm) {
                                admit(conn, &mut refuser);
                            }
                        }
                        Err(e) => {
                            let (failed, step) = gate.on_error(now, &e);
                            accept_paused(&mut log, self.stats, now, &e, step);
                            if failed == AcceptFailed::Empty {
                                break;
                            }
                        }
                    },
                    AcceptNext::Spent => break,
                    AcceptNext::Closed { until } => {
                        self.pause_accepting(&mut gate, until)?;
                        break;
                    }
                }
            }
        }
    }

    /// Sleep until `until` without touching the listener, which stays readable all the while
    /// (waiting on it would spin), waking early when a connection closes (a descriptor is free,
    /// a storm may be over) or a drain starts.
    fn pause_accepting(&self, gate: &mut AcceptGate<OwnedFd>, until: Instant) -> io::Result<()> {
        self.accept_paused.store(true, Ordering::Release);
        let result = loop {
            let now = Instant::now();
            if now >= until {
                break Ok(());
            }
            let mut fds =
                [pollfd(self.accept_resume.fd().as_raw_fd(), libc::POLLIN), pollfd(self.drain_fd(), libc::POLLIN)];
            match sys::ppoll(&mut fds, Some(until - now)) {
                Ok(0) => {}
                Ok(_) => {
                    gate.on_freed(Instant::now());
                    break Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.accept_paused.store(false, Ordering::Release);
        self.accept_resume.reset();
        result
    }

    /// Run on the model's own thread once it serves. Waits for a shutdown, joins the acceptor
    /// (so nothing is admitted after), then waits until no connection is left or until the
    /// drain deadline passes or a second signal forces the end; in those cases it marks the
    /// hub forced, and the model closes whatever is left. Returns the acceptor's outcome.
    pub fn supervise(&self, acceptor: ScopedJoinHandle<'_, io::Result<()>>) -> io::Result<()> {
        while !self.is_draining() {
            self.wait_supervisor(None)?;
        }
        self.core().begin_drain(self.shutdown.drain_until().unwrap_or_else(Instant::now));
        let accepted = acceptor.join().unwrap_or_else(|_| Err(io::Error::other("the accept thread panicked")));
        loop {
            let (now, live, forced) =
                (Instant::now(), self.live.load(Ordering::Acquire), self.shutdown.phase() == Phase::Forced);
            let core = self.core();
            match core.drain_step(now, live, forced) {
                DrainStep::Done | DrainStep::CloseAll => break,
                DrainStep::Serving | DrainStep::Draining => {}
            }
            let wake = core.next_wake().map(|at| at.saturating_duration_since(now));
            drop(core);
            self.wait_supervisor(wake)?;
        }
        // Also when nothing is left: threads still waiting for work learn that there is none.
        self.force_close();
        accepted
    }

    fn wait_supervisor(&self, timeout: Option<Duration>) -> io::Result<()> {
        let mut fds = [pollfd(self.supervisor.fd().as_raw_fd(), libc::POLLIN)];
        match sys::ppoll(&mut fds, timeout) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        self.supervisor.reset();
        Ok(())
    }
}

/// The acceptor's side of a connection's start: a session for each admitted connection, and
/// refusals as `readiness/accept.rs` makes them (the protocol's refusal first, HTTP 503; counted
/// as refused; logged at most once a second).
pub struct Admission<'c> {
    responder: Responder,
    log: LogLimiter,
    counters: &'c Counters,
}

impl Admission<'_> {
    /// A connection was taken on `fd`: its Connection to set up, or None after refusing it as
    /// the core answers, at admission or for want of a TLS session (`--max-handshakes`), its
    /// place given back (the caller closes it afterwards). `counters`: its thread's.
    pub fn admit(&mut self, hub: &ThreadShared<'_>, fd: RawFd, counters: &Counters) -> Option<Connection> {
        let responder = &mut self.responder;
        if let Some(refused) = hub.core().on_accepted(false, hub, || refusal(responder)) {
            admission::refuse(fd, refused, self.counters, hub.stats, &mut self.log);
            return None;
        }
        match Connection::pulled(self.responder.new_session(), Instant::now(), hub.resources, counters) {
            Ok(x) => Some(x),
            Err(why) => {
                self.unserved(hub, fd, why);
                None
            }
        }
    }

    /// A connection admitted on `fd` could not be set up, for `why`: refuse it as the core
    /// answers, its place given back (the caller closes it afterwards).
    pub fn unserved(&mut self, hub: &ThreadShared<'_>, fd: RawFd, why: Refusal<'_>) {
        let responder = &mut self.responder;
        let refused = hub.core().on_unserved(why, hub, || refusal(responder));
        admission::refuse(fd, refused, self.counters, hub.stats, &mut self.log);
    }
}

/// The protocol's refusal (HTTP's 503), dated now: the acceptor's engine serves nothing else, so
/// it is brought to the current second only when a refusal is rendered.
fn refusal(responder: &mut Responder) -> Option<bytes::Bytes> {
    responder.tick(unix_now());
    responder.refusal()
}

/// The model's `--max-conns` slots, and its live connections with them (the supervisor waits
/// for those to drain).
impl Slots for ThreadShared<'_> {
    fn try_take(&self, max: usize) -> bool {
        if !self.stats.try_open(max) {
            return false;
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        true
    }

    fn give_back(&self) {
        self.stats.close();
        self.release();
    }

    fn taken(&self) -> usize {
        self.stats.current()
    }
}

/// A connection noticed the drain: it finishes its exchange, closes at the next request
/// boundary, and at the latest at the drain's one deadline.
pub fn begin_drain(conn: &mut Conn, shutdown: &Shutdown) {
    let now = Instant::now();
    let until = shutdown.drain_until().unwrap_or(now);
    conn.x.begin_drain(conn.fd.as_raw_fd(), now, until);
}

/// UDP sockets each served by a thread of its own, blocked in poll(2): `--proto udp`'s, or
/// `--http3`'s beside a model's TCP listener. One socket per thread, SO_REUSEPORT (the kernel
/// spreads senders by hash, as for epoll's workers, so one datagram wakes one thread, and one
/// QUIC connection's datagrams always reach the same thread's endpoint).
pub struct UdpThreads {
    services: Vec<UdpService>,
    /// Signalled on every phase change of the shutdown; shared by the threads, so never reset.
    drain: Arc<Waker>,
    shutdown: Shutdown,
}

impl UdpThreads {
    /// `threads` sockets bound to `listen`'s address (its first socket included), each given
    /// its endpoint by `make` (`UdpService::new` or `UdpService::http3`). Made before the
    /// threads start, so the sockets have their options (GRO) once the model is ready.
    pub fn new(
        ctx: &ModelCtx,
        listen: &crate::listener::Listen,
        threads: usize,
        make: fn(Arc<Socket>, &ModelCtx) -> UdpService,
    ) -> io::Result<Self> {
        let drain = Arc::new(Waker::new()?);
        ctx.shutdown.register(drain.clone());
        let mut services = vec![make(listen.shared(), ctx)];
        for _ in 1..threads.max(1) {
            services.push(make(Arc::new(listen.bind_another()?), ctx));
        }
        Ok(UdpThreads { services, drain, shutdown: ctx.shutdown.clone() })
    }

    /// Start the threads in `scope`; each ends once its endpoint has drained after the drain
    /// began, or at the drain's deadline. A thread that cannot start forces the shutdown.
    pub fn spawn<'scope>(
        &'scope mut self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        stats: &'scope Stats,
        budget: usize,
    ) -> io::Result<Vec<ScopedJoinHandle<'scope, io::Result<()>>>> {
        let mut handles = Vec::with_capacity(self.services.len());
        let (drain, shutdown) = (self.drain.fd().as_raw_fd(), &self.shutdown);
        for (i, udp) in self.services.drain(..).enumerate() {
            let counters = stats.shard(i);
            let spawned = std::thread::Builder::new()
                .name(format!("sockscale-udp-{i}"))
                .spawn_scoped(scope, move || udp_thread(udp, shutdown, drain, budget, counters));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    shutdown.force();
                    return Err(e);
                }
            }
        }
        Ok(handles)
    }
}

/// Wait for UDP threads; the first failure forces the shutdown and is returned.
pub fn join_udp(handles: Vec<ScopedJoinHandle<'_, io::Result<()>>>, shutdown: &Shutdown) -> io::Result<()> {
    let mut result = Ok(());
    for handle in handles {
        let outcome = handle.join().unwrap_or_else(|_| Err(io::Error::other("a UDP thread panicked")));
        if let Err(e) = outcome {
            shutdown.force();
            result = Err(e);
        }
    }
    result
}

/// Serve `--proto udp` on `threads` threads ([`UdpThreads`]) until the drain is over. Calls
/// `ctx.ready()` once they run.
pub fn serve_udp(ctx: &ModelCtx, model: &'static str, threads: usize) -> Result<(), ServerError> {
    let io_err = |source| ServerError::Io { model, error: source };
    let mut udp = UdpThreads::new(ctx, &ctx.listen, threads, |s, ctx| UdpService::new(s, &ctx.cfg)).map_err(io_err)?;
    std::thread::scope(|scope| {
        let handles = udp.spawn(scope, &ctx.stats, ctx.cfg.read_budget).map_err(io_err)?;
        ctx.ready();
        join_udp(handles, &ctx.shutdown).map_err(io_err)
    })
}

/// Serve one UDP socket: datagrams and the endpoint's wake-ups, until the drain began and then
/// until the endpoint has drained, or the drain's deadline (or a second signal) passed.
fn udp_thread(
    mut udp: UdpService,
    shutdown: &Shutdown,
    drain: RawFd,
    budget: usize,
    counters: &Counters,
) -> io::Result<()> {
    // The endpoint's wake-up: poll waits for a datagram or for it, whichever comes first.
    let mut wake_at: Option<Instant> = None;
    // Once the drain began: its deadline.
    let mut draining: Option<Instant> = None;
    loop {
        let mut fds = [pollfd(udp.fd(), libc::POLLIN), pollfd(drain, libc::POLLIN)];
        // The latch stays signalled once the drain began: watched only until then.
        let watched = if draining.is_some() { 1 } else { 2 };
        let until = match (wake_at, draining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match sys::ppoll(&mut fds[..watched], until.map(|at| at.saturating_duration_since(Instant::now()))) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if draining.is_none() && fds[1].revents != 0 {
            let now = Instant::now();
            draining = Some(shutdown.drain_until().unwrap_or(now));
            udp.begin_drain(now, counters);
        }
        if let Some(deadline) = draining {
            if udp.drained() || Instant::now() >= deadline || shutdown.phase() == Phase::Forced {
                return Ok(());
            }
        }
        // Served on a datagram or at the wake-up (a timeout of the endpoint's is handled then).
        wake_at = match udp.serve(budget, counters) {
            UdpTurn::Drained { wake_at } => wake_at,
            // Served again at once, datagrams or not, with the drain checked between.
            UdpTurn::Spent => Some(Instant::now()),
            UdpTurn::Failed => {
                std::thread::sleep(udp::ERROR_PAUSE);
                Some(Instant::now())
            }
        };
        if draining.is_some() && udp.drained() {
            return Ok(());
        }
    }
}
