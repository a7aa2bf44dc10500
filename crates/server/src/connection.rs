//! One server connection per socket, with no I/O: quinn-proto's `Connection` for sockscale.
//!
//! A [`Connection`] owns everything a connection's life is decided by: its lifecycle (protocol
//! session and policy, `policy::Lifecycle`), its TLS session behind [`ServerCrypto`] (as
//! quinn-proto holds its `crypto::Session`), its output queue as data ([`Outbox`]) and one
//! timer table (idle, first data, header, TLS handshake, send, drain: the lifecycle's policy
//! keeps them all). It holds no descriptor and makes no system call; it reads no clock. An
//! engine tells it what happened — bytes received ([`Connection::receive`]), output written, a
//! deadline passed ([`Connection::on_timer`]) — with `now`, and carries out what comes back:
//! what to send (queued in the outbox, or the protocol's answer to send from the input), when
//! to wake ([`Connection::poll`]'s wait), what to read, and a [`Close`] with its reason, its
//! last bytes and its ending. The last bytes are the Connection's to compute: the protocol's
//! answer to a deadline (HTTP's 408, encrypted under TLS) followed by close_notify, the fatal
//! alert of a failed handshake, close_notify for every orderly TLS close. An engine sends
//! them only through `conn::end` (or io_uring's close), never by itself.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sockscale_proto::{Output, Responder, Segment, Session};
use sockscale_sys::Ending;
use sockscale_tls::{ServerCrypto, ServerSession, ServerTls};

use crate::body::{BodyFile, FileScratch, Seal};
use crate::out::OutQueue;
use crate::policy::{after, closed_by_error, Action, CloseReason, Delivery, Fed, Lifecycle, Limits, Pending, Refusal};
use crate::stats::Counters;

/// A connection's output queue, as the connection fills it: records and plaintext in order,
/// body file ranges by reference. The queue of the engines that write at once is
/// [`OutQueue`]; io_uring's keeps its sends in flight too.
pub trait Outbox {
    /// What the client has not taken yet, as the policy counts it.
    fn pending(&self) -> Pending;
    /// Records (or plaintext, on a connection without TLS) to send as they are.
    fn push_records(&mut self, records: Bytes);
    /// Bytes `range` of the body file, sealed a chunk at a time as the socket takes them.
    fn push_sealed_file(&mut self, body: &Arc<BodyFile>, range: Range<u64>);
    /// Plaintext behind a sealed file range, sealed when it reaches the front.
    fn push_clear(&mut self, plain: Bytes);
}

impl Outbox for OutQueue {
    fn pending(&self) -> Pending {
        Pending { bytes: self.len(), sends: 0, file_bytes: self.file_len() }
    }

    fn push_records(&mut self, records: Bytes) {
        self.push(records);
    }

    fn push_sealed_file(&mut self, body: &Arc<BodyFile>, range: Range<u64>) {
        OutQueue::push_sealed_file(self, body, range);
    }

    fn push_clear(&mut self, plain: Bytes) {
        OutQueue::push_clear(self, plain);
    }
}

/// A thread's buffers for the TLS stage: what one read decrypted to, an answer flattened
/// before it is encrypted, and a body file chunk and its records (the thread's, not a
/// connection's: an idle connection keeps none).
#[derive(Debug, Default)]
pub struct TlsScratch {
    plain: Vec<u8>,
    flat: Vec<u8>,
    pub file: FileScratch,
}

/// What a connection works with that its thread owns: the protocol engine, the output the
/// protocol writes its answer into, the TLS buffers, the body file and the counters.
pub struct ThreadTools<'a> {
    pub responder: &'a mut Responder,
    pub scratch: &'a mut Output,
    pub buffers: &'a mut TlsScratch,
    pub body: Option<&'a Arc<BodyFile>>,
    pub counters: &'a Counters,
}

/// How a connection ends, as data: why, the last bytes to send (see the module), and whether
/// the socket ends in good order (a FIN, the peer's unread input read first so no reset
/// destroys the last bytes) or is aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    pub reason: CloseReason,
    pub last: Vec<u8>,
    pub ending: Ending,
}

impl Close {
    /// The last bytes to send behind the output still queued: all of them when nothing is
    /// queued, none otherwise (records go out in the order they were sealed, and an answer
    /// must not land inside another). An orderly close the connection decides with output
    /// queued waits for it in its closing phase (see [`Connection::on_timer`]), so an engine
    /// ends a socket with output queued only when that phase ran out, or on a close of its own
    /// (the drain's forced end).
    pub fn last_behind(&self, nothing_queued: bool) -> &[u8] {
        if nothing_queued {
            &self.last
        } else {
            &[]
        }
    }
}

