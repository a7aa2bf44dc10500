//! The HTTP response body from `--body FILE`: read into memory once, or held open and sent
//! from the page cache with `sendfile` (the seeds' TransmitFile), as `--sendfile` decides.
//!
//! The file is opened once, at start. Its length then is the `Content-Length` of every
//! response. A file replaced by rename keeps being served as it was (the server holds the old
//! inode), as nginx does with an open-file cache; a file changed in place is sent as it is
//! when each byte goes out; a file that shrinks can no longer fill its `Content-Length`, so a
//! connection that reaches the missing bytes is closed mid-body (the client sees a short body
//! and an EOF, never bytes that are not the file's) and the server logs it once.
//!
//! Under TLS the page cache cannot go to the socket as it is: sendfile is off (kernel TLS, which
//! would encrypt behind sendfile, is not built: this kernel offers no `tls` ULP to test it on).
//! A range is read and encrypted a chunk at a time instead ([`BodyFile::seal_turn`], for every
//! engine), into the thread's scratch ([`FileScratch`]); only the records of one chunk that the
//! socket refused stay with the connection, so memory stays flat in the body's size.
//!
//! HTTP/2 frames DATA from bytes, in clear and over TLS alike: its streams read the file a
//! chunk at a time where each has got to ([`FileChunks`], `pread`), only as their windows and
//! the output cap allow (`sockscale_proto::h2`), so a stream holds a chunk at most, whatever
//! the file's size. A file that shrank ends the stream that reaches its end (RST_STREAM).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use sockscale_proto::http::{FileChunks, HttpConfig, ResponseBody};
use sockscale_proto::Output;
use sockscale_sys as sys;
use sockscale_tls::ServerCrypto;

/// `--sendfile`: how a body file is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendfileMode {
    /// From the file at or above the threshold (`--sendfile-min`), from memory below it.
    #[default]
    Auto,
    /// Always from the file.
    On,
    /// Always from memory: the file is read at start, once per process.
    Off,
}

/// Below this, `auto` keeps the body in memory and writes head and body in one send. The
/// measured crossover (docs/BENCHMARKS.md, "File bodies", epoll, wrk -c10, bytes per server
/// CPU-second): from memory 1.84 GB and from the file 1.68 at 16 KiB, 2.84 and 2.87 at 32 KiB,
/// 3.14 and 4.09 at 64 KiB.
pub const AUTO_MIN_FILE_BYTES: u64 = 32 << 10;

/// Bytes of a body file per `sendfile` call at most, and per turn of a connection: after one
/// chunk that the socket took whole, the connection lets the others on its thread go first
/// and comes back without waiting for writability (nginx's `sendfile_max_chunk`, whose write
/// event is then posted to the back). Without the turn, a client that reads as fast as the
/// server sends never fills its socket buffer, so no EAGAIN ever ends the flush: measured, one
/// 4 GiB download on loopback held its worker for 10 s, and a HEAD on the same worker waited
/// 1.8 s (p50) to 3.1 s.
pub const FILE_CHUNK: usize = 2 << 20;

/// Bytes of a body file read and encrypted at a time under TLS ([`BodyFile::seal_turn`]): the
/// size of the thread's read buffer, and at most what one connection holds (as records, a few
/// dozen bytes more) while its socket refuses them; four TLS records of 16 KiB. Measured
/// (docs/BENCHMARKS.md, "A body file over TLS", epoll, one worker, a 64 MiB body, GB per
/// server CPU-second, medians of three): 16 KiB 1.77, 64 KiB 2.15, 256 KiB 2.30. 256 KiB saves
/// 7% of the CPU, but a connection whose client reads slowly would hold four times as much.
pub const SEAL_CHUNK: usize = 64 << 10;

/// How [`BodyFile::send_turn`] and [`BodyFile::seal_turn`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStep {
    /// The range is sent.
    Done,
    /// The socket refused more: wait for writability.
    Blocked,
    /// The turn's bytes are sent and the socket refused nothing: the other connections go
    /// first, then this one goes on without waiting for writability (no EAGAIN happened, so
    /// an edge-triggered waiter would not report it).
    Turn,
}

