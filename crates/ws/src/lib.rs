//! sockscale's WebSocket stage (RFC 6455, with permessage-deflate of RFC 7692), server and
//! client, as a state machine with no I/O in the style of `sockscale-h2`: fed the octets a
//! socket received and the time, it appends the octets to send to the caller's buffer and says
//! its verdict. No socket, clock or thread is inside, so every engine drives it alike and every
//! rule is tested with byte values.
//!
//! # Driving a connection
//!
//! ```text
//! server, on an HTTP/1.1 request with handshake::is_upgrade(headers):
//!     match handshake::accept(method, headers, deflate_config) {
//!         Ok(accepted)  => send accepted.response; session = Session::new(&config, accepted.deflate.as_ref(), now)
//!         Err(refusal)  => refusal.write_response(out) (400, or 426 with Sec-WebSocket-Version: 13); close
//!     }
//!     the octets after the request's head: verdict = session.receive(rest, now, &mut out)
//! on input:    verdict = session.receive(bytes, now, &mut out)     // echoes, pongs, closes
//! ping timer:  verdict = session.on_ping_due(now, &mut out)       // for connections idle since session.last_input()
//! drain:       session.initiate_close(1001, &mut out); wait for Close(Handshake) up to the drain timeout
//! verdict:     Continue, or Close(Closing::{Handshake{code}, Failed(code), PingTimeout}) once `out` is sent
//! counters:    session.stats() (messages and bytes each way, pings, pongs, closes by code)
//!
//! client:      hs = ClientHandshake::random(&mut rng, deflate_config); hs.write_request(host, path, &mut out)
//!              on the response head: deflate = hs.verify(status, headers)?
//!              client = ClientSession::new(&config, deflate.as_ref(), rng, now)
//!              client.send(Kind::Binary, payload, &mut out); client.receive(bytes, now, &mut out);
//!              while let Some(message) = client.poll_message() { verify it }
//! ```
//!
//! # Rules
//!
//! Frames are read incrementally (any split of the input, down to single octets): a client's
//! frames must be masked and a server's not (1002), RSV2/RSV3 and reserved opcodes are 1002,
//! RSV1 only on the first frame of a data message with permessage-deflate agreed, control frames
//! at most 125 octets and unfragmented, continuations only within a message and data frames
//! not within one, a 64-bit length with its top bit set is 1002. A message past
//! [`Config::max_message`] is 1009 as soon as a frame header announces it (or, compressed, as
//! inflating reaches it), so it is never allocated past the limit; text is checked as UTF-8 as
//! its octets arrive (1007 at the first invalid one, a sequence cut across frames is fine). A
//! close frame's code is checked ([`session::valid_close_code`]; a 1-octet payload is 1002, a
//! reason not UTF-8 is 1007) and answered with the same code.
//!
//! # Memory
//!
//! Between calls a connection holds a frame header or control payload cut across inputs (in a
//! box made only then, dropped between frames; whole ones are read where they arrive) and a
//! message in progress ([`Session::buffered`], boxed); the message's buffer is handed over (or
//! dropped) when it completes, so an idle connection holds no buffer. A server session counts
//! in the caller's [`Stats`] (the server keeps them per thread) and holds no masking RNG:
//! without permessage-deflate it is its struct, 136 octets (`tests/memory.rs` measures it
//! with a counting allocator).
//! permessage-deflate's zlib states (zlib-rs) are made at the first compressed message each
//! way and kept for the connection: after one 512-octet message each way a server session held
//! 428,440 octets with 15-bit windows and 299,416 with 9-bit windows (the compressor's hash
//! tables, at zlib's default memLevel, are most of it).

pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod session;
mod stats;
#[cfg(test)]
mod tests;

/// Which end of the connection this is: it decides who masks, and which window bits apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

pub use deflate::{DeflateConfig, DeflateParams};
pub use handshake::{
    accept, accept_h2, accept_key, is_upgrade, Accepted, AcceptedH2, ClientHandshake, HandshakeError, Refusal,
};
pub use session::{
    code, valid_close_code, ClientSession, Closing, Config, Kind, Message, Session, Verdict, DEFAULT_MAX_MESSAGE,
};
pub use stats::{CloseCounts, Stats, CLOSE_CODES};
