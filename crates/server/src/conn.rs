//! One connection's state, and the write half of the path of a byte.
//!
//! Output from the protocol is written at once with one gathering `sendmsg`, straight from the
//! receive buffer for echo and from the shared pre-rendered bytes for HTTP. Only what the
//! socket refuses is kept, in the connection's [`OutQueue`]; its length is what the
//! `--max-pending-send` and `--send-timeout` policies watch.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use sockscale_proto::{Engine, Output, Protocol, Segment, Session};
use sockscale_sys::{self as sys, Interest};

use crate::body::BodyFile;
use crate::policy::{close_reason, ConnPolicy, Limits, Pending};
use crate::stats::CloseReason;

/// iovecs per `sendmsg`: enough for 16 pipelined responses several times over; larger outputs
/// are written in several calls.
const IOV_BATCH: usize = 64;

/// Bytes of a body file per `sendfile` call at most (nginx's `sendfile_max_chunk`). A flush
/// still goes on until the socket refuses more (edge-triggered readiness needs the EAGAIN),
/// which on loopback comes within a call or two, as the socket buffer fills.
pub const FILE_CHUNK: usize = 2 << 20;

/// One piece of queued output.
#[derive(Debug)]
enum Chunk {
    Bytes(Bytes),
    /// Bytes `at..end` of the body file, sent from the page cache.
    File {
        file: Arc<BodyFile>,
        at: u64,
        end: u64,
    },
}

/// Output the socket has not taken yet.
#[derive(Debug, Default)]
pub struct OutQueue {
    chunks: VecDeque<Chunk>,
    /// Bytes held in memory.
    len: usize,
    /// Bytes of the body file still to send.
    file_len: u64,
}

/// What a write attempt achieved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub bytes: usize,
    /// The socket refused more (EAGAIN or a short write): wait for writability.
    pub blocked: bool,
}

impl OutQueue {
    /// Bytes held in memory for the client.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the body file still to send.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    pub fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.chunks.push_back(Chunk::Bytes(bytes));
        }
    }

    fn push_file(&mut self, file: &Arc<BodyFile>, at: u64, end: u64) {
        if at < end {
            self.file_len += end - at;
            self.chunks.push_back(Chunk::File { file: file.clone(), at, end });
        }
    }

    /// Write queued output until the queue is empty or the socket refuses more.
    pub fn flush(&mut self, fd: RawFd) -> io::Result<Written> {
        let mut written = Written::default();
        loop {
            let step = match self.chunks.front_mut() {
                None => break,
                Some(Chunk::File { file, at, end }) => {
                    let want = usize::try_from(*end - *at).unwrap_or(usize::MAX).min(FILE_CHUNK);
                    match sys::sendfile(fd, file.as_raw_fd(), at, want) {
                        // The file ends before the length its head promised.
                        Ok(0) => return Err(file.shrunk(*at)),
                        Ok(n) => {
                            self.file_len -= n as u64;
                            if *at == *end {
                                self.chunks.pop_front();
                            }
                            Ok(n)
                        }
                        Err(e) => Err(e),
                    }
                }
                Some(Chunk::Bytes(_)) => self.write_bytes_run(fd),
            };
            match step {
                Ok(n) => written.bytes += n,
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

    /// One gathering send of the chunks in memory at the front of the queue, up to the first
    /// file chunk; with `MSG_MORE` when one follows, so a head goes out with its body.
    fn write_bytes_run(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut iov = [IoSlice::new(&[]); IOV_BATCH];
        let mut count = 0;
        let mut more = false;
        for chunk in &self.chunks {
            match chunk {
                Chunk::Bytes(bytes) if count < IOV_BATCH => {
                    iov[count] = IoSlice::new(bytes);
                    count += 1;
                }
                Chunk::Bytes(_) => break,
                Chunk::File { .. } => {
                    more = true;
                    break;
                }
            }
        }
        let n = sys::send_vectored_with(fd, &iov[..count], more)?;
        self.consume(n);
        Ok(n)
    }

    /// Drop `n` bytes written from the chunks in memory at the front.
    fn consume(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let Some(Chunk::Bytes(front)) = self.chunks.front_mut() else {
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

    /// Write `output`, whose input segments refer to `input` and file segments to `body`,
    /// behind anything already queued. Whatever the socket does not take is queued, copying
    /// input bytes (the receive buffer is about to go back to the pool) and sharing the rest.
    pub fn send(
        &mut self,
        fd: RawFd,
        output: &Output,
        input: &[u8],
        body: Option<&Arc<BodyFile>>,
    ) -> io::Result<Written> {
        let segments = output.segments();
        if output.has_file() {
            // A file that shrank gets no response rather than a short one.
            body.ok_or_else(no_body_file)?.check_whole()?;
        }
        if !self.is_empty() || output.has_file() {
            // A file body goes through the queue: its head with MSG_MORE, then sendfile.
            self.queue_from(segments, 0, 0, input, body)?;
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
                self.queue_from(segments, next, n, input, body)?;
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
        self.queue_from(std::slice::from_ref(segment), 0, n, input, None)?;
        let more = self.flush(fd)?;
        Ok(Written { bytes: n + more.bytes, blocked: more.blocked })
    }

    /// Queue `segments[first..]` minus their first `skip` bytes, which the socket took.
    fn queue_from(
        &mut self,
        segments: &[Segment],
        first: usize,
        mut skip: usize,
        input: &[u8],
        body: Option<&Arc<BodyFile>>,
    ) -> io::Result<()> {
        for segment in &segments[first..] {
            if let Segment::File(range) = segment {
                let file = body.ok_or_else(no_body_file)?;
                let skipped = range.start + skip as u64;
                skip = skip.saturating_sub(usize::try_from(range.end - range.start).unwrap_or(usize::MAX));
                self.push_file(file, skipped.min(range.end), range.end);
                continue;
            }
            let len = Output::slice(segment, input).len();
            if skip >= len {
                skip -= len;
                continue;
            }
            let bytes = match segment {
                Segment::Input(range) => Bytes::copy_from_slice(&input[range.start + skip..range.end]),
                Segment::Shared(shared) => shared.slice(skip..),
                Segment::File(_) => unreachable!("handled above"),
            };
            skip = 0;
            self.push(bytes);
        }
        Ok(())
    }
}

fn no_body_file() -> io::Error {
    io::Error::other("a file body was answered with no body file open")
}

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
        let w = queue.send(a.as_raw_fd(), &output, &input, None).unwrap();
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
        let w = queue.send(a.as_raw_fd(), &output, &input, None).unwrap();
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
        let w = queue.send(a.as_raw_fd(), &output, &[], None).unwrap();
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
