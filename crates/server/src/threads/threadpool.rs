//! `--model threadpool`: one accept thread, a bounded queue and `--threads` workers (seed 003).
//!
//! Seed counterpart: seed 003's multithreaded server, where an accept thread puts each new
//! socket in a bounded queue and a fixed pool of workers takes sockets from it and serves them
//! with blocking calls. Served literally — a worker keeps its connection until the client
//! leaves — at most `--threads` connections would be served at a time, and the rest would wait
//! in the queue with no idle timeout, no header timeout and no drain (the suite's 200
//! connections on two workers would never finish). So a worker serves one connection for one
//! *round* at a time, and a poller thread watches the connections between rounds:
//!
//! - **Accept thread**: waits in poll(2) on the listener (and the drain latch), accepts up to
//!   `--accept-batch` per wake-up, refuses beyond `--max-conns`, and puts each new connection
//!   at the back of the ready queue. When the queue already holds `--queue-depth` x
//!   `--threads` connections, the workers are not keeping up: the new connection is refused
//!   (HTTP gets a 503), counted and logged at most once a second. Out of descriptors, it backs
//!   off as every acceptor does (`threads::ThreadShared::accept_loop`).
//! - **Ready queue**: connections with input (or new ones), first in first out, under a mutex
//!   and a condition variable. The bound applies to admissions only: a connection already
//!   admitted that comes back from the poller is never refused, so the queue holds at most one
//!   entry per open connection.
//! - **Workers** (`--threads`): each takes the connection at the front of the queue and serves
//!   one round with blocking waits: read up to `--read-budget` (a pool buffer is taken only when
//!   the socket is readable), feed the protocol, write the answer, and if the socket refuses
//!   part of it, block in poll(2) until it is all written — the seed's blocking send. That wait
//!   is bounded by `--send-timeout` (Flood while the pending output stays over
//!   `--max-pending-send`, SendTimeout when the socket took nothing) and ended by a forced
//!   shutdown. Then: a connection whose budget ran out goes to the back of the queue (its
//!   socket still has input; the others get their turn first), one that read all there was goes
//!   to the poller, one that is finished is closed.
//! - **Poller**: one thread holding the idle connections in an epoll set, each armed
//!   EPOLLONESHOT for input, and their deadlines in a timer heap (`timers.rs`). When one has
//!   input it goes back to the ready queue; when a deadline passes the poller closes it (Idle;
//!   HeaderTimeout after the 408). At the start of a drain it closes every idle connection that
//!   is between requests; the others finish their request with `Connection: close`.
//!
//! Known limits: a worker blocked on a client that reads slowly (or not at all) is lost to the
//! others until the client reads or `--send-timeout` passes, so `--threads` such clients stall
//! the server for up to that long, as in the seed; the queue bound then refuses new
//! connections rather than let them wait unboundedly. Every round crosses two threads (queue,
//! poller), a context switch or two per request more than the readiness models. Every new
//! connection enters the queue, so a burst of more than `--queue-depth` x `--threads` connects
//! arriving faster than the workers take them is partly refused even when the server is
//! otherwise idle; raise `--queue-depth` for such bursts. The depth is per worker, since the
//! time a queued connection waits is its position divided by the number of workers. The
//! default, 128, is a few milliseconds of queueing at most under ordinary loads (a round is at
//! most `--read-budget` of work) and admits the conformance suite's burst of 200 connections on
//! two workers without refusing any.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sockscale_sys::{self as sys, Epoll, Interest, RegisterError, Selector, Timers};

use crate::admission::Refusal;
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::inbox::Inbox;
use crate::model::Model;
use crate::policy::CloseReason;
use crate::pool::BufferPool;
use crate::shutdown::Shutdown;
use crate::socket_turn::{closed_by_error, Close, Conn, RawSocket, TurnIo, Turned};
use crate::stats::Counters;
use crate::threads::{begin_drain, join_udp, pollfd, Admission, ThreadShared, ThreadState, UdpThreads};
use crate::udp::UdpService;

/// The poller's token for its waker; connection tokens are their 32-bit ids.
const WAKER: u64 = u64::MAX;

