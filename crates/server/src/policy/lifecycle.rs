//! One connection's lifecycle, with no I/O: the sequence every engine used to write itself.
//!
//! Shaped like quinn-proto's `Connection`: the engine tells a [`Lifecycle`] what happened
//! (the socket is ready, bytes arrived, the socket took some output, a deadline passed, the
//! drain began) and asks it what to do next with [`Lifecycle::poll`], which answers with one
//! [`Action`] at a time: flush the queued output, read up to N bytes, or wait (for what, until
//! when, and whether to come back at once after the others), or close and why. The engine only
//! waits and carries the actions out; it never decides when to read, when to write, when a
//! read means the socket is drained, or when a connection is finished.
//!
//! One turn of a connection, as every engine runs it:
//!
//! ```text
//! on_ready(readable, writable, hangup)          (readiness engines; tokio; the thread engines)
//! loop {
//!     match poll(now, pending) {
//!         Flush        => { written = write queued output; on_written(now, written) }
//!         Read { max } => { n = recv(buf[..max]);
//!                           on_input(input, max, ..) => send the output it returns, on_written
//!                           | on_eof() | on_drained() | on_failed(err) }
//!         Close(why)   => close, count `why`; end
//!         Wait(w)      => schedule w.wake_at, watch w.read / w.write, come back at once if
//!                         w.resume; end of the turn
//!     }
//! }
//! ```
//!
//! A completion engine (io_uring) does not pull input: its multishot receive pushes it. Built
//! with [`Delivery::Pushed`], the lifecycle never asks it to read; `Wait::read` says whether a
//! receive should be armed (a connection that may not read has it cancelled), and input comes
//! in through [`Lifecycle::on_input`] whenever a completion delivers it.
//!
//! Output is the engine's: readiness engines write it at once from the input and queue what
//! the socket refuses, io_uring queues it behind one send in flight. The lifecycle is told how
//! much is waiting ([`Pending`]) each time it is polled, and what each write achieved
//! ([`Written`]).
//!
//! What used to differ between engines, settled here once:
//! - input that arrives after the protocol's closing verdict is discarded, not parsed, on every
//!   engine (a multishot receive, or the rest of a read, may still carry it);
//! - an error or hang-up reported by the waiter makes a short read not mean drained, whoever
//!   waits (tokio included: its readiness reports `read_closed`);
//! - the active set hears of input when bytes arrive ([`Fed::counted`]), not before a read;
//! - an expired deadline the protocol answers (HTTP's 408) is answered with the whole answer,
//!   then the connection closes; an orderly close with output still queued waits for it in a
//!   closing phase ([`Lifecycle::begin_closing`]), its last bytes behind it, so none is dropped;
//! - an empty buffer pool makes the connection come back [`NO_BUFFER_RETRY`] later, not spin.

use std::io;
use std::time::{Duration, Instant};

use sockscale_proto::{Output, Responder, Session, Verdict};

use super::conn_policy::{closed_by_error, ConnPolicy, Limits, Pending, ReadNext, ReadRound};
use super::CloseReason;

/// The protocol is asked to transmit only with at least this much room under
/// `--max-pending-send` (or nothing pending), so it never runs for a few bytes.
pub const TRANSMIT_ROOM: usize = 1024;

/// How long a connection that found the shared buffer pool empty waits before it tries to
/// read again: the pool refills as other connections finish their reads.
pub const NO_BUFFER_RETRY: Duration = Duration::from_millis(1);

/// How input reaches the lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The engine reads when told to ([`Action::Read`]): readiness loops, tokio, threads.
    Pulled,
    /// A receive posted once delivers input until cancelled (io_uring's multishot receive).
    Pushed,
}

/// What a write of queued or fresh output achieved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub bytes: usize,
    /// The socket refused more (EAGAIN or a short write): wait for writability.
    pub blocked: bool,
    /// A body file's turn was sent, the socket refusing nothing, and output is left: flush
    /// again after the other connections, without waiting for writability (no EAGAIN
    /// happened, so an edge-triggered waiter will not report it).
    pub yielded: bool,
    /// Bytes of a body file read and encrypted for TLS (counted as `tls_file_bytes`).
    pub sealed: u64,
}

/// What the engine does next for this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Write the queued output, then report it with [`Lifecycle::on_written`].
    Flush,
    /// Read at most `max` bytes, then report the outcome ([`Lifecycle::on_input`],
    /// [`Lifecycle::on_eof`], [`Lifecycle::on_drained`], [`Lifecycle::on_failed`], or
    /// [`Lifecycle::on_no_buffer`] if no buffer could be had).
    Read { max: usize },
    /// The protocol has more to send now that output moved (HTTP/2: DATA its flow-control
    /// windows allow, or a drain's GOAWAY): call [`Lifecycle::on_transmit`], and send what it
    /// writes as for [`Fed::Send`].
    Transmit,
    /// Close the connection, counting it for this reason.
    Close(CloseReason),
    /// This turn is over: wait as [`Wait`] says.
    Wait(Wait),
}

