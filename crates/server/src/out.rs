//! The write half of the path of a byte.
//!
//! Output from the protocol is written at once with one gathering `sendmsg`, straight from the
//! receive buffer for echo and from the shared pre-rendered bytes for HTTP; a body file's range
//! goes with `sendfile` behind its head. Only what the socket refuses is kept, in the
//! connection's [`OutQueue`]; its length is what the `--max-pending-send` and `--send-timeout`
//! policies watch.
//!
//! A TLS connection queues its records (encrypted as they are produced), a body file range to
//! be sealed a chunk at a time as the socket takes it ([`BodyFile::turn`] with the session), and
//! behind such a range, plaintext that is encrypted only when it reaches the front.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use sockscale_proto::{Output, Segment};
use sockscale_sys as sys;

use crate::body::{no_body_file, no_session, seal_behind, BodyFile, FileRange, FileStep, Seal, FILE_CHUNK};
pub use crate::policy::Written;

/// iovecs per `sendmsg`: enough for 16 pipelined responses several times over; larger outputs
/// are written in several calls.
const IOV_BATCH: usize = 64;

/// One piece of queued output.
#[derive(Debug)]
enum Chunk {
    Bytes(Bytes),
    /// A range of the body file: sent from the page cache, or, `sealed`, read and encrypted a
    /// chunk at a time (TLS).
    File {
        file: Arc<BodyFile>,
        range: FileRange,
        sealed: bool,
    },
    /// TLS plaintext behind a sealed file range, encrypted when it reaches the front.
    Clear(Bytes),
}

/// Output the socket has not taken yet.
#[derive(Debug, Default)]
pub struct OutQueue {
    chunks: VecDeque<Chunk>,
    /// Bytes held in memory (records of a file chunk apart).
    len: usize,
    /// Bytes of the body file still to send, with the records of a sealed chunk the socket
    /// refused (at most one chunk's: they stop reading like the file's bytes, and are no flood).
    file_len: u64,
}

impl OutQueue {
    /// Bytes held in memory for the client.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the body file still to send (and of its sealed records held).
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

    fn push_file(&mut self, file: &Arc<BodyFile>, at: u64, end: u64, sealed: bool) {
        if at < end {
            self.file_len += end - at;
            self.chunks.push_back(Chunk::File { file: file.clone(), range: FileRange::new(at, end), sealed });
        }
    }

    /// Queue bytes `range` of the body file for a TLS connection: read and encrypted a chunk
    /// at a time as the socket takes them, never sent in clear.
    pub fn push_sealed_file(&mut self, file: &Arc<BodyFile>, range: std::ops::Range<u64>) {
        self.push_file(file, range.start, range.end, true);
    }

    /// Queue TLS plaintext, to be encrypted when it reaches the front (it follows a sealed
    /// file range, whose records must go first).
    pub fn push_clear(&mut self, plain: Bytes) {
        if !plain.is_empty() {
            self.len += plain.len();
            self.chunks.push_back(Chunk::Clear(plain));
        }
    }

