//! The protocols sockscale serves, with no I/O at all.
//!
//! Every protocol here is a state machine in the style of quinn-proto or smoltcp's `wire`:
//! it is fed the bytes that arrived and the current time, and it answers with the bytes to
//! send and a [`Verdict`] (keep going, or close once the output is flushed). Nothing in this
//! crate touches a socket, a clock or a thread, so every behaviour is tested with byte fixtures.
//!
//! The split between [`Protocol`], [`Responder`] and [`Session`] follows the lifetime of the state:
//! - [`Protocol`] is the configuration, shared by every thread of a server;
//! - [`Responder`] is per thread: it holds what all sessions on that thread share, such as the HTTP
//!   responses pre-rendered once a second with the current `Date`;
//! - [`Session`] is per connection and holds only what that connection needs between reads.

pub mod echo;
pub mod h2;
mod h2_totals;
mod h2_ws;
#[cfg(test)]
mod h2_ws_tests;
pub mod http;
mod output;
pub mod quic;
pub mod udp;
pub mod ws;
#[cfg(test)]
mod ws_tests;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

pub use output::{Output, Segment};

/// More headers than this is answered with 431, as an over-long head is (the HTTP/1.1 parser, and
/// the WebSocket upgrade reading the same head).
pub const MAX_HEADERS: usize = 64;

/// What a session wants once the output of a call has been queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep the connection and wait for more input.
    Continue,
    /// Flush what is queued, then close the connection.
    Close(Closing),
}

/// Why a protocol asked to close a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Closing {
    /// The exchange ended normally: `Connection: close`, HTTP/1.0 without keep-alive, or a
    /// connection being drained at shutdown.
    Done,
    /// The peer sent something the protocol rejects; an error response is queued.
    BadRequest,
    /// A request head was not complete within the header timeout; a 408 is queued (HTTP/2:
    /// the preface, a control frame or a header block, answered with a GOAWAY).
    HeaderTimeout,
    /// HTTP/2: the peer went over one of the stage's limits (rapid reset, a CONTINUATION,
    /// SETTINGS, PING or empty-frame flood: GOAWAY(ENHANCE_YOUR_CALM); a window kept shut past
    /// the send timeout: GOAWAY(FLOW_CONTROL_ERROR)).
    Limit(sockscale_h2::Limit),
    /// WebSocket: a ping was not answered by the next one (or within the idle timeout of the
    /// last input); a close 1001 is queued.
    PingTimeout,
}

/// `t + d`, capped far in the future instead of overflowing.
fn after(t: Instant, d: std::time::Duration) -> Instant {
    const CENTURY: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    t.checked_add(d.min(CENTURY)).unwrap_or(t)
}

/// Which protocol a server speaks, with its configuration. Cheap to clone and shared by threads.
#[derive(Debug, Clone)]
pub enum Protocol {
    Echo,
    Http(Arc<http::HttpConfig>),
}

impl Protocol {
    /// The per-thread state for this protocol. `unix_secs` is the wall-clock time, used for the
    /// HTTP `Date` header.
    pub fn responder(&self, unix_secs: u64) -> Responder {
        match self {
            Protocol::Echo => Responder::Echo,
            Protocol::Http(cfg) => Responder::Http(http::Responses::new(cfg.clone(), unix_secs)),
        }
    }
}

/// Per-thread protocol state, shared by all sessions of one thread.
#[derive(Debug)]
pub enum Responder {
    Echo,
    Http(http::Responses),
}

impl Responder {
    pub fn new_session(&self) -> Session {
        match self {
            Responder::Echo => Session::Echo(echo::EchoSession),
            Responder::Http(_) => Session::Http(http::HttpSession::default()),
        }
    }

    /// Advance the wall clock. HTTP re-renders its responses when the second changes, so the
    /// `Date` header is formatted at most once a second per thread, never per request.
    pub fn tick(&mut self, unix_secs: u64) {
        if let Responder::Http(responses) = self {
            responses.tick(unix_secs);
        }
    }

