//! Tunnels: the streams of extended CONNECT requests (RFC 8441), whose DATA is a byte stream of
//! another protocol (WebSocket). The stage knows nothing of that protocol: it asks the
//! application's [`Tunnels`] whether to open one, hands it each DATA payload as it arrives, and
//! frames what it answers as DATA on the same stream, as the flow-control windows allow.
//!
//! Flow control both ways: the answer waits on the stream's and the connection's send windows,
//! and while a stream holds [`TUNNEL_SEND_CAP`] octets or more unsent, the window of its input
//! is not given back, so a peer that reads nothing can send at most one window more: a tunnel
//! holds at most the cap plus what one receive window's input produces.

use std::time::Instant;

use crate::request::Request;

/// Octets of a tunnel's output held unsent above which its input window is no longer given
/// back (its input pauses once the peer has used that window).
pub const TUNNEL_SEND_CAP: usize = 64 << 10;

/// Fields of an answer, lower-case names.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// The application's answer to an extended CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opening {
    /// `:status 200` with these fields; the stream is a tunnel from now on.
    Accept(Fields),
    /// Refused with this status (4xx, 5xx) and fields; the stream is reset (NO_ERROR) after it.
    Refuse(u16, Fields),
}

/// What a tunnel wants after its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Open,
    /// Its side is done: END_STREAM after the output queued.
    Finish,
}

/// The application's side of the tunnels of one connection, keyed by stream id.
pub trait Tunnels {
    /// An extended CONNECT arrived (its fields checked, `:protocol` present).
    fn open(&mut self, request: &Request, now: Instant) -> Opening;
    /// A DATA payload on an open tunnel (`end`: the peer's END_STREAM); its answer is appended
    /// to `out`.
    fn data(&mut self, stream: u32, data: &[u8], end: bool, now: Instant, out: &mut Vec<u8>) -> Flow;
    /// The peer reset an open tunnel: it is gone.
    fn reset(&mut self, stream: u32);
}

/// No tunnels: an extended CONNECT is answered 501 (the setting was sent, yet nothing serves
/// the tunnels: the application's mistake, not the peer's).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTunnels;

impl Tunnels for NoTunnels {
    fn open(&mut self, _: &Request, _: Instant) -> Opening {
        Opening::Refuse(501, Vec::new())
    }

    fn data(&mut self, _: u32, _: &[u8], _: bool, _: Instant, _: &mut Vec<u8>) -> Flow {
        Flow::Finish
    }

    fn reset(&mut self, _: u32) {}
}
