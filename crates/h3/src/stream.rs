//! The state machines of HTTP/3's streams (RFC 9114 §4.1, §6), on the frame decoder: a
//! request stream (server side), a response stream (client side), the peer's control stream,
//! and the type that opens a peer's unidirectional stream.
//!
//! Each is fed a stream's octets as they arrive, with `fin` when the stream ended, and yields
//! events; an [`H3Error`] says whether the stream or the connection fails. After an error the
//! machine is spent: drop it.

use sockscale_h2::hpack::HeaderList;
use sockscale_h2::request::{check_regular, check_request_with, check_trailers, parse_length, Malformed, Rules};

use crate::error::{ErrorCode, H3Error};
use crate::frame::{Frame, FrameDecoder, SETTINGS};
use crate::qpack::decode_field_section;
use crate::settings::Settings;
use crate::varint;

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub mod stream_type {
    pub const CONTROL: u64 = 0x00;
    pub const PUSH: u64 = 0x01;
    pub const QPACK_ENCODER: u64 = 0x02;
    pub const QPACK_DECODER: u64 = 0x03;
}

/// What a peer's unidirectional stream is, by its leading type. `Push` on a server is
/// H3_STREAM_CREATION_ERROR, and on a client that never sent MAX_PUSH_ID H3_ID_ERROR; `Unknown`
/// (reserved types included) is to be read and discarded, or refused with STOP_SENDING
/// H3_STREAM_CREATION_ERROR (§6.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniStreamKind {
    Control,
    Push,
    QpackEncoder,
    QpackDecoder,
    Unknown(u64),
}

impl UniStreamKind {
    /// Read the type at the start of a uni stream: (kind, octets used), or None if `input`
    /// ends inside it (keep the octets and call again with more: at most 8 are needed).
    pub fn parse(input: &[u8]) -> Option<(UniStreamKind, usize)> {
        let (ty, n) = varint::decode(input)?;
        let kind = match ty {
            stream_type::CONTROL => UniStreamKind::Control,
            stream_type::PUSH => UniStreamKind::Push,
            stream_type::QPACK_ENCODER => UniStreamKind::QpackEncoder,
            stream_type::QPACK_DECODER => UniStreamKind::QpackDecoder,
            other => UniStreamKind::Unknown(other),
        };
        Some((kind, n))
    }
}

/// Reads a uni stream's type across any split of its octets.
#[derive(Debug, Default)]
pub struct UniStreamType {
    kept: [u8; 8],
    len: usize,
    kind: Option<UniStreamKind>,
}

impl UniStreamType {
    /// Feed the stream's first octets: (octets of `input` used, the kind once known). Once
    /// known, it uses no more octets.
    pub fn feed(&mut self, input: &[u8]) -> (usize, Option<UniStreamKind>) {
        if self.kind.is_some() {
            return (0, self.kind);
        }
        let mut used = 0;
        for &b in input {
            self.kept[self.len] = b;
            self.len += 1;
            used += 1;
            if let Some((kind, _)) = UniStreamKind::parse(&self.kept[..self.len]) {
                self.kind = Some(kind);
                return (used, Some(kind));
            }
        }
        (used, None)
    }
}

/// Which side this endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// What the peer's control stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlEvent {
    Settings(Settings),
    /// A server's GOAWAY carries a client bidi stream id; a client's, a push id.
    GoAway(u64),
    MaxPushId(u64),
}

/// A control stream's frame, owned.
enum Control {
    Settings(Settings),
    GoAway(u64),
    MaxPushId(u64),
    CancelPush,
    Message,
}

/// The peer's control stream, after its type octet (§6.2.1, §7.2). Every error it reports is a
/// connection error: the control stream is critical.
#[derive(Debug)]
pub struct ControlStream {
    side: Side,
    frames: FrameDecoder,
    settings_seen: bool,
    last_goaway: Option<u64>,
    max_push_id: Option<u64>,
}

