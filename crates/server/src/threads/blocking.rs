//! `--model blocking`: two threads per connection (the seeds' blocking server).
//!
//! Seed counterpart: the Winsock blocking server, where each connection has a receiving thread
//! and a sending thread. Here, likewise:
//!
//! - **Threads**: one acceptor (waits in poll(2) on the listener, accepts, spawns), the model's
//!   own thread as supervisor (shutdown and drain), and per connection a *receive* thread and a
//!   *send* thread, both with `--stack-size` stacks (default 64 KiB). `--threads` is not used
//!   for TCP; UDP is served by `--threads` threads blocked in poll(2), one SO_REUSEPORT socket
//!   each.
//! - **Receive thread** — it owns the connection and its policies. It blocks in ppoll(2) on the
//!   socket (and, until it has seen one, the drain latch) with a timeout at the connection's
//!   next deadline (idle, HTTP header, send stall); when the socket is readable it takes a pool
//!   buffer, reads up to `--read-budget`, feeds the protocol and writes the answer at once,
//!   straight from the buffer (`OutQueue::send`), then gives the buffer back. What the socket
//!   refused stays queued in the connection's `OutQueue` for the send thread. While that queue
//!   is over `--max-pending-send`, or the connection is closing, or the protocol has more to send
//!   once the queue moves (HTTP/2 DATA held back by its cap), the receive thread stops reading
//!   and waits on a condition variable for the send thread's progress, up to the send deadline
//!   (`--send-timeout`: Flood while still over, SendTimeout when the socket took nothing).
//! - **Send thread** — it sleeps on a condition variable while nothing is queued, and otherwise
//!   blocks in ppoll(2) for room in the socket and flushes the queue, recording progress on the
//!   flood and stall clocks. It has no policy of its own: when the receive thread ends the
//!   connection with output still queued, it shuts the socket down (shutdown(2)), which wakes
//!   the send thread; a send error is handed to the receive thread the same way.
//! - **Refusals**: beyond `--max-conns` (HTTP gets a 503), and when a thread cannot be created
//!   (EAGAIN from a threads or memory limit): the connection is closed, counted as refused and
//!   logged at most once a second, and the server goes on serving.
//! - **Shutdown**: the acceptor stops; a connection between requests closes at once; a request
//!   in progress is answered with `Connection: close`; at `--drain-timeout` (or a second signal)
//!   the supervisor shuts down every socket still open, and `run` returns once every connection
//!   thread has exited (they are scoped threads).
//!
//! Known limits: a thread pair per connection costs two kernel tasks and two small stacks (two
//! `--stack-size` mappings, of which a few KiB are touched), so connections are capped by the
//! threads limits (RLIMIT_NPROC, kernel.threads-max, pids.max of the cgroup) and by address
//! space, long before descriptors run out; past them connections are refused. Every wake-up is a
//! context switch, so per byte this model costs more CPU than the readiness models.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

use slab::Slab;
use sockscale_sys as sys;

use crate::admission::Refusal;
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::model::Model;
use crate::policy::CloseReason;
use crate::policy::{MapBudget, Slots};
use crate::pool::BufferPool;
use crate::socket_turn::{self, closed_by_error, Close, Conn, RawSocket, TurnIo, Turned};
use crate::stats::Counters;
use crate::threads::{begin_drain, join_udp, pollfd, Admission, ThreadShared, ThreadState, UdpThreads};
use crate::udp::UdpService;

