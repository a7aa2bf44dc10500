//! Moving UDP datagrams in batches: `recvmmsg` into a [`RecvBatch`], `sendmmsg` from a
//! [`SendBatch`], with the kernel's segmentation offloads where it has them.
//!
//! - **GRO** (`UDP_GRO`, Linux 5.0): the kernel may hand over several datagrams of one flow in
//!   one buffer, all of one size but the last, and says the size in a `UDP_GRO` control message;
//!   [`Received::datagrams`] splits the buffer again.
//! - **GSO** (`UDP_SEGMENT`, Linux 4.18): one message carries several equal-size datagrams to one
//!   peer (the last may be shorter), its segment size in a `UDP_SEGMENT` control message; the
//!   kernel cuts them as late as it can, so the stack is walked once per message, not per
//!   datagram.
//!
//! Both are asked for per socket ([`enable_gro`], [`probe_gso`]); a kernel without them refuses
//! the option and the caller moves one datagram per message.
//!
//! - **ECN** (RFC 3168, as QUIC uses it: RFC 9000 §13.4): the two ECN bits of a received
//!   datagram's IP header come in an `IP_TOS`/`IPV6_TCLASS` control message once
//!   [`enable_ecn_reports`] asked for them ([`Received::ecn`]), and a message sent with an ECN
//!   codepoint carries it in the same control message, so it is set per datagram, not per
//!   socket.
//!
//! What the datagrams mean is not known here: that is the I/O-free endpoint's business. Shared
//! by every model that serves UDP.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// `UDP_SEGMENT` and `UDP_GRO` from linux/udp.h (not in every libc target's constants).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// The most segments one GSO message may carry (the kernel's `UDP_MAX_SEGMENTS`, 64 up to
/// Linux 6.8 and 128 since: the lower holds everywhere).
pub const MAX_SEGMENTS: usize = 64;

/// Messages received, and sent, per system call at most: the headers of one call live on the
/// stack, so a call allocates nothing.
pub const BATCH: usize = 32;

/// The most bytes one UDP message carries over IPv4 (65,535 less the IPv4 and UDP headers); a
/// GSO message is bounded by it too, as it is one IP packet until the kernel cuts it.
pub const MAX_MESSAGE: usize = 65_507;

/// Room for the control messages a received datagram may carry: SO_RXQ_OVFL (a u32), UDP_GRO
/// (an int) and IP_TOS (a byte) or IPV6_TCLASS (an int), each CMSG_SPACE(4) = 24 bytes on 64-bit
/// Linux (a 16-byte header and the value padded to 8), with room to spare.
const RECV_CONTROL: usize = 96;
/// Room for a UDP_SEGMENT control message (a u16) and an IP_TOS or IPV6_TCLASS one (an int):
/// CMSG_SPACE(2) + CMSG_SPACE(4) = 48 bytes on 64-bit Linux.
const SEND_CONTROL: usize = 48;
/// The ECN field's mask in a TOS or traffic-class byte.
const ECN_MASK: u8 = 0b11;

/// Which segmentation offloads to use on a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    /// Send equal-size datagrams to one peer in one message (`UDP_SEGMENT`).
    pub gso: bool,
    /// Let the kernel coalesce received datagrams (`UDP_GRO`).
    pub gro: bool,
}

impl Default for Offload {
    fn default() -> Self {
        Offload { gso: true, gro: true }
    }
}

fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: the option value is a live c_int of the size passed.
    syscall!(setsockopt(
        fd,
        level,
        name,
        (&value as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}

/// Ask the kernel to coalesce datagrams received on `fd` (UDP_GRO); an error means it cannot.
pub fn enable_gro(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::SOL_UDP, UDP_GRO, 1)
}

/// Whether the kernel takes GSO messages on `fd`: it knows UDP_SEGMENT if it accepts the socket
/// option (0, the default: no segmenting unless a message asks).
pub fn probe_gso(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::SOL_UDP, UDP_SEGMENT, 0)
}