impl ControlStream {
    /// `side`: this endpoint's; `max_frame`: the most a SETTINGS frame may take.
    pub fn new(side: Side, max_frame: usize) -> Self {
        ControlStream {
            side,
            frames: FrameDecoder::new(max_frame),
            settings_seen: false,
            last_goaway: None,
            max_push_id: None,
        }
    }

    /// Feed the stream's octets: (consumed, the next event); None when all was consumed.
    pub fn feed(&mut self, input: &[u8], fin: bool) -> Result<(usize, Option<ControlEvent>), H3Error> {
        // Owned, so that the decoder may be asked about the first frame.
        let decoded = self.frames.decode(input).map(|(at, frame)| {
            let frame = frame.map(|f| match f {
                Frame::Settings(s) => Control::Settings(s),
                Frame::GoAway(id) => Control::GoAway(id),
                Frame::MaxPushId(id) => Control::MaxPushId(id),
                Frame::CancelPush(_) => Control::CancelPush,
                Frame::Data(_) | Frame::Headers(_) | Frame::PushPromise { .. } => Control::Message,
            });
            (at, frame)
        });
        // Checked before the decoder's own error: one call may have read past the first frame
        // into a later, broken one, and the verdict must not depend on how the input was cut.
        if self.frames.first_type().is_some_and(|t| t != SETTINGS) {
            return Err(H3Error::Connection(
                ErrorCode::H3_MISSING_SETTINGS,
                "the control stream's first frame is not SETTINGS",
            ));
        }
        let (at, frame) = decoded.map_err(H3Error::on_critical_stream)?;
        let Some(frame) = frame else {
            if fin {
                return Err(H3Error::Connection(ErrorCode::H3_CLOSED_CRITICAL_STREAM, "the control stream ended"));
            }
            return Ok((at, None));
        };
        let id_error = |reason| H3Error::Connection(ErrorCode::H3_ID_ERROR, reason);
        let event = match frame {
            Control::Settings(s) if !self.settings_seen => {
                self.settings_seen = true;
                ControlEvent::Settings(s)
            }
            Control::Settings(_) => return Err(H3Error::unexpected("a second SETTINGS")),
            Control::GoAway(id) => {
                if self.side == Side::Client && id % 4 != 0 {
                    return Err(id_error("a GOAWAY id that is not a client bidi stream"));
                }
                if self.last_goaway.is_some_and(|last| id > last) {
                    return Err(id_error("a GOAWAY id above the previous one"));
                }
                self.last_goaway = Some(id);
                ControlEvent::GoAway(id)
            }
            Control::MaxPushId(_) if self.side == Side::Client => {
                return Err(H3Error::unexpected("MAX_PUSH_ID from a server"))
            }
            Control::MaxPushId(id) => {
                if self.max_push_id.is_some_and(|max| id < max) {
                    return Err(id_error("a MAX_PUSH_ID below the previous one"));
                }
                self.max_push_id = Some(id);
                ControlEvent::MaxPushId(id)
            }
            // This side never pushes and never allows a push: no push id is known.
            Control::CancelPush => return Err(id_error("CANCEL_PUSH of a push never promised")),
            Control::Message => return Err(H3Error::unexpected("DATA, HEADERS or PUSH_PROMISE on the control stream")),
        };
        Ok((at, Some(event)))
    }
}

/// A request's head, decoded and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Every field, pseudo-fields first.
    pub fields: HeaderList,
    pub content_length: Option<u64>,
    /// An extended CONNECT (RFC 9220): `:protocol` with `:method CONNECT`.
    pub extended_connect: bool,
}

impl Request {
    pub fn method(&self) -> &[u8] {
        self.fields.get(b":method").unwrap_or_default()
    }

    pub fn scheme(&self) -> Option<&[u8]> {
        self.fields.get(b":scheme")
    }