/// `--model blocking`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let io_err = |source| ServerError::Io { model: Model::Blocking.name(), error: source };
    if ctx.listen.is_udp() {
        return crate::threads::serve_udp(&ctx, Model::Blocking.name(), ctx.cfg.threads);
    }
    let cfg = &*ctx.cfg;
    let pool = BufferPool::new(cfg.buffer_size, cfg.pool_buffers, cfg.lock_memory)?;
    let hub = ThreadShared::new(cfg, ctx.protocol.clone(), &ctx.resources, &ctx.stats, &pool, ctx.shutdown.clone())
        .map_err(io_err)?;
    let links = Links::default();
    hub.limit_maps(map_budget());
    let listener = ctx.listen.shared();
    // `--http3`: `--threads` UDP threads beside the TCP acceptor, one socket each.
    let mut http3 = match ctx.listen.http3() {
        Some(udp) => Some(UdpThreads::new(&ctx, udp, cfg.threads, UdpService::http3).map_err(io_err)?),
        None => None,
    };
    std::thread::scope(|scope| {
        let udp = match &mut http3 {
            Some(threads) => threads.spawn(scope, &ctx.stats, cfg.read_budget).map_err(io_err)?,
            None => Vec::new(),
        };
        let (hub, links, listener) = (&hub, &links, &listener);
        let acceptor = std::thread::Builder::new()
            .name("sockscale-accept".into())
            .spawn_scoped(scope, move || {
                let mut next = 0usize;
                hub.accept_loop(listener, hub.stats.shard(0), |fd, admission| {
                    next = next.wrapping_add(1);
                    admit(scope, hub, links, fd, next, admission);
                })
            })
            .map_err(|e| {
                // The UDP threads too, which the scope would otherwise wait for.
                ctx.shutdown.force();
                io_err(e)
            })?;
        ctx.ready();
        let outcome = hub.supervise(acceptor);
        // Whatever is still open at the drain deadline (or a second signal) closes now; the
        // scope then waits for every connection thread to exit.
        links.abort_all();
        let udp = join_udp(udp, &ctx.shutdown);
        outcome.and(udp).map_err(io_err)
    })
}

/// The memory-map budget of this process for connections of two threads each, from /proc.
fn map_budget() -> MapBudget {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse::<u64>().ok());
    let used = std::fs::read_to_string("/proc/self/maps").ok().map(|m| m.lines().count() as u64);
    MapBudget::new(limit, used, 2)
}

/// Start the two threads of a new connection, or refuse it.
fn admit<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    hub: &'env ThreadShared<'env>,
    links: &'env Links,
    fd: OwnedFd,
    id: usize,
    admission: &mut Admission<'_>,
) {
    let counters = hub.stats.shard(id);
    let Some(x) = admission.admit(hub, fd.as_raw_fd(), counters) else { return };
    let mut conn = Conn::new(fd, x, 0);
    // The receive thread polls before it reads.
    conn.x.lc.readiness_unknown();
    let link = Arc::new(Link::new(conn));
    let raw = link.fd;
    // Before its threads start: the receive thread delists it before the descriptor closes.
    hub.stats.enlist(raw);
    let key = links.insert(link.clone());
    let builder = || std::thread::Builder::new().stack_size(hub.cfg.stack_size);

    let sending = link.clone();
    let sender =
        builder().name("sockscale-send".into()).spawn_scoped(scope, move || send_loop(hub, &sending, counters));
    let spawned = sender.and_then(|sender| {
        builder().name("sockscale-recv".into()).spawn_scoped(scope, move || {
            let reason = receive(hub, &link, counters, sender);
            links.remove(key);
            hub.stats.delist(raw);
            // The last reference (the send thread has exited): this closes the descriptor
            // before it is accounted for, so a paused acceptor woken by `closed` finds it free.
            drop(link);
            hub.closed(counters, reason);
        })
    });
    match spawned {
        Ok(_) => counters.accepted(),
        Err(e) => {
            // EAGAIN: a threads limit, or no memory for a stack. The send thread, if it started,
            // exits; the descriptor closes when the last reference goes.
            hub.stats.delist(raw);
            match links.remove(key) {
                Some(link) => {
                    link.end();
                    admission.unserved(hub, link.fd, Refusal::Thread(&e));
                }
                None => hub.give_back(),
            }
        }
    }
}

/// Every open connection, so that a forced end of the drain can reach them.
#[derive(Default)]
struct Links {
    all: Mutex<Slab<Arc<Link>>>,
}

impl Links {
    fn lock(&self) -> MutexGuard<'_, Slab<Arc<Link>>> {
        self.all.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, link: Arc<Link>) -> usize {
        self.lock().insert(link)
    }

    fn remove(&self, key: usize) -> Option<Arc<Link>> {
        self.lock().try_remove(key)
    }

    /// Close every connection still open. The registry holds a reference to each, so each
    /// descriptor is still open while it is shut down.
    fn abort_all(&self) {
        for (_, link) in self.lock().iter() {
            link.abort();
        }
    }
}

/// One connection, shared by its two threads.
struct Link {
    /// `state.conn.fd`, for waiting without the lock; it stays open as long as the link lives.
    fd: RawFd,
    state: Mutex<LinkState>,
    /// The send thread waits here for output.
    to_sender: Condvar,
    /// The receive thread waits here for the send thread's progress.
    to_receiver: Condvar,
}

