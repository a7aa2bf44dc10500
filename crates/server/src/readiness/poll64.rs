//! `--model poll64`: groups of at most 64 connections, a thread per group waiting in poll(2) —
//! the counterpart of WSAEventSelect, whose WSAWaitForMultipleEvents waits on at most 64 events,
//! so the seed ran one thread per 64 connections.
//!
//! Threads grow with connections, through the acceptor of `groups` (shared with `uring64`): the
//! model's own thread accepts and hands each connection to the first group with room, starting
//! another group, `sockscale-p64-N`, when every group is full. A group is a thread running the
//! shared event loop (`readiness`) over a [`PollSelector`] whose pollfd array holds at most 64
//! connections plus the group's two wake-up eventfds (shutdown, inbox). Readiness is
//! level-triggered, with the registered interest kept minimal by the loop. At 50,000
//! connections that is 782 group threads, as the seed's 791.
//!
//! All groups share one buffer pool of `--pool-buffers`, since their number is not known in
//! advance. UDP is served by the model's own thread as a single group owning the socket.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use sockscale_sys::{self as sys, Event, Interest, RegisterError, Selector};

use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::groups::{GroupAcceptor, GroupLoad, NewGroup};
use crate::model::Model;
use crate::pool::BufferPool;
use crate::readiness::{Source, Worker, WorkerParts, INBOX};
use crate::udp::UdpService;

/// Connections per group: WSAWaitForMultipleEvents' MAXIMUM_WAIT_OBJECTS.
pub const GROUP_SIZE: usize = 64;

/// The loop's own descriptors (its waker, the inbox, a listener, a UDP socket) have tokens from
/// `INBOX` up; everything below is a connection.
fn is_connection(token: u64) -> bool {
    token < INBOX
}

/// poll(2) over one group's descriptors.
pub struct PollSelector {
    fds: Vec<libc::pollfd>,
    tokens: Vec<u64>,
    connections: usize,
    capacity: usize,
    load: Option<Arc<GroupLoad>>,
}

impl PollSelector {
    /// A selector for at most `capacity` connections (the loop's wake-up descriptors aside).
    pub fn new(capacity: usize) -> Self {
        PollSelector { fds: Vec::new(), tokens: Vec::new(), connections: 0, capacity, load: None }
    }

    fn for_group(load: Arc<GroupLoad>) -> Self {
        PollSelector { load: Some(load), ..Self::new(GROUP_SIZE) }
    }

    fn position(&self, fd: RawFd) -> io::Result<usize> {
        self.fds.iter().position(|p| watched_fd(p) == fd).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }
}

/// The pollfd of `fd` watching for `interest`. One that wants nothing gets a negative descriptor,
/// which poll skips: otherwise a hang-up, reported whatever was asked, would wake it every time.
fn pollfd(fd: RawFd, interest: Interest) -> libc::pollfd {
    let mut events = 0;
    if interest.read {
        events |= libc::POLLIN;
    }
    if interest.write {
        events |= libc::POLLOUT;
    }
    libc::pollfd { fd: if events == 0 { !fd } else { fd }, events, revents: 0 }
}

fn watched_fd(p: &libc::pollfd) -> RawFd {
    if p.fd < 0 {
        !p.fd
    } else {
        p.fd
    }
}

impl Selector for PollSelector {
    fn edge_triggered(&self) -> bool {
        false
    }

    fn register(&mut self, fd: RawFd, token: u64, interest: Interest, _exclusive: bool) -> Result<(), RegisterError> {
        if is_connection(token) {
            if self.connections >= self.capacity {
                return Err(RegisterError::Full(format!("this poll group already has {} connections", self.capacity)));
            }
            self.connections += 1;
        }
        self.fds.push(pollfd(fd, interest));
        self.tokens.push(token);
        Ok(())
    }

    fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let at = self.position(fd)?;
        self.fds[at] = pollfd(fd, interest);
        self.tokens[at] = token;
        Ok(())
    }

    fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        let at = self.position(fd)?;
        self.fds.swap_remove(at);
        let token = self.tokens.swap_remove(at);
        if is_connection(token) {
            self.connections -= 1;
            if let Some(load) = &self.load {
                // The loop deregisters a connection just before closing it: its slot is free,
                // and so is a descriptor for an acceptor paused on EMFILE.
                load.release();
            }
        }
        Ok(())
    }

    fn select(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        let mut ready = match sys::ppoll(&mut self.fds, timeout) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        };
        for (p, &token) in self.fds.iter().zip(&self.tokens) {
            if ready == 0 {
                break;
            }
            if p.revents == 0 {
                continue;
            }
            ready -= 1;
            let bits = p.revents;
            events.push(Event {
                token,
                readable: bits & libc::POLLIN != 0,
                writable: bits & libc::POLLOUT != 0,
                closed: bits & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
            });
        }
        Ok(())
    }
}

/// `--model poll64`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = &ctx.cfg;
    let io_err = |source| ServerError::Io { model: Model::Poll64.name(), error: source };
    let pool = BufferPool::new(cfg.buffer_size, cfg.pool_buffers, cfg.lock_memory)?;
    if ctx.listen.is_udp() {
        let parts = WorkerParts {
            cfg,
            protocol: ctx.protocol.clone(),
            resources: &ctx.resources,
            stats: &ctx.stats,
            counters: ctx.stats.shard(0),
            pool: &pool,
            shutdown: ctx.shutdown.clone(),
            source: Source::Udp(Box::new(UdpService::new(ctx.listen.shared(), cfg))),
            active: None,
            udp: None,
        };
        let worker = Worker::new(PollSelector::new(GROUP_SIZE), parts).map_err(io_err)?;
        ctx.ready();
        return worker.run().map_err(io_err);
    }

    let acceptor = GroupAcceptor::new(cfg, &ctx.stats, &ctx.shutdown, &ctx.protocol, ctx.listen.shared(), GROUP_SIZE)
        .map_err(io_err)?;
    // `--http3`: one more thread, a group of its own owning the UDP socket, as under
    // `--proto udp` (one socket, one reader: every QUIC connection on one endpoint).
    let http3 = match ctx.listen.http3() {
        Some(udp) => {
            let parts = WorkerParts {
                cfg,
                protocol: ctx.protocol.clone(),
                resources: &ctx.resources,
                stats: &ctx.stats,
                counters: ctx.stats.shard(0),
                pool: &pool,
                shutdown: ctx.shutdown.clone(),
                source: Source::Udp(Box::new(UdpService::http3(udp.shared(), &ctx))),
                active: None,
                udp: None,
            };
            Some(Worker::new(PollSelector::new(GROUP_SIZE), parts).map_err(io_err)?)
        }
        None => None,
    };
    ctx.ready();
    let (stats, pool, shutdown, protocol, resources) =
        (&*ctx.stats, &pool, &ctx.shutdown, &ctx.protocol, &ctx.resources);
    std::thread::scope(|scope| {
        let http3 = match http3 {
            Some(worker) => {
                let stopper = shutdown.clone();
                let spawned =
                    std::thread::Builder::new().name("sockscale-p64-h3".into()).spawn_scoped(scope, move || {
                        let outcome = worker.run();
                        if outcome.is_err() {
                            stopper.force();
                        }
                        outcome
                    });
                match spawned {
                    Ok(handle) => Some(handle),
                    Err(e) => {
                        shutdown.force();
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        let groups = acceptor.run(scope, |scope, group: NewGroup| {
            let parts = WorkerParts {
                cfg,
                protocol: protocol.clone(),
                resources,
                stats,
                counters: stats.shard(group.index),
                pool,
                shutdown: shutdown.clone(),
                source: Source::Inbox(group.inbox),
                // Refused by the model's capability data: a set per group of 64 would be none.
                active: None,
                udp: None,
            };
            let worker = Worker::new(PollSelector::for_group(group.load), parts)?;
            let shutdown = shutdown.clone();
            std::thread::Builder::new().name(format!("sockscale-p64-{}", group.index)).spawn_scoped(scope, move || {
                let outcome = worker.run();
                if outcome.is_err() {
                    // Fail as epoll does: one worker failing stops the server, not just its group.
                    shutdown.force();
                }
                outcome
            })
        });
        let udp = match http3.map(|h| h.join()) {
            None => Ok(()),
            Some(joined) => joined.unwrap_or_else(|_| Err(io::Error::other("the HTTP/3 thread panicked"))),
        };
        groups.and(udp)
    })
    .map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::testing;
    use crate::readiness::WAKER;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    const ZERO: Option<Duration> = Some(Duration::ZERO);

    fn group() -> (PollSelector, Arc<GroupLoad>) {
        let load = testing::load();
        (PollSelector::for_group(load.clone()), load)
    }

    #[test]
    fn a_group_takes_64_connections_besides_its_wakers() {
        let (mut poll, load) = group();
        poll.register(100, WAKER, Interest::READ, false).unwrap();
        poll.register(101, INBOX, Interest::READ, false).unwrap();
        for i in 0..GROUP_SIZE as RawFd {
            poll.register(200 + i, i as u64, Interest::READ, false).unwrap();
        }
        // The acceptor had reserved a slot for each.
        testing::hand_over(&load, GROUP_SIZE);
        match poll.register(300, 300, Interest::READ, false) {
            Err(RegisterError::Full(reason)) => assert!(reason.contains("64"), "{reason}"),
            other => panic!("the 65th connection: expected Full, got {other:?}"),
        }
        poll.deregister(210).unwrap();
        assert_eq!(load.connections(), GROUP_SIZE - 1, "a close gives the slot back");
        poll.register(300, 300, Interest::READ, false).unwrap();
        // Wakers leaving do not count as connections.
        poll.deregister(100).unwrap();
        assert_eq!(load.connections(), GROUP_SIZE - 1);
        assert_eq!(poll.fds.len(), GROUP_SIZE + 1);
    }

    #[test]
    fn a_close_wakes_a_paused_acceptor() {
        let (mut poll, load) = group();
        poll.register(200, 1, Interest::READ, false).unwrap();
        poll.register(201, 2, Interest::READ, false).unwrap();
        testing::hand_over(&load, 2);
        let waker = testing::acceptor_waker(&load);
        let mut probe = [libc::pollfd { fd: waker, events: libc::POLLIN, revents: 0 }];
        poll.deregister(200).unwrap();
        assert_eq!(sys::ppoll(&mut probe, Some(Duration::ZERO)).unwrap(), 0, "not paused: no wake-up");
        testing::pause_acceptor(&load);
        poll.deregister(201).unwrap();
        assert_eq!(sys::ppoll(&mut probe, Some(Duration::ZERO)).unwrap(), 1, "paused: woken");
    }

    #[test]
    fn level_triggered_with_minimal_interest() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        let mut poll = PollSelector::new(GROUP_SIZE);
        let mut events = Vec::new();
        poll.register(fd, 5, Interest::READ, false).unwrap();
        poll.select(&mut events, ZERO).unwrap();
        assert!(events.is_empty(), "{events:?}");
        a.write_all(b"x").unwrap();
        for _ in 0..2 {
            events.clear();
            poll.select(&mut events, ZERO).unwrap();
            assert_eq!(events, [Event { token: 5, readable: true, writable: false, closed: false }]);
        }
        // Wanting nothing, a hung-up descriptor must not wake the group.
        poll.reregister(fd, 5, Interest::NONE).unwrap();
        drop(a);
        events.clear();
        poll.select(&mut events, ZERO).unwrap();
        assert!(events.is_empty(), "{events:?}");
        poll.reregister(fd, 6, Interest::READ).unwrap();
        events.clear();
        poll.select(&mut events, ZERO).unwrap();
        assert_eq!(events.len(), 1);
        assert!(events[0].token == 6 && events[0].readable);
        poll.deregister(fd).unwrap();
        assert!(poll.deregister(fd).is_err());
    }
}
