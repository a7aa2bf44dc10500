//! `--model tokio`: the tokio multi-threaded runtime (boost::asio in seed 003).
//!
//! Seed 003 serves the same protocol with boost::asio's asynchronous server: one `io_context`
//! run by a pool of threads, `async_accept` on one acceptor, and per connection a chain of
//! `async_read_some` and `async_write` completions. Here that is a tokio multi-thread runtime
//! with `--threads` worker threads: one accept task on the shared listener, and one task per
//! connection that awaits readiness and does its reads and writes without blocking.
//!
//! Threads: `--threads` tokio workers (`sockscale-tokio`), plus the model thread parked in
//! `block_on` until the drain is over. No blocking-pool thread is ever started.
//!
//! Readiness comes from tokio's I/O driver (mio: one edge-triggered epoll instance for the
//! runtime, polled by whichever worker is idle). Every policy is the readiness engine's
//! (`readiness/drive.rs`), restated in async form:
//!
//! - Zero-byte receives: a connection awaits readiness (`TcpStream::ready`) and only then takes a
//!   pool buffer; the buffer goes back before the task next awaits, so an idle connection holds
//!   none and at most one buffer per worker thread is ever in use. Reads go through `try_io`, so
//!   a short read (the socket's queue is empty) tells tokio to forget the readiness, as an
//!   edge-triggered loop would, without a second `recv` to hear EAGAIN.
//! - Writes are `OutQueue::send`: one gathering `sendmsg` of the protocol's segments straight
//!   from the receive buffer and the shared responses; only what the socket refuses is copied
//!   and queued, and flushed when tokio reports the socket writable. The queue's length and the
//!   stall drive `--max-pending-send` (stop reading) and `--send-timeout` (Flood, SendTimeout).
//! - One timer per connection covers the idle, header, send and drain deadlines. It is lazy, as
//!   `timers.rs` is: it moves only when a deadline comes earlier; when it fires the real
//!   deadline is recomputed and acted on or re-armed, so a read costs no timer update.
//! - `--read-budget`: after that many bytes a connection yields (`yield_now`).
//! - Shutdown: one task waits on an eventfd `Waker` registered with `Shutdown` and publishes the
//!   phase on a `watch` channel. Draining stops the accept and UDP tasks, asks each session to
//!   finish its exchange, closes connections that are between requests at once and the rest at
//!   the drain deadline; a forced shutdown closes everything at once.
//!
//! The protocol `Responder` is kept per worker thread (a thread local), not per task: HTTP's engine
//! holds responses pre-rendered for the current second, so one per task would render them for
//! every connection and again every second, and cost kilobytes per idle connection. A task uses
//! the engine of the thread it runs on, only between awaits; sessions keep no reference to it.
//!
//! A Unix socket (`--listen unix:PATH`) is accepted with tokio's `UnixListener`: `stream.rs`
//! puts the two families' listener and stream types behind one `Listener` and one `Stream`, and
//! everything below is the same for both.
//!
//! Known limits:
//! - `--listener` does not apply to TCP: one accept task serves the one shared listener (as
//!   asio's one acceptor); tasks migrate between workers, so per-thread listeners would buy no
//!   locality. UDP gets a SO_REUSEPORT socket and a task per worker, as with epoll.
//! - `--accept-batch` is the number of accepts in a row after which the accept task yields;
//!   tokio's own cooperative budget may yield sooner.
//! - A write the socket refuses costs one extra `sendmsg` (EAGAIN) before tokio waits for
//!   writability: tokio cannot be told about an EAGAIN seen outside its own `try_io`.
//! - Tokio registers every accepted socket with its epoll instance (one `epoll_ctl` per
//!   connection) and frees it on close (another).
//! - An idle connection costs about 1.8 KiB of user memory (measured with 5,000 connections),
//!   against about 0.3 KiB for epoll: the task (state and future, about 850 bytes, in a cell
//!   aligned to 128 bytes) and tokio's per-socket readiness record.
//! - `--max-outstanding-sends` concerns the completion models only.

use std::cell::{Cell, RefCell};
mod active;
mod stream;
mod task;

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use ::tokio::sync::{mpsc, watch, Notify};
use ::tokio::task::JoinSet;
use sockscale_proto::Protocol;
use sockscale_sys::Waker;