/// Never fragment what is sent on `fd` and ignore the path MTU the kernel learnt
/// (IP_PMTUDISC_PROBE, and IPV6_DONTFRAG for IPv6): what QUIC's path MTU discovery needs, as it
/// probes larger packets itself and takes a lost probe as the answer (RFC 8899).
pub fn disable_fragmentation(fd: RawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_PROBE)?;
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1)
    } else {
        set_int_option(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE)
    }
}

/// Ask the kernel to attach the ECN bits of each datagram received on `fd` (IP_RECVTOS, and
/// IPV6_RECVTCLASS for an IPv6 socket, which may also receive IPv4 as mapped addresses).
pub fn enable_ecn_reports(fd: RawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        // IPv4-mapped traffic on a dual-stack socket: best effort (a v6-only socket refuses).
        let _ = set_int_option(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
        Ok(())
    } else {
        set_int_option(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    }
}

/// Ask the kernel to attach its running count of dropped datagrams (SO_RXQ_OVFL) to what it
/// delivers, so that drops of a full receive queue can be counted.
pub fn enable_overflow_count(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)
}

/// One buffer received: from `peer`, one datagram, or with GRO several of `segment_size`
/// bytes (the last may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    pub peer: SocketAddr,
    pub data: &'a [u8],
    pub segment_size: Option<usize>,
    /// The ECN bits of its IP header (0: not ECN-capable, or not reported: see
    /// [`enable_ecn_reports`]); GRO coalesces only datagrams with the same.
    pub ecn: u8,
}

impl<'a> Received<'a> {
    /// The datagrams in the buffer, in the order they arrived.
    pub fn datagrams(&self) -> impl Iterator<Item = &'a [u8]> {
        split_segments(self.data, self.segment_size)
    }

    /// How many datagrams the buffer holds.
    pub fn count(&self) -> usize {
        match self.segment_size {
            Some(size) if size > 0 && !self.data.is_empty() => self.data.len().div_ceil(size),
            _ => 1,
        }
    }
}

/// Split a received buffer into its datagrams: equal pieces of `segment_size` bytes, the last
/// maybe shorter; without a segment size (or an empty buffer: a zero-length datagram) it is one.
pub fn split_segments(data: &[u8], segment_size: Option<usize>) -> impl Iterator<Item = &[u8]> {
    let size = match segment_size {
        Some(size) if size > 0 && !data.is_empty() => size,
        // One piece, even when empty: chunks() of an empty slice yields nothing.
        _ => data.len().max(1),
    };
    let empty = data.is_empty().then_some(data);
    data.chunks(size).chain(empty)
}

/// What a received message's control messages said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Control {
    /// UDP_GRO: the buffer holds datagrams of this size.
    pub segment_size: Option<usize>,
    /// SO_RXQ_OVFL: the socket's running count of dropped datagrams.
    pub overflow: Option<u32>,
    /// IP_TOS / IPV6_TCLASS: the datagram's ECN bits (0 when not reported).
    pub ecn: u8,
}

/// Read the control messages of `hdr`, whose control pointer and length describe a buffer of
/// well-formed control messages (as the kernel writes them, or as a test builds them with
/// CMSG_FIRSTHDR/CMSG_NXTHDR).
pub fn parse_control(hdr: &libc::msghdr) -> Control {
    let mut control = Control::default();
    if hdr.msg_control.is_null() || hdr.msg_controllen == 0 {
        return control;
    }
    // SAFETY: per this function's contract, hdr's control pointer and length describe control
    // messages; CMSG_FIRSTHDR/NXTHDR stay within the length, and each data read is of the
    // size the message's type carries, unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                    control.overflow = Some(data.cast::<u32>().read_unaligned());
                }
                (libc::SOL_UDP, UDP_GRO) => {
                    let size = data.cast::<libc::c_int>().read_unaligned();
                    control.segment_size = usize::try_from(size).ok().filter(|&s| s > 0);
                }
                // IPv4's received TOS is one byte; IPv6's traffic class an int.
                (libc::IPPROTO_IP, libc::IP_TOS) => control.ecn = data.read() & ECN_MASK,
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    control.ecn = (data.cast::<libc::c_int>().read_unaligned() as u8) & ECN_MASK;
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    control
}

