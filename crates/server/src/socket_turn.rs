//! The engines that write at once carrying out a connection (`connection::Connection`, which
//! decides) on a socket: a turn, a blocking send, the end of a socket ([`end`]); and the
//! thread's protocol kit. The write half of the path of a byte is `out.rs`.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use sockscale_proto::{Output, Protocol, Responder, Session};
use sockscale_sys::{Ending, Interest};

use crate::admission::Refusal;
use crate::body::{BodyFile, Seal};
use crate::clock::unix_now;
use crate::connection::ThreadTools;
pub use crate::connection::{Close, Connection, TlsScratch};
pub use crate::out::{OutQueue, Written};
pub use crate::policy::closed_by_error;
use crate::policy::{Action, Delivery, Fed, Limits, Wait};
use crate::pool::BufferPool;
use crate::resources::Resources;
use crate::stats::Counters;

/// A thread's protocol engine, the output it writes into, its TLS scratch buffers, and the
/// server's loaded files (the body file its responses may name, the TLS configuration): what
/// a thread needs to answer input.
#[derive(Debug)]
pub struct ThreadState {
    pub responder: Responder,
    pub scratch: Output,
    pub tls_scratch: TlsScratch,
    /// The server's, shared: one for the process, not a copy per thread.
    pub resources: Arc<Resources>,
}

impl ThreadState {
    pub fn new(protocol: &Protocol, resources: &Arc<Resources>) -> Self {
        ThreadState {
            responder: protocol.responder(unix_now()),
            scratch: Output::default(),
            tls_scratch: TlsScratch::default(),
            resources: resources.clone(),
        }
    }

    /// The thread's tools, for a connection to work with.
    pub fn tools<'a>(&'a mut self, counters: &'a Counters) -> ThreadTools<'a> {
        ThreadTools {
            responder: &mut self.responder,
            scratch: &mut self.scratch,
            buffers: &mut self.tls_scratch,
            body: self.resources.body.as_ref(),
            counters,
        }
    }