/// `--model threadpool`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let io_err = |source| ServerError::Io { model: Model::Threadpool.name(), error: source };
    let cfg = &*ctx.cfg;
    if ctx.listen.is_udp() {
        return crate::threads::serve_udp(&ctx, Model::Threadpool.name(), cfg.threads);
    }
    let pool = BufferPool::new(cfg.buffer_size, cfg.pool_buffers, cfg.lock_memory)?;
    let hub = ThreadShared::new(cfg, ctx.protocol.clone(), &ctx.resources, &ctx.stats, &pool, ctx.shutdown.clone())
        .map_err(io_err)?;
    let queue = ReadyQueue::new(cfg.queue_depth.saturating_mul(cfg.threads));
    let poller = new_poller(&ctx.shutdown).map_err(io_err)?;
    let listener = ctx.listen.shared();
    // `--http3`: `--threads` UDP threads beside the pool, one socket each (the pool's workers
    // take turns on connections, and a QUIC connection must stay with one endpoint).
    let mut http3 = match ctx.listen.http3() {
        Some(udp) => Some(UdpThreads::new(&ctx, udp, cfg.threads, UdpService::http3).map_err(io_err)?),
        None => None,
    };
    std::thread::scope(|scope| {
        let udp = match &mut http3 {
            Some(threads) => threads.spawn(scope, &ctx.stats, cfg.read_budget).map_err(io_err)?,
            None => Vec::new(),
        };
        let (hub, queue, poller, listener) = (&hub, &queue, &poller, &listener);
        // Stops whatever has started if a later thread cannot be.
        let abandon = |e: io::Error| {
            // The UDP threads too, which the scope would otherwise wait for.
            ctx.shutdown.force();
            hub.force_close();
            queue.stop();
            poller.stop();
            io_err(e)
        };
        let mut threads = Vec::with_capacity(cfg.threads + 1);
        let counters = hub.stats.shard(cfg.threads);
        let spawned = std::thread::Builder::new()
            .name("sockscale-poller".into())
            .spawn_scoped(scope, move || PollerThread::new(hub, poller, queue, counters).run());
        threads.push(spawned.map_err(abandon)?);
        for i in 0..cfg.threads {
            let counters = hub.stats.shard(i);
            let spawned = std::thread::Builder::new()
                .name(format!("sockscale-worker-{i}"))
                .spawn_scoped(scope, move || work(hub, queue, poller, counters));
            threads.push(spawned.map_err(abandon)?);
        }
        let acceptor = std::thread::Builder::new()
            .name("sockscale-accept".into())
            .spawn_scoped(scope, move || {
                let counters = hub.stats.shard(cfg.threads + 1);
                let mut next_id = 0u32;
                hub.accept_loop(listener, counters, |fd, admission| {
                    next_id = next_id.wrapping_add(1);
                    admit(hub, queue, fd, next_id, admission, counters);
                })
            })
            .map_err(abandon)?;
        ctx.ready();
        let mut outcome = hub.supervise(acceptor).map_err(io_err);
        if let (Err(e), Ok(())) = (join_udp(udp, &ctx.shutdown), &outcome) {
            outcome = Err(io_err(e));
        }
        // Drained, or out of time: the workers close what is still queued, the poller what it
        // watches, and both exit.
        queue.stop();
        poller.stop();
        for thread in threads {
            let ended = thread.join().unwrap_or_else(|_| Err(io::Error::other("a threadpool thread panicked")));
            if let (Err(e), Ok(())) = (ended, &outcome) {
                outcome = Err(io_err(e));
            }
        }
        outcome
    })
}

/// Queue a new connection for the workers, or refuse it.
fn admit(
    hub: &ThreadShared<'_>,
    queue: &ReadyQueue,
    fd: OwnedFd,
    id: u32,
    admission: &mut Admission<'_>,
    counters: &Counters,
) {
    let Some(x) = admission.admit(hub, fd.as_raw_fd(), counters) else { return };
    // Boxed once here, so every hand-over between threads after this moves a pointer.
    let mut conn = Box::new(Conn::new(fd, x, id));
    // Whether the client has sent anything yet is unknown: the worker looks before it takes a
    // buffer.
    conn.x.lc.readiness_unknown();
    // Before a worker can take it: workers delist it before its descriptor closes.
    let raw = conn.fd.as_raw_fd();
    hub.stats.enlist(raw);
    match queue.admit(conn) {
        Ok(()) => counters.accepted(),
        Err(conn) => {
            hub.stats.delist(raw);
            admission.unserved(hub, conn.fd.as_raw_fd(), Refusal::QueueFull { bound: queue.bound });
        }
    }
}

/// The connections that have input (or are new), waiting for a worker.
struct ReadyQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// New connections are refused while this many wait.
    bound: usize,
}

struct QueueState {
    conns: VecDeque<Box<Conn>>,
    idle_workers: usize,
    stopped: bool,
}

