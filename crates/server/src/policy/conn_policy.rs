//! One connection's policy: when it may read, what input, output, EOF and errors mean, when
//! its deadlines fall and which one fired, and when it is finished.
//!
//! The connection's lifecycle (`lifecycle.rs`) owns a [`ConnPolicy`] beside the protocol
//! session; it tells the policy what happened and how much output is still waiting
//! ([`Pending`]), and turns its answers into the engine's actions.

use std::io;
use std::time::{Duration, Instant};

use sockscale_proto::{Closing, Verdict};

use super::CloseReason;

/// `t + d`, capped far in the future instead of overflowing: a user may well ask for an idle
/// timeout of a century.
pub fn after(t: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    t.checked_add(d.min(CENTURY)).unwrap_or(t)
}

/// The per-connection limits of the configuration, copied once per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `--idle-timeout`: no traffic either way for this long closes the connection.
    pub idle_timeout: Duration,
    /// `--send-timeout`: output over the cap, or output the socket takes none of, for this
    /// long closes the connection.
    pub send_timeout: Duration,
    /// `--max-pending-send`: output waiting for the client beyond this stops reading.
    pub max_pending_send: usize,
    /// `--max-outstanding-sends`: sends queued behind the one in flight (completion engines)
    /// beyond this stop reading.
    pub max_outstanding_sends: usize,
    /// `--read-budget`: bytes read from one connection before yielding to the others.
    pub read_budget: usize,
    /// `--first-data-timeout`: a connection that has sent nothing this long after it was
    /// accepted is closed.
    pub first_data_timeout: Option<Duration>,
}

/// Output a connection has produced that the client has not taken yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Bytes queued or in flight.
    pub bytes: usize,
    /// Sends queued behind the one in flight (completion engines; 0 for the others, which
    /// write at once and queue only bytes).
    pub sends: usize,
    /// Bytes of a body file still to send (`--sendfile`). They take no memory, so they do not
    /// count toward `--max-pending-send`; while any are owed the connection stops reading
    /// after the read in progress, so a pipelining client's requests wait in the socket
    /// rather than as queued file ranges (each takes a few bytes, the requests of one read).
    pub file_bytes: u64,
}

impl Pending {
    /// Output of an engine that writes at once and queues only the bytes refused.
    #[cfg(test)]
    pub fn bytes(bytes: usize) -> Self {
        Pending { bytes, sends: 0, file_bytes: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0 && self.file_bytes == 0
    }

    /// Over `--max-pending-send` or `--max-outstanding-sends`: the client is not keeping up.
    fn is_over(&self, limits: &Limits) -> bool {
        self.bytes > limits.max_pending_send || self.sends > limits.max_outstanding_sends
    }
}

/// The close reason for a socket error: the one table every engine uses. A reset, an abort or
/// TCP giving up on the peer is an abort (the seeds' admission control counts these); other
/// errors that mean the peer (or the path to it) went away are the peer's doing; anything else
/// is an error.
pub fn close_reason(err: &io::Error) -> CloseReason {
    match err.raw_os_error() {
        Some(libc::ECONNRESET | libc::ECONNABORTED | libc::ETIMEDOUT) => CloseReason::Aborted,
        Some(libc::EPIPE | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::ENOTCONN) => CloseReason::Peer,
        _ => CloseReason::Error,
    }
}

/// [`close_reason`], logged when it is not the peer's doing.
pub fn closed_by_error(err: &io::Error) -> CloseReason {
    let reason = close_reason(err);
    if reason == CloseReason::Error {
        tracing::debug!(error = %err, "closing a connection after a socket error");
    }
    reason
}

/// What a protocol's closing verdict is counted as. HTTP/2's limits: a window kept shut past
/// the send timeout is a send timeout; the floods (rapid reset, CONTINUATION, SETTINGS, PING,
/// empty frames) are [`CloseReason::Hostile`], each kind counted by the stage's own stats.
pub fn closing_reason(closing: Closing) -> CloseReason {
    match closing {
        Closing::Done => CloseReason::Done,
        Closing::BadRequest => CloseReason::Protocol,
        Closing::HeaderTimeout => CloseReason::HeaderTimeout,
        Closing::Limit(sockscale_h2::Limit::WindowStall) => CloseReason::SendTimeout,
        Closing::Limit(sockscale_h2::Limit::HeaderTimeout) => CloseReason::HeaderTimeout,
        Closing::Limit(_) => CloseReason::Hostile,
        // A WebSocket peer that answered no ping: as silent as an idle one.
        Closing::PingTimeout => CloseReason::Idle,
    }
}

/// `ConnPolicy::waiting_idle_ms` of a connection that is not waiting.
const NOT_WAITING: u32 = u32::MAX;

/// A deadline that fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub reason: CloseReason,
    /// The protocol has an answer for it (HTTP's 408): the close's last bytes (behind the
    /// output still queued, in the closing phase, if any is).
    pub answer: bool,
}