/// How the engine waits for the connection after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The connection may read now: watch for input (a completion engine keeps a receive
    /// armed; a level-triggered selector watches for input only then).
    pub read: bool,
    /// Output is waiting for room: watch for writability (or keep a send posted).
    pub write: bool,
    /// Wake the connection then ([`Lifecycle::on_timer`]) even if nothing happens.
    pub wake_at: Instant,
    /// Come back to this connection after the others without waiting for an event: the read
    /// budget or a body file's turn was spent, or the output came back under its caps with
    /// input left unread.
    pub resume: bool,
}

/// What feeding input achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// The protocol answered: send the output it wrote (segments of the input, shared bytes,
    /// body file ranges), then report it with [`Lifecycle::on_written`].
    Send,
    /// The protocol took the input and has nothing to say yet.
    Quiet,
    /// The protocol had already ended the exchange: the input is nobody's and was dropped.
    Discarded,
    /// The protocol answered and the answer is in the connection's output queue already
    /// (sealed by its TLS stage): flush it. Never returned by the lifecycle itself; a
    /// connection with TLS returns it (see `connection::Connection::receive`).
    Queued,
}

impl Fed {
    /// The input counts as traffic from the client (the active set's idleness, the stats).
    pub fn counted(self) -> bool {
        self != Fed::Discarded
    }
}

/// Where a turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnStep {
    /// A new turn: flush first if the socket can take output.
    Begin,
    /// Flushed (or nothing to flush): read if allowed.
    Read,
    /// A read round is under way: ask for the next read.
    Reading,
    /// A read round is under way and the read just fed must be judged.
    Judge,
    /// Reading is over for this turn: settle.
    Settle,
}

/// One bit each of what a lifecycle remembers between calls, so an idle connection stays
/// within its memory budget (see `conn::size`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flags(u16);

impl Flags {
    /// Readiness reported and not yet consumed (edge-triggered waiters report it once).
    const READABLE: u16 = 1;
    const WRITABLE: u16 = 1 << 1;
    /// The waiter reported an error or a hang-up: a reset or FIN that arrived together with
    /// data is seen only after the data is read and raises no new edge, so from now on a short
    /// read does not mean drained; reading goes on until EOF, an error or EAGAIN.
    const HANGUP: u16 = 1 << 2;
    /// The socket took some output this turn.
    const PROGRESSED: u16 = 1 << 3;
    /// Come back after the others (see [`Wait::resume`]).
    const RESUME: u16 = 1 << 4;
    /// The pool had no buffer: read again at the next timer, [`NO_BUFFER_RETRY`] later.
    const STARVED: u16 = 1 << 5;
    /// The read being judged was short.
    const SHORT: u16 = 1 << 6;
    /// Input is pushed ([`Delivery::Pushed`]).
    const PUSHED: u16 = 1 << 7;
    /// A readable edge came while readiness was still unconsumed (reported merged with another
    /// by the waiter, or while the turn was not reading): it may announce a FIN behind data not
    /// yet read, which raises no edge of its own and, from a waiter that cannot say "hang-up"
    /// (a signal's band is POLLIN for data and FIN alike), looks like more data. Until the
    /// socket says EAGAIN, a short read does not mean drained.
    const LATE_EDGE: u16 = 1 << 8;
    /// The protocol was asked to transmit this turn (once a turn: more comes after the others).
    const TRANSMITTED: u16 = 1 << 9;
    /// The protocol's last transmit produced nothing (windows shut): not asked again until
    /// output moves, input arrives or the drain begins.
    const STUCK: u16 = 1 << 10;

    fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }

    fn set(&mut self, bit: u16, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }

    /// Clear `bit`, returning whether it was set.
    fn take(&mut self, bit: u16) -> bool {
        let was = self.has(bit);
        self.set(bit, false);
        was
    }
}

/// A deadline expired: what to do before closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub reason: CloseReason,
    /// The protocol's answer (HTTP's 408) is in the output: it is the close's last bytes.
    pub answer: bool,
}

/// One connection: its protocol session, its policy, and where its turn stands.
#[derive(Debug)]
pub struct Lifecycle {
    session: Session,
    policy: ConnPolicy,
    /// The read round under way (its budget left).
    round: ReadRound,
    stage: TurnStep,
    flags: Flags,
}

impl Lifecycle {
    /// A connection accepted at `now`. A new socket may hold input already and can take
    /// output, so it starts readable and writable.
    pub fn new(session: Session, now: Instant, delivery: Delivery) -> Self {
        let mut flags = Flags(Flags::WRITABLE);
        flags.set(Flags::READABLE, delivery == Delivery::Pulled);
        flags.set(Flags::PUSHED, delivery == Delivery::Pushed);
        Lifecycle { session, policy: ConnPolicy::new(now), round: ReadRound::spent(), stage: TurnStep::Begin, flags }
    }

