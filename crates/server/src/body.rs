//! The HTTP response body from `--body FILE`: read into memory once, or held open and sent
//! from the page cache with `sendfile` (the seeds' TransmitFile), as `--sendfile` decides.
//!
//! The file is opened once, at start. Its length then is the `Content-Length` of every
//! response. A file replaced by rename keeps being served as it was (the server holds the old
//! inode), as nginx does with an open-file cache; a file changed in place is sent as it is
//! when each byte goes out; a file that shrinks can no longer fill its `Content-Length`, so a
//! connection that reaches the missing bytes is closed mid-body (the client sees a short body
//! and an EOF, never bytes that are not the file's) and the server logs it once.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use sockscale_proto::http::ResponseBody;
use sockscale_proto::Output;
use sockscale_sys as sys;

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

/// How [`BodyFile::send_turn`] ended.
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

/// The error for a file range answered by a server that has no body file open.
pub fn no_body_file() -> io::Error {
    io::Error::other("a file body was answered with no body file open")
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