    /// `:path`; empty for CONNECT.
    pub fn path(&self) -> &[u8] {
        self.fields.get(b":path").unwrap_or_default()
    }

    /// `:authority`, else `host`.
    pub fn authority(&self) -> Option<&[u8]> {
        self.fields.get(b":authority").or_else(|| self.fields.get(b"host"))
    }

    pub fn protocol(&self) -> Option<&[u8]> {
        self.fields.get(b":protocol")
    }

    /// The first field named `name` (lower case).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields.get(name)
    }
}

/// What a request stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestEvent<'a> {
    Head(Request),
    /// Body octets, a slice of the input.
    Body(&'a [u8]),
    Trailers(HeaderList),
    /// The stream ended (FIN) after a whole request.
    End,
}

/// Where a message is in §4.1's order: HEADERS, DATA*, optional trailing HEADERS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Body,
    Trailers,
    Ended,
}

/// What request and response streams share: the frame order, FIN, and the body's length.
#[derive(Debug)]
struct Message {
    frames: FrameDecoder,
    phase: Phase,
    max_field_section_size: usize,
    content_length: Option<u64>,
    body: u64,
}

/// What a message's frames come to, before role-specific checks.
enum Step<'a> {
    More,
    Head(HeaderList),
    Body(&'a [u8]),
    Trailers(HeaderList),
    End,
    PushPromise,
}

fn decode_fields(block: &[u8], max: usize) -> Result<HeaderList, H3Error> {
    let mut list = HeaderList::for_block(max, block.len());
    decode_field_section(block, &mut list).map_err(|e| e.to_h3())?;
    Ok(list)
}

fn malformed(m: Malformed) -> H3Error {
    // The reasons are h2's `Malformed` texts; their Display is static per variant.
    H3Error::message(match m {
        Malformed::BadPseudo => "an unknown, repeated or misplaced pseudo-field",
        Malformed::PseudoAfterRegular => "a pseudo-field after a regular field",
        Malformed::MissingPseudo => "a required pseudo-field is missing or empty",
        Malformed::BadName => "a field name with upper case or characters outside a token",
        Malformed::BadValue => "a field value with NUL, CR, LF or surrounding whitespace",
        Malformed::ConnectionSpecific => "a connection-specific field",
        Malformed::BadTe => "TE other than \"trailers\"",
        Malformed::BadContentLength => "a content-length that is not one number",
        Malformed::LengthMismatch => "the body's length differs from content-length",
        Malformed::PseudoInTrailers => "pseudo-fields in trailers",
        Malformed::BadProtocol => "a :protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL, or not on CONNECT",
        Malformed::MissingAuthority => "neither :authority nor host, or one of them empty",
        Malformed::AuthorityMismatch => ":authority and host differ",
        Malformed::TrailersWithoutEnd | Malformed::HeadersOnTunnel => "a malformed message",
    })
}

impl Message {
    fn new(max_field_section_size: usize) -> Self {
        // An encoded section is at most its decoded size (32 per field covers every prefix)
        // plus its 2-octet prefix, unless Huffman makes it longer, which no encoder that codes
        // only when shorter does.
        let max_block = max_field_section_size.saturating_add(16);
        Message {
            frames: FrameDecoder::new(max_block),
            phase: Phase::Head,
            max_field_section_size,
            content_length: None,
            body: 0,
        }
    }

