//! One connection's state: the exchange with its client (protocol session, output queue,
//! policy) as the engines that write at once keep it, and the thread's protocol kit. The write
//! half of the path of a byte is `out.rs`.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use sockscale_proto::{Engine, Output, Protocol, Session};
use sockscale_sys::Interest;

use crate::body::BodyFile;
pub use crate::out::{OutQueue, Written};
use crate::policy::CloseReason;
use crate::policy::{close_reason, ConnPolicy, Limits, Pending};

/// A thread's protocol engine, the output it writes into, and the body file its responses may
/// name: what a thread needs to answer input.
#[derive(Debug)]
pub struct Kit {
    pub engine: Engine,
    pub scratch: Output,
    pub body: Option<Arc<BodyFile>>,
}

impl Kit {
    pub fn new(protocol: &Protocol, body: Option<&Arc<BodyFile>>) -> Self {
        Kit { engine: protocol.engine(unix_now()), scratch: Output::default(), body: body.cloned() }
    }

    /// Bring HTTP's pre-rendered responses to the current second (a no-op within a second).
    pub fn tick(&mut self) {
        self.engine.tick(unix_now());
    }
}

fn unix_now() -> u64 {
    sockscale_proto::http::unix_secs(std::time::SystemTime::now())
}

/// The close reason for a socket error (the policy's one table), logged when it is not the
/// peer's doing.
pub fn closed_by_error(err: &io::Error) -> CloseReason {
    let reason = close_reason(err);
    if reason == CloseReason::Error {
        tracing::debug!(error = %err, "closing a connection after a socket error");
    }
    reason
}

/// A connection's exchange with its client, as every engine that writes at once keeps it (the
/// readiness loop, the thread engines, tokio): the protocol session, the output the socket has
/// not taken, and the connection's policy. It feeds input to the protocol, writes the answer,
/// and asks the policy what follows; the engine around it only waits and carries out.
#[derive(Debug)]
pub struct Exchange {
    pub session: Session,
    pub out: OutQueue,
    pub policy: ConnPolicy,
}

impl Exchange {
    pub fn new(session: Session, now: Instant) -> Self {
        Exchange { session, out: OutQueue::default(), policy: ConnPolicy::new(now) }
    }

    /// The output waiting for the client, as the policy counts it.
    pub fn pending(&self) -> Pending {
        Pending { bytes: self.out.len(), sends: 0, file_bytes: self.out.file_len() }
    }

    /// May the connection read now (readiness aside)?
    pub fn may_read(&self, limits: &Limits) -> bool {
        self.policy.may_read(self.pending(), self.session.is_between_requests(), limits)
    }

    /// Finished, and why (once the output is flushed).
    pub fn finished(&self) -> Option<CloseReason> {
        self.policy.finished(self.pending(), self.session.is_between_requests())
    }

    /// The server is draining from `now`: finish the exchange in progress, including a request
    /// the kernel holds unread on `fd` (see [`ConnPolicy::begin_drain`]), close at the next
    /// request boundary, and close whatever is left at `until`.
    pub fn begin_drain(&mut self, fd: RawFd, now: Instant, until: Instant) {
        self.session.finish_current();
        let unread = sockscale_sys::unread_bytes(fd).is_ok_and(|n| n > 0);
        self.policy.begin_drain(now, until, unread);
    }

    /// When a policy may next act on this connection.
    pub fn deadline(&self, engine: &Engine, limits: &Limits) -> Instant {
        self.policy.deadline(limits, engine.deadline(&self.session))
    }

    /// Feed `input`, read from `fd` at `now`, to the protocol and write its answer at once,
    /// straight from the input; what the socket refuses is queued. None when the protocol had
    /// nothing to say.
    pub fn feed(&mut self, fd: RawFd, kit: &mut Kit, input: &[u8], now: Instant) -> io::Result<Option<Written>> {
        self.policy.on_received(now);
        kit.scratch.clear();
        let verdict = kit.engine.on_input(&mut self.session, input, now, &mut kit.scratch);
        let written = if kit.scratch.is_empty() {
            None
        } else {
            Some(self.out.send(fd, &kit.scratch, input, kit.body.as_ref())?)
        };
        self.policy.on_verdict(verdict);
        Ok(written)
    }

    /// Write queued output at `now`.
    pub fn flush(&mut self, fd: RawFd, now: Instant) -> io::Result<Written> {
        let written = self.out.flush(fd)?;
        self.policy.on_sent(now, written.bytes);
        Ok(written)
    }

    /// After I/O: the reason to close if the connection is finished, or else Ok(whether the
    /// output just came back under its caps, so that input left unread should be read now).
    pub fn settle(&mut self, now: Instant, progressed: bool, limits: &Limits) -> Result<bool, CloseReason> {
        if let Some(reason) = self.finished() {
            return Err(reason);
        }
        Ok(self.policy.account(now, self.pending(), progressed, limits))
    }

    /// The connection's timer came due at `now`: the reason to close if a deadline expired
    /// (None: re-arm), and the bytes sent first. A protocol deadline gets the protocol's answer
    /// (HTTP's 408), with one non-blocking attempt to send it; the connection closes either way.
    pub fn expire(&mut self, fd: RawFd, kit: &mut Kit, now: Instant, limits: &Limits) -> Option<(CloseReason, usize)> {
        let protocol_due = kit.engine.deadline(&self.session).is_some_and(|at| at <= now);
        let expired = self.policy.expired(now, limits, protocol_due)?;
        let mut sent = 0;
        if expired.answer {
            kit.scratch.clear();
            kit.engine.on_timeout(&mut self.session, now, &mut kit.scratch);
            sent = self.out.send(fd, &kit.scratch, &[], None).map_or(0, |w| w.bytes);
        }
        Some((expired.reason, sent))
    }
}

/// Everything the readiness loop and the thread engines keep for one connection between
/// events: the exchange, and how it is being waited for.
#[derive(Debug)]
pub struct Conn {
    pub fd: std::os::fd::OwnedFd,
    pub x: Exchange,
    /// The connection's authoritative timer entry (see `sockscale_sys::Timers`).
    pub timer_at: Option<Instant>,
    /// Readiness as last reported and not yet consumed (edge-triggered selectors report it
    /// once).
    pub readable: bool,
    pub writable: bool,
    /// The selector reported an error or a hang-up (RST, FIN). An edge-triggered selector will
    /// not report it again, and a reset or FIN that arrived together with data is only seen
    /// after the data is read, so from now on a short read is not taken to mean the socket is
    /// drained: reading goes on until EOF, an error or EAGAIN.
    pub hangup: bool,
    /// What the selector is currently watching for.
    pub registered: Interest,
    pub generation: u32,
}

impl Conn {
    pub fn new(fd: std::os::fd::OwnedFd, session: Session, now: Instant, generation: u32) -> Self {
        Conn {
            fd,
            x: Exchange::new(session, now),
            timer_at: None,
            readable: true,
            writable: true,
            hangup: false,
            registered: Interest::NONE,
            generation,
        }
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
