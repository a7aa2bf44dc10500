//! UDP echo in batches: `recvmmsg` up to [`BATCH`] datagrams, answer each from the buffer it
//! arrived in with one `sendmmsg`.
//!
//! A UDP server never queues: a reply the socket will not take now (EAGAIN) is dropped and
//! counted, as the network itself would drop it. Slots are 64 KiB, so even a 65,507-byte
//! datagram is echoed whole; untouched slot pages cost no RSS.
//!
//! Datagrams the kernel drops because the receive queue is full never reach us, so a flood
//! would otherwise be invisible: SO_RXQ_OVFL makes the kernel attach the socket's running drop
//! count to each datagram, and the growth of that count is reported as `datagrams_overflowed`.
//! Zero-length datagrams are echoed as zero-length datagrams, and ICMP errors caused by earlier
//! replies (the peer's port closed) concern that peer only and are skipped.
//!
//! Every engine serves the socket through [`UdpEcho::serve`] and does what its [`UdpTurn`] says:
//! a spent budget comes back after the others, a drained socket waits for readiness, and a
//! failed receive (logged here, at most once a second per process) is looked at again only
//! [`ERROR_PAUSE`] later: the socket may still be reported ready, and an error that persists
//! would spin a level-triggered waiter. A UDP worker serves nothing else, so its pause delays
//! no connection.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::Socket;
use sockscale_sys::syscall;

use crate::admission::LogLimiter;
use crate::stats::Counters;

/// How long a worker waits after a failed receive before it looks again.
pub const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// What one turn of serving the socket came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpTurn {
    /// The socket is empty: wait for the next datagram's readiness.
    Drained,
    /// The read budget ran out with datagrams possibly left: come back after the others.
    Spent,
    /// The receive failed (already logged): look again [`ERROR_PAUSE`] later.
    Failed,
}

pub const BATCH: usize = 32;
const SLOT: usize = 64 << 10;
/// Room for one SO_RXQ_OVFL control message (CMSG_SPACE of a u32 is 16 on 64-bit Linux).
const CONTROL: usize = 32;

pub struct UdpEcho {
    socket: Arc<Socket>,
    slots: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: [usize; BATCH],
    addr_lens: [libc::socklen_t; BATCH],
    control: [[u64; CONTROL / 8]; BATCH],
    /// The kernel's drop count as last seen, when SO_RXQ_OVFL is on.
    overflow_seen: Option<u32>,
    /// The drop count carried by the newest datagram of the last batch, if any carried one.
    overflow_newest: Option<u32>,
    errors: LogLimiter,
}

