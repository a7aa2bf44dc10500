//! One io_uring worker: its ring, its buffer ring, its connections, and the loop that submits
//! and reaps.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;
use socket2::Socket;
use sockscale_proto::Protocol;
use sockscale_sys::{Timers, Waker};

use super::bufring::BufRing;
use super::ops::{pack, unpack, Op, BUFFER_GROUP, WORKER_SLOT};
use super::ring_conn::{SpareSends, UConn};
use crate::active_places;
use crate::admission::{self, accept_paused, LogLimiter};
use crate::clock::DateClock;
use crate::config::Config;
use crate::groups::GroupLoad;
use crate::inbox::Inbox;
use crate::policy::CloseReason;
use crate::policy::{AcceptGate, AcceptNext, ActiveConfig, DrainStep, Handover, Limits, Refused, WorkerCore};
use crate::pool::BufferPool;
use crate::resources::Resources;
use crate::shutdown::{Phase, Shutdown};
use crate::socket_turn::ThreadState;
use crate::stats::{Counters, Stats};
use crate::udp::{self, UdpService, UdpTurn};

/// Where a worker's connections come from.
pub enum UringSource {
    /// Its own listener, with a multishot accept.
    Listener(Arc<Socket>),
    /// Another thread accepts and hands connections over (uring64's acceptor).
    Inbox(Arc<Inbox<OwnedFd>>),
    /// A UDP socket: readiness from a multishot poll, datagrams in recvmmsg batches (the worker
    /// moves it to [`WorkerSetup::udp`]'s place: it has no connections to take).
    Udp(Box<UdpService>),
}

/// What a model gives a worker thread to build its worker with.
/// A connection's key for the timers and the active set: its slot and generation.
pub(super) fn conn_token(index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | index as u64
}

/// The UDP socket's key for the timers: no connection's (a generation has 24 bits).
const UDP_TIMER: u64 = u64::MAX;

/// The slot and generation of a [`conn_token`].
pub(super) fn split_token(token: u64) -> (usize, u32) {
    ((token & 0xffff_ffff) as usize, (token >> 32) as u32)
}

pub struct WorkerSetup<'a> {
    pub cfg: &'a Config,
    pub protocol: Protocol,
    /// The server's loaded files: the body file, the TLS configuration.
    pub resources: &'a Arc<Resources>,
    pub stats: &'a Stats,
    pub counters: &'a Counters,
    pub pool: &'a BufferPool,
    pub shutdown: Shutdown,
    pub source: UringSource,
    /// Submission queue entries.
    pub entries: u32,
    /// The group this worker serves, when connections come in groups (uring64): a closed
    /// connection gives its slot back.
    pub group: Option<Arc<GroupLoad>>,
    /// This worker's share of `--active-set`.
    pub active: Option<ActiveConfig>,
    /// A UDP socket served beside the source: `--http3`'s, this worker's own (no other thread
    /// reads it, so each QUIC connection's datagrams reach one endpoint).
    pub udp: Option<Box<UdpService>>,
}

