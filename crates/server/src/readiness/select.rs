//! `--model select`: one thread waiting in select(2), the counterpart of the seeds'
//! non-blocking select server.
//!
//! One thread — the model's own, whatever `--threads` says — runs the shared event loop
//! (`readiness`) over [`Select`]. The listener (or the UDP socket), the loop's wake-up eventfd and
//! every connection live in two master fd_sets, read and write, beside a token table indexed by
//! descriptor. Each wait copies the masters, passes select(2) one more than the highest
//! registered descriptor, and reads the result a word at a time, so a wait costs in proportion
//! to the highest descriptor rather than to FD_SETSIZE. Readiness is level-triggered: the loop
//! asks for write readiness only while output is queued and drops read interest while a client is
//! flood-paused or draining, so waiting never spins. All `--pool-buffers` serve the one thread.
//!
//! Known limit: an fd_set holds descriptors 0 to FD_SETSIZE - 1 (1024 on Linux), and
//! descriptors are numbered lowest-free-first, so after about 1,020 connections (stdio, the
//! listener and the wake-up eventfd take the first numbers) each new connection gets a number
//! select cannot watch. The selector then says `RegisterError::Full`; the loop closes that
//! connection at once (after a 503 for HTTP), counts it as refused and logs why at most once a
//! second, while every connection already admitted goes on being served. In effect `--max-conns`
//! is capped at about 1,020.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use sockscale_sys::{syscall, Event, Interest, RegisterError, Selector};

use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::model::Model;
use crate::pool::BufferPool;
use crate::readiness::{Source, Worker, WorkerParts};
use crate::udp::UdpService;

const FD_SETSIZE: usize = libc::FD_SETSIZE;
const WORD_BITS: usize = libc::c_ulong::BITS as usize;
const WORDS: usize = FD_SETSIZE / WORD_BITS;

/// A descriptor set laid out exactly as glibc's `fd_set` (an array of unsigned longs, bit `fd %
/// bits` of word `fd / bits`), whose words libc keeps private; owning them lets a ready set be
/// scanned a word at a time instead of FD_ISSET on every descriptor.
#[derive(Clone, Copy)]
#[repr(C)]
struct FdBits([libc::c_ulong; WORDS]);

const _: () = assert!(
    std::mem::size_of::<FdBits>() == std::mem::size_of::<libc::fd_set>()
        && std::mem::align_of::<FdBits>() == std::mem::align_of::<libc::fd_set>()
);

impl FdBits {
    const EMPTY: FdBits = FdBits([0; WORDS]);

    fn set(&mut self, fd: usize, on: bool) {
        let bit: libc::c_ulong = 1 << (fd % WORD_BITS);
        if on {
            self.0[fd / WORD_BITS] |= bit;
        } else {
            self.0[fd / WORD_BITS] &= !bit;
        }
    }

    fn contains(&self, fd: usize) -> bool {
        self.0[fd / WORD_BITS] & (1 << (fd % WORD_BITS)) != 0
    }

    fn as_fd_set(&mut self) -> *mut libc::fd_set {
        (self as *mut FdBits).cast()
    }
}

/// select(2) over master read and write sets.
pub struct Select {
    read: FdBits,
    write: FdBits,
    ready_read: FdBits,
    ready_write: FdBits,
    /// The token of each registered descriptor, indexed by descriptor.
    tokens: Box<[Option<u64>]>,
    /// One more than the highest registered descriptor: select's `nfds`.
    nfds: usize,
}

impl Default for Select {
    fn default() -> Self {
        Self::new()
    }
}

impl Select {
    pub fn new() -> Self {
        Select {
            read: FdBits::EMPTY,
            write: FdBits::EMPTY,
            ready_read: FdBits::EMPTY,
            ready_write: FdBits::EMPTY,
            tokens: vec![None; FD_SETSIZE].into_boxed_slice(),
            nfds: 0,
        }
    }

    fn watch(&mut self, slot: usize, token: u64, interest: Interest) {
        self.tokens[slot] = Some(token);
        self.read.set(slot, interest.read);
        self.write.set(slot, interest.write);
        self.nfds = self.nfds.max(slot + 1);
    }

    /// The table slot of a registered descriptor.
    fn registered(&self, fd: RawFd) -> io::Result<usize> {
        usize::try_from(fd)
            .ok()
            .filter(|&slot| slot < FD_SETSIZE && self.tokens[slot].is_some())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }
}

/// A timeval for select, rounded up to the microsecond so a timer is never woken for early.
fn timeval(timeout: Duration) -> libc::timeval {
    let micros = timeout.as_nanos().div_ceil(1000);
    libc::timeval {
        tv_sec: libc::time_t::try_from(micros / 1_000_000).unwrap_or(libc::time_t::MAX),
        tv_usec: (micros % 1_000_000) as libc::suseconds_t,
    }
}

impl Selector for Select {
    fn edge_triggered(&self) -> bool {
        false
    }

    fn register(&mut self, fd: RawFd, token: u64, interest: Interest, _exclusive: bool) -> Result<(), RegisterError> {
        let slot = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        if slot >= FD_SETSIZE {
            return Err(RegisterError::Full(format!(
                "descriptor {fd} does not fit in select's fd_set (FD_SETSIZE {FD_SETSIZE})"
            )));
        }
        self.watch(slot, token, interest);
        Ok(())
    }

    fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let slot = self.registered(fd)?;
        self.watch(slot, token, interest);
        Ok(())
    }

    fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        let slot = self.registered(fd)?;
        self.tokens[slot] = None;
        self.read.set(slot, false);
        self.write.set(slot, false);
        while self.nfds > 0 && self.tokens[self.nfds - 1].is_none() {
            self.nfds -= 1;
        }
        Ok(())
    }

    fn select(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.ready_read = self.read;
        self.ready_write = self.write;
        let mut tv = timeout.map(timeval);
        let tv_ptr = tv.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut libc::timeval);
        // SAFETY: both sets are live FdBits, which have fd_set's layout (checked at compile time),
        // and nfds <= FD_SETSIZE, so the kernel reads and writes only inside them; a null
        // exceptfds is allowed; tv_ptr is null (wait forever) or points at a live timeval.
        let ready = syscall!(select(
            self.nfds as libc::c_int,
            self.ready_read.as_fd_set(),
            self.ready_write.as_fd_set(),
            std::ptr::null_mut(),
            tv_ptr
        ));
        match ready {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            // A signal: the loop works out its timers again and waits anew.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        // The masters hold no descriptor >= nfds, so neither do the copies the kernel left.
        for word in 0..self.nfds.div_ceil(WORD_BITS) {
            let mut bits = self.ready_read.0[word] | self.ready_write.0[word];
            while bits != 0 {
                let fd = word * WORD_BITS + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(token) = self.tokens[fd] {
                    // An error or hang-up makes a descriptor readable (and writable), and the
                    // read or write then says which: select has no separate "closed".
                    events.push(Event {
                        token,
                        readable: self.ready_read.contains(fd),
                        writable: self.ready_write.contains(fd),
                        closed: false,
                    });
                }
            }
        }
        Ok(())
    }
}

/// `--model select`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = &ctx.cfg;
    let io_err = |source| ServerError::Io { model: Model::Select.name(), error: source };
    let pool = BufferPool::new(cfg.buffer_size, cfg.pool_buffers, cfg.lock_memory)?;
    let socket = ctx.listen.shared();
    let source = Source::own(socket, ctx.listen.is_udp(), false, cfg);
    let parts = WorkerParts {
        cfg,
        protocol: ctx.protocol.clone(),
        resources: &ctx.resources,
        stats: &ctx.stats,
        counters: ctx.stats.shard(0),
        pool: &pool,
        shutdown: ctx.shutdown.clone(),
        source,
        active: cfg.active_set,
        // `--http3`: the one thread serves the UDP socket beside the listener.
        udp: ctx.listen.http3().map(|udp| Box::new(UdpService::http3(udp.shared(), &ctx))),
    };
    let worker = Worker::new(Select::new(), parts).map_err(io_err)?;
    ctx.ready();
    // The one thread is this one: nothing else to start.
    worker.run().map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    const ZERO: Option<Duration> = Some(Duration::ZERO);

    #[test]
    fn descriptors_beyond_fd_setsize_are_refused_as_full() {
        let mut select = Select::new();
        for fd in [FD_SETSIZE as RawFd, FD_SETSIZE as RawFd + 5000] {
            match select.register(fd, 1, Interest::READ, false) {
                Err(RegisterError::Full(reason)) => assert!(reason.contains("FD_SETSIZE"), "{reason}"),
                other => panic!("descriptor {fd}: expected Full, got {other:?}"),
            }
        }
        assert_eq!(select.nfds, 0, "a refused descriptor is not watched");
        select.register(FD_SETSIZE as RawFd - 1, 7, Interest::READ, false).unwrap();
        assert_eq!(select.nfds, FD_SETSIZE);
    }

    #[test]
    fn reports_level_triggered_readiness_by_interest() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        let mut select = Select::new();
        let mut events = Vec::new();
        select.register(fd, 42, Interest::READ, false).unwrap();
        select.select(&mut events, ZERO).unwrap();
        assert!(events.is_empty(), "nothing to read yet: {events:?}");

        a.write_all(b"x").unwrap();
        for _ in 0..2 {
            // Level-triggered: reported again for as long as the byte is unread.
            events.clear();
            select.select(&mut events, ZERO).unwrap();
            assert_eq!(events, [Event { token: 42, readable: true, writable: false, closed: false }]);
        }

        select.reregister(fd, 43, Interest::BOTH).unwrap();
        events.clear();
        select.select(&mut events, ZERO).unwrap();
        assert_eq!(events, [Event { token: 43, readable: true, writable: true, closed: false }]);

        select.deregister(fd).unwrap();
        assert_eq!(select.nfds, 0);
        events.clear();
        select.select(&mut events, ZERO).unwrap();
        assert!(events.is_empty());
        assert!(select.deregister(fd).is_err(), "deregistering twice");
    }

    #[test]
    fn nfds_follows_the_highest_registered_descriptor() {
        let mut select = Select::new();
        select.register(3, 3, Interest::READ, false).unwrap();
        select.register(900, 900, Interest::READ, false).unwrap();
        select.register(70, 70, Interest::READ, false).unwrap();
        assert_eq!(select.nfds, 901);
        select.deregister(900).unwrap();
        assert_eq!(select.nfds, 71);
        select.deregister(3).unwrap();
        assert_eq!(select.nfds, 71);
    }

    #[test]
    fn times_out_and_rounds_up_to_the_microsecond() {
        let t = timeval(Duration::from_nanos(1_500_000_001));
        assert_eq!((t.tv_sec, t.tv_usec), (1, 500_001));
        let mut select = Select::new();
        let mut events = Vec::new();
        let started = std::time::Instant::now();
        select.select(&mut events, Some(Duration::from_millis(20))).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert!(events.is_empty());
    }
}
