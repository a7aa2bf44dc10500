//! What every QUIC endpoint of a server counted: handshakes (done, 0-RTT, failed by reason),
//! admission (Retry, refusals), connections lost by reason, and the transport's packets
//! (sent, lost) added as each connection ends. Atomics: endpoints on several threads add to
//! them; a handshake or a connection's end is rare next to a datagram, which the socket layer
//! counts itself.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use quinn_proto::{Connection, ConnectionError, ConnectionStats};

/// Why a handshake did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// No answer within the idle timeout.
    TimedOut,
    /// A TLS alert (QUIC's CRYPTO_ERROR range, 0x100–0x1ff): a certificate the client did
    /// not trust, no common ALPN (`h3`), a bad signature.
    Tls,
    /// A transport error: the peer broke QUIC's rules, or ran out of connection IDs.
    Protocol,
    /// The peer closed it, or reset it, before it completed.
    PeerClosed,
    /// The server closed it (a drain) or could not take it.
    Local,
}

impl HandshakeFailure {
    pub const ALL: [HandshakeFailure; 5] = [
        HandshakeFailure::TimedOut,
        HandshakeFailure::Tls,
        HandshakeFailure::Protocol,
        HandshakeFailure::PeerClosed,
        HandshakeFailure::Local,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HandshakeFailure::TimedOut => "timeout",
            HandshakeFailure::Tls => "tls",
            HandshakeFailure::Protocol => "protocol",
            HandshakeFailure::PeerClosed => "peer_closed",
            HandshakeFailure::Local => "local",
        }
    }

    pub fn from_connection_error(e: &ConnectionError) -> Self {
        let code = match e {
            ConnectionError::TimedOut => return HandshakeFailure::TimedOut,
            ConnectionError::TransportError(t) => u64::from(t.code),
            ConnectionError::ConnectionClosed(close) => u64::from(close.error_code),
            ConnectionError::ApplicationClosed(_) | ConnectionError::Reset => return HandshakeFailure::PeerClosed,
            ConnectionError::VersionMismatch | ConnectionError::CidsExhausted => return HandshakeFailure::Protocol,
            ConnectionError::LocallyClosed => return HandshakeFailure::Local,
        };
        if is_tls_alert(code) {
            HandshakeFailure::Tls
        } else {
            HandshakeFailure::Protocol
        }
    }
}

/// QUIC carries a TLS alert as transport error 0x100 + the alert (RFC 9001 §4.8).
pub fn is_tls_alert(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}

/// Why an established connection ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// Closed by the peer's application (HTTP/3: H3_NO_ERROR or an error code).
    PeerClosed,
    /// Closed by the peer's transport, with an error.
    PeerError,
    /// Idle for the idle timeout.
    TimedOut,
    /// A stateless reset from the peer.
    Reset,
    /// Our side closed it (HTTP/3 drain or an error we detected).
    Local,
    /// Our transport found the peer broke a rule.
    Protocol,
}

impl LostReason {
    pub const ALL: [LostReason; 6] = [
        LostReason::PeerClosed,
        LostReason::PeerError,
        LostReason::TimedOut,
        LostReason::Reset,
        LostReason::Local,
        LostReason::Protocol,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LostReason::PeerClosed => "peer_closed",
            LostReason::PeerError => "peer_error",
            LostReason::TimedOut => "timeout",
            LostReason::Reset => "reset",
            LostReason::Local => "local",
            LostReason::Protocol => "protocol",
        }
    }

    fn of(e: &ConnectionError) -> Self {
        match e {
            ConnectionError::ApplicationClosed(_) => LostReason::PeerClosed,
            ConnectionError::ConnectionClosed(_) | ConnectionError::VersionMismatch => LostReason::PeerError,
            ConnectionError::TimedOut => LostReason::TimedOut,
            ConnectionError::Reset => LostReason::Reset,
            ConnectionError::LocallyClosed => LostReason::Local,
            ConnectionError::TransportError(_) | ConnectionError::CidsExhausted => LostReason::Protocol,
        }
    }
}

/// The counts, added to by every endpoint.
#[derive(Debug, Default)]
pub struct QuicTotals {
    /// Gauges: connections open, and of them still handshaking, over every endpoint.
    open: AtomicU64,
    handshaking: AtomicU64,
    handshakes: AtomicU64,
    handshakes_0rtt: AtomicU64,
    resumed: AtomicU64,
    handshake_micros: AtomicU64,
    failed: [AtomicU64; HandshakeFailure::ALL.len()],
    lost: [AtomicU64; LostReason::ALL.len()],
    retries: AtomicU64,
    refused_busy: AtomicU64,
    deferred: AtomicU64,
    refused_draining: AtomicU64,
    endpoint_responses: AtomicU64,
    datagrams_ignored: AtomicU64,
    steering_refused: AtomicU64,
    connections_ended: AtomicU64,
    packets_sent: AtomicU64,
    packets_lost: AtomicU64,
    bytes_lost: AtomicU64,
    congestion_events: AtomicU64,
    requests: AtomicU64,
    streams_reset: AtomicU64,
    stream_errors: AtomicU64,
    connection_errors: AtomicU64,
    bodies_too_large: AtomicU64,
}