    /// Feed `input`, which arrived at `now`, to `session`, appending its answer to `out`.
    pub fn on_input(&mut self, session: &mut Session, input: &[u8], now: Instant, out: &mut Output) -> Verdict {
        let verdict = match (&mut *self, &mut *session) {
            (_, Session::Echo(echo)) => echo.on_input(input, out),
            // Every input of an HTTP/1.1 connection after the one that decided it: straight to
            // the parser, as before HTTP/2 (the detection is out of line, in `first_input`).
            (Responder::Http(responses), Session::Http(http)) if http.is_http1() => {
                http.on_input(input, now, responses, out)
            }
            (Responder::Http(responses), Session::Http(_)) => first_input(responses, session, input, now, out),
            (Responder::Http(responses), Session::H2(h2)) => h2.on_input(input, now, responses, out),
            (Responder::Http(responses), Session::Ws(ws)) => {
                return ws.on_input(input, now, &mut responses.ws_tally.stats, out)
            }
            (Responder::Echo, Session::Http(_) | Session::H2(_) | Session::Ws(_)) => {
                unreachable!("an HTTP session is only ever created by an HTTP responder")
            }
        };
        match (self, &mut *session) {
            (Responder::Http(responses), Session::Http(http)) if http.is_upgrading() => {
                upgrade(responses, session, input, now, out)
            }
            _ => verdict,
        }
    }

    /// Whether `session` has output to produce now that the socket took some (HTTP/2: DATA
    /// its flow-control windows allow, or a drain's GOAWAY): then call [`Responder::transmit`].
    /// False for HTTP/1.1 and echo, which answer only input.
    pub fn wants_transmit(&self, session: &Session) -> bool {
        match session {
            Session::H2(h2) => h2.wants_transmit(),
            Session::Ws(ws) => ws.wants_transmit(),
            _ => false,
        }
    }

    /// Produce what `session` has to send, `pending` bytes being unsent already (HTTP/2 frames
    /// DATA only while its unsent output stays under its cap).
    pub fn transmit(&mut self, session: &mut Session, now: Instant, pending: usize, out: &mut Output) -> Verdict {
        match (self, session) {
            (Responder::Http(responses), Session::H2(h2)) => h2.transmit(now, pending, responses, out),
            (Responder::Http(responses), Session::Ws(ws)) => ws.transmit(now, &mut responses.ws_tally.stats, out),
            _ => Verdict::Continue,
        }
    }

    /// The earliest instant at which `session` has a protocol deadline (the HTTP header
    /// timeout), if any. The caller combines it with its own timers.
    pub fn deadline(&self, session: &Session) -> Option<Instant> {
        match (self, session) {
            (Responder::Http(responses), Session::Http(http)) => http.deadline(responses.config().header_timeout),
            (_, Session::H2(h2)) => h2.deadline(),
            (_, Session::Ws(ws)) => ws.deadline(),
            _ => None,
        }
    }

    /// How long a request's head may take to arrive (HTTP's header timeout), if the protocol
    /// has such a limit: a stage below the protocol (a TLS handshake) is held to it too.
    pub fn header_timeout(&self) -> Option<std::time::Duration> {
        match self {
            Responder::Http(responses) => Some(responses.config().header_timeout),
            _ => None,
        }
    }

    /// Called when `deadline` has passed: queues the protocol's timeout answer, if it has one.
    pub fn on_timeout(&mut self, session: &mut Session, now: Instant, out: &mut Output) -> Verdict {
        match (self, session) {
            (Responder::Http(responses), Session::Http(http)) => http.on_timeout(now, responses, out),
            (_, Session::H2(h2)) => h2.on_timeout(now, out),
            (_, Session::Ws(ws)) => ws.on_timeout(now),
            _ => Verdict::Continue,
        }
    }

    /// The bytes sent to a connection refused because the server is full: a 503 for HTTP,
    /// nothing for echo.
    pub fn refusal(&mut self) -> Option<Bytes> {
        match self {
            Responder::Echo => None,
            Responder::Http(responses) => Some(responses.error(http::Status::ServiceUnavailable)),
        }
    }
}

