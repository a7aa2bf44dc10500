//! A UDP socket served through an I/O-free datagram endpoint: received batches go into the
//! [`Endpoint`], its transmits come back out in send batches. The batches themselves move
//! through sockscale_sys::udp (recvmmsg/sendmmsg with GRO and GSO); what the datagrams mean is
//! the endpoint's (UDP echo today: [`UdpEcho`]).
//!
//! A UDP server never queues: a reply the socket will not take now (EAGAIN) is dropped and
//! counted, as the network itself would drop it. Receive slots are 64 KiB, so even a
//! 65,507-byte datagram, or a full GRO buffer, arrives whole; untouched slot pages cost no RSS.
//!
//! Datagrams the kernel drops because the receive queue is full never reach us, so a flood
//! would otherwise be invisible: SO_RXQ_OVFL makes the kernel attach the socket's running drop
//! count to each datagram, and the growth of that count is reported as `datagrams_overflowed`.
//! ICMP errors caused by earlier replies (the peer's port closed) concern that peer only and
//! are skipped.
//!
//! GRO and GSO (`--udp-gro`, `--udp-gso`) are asked of the kernel per socket; a kernel that
//! refuses is said once in the log, and the socket moves one datagram per message. Their use
//! is counted (`udp_gro_*`, `udp_gso_*`).
//!
//! Every engine serves the socket through [`DatagramSocket::serve`] and does what its
//! [`UdpTurn`] says: a spent budget comes back after the others, a drained socket waits for
//! readiness, and a failed receive (logged here, at most once a second per process) is looked
//! at again only [`ERROR_PAUSE`] later: the socket may still be reported ready, and an error
//! that persists would spin a level-triggered waiter. A UDP worker serves nothing else, so its
//! pause delays no connection.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use socket2::Socket;
use sockscale_proto::udp::{EchoEndpoint, Endpoint};
use sockscale_sys::udp::{self as batch, Offload, RecvBatch, SendBatch};

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

/// Buffers received, and messages sent, per system call.
pub use sockscale_sys::udp::BATCH;

/// A UDP socket serving UDP echo.
pub type UdpEcho = DatagramSocket<EchoEndpoint>;

impl UdpEcho {
    pub fn new(socket: Arc<Socket>, offload: Offload) -> Self {
        // One batch received is polled out before the next, so one batch's bytes always fit.
        DatagramSocket::with_endpoint(socket, offload, EchoEndpoint::new(BATCH * RecvBatch::SLOT))
    }
}

/// A UDP socket and the endpoint it feeds.
pub struct DatagramSocket<E> {
    socket: Arc<Socket>,
    endpoint: E,
    received: RecvBatch,
    to_send: SendBatch,
    /// The offloads the kernel took on this socket (and the flags allowed).
    offload: Offload,
    /// The kernel's drop count as last seen, when SO_RXQ_OVFL is on.
    overflow_seen: Option<u32>,
    errors: LogLimiter,
}

/// What the kernel said to the offloads, logged once per process (every worker's socket asks).
static OFFLOAD_SAID: Once = Once::new();