/// How a connection closed for `reason` ends its socket: in good order unless the peer or the
/// socket failed, or the client stopped taking its output (nothing sent then would arrive).
pub fn ending(reason: CloseReason) -> Ending {
    match reason {
        CloseReason::Aborted | CloseReason::Error | CloseReason::Flood | CloseReason::SendTimeout => Ending::Abort,
        CloseReason::Peer
        | CloseReason::Idle
        | CloseReason::FirstData
        | CloseReason::HeaderTimeout
        | CloseReason::Protocol
        | CloseReason::Done
        | CloseReason::Shutdown
        | CloseReason::Hostile => Ending::Orderly,
    }
}

/// One server connection (see the module). `Q`: its output queue; `C`: its TLS session (a type
/// parameter rather than a trait object: the box stays one pointer, which an idle connection's
/// memory budget counts, and the calls are direct).
#[derive(Debug)]
pub struct Connection<Q = OutQueue, C = ServerSession> {
    pub lc: Lifecycle,
    pub out: Q,
    /// The TLS stage between the socket's bytes and the protocol, when the server speaks TLS:
    /// boxed, so a plaintext connection pays one pointer.
    tls: Option<Box<C>>,
}

impl<Q: Outbox> Connection<Q, ServerSession> {
    /// A connection accepted at `now`, speaking TLS through a session of `tls` when the server
    /// speaks TLS (None: in clear); or the refusal an engine carries out instead of serving it:
    /// [`Refusal::Handshakes`] when `--max-handshakes` are in progress, and
    /// [`Refusal::TlsUnavailable`] when rustls cannot start a session (a failed handshake,
    /// counted: a server that speaks TLS serves no connection in clear).
    pub fn open(
        session: Session,
        now: Instant,
        delivery: Delivery,
        out: Q,
        tls: Option<&ServerTls>,
        counters: &Counters,
    ) -> Result<Self, Refusal<'static>> {
        let mut conn = Connection::new(session, now, delivery, out);
        let Some(tls) = tls else { return Ok(conn) };
        match ServerSession::new(tls, now) {
            // Boxed: a plaintext connection pays one pointer.
            Ok(Ok(session)) => conn.start_tls(Some(Box::new(session))),
            Ok(Err(failure)) => {
                counters.tls_failed(failure.reason);
                return Err(Refusal::TlsUnavailable);
            }
            Err(busy) => return Err(Refusal::Handshakes { max: busy.max }),
        }
        Ok(conn)
    }
}

impl<Q: Outbox, C: ServerCrypto> Connection<Q, C> {
    /// A connection accepted at `now`, in clear until [`Connection::start_tls`] (an engine
    /// opens one with [`Connection::open`]).
    pub fn new(session: Session, now: Instant, delivery: Delivery, out: Q) -> Self {
        Connection { lc: Lifecycle::new(session, now, delivery), out, tls: None }
    }

    /// The connection speaks TLS through `tls` (None: in clear). Its handshake joins the timer
    /// table: it must be done within the protocol's header timeout from acceptance.
    pub fn start_tls(&mut self, tls: Option<Box<C>>) {
        self.tls = tls;
    }

    /// When the TLS stage must have handed the protocol something, held to the protocol's
    /// header timeout: while the handshake is under way, from acceptance (a stalled ClientHello
    /// is closed then, like a slow request head); between requests, from the first byte of a
    /// record that is arriving in part (the protocol sees none of a head still inside a record,
    /// so without this a client dribbling one record's bytes met only the idle timeout).
    fn tls_due(&self, responder: &Responder) -> Option<Instant> {
        let tls = self.tls.as_deref()?;
        let started = if tls.is_handshaking() {
            tls.handshake_started_at()
        } else {
            tls.record_started_at().filter(|_| self.lc.is_between_requests())?
        };
        Some(after(started, responder.header_timeout()?))
    }

    /// The output waiting for the client, as the policy counts it.
    pub fn pending(&self) -> Pending {
        self.out.pending()
    }

    /// What to do next (see [`Lifecycle::poll`]).
    #[inline]
    pub fn poll(&mut self, now: Instant, responder: &Responder, limits: &Limits) -> Action {
        let pending = self.out.pending();
        let mut action = self.lc.poll(now, pending, responder, limits);
        if let Action::Wait(wait) = &mut action {
            if let Some(at) = self.tls_due(responder) {
                wait.wake_at = wait.wake_at.min(at);
            }
        }
        action
    }