/// Receive buffers for `recvmmsg`: one slot of [`RecvBatch::SLOT`] bytes per message, so even
/// a 65,507-byte datagram or a full GRO buffer fits; untouched slot pages cost no RSS.
pub struct RecvBatch {
    slots: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    segment_sizes: Vec<Option<usize>>,
    ecn: Vec<u8>,
    control: Vec<[u64; RECV_CONTROL / 8]>,
    count: usize,
    overflow: Option<u32>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// A slot holds the largest UDP payload or GRO buffer.
    pub const SLOT: usize = 64 << 10;

    pub fn new() -> Self {
        let batch = BATCH;
        RecvBatch {
            slots: vec![0; batch * Self::SLOT],
            // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; batch],
            lens: vec![0; batch],
            segment_sizes: vec![None; batch],
            ecn: vec![0; batch],
            control: vec![[0; RECV_CONTROL / 8]; batch],
            count: 0,
            overflow: None,
        }
    }

    /// One `recvmmsg` without waiting; `control`: read control messages (GRO segment sizes,
    /// drop counts). Returns how many buffers arrived, each read with [`RecvBatch::get`].
    pub fn recv(&mut self, fd: RawFd, control: bool) -> io::Result<usize> {
        self.count = 0;
        let slots = self.slots.as_mut_ptr();
        // Slot i starts i * SLOT bytes into `slots`, which holds BATCH slots.
        let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: slots.wrapping_add(i * Self::SLOT).cast(),
            iov_len: Self::SLOT,
        });
        // SAFETY: mmsghdr is plain old data; zeroed is "no name, no control".
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, msg) in msgs.iter_mut().enumerate() {
            msg.msg_hdr.msg_iov = &mut iovs[i];
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            if control {
                msg.msg_hdr.msg_control = self.control[i].as_mut_ptr().cast();
                msg.msg_hdr.msg_controllen = RECV_CONTROL;
            }
        }
        // SAFETY: every header points at a live iovec over its own slot, at its own address
        // storage and at its own control buffer, all of which outlive the call.
        let n = syscall!(recvmmsg(fd, msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()))?;
        let n = n as usize;
        self.overflow = None;
        for (i, msg) in msgs[..n].iter().enumerate() {
            self.lens[i] = msg.msg_len as usize;
            self.segment_sizes[i] = None;
            self.ecn[i] = 0;
            if msg.msg_hdr.msg_controllen > 0 {
                let parsed = parse_control(&msg.msg_hdr);
                self.segment_sizes[i] = parsed.segment_size;
                self.ecn[i] = parsed.ecn;
                self.overflow = parsed.overflow.or(self.overflow);
            }
        }
        self.count = n;
        Ok(n)
    }

    /// Buffer `i` of the last receive; None past its count or if the sender's address is of no
    /// family UDP has (it cannot be answered).
    pub fn get(&self, i: usize) -> Option<Received<'_>> {
        if i >= self.count {
            return None;
        }
        let peer = from_storage(&self.addrs[i])?;
        let start = i * Self::SLOT;
        Some(Received {
            peer,
            data: &self.slots[start..start + self.lens[i]],
            segment_size: self.segment_sizes[i],
            ecn: self.ecn[i],
        })
    }

    /// The drop count (SO_RXQ_OVFL) the newest buffer of the last receive carried, if any did:
    /// the kernel attaches it only once the socket has dropped something.
    pub fn overflow(&self) -> Option<u32> {
        self.overflow
    }
}

/// One message to send: `len` bytes of the batch's buffer from `start`, to `destination`,
/// cut into datagrams of `segment_size` bytes when set (GSO).
#[derive(Debug, Clone, Copy)]
struct Message {
    destination: libc::sockaddr_storage,
    destination_len: libc::socklen_t,
    start: usize,
    len: usize,
    segment_size: Option<u16>,
    /// ECN bits to set (0: none, the socket's default).
    ecn: u8,
    /// Whether the destination (or the connected peer) is IPv6: which control message sets them.
    ipv6: bool,
}