/// Where a connection stands toward its end: what `ConnPolicy::close_at` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Serving: no `close_at`.
    Serving,
    /// Draining: close between requests, and whatever is left at `close_at`. `owes_read`: the
    /// kernel held input nobody had read when the drain began; from the client's side that
    /// request is in progress, so it is read and answered before the connection counts as
    /// between requests. Cleared by the next bytes received.
    Draining { owes_read: bool },
    /// The closing phase (see [`ConnPolicy::begin_closing`]): a deadline expired with output
    /// still queued; the connection closes for its `closing` reason once the output is
    /// flushed, or at `close_at` without it.
    Closing,
}

/// The policy state of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPolicy {
    /// Last time bytes moved either way.
    last_activity: Instant,
    /// When the pending output went over its cap.
    over_since: Option<Instant>,
    /// Since when output has been pending without the socket taking any of it.
    stalled_since: Option<Instant>,
    /// Close once the output is flushed, for this reason.
    closing: Option<CloseReason>,
    /// The peer sent FIN.
    read_eof: bool,
    /// Whatever is left is closed at this instant: the drain's deadline, or the end of the
    /// closing phase (see [`Phase`]). One slot for both, so that an idle connection stays
    /// within its memory budget: the closing phase never ends later than the drain.
    close_at: Option<Instant>,
    /// Serving, draining, or in the closing phase.
    phase: Phase,
    /// No bytes have arrived since the connection was accepted: its first-data clock runs from
    /// `last_activity` (nothing arrived, and no protocol answers a client that has said
    /// nothing, so the two are the same instant; a bool keeps an idle connection within its
    /// memory budget, see `conn::size`).
    silent: bool,
    /// Waiting for a place in the active set (`--active-set`): not read from, and its idle and
    /// first-data clocks stand still (the wait is the server's doing, and what the client sends
    /// meanwhile is not read). Holds how long the connection had been idle when it began to
    /// wait, in milliseconds (a silent connection's first-data clock reads the same: nothing was
    /// received, so nothing was sent); [`NOT_WAITING`] when it is not waiting. A bare u32, not
    /// an Option, so that an idle connection stays within its memory budget.
    waiting_idle_ms: u32,
}

impl ConnPolicy {
    pub fn new(now: Instant) -> Self {
        ConnPolicy {
            last_activity: now,
            over_since: None,
            stalled_since: None,
            closing: None,
            read_eof: false,
            close_at: None,
            phase: Phase::Serving,
            silent: true,
            waiting_idle_ms: NOT_WAITING,
        }
    }

    /// The connection waits for a place in the active set from `now` (true), or has been given
    /// one at `now` (false). Its idle and first-data clocks resume where they stood: the time
    /// spent waiting is left out, so a client silent while it held a place is still closed once
    /// the timeout's worth of such time has passed.
    pub fn set_waiting(&mut self, waiting: bool, now: Instant) {
        match (self.is_waiting(), waiting) {
            (false, true) => {
                let idle = now.saturating_duration_since(self.last_activity).as_millis();
                self.waiting_idle_ms = u32::try_from(idle).unwrap_or(u32::MAX).min(NOT_WAITING - 1);
            }
            (true, false) => {
                let idle = Duration::from_millis(u64::from(self.waiting_idle_ms));
                let resumed = now.checked_sub(idle).unwrap_or(now);
                self.last_activity = resumed;
                self.waiting_idle_ms = NOT_WAITING;
            }
            _ => {}
        }
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting_idle_ms != NOT_WAITING
    }

    /// Bytes arrived.
    pub fn on_received(&mut self, now: Instant) {
        self.last_activity = now;
        self.silent = false;
        if let Phase::Draining { owes_read } = &mut self.phase {
            *owes_read = false;
        }
    }

    /// When a connection still silent must have sent its first bytes, if that is asked.
    fn first_data_due(&self, limits: &Limits) -> Option<Instant> {
        if self.is_waiting() {
            return None;
        }
        if !self.silent {
            return None;
        }
        Some(after(self.last_activity, limits.first_data_timeout?))
    }

