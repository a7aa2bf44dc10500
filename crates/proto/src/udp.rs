//! Datagram protocols as I/O-free endpoints, and UDP echo, the first of them.
//!
//! An [`Endpoint`] has the shape of quinn-proto's: it is fed each datagram with its peer's
//! address and the time ([`Endpoint::handle`]), and asked for what to send
//! ([`Endpoint::poll_transmit`]: the bytes appended to a buffer, a [`Transmit`] saying to whom
//! and, for several equal-size datagrams to one peer, their segment size, so that the socket
//! layer can send them in one GSO message) and when to be woken ([`Endpoint::poll_timeout`],
//! [`Endpoint::handle_timeout`]). It never touches a socket: every model's UDP path moves
//! batches of datagrams between the kernel and an endpoint, and a datagram protocol (QUIC,
//! through quinn-proto's own `Endpoint`) is written once, here.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

/// The most bytes one transmit may carry: one UDP message over IPv4 (65,535 less the IPv4 and
/// UDP headers). A GSO message is one IP packet until the kernel cuts it, so this bounds it too.
pub const MAX_TRANSMIT: usize = 65_507;

/// Datagrams to send, whose bytes [`Endpoint::poll_transmit`] appended to the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub destination: SocketAddr,
    /// Bytes appended.
    pub size: usize,
    /// Set when the bytes are several datagrams: each of this size, the last maybe shorter.
    pub segment_size: Option<usize>,
    /// The ECN bits to set in their IP headers (RFC 3168: 0b10 ECT(0), 0b01 ECT(1); 0: none).
    pub ecn: u8,
}

impl Transmit {
    /// How many datagrams the transmit carries.
    pub fn datagrams(&self) -> usize {
        match self.segment_size {
            Some(s) if s > 0 && self.size > 0 => self.size.div_ceil(s),
            _ => 1,
        }
    }
}

/// A datagram protocol, I/O-free: datagrams and the time in, datagrams and a wake-up out.
pub trait Endpoint {
    /// One datagram arrived from `peer` at `now`.
    fn handle(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]);

    /// As [`Endpoint::handle`], with the ECN bits of the datagram's IP header (0: not
    /// ECN-capable, or not reported). Only an endpoint that [`Endpoint::uses_ecn`] is given them.
    fn handle_ecn(&mut self, now: Instant, peer: SocketAddr, ecn: u8, datagram: &[u8]) {
        let _ = ecn;
        self.handle(now, peer, datagram);
    }

    /// Whether the endpoint reads ECN (QUIC: RFC 9000 §13.4): the socket then asks the kernel for
    /// each datagram's ECN bits.
    fn uses_ecn(&self) -> bool {
        false
    }

    /// The next datagrams to send: their bytes appended to `buf`, at most `max_segments`
    /// datagrams of one size to one peer (1: one datagram, as without GSO), at most
    /// [`MAX_TRANSMIT`] bytes. None: nothing to send now.
    fn poll_transmit(&mut self, now: Instant, max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit>;

    /// When the endpoint wants [`Endpoint::handle_timeout`] called; None: never, until
    /// something arrives. The socket layer serves the endpoint at this instant whether or not
    /// a datagram has arrived: a timer's datagrams (an ACK, a retransmission) go out then.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The time is `now`: what fell due is done (and may have queued datagrams to send).
    fn handle_timeout(&mut self, now: Instant);

    /// Datagrams the endpoint dropped since the last call, because its queue was full.
    fn take_dropped(&mut self) -> u64 {
        0
    }

    /// The server's drain began at `now`: take no new work, finish what is in flight (QUIC:
    /// GOAWAY on every connection, then close each once its requests are answered). What this
    /// queues goes out through [`Endpoint::poll_transmit`] as usual; the socket layer keeps
    /// serving the endpoint until [`Endpoint::drained`] or the drain's deadline.
    fn begin_drain(&mut self, _now: Instant) {}

    /// Whether nothing is left in flight since [`Endpoint::begin_drain`]: the socket may be
    /// closed. UDP echo holds nothing across datagrams, so it is drained at once.
    fn drained(&self) -> bool {
        true
    }
}

/// The reply to one datagram under UDP echo: the datagram itself.
pub fn reply(datagram: &[u8]) -> &[u8] {
    datagram
}

/// UDP echo: each datagram is answered with an identical datagram to its sender. There is no
/// per-peer state and no timer. Replies wait in arrival order; consecutive replies to one peer
/// of one size go out as one transmit, which is what lets a GSO-capable socket send a burst
/// back in one message.
#[derive(Debug)]
pub struct EchoEndpoint {
    /// The replies' bytes, from `head` on, in the order of `queue`.
    bytes: Vec<u8>,
    head: usize,
    queue: VecDeque<(SocketAddr, usize)>,
    capacity: usize,
    dropped: u64,
}

impl EchoEndpoint {
    /// An echo endpoint holding at most `capacity` bytes of replies not yet polled; the
    /// socket layer polls after every batch it receives, so one batch's worth is enough.
    pub fn new(capacity: usize) -> Self {
        EchoEndpoint { bytes: Vec::new(), head: 0, queue: VecDeque::new(), capacity, dropped: 0 }
    }

    /// Replies waiting to be polled.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}

impl Endpoint for EchoEndpoint {
    fn handle(&mut self, _now: Instant, peer: SocketAddr, datagram: &[u8]) {
        let reply = reply(datagram);
        if self.bytes.len() - self.head + reply.len() > self.capacity {
            self.dropped += 1;
            return;
        }
        self.bytes.extend_from_slice(reply);
        self.queue.push_back((peer, reply.len()));
    }

