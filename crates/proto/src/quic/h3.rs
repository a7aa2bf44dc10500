//! HTTP/3 (RFC 9114) on a QUIC connection, server side: the fixed response of `serve --proto
//! http` (the same body, `--body FILE` a chunk at a time, the same limits) on every request
//! stream. The frames and QPACK are crates/h3's; this file moves bytes between quinn-proto's
//! streams and its readers, and decides what HTTP/3 asks of a server: the control stream and
//! its SETTINGS (no dynamic QPACK table, so no encoder or decoder stream is opened), the
//! peer's critical streams checked, a request answered once it has ended, a malformed one reset,
//! the drain's GOAWAY, and a connection error closing the connection with its code.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use quinn_proto::{Connection, Dir, Event, ReadError, StreamEvent, StreamId, VarInt};
use sockscale_h3::{
    encode_field_section, put_data_frame_header, put_goaway, put_headers_frame, stream_type, ControlEvent,
    ControlStream, DecoderStreamReader, EncoderStreamReader, ErrorCode, H3Error, RequestEvent, RequestStream, Settings,
    Side, UniStreamKind, UniStreamType,
};

use super::endpoint::Apps;
use super::totals::QuicTotals;
use crate::h2::FILE_CHUNK;
use crate::http::{http_date, FileChunks, HttpConfig, ResponseBody};

/// Bytes of a response queued on one stream beyond what quinn-proto took, at most: one body
/// chunk. A stream the peer does not read holds no more than this here (quinn-proto's own
/// send buffer is bounded by the connection's send window).
const HELD_PER_STREAM: usize = FILE_CHUNK;

/// What every HTTP/3 connection on one endpoint (one socket, one thread) shares.
pub struct H3Apps {
    http: Arc<HttpConfig>,
    totals: Arc<QuicTotals>,
    /// Wall-clock time at `base` (the `date` field); the endpoint is given only `Instant`s.
    base: Instant,
    base_unix: u64,
    rendered: Rendered,
    /// The control stream's opening: its type and our SETTINGS.
    control_opening: Bytes,
}

/// The 200 response's HEADERS frame (with the body's DATA frame header after it, for a body in
/// memory) for the current second, and the HEADERS frame alone for HEAD.
struct Rendered {
    second: u64,
    full: Bytes,
    head_only: Bytes,
}

impl H3Apps {
    pub fn new(http: Arc<HttpConfig>, totals: Arc<QuicTotals>, now: Instant, wall: SystemTime) -> Self {
        let base_unix = crate::http::unix_secs(wall);
        let rendered = render(&http, base_unix);
        let settings = Settings {
            qpack_max_table_capacity: 0,
            qpack_blocked_streams: 0,
            max_field_section_size: Some(http.max_header_bytes as u64),
            ..Settings::default()
        };
        let mut opening = Vec::new();
        sockscale_h3::varint::encode(stream_type::CONTROL, &mut opening);
        settings.encode_frame(&mut opening);
        H3Apps { http, totals, base: now, base_unix, rendered, control_opening: opening.into() }
    }

    fn rendered(&mut self, now: Instant) -> &Rendered {
        let second = self.base_unix + now.saturating_duration_since(self.base).as_secs();
        if second != self.rendered.second {
            self.rendered = render(&self.http, second);
        }
        &self.rendered
    }
}

fn render(http: &HttpConfig, second: u64) -> Rendered {
    let date = http_date(second);
    let length = http.body.len().to_string();
    let fields: [(&[u8], &[u8]); 5] = [
        (b":status", b"200"),
        (b"server", http.server.as_bytes()),
        (b"date", date.as_bytes()),
        (b"content-type", http.content_type.as_bytes()),
        (b"content-length", length.as_bytes()),
    ];
    let mut block = Vec::new();
    encode_field_section(fields, &mut block);
    let mut head_only = Vec::new();
    put_headers_frame(&block, &mut head_only);
    let mut full = head_only.clone();
    if let ResponseBody::Bytes(body) = &http.body {
        if !body.is_empty() {
            put_data_frame_header(body.len() as u64, &mut full);
            full.extend_from_slice(body);
        }
    }
    Rendered { second, full: full.into(), head_only: head_only.into() }
}

