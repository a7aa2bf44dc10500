//! One connection's state, and the write half of the path of a byte.
//!
//! Output from the protocol is written at once with one gathering `sendmsg`, straight from the
//! receive buffer for echo and from the shared pre-rendered bytes for HTTP. Only what the
//! socket refuses is kept, in the connection's [`OutQueue`]; its length is what the
//! `--max-pending-send` and `--send-timeout` policies watch.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use sockscale_proto::{Output, Segment, Session};
use sockscale_sys::{self as sys, Interest};

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

/// `t + d`, capped far in the future instead of overflowing: a user may well ask for an idle
/// timeout of a century.
pub fn after(t: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    t.checked_add(d.min(CENTURY)).unwrap_or(t)
}

/// The clocks of the per-connection policies, which every model keeps for every connection:
/// idle (`--idle-timeout` without traffic either way), flood (output over a cap for
/// `--send-timeout`) and stall (output the socket takes none of for `--send-timeout`). Models
/// differ in how they wait and write, never in these rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    /// Last time bytes moved either way.
    last_activity: Instant,
    /// When the pending output went over its cap.
    over_since: Option<Instant>,
    /// Since when output has been pending without the socket taking any of it.
    stalled_since: Option<Instant>,
}

impl Clocks {
    pub fn new(now: Instant) -> Self {
        Clocks { last_activity: now, over_since: None, stalled_since: None }
    }

    /// Bytes moved.
    pub fn touch(&mut self, now: Instant) {
        self.last_activity = now;
    }

    /// After I/O: `pending` bytes wait for the client, `over` says they are past a cap (stop
    /// reading), `progressed` that the socket took some output this time.
    pub fn account(&mut self, now: Instant, pending: usize, over: bool, progressed: bool) {
        if pending == 0 {
            self.stalled_since = None;
        } else if progressed || self.stalled_since.is_none() {
            self.stalled_since = Some(now);
        }
        if over {
            self.over_since.get_or_insert(now);
        } else {
            self.over_since = None;
        }
    }

    /// Output is over its cap: the connection must not be read.
    pub fn is_over(&self) -> bool {
        self.over_since.is_some()
    }

    /// The next instant a policy may act, given the protocol's own deadline (HTTP's header
    /// timeout).
    pub fn deadline(&self, idle: Duration, send: Duration, protocol: Option<Instant>) -> Instant {
        [protocol, self.over_since.map(|t| after(t, send)), self.stalled_since.map(|t| after(t, send))]
            .into_iter()
            .flatten()
            .fold(after(self.last_activity, idle), Instant::min)
    }

    /// The policy that has expired at `now`, if any, in the order every model applies them:
    /// flood, stall, the protocol's deadline (`protocol_due`), idle. A HeaderTimeout verdict
    /// leaves the 408 to the caller, which knows how to write.
    pub fn expired(&self, now: Instant, idle: Duration, send: Duration, protocol_due: bool) -> Option<CloseReason> {
        let due = |since: Option<Instant>| since.is_some_and(|t| after(t, send) <= now);
        if due(self.over_since) {
            Some(CloseReason::Flood)
        } else if due(self.stalled_since) {
            Some(CloseReason::SendTimeout)
        } else if protocol_due {
            Some(CloseReason::HeaderTimeout)
        } else if after(self.last_activity, idle) <= now {
            Some(CloseReason::Idle)
        } else {
            None
        }
    }
}

/// Everything the server keeps for one connection between events.
#[derive(Debug)]
pub struct Conn {
    pub fd: std::os::fd::OwnedFd,
    pub session: Session,
    pub out: OutQueue,
    pub clocks: Clocks,
    /// The connection's authoritative timer entry (see `timers`).
    pub timer_at: Option<Instant>,
    /// Close once the output is flushed.
    pub closing: Option<CloseReason>,
    /// Readiness as last reported and not yet consumed (edge-triggered selectors report it
    /// once).
    pub readable: bool,
    pub writable: bool,
    /// The peer sent FIN.
    pub read_eof: bool,
    /// The selector reported an error or a hang-up (RST, FIN). An edge-triggered selector will
    /// not report it again, and a reset or FIN that arrived together with data is only seen
    /// after the data is read, so from now on a short read is not taken to mean the socket is
    /// drained: reading goes on until EOF, an error or EAGAIN.
    pub hangup: bool,
    /// What a level-triggered selector is currently watching for.
    pub registered: Interest,
    pub generation: u32,
}

/// With its output flushed, is a connection finished, and why? The protocol ended it
/// (`closing`), the peer sent FIN, or a drain found it between requests. Every model decides by
/// this one rule.
pub fn finished_reason(
    closing: Option<CloseReason>,
    read_eof: bool,
    draining: bool,
    between_requests: bool,
) -> Option<CloseReason> {
    closing.or(if read_eof {
        Some(CloseReason::Peer)
    } else if draining && between_requests {
        Some(CloseReason::Shutdown)
    } else {
        None
    })
}

impl Conn {
    /// Finished, and why: [`finished_reason`] once all output is flushed.
    pub fn finished(&self, draining: bool) -> Option<CloseReason> {
        if !self.out.is_empty() {
            return None;
        }
        finished_reason(self.closing, self.read_eof, draining, self.session.is_between_requests())
    }

    pub fn new(fd: std::os::fd::OwnedFd, session: Session, now: Instant, generation: u32) -> Self {
        Conn {
            fd,
            session,
            out: OutQueue::default(),
            clocks: Clocks::new(now),
            timer_at: None,
            closing: None,
            readable: true,
            writable: true,
            read_eof: false,
            hangup: false,
            registered: Interest::NONE,
            generation,
        }
    }

    /// Update the clocks after I/O, with `--max-pending-send` as the cap.
    pub fn account_output(&mut self, now: Instant, max_pending: usize, progressed: bool) {
        self.clocks.account(now, self.out.len(), self.out.len() > max_pending, progressed);
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

    #[test]
    fn flood_and_stall_clocks() {
        let t0 = Instant::now();
        let mut clocks = Clocks::new(t0);
        clocks.account(t0, 10, true, false);
        assert!(clocks.is_over());
        let t1 = t0 + Duration::from_secs(1);
        clocks.account(t1, 10, true, true);
        let (idle, send) = (Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(clocks.deadline(idle, send, None), t0 + send, "flood counts from t0; progress moved only the stall");
        assert_eq!(clocks.expired(t0 + send, idle, send, false), Some(CloseReason::Flood));
        clocks.account(t1, 10, false, false);
        assert_eq!(clocks.expired(t1 + send, idle, send, false), Some(CloseReason::SendTimeout));
        assert_eq!(clocks.expired(t1, idle, send, true), Some(CloseReason::HeaderTimeout));
        clocks.account(t1, 0, false, false);
        assert_eq!(clocks.expired(t0 + idle, idle, send, false), Some(CloseReason::Idle));
        assert_eq!(clocks.expired(t1, idle, send, false), None);
    }

    #[test]
    fn huge_timeouts_do_not_overflow() {
        let clocks = Clocks::new(Instant::now());
        let forever = Duration::from_secs(u64::MAX);
        assert!(clocks.deadline(forever, forever, None) > Instant::now() + Duration::from_secs(3600));
        assert_eq!(clocks.expired(Instant::now(), forever, forever, false), None);
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
