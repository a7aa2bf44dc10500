//! HTTP/1.1 server that answers every request with one fixed response.
//!
//! A [`HttpSession`] is fed the bytes of one connection in whatever pieces they arrive. It
//! parses request heads with `httparse`, reads and discards request bodies (Content-Length or
//! chunked), and answers each request, in order, once its body has been read. Pipelined
//! requests in one input produce all their responses in one [`Output`], so a server writes them
//! together.
//!
//! The session never holds more than `max_header_bytes` of an unfinished head (plus a bounded
//! chunk line); between requests it holds no buffer at all. Errors are answered with a status
//! and `Connection: close`, and nothing after the bad request is read, so no second request
//! can be smuggled out of a body the session rejected.

mod chunked;
mod request;
mod response;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

pub use chunked::{ChunkError, ChunkedDecoder};
pub use request::{parse as parse_head, Framing, Parsed, RequestHead, MAX_HEADERS};
/// With HTTP/2 on the port, a connection whose first line is three words and not an HTTP/1
/// request line (its last word is no HTTP version: h2spec's "INVALID CONNECTION PREFACE") is
/// neither protocol: it is closed without an HTTP/1.1 answer, which an HTTP/2 client would
/// read as a broken frame (RFC 9113 §3.4: an invalid preface is a connection error; RFC 9112
/// §3 only says SHOULD answer 400). Anything else malformed still gets its 400.
pub fn neither_protocol(first: &[u8]) -> bool {
    let first = &first[..first.len().min(256)];
    let Some(end) = memchr::memmem::find(first, b"\r\n") else { return false };
    let mut words = first[..end].split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) = (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    let token = |w: &[u8]| !w.is_empty() && w.iter().all(|b| b.is_ascii_graphic());
    token(method) && token(target) && token(version) && !version.starts_with(b"HTTP/")
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = sockscale_h2::frame::PREFACE;

pub use response::{generated_page, http_date, unix_secs, ConnectionMode, Responses, CONTINUE};

use crate::{Closing, Output, Verdict};

/// Length of the default generated page, as in the seed-003 benchmark.
pub const DEFAULT_BODY_LEN: usize = 4096;

/// The body of every 200 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseBody {
    /// Held in memory and written with the head in one send.
    Bytes(Bytes),
    /// `len` bytes the server sends from a file it holds open: the session answers with the
    /// head and a [`crate::Segment::File`] naming the range, and the server moves the bytes
    /// (sendfile) without this crate or the server's memory ever holding them.
    File { len: u64 },
}

impl ResponseBody {
    pub fn len(&self) -> u64 {
        match self {
            ResponseBody::Bytes(b) => b.len() as u64,
            ResponseBody::File { len } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A body file's bytes, read a chunk at a time where a response has got to: how HTTP/2 sends a
/// [`ResponseBody::File`] (it frames DATA from bytes, so the file is read, never sent from the
/// page cache as HTTP/1.1 does). The server implements it with its open body file (`pread`);
/// this crate only asks, so it still does no I/O of its own and is tested with bytes.
pub trait FileChunks: std::fmt::Debug + Send + Sync {
    /// Bytes of the file from offset `at`, at most `max` and at least one: fewer only where a
    /// read came short. The file ending before `at` (it shrank since the server opened it)
    /// or a failed read is an error, and the response cannot be finished.
    fn read_chunk(&self, at: u64, max: usize) -> std::io::Result<Bytes>;
}

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The response body sent for every request.
    pub body: ResponseBody,
    pub content_type: String,
    /// The `Server` header.
    pub server: String,
    /// A request head longer than this gets 431 (414 if the request line alone is).
    pub max_header_bytes: usize,
    /// A request body longer than this gets 413.
    pub max_body_bytes: u64,
    /// A request head must be complete this long after its first byte arrived.
    pub header_timeout: Duration,
    /// HTTP/2 on the same port (`--http2 on`): a connection whose first bytes are the HTTP/2
    /// preface is served by the HTTP/2 stage with these limits; `None`: HTTP/1.1 only.
    pub http2: Option<Arc<sockscale_h2::Limits>>,
    /// Where HTTP/2 reads a body in a file (`ResponseBody::File`) from, a chunk at a time at
    /// each stream's offset (HTTP/1.1 sends the file with sendfile): the server's open file,
    /// set by the server when it starts. `None`: HTTP/2 answers a file body with its head only.
    pub file_chunks: Option<Arc<dyn FileChunks>>,
    /// What HTTP/2 connections counted, added as each one ends (read by the server's stats).
    pub h2_totals: Arc<crate::h2_totals::H2Totals>,
    /// WebSocket on the same port: a request with `Upgrade: websocket` (a GET with no body)
    /// is answered by the WebSocket stage, 101 or a refusal; `None`: such a request is an
    /// ordinary one (its Upgrade ignored, as RFC 9110 §7.8 lets a server).
    pub websocket: Option<Arc<crate::ws::WsConfig>>,
    /// `--proto ws`: every request is the WebSocket stage's; one that asks for no upgrade is
    /// answered 426 (no pages are served).
    pub websocket_only: bool,
    /// The `Alt-Svc` field's value every 200 response carries, on HTTP/1.1 and HTTP/2 alike,
    /// rendered into the prepared response (no cost per request): with `--http3`, set by the
    /// server once the port is bound ([`alt_svc_h3`]). `None`: no `Alt-Svc`.
    pub alt_svc: Option<String>,
}

/// How long a client may remember the HTTP/3 alternative (`ma`, seconds): a day, as the
/// default of RFC 7838 is, said explicitly.
pub const ALT_SVC_MAX_AGE: u32 = 86_400;

/// The `Alt-Svc` value advertising HTTP/3 at `port` on the same host (RFC 7838, RFC 9114 §3.1.1).
pub fn alt_svc_h3(port: u16) -> String {
    format!("h3=\":{port}\"; ma={ALT_SVC_MAX_AGE}")
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            body: ResponseBody::Bytes(generated_page(DEFAULT_BODY_LEN)),
            content_type: "text/html; charset=utf-8".into(),
            server: "sockscale".into(),
            max_header_bytes: 8192,
            max_body_bytes: 8 << 20,
            header_timeout: Duration::from_secs(10),
            http2: Some(Arc::new(crate::h2_totals::default_limits())),
            file_chunks: None,
            h2_totals: Arc::default(),
            websocket: None,
            websocket_only: false,
            alt_svc: None,
        }
    }
}