    /// May the connection read now (readiness aside)?
    pub fn may_read(&self, limits: &Limits) -> bool {
        self.lc.may_read(self.out.pending(), limits)
    }

    /// Finished, and why (once the output is flushed).
    pub fn finished(&self) -> Option<CloseReason> {
        self.lc.finished(self.out.pending())
    }

    /// Finished, as a close to carry out (for an engine that closes outside a turn).
    pub fn finish(&mut self) -> Option<Close> {
        let reason = self.finished()?;
        Some(self.close(reason))
    }

    /// While a thread engine blocks until its output is written: until when it may wait for
    /// room, or the close if a send deadline (flood, send stall, the drain's end) has passed.
    /// The same table as every other deadline's: the engine keeps no clock of its own.
    /// A closing phase that ends with its output unsent is counted, as [`Connection::on_timer`]
    /// counts it.
    pub fn send_wait(&mut self, now: Instant, limits: &Limits, counters: &Counters) -> Result<Instant, Close> {
        match self.lc.send_expired(now, limits) {
            Some(reason) => {
                if self.lc.is_in_closing_phase() && !self.out.pending().is_empty() {
                    counters.close_unflushed();
                }
                Err(self.close(reason))
            }
            None => Ok(self.lc.send_deadline(limits)),
        }
    }

    /// When the connection must next be woken: the earliest deadline of its timer table.
    pub fn deadline(&self, responder: &Responder, limits: &Limits) -> Instant {
        let policy = self.lc.deadline(responder, limits);
        self.tls_due(responder).map_or(policy, |at| at.min(policy))
    }

    /// The output queue, with the TLS session its queued plaintext is sealed with.
    pub fn out_and_session(&mut self) -> (&mut Q, Option<&mut dyn ServerCrypto>) {
        let session = self.tls.as_deref_mut().map(|session| session as &mut dyn ServerCrypto);
        (&mut self.out, session)
    }