impl UdpEcho {
    pub fn new(socket: Arc<Socket>) -> Self {
        let on: libc::c_int = 1;
        // SAFETY: the option value is a live c_int of the size passed.
        let overflow_counted = syscall!(setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t
        ));
        if let Err(e) = &overflow_counted {
            tracing::warn!(error = %e, "SO_RXQ_OVFL unavailable: kernel drops of UDP datagrams will not be counted");
        }
        UdpEcho {
            socket,
            slots: vec![0; BATCH * SLOT],
            // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            lens: [0; BATCH],
            addr_lens: [0; BATCH],
            control: [[0; CONTROL / 8]; BATCH],
            // The count starts at zero for a new socket; None until the option is known on.
            overflow_seen: overflow_counted.ok().map(|_| 0),
            overflow_newest: None,
            errors: LogLimiter::udp_errors(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Echo datagrams until the socket is empty or `budget` bytes were received.
    pub fn serve(&mut self, budget: usize, counters: &Counters) -> UdpTurn {
        match self.serve_batches(budget, counters) {
            Ok(true) => UdpTurn::Spent,
            Ok(false) => UdpTurn::Drained,
            Err(e) => {
                if let Some(suppressed) = self.errors.allow(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "UDP receive failed");
                }
                UdpTurn::Failed
            }
        }
    }

    /// Returns true if the budget ran out with datagrams possibly left.
    fn serve_batches(&mut self, budget: usize, counters: &Counters) -> io::Result<bool> {
        let mut received_bytes = 0;
        loop {
            let received = match self.receive() {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                // ICMP errors from earlier replies surface here; they concern one peer only.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
                    ) =>
                {
                    continue
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let bytes: usize = self.lens[..received].iter().sum();
            received_bytes += bytes;
            counters.bytes_in(bytes);
            let (sent, sent_bytes) = self.reply(received);
            counters.bytes_out(sent_bytes);
            counters.datagrams(received, sent, received - sent);
            self.count_overflows(counters);
            if received < BATCH {
                return Ok(false);
            }
            if received_bytes >= budget {
                return Ok(true);
            }
        }
    }

    fn receive(&mut self) -> io::Result<usize> {
        let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: self.slots[i * SLOT..].as_mut_ptr().cast(),
            iov_len: SLOT,
        });
        // SAFETY: mmsghdr is plain old data; zeroed is "no name, no control".
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, msg) in msgs.iter_mut().enumerate() {
            msg.msg_hdr.msg_iov = &mut iovs[i];
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            if self.overflow_seen.is_some() {
                msg.msg_hdr.msg_control = self.control[i].as_mut_ptr().cast();
                msg.msg_hdr.msg_controllen = CONTROL;
            }
        }
        // SAFETY: every header points at a live iovec over its own 64 KiB slot, at its own
        // address storage and at its own control buffer, all of which outlive the call.
        let n =
            syscall!(recvmmsg(self.fd(), msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()))?;
        let n = n as usize;
        self.overflow_newest = None;
        for (i, msg) in msgs[..n].iter().enumerate() {
            self.lens[i] = msg.msg_len as usize;
            self.addr_lens[i] = msg.msg_hdr.msg_namelen;
            if msg.msg_hdr.msg_controllen > 0 {
                self.overflow_newest = read_overflow(&msg.msg_hdr).or(self.overflow_newest);
            }
        }
        Ok(n)
    }

    /// Count the drops the kernel reported since the last batch (the count is cumulative per
    /// socket and wraps at 2^32).
    fn count_overflows(&mut self, counters: &Counters) {
        if let (Some(seen), Some(newest)) = (self.overflow_seen, self.overflow_newest) {
            counters.datagrams_overflowed(u64::from(newest.wrapping_sub(seen)));
            self.overflow_seen = Some(newest);
        }
    }

    /// Send the replies to the first `count` datagrams; returns (sent, bytes sent).
    fn reply(&mut self, count: usize) -> (usize, usize) {
        let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|i| {
            let datagram = &self.slots[i * SLOT..i * SLOT + self.lens[i]];
            let reply = sockscale_proto::udp::reply(datagram);
            libc::iovec { iov_base: reply.as_ptr() as *mut libc::c_void, iov_len: reply.len() }
        });
        // SAFETY: as in receive.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, msg) in msgs.iter_mut().enumerate().take(count) {
            msg.msg_hdr.msg_iov = &mut iovs[i];
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_namelen = self.addr_lens[i];
        }
        let (mut sent, mut sent_bytes, mut next) = (0, 0, 0);
        while next < count {
            // SAFETY: headers next..count point at live iovecs and addresses, as above.
            let result = syscall!(sendmmsg(
                self.fd(),
                msgs[next..].as_mut_ptr(),
                (count - next) as u32,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
            ));
            match result {
                Ok(n) => {
                    let n = n as usize;
                    sent += n;
                    sent_bytes += self.lens[next..next + n].iter().sum::<usize>();
                    next += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // This one reply failed (e.g. an ICMP error for its peer): drop it, go on.
                Err(_) => next += 1,
            }
        }
        (sent, sent_bytes)
    }
}

/// The SO_RXQ_OVFL drop count carried by one received message. The kernel attaches it only
/// once the socket has dropped something.
fn read_overflow(hdr: &libc::msghdr) -> Option<u32> {
    // SAFETY: `hdr` was filled by recvmmsg, so its control pointer and length describe the
    // control messages the kernel wrote into our buffer; CMSG_FIRSTHDR/NXTHDR stay within it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL {
                let data = libc::CMSG_DATA(cmsg).cast::<u32>();
                return Some(data.read_unaligned());
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    None
}
