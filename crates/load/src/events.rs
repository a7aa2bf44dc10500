//! What a client [`crate::connection::Connection`] tells its event loop, and the time it is fed:
//! apart from the connection so that its protocol stages (`ws.rs`) name them without importing
//! the connection that holds them.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use sockscale_tls::Negotiated;

use crate::client::Stamp;

/// The time, as the clock read it and in ns of the run (from
/// [`crate::connection::Profile::origin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub at: Instant,
    pub ns: u64,
}

impl Now {
    /// `ns` into the run that began at `origin`.
    pub fn after(origin: Instant, ns: u64) -> Now {
        Now { at: origin + Duration::from_nanos(ns), ns }
    }
}

/// What happened, for the event loop to count.
#[derive(Debug)]
pub enum Event {
    /// The TLS handshake finished, `took` after its first byte came back.
    HandshakeDone { took: Duration, negotiated: Option<Negotiated> },
    /// An echoed message came back whole.
    Echoed { stamp: Stamp },
    /// A response (HTTP/1.1 or an HTTP/2 stream's) completed; `accepted` by `--accept-status`.
    Response { stamp: Stamp, status: u16, accepted: bool },
    /// HTTP/2: a stream was reset (RST_STREAM): its code's name (`CANCEL`, `0x1234`...).
    StreamReset { code: Cow<'static, str> },
    /// HTTP/2: a stream above a GOAWAY's last identifier.
    StreamRefused,
    /// HTTP/2: a response that broke the protocol on its stream.
    StreamMalformed,
    /// HTTP/2: a GOAWAY: its code's name.
    GoAway { code: Cow<'static, str> },
    /// HTTP/2: the server's first SETTINGS came; its stream limit.
    Greeted { max_streams: Option<u32> },
    /// HTTP/2: a stream opened.
    StreamOpened,
    /// UDP: the answer to a datagram.
    Datagram { stamp: Stamp },
    /// UDP: an answer to a datagram already counted lost.
    LateDatagram,
    /// UDP: a datagram that is no answer (counted, then ignored: the socket lives on).
    BadDatagram,
    /// UDP: datagrams unanswered for the reply timeout, counted lost.
    Lost(u64),
    /// WebSocket: the server's 101 was verified (`deflate`: permessage-deflate agreed).
    WsUpgraded { deflate: bool },
    /// HTTP/3 over QUIC: what the connection met, for the report's QUIC block.
    Quic(crate::h3::H3Event),
    /// Bytes handed on: plaintext (encrypted, or written without TLS) and TLS records written.
    Sent { plaintext: usize, wire: usize },
    /// Bytes received: TLS records, and the plaintext (the bytes themselves without TLS).
    Received { plaintext: usize, wire: usize },
}