    fn pulled(&self) -> bool {
        !self.flags.has(Flags::PUSHED)
    }

    /// Between requests: the active set may take a place from it, the drain may close it.
    pub fn is_between_requests(&self) -> bool {
        self.session.is_between_requests()
    }

    pub fn is_waiting(&self) -> bool {
        self.policy.is_waiting()
    }

    /// The waiter reported the socket ready. `hangup`: it reported an error or a hang-up.
    pub fn on_ready(&mut self, readable: bool, writable: bool, hangup: bool) {
        if (readable || hangup) && self.pulled() {
            if readable && self.is_readable() {
                self.flags.set(Flags::LATE_EDGE, true);
            }
            self.flags.set(Flags::READABLE, true);
        }
        if writable || hangup {
            self.flags.set(Flags::WRITABLE, true);
        }
        if hangup {
            self.flags.set(Flags::HANGUP, true);
        }
    }

    /// Look for input whatever the waiter last said (a connection given its active-set place:
    /// its input may have arrived while nobody watched; a spurious read costs one EAGAIN).
    pub fn look_for_input(&mut self) {
        if self.pulled() {
            self.flags.set(Flags::READABLE, true);
        }
    }

    /// The waiter reported an error or a hang-up (see [`Flags::HANGUP`]).
    pub fn hangup_seen(&self) -> bool {
        self.flags.has(Flags::HANGUP)
    }

    /// Whether input is waiting is not known (a thread engine's new connection): look before
    /// taking a buffer for it.
    pub fn readiness_unknown(&mut self) {
        self.flags.set(Flags::READABLE, false);
    }

    /// Whether the engine still holds readiness it has not consumed.
    pub fn is_readable(&self) -> bool {
        self.flags.has(Flags::READABLE)
    }

    /// The connection waits for a place in the active set from `now` (true), or was given
    /// one (false).
    pub fn set_waiting(&mut self, waiting: bool, now: Instant) {
        self.policy.set_waiting(waiting, now);
        if !waiting {
            self.look_for_input();
        }
    }

    /// The server is draining from `now`: finish the exchange in progress, including input
    /// the kernel holds unread (`unread`, FIONREAD at the drain's start: sent before the drain),
    /// close at the next request boundary, and close whatever is left at `until`. The drain
    /// ends the active set, so a waiting connection stops waiting.
    pub fn begin_drain(&mut self, now: Instant, until: Instant, unread: bool) {
        self.session.finish_current();
        // A drain's GOAWAY may be owed.
        self.flags.set(Flags::STUCK, false);
        let waited = self.policy.is_waiting();
        self.policy.begin_drain(now, until, unread);
        if waited {
            self.look_for_input();
        }
    }

    /// A deadline expired at `now`, for `reason` (its ending orderly), with output still queued:
    /// begin the closing phase ([`ConnPolicy::begin_closing`]), in which the close's last bytes
    /// wait behind the output until the send timeout (the drain's deadline, if sooner). False:
    /// that time is already up (the drain's own deadline): close now, as the reason says.
    pub fn begin_closing(&mut self, reason: CloseReason, now: Instant, limits: &Limits) -> bool {
        if self.policy.is_in_closing_phase() {
            return true;
        }
        let by = self.policy.closing_deadline(now, limits);
        if by <= now {
            return false;
        }
        self.policy.begin_closing(reason, by);
        true
    }

    /// In the closing phase: the close is decided, and its last bytes wait behind the output.
    pub fn is_in_closing_phase(&self) -> bool {
        self.policy.is_in_closing_phase()
    }

    /// May the connection read now (readiness aside)?
    pub fn may_read(&self, pending: Pending, limits: &Limits) -> bool {
        self.policy.may_read(pending, self.drained_between(), limits)
    }

    /// Finished, and why (only once the output is flushed).
    pub fn finished(&self, pending: Pending) -> Option<CloseReason> {
        self.policy.finished(pending, self.drained_between())
    }

    /// Whether the session is between requests, as the policy asks it: only a drain reads the
    /// answer, so the session (a call on every poll, several a request) is asked only then.
    fn drained_between(&self) -> bool {
        self.policy.is_draining() && self.session.is_between_requests()
    }

    /// When a policy (or the protocol) may next act on this connection.
    pub fn deadline(&self, responder: &Responder, limits: &Limits) -> Instant {
        self.policy.deadline(limits, self.protocol_deadline(responder))
    }

    /// The protocol's own deadline, which stands still while the connection waits for a place
    /// in the active set, as its idle clock does: a WebSocket's ping would go unanswered, its
    /// pong not read (HTTP has none then: a waiting connection has no request under way).
    fn protocol_deadline(&self, responder: &Responder) -> Option<Instant> {
        responder.deadline(&self.session).filter(|_| !self.policy.is_waiting())
    }

