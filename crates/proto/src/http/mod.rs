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

use std::time::{Duration, Instant};

use bytes::Bytes;

pub use chunked::{ChunkError, ChunkedDecoder};
pub use request::{parse as parse_head, Framing, Parsed, RequestHead, MAX_HEADERS};
pub use response::{generated_page, unix_secs, ConnectionMode, Responses, CONTINUE};

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
}

enum HeadStep {
    NeedMore,
    Request(RequestHead),
    Reject(Status),
}

impl HttpSession {
    pub fn on_input(&mut self, input: &[u8], now: Instant, responses: &mut Responses, out: &mut Output) -> Verdict {
        let mut cursor = 0;
        while cursor < input.len() {
            match &mut self.state {
                State::Closed => break,
                State::Head => match self.take_head(input, &mut cursor, now, responses.config()) {
                    HeadStep::NeedMore => break,
                    HeadStep::Reject(status) => return self.reject(status, responses, out),
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
        matches!(self.state, State::Head) && self.partial.is_empty()
    }

    pub fn finish_current(&mut self) {
        self.finishing = true;
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
                self.partial = Vec::new();
                self.head_started = None;
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