    /// When the connection is idle too long, unless it is waiting for a place.
    fn idle_due(&self, limits: &Limits) -> Option<Instant> {
        (!self.is_waiting()).then(|| after(self.last_activity, limits.idle_timeout))
    }

    /// The socket took `bytes` of output.
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        if bytes > 0 {
            self.last_activity = now;
        }
    }

    /// The protocol's verdict on the input it was just fed. Returns whether the exchange goes
    /// on (false: the connection closes once its output is flushed, and reads nothing more).
    pub fn on_verdict(&mut self, verdict: Verdict) -> bool {
        match verdict {
            Verdict::Continue => true,
            Verdict::Close(closing) => {
                self.closing.get_or_insert(closing_reason(closing));
                false
            }
        }
    }

    /// The peer sent FIN: nothing more will arrive.
    pub fn on_eof(&mut self) {
        self.read_eof = true;
    }

    /// The server began draining at `now`: close this connection at its next request
    /// boundary, and at `until` whatever its state. The engine also asks the session to finish
    /// its exchange. `unread_input`: the kernel holds bytes from the client nobody has read yet
    /// (a connection waiting for a place in the active set, or input not yet reached by a read
    /// turn). The client sent them before the drain, so they are a request in progress: they
    /// are read and answered first. A waiting connection stops waiting: the drain ends the
    /// active set, since from now on connections only leave, and `until` bounds the time.
    /// In the closing phase, the drain's deadline bounds the phase.
    pub fn begin_drain(&mut self, now: Instant, until: Instant, unread_input: bool) {
        match self.phase {
            Phase::Serving => {
                self.phase = Phase::Draining { owes_read: unread_input };
                self.close_at = Some(until);
            }
            Phase::Draining { .. } => {}
            Phase::Closing => self.close_at = Some(self.close_at.map_or(until, |at| at.min(until))),
        }
        self.set_waiting(false, now);
    }

    /// Until when a close decided at `now` may wait for the output queued ahead of its last
    /// bytes: the send timeout, and never past the drain's deadline.
    pub fn closing_deadline(&self, now: Instant, limits: &Limits) -> Instant {
        let by = after(now, limits.send_timeout);
        self.close_at.map_or(by, |until| until.min(by))
    }

    /// The closing phase begins: a deadline expired (for `reason`, whose ending is orderly) with
    /// output still queued. The connection reads nothing more, its output is flushed as any
    /// output is, and it closes for `reason` once it is flushed ([`ConnPolicy::finished`]), or
    /// at `by` with the output (and the last bytes behind it) unsent. Only the send clocks
    /// (flood, stall) and `by` are kept from then on: the protocol has had its last word, and
    /// idleness or the drain's end cannot come later than `by`. A second call changes nothing.
    pub fn begin_closing(&mut self, reason: CloseReason, by: Instant) {
        if self.phase != Phase::Closing {
            self.closing = Some(reason);
            self.phase = Phase::Closing;
            self.close_at = Some(by);
        }
    }

    /// In the closing phase (see [`ConnPolicy::begin_closing`]).
    pub fn is_in_closing_phase(&self) -> bool {
        self.phase == Phase::Closing
    }

    /// Draining, and nothing the client sent before the drain is left to answer: the
    /// connection may close at this request boundary.
    fn drained_between(&self, between_requests: bool) -> bool {
        self.phase == Phase::Draining { owes_read: false } && between_requests
    }

    /// A drain has begun (and no closing phase: a closing connection reads nothing and
    /// finishes for its own reason): only then does whether the session is between requests
    /// matter to [`ConnPolicy::may_read`] and [`ConnPolicy::finished`].
    pub fn is_draining(&self) -> bool {
        matches!(self.phase, Phase::Draining { .. })
    }

    /// The protocol has ended the exchange; input that still arrives is not for anyone.
    pub fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// May the connection read now? Not after EOF or a closing verdict, not while its output
    /// is over a cap (a client that does not read must not make the server buffer without
    /// bound), not between requests while draining, not while it waits for a place in the
    /// active set.
    pub fn may_read(&self, pending: Pending, between_requests: bool, limits: &Limits) -> bool {
        let stopped = self.is_waiting()
            || self.read_eof
            || self.closing.is_some()
            || pending.is_over(limits)
            || pending.file_bytes > 0
            || self.drained_between(between_requests);
        !stopped
    }

    /// Is the connection finished, and why? Only once all output is flushed: the protocol
    /// ended it, the peer sent FIN, or a drain found it between requests.
    pub fn finished(&self, pending: Pending, between_requests: bool) -> Option<CloseReason> {
        if !pending.is_empty() {
            return None;
        }
        self.closing.or(if self.read_eof {
            Some(CloseReason::Peer)
        } else if self.drained_between(between_requests) {
            Some(CloseReason::Shutdown)
        } else {
            None
        })
    }

    /// After I/O: start, keep or stop the flood and stall clocks. `progressed`: the socket took
    /// some output this time. Returns true when the output has just come back under its caps,
    /// so an engine holding unread input should read it without waiting for a new event.
    pub fn account(&mut self, now: Instant, pending: Pending, progressed: bool, limits: &Limits) -> bool {
        if pending.is_empty() {
            self.stalled_since = None;
        } else if progressed || self.stalled_since.is_none() {
            self.stalled_since = Some(now);
        }
        let was_over = self.over_since.is_some();
        if pending.is_over(limits) {
            self.over_since.get_or_insert(now);
        } else {
            self.over_since = None;
        }
        was_over && self.over_since.is_none()
    }

    /// The next instant a policy may act, given the protocol's own deadline (HTTP's header
    /// timeout).
    pub fn deadline(&self, limits: &Limits, protocol: Option<Instant>) -> Instant {
        let send = limits.send_timeout;
        if let (Phase::Closing, Some(by)) = (self.phase, self.close_at) {
            return [self.over_since, self.stalled_since]
                .into_iter()
                .flatten()
                .map(|t| after(t, send))
                .fold(by, Instant::min);
        }
        [
            protocol,
            self.over_since.map(|t| after(t, send)),
            self.stalled_since.map(|t| after(t, send)),
            self.first_data_due(limits),
            self.close_at,
            self.idle_due(limits),
        ]
        .into_iter()
        .flatten()
        // Nothing due (a waiting connection with no output): wake in a century.
        .fold(after(self.last_activity, Duration::MAX), Instant::min)
    }

    /// The deadline that has passed at `now`, if any, in the one order every engine applies:
    /// flood, send stall, first data, the protocol's deadline (`protocol_due`), idle, the
    /// drain's end; in the closing phase, flood, send stall and the phase's end (the close's
    /// own reason).
    pub fn expired(&self, now: Instant, limits: &Limits, protocol_due: bool) -> Option<Expired> {
        let send_due = |since: Option<Instant>| since.is_some_and(|t| after(t, limits.send_timeout) <= now);
        let reason = if send_due(self.over_since) {
            CloseReason::Flood
        } else if send_due(self.stalled_since) {
            CloseReason::SendTimeout
        } else if self.phase == Phase::Closing {
            match (self.closing, self.close_at) {
                (Some(reason), Some(by)) if by <= now => reason,
                _ => return None,
            }
        } else if self.first_data_due(limits).is_some_and(|at| at <= now) {
            CloseReason::FirstData
        } else if protocol_due {
            return Some(Expired { reason: CloseReason::HeaderTimeout, answer: true });
        } else if self.idle_due(limits).is_some_and(|at| at <= now) {
            CloseReason::Idle
        } else if self.close_at.is_some_and(|at| at <= now) {
            CloseReason::Shutdown
        } else {
            return None;
        };
        Some(Expired { reason, answer: false })
    }
}

