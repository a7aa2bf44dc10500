//! One load thread: an edge-triggered epoll loop over this thread's share of the connections.
//!
//! Sockets are registered once for EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET and never modified, so a
//! request costs one `send` and one `recv` plus a share of an `epoll_wait` (wrk, by contrast,
//! toggles write interest with two `epoll_ctl` calls per request). Deadlines (connect timeout,
//! reply timeout, the open-loop schedule) share one lazy heap per thread, the same structure
//! the server uses. A `-r` block has one deadline of its own in that heap, not one per
//! connection: connections waiting for its bucket sit in its FIFO queue ([`PacedBlock`]) and
//! are driven only when it pays for their send, so a refill wakes the senders it pays for,
//! not every waiter.
//!
//! Connection `i` of the run belongs to thread `i % threads`; its number fixes its echo
//! pattern phase and its `-r` block (`i / block`).

mod datagrams;
mod io;
mod quic;
mod tls;
mod ws;

pub use self::tls::ThreadTls;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use slab::Slab;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use sockscale_sys::{Epoll, Event, Interest, Selector, Timers};

use crate::client::Stamp;
use crate::config::{Endpoint, LoadConfig, Mode, MAX_PENDING_CONNECTS};
use crate::connection::{Close, Connection, Event as ConnEvent, Now, Profile, Reason};
use crate::rate::PacedBlock;
use crate::report::{new_histogram, AtEnd, Errors, Statuses, Udp, Unopened, Ws, H2};

/// The receive buffer a QUIC connection's UDP socket asks for.
const QUIC_RECV_BUFFER: usize = 4 << 20;

/// The slab index in a timer token that marks a `-r` block's deadline (the block number is
/// in the high half); no connection slot gets this far.
const PACER_SLOT: u64 = 0xffff_ffff;
/// The epoll token of the measured phase's start signal (`Shared::gate`); no connection slot
/// gets this far either.
const GATE_TOKEN: u64 = 0xffff_fffe;

fn pacer_token(block: usize) -> u64 {
    ((block as u64) << 32) | PACER_SLOT
}

/// A `-r` block's share for this thread: its queue and its one deadline.
struct Pacer {
    block: PacedBlock,
    timer_at: Option<Instant>,
}

/// What all threads of a run share.
pub struct Shared {
    pub cfg: LoadConfig,
    /// What every connection sends and accepts, its timeouts and its TLS.
    pub profile: Profile,
    /// The clock's origin: every `*_ns` of the run counts from here.
    pub start: Instant,
    /// When the measured phase began: at `start`, or, with `connect_first`, when the run
    /// opened the gate.
    pub began: std::sync::OnceLock<Instant>,
    /// With `connect_first`: made readable once, when the measured phase begins; every
    /// thread watches it (edge-triggered, so one write wakes them all).
    pub gate: Option<sockscale_sys::Waker>,
    /// With `connect_first`: threads whose every connection has connected or failed once.
    pub ready: std::sync::atomic::AtomicUsize,
    /// Requests (messages) left to send with `-n`.
    pub budget: Option<AtomicU64>,
    pub stop: AtomicBool,
    /// When a connect last succeeded, in ns since `start` (0: none yet).
    pub last_connect_ns: AtomicU64,
    /// Set once when the run gives up on a target that takes no connection: the reason.
    pub gave_up: std::sync::OnceLock<String>,
    pub open: AtomicU64,
    /// Of `open`, QUIC connections whose handshake has not completed.
    pub quic_handshaking: AtomicU64,
    pub peak_open: AtomicU64,
    pub live: Box<[Live]>,
    /// `--hdr-log`: the interval log the threads hand each second's histograms to.
    pub intervals: Option<std::sync::Mutex<crate::hlog::Intervals>>,
}

impl Shared {
    /// Claim one request from the `-n` budget.
    fn claim(&self) -> bool {
        match &self.budget {
            None => true,
            Some(left) => left.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)).is_ok(),
        }
    }

    /// Give back requests claimed but never sent (the socket refused them).
    fn unclaim(&self, n: usize) {
        if let Some(left) = &self.budget {
            left.fetch_add(n as u64, Relaxed);
        }
    }

    fn budget_spent(&self) -> bool {
        self.budget.as_ref().is_some_and(|left| left.load(Relaxed) == 0)
    }

    /// When `-d` ends the measured phase; None before it began or without -d.
    pub fn end(&self) -> Option<Instant> {
        Some(*self.began.get()? + self.cfg.duration?)
    }

    /// A shared state for `cfg`, its measured phase beginning at once unless `connect_first`.
    pub fn new(
        cfg: LoadConfig,
        requests: Vec<u8>,
        request_len: usize,
        head_requests: bool,
        threads: usize,
    ) -> std::io::Result<Self> {
        let start = Instant::now();
        let began = std::sync::OnceLock::new();
        let gate = if cfg.connect_first {
            Some(sockscale_sys::Waker::new()?)
        } else {
            let _ = began.set(start);
            None
        };
        Ok(Shared {
            profile: Profile::new(&cfg, requests, request_len, head_requests, start),
            start,
            began,
            gate,
            ready: std::sync::atomic::AtomicUsize::new(0),
            budget: cfg.requests.map(AtomicU64::new),
            stop: AtomicBool::new(false),
            last_connect_ns: AtomicU64::new(0),
            gave_up: std::sync::OnceLock::new(),
            open: AtomicU64::new(0),
            quic_handshaking: AtomicU64::new(0),
            peak_open: AtomicU64::new(0),
            live: (0..threads).map(|_| Live::default()).collect(),
            intervals: None,
            cfg,
        })
    }
}

/// One thread's running totals, published for the progress line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Live {
    pub completed: AtomicU64,
    pub errors: AtomicU64,
    pub open: AtomicU64,
}

/// What one thread measured.
#[derive(Debug)]
pub struct ThreadResult {
    pub attempted: u64,
    /// Attempts that retried a connection whose last connect or exchange failed.
    pub retries: u64,
    /// Connections given up after `--connect-retries` failures in a row.
    pub abandoned: u64,
    pub connected: u64,
    pub sent: u64,
    pub completed: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub statuses: Statuses,
    pub errors: Errors,
    /// The start of the first bad response, escaped (see `Report::first_bad_response`).
    pub first_bad_response: Option<String>,
    pub udp: Udp,
    pub latency: Latencies,
    pub connect_latency: Histogram<u64>,
    pub tls: ThreadTls,
    /// HTTP/2: connections, streams, GOAWAYs and resets received.
    pub h2: H2,
    /// WebSocket: upgrades, messages, pings, closes.
    pub ws: Ws,
    /// HTTP/3 over QUIC: handshakes, RTT, packets.
    pub quic: crate::quic_report::ThreadQuic,
    /// This thread's connections never attempted, by what held them back.
    pub never_attempted: Unopened,
    /// What was in flight when `-d` ended, and what became of it.
    pub at_end: AtEnd,
    /// Deadlines that fired (connection timers and pacing timers): the work a run does
    /// besides moving bytes, which waiting connections must not multiply.
    pub timer_fires: u64,
    /// The sockets still open when the run ended, closed by whoever drops them: after the
    /// run's time and CPU are read, since closing a few thousand sockets per thread takes
    /// the kernel long enough to count (about 20 s for a million).
    pub unclosed: Vec<Socket>,
}