pub struct UringWorker<'a> {
    // The ring is declared (and so dropped) before the buffer ring it uses.
    pub(super) ring: IoUring,
    pub(super) bufs: BufRing<'a>,
    pub(super) cfg: &'a Config,
    pub(super) stats: &'a Stats,
    pub(super) counters: &'a Counters,
    shutdown: Shutdown,
    waker: Arc<Waker>,
    wake_buf: Box<[u8; 8]>,
    inbox_buf: Box<[u8; 8]>,
    source: Option<UringSource>,
    /// The UDP socket this worker serves (`--proto udp`'s, or `--http3`'s beside the listener).
    /// It outlives its multishot poll: dropped with the worker.
    udp: Option<Box<UdpService>>,
    /// The UDP socket's endpoint drained (in a drain): no longer served, its poll cancelled.
    udp_done: bool,
    accept_armed: bool,
    /// A cancellation of the multishot accept is in flight.
    accept_cancelling: bool,
    /// The UDP socket is served again on the next turn (a spent budget, a failed receive).
    udp_more: bool,
    /// The UDP socket's entry in `timers` (token [`UDP_TIMER`]): its endpoint's wake-up.
    udp_timer_at: Option<Instant>,
    /// Batch, back-off and abort-storm hold. It holds the connections the multishot accept took
    /// in after a storm began, served when it ends (closed unserved if the server stops first).
    gate: AcceptGate<OwnedFd>,
    accept_log: LogLimiter,
    /// The per-connection limits of `cfg`.
    pub(super) limits: Limits,
    pub(super) refusal_log: LogLimiter,
    pub(super) group: Option<Arc<GroupLoad>>,
    /// The worker's protocol engine, the output it writes into, its buffers for the TLS stage,
    /// and the server's loaded files (the body file, the TLS configuration).
    pub(super) kit: ThreadState,
    pub(super) conns: Slab<UConn>,
    next_generation: u32,
    pub(super) timers: Timers,
    pub(super) now: Instant,
    date: DateClock,
    /// Ring buffers held by sends in flight (echo sent straight from the receive buffer).
    pub(super) held_buffers: usize,
    /// Boxes of completed sends, for the next sends.
    pub(super) sends: SpareSends,
    /// Connections whose multishot receive stopped for lack of buffers.
    pub(super) starved: Vec<(usize, u32)>,
    /// `starved` as last fed, emptied, swapped in next time (so feeding allocates nothing).
    starved_spare: Vec<(usize, u32)>,
    /// Connections whose body file turn ended with the socket still taking bytes: sent on
    /// next turn, after the ring has run what completed meanwhile. A poll for writability
    /// would complete at once, inside the same reap, and so let one download starve the
    /// worker's other connections (their completions wait, deferred, for the next wait).
    pub(super) file_turns: Vec<(usize, u32)>,
    /// Worker-level operations in flight (accept, wake and inbox reads, UDP poll, cancels).
    worker_ops: usize,
    /// Cancelling everything before exit: re-arm nothing.
    tearing_down: bool,
    cqes: Vec<(u64, i32, u32)>,
    /// Entries the submission queue had no room for, in order; pushed first on every turn.
    backlog: VecDeque<squeue::Entry>,
    /// A submit failed unexpectedly this turn and was logged.
    submit_error_logged: bool,
    /// Test hook: this many of the next submits made to free room in a full submission queue
    /// fail with EBUSY.
    #[cfg(test)]
    pub(super) fail_submits: u32,
    /// Admission, the active set (which connections have a receive posted, keyed by token) and
    /// the drain: this worker's core decides.
    pub(super) core: WorkerCore<u64>,
}

impl<'a> UringWorker<'a> {
    pub fn new(setup: WorkerSetup<'a>) -> io::Result<Self> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_defer_taskrun()
            .setup_cqsize(setup.entries * 4)
            .build(setup.entries)?;
        let bufs = BufRing::new(&ring.submitter(), setup.pool, BUFFER_GROUP)?;
        let waker = Arc::new(Waker::new()?);
        setup.shutdown.register(waker.clone());
        let now = Instant::now();
        let (source, udp) = match setup.source {
            UringSource::Udp(udp) => (None, Some(udp)),
            source => (Some(source), setup.udp),
        };
        let mut worker = UringWorker {
            ring,
            bufs,
            cfg: setup.cfg,
            stats: setup.stats,
            counters: setup.counters,
            shutdown: setup.shutdown,
            waker,
            wake_buf: Box::new([0; 8]),
            inbox_buf: Box::new([0; 8]),
            source,
            udp,
            udp_done: false,
            accept_armed: false,
            accept_cancelling: false,
            udp_more: false,
            udp_timer_at: None,
            gate: AcceptGate::new(setup.cfg.accept_batch),
            accept_log: LogLimiter::accept_errors(),
            limits: setup.cfg.limits(),
            refusal_log: LogLimiter::refusals(),
            group: setup.group,
            kit: ThreadState::new(&setup.protocol, setup.resources),
            conns: Slab::new(),
            next_generation: 0,
            timers: Timers::default(),
            now,
            date: DateClock::new(now),
            held_buffers: 0,
            sends: SpareSends::default(),
            starved: Vec::new(),
            starved_spare: Vec::new(),
            file_turns: Vec::new(),
            worker_ops: 0,
            tearing_down: false,
            cqes: Vec::with_capacity(1024),
            backlog: VecDeque::new(),
            submit_error_logged: false,
            #[cfg(test)]
            fail_submits: 0,
            core: WorkerCore::new(setup.cfg.max_conns, setup.cfg.tls.is_some(), setup.active, Handover::AtOnce),
        };
        worker.arm_wake();
        worker.arm_source();
        worker.arm_udp();
        worker.ring.submit()?;
        Ok(worker)
    }