/// One read turn of a connection: how much to ask for, and after each read whether to go on.
/// Four bytes, kept in every connection's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRound {
    left: u32,
}

/// What to do after a read that returned bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadNext {
    /// Read again.
    More,
    /// Stop: the connection is closing, its output is over a cap, or body file bytes are owed.
    Stop,
    /// `--read-budget` is spent: let the other connections have their turn, then come back
    /// without waiting for an event (input may be left).
    Yield,
    /// A short read emptied the socket's queue: wait for the next event.
    Drained,
}

impl ReadRound {
    pub fn new(limits: &Limits) -> Self {
        ReadRound { left: u32::try_from(limits.read_budget).unwrap_or(u32::MAX) }
    }

    /// A round with nothing left to read (none under way).
    pub fn spent() -> Self {
        ReadRound { left: 0 }
    }

    /// How many bytes to ask for with a buffer of `buffer` bytes.
    pub fn want(&self, buffer: usize) -> usize {
        (self.left as usize).min(buffer)
    }

    /// `got` bytes were read.
    pub fn consume(&mut self, got: usize) {
        self.left = self.left.saturating_sub(u32::try_from(got).unwrap_or(u32::MAX));
    }

    /// After a read that returned bytes (`short`: fewer than asked) and was fed to the
    /// protocol, with `pending` output now waiting. `hangup`: the waiter reported a hang-up or
    /// error; its FIN or reset sits behind the data and raises no new event on an
    /// edge-triggered waiter, so a short read must not be taken to mean drained.
    pub fn next(&self, short: bool, hangup: bool, conn: &ConnPolicy, pending: Pending, limits: &Limits) -> ReadNext {
        // Body file bytes owed stop reading, as in `may_read`: the next request waits for them.
        if conn.closing.is_some() || pending.is_over(limits) || pending.file_bytes > 0 {
            ReadNext::Stop
        } else if self.left == 0 {
            ReadNext::Yield
        } else if short && !hangup {
            ReadNext::Drained
        } else {
            ReadNext::More
        }
    }