impl Default for ThreadResult {
    fn default() -> Self {
        ThreadResult {
            attempted: 0,
            retries: 0,
            abandoned: 0,
            connected: 0,
            sent: 0,
            completed: 0,
            bytes_sent: 0,
            bytes_received: 0,
            statuses: Statuses::default(),
            errors: Errors::default(),
            first_bad_response: None,
            udp: Udp::default(),
            latency: Latencies::default(),
            connect_latency: new_histogram(),
            tls: ThreadTls::default(),
            h2: H2::default(),
            ws: Ws::default(),
            quic: Default::default(),
            never_attempted: Unopened::default(),
            at_end: AtEnd::default(),
            timer_fires: 0,
            unclosed: Vec::new(),
        }
    }
}

/// One thread's latency histograms, in ns.
#[derive(Debug)]
pub struct Latencies {
    /// From each exchange's due time: in open loop its place in the schedule, so corrected for
    /// coordinated omission.
    pub corrected: Histogram<u64>,
    /// Open loop only: from when each exchange began (what a closed-loop tool would show).
    pub uncorrected: Histogram<u64>,
    /// Open loop only: how late each exchange began after its due time.
    pub slip: Histogram<u64>,
    /// `-R`: record the last two.
    pub open_loop: bool,
    /// `--hdr-log`: this interval's corrected and uncorrected latency, handed to the log when
    /// the interval ends.
    interval: Option<Box<[Histogram<u64>; 2]>>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            corrected: new_histogram(),
            uncorrected: new_histogram(),
            slip: new_histogram(),
            open_loop: false,
            interval: None,
        }
    }
}

impl Latencies {
    /// An exchange stamped `stamp` completed at `now_ns`.
    fn record(&mut self, now_ns: u64, stamp: Stamp) {
        let corrected = now_ns.saturating_sub(stamp.due_ns).max(1);
        let uncorrected = now_ns.saturating_sub(stamp.sent_ns).max(1);
        self.corrected.saturating_record(corrected);
        if self.open_loop {
            self.uncorrected.saturating_record(uncorrected);
        }
        if let Some(interval) = &mut self.interval {
            interval[0].saturating_record(corrected);
            if self.open_loop {
                interval[1].saturating_record(uncorrected);
            }
        }
    }

    /// An exchange due at `due_ns` began at `now_ns`.
    fn began(&mut self, now_ns: u64, due_ns: u64) {
        if self.open_loop {
            self.slip.saturating_record(now_ns.saturating_sub(due_ns));
        }
    }

    pub fn add(&mut self, o: &Latencies) {
        // Same bounds on every histogram, so adding cannot fail.
        let _ = self.corrected.add(&o.corrected);
        let _ = self.uncorrected.add(&o.uncorrected);
        let _ = self.slip.add(&o.slip);
        self.open_loop |= o.open_loop;
    }
}

struct Conn {
    socket: Socket,
    /// The connection's number in the run.
    index: u64,
    generation: u32,
    /// The connection itself: its protocol, TLS and timers, without the socket.
    core: Connection,
    readable: bool,
    writable: bool,
    /// epoll reported an error or hang-up. A FIN or reset that came with data is seen only
    /// after that data is read and raises no new edge, so a short read no longer means drained.
    hangup: bool,
    /// Open loop: when the next request is due.
    next_send_ns: Option<u64>,
    /// Open loop: requests due but not sent because the connection had no room.
    late: u64,
    /// `-r`: waiting in its block's queue for a send to be paid for.
    queued: bool,
    /// `-r`: its block paid for one send it has not begun yet.
    granted: bool,
    /// Requests already claimed from `-n` for this connection before it connected.
    prepaid: u32,
    /// Exchanges begun (for `--per-conn`), carried over a reconnect.
    exchanges: u64,
    timer_at: Option<Instant>,
    /// QUIC: counted in `Shared::quic_handshaking` (its socket connected, its handshake not
    /// done yet).
    quic_handshaking: bool,
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Normally (HTTP `Connection: close`, one request per connection): reconnect at once.
    Done,
    /// After an error already counted: reconnect after a pause.
    Failed,
}

pub struct EventLoop<'a> {
    shared: &'a Shared,
    thread: usize,
    threads: usize,
    epoll: Epoll,
    events: Vec<Event>,
    conns: Slab<Conn>,
    next_generation: u32,
    timers: Timers,
    rbuf: Vec<u8>,
    /// TLS: the plaintext of one read, decrypted from `rbuf`.
    plain: Vec<u8>,
    dgram: Vec<u8>,
    /// `load udp`: the batches datagrams leave and come in.
    datagrams: datagrams::Datagrams,
    now: Instant,
    now_ns: u64,
    /// Connections of this thread opened so far (first connects, not reconnects).
    opened: u64,
    mine: u64,
    pending_connects: usize,
    open_interval_ns: Option<u64>,
    next_open_ns: u64,
    /// Connections to make again: (when, connection number, request already claimed), the
    /// soonest first (waits differ: each connection backs off on its own).
    reconnects: BinaryHeap<Reverse<(u64, u64, bool)>>,
    /// Failures in a row of the connections backing off, by connection number; removed when a
    /// connect succeeds.
    connect_failures: HashMap<u64, u32>,
    /// `-r` blocks by number (created when a connection of the block first sends).
    pacers: Vec<Option<Pacer>>,
    /// Scratch: connections a block's deadline just paid for.
    granted: Vec<u64>,
    /// Open loop: the interval between requests on each connection.
    send_interval_ns: Option<u64>,
    /// Open loop: the schedule (next send, sends due) of connections that ended, by connection
    /// number, taken up by the reconnect. Without it a new connection would start a schedule of
    /// its own, and one request per connection (`--no-keepalive`) would ignore the rate.
    carried_schedules: std::collections::HashMap<u64, (Option<u64>, u64)>,
    depth: usize,
    /// Connections of this thread that are connected now.
    open: u64,
    /// Of `open`, QUIC connections whose handshake has not completed: their connect, as far
    /// as the connects in flight at once and the start of the measured phase go.
    quic_handshakes: usize,
    /// Requests claimed from `-n` for connections not yet made or not yet sending: the run is
    /// not over while any is pending.
    prepaid_pending: u64,
    /// The measured phase has begun: connections may send.
    measuring: bool,
    /// With `connect_first`: this thread has told the run it is ready.
    told_ready: bool,
    /// `--per-conn`: connections (by number) that have completed their exchanges.
    spent: std::collections::HashSet<u64>,
    /// `--per-conn`: exchanges begun by connections that ended, by connection number, taken
    /// up by the reconnect so that a connection never makes more than its share.
    carried_exchanges: HashMap<u64, u64>,
    /// `--hdr-log`: the interval (whole seconds of the measured phase) being recorded.
    interval_index: u64,
    result: ThreadResult,
}