impl Message {
    fn datagrams(&self) -> usize {
        match self.segment_size {
            Some(size) if size > 0 && self.len > 0 => self.len.div_ceil(usize::from(size)),
            _ => 1,
        }
    }
}

/// What one [`SendBatch::send`] came to.
#[derive(Debug, Default)]
pub struct Sent {
    /// Datagrams the kernel took, and their bytes.
    pub datagrams: usize,
    pub bytes: usize,
    /// Datagrams not sent: the socket's buffer was full (a UDP sender never waits), or the
    /// kernel refused the message (an ICMP error for its peer, say).
    pub dropped: usize,
    /// Of `dropped`, those the full buffer stopped: always the batch's last (a caller that
    /// keeps them may send them again once the socket is writable).
    pub blocked: usize,
    /// System calls made (`sendmmsg`, and `sendto` for a refused GSO message's datagrams).
    pub calls: usize,
    /// GSO messages the kernel took, and the datagrams they carried.
    pub gso_messages: usize,
    pub gso_datagrams: usize,
    /// The kernel cannot segment on this path (EIO: a device without checksum offload): a GSO
    /// message was refused, its datagrams sent one by one instead, and later messages should
    /// not ask. (A GSO message refused with EINVAL or EMSGSIZE, a segment above the path's MTU,
    /// is also sent one by one, but says nothing of the next.)
    pub gso_unsupported: Option<io::Error>,
}

