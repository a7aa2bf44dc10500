//! One connection's state, and the write half of the path of a byte.
//!
//! Output from the protocol is written at once with one gathering `sendmsg`, straight from the
//! receive buffer for echo and from the shared pre-rendered bytes for HTTP. Only what the
//! socket refuses is kept, in the connection's [`OutQueue`]; its length is what the
//! `--max-pending-send` and `--send-timeout` policies watch.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::time::Instant;

use bytes::{Buf, Bytes};
use sockscale_proto::{Engine, Output, Segment, Session};
use sockscale_sys::{self as sys, Interest};

use crate::policy::{close_reason, ConnPolicy, Limits, Pending};
use crate::stats::CloseReason;

/// iovecs per `sendmsg`: enough for 16 pipelined responses several times over; larger outputs
/// are written in several calls.
const IOV_BATCH: usize = 64;

/// Output the socket has not taken yet.
#[derive(Debug, Default)]
pub struct OutQueue {
    chunks: VecDeque<Bytes>,
    len: usize,
}

/// What a write attempt achieved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub bytes: usize,
    /// The socket refused more (EAGAIN or a short write): wait for writability.
    pub blocked: bool,
}

impl OutQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.chunks.push_back(bytes);
        }
    }

    /// Write queued output until the queue is empty or the socket refuses more.
    pub fn flush(&mut self, fd: RawFd) -> io::Result<Written> {
        let mut written = Written::default();
        while !self.chunks.is_empty() {
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let count = self.chunks.len().min(IOV_BATCH);
            for (slot, chunk) in iov.iter_mut().zip(&self.chunks) {
                *slot = IoSlice::new(chunk);
            }
            match sys::send_vectored(fd, &iov[..count]) {
                Ok(n) => {
                    written.bytes += n;
                    self.consume(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    written.blocked = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    fn consume(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if n >= front.len() {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }

    /// Write `output`, whose input segments refer to `input`, behind anything already queued.
    /// Whatever the socket does not take is queued, copying input bytes (the receive buffer is
    /// about to go back to the pool) and sharing the rest.
    pub fn send(&mut self, fd: RawFd, output: &Output, input: &[u8]) -> io::Result<Written> {
        let segments = output.segments();
        if !self.is_empty() {
            self.queue_from(segments, 0, 0, input);
            return self.flush(fd);
        }
        if let [only] = segments {
            // One response or one echo: no iovec array to build.
            return self.send_one(fd, only, input);
        }
        let mut written = Written::default();
        let mut next = 0;
        while next < segments.len() {
            let batch = &segments[next..segments.len().min(next + IOV_BATCH)];
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let mut want = 0;
            for (slot, segment) in iov.iter_mut().zip(batch) {
                *slot = IoSlice::new(Output::slice(segment, input));
                want += slot.len();
            }
            let n = loop {
                match sys::send_vectored(fd, &iov[..batch.len()]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            written.bytes += n;
            if n < want {
                self.queue_from(segments, next, n, input);
                // A short write means the socket buffer filled; confirm with the queue's own
                // flush, which stops only at EAGAIN, so edge-triggered readiness is re-armed.
                let more = self.flush(fd)?;
                written.bytes += more.bytes;
                written.blocked = more.blocked;
                return Ok(written);
            }
            next += batch.len();
        }
        Ok(written)
    }

    fn send_one(&mut self, fd: RawFd, segment: &Segment, input: &[u8]) -> io::Result<Written> {
        let bytes = Output::slice(segment, input);
        let n = loop {
            match sys::send(fd, bytes) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        if n == bytes.len() {
            return Ok(Written { bytes: n, blocked: false });
        }
        self.queue_from(std::slice::from_ref(segment), 0, n, input);
        let more = self.flush(fd)?;
        Ok(Written { bytes: n + more.bytes, blocked: more.blocked })
    }

    /// Queue `segments[first..]` minus their first `skip` bytes, which the socket took.
    fn queue_from(&mut self, segments: &[Segment], first: usize, mut skip: usize, input: &[u8]) {
        for segment in &segments[first..] {
            let len = Output::slice(segment, input).len();
            if skip >= len {
                skip -= len;
                continue;
            }
            let bytes = match segment {
                Segment::Input(range) => Bytes::copy_from_slice(&input[range.start + skip..range.end]),
                Segment::Shared(shared) => shared.slice(skip..),
            };
            skip = 0;
            self.push(bytes);
        }
    }
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
        Pending::bytes(self.out.len())
    }

    /// May the connection read now (readiness aside)?
    pub fn may_read(&self, limits: &Limits) -> bool {
        self.policy.may_read(self.pending(), self.session.is_between_requests(), limits)
    }

    /// Finished, and why (once the output is flushed).
    pub fn finished(&self) -> Option<CloseReason> {
        self.policy.finished(self.pending(), self.session.is_between_requests())
    }

    /// The server is draining: finish the exchange in progress, close at the next request
    /// boundary, and close whatever is left at `until`.
    pub fn begin_drain(&mut self, until: Instant) {
        self.session.finish_current();
        self.policy.begin_drain(until);
    }

    /// When a policy may next act on this connection.
    pub fn deadline(&self, engine: &Engine, limits: &Limits) -> Instant {
        self.policy.deadline(limits, engine.deadline(&self.session))
    }

    /// Feed `input`, read from `fd` at `now`, to the protocol and write its answer at once,
    /// straight from the input; what the socket refuses is queued. None when the protocol had
    /// nothing to say.
    pub fn feed(
        &mut self,
        fd: RawFd,
        engine: &mut Engine,
        scratch: &mut Output,
        input: &[u8],
        now: Instant,
    ) -> io::Result<Option<Written>> {
        self.policy.on_received(now);
        scratch.clear();
        let verdict = engine.on_input(&mut self.session, input, now, scratch);
        let written = if scratch.is_empty() { None } else { Some(self.out.send(fd, scratch, input)?) };
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
    pub fn expire(
        &mut self,
        fd: RawFd,
        engine: &mut Engine,
        scratch: &mut Output,
        now: Instant,
        limits: &Limits,
    ) -> Option<(CloseReason, usize)> {
        let protocol_due = engine.deadline(&self.session).is_some_and(|at| at <= now);
        let expired = self.policy.expired(now, limits, protocol_due)?;
        let mut sent = 0;
        if expired.answer {
            scratch.clear();
            engine.on_timeout(&mut self.session, now, scratch);
            sent = self.out.send(fd, scratch, &[]).map_or(0, |w| w.bytes);
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
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn read_all(s: &mut UnixStream) -> Vec<u8> {
        use std::io::Read;
        let mut all = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        all
    }

    #[test]
    fn send_queues_exactly_what_the_socket_refused() {
        let (a, mut b) = pair();
        let input: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
        let mut output = Output::default();
        output.push_shared(Bytes::from_static(b"head:"));
        output.push_input(0..input.len());
        let mut queue = OutQueue::default();
        let w = queue.send(a.as_raw_fd(), &output, &input).unwrap();
        assert!(w.blocked, "4 MiB does not fit a unix socket buffer");
        assert_eq!(w.bytes + queue.len(), 5 + input.len());
        let mut received = read_all(&mut b);
        while !queue.is_empty() {
            queue.flush(a.as_raw_fd()).unwrap();
            received.extend(read_all(&mut b));
        }
        assert_eq!(&received[..5], b"head:");
        assert_eq!(&received[5..], &input[..]);
    }

    #[test]
    fn single_segment_short_write_queues_the_rest() {
        let (a, mut b) = pair();
        let input: Vec<u8> = (0..4 << 20).map(|i| (i % 253) as u8).collect();
        let mut output = Output::default();
        output.push_input(0..input.len());
        let mut queue = OutQueue::default();
        let w = queue.send(a.as_raw_fd(), &output, &input).unwrap();
        assert!(w.blocked);
        assert_eq!(w.bytes + queue.len(), input.len());
        let mut received = read_all(&mut b);
        while !queue.is_empty() {
            queue.flush(a.as_raw_fd()).unwrap();
            received.extend(read_all(&mut b));
        }
        assert_eq!(received, input);
    }

    #[test]
    fn many_segments_are_written_in_batches_in_order() {
        let (a, mut b) = pair();
        let mut output = Output::default();
        for i in 0..200u8 {
            output.push_shared(Bytes::from(vec![i; 3]));
        }
        let mut queue = OutQueue::default();
        let w = queue.send(a.as_raw_fd(), &output, &[]).unwrap();
        assert_eq!(w, Written { bytes: 600, blocked: false });
        let expected: Vec<u8> = (0..200u8).flat_map(|i| [i; 3]).collect();
        assert_eq!(read_all(&mut b), expected);
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