impl<'a> EventLoop<'a> {
    pub fn new(shared: &'a Shared, thread: usize, threads: usize) -> std::io::Result<Self> {
        let cfg = &shared.cfg;
        let conns = cfg.conns as u64;
        let t = thread as u64;
        let mine = if t < conns { (conns - t).div_ceil(threads as u64) } else { 0 };
        let per_thread_rate = |rate: f64| rate / threads as f64;
        let open_interval_ns = cfg.connect_rate.map(|r| (1e9 / per_thread_rate(r)) as u64);
        let send_interval_ns = cfg.total_rate.filter(|_| mine > 0).map(|r| {
            // Each connection of this thread gets an equal share of the thread's rate.
            (1e9 * mine as f64 / (r * mine as f64 / conns as f64)).max(1.0) as u64
        });
        Ok(EventLoop {
            shared,
            thread,
            threads,
            epoll: Epoll::new()?,
            events: Vec::with_capacity(1024),
            conns: Slab::new(),
            next_generation: 0,
            timers: Timers::default(),
            rbuf: vec![0; 64 << 10],
            plain: Vec::new(),
            dgram: Vec::new(),
            datagrams: datagrams::Datagrams::new(cfg.udp_offload, cfg.datagrams_in_flight()),
            now: Instant::now(),
            now_ns: 0,
            opened: 0,
            mine,
            pending_connects: 0,
            open_interval_ns,
            next_open_ns: 0,
            reconnects: BinaryHeap::new(),
            connect_failures: HashMap::new(),
            pacers: Vec::new(),
            granted: Vec::new(),
            send_interval_ns,
            carried_schedules: std::collections::HashMap::new(),
            depth: cfg.per_conn_depth(),
            open: 0,
            quic_handshakes: 0,
            prepaid_pending: 0,
            measuring: shared.began.get().is_some(),
            told_ready: false,
            spent: std::collections::HashSet::new(),
            carried_exchanges: HashMap::new(),
            interval_index: 0,
            result: ThreadResult {
                latency: Latencies {
                    open_loop: send_interval_ns.is_some(),
                    interval: shared.intervals.as_ref().map(|_| Box::new([new_histogram(), new_histogram()])),
                    ..Latencies::default()
                },
                ..ThreadResult::default()
            },
        })
    }

    /// `--hdr-log`: when a second of the measured phase has ended (or the run, `last`), hand
    /// this thread's histograms of the interval to the log.
    fn roll_interval(&mut self, last: bool) {
        let (Some(intervals), Some(began)) = (&self.shared.intervals, self.shared.began.get()) else { return };
        let Some(histograms) = self.result.latency.interval.as_deref_mut() else { return };
        let current = (self.now.saturating_duration_since(*began).as_nanos() / crate::hlog::INTERVAL.as_nanos()) as u64;
        if current <= self.interval_index && !last {
            return;
        }
        let mut log = intervals.lock().unwrap_or_else(|e| e.into_inner());
        let began_unix = std::time::SystemTime::now() - began.elapsed();
        log.begin(began_unix);
        let tags = crate::hlog::Intervals::tags(self.shared.cfg.total_rate.is_some());
        log.contribute(self.interval_index, &mut histograms[..tags.len()]);
        self.interval_index = current;
    }

    pub fn run(mut self) -> ThreadResult {
        if let Some(gate) = &self.shared.gate {
            if let Err(e) = self.epoll.register(gate.fd().as_raw_fd(), GATE_TOKEN, Interest::READ, false) {
                tracing::error!(error = %e, "cannot watch the start signal");
                self.shared.stop.store(true, Relaxed);
            }
        }
        loop {
            self.tick();
            if self.finished() {
                break;
            }
            self.open_due();
            self.tell_ready();
            let timeout = self.wait_timeout();
            if !self.turn(timeout) {
                break;
            }
        }
        self.tick();
        // A run that reached its -d (or was stopped) says what it left undone; one that made
        // its -n or --per-conn has nothing in flight and may leave connections unopened.
        let stopped = self.shared.stop.load(Relaxed);
        let deadline = self.shared.end().is_some_and(|end| self.now >= end);
        if stopped || deadline {
            self.note_unopened(stopped);
            self.drain(stopped);
        } else if self.ws_to_close() {
            // -n or --per-conn made: the WebSockets still close in order.
            self.drain(false);
        }
        self.tick();
        self.roll_interval(true);
        self.close_all();
        self.publish();
        self.result
    }

    /// Count the connections of ours never attempted, by what held them back.
    fn note_unopened(&mut self, stopped: bool) {
        let left = self.mine.saturating_sub(self.opened);
        let connecting = self.connecting();
        let never = &mut self.result.never_attempted;
        if left == 0 {
            return;
        }
        if stopped {
            never.run_ended += left;
        } else if connecting >= MAX_PENDING_CONNECTS {
            never.pending_connects += left;
        } else if self.open_interval_ns.is_some() {
            never.connect_rate += left;
        } else {
            never.run_ended += left;
        }
    }

    /// What is in flight now: (exchanges, connects and handshakes).
    fn census(&self) -> (u64, u64) {
        self.conns.iter().fold((0, 0), |(exchanges, connecting), (_, c)| {
            (exchanges + c.core.outstanding() as u64, connecting + u64::from(c.core.greeting()))
        })
    }

    /// The longest to wait at the end for exchanges in flight (see
    /// [`Profile::end_of_run_grace`]), from the slowest exchange this thread measured (from its
    /// send).
    fn grace(&self) -> Duration {
        let latency = &self.result.latency;
        let slowest_ns = if latency.open_loop { latency.uncorrected.max() } else { latency.corrected.max() };
        self.shared.profile.end_of_run_grace(Duration::from_nanos(slowest_ns))
    }