/// A small error response (413), rendered when needed.
fn error_response(status: u16, date: &str, out: &mut Vec<u8>) {
    let status_text = status.to_string();
    let body = format!("{status}\n");
    let length = body.len().to_string();
    let fields: [(&[u8], &[u8]); 4] = [
        (b":status", status_text.as_bytes()),
        (b"date", date.as_bytes()),
        (b"content-type", b"text/plain"),
        (b"content-length", length.as_bytes()),
    ];
    let mut block = Vec::new();
    encode_field_section(fields, &mut block);
    put_headers_frame(&block, out);
    put_data_frame_header(body.len() as u64, out);
    out.extend_from_slice(body.as_bytes());
}

/// One request stream.
enum Request {
    /// Reading the request; answered when it ends.
    Reading { reader: RequestStream, head: bool, body: u64 },
    /// Writing the response: `queued` waits for quinn-proto to take it; a body file goes on
    /// from `file_at` (None: nothing more to read).
    Writing { queued: VecDeque<Bytes>, file_at: Option<u64> },
    /// All of it is with quinn-proto; waiting for the peer to acknowledge it (`Finished`).
    Sent,
}

/// A peer's unidirectional stream.
enum Uni {
    /// Its type not yet read.
    Typeless(UniStreamType),
    Control(ControlStream),
    Encoder(EncoderStreamReader),
    Decoder(DecoderStreamReader),
    /// A type we do not use (a push stream is an error; grease is ignored): read and dropped.
    Ignored,
}

/// One HTTP/3 connection's state.
pub struct H3Conn {
    control: Option<StreamId>,
    requests: Vec<(StreamId, Request)>,
    unis: Vec<(StreamId, Uni)>,
    /// Which peer critical streams were seen (control, encoder, decoder): a second is an error.
    seen: [bool; 3],
    /// The highest request stream id accepted, for the GOAWAY.
    last_request: Option<StreamId>,
    /// The GOAWAY's id, once sent: requests from it on are refused.
    goaway: Option<u64>,
    /// The client sent a GOAWAY: it is going away.
    peer_goaway: bool,
    closed: bool,
}

impl Apps for H3Apps {
    type App = H3Conn;

    fn start(&mut self, conn: &mut Connection, _now: Instant) -> H3Conn {
        let mut h3 = H3Conn {
            control: None,
            requests: Vec::new(),
            unis: Vec::new(),
            seen: [false; 3],
            last_request: None,
            goaway: None,
            peer_goaway: false,
            closed: false,
        };
        h3.open_control(conn, &self.control_opening);
        h3
    }

    fn event(&mut self, h3: &mut H3Conn, conn: &mut Connection, event: Event, now: Instant) {
        if h3.closed {
            return;
        }
        // Our control stream and its SETTINGS go out as soon as the client's transport
        // parameters allow a uni stream: at the accept if they are known then, else at the
        // first event after (clients such as the `h3` crate wait for them before any request).
        if h3.control.is_none() {
            h3.open_control(conn, &self.control_opening);
        }
        let result = match event {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                let mut r = Ok(());
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    r = r.and(h3.new_request(self, conn, id, now));
                }
                r
            }
            Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                let mut r = Ok(());
                while let Some(id) = conn.streams().accept(Dir::Uni) {
                    h3.unis.push((id, Uni::Typeless(UniStreamType::default())));
                    r = r.and(h3.read_uni(conn, id));
                }
                r
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                if id.dir() == Dir::Uni {
                    h3.read_uni(conn, id)
                } else {
                    h3.read_request(self, conn, id, now)
                }
            }
            Event::Stream(StreamEvent::Writable { id }) => {
                h3.write(self, conn, id);
                Ok(())
            }
            Event::Stream(StreamEvent::Finished { id }) => {
                h3.requests.retain(|(s, _)| *s != id);
                Ok(())
            }
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                // The peer wants no more of this response: quinn-proto resets the stream.
                if h3.requests.iter().any(|(s, _)| *s == id) {
                    self.totals.stream_reset();
                    let _ = conn.send_stream(id).reset(ErrorCode::H3_REQUEST_CANCELLED.into_varint());
                    h3.requests.retain(|(s, _)| *s != id);
                }
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            h3.fail(self, conn, e, now);
        }
        h3.close_if_drained(conn, now);
    }

    fn begin_drain(&mut self, h3: &mut H3Conn, conn: &mut Connection, now: Instant) {
        // Requests up to the last one accepted are answered; from the next on, refused.
        let id = h3.last_request.map_or(0, |s| u64::from(VarInt::from(s)) + 4);
        h3.goaway = Some(id);
        if let Some(control) = h3.control {
            let mut frame = Vec::new();
            put_goaway(id, &mut frame);
            let _ = conn.send_stream(control).write(&frame);
        }
        h3.close_if_drained(conn, now);
    }
}

