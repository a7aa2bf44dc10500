//! One connection's state: the exchange with its client (protocol session, output queue,
//! policy) as the engines that write at once keep it, and the thread's protocol kit. The write
//! half of the path of a byte is `out.rs`.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sockscale_proto::{Engine, Output, Protocol, Segment, Session};
use sockscale_sys::Interest;
use sockscale_tls::{ServerSession, ServerTls};

use crate::admission::Refusal;
use crate::body::{BodyFile, FileScratch, Seal};
use crate::clock::unix_now;
pub use crate::out::{OutQueue, Written};
pub use crate::policy::closed_by_error;
use crate::policy::CloseReason;
use crate::policy::{Action, Delivery, Fed, Lifecycle, Limits, Pending, Wait};
use crate::pool::BufferPool;
use crate::stats::Counters;

/// A thread's protocol engine, the output it writes into, the body file its responses may
/// name, and its TLS configuration and scratch buffers: what a thread needs to answer input.
#[derive(Debug)]
pub struct Kit {
    pub engine: Engine,
    pub scratch: Output,
    pub body: Option<Arc<BodyFile>>,
    pub tls: Option<ServerTls>,
    pub tls_scratch: TlsScratch,
}

impl Kit {
    pub fn new(protocol: &Protocol, body: Option<&Arc<BodyFile>>, tls: Option<&ServerTls>) -> Self {
        Kit {
            engine: protocol.engine(unix_now()),
            scratch: Output::default(),
            body: body.cloned(),
            tls: tls.cloned(),
            tls_scratch: TlsScratch::default(),
        }
    }

    /// Bring HTTP's pre-rendered responses to the current second (a no-op within a second).
    pub fn tick(&mut self) {
        self.engine.tick(unix_now());
    }
}

/// A new connection's TLS session when the server speaks TLS (boxed: a plaintext connection
/// pays one pointer), or the refusal when `--max-handshakes` are in progress. A session rustls
/// cannot start is a failed handshake (counted; the connection is served in clear never: it
/// closes at its first read, having no session).
pub fn tls_session(
    tls: Option<&ServerTls>,
    counters: &Counters,
    now: Instant,
) -> Result<Option<Box<ServerSession>>, Refusal<'static>> {
    let Some(tls) = tls else { return Ok(None) };
    match ServerSession::new(tls, now) {
        Ok(Ok(session)) => Ok(Some(Box::new(session))),
        Ok(Err(failure)) => {
            counters.tls_failed(failure.reason);
            Err(Refusal::TlsUnavailable)
        }
        Err(busy) => Err(Refusal::Handshakes { max: busy.max }),
    }
}

/// How an engine that writes at once moves bytes on a connection's socket: plain system calls
/// on the descriptor ([`RawSocket`]), or tokio's, which must also clear its readiness when a
/// call says the socket is drained or full.
pub trait Socket {
    fn fd(&self) -> RawFd;

    /// Read into `buf`. `short_drains`: the lifecycle takes a short read to mean the socket is
    /// drained (no hang-up was reported), so a waiter that keeps readiness may forget it.
    fn recv(&mut self, buf: &mut [u8], short_drains: bool) -> io::Result<usize>;

    /// Write what `out` holds; `seal`: a TLS connection's session and the thread's scratch
    /// (see [`OutQueue::flush`]).
    fn flush(&mut self, out: &mut OutQueue, seal: Option<&mut Seal<'_>>) -> io::Result<Written>;

    /// Write `output` (segments of `input`, shared bytes, body file ranges) behind what `out`
    /// holds, queueing what the socket refuses.
    fn send(
        &mut self,
        out: &mut OutQueue,
        output: &Output,
        input: &[u8],
        body: Option<&Arc<BodyFile>>,
    ) -> io::Result<Written>;
}

/// A socket driven by plain non-blocking system calls (the readiness loop, the thread engines).
pub struct RawSocket(pub RawFd);

impl Socket for RawSocket {
    fn fd(&self) -> RawFd {
        self.0
    }

    fn recv(&mut self, buf: &mut [u8], _short_drains: bool) -> io::Result<usize> {
        sockscale_sys::recv(self.0, buf)
    }