    /// What to do next, with `pending` output waiting for the client now.
    pub fn poll(&mut self, now: Instant, pending: Pending, responder: &Responder, limits: &Limits) -> Action {
        loop {
            match self.stage {
                TurnStep::Begin => {
                    self.stage = TurnStep::Read;
                    // Flush first: it may bring the output back under its caps and so allow
                    // reading. A yielded body file turn waits for the next turn.
                    if self.flags.has(Flags::WRITABLE) && !pending.is_empty() && !self.flags.has(Flags::RESUME) {
                        return Action::Flush;
                    }
                }
                TurnStep::Read => {
                    let ready = self.pulled() && self.is_readable() && !self.flags.has(Flags::STARVED);
                    if ready && self.may_read(pending, limits) {
                        self.round = ReadRound::new(limits);
                        self.stage = TurnStep::Reading;
                    } else {
                        self.stage = TurnStep::Settle;
                    }
                }
                TurnStep::Judge => {
                    let short = self.flags.take(Flags::SHORT);
                    self.stage = TurnStep::Settle;
                    let unsure = self.hangup_seen() || self.flags.has(Flags::LATE_EDGE);
                    match self.round.next(short, unsure, &self.policy, pending, limits) {
                        ReadNext::More => self.stage = TurnStep::Reading,
                        ReadNext::Stop => {}
                        // Fairness: the others first, then this one again.
                        ReadNext::Yield => self.flags.set(Flags::RESUME, true),
                        // Any byte arriving later raises a new event.
                        ReadNext::Drained => self.flags.set(Flags::READABLE, false),
                    }
                }
                TurnStep::Reading => {
                    // A buffer of any size: the engine caps it at its buffer's length.
                    return Action::Read { max: self.round.want(usize::MAX) };
                }
                TurnStep::Settle => {
                    self.stage = TurnStep::Begin;
                    let progressed = self.flags.take(Flags::PROGRESSED);
                    if let Some(reason) = self.finished(pending) {
                        return Action::Close(reason);
                    }
                    if self.transmit_due(responder, pending, limits) {
                        if !self.flags.has(Flags::TRANSMITTED) {
                            self.flags.set(Flags::TRANSMITTED, true);
                            // Settled again after the transmit: what moved still counts.
                            self.flags.set(Flags::PROGRESSED, progressed);
                            return Action::Transmit;
                        }
                        // Once a turn: the others first, then this one again.
                        self.flags.set(Flags::RESUME, true);
                    }
                    self.flags.set(Flags::TRANSMITTED, false);
                    let resumed = self.policy.account(now, pending, progressed, limits);
                    let starved = self.flags.has(Flags::STARVED);
                    // No buffer was to be had: read again at the retry, not before (watching for
                    // input now would spin on a level-triggered waiter).
                    let read = self.may_read(pending, limits) && !starved;
                    // Back under the caps with input waiting: read it without waiting for an
                    // edge that already happened.
                    let resume = self.flags.take(Flags::RESUME) || (resumed && self.is_readable() && read);
                    let mut wake_at = self.deadline(responder, limits);
                    if starved {
                        wake_at = wake_at.min(now + NO_BUFFER_RETRY);
                    }
                    return Action::Wait(Wait { read, write: !pending.is_empty(), wake_at, resume });
                }
            }
        }
    }

    /// The protocol has something to send without new input (HTTP/2: DATA a window allows, a
    /// drain's GOAWAY): an engine that parks idle connections gives it a turn.
    pub fn wants_transmit(&self, responder: &Responder) -> bool {
        responder.wants_transmit(&self.session)
    }

    /// Whether to ask the protocol to transmit: it has something to send, its last transmit
    /// was not stuck, the exchange goes on, and the output has room under its caps.
    fn transmit_due(&self, responder: &Responder, pending: Pending, limits: &Limits) -> bool {
        let room = pending.bytes == 0 || pending.bytes.saturating_add(TRANSMIT_ROOM) <= limits.max_pending_send;
        room && pending.sends <= limits.max_outstanding_sends
            && !self.flags.has(Flags::STUCK)
            && !self.policy.is_closing()
            && responder.wants_transmit(&self.session)
    }

    /// After [`Action::Transmit`], at `now`, with `pending` output unsent: the protocol's
    /// output is written into `out` (cleared first); send it when [`Fed::Send`].
    pub fn on_transmit(&mut self, now: Instant, pending: Pending, responder: &mut Responder, out: &mut Output) -> Fed {
        out.clear();
        let verdict = responder.transmit(&mut self.session, now, pending.bytes, out);
        self.policy.on_verdict(verdict);
        if out.is_empty() {
            self.flags.set(Flags::STUCK, true);
            Fed::Quiet
        } else {
            Fed::Send
        }
    }