trait IntoVarInt {
    fn into_varint(self) -> VarInt;
}

impl IntoVarInt for ErrorCode {
    fn into_varint(self) -> VarInt {
        VarInt::from_u64(self.code()).unwrap_or(VarInt::from_u32(0x102))
    }
}

impl H3Conn {
    fn open_control(&mut self, conn: &mut Connection, opening: &Bytes) {
        if let Some(id) = conn.streams().open(Dir::Uni) {
            // The stream's credit is fresh: its few bytes always fit.
            let _ = conn.send_stream(id).write_chunks(&mut [opening.clone()]);
            self.control = Some(id);
        }
    }

    /// A connection error: close with its code (and count it).
    fn fail(&mut self, apps: &H3Apps, conn: &mut Connection, e: H3Error, now: Instant) {
        let code = e.code();
        if e.is_connection() {
            apps.totals.connection_error();
            conn.close(now, code.into_varint(), Bytes::from_static(e.reason().as_bytes()));
            self.closed = true;
        }
    }

    fn close_if_drained(&mut self, conn: &mut Connection, now: Instant) {
        if (self.goaway.is_some() || self.peer_goaway) && self.requests.is_empty() && !self.closed {
            conn.close(now, ErrorCode::H3_NO_ERROR.into_varint(), Bytes::new());
            self.closed = true;
        }
    }

    fn new_request(
        &mut self,
        apps: &mut H3Apps,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
    ) -> Result<(), H3Error> {
        if let Some(goaway) = self.goaway {
            if u64::from(VarInt::from(id)) >= goaway {
                // After our GOAWAY: refused, and the client may retry it elsewhere (§5.2).
                abort_stream(conn, id, ErrorCode::H3_REQUEST_REJECTED);
                return Ok(());
            }
        }
        self.last_request = Some(self.last_request.map_or(id, |l| l.max(id)));
        let max = apps.http.max_header_bytes;
        self.requests.push((id, Request::Reading { reader: RequestStream::new(max, false), head: false, body: 0 }));
        self.read_request(apps, conn, id, now)
    }