/// A thread's buffers for sealing body file chunks: the plaintext read from the file and the
/// records it was encrypted into. The thread's, not a connection's: an idle connection, or one
/// between chunks, keeps none.
#[derive(Debug, Default)]
pub struct FileScratch {
    plain: Vec<u8>,
    records: Vec<u8>,
}

/// What a TLS connection's body file chunks are sealed with: its session, and the thread's
/// scratch.
pub struct Seal<'a> {
    pub session: &'a mut dyn ServerCrypto,
    pub scratch: &'a mut FileScratch,
}

/// Bytes `at..end` of the body file still to send on a connection, and, under TLS, what the
/// socket refused of the last chunk's records (sent before anything else). Every engine's
/// output queue keeps its file ranges as this.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileRange {
    pub at: u64,
    pub end: u64,
    held: Bytes,
}

impl FileRange {
    pub fn new(at: u64, end: u64) -> Self {
        FileRange { at, end, held: Bytes::new() }
    }

    /// Bytes still owed to the client: of the file, and of records sealed and refused.
    pub fn owed(&self) -> u64 {
        self.end.saturating_sub(self.at) + self.held.len() as u64
    }

    /// Bytes of sealed records held (at most one chunk's).
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// How one turn of a file range went: how it ended, the bytes the socket took (the file's, or
/// its records under TLS), and the bytes of the file it advanced past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileTurn {
    pub step: FileStep,
    pub sent: usize,
    pub file: u64,
}

/// `plain`, output queued behind a body file range on a TLS connection, encrypted only once it
/// reaches the front of its queue: records go out in the order they are sealed (their sequence
/// numbers say so), so nothing behind a file range may be sealed before the range is.
pub fn seal_behind(session: &mut dyn ServerCrypto, plain: &[u8]) -> io::Result<Bytes> {
    let mut records = Vec::with_capacity(plain.len() + 64);
    session.send(plain, &mut records).map_err(io::Error::other)?;
    Ok(Bytes::from(records))
}

/// A body file held open for `sendfile`.
#[derive(Debug)]
pub struct BodyFile {
    file: File,
    len: u64,
    path: PathBuf,
    /// A shrunken file is logged once, not once per connection.
    shrink_logged: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("cannot read --body {path}: {error}")]
    Open { path: String, error: io::Error },
    #[error("--body {path} is not a regular file, so it cannot be sent with sendfile: leave --sendfile at auto (it is read into memory) or give a file")]
    NotAFile { path: String },
    #[error(
        "--body {path} is {size} bytes; --sendfile off reads it into memory in each of {procs} process(es), more than the {available} bytes available (MemAvailable): use --sendfile auto or on, which send it from the file"
    )]
    TooBigForMemory { path: String, size: u64, procs: u64, available: u64 },
}