    /// `-d` ended: no new exchange begins, no connection is made again, but those in flight
    /// (and connects and handshakes in progress) are given [`Self::grace`] to finish, as
    /// during the run. What is still unanswered then is counted as an error by how far it got.
    /// A stopped run (Ctrl-C, or a target that takes no connection) does not wait, and counts
    /// nothing in flight as an error.
    fn drain(&mut self, stopped: bool) {
        let (in_flight, connecting) = self.census();
        if in_flight == 0 && connecting == 0 && !self.ws_to_close() {
            return;
        }
        self.result.at_end.in_flight = in_flight;
        self.result.at_end.connecting = connecting;
        if stopped {
            self.result.at_end.not_waited_for = true;
            return;
        }
        let grace = self.grace();
        // `--close-timeout`: at least this long for the WebSocket closes.
        let close_timeout = self.shared.profile.ws.as_ref().and_then(|ws| ws.close_timeout);
        let grace = close_timeout.map_or(grace, |t| grace.max(t));
        self.result.at_end.grace_s = grace.as_secs_f64();
        let began = self.now;
        let now = self.clock();
        let tokens: Vec<u64> = self.conns.iter().map(|(i, c)| (u64::from(c.generation) << 32) | i as u64).collect();
        for &token in &tokens {
            if let Some(conn) = self.conn_mut(token) {
                conn.core.begin_grace(now, grace);
            }
            self.settle(token);
        }
        self.ws_send_closes(&tokens);
        let completed_before = self.result.completed;
        let mut closes = crate::ws::CloseProgress::new(self.conns.len(), self.now);
        // Each connection's grace is a deadline of its own: when it passes, the connection
        // says so (Reason::GraceOver) and what it left is counted.
        while self.conns.iter().any(|(_, c)| c.core.busy()) && !self.shared.stop.load(Relaxed) {
            // Wake at least every 100 ms to see a stop.
            let cap = Duration::from_millis(100);
            let timeout = self.timers.next().map_or(cap, |at| at.saturating_duration_since(self.now).min(cap));
            if !self.turn(timeout) {
                break;
            }
            self.ws_extend_grace(&mut closes, began, grace);
        }
        let at_end = &mut self.result.at_end;
        at_end.waited_s = self.now.saturating_duration_since(began).as_secs_f64();
        at_end.answered = self.result.completed - completed_before;
        if self.shared.stop.load(Relaxed) {
            // Interrupted while waiting: what is left was not waited for.
            at_end.not_waited_for = true;
            return;
        }
        // Only if epoll itself failed is anything still waiting.
        for token in tokens {
            if self.conn_mut(token).is_some_and(|c| c.core.busy()) {
                self.leave_unfinished(token);
            }
        }
    }