/// An HTTP connection's input while its first bytes may still be the HTTP/2 preface: HTTP/1.1
/// (after the octets held as a possible preface, replayed), a wait for more, or the switch of
/// `session` to HTTP/2. Out of line, so that the later requests of an HTTP/1.1 connection do
/// not carry it ([`Responder::on_input`]).
#[inline(never)]
fn first_input(
    responses: &mut http::Responses,
    session: &mut Session,
    input: &[u8],
    now: Instant,
    out: &mut Output,
) -> Verdict {
    let Session::Http(http) = session else { unreachable!("only an HTTP/1.1 session looks at its first bytes") };
    // Whether HTTP/2 is on; its limits (an Arc) are cloned only for a connection that is HTTP/2.
    let http2 = responses.config().http2.is_some();
    match http.first_bytes(input, now, http2) {
        http::FirstBytes::Http1 { replay: 0, decided: false } => http.on_input(input, now, responses, out),
        http::FirstBytes::Http1 { replay: 0, decided: true } if http::neither_protocol(input) => {
            Verdict::Close(Closing::BadRequest)
        }
        http::FirstBytes::Http1 { replay, .. } => {
            // Octets taken as a possible preface were HTTP/1.1 after all.
            match http.on_input(&http::PREFACE[..replay], now, responses, out) {
                Verdict::Continue => http.on_input(input, now, responses, out),
                closing => closing,
            }
        }
        http::FirstBytes::Undecided => Verdict::Continue,
        http::FirstBytes::Http2 { replay } => {
            let Some(limits) = responses.config().http2.clone() else {
                unreachable!("HTTP/2 is detected only when on")
            };
            let (h2, verdict) = h2::H2Session::start(limits, replay, input, now, responses, out);
            *session = Session::H2(Box::new(h2));
            verdict
        }
    }
}

/// An HTTP/1.1 connection whose request asked for a WebSocket (or any request, on a
/// WebSocket-only port): the 101 and the switch of `session` to WebSocket, fed the octets that
/// came behind the request's head, or the refusal. Out of line, as `first_input` is.
#[inline(never)]
fn upgrade(
    responses: &mut http::Responses,
    session: &mut Session,
    input: &[u8],
    now: Instant,
    out: &mut Output,
) -> Verdict {
    let Session::Http(http) = session else { unreachable!("only an HTTP/1.1 session upgrades") };
    let Some((head, rest)) = http.take_upgrade(input) else { unreachable!("asked only when upgrading") };
    let Some(config) = responses.config().websocket.clone() else {
        unreachable!("an upgrade is taken only with WebSocket on")
    };
    if http.is_finishing() {
        // The drain: refused as the server is going away, rather than accepted and closed.
        ws::refuse_draining(&config, out);
        return Verdict::Close(Closing::Done);
    }
    match ws::upgrade(&config, &head, &input[rest..], now, &mut responses.ws_tally.stats, out) {
        ws::Upgrade::Accepted(ws, verdict) => {
            *session = Session::Ws(ws);
            verdict
        }
        ws::Upgrade::Refused => Verdict::Close(Closing::BadRequest),
    }
}

/// Per-connection protocol state.
#[derive(Debug)]
pub enum Session {
    Echo(echo::EchoSession),
    Http(http::HttpSession),
    /// An HTTP connection that began with the HTTP/2 preface.
    H2(Box<h2::H2Session>),
    /// An HTTP/1.1 connection upgraded to WebSocket.
    Ws(Box<ws::WsSession>),
}

impl Session {
    /// True when the session is between requests, with nothing half-received, so that a
    /// draining server can close it without cutting an exchange short.
    pub fn is_between_requests(&self) -> bool {
        match self {
            Session::Echo(_) => true,
            Session::Http(http) => http.is_between_requests(),
            Session::H2(h2) => h2.is_between_requests(),
            Session::Ws(ws) => ws.is_between_requests(),
        }
    }

    /// Ask the session to end after the exchange in progress: HTTP answers the current request
    /// with `Connection: close` and reads nothing after it.
    pub fn finish_current(&mut self) {
        match self {
            Session::Http(http) => http.finish_current(),
            Session::H2(h2) => h2.finish_current(),
            Session::Ws(ws) => ws.finish_current(),
            Session::Echo(_) => {}
        }
    }
}