    /// Write queued output until the queue is empty, the socket refuses more, or a body
    /// file's turn is sent ([`Written::yielded`]). `seal`: a TLS connection's session and the
    /// thread's scratch, which its file ranges and plaintext are encrypted with.
    pub fn flush(&mut self, fd: RawFd, mut seal: Option<&mut Seal<'_>>) -> io::Result<Written> {
        let mut written = Written::default();
        let mut file_sent = 0;
        while let Some(chunk) = self.chunks.front_mut() {
            let (file, range, sealed) = match chunk {
                Chunk::Bytes(_) => {
                    match self.write_bytes_run(fd) {
                        Ok(n) => written.bytes += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            written.blocked = true;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                Chunk::Clear(plain) => {
                    let seal = seal.as_deref_mut().ok_or_else(no_session)?;
                    let records = seal_behind(seal.session, plain)?;
                    self.len = self.len - plain.len() + records.len();
                    *chunk = Chunk::Bytes(records);
                    continue;
                }
                Chunk::File { file, range, sealed } => (file, range, *sealed),
            };
            if file_sent >= FILE_CHUNK {
                written.yielded = true;
                break;
            }
            let seal = match seal.as_deref_mut() {
                Some(seal) if sealed => Some(seal),
                None if sealed => return Err(no_session()),
                _ => None,
            };
            let owed = range.owed();
            let turn = file.turn(fd, range, seal, FILE_CHUNK - file_sent)?;
            self.file_len = self.file_len - owed + range.owed();
            let n = usize::try_from(turn.file).unwrap_or(usize::MAX);
            file_sent += n;
            written.bytes += turn.sent;
            if sealed {
                written.sealed += turn.file;
            }
            match turn.step {
                FileStep::Done => {
                    self.chunks.pop_front();
                }
                FileStep::Blocked => {
                    written.blocked = true;
                    break;
                }
                FileStep::Turn => {
                    written.yielded = true;
                    break;
                }
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
                Chunk::File { .. } | Chunk::Clear(_) => {
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
        BodyFile::check_output(output, body)?;
        if !self.is_empty() || output.has_file() {
            // A file body goes through the queue: its head with MSG_MORE, then sendfile.
            self.queue_from(segments, 0, 0, input, body)?;
            return self.flush(fd, None);
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
                // flush, which stops at EAGAIN (edge-triggered readiness is then re-armed) or
                // at a body file's turn (`yielded`, for the engine to resume).
                let more = self.flush(fd, None)?;
                return Ok(Written { bytes: written.bytes + more.bytes, ..more });
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
            return Ok(Written { bytes: n, ..Written::default() });
        }
        self.queue_from(std::slice::from_ref(segment), 0, n, input, None)?;
        let more = self.flush(fd, None)?;
        Ok(Written { bytes: n + more.bytes, ..more })
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
                self.push_file(file, skipped.min(range.end), range.end, false);
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
            queue.flush(a.as_raw_fd(), None).unwrap();
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
            queue.flush(a.as_raw_fd(), None).unwrap();
            received.extend(read_all(&mut b));
        }
        assert_eq!(received, input);
    }

    /// A client that takes every byte as fast as it comes never makes the socket refuse, so
    /// only the turn ends a flush of a long body: one chunk a turn, and the bytes in order.
    /// Written to a regular file, which never refuses (sendfile takes any output file; a head
    /// would need a socket, so the body goes alone).
    #[test]
    fn a_body_file_is_sent_one_chunk_a_turn_to_a_peer_that_never_refuses() {
        use std::io::Write;
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        let (src, dst) = (dir.join(format!("sockscale-turn-src-{pid}")), dir.join(format!("sockscale-turn-dst-{pid}")));
        let len = 2 * FILE_CHUNK + 12_345;
        let content: Vec<u8> = (0..len).map(|i| (i % 241) as u8).collect();
        std::fs::File::create(&src).unwrap().write_all(&content).unwrap();
        let mode = crate::body::SendfileMode::On;
        let (_, file) = BodyFile::load(&src, mode, 0, 1).unwrap();
        let file = Arc::new(file.expect("sent from the file"));
        let out = std::fs::File::create(&dst).unwrap();
        let mut output = Output::default();
        output.push_file(0..len as u64);
        let mut queue = OutQueue::default();
        let first = queue.send(out.as_raw_fd(), &output, &[], Some(&file)).unwrap();
        assert_eq!((first.bytes, first.blocked, first.yielded), (FILE_CHUNK, false, true), "{first:?}");
        let second = queue.flush(out.as_raw_fd(), None).unwrap();
        assert_eq!((second.bytes, second.yielded), (FILE_CHUNK, true), "{second:?}");
        let last = queue.flush(out.as_raw_fd(), None).unwrap();
        assert_eq!((last.bytes, last.yielded), (12_345, false), "{last:?}");
        assert!(queue.is_empty());
        let written = std::fs::read(&dst).unwrap();
        let _ = (std::fs::remove_file(&src), std::fs::remove_file(&dst));
        assert!(written == content, "the body arrived whole and in order");
    }

    /// A TLS connection's queue: a head's records, a body file range sealed a chunk at a time
    /// as the socket takes it, and a pipelined answer behind it, encrypted only once the range
    /// is (records go out in the order they are sealed). Over a socket pair with a reader that
    /// keeps up: no flush seals more than a turn of the file, the records held between flushes
    /// are at most one chunk's, and the client decrypts head, file and tail in order.
    #[test]
    fn a_sealed_body_file_goes_through_the_queue_in_bounded_turns() {
        use crate::body::{tls_pair, FileScratch, Seal, SEAL_CHUNK};
        use std::io::{Read, Write};
        let dir = std::env::temp_dir();
        let src = dir.join(format!("sockscale-sealed-src-{}", std::process::id()));
        let len = 2 * FILE_CHUNK + 12_345;
        let content: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&src).unwrap().write_all(&content).unwrap();
        let (_, file) = BodyFile::load(&src, crate::body::SendfileMode::On, 0, 1).unwrap();
        let file = Arc::new(file.expect("sent from the file"));
        let (mut session, mut client) = tls_pair::new();
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            b.read_to_end(&mut all).unwrap();
            all
        });
        let mut queue = OutQueue::default();
        let mut head = Vec::new();
        session.send(b"head;", &mut head).unwrap();
        queue.push(Bytes::from(head));
        queue.push_sealed_file(&file, 0..len as u64);
        queue.push_clear(Bytes::from_static(b";tail"));
        let mut scratch = FileScratch::default();
        let (mut sealed, mut flushes) = (0u64, 0);
        while !queue.is_empty() {
            let w =
                queue.flush(a.as_raw_fd(), Some(&mut Seal { session: &mut session, scratch: &mut scratch })).unwrap();
            flushes += 1;
            assert!(w.sealed <= FILE_CHUNK as u64, "one flush sealed {} bytes of the file", w.sealed);
            assert!(w.blocked || w.yielded || queue.is_empty(), "{w:?}");
            sealed += w.sealed;
            let held = queue.file_len() - (len as u64 - sealed).min(queue.file_len());
            assert!(held < SEAL_CHUNK as u64 + 256, "{held} bytes of records held");
            if w.blocked {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        assert_eq!(sealed, len as u64);
        assert!(flushes >= 3, "at least a turn per FILE_CHUNK: {flushes} flushes");
        drop(a);
        let mut wire = reader.join().unwrap();
        let plain = tls_pair::decrypt(&mut client, &mut wire);
        let _ = std::fs::remove_file(&src);
        assert_eq!((&plain[..5], &plain[plain.len() - 5..]), (&b"head;"[..], &b";tail"[..]));
        assert!(plain[5..plain.len() - 5] == content[..], "the body arrived whole and in order");
        // Flushed without its session, a sealed range is an error, never sent in clear.
        queue.push_sealed_file(&file, 0..10);
        assert!(queue.flush(0, None).is_err());
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
        assert_eq!(w, Written { bytes: 600, ..Written::default() });
        let expected: Vec<u8> = (0..200u8).flat_map(|i| [i; 3]).collect();
        assert_eq!(read_all(&mut b), expected);
    }
}
