//! `--model epoll`: readiness, edge-triggered, one epoll instance per worker thread.
//!
//! This is the core engine of sockscale, the Linux counterpart of nothing in the seeds'
//! table because Windows had no such call: each of `--threads` workers owns an epoll instance,
//! a slice of the buffer pool and its own listener, and runs the shared event loop (`evloop`)
//! with non-blocking sockets registered once for EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET.
//!
//! Listeners: `--listener reuseport` (the default) gives every worker its own SO_REUSEPORT
//! socket; `--listener exclusive` puts one shared socket in every epoll with EPOLLEXCLUSIVE.
//! Measured side by side (`bench/listener_modes.py`, docs/BENCHMARKS.md): with a new connection
//! per request, reuseport served 1.09x the requests per CPU-second; with keep-alive, exclusive
//! did 1.11x better, but only because it piled connections onto one thread (CPU 248 vs 118
//! ticks between the two workers), which batches well while both share one pinned core and
//! caps throughput when they have a core each. reuseport spreads connections evenly (188 vs
//! 184), so it is the default.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use crate::config::ListenerMode;
use crate::conn::Interest;
use crate::evloop::{Acceptor, Event, RegisterError, Selector, Source, Worker, WorkerParts};
use crate::models::{IoModel, Model, ModelCtx};
use crate::pool::BufferPool;
use crate::sys::syscall;
use crate::udp::UdpEcho;
use crate::ServerError;

const MAX_EVENTS: usize = 1024;

pub struct Epoll {
    fd: OwnedFd,
    ready: Vec<libc::epoll_event>,
    /// The kernel has no epoll_pwait2 (before Linux 5.11): fall back to epoll_wait.
    no_pwait2: bool,
}

impl Epoll {
    pub fn new() -> io::Result<Self> {
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd, ready: vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS], no_pwait2: false })
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: event is a live epoll_event for the duration of the call.
        syscall!(epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event)).map(drop)
    }
}

fn flags(interest: Interest) -> u32 {
    let mut events = libc::EPOLLET as u32;
    if interest.read {
        events |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
    }
    if interest.write {
        events |= libc::EPOLLOUT as u32;
    }
    events
}

impl Selector for Epoll {
    fn edge_triggered(&self) -> bool {
        true
    }

    fn register(&mut self, fd: RawFd, token: u64, interest: Interest, exclusive: bool) -> Result<(), RegisterError> {
        // EPOLLEXCLUSIVE admits only EPOLLIN, EPOLLOUT, EPOLLET and EPOLLWAKEUP.
        let events =
            if exclusive { (libc::EPOLLIN | libc::EPOLLET | libc::EPOLLEXCLUSIVE) as u32 } else { flags(interest) };
        Ok(self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)?)
    }

    fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, flags(interest), token)
    }

    fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    fn select(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        // epoll_pwait2 takes a nanosecond timeout: epoll_wait's milliseconds would either wake
        // early and spin on sub-millisecond timers or add up to a millisecond of slack to
        // every open-loop send.
        let spec = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
        });
        let spec_ptr = spec.as_ref().map_or(std::ptr::null(), |s| s as *const libc::timespec);
        let waited = if self.no_pwait2 {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        } else {
            // SAFETY: ready has MAX_EVENTS initialised slots the kernel may overwrite; spec_ptr
            // is null (wait forever) or points at a live timespec; a null sigmask leaves the
            // mask unchanged.
            syscall!(epoll_pwait2(
                self.fd.as_raw_fd(),
                self.ready.as_mut_ptr(),
                MAX_EVENTS as i32,
                spec_ptr,
                std::ptr::null()
            ))
        };
        let n = match waited {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                self.no_pwait2 = true;
                // Milliseconds rounded up, so a timer is never woken for early.
                let ms = timeout.map_or(-1, |t| i32::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX));
                // SAFETY: as above.
                syscall!(epoll_wait(self.fd.as_raw_fd(), self.ready.as_mut_ptr(), MAX_EVENTS as i32, ms))?
            }
            other => other?,
        };
        for e in &self.ready[..n as usize] {
            let bits = e.events;
            events.push(Event {
                token: e.u64,
                readable: bits & (libc::EPOLLIN as u32) != 0,
                writable: bits & (libc::EPOLLOUT as u32) != 0,
                closed: bits & ((libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32) != 0,
            });
        }
        Ok(())
    }
}

/// `--model epoll`: see the module docs.
pub struct EpollModel;

impl IoModel for EpollModel {
    fn model(&self) -> Model {
        Model::Epoll
    }

    fn run(&self, ctx: ModelCtx) -> Result<(), ServerError> {
        run(ctx)
    }
}

fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = &ctx.cfg;
    let threads = cfg.threads;
    let per_worker = (cfg.pool_buffers / threads).max(1);
    let pools = (0..threads)
        .map(|_| BufferPool::new(cfg.buffer_size, per_worker, cfg.lock_memory))
        .collect::<Result<Vec<_>, _>>()?;
    let io_err = |source| ServerError::Io { model: Model::Epoll.name(), source };

    let mut sources = Vec::with_capacity(threads);
    for i in 0..threads {
        let socket = if i == 0 || cfg.listener_mode == ListenerMode::Exclusive && !ctx.listen.is_udp() {
            ctx.listen.shared()
        } else {
            Arc::new(ctx.listen.bind_another().map_err(io_err)?)
        };
        sources.push(if ctx.listen.is_udp() {
            Source::Udp(Box::new(UdpEcho::new(socket)))
        } else {
            Source::Listener(Acceptor::new(socket, cfg.listener_mode == ListenerMode::Exclusive))
        });
    }

    let mut workers = Vec::with_capacity(threads);
    for (i, (source, pool)) in sources.into_iter().zip(&pools).enumerate() {
        let parts = WorkerParts {
            cfg,
            protocol: ctx.protocol.clone(),
            stats: &ctx.stats,
            counters: ctx.stats.shard(i),
            pool,
            shutdown: ctx.shutdown.clone(),
            source,
        };
        workers.push(Worker::new(Epoll::new().map_err(io_err)?, parts).map_err(io_err)?);
    }
    ctx.ready();

    std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(i, worker)| {
                std::thread::Builder::new()
                    .name(format!("sockscale-epoll-{i}"))
                    .spawn_scoped(scope, move || worker.run())
            })
            .collect();
        let mut result = Ok(());
        for handle in handles {
            let outcome = match handle {
                Ok(handle) => handle.join().unwrap_or_else(|_| Err(io::Error::other("worker thread panicked"))),
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                // One worker failing stops the others, so the server exits instead of limping.
                ctx.shutdown.force();
                result = Err(io_err(e));
            }
        }
        result
    })
}