    /// The output queue, with what to seal a TLS connection's queued body file and plaintext
    /// with as the socket takes them: the session and the thread's file scratch.
    pub fn out_and_seal<'a>(&'a mut self, scratch: &'a mut FileScratch) -> (&'a mut Q, Option<Seal<'a>>) {
        let seal = self.tls.as_deref_mut().map(|session| Seal { session: session as &mut dyn ServerCrypto, scratch });
        (&mut self.out, seal)
    }

    /// `read` bytes arrived (of `wanted` asked for; for pushed input, the buffer's size), at
    /// `now`. In clear they are the protocol's input, and [`Fed::Send`] means: send the answer
    /// in `tools.scratch` (segments of `read`). Under TLS they are ciphertext: what the
    /// handshake and the answer produce is sealed into the outbox, and [`Fed::Queued`] means
    /// the answer is there (handshake records may be queued whatever it returns: flush what
    /// is queued). Err: the TLS session failed; close as it says (its fatal alert last).
    #[inline]
    pub fn receive(
        &mut self,
        read: &mut [u8],
        wanted: usize,
        now: Instant,
        tools: &mut ThreadTools<'_>,
    ) -> Result<Fed, Close> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Ok(self.lc.on_input(read, wanted, now, tools.responder, tools.scratch));
        };
        self.lc.on_read(read.len(), wanted);
        tools.buffers.plain.clear();
        let mut records = Vec::new();
        match tls.receive(read, now, &mut tools.buffers.plain, &mut records) {
            Ok(received) => {
                if let Some(took) = received.handshake_done {
                    tools.counters.tls_handshake(took, tls.resumed());
                }
            }
            Err(failure) => {
                tools.counters.tls_failed(failure.reason);
                // The session appended its fatal alert, if it owes the client one.
                let reason = CloseReason::Protocol;
                return Err(Close { reason, last: records, ending: ending(reason) });
            }
        }
        if !records.is_empty() {
            self.out.push_records(Bytes::from(records));
        }
        let fed = self.lc.on_plaintext(&tools.buffers.plain, now, tools.responder, tools.scratch);
        if fed != Fed::Send {
            return Ok(fed);
        }
        self.seal_answer(tools)?;
        Ok(Fed::Queued)
    }

    /// After [`Action::Transmit`]: the protocol's output, as [`Connection::receive`] returns
    /// it ([`Fed::Send`]: in `tools.scratch`, shared bytes and file ranges only; [`Fed::Queued`]:
    /// sealed into the outbox).
    pub fn transmit(&mut self, now: Instant, tools: &mut ThreadTools<'_>) -> Result<Fed, Close> {
        let pending = self.out.pending();
        let fed = self.lc.on_transmit(now, pending, tools.responder, tools.scratch);
        if fed != Fed::Send || self.tls.is_none() {
            return Ok(fed);
        }
        tools.buffers.plain.clear();
        self.seal_answer(tools)?;
        Ok(Fed::Queued)
    }

    /// The protocol's answer in `tools.scratch` (its input ranges resolved against the
    /// decrypted input), through the TLS stage into the outbox: encrypted up to the first body
    /// file range, a file range to seal as it goes, and plaintext behind it, in order.
    fn seal_answer(&mut self, tools: &mut ThreadTools<'_>) -> Result<(), Close> {
        // A file that shrank gets no response started from it, as in clear.
        if let Err(e) = BodyFile::check_output(tools.scratch, tools.body) {
            return Err(self.close(closed_by_error(&e)));
        }
        let Some(tls) = self.tls.as_deref_mut() else {
            return Err(self.close(CloseReason::Error));
        };
        let TlsScratch { plain, flat, .. } = &mut *tools.buffers;
        // Runs of segments in memory, flattened: encrypted now up to the first file range, and
        // behind one, encrypted when they reach the front of the queue.
        let mut behind_file = false;
        flat.clear();
        let mut failed = false;
        for segment in tools.scratch.segments() {
            let Segment::File(range) = segment else {
                flat.extend_from_slice(Output::slice(segment, plain));
                continue;
            };
            failed |= seal_run(tls, flat, behind_file, &mut self.out).is_err();
            if let Some(body) = tools.body {
                self.out.push_sealed_file(body, range.clone());
            }
            behind_file = true;
        }
        failed |= seal_run(tls, flat, behind_file, &mut self.out).is_err();
        if failed {
            return Err(self.close(CloseReason::Protocol));
        }
        Ok(())
    }

    /// The connection's timer came due at `now`: the close to carry out if a deadline of its
    /// table expired (None: poll again to re-arm). A deadline the protocol answers (HTTP's
    /// 408) puts the answer in the close's last bytes, encrypted under TLS (a handshake that
    /// never finished has no key: it gets none).
    ///
    /// An orderly close with output still queued does not drop its last bytes: the connection
    /// enters its closing phase ([`Lifecycle::begin_closing`]) and this returns None. The
    /// answer is queued behind the output (sealed in order), the engine flushes as for any
    /// output, and once the queue is empty the lifecycle says [`Action::Close`], whose close
    /// carries close_notify. If the phase's deadline (the send timeout, or the drain's) comes
    /// first, the close returned then goes without them, as it would have at once, and is
    /// counted (`closes_unflushed`), as is an orderly close with output queued and no time left
    /// (at the drain's deadline).
    pub fn on_timer(&mut self, now: Instant, tools: &mut ThreadTools<'_>, limits: &Limits) -> Option<Close> {
        if self.tls_due(tools.responder).is_some_and(|at| at <= now) {
            // During the handshake there is no key yet: no answer, and no close_notify. After
            // it, a record in part: close_notify (no 408: the protocol saw no byte of a head).
            return Some(self.close(CloseReason::HeaderTimeout));
        }
        let closing = self.lc.is_in_closing_phase();
        let expiry = self.lc.on_timer(now, tools.responder, tools.scratch, limits)?;
        let pending = self.out.pending();
        if closing {
            // The phase ended (or a send clock ran out) before the output was flushed.
            if !pending.is_empty() {
                tools.counters.close_unflushed();
            }
            return Some(self.close(expiry.reason));
        }
        if ending(expiry.reason) == Ending::Orderly && !pending.is_empty() {
            if self.lc.begin_closing(expiry.reason, now, limits) {
                if expiry.answer {
                    self.queue_answer(tools, pending.file_bytes > 0);
                }
                return None;
            }
            // No time is left (the drain's own deadline): it goes unflushed at once.
            tools.counters.close_unflushed();
        }
        let mut last = Vec::new();
        if expiry.answer {
            let flat = &mut tools.buffers.flat;
            flat.clear();
            for segment in tools.scratch.segments() {
                flat.extend_from_slice(Output::slice(segment, &[]));
            }
            match self.tls.as_deref_mut() {
                None => last.extend_from_slice(flat),
                Some(tls) if !tls.is_handshaking() => {
                    if tls.send(flat, &mut last).is_err() {
                        last.clear();
                    }
                }
                Some(_) => {}
            }
        }
        Some(self.close_after(expiry.reason, last))
    }

    /// The answer to an expired deadline (in `tools.scratch`) behind the output queued: in clear
    /// as it is; under TLS sealed now, or, `behind_file` (a body file range, sealed as the
    /// socket takes it, is queued), sealed when it reaches the front, so records stay in order.
    /// A handshake not finished has no key: no answer.
    fn queue_answer(&mut self, tools: &mut ThreadTools<'_>, behind_file: bool) {
        let flat = &mut tools.buffers.flat;
        flat.clear();
        for segment in tools.scratch.segments() {
            flat.extend_from_slice(Output::slice(segment, &[]));
        }
        match self.tls.as_deref_mut() {
            None => self.out.push_records(Bytes::copy_from_slice(flat)),
            Some(tls) if !tls.is_handshaking() => {
                // A session that cannot seal has nothing more to say: the close follows alone.
                let _ = seal_run(tls, flat, behind_file, &mut self.out);
            }
            Some(_) => {}
        }
    }

    /// The close for `reason`: under TLS, an orderly close ends with close_notify.
    pub fn close(&mut self, reason: CloseReason) -> Close {
        self.close_after(reason, Vec::new())
    }

    fn close_after(&mut self, reason: CloseReason, mut last: Vec<u8>) -> Close {
        let ending = ending(reason);
        if let (Some(tls), Ending::Orderly) = (self.tls.as_deref_mut(), ending) {
            tls.close(&mut last);
        }
        Close { reason, last, ending }
    }
}