use crate::admission::{self, accept_paused, LogLimiter};
use crate::clock::DateClock;
use crate::config::Config;
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::model::Model;
use crate::policy::CloseReason;
use crate::policy::{AcceptGate, AcceptNext, Limits, Refused};
use crate::pool::BufferPool;
use crate::resources::Resources;
use crate::shutdown::{Phase, Shutdown};
use crate::socket_turn::ThreadState;
use crate::stats::{Counters, Stats};
use crate::udp::{self, UdpService, UdpTurn};

use active::RuntimeCore;
use stream::{Listener, Stream};
use task::{conn_task, Conn};

/// How long the model waits past the drain deadline for connection tasks that have not closed
/// themselves before it drops them (they close at the deadline on their own; this is a
/// backstop).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Every server run gets an id, so a worker thread's engine is never used for another server.
static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This worker's protocol engine and scratch output (see the module docs).
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
    /// This worker's counters shard, set when the runtime starts the thread.
    static SHARD: Cell<usize> = const { Cell::new(0) };
}

/// What one worker thread keeps for every task that runs on it.
struct Local {
    server: u64,
    kit: ThreadState,
    /// When to read the wall clock again for HTTP's Date (as `readiness::Worker::turn`).
    date: DateClock,
}

/// Everything the tasks of one server share.
struct Shared {
    id: u64,
    cfg: Arc<Config>,
    /// The per-connection limits of `cfg`.
    limits: Limits,
    protocol: Protocol,
    /// The server's loaded files: the body file, the TLS configuration.
    resources: Arc<Resources>,
    stats: Arc<Stats>,
    pool: BufferPool,
    /// The accept task is backing off after EMFILE & co.; a close should wake it.
    accept_paused: AtomicBool,
    freed: Notify,
    /// Set when `run` gives up on the tasks still open after the drain; a connection task
    /// dropped before that was not cancelled but panicked.
    abandoning: AtomicBool,
    /// Admission, `--active-set` (one FIFO set across the runtime) and the drain.
    core: Arc<RuntimeCore>,
}

/// The shutdown phase as tasks see it, with the drain deadline fixed once for everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskPhase {
    Running,
    Draining { until: Instant },
    Forced,
}

/// `--model tokio`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = ctx.cfg.clone();
    let io_err = |source| ServerError::Io { model: Model::Tokio.name(), error: source };
    // One pool for the runtime: buffers are only held between two awaits, so at most one per
    // worker is in use; config validation guarantees pool_buffers >= threads.
    let pool = BufferPool::new(cfg.buffer_size, cfg.pool_buffers, cfg.lock_memory)?;
    let shared = Arc::new(Shared {
        id: NEXT_SERVER.fetch_add(1, Ordering::Relaxed),
        cfg: cfg.clone(),
        limits: cfg.limits(),
        protocol: ctx.protocol.clone(),
        resources: ctx.resources.clone(),
        stats: ctx.stats.clone(),
        pool,
        accept_paused: AtomicBool::new(false),
        freed: Notify::new(),
        abandoning: AtomicBool::new(false),
        core: Arc::new(RuntimeCore::new(&cfg, ctx.stats.clone())),
    });
    let next_shard = Arc::new(AtomicUsize::new(0));
    let runtime = ::tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads)
        .thread_name("sockscale-tokio")
        .on_thread_start(move || SHARD.with(|s| s.set(next_shard.fetch_add(1, Ordering::Relaxed))))
        .enable_io()
        .enable_time()
        .build()
        .map_err(io_err)?;
    let result = runtime.block_on(serve(&ctx, shared));
    // Whatever is left (only after the drain backstop) is dropped here; each connection's
    // guard still counts its close.
    runtime.shutdown_timeout(DRAIN_GRACE);
    result
}

