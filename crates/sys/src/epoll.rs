//! The epoll [`Selector`]: edge-triggered, every descriptor registered once for
//! EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET (or, for a listener shared between threads, with
//! EPOLLEXCLUSIVE), waiting with a nanosecond timeout.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::{Event, Interest, RegisterError, Selector};

const MAX_EVENTS: usize = 1024;

/// An epoll instance: the edge-triggered [`Selector`] of the server's epoll model and of the
/// load generator's engine.
pub struct Epoll {
    fd: OwnedFd,
    ready: Vec<libc::epoll_event>,
    /// The kernel has no epoll_pwait2 (before Linux 5.11): fall back to epoll_wait.
    no_pwait2: bool,
}

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd, ready: vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS], no_pwait2: false })
    }

    /// Watch `fd` for input (or a hang-up) once, level-triggered: after one report it is not
    /// reported again until armed anew (EPOLLONESHOT). `first`: it is not in the set yet. The
    /// thread pool's poller hands each idle connection to one worker this way.
    pub fn arm_oneshot(&mut self, fd: RawFd, token: u64, first: bool) -> io::Result<()> {
        let op = if first { libc::EPOLL_CTL_ADD } else { libc::EPOLL_CTL_MOD };
        self.ctl(op, fd, (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32, token)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn wait(epoll: &mut Epoll) -> Vec<Event> {
        let mut events = Vec::new();
        epoll.select(&mut events, Some(Duration::from_millis(100))).unwrap();
        events
    }

    #[test]
    fn interest_maps_to_edge_triggered_flags() {
        let et = libc::EPOLLET as u32;
        assert_eq!(flags(Interest::NONE), et);
        assert_eq!(flags(Interest::READ), et | (libc::EPOLLIN | libc::EPOLLRDHUP) as u32);
        assert_eq!(flags(Interest::BOTH), et | (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLOUT) as u32);
    }

    #[test]
    fn readiness_is_reported_once_per_edge() {
        let mut epoll = Epoll::new().unwrap();
        assert!(epoll.edge_triggered());
        let (mut peer, socket) = UnixStream::pair().unwrap();
        epoll.register(socket.as_raw_fd(), 7, Interest::BOTH, false).unwrap();
        assert_eq!(wait(&mut epoll), [Event { token: 7, readable: false, writable: true, closed: false }]);

        peer.write_all(b"x").unwrap();
        assert_eq!(wait(&mut epoll), [Event { token: 7, readable: true, writable: true, closed: false }]);
        // Nothing was read, but no new edge came: edge-triggered epoll stays silent.
        let mut events = Vec::new();
        epoll.select(&mut events, Some(Duration::ZERO)).unwrap();
        assert_eq!(events, []);

        drop(peer);
        let events = wait(&mut epoll);
        assert_eq!(events.len(), 1);
        assert!(events[0].closed && events[0].readable, "{events:?}");

        epoll.deregister(socket.as_raw_fd()).unwrap();
        assert!(epoll.deregister(socket.as_raw_fd()).is_err(), "not registered any more");
    }

    #[test]
    fn a_waker_is_readable_from_wake_until_reset() {
        let mut epoll = Epoll::new().unwrap();
        let waker = crate::Waker::new().unwrap();
        epoll.register(waker.fd().as_raw_fd(), 1, Interest::READ, false).unwrap();
        waker.wake();
        waker.wake();
        assert_eq!(wait(&mut epoll), [Event { token: 1, readable: true, writable: false, closed: false }]);
        let mut probe = [libc::pollfd { fd: waker.fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        assert_eq!(crate::ppoll(&mut probe, Some(Duration::ZERO)).unwrap(), 1, "still readable before reset");
        waker.reset();
        assert_eq!(crate::ppoll(&mut probe, Some(Duration::ZERO)).unwrap(), 0, "drained by one reset");
    }
}
