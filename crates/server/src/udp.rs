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
//! Every engine makes its socket with [`UdpService::new`], where the configured service's
//! endpoint is chosen once ([`ServiceEndpoint`]: echo today, QUIC tomorrow), serves it through
//! [`DatagramSocket::serve`] and does what its [`UdpTurn`] says: a spent budget comes back after
//! the others; a drained socket waits for readiness or for the endpoint's wake-up
//! ([`Endpoint::poll_timeout`], carried in [`UdpTurn::Drained`]), whichever comes first, and is
//! served again then (`serve` calls [`Endpoint::handle_timeout`] when it is due and sends what
//! that produced); a failed receive (logged here, at most once a second per process) is looked
//! at again only [`ERROR_PAUSE`] later: the socket may still be reported ready, and an error
//! that persists would spin a level-triggered waiter. A UDP worker serves nothing else, so its
//! pause delays no connection. Engines wait for the instant the endpoint gives; they compute
//! no deadline of their own.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use socket2::Socket;
use sockscale_proto::quic::{h3::H3Apps, QuicEndpoint};
use sockscale_proto::udp::{EchoEndpoint, Endpoint, Transmit};
use sockscale_sys::udp::{self as batch, Offload, RecvBatch, SendBatch};

use crate::admission::LogLimiter;
use crate::config::{Config, Service};
use crate::ctx::ModelCtx;
use crate::stats::Counters;

/// How long a worker waits after a failed receive before it looks again.
pub const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// What one turn of serving the socket came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpTurn {
    /// The socket is empty: wait for the next datagram's readiness, or until `wake_at` (the
    /// endpoint's next timer), whichever comes first, then serve again.
    Drained { wake_at: Option<Instant> },
    /// The read budget ran out with datagrams possibly left: come back after the others.
    Spent,
    /// The receive failed (already logged): look again [`ERROR_PAUSE`] later.
    Failed,
}

/// Buffers received, and messages sent, per system call.
pub use sockscale_sys::udp::BATCH;

/// A UDP socket serving the configured datagram service: what every engine holds.
pub type UdpService = DatagramSocket<ServiceEndpoint>;

impl UdpService {
    /// The socket serving `cfg`'s service, with `cfg`'s offloads: the one place an engine's
    /// UDP socket gets its endpoint.
    pub fn new(socket: Arc<Socket>, cfg: &Config) -> Self {
        DatagramSocket::with_endpoint(socket, cfg.udp_offload, ServiceEndpoint::for_service(&cfg.service))
    }

    /// The UDP socket of `--proto udp`, as [`UdpService::new`], for a model that makes its
    /// sockets through a function of its context.
    pub fn udp(socket: Arc<Socket>, ctx: &ModelCtx) -> Self {
        Self::new(socket, &ctx.cfg)
    }

    /// The socket of `--http3` (one of `Listen::http3`'s), serving HTTP/3 over QUIC with the
    /// server's loaded HTTP/3 service (`Resources::http3`: its TLS, limits, response) and
    /// `cfg`'s offloads.
    pub fn http3(socket: Arc<Socket>, ctx: &ModelCtx) -> Self {
        let endpoint = ServiceEndpoint::for_http3(&socket, ctx);
        DatagramSocket::with_endpoint(socket, ctx.cfg.udp_offload, endpoint)
    }
}

/// The receive buffer asked for an HTTP/3 socket unless `--rcvbuf` says otherwise (the kernel
/// gives at most net.core.rmem_max).
const QUIC_RECV_BUFFER: usize = 4 << 20;

/// The endpoint of the configured datagram service, chosen once for every engine. An enum
/// rather than a boxed trait object, so that echo's per-datagram calls stay direct.
pub enum ServiceEndpoint {
    Echo(EchoEndpoint),
    /// `--http3`'s socket, beside the TCP listener: QUIC with HTTP/3 on it.
    Http3(Box<QuicEndpoint<H3Apps>>),
    /// A test's own endpoint (see `tests::TEST_ENDPOINT`).
    #[cfg(test)]
    Test(Box<dyn Endpoint + Send>),
}