/// Set up the sources, report ready, and wait until the drain is over.
async fn serve(ctx: &ModelCtx, shared: Arc<Shared>) -> Result<(), ServerError> {
    let io_err = |source| ServerError::Io { model: Model::Tokio.name(), error: source };
    let cfg = &shared.cfg;

    let waker = Arc::new(Waker::new().map_err(io_err)?);
    let waker_fd = register(WakerFd(waker.clone())).map_err(io_err)?;
    let (stage_tx, stage_rx) = watch::channel(TaskPhase::Running);
    // Every task that must end before `run` returns holds a sender; recv() yields None when the
    // last one is dropped.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);

    let mut sources = JoinSet::new();
    // The UDP sockets: `--proto udp`'s, or `--http3`'s beside the listener. One SO_REUSEPORT
    // socket per worker, as the epoll model, so datagrams are received on every core; each is
    // one task's, so one QUIC connection's datagrams always reach the same endpoint.
    let udp = match ctx.listen.http3() {
        Some(udp) => Some((udp, UdpService::http3 as fn(Arc<socket2::Socket>, &ModelCtx) -> UdpService)),
        None if ctx.listen.is_udp() => Some((&ctx.listen, UdpService::udp as _)),
        None => None,
    };
    if let Some((listen, make)) = udp {
        for i in 0..cfg.threads {
            let socket = if i == 0 { listen.shared() } else { Arc::new(listen.bind_another().map_err(io_err)?) };
            let socket = register(UdpFd(make(socket, ctx))).map_err(io_err)?;
            // Beside the sources: it serves on through the drain, until its endpoint drained.
            let task = ::tokio::spawn(udp_loop(socket, shared.clone(), stage_rx.clone(), done_tx.clone()));
            let shutdown = ctx.shutdown.clone();
            ::tokio::spawn(async move {
                if let Err(e) = task.await {
                    tracing::error!(error = %e, "a tokio UDP task failed; shutting down");
                    shutdown.force();
                }
            });
        }
    }
    if !ctx.listen.is_udp() {
        let socket = ctx.listen.shared().try_clone().map_err(io_err)?;
        let listener = Listener::new(socket, ctx.listen.local_addr().is_unix()).map_err(io_err)?;
        sources.spawn(accept_loop(listener, shared.clone(), stage_rx.clone(), done_tx.clone()));
    }
    drop(done_tx);
    // Dropped with the runtime: it ends only when the server does.
    let reviews = ::tokio::spawn(shared.core.clone().review_loop());
    ctx.shutdown.register(waker);
    let watcher = ::tokio::spawn(watch_shutdown(waker_fd, ctx.shutdown.clone(), stage_tx));
    ctx.ready();

    // The sources run until the drain begins; one that panics stops the server rather than
    // leaving it unable to accept.
    let mut failure = None;
    while let Some(joined) = sources.join_next().await {
        if let Err(e) = joined {
            tracing::error!(error = %e, "a tokio source task failed; shutting down");
            failure.get_or_insert(e);
            ctx.shutdown.force();
        }
    }
    let mut stage_rx = stage_rx;
    let until = match stage_rx.wait_for(|s| *s != TaskPhase::Running).await.map(|s| *s) {
        Ok(TaskPhase::Draining { until }) => until,
        _ => Instant::now(),
    };
    let backstop = shared.core.begin_drain(until, DRAIN_GRACE);
    // Connections close by themselves: at their next request boundary, at the drain deadline,
    // or at once when forced.
    ::tokio::select! {
        _ = done_rx.recv() => {}
        () = ::tokio::time::sleep_until(backstop.into()) => {
            let open = shared.stats.current();
            tracing::warn!(open, "connections still open after the drain deadline; dropping them");
        }
    }
    shared.abandoning.store(true, Ordering::SeqCst);
    watcher.abort();
    reviews.abort();
    match failure {
        None => Ok(()),
        Some(e) => Err(io_err(io::Error::other(format!("a task panicked: {e}")))),
    }
}