    /// After [`Action::Read`]: `input` arrived (of `wanted` asked for), at `now`; and input a
    /// completion delivered, whenever it comes ([`Delivery::Pushed`]; `wanted` is then the
    /// buffer's size). The protocol's answer is written into `out` (cleared first).
    #[inline]
    pub fn on_input(
        &mut self,
        input: &[u8],
        wanted: usize,
        now: Instant,
        responder: &mut Responder,
        out: &mut Output,
    ) -> Fed {
        self.on_read(input.len(), wanted);
        self.on_plaintext(input, now, responder, out)
    }

    /// After [`Action::Read`]: `read` bytes came of the `wanted` asked for, before any stage
    /// below the protocol (TLS) turned them into the protocol's input.
    pub fn on_read(&mut self, read: usize, wanted: usize) {
        if self.stage == TurnStep::Reading {
            self.round.consume(read);
            self.flags.set(Flags::SHORT, read < wanted);
            self.stage = TurnStep::Judge;
        }
    }

    /// The protocol's input, at `now` (what a read brought, or what the TLS stage decrypted
    /// from it): the session answers into `out`.
    pub fn on_plaintext(&mut self, input: &[u8], now: Instant, responder: &mut Responder, out: &mut Output) -> Fed {
        out.clear();
        if self.policy.is_closing() {
            return Fed::Discarded;
        }
        self.policy.on_received(now);
        self.flags.set(Flags::STUCK, false);
        if input.is_empty() {
            // Handshake records only: activity, but nothing for the protocol.
            return Fed::Quiet;
        }
        let verdict = responder.on_input(&mut self.session, input, now, out);
        self.policy.on_verdict(verdict);
        if out.is_empty() {
            Fed::Quiet
        } else {
            Fed::Send
        }
    }

    /// After [`Action::Flush`] or [`Fed::Send`]: the socket took this much, at `now`.
    pub fn on_written(&mut self, now: Instant, written: Written) {
        self.policy.on_sent(now, written.bytes);
        if written.bytes > 0 {
            self.flags.set(Flags::PROGRESSED, true);
            self.flags.set(Flags::STUCK, false);
        }
        if self.pulled() {
            self.flags.set(Flags::WRITABLE, !written.blocked);
        }
        if written.yielded {
            self.flags.set(Flags::RESUME, true);
        }
    }

    /// After [`Action::Read`]: the peer sent FIN (a read returned 0, or a completion said so).
    pub fn on_eof(&mut self) {
        self.policy.on_eof();
        self.flags.set(Flags::READABLE, false);
        self.end_round();
    }

    /// After [`Action::Read`]: nothing was there (EAGAIN).
    pub fn on_drained(&mut self) {
        self.flags.set(Flags::READABLE, false);
        self.flags.set(Flags::LATE_EDGE, false);
        self.end_round();
    }

    /// After [`Action::Read`]: the pool had no buffer; read again at the next timer, which
    /// the wait sets [`NO_BUFFER_RETRY`] from now.
    pub fn on_no_buffer(&mut self) {
        self.flags.set(Flags::STARVED, true);
        self.end_round();
    }

    /// A read or a write failed: the reason to close (the policy's one table), logged when
    /// it is not the peer's doing.
    pub fn on_failed(&mut self, err: &io::Error) -> CloseReason {
        closed_by_error(err)
    }

    fn end_round(&mut self) {
        if matches!(self.stage, TurnStep::Reading | TurnStep::Judge) {
            self.stage = TurnStep::Settle;
        }
    }

    /// The connection's timer came due at `now`: the deadline that expired, if one did, with
    /// the protocol's answer to it in `out` (HTTP's 408). None: poll again to re-arm.
    pub fn on_timer(
        &mut self,
        now: Instant,
        responder: &mut Responder,
        out: &mut Output,
        limits: &Limits,
    ) -> Option<Expiry> {
        // A starved read is retried at the first timer after it.
        self.flags.set(Flags::STARVED, false);
        let protocol_due = self.protocol_deadline(responder).is_some_and(|at| at <= now);
        let mut expired = self.policy.expired(now, limits, protocol_due)?;
        out.clear();
        if expired.answer {
            // The protocol says which of its deadlines it was (HTTP/2: the header timeout, or
            // a window kept shut: a send timeout), or that none was after all.
            match responder.on_timeout(&mut self.session, now, out) {
                Verdict::Continue if out.is_empty() => return None,
                Verdict::Continue => {}
                Verdict::Close(closing) => expired.reason = super::conn_policy::closing_reason(closing),
            }
        }
        Some(Expiry { reason: expired.reason, answer: expired.answer && !out.is_empty() })
    }

    /// Only the send policies, while a thread engine blocks until its output is written: the
    /// deadline that ended the wait, if one did (flood, send stall, or the drain's end).
    pub fn send_expired(&self, now: Instant, limits: &Limits) -> Option<CloseReason> {
        let sending = Limits { idle_timeout: Duration::MAX, first_data_timeout: None, ..*limits };
        self.policy.expired(now, &sending, false).map(|e| e.reason)
    }

