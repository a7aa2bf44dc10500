//! The words both sides' sessions answer in: what a batch of received ciphertext came to, what
//! a handshake agreed on, and why a session failed.

use std::time::Duration;

/// What one batch of received ciphertext came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Plaintext bytes appended to the caller's buffer.
    pub plaintext: usize,
    /// The handshake completed with this input, so long after its first byte.
    pub handshake_done: Option<Duration>,
    /// The peer sent close_notify: no more plaintext will come.
    pub closed: bool,
}

/// Why a session failed: send what the failing call appended to its `out` (the fatal alert that
/// tells the peer why; nothing for a peer not speaking TLS), then close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct Failure {
    pub reason: FailureReason,
    pub detail: String,
}

/// A failure's kind, as the counters name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The first bytes were not a TLS handshake record (plain text on a TLS port).
    NotTls,
    /// The client offered nothing in common (versions, cipher suites, groups, ALPN).
    Incompatible,
    /// The client sent an alert (it refused the certificate, say).
    PeerAlert,
    /// A malformed or unexpected message.
    Protocol,
    /// The peer's certificate failed verification (a client's view of the server).
    Certificate,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] = [
        FailureReason::NotTls,
        FailureReason::Incompatible,
        FailureReason::PeerAlert,
        FailureReason::Protocol,
        FailureReason::Certificate,
    ];

    /// A short identifier, for counters.
    pub fn name(self) -> &'static str {
        match self {
            FailureReason::NotTls => "not_tls",
            FailureReason::Incompatible => "incompatible",
            FailureReason::PeerAlert => "peer_alert",
            FailureReason::Protocol => "protocol",
            FailureReason::Certificate => "certificate",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a completed handshake agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// "TLSv1.3" or "TLSv1.2".
    pub version: &'static str,
    /// The cipher suite's IANA name, e.g. "TLS13_AES_128_GCM_SHA256".
    pub suite: String,
    pub alpn: Option<Vec<u8>>,
    /// The session was resumed (a ticket or a cached session ID), not a full handshake.
    pub resumed: bool,
}