/// Publish the shutdown phase to every task when the `Shutdown` waker fires.
async fn watch_shutdown(fd: AsyncFd<WakerFd>, shutdown: Shutdown, stage: watch::Sender<TaskPhase>) {
    loop {
        match shutdown.phase() {
            Phase::Running => {}
            Phase::Draining => {
                stage.send_if_modified(|s| match s {
                    TaskPhase::Running => {
                        *s = TaskPhase::Draining { until: shutdown.drain_until().unwrap_or_else(Instant::now) };
                        true
                    }
                    _ => false,
                });
            }
            Phase::Forced => {
                stage.send_replace(TaskPhase::Forced);
                return;
            }
        }
        match fd.readable().await {
            Ok(mut guard) => {
                // Reset before re-reading the phase: a wake after this point makes it readable
                // again, and clear_ready does not clear a readiness newer than the guard.
                guard.get_inner().0.reset();
                guard.clear_ready();
            }
            Err(e) => {
                // Cannot happen with a live reactor; fall back to polling rather than stop.
                tracing::warn!(error = %e, "cannot wait on the shutdown waker; polling");
                ::tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A descriptor source that owns its descriptor: it stays open, and `as_raw_fd` keeps
/// returning it, for as long as the value lives. Only the two types below implement it.
trait OwnsFd: AsRawFd {}

/// The shutdown waker's eventfd; the Arc keeps the `Waker`, and so its `OwnedFd`, alive.
struct WakerFd(Arc<Waker>);

impl AsRawFd for WakerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd().as_raw_fd()
    }
}

impl OwnsFd for WakerFd {}

/// A UDP socket with its batches and endpoint; `UdpService` holds the socket's Arc.
struct UdpFd(UdpService);

impl AsRawFd for UdpFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd()
    }
}

impl OwnsFd for UdpFd {}

/// Watch `inner` for readability with tokio's reactor.
fn register<T: OwnsFd>(inner: T) -> io::Result<AsyncFd<T>> {
    // SAFETY: `OwnsFd` types own their descriptor (an `OwnedFd` behind an Arc they hold), never
    // replace it and always return the same one, so it stays open and refers to the same file
    // for the whole life of the AsyncFd, which owns `inner`.
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }.map_err(io::Error::from)
}

