//! `--model signal`: readiness as queued real-time signals read through a signalfd — the
//! counterpart of WSAAsyncSelect, which posts a window message per socket event.
//!
//! One thread, `sockscale-signal`, whatever `--threads` says, runs the shared event loop
//! (`readiness`) over [`SignalSelector`]. Every socket it watches (the listener or the UDP socket,
//! and each connection) is set to raise SIGRTMIN+4 on every change of readiness: F_SETOWN_EX with
//! F_OWNER_TID names this thread as the one to signal, F_SETSIG picks the real-time signal (which
//! carries the descriptor and a POLLIN/POLLOUT/POLLERR/POLLHUP band, and queues instead of
//! merging), and O_ASYNC turns it on. The thread blocks that signal and SIGIO before any socket
//! is armed and reads them from a non-blocking signalfd, in batches, after waiting for it in
//! poll(2). SIGRTMIN+4 rather than SIGRTMIN: libraries and runtimes that use real-time signals
//! take the lowest ones.
//!
//! A signal reports a change, so the selector is edge-triggered, and the loop keeps readiness it
//! has not consumed. Three cases raise no signal, and each is covered:
//! - Whatever happened to a descriptor before it was armed (data, or a reset or FIN that already
//!   ended the connection): each new registration is polled once, on the next wait, and
//!   reported with what poll(2) says.
//! - A full real-time signal queue (RLIMIT_SIGPENDING, counted per user): the kernel sends SIGIO
//!   instead, once. On SIGIO the selector drains the signalfd and polls every registered
//!   descriptor with poll(2), reporting whatever is ready, as the C10K literature prescribes.
//! - A descriptor with no asynchronous notification at all, such as the eventfd the loop is woken
//!   through (Linux's eventfd has no fasync; O_ASYNC does not stick): it is watched directly in the
//!   poll(2) that waits for the signalfd.
//!
//! The loop does not deregister a connection from an edge-triggered selector before closing it,
//! so the descriptor table may keep stale entries; a stale signal or poll result carries a token
//! the loop no longer knows and is ignored, and a poll scan forgets a closed descriptor.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use sockscale_sys::{self as sys, syscall, Event, Interest, RegisterError, Selector};

use crate::admission::LogLimiter;
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::model::Model;
use crate::pool::BufferPool;
use crate::readiness::{Source, Worker, WorkerParts};
use crate::udp::UdpService;