/// A snapshot of [`QuicTotals`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QuicCounts {
    /// Handshakes completed.
    pub handshakes: u64,
    /// … of which the client's 0-RTT data was accepted (`--quic-0rtt`).
    pub handshakes_0rtt: u64,
    /// Handshakes that resumed a session (the server accepted a PSK: its ServerHello says so,
    /// read by [`super::resumption`]).
    pub resumed: u64,
    /// Summed handshake time (first datagram accepted to handshake complete), in µs.
    pub handshake_micros: u64,
    /// Handshakes that failed, by [`HandshakeFailure`] (in `ALL`'s order).
    pub failed: [u64; HandshakeFailure::ALL.len()],
    /// Established connections lost, by [`LostReason`] (in `ALL`'s order).
    pub lost: [u64; LostReason::ALL.len()],
    /// Stateless Retry packets sent (`--quic-retry`).
    pub retries: u64,
    /// New connections refused (CONNECTION_REFUSED): over `--max-conns`.
    pub refused_busy: u64,
    /// New connections' Initials dropped because the handshake budget was in use (the client
    /// sends them again).
    pub deferred: u64,
    /// New connections refused because the server was draining.
    pub refused_draining: u64,
    /// Datagrams the endpoint answered itself: version negotiation, stateless resets.
    pub endpoint_responses: u64,
    /// Datagrams that belonged to no connection and started none (garbage, late packets).
    pub datagrams_ignored: u64,
    /// Ports whose kernel refused the program that steers QUIC packets by connection ID to the
    /// socket holding the connection (served by the kernel's 4-tuple hash instead).
    pub steering_refused: u64,
    /// Connections ended (their packet counts below are added then).
    pub connections_ended: u64,
    pub packets_sent: u64,
    /// Packets the loss detection declared lost (their frames were sent again).
    pub packets_lost: u64,
    pub bytes_lost: u64,
    pub congestion_events: u64,
    /// HTTP/3 requests answered.
    pub requests: u64,
    /// HTTP/3 request streams the peer reset or we reset.
    pub streams_reset: u64,
    /// HTTP/3 stream errors (a malformed request: H3_MESSAGE_ERROR, …).
    pub stream_errors: u64,
    /// HTTP/3 connection errors we closed with (H3_FRAME_UNEXPECTED, QPACK errors, …).
    pub connection_errors: u64,
    /// Request bodies past `--max-body-bytes`: answered 413, the rest refused (STOP_SENDING).
    pub bodies_too_large: u64,
}

/// Which limit kept a new connection out ([`QuicTotals::try_open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    Connections,
    Handshakes,
}

/// Add one to `gauge` unless it is at `max` already; false if it was.
fn take_place(gauge: &AtomicU64, max: usize) -> bool {
    gauge.fetch_update(Relaxed, Relaxed, |n| (n < max as u64).then_some(n + 1)).is_ok()
}

impl QuicTotals {
    /// A new connection, not admitted by a limit (a client's own).
    pub(crate) fn opened(&self) {
        self.open.fetch_add(1, Relaxed);
        self.handshaking.fetch_add(1, Relaxed);
    }

    /// Take a place for a connection being admitted, under both limits at once: every socket's
    /// endpoint admits concurrently, so a check then an increment would let two take the last
    /// place. On success the connection counts as open and handshaking; give the place back
    /// with [`QuicTotals::unopened`] if it is not made after all.
    pub(crate) fn try_open(&self, max_open: usize, max_handshaking: usize) -> Result<(), Full> {
        if !take_place(&self.handshaking, max_handshaking) {
            return Err(Full::Handshakes);
        }
        if !take_place(&self.open, max_open) {
            self.handshaking.fetch_sub(1, Relaxed);
            return Err(Full::Connections);
        }
        Ok(())
    }

    /// A place taken by [`QuicTotals::try_open`] whose connection was not made.
    pub(crate) fn unopened(&self) {
        self.open.fetch_sub(1, Relaxed);
        self.handshaking.fetch_sub(1, Relaxed);
    }