    fn flush(&mut self, out: &mut OutQueue, seal: Option<&mut Seal<'_>>) -> io::Result<Written> {
        out.flush(self.0, seal)
    }

    fn send(
        &mut self,
        out: &mut OutQueue,
        output: &Output,
        input: &[u8],
        body: Option<&Arc<BodyFile>>,
    ) -> io::Result<Written> {
        out.send(self.0, output, input, body)
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turned {
    /// Close the connection for this reason.
    Close(CloseReason),
    /// Wait as the lifecycle says. `input`: bytes from the client arrived this turn (the
    /// active set hears of it).
    Wait { wait: Wait, input: bool },
}

/// A connection's exchange with its client, as every engine that writes at once keeps it (the
/// readiness loop, the thread engines, tokio): its lifecycle (protocol session and policy) and
/// the output the socket has not taken. [`Exchange::turn`] carries out the lifecycle's actions
/// on a socket; the engine around it only waits.
#[derive(Debug)]
pub struct Exchange {
    pub lc: Lifecycle,
    pub out: OutQueue,
    /// The TLS stage between the socket's bytes and the protocol, when the server speaks TLS:
    /// boxed, so a plaintext connection pays one pointer.
    pub tls: Option<Box<ServerSession>>,
}

impl Exchange {
    pub fn new(session: Session, now: Instant) -> Self {
        Exchange { lc: Lifecycle::new(session, now, Delivery::Pulled), out: OutQueue::default(), tls: None }
    }

    /// The output waiting for the client, as the policy counts it.
    pub fn pending(&self) -> Pending {
        Pending { bytes: self.out.len(), sends: 0, file_bytes: self.out.file_len() }
    }

    /// May the connection read now (readiness aside)?
    pub fn may_read(&self, limits: &Limits) -> bool {
        self.lc.may_read(self.pending(), limits)
    }

    /// Finished, and why (once the output is flushed).
    pub fn finished(&self) -> Option<CloseReason> {
        self.lc.finished(self.pending())
    }

    /// Finished, and why, as [`Exchange::finished`], for an engine that closes outside a turn
    /// (the thread pool, once its blocking send has written a body): a TLS session ended in
    /// good order sends close_notify, as a turn's close does.
    pub fn finish(&mut self, fd: RawFd) -> Option<CloseReason> {
        let reason = self.finished()?;
        tls_close_notify(self.tls.as_deref_mut(), fd, reason);
        Some(reason)
    }

    /// The server is draining from `now`: see [`Lifecycle::begin_drain`]; a request the kernel
    /// holds unread on `fd` (FIONREAD) was sent before the drain.
    pub fn begin_drain(&mut self, fd: RawFd, now: Instant, until: Instant) {
        let unread = sockscale_sys::unread_bytes(fd).is_ok_and(|n| n > 0);
        self.lc.begin_drain(now, until, unread);
    }

    /// When a policy may next act on this connection.
    pub fn deadline(&self, engine: &Engine, limits: &Limits) -> Instant {
        let policy = self.lc.deadline(engine, limits);
        self.handshake_deadline(engine).map_or(policy, |at| at.min(policy))
    }

    /// A TLS handshake under way is held to the protocol's header timeout, from acceptance.
    fn handshake_deadline(&self, engine: &Engine) -> Option<Instant> {
        handshake_deadline(self.tls.as_deref(), engine)
    }

    /// One turn: carry out the lifecycle's actions on `socket` until it says to wait or to
    /// close. A pool buffer is taken only when the lifecycle asks for a read, and given back
    /// before returning.
    pub fn turn(&mut self, socket: &mut impl Socket, io: &mut TurnIo<'_>, now: Instant) -> Turned {
        let mut buf = None;
        let mut input = false;
        loop {
            let pending = self.pending();
            match self.lc.poll(now, pending, &io.kit.engine, io.limits) {
                Action::Close(reason) => {
                    // Only behind everything sent: records go out in the order they were sealed.
                    if self.out.is_empty() {
                        tls_close_notify(self.tls.as_deref_mut(), socket.fd(), reason);
                    }
                    return Turned::Close(reason);
                }
                Action::Wait(mut wait) => {
                    if let Some(at) = self.handshake_deadline(&io.kit.engine) {
                        wait.wake_at = wait.wake_at.min(at);
                    }
                    return Turned::Wait { wait, input };
                }
                Action::Transmit => {
                    let kit = &mut *io.kit;
                    if self.lc.on_transmit(now, pending, &mut kit.engine, &mut kit.scratch) != Fed::Send {
                        continue;
                    }
                    let sent = match self.tls.as_deref_mut() {
                        None => socket.send(&mut self.out, &kit.scratch, &[], kit.body.as_ref()),
                        Some(tls) => {
                            let out = &mut self.out;
                            let body = kit.body.as_ref();
                            let queued = tls_seal_output(tls, &kit.scratch, &mut kit.tls_scratch, body, |item| {
                                queue_tls(out, body, item)
                            });
                            if let Err(reason) = queued {
                                return Turned::Close(reason);
                            }
                            let mut seal = seal(&mut self.tls, &mut kit.tls_scratch);
                            socket.flush(&mut self.out, seal.as_mut())
                        }
                    };
                    match sent {
                        Ok(written) => {
                            io.counters.written(&written);
                            self.lc.on_written(now, written);
                        }
                        Err(e) => return Turned::Close(self.lc.on_failed(&e)),
                    }
                }
                Action::Flush => {
                    if let Err(reason) = self.flush_queue(socket, io, now) {
                        return Turned::Close(reason);
                    }
                }
                Action::Read { max } => {
                    if buf.is_none() {
                        buf = io.pool.take(io.counters);
                    }
                    let Some(buf) = buf.as_mut() else {
                        self.lc.on_no_buffer();
                        continue;
                    };
                    let want = max.min(buf.len());
                    match socket.recv(&mut buf[..want], !self.lc.hangup_seen()) {
                        Ok(0) => self.lc.on_eof(),
                        Ok(n) if self.tls.is_some() => {
                            io.counters.bytes_in(n);
                            let fed = match self.through_tls(&mut buf[..n], want, io, now) {
                                Ok(fed) => fed,
                                Err(closing) => {
                                    // Only behind everything sent, as close_notify.
                                    if self.out.is_empty() {
                                        closing.send_last(socket.fd());
                                    }
                                    return Turned::Close(closing.reason);
                                }
                            };
                            input |= fed.counted();
                            // The handshake's flight and the answer's records go at once.
                            if !self.out.is_empty() {
                                if let Err(reason) = self.flush_queue(socket, io, now) {
                                    return Turned::Close(reason);
                                }
                            }
                        }
                        Ok(n) => {
                            io.counters.bytes_in(n);
                            let kit = &mut *io.kit;
                            let fed = self.lc.on_input(&buf[..n], want, now, &mut kit.engine, &mut kit.scratch);
                            input |= fed.counted();
                            if fed == Fed::Send {
                                match socket.send(&mut self.out, &kit.scratch, &buf[..n], kit.body.as_ref()) {
                                    Ok(written) => {
                                        io.counters.written(&written);
                                        self.lc.on_written(now, written);
                                    }
                                    Err(e) => return Turned::Close(self.lc.on_failed(&e)),
                                }
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.lc.on_drained(),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Turned::Close(self.lc.on_failed(&e)),
                    }
                }
            }
        }
    }

    /// Write what the queue holds (a TLS connection's file ranges and plaintext sealed as they
    /// go) and tell the lifecycle what was written. Err: close, for this reason. Inlined in both
    /// callers, as the code was before it became a method: it is on every HTTPS request's path.
    #[inline(always)]
    fn flush_queue(&mut self, socket: &mut impl Socket, io: &mut TurnIo<'_>, now: Instant) -> Result<(), CloseReason> {
        let mut seal = seal(&mut self.tls, &mut io.kit.tls_scratch);
        match socket.flush(&mut self.out, seal.as_mut()) {
            Ok(written) => {
                io.counters.written(&written);
                self.lc.on_written(now, written);
                Ok(())
            }
            Err(e) => Err(self.lc.on_failed(&e)),
        }
    }

    /// Ciphertext `read` of `wanted` bytes, through the TLS stage: the handshake's records and
    /// the answer's, encrypted, are queued in `out`. Err: close, as it says.
    fn through_tls(
        &mut self,
        read: &mut [u8],
        wanted: usize,
        io: &mut TurnIo<'_>,
        now: Instant,
    ) -> Result<Fed, TlsClosing> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Err(CloseReason::Error.into());
        };
        self.lc.on_read(read.len(), wanted);
        let Kit { engine, scratch, body, tls_scratch, .. } = &mut *io.kit;
        let out = &mut self.out;
        let file = body.as_ref();
        let queue = |item| queue_tls(out, file, item);
        let mut io = TlsIo { engine, scratch, buffers: tls_scratch, body: body.as_ref(), counters: io.counters };
        tls_input(tls, &mut self.lc, read, now, &mut io, queue)
    }

    /// Write queued output on `fd` outside a turn (a thread engine's blocking send, or the
    /// blocking model's send thread), keeping the flood and stall clocks as a turn does.
    /// `scratch`: the thread's, which a TLS connection's body file is sealed in.
    pub fn flush_now(
        &mut self,
        fd: RawFd,
        now: Instant,
        limits: &Limits,
        scratch: &mut TlsScratch,
    ) -> io::Result<Written> {
        let written = self.out.flush(fd, seal(&mut self.tls, scratch).as_mut())?;
        let pending = self.pending();
        self.lc.account_written(now, written, pending, limits);
        Ok(written)
    }

    /// The connection's timer came due at `now`: the reason to close if a deadline expired
    /// (None: take a turn to re-arm). A deadline the protocol answers (HTTP's 408) gets its
    /// whole answer in one non-blocking attempt; the connection closes either way.
    pub fn expire(&mut self, fd: RawFd, kit: &mut Kit, now: Instant, limits: &Limits) -> Option<(CloseReason, usize)> {
        if self.handshake_deadline(&kit.engine).is_some_and(|at| at <= now) {
            return Some((CloseReason::HeaderTimeout, 0));
        }
        let expiry = self.lc.on_timer(now, &mut kit.engine, &mut kit.scratch, limits)?;
        let sent = match self.tls.as_deref_mut() {
            _ if !expiry.answer => 0,
            None => answer_once(fd, &kit.scratch),
            Some(tls) => tls_answer_once(tls, fd, &kit.scratch, &mut kit.tls_scratch),
        };
        Some((expiry.reason, sent))
    }
}

/// A TLS connection to close, and the bytes to send it first: the fatal alert that says why its
/// session failed (RFC 8446 §6.2), or nothing.
#[derive(Debug)]
pub struct TlsClosing {
    pub reason: CloseReason,
    pub last: Vec<u8>,
}

impl From<CloseReason> for TlsClosing {
    fn from(reason: CloseReason) -> Self {
        TlsClosing { reason, last: Vec::new() }
    }
}

impl TlsClosing {
    /// One non-blocking attempt to send the last bytes on `fd` (every engine's sockets are
    /// non-blocking), as close_notify is sent: a client that does not read them holds nothing,
    /// and what did not fit is dropped with the connection. The caller sends them only when
    /// nothing is queued ahead (records go out in the order they were sealed).
    pub fn send_last(&self, fd: RawFd) {
        if !self.last.is_empty() {
            let _ = sockscale_sys::send(fd, &self.last);
        }
    }
}

/// Queue one item of a TLS connection's output in its queue, in order.
fn queue_tls(out: &mut OutQueue, body: Option<&Arc<BodyFile>>, item: TlsOut) {
    match item {
        TlsOut::Records(records) => out.push(records),
        TlsOut::File(range) => {
            if let Some(file) = body {
                out.push_sealed_file(file, range);
            }
        }
        TlsOut::Clear(plain) => out.push_clear(plain),
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

/// A TLS connection's session with the thread's scratch, to flush its output with.
fn seal<'a>(tls: &'a mut Option<Box<ServerSession>>, scratch: &'a mut TlsScratch) -> Option<Seal<'a>> {
    tls.as_deref_mut().map(|session| Seal { session, scratch: &mut scratch.file })
}

/// What one read through TLS queues, in order: records to send as they are, a body file range
/// to read and encrypt a chunk at a time as the socket takes it, and plaintext behind such a
/// range, to encrypt when it reaches the front (records go out in the order they are sealed).
#[derive(Debug)]
pub enum TlsOut {
    Records(Bytes),
    File(std::ops::Range<u64>),
    Clear(Bytes),
}

/// What [`tls_input`] works with besides the session and the lifecycle: the thread's protocol
/// engine, its output scratch, its TLS buffers, the body file and the counters.
pub struct TlsIo<'a> {
    pub engine: &'a mut Engine,
    pub scratch: &'a mut Output,
    pub buffers: &'a mut TlsScratch,
    pub body: Option<&'a Arc<BodyFile>>,
    pub counters: &'a Counters,
}

/// One read's ciphertext through a connection's TLS stage, for every engine (the exchange of
/// the engines that write at once, and io_uring's): the handshake is counted when it
/// completes, the plaintext goes to the lifecycle's protocol, and what to send (the
/// handshake's records, the answer flattened and encrypted, a body file range to seal as it
/// goes, and plaintext behind it) is handed to `queue` in order. Err: close, after sending its
/// last bytes if nothing is queued ahead of them (the failure is counted).
pub fn tls_input(
    tls: &mut ServerSession,
    lc: &mut Lifecycle,
    read: &mut [u8],
    now: Instant,
    io: &mut TlsIo<'_>,
    mut queue: impl FnMut(TlsOut),
) -> Result<Fed, TlsClosing> {
    let TlsIo { engine, scratch, buffers, body, counters } = io;
    buffers.plain.clear();
    let mut records = Vec::new();
    match tls.receive(read, now, &mut buffers.plain, &mut records) {
        Ok(received) => {
            if let Some(took) = received.handshake_done {
                counters.tls_handshake(took, tls.negotiated().is_some_and(|n| n.resumed));
            }
        }
        Err(failure) => {
            counters.tls_failed(failure.reason);
            // The session appended its fatal alert, if it owes the client one.
            return Err(TlsClosing { reason: CloseReason::Protocol, last: records });
        }
    }
    if !records.is_empty() {
        queue(TlsOut::Records(Bytes::from(records)));
    }
    let fed = lc.on_plaintext(&buffers.plain, now, engine, scratch);
    if fed != Fed::Send {
        return Ok(fed);
    }
    tls_seal_output(tls, scratch, buffers, *body, queue)?;
    Ok(fed)
}

/// The protocol's answer in `scratch` (its input ranges resolved against `buffers.plain`),
/// through a connection's TLS stage: encrypted up to the first body file range, a file range
/// to seal as it goes, and plaintext behind it, each handed to `queue` in order. Used for the
/// answer to input ([`tls_input`]) and for what a protocol transmits on its own
/// ([`crate::policy::Action::Transmit`]). Err: close, for this reason.
pub fn tls_seal_output(
    tls: &mut ServerSession,
    scratch: &Output,
    buffers: &mut TlsScratch,
    body: Option<&Arc<BodyFile>>,
    mut queue: impl FnMut(TlsOut),
) -> Result<(), CloseReason> {
    // A file that shrank gets no response started from it, as in clear.
    if let Err(e) = BodyFile::check_output(scratch, body) {
        return Err(closed_by_error(&e));
    }
    // Runs of segments in memory, flattened: encrypted now up to the first file range, and
    // behind one, encrypted when they reach the front of the queue.
    let mut behind_file = false;
    buffers.flat.clear();
    for segment in scratch.segments() {
        let Segment::File(range) = segment else {
            buffers.flat.extend_from_slice(Output::slice(segment, &buffers.plain));
            continue;
        };
        seal_run(tls, &mut buffers.flat, behind_file, &mut queue)?;
        queue(TlsOut::File(range.clone()));
        behind_file = true;
    }
    seal_run(tls, &mut buffers.flat, behind_file, &mut queue)
}

/// Queue the flattened run `flat` (emptied): encrypted, or, `behind_file`, as plaintext to be
/// encrypted once the file range ahead of it is.
fn seal_run(
    tls: &mut ServerSession,
    flat: &mut Vec<u8>,
    behind_file: bool,
    queue: &mut impl FnMut(TlsOut),
) -> Result<(), CloseReason> {
    if flat.is_empty() {
        return Ok(());
    }
    if behind_file {
        queue(TlsOut::Clear(Bytes::copy_from_slice(flat)));
    } else {
        let mut records = Vec::with_capacity(flat.len() + 64);
        if tls.send(flat, &mut records).is_err() {
            return Err(CloseReason::Protocol);
        }
        queue(TlsOut::Records(Bytes::from(records)));
    }
    flat.clear();
    Ok(())
}

/// [`answer_once`] through TLS: the protocol's answer to an expired deadline, encrypted, in
/// one non-blocking attempt. A handshake that never finished gets none: there is no key.
pub fn tls_answer_once(tls: &mut ServerSession, fd: RawFd, output: &Output, buffers: &mut TlsScratch) -> usize {
    if tls.is_handshaking() {
        return 0;
    }
    buffers.flat.clear();
    for segment in output.segments() {
        buffers.flat.extend_from_slice(Output::slice(segment, &[]));
    }
    let mut records = Vec::new();
    match tls.send(&buffers.flat, &mut records) {
        Ok(()) => sockscale_sys::send(fd, &records).unwrap_or(0),
        Err(_) => 0,
    }
}

/// End a TLS session the server closes in good order (the exchange is done, idle, or the
/// server stops): one non-blocking attempt to send close_notify, so a client that reads to the
/// end sees the end and not a truncation. Not after an abort, an error or the peer's close.
pub fn tls_close_notify(tls: Option<&mut ServerSession>, fd: RawFd, reason: CloseReason) {
    let Some(tls) = tls else { return };
    if !matches!(reason, CloseReason::Done | CloseReason::Idle | CloseReason::Shutdown | CloseReason::Protocol) {
        return;
    }
    let mut records = Vec::new();
    tls.close(&mut records);
    if !records.is_empty() {
        let _ = sockscale_sys::send(fd, &records);
    }
}

/// While a connection's TLS handshake is under way, it is held to the protocol's header
/// timeout from acceptance (a stalled ClientHello is closed then, like a slow request head).
pub fn handshake_deadline(tls: Option<&ServerSession>, engine: &Engine) -> Option<Instant> {
    tls?.handshake_deadline(engine.header_timeout()?)
}

/// One non-blocking attempt to send all of `output` (shared bytes: an answer such as HTTP's
/// 408) to a connection about to close; how much went. Every engine answers this way.
pub fn answer_once(fd: RawFd, output: &Output) -> usize {
    let iov: Vec<std::io::IoSlice<'_>> =
        output.segments().iter().map(|s| std::io::IoSlice::new(Output::slice(s, &[]))).collect();
    sockscale_sys::send_vectored(fd, &iov).unwrap_or(0)
}

/// What a turn needs besides the connection: the thread's protocol kit, the buffer pool, the
/// counters and the limits.
pub struct TurnIo<'a> {
    pub kit: &'a mut Kit,
    pub pool: &'a BufferPool,
    pub counters: &'a Counters,
    pub limits: &'a Limits,
}

/// Everything the readiness loop and the thread engines keep for one connection between
/// events: the exchange, and how it is being waited for.
#[derive(Debug)]
pub struct Conn {
    pub fd: std::os::fd::OwnedFd,
    pub x: Exchange,
    /// The connection's authoritative timer entry (see `sockscale_sys::Timers`).
    pub timer_at: Option<Instant>,
    /// What the selector is currently watching for.
    pub registered: Interest,
    pub generation: u32,
}

impl Conn {
    pub fn new(fd: std::os::fd::OwnedFd, session: Session, now: Instant, generation: u32) -> Self {
        Conn { fd, x: Exchange::new(session, now), timer_at: None, registered: Interest::NONE, generation }
    }
}

#[cfg(test)]
mod size {
    /// An idle connection's whole user-space cost is its slab slot and a timer entry; the
    /// budget in docs/BENCHMARKS.md is 1 KiB per idle connection, measured, and this keeps the
    /// struct from creeping up unnoticed.
    #[test]
    fn conn_stays_small() {
        let size = std::mem::size_of::<super::Conn>();
        assert!(size <= 256, "Conn grew to {size} bytes");
    }
}