// From <asm-generic/fcntl.h>; libc exports them for musl only.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_GETOWN_EX: libc::c_int = 16;
const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex`.
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// What a poll(2) scan asks of each descriptor. POLLRDHUP: a FIN that came with data must be
/// reported as a hang-up, or the loop would stop at the short read of that data and never learn
/// of the FIN (see `Conn::hangup`).
const SCAN_INTEREST: libc::c_short = libc::POLLIN | libc::POLLOUT | libc::POLLRDHUP;

/// siginfo records read from the signalfd per read(2).
const BATCH: usize = 64;

/// The real-time signal readiness arrives as.
pub fn readiness_signal() -> libc::c_int {
    libc::SIGRTMIN() + 4
}

/// A descriptor that raises signals.
struct Watched {
    token: u64,
    /// The wait it was last reported in, and where in that wait's events: several signals for
    /// one descriptor become one event.
    stamp: u64,
    slot: usize,
    /// A second readable event was reported for it in this wait.
    split: bool,
}

/// Readiness from queued real-time signals, read through a signalfd.
pub struct SignalSelector {
    signal: libc::c_int,
    signalfd: OwnedFd,
    /// The thread that blocked the signals, owns the signalfd and must be the one to wait.
    tid: libc::pid_t,
    /// Descriptors that raise signals, indexed by descriptor.
    table: Vec<Option<Watched>>,
    /// Descriptors that cannot raise signals, watched in the wait itself.
    direct: Vec<(RawFd, u64)>,
    /// Registered since the last wait, to be reported ready once.
    fresh: Vec<RawFd>,
    wait: Vec<libc::pollfd>,
    infos: Vec<libc::signalfd_siginfo>,
    scan: Vec<libc::pollfd>,
    stamp: u64,
    /// Real-time queue overflows seen (SIGIO), each answered by a poll scan.
    overflows: u64,
    overflow_log: LogLimiter,
}

impl SignalSelector {
    /// Block `signal` and SIGIO in the calling thread and read them through a new signalfd. The
    /// calling thread must be the one that registers descriptors and waits.
    pub fn new(signal: libc::c_int) -> io::Result<Self> {
        // SAFETY: sigset_t is plain old data, initialised by sigemptyset below.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: set is a live sigset_t.
        syscall!(sigemptyset(&mut set))?;
        for signo in [signal, libc::SIGIO] {
            // SAFETY: set is initialised; sigaddset rejects an invalid number with EINVAL.
            syscall!(sigaddset(&mut set, signo))?;
        }
        // SAFETY: set is initialised; a null old-set pointer is allowed. pthread_sigmask returns
        // its error instead of setting errno, so it cannot go through syscall!.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: set is initialised; -1 asks for a new signalfd.
        let fd = syscall!(signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC))?;
        // SAFETY: signalfd just returned this descriptor; nothing else owns it.
        let signalfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = syscall!(gettid())?;
        // SAFETY: signalfd_siginfo is plain old data; all zeroes is a valid value.
        let blank: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        Ok(SignalSelector {
            signal,
            signalfd,
            tid,
            table: Vec::new(),
            direct: Vec::new(),
            fresh: Vec::new(),
            wait: Vec::new(),
            infos: vec![blank; BATCH],
            scan: Vec::new(),
            stamp: 0,
            overflows: 0,
            overflow_log: LogLimiter::signal_overflows(),
        })
    }

    /// Add readiness for `fd` to this wait's events, merging with an earlier report of it.
    fn report(&mut self, events: &mut Vec<Event>, fd: RawFd, readable: bool, writable: bool, closed: bool) {
        let Some(Some(watched)) = usize::try_from(fd).ok().and_then(|i| self.table.get_mut(i)) else {
            // Deregistered since the signal was queued.
            return;
        };
        if watched.stamp == self.stamp {
            if let Some(event) = events.get_mut(watched.slot).filter(|e| e.token == watched.token) {
                if !(readable && event.readable) || watched.split {
                    event.readable |= readable;
                    event.writable |= writable;
                    event.closed |= closed;
                    return;
                }
                // A second readable signal in one wait may be the FIN behind the data the first
                // announced (its band says POLLIN, like data): report it as an edge of its own,
                // once per wait, so the loop hears of it after reading, or while readiness is
                // unconsumed (the lifecycle's late edge), and reads on to EOF.
                watched.split = true;
                watched.slot = events.len();
                events.push(Event { token: watched.token, readable, writable, closed });
                return;
            }
        }
        watched.stamp = self.stamp;
        watched.slot = events.len();
        watched.split = false;
        events.push(Event { token: watched.token, readable, writable, closed });
    }

    /// Read every queued signal; after an overflow, poll every descriptor.
    fn take_signals(&mut self, events: &mut Vec<Event>) -> io::Result<()> {
        let record = std::mem::size_of::<libc::signalfd_siginfo>();
        let mut overflowed = false;
        loop {
            // SAFETY: infos is a live, writable array of BATCH records; the kernel writes whole
            // records only.
            let read = syscall!(read(self.signalfd.as_raw_fd(), self.infos.as_mut_ptr().cast(), BATCH * record));
            let count = match read {
                Ok(n) => n as usize / record,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            for i in 0..count {
                let info = self.infos[i];
                if info.ssi_signo == libc::SIGIO as u32 {
                    overflowed = true;
                } else if !overflowed && info.ssi_signo == self.signal as u32 && info.ssi_code > 0 {
                    // ssi_code > 0: raised by the kernel for a descriptor, not sent by a process.
                    let band = info.ssi_band;
                    let has = |bits: libc::c_short| band & bits as u32 != 0;
                    let closed = has(libc::POLLERR | libc::POLLHUP);
                    self.report(events, info.ssi_fd, has(libc::POLLIN), has(libc::POLLOUT), closed);
                }
            }
            // A short read emptied the queue. After an overflow every record is drained: the
            // scan covers what they say, and the queue needs the room.
            if count < BATCH && !overflowed {
                break;
            }
        }
        if overflowed {
            self.overflows += 1;
            self.scan_all(events)?;
            if let Some(suppressed) = self.overflow_log.allow(std::time::Instant::now()) {
                tracing::warn!(
                    descriptors = self.scan.len(),
                    suppressed,
                    "real-time signal queue overflowed (RLIMIT_SIGPENDING); polled every descriptor instead"
                );
            }
        }
        Ok(())
    }

    /// Report what descriptors registered since the last wait are ready for. What happened to
    /// them before O_ASYNC was set raised no signal (data, or a reset that already closed the
    /// connection), so ask poll(2) once; everything after raises one.
    fn report_fresh(&mut self, events: &mut Vec<Event>) -> io::Result<()> {
        self.scan.clear();
        self.scan.extend(self.fresh.drain(..).map(|fd| libc::pollfd { fd, events: SCAN_INTEREST, revents: 0 }));
        self.poll_scan(events)
    }

    /// Poll every registered descriptor and report what is ready: the fallback when signals
    /// were lost to a full queue.
    fn scan_all(&mut self, events: &mut Vec<Event>) -> io::Result<()> {
        self.scan.clear();
        for (fd, watched) in self.table.iter().enumerate() {
            if watched.is_some() {
                self.scan.push(libc::pollfd { fd: fd as RawFd, events: SCAN_INTEREST, revents: 0 });
            }
        }
        self.poll_scan(events)
    }

    /// Poll the descriptors in `scan` once, without waiting, and report what each is ready for.
    fn poll_scan(&mut self, events: &mut Vec<Event>) -> io::Result<()> {
        if self.scan.is_empty() {
            return Ok(());
        }
        loop {
            match sys::ppoll(&mut self.scan, Some(Duration::ZERO)) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        for i in 0..self.scan.len() {
            let p = self.scan[i];
            let has = |bits: libc::c_short| p.revents & bits != 0;
            if has(libc::POLLNVAL) {
                // A connection the loop closed without deregistering: forget it.
                if let Some(entry) = self.table.get_mut(p.fd as usize) {
                    *entry = None;
                }
            } else if p.revents != 0 {
                let closed = has(libc::POLLERR | libc::POLLHUP | libc::POLLRDHUP);
                self.report(events, p.fd, has(libc::POLLIN), has(libc::POLLOUT), closed);
            }
        }
        Ok(())
    }
}

fn clear_async(fd: RawFd) -> io::Result<()> {
    let flags = syscall!(fcntl(fd, libc::F_GETFL))?;
    syscall!(fcntl(fd, libc::F_SETFL, flags & !libc::O_ASYNC)).map(drop)
}

impl Selector for SignalSelector {
    fn edge_triggered(&self) -> bool {
        true
    }

    fn register(&mut self, fd: RawFd, token: u64, _interest: Interest, _exclusive: bool) -> Result<(), RegisterError> {
        let index = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        let owner = OwnerEx { kind: F_OWNER_TID, pid: self.tid };
        // SAFETY: F_SETOWN_EX reads one live f_owner_ex.
        syscall!(fcntl(fd, F_SETOWN_EX, &owner as *const OwnerEx))?;
        syscall!(fcntl(fd, F_SETSIG, self.signal))?;
        let flags = syscall!(fcntl(fd, libc::F_GETFL))?;
        syscall!(fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC | libc::O_NONBLOCK))?;
        if self.table.len() <= index {
            self.table.resize_with(index + 1, || None);
        }
        if syscall!(fcntl(fd, libc::F_GETFL))? & libc::O_ASYNC == 0 {
            // No asynchronous notification for this file (an eventfd): the kernel dropped the flag.
            self.table[index] = None;
            self.direct.push((fd, token));
            return Ok(());
        }
        self.table[index] = Some(Watched { token, stamp: 0, slot: 0, split: false });
        self.fresh.push(fd);
        Ok(())
    }

    /// Signals report every change whatever the interest; only the token can change.
    fn reregister(&mut self, fd: RawFd, token: u64, _interest: Interest) -> io::Result<()> {
        if let Some((_, t)) = self.direct.iter_mut().find(|(d, _)| *d == fd) {
            *t = token;
            return Ok(());
        }
        match usize::try_from(fd).ok().and_then(|i| self.table.get_mut(i)) {
            Some(Some(watched)) => {
                watched.token = token;
                Ok(())
            }
            _ => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        if let Some(at) = self.direct.iter().position(|&(d, _)| d == fd) {
            self.direct.swap_remove(at);
            return Ok(());
        }
        let entry = usize::try_from(fd).ok().and_then(|i| self.table.get_mut(i)).and_then(Option::take);
        if entry.is_none() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.fresh.retain(|&f| f != fd);
        // Signals already queued for it find no entry and are dropped.
        clear_async(fd)
    }

    fn select(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.stamp += 1;
        self.report_fresh(events)?;
        self.wait.clear();
        self.wait.push(libc::pollfd { fd: self.signalfd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        self.wait.extend(self.direct.iter().map(|&(fd, _)| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }));
        let timeout = if events.is_empty() { timeout } else { Some(Duration::ZERO) };
        match sys::ppoll(&mut self.wait, timeout) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        for (p, &(_, token)) in self.wait[1..].iter().zip(&self.direct) {
            if p.revents != 0 {
                events.push(Event {
                    token,
                    readable: p.revents & libc::POLLIN != 0,
                    writable: false,
                    closed: p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
                });
            }
        }
        if self.wait[0].revents != 0 {
            self.take_signals(events)?;
        }
        Ok(())
    }
}

impl Drop for SignalSelector {
    /// A descriptor still open elsewhere (the listener, a shutdown waker) would otherwise go on
    /// signalling this thread's id after the thread ends, and the system may give that id to a
    /// thread that does not block the signal, whose default action ends the process. Entries
    /// whose owner is no longer this thread are closed, or someone else's now: left alone.
    fn drop(&mut self) {
        for (fd, watched) in self.table.iter().enumerate() {
            if watched.is_none() {
                continue;
            }
            let fd = fd as RawFd;
            let mut owner = OwnerEx { kind: -1, pid: 0 };
            // SAFETY: F_GETOWN_EX writes one live f_owner_ex.
            let owned = syscall!(fcntl(fd, F_GETOWN_EX, &mut owner as *mut OwnerEx)).is_ok()
                && owner.kind == F_OWNER_TID
                && owner.pid == self.tid;
            if owned {
                let _ = clear_async(fd);
            }
        }
    }
}

/// `--model signal`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let io_err = |source| ServerError::Io { model: Model::Signal.name(), error: source };
    let cfg = &ctx.cfg;
    let pool = BufferPool::new(cfg.buffer_size, cfg.pool_buffers, cfg.lock_memory)?;
    let (ctx, pool) = (&ctx, &pool);
    // A thread of its own: the signal mask it changes and the thread id the sockets signal must
    // not outlive the serving, whoever called run.
    let serve = move || -> Result<(), ServerError> {
        let selector = SignalSelector::new(readiness_signal()).map_err(io_err)?;
        let socket = ctx.listen.shared();
        let source = Source::own(socket, ctx.listen.is_udp(), false, &ctx.cfg);
        let parts = WorkerParts {
            cfg: &ctx.cfg,
            protocol: ctx.protocol.clone(),
            resources: &ctx.resources,
            stats: &ctx.stats,
            counters: ctx.stats.shard(0),
            pool,
            shutdown: ctx.shutdown.clone(),
            source,
            active: ctx.cfg.active_set,
            // `--http3`: the one thread serves the UDP socket beside the listener.
            udp: ctx.listen.http3().map(|udp| Box::new(UdpService::http3(udp.shared(), ctx))),
        };
        let worker = Worker::new(selector, parts).map_err(io_err)?;
        ctx.ready();
        worker.run().map_err(io_err)
    };
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("sockscale-signal".into()).spawn_scoped(scope, serve);
        thread.map_err(io_err)?.join().unwrap_or(Err(ServerError::Panicked { model: Model::Signal.name() }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::WAKER;
    use sockscale_sys::Waker;
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;

    /// The overflow test lowers the process's RLIMIT_SIGPENDING: the other tests, which expect
    /// signals rather than scans, must not run meanwhile.
    static SIGNALS: Mutex<()> = Mutex::new(());

    const ZERO: Option<Duration> = Some(Duration::ZERO);
    const SOON: Option<Duration> = Some(Duration::from_millis(500));

    /// Run `test` on a fresh thread, whose blocked signals and thread id die with it.
    fn on_own_thread(test: impl FnOnce() + Send) {
        let _serial = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::scope(|s| s.spawn(test).join()).unwrap_or_else(|e| std::panic::resume_unwind(e));
    }

    fn readable(token: u64) -> impl Fn(&Event) -> bool {
        move |e| e.token == token && e.readable
    }

    #[test]
    fn edges_arrive_as_signals_and_fresh_descriptors_are_reported_once() {
        on_own_thread(|| {
            let mut selector = SignalSelector::new(readiness_signal()).unwrap();
            let (mut peer, socket) = UnixStream::pair().unwrap();
            // Readable before it is armed: no signal will say so.
            peer.write_all(b"early").unwrap();
            selector.register(socket.as_raw_fd(), 9, Interest::BOTH, false).unwrap();
            let mut events = Vec::new();
            selector.select(&mut events, ZERO).unwrap();
            assert_eq!(events, [Event { token: 9, readable: true, writable: true, closed: false }]);
            events.clear();
            selector.select(&mut events, ZERO).unwrap();
            assert!(events.is_empty(), "an edge is reported once: {events:?}");

            // Several writes queue several signals; they make two events at most: the second
            // may be a FIN behind the data, so it is not merged into the first.
            for _ in 0..3 {
                peer.write_all(b"more").unwrap();
            }
            events.clear();
            selector.select(&mut events, SOON).unwrap();
            assert_eq!(events.len(), 2, "{events:?}");
            assert!(events.iter().all(readable(9)), "{events:?}");

            drop(peer);
            events.clear();
            selector.select(&mut events, SOON).unwrap();
            assert!(events.iter().any(|e| e.token == 9 && e.closed), "the hang-up is an edge too: {events:?}");

            selector.deregister(socket.as_raw_fd()).unwrap();
            assert_eq!(syscall!(fcntl(socket.as_raw_fd(), libc::F_GETFL)).unwrap() & libc::O_ASYNC, 0);
            assert!(selector.deregister(socket.as_raw_fd()).is_err());
        });
    }

    #[test]
    fn an_eventfd_waker_is_watched_directly() {
        on_own_thread(|| {
            let mut selector = SignalSelector::new(readiness_signal()).unwrap();
            let waker = Waker::new().unwrap();
            selector.register(waker.fd().as_raw_fd(), WAKER, Interest::READ, false).unwrap();
            assert_eq!(selector.direct.len(), 1, "an eventfd cannot raise signals");
            let mut events = Vec::new();
            selector.select(&mut events, ZERO).unwrap();
            assert!(events.is_empty(), "{events:?}");
            waker.wake();
            selector.select(&mut events, SOON).unwrap();
            assert!(events.iter().any(readable(WAKER)), "{events:?}");
            waker.reset();
            events.clear();
            selector.select(&mut events, ZERO).unwrap();
            assert!(events.is_empty(), "{events:?}");
        });
    }

    /// With RLIMIT_SIGPENDING lowered, most of 64 signals cannot be queued; the kernel sends
    /// SIGIO instead, and the poll scan must still report every socket.
    #[test]
    fn a_full_signal_queue_falls_back_to_a_poll_scan() {
        const SOCKETS: u64 = 64;
        on_own_thread(|| {
            let original = sys::soft_limit(libc::RLIMIT_SIGPENDING).unwrap();
            // SAFETY: rlimit is plain old data.
            let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
            // SAFETY: limit is a live, writable rlimit.
            syscall!(getrlimit(libc::RLIMIT_SIGPENDING, &mut limit)).unwrap();
            let lowered = libc::rlimit { rlim_cur: 4, ..limit };
            // SAFETY: lowered is a live rlimit; lowering a soft limit needs no privilege.
            syscall!(setrlimit(libc::RLIMIT_SIGPENDING, &lowered)).unwrap();

            let mut selector = SignalSelector::new(readiness_signal()).unwrap();
            let pairs: Vec<(UnixStream, UnixStream)> = (0..SOCKETS).map(|_| UnixStream::pair().unwrap()).collect();
            for (token, (_, socket)) in pairs.iter().enumerate() {
                selector.register(socket.as_raw_fd(), token as u64, Interest::BOTH, false).unwrap();
            }
            let mut events = Vec::new();
            selector.select(&mut events, ZERO).unwrap();
            assert_eq!(events.len(), SOCKETS as usize, "each fresh registration once");
            for (peer, _) in &pairs {
                (&*peer).write_all(b"x").unwrap();
            }
            let mut seen = std::collections::HashSet::new();
            for _ in 0..10 {
                events.clear();
                selector.select(&mut events, SOON).unwrap();
                seen.extend(events.iter().filter(|e| e.readable).map(|e| e.token));
                if seen.len() == SOCKETS as usize {
                    break;
                }
            }
            let overflows = selector.overflows;
            drop(selector);
            limit.rlim_cur = original.unwrap_or(libc::RLIM_INFINITY);
            // SAFETY: limit is a live rlimit, back to what it was.
            syscall!(setrlimit(libc::RLIMIT_SIGPENDING, &limit)).unwrap();
            assert!(overflows >= 1, "the queue never overflowed");
            assert_eq!(seen.len(), SOCKETS as usize, "readiness lost in the overflow");
        });
    }
}