impl ServiceEndpoint {
    /// A test's own endpoint, when one is installed.
    #[cfg(test)]
    fn installed() -> Option<Self> {
        let make = (*tests::TEST_ENDPOINT.lock().unwrap_or_else(|e| e.into_inner()))?;
        Some(ServiceEndpoint::Test(make()))
    }

    /// The endpoint of one of `--http3`'s sockets: a QUIC endpoint of the server's HTTP/3
    /// service. Path MTU discovery is allowed when the socket takes IP_PMTUDISC_PROBE (QUIC
    /// must never send a fragmented datagram).
    pub fn for_http3(socket: &Socket, ctx: &ModelCtx) -> Self {
        #[cfg(test)]
        if let Some(installed) = Self::installed() {
            return installed;
        }
        let Some(service) = &ctx.resources.http3 else {
            unreachable!("--http3 without its service: Resources::load makes it with the listener")
        };
        // QUIC's peers send in bursts (a window's worth of ACKs and requests from every
        // connection at once): a default 208 KiB queue overflowed at 100 connections with 16
        // streams each (686 datagrams dropped in 6 s). The kernel caps it at net.core.rmem_max.
        if let Err(e) = socket.set_recv_buffer_size(ctx.cfg.rcvbuf.unwrap_or(QUIC_RECV_BUFFER)) {
            tracing::warn!(error = %e, "cannot size the HTTP/3 socket's receive buffer");
        }
        let ipv6 = socket.local_addr().ok().and_then(|a| a.as_socket()).is_some_and(|a| a.is_ipv6());
        let mtud = batch::disable_fragmentation(socket.as_raw_fd(), ipv6).is_ok();
        let steering = ctx.listen.http3().and_then(|udp| udp.steering_index(socket));
        ServiceEndpoint::Http3(Box::new(service.endpoint(mtud, steering)))
    }

    pub fn for_service(service: &Service) -> Self {
        #[cfg(test)]
        if let Some(installed) = Self::installed() {
            return installed;
        }
        match service {
            // One batch received is polled out before the next, so one batch's bytes always
            // fit. A stream service binds no UDP socket (`Service::is_udp`): were one made for
            // it regardless, it would echo.
            Service::UdpEcho | Service::Echo | Service::Http(_) => {
                ServiceEndpoint::Echo(EchoEndpoint::new(BATCH * RecvBatch::SLOT))
            }
        }
    }
}