struct LinkState {
    conn: Conn,
    /// Bumped by every change the receive thread may be waiting for: send progress, a send
    /// error, an abort.
    version: u64,
    sender_waiting: bool,
    /// The send thread is (about to be) blocked in poll(2) for room in the socket.
    sender_polling: bool,
    receiver_waiting: bool,
    /// The receive thread is done with the connection: the send thread exits.
    ended: bool,
    /// A wait or a write on the socket failed: close for this reason.
    failed: Option<CloseReason>,
    /// Closed from outside: the drain deadline, or a second signal.
    aborted: bool,
}

impl Link {
    fn new(conn: Conn) -> Self {
        Link {
            fd: conn.fd.as_raw_fd(),
            state: Mutex::new(LinkState {
                conn,
                version: 0,
                sender_waiting: false,
                sender_polling: false,
                receiver_waiting: false,
                ended: false,
                failed: None,
                aborted: false,
            }),
            to_sender: Condvar::new(),
            to_receiver: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The receive thread is done: let the send thread go.
    fn end(&self) {
        let mut st = self.lock();
        st.ended = true;
        // The send thread may be blocked waiting for room that a client which does not read
        // will never make: with output still queued, or even with none, if the receive thread's
        // own write emptied the queue while the send thread waited.
        let polling = st.sender_polling || !st.conn.x.out.is_empty();
        self.to_sender.notify_one();
        drop(st);
        if polling {
            let _ = sys::shutdown_both(self.fd);
        }
    }

    fn abort(&self) {
        let mut st = self.lock();
        st.aborted = true;
        st.version += 1;
        self.to_receiver.notify_one();
        // A send thread waiting for room the client does not make must be woken with the socket
        // shut both ways; otherwise only the receiving side is shut, which wakes the receive
        // thread from poll(2) while the socket can still send: it ends the connection as its
        // `Close` says (a TLS session's close_notify, a FIN), as every model ends a drain.
        let sender_stuck = st.sender_polling || !st.conn.x.out.is_empty();
        drop(st);
        let _ = if sender_stuck { sys::shutdown_both(self.fd) } else { sys::shutdown_read(self.fd) };
    }
}

/// The receive thread: serves the connection until it ends, then stops the send thread.
fn receive(hub: &ThreadShared<'_>, link: &Link, counters: &Counters, sender: ScopedJoinHandle<'_, ()>) -> CloseReason {
    let mut receiver = Receiver { hub, link, counters, draining: false, ready: None };
    let close = receiver.serve();
    // Carried out before the send thread is let go (which may shut the socket down).
    let mut kit = hub.take_kit();
    socket_turn::end(link.fd, &mut link.lock().conn.x, &close, &mut kit.tls_scratch, counters);
    hub.put_kit(kit);
    link.end();
    let _ = sender.join();
    close.reason
}

struct Receiver<'r, 'h> {
    hub: &'r ThreadShared<'h>,
    link: &'r Link,
    counters: &'r Counters,
    /// This thread has seen the drain start (and stopped polling the drain latch).
    draining: bool,
    /// poll(2) said the socket is readable (Some), and whether it reported a hang-up; handed
    /// to the lifecycle at the next turn.
    ready: Option<bool>,
}

/// What the receive thread does next.
enum Step {
    Close(Close),
    /// Decide again at once.
    Again,
    /// Wait for input until the deadline.
    Poll(Instant),
    /// Wait for the send thread (version changes) until the deadline.
    Wait(Instant, u64),
}

impl Receiver<'_, '_> {
    fn serve(&mut self) -> Close {
        loop {
            // An engine is borrowed only while deciding and reading, never while waiting.
            let mut kit = self.hub.take_kit();
            let step = self.step(&mut kit);
            self.hub.put_kit(kit);
            match step {
                Step::Close(close) => return close,
                Step::Again => {}
                Step::Poll(deadline) => self.poll(deadline),
                Step::Wait(deadline, version) => self.wait(deadline, version),
            }
        }
    }

    /// One turn of the connection's lifecycle, with the link locked: the receive thread reads
    /// and answers at once; what the socket refuses waits for the send thread.
    fn step(&mut self, kit: &mut ThreadState) -> Step {
        let limits = &self.hub.limits;
        let mut st = self.link.lock();
        if st.aborted {
            return Step::Close(st.conn.x.close(CloseReason::Shutdown));
        }
        if let Some(reason) = st.failed {
            return Step::Close(st.conn.x.close(reason));
        }
        if !self.draining && self.hub.is_draining() {
            self.draining = true;
            begin_drain(&mut st.conn, &self.hub.shutdown);
        }
        if let Some(hangup) = self.ready.take() {
            st.conn.x.lc.on_ready(true, false, hangup);
        }
        let fd = self.link.fd;
        let mut io = TurnIo { kit, pool: self.hub.pool, counters: self.counters, limits };
        let turned = st.conn.x.turn(&mut RawSocket(fd), &mut io, Instant::now());
        if !st.conn.x.out.is_empty() && st.sender_waiting {
            self.link.to_sender.notify_one();
        }
        let wait = match turned {
            Turned::Close(close) => return Step::Close(close),
            Turned::Wait { wait, .. } => wait,
        };
        if let Some(close) = st.conn.x.expire(kit, self.counters, Instant::now(), limits) {
            return Step::Close(close);
        }
        if wait.resume {
            // The read budget ran out with input left: a fresh turn, with a fresh buffer.
            return Step::Again;
        }
        if !wait.read || (wait.write && st.conn.x.lc.wants_transmit(&kit.responder)) {
            // Closing, over --max-pending-send, or no buffer to be had; or the protocol has
            // more to send once output moves (HTTP/2's DATA held back by its cap), which no
            // input announces: wait for the send thread (the next turn closes the connection
            // once its output is written, or transmits) or the deadline.
            return Step::Wait(wait.wake_at, st.version);
        }
        Step::Poll(wait.wake_at)
    }

    fn poll(&mut self, deadline: Instant) {
        let timeout = deadline.saturating_duration_since(Instant::now());
        let mut fds = [pollfd(self.link.fd, libc::POLLIN | libc::POLLRDHUP), pollfd(self.hub.drain_fd(), libc::POLLIN)];
        // Once the drain is seen, the latch (readable for good) would make every poll return.
        let watched = if self.draining { 1 } else { 2 };
        match sys::ppoll(&mut fds[..watched], Some(timeout)) {
            Ok(_) if fds[0].revents != 0 => {
                self.ready = Some(fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0);
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Not expected with valid descriptors: the error closes the connection at the next
            // step, as the policy's one table names it (no back-off of this thread's own).
            Err(e) => {
                self.link.lock().failed.get_or_insert(closed_by_error(&e));
            }
        }
    }

    fn wait(&self, deadline: Instant, version: u64) {
        let mut st = self.link.lock();
        st.receiver_waiting = true;
        while st.version == version {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = match self.link.to_receiver.wait_timeout(st, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        st.receiver_waiting = false;
    }
}

/// The send thread: flush what the receive thread could not write, waiting for room.
fn send_loop(hub: &ThreadShared<'_>, link: &Link, counters: &Counters) {
    loop {
        {
            let mut st = link.lock();
            while st.conn.x.out.is_empty() && !st.ended {
                st.sender_waiting = true;
                st = link.to_sender.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.sender_waiting = false;
            if st.ended {
                return;
            }
            st.sender_polling = true;
        }
        // Wait for room without the lock, so the receive thread keeps reading meanwhile.
        let mut fds = [pollfd(link.fd, libc::POLLOUT)];
        let polled = sys::ppoll(&mut fds, None);
        if polled.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::Interrupted) {
            continue;
        }
        // A kit is lent for the flush (taken before the link's lock, as the receive thread
        // does): a TLS connection's body file is sealed in its scratch.
        let mut kit = hub.take_kit();
        let mut st = link.lock();
        st.sender_polling = false;
        if st.ended {
            hub.put_kit(kit);
            return;
        }
        // A failed wait ends the connection as a failed write does.
        let flushed = match polled {
            Ok(_) => st.conn.x.flush_now(link.fd, Instant::now(), &hub.limits, &mut kit.tls_scratch),
            Err(e) => Err(e),
        };
        hub.put_kit(kit);
        match flushed {
            Ok(written) => {
                counters.written(&written);
                if written.bytes > 0 {
                    st.version += 1;
                    if st.receiver_waiting {
                        link.to_receiver.notify_one();
                    }
                }
            }
            Err(e) => {
                st.failed = Some(closed_by_error(&e));
                st.version += 1;
                link.to_receiver.notify_one();
                drop(st);
                // Wake the receive thread if it is in poll(2).
                let _ = sys::shutdown_both(link.fd);
                return;
            }
        }
    }
}