/// Messages for one `sendmmsg`: the caller appends each message's bytes to [`SendBatch::buffer`]
/// and then [`SendBatch::push`]es where they go.
pub struct SendBatch {
    buffer: Vec<u8>,
    messages: Vec<Message>,
}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// A batch of at most [`BATCH`] messages.
    pub fn new() -> Self {
        SendBatch { buffer: Vec::new(), messages: Vec::with_capacity(BATCH) }
    }

    /// The bytes of the messages pushed so far; a new message's bytes are appended here.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buffer
    }

    pub fn is_full(&self) -> bool {
        self.messages.len() >= BATCH
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The last `len` bytes of the buffer are one message to `destination`; with
    /// `segment_size`, several datagrams of that size (the last may be shorter). A full batch
    /// takes no more (check [`SendBatch::is_full`]): the message is dropped.
    pub fn push(&mut self, destination: SocketAddr, len: usize, segment_size: Option<usize>) {
        self.push_marked(destination, len, segment_size, 0);
    }

    /// As [`SendBatch::push`], its datagrams' IP headers carrying the ECN bits `ecn` (0: none).
    pub fn push_marked(&mut self, destination: SocketAddr, len: usize, segment_size: Option<usize>, ecn: u8) {
        let ipv6 = destination.is_ipv6();
        let (storage, storage_len) = to_storage(destination);
        let start = self.buffer.len().saturating_sub(len);
        let segment_size = segment_size.filter(|&s| s > 0 && s < len).and_then(|s| u16::try_from(s).ok());
        if self.is_full() {
            debug_assert!(false, "a message pushed on a full batch");
            return;
        }
        self.messages.push(Message {
            destination: storage,
            destination_len: storage_len,
            start,
            len,
            segment_size,
            ecn: ecn & ECN_MASK,
            ipv6,
        });
    }

    /// The last `len` bytes of the buffer are one message to the socket's connected peer (no
    /// address given: the kernel uses the route it keeps for the connection).
    pub fn push_connected(&mut self, len: usize, segment_size: Option<usize>) {
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
        let unnamed: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let start = self.buffer.len().saturating_sub(len);
        let segment_size = segment_size.filter(|&s| s > 0 && s < len).and_then(|s| u16::try_from(s).ok());
        if self.is_full() {
            debug_assert!(false, "a message pushed on a full batch");
            return;
        }
        self.messages.push(Message {
            destination: unnamed,
            destination_len: 0,
            start,
            len,
            segment_size,
            ecn: 0,
            ipv6: false,
        });
    }

    /// Send every message pushed with `sendmmsg` (as many calls as the kernel needs), then
    /// empty the batch: what the socket would not take now is dropped and counted.
    pub fn send(&mut self, fd: RawFd) -> Sent {
        let count = self.messages.len();
        let mut sent = Sent::default();
        let base = self.buffer.as_mut_ptr();
        let messages = &self.messages;
        // Every message's start lies within the buffer (push takes it from the buffer's end).
        let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|i| match messages.get(i) {
            Some(m) => libc::iovec { iov_base: base.wrapping_add(m.start).cast(), iov_len: m.len },
            None => libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 },
        });
        let mut control = [[0u64; SEND_CONTROL / 8]; BATCH];
        // SAFETY: mmsghdr is plain old data; zeroed is "no name, no control".
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, msg) in msgs.iter_mut().enumerate().take(count) {
            let m = &mut self.messages[i];
            let hdr = &mut msg.msg_hdr;
            hdr.msg_iov = &mut iovs[i];
            hdr.msg_iovlen = 1;
            if m.destination_len > 0 {
                hdr.msg_name = (&mut m.destination as *mut libc::sockaddr_storage).cast();
                hdr.msg_namelen = m.destination_len;
            }
            if m.segment_size.is_some() || m.ecn != 0 {
                hdr.msg_control = control[i].as_mut_ptr().cast();
                hdr.msg_controllen = SEND_CONTROL;
                let mut used = 0;
                // SAFETY: the control buffer is SEND_CONTROL bytes, room for a cmsghdr with a
                // u16 (CMSG_SPACE(2)) and one with an int (CMSG_SPACE(4)); CMSG_FIRSTHDR of a
                // header with that length is non-null, and CMSG_NXTHDR after the first message
                // stays within it (the length set so far leaves room for the second).
                unsafe {
                    let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
                    if let Some(size) = m.segment_size {
                        (*cmsg).cmsg_level = libc::SOL_UDP;
                        (*cmsg).cmsg_type = UDP_SEGMENT;
                        (*cmsg).cmsg_len = libc::CMSG_LEN(2) as _;
                        libc::CMSG_DATA(cmsg).cast::<u16>().write_unaligned(size);
                        used += libc::CMSG_SPACE(2) as usize;
                        cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
                    }
                    if m.ecn != 0 && !cmsg.is_null() {
                        let (level, kind) = if m.ipv6 {
                            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                        } else {
                            (libc::IPPROTO_IP, libc::IP_TOS)
                        };
                        (*cmsg).cmsg_level = level;
                        (*cmsg).cmsg_type = kind;
                        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
                        libc::CMSG_DATA(cmsg).cast::<libc::c_int>().write_unaligned(libc::c_int::from(m.ecn));
                        used += libc::CMSG_SPACE(4) as usize;
                    }
                }
                hdr.msg_controllen = used;
            }
        }
        let mut next = 0;
        while next < count {
            // SAFETY: headers next..count point at live iovecs, addresses and control buffers.
            let result = syscall!(sendmmsg(
                fd,
                msgs[next..].as_mut_ptr(),
                (count - next) as u32,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
            ));
            sent.calls += 1;
            match result {
                Ok(n) => {
                    for m in &self.messages[next..next + n as usize] {
                        sent.datagrams += m.datagrams();
                        sent.bytes += m.len;
                        if m.segment_size.is_some() {
                            sent.gso_messages += 1;
                            sent.gso_datagrams += m.datagrams();
                        }
                    }
                    next += n as usize;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    sent.blocked = self.messages[next..].iter().map(Message::datagrams).sum();
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let m = self.messages[next];
                    let refused = matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE));
                    if m.segment_size.is_some() && refused {
                        if e.raw_os_error() == Some(libc::EIO) {
                            sent.gso_unsupported = Some(e);
                        }
                        self.send_singly(fd, &m, &mut sent);
                    } else {
                        // This one message failed (an ICMP error for its peer): drop it, go on.
                        sent.dropped += m.datagrams();
                    }
                    next += 1;
                }
            }
        }
        sent.dropped += self.messages[next..].iter().map(Message::datagrams).sum::<usize>();
        self.messages.clear();
        self.buffer.clear();
        sent
    }

    /// Send a GSO message the kernel refused as its datagrams, one `sendto` each.
    fn send_singly(&self, fd: RawFd, m: &Message, sent: &mut Sent) {
        let size = usize::from(m.segment_size.unwrap_or(u16::MAX)).max(1);
        let name: *const libc::sockaddr_storage = if m.destination_len > 0 { &m.destination } else { std::ptr::null() };
        for datagram in self.buffer[m.start..m.start + m.len].chunks(size) {
            sent.calls += 1;
            // SAFETY: the datagram and the address (or none: the connected peer) are live for
            // the call and only read.
            let result = syscall!(sendto(
                fd,
                datagram.as_ptr().cast(),
                datagram.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                name.cast(),
                m.destination_len
            ));
            match result {
                Ok(_) => {
                    sent.datagrams += 1;
                    sent.bytes += datagram.len();
                }
                Err(_) => sent.dropped += 1,
            }
        }
    }
}