/// The statuses the server sends besides 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    BadRequest,
    RequestTimeout,
    PayloadTooLarge,
    UriTooLong,
    HeaderFieldsTooLarge,
    ServiceUnavailable,
}

impl Status {
    pub fn code(self) -> u16 {
        match self {
            Status::BadRequest => 400,
            Status::RequestTimeout => 408,
            Status::PayloadTooLarge => 413,
            Status::UriTooLong => 414,
            Status::HeaderFieldsTooLarge => 431,
            Status::ServiceUnavailable => 503,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Status::BadRequest => "Bad Request",
            Status::RequestTimeout => "Request Timeout",
            Status::PayloadTooLarge => "Content Too Large",
            Status::UriTooLong => "URI Too Long",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::ServiceUnavailable => "Service Unavailable",
        }
    }
}

#[derive(Debug, Default)]
enum State {
    /// Waiting for (the rest of) a request head.
    #[default]
    Head,
    /// Discarding the body of `request`; its response goes out when the body ends.
    Body { request: RequestHead, remaining: BodyLeft },
    /// The connection is ending; further input is ignored.
    Closed,
    /// The request whose head this is goes to the WebSocket stage (see `crate::upgrade`); the
    /// input it ended in goes on at `rest`. Nothing more is parsed.
    Upgrade { head: Vec<u8>, rest: usize },
}

#[derive(Debug)]
enum BodyLeft {
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
}

/// The state of one HTTP connection.
#[derive(Debug, Default)]
pub struct HttpSession {
    state: State,
    /// The start of a head that has not ended yet. Empty (and unallocated) between requests.
    partial: Vec<u8>,
    /// When the first byte of the unfinished head arrived; the header timeout counts from here.
    head_started: Option<Instant>,
    /// Answer the current request with `Connection: close`, then stop.
    finishing: bool,
    /// Whether the connection's first bytes are the HTTP/2 preface (HTTP/2 on only).
    sniff: Sniff,
}

/// Looking at a connection's first bytes for the HTTP/2 preface: only there, so HTTP/1.1
/// requests after the first cost nothing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Sniff {
    /// No byte seen yet; or this many octets of the preface matched so far.
    #[default]
    Fresh,
    Matched(u8),
    /// Decided: HTTP/1.1.
    Http1,
}

/// What the first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstBytes {
    /// HTTP/1.1 (or HTTP/2 is off): parse as usual, after these octets of the preface, which
    /// were taken while it could still have been one. `decided`: this input decided it.
    Http1 { replay: usize, decided: bool },
    /// Part of the preface, and nothing else so far: wait for more.
    Undecided,
    /// The HTTP/2 preface: the connection is HTTP/2 (the octets taken earlier are `replay`).
    Http2 { replay: usize },
}