impl<E: Endpoint> DatagramSocket<E> {
    pub fn with_endpoint(socket: Arc<Socket>, wanted: Offload, endpoint: E) -> Self {
        let fd = socket.as_raw_fd();
        let overflow_counted = batch::enable_overflow_count(fd);
        if let Err(e) = &overflow_counted {
            tracing::warn!(error = %e, "SO_RXQ_OVFL unavailable: kernel drops of UDP datagrams will not be counted");
        }
        let gso = wanted.gso.then(|| batch::probe_gso(fd));
        let gro = wanted.gro.then(|| batch::enable_gro(fd));
        OFFLOAD_SAID.call_once(|| {
            let say = |name: &str, flag: &str, result: &Option<io::Result<()>>| match result {
                None => format!("{name} off (--{flag} off)"),
                Some(Ok(())) => format!("{name} on"),
                Some(Err(e)) => format!("{name} off (the kernel refused it: {e})"),
            };
            tracing::info!("UDP {}, {}", say("GSO", "udp-gso", &gso), say("GRO", "udp-gro", &gro));
        });
        DatagramSocket {
            socket,
            endpoint,
            received: RecvBatch::new(),
            to_send: SendBatch::new(),
            offload: Offload { gso: matches!(gso, Some(Ok(()))), gro: matches!(gro, Some(Ok(()))) },
            // The count starts at zero for a new socket; None until the option is known on.
            overflow_seen: overflow_counted.ok().map(|_| 0),
            errors: LogLimiter::udp_errors(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Serve datagrams until the socket is empty or `budget` bytes were received. A timeout
    /// of the endpoint that fell due is handled first. (The engines wait for readiness only:
    /// an endpoint with timers of its own, QUIC, will need them to wait for
    /// `Endpoint::poll_timeout` too; UDP echo has none.)
    pub fn serve(&mut self, budget: usize, counters: &Counters) -> UdpTurn {
        let now = Instant::now();
        if self.endpoint.poll_timeout().is_some_and(|at| at <= now) {
            self.endpoint.handle_timeout(now);
            self.flush(now, counters);
        }
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
        let control = self.overflow_seen.is_some() || self.offload.gro;
        loop {
            let buffers = match self.received.recv(self.socket.as_raw_fd(), control) {
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
            let now = Instant::now();
            let (mut datagrams, mut bytes) = (0, 0);
            for i in 0..buffers {
                let Some(received) = self.received.get(i) else { continue };
                let count = received.count();
                datagrams += count;
                bytes += received.data.len();
                if count > 1 {
                    counters.gro_coalesced(count);
                }
                for datagram in received.datagrams() {
                    self.endpoint.handle(now, received.peer, datagram);
                }
            }
            received_bytes += bytes;
            counters.bytes_in(bytes);
            counters.datagrams(datagrams, 0, 0);
            self.flush(now, counters);
            self.count_overflows(counters);
            if buffers < BATCH {
                return Ok(false);
            }
            if received_bytes >= budget {
                return Ok(true);
            }
        }
    }

    /// Send everything the endpoint has to send now, a batch of messages per sendmmsg.
    fn flush(&mut self, now: Instant, counters: &Counters) {
        let max_segments = if self.offload.gso { batch::MAX_SEGMENTS } else { 1 };
        loop {
            while !self.to_send.is_full() {
                let Some(transmit) = self.endpoint.poll_transmit(now, max_segments, self.to_send.buffer()) else {
                    break;
                };
                self.to_send.push(transmit.destination, transmit.size, transmit.segment_size);
            }
            let dropped_by_endpoint = self.endpoint.take_dropped();
            if dropped_by_endpoint > 0 {
                counters.datagrams(0, 0, dropped_by_endpoint as usize);
            }
            if self.to_send.is_empty() {
                return;
            }
            let sent = self.to_send.send(self.socket.as_raw_fd());
            counters.bytes_out(sent.bytes);
            counters.datagrams(0, sent.datagrams, sent.dropped);
            if sent.gso_messages > 0 {
                counters.gso_sent(sent.gso_messages, sent.gso_datagrams);
            }
            if let Some(e) = sent.gso_unsupported {
                self.offload.gso = false;
                tracing::warn!(error = %e, "the kernel cannot send UDP GSO here: this socket sends one datagram per message now");
            }
        }
    }

    /// Count the drops the kernel reported since the last batch (the count is cumulative per
    /// socket and wraps at 2^32).
    fn count_overflows(&mut self, counters: &Counters) {
        if let (Some(seen), Some(newest)) = (self.overflow_seen, self.received.overflow()) {
            counters.datagrams_overflowed(u64::from(newest.wrapping_sub(seen)));
            self.overflow_seen = Some(newest);
        }
    }
}
