//! The protocols sockscale serves, with no I/O at all.
//!
//! Every protocol here is a state machine in the style of quinn-proto or smoltcp's `wire`:
//! it is fed the bytes that arrived and the current time, and it answers with the bytes to
//! send and a [`Verdict`] (keep going, or close once the output is flushed). Nothing in this
//! crate touches a socket, a clock or a thread, so every behaviour is tested with byte fixtures.
//!
//! The split between [`Protocol`], [`Engine`] and [`Session`] follows the lifetime of the state:
//! - [`Protocol`] is the configuration, shared by every thread of a server;
//! - [`Engine`] is per thread: it holds what all sessions on that thread share, such as the HTTP
//!   responses pre-rendered once a second with the current `Date`;
//! - [`Session`] is per connection and holds only what that connection needs between reads.

pub mod echo;
pub mod http;
mod output;
pub mod udp;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

pub use output::{Output, Segment};

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
    /// A request head was not complete within the header timeout; a 408 is queued.
    HeaderTimeout,
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
    pub fn engine(&self, unix_secs: u64) -> Engine {
        match self {
            Protocol::Echo => Engine::Echo,
            Protocol::Http(cfg) => Engine::Http(http::Responses::new(cfg.clone(), unix_secs)),
        }
    }
}

/// Per-thread protocol state, shared by all sessions of one thread.
#[derive(Debug)]
pub enum Engine {
    Echo,
    Http(http::Responses),
}

impl Engine {
    pub fn new_session(&self) -> Session {
        match self {
            Engine::Echo => Session::Echo(echo::EchoSession),
            Engine::Http(_) => Session::Http(http::HttpSession::default()),
        }
    }

    /// Advance the wall clock. HTTP re-renders its responses when the second changes, so the
    /// `Date` header is formatted at most once a second per thread, never per request.
    pub fn tick(&mut self, unix_secs: u64) {
        if let Engine::Http(responses) = self {
            responses.tick(unix_secs);
        }
    }

    /// Feed `input`, which arrived at `now`, to `session`, appending its answer to `out`.
    pub fn on_input(&mut self, session: &mut Session, input: &[u8], now: Instant, out: &mut Output) -> Verdict {
        match (self, session) {
            (_, Session::Echo(echo)) => echo.on_input(input, out),
            (Engine::Http(responses), Session::Http(http)) => http.on_input(input, now, responses, out),
            (Engine::Echo, Session::Http(_)) => {
                unreachable!("an HTTP session is only ever created by an HTTP engine")
            }
        }
    }

    /// The earliest instant at which `session` has a protocol deadline (the HTTP header
    /// timeout), if any. The caller combines it with its own timers.
    pub fn deadline(&self, session: &Session) -> Option<Instant> {
        match (self, session) {
            (Engine::Http(responses), Session::Http(http)) => http.deadline(responses.config().header_timeout),
            _ => None,
        }
    }

    /// How long a request's head may take to arrive (HTTP's header timeout), if the protocol
    /// has such a limit: a stage below the protocol (a TLS handshake) is held to it too.
    pub fn header_timeout(&self) -> Option<std::time::Duration> {
        match self {
            Engine::Http(responses) => Some(responses.config().header_timeout),
            _ => None,
        }
    }

    /// Called when `deadline` has passed: queues the protocol's timeout answer, if it has one.
    pub fn on_timeout(&mut self, session: &mut Session, now: Instant, out: &mut Output) -> Verdict {
        match (self, session) {
            (Engine::Http(responses), Session::Http(http)) => http.on_timeout(now, responses, out),
            _ => Verdict::Continue,
        }
    }

    /// The bytes sent to a connection refused because the server is full: a 503 for HTTP,
    /// nothing for echo.
    pub fn refusal(&mut self) -> Option<Bytes> {
        match self {
            Engine::Echo => None,
            Engine::Http(responses) => Some(responses.error(http::Status::ServiceUnavailable)),
        }
    }
}

/// Per-connection protocol state.
#[derive(Debug)]
pub enum Session {
    Echo(echo::EchoSession),
    Http(http::HttpSession),
}

impl Session {
    /// True when the session is between requests, with nothing half-received, so that a
    /// draining server can close it without cutting an exchange short.
    pub fn is_between_requests(&self) -> bool {
        match self {
            Session::Echo(_) => true,
            Session::Http(http) => http.is_between_requests(),
        }
    }

    /// Ask the session to end after the exchange in progress: HTTP answers the current request
    /// with `Connection: close` and reads nothing after it.
    pub fn finish_current(&mut self) {
        if let Session::Http(http) = self {
            http.finish_current();
        }
    }
}