    /// When [`Lifecycle::send_expired`] may next answer.
    pub fn send_deadline(&self, limits: &Limits) -> Instant {
        let sending = Limits { idle_timeout: Duration::MAX, first_data_timeout: None, ..*limits };
        self.policy.deadline(&sending, None)
    }

    /// Output was written outside a turn (a thread engine's sender): keep the flood and stall
    /// clocks.
    pub fn account_written(&mut self, now: Instant, written: Written, pending: Pending, limits: &Limits) {
        self.policy.on_sent(now, written.bytes);
        if written.bytes > 0 {
            self.flags.set(Flags::STUCK, false);
        }
        self.policy.account(now, pending, written.bytes > 0, limits);
    }
}

#[cfg(test)]
mod tests {
    use sockscale_proto::Protocol;

    use super::*;

    fn limits() -> Limits {
        Limits::example()
    }

    fn echo() -> (Responder, Output) {
        (Protocol::Echo.responder(0), Output::default())
    }

    fn http() -> (Responder, Output) {
        let protocol = Protocol::Http(std::sync::Arc::new(sockscale_proto::http::HttpConfig::default()));
        (protocol.responder(0), Output::default())
    }

    fn wait(action: Action) -> Wait {
        match action {
            Action::Wait(w) => w,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    /// A new connection reads at once (its data may have come with it), answers each read,
    /// and a short read ends the turn: the next byte raises a new event.
    #[test]
    fn a_turn_reads_answers_and_a_short_read_means_drained() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        let none = Pending::default();
        assert_eq!(
            lc.poll(t0, none, &responder, &l),
            Action::Read { max: 1000 },
            "nothing to flush; read within the budget"
        );
        assert_eq!(lc.on_input(b"hello", 1000, t0, &mut responder, &mut out), Fed::Send);
        assert_eq!(out.to_vec(b"hello"), b"hello");
        lc.on_written(t0, Written { bytes: 5, ..Written::default() });
        let w = wait(lc.poll(t0, none, &responder, &l));
        assert!(w.read && !w.write && !w.resume, "{w:?}");
        assert!(!lc.is_readable(), "a short read drained the socket");
        assert_eq!(w.wake_at, t0 + l.idle_timeout);
        // The next turn waits for an event: nothing to do until one comes.
        assert!(matches!(lc.poll(t0, none, &responder, &l), Action::Wait(_)));
        lc.on_ready(true, false, false);
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 1000 });
    }

    /// After a hang-up, a short read is not taken to mean drained: the FIN or reset behind the
    /// data raises no new edge, so reading goes on to EOF.
    #[test]
    fn after_a_hangup_reading_goes_on_to_eof() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        lc.on_ready(true, true, true);
        let none = Pending::default();
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 1000 });
        lc.on_input(b"abc", 1000, t0, &mut responder, &mut out);
        lc.on_written(t0, Written { bytes: 3, ..Written::default() });
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 997 }, "short, but a hang-up was seen");
        lc.on_eof();
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Close(CloseReason::Peer));
    }

    /// A readable edge that comes while readiness is unconsumed (the turn was waiting to write)
    /// may be a FIN behind the data: the short read that follows is not taken to mean drained,
    /// and reading goes on to EOF. Once the socket says EAGAIN, short reads are trusted again.
    #[test]
    fn a_late_edge_is_read_to_the_end() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        lc.on_ready(true, false, false);
        let none = Pending::default();
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 1000 });
        lc.on_input(b"abc", 1000, t0, &mut responder, &mut out);
        lc.on_written(t0, Written { bytes: 3, ..Written::default() });
        assert_eq!(
            lc.poll(t0, none, &responder, &l),
            Action::Read { max: 997 },
            "a late edge: the short read is not trusted"
        );
        lc.on_drained();
        assert!(matches!(lc.poll(t0, none, &responder, &l), Action::Wait(_)));
        lc.on_ready(true, false, false);
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 1000 });
        lc.on_input(b"abc", 1000, t0, &mut responder, &mut out);
        lc.on_written(t0, Written { bytes: 3, ..Written::default() });
        assert!(
            matches!(lc.poll(t0, none, &responder, &l), Action::Wait(_)),
            "EAGAIN cleared it: a short read means drained"
        );
    }

    /// The read budget ends the turn with a promise to come back after the others.
    #[test]
    fn a_spent_budget_yields_and_resumes() {
        let (t0, l) = (Instant::now(), Limits { read_budget: 8, ..limits() });
        let (mut responder, mut out) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        let none = Pending::default();
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 8 });
        lc.on_input(b"12345678", 8, t0, &mut responder, &mut out);
        lc.on_written(t0, Written { bytes: 8, ..Written::default() });
        let w = wait(lc.poll(t0, none, &responder, &l));
        assert!(w.resume && w.read, "{w:?}");
        assert!(lc.is_readable(), "input may be left");
        assert_eq!(lc.poll(t0, none, &responder, &l), Action::Read { max: 8 }, "the next turn reads on");
    }

    /// Output the socket refused is flushed first, and reading stops while it is over the cap;
    /// once it comes back under, unread input is read without waiting for another event.
    #[test]
    fn output_over_the_cap_stops_reading_until_it_is_flushed() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        assert_eq!(lc.poll(t0, Pending::default(), &responder, &l), Action::Read { max: 1000 });
        let input = [b'x'; 1000];
        lc.on_input(&input, 1000, t0, &mut responder, &mut out);
        lc.on_written(t0, Written { blocked: true, ..Written::default() });
        let over = Pending::bytes(1000);
        let w = wait(lc.poll(t0, over, &responder, &l));
        assert!(!w.read && w.write && !w.resume, "{w:?}");
        assert_eq!(w.wake_at, t0 + l.send_timeout, "the flood clock runs");
        // Not writable: nothing to do.
        assert!(matches!(lc.poll(t0, over, &responder, &l), Action::Wait(_)));
        lc.on_ready(false, true, false);
        assert_eq!(lc.poll(t0, over, &responder, &l), Action::Flush);
        lc.on_written(t0, Written { bytes: 1000, ..Written::default() });
        assert_eq!(
            lc.poll(t0, Pending::default(), &responder, &l),
            Action::Read { max: 1000 },
            "back under the cap with input left: read it in the same turn"
        );
        // Left over the cap for the send timeout: a flood.
        let mut slow = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        slow.poll(t0, over, &responder, &l);
        assert!(matches!(slow.poll(t0, over, &responder, &l), Action::Wait(_)));
        let due = slow.on_timer(t0 + l.send_timeout, &mut responder, &mut out, &l);
        assert_eq!(due, Some(Expiry { reason: CloseReason::Flood, answer: false }));
    }

    /// Input after the protocol's closing verdict is nobody's: dropped, not parsed, on every
    /// engine, and the connection closes once its answer is out.
    #[test]
    fn input_after_a_closing_verdict_is_discarded() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = http();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pushed);
        let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        assert_eq!(lc.on_input(request, 4096, t0, &mut responder, &mut out), Fed::Send);
        assert!(lc.policy.is_closing());
        assert_eq!(lc.on_input(b"GET / HTTP/1.1\r\n\r\n", 4096, t0, &mut responder, &mut out), Fed::Discarded);
        assert!(out.is_empty() && !Fed::Discarded.counted());
        assert_eq!(lc.poll(t0, Pending::bytes(100), &responder, &l), Action::Flush, "post a send if none is in flight");
        let w = wait(lc.poll(t0, Pending::bytes(100), &responder, &l));
        assert!(!w.read && w.write, "a completion responder cancels its receive: {w:?}");
        assert_eq!(lc.poll(t0, Pending::default(), &responder, &l), Action::Close(CloseReason::Done));
    }

    /// A completion engine is never asked to read: `Wait::read` says whether to keep a receive
    /// armed.
    #[test]
    fn a_pushed_connection_is_told_whether_to_receive() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pushed);
        let w = wait(lc.poll(t0, Pending::default(), &responder, &l));
        assert!(w.read && !w.write);
        lc.set_waiting(true, t0);
        assert!(!wait(lc.poll(t0, Pending::default(), &responder, &l)).read, "waiting for a place");
        lc.set_waiting(false, t0);
        lc.on_input(b"x", 4096, t0, &mut responder, &mut out);
        assert_eq!(lc.poll(t0, Pending::bytes(1), &responder, &l), Action::Flush, "post a send");
        lc.on_eof();
        assert_eq!(lc.poll(t0, Pending::default(), &responder, &l), Action::Close(CloseReason::Peer));
    }

    /// A header timeout is answered with the protocol's whole answer (HTTP's 408), then closes.
    #[test]
    fn a_header_timeout_is_answered_then_closed() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = http();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        lc.poll(t0, Pending::default(), &responder, &l);
        lc.on_input(b"GET / HT", 1000, t0, &mut responder, &mut out);
        let w = wait(lc.poll(t0, Pending::default(), &responder, &l));
        assert!(w.wake_at < t0 + l.idle_timeout, "the header deadline is earlier");
        assert_eq!(lc.on_timer(w.wake_at - Duration::from_millis(1), &mut responder, &mut out, &l), None);
        let expiry = lc.on_timer(w.wake_at, &mut responder, &mut out, &l).expect("due");
        assert_eq!(expiry, Expiry { reason: CloseReason::HeaderTimeout, answer: true });
        assert!(out.to_vec(&[]).starts_with(b"HTTP/1.1 408"));
    }

    /// An empty pool is retried shortly, by the timer, not by spinning.
    #[test]
    fn an_empty_pool_is_retried_after_a_millisecond() {
        let (t0, l) = (Instant::now(), limits());
        let (responder, _) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        assert!(matches!(lc.poll(t0, Pending::default(), &responder, &l), Action::Read { .. }));
        lc.on_no_buffer();
        let w = wait(lc.poll(t0, Pending::default(), &responder, &l));
        assert_eq!(w.wake_at, t0 + NO_BUFFER_RETRY);
        assert!(!w.resume && !w.read, "{w:?}");
        assert!(matches!(lc.poll(t0, Pending::default(), &responder, &l), Action::Wait(_)), "not before its timer");
        let later = t0 + NO_BUFFER_RETRY;
        assert_eq!(lc.on_timer(later, &mut Protocol::Echo.responder(0), &mut Output::default(), &l), None);
        assert!(matches!(lc.poll(later, Pending::default(), &responder, &l), Action::Read { .. }));
    }

    /// The drain: a connection between requests closes once flushed; input the kernel held
    /// when the drain began is read and answered first; a waiting connection stops waiting.
    #[test]
    fn the_drain_closes_between_requests_after_answering_what_came_before_it() {
        let (t0, l) = (Instant::now(), limits());
        let (mut responder, mut out) = echo();
        let none = Pending::default();
        let mut idle = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        idle.on_drained();
        idle.begin_drain(t0, t0 + Duration::from_secs(5), false);
        assert_eq!(idle.poll(t0, none, &responder, &l), Action::Close(CloseReason::Shutdown));
        let mut owed = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        owed.set_waiting(true, t0);
        owed.begin_drain(t0, t0 + Duration::from_secs(5), true);
        assert!(!owed.is_waiting());
        assert_eq!(owed.poll(t0, none, &responder, &l), Action::Read { max: 1000 }, "read what came before the drain");
        owed.on_input(b"ping", 1000, t0, &mut responder, &mut out);
        owed.on_written(t0, Written { bytes: 4, ..Written::default() });
        assert_eq!(owed.poll(t0, none, &responder, &l), Action::Close(CloseReason::Shutdown));
    }

    /// HTTP/2 data held back by the output cap: once output moved, the lifecycle asks the
    /// protocol to transmit, once a turn, resuming after the others while more is wanted; a
    /// transmit that produced nothing is not repeated until output moves.
    #[test]
    fn http2_transmits_once_a_turn_as_output_drains() {
        let (t0, l) = (Instant::now(), Limits { max_pending_send: 4096, ..limits() });
        let h2 = sockscale_h2::Limits { output_cap: 4096, ..sockscale_proto::h2::default_limits() };
        let body = bytes::Bytes::from(vec![b'x'; 20_000]);
        let cfg = sockscale_proto::http::HttpConfig {
            http2: Some(std::sync::Arc::new(h2)),
            body: sockscale_proto::http::ResponseBody::Bytes(body),
            ..Default::default()
        };
        let mut responder = Protocol::Http(std::sync::Arc::new(cfg)).responder(0);
        let mut out = Output::default();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        let none = Pending::default();
        assert!(matches!(lc.poll(t0, none, &responder, &l), Action::Read { .. }));
        let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        opening.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        // The connection's window opened wide, so the stream's (65,535) is the only one.
        opening.extend_from_slice(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0]);
        opening.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x01, 0x01, b't']);
        assert_eq!(lc.on_input(&opening, 1 << 20, t0, &mut responder, &mut out), Fed::Send);
        lc.on_written(t0, Written { bytes: out.len(), ..Written::default() });
        let mut sent = 0;
        for _ in 0..20 {
            match lc.poll(t0, none, &responder, &l) {
                Action::Transmit => {
                    assert_eq!(lc.on_transmit(t0, none, &mut responder, &mut out), Fed::Send);
                    sent += out.len();
                    lc.on_written(t0, Written { bytes: out.len(), ..Written::default() });
                    let w = wait(lc.poll(t0, none, &responder, &l));
                    assert!(w.resume || !lc.wants_transmit(&responder), "more wanted: come back: {w:?}");
                }
                Action::Wait(w) => {
                    assert!(!w.resume, "nothing more to send: no spin");
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(sent > 15_000, "the body went out by transmits: {sent}");
        assert!(!lc.wants_transmit(&responder));
    }

    /// A body file's turn ends the turn without waiting for writability, and the next turn
    /// flushes again.
    #[test]
    fn a_yielded_file_turn_flushes_again_next_turn() {
        let (t0, l) = (Instant::now(), limits());
        let (responder, _) = echo();
        let mut lc = Lifecycle::new(responder.new_session(), t0, Delivery::Pulled);
        let owed = Pending { bytes: 0, sends: 0, file_bytes: 1 << 30 };
        assert_eq!(lc.poll(t0, owed, &responder, &l), Action::Flush);
        lc.on_written(t0, Written { bytes: 2 << 20, yielded: true, ..Written::default() });
        let w = wait(lc.poll(t0, owed, &responder, &l));
        assert!(w.resume && !w.read && w.write, "{w:?}");
        assert_eq!(lc.poll(t0, owed, &responder, &l), Action::Flush);
    }
}