    /// [`ReadRound::consume`] then [`ReadRound::next`], for `got` bytes of `wanted`.
    #[cfg(test)]
    pub fn after_read(
        &mut self,
        got: usize,
        wanted: usize,
        hangup: bool,
        conn: &ConnPolicy,
        pending: Pending,
        limits: &Limits,
    ) -> ReadNext {
        self.consume(got);
        self.next(got < wanted, hangup, conn, pending, limits)
    }
}

/// The limits the policy's and the lifecycle's unit tests start from.
#[cfg(test)]
impl Limits {
    pub(crate) fn example() -> Self {
        Limits {
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(10),
            max_pending_send: 100,
            max_outstanding_sends: 4,
            read_budget: 1000,
            first_data_timeout: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::example()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn reading_stops_over_either_cap_after_eof_closing_and_between_requests_when_draining() {
        let (t0, l) = (Instant::now(), limits());
        let mut p = ConnPolicy::new(t0);
        assert!(p.may_read(Pending::bytes(100), true, &l), "at the cap is not over it");
        assert!(!p.may_read(Pending::bytes(101), true, &l));
        assert!(!p.may_read(Pending { bytes: 10, sends: 5, file_bytes: 0 }, true, &l), "too many sends outstanding");
        p.begin_drain(t0, t0 + secs(5), false);
        assert!(p.may_read(Pending::default(), false, &l), "a request in progress may finish");
        assert!(!p.may_read(Pending::default(), true, &l));
        let mut eof = ConnPolicy::new(t0);
        eof.on_eof();
        assert!(!eof.may_read(Pending::default(), false, &l));
        let mut closing = ConnPolicy::new(t0);
        assert!(!closing.on_verdict(Verdict::Close(Closing::Done)));
        assert!(!closing.may_read(Pending::default(), false, &l));
    }

    /// A connection waiting for a place in the active set reads nothing, and is neither idle
    /// nor silent by the client's fault: its clocks start when it is given a place.
    #[test]
    fn a_waiting_connection_reads_nothing_and_its_idle_and_first_data_clocks_stand_still() {
        let t0 = Instant::now();
        let l = Limits { first_data_timeout: Some(secs(5)), ..limits() };
        let mut p = ConnPolicy::new(t0);
        p.set_waiting(true, t0);
        assert!(!p.may_read(Pending::default(), true, &l));
        assert_eq!(p.expired(t0 + secs(3600), &l, false), None, "an hour waiting is no timeout");
        assert!(p.deadline(&l, None) > t0 + secs(365 * 24 * 3600), "nothing to wake for");
        assert_eq!(p.finished(Pending::default(), true), None, "waiting is not finished");
        let t1 = t0 + secs(3600);
        p.set_waiting(false, t1);
        assert!(p.may_read(Pending::default(), true, &l));
        assert_eq!(p.deadline(&l, None), t1 + secs(5), "first data is due 5 s after the place is given");
        assert_eq!(p.expired(t1 + secs(5), &l, false).map(|e| e.reason), Some(CloseReason::FirstData));
        p.on_received(t1 + secs(1));
        assert_eq!(p.expired(t1 + secs(61), &l, false).map(|e| e.reason), Some(CloseReason::Idle));
        // Silent while it held a place, 40 s; then 100 s waiting; then 20 s more holding one: the
        // idle timeout (60 s) counts the 40 + 20, not the wait.
        let mut q = ConnPolicy::new(t0);
        q.on_received(t0);
        q.set_waiting(true, t0 + secs(40));
        q.set_waiting(false, t0 + secs(140));
        assert_eq!(q.expired(t0 + secs(159), &l, false), None);
        assert_eq!(q.expired(t0 + secs(160), &l, false).map(|e| e.reason), Some(CloseReason::Idle));
        // The drain ends the wait: a waiting connection that sent nothing closes at once.
        let mut w = ConnPolicy::new(t0);
        w.set_waiting(true, t0);
        w.begin_drain(t0, t0 + secs(5), false);
        assert!(!w.is_waiting());
        assert_eq!(w.finished(Pending::default(), true), Some(CloseReason::Shutdown));
    }

    /// The closing phase keeps only the send clocks and its own end: no idle, first-data or
    /// protocol deadline fires in it; at its end the close goes for its own reason; a drain
    /// that begins during it brings its end forward, never back; and it finishes for its
    /// reason once the output is flushed.
    #[test]
    fn the_closing_phase_ends_at_its_own_deadline_for_its_own_reason() {
        let t0 = Instant::now();
        let l = Limits { idle_timeout: secs(1), first_data_timeout: Some(secs(1)), ..limits() };
        let mut p = ConnPolicy::new(t0);
        let by = p.closing_deadline(t0, &l);
        assert_eq!(by, t0 + l.send_timeout);
        p.begin_closing(CloseReason::HeaderTimeout, by);
        p.begin_closing(CloseReason::Idle, t0 + secs(1));
        assert!(p.is_in_closing_phase() && p.is_closing() && !p.is_draining());
        assert_eq!(p.deadline(&l, Some(t0)), by, "neither idle, first data nor the protocol");
        assert_eq!(p.expired(by - secs(1), &l, true), None);
        assert_eq!(p.expired(by, &l, true), Some(Expired { reason: CloseReason::HeaderTimeout, answer: false }));
        assert!(!p.may_read(Pending::default(), false, &l));
        assert_eq!(p.finished(Pending::bytes(1), false), None);
        assert_eq!(p.finished(Pending::default(), false), Some(CloseReason::HeaderTimeout));
        // A drain: its deadline bounds the phase when sooner, and a later one does not move it.
        p.begin_drain(t0, t0 + secs(3), false);
        assert_eq!(p.deadline(&l, None), t0 + secs(3));
        p.begin_drain(t0, t0 + secs(9), false);
        assert_eq!(p.expired(t0 + secs(3), &l, false).map(|e| e.reason), Some(CloseReason::HeaderTimeout));
        // Draining first, the phase may not outlast the drain.
        let mut d = ConnPolicy::new(t0);
        d.begin_drain(t0, t0 + secs(2), false);
        assert_eq!(d.closing_deadline(t0, &l), t0 + secs(2));
        // A stall still ends it first, as an abort.
        let mut s = ConnPolicy::new(t0);
        s.account(t0, Pending::bytes(10), false, &l);
        s.begin_closing(CloseReason::Idle, t0 + secs(60));
        assert_eq!(s.expired(t0 + l.send_timeout, &l, false).map(|e| e.reason), Some(CloseReason::SendTimeout));
    }

    /// Input the kernel held unread when the drain began (a connection waiting for a place, or
    /// input a read turn had not reached) was sent before the drain: it is read and answered,
    /// and only then does the connection close between requests.
    #[test]
    fn the_drain_reads_and_answers_input_sent_before_it() {
        let (t0, l) = (Instant::now(), limits());
        let mut w = ConnPolicy::new(t0);
        w.set_waiting(true, t0);
        w.begin_drain(t0 + secs(1), t0 + secs(5), true);
        assert!(!w.is_waiting(), "the drain ends the active set");
        assert!(w.may_read(Pending::default(), true, &l), "what was sent before the drain is read");
        assert_eq!(w.finished(Pending::default(), true), None, "not closed before it is read");
        w.on_received(t0 + secs(1));
        assert_eq!(w.finished(Pending::bytes(10), true), None, "the answer is flushed first");
        assert!(!w.may_read(Pending::default(), true, &l), "nothing sent after the drain is read");
        assert_eq!(w.finished(Pending::default(), true), Some(CloseReason::Shutdown));
        // A second signal does not owe another read.
        let mut d = ConnPolicy::new(t0);
        d.begin_drain(t0, t0 + secs(5), false);
        d.begin_drain(t0, t0 + secs(9), true);
        assert_eq!(d.finished(Pending::default(), true), Some(CloseReason::Shutdown));
    }

    #[test]
    fn verdicts_map_to_close_reasons_and_the_first_one_stays() {
        let mut p = ConnPolicy::new(Instant::now());
        assert!(p.on_verdict(Verdict::Continue));
        assert_eq!(p.finished(Pending::default(), false), None);
        p.on_verdict(Verdict::Close(Closing::BadRequest));
        p.on_verdict(Verdict::Close(Closing::Done));
        assert_eq!(p.finished(Pending::default(), false), Some(CloseReason::Protocol));
        for (closing, reason) in [
            (Closing::Done, CloseReason::Done),
            (Closing::BadRequest, CloseReason::Protocol),
            (Closing::HeaderTimeout, CloseReason::HeaderTimeout),
        ] {
            let mut p = ConnPolicy::new(Instant::now());
            p.on_verdict(Verdict::Close(closing));
            assert_eq!(p.finished(Pending::default(), true), Some(reason));
        }
    }

    #[test]
    fn finished_only_once_flushed_for_closing_eof_or_drain_between_requests() {
        let t0 = Instant::now();
        let mut p = ConnPolicy::new(t0);
        assert_eq!(p.finished(Pending::default(), true), None, "an open connection between requests");
        p.on_eof();
        assert_eq!(p.finished(Pending::bytes(1), true), None, "output first");
        assert_eq!(p.finished(Pending::default(), true), Some(CloseReason::Peer));
        let mut d = ConnPolicy::new(t0);
        d.begin_drain(t0, t0 + secs(5), false);
        assert_eq!(d.finished(Pending::default(), false), None, "mid-request");
        assert_eq!(d.finished(Pending::default(), true), Some(CloseReason::Shutdown));
    }

    #[test]
    fn socket_errors_have_one_table() {
        for errno in [libc::EPIPE, libc::ENOTCONN, libc::EHOSTUNREACH, libc::ENETUNREACH] {
            assert_eq!(close_reason(&io::Error::from_raw_os_error(errno)), CloseReason::Peer, "errno {errno}");
        }
        for errno in [libc::ECONNRESET, libc::ECONNABORTED, libc::ETIMEDOUT] {
            assert_eq!(close_reason(&io::Error::from_raw_os_error(errno)), CloseReason::Aborted, "errno {errno}");
        }
        for errno in [libc::EBADF, libc::ENOMEM, libc::EINVAL] {
            assert_eq!(close_reason(&io::Error::from_raw_os_error(errno)), CloseReason::Error, "errno {errno}");
        }
        assert_eq!(close_reason(&io::Error::other("no errno")), CloseReason::Error);
    }

    #[test]
    fn flood_counts_from_going_over_and_stall_from_the_last_progress() {
        let (t0, l) = (Instant::now(), limits());
        let mut p = ConnPolicy::new(t0);
        p.account(t0, Pending::bytes(150), false, &l);
        let t1 = t0 + secs(1);
        p.account(t1, Pending::bytes(150), true, &l);
        assert_eq!(p.deadline(&l, None), t0 + l.send_timeout, "flood counts from t0; progress moved only the stall");
        assert_eq!(p.expired(t0 + l.send_timeout, &l, false).map(|e| e.reason), Some(CloseReason::Flood));
        assert!(p.account(t1, Pending::bytes(50), false, &l), "back under the cap");
        assert_eq!(p.expired(t1 + l.send_timeout, &l, false).map(|e| e.reason), Some(CloseReason::SendTimeout));
        let header = p.expired(t1, &l, true);
        assert_eq!(header, Some(Expired { reason: CloseReason::HeaderTimeout, answer: true }));
        assert!(!p.account(t1, Pending::default(), false, &l));
        assert_eq!(p.expired(t0 + l.idle_timeout, &l, false).map(|e| e.reason), Some(CloseReason::Idle));
        assert_eq!(p.expired(t1, &l, false), None);
    }

    /// A body sent from a file takes no memory: owing a large one for longer than the send
    /// timeout is no flood while the client keeps taking it, but it stops reading (one file
    /// response at a time), a client that stops taking it is dropped, and the connection is
    /// not finished until the last byte has gone.
    #[test]
    fn file_bytes_owed_stop_reading_but_are_no_flood() {
        let (t0, l) = (Instant::now(), limits());
        let mut p = ConnPolicy::new(t0);
        p.on_received(t0);
        let owed = |file_bytes| Pending { bytes: 0, sends: 0, file_bytes };
        assert!(!p.may_read(owed(1 << 40), true, &l), "reading goes on while a file body is owed");
        for s in 0..60 {
            p.on_sent(t0 + secs(s), 1000);
            p.account(t0 + secs(s), owed((1 << 40) - s * 1000), true, &l);
        }
        assert_eq!(p.expired(t0 + secs(60), &l, false), None, "a client taking a large file body is not a flood");
        assert_eq!(p.finished(owed(1), true), None);
        assert_eq!(
            p.expired(t0 + secs(59) + l.send_timeout, &l, false).map(|e| e.reason),
            Some(CloseReason::SendTimeout)
        );
        p.account(t0 + secs(61), owed(0), true, &l);
        assert!(p.may_read(owed(0), true, &l));
    }

    #[test]
    fn too_many_outstanding_sends_is_a_flood() {
        let (t0, l) = (Instant::now(), limits());
        let mut p = ConnPolicy::new(t0);
        p.account(t0, Pending { bytes: 10, sends: 5, file_bytes: 0 }, false, &l);
        assert_eq!(p.expired(t0 + l.send_timeout, &l, false).map(|e| e.reason), Some(CloseReason::Flood));
    }

    #[test]
    fn traffic_moves_the_idle_deadline_and_the_drain_caps_it() {
        let (t0, l) = (Instant::now(), limits());
        let mut p = ConnPolicy::new(t0);
        p.on_received(t0 + secs(30));
        assert_eq!(p.deadline(&l, None), t0 + secs(90));
        p.on_sent(t0 + secs(40), 0);
        assert_eq!(p.deadline(&l, None), t0 + secs(90), "nothing sent is no traffic");
        p.on_sent(t0 + secs(40), 1);
        assert_eq!(p.deadline(&l, Some(t0 + secs(50))), t0 + secs(50), "the protocol's deadline is earlier");
        p.begin_drain(t0, t0 + secs(45), false);
        assert_eq!(p.deadline(&l, None), t0 + secs(45));
        assert_eq!(p.expired(t0 + secs(45), &l, false).map(|e| e.reason), Some(CloseReason::Shutdown));
    }

    #[test]
    fn huge_timeouts_do_not_overflow() {
        let forever = Duration::from_secs(u64::MAX);
        let l = Limits { idle_timeout: forever, send_timeout: forever, ..limits() };
        let p = ConnPolicy::new(Instant::now());
        assert!(p.deadline(&l, None) > Instant::now() + secs(3600));
        assert_eq!(p.expired(Instant::now(), &l, false), None);
    }

    #[test]
    fn a_read_round_stops_yields_or_drains_in_that_order() {
        let (t0, l) = (Instant::now(), limits());
        let p = ConnPolicy::new(t0);
        let mut round = ReadRound::new(&l);
        assert_eq!(round.want(4096), 1000, "the budget caps the first read");
        assert_eq!(round.after_read(400, 1000, false, &p, Pending::default(), &l), ReadNext::Drained);
        assert_eq!(
            round.after_read(400, 600, true, &p, Pending::default(), &l),
            ReadNext::More,
            "after a hang-up read to EOF"
        );
        assert_eq!(round.want(4096), 200);
        assert_eq!(round.after_read(200, 200, false, &p, Pending::default(), &l), ReadNext::Yield);
        let mut round = ReadRound::new(&l);
        assert_eq!(round.after_read(10, 1000, false, &p, Pending::bytes(101), &l), ReadNext::Stop);
        let owed = Pending { bytes: 0, sends: 0, file_bytes: 1 };
        assert_eq!(ReadRound::new(&l).after_read(1000, 1000, false, &p, owed, &l), ReadNext::Stop, "a file owed");
        let mut closing = p;
        closing.on_verdict(Verdict::Close(Closing::Done));
        assert_eq!(ReadRound::new(&l).after_read(1000, 1000, false, &closing, Pending::default(), &l), ReadNext::Stop);
    }

    #[test]
    fn a_connection_silent_since_it_was_accepted_is_closed_at_the_first_data_timeout() {
        let t0 = Instant::now();
        let on = Limits { first_data_timeout: Some(Duration::from_secs(1)), ..limits() };
        let mut p = ConnPolicy::new(t0);
        assert_eq!(p.deadline(&on, None), t0 + Duration::from_secs(1), "before the idle timeout");
        assert!(p.expired(t0 + Duration::from_millis(999), &on, false).is_none());
        let expired = p.expired(t0 + Duration::from_secs(1), &on, true).expect("due");
        assert_eq!(expired.reason, CloseReason::FirstData, "before the protocol's header timeout");
        // Its first bytes end the clock for good; the idle timeout goes on.
        p.on_received(t0 + Duration::from_millis(500));
        assert_eq!(p.deadline(&on, None), t0 + Duration::from_millis(500) + on.idle_timeout);
        assert!(p.expired(t0 + Duration::from_secs(2), &on, false).is_none());
        // Off: no such deadline.
        let off = limits();
        assert_eq!(ConnPolicy::new(t0).deadline(&off, None), t0 + off.idle_timeout);
    }
}