/// The socket address in a `sockaddr_storage` filled by the kernel, if it is IPv4 or IPv6.
fn from_storage(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large
            // enough and aligned enough for.
            let a = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), a.sin6_flowinfo, a.sin6_scope_id)))
        }
        _ => None,
    }
}

/// `addr` as a `sockaddr_storage` and the length of the address in it.
fn to_storage(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let out = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            out.sin_family = libc::AF_INET as libc::sa_family_t;
            out.sin_port = a.port().to_be();
            out.sin_addr = libc::in_addr { s_addr: u32::from(*a.ip()).to_be() };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for a sockaddr_in6.
            let out = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            out.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            out.sin6_port = a.port().to_be();
            out.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
            out.sin6_flowinfo = a.flowinfo();
            out.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control buffer as the kernel writes it: the given (level, type, 4-byte value) messages.
    fn control_buffer(messages: &[(libc::c_int, libc::c_int, u32)]) -> (Vec<u64>, libc::msghdr) {
        let mut buffer = vec![0u64; 16];
        // SAFETY: msghdr is plain old data.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_control = buffer.as_mut_ptr().cast();
        hdr.msg_controllen = buffer.len() * 8;
        let mut used = 0;
        // SAFETY: the buffer is 128 bytes, room for the few 16-byte messages the tests build;
        // each is written within it, CMSG_NXTHDR finding the next from the lengths set.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
            for (i, &(level, ty, value)) in messages.iter().enumerate() {
                (*cmsg).cmsg_level = level;
                (*cmsg).cmsg_type = ty;
                (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
                libc::CMSG_DATA(cmsg).cast::<u32>().write_unaligned(value);
                used += libc::CMSG_SPACE(4) as usize;
                if i + 1 < messages.len() {
                    cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
                }
            }
        }
        hdr.msg_controllen = used;
        (buffer, hdr)
    }

    #[test]
    fn a_gro_buffer_is_split_by_the_segment_size_its_control_message_gives() {
        let (_buffer, hdr) =
            control_buffer(&[(libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 7), (libc::SOL_UDP, UDP_GRO, 1200)]);
        let control = parse_control(&hdr);
        assert_eq!(control, Control { segment_size: Some(1200), overflow: Some(7), ecn: 0 });
        let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let received =
            Received { peer: "127.0.0.1:9".parse().unwrap(), data: &data, segment_size: control.segment_size, ecn: 0 };
        let pieces: Vec<&[u8]> = received.datagrams().collect();
        assert_eq!(pieces.iter().map(|p| p.len()).collect::<Vec<_>>(), [1200, 1200, 600]);
        assert_eq!(pieces.concat(), data);
        assert_eq!(received.count(), 3);
    }

    #[test]
    fn without_a_gro_message_a_buffer_is_one_datagram_even_when_empty() {
        let (_buffer, hdr) = control_buffer(&[(libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)]);
        assert_eq!(parse_control(&hdr), Control { segment_size: None, overflow: Some(1), ecn: 0 });
        assert_eq!(split_segments(b"abc", None).collect::<Vec<_>>(), [b"abc"]);
        assert_eq!(split_segments(b"", Some(1200)).collect::<Vec<_>>(), [b""]);
        assert_eq!(split_segments(b"abcd", Some(2)).collect::<Vec<_>>(), [b"ab", b"cd"]);
    }

    #[test]
    fn addresses_survive_the_round_trip_through_sockaddr_storage() {
        for addr in ["127.0.0.1:4433", "[::1]:443", "[fe80::1%2]:80", "0.0.0.0:0"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let (storage, _) = to_storage(addr);
            assert_eq!(from_storage(&storage), Some(addr));
        }
    }

    #[test]
    fn a_gso_message_counts_its_datagrams() {
        let mut batch = SendBatch::new();
        batch.buffer().extend_from_slice(&[1; 2500]);
        batch.push("127.0.0.1:9".parse().unwrap(), 2500, Some(1200));
        batch.buffer().extend_from_slice(&[2; 100]);
        // A segment size no smaller than the message is no segmenting.
        batch.push("127.0.0.1:9".parse().unwrap(), 100, Some(100));
        assert_eq!(batch.messages[0].datagrams(), 3);
        assert_eq!(batch.messages[0].segment_size, Some(1200));
        assert_eq!((batch.messages[1].start, batch.messages[1].segment_size), (2500, None));
    }

    #[test]
    fn messages_to_the_connected_peer_go_without_an_address_in_one_call() {
        use std::os::fd::AsRawFd;
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.connect(receiver.local_addr().unwrap()).unwrap();
        let gso = probe_gso(sender.as_raw_fd()).is_ok();
        let mut batch = SendBatch::new();
        batch.buffer().extend_from_slice(&[1; 2500]);
        batch.push_connected(2500, gso.then_some(1200));
        batch.buffer().extend_from_slice(&[2; 100]);
        batch.push_connected(100, None);
        let sent = batch.send(sender.as_raw_fd());
        let datagrams = if gso { 4 } else { 2 };
        assert_eq!((sent.datagrams, sent.bytes, sent.dropped, sent.blocked, sent.calls), (datagrams, 2600, 0, 0, 1));
        assert_eq!(sent.gso_datagrams, if gso { 3 } else { 0 });
        let mut buf = [0u8; 4096];
        let expected: &[(usize, u8)] =
            if gso { &[(1200, 1), (1200, 1), (100, 1), (100, 2)] } else { &[(2500, 1), (100, 2)] };
        for &(len, byte) in expected {
            let (n, from) = receiver.recv_from(&mut buf).unwrap();
            assert_eq!(from, sender.local_addr().unwrap());
            assert_eq!((n, buf[0]), (len, byte));
        }
    }

    /// A message marked ECT(0) arrives with it, datagram by datagram when cut by GSO, and an
    /// unmarked one with none; a socket that did not ask for the reports reads none.
    #[test]
    fn ecn_bits_set_on_a_message_are_read_on_each_datagram_it_carries() {
        use std::os::fd::AsRawFd;
        const ECT0: u8 = 0b10;
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_nonblocking(true).unwrap();
        enable_ecn_reports(receiver.as_raw_fd(), false).unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        let gso = probe_gso(sender.as_raw_fd()).is_ok();
        let mut batch = SendBatch::new();
        batch.buffer().extend_from_slice(&[1; 2500]);
        batch.push_marked(to, 2500, gso.then_some(1200), ECT0);
        batch.buffer().extend_from_slice(&[2; 100]);
        batch.push(to, 100, None);
        let sent = batch.send(sender.as_raw_fd());
        assert_eq!(sent.dropped, 0);
        let mut seen = Vec::new();
        let mut received = RecvBatch::new();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.len() < if gso { 4 } else { 2 } && std::time::Instant::now() < until {
            match received.recv(receiver.as_raw_fd(), true) {
                Ok(n) => {
                    for i in 0..n {
                        let r = received.get(i).unwrap();
                        seen.extend(r.datagrams().map(|d| (d.len(), d[0], r.ecn)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(e) => panic!("{e}"),
            }
        }
        let expected: &[(usize, u8, u8)] = if gso {
            &[(1200, 1, ECT0), (1200, 1, ECT0), (100, 1, ECT0), (100, 2, 0)]
        } else {
            &[(2500, 1, ECT0), (100, 2, 0)]
        };
        assert_eq!(seen, expected);
    }
}