/// Queue the flattened run `flat` (emptied): encrypted, or, `behind_file`, as plaintext to be
/// encrypted once the file range ahead of it is.
fn seal_run(
    tls: &mut impl ServerCrypto,
    flat: &mut Vec<u8>,
    behind_file: bool,
    out: &mut impl Outbox,
) -> Result<(), sockscale_tls::Failure> {
    if flat.is_empty() {
        return Ok(());
    }
    if behind_file {
        out.push_clear(Bytes::copy_from_slice(flat));
    } else {
        let mut records = Vec::with_capacity(flat.len() + 64);
        tls.send(flat, &mut records)?;
        out.push_records(Bytes::from(records));
    }
    flat.clear();
    Ok(())
}

#[cfg(test)]
#[path = "connection/pair.rs"]
mod pair;

#[cfg(test)]
mod open {
    use std::path::Path;
    use std::time::{Instant, SystemTime};

    use sockscale_proto::Protocol;
    use sockscale_tls::{ServerOptions, ServerTls, TestCertificate};

    use super::Connection;
    use crate::out::OutQueue;
    use crate::policy::{Delivery, Refusal};
    use crate::stats::Counters;

    fn server_tls(max_handshakes: Option<usize>) -> ServerTls {
        let made = TestCertificate::generate(&["localhost".to_owned()]).expect("certificate");
        let options = ServerOptions { max_handshakes, ..ServerOptions::default() };
        let (cert, key) = (made.cert_pem.as_bytes(), made.key_pem.as_bytes());
        ServerTls::from_pem(cert, Path::new("cert"), key, Path::new("key"), SystemTime::now(), &options)
            .expect("server tls")
    }

    fn open(tls: Option<&ServerTls>) -> Result<Connection, Refusal<'static>> {
        let session = Protocol::Echo.responder(0).new_session();
        Connection::open(session, Instant::now(), Delivery::Pulled, OutQueue::default(), tls, &Counters::default())
    }

    #[test]
    fn a_connection_speaks_tls_exactly_when_the_server_does() {
        let clear = open(None).expect("in clear");
        assert!(clear.tls.is_none());
        let tls = server_tls(None);
        let sealed = open(Some(&tls)).expect("a session");
        assert!(sealed.tls.as_deref().is_some_and(|s| s.is_handshaking()));
    }

    /// `--max-handshakes`: a connection beyond it is refused, and one whose handshake ends (here,
    /// the connection dropped) gives its place back.
    #[test]
    fn beyond_max_handshakes_a_connection_is_refused_until_one_ends() {
        let tls = server_tls(Some(1));
        let first = open(Some(&tls)).expect("the one place");
        assert!(matches!(open(Some(&tls)), Err(Refusal::Handshakes { max: 1 })));
        assert_eq!(tls.handshakes_in_progress(), 1, "a refused connection holds no place");
        drop(first);
        assert!(open(Some(&tls)).is_ok(), "the place is free again");
    }
}
