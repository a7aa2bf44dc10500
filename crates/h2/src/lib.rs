//! sockscale's HTTP/2 stage (RFC 9113), server and client ([`client`]): frames, HPACK, streams, flow control, SETTINGS,
//! PING, GOAWAY and RST_STREAM as a state machine with no I/O, in the style of quinn-proto and of
//! `sockscale-proto`: fed the bytes a socket received and the time, it appends the bytes to send
//! to the caller's buffer and reports requests, deadlines and its verdict. No socket, clock or
//! thread is inside, so every engine drives it alike and every behaviour is tested with byte
//! values.
//!
//! # Driving a connection
//!
//! ```text
//! conn = Connection::new(limits, now, &mut out)       // appends the server's SETTINGS
//! on input:   verdict = conn.receive(bytes, now, &mut out)
//!             while let Some(Event::Request(req)) = conn.poll_event() {
//!                 conn.respond(req.stream, 200, &fields, Body::Bytes(page) | Body::Empty | Body::Chunks, &mut out)
//!             }
//!             verdict = conn.transmit(now, unsent, &mut out)   // DATA as windows and the cap allow
//! on output taken:  verdict = conn.transmit(now, unsent, &mut out)
//! Body::Chunks:     while let Some((stream, max)) = conn.wants_data() { conn.send_data(stream, chunk, last) }
//! timer:      wake at conn.deadline(); verdict = conn.on_timer(now, &mut out)
//! drain:      verdict = conn.begin_drain(&mut out)     // GOAWAY(last stream id, NO_ERROR)
//! verdict:    Continue, or Close(Closing::{Done, Protocol(code), Limit(limit)}) once `out` is sent
//! counters:   conn.stats()  (requests, resets, malformed, GOAWAYs, each Limit's hits)
//! tunnels:    with Limits::extended_connect, receive_with(bytes, now, &mut out, &mut tunnels)
//! ```
//!
//! # Tunnels (RFC 8441)
//!
//! With [`Limits::extended_connect`] the SETTINGS carry SETTINGS_ENABLE_CONNECT_PROTOCOL and an
//! extended CONNECT (`:protocol`, with `:scheme`, `:path` and `:authority`) is not a request
//! event: [`Connection::receive_with`] asks the application's [`Tunnels`] at once whether to open
//! it (200, no END_STREAM) or refuse it (its status, then RST_STREAM NO_ERROR), and hands it each
//! DATA payload of an open tunnel; what it answers is framed as DATA on the stream as the windows
//! allow, [`Connection::send_data`] adds output of its own (a ping, a close), and
//! [`Connection::is_tunnel`] says whether the stream is still open. The stage knows nothing of
//! the protocol inside (WebSocket, in `sockscale-proto`). A tunnel's output over
//! [`TUNNEL_SEND_CAP`] holds back its input's window, so a peer that does not read stops being
//! read. A `:protocol` without the setting, on another method, or without the three
//! pseudo-fields is malformed (PROTOCOL_ERROR on the stream).
//!
//! `unsent` is what the engine holds that the socket has not taken (not counting `out`): DATA is
//! framed only while it stays under [`Limits::output_cap`], so one connection never holds
//! unbounded output; control frames answer input, which the engine stops reading while its
//! output is over its own cap. A peer that keeps a window shut is reported
//! ([`Connection::window_stalled_since`]) and cut off at [`Limits::window_timeout`].
//!
//! # Limits
//!
//! [`Limits`] holds every bound: concurrent streams (advertised, one more refused with
//! REFUSED_STREAM), header list size (advertised; a larger request gets 431 on its stream and the
//! connection goes on), header block bytes and CONTINUATION frames, body size (413), and budgets
//! per window of time for resets received or provoked (rapid reset, CVE-2023-44487, and "made you
//! reset"), PINGs, SETTINGS and empty frames. A budget spent is GOAWAY(ENHANCE_YOUR_CALM) and
//! [`Closing::Limit`]; every hit is counted by kind in [`Stats`]. The header timeout covers the
//! preface and the client's SETTINGS from acceptance, and any frame other than DATA or header
//! block from its first byte.
//!
//! # Memory
//!
//! Between calls a connection keeps a frame received in part (up to the frame size limit), a
//! header block in progress, its open streams (a request's fields until its END_STREAM, a
//! response body as shared `Bytes`) and the HPACK table the peer fills, bounded by
//! SETTINGS_HEADER_TABLE_SIZE. An idle connection holds no buffer: each of these but the HPACK
//! table is given back when it empties ([`Connection::buffered`] counts them all). Request bodies are counted and discarded, their
//! windows given back, as HTTP/1.1's session discards them.
//!
//! # HPACK and framing: what was used, and why not a crate
//!
//! The brief was a maintained crate for HPACK, and for framing if one fits an I/O-free design.
//! The candidates, read and measured (release build, this machine):
//! - `loona-hpack` 0.4.3 (bearcove, the maintained fork of `hpack`/`fluke-hpack`, MIT): builds a
//!   `HashMap` of the whole Huffman code for every Huffman-coded string it decodes. A curl
//!   request's block took 369 µs to decode; a hostile 20 KB block of tiny Huffman strings took
//!   377 ms of CPU: a denial of service by amplification. `fluke-hpack` and `hpack` 0.3 (2015,
//!   unmaintained) share the code.
//! - `httlib-hpack` 0.1.3 (last release 2021, MIT): 3 µs a block, but it indexes `buf[0]` of an
//!   empty slice when a literal's value is missing (a panic on two bytes from the peer), drains
//!   its input `Vec` field by field (quadratic), and its Huffman decoder (`httlib-huffman`)
//!   accepts zero padding, which RFC 7541 §5.2 makes an error.
//! - `h2`'s HPACK is private; `ntex-h2` exports one but brings ntex's I/O stack, which this
//!   crate, like `proto` and `tls`, must not depend on.
//!
//! So HPACK is written here (`hpack`): RFC 7541's integers, strings and tables, and a canonical
//! Huffman decoder whose per-length tables are computed at compile time from the RFC's code (a
//! test checks the code is canonical), with no allocation per string. It is bounded as the stage
//! needs (size updates only at a block's start and within the advertised size; decoding into a
//! [`HeaderList`] that stops keeping fields at its limit while the table stays in step, so a block
//! of references to one large entry cannot decode to megabytes) and tested with the RFC's
//! examples and proptest. The encoder keeps no dynamic table (literals without indexing, names
//! by static index): a few bytes a response, and no table per connection. No framing crate fits
//! either (`h2`'s codec is tied to tokio's I/O traits), and framing is 9 octets of header and the
//! rules of §6: `frame` writes frames; [`rules`] checks every frame received, once for both sides
//! (shapes, order, padding, SETTINGS applied to the windows, WINDOW_UPDATE, receive windows), each
//! broken rule a [`Violation`] with its RFC 9113 code; `conn` (server) and `client` keep only
//! what differs by role.
//!
//! # Conformance
//!
//! `examples/h2c_server.rs` drives the stage over blocking sockets (test only, no engine):
//! h2spec 2.2.1 passes 145 of 145 cases, and 146 of 146 with `--strict`.

pub mod client;
#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod client_tunnel_tests;
pub mod config;
pub mod frame;
pub mod hpack;
pub mod request;
pub mod rules;
mod server;
mod stats;
#[cfg(test)]
mod tests;
mod tunnel;
#[cfg(test)]
mod tunnel_tests;

pub use client::{
    encode_connect, encode_request, encode_request_indexed, ClientConnection, ClientError, ClientEvent, ClientSettings,
    ClientSink, Indexed, Request as ClientRequest,
};
pub use config::{Budget, Limits, LimitsError};
pub use frame::{error_code_name, ErrorCode};
pub use hpack::HeaderList;
pub use request::{Malformed, Request};
pub use rules::Violation;
pub use server::{Body, Closing, Connection, Event, Verdict};
pub use stats::{Limit, Stats};
pub use tunnel::{Fields, Flow, NoTunnels, Opening, Tunnels, TUNNEL_SEND_CAP};