/// Serve datagrams whenever the socket is readable or the endpoint's wake-up comes; once the
/// drain begins, until the endpoint has drained or the drain's deadline (or a forced stop).
/// Holds `_done` until then: the model waits for it as for a connection.
async fn udp_loop(
    mut socket: AsyncFd<UdpFd>,
    shared: Arc<Shared>,
    mut stage: watch::Receiver<TaskPhase>,
    _done: mpsc::Sender<()>,
) {
    let mut wake_at: Option<Instant> = None;
    // Once the drain began: its deadline.
    let mut draining: Option<Instant> = None;
    loop {
        let phase = *stage.borrow_and_update();
        match phase {
            TaskPhase::Running => {}
            TaskPhase::Draining { until } => {
                if draining.is_none() {
                    draining = Some(until);
                    let now = Instant::now();
                    socket.get_mut().0.begin_drain(now, counters(&shared));
                    // Served at once: the endpoint's wake-up may have moved.
                    wake_at = Some(now);
                }
            }
            TaskPhase::Forced => return,
        }
        if let Some(until) = draining {
            if socket.get_ref().0.drained() || Instant::now() >= until {
                return;
            }
        }
        let at = match (wake_at, draining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let woken = async {
            match at {
                Some(at) => ::tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let ready = ::tokio::select! {
            biased;
            changed = stage.changed() => match changed {
                Ok(()) => continue,
                // The watcher is gone: the server is stopping.
                Err(_) => return,
            },
            ready = socket.readable_mut() => match ready {
                Ok(guard) => Some(guard),
                Err(e) => {
                    tracing::error!(error = %e, "cannot wait on the UDP socket");
                    return;
                }
            },
            () = woken => None,
        };
        let budget = shared.cfg.read_budget;
        let turn = match ready {
            Some(mut guard) => {
                let turn = guard.get_inner_mut().0.serve(budget, counters(&shared));
                if matches!(turn, UdpTurn::Drained { .. }) {
                    // Forget the readiness until the next datagram raises an edge.
                    guard.clear_ready();
                }
                turn
            }
            // The wake-up: `serve` handles the endpoint's timeout.
            None => socket.get_mut().0.serve(budget, counters(&shared)),
        };
        wake_at = match turn {
            UdpTurn::Drained { wake_at } => wake_at,
            // Served again at once, after the pause or after the other tasks.
            UdpTurn::Failed => {
                ::tokio::time::sleep(udp::ERROR_PAUSE).await;
                Some(Instant::now())
            }
            UdpTurn::Spent => {
                ::tokio::task::yield_now().await;
                Some(Instant::now())
            }
        };
    }
}

/// Take connections until the drain begins, carrying out what the accept gate answers (batch,
/// back-off, abort-storm hold). tokio reports an empty queue by waiting, so the gate never
/// hears of one.
async fn accept_loop(
    listener: Listener,
    shared: Arc<Shared>,
    mut stage: watch::Receiver<TaskPhase>,
    done: mpsc::Sender<()>,
) {
    if *stage.borrow_and_update() != TaskPhase::Running {
        return;
    }
    let mut gate = AcceptGate::new(shared.cfg.accept_batch);
    let mut error_log = LogLimiter::accept_errors();
    let mut refusal_log = LogLimiter::refusals();
    loop {
        match gate.next(Instant::now(), shared.stats.storm_holds()) {
            AcceptNext::Admit(stream) => admit(stream, &shared, &stage, &done, &mut refusal_log),
            AcceptNext::Accept => {
                let accepted = ::tokio::select! {
                    biased;
                    _ = stage.changed() => return,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok(stream) => {
                        // A storm that began while this accept waited: the gate holds the
                        // connection, unserved as it would have been in the backlog.
                        if let Some(stream) = gate.on_taken(stream, shared.stats.storm_holds()) {
                            admit(stream, &shared, &stage, &done, &mut refusal_log);
                        }
                    }
                    Err(e) => {
                        let now = Instant::now();
                        let (_, step) = gate.on_error(now, &e);
                        accept_paused(&mut error_log, &shared.stats, now, &e, step);
                    }
                }
            }
            // The batch is spent: let the connections already ready have their turn.
            AcceptNext::Spent => ::tokio::task::yield_now().await,
            // tokio keeps the listener ready after an error, so accepting now would spin.
            AcceptNext::Closed { until } => match pause_accepting(&shared, &mut stage, until).await {
                Paused::Stopped => return,
                Paused::Due => {}
                Paused::Freed => {
                    gate.on_freed(Instant::now());
                }
            },
        }
    }
}

/// How a pause of the acceptor ended.
enum Paused {
    Due,
    /// A connection closed: a descriptor is free, or an abort storm may be over.
    Freed,
    /// The server stops.
    Stopped,
}

/// Wait until `until` without accepting, ending early when a connection closes or the server
/// stops.
async fn pause_accepting(shared: &Shared, stage: &mut watch::Receiver<TaskPhase>, until: Instant) -> Paused {
    let freed = shared.freed.notified();
    ::tokio::pin!(freed);
    freed.as_mut().enable();
    shared.accept_paused.store(true, Ordering::SeqCst);
    let ended = ::tokio::select! {
        biased;
        _ = stage.changed() => Paused::Stopped,
        () = ::tokio::time::sleep_until(until.into()) => Paused::Due,
        () = freed => Paused::Freed,
    };
    shared.accept_paused.store(false, Ordering::SeqCst);
    ended
}

/// Admit one accepted connection and start its task, or refuse it beyond `--max-conns`.
fn admit(
    stream: Stream,
    shared: &Arc<Shared>,
    stage: &watch::Receiver<TaskPhase>,
    done: &mpsc::Sender<()>,
    refusal_log: &mut LogLimiter,
) {
    let refused = with_local(shared, Instant::now(), |local| shared.core.on_accepted(|| local.kit.responder.refusal()));
    if let Some(refused) = refused {
        return refuse(stream, shared, refusal_log, refused);
    }
    let now = Instant::now();
    let x = match with_local(shared, now, |local| local.kit.open(now, counters(shared))) {
        Ok(x) => x,
        Err(why) => {
            let refused = with_local(shared, Instant::now(), |local| {
                shared.core.on_unserved(why, || local.kit.responder.refusal())
            });
            return refuse(stream, shared, refusal_log, refused);
        }
    };
    counters(shared).accepted();
    let guard = Admitted { shared: shared.clone(), reason: None, _done: done.clone() };
    let seat = shared.core.enter(stream.as_raw_fd(), Instant::now());
    let conn = Conn::new(stream, x, &shared.stats, seat);
    ::tokio::spawn(conn_task(conn, guard, stage.clone()));
}

/// Carry out a refusal the core answered: its last bytes, its ending, its count.
fn refuse(stream: Stream, shared: &Shared, log: &mut LogLimiter, refused: Refused<'_>) {
    admission::refuse(stream.as_raw_fd(), refused, counters(shared), &shared.stats, log);
    drop(stream);
}

/// A connection counted against `--max-conns`. Dropping it counts the close, whichever way the
/// task ended: with a reason, cancelled by the runtime's shutdown after the drain (Shutdown), or
/// in a panic (Error; tokio drops a panicked task's future after catching the panic, so
/// `std::thread::panicking` cannot tell). It also holds the task's share of the drain wait.
struct Admitted {
    shared: Arc<Shared>,
    reason: Option<CloseReason>,
    _done: mpsc::Sender<()>,
}

impl Admitted {
    /// The task ended with `reason`; the count happens when the guard drops.
    fn close(&mut self, reason: CloseReason) {
        self.reason = Some(reason);
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let reason = self.reason.unwrap_or(if self.shared.abandoning.load(Ordering::SeqCst) {
            CloseReason::Shutdown
        } else {
            CloseReason::Error
        });
        self.shared.stats.closed(counters(&self.shared), reason);
        // A descriptor is free again: a listener paused on EMFILE may take one more.
        if self.shared.accept_paused.load(Ordering::SeqCst) {
            self.shared.freed.notify_waiters();
        }
    }
}

/// This worker thread's counters.
fn counters(shared: &Shared) -> &Counters {
    // try_with: a guard may drop while the thread is being torn down.
    shared.stats.shard(SHARD.try_with(Cell::get).unwrap_or(0))
}

/// Run `f` with this worker thread's engine, creating it on first use and ticking HTTP's Date
/// when the second may have turned. Never called re-entrantly, never held across an await.
fn with_local<R>(shared: &Shared, now: Instant, f: impl FnOnce(&mut Local) -> R) -> R {
    LOCAL.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_some_and(|local| local.server != shared.id) {
            *slot = None;
        }
        let local = slot.get_or_insert_with(|| Local {
            server: shared.id,
            kit: ThreadState::new(&shared.protocol, &shared.resources),
            date: DateClock::new(now),
        });
        local.date.tick(now, &mut local.kit.responder);
        f(local)
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use sockscale_proto::http::HttpConfig;
    use sockscale_proto::Session;

    use super::*;
    use crate::config::Service;
    use crate::model::Model;
    use crate::server::Server;

    fn config(service: Service) -> Config {
        Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            service,
            model: Model::Tokio,
            threads: 2,
            ..Config::default()
        }
    }

    fn connect(server: &Server) -> TcpStream {
        let stream = TcpStream::connect(server.local_addr().inet().expect("a TCP address")).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream.set_write_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream
    }

    /// Buffers are taken only between two awaits, so a pool of one buffer per worker serves any
    /// number of busy connections, and idle ones hold none.
    #[test]
    fn a_pool_of_one_buffer_per_worker_serves_many_connections() {
        let server = Server::start(Config { pool_buffers: 2, ..config(Service::Echo) }).expect("start");
        let mut clients: Vec<TcpStream> = (0..40).map(|_| connect(&server)).collect();
        std::thread::scope(|s| {
            for (i, client) in clients.iter_mut().enumerate() {
                s.spawn(move || {
                    let data: Vec<u8> = (0..256 << 10).map(|b: usize| (b * 7 + i) as u8).collect();
                    let mut reader = client.try_clone().expect("clone");
                    let expected = data.clone();
                    let read = std::thread::spawn(move || {
                        let mut back = vec![0u8; expected.len()];
                        reader.read_exact(&mut back).expect("echo");
                        back == expected
                    });
                    client.write_all(&data).expect("write");
                    assert!(read.join().expect("reader"), "connection {i}: echo differs");
                });
            }
        });
        let stats = server.stats();
        // A task gives its buffer back when its turn returns, which is after the `sendmsg` of
        // the echo: the client can read the last bytes before that. So the count is awaited,
        // bounded: a buffer kept by an idle connection still fails here.
        let started = Instant::now();
        while stats.snapshot().buffers_in_use != 0 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "idle connections hold no buffer: {}",
                stats.snapshot()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stats.current(), 40);
        drop(clients);
        server.shutdown_handle().shutdown();
        let done = server.wait().expect("wait");
        assert_eq!(done.bytes_in, 40 * (256 << 10));
        assert_eq!(done.bytes_out, 40 * (256 << 10));
        assert_eq!(done.closed_total(), 40);
        assert_eq!((done.connections, done.buffers_in_use), (0, 0));
    }

    /// A client that keeps sending requests but reads no answer, with the queue kept under
    /// --max-pending-send, is closed for the stall (SendTimeout), not as a flood.
    #[test]
    fn a_client_that_stops_reading_is_closed_after_the_send_timeout() {
        let cfg = Config {
            send_timeout: Duration::from_secs(1),
            max_pending_send: 64 << 20,
            sndbuf: Some(16 << 10),
            ..config(Service::Http(Arc::new(HttpConfig::default())))
        };
        let server = Server::start(cfg).expect("start");
        let mut client = connect(&server);
        let socket = socket2::SockRef::from(&client);
        socket.set_recv_buffer_size(16 << 10).expect("rcvbuf");
        // 1,000 answers of 4 KiB cannot fit the two socket buffers.
        let requests = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(1000);
        client.write_all(&requests).expect("requests");
        let started = Instant::now();
        while server.stats().snapshot().accepted == 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "never accepted");
            std::thread::sleep(Duration::from_millis(5));
        }
        while server.stats().current() > 0 {
            assert!(started.elapsed() < Duration::from_secs(8), "never disconnected");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(started.elapsed() >= Duration::from_millis(900), "cut off early: {:?}", started.elapsed());
        server.shutdown_handle().shutdown();
        let done = server.wait().expect("wait");
        assert_eq!(done.closed(CloseReason::SendTimeout), 1, "{done}");
        assert_eq!(done.buffers_in_use, 0);
    }

    /// A forced shutdown closes a request in progress at once, without waiting for the drain
    /// deadline, and `run` returns with every close counted.
    #[test]
    fn forced_shutdown_closes_requests_in_progress_at_once() {
        let cfg =
            Config { drain_timeout: Duration::from_secs(30), ..config(Service::Http(Arc::new(HttpConfig::default()))) };
        let server = Server::start(cfg).expect("start");
        let mut busy = connect(&server);
        busy.write_all(b"GET / HTTP/1.1\r\nHost:").expect("half a head");
        let started = Instant::now();
        while server.stats().snapshot().bytes_in == 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "the half head was never read");
            std::thread::sleep(Duration::from_millis(5));
        }
        let shutdown = server.shutdown_handle();
        shutdown.shutdown();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(server.stats().current(), 1, "a request in progress survives the drain's start");
        shutdown.force();
        let done = server.wait().expect("wait");
        assert!(started.elapsed() < Duration::from_secs(5), "forced shutdown took {:?}", started.elapsed());
        assert_eq!(done.closed(CloseReason::Shutdown), 1, "{done}");
        assert_eq!(done.connections, 0);
        let mut rest = Vec::new();
        let _ = busy.read_to_end(&mut rest);
        assert!(rest.is_empty(), "nothing answered to a forced-closed request");
    }

    /// A thread's engine belongs to one server: another server's tasks on the same thread get
    /// their own.
    #[test]
    fn the_thread_engine_follows_the_server() {
        let shared = |protocol: Protocol| Shared {
            id: NEXT_SERVER.fetch_add(1, Ordering::Relaxed),
            cfg: Arc::new(Config::default()),
            limits: Config::default().limits(),
            protocol,
            resources: Arc::default(),
            stats: Arc::new(Stats::new(1)),
            pool: BufferPool::new(sockscale_sys::page_size(), 1, false).expect("pool"),
            accept_paused: AtomicBool::new(false),
            freed: Notify::new(),
            abandoning: AtomicBool::new(false),
            core: Arc::new(RuntimeCore::new(&Config::default(), Arc::new(Stats::new(1)))),
        };
        let echo = shared(Protocol::Echo);
        let http = shared(Protocol::Http(Arc::new(HttpConfig::default())));
        let now = Instant::now();
        assert!(matches!(with_local(&echo, now, |l| l.kit.responder.new_session()), Session::Echo(_)));
        assert!(matches!(with_local(&http, now, |l| l.kit.responder.new_session()), Session::Http(_)));
        assert!(with_local(&http, now, |l| l.kit.responder.refusal()).is_some_and(|b| b.starts_with(b"HTTP/1.1 503")));
        assert!(with_local(&echo, now, |l| l.kit.responder.refusal()).is_none());
    }
}
