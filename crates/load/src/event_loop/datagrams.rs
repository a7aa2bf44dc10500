//! The datagram path of `load udp`, moved in batches by the server's mover
//! (`sockscale_sys::udp`): the datagrams a connection begins in one turn leave in one
//! `sendmmsg`, equal ones as one message the kernel cuts (UDP GSO, `--udp-gso`) where it has
//! it, and the answers come by `recvmmsg`, coalesced by the kernel (UDP GRO, `--udp-gro`) where
//! it has it. Which datagrams, and what an answer means, are the `Connection`'s.

use std::io;
use std::os::fd::RawFd;

use sockscale_sys::udp::{self as batch, Offload, RecvBatch, SendBatch, Sent, BATCH, MAX_MESSAGE, MAX_SEGMENTS};

/// One thread's datagram batches and the offloads its sockets use.
pub(super) struct Datagrams {
    out: SendBatch,
    /// When each datagram in `out` was due (the schedule's slip is recorded once it left).
    dues: Vec<u64>,
    /// Datagrams of the message being built: the last `open * open_len` bytes of `out`'s buffer.
    open: usize,
    open_len: usize,
    /// Messages pushed to `out` (the open one not yet).
    messages: usize,
    pub(super) received: RecvBatch,
    /// What the flags asked for and, once a socket asked the kernel, what it took.
    offload: Offload,
    /// Whether the kernel was asked yet (by the thread's first socket).
    probed: bool,
}

impl Datagrams {
    /// `depth`: datagrams in flight per socket. At one, no answers can be coalesced: GRO is
    /// not asked for, and a plain `recv` reads them (it costs less than a batch's headers).
    pub(super) fn new(wanted: Offload, depth: usize) -> Self {
        let wanted = Offload { gro: wanted.gro && depth > 1, ..wanted };
        Datagrams {
            out: SendBatch::new(),
            dues: Vec::new(),
            open: 0,
            open_len: 0,
            messages: 0,
            received: RecvBatch::new(),
            offload: wanted,
            probed: false,
        }
    }

    /// A new datagram socket: ask the kernel for the offloads still wanted. The thread's first
    /// socket learns whether the kernel has GSO (a socket option it knows or not); GRO is
    /// asked of every socket, as it is a property of each.
    pub(super) fn prepare(&mut self, fd: RawFd) {
        if self.offload.gso && !self.probed {
            if let Err(e) = batch::probe_gso(fd) {
                tracing::info!(error = %e, "UDP GSO off: the kernel refused it");
                self.offload.gso = false;
            }
        }
        if self.offload.gro {
            if let Err(e) = batch::enable_gro(fd) {
                tracing::info!(error = %e, "UDP GRO off: the kernel refused it");
                self.offload.gro = false;
            }
        }
        self.probed = true;
    }

    /// No room for another message, the open one counted: send before adding.
    pub(super) fn is_full(&self) -> bool {
        self.messages + usize::from(self.open > 0) >= BATCH
    }

    pub(super) fn is_empty(&self) -> bool {
        self.dues.is_empty()
    }

    /// Add a datagram due at `due_ns` to the batch (to the connected peer of the socket the
    /// batch is sent on). Check [`Datagrams::is_full`] first.
    pub(super) fn add(&mut self, datagram: &[u8], due_ns: u64) {
        let len = datagram.len();
        if self.open > 0 && len != self.open_len {
            self.close_message();
        }
        self.out.buffer().extend_from_slice(datagram);
        self.dues.push(due_ns);
        self.open += 1;
        self.open_len = len;
        let most = if self.offload.gso { MAX_SEGMENTS.min(MAX_MESSAGE / len.max(1)).max(1) } else { 1 };
        if self.open >= most {
            self.close_message();
        }
    }

    fn close_message(&mut self) {
        if self.open == 0 {
            return;
        }
        let segment = (self.open > 1).then_some(self.open_len);
        self.out.push_connected(self.open * self.open_len, segment);
        self.messages += 1;
        self.open = 0;
    }

    /// Send the batch on `fd`; `left(due_ns)` for each datagram that left. What the full
    /// socket buffer stopped is in [`Sent::blocked`]: the batch's last datagrams.
    pub(super) fn send(&mut self, fd: RawFd, mut left: impl FnMut(u64)) -> Sent {
        if self.messages == 0 && self.open == 1 {
            // One datagram (a turn at --depth 1): a plain `send` costs less than a batch's
            // headers.
            return self.send_one(fd, left);
        }
        self.close_message();
        let sent = self.out.send(fd);
        self.messages = 0;
        if let Some(e) = &sent.gso_unsupported {
            tracing::info!(error = %e, "UDP GSO off: the path cannot segment");
            self.offload.gso = false;
        }
        let gone = self.dues.len() - sent.blocked.min(self.dues.len());
        self.dues[..gone].iter().for_each(|&due| left(due));
        self.dues.clear();
        sent
    }
}

impl Datagrams {
    fn send_one(&mut self, fd: RawFd, mut left: impl FnMut(u64)) -> Sent {
        let mut sent = Sent { calls: 1, ..Sent::default() };
        let bytes = self.out.buffer();
        match sockscale_sys::send(fd, bytes) {
            Ok(n) => {
                sent.datagrams = 1;
                sent.bytes = n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sent.dropped = 1;
                sent.blocked = 1;
            }
            Err(_) => sent.dropped = 1,
        }
        bytes.clear();
        self.open = 0;
        if sent.blocked == 0 {
            self.dues.iter().for_each(|&due| left(due));
        }
        self.dues.clear();
        sent
    }
}

/// What one read of a datagram socket came to.
pub(super) enum Read {
    /// Buffers in `received`, and whether the socket may hold more (the batch was full).
    Buffers {
        count: usize,
        more: bool,
    },
    /// One datagram of this length in the caller's buffer (the socket may hold more).
    One(usize),
    /// Nothing to read.
    Empty,
    /// ICMP port unreachable for an earlier datagram; the socket lives on.
    Refused,
    Interrupted,
    Failed(io::Error),
}

impl Datagrams {
    /// One read of `fd`: with GRO a `recvmmsg` (a buffer's segment size comes in a control
    /// message), else one datagram by `recv` into `buf` (measured cheaper per datagram than a
    /// batch: `recvmmsg` pays off only when the kernel coalesces).
    pub(super) fn read(&mut self, fd: RawFd, buf: &mut [u8]) -> Read {
        let read = if self.offload.gro {
            self.received.recv(fd, true).map(|count| Read::Buffers { count, more: count == BATCH })
        } else {
            sockscale_sys::recv(fd, buf).map(Read::One)
        };
        match read {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Read::Empty,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Read::Interrupted,
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Read::Refused,
            Err(e) => Read::Failed(e),
        }
    }
}