    /// The run's grace ended with this connection unfinished: count what it left, and keep
    /// its socket for the end (see [`ThreadResult::unclosed`]).
    fn leave_unfinished(&mut self, token: u64) {
        let profile = &self.shared.profile;
        let (slot, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(conn) = self.conns.get(slot).filter(|c| c.generation == generation) else { return };
        let (connected, greeting, udp, answered) =
            (conn.core.is_connected(), conn.core.greeting(), conn.core.is_udp(), conn.core.answered());
        let n = conn.core.outstanding() as u64;
        let kinds = conn.core.in_flight_kinds(profile);
        let Some(mut conn) = self.conns.try_remove(slot) else { return };
        ws::retire(&mut self.result, &conn.core);
        self.retire_quic(&mut conn);
        ws::close_unanswered(&mut self.result, &conn.core);
        self.result.unclosed.push(conn.socket);
        let errors = &mut self.result.errors;
        if !connected {
            self.pending_connects -= 1;
            errors.connect_unfinished += 1;
            return;
        }
        self.open -= 1;
        self.shared.open.fetch_sub(1, Relaxed);
        if greeting {
            errors.handshake_unfinished += 1;
        }
        if n == 0 {
            return;
        }
        if udp {
            self.result.udp.lost += n;
        } else {
            let (waiting, partial, unsent) = kinds;
            errors.unanswered_waiting += waiting;
            errors.unanswered_partial += partial;
            errors.unanswered_unsent += unsent;
        }
        let at_end = &mut self.result.at_end;
        at_end.unanswered += n;
        if !answered {
            at_end.never_served += 1;
        }
    }

    /// One turn of the event loop: wait up to `timeout`, handle what became ready and the
    /// timers due, publish. False when epoll itself failed (the thread's run ends).
    fn turn(&mut self, timeout: Duration) -> bool {
        self.events.clear();
        if let Err(e) = self.epoll.select(&mut self.events, Some(timeout)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "epoll_wait failed");
                return false;
            }
        }
        self.tick();
        let events = std::mem::take(&mut self.events);
        for event in &events {
            self.on_event(*event);
        }
        self.events = events;
        self.fire_timers();
        self.roll_interval(false);
        self.publish();
        true
    }

    fn tick(&mut self) {
        self.now = Instant::now();
        self.now_ns = self.now.duration_since(self.shared.start).as_nanos() as u64;
    }

    /// The time as a connection is told it.
    fn clock(&self) -> Now {
        Now { at: self.now, ns: self.now_ns }
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Relaxed) || self.shared.end().is_some_and(|end| self.now >= end)
    }

    /// Connects in flight: TCP connects, and QUIC handshakes.
    fn connecting(&self) -> usize {
        self.pending_connects + self.quic_handshakes
    }

    /// With `connect_first`: once every connection of this thread has connected or failed its
    /// first attempt, say so (once).
    fn tell_ready(&mut self) {
        if !self.measuring && !self.told_ready && self.opened >= self.mine && self.connecting() == 0 {
            self.told_ready = true;
            // Release: whoever sees this thread ready sees its connections counted open.
            self.shared.ready.fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }

    /// The measured phase begins: start every open-loop schedule from now and let every
    /// connection send.
    fn begin_measuring(&mut self) {
        if self.measuring {
            return;
        }
        self.measuring = true;
        self.tick();
        let tokens: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.core.is_connected())
            .map(|(i, c)| (u64::from(c.generation) << 32) | i as u64)
            .collect();
        for token in tokens {
            let first = self.conn_mut(token).map(|c| c.index).and_then(|index| self.first_send_ns(index));
            if let Some(conn) = self.conn_mut(token) {
                conn.next_send_ns = first;
                conn.late = 0;
            }
            self.drive(token);
        }
    }

    /// Open loop: when a new connection's first request is due, its connections' schedules
    /// spread evenly over one interval from now.
    fn first_send_ns(&self, index: u64) -> Option<u64> {
        let interval = self.send_interval_ns?;
        let slot = (index / self.threads as u64) % self.mine.max(1);
        Some(self.now_ns + interval * slot / self.mine.max(1))
    }

    fn finished(&self) -> bool {
        if self.stopping() {
            return true;
        }
        // --per-conn without -d: done once every connection of ours has made its exchanges
        // (or was given up).
        if self.shared.cfg.per_conn.is_some()
            && self.shared.cfg.duration.is_none()
            && self.opened >= self.mine
            && self.spent.len() as u64 + self.result.abandoned >= self.mine
        {
            return true;
        }
        // Every connection of ours given up (--connect-retries): nothing is left to do.
        if self.opened >= self.mine && self.conns.is_empty() && self.reconnects.is_empty() && self.result.abandoned > 0
        {
            return true;
        }
        // With -n: done once the budget is spent and nothing of ours is still in flight or
        // claimed for a connection still to be made.
        self.shared.budget_spent()
            && self.prepaid_pending == 0
            && self.conns.iter().all(|(_, c)| !c.core.is_connected() || c.core.outstanding() == 0)
    }

    fn wait_timeout(&self) -> Duration {
        let mut at = self.timers.next();
        let mut consider = |ns: u64| {
            let t = self.shared.start + Duration::from_nanos(ns);
            at = Some(at.map_or(t, |a| a.min(t)));
        };
        if self.opened < self.mine && self.open_interval_ns.is_some() {
            consider(self.next_open_ns);
        }
        if let Some(&Reverse((due, _, _))) = self.reconnects.peek() {
            consider(due);
        }
        if let Some(end) = self.shared.end() {
            at = Some(at.map_or(end, |a| a.min(end)));
        }
        // Wake at least every 100 ms to see a stop, a spent budget, or the progress clock.
        let cap = Duration::from_millis(100);
        at.map_or(cap, |a| a.saturating_duration_since(self.now).min(cap))
    }

    /// Open first connections that are due, and reconnect those waiting.
    fn open_due(&mut self) {
        if self.stopping() {
            return;
        }
        while let Some(&Reverse((due, index, prepaid))) = self.reconnects.peek() {
            if due > self.now_ns || self.connecting() >= MAX_PENDING_CONNECTS {
                break;
            }
            self.reconnects.pop();
            self.connect(index, prepaid);
        }
        while self.opened < self.mine && self.connecting() < MAX_PENDING_CONNECTS {
            if let Some(interval) = self.open_interval_ns {
                if self.next_open_ns > self.now_ns {
                    break;
                }
                self.next_open_ns += interval;
            }
            let prepaid = self.one_request_per_connection();
            if prepaid {
                if !self.shared.claim() {
                    // -n is spent: this connection would carry no request.
                    self.opened = self.mine;
                    break;
                }
                self.prepaid_pending += 1;
            }
            let index = self.shared.cfg.first_conn + self.thread as u64 + self.opened * self.threads as u64;
            self.opened += 1;
            self.connect(index, prepaid);
        }
    }

    /// Without keep-alive each connection carries exactly one request; with -n the request is
    /// claimed before connecting, so exactly N connections are made for N requests.
    fn one_request_per_connection(&self) -> bool {
        self.shared.budget.is_some() && matches!(&self.shared.cfg.mode, Mode::Http(h) if !h.keepalive)
    }

    fn connect(&mut self, index: u64, prepaid: bool) {
        // The connect is timed from here: a Unix socket's completes within the call.
        self.tick();
        let started_ns = self.now_ns;
        let cfg = &self.shared.cfg;
        // UDP echo and QUIC: a datagram socket, connected to the target.
        let udp = matches!(cfg.mode, Mode::Udp { .. }) || matches!(&cfg.mode, Mode::Http(h) if h.http3);
        self.result.attempted += 1;
        if self.connect_failures.contains_key(&index) {
            self.result.retries += 1;
        }
        let socket = match self.new_socket(index, udp) {
            Ok(s) => s,
            Err(e) => {
                self.count_connect_error(&e);
                self.refund(prepaid);
                self.give_up_if_dead(|| describe(&e));
                return self.schedule_reconnect(index, End::Failed);
            }
        };
        let connected = match cfg.addr.sockaddr().and_then(|addr| socket.connect(&addr)) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
            Err(e) => {
                self.count_connect_error(&e);
                self.refund(prepaid);
                self.give_up_if_dead(|| describe(&e));
                return self.schedule_reconnect(index, End::Failed);
            }
        };
        if udp {
            self.datagrams.prepare(socket.as_raw_fd());
        }
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        let entry = self.conns.vacant_entry();
        let token = (u64::from(generation) << 32) | entry.key() as u64;
        if let Err(e) = self.epoll.register(socket.as_raw_fd(), token, Interest::BOTH, false) {
            tracing::warn!(error = %e, "cannot watch a new connection");
            self.result.errors.other += 1;
            self.refund(prepaid);
            return self.schedule_reconnect(index, End::Failed);
        }
        let core = Connection::new(&self.shared.profile, index, Now::after(self.shared.start, started_ns));
        entry.insert(Conn {
            socket,
            index,
            generation,
            core,
            readable: false,
            writable: true,
            hangup: false,
            next_send_ns: None,
            late: 0,
            queued: false,
            granted: false,
            prepaid: u32::from(prepaid),
            exchanges: self.carried_exchanges.remove(&index).unwrap_or(0),
            timer_at: None,
            quic_handshaking: false,
        });
        self.pending_connects += 1;
        if connected {
            self.tick();
            self.on_connected(token);
        } else {
            self.settle(token);
        }
    }

    fn new_socket(&self, index: u64, udp: bool) -> std::io::Result<Socket> {
        let cfg = &self.shared.cfg;
        let (ty, proto) = if udp { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
        let addr = match &cfg.addr {
            Endpoint::Inet(addr) => *addr,
            // No nodelay and no source address: a Unix socket has neither (`validate`).
            Endpoint::Unix(_) => return Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None),
        };
        let socket = Socket::new(Domain::for_address(addr), ty.nonblocking().cloexec(), Some(proto))?;
        if !udp {
            socket.set_tcp_nodelay(cfg.nodelay)?;
        } else if cfg.quic() {
            // QUIC's path MTU discovery probes larger packets itself: they must never be
            // fragmented (a lost probe is its answer).
            sockscale_sys::udp::disable_fragmentation(socket.as_raw_fd(), addr.is_ipv6())?;
            // A response's burst (16 streams of it) must not overflow the default 208 KiB
            // queue; the kernel caps the size at net.core.rmem_max.
            socket.set_recv_buffer_size(QUIC_RECV_BUFFER)?;
            // The server's ECN marks, reported back in the ACKs (read with GRO's recvmmsg).
            sockscale_sys::udp::enable_ecn_reports(socket.as_raw_fd(), addr.is_ipv6())?;
        }
        if !cfg.sources.is_empty() {
            let source = cfg.sources[(index % cfg.sources.len() as u64) as usize];
            if !udp {
                sockscale_sys::set_bind_address_no_port(socket.as_raw_fd())?;
            }
            socket.bind(&SockAddr::from(std::net::SocketAddr::new(source, 0)))?;
        }
        Ok(socket)
    }

    fn count_connect_error(&mut self, e: &std::io::Error) {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => self.result.errors.connect_refused += 1,
            Some(libc::ETIMEDOUT) => self.result.errors.connect_timeout += 1,
            Some(libc::EADDRNOTAVAIL) => self.result.errors.no_local_port += 1,
            Some(libc::EMFILE | libc::ENFILE) => self.result.errors.no_descriptor += 1,
            _ => {
                self.result.errors.connect_other += 1;
                tracing::debug!(error = %e, "connect failed");
            }
        }
    }

    /// A connect failed. If nothing of the whole run is open and no connect has succeeded for
    /// the connect timeout, the target takes no connection: stop the run, with `reason`,
    /// rather than retry for ever (a -n run would never end). A run that holds connections
    /// while new ones fail (a server at its limit) goes on.
    fn give_up_if_dead(&mut self, reason: impl FnOnce() -> String) {
        let shared = self.shared;
        // A QUIC connection in its handshake is not connected yet, though its socket is.
        if shared.open.load(Relaxed).saturating_sub(shared.quic_handshaking.load(Relaxed)) > 0 {
            return;
        }
        let since = Duration::from_nanos(self.now_ns.saturating_sub(shared.last_connect_ns.load(Relaxed)));
        if !shared.profile.takes_no_connection(since) {
            return;
        }
        if shared.gave_up.set(reason()).is_ok() {
            tracing::debug!("no connection for {since:?}; giving up");
        }
        shared.stop.store(true, Relaxed);
    }

    /// A claimed request could not be sent because its connection never came up.
    fn refund(&mut self, prepaid: bool) {
        if prepaid {
            self.shared.unclaim(1);
            self.prepaid_pending -= 1;
        }
    }

    fn schedule_reconnect(&mut self, index: u64, end: End) {
        if self.stopping() {
            return;
        }
        let delay = match end {
            End::Failed => {
                let failures = self.connect_failures.entry(index).or_insert(0);
                *failures = failures.saturating_add(1);
                let failures = *failures;
                if self.shared.cfg.connect_retries.is_some_and(|retries| failures > retries) {
                    // Given up: the server refused it every time it was asked (a server at its
                    // limit), and asking on would cost this core more than pacing the rest.
                    self.result.abandoned += 1;
                    self.connect_failures.remove(&index);
                    self.carried_schedules.remove(&index);
                    return;
                }
                crate::backoff::delay_ns(failures, index)
            }
            End::Done => 0,
        };
        let prepaid = self.one_request_per_connection();
        if (prepaid && !self.shared.claim()) || (!prepaid && self.shared.budget_spent()) {
            return;
        }
        if prepaid {
            self.prepaid_pending += 1;
        }
        self.reconnects.push(Reverse((self.now_ns + delay, index, prepaid)));
    }

    fn on_event(&mut self, event: Event) {
        let token = event.token;
        if token == GATE_TOKEN {
            return self.begin_measuring();
        }
        let Some(conn) = self.conn_mut(token) else { return };
        conn.readable |= event.readable || event.closed;
        conn.writable |= event.writable || event.closed;
        conn.hangup |= event.closed;
        if !conn.core.is_connected() {
            match conn.socket.take_error() {
                Ok(None) if event.writable => self.on_connected(token),
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => {
                    self.count_connect_error(&e);
                    self.end(token, End::Failed);
                    self.give_up_if_dead(|| describe(&e));
                }
            }
            return;
        }
        self.drive(token);
    }

    fn conn_mut(&mut self, token: u64) -> Option<&mut Conn> {
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        self.conns.get_mut(index).filter(|c| c.generation == generation)
    }

    fn on_connected(&mut self, token: u64) {
        let now = self.clock();
        let index = self.conn_mut(token).map(|c| c.index);
        let carried = index.and_then(|i| self.carried_schedules.remove(&i));
        // Before the measured phase this is a placeholder: the gate starts every schedule.
        let first = index.and_then(|i| self.first_send_ns(i));
        let profile = &self.shared.profile;
        let Some(conn) = self.conn_mut(token) else { return };
        let connected = conn.core.on_connected(profile, now);
        if let Some((next_send_ns, late)) = carried {
            // A reconnect keeps the schedule of the connection it replaces.
            conn.next_send_ns = next_send_ns;
            conn.late = late;
        } else {
            conn.next_send_ns = first;
        }
        let (tcp, quic) = (!conn.core.is_datagram(), conn.core.is_quic());
        conn.quic_handshaking = quic;
        self.pending_connects -= 1;
        self.open += 1;
        self.result.connected += 1;
        // A UDP connect only sets the peer address: there is no handshake to time.
        if tcp {
            self.result.connect_latency.saturating_record((connected.took.as_nanos() as u64).max(1));
        }
        if quic {
            // QUIC's socket connect only sets its peer: its handshake, when it completes, is
            // its connect (`drive`).
            self.shared.quic_handshaking.fetch_add(1, Relaxed);
            self.quic_handshakes += 1;
        } else {
            self.shared.last_connect_ns.fetch_max(now.ns, Relaxed);
        }
        let open = self.shared.open.fetch_add(1, Relaxed) + 1;
        self.shared.peak_open.fetch_max(open, Relaxed);
        if let Some(close) = connected.failed {
            return self.close(token, close);
        }
        self.drive(token);
    }

    /// A connection closes as it said: count why, send its last bytes, end the socket, and
    /// reconnect it unless the run is ending.
    fn close(&mut self, token: u64, close: Close) {
        if let Reason::GraceOver = close.reason {
            return self.leave_unfinished(token);
        }
        let end = self.count_close(&close.reason);
        if let Some(conn) = self.conn_mut(token) {
            sockscale_sys::end_socket(conn.socket.as_raw_fd(), &close.last, close.ending);
        }
        self.end(token, end);
        match close.reason {
            Reason::ConnectTimeout { waited } => {
                self.give_up_if_dead(|| format!("connection timed out after {:.1} s", waited.as_secs_f64()));
            }
            // QUIC: its handshake is its connect.
            Reason::Quic(failure) if failure.handshaking => self.give_up_if_dead(|| failure.words),
            _ => {}
        }
    }

    /// Count why a connection closed; how it ended.
    fn count_close(&mut self, reason: &Reason) -> End {
        let result = &mut self.result;
        let errors = &mut result.errors;
        match reason {
            Reason::Done => return End::Done,
            Reason::ClosedByPeer => errors.closed_by_peer += 1,
            Reason::Tls { failure, handshaking } => {
                errors.tls += 1;
                result.tls.failed(failure.reason.name(), || failure.to_string(), *handshaking);
            }
            Reason::NoH2 => {
                errors.tls += 1;
                result.tls.failed("no_h2", || "the server did not agree to HTTP/2 (ALPN h2)".into(), false);
            }
            Reason::Mismatch => errors.verify_mismatch += 1,
            Reason::BadResponse { sample } => {
                errors.bad_response += 1;
                result.first_bad_response.get_or_insert_with(|| sample.clone());
            }
            Reason::BadResponseAtEof => errors.bad_response += 1,
            Reason::H2 { code, error, sample } => {
                *result.h2.connection_errors.entry(code.to_string()).or_default() += 1;
                result.h2.first_error.get_or_insert_with(|| error.clone());
                errors.bad_response += 1;
                result.first_bad_response.get_or_insert_with(|| sample.clone());
            }
            Reason::ConnectTimeout { .. } => errors.connect_timeout += 1,
            Reason::HandshakeTimeout { waited } => {
                errors.tls += 1;
                let waited = waited.as_secs_f64();
                result.tls.failed(
                    "timeout",
                    || format!("timeout: the handshake was not done after {waited:.1} s (--timeout)"),
                    true,
                );
            }
            Reason::ReplyTimeout => errors.reply_timeout += 1,
            // Counted by `leave_unfinished`.
            Reason::GraceOver => {}
            Reason::Ws(end) => return ws::count_end(result, end),
            Reason::Quic(failure) => {
                errors.quic += 1;
                result.quic.failed(&failure.kind, || failure.words.clone(), failure.handshaking);
            }
        }
        End::Failed
    }

    /// Close a connection; reconnect it unless the run is ending.
    fn end(&mut self, token: u64, end: End) {
        let (index, _) = ((token & 0xffff_ffff) as usize, ());
        let Some(mut conn) = self.conns.try_remove(index) else { return };
        ws::retire(&mut self.result, &conn.core);
        self.retire_quic(&mut conn);
        if conn.core.is_connected() {
            self.open -= 1;
            self.shared.open.fetch_sub(1, Relaxed);
            if self.send_interval_ns.is_some() {
                self.carried_schedules.insert(conn.index, (conn.next_send_ns, conn.late));
            }
        } else {
            self.pending_connects -= 1;
        }
        if conn.exchanges > 0 && self.shared.cfg.per_conn.is_some() {
            self.carried_exchanges.insert(conn.index, conn.exchanges);
        }
        self.refund(conn.prepaid > 0);
        // A connect that succeeds is not yet service: a server refusing when busy accepts and
        // closes at once (or answers 503), and resetting the back-off on the handshake would
        // bring every refused connection back after the shortest wait, a storm (a blocking
        // server at its threads limit saw 240,000 reconnects in 16 s). Only a connection that
        // completed an accepted exchange starts its back-off over.
        if conn.core.answered() {
            self.connect_failures.remove(&conn.index);
        }
        // Closed normally but never answered with an accepted status (an HTTP server refusing
        // when busy answers 503 with `Connection: close`): a refusal, which backs off and
        // counts toward --connect-retries like any other.
        let end = if end == End::Done && !conn.core.answered() { End::Failed } else { end };
        // Requests in flight on a failed connection count toward -n as failures (as ab
        // counts them), so a broken server ends a -n run instead of retrying forever.
        if conn.core.is_udp() {
            self.result.udp.lost += conn.core.outstanding() as u64;
        }
        self.schedule_reconnect(conn.index, end);
    }

    fn close_all(&mut self) {
        let tokens: Vec<u64> = self.conns.iter().map(|(i, c)| (u64::from(c.generation) << 32) | i as u64).collect();
        for token in tokens {
            let Some(mut conn) = self.conns.try_remove((token & 0xffff_ffff) as usize) else { continue };
            ws::retire(&mut self.result, &conn.core);
            self.retire_quic(&mut conn);
            if conn.core.is_connected() {
                self.open -= 1;
                self.shared.open.fetch_sub(1, Relaxed);
            }
            self.result.unclosed.push(conn.socket);
        }
    }

    fn fire_timers(&mut self) {
        while let Some((at, token)) = self.timers.pop_due(self.now) {
            if token & 0xffff_ffff == PACER_SLOT {
                self.on_pacer_deadline((token >> 32) as usize, at);
                continue;
            }
            let Some(conn) = self.conn_mut(token) else { continue };
            if conn.timer_at != Some(at) {
                continue;
            }
            conn.timer_at = None;
            self.result.timer_fires += 1;
            self.on_deadline(token);
        }
    }

    fn on_deadline(&mut self, token: u64) {
        let now = self.clock();
        let profile = &self.shared.profile;
        let interval = self.send_interval_ns;
        let result = &mut self.result;
        let (slot, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(conn) = self.conns.get_mut(slot).filter(|c| c.generation == generation) else { return };
        if let Err(close) = conn.core.on_timeout(profile, now, &mut |event| count(result, now.ns, event)) {
            return self.close(token, close);
        }
        if !conn.core.is_connected() {
            return self.settle(token);
        }
        // Open loop: the sends that fell due while the connection could not make them.
        if let (Some(next), Some(interval)) = (conn.next_send_ns, interval) {
            if next <= now.ns {
                let due = (now.ns - next) / interval + 1;
                conn.late += due;
                conn.next_send_ns = Some(next + due * interval);
            }
        }
        self.drive(token);
    }

    /// A block's deadline: drive, in order, the waiting connections its bucket now pays for.
    fn on_pacer_deadline(&mut self, block: usize, at: Instant) {
        let now_ns = self.now_ns;
        let conns = &self.conns;
        let Some(pacer) = self.pacers.get_mut(block).and_then(Option::as_mut) else { return };
        if pacer.timer_at != Some(at) {
            return;
        }
        pacer.timer_at = None;
        self.result.timer_fires += 1;
        let mut granted = std::mem::take(&mut self.granted);
        let still_waiting = |token: u64| {
            let (slot, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
            conns.get(slot).is_some_and(|c| c.generation == generation && c.queued)
        };
        pacer.block.grant_due(now_ns, still_waiting, &mut granted);
        for &token in &granted {
            if let Some(conn) = self.conn_mut(token) {
                conn.queued = false;
                conn.granted = true;
            }
            self.drive(token);
        }
        granted.clear();
        self.granted = granted;
        self.arm_pacer(block);
    }

    /// Set a block's deadline for when its first waiting connection can be paid for.
    fn arm_pacer(&mut self, block: usize) {
        let start = self.shared.start;
        let Some(pacer) = self.pacers.get_mut(block).and_then(Option::as_mut) else { return };
        if let Some(ns) = pacer.block.next_grant_ns(self.now_ns) {
            self.timers.schedule(&mut pacer.timer_at, start + Duration::from_nanos(ns), pacer_token(block));
        }
    }

    /// Re-arm the connection's timer: the earliest of its own deadlines and (open loop) its
    /// next send.
    fn settle(&mut self, token: u64) {
        let start = self.shared.start;
        let profile = &self.shared.profile;
        let Some(conn) = self.conns.get_mut((token & 0xffff_ffff) as usize) else { return };
        let send = conn.next_send_ns.filter(|_| conn.core.is_connected()).map(|ns| start + Duration::from_nanos(ns));
        let due = match (conn.core.poll_timeout(profile), send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = due {
            self.timers.schedule(&mut conn.timer_at, at, token);
        }
    }

    fn publish(&self) {
        let live = &self.shared.live[self.thread];
        live.completed.store(self.result.completed, Relaxed);
        live.errors.store(self.result.errors.total(), Relaxed);
        live.open.store(self.open, Relaxed);
    }
}

/// Count what a connection reported at `now_ns`.
fn count(result: &mut ThreadResult, now_ns: u64, event: ConnEvent) {
    match event {
        ConnEvent::HandshakeDone { took, negotiated } => result.tls.handshake_done(took, negotiated),
        ConnEvent::Echoed { stamp } => {
            result.completed += 1;
            result.latency.record(now_ns, stamp);
        }
        ConnEvent::Response { stamp, status, accepted } => {
            result.completed += 1;
            result.statuses.count(status);
            if !accepted {
                result.errors.http_status += 1;
            }
            result.latency.record(now_ns, stamp);
        }
        ConnEvent::StreamReset { code } => {
            result.errors.h2_reset += 1;
            *result.h2.resets.entry(code.into_owned()).or_default() += 1;
        }
        ConnEvent::StreamRefused => result.errors.h2_refused += 1,
        ConnEvent::StreamMalformed => result.errors.bad_response += 1,
        ConnEvent::GoAway { code } => *result.h2.goaways.entry(code.into_owned()).or_default() += 1,
        ConnEvent::Greeted { max_streams } => {
            let h2 = &mut result.h2;
            h2.connections += 1;
            if let Some(max) = max_streams {
                h2.server_max_streams = Some(h2.server_max_streams.map_or(max, |m| m.min(max)));
            }
        }
        ConnEvent::StreamOpened => result.h2.streams += 1,
        ConnEvent::WsUpgraded { deflate } => {
            result.ws.upgrades += 1;
            result.ws.deflate_agreed += u64::from(deflate);
        }
        ConnEvent::Datagram { stamp } => {
            result.completed += 1;
            result.udp.received += 1;
            result.latency.record(now_ns, stamp);
        }
        ConnEvent::LateDatagram => result.udp.late += 1,
        ConnEvent::BadDatagram => result.errors.verify_mismatch += 1,
        ConnEvent::Lost(n) => result.udp.lost += n,
        ConnEvent::Sent { plaintext, wire } => {
            result.bytes_sent += plaintext as u64;
            result.tls.counts.wire.sent += wire as u64;
        }
        ConnEvent::Quic(event) => {
            result.quic.count(&event, &mut result.bytes_sent, &mut result.bytes_received, &mut result.errors.h3_reset)
        }
        ConnEvent::Received { plaintext, wire } => {
            result.bytes_received += plaintext as u64;
            result.tls.counts.wire.received += wire as u64;
        }
    }
}

/// A connect error in words, without the "(os error N)" suffix of io::Error's Display.
fn describe(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "connection refused".into(),
        Some(libc::ETIMEDOUT) => "connection timed out".into(),
        Some(libc::EHOSTUNREACH) => "no route to host".into(),
        Some(libc::ENETUNREACH) => "network unreachable".into(),
        Some(libc::EADDRNOTAVAIL) => "no local port left (the ephemeral-port range is used up; see --source)".into(),
        Some(libc::EMFILE | libc::ENFILE) => "out of file descriptors (the open-files limit; see --procs)".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Progress;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A thread-per-connection echo server for `conns` connections.
    fn echo_server(conns: usize) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for stream in listener.incoming().take(conns) {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn paced_config(addr: std::net::SocketAddr, conns: usize, byte_rate: f64, duration: Duration) -> LoadConfig {
        LoadConfig {
            mode: Mode::Echo { msg_len: 100 },
            addr: addr.into(),
            target: addr.to_string(),
            conns,
            threads: 1,
            duration: Some(duration),
            requests: None,
            depth: 1,
            block: conns,
            connect_rate: None,
            block_byte_rate: Some(byte_rate),
            total_rate: None,
            nodelay: true,
            sources: Vec::new(),
            connect_timeout: Duration::from_secs(5),
            connect_retries: None,
            reply_timeout: Duration::from_secs(10),
            first_conn: 0,
            total_conns: conns as u64,
            progress: Progress::Off,
            accept_status: Default::default(),
            options: serde_json::Value::Null,
            connect_first: false,
            per_conn: None,
            tls: None,
            udp_offload: Default::default(),
            hdr_log: None,
        }
    }

    fn run_one_thread(cfg: LoadConfig) -> ThreadResult {
        let shared = Shared::new(cfg, Vec::new(), 0, false, 1).expect("shared");
        EventLoop::new(&shared, 0, 1).expect("event loop").run()
    }

    /// 200 connections share one block of 20,000 B/s (200 messages of 100 bytes a second):
    /// most of them wait for the bucket at any time. Waiting must cost nothing: the timers
    /// that fire stay in proportion to the messages sent, not to messages × waiting connections.
    #[test]
    fn waiting_paced_connections_cause_no_timer_work() {
        let conns = 200;
        let addr = echo_server(conns);
        let result = run_one_thread(paced_config(addr, conns, 20_000.0, Duration::from_millis(1500)));
        assert_eq!(result.errors.total(), 0, "{:?}", result.errors);
        assert!(result.sent >= 50, "the run sent too little to judge: {}", result.sent);
        // The pacer's own timer fires at most once per grant; a few connection deadlines
        // (connects) may fire too. Before the fix every waiting connection woke at every
        // refill: about 200 fires per message.
        assert!(
            result.timer_fires <= 2 * result.sent + 10,
            "{} timer fires for {} messages sent",
            result.timer_fires,
            result.sent
        );
    }
}