    /// Serve until a shutdown has drained every connection.
    pub fn run(mut self) -> io::Result<()> {
        loop {
            self.turn()?;
            // Counting the open connections walks the slab: only once the drain began.
            // A UDP socket still draining (its endpoint has requests in flight) counts as open.
            let open = if self.core.is_draining() {
                self.conns.iter().filter(|(_, c)| !c.closed).count() + usize::from(self.udp_live())
            } else {
                0
            };
            match self.core.drain_step(self.now, open, self.shutdown.phase() == Phase::Forced) {
                DrainStep::Serving | DrainStep::Draining => {}
                DrainStep::Done => break,
                DrainStep::CloseAll => {
                    self.close_all(CloseReason::Shutdown);
                    break;
                }
            }
        }
        self.teardown();
        Ok(())
    }

    pub(super) fn turn(&mut self) -> io::Result<()> {
        self.submit_error_logged = false;
        self.flush_backlog();
        let timeout = self.wait_timeout();
        let ts = types::Timespec::new().sec(timeout.as_secs()).nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            // EBUSY, EAGAIN: the kernel cannot take more now; what it did not take stays queued
            // (or in the backlog) and goes on the next turn.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {}
            Err(e) => return Err(e),
        }
        self.now = Instant::now();
        self.date.tick(self.now, &mut self.kit.responder);
        self.reap();
        self.fire_timers();
        self.feed_starved();
        self.take_file_turns();
        if std::mem::take(&mut self.udp_more) {
            self.udp_turn();
        }
        self.resume_accepting(false);
        Ok(())
    }

    fn wait_timeout(&self) -> Duration {
        let mut at = self.timers.next();
        for candidate in [self.core.next_wake(), self.gate.resumes_at()].into_iter().flatten() {
            at = Some(at.map_or(candidate, |a| a.min(candidate)));
        }
        // Starved receives and entries waiting for room are retried soon; otherwise sleep until
        // the next deadline (at most a second, so a missed wake-up cannot hang a worker).
        if !self.file_turns.is_empty() || self.udp_more {
            // Only look at what completed (running the deferred work), then send on.
            return Duration::ZERO;
        }
        let cap = if self.starved.is_empty() && self.backlog.is_empty() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(1)
        };
        at.map_or(cap, |a| a.saturating_duration_since(Instant::now()).min(cap))
    }

    /// Process every completion available, in batches.
    fn reap(&mut self) {
        loop {
            self.cqes.clear();
            self.cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            if self.cqes.is_empty() {
                return;
            }
            let batch = std::mem::take(&mut self.cqes);
            for &(data, result, flags) in &batch {
                self.complete(data, result, flags);
            }
            self.cqes = batch;
            // Flush what the completions queued, so the kernel works while we go on.
            let _ = self.ring.submit();
        }
    }

    fn complete(&mut self, data: u64, result: i32, flags: u32) {
        let (op, index, generation) = unpack(data);
        match op {
            Some(Op::Recv) => self.on_recv(index, generation, result, flags),
            Some(Op::Send) => self.on_send(index, generation, result),
            Some(Op::Poll) => self.on_poll(index, generation),
            Some(Op::Cancel) => self.on_cancel(index, generation),
            Some(Op::Accept) => self.on_accept(result, flags),
            Some(Op::Wake) => {
                self.worker_ops -= 1;
                self.on_phase_change();
                // Keep listening for a second signal (forced stop) until teardown, which
                // cancels this read and must not see it re-armed.
                if !self.tearing_down {
                    self.arm_wake();
                }
            }
            Some(Op::Inbox) => {
                self.worker_ops -= 1;
                self.take_inbox();
            }
            Some(Op::Udp) => {
                if !cqueue::more(flags) {
                    self.worker_ops -= 1;
                }
                self.serve_udp(flags);
            }
            None => {}
        }
    }

    /// Queue an operation. No entry is ever dropped: the caller has already counted it (in
    /// `UConn::ops` or `worker_ops`, and in state such as `recv_armed`), so a connection whose
    /// operation never reached the kernel would never be reclaimed. When the submission queue
    /// is full and the submit that would make room fails, the entry waits in the backlog, which
    /// goes to the kernel first on every turn.
    pub(super) fn push(&mut self, entry: squeue::Entry) {
        // In order, behind whatever waits already: a cancel must not overtake the receive it
        // cancels.
        self.flush_backlog();
        if !(self.backlog.is_empty() && self.queue(&entry)) {
            self.backlog.push_back(entry);
        }
    }

    /// Put `entry` in the submission queue, submitting once to make room if it is full.
    fn queue(&mut self, entry: &squeue::Entry) -> bool {
        self.queue_now(entry) || (self.make_room() && self.queue_now(entry))
    }

    fn queue_now(&mut self, entry: &squeue::Entry) -> bool {
        // SAFETY: every entry built by the uring modules refers only to memory owned by the
        // worker or by a connection slot that stays allocated until its operations have
        // completed (`UConn::ops`, `worker_ops`, counted before the entry is pushed, also while
        // it waits in the backlog), and to descriptors that stay open as long.
        unsafe { self.ring.submission().push(entry) }.is_ok()
    }

    /// Submit what is queued, to make room. False if the kernel took nothing: EBUSY (completions
    /// must be reaped first), EAGAIN and EINTR ask to try later, which the next turn does.
    fn make_room(&mut self) -> bool {
        match self.submit_for_room() {
            Ok(_) => true,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)) => false,
            Err(e) => {
                // Not expected. The entries wait too; if the error persists, the turn's own
                // submit reports it and the worker stops.
                if !std::mem::replace(&mut self.submit_error_logged, true) {
                    tracing::error!(error = %e, "io_uring submit failed; operations wait for the next turn");
                }
                false
            }
        }
    }

    /// Move the backlog into the submission queue, in order, as far as there is room.
    fn flush_backlog(&mut self) {
        while let Some(entry) = self.backlog.front().cloned() {
            if !self.queue(&entry) {
                return;
            }
            self.backlog.pop_front();
        }
    }

    /// The submit made when the submission queue is full.
    fn submit_for_room(&mut self) -> io::Result<usize> {
        #[cfg(test)]
        if self.fail_submits > 0 {
            self.fail_submits -= 1;
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.ring.submit()
    }

    /// What is in flight, for tests.
    #[cfg(test)]
    pub(super) fn census(&self) -> Census {
        Census {
            conns: self.conns.len(),
            conn_ops: self.conns.iter().map(|(_, c)| c.ops as usize).sum(),
            worker_ops: self.worker_ops,
            held_buffers: self.held_buffers,
            spare_sends: self.sends.len(),
            backlog: self.backlog.len(),
            fail_submits: self.fail_submits,
        }
    }

    fn arm_wake(&mut self) {
        let entry = opcode::Read::new(types::Fd(self.waker.fd().as_raw_fd()), self.wake_buf.as_mut_ptr(), 8)
            .build()
            .user_data(pack(Op::Wake, 0, 0));
        self.worker_ops += 1;
        self.push(entry);
    }

    fn arm_source(&mut self) {
        match &self.source {
            Some(UringSource::Listener(_)) => self.arm_accept(),
            Some(UringSource::Inbox(inbox)) => {
                let fd = inbox.waker().fd().as_raw_fd();
                let entry = opcode::Read::new(types::Fd(fd), self.inbox_buf.as_mut_ptr(), 8).build().user_data(pack(
                    Op::Inbox,
                    0,
                    0,
                ));
                self.worker_ops += 1;
                self.push(entry);
            }
            // Moved to `self.udp` when the worker was made.
            Some(UringSource::Udp(_)) | None => {}
        }
    }

    /// Whether the UDP socket is still served: there is one, and its endpoint has not drained.
    fn udp_live(&self) -> bool {
        self.udp.is_some() && !self.udp_done
    }

    /// Watch the UDP socket with a multishot poll (again, when the kernel ended the last one).
    fn arm_udp(&mut self) {
        let Some(udp) = &self.udp else { return };
        if self.udp_done || self.tearing_down {
            return;
        }
        let entry = opcode::PollAdd::new(types::Fd(udp.fd()), libc::POLLIN as u32).multi(true).build().user_data(pack(
            Op::Udp,
            0,
            0,
        ));
        self.worker_ops += 1;
        self.push(entry);
    }

    fn listener_fd(&self) -> Option<RawFd> {
        match &self.source {
            Some(UringSource::Listener(socket)) => Some(socket.as_raw_fd()),
            _ => None,
        }
    }

    /// Carry out what the accept gate answers: admit the connections it held, keep the multishot
    /// accept armed while it is open, cancel it while it is closed. The kernel completes the
    /// multishot accept as connections come, so the batch does not apply.
    fn arm_accept(&mut self) {
        let Some(fd) = self.listener_fd() else { return };
        if self.core.is_draining() || self.tearing_down {
            return;
        }
        loop {
            match self.gate.next(self.now, self.stats.storm_holds()) {
                AcceptNext::Admit(held) => self.admit(held, false),
                AcceptNext::Spent => {}
                AcceptNext::Accept => break,
                AcceptNext::Closed { .. } => {
                    if self.accept_armed && !self.accept_cancelling {
                        let cancel = opcode::AsyncCancel::new(pack(Op::Accept, 0, 0)).build().user_data(pack(
                            Op::Cancel,
                            WORKER_SLOT,
                            0,
                        ));
                        self.accept_cancelling = true;
                        self.worker_ops += 1;
                        self.push(cancel);
                    }
                    return;
                }
            }
        }
        if self.accept_armed {
            return;
        }
        let entry = opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(pack(Op::Accept, 0, 0));
        self.accept_armed = true;
        self.worker_ops += 1;
        self.push(entry);
    }

    fn on_accept(&mut self, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
            self.accept_cancelling = false;
            self.worker_ops -= 1;
        }
        if result >= 0 {
            // SAFETY: a successful accept completion's result is a new descriptor we own.
            let fd = unsafe { OwnedFd::from_raw_fd(result) };
            if self.core.is_draining() {
                // Taken as the drain began: refused, as the core answers.
                return self.admit(fd, false);
            }
            // An abort storm that began while the multishot accept was armed: the kernel has
            // taken this one in already, so the gate holds it, unserved as it would have been in
            // the backlog, and arm_accept cancels the multishot accept until the storm is over.
            if let Some(fd) = self.gate.on_taken(fd, self.stats.storm_holds()) {
                self.admit(fd, false);
            }
        } else {
            // Cancelled (a storm, a drain), a connection that died in the queue: accept on. Out
            // of descriptors: the gate closes, and the multishot accept is re-armed when it opens.
            let err = io::Error::from_raw_os_error(-result);
            let (_, step) = self.gate.on_error(self.now, &err);
            accept_paused(&mut self.accept_log, self.stats, self.now, &err, step);
        }
        self.arm_accept();
    }

    /// Look at the gate again when its time is due, or at once when `freed` (a descriptor was
    /// freed, and a storm may be over).
    pub(super) fn resume_accepting(&mut self, freed: bool) {
        if !self.gate.is_closed() {
            return;
        }
        let open =
            if freed { self.gate.on_freed(self.now) } else { self.gate.resumes_at().is_some_and(|at| at <= self.now) };
        if open {
            self.arm_accept();
        }
    }

    fn take_inbox(&mut self) {
        let Some(UringSource::Inbox(inbox)) = &self.source else { return };
        let inbox = inbox.clone();
        let mut fds = Vec::new();
        inbox.take_into(&mut fds);
        for fd in fds {
            self.admit(fd, true);
        }
        if !self.core.is_draining() && !self.tearing_down {
            self.arm_source();
        }
    }

    fn serve_udp(&mut self, flags: u32) {
        self.udp_turn();
        if !cqueue::more(flags) {
            self.arm_udp();
        }
    }

    /// One turn of the UDP socket; the multishot poll reports the next arrival, and a spent
    /// budget or a failed receive comes back on the next turn, after the ring's completions.
    fn udp_turn(&mut self) {
        let Some(udp) = &mut self.udp else { return };
        if self.udp_done {
            return;
        }
        self.udp_more = match udp.serve(self.cfg.read_budget, self.counters) {
            UdpTurn::Spent => true,
            UdpTurn::Drained { wake_at } => {
                if let Some(at) = wake_at {
                    self.timers.schedule(&mut self.udp_timer_at, at, UDP_TIMER);
                }
                false
            }
            // Looked at again after the pause, from the timers: the worker may serve
            // connections too (`--http3`), which a sleep would hold up.
            UdpTurn::Failed => {
                self.timers.schedule(&mut self.udp_timer_at, Instant::now() + udp::ERROR_PAUSE, UDP_TIMER);
                false
            }
        };
        // In a drain, the socket is served no more once its endpoint has nothing in flight.
        if self.core.is_draining() && udp.drained() {
            self.udp_done = true;
            self.udp_more = false;
            let entry =
                opcode::AsyncCancel::new(pack(Op::Udp, 0, 0)).build().user_data(pack(Op::Cancel, WORKER_SLOT, 0));
            self.worker_ops += 1;
            self.push(entry);
        }
    }

    fn on_phase_change(&mut self) {
        if self.shutdown.phase() != Phase::Running {
            self.begin_drain();
        }
    }

    fn begin_drain(&mut self) {
        let until = self.shutdown.drain_until().unwrap_or(self.now);
        // The drain ends the active set (see `Lifecycle::begin_drain`): a waiting connection
        // reads what it sent before the drain, or closes now if it sent nothing.
        if !self.core.begin_drain(until) {
            return;
        }
        if self.accept_armed {
            let entry =
                opcode::AsyncCancel::new(pack(Op::Accept, 0, 0)).build().user_data(pack(Op::Cancel, WORKER_SLOT, 0));
            self.worker_ops += 1;
            self.push(entry);
        }
        match self.source.take() {
            Some(UringSource::Inbox(inbox)) => {
                // Connections handed over but never taken are refused (the core answers how, and
                // gives back the --max-conns slots their acceptor took).
                for fd in inbox.close() {
                    self.admit(fd, true);
                }
            }
            Some(UringSource::Listener(socket)) => self.source = Some(UringSource::Listener(socket)),
            // Moved to `self.udp` when the worker was made.
            Some(UringSource::Udp(_)) | None => {}
        }
        // The UDP socket is served on through the drain (datagrams, timers), until its endpoint
        // says it has drained (`udp_turn`, which then cancels its poll) or the deadline.
        if let Some(udp) = &mut self.udp {
            udp.begin_drain(self.now, self.counters);
            self.udp_more = true;
        }
        let live: Vec<(usize, u32)> =
            self.conns.iter().filter(|(_, c)| !c.closed).map(|(i, c)| (i, c.generation)).collect();
        for (index, generation) in live {
            if let Some(conn) = self.conns.get_mut(index) {
                active_places::drain(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, until, self.stats);
            }
            self.settle(index, generation);
        }
    }

    pub(super) fn next_generation(&mut self) -> u32 {
        let g = self.next_generation;
        self.next_generation = (self.next_generation + 1) & 0xff_ffff;
        g
    }

    fn fire_timers(&mut self) {
        self.review_active_set();
        while let Some((at, token)) = self.timers.pop_due(self.now) {
            if token == UDP_TIMER {
                if self.udp_timer_at == Some(at) {
                    self.udp_timer_at = None;
                    self.udp_turn();
                }
                continue;
            }
            let (index, generation) = split_token(token);
            let Some(conn) = self.conns.get_mut(index) else { continue };
            if conn.generation != generation || conn.closed || conn.timer_at != Some(at) {
                continue;
            }
            conn.timer_at = None;
            self.on_deadline(index, generation);
        }
    }

    fn feed_starved(&mut self) {
        if self.starved.is_empty() || self.bufs.available() == 0 {
            return;
        }
        let mut starved = std::mem::replace(&mut self.starved, std::mem::take(&mut self.starved_spare));
        for (index, generation) in starved.drain(..) {
            self.settle(index, generation);
        }
        self.starved_spare = starved;
    }

    fn close_all(&mut self, reason: CloseReason) {
        let live: Vec<usize> = self.conns.iter().filter(|(_, c)| !c.closed).map(|(i, _)| i).collect();
        for index in live {
            self.close(index, reason);
        }
    }

    /// Cancel whatever is still in flight and wait (boundedly) for it, so no operation can
    /// touch memory after the worker is gone.
    fn teardown(&mut self) {
        self.tearing_down = true;
        self.close_all(CloseReason::Shutdown);
        let _ = self.ring.submitter().register_sync_cancel(None, types::CancelBuilder::any().all());
        let deadline = Instant::now() + Duration::from_secs(2);
        while (self.worker_ops > 0 || !self.conns.is_empty()) && Instant::now() < deadline {
            // Operations waiting for room are counted in flight: they must reach the kernel to
            // complete (on closed sockets, or cancelled).
            self.flush_backlog();
            let ts = types::Timespec::new().nsec(10_000_000);
            let _ = self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
            self.reap();
            self.now = Instant::now();
            if self.worker_ops > 0 {
                let _ = self.ring.submitter().register_sync_cancel(None, types::CancelBuilder::any().all());
            }
        }
    }

    pub(super) fn on_cancel(&mut self, index: usize, generation: u32) {
        if index == WORKER_SLOT {
            self.worker_ops -= 1;
            return;
        }
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.generation != generation {
            return;
        }
        conn.ops -= 1;
        self.reclaim(index);
    }

    /// Carry out a refusal the core answered: its last bytes, its ending, its count.
    pub(super) fn refuse(&mut self, fd: OwnedFd, refused: Refused<'_>) {
        admission::refuse(fd.as_raw_fd(), refused, self.counters, self.stats, &mut self.refusal_log);
    }
}

/// What a worker has in flight (tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Census {
    pub conns: usize,
    pub conn_ops: usize,
    pub worker_ops: usize,
    pub held_buffers: usize,
    pub spare_sends: usize,
    pub backlog: usize,
    pub fail_submits: u32,
}