    fn read_request(
        &mut self,
        apps: &mut H3Apps,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
    ) -> Result<(), H3Error> {
        let Some(at) = self.requests.iter().position(|(s, _)| *s == id) else { return Ok(()) };
        let Request::Reading { reader, head, body } = &mut self.requests[at].1 else {
            // Bytes after the request ended (it cannot: the reader rejects them) or after we
            // answered early: read and dropped.
            discard(conn, id);
            return Ok(());
        };
        let max_body = apps.http.max_body_bytes;
        let mut ended = false;
        let mut too_large = false;
        let mut stream_error = None;
        let mut reset = false;
        let mut recv = conn.recv_stream(id);
        let mut chunks = match recv.read(true) {
            Ok(c) => c,
            Err(_) => return Ok(()),
        };
        loop {
            let (data, fin) = match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => (chunk.bytes, false),
                Ok(None) => (Bytes::new(), true),
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(_)) => {
                    reset = true;
                    break;
                }
            };
            let r = feed_request(reader, &data, fin, |ev| match ev {
                RequestEvent::Head(request) => *head = request.method() == b"HEAD",
                RequestEvent::Body(data) => {
                    *body += data.len() as u64;
                    too_large |= *body > max_body;
                }
                RequestEvent::Trailers(_) => {}
                RequestEvent::End => ended = true,
            });
            match r {
                Ok(()) => {}
                Err(e) if e.is_connection() => {
                    let _ = chunks.finalize();
                    return Err(e);
                }
                Err(e) => {
                    stream_error = Some(e);
                    break;
                }
            }
            if too_large || fin {
                break;
            }
        }
        let _ = chunks.finalize();
        let head_only = *head;
        if reset {
            apps.totals.stream_reset();
            let _ = conn.send_stream(id).reset(ErrorCode::H3_REQUEST_CANCELLED.into_varint());
            self.requests.remove(at);
            return Ok(());
        }
        if let Some(e) = stream_error {
            apps.totals.stream_error();
            abort_stream(conn, id, e.code());
            self.requests.remove(at);
            return Ok(());
        }
        if too_large {
            // Answered before the rest of the body: the client is asked to stop sending
            // (H3_NO_ERROR, RFC 9114 §4.1.1).
            apps.totals.body_too_large();
            let _ = conn.recv_stream(id).stop(ErrorCode::H3_NO_ERROR.into_varint());
            let date = http_date(apps.rendered(now).second);
            let mut out = Vec::new();
            error_response(413, &date, &mut out);
            self.requests[at].1 = Request::Writing { queued: VecDeque::from([Bytes::from(out)]), file_at: None };
            self.write(apps, conn, id);
            return Ok(());
        }
        if ended {
            apps.totals.request();
            let (full, head) = {
                let rendered = apps.rendered(now);
                (rendered.full.clone(), rendered.head_only.clone())
            };
            let (first, file_at) = match (&apps.http.body, &apps.http.file_chunks) {
                _ if head_only => (head, None),
                (ResponseBody::File { len }, Some(_)) if *len > 0 => {
                    let mut head = head.to_vec();
                    put_data_frame_header(*len, &mut head);
                    (Bytes::from(head), Some(0))
                }
                // A file with nothing to read it with (a library user's config): the head.
                (ResponseBody::File { .. }, _) => (head, None),
                (ResponseBody::Bytes(_), _) => (full, None),
            };
            self.requests[at].1 = Request::Writing { queued: VecDeque::from([first]), file_at };
            self.write(apps, conn, id);
        }
        Ok(())
    }

    /// Give quinn-proto what it takes of the response, reading the body file a chunk at a time
    /// as it is taken; finish the stream once all of it was taken.
    fn write(&mut self, apps: &H3Apps, conn: &mut Connection, id: StreamId) {
        let Some(at) = self.requests.iter().position(|(s, _)| *s == id) else { return };
        let Request::Writing { queued, file_at } = &mut self.requests[at].1 else { return };
        let mut send = conn.send_stream(id);
        loop {
            while let Some(front) = queued.front_mut() {
                match send.write_chunks(std::slice::from_mut(front)) {
                    Ok(w) if w.chunks == 1 => {
                        queued.pop_front();
                    }
                    // Part of it taken (the chunk advanced): write again, until quinn-proto says
                    // Blocked; only then is the stream marked to be woken (`Writable`) when the
                    // peer gives credit.
                    Ok(_) => {}
                    Err(quinn_proto::WriteError::Blocked) => return,
                    Err(_) => {
                        // Stopped or closed: nothing more to send.
                        self.requests.remove(at);
                        return;
                    }
                }
            }
            let (Some(offset), ResponseBody::File { len }, Some(file)) =
                (*file_at, &apps.http.body, &apps.http.file_chunks)
            else {
                break;
            };
            if offset >= *len {
                *file_at = None;
                continue;
            }
            match read_file_chunk(file.as_ref(), offset, *len) {
                Some(chunk) => {
                    *file_at = Some(offset + chunk.len() as u64);
                    queued.push_back(chunk);
                }
                None => {
                    // The file shrank or cannot be read: the response cannot be finished.
                    let _ = send.reset(ErrorCode::H3_INTERNAL_ERROR.into_varint());
                    self.requests.remove(at);
                    return;
                }
            }
        }
        let _ = send.finish();
        self.requests[at].1 = Request::Sent;
    }

    fn read_uni(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), H3Error> {
        let Some(at) = self.unis.iter().position(|(s, _)| *s == id) else { return Ok(()) };
        let mut recv = conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return Ok(()) };
        let mut result = Ok(());
        let mut stop = None;
        loop {
            let (data, fin) = match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => (chunk.bytes, false),
                Ok(None) => (Bytes::new(), true),
                Err(ReadError::Blocked) => break,
                // A critical stream reset is as its end: an error below.
                Err(ReadError::Reset(_)) => (Bytes::new(), true),
            };
            let mut input: &[u8] = &data;
            let state = &mut self.unis[at].1;
            if let Uni::Typeless(ty) = state {
                let (used, kind) = ty.feed(input);
                input = &input[used..];
                let Some(kind) = kind else {
                    if fin {
                        break;
                    }
                    continue;
                };
                let critical = match kind {
                    UniStreamKind::Control => Some(0),
                    UniStreamKind::QpackEncoder => Some(1),
                    UniStreamKind::QpackDecoder => Some(2),
                    _ => None,
                };
                if let Some(i) = critical {
                    if std::mem::replace(&mut self.seen[i], true) {
                        result =
                            Err(H3Error::Connection(ErrorCode::H3_STREAM_CREATION_ERROR, "a second critical stream"));
                        break;
                    }
                }
                *state = match kind {
                    UniStreamKind::Control => Uni::Control(ControlStream::new(Side::Server, CONTROL_FRAME_MAX)),
                    UniStreamKind::QpackEncoder => Uni::Encoder(EncoderStreamReader),
                    UniStreamKind::QpackDecoder => Uni::Decoder(DecoderStreamReader::default()),
                    UniStreamKind::Push => {
                        result = Err(H3Error::Connection(
                            ErrorCode::H3_STREAM_CREATION_ERROR,
                            "a push stream from a client",
                        ));
                        break;
                    }
                    UniStreamKind::Unknown(_) => {
                        // RFC 9114 §6.2.3: unknown types are ignored, and may be stopped.
                        stop = Some(ErrorCode::H3_STREAM_CREATION_ERROR);
                        Uni::Ignored
                    }
                };
                if stop.is_some() {
                    break;
                }
            }
            result = match feed_uni(&mut self.unis[at].1, input, fin) {
                Ok(goaway) => {
                    // The client is going away (RFC 9114 §5.2): once its requests are
                    // answered, the server closes (clients such as the `h3` crate wait for it).
                    self.peer_goaway |= goaway;
                    Ok(())
                }
                Err(e) => Err(e),
            };
            if result.is_err() || fin {
                break;
            }
        }
        let _ = chunks.finalize();
        if let Some(code) = stop {
            let _ = conn.recv_stream(id).stop(code.into_varint());
            self.unis.remove(at);
        }
        result
    }
}