impl BodyFile {
    /// The body `path` is served as under `mode`: in memory, or as a file of its length now
    /// with the open file to send it from. `procs`: server processes that each hold their own
    /// copy of a body in memory.
    pub fn load(
        path: &Path,
        mode: SendfileMode,
        min_file_bytes: u64,
        procs: u64,
    ) -> Result<(ResponseBody, Option<Arc<BodyFile>>), BodyError> {
        let shown = || path.display().to_string();
        let file = File::open(path).map_err(|error| BodyError::Open { path: shown(), error })?;
        let meta = file.metadata().map_err(|error| BodyError::Open { path: shown(), error })?;
        if meta.is_dir() || (!meta.is_file() && mode == SendfileMode::On) {
            return Err(BodyError::NotAFile { path: shown() });
        }
        let len = meta.len();
        // A pipe or a device (`--body /dev/stdin`) has no length to promise: read it whole.
        let from_file = meta.is_file()
            && match mode {
                SendfileMode::On => true,
                SendfileMode::Off => false,
                SendfileMode::Auto => len >= min_file_bytes,
            };
        if from_file {
            let body = BodyFile { file, len, path: path.to_owned(), shrink_logged: AtomicBool::new(false) };
            return Ok((ResponseBody::File { len }, Some(Arc::new(body))));
        }
        if let Some(available) = mem_available() {
            if len.saturating_mul(procs.max(1)) > available {
                return Err(BodyError::TooBigForMemory { path: shown(), size: len, procs: procs.max(1), available });
            }
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let limit = if meta.is_file() { len } else { u64::MAX };
        io::Read::read_to_end(&mut io::Read::take(&file, limit), &mut bytes)
            .map_err(|error| BodyError::Open { path: shown(), error })?;
        Ok((ResponseBody::Bytes(Bytes::from(bytes)), None))
    }

    /// The length every response promises.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Ok unless `output` names a range of the body file that cannot be sent whole: there is
    /// no body file, or it shrank since the server opened it. Asked before a response from the
    /// file is started, so that a file that shrank gets no response rather than a short one.
    pub fn check_output(output: &Output, body: Option<&Arc<BodyFile>>) -> io::Result<()> {
        if !output.has_file() {
            return Ok(());
        }
        body.ok_or_else(no_body_file)?.check_whole()
    }

    /// Send bytes `*at..end` of the file to the socket `fd`, advancing `*at`, until they are
    /// all sent, the socket refuses more, or `turn` bytes are sent: the connection's turn
    /// ([`FILE_CHUNK`]; less if it spent some on another range this turn). A file that ends
    /// before `end` (it shrank) is an error.
    pub fn send_turn(&self, fd: RawFd, at: &mut u64, end: u64, turn: usize) -> io::Result<FileStep> {
        let start = *at;
        loop {
            match self.send_to(fd, at, end) {
                Ok(_) if *at >= end => return Ok(FileStep::Done),
                Ok(_) if *at - start >= turn as u64 => return Ok(FileStep::Turn),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(FileStep::Blocked),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One `sendfile` of bytes `*at..end` of the file to the socket `fd`, at most
    /// [`FILE_CHUNK`], advancing `*at`. A file that ends before `end` (it shrank) is an error.
    fn send_to(&self, fd: RawFd, at: &mut u64, end: u64) -> io::Result<usize> {
        let want = usize::try_from(end - *at).unwrap_or(usize::MAX).min(FILE_CHUNK);
        match sys::sendfile(fd, self.file.as_raw_fd(), at, want)? {
            0 if want > 0 => Err(self.shrunk(*at)),
            n => Ok(n),
        }
    }

    /// One turn of `range` on the socket `fd`, for every engine: from the page cache with
    /// sendfile ([`BodyFile::send_turn`]) in clear, or, with a TLS connection's `seal`, read and
    /// encrypted a chunk at a time ([`BodyFile::seal_turn`]). `budget`: bytes of the file this
    /// turn may still send.
    pub fn turn(
        &self,
        fd: RawFd,
        range: &mut FileRange,
        seal: Option<&mut Seal<'_>>,
        budget: usize,
    ) -> io::Result<FileTurn> {
        let from = range.at;
        match seal {
            None => {
                let step = self.send_turn(fd, &mut range.at, range.end, budget)?;
                let file = range.at - from;
                Ok(FileTurn { step, sent: usize::try_from(file).unwrap_or(usize::MAX), file })
            }
            Some(seal) => self.seal_turn(seal, |records| sys::send(fd, records), range, budget),
        }
    }

    /// One turn of `range` over TLS (sendfile would send it in clear): first what the socket
    /// refused of the last chunk's records (`range.held`), then a chunk ([`SEAL_CHUNK`]) at a
    /// time read at `range.at` into the thread's scratch, encrypted with the connection's
    /// session and written with `send`. It ends when the range is sent ([`FileStep::Done`]),
    /// when the socket refuses more ([`FileStep::Blocked`]: what it did not take of the chunk's
    /// records is kept in `range.held`, the connection's only buffer while it waits), or when
    /// `budget` bytes of the file were sealed ([`FileStep::Turn`], nothing held). A file that
    /// ends before the range does (it shrank) is an error, as it is for sendfile.
    pub fn seal_turn(
        &self,
        seal: &mut Seal<'_>,
        mut send: impl FnMut(&[u8]) -> io::Result<usize>,
        range: &mut FileRange,
        budget: usize,
    ) -> io::Result<FileTurn> {
        let from = range.at;
        let mut sent = 0;
        let turn = |step, sent, at: u64| FileTurn { step, sent, file: at - from };
        while !range.held.is_empty() {
            match send(&range.held) {
                Ok(n) => {
                    sent += n;
                    range.held.advance(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(turn(FileStep::Blocked, sent, range.at)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let Seal { session, scratch } = seal;
        // Zeroed once per thread, then read into as it is.
        if scratch.plain.len() < SEAL_CHUNK {
            scratch.plain.resize(SEAL_CHUNK, 0);
        }
        loop {
            if range.at >= range.end {
                return Ok(turn(FileStep::Done, sent, range.at));
            }
            if range.at - from >= budget as u64 {
                return Ok(turn(FileStep::Turn, sent, range.at));
            }
            let want = usize::try_from(range.end - range.at).unwrap_or(usize::MAX).min(SEAL_CHUNK);
            let read = self.pread(&mut scratch.plain[..want], range.at)?;
            scratch.records.clear();
            session.send(&scratch.plain[..read], &mut scratch.records).map_err(io::Error::other)?;
            range.at += read as u64;
            let mut off = 0;
            while off < scratch.records.len() {
                match send(&scratch.records[off..]) {
                    Ok(n) => {
                        sent += n;
                        off += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        range.held = Bytes::copy_from_slice(&scratch.records[off..]);
                        return Ok(turn(FileStep::Blocked, sent, range.at));
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// One `pread` of the file at `at` into `buf` (not empty): the bytes read, at least one. A
    /// file that ends at `at` (it shrank) is an error.
    fn pread(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, at) {
                Ok(0) => return Err(self.shrunk(at)),
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The HTTP service's configuration as this server's threads serve it: with this file to
    /// read HTTP/2's chunks from when its body is in the file and HTTP/2 is on (HTTP/1.1 sends
    /// the file with sendfile and needs none of it). Otherwise `http` as it is.
    pub fn serve_http(http: &Arc<HttpConfig>, file: Option<&Arc<BodyFile>>) -> Arc<HttpConfig> {
        match (file, &http.body, &http.http2, &http.file_chunks) {
            (Some(file), ResponseBody::File { .. }, Some(_), None) => {
                let chunks: Arc<dyn FileChunks> = file.clone();
                Arc::new(HttpConfig { file_chunks: Some(chunks), ..HttpConfig::clone(http) })
            }
            _ => http.clone(),
        }
    }

    /// Ok if the file still holds every byte a response promises.
    fn check_whole(&self) -> io::Result<()> {
        let now = self.file.metadata()?.len();
        if now < self.len {
            return Err(self.shrunk(now));
        }
        Ok(())
    }

    /// The error that ends a connection whose body stops at `offset`, short of its length:
    /// the file shrank after the server opened it.
    pub fn shrunk(&self, offset: u64) -> io::Error {
        if !self.shrink_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                path = %self.path.display(),
                promised = self.len,
                ended_at = offset,
                "the body file is shorter than when the server opened it; connections reaching its end are closed mid-body"
            );
        }
        io::Error::new(io::ErrorKind::UnexpectedEof, format!("body file ended at {offset} of {} bytes", self.len))
    }
}

/// HTTP/2's chunks of the body: `max` bytes from `at` read with `pread` into a buffer of their
/// own (shared `Bytes`, framed at once and dropped), or fewer at the file's end; at least one.
/// The thread's scratch would not do: a chunk may wait, framed in part, behind the output cap.
impl FileChunks for BodyFile {
    fn read_chunk(&self, at: u64, max: usize) -> io::Result<Bytes> {
        let mut chunk = vec![0u8; max.max(1)];
        // A regular file reads whole but at its end; a read cut short is completed.
        let mut filled = 0;
        while filled < chunk.len() {
            match self.file.read_at(&mut chunk[filled..], at + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if filled == 0 {
            return Err(self.shrunk(at));
        }
        chunk.truncate(filled);
        Ok(Bytes::from(chunk))
    }
}

/// The error for a file range answered by a server that has no body file open.
pub fn no_body_file() -> io::Error {
    io::Error::other("a file body was answered with no body file open")
}

/// The error for output of a TLS connection asked to be sent without its session: it is never
/// sent in clear.
pub fn no_session() -> io::Error {
    io::Error::other("output sealed for TLS was flushed without its session")
}

/// Bytes of memory available for new allocations, from /proc/meminfo's MemAvailable.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(len: usize, name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sockscale-body-{name}-{}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![b'x'; len]).unwrap();
        path
    }

    #[test]
    fn auto_keeps_small_bodies_in_memory_and_sends_large_ones_from_the_file() {
        let small = file_of(1000, "small");
        let (body, file) = BodyFile::load(&small, SendfileMode::Auto, 4096, 1).unwrap();
        assert_eq!(body, ResponseBody::Bytes(Bytes::from(vec![b'x'; 1000])));
        assert!(file.is_none());
        let (body, file) = BodyFile::load(&small, SendfileMode::On, 4096, 1).unwrap();
        assert_eq!(body, ResponseBody::File { len: 1000 });
        assert_eq!(file.map(|f| f.len()), Some(1000));
        let large = file_of(5000, "large");
        let (body, _) = BodyFile::load(&large, SendfileMode::Auto, 4096, 1).unwrap();
        assert_eq!(body, ResponseBody::File { len: 5000 });
        let (body, file) = BodyFile::load(&large, SendfileMode::Off, 4096, 1).unwrap();
        assert_eq!(body.len(), 5000);
        assert!(file.is_none());
        let _ = std::fs::remove_file(small);
        let _ = std::fs::remove_file(large);
    }

    /// A sparse file larger than memory is refused for --sendfile off, naming the fix, and
    /// accepted from the file without reading it.
    #[test]
    fn a_body_larger_than_memory_is_refused_in_memory_and_served_from_the_file() {
        let path = std::env::temp_dir().join(format!("sockscale-body-sparse-{}", std::process::id()));
        let f = File::create(&path).unwrap();
        let huge = mem_available().unwrap() * 2;
        f.set_len(huge).unwrap();
        let err = BodyFile::load(&path, SendfileMode::Off, AUTO_MIN_FILE_BYTES, 1).unwrap_err().to_string();
        assert!(err.contains("MemAvailable") && err.contains("--sendfile auto"), "{err}");
        let (body, file) = BodyFile::load(&path, SendfileMode::Auto, AUTO_MIN_FILE_BYTES, 1).unwrap();
        assert_eq!(body, ResponseBody::File { len: huge });
        assert!(file.is_some());
        let _ = std::fs::remove_file(path);
    }

    /// Under TLS a body file is read and encrypted a chunk at a time into the thread's
    /// scratch, a turn of FILE_CHUNK at most: to a peer that takes everything, each call ends
    /// at the turn with nothing held; to one that refuses, it ends with at most one chunk's
    /// records held, sent first next time. The client decrypts the file's bytes, in order.
    #[test]
    fn a_sealed_body_goes_a_chunk_at_a_time_and_a_turn_at_most() {
        let len = 2 * FILE_CHUNK + 12_345;
        let content: Vec<u8> = (0..len).map(|i| (i % 239) as u8).collect();
        let path = std::env::temp_dir().join(format!("sockscale-body-sealed-{}", std::process::id()));
        File::create(&path).unwrap().write_all(&content).unwrap();
        let (_, file) = BodyFile::load(&path, SendfileMode::On, 0, 1).unwrap();
        let file = file.expect("from the file");
        let (mut session, mut client) = super::tls_pair::new();
        let mut scratch = FileScratch::default();
        let mut seal = Seal { session: &mut session, scratch: &mut scratch };
        let mut range = FileRange::new(0, len as u64);
        let mut wire = Vec::new();
        let mut take_all = |b: &[u8]| {
            wire.extend_from_slice(b);
            Ok(b.len())
        };
        let first = file.seal_turn(&mut seal, &mut take_all, &mut range, FILE_CHUNK).unwrap();
        assert_eq!((first.step, first.file, range.held()), (FileStep::Turn, FILE_CHUNK as u64, 0), "{first:?}");
        assert!(first.sent > FILE_CHUNK && first.sent < FILE_CHUNK + FILE_CHUNK / 100, "records: {first:?}");
        // A socket that takes 10,000 bytes and then refuses: one chunk's records are held.
        let mut room = 10_000;
        let mut refusing = |b: &[u8]| {
            if room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(room);
            room -= n;
            take_all(&b[..n])
        };
        let blocked = file.seal_turn(&mut seal, &mut refusing, &mut range, FILE_CHUNK).unwrap();
        assert_eq!((blocked.step, blocked.sent, blocked.file), (FileStep::Blocked, 10_000, SEAL_CHUNK as u64));
        assert!(range.held() > SEAL_CHUNK - 10_000 && range.held() < SEAL_CHUNK, "held {}", range.held());
        assert_eq!(range.owed(), (len - SEAL_CHUNK - FILE_CHUNK + range.held()) as u64);
        // The held records go first, then the rest of the turn.
        let second = file.seal_turn(&mut seal, &mut take_all, &mut range, FILE_CHUNK - SEAL_CHUNK).unwrap();
        assert_eq!((second.step, range.at), (FileStep::Turn, 2 * FILE_CHUNK as u64), "{second:?}");
        let last = file.seal_turn(&mut seal, &mut take_all, &mut range, FILE_CHUNK).unwrap();
        assert_eq!((last.step, last.file, range.owed()), (FileStep::Done, 12_345, 0), "{last:?}");
        // The thread's scratch holds a chunk, not the body.
        assert!(scratch.plain.capacity() <= SEAL_CHUNK && scratch.records.capacity() < 2 * SEAL_CHUNK);
        let plain = super::tls_pair::decrypt(&mut client, &mut wire);
        let _ = std::fs::remove_file(&path);
        assert!(plain == content, "decrypted {} bytes, not the file's {}", plain.len(), content.len());
    }

    /// A file that shrinks under a sealed download ends it with an error (the connection is
    /// closed mid-body), never with bytes that are not the file's.
    #[test]
    fn a_sealed_body_whose_file_shrank_is_an_error() {
        let path = std::env::temp_dir().join(format!("sockscale-body-sealed-shrunk-{}", std::process::id()));
        File::create(&path).unwrap().write_all(&vec![7u8; 3 * SEAL_CHUNK]).unwrap();
        let (_, file) = BodyFile::load(&path, SendfileMode::On, 0, 1).unwrap();
        let file = file.expect("from the file");
        File::options().write(true).open(&path).unwrap().set_len(SEAL_CHUNK as u64 + 10).unwrap();
        let (mut session, _) = super::tls_pair::new();
        let mut scratch = FileScratch::default();
        let mut seal = Seal { session: &mut session, scratch: &mut scratch };
        let mut range = FileRange::new(0, 3 * SEAL_CHUNK as u64);
        let err = file.seal_turn(&mut seal, |b: &[u8]| Ok(b.len()), &mut range, FILE_CHUNK).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        assert_eq!(range.at, SEAL_CHUNK as u64 + 10, "what the file still had was sent, then the end");
    }

    /// HTTP/2's chunk reader: the file's bytes where asked, fewer at its end, and an error once
    /// the file ends before the offset (it shrank), logged as for sendfile.
    #[test]
    fn file_chunks_read_where_asked_and_fail_where_the_file_ended() {
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let path = std::env::temp_dir().join(format!("sockscale-body-chunks-{}", std::process::id()));
        File::create(&path).unwrap().write_all(&content).unwrap();
        let (_, file) = BodyFile::load(&path, SendfileMode::On, 0, 1).unwrap();
        let file = file.expect("from the file");
        let chunks: &dyn FileChunks = file.as_ref();
        assert_eq!(chunks.read_chunk(0, 65_536).unwrap(), &content[..65_536]);
        assert_eq!(chunks.read_chunk(123_457, 10).unwrap(), &content[123_457..123_467]);
        assert_eq!(chunks.read_chunk(190_000, 65_536).unwrap(), &content[190_000..], "fewer at the end");
        let err = chunks.read_chunk(200_000, 100).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        File::options().write(true).open(&path).unwrap().set_len(1000).unwrap();
        assert_eq!(chunks.read_chunk(900, 65_536).unwrap().len(), 100, "what the shrunk file still has");
        assert_eq!(chunks.read_chunk(1000, 65_536).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let _ = std::fs::remove_file(&path);
    }

    /// The HTTP service is lent the body file for HTTP/2 when its body is the file and HTTP/2
    /// is on; a body in memory, or HTTP/2 off, is served as configured.
    #[test]
    fn http2_is_lent_the_body_file_only_when_it_serves_it() {
        let path = file_of(100_000, "lent");
        let (body, file) = BodyFile::load(&path, SendfileMode::On, 0, 1).unwrap();
        let on = Arc::new(HttpConfig { body: body.clone(), ..HttpConfig::default() });
        assert!(BodyFile::serve_http(&on, file.as_ref()).file_chunks.is_some());
        assert!(BodyFile::serve_http(&on, None).file_chunks.is_none());
        let off = Arc::new(HttpConfig { body, http2: None, ..HttpConfig::default() });
        assert!(BodyFile::serve_http(&off, file.as_ref()).file_chunks.is_none());
        let memory = Arc::new(HttpConfig::default());
        assert!(Arc::ptr_eq(&BodyFile::serve_http(&memory, file.as_ref()), &memory));
        let _ = std::fs::remove_file(path);
    }

    /// Each stream's DATA bytes and RST_STREAM code in a server's HTTP/2 output.
    fn h2_streams(mut bytes: &[u8]) -> std::collections::HashMap<u32, (Vec<u8>, Option<u32>, bool)> {
        let mut got: std::collections::HashMap<u32, (Vec<u8>, Option<u32>, bool)> = Default::default();
        while bytes.len() >= 9 {
            let len = (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
            let payload = &bytes[9..9 + len];
            let entry = got.entry(stream).or_default();
            match bytes[3] {
                0 => entry.0.extend_from_slice(payload),
                3 => entry.1 = Some(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])),
                _ => {}
            }
            entry.2 |= matches!(bytes[3], 0 | 1) && bytes[4] & 1 == 1;
            bytes = &bytes[9 + len..];
        }
        got
    }

    /// An HTTP/2 client downloads a 3 MiB body file through the server's session and this
    /// file's chunk reader: every byte the file's, in transmits the output cap bounds; then the
    /// file shrinks, and the next download is reset with INTERNAL_ERROR where the file ends.
    #[test]
    fn http2_downloads_a_body_file_in_chunks_and_a_shrunk_file_resets_the_stream() {
        use sockscale_proto::{Protocol, Responder, Session, Verdict};
        use std::time::Instant;

        let len = (3 << 20) + 5;
        let content: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        let path = std::env::temp_dir().join(format!("sockscale-body-h2-{}", std::process::id()));
        File::create(&path).unwrap().write_all(&content).unwrap();
        let (body, file) = BodyFile::load(&path, SendfileMode::Auto, AUTO_MIN_FILE_BYTES, 1).unwrap();
        let cap = 128 << 10;
        let limits = sockscale_h2::Limits { output_cap: cap, ..sockscale_proto::h2::default_limits() };
        let http = Arc::new(HttpConfig { body, http2: Some(Arc::new(limits)), ..HttpConfig::default() });
        let mut responder = Protocol::Http(BodyFile::serve_http(&http, file.as_ref())).responder(0);
        let mut session = responder.new_session();
        let now = Instant::now();
        let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
            let n = payload.len() as u32;
            let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(payload);
            f
        };
        let get = |stream| frame(1, 5, stream, &[0x82, 0x86, 0x84, 0x01, 0x01, b't']);
        let download = |responder: &mut Responder, session: &mut Session, request: &[u8]| {
            let mut out = Output::default();
            assert_eq!(responder.on_input(session, request, now, &mut out), Verdict::Continue);
            let mut wire = out.to_vec(request);
            while responder.wants_transmit(session) {
                let mut out = Output::default();
                assert_eq!(responder.transmit(session, now, 0, &mut out), Verdict::Continue);
                assert!(out.len() <= cap + (16 << 10) + 9, "a transmit within the cap: {}", out.len());
                wire.extend(out.to_vec(&[]));
            }
            h2_streams(&wire)
        };
        let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        opening.extend(frame(4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
        opening.extend(frame(8, 0, 0, &(0x7fff_ffff - 65_535u32).to_be_bytes()));
        opening.extend(get(1));
        let got = download(&mut responder, &mut session, &opening);
        let (data, reset, ended) = &got[&1];
        assert!(data == &content && reset.is_none() && *ended, "{} bytes, reset {reset:?}", data.len());
        File::options().write(true).open(&path).unwrap().set_len(200_000).unwrap();
        let got = download(&mut responder, &mut session, &get(3));
        let (data, reset, ended) = &got[&3];
        assert_eq!((data.len(), *reset, *ended), (200_000, Some(2), false), "RST_STREAM(INTERNAL_ERROR)");
        assert!(data[..] == content[..200_000]);
        assert!(session.is_between_requests(), "the connection goes on, holding nothing");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_directory_or_a_missing_file_is_one_clear_error() {
        let err = BodyFile::load(&std::env::temp_dir(), SendfileMode::Auto, 1, 1).unwrap_err().to_string();
        assert!(err.contains("is not a regular file"), "{err}");
        // A device has no length to send from: read whole with auto, refused with on.
        let (body, file) = BodyFile::load(Path::new("/dev/null"), SendfileMode::Auto, 1, 1).unwrap();
        assert_eq!((body, file.is_none()), (ResponseBody::Bytes(Bytes::new()), true));
        let err = BodyFile::load(Path::new("/dev/null"), SendfileMode::On, 1, 1).unwrap_err().to_string();
        assert!(err.contains("cannot be sent with sendfile"), "{err}");
        let err = BodyFile::load(Path::new("/no/such/body"), SendfileMode::Auto, 1, 1).unwrap_err().to_string();
        assert!(err.starts_with("cannot read --body /no/such/body"), "{err}");
    }
}

/// A TLS session pair in memory, the handshake done, for the tests of sealed file bodies: the
/// server's session, and a client that decrypts what it sends.
#[cfg(test)]
pub(crate) mod tls_pair {
    use std::path::Path;
    use std::time::{Instant, SystemTime};

    use sockscale_tls::{ClientSession, ClientTls, ServerOptions, ServerSession, ServerTls, TestCertificate, Trust};

    pub fn new() -> (ServerSession, ClientSession) {
        let made = TestCertificate::generate(&["localhost".to_owned()]).expect("certificate");
        let (cert, key) = (made.cert_pem.as_bytes(), made.key_pem.as_bytes());
        let options = ServerOptions::default();
        let tls = ServerTls::from_pem(cert, Path::new("cert"), key, Path::new("key"), SystemTime::now(), &options)
            .expect("server tls");
        let client_tls = ClientTls::new(&Trust::Insecure, Vec::new(), false).expect("client tls");
        let now = Instant::now();
        let mut to_server = Vec::new();
        let mut client = ClientSession::start(&client_tls, "localhost", now, &mut to_server).expect("hello");
        let mut server = ServerSession::new(&tls, now).expect("a place").expect("session");
        for _ in 0..10 {
            let mut to_client = Vec::new();
            server.receive(&mut to_server, now, &mut Vec::new(), &mut to_client).expect("server");
            to_server.clear();
            client.receive(&mut to_client, now, &mut Vec::new(), &mut to_server).expect("client");
            if !server.is_handshaking() && !client.is_handshaking() && to_server.is_empty() {
                return (server, client);
            }
        }
        panic!("the handshake did not complete");
    }

    /// What the client decrypts of `ciphertext`, fed in pieces as a socket would give it.
    pub fn decrypt(client: &mut ClientSession, ciphertext: &mut [u8]) -> Vec<u8> {
        let mut plain = Vec::new();
        for piece in ciphertext.chunks_mut(100_000) {
            client.receive(piece, Instant::now(), &mut plain, &mut Vec::new()).expect("records the client accepts");
        }
        plain
    }
}