enum HeadStep {
    NeedMore,
    Request(RequestHead),
    /// A request for the WebSocket stage, with its head.
    Upgrade(Vec<u8>),
    Reject(Status),
}

/// Whether `request` goes to the WebSocket stage: a request asking for it with no body (a
/// body would be read as frames), or any request on a WebSocket-only port.
fn upgrade_wanted(request: &RequestHead, cfg: &HttpConfig) -> bool {
    cfg.websocket.is_some() && (cfg.websocket_only || (request.upgrade && request.framing == Framing::None))
}

impl HttpSession {
    pub fn on_input(&mut self, input: &[u8], now: Instant, responses: &mut Responses, out: &mut Output) -> Verdict {
        let mut cursor = 0;
        while cursor < input.len() {
            match &mut self.state {
                State::Closed | State::Upgrade { .. } => break,
                State::Head => match self.take_head(input, &mut cursor, now, responses.config()) {
                    HeadStep::NeedMore => break,
                    HeadStep::Reject(status) => return self.reject(status, responses, out),
                    HeadStep::Upgrade(head) => {
                        self.state = State::Upgrade { head, rest: cursor };
                        return Verdict::Continue;
                    }
                    HeadStep::Request(request) => {
                        let remaining = match request.framing {
                            Framing::None => None,
                            Framing::Length(n) => Some(BodyLeft::Length(n)),
                            Framing::Chunked => Some(BodyLeft::Chunked(Box::default())),
                        };
                        match remaining {
                            None => {
                                if let Some(verdict) = self.respond(request, responses, out) {
                                    return verdict;
                                }
                            }
                            Some(remaining) => {
                                if let Framing::Length(n) = request.framing {
                                    if n > responses.config().max_body_bytes {
                                        return self.reject(Status::PayloadTooLarge, responses, out);
                                    }
                                }
                                if request.expect_continue {
                                    out.push_shared(Bytes::from_static(CONTINUE));
                                }
                                self.state = State::Body { request, remaining };
                            }
                        }
                    }
                },
                State::Body { request, remaining } => {
                    let request = *request;
                    let data = &input[cursor..];
                    let (used, done) = match remaining {
                        BodyLeft::Length(left) => {
                            let used = (*left).min(data.len() as u64);
                            *left -= used;
                            (used as usize, *left == 0)
                        }
                        BodyLeft::Chunked(decoder) => {
                            let cfg = responses.config();
                            match decoder.feed(data, cfg.max_body_bytes, cfg.max_header_bytes) {
                                Ok(progress) => progress,
                                Err(ChunkError::Malformed) => return self.reject(Status::BadRequest, responses, out),
                                Err(ChunkError::TooLarge) => {
                                    return self.reject(Status::PayloadTooLarge, responses, out)
                                }
                            }
                        }
                    };
                    cursor += used;
                    if done {
                        self.state = State::Head;
                        if let Some(verdict) = self.respond(request, responses, out) {
                            return verdict;
                        }
                    }
                }
            }
        }
        match self.state {
            State::Closed => Verdict::Close(Closing::Done),
            _ => Verdict::Continue,
        }
    }

    /// The header deadline, while a head is unfinished.
    pub fn deadline(&self, header_timeout: Duration) -> Option<Instant> {
        self.head_started.map(|started| started + header_timeout)
    }

    pub fn on_timeout(&mut self, now: Instant, responses: &mut Responses, out: &mut Output) -> Verdict {
        match self.deadline(responses.config().header_timeout) {
            Some(deadline) if now >= deadline => {
                self.reject(Status::RequestTimeout, responses, out);
                Verdict::Close(Closing::HeaderTimeout)
            }
            _ => Verdict::Continue,
        }
    }

    pub fn is_between_requests(&self) -> bool {
        matches!(self.state, State::Head) && self.partial.is_empty() && !matches!(self.sniff, Sniff::Matched(_))
    }

    /// Whether the connection's first bytes decided HTTP/1.1 (or HTTP/2 is off and input came):
    /// [`HttpSession::first_bytes`] then has nothing left to look at.
    #[inline]
    pub fn is_http1(&self) -> bool {
        self.sniff == Sniff::Http1
    }