impl ReadyQueue {
    fn new(bound: usize) -> Self {
        let state = QueueState { conns: VecDeque::new(), idle_workers: 0, stopped: false };
        ReadyQueue { state: Mutex::new(state), ready: Condvar::new(), bound: bound.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a new connection unless the queue is full; gives it back if not.
    fn admit(&self, conn: Box<Conn>) -> Result<(), Box<Conn>> {
        let state = self.lock();
        if state.conns.len() >= self.bound {
            return Err(conn);
        }
        self.enqueue(state, conn)
    }

    /// Queue a connection that was already admitted; gives it back only once stopped.
    fn push(&self, conn: Box<Conn>) -> Result<(), Box<Conn>> {
        self.enqueue(self.lock(), conn)
    }

    fn enqueue(&self, mut state: MutexGuard<'_, QueueState>, conn: Box<Conn>) -> Result<(), Box<Conn>> {
        if state.stopped {
            return Err(conn);
        }
        state.conns.push_back(conn);
        if state.idle_workers > 0 {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// The next connection to serve, waiting for one; None once stopped and empty.
    fn pop(&self) -> Option<Box<Conn>> {
        let mut state = self.lock();
        loop {
            if let Some(conn) = state.conns.pop_front() {
                return Some(conn);
            }
            if state.stopped {
                return None;
            }
            state.idle_workers += 1;
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
            state.idle_workers -= 1;
        }
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.ready.notify_all();
    }
}

/// What a worker does with a connection after its round.
enum Next {
    Close(Close),
    /// Its read budget ran out: back of the queue.
    Again,
    /// It read all there was: to the poller.
    Idle,
}

fn work(hub: &ThreadShared<'_>, queue: &ReadyQueue, poller: &Poller, counters: &Counters) -> io::Result<()> {
    let mut kit = hub.new_kit();
    while let Some(mut conn) = queue.pop() {
        match serve_round(hub, &mut conn, &mut kit, counters) {
            Next::Close(close) => hub.end(*conn, &close, &mut kit.tls_scratch, counters),
            Next::Again => {
                if let Err(conn) = queue.push(conn) {
                    hub.close(*conn, counters, CloseReason::Shutdown);
                }
            }
            Next::Idle => {
                if let Err(conn) = poller.push(conn) {
                    hub.close(*conn, counters, CloseReason::Shutdown);
                }
            }
        }
    }
    Ok(())
}

/// One round of one connection: a turn of its lifecycle (read what is there within the budget,
/// answer), then block until the answer is written.
fn serve_round(hub: &ThreadShared<'_>, conn: &mut Conn, kit: &mut ThreadState, counters: &Counters) -> Next {
    let limits = &hub.limits;
    if hub.is_forced() {
        return Next::Close(conn.x.close(CloseReason::Shutdown));
    }
    kit.tick();
    if hub.is_draining() {
        begin_drain(conn, &hub.shutdown);
    }
    // Look before taking a buffer: a connection from the queue may have nothing to read.
    let fd = conn.fd.as_raw_fd();
    if conn.x.may_read(limits) && !conn.x.lc.is_readable() {
        let mut fds = [pollfd(fd, libc::POLLIN | libc::POLLRDHUP)];
        if matches!(sys::ppoll(&mut fds, Some(Duration::ZERO)), Ok(n) if n > 0) {
            let hangup = fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0;
            conn.x.lc.on_ready(true, false, hangup);
        }
    }
    let mut io = TurnIo { kit, pool: hub.pool, counters, limits };
    let wait = match conn.x.turn(&mut RawSocket(fd), &mut io, Instant::now()) {
        Turned::Close(close) => return Next::Close(close),
        Turned::Wait { wait, .. } => wait,
    };
    let all_written = match write_pending(hub, conn, kit, counters) {
        Ok(all_written) => all_written,
        Err(close) => return Next::Close(close),
    };
    if let Some(close) = conn.x.finish() {
        return Next::Close(close);
    }
    // The poller keeps the deadlines of idle connections; this covers one that waited in the
    // queue with no input, and one that stays readable and so goes straight back to the queue.
    if let Some(close) = conn.x.expire(kit, counters, Instant::now(), limits) {
        return Next::Close(close);
    }
    let readable = conn.x.lc.is_readable() && conn.x.may_read(limits);
    if wait.resume || readable || !all_written {
        Next::Again
    } else {
        Next::Idle
    }
}

/// The blocking send: wait in poll(2) for room until everything queued is written, within the
/// send policies (flood, then send stall, then the drain's end) and until a forced shutdown; or
/// until a body file's turn is sent (Ok(false)): the connection then goes to the back of the
/// ready queue, so one long download does not hold a worker from the others.
fn write_pending(
    hub: &ThreadShared<'_>,
    conn: &mut Conn,
    kit: &mut ThreadState,
    counters: &Counters,
) -> Result<bool, Close> {
    let fd = conn.fd.as_raw_fd();
    while !conn.x.out.is_empty() {
        let now = Instant::now();
        let until = conn.x.send_wait(now, &hub.limits, counters)?;
        let mut fds = [pollfd(fd, libc::POLLOUT), pollfd(hub.force_fd(), libc::POLLIN)];
        match sys::ppoll(&mut fds, Some(until.saturating_duration_since(now))) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(conn.x.close(closed_by_error(&e))),
        }
        if fds[1].revents != 0 {
            return Err(conn.x.close(CloseReason::Shutdown));
        }
        if fds[0].revents == 0 {
            continue;
        }
        let written = match conn.x.flush_now(fd, Instant::now(), &hub.limits, &mut kit.tls_scratch) {
            Ok(written) => written,
            Err(e) => return Err(conn.x.close(closed_by_error(&e))),
        };
        counters.written(&written);
        if written.yielded {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The poller's shared side: the inbox through which workers hand it idle connections (boxed
/// once by the acceptor: every hand-over between threads moves a pointer), woken also by
/// shutdown phase changes.
type Poller = Inbox<Box<Conn>>;

fn new_poller(shutdown: &Shutdown) -> io::Result<Poller> {
    let poller = Inbox::new()?;
    shutdown.register(poller.shared_waker());
    Ok(poller)
}

/// The poller thread: idle connections, by id, and their deadlines.
struct PollerThread<'w, 'h> {
    hub: &'w ThreadShared<'h>,
    poller: &'w Poller,
    queue: &'w ReadyQueue,
    counters: &'w Counters,
    conns: HashMap<u32, Box<Conn>>,
    /// The inbox's vector as last taken, emptied, kept to be swapped in next time.
    #[allow(clippy::vec_box)]
    taken: Vec<Box<Conn>>,
    timers: Timers,
    kit: ThreadState,
    draining: bool,
    next_id: u32,
}

impl<'w, 'h> PollerThread<'w, 'h> {
    fn new(hub: &'w ThreadShared<'h>, poller: &'w Poller, queue: &'w ReadyQueue, counters: &'w Counters) -> Self {
        let kit = hub.new_kit();
        PollerThread {
            hub,
            poller,
            queue,
            counters,
            conns: HashMap::new(),
            taken: Vec::new(),
            timers: Timers::default(),
            kit,
            draining: false,
            next_id: 0,
        }
    }

    fn run(mut self) -> io::Result<()> {
        let result = self.watch();
        // However it ended, nothing handed over later may be lost: close what is held, and
        // make later hand-overs come back to their worker.
        let left = self.poller.close();
        let held = std::mem::take(&mut self.conns);
        for conn in left.into_iter().chain(held.into_values()) {
            self.hub.close(*conn, self.counters, CloseReason::Shutdown);
        }
        if let Err(e) = &result {
            tracing::error!(error = %e, "the poller failed; stopping the server");
            self.hub.shutdown.force();
        }
        result
    }

    fn watch(&mut self) -> io::Result<()> {
        let into_io = |e: RegisterError| match e {
            RegisterError::Io(e) => e,
            RegisterError::Full(reason) => io::Error::other(reason),
        };
        let mut epoll = Epoll::new()?;
        // Edge-triggered: every wake() is a new edge, and the inbox is emptied after a reset.
        epoll.register(self.poller.waker().fd().as_raw_fd(), WAKER, Interest::READ, false).map_err(into_io)?;
        let mut events = Vec::with_capacity(256);
        loop {
            let timeout = self.timers.next().map(|at| at.saturating_duration_since(Instant::now()));
            events.clear();
            match epoll.select(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            self.kit.tick();
            for event in &events {
                if event.token == WAKER {
                    if self.take_inbox(&mut epoll, now) {
                        return Ok(());
                    }
                } else if let Some(mut conn) = self.conns.remove(&(event.token as u32)) {
                    // It has input (or a hang-up, which the read will find): to the workers.
                    conn.x.lc.on_ready(true, false, event.closed);
                    if let Err(conn) = self.queue.push(conn) {
                        self.hub.close(*conn, self.counters, CloseReason::Shutdown);
                    }
                }
            }
            if !self.draining && self.hub.is_draining() {
                self.begin_drain();
            }
            self.fire_timers(now);
        }
    }

    /// PollerThread the connections workers handed over. Returns true once the poller must stop.
    fn take_inbox(&mut self, epoll: &mut Epoll, now: Instant) -> bool {
        // Swapped with the inbox's own empty vector rather than taken, so that neither side
        // allocates again once both have grown to the traffic (steady state allocates nothing).
        let mut conns = std::mem::take(&mut self.taken);
        let stopped = self.poller.take_into(&mut conns);
        for conn in conns.drain(..) {
            self.add(epoll, conn, now);
        }
        self.taken = conns;
        stopped
    }

    fn add(&mut self, epoll: &mut Epoll, mut conn: Box<Conn>, now: Instant) {
        if self.draining {
            begin_drain(&mut conn, &self.hub.shutdown);
            if let Some(close) = conn.x.finish() {
                return self.hub.end(*conn, &close, &mut self.kit.tls_scratch, self.counters);
            }
        }
        // Ids come from a 32-bit counter: after 2^32 connections, one may meet a connection
        // still watched under the same id. It then takes a free id, and a fresh timer entry.
        if self.conns.contains_key(&conn.generation) {
            while self.conns.contains_key(&self.next_id) {
                self.next_id = self.next_id.wrapping_add(1);
            }
            conn.generation = self.next_id;
            conn.timer_at = None;
        }
        // Its timer entry is still in the heap unless it came due (and was skipped) while the
        // connection was away.
        if conn.timer_at.is_some_and(|at| at <= now) {
            conn.timer_at = None;
        }
        let token = u64::from(conn.generation);
        if let Err(e) = epoll.arm_oneshot(conn.fd.as_raw_fd(), token, !conn.registered.read) {
            tracing::warn!(error = %e, "cannot watch a connection; closing it");
            return self.hub.close(*conn, self.counters, CloseReason::Error);
        }
        conn.registered = Interest::READ;
        let deadline = conn.x.deadline(&self.kit.responder, &self.hub.limits);
        self.timers.schedule(&mut conn.timer_at, deadline, token);
        self.conns.insert(conn.generation, conn);
    }

    /// A drain began: idle connections between requests close now; the others finish their
    /// request first.
    fn begin_drain(&mut self) {
        self.draining = true;
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            let Some(conn) = self.conns.get_mut(&id) else { continue };
            begin_drain(conn, &self.hub.shutdown);
            if let Some(close) = conn.x.finish() {
                if let Some(conn) = self.conns.remove(&id) {
                    self.hub.end(*conn, &close, &mut self.kit.tls_scratch, self.counters);
                }
                continue;
            }
            // The protocol has its drain's answer to send (HTTP/2's GOAWAY): to the workers.
            if conn.x.lc.wants_transmit(&self.kit.responder) {
                self.hand_to_workers(id);
                continue;
            }
            // The drain's end is its deadline now.
            let deadline = conn.x.deadline(&self.kit.responder, &self.hub.limits);
            self.timers.schedule(&mut conn.timer_at, deadline, u64::from(id));
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((at, token)) = self.timers.pop_due(now) {
            let id = token as u32;
            let Some(conn) = self.conns.get_mut(&id) else { continue };
            if conn.timer_at != Some(at) {
                continue;
            }
            conn.timer_at = None;
            match conn.x.expire(&mut self.kit, self.counters, now, &self.hub.limits) {
                Some(close) => {
                    if let Some(conn) = self.conns.remove(&id) {
                        self.hub.end(*conn, &close, &mut self.kit.tls_scratch, self.counters);
                    }
                }
                // The protocol's timer left it something to send (a WebSocket's ping): a turn.
                None if conn.x.lc.wants_transmit(&self.kit.responder) => self.hand_to_workers(id),
                None => {
                    let deadline = conn.x.deadline(&self.kit.responder, &self.hub.limits);
                    self.timers.schedule(&mut conn.timer_at, deadline, token);
                }
            }
        }
    }

    /// Hand parked connection `id` to the workers for a turn (closed if the queue is full).
    fn hand_to_workers(&mut self, id: u32) {
        if let Some(conn) = self.conns.remove(&id) {
            if let Err(conn) = self.queue.push(conn) {
                self.hub.close(*conn, self.counters, CloseReason::Shutdown);
            }
        }
    }
}