    fn step<'a>(&mut self, input: &'a [u8], fin: bool, at: &mut usize) -> Result<Step<'a>, H3Error> {
        loop {
            let (n, frame) = self.frames.decode(&input[*at..])?;
            *at += n;
            let Some(frame) = frame else {
                if !fin || self.phase == Phase::Ended {
                    return Ok(Step::More);
                }
                if !self.frames.is_between_frames() {
                    return Err(H3Error::frame("the stream ends inside a frame"));
                }
                if self.phase == Phase::Head {
                    return Err(H3Error::Stream(
                        ErrorCode::H3_REQUEST_INCOMPLETE,
                        "the stream ends before its HEADERS",
                    ));
                }
                if self.content_length.is_some_and(|n| n != self.body) {
                    return Err(H3Error::message("the body's length differs from content-length"));
                }
                self.phase = Phase::Ended;
                return Ok(Step::End);
            };
            match (frame, self.phase) {
                (Frame::Data(s), Phase::Body) => {
                    self.body += s.len() as u64;
                    if self.content_length.is_some_and(|n| self.body > n) {
                        return Err(H3Error::message("more body than content-length"));
                    }
                    if s.is_empty() {
                        continue;
                    }
                    // The frame decoder's DATA is the last octets consumed: borrow them from
                    // `input` rather than from the decoder.
                    return Ok(Step::Body(&input[*at - s.len()..*at]));
                }
                (Frame::Data(_), Phase::Head) => return Err(H3Error::unexpected("DATA before HEADERS")),
                (Frame::Headers(block), Phase::Head) => {
                    let list = decode_fields(block, self.max_field_section_size)?;
                    return Ok(Step::Head(list));
                }
                (Frame::Headers(block), Phase::Body) => {
                    let list = decode_fields(block, self.max_field_section_size)?;
                    self.phase = Phase::Trailers;
                    check_trailers(&list).map_err(malformed)?;
                    return Ok(Step::Trailers(list));
                }
                (Frame::Data(_) | Frame::Headers(_), _) => {
                    return Err(H3Error::unexpected("a frame after the trailers or the end"))
                }
                (Frame::PushPromise { .. }, _) => return Ok(Step::PushPromise),
                (Frame::Settings(_) | Frame::GoAway(_) | Frame::MaxPushId(_) | Frame::CancelPush(_), _) => {
                    return Err(H3Error::unexpected("a control frame on a request stream"))
                }
            }
        }
    }
}

/// The server side of a client's bidirectional stream: one request.
#[derive(Debug)]
pub struct RequestStream {
    message: Message,
    extended_connect: bool,
}

impl RequestStream {
    /// `max_field_section_size`: the limit this server advertises (a larger head or trailers is
    /// the stream error H3_EXCESSIVE_LOAD, to be answered 431 or reset); `extended_connect`:
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL was sent, so `:protocol` may come (RFC 9220).
    pub fn new(max_field_section_size: usize, extended_connect: bool) -> Self {
        RequestStream { message: Message::new(max_field_section_size), extended_connect }
    }

    /// Feed the stream's octets (`fin`: they end it): (consumed, the next event); None when all
    /// was consumed and more is needed. Errors: DATA before HEADERS, a frame after trailers or a
    /// control frame is H3_FRAME_UNEXPECTED, a FIN inside a frame H3_FRAME_ERROR (connection
    /// errors); a malformed request or content-length that the body contradicts is
    /// H3_MESSAGE_ERROR, a FIN before HEADERS H3_REQUEST_INCOMPLETE (stream errors).
    pub fn feed<'a>(&mut self, input: &'a [u8], fin: bool) -> Result<(usize, Option<RequestEvent<'a>>), H3Error> {
        let mut at = 0;
        let event = match self.message.step(input, fin, &mut at)? {
            Step::More => None,
            Step::Head(fields) => {
                let rules = Rules { extended_connect: self.extended_connect, authority_required: true };
                let head = check_request_with(&fields, rules).map_err(malformed)?;
                self.message.phase = Phase::Body;
                self.message.content_length = head.content_length;
                Some(RequestEvent::Head(Request {
                    fields,
                    content_length: head.content_length,
                    extended_connect: head.extended_connect,
                }))
            }
            Step::Body(s) => Some(RequestEvent::Body(s)),
            Step::Trailers(list) => Some(RequestEvent::Trailers(list)),
            Step::End => Some(RequestEvent::End),
            Step::PushPromise => return Err(H3Error::unexpected("PUSH_PROMISE from a client")),
        };
        Ok((at, event))
    }

    /// True once the request ended (FIN read after a whole request).
    pub fn is_ended(&self) -> bool {
        self.message.phase == Phase::Ended
    }

    /// Octets the stream holds between calls.
    pub fn buffered(&self) -> usize {
        self.message.frames.buffered()
    }
}