impl Endpoint for ServiceEndpoint {
    fn handle(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]) {
        match self {
            ServiceEndpoint::Echo(e) => e.handle(now, peer, datagram),
            ServiceEndpoint::Http3(e) => e.handle(now, peer, datagram),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.handle(now, peer, datagram),
        }
    }

    fn handle_ecn(&mut self, now: Instant, peer: SocketAddr, ecn: u8, datagram: &[u8]) {
        match self {
            ServiceEndpoint::Echo(e) => e.handle_ecn(now, peer, ecn, datagram),
            ServiceEndpoint::Http3(e) => e.handle_ecn(now, peer, ecn, datagram),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.handle_ecn(now, peer, ecn, datagram),
        }
    }

    fn uses_ecn(&self) -> bool {
        match self {
            ServiceEndpoint::Echo(e) => e.uses_ecn(),
            ServiceEndpoint::Http3(e) => e.uses_ecn(),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.uses_ecn(),
        }
    }

    fn poll_transmit(&mut self, now: Instant, max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        match self {
            ServiceEndpoint::Echo(e) => e.poll_transmit(now, max_segments, buf),
            ServiceEndpoint::Http3(e) => e.poll_transmit(now, max_segments, buf),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.poll_transmit(now, max_segments, buf),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            ServiceEndpoint::Echo(e) => e.poll_timeout(),
            ServiceEndpoint::Http3(e) => e.poll_timeout(),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            ServiceEndpoint::Echo(e) => e.handle_timeout(now),
            ServiceEndpoint::Http3(e) => e.handle_timeout(now),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.handle_timeout(now),
        }
    }

    fn take_dropped(&mut self) -> u64 {
        match self {
            ServiceEndpoint::Echo(e) => e.take_dropped(),
            ServiceEndpoint::Http3(e) => e.take_dropped(),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.take_dropped(),
        }
    }

    fn begin_drain(&mut self, now: Instant) {
        match self {
            ServiceEndpoint::Echo(e) => e.begin_drain(now),
            ServiceEndpoint::Http3(e) => e.begin_drain(now),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.begin_drain(now),
        }
    }

    fn drained(&self) -> bool {
        match self {
            ServiceEndpoint::Echo(e) => e.drained(),
            ServiceEndpoint::Http3(e) => e.drained(),
            #[cfg(test)]
            ServiceEndpoint::Test(e) => e.drained(),
        }
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
    /// The endpoint reads ECN and the kernel reports it (IP_RECVTOS).
    ecn: bool,
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
        let ipv6 = socket.local_addr().ok().and_then(|a| a.as_socket()).is_some_and(|a| a.is_ipv6());
        let ecn = endpoint.uses_ecn() && {
            let reported = batch::enable_ecn_reports(fd, ipv6);
            if let Err(e) = &reported {
                tracing::warn!(error = %e, "ECN reports unavailable: received ECN marks will not be read");
            }
            reported.is_ok()
        };
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
            ecn,
            errors: LogLimiter::udp_errors(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// The server's drain began at `now`: the endpoint stops taking new work (QUIC: GOAWAY),
    /// and what that queued is sent at once. The engine goes on serving the socket, datagrams
    /// and wake-ups alike, until [`DatagramSocket::drained`] or the drain's deadline.
    pub fn begin_drain(&mut self, now: Instant, counters: &Counters) {
        self.endpoint.begin_drain(now);
        self.flush(now, counters);
    }

    /// Whether the endpoint has nothing left in flight since [`DatagramSocket::begin_drain`]:
    /// the socket may be closed.
    pub fn drained(&self) -> bool {
        self.endpoint.drained()
    }

    /// Serve datagrams until the socket is empty or `budget` bytes were received, handling the
    /// endpoint's timeout first if it fell due (and again at the end, should serving have
    /// taken past it). A drained socket says when the endpoint wants to be woken next.
    pub fn serve(&mut self, budget: usize, counters: &Counters) -> UdpTurn {
        self.handle_due_timeout(counters);
        match self.serve_batches(budget, counters) {
            Ok(true) => UdpTurn::Spent,
            Ok(false) => {
                self.handle_due_timeout(counters);
                UdpTurn::Drained { wake_at: self.endpoint.poll_timeout() }
            }
            Err(e) => {
                if let Some(suppressed) = self.errors.allow(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "UDP receive failed");
                }
                UdpTurn::Failed
            }
        }
    }

    /// If the endpoint's timeout fell due, handle it and send what it produced.
    fn handle_due_timeout(&mut self, counters: &Counters) {
        // Echo has no timer: it pays for no clock read.
        let Some(at) = self.endpoint.poll_timeout() else { return };
        let now = Instant::now();
        if at <= now {
            self.endpoint.handle_timeout(now);
            self.flush(now, counters);
        }
    }

    /// Returns true if the budget ran out with datagrams possibly left.
    fn serve_batches(&mut self, budget: usize, counters: &Counters) -> io::Result<bool> {
        let mut received_bytes = 0;
        let control = self.overflow_seen.is_some() || self.offload.gro || self.ecn;
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
                    self.endpoint.handle_ecn(now, received.peer, received.ecn, datagram);
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
                self.to_send.push_marked(transmit.destination, transmit.size, transmit.segment_size, transmit.ecn);
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

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::VecDeque;
    use std::net::UdpSocket;
    use std::sync::{Mutex, MutexGuard};

    use super::*;
    use crate::model::{Family, Model};
    use crate::server::Server;

    /// Makes the endpoint of every UDP socket made while it is set (see
    /// [`ServiceEndpoint::for_service`]): how a test serves its own endpoint on every model.
    pub(crate) static TEST_ENDPOINT: Mutex<Option<MakeEndpoint>> = Mutex::new(None);

    type MakeEndpoint = fn() -> Box<dyn Endpoint + Send>;

    /// Held while a test's endpoint is installed; uninstalls it when dropped (a failed test
    /// included).
    pub(super) struct Installed {
        _one_at_a_time: MutexGuard<'static, ()>,
    }

    /// One installer at a time.
    static INSTALLING: Mutex<()> = Mutex::new(());

    pub(super) fn install(make: MakeEndpoint) -> Installed {
        let held = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        *TEST_ENDPOINT.lock().unwrap_or_else(|e| e.into_inner()) = Some(make);
        Installed { _one_at_a_time: held }
    }

    impl Drop for Installed {
        fn drop(&mut self) {
            *TEST_ENDPOINT.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// How long [`LateEcho`] holds a reply.
    const LATE_BY: Duration = Duration::from_millis(150);

    /// Echo that answers each datagram [`LATE_BY`] after it arrived, from its timer: the reply
    /// exists only once `handle_timeout` has run at or after that instant, as a QUIC ACK or
    /// retransmission does.
    #[derive(Default)]
    struct LateEcho {
        holding: VecDeque<(Instant, SocketAddr, Vec<u8>)>,
        due: VecDeque<(SocketAddr, Vec<u8>)>,
    }

    impl Endpoint for LateEcho {
        fn handle(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]) {
            self.holding.push_back((now + LATE_BY, peer, datagram.to_vec()));
        }

        fn poll_transmit(&mut self, _now: Instant, _max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
            let (destination, reply) = self.due.pop_front()?;
            buf.extend_from_slice(&reply);
            Some(Transmit { destination, size: reply.len(), segment_size: None, ecn: 0 })
        }

        fn poll_timeout(&self) -> Option<Instant> {
            self.holding.front().map(|&(at, _, _)| at)
        }

        fn handle_timeout(&mut self, now: Instant) {
            while self.holding.front().is_some_and(|&(at, _, _)| at <= now) {
                if let Some((_, peer, reply)) = self.holding.pop_front() {
                    self.due.push_back((peer, reply));
                }
            }
        }
    }

    /// Answers each datagram with the ECN bits it was given, its reply marked ECT(0).
    #[derive(Default)]
    struct EcnMirror {
        due: VecDeque<(SocketAddr, u8)>,
    }

    impl Endpoint for EcnMirror {
        fn handle(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]) {
            self.handle_ecn(now, peer, 0, datagram);
        }

        fn handle_ecn(&mut self, _now: Instant, peer: SocketAddr, ecn: u8, _datagram: &[u8]) {
            self.due.push_back((peer, ecn));
        }

        fn uses_ecn(&self) -> bool {
            true
        }

        fn poll_transmit(&mut self, _now: Instant, _max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
            let (destination, seen) = self.due.pop_front()?;
            buf.push(seen);
            Some(Transmit { destination, size: 1, segment_size: None, ecn: 0b10 })
        }

        fn poll_timeout(&self) -> Option<Instant> {
            None
        }

        fn handle_timeout(&mut self, _now: Instant) {}
    }

    /// An endpoint that reads ECN is given each datagram's marks (CE, ECT(0), none), and the
    /// marks of its transmits reach the peer: the socket layer asks the kernel for both.
    #[test]
    fn an_ecn_endpoint_reads_each_datagrams_marks_and_its_own_reach_the_peer() {
        use std::os::fd::AsRawFd;
        let stats = crate::stats::Stats::new(1);
        let counters = stats.shard(0);
        let socket = Socket::from(UdpSocket::bind("127.0.0.1:0").expect("server socket"));
        socket.set_nonblocking(true).expect("nonblocking");
        let to = socket.local_addr().ok().and_then(|a| a.as_socket()).expect("address");
        let mut served =
            DatagramSocket::with_endpoint(Arc::new(socket), Offload { gso: false, gro: false }, EcnMirror::default());
        let client = UdpSocket::bind("127.0.0.1:0").expect("client socket");
        batch::enable_ecn_reports(client.as_raw_fd(), false).expect("IP_RECVTOS");
        let mut out = SendBatch::new();
        for mark in [0b11, 0b10, 0] {
            out.buffer().push(1);
            out.push_marked(to, 1, None, mark);
        }
        assert_eq!(out.send(client.as_raw_fd()).datagrams, 3);
        let until = Instant::now() + Duration::from_secs(5);
        let mut replies = Vec::new();
        let mut received = RecvBatch::new();
        client.set_nonblocking(true).expect("nonblocking");
        while replies.len() < 3 && Instant::now() < until {
            let _ = served.serve(1 << 20, counters);
            if let Ok(n) = received.recv(client.as_raw_fd(), true) {
                for i in 0..n {
                    let r = received.get(i).expect("reply");
                    replies.push((r.data[0], r.ecn));
                }
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(replies, [(0b11, 0b10), (0b10, 0b10), (0, 0b10)], "(the mark the endpoint saw, the reply's)");
    }

    #[test]
    fn late_echo_replies_only_from_its_timer() {
        let start = Instant::now();
        let peer = SocketAddr::from(([127, 0, 0, 1], 9));
        let mut e = LateEcho::default();
        e.handle(start, peer, b"x");
        assert_eq!(e.poll_timeout(), Some(start + LATE_BY));
        assert_eq!(e.poll_transmit(start + LATE_BY, 1, &mut Vec::new()), None);
        e.handle_timeout(start + LATE_BY - Duration::from_millis(1));
        assert_eq!(e.poll_transmit(start + LATE_BY, 1, &mut Vec::new()), None);
        e.handle_timeout(start + LATE_BY);
        assert_eq!(e.poll_timeout(), None);
        let mut buf = Vec::new();
        assert_eq!(e.poll_transmit(start + LATE_BY, 1, &mut buf).map(|t| t.destination), Some(peer));
        assert_eq!(buf, b"x");
    }

    /// `serve` says when the endpoint wants to be woken, and sends at that instant what its
    /// timeout made; echo never asks.
    #[test]
    fn a_drained_socket_carries_the_endpoints_wake_up() {
        let stats = crate::stats::Stats::new(1);
        let counters = stats.shard(0);
        let bound = |endpoint| {
            let socket = Socket::from(UdpSocket::bind("127.0.0.1:0").expect("server socket"));
            socket.set_nonblocking(true).expect("nonblocking");
            DatagramSocket::with_endpoint(Arc::new(socket), Offload { gso: false, gro: false }, endpoint)
        };
        let client = UdpSocket::bind("127.0.0.1:0").expect("client socket");
        client.set_read_timeout(Some(Duration::from_secs(2))).expect("read timeout");
        let addr_of = |s: &Socket| s.local_addr().ok().and_then(|a| a.as_socket()).expect("address");

        let mut echo = bound(ServiceEndpoint::Echo(EchoEndpoint::new(1 << 16)));
        assert_eq!(echo.serve(1 << 20, counters), UdpTurn::Drained { wake_at: None });
        client.send_to(b"now", addr_of(&echo.socket)).expect("send");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(echo.serve(1 << 20, counters), UdpTurn::Drained { wake_at: None });
        let mut reply = [0; 16];
        assert_eq!(client.recv(&mut reply).ok(), Some(3));

        let mut late = bound(ServiceEndpoint::Test(Box::new(LateEcho::default())));
        let sent_at = Instant::now();
        client.send_to(b"late", addr_of(&late.socket)).expect("send");
        std::thread::sleep(Duration::from_millis(50));
        let UdpTurn::Drained { wake_at: Some(at) } = late.serve(1 << 20, counters) else {
            panic!("no wake-up after a datagram the endpoint holds")
        };
        assert!(at >= sent_at + LATE_BY && at <= Instant::now() + LATE_BY, "wake-up {:?} after sending", at - sent_at);
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        assert_eq!(late.serve(1 << 20, counters), UdpTurn::Drained { wake_at: None });
        assert_eq!(client.recv(&mut reply).ok(), Some(4));
        assert_eq!(&reply[..4], b"late");
    }

    /// A datagram whose reply the endpoint makes only at its wake-up reaches the client on
    /// every model that serves UDP: each engine waits for the endpoint's instant as well as
    /// for readiness. Twice per model, so a wake-up is armed again after one fired.
    #[test]
    fn every_udp_model_sends_what_the_endpoint_makes_at_its_wake_up() {
        let _installed = install(|| Box::new(LateEcho::default()));
        let models: Vec<Model> = Model::ALL.into_iter().filter(|m| m.serves_udp()).collect();
        assert!(!models.is_empty());
        for model in models {
            if model.capabilities().family == Family::Completion {
                if let Some(why) = crate::completion::unavailable() {
                    eprintln!("skipping {model}: {why}");
                    continue;
                }
            }
            let cfg = Config {
                listen: "127.0.0.1:0".parse().expect("address"),
                service: Service::UdpEcho,
                model,
                threads: 2,
                ..Config::default()
            };
            let server = Server::start(cfg).unwrap_or_else(|e| panic!("{model}: {e}"));
            let addr = server.local_addr().inet().expect("an IP address");
            let client = UdpSocket::bind("127.0.0.1:0").expect("client socket");
            client.set_read_timeout(Some(LATE_BY + Duration::from_secs(3))).expect("read timeout");
            for round in 0..2u8 {
                let sent_at = Instant::now();
                client.send_to(&[round; 100], addr).expect("send");
                let mut reply = [0; 200];
                let (size, from) = loop {
                    match client.recv_from(&mut reply) {
                        Ok(received) => break received,
                        // The signal model's real-time signals may reach this thread.
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            panic!("{model}, round {round}: no reply {:?} after sending ({e})", sent_at.elapsed())
                        }
                    }
                };
                let waited = sent_at.elapsed();
                assert_eq!((from, &reply[..size]), (addr, &[round; 100][..]), "{model}, round {round}");
                assert!(
                    waited >= LATE_BY,
                    "{model}, round {round}: the reply came {waited:?} after sending, before the wake-up"
                );
                // Woken at the instant, not by some periodic tick (io_uring's wait is capped at 1 s).
                assert!(
                    waited < LATE_BY + Duration::from_millis(700),
                    "{model}, round {round}: the reply came {waited:?} after sending, long after the wake-up"
                );
            }
            server.shutdown_handle().shutdown();
            server.wait().unwrap_or_else(|e| panic!("{model}: {e}"));
        }
    }
}

/// The drain of a datagram endpoint with work in flight, on every model that serves UDP, under
/// `--proto udp` and beside TCP under `--http3`.
#[cfg(test)]
mod drain_tests {
    use std::collections::VecDeque;
    use std::net::UdpSocket;

    use super::tests::install;
    use super::*;
    use crate::config::{Http3Config, TlsFiles};
    use crate::model::{Family, Model};
    use crate::server::Server;

    /// How long [`HeldDrain`] stays undrained after the drain began, unless told `done`.
    const HOLD: Duration = Duration::from_millis(1200);

    /// Echo that, in a drain, holds on to a peer it has served (as QUIC holds a connection
    /// until its requests are answered): not drained until [`HOLD`] after the drain began (its
    /// timer), or until a datagram `done` arrives. One that served nobody is drained at once.
    /// Replies during the drain are prefixed `draining:`, so a client sees the socket served.
    #[derive(Default)]
    struct HeldDrain {
        replies: VecDeque<(SocketAddr, Vec<u8>)>,
        served: bool,
        hold_until: Option<Instant>,
        drained: bool,
    }

    impl Endpoint for HeldDrain {
        fn handle(&mut self, _now: Instant, peer: SocketAddr, datagram: &[u8]) {
            self.served = true;
            let reply = if self.hold_until.is_some() {
                if datagram == b"done" {
                    self.drained = true;
                }
                [&b"draining:"[..], datagram].concat()
            } else {
                datagram.to_vec()
            };
            self.replies.push_back((peer, reply));
        }

        fn poll_transmit(&mut self, _now: Instant, _max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
            let (destination, reply) = self.replies.pop_front()?;
            buf.extend_from_slice(&reply);
            Some(Transmit { destination, size: reply.len(), segment_size: None, ecn: 0 })
        }

        fn poll_timeout(&self) -> Option<Instant> {
            self.hold_until.filter(|_| !self.drained)
        }

        fn handle_timeout(&mut self, now: Instant) {
            if self.hold_until.is_some_and(|at| at <= now) {
                self.drained = true;
            }
        }

        fn begin_drain(&mut self, now: Instant) {
            if self.served {
                self.hold_until = Some(now + HOLD);
            } else {
                self.drained = true;
            }
        }

        fn drained(&self) -> bool {
            self.drained
        }
    }

    /// The configurations the drain is checked under: `--proto udp`, and `--http3` beside TCP.
    fn configs(model: Model, certs: &crate::config::TlsFiles) -> [(&'static str, Config); 2] {
        let base = Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            model,
            threads: 2,
            drain_timeout: Duration::from_secs(10),
            ..Config::default()
        };
        let udp = Config { service: Service::UdpEcho, ..base.clone() };
        let http3 = Config {
            service: Service::Http(Arc::default()),
            tls: Some(certs.clone()),
            http3: Some(Http3Config { max_streams: 100, ..Http3Config::default() }),
            ..base
        };
        [("--proto udp", udp), ("--http3", http3)]
    }

    /// Send `datagram` until the reply is `expected` (the drain begins on the server's threads
    /// a moment after `shutdown` returns), within 3 s.
    fn send_until(client: &UdpSocket, to: SocketAddr, datagram: &[u8], expected: &[u8], what: &str) {
        let started = Instant::now();
        let mut reply = [0; 256];
        while started.elapsed() < Duration::from_secs(3) {
            client.send_to(datagram, to).expect("send");
            match client.recv_from(&mut reply) {
                Ok((n, from)) if from == to && &reply[..n] == expected => return,
                Ok(_) => std::thread::sleep(Duration::from_millis(20)),
                // Nothing yet, or the signal model's real-time signals reached this thread.
                Err(_) => {}
            }
        }
        panic!("{what}: no reply {:?} to {:?}", String::from_utf8_lossy(expected), String::from_utf8_lossy(datagram));
    }

    /// In a drain, every model keeps serving a UDP socket whose endpoint has work in flight
    /// (datagrams answered, its timer run), and the server exits once the endpoint reports it
    /// drained: at its timer, well before the drain timeout, or at once when a datagram
    /// ends it.
    #[test]
    fn every_udp_model_serves_a_draining_endpoint_until_it_has_drained() {
        let _installed = install(|| Box::new(HeldDrain::default()));
        let dir = std::env::temp_dir().join(format!("sockscale-udp-drain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the certificate");
        let made = sockscale_tls::TestCertificate::generate(&["localhost".to_owned()]).expect("certificate");
        let files = made.write(&dir).expect("certificate files");
        let certs = TlsFiles { cert: files.cert, key: files.key, options: sockscale_tls::ServerOptions::default() };
        let models: Vec<Model> = Model::ALL.into_iter().filter(|m| m.serves_udp()).collect();
        for model in models {
            if model.capabilities().family == Family::Completion {
                if let Some(why) = crate::completion::unavailable() {
                    eprintln!("skipping {model}: {why}");
                    continue;
                }
            }
            for (how, cfg) in configs(model, &certs) {
                // By the timer, then (where the endpoint is QUIC's place) by a datagram.
                let ends: &[bool] = if cfg.http3.is_some() { &[false, true] } else { &[false] };
                for &by_datagram in ends {
                    let what =
                        format!("{model} {how} (drained by {})", if by_datagram { "a datagram" } else { "its timer" });
                    let server = Server::start(cfg.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let addr = server.local_addr().inet().expect("an IP address");
                    let client = UdpSocket::bind("127.0.0.1:0").expect("client socket");
                    client.set_read_timeout(Some(Duration::from_millis(200))).expect("read timeout");
                    send_until(&client, addr, b"before", b"before", &what);
                    let asked = Instant::now();
                    server.shutdown_handle().shutdown();
                    send_until(&client, addr, b"during", b"draining:during", &what);
                    if by_datagram {
                        send_until(&client, addr, b"done", b"draining:done", &what);
                    }
                    server.wait().unwrap_or_else(|e| panic!("{what}: {e}"));
                    let took = asked.elapsed();
                    if by_datagram {
                        assert!(took < HOLD, "{what}: exited {took:?} after the shutdown, not when told");
                    } else {
                        assert!(
                            took >= HOLD,
                            "{what}: exited {took:?} after the shutdown, before the endpoint drained"
                        );
                        assert!(
                            took < HOLD + Duration::from_secs(3),
                            "{what}: exited {took:?} after the shutdown, long after the endpoint drained"
                        );
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
