//! UDP echo in batches: `recvmmsg` up to [`BATCH`] datagrams, answer each from the buffer it
//! arrived in with one `sendmmsg`.
//!
//! A UDP server never queues: a reply the socket will not take now (EAGAIN) is dropped and
//! counted, as the network itself would drop it. Slots are 64 KiB, so even a 65,507-byte
//! datagram is echoed whole; untouched slot pages cost no RSS.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use socket2::Socket;

use crate::stats::Counters;
use crate::sys::syscall;

pub const BATCH: usize = 32;
const SLOT: usize = 64 << 10;

pub struct UdpEcho {
    socket: Arc<Socket>,
    slots: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: [usize; BATCH],
    addr_lens: [libc::socklen_t; BATCH],
}

impl UdpEcho {
    pub fn new(socket: Arc<Socket>) -> Self {
        UdpEcho {
            socket,
            slots: vec![0; BATCH * SLOT],
            // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            lens: [0; BATCH],
            addr_lens: [0; BATCH],
        }
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Echo datagrams until the socket is empty or `budget` bytes were received. Returns true
    /// if the budget ran out with datagrams possibly left.
    pub fn serve(&mut self, budget: usize, counters: &Counters) -> io::Result<bool> {
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
        }
        // SAFETY: every header points at a live iovec over its own 64 KiB slot and at its own
        // address storage, all of which outlive the call.
        let n =
            syscall!(recvmmsg(self.fd(), msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()))?;
        let n = n as usize;
        for (i, msg) in msgs[..n].iter().enumerate() {
            self.lens[i] = msg.msg_len as usize;
            self.addr_lens[i] = msg.msg_hdr.msg_namelen;
        }
        Ok(n)
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