/// A response's final head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Every field, `:status` first.
    pub fields: HeaderList,
    pub content_length: Option<u64>,
}

/// What a response stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseEvent<'a> {
    /// The final response's head (1xx interim responses are read and skipped).
    Head(Response),
    Body(&'a [u8]),
    Trailers(HeaderList),
    End,
}

/// The client side of a request's stream: the response.
#[derive(Debug)]
pub struct ResponseStream {
    message: Message,
    /// The request was HEAD: content-length describes a body not sent.
    head_request: bool,
}

fn parse_status(fields: &HeaderList) -> Result<(u16, Option<u64>), H3Error> {
    let mut status = None;
    let mut regular = false;
    let mut content_length = None;
    for (name, value) in fields.iter() {
        if name.starts_with(b":") {
            if regular || name != b":status" || status.is_some() {
                return Err(H3Error::message("a response pseudo-field other than one :status first"));
            }
            let code = match value {
                [a @ b'1'..=b'5', b, c] if b.is_ascii_digit() && c.is_ascii_digit() => {
                    u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
                }
                _ => return Err(H3Error::message("a :status that is not 100-599")),
            };
            status = Some(code);
            continue;
        }
        regular = true;
        check_regular(name, value).map_err(malformed)?;
        if name == b"content-length" {
            let n = parse_length(value).ok_or(H3Error::message("a content-length that is not one number"))?;
            if content_length.is_some_and(|m| m != n) {
                return Err(H3Error::message("content-lengths that differ"));
            }
            content_length = Some(n);
        }
    }
    let status = status.ok_or(H3Error::message("a response without :status"))?;
    Ok((status, content_length))
}

impl ResponseStream {
    /// `head_request`: the request was HEAD, so the body is empty whatever content-length says.
    pub fn new(max_field_section_size: usize, head_request: bool) -> Self {
        ResponseStream { message: Message::new(max_field_section_size), head_request }
    }

    /// Feed the stream's octets, as [`RequestStream::feed`]. A PUSH_PROMISE is H3_ID_ERROR
    /// (this client never sends MAX_PUSH_ID); `:status` 101 is H3_MESSAGE_ERROR (§4.5).
    pub fn feed<'a>(&mut self, input: &'a [u8], fin: bool) -> Result<(usize, Option<ResponseEvent<'a>>), H3Error> {
        let mut at = 0;
        loop {
            let event = match self.message.step(input, fin, &mut at)? {
                Step::More => None,
                Step::Head(fields) => {
                    let (status, content_length) = parse_status(&fields)?;
                    if status == 101 {
                        return Err(H3Error::message("101 Switching Protocols in HTTP/3"));
                    }
                    if status < 200 {
                        // An interim response: the final one follows.
                        continue;
                    }
                    self.message.phase = Phase::Body;
                    let bodiless = self.head_request || status == 204 || status == 304;
                    self.message.content_length = if bodiless { Some(0) } else { content_length };
                    Some(ResponseEvent::Head(Response { status, fields, content_length }))
                }
                Step::Body(s) => Some(ResponseEvent::Body(s)),
                Step::Trailers(list) => Some(ResponseEvent::Trailers(list)),
                Step::End => Some(ResponseEvent::End),
                Step::PushPromise => {
                    return Err(H3Error::Connection(ErrorCode::H3_ID_ERROR, "PUSH_PROMISE without MAX_PUSH_ID"))
                }
            };
            return Ok((at, event));
        }
    }

    pub fn is_ended(&self) -> bool {
        self.message.phase == Phase::Ended
    }
}