    /// Look at `input` for the HTTP/2 preface, while the connection's first bytes arrive
    /// (`http2`: HTTP/2 is served). One comparison of a byte for an HTTP/1.1 connection's first
    /// input, none after it.
    pub fn first_bytes(&mut self, input: &[u8], now: Instant, http2: bool) -> FirstBytes {
        let matched = match self.sniff {
            Sniff::Http1 => return FirstBytes::Http1 { replay: 0, decided: false },
            Sniff::Fresh if !http2 || input.first().is_some_and(|&b| b != PREFACE[0]) => {
                self.sniff = Sniff::Http1;
                return FirstBytes::Http1 { replay: 0, decided: http2 };
            }
            Sniff::Fresh => 0,
            Sniff::Matched(m) => usize::from(m),
        };
        let want = &PREFACE[matched..];
        let n = want.len().min(input.len());
        if input[..n] != want[..n] {
            self.sniff = Sniff::Http1;
            self.head_started = None;
            return FirstBytes::Http1 { replay: matched, decided: true };
        }
        if matched + n == PREFACE.len() {
            return FirstBytes::Http2 { replay: matched };
        }
        // A part of the preface, held to the header timeout like a head.
        self.head_started.get_or_insert(now);
        self.sniff = Sniff::Matched((matched + n) as u8);
        FirstBytes::Undecided
    }

    pub fn finish_current(&mut self) {
        self.finishing = true;
    }

    /// The drain asked this connection to end (see [`HttpSession::finish_current`]).
    pub fn is_finishing(&self) -> bool {
        self.finishing
    }

    /// A request for the WebSocket stage was read: [`HttpSession::take_upgrade`] gives it.
    #[inline]
    pub fn is_upgrading(&self) -> bool {
        matches!(self.state, State::Upgrade { .. })
    }

    /// The upgrade request's head and where the octets behind it start in the input it ended
    /// in; the session is closed (the connection is the WebSocket stage's, or refused).
    pub fn take_upgrade(&mut self, input: &[u8]) -> Option<(Vec<u8>, usize)> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Upgrade { head, rest } => Some((head, rest.min(input.len()))),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Parse a head from `input[*cursor..]`, continuing a partial one if there is one. Only as
    /// much input as can still fit under the limit is copied into the partial buffer, and no
    /// more than that is parsed when the head starts in this input either, so a head gets the
    /// same answer however it is split into reads.
    fn take_head(&mut self, input: &[u8], cursor: &mut usize, now: Instant, cfg: &HttpConfig) -> HeadStep {
        let limit = cfg.max_header_bytes;
        if self.partial.is_empty() {
            let available = &input[*cursor..];
            let available = &available[..available.len().min(limit + 1)];
            return match request::parse(available, limit) {
                Parsed::Complete(request, len) if upgrade_wanted(&request, cfg) => {
                    let head = available[..len].to_vec();
                    *cursor += len;
                    HeadStep::Upgrade(head)
                }
                Parsed::Complete(request, len) => {
                    *cursor += len;
                    HeadStep::Request(request)
                }
                Parsed::Partial => {
                    // Partial only when all of the input fits under the limit.
                    self.partial.extend_from_slice(available);
                    self.head_started = Some(now);
                    *cursor = input.len();
                    HeadStep::NeedMore
                }
                Parsed::Reject(status) => HeadStep::Reject(status),
            };
        }
        let room = (limit + 1).saturating_sub(self.partial.len());
        let take = room.min(input.len() - *cursor);
        self.partial.extend_from_slice(&input[*cursor..*cursor + take]);
        match request::parse(&self.partial, limit) {
            Parsed::Complete(request, len) => {
                // Bytes past the head came from this input; leave them there for the body or
                // the next request.
                let unused = self.partial.len() - len;
                *cursor += take - unused;
                let mut head = std::mem::take(&mut self.partial);
                self.head_started = None;
                if upgrade_wanted(&request, cfg) {
                    head.truncate(len);
                    return HeadStep::Upgrade(head);
                }
                HeadStep::Request(request)
            }
            Parsed::Partial => {
                *cursor += take;
                HeadStep::NeedMore
            }
            Parsed::Reject(status) => HeadStep::Reject(status),
        }
    }

    /// Queue the 200 for `request`. Returns the verdict if the connection must close after it.
    fn respond(&mut self, request: RequestHead, responses: &mut Responses, out: &mut Output) -> Option<Verdict> {
        let keep_alive = request.keep_alive && !self.finishing;
        let mode = match (keep_alive, request.http10) {
            (false, _) => ConnectionMode::Close,
            (true, true) => ConnectionMode::KeepAlive10,
            (true, false) => ConnectionMode::KeepAlive11,
        };
        responses.ok(mode, request.head_only, out);
        if keep_alive {
            None
        } else {
            self.close();
            Some(Verdict::Close(Closing::Done))
        }
    }

    fn reject(&mut self, status: Status, responses: &mut Responses, out: &mut Output) -> Verdict {
        out.push_shared(responses.error(status));
        self.close();
        Verdict::Close(Closing::BadRequest)
    }

    fn close(&mut self) {
        self.state = State::Closed;
        self.partial = Vec::new();
        self.head_started = None;
    }
}