/// The most a frame on the peer's control stream may take (its SETTINGS): a few settings are a
/// few dozen bytes.
const CONTROL_FRAME_MAX: usize = 4096;

/// Feed a request stream's octets, handing each event to `on`.
fn feed_request(
    reader: &mut RequestStream,
    input: &[u8],
    fin: bool,
    mut on: impl FnMut(RequestEvent<'_>),
) -> Result<(), H3Error> {
    let mut at = 0;
    loop {
        let (used, event) = reader.feed(&input[at..], fin)?;
        at += used;
        match event {
            Some(RequestEvent::End) => {
                on(RequestEvent::End);
                return Ok(());
            }
            Some(event) => on(event),
            None if at >= input.len() => return Ok(()),
            None => {}
        }
    }
}

/// Feed a peer's uni stream; returns whether its control stream carried a GOAWAY.
fn feed_uni(state: &mut Uni, input: &[u8], fin: bool) -> Result<bool, H3Error> {
    match state {
        Uni::Control(control) => {
            let mut at = 0;
            let mut goaway = false;
            loop {
                // Our encoder uses no dynamic table and our fields are short: nothing in the
                // peer's SETTINGS or MAX_PUSH_ID changes what we send.
                let (used, event) = control.feed(&input[at..], fin)?;
                at += used;
                goaway |= matches!(event, Some(ControlEvent::GoAway(_)));
                if event.is_none() && at >= input.len() {
                    return Ok(goaway);
                }
            }
        }
        Uni::Encoder(reader) => reader.feed(input, fin).map(|()| false),
        Uni::Decoder(reader) => reader.feed(input, fin).map(|()| false),
        Uni::Typeless(_) | Uni::Ignored => Ok(false),
    }
}

/// End a request stream both ways with `code`: STOP_SENDING and RESET_STREAM.
fn abort_stream(conn: &mut Connection, id: StreamId, code: ErrorCode) {
    let code = code.into_varint();
    let _ = conn.recv_stream(id).stop(code);
    let _ = conn.send_stream(id).reset(code);
}

/// Read and drop what a stream has.
fn discard(conn: &mut Connection, id: StreamId) {
    let mut recv = conn.recv_stream(id);
    let read = recv.read(true);
    if let Ok(mut chunks) = read {
        while let Ok(Some(_)) = chunks.next(usize::MAX) {}
        let _ = chunks.finalize();
    }
}

/// The body file's next chunk from `at`, at most [`HELD_PER_STREAM`]; None if it cannot be
/// read whole to `len` (it shrank).
fn read_file_chunk(file: &dyn FileChunks, at: u64, len: u64) -> Option<Bytes> {
    let want = usize::try_from(len - at).unwrap_or(usize::MAX).min(HELD_PER_STREAM);
    match file.read_chunk(at, want) {
        Ok(chunk) if !chunk.is_empty() => Some(chunk),
        _ => None,
    }
}