    pub(crate) fn handshake_ended(&self) {
        self.handshaking.fetch_sub(1, Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.open.fetch_sub(1, Relaxed);
    }

    /// Connections open now, over every endpoint.
    pub fn open(&self) -> usize {
        self.open.load(Relaxed) as usize
    }

    /// Handshakes in progress now, over every endpoint.
    pub fn handshaking(&self) -> usize {
        self.handshaking.load(Relaxed) as usize
    }

    pub(crate) fn handshake_done(&self, took: Duration, conn: &Connection) {
        self.handshakes.fetch_add(1, Relaxed);
        // A server has 0-RTT keys only when it accepted the client's early data; a client
        // learns at the end of the handshake whether its 0-RTT was accepted.
        let zero_rtt = if conn.side().is_server() { conn.has_0rtt() } else { conn.accepted_0rtt() };
        if zero_rtt {
            self.handshakes_0rtt.fetch_add(1, Relaxed);
        }
        if super::resumption::Handshake::of(conn).is_some_and(|h| h.resumed) {
            self.resumed.fetch_add(1, Relaxed);
        }
        self.handshake_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    pub(crate) fn handshake_failed(&self, why: HandshakeFailure) {
        self.failed[why as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn connection_lost(&self, reason: &ConnectionError) {
        self.lost[LostReason::of(reason) as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn closed_locally(&self) {
        self.lost[LostReason::Local as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn connection_ended(&self, stats: &ConnectionStats) {
        self.connections_ended.fetch_add(1, Relaxed);
        self.packets_sent.fetch_add(stats.path.sent_packets, Relaxed);
        self.packets_lost.fetch_add(stats.path.lost_packets, Relaxed);
        self.bytes_lost.fetch_add(stats.path.lost_bytes, Relaxed);
        self.congestion_events.fetch_add(stats.path.congestion_events, Relaxed);
    }

    pub(crate) fn retry_sent(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_busy(&self) {
        self.refused_busy.fetch_add(1, Relaxed);
    }

    pub(crate) fn handshake_deferred(&self) {
        self.deferred.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_draining(&self) {
        self.refused_draining.fetch_add(1, Relaxed);
    }

    pub(crate) fn endpoint_response(&self) {
        self.endpoint_responses.fetch_add(1, Relaxed);
    }

    pub(crate) fn datagram_ignored(&self) {
        self.datagrams_ignored.fetch_add(1, Relaxed);
    }

    /// The kernel refused to steer a port's QUIC packets by connection ID.
    pub fn steering_refused(&self) {
        self.steering_refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Relaxed);
    }

    pub(crate) fn stream_reset(&self) {
        self.streams_reset.fetch_add(1, Relaxed);
    }

    pub(crate) fn stream_error(&self) {
        self.stream_errors.fetch_add(1, Relaxed);
    }

    pub(crate) fn body_too_large(&self) {
        self.bodies_too_large.fetch_add(1, Relaxed);
    }

    pub(crate) fn connection_error(&self) {
        self.connection_errors.fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> QuicCounts {
        let load = |a: &AtomicU64| a.load(Relaxed);
        QuicCounts {
            handshakes: load(&self.handshakes),
            handshakes_0rtt: load(&self.handshakes_0rtt),
            resumed: load(&self.resumed),
            handshake_micros: load(&self.handshake_micros),
            failed: std::array::from_fn(|i| load(&self.failed[i])),
            lost: std::array::from_fn(|i| load(&self.lost[i])),
            retries: load(&self.retries),
            refused_busy: load(&self.refused_busy),
            deferred: load(&self.deferred),
            refused_draining: load(&self.refused_draining),
            endpoint_responses: load(&self.endpoint_responses),
            datagrams_ignored: load(&self.datagrams_ignored),
            steering_refused: load(&self.steering_refused),
            connections_ended: load(&self.connections_ended),
            packets_sent: load(&self.packets_sent),
            packets_lost: load(&self.packets_lost),
            bytes_lost: load(&self.bytes_lost),
            congestion_events: load(&self.congestion_events),
            requests: load(&self.requests),
            streams_reset: load(&self.streams_reset),
            stream_errors: load(&self.stream_errors),
            bodies_too_large: load(&self.bodies_too_large),
            connection_errors: load(&self.connection_errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sockets admit on their own threads: the last places are taken once each, never twice.
    #[test]
    fn places_are_taken_at_once_under_both_limits_by_concurrent_admissions() {
        let totals = std::sync::Arc::new(QuicTotals::default());
        let admitted: usize = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    let totals = totals.clone();
                    scope.spawn(move || (0..100).filter(|_| totals.try_open(1000, 8).is_ok()).count())
                })
                .collect();
            threads.into_iter().map(|t| t.join().expect("thread")).sum()
        });
        assert_eq!(admitted, 8);
        assert_eq!((totals.open(), totals.handshaking()), (8, 8));
        assert_eq!(totals.try_open(1000, 8), Err(Full::Handshakes));
        // A handshake ends: its place is free, and the connection limit is the one that holds.
        totals.handshake_ended();
        assert_eq!(totals.try_open(8, 8), Err(Full::Connections));
        assert_eq!(totals.handshaking(), 7, "the handshake place taken is given back");
        totals.unopened();
        assert_eq!((totals.open(), totals.handshaking()), (7, 6));
    }
}