    /// A connection accepted at `now` on this thread, whose input the engine reads when told
    /// to, or the refusal to carry out instead (see [`Connection::open`]).
    pub fn open(&mut self, now: Instant, counters: &Counters) -> Result<Connection, Refusal<'static>> {
        Connection::pulled(self.responder.new_session(), now, &self.resources, counters)
    }

    /// Bring HTTP's pre-rendered responses to the current second (a no-op within a second).
    pub fn tick(&mut self) {
        self.responder.tick(unix_now());
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turned {
    /// Close the connection as this says: carry it out with [`end`].
    Close(Close),
    /// Wait as the lifecycle says. `input`: bytes from the client arrived this turn (the
    /// active set hears of it).
    Wait { wait: Wait, input: bool },
}

/// Carrying out a [`Connection`] on a socket, for every engine that writes at once (the
/// readiness loop, the thread engines, tokio): the connection decides, these only move its
/// bytes.
impl Connection {
    /// A connection accepted at `now` whose input the engine reads when told to, in TLS when
    /// the server speaks it; or the refusal to carry out instead (see [`Connection::open`]).
    pub fn pulled(
        session: Session,
        now: Instant,
        resources: &Resources,
        counters: &Counters,
    ) -> Result<Self, Refusal<'static>> {
        Connection::open(session, now, Delivery::Pulled, OutQueue::default(), resources.tls.as_ref(), counters)
    }

    /// The server is draining from `now`: see [`crate::policy::Lifecycle::begin_drain`]; a request the kernel
    /// holds unread on `fd` (FIONREAD) was sent before the drain.
    pub fn begin_drain(&mut self, fd: RawFd, now: Instant, until: Instant) {
        let unread = sockscale_sys::unread_bytes(fd).is_ok_and(|n| n > 0);
        self.lc.begin_drain(now, until, unread);
    }

    /// The connection's timer came due at `now`: the close to carry out ([`end`]) if a
    /// deadline expired (None: take a turn to re-arm).
    pub fn expire(
        &mut self,
        kit: &mut ThreadState,
        counters: &Counters,
        now: Instant,
        limits: &Limits,
    ) -> Option<Close> {
        self.on_timer(now, &mut kit.tools(counters), limits)
    }

    /// One turn: carry out the lifecycle's actions on `socket` until it says to wait or to
    /// close. A pool buffer is taken only when the lifecycle asks for a read, and given back
    /// before returning.
    pub fn turn(&mut self, socket: &mut impl Socket, io: &mut TurnIo<'_>, now: Instant) -> Turned {
        let mut buf = None;
        let mut input = false;
        loop {
            match self.poll(now, &io.kit.responder, io.limits) {
                Action::Close(reason) => return Turned::Close(self.close(reason)),
                Action::Wait(wait) => return Turned::Wait { wait, input },
                Action::Transmit => {
                    let kit = &mut *io.kit;
                    let sent = match self.transmit(now, &mut kit.tools(io.counters)) {
                        Ok(Fed::Send) => socket.send(&mut self.out, &kit.scratch, &[], kit.resources.body.as_ref()),
                        Ok(Fed::Queued) => {
                            let (out, mut seal) = self.out_and_seal(&mut kit.tls_scratch.file);
                            socket.flush(out, seal.as_mut())
                        }
                        Ok(_) => continue,
                        Err(close) => return Turned::Close(close),
                    };
                    match sent {
                        Ok(written) => {
                            io.counters.written(&written);
                            self.lc.on_written(now, written);
                        }
                        Err(e) => return Turned::Close(self.failed(&e)),
                    }
                }
                Action::Flush => {
                    if let Err(close) = self.flush_queue(socket, io, now) {
                        return Turned::Close(close);
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
                        Ok(n) => {
                            io.counters.bytes_in(n);
                            let kit = &mut *io.kit;
                            let fed = match self.receive(&mut buf[..n], want, now, &mut kit.tools(io.counters)) {
                                Ok(fed) => fed,
                                Err(close) => return Turned::Close(close),
                            };
                            input |= fed.counted();
                            if fed == Fed::Send {
                                match socket.send(&mut self.out, &kit.scratch, &buf[..n], kit.resources.body.as_ref()) {
                                    Ok(written) => {
                                        io.counters.written(&written);
                                        self.lc.on_written(now, written);
                                    }
                                    Err(e) => return Turned::Close(self.failed(&e)),
                                }
                            } else if !self.out.is_empty() {
                                // The handshake's flight and the answer's records go at once.
                                if let Err(close) = self.flush_queue(socket, io, now) {
                                    return Turned::Close(close);
                                }
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.lc.on_drained(),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Turned::Close(self.failed(&e)),
                    }
                }
            }
        }
    }

    /// A read or a write failed: the close for it (the policy's one table).
    fn failed(&mut self, err: &io::Error) -> Close {
        let reason = self.lc.on_failed(err);
        self.close(reason)
    }

    /// Write what the queue holds (a TLS connection's file ranges and plaintext sealed as they
    /// go) and tell the lifecycle what was written. Err: close. Inlined in both callers, as the
    /// code was before it became a method: it is on every HTTPS request's path.
    #[inline(always)]
    fn flush_queue(&mut self, socket: &mut impl Socket, io: &mut TurnIo<'_>, now: Instant) -> Result<(), Close> {
        let (out, mut seal) = self.out_and_seal(&mut io.kit.tls_scratch.file);
        match socket.flush(out, seal.as_mut()) {
            Ok(written) => {
                io.counters.written(&written);
                self.lc.on_written(now, written);
                Ok(())
            }
            Err(e) => Err(self.failed(&e)),
        }
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
        let (out, mut seal) = self.out_and_seal(&mut scratch.file);
        let written = out.flush(fd, seal.as_mut())?;
        let pending = self.pending();
        self.lc.account_written(now, written, pending, limits);
        Ok(written)
    }
}

/// Carry out `close` on connection `x`'s socket `fd`, whose owner closes it right after: the
/// one way an engine that writes at once ends a connection. An orderly close first gets one
/// attempt to flush what is queued; its last bytes follow only behind a queue that emptied;
/// then the socket ends as the close says (`sockscale_sys::end_socket`).
pub fn end(fd: RawFd, x: &mut Connection, close: &Close, scratch: &mut TlsScratch, counters: &Counters) {
    if close.ending == Ending::Orderly && !x.out.is_empty() {
        let (out, mut seal) = x.out_and_seal(&mut scratch.file);
        if let Ok(written) = out.flush(fd, seal.as_mut()) {
            counters.written(&written);
        }
    }
    let sent = sockscale_sys::end_socket(fd, close.last_behind(x.out.is_empty()), close.ending);
    counters.bytes_out(sent);
}

/// What a turn needs besides the connection: the thread's protocol kit, the buffer pool, the
/// counters and the limits.
pub struct TurnIo<'a> {
    pub kit: &'a mut ThreadState,
    pub pool: &'a BufferPool,
    pub counters: &'a Counters,
    pub limits: &'a Limits,
}

/// Everything the readiness loop and the thread engines keep for one connection between
/// events: the exchange, and how it is being waited for.
#[derive(Debug)]
pub struct Conn {
    pub fd: std::os::fd::OwnedFd,
    pub x: Connection,
    /// The connection's authoritative timer entry (see `sockscale_sys::Timers`).
    pub timer_at: Option<Instant>,
    /// What the selector is currently watching for.
    pub registered: Interest,
    pub generation: u32,
}

impl Conn {
    /// Connection `x` (see [`Connection::pulled`]) on socket `fd`.
    pub fn new(fd: std::os::fd::OwnedFd, x: Connection, generation: u32) -> Self {
        Conn { fd, x, timer_at: None, registered: Interest::NONE, generation }
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