    fn poll_transmit(&mut self, _now: Instant, max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (destination, size) = self.queue.pop_front()?;
        let mut total = size;
        let mut count = 1;
        // A zero-length datagram has no segment size to cut by: it goes alone.
        while size > 0 && count < max_segments {
            match self.queue.front() {
                // Equal sizes join; a shorter one may end the message (GSO's last segment).
                Some(&(peer, len)) if peer == destination && len <= size && len > 0 && total + len <= MAX_TRANSMIT => {
                    self.queue.pop_front();
                    total += len;
                    count += 1;
                    if len < size {
                        break;
                    }
                }
                _ => break,
            }
        }
        buf.extend_from_slice(&self.bytes[self.head..self.head + total]);
        self.head += total;
        if self.queue.is_empty() {
            self.bytes.clear();
            self.head = 0;
        }
        Some(Transmit { destination, size: total, segment_size: (count > 1).then_some(size), ecn: 0 })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Every transmit the endpoint gives, with its bytes.
    fn drain(endpoint: &mut EchoEndpoint, now: Instant, max_segments: usize) -> Vec<(Transmit, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(t) = endpoint.poll_transmit(now, max_segments, &mut buf) {
            assert_eq!(buf.len(), t.size);
            out.push((t, std::mem::take(&mut buf)));
        }
        out
    }

    #[test]
    fn reply_is_the_datagram() {
        for d in [&b""[..], b"x", &[0u8; 1472][..]] {
            assert_eq!(super::reply(d), d);
        }
    }

    #[test]
    fn each_datagram_goes_back_to_its_sender_in_order() {
        let now = Instant::now();
        let mut e = EchoEndpoint::new(1 << 20);
        e.handle(now, peer(1), b"one");
        e.handle(now, peer(2), b"two!");
        e.handle(now, peer(1), b"");
        let out = drain(&mut e, now, 64);
        let seen: Vec<_> = out.iter().map(|(t, b)| (t.destination, b.clone(), t.segment_size)).collect();
        assert_eq!(
            seen,
            [(peer(1), b"one".to_vec(), None), (peer(2), b"two!".to_vec(), None), (peer(1), Vec::new(), None)]
        );
        assert_eq!(e.queued(), 0);
        assert_eq!(e.poll_transmit(now, 64, &mut Vec::new()), None);
    }

    #[test]
    fn equal_size_replies_to_one_peer_are_one_transmit_up_to_max_segments() {
        let now = Instant::now();
        let mut e = EchoEndpoint::new(1 << 20);
        for i in 0..5u8 {
            e.handle(now, peer(1), &[i; 1200]);
        }
        e.handle(now, peer(1), &[9; 700]); // shorter: may end a GSO message
        e.handle(now, peer(1), &[8; 1200]); // after a shorter one: a new message
        e.handle(now, peer(2), &[7; 1200]); // another peer: a new message
        let out = drain(&mut e, now, 4);
        let shape: Vec<_> = out.iter().map(|(t, _)| (t.destination, t.size, t.segment_size, t.datagrams())).collect();
        assert_eq!(
            shape,
            [
                (peer(1), 4800, Some(1200), 4),
                (peer(1), 1900, Some(1200), 2),
                (peer(1), 1200, None, 1),
                (peer(2), 1200, None, 1),
            ]
        );
        let mut expected = Vec::new();
        for i in 0..5u8 {
            expected.extend_from_slice(&[i; 1200]);
        }
        expected.extend_from_slice(&[9; 700]);
        assert_eq!(out[0].1.iter().chain(&out[1].1).copied().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn one_segment_per_transmit_when_gso_is_off() {
        let now = Instant::now();
        let mut e = EchoEndpoint::new(1 << 20);
        for _ in 0..3 {
            e.handle(now, peer(1), &[1; 512]);
        }
        let out = drain(&mut e, now, 1);
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|(t, _)| t.segment_size.is_none() && t.size == 512));
    }

    #[test]
    fn a_transmit_never_exceeds_one_udp_message() {
        let now = Instant::now();
        let mut e = EchoEndpoint::new(1 << 20);
        for _ in 0..64 {
            e.handle(now, peer(1), &[0; 1200]);
        }
        let out = drain(&mut e, now, 64);
        // 54 segments of 1,200 bytes fit in 65,507; the other 10 follow.
        assert_eq!(out.iter().map(|(t, _)| t.datagrams()).collect::<Vec<_>>(), [54, 10]);
        assert!(out.iter().all(|(t, _)| t.size <= MAX_TRANSMIT));
    }

    #[test]
    fn a_full_queue_drops_and_counts_then_takes_again_once_polled() {
        let now = Instant::now();
        let mut e = EchoEndpoint::new(1000);
        e.handle(now, peer(1), &[0; 600]);
        e.handle(now, peer(1), &[0; 600]);
        assert_eq!((e.queued(), e.take_dropped(), e.take_dropped()), (1, 1, 0));
        assert_eq!(drain(&mut e, now, 64).len(), 1);
        e.handle(now, peer(1), &[0; 600]);
        assert_eq!(e.queued(), 1);
    }

    #[test]
    fn echo_never_asks_to_be_woken() {
        let start = Instant::now();
        let mut e = EchoEndpoint::new(1 << 20);
        assert_eq!(e.poll_timeout(), None);
        e.handle(start, peer(1), b"x");
        assert_eq!(e.poll_timeout(), None);
        e.handle_timeout(start + Duration::from_secs(60));
        // A timeout changes nothing queued: the reply is still there, once.
        assert_eq!(drain(&mut e, start + Duration::from_secs(61), 64).len(), 1);
    }
}
