//! The client side of the stage: what `sockscale load http --http2` speaks (RFC 9113), with no
//! I/O, as the server side. Fed the bytes a socket received, it appends the frames to send
//! (SETTINGS and PING acknowledgements, WINDOW_UPDATEs, request bodies as windows allow) to the
//! caller's buffer and reports, through a callback, each stream's end: a response, a reset, a
//! refusal by GOAWAY or a malformed response.
//!
//! ```text
//! conn = ClientConnection::new(settings, &mut out)          // preface, SETTINGS, WINDOW_UPDATE
//! while conn.can_open():  conn.open(&request, tag, &mut out)  // HEADERS (+ DATA as windows allow)
//! on input:   conn.receive(bytes, &mut out, |event| ...)?     // Err: a connection error; close
//! ```
//!
//! A stream may also be a tunnel (RFC 8441, WebSocket over HTTP/2): an extended CONNECT
//! ([`encode_connect`], [`ClientConnection::open_tunnel`]), sent only once the server's SETTINGS
//! carried SETTINGS_ENABLE_CONNECT_PROTOCOL = 1; after its `:status` 200 the stream carries
//! bytes both ways: [`ClientConnection::tunnel_send`] frames them as DATA as the stream's and the
//! connection's windows allow (holding the rest), received DATA goes to
//! [`ClientSink::tunnel_data`] and its window is given back as it is handed on, and
//! [`ClientConnection::tunnel_end`] sends END_STREAM after what is held.
//!
//! A request's header block is encoded once ([`encode_request`], [`encode_request_indexed`]) and
//! framed for every stream: literals valid anywhere, or the fields added to the server's
//! dynamic table by a connection's first stream and named by index on every later one. Streams are numbered in the order they open and kept in a ring indexed by their
//! number, so finding one is an index, and the oldest still open is the ring's front.
//!
//! Memory: a frame received in part and a header block in progress are the only buffers, each
//! given back when it empties; the HPACK table the server fills is bounded by
//! SETTINGS_HEADER_TABLE_SIZE, and a response's header block by SETTINGS_MAX_HEADER_LIST_SIZE.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::frame::{self, flag, kind, setting, ErrorCode, Head, PREFACE};
use crate::hpack::{put_integer, put_string, Decoder, HeaderList, HpackError, STATIC};
use crate::rules::{self, FrameReader, PeerSettings, ReceiveWindow, RecentResets, Setting, Settings, Violation};

/// The largest stream identifier (2^31 - 1).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// What this client advertises and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSettings {
    /// SETTINGS_INITIAL_WINDOW_SIZE: what the server may send on a stream before this client
    /// gives the window back.
    pub stream_window: u32,
    /// The connection's receive window, raised from 65,535 by a WINDOW_UPDATE at once.
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame the server may send.
    pub max_frame: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK table the server's encoder may fill here.
    pub header_table: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a response head larger than this is a connection error
    /// (it cannot be skipped without losing the HPACK table's state).
    pub max_header_list: u32,
}

impl Default for ClientSettings {
    /// h2load's defaults for the windows (2^30 - 1 each: a response is never held up by this
    /// client), the protocol's for the rest.
    fn default() -> Self {
        ClientSettings {
            stream_window: (1 << 30) - 1,
            connection_window: (1 << 30) - 1,
            max_frame: frame::MIN_MAX_FRAME,
            header_table: 4096,
            max_header_list: 64 << 10,
        }
    }
}

/// A connection error: this client sent GOAWAY with `code` (appended to the output) and the
/// connection is over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("the server answered in HTTP/1.x: it does not speak HTTP/2 with prior knowledge (h2c)")]
    NotHttp2,
    /// The server broke a rule of RFC 9113: GOAWAY with [`Violation::code`].
    #[error("{0} ({code:?})", code = .0.code())]
    Protocol(#[from] Violation),
    #[error("a response's header block did not decode: {0}")]
    Compression(HpackError),
}

/// How a stream ended, with the tag it was opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEvent {
    /// A whole response: its final status and the DATA octets of its body (padding not
    /// counted).
    Response { tag: u64, status: u16, body_len: u64 },
    /// The server reset the stream (RST_STREAM) before its response ended.
    Reset { tag: u64, code: u32 },
    /// Above a GOAWAY's last stream identifier: the server did not and will not process it.
    Refused { tag: u64 },
    /// The response broke the protocol on its stream (no `:status`, DATA before HEADERS, a
    /// body that contradicts its Content-Length, DATA past the stream's window, a stream
    /// WINDOW_UPDATE of 0 or past 2^31-1, a bad PRIORITY): this client reset the stream.
    Malformed { tag: u64 },
    /// The server sent GOAWAY: no stream opens after this one.
    GoAway { last_stream: u32, code: u32 },
    /// A tunnel's stream ended on the server's side (END_STREAM after its 200): no more bytes
    /// come on it.
    TunnelEnd { tag: u64 },
}

/// Where [`ClientConnection::receive_into`] tells what it received: the events, and a tunnel's
/// head and bytes (borrowed from the input: handed on as they come, never queued).
pub trait ClientSink {
    fn event(&mut self, event: ClientEvent);
    /// A tunnel's `:status` 200 came (its fields in `head`): the stream carries bytes now.
    fn tunnel_open(&mut self, _tag: u64, _head: &HeaderList) {}
    /// Bytes received on an open tunnel (a DATA frame's content, padding removed).
    fn tunnel_data(&mut self, _tag: u64, _data: &[u8]) {}
}

/// A closure that takes the events as a sink (it has no tunnel).
struct Events<'f, F>(&'f mut F);

impl<F: FnMut(ClientEvent)> ClientSink for Events<'_, F> {
    fn event(&mut self, event: ClientEvent) {
        (self.0)(event)
    }
}

/// One request as every stream sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The HPACK header block, from [`encode_request`]: literals only, valid on any stream.
    pub block: Bytes,
    /// The same fields through the server's dynamic table, from [`encode_request_indexed`]:
    /// used when the table the server allows can hold them.
    pub indexed: Option<Indexed>,
    pub body: Bytes,
    /// A HEAD request: its response has no body whatever its Content-Length says.
    pub head: bool,
}

/// A request's header block through the dynamic table, as a client that repeats one request
/// sends it (h2load does the same): the first stream of a connection adds the fields the static
/// table lacks ("literal with incremental indexing"); every later stream names them by index, a
/// byte each. The server's decoder then does a table lookup instead of copying strings, and the
/// request is a few octets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexed {
    pub first: Bytes,
    pub rest: Bytes,
    /// What the added entries take in the table (RFC 7541 §4.1: octets plus 32 each).
    pub table_bytes: usize,
}

/// Encode a request's header block: the pseudo-fields, then `fields` (names lower-cased here;
/// connection-specific fields are the caller's to refuse). Names and `:method`/`:scheme`/`:path`
/// values the static table has are indexed; everything else is a literal without indexing.
pub fn encode_request(method: &str, scheme: &str, authority: &str, path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |name: &[u8], value: &[u8]| {
        if let Some(i) = STATIC.iter().position(|(n, v)| *n == name && *v == value && !v.is_empty()) {
            put_integer(&mut out, i + 1, 7, 0x80);
            return;
        }
        match STATIC.iter().position(|(n, _)| *n == name) {
            Some(i) => put_integer(&mut out, i + 1, 4, 0),
            None => {
                out.push(0);
                put_string(&mut out, name);
            }
        }
        put_string(&mut out, value);
    };
    field(b":method", method.as_bytes());
    field(b":scheme", scheme.as_bytes());
    field(b":authority", authority.as_bytes());
    field(b":path", path.as_bytes());
    for (name, value) in fields {
        field(name.to_ascii_lowercase().as_bytes(), value.as_bytes());
    }
    out
}

/// An extended CONNECT's header block (RFC 8441 §4): `:method CONNECT`, `:protocol`,
/// `:scheme`, `:path` and `:authority`, then `fields`.
pub fn encode_connect(protocol: &str, scheme: &str, authority: &str, path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut all = Vec::with_capacity(fields.len() + 1);
    all.push((":protocol", protocol));
    all.extend_from_slice(fields);
    encode_request("CONNECT", scheme, authority, path, &all)
}

/// [`encode_request`]'s fields as an [`Indexed`] pair of blocks.
pub fn encode_request_indexed(
    method: &str,
    scheme: &str,
    authority: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> Indexed {
    let mut all: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), method.as_bytes().to_vec()),
        (b":scheme".to_vec(), scheme.as_bytes().to_vec()),
        (b":authority".to_vec(), authority.as_bytes().to_vec()),
        (b":path".to_vec(), path.as_bytes().to_vec()),
    ];
    all.extend(fields.iter().map(|(n, v)| (n.to_ascii_lowercase().into_bytes(), v.as_bytes().to_vec())));
    let static_full =
        |name: &[u8], value: &[u8]| STATIC.iter().position(|(n, v)| *n == name && *v == value && !v.is_empty());
    // Entries are added in order; the newest has index 62, so the k-th of n added has 62 + n - 1 - k.
    let added: Vec<&(Vec<u8>, Vec<u8>)> = all.iter().filter(|(n, v)| static_full(n, v).is_none()).collect();
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    let mut k = 0;
    for (name, value) in &all {
        if let Some(i) = static_full(name, value) {
            put_integer(&mut first, i + 1, 7, 0x80);
            put_integer(&mut rest, i + 1, 7, 0x80);
            continue;
        }
        match STATIC.iter().position(|(n, _)| *n == name.as_slice()) {
            Some(i) => put_integer(&mut first, i + 1, 6, 0x40),
            None => {
                first.push(0x40);
                put_string(&mut first, name);
            }
        }
        put_string(&mut first, value);
        put_integer(&mut rest, 62 + added.len() - 1 - k, 7, 0x80);
        k += 1;
    }
    let table_bytes = added.iter().map(|(n, v)| n.len() + v.len() + crate::hpack::ENTRY_OVERHEAD).sum();
    Indexed { first: first.into(), rest: rest.into(), table_bytes }
}

#[derive(Debug)]
struct Stream {
    tag: u64,
    head: bool,
    /// The final status; 0 until the response's head.
    status: u16,
    /// Content-Length, when the response gave one.
    expect: Option<u64>,
    body: u64,
    /// What the server may still send on the stream.
    recv: ReceiveWindow,
    /// The request body not yet framed, and what the server lets this client send.
    send: Option<Bytes>,
    send_window: i64,
    /// An extended CONNECT's stream (boxed: most streams are requests).
    tunnel: Option<Box<Tunnel>>,
}

/// A tunnel's sending side, and which ends ended.
#[derive(Debug, Default)]
struct Tunnel {
    /// Bytes given to the stream that the windows did not let out yet.
    pending: Vec<u8>,
    /// END_STREAM goes once `pending` is framed.
    finish: bool,
    /// END_STREAM sent.
    local_ended: bool,
    /// The server's END_STREAM came.
    remote_ended: bool,
}

#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    /// Its HEADERS made the stream depend on itself: reset once the block is decoded.
    self_dependent: bool,
    bytes: Vec<u8>,
}

/// One client connection.
#[derive(Debug)]
pub struct ClientConnection {
    settings: ClientSettings,
    /// Cuts frames out of what is received; holds a frame received in part.
    reader: FrameReader,
    decoder: Decoder,
    list: HeaderList,
    block: Option<Block>,
    next_id: u32,
    /// The identifier of `streams[0]`.
    base: u32,
    streams: VecDeque<Option<Stream>>,
    open: usize,
    /// Streams with a request body not all framed yet.
    sending: usize,
    /// What the server's SETTINGS said.
    peer: PeerSettings,
    send_window: i64,
    recv: ReceiveWindow,
    seen_settings: bool,
    goaway: Option<u32>,
    /// Streams this client reset lately: the server's frames on them are ignored.
    reset_here: RecentResets,
    /// The request's entries are in the server's table (its first block was sent).
    indexed_sent: bool,
    /// The server changed its table size after this client used the table: the next block
    /// begins by emptying it (a size update to 0) and raising it again.
    table_resize: bool,
    /// Scratch for a block that begins with size updates.
    scratch: Vec<u8>,
    /// The server's SETTINGS_ENABLE_CONNECT_PROTOCOL was 1 (RFC 8441 §3).
    connect_protocol: bool,
    /// Tunnels open.
    tunnels: usize,
}

impl ClientConnection {
    /// A connection whose preface, SETTINGS and connection WINDOW_UPDATE are appended to `out`.
    pub fn new(settings: ClientSettings, out: &mut Vec<u8>) -> Self {
        out.extend_from_slice(PREFACE);
        let mut advertised = vec![(setting::ENABLE_PUSH, 0), (setting::INITIAL_WINDOW_SIZE, settings.stream_window)];
        if settings.max_frame != frame::MIN_MAX_FRAME {
            advertised.push((setting::MAX_FRAME_SIZE, settings.max_frame));
        }
        if settings.header_table != 4096 {
            advertised.push((setting::HEADER_TABLE_SIZE, settings.header_table));
        }
        advertised.push((setting::MAX_HEADER_LIST_SIZE, settings.max_header_list));
        frame::put_settings(out, &advertised);
        let initial = i64::from(frame::DEFAULT_WINDOW);
        let connection_window = i64::from(settings.connection_window).max(initial);
        if connection_window > initial {
            frame::put_window_update(out, 0, (connection_window - initial) as u32);
        }
        ClientConnection {
            settings,
            reader: FrameReader::default(),
            decoder: Decoder::new(settings.header_table as usize),
            list: HeaderList::with_limit(settings.max_header_list as usize),
            block: None,
            next_id: 1,
            base: 1,
            streams: VecDeque::new(),
            open: 0,
            sending: 0,
            // Until the server's SETTINGS say otherwise (RFC 9113 §6.5.2: streams initially
            // unlimited; the caller's depth bounds them).
            peer: PeerSettings::default(),
            send_window: initial,
            recv: ReceiveWindow::new(settings.connection_window.max(frame::DEFAULT_WINDOW)),
            seen_settings: false,
            goaway: None,
            reset_here: RecentResets::default(),
            indexed_sent: false,
            table_resize: false,
            scratch: Vec::new(),
            connect_protocol: false,
            tunnels: 0,
        }
    }

    /// The server's SETTINGS allowed extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL = 1).
    pub fn connect_protocol(&self) -> bool {
        self.seen_settings && self.connect_protocol
    }

    /// Open a tunnel (RFC 8441): HEADERS with the extended CONNECT `block` (from
    /// [`encode_connect`]), without END_STREAM. None, and nothing sent, unless a stream may
    /// open ([`Self::can_open`]) and the server's SETTINGS allowed extended CONNECT.
    pub fn open_tunnel(&mut self, block: &[u8], tag: u64, out: &mut Vec<u8>) -> Option<u32> {
        if !self.can_open() || !self.connect_protocol() {
            return None;
        }
        let request = Request { block: Bytes::copy_from_slice(block), indexed: None, body: Bytes::new(), head: false };
        let id = self.open_stream(&request, tag, false, out);
        if let Some(stream) = self.stream_mut(id) {
            stream.tunnel = Some(Box::default());
            self.tunnels += 1;
        }
        Some(id)
    }

    /// Bytes to carry on tunnel `id`: framed as DATA as far as the windows allow, the rest
    /// held until WINDOW_UPDATEs open them. False (nothing taken) if the tunnel is gone or its
    /// end was given.
    pub fn tunnel_send(&mut self, id: u32, data: &[u8], out: &mut Vec<u8>) -> bool {
        let Some(tunnel) = self.stream_mut(id).and_then(|s| s.tunnel.as_mut()) else { return false };
        if tunnel.finish {
            return false;
        }
        tunnel.pending.extend_from_slice(data);
        self.flush_tunnels(out);
        true
    }

    /// End tunnel `id` on this side: END_STREAM after the bytes it holds.
    pub fn tunnel_end(&mut self, id: u32, out: &mut Vec<u8>) {
        let Some(tunnel) = self.stream_mut(id).and_then(|s| s.tunnel.as_mut()) else { return };
        tunnel.finish = true;
        self.flush_tunnels(out);
    }

    /// Bytes tunnel `id` holds for want of window.
    pub fn tunnel_unsent(&self, id: u32) -> usize {
        let slot = if id < self.base || id % 2 == 0 {
            None
        } else {
            self.streams.get(((id - self.base) / 2) as usize).and_then(Option::as_ref)
        };
        slot.and_then(|s| s.tunnel.as_ref()).map_or(0, |t| t.pending.len())
    }

    /// Streams open: requests sent and not yet ended.
    pub fn open_streams(&self) -> usize {
        self.open
    }

    /// The tag of the oldest open stream.
    pub fn oldest(&self) -> Option<u64> {
        self.streams.front().and_then(Option::as_ref).map(|s| s.tag)
    }

    /// Whether one more stream may open now: the server's SETTINGS came (until then its stream
    /// limit is unknown, and a stream over it would be refused), under its
    /// SETTINGS_MAX_CONCURRENT_STREAMS, no GOAWAY received, identifiers left.
    pub fn can_open(&self) -> bool {
        self.seen_settings
            && self.goaway.is_none()
            && self.next_id <= MAX_STREAM_ID
            && self.peer.max_concurrent_streams.is_none_or(|max| self.open < max as usize)
    }

    /// No stream will ever open on this connection again (GOAWAY, or every identifier used):
    /// once the open ones end, it is done.
    pub fn exhausted(&self) -> bool {
        self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    /// The server's SETTINGS came: it speaks HTTP/2.
    pub fn greeted(&self) -> bool {
        self.seen_settings
    }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, once its SETTINGS came.
    pub fn peer_max_streams(&self) -> Option<u32> {
        self.peer.max_concurrent_streams.filter(|_| self.seen_settings)
    }

    /// Bytes held between calls (a frame in part, a header block in progress).
    pub fn buffered(&self) -> usize {
        self.reader.buffered() + self.block.as_ref().map_or(0, |b| b.bytes.capacity())
    }

    /// Open a stream for `request` (call only when [`Self::can_open`]): its HEADERS, and its
    /// body as far as the windows allow, are appended to `out`. Returns the stream's identifier.
    pub fn open(&mut self, request: &Request, tag: u64, out: &mut Vec<u8>) -> u32 {
        self.open_stream(request, tag, request.body.is_empty(), out)
    }

    fn open_stream(&mut self, request: &Request, tag: u64, end_stream: bool, out: &mut Vec<u8>) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.saturating_add(2);
        let has_body = !request.body.is_empty();
        let indexed = request.indexed.as_ref().filter(|ix| ix.table_bytes <= self.peer.header_table_size as usize);
        let block: &[u8] = match indexed {
            Some(ix) if self.indexed_sent => &ix.rest,
            Some(ix) => {
                self.indexed_sent = true;
                &ix.first
            }
            None => &request.block,
        };
        let block = if std::mem::take(&mut self.table_resize) {
            // Empty the table (the old entries may not fit the new size), then allow it again.
            self.scratch.clear();
            crate::hpack::put_integer(&mut self.scratch, 0, 5, 0x20);
            crate::hpack::put_integer(&mut self.scratch, self.peer.header_table_size as usize, 5, 0x20);
            self.scratch.extend_from_slice(block);
            &self.scratch[..]
        } else {
            block
        };
        frame::put_header_block(out, id, block, end_stream, self.peer.max_frame_size as usize);
        self.streams.push_back(Some(Stream {
            tag,
            head: request.head,
            status: 0,
            expect: None,
            body: 0,
            recv: ReceiveWindow::new(self.settings.stream_window),
            send: has_body.then(|| request.body.clone()),
            send_window: self.peer.initial_window,
            tunnel: None,
        }));
        self.open += 1;
        if has_body {
            self.sending += 1;
            self.flush_bodies(out);
        }
        id
    }

    /// Feed received bytes. Events come through `on` as streams end; frames to send are
    /// appended to `out`. An error is a connection error: GOAWAY is appended, and the
    /// connection is over.
    pub fn receive(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl FnMut(ClientEvent),
    ) -> Result<(), ClientError> {
        self.receive_into(data, out, &mut Events(on))
    }

    /// [`Self::receive`], with tunnels ([`Self::open_tunnel`]): their heads and DATA go to
    /// `sink` as well as the events.
    pub fn receive_into(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        if !self.seen_settings && self.reader.is_empty() && data.starts_with(b"HTTP/") {
            return Err(ClientError::NotHttp2);
        }
        let result = self.receive_frames(data, out, on);
        if let Err(ClientError::Protocol(violation)) = &result {
            frame::put_goaway(out, 0, violation.code(), b"");
        } else if let Err(ClientError::Compression(_)) = &result {
            frame::put_goaway(out, 0, ErrorCode::Compression, b"");
        }
        result
    }

    fn receive_frames(&mut self, data: &[u8], out: &mut Vec<u8>, on: &mut impl ClientSink) -> Result<(), ClientError> {
        // Taken for the read, so that each frame may be handled with the whole connection.
        let mut reader = std::mem::take(&mut self.reader);
        let max_frame = self.settings.max_frame;
        let read = reader.read(data, max_frame, |head, payload| self.frame(head, payload, out, on));
        self.reader = reader;
        read
    }

    fn frame(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        let checked = rules::check_order(&head, self.seen_settings, self.block.as_ref().map(|b| b.stream))
            .and_then(|()| rules::check_shape(&head, payload));
        if let Err(violation) = checked {
            return self.refuse(head.stream, violation, out, on);
        }
        match head.kind {
            kind::DATA => self.on_data(head, payload, out, on),
            kind::HEADERS => self.on_headers(head, payload, out, on),
            kind::CONTINUATION => self.on_continuation(head, payload, out, on),
            kind::RST_STREAM => self.on_reset(head, payload, on),
            kind::SETTINGS => self.on_settings(head, payload, out),
            kind::PING => {
                let opaque: &[u8; 8] = payload.try_into().map_err(|_| Violation::PingLength)?;
                if !head.has(flag::ACK) {
                    frame::put_ping_ack(out, opaque);
                }
                Ok(())
            }
            kind::GOAWAY => self.on_goaway(payload, on),
            kind::WINDOW_UPDATE => self.on_window_update(head, payload, out, on),
            // This client sent SETTINGS_ENABLE_PUSH = 0 (§6.5.2).
            kind::PUSH_PROMISE => Err(Violation::PushDisabled.into()),
            // Priorities are not acted on (RFC 9113 deprecates them), only checked.
            kind::PRIORITY => match rules::check_priority(&head, payload) {
                Ok(()) => Ok(()),
                Err(violation) => self.refuse(head.stream, violation, out, on),
            },
            // Unknown types are ignored (§5.5).
            _ => Ok(()),
        }
    }

    /// The slot of stream `id`, if it is open.
    fn stream_mut(&mut self, id: u32) -> Option<&mut Stream> {
        if id < self.base || id % 2 == 0 {
            return None;
        }
        self.streams.get_mut(((id - self.base) / 2) as usize).and_then(Option::as_mut)
    }

    /// A frame on stream `id` that is not open: an idle one or a server-initiated one is a
    /// protocol error.
    fn check_known(&self, id: u32) -> Result<(), ClientError> {
        if id % 2 == 0 || id >= self.next_id {
            return Err(Violation::IdleStream.into());
        }
        Ok(())
    }

    /// DATA or a header block on stream `id`, not open: on an idle stream a connection error;
    /// on a closed one RST_STREAM(STREAM_CLOSED), unless this client reset it lately (RFC 9113
    /// §5.1; the server makes HEADERS on a closed stream a connection error, this client only
    /// resets it: a load generator keeps its other streams).
    fn on_closed(&mut self, id: u32, out: &mut Vec<u8>, on: &mut impl ClientSink) -> Result<(), ClientError> {
        self.check_known(id)?;
        self.refuse(id, Violation::StreamEnded, out, on)
    }

    /// A rule broken on `stream`: a stream error resets it (unless this client reset it lately:
    /// the frame was on its way), a connection error ends the connection.
    fn refuse(
        &mut self,
        stream: u32,
        violation: Violation,
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        if !violation.is_stream_error() {
            return Err(violation.into());
        }
        if self.stream_mut(stream).is_some() {
            self.reset(stream, violation.code(), out, on);
        } else if !self.reset_here.contains(stream) {
            frame::put_rst(out, stream, violation.code());
            self.reset_here.remember(stream);
        }
        Ok(())
    }

    /// End stream `id`: its slot is emptied, and the ring's emptied front given back.
    fn remove(&mut self, id: u32) -> Option<Stream> {
        if id < self.base {
            return None;
        }
        let stream = self.streams.get_mut(((id - self.base) / 2) as usize)?.take()?;
        self.open -= 1;
        if stream.send.is_some() {
            self.sending -= 1;
        }
        if stream.tunnel.is_some() {
            self.tunnels -= 1;
        }
        while matches!(self.streams.front(), Some(None)) {
            self.streams.pop_front();
            self.base += 2;
        }
        if self.streams.is_empty() {
            self.base = self.next_id;
        }
        Some(stream)
    }

    /// Reset a stream whose response broke the protocol.
    fn malformed(&mut self, id: u32, out: &mut Vec<u8>, on: &mut impl ClientSink) {
        self.reset(id, ErrorCode::Protocol, out, on);
    }

    /// Reset an open stream that broke a rule (RST_STREAM with `code`): reported as malformed.
    fn reset(&mut self, id: u32, code: ErrorCode, out: &mut Vec<u8>, on: &mut impl ClientSink) {
        if let Some(stream) = self.remove(id) {
            frame::put_rst(out, id, code);
            self.reset_here.remember(id);
            on.event(ClientEvent::Malformed { tag: stream.tag });
        }
    }

    /// The stream's response is whole: check its length and report it.
    fn complete(&mut self, id: u32, out: &mut Vec<u8>, on: &mut impl ClientSink) {
        let Some(stream) = self.stream_mut(id) else { return };
        let bodiless = stream.head || stream.status == 204 || stream.status == 304;
        if stream.expect.is_some_and(|len| !bodiless && len != stream.body) || (bodiless && stream.body > 0) {
            return self.malformed(id, out, on);
        }
        if let Some(stream) = self.remove(id) {
            on.event(ClientEvent::Response { tag: stream.tag, status: stream.status, body_len: stream.body });
        }
    }

    fn on_data(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        let len = head.len;
        // Flow control counts the whole payload, padding included (§6.9.1).
        self.recv.take(len, 0)?;
        self.recv.give_back(len, self.settings.connection_window, 0, out);
        let content = rules::unpad(&head, payload)?;
        let stream_window = self.settings.stream_window;
        let end = head.has(flag::END_STREAM);
        let Some(stream) = self.stream_mut(head.stream) else { return self.on_closed(head.stream, out, on) };
        if let Err(violation) = stream.recv.take(len, head.stream) {
            return self.refuse(head.stream, violation, out, on);
        }
        if stream.status == 0 {
            self.malformed(head.stream, out, on);
            return Ok(());
        }
        if let Some(tunnel) = stream.tunnel.as_deref() {
            if tunnel.remote_ended {
                return self.refuse(head.stream, Violation::StreamEnded, out, on);
            }
            if !content.is_empty() {
                on.tunnel_data(stream.tag, content);
            }
            if end {
                self.tunnel_remote_end(head.stream, on);
            } else {
                // Handed on, so consumed: the window is given back.
                stream.recv.give_back(len, stream_window, head.stream, out);
            }
            return Ok(());
        }
        stream.body += content.len() as u64;
        if end {
            self.complete(head.stream, out, on);
            return Ok(());
        }
        stream.recv.give_back(len, stream_window, head.stream, out);
        Ok(())
    }

    fn on_headers(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        let (fragment, dependency) = rules::header_fragment(&head, payload)?;
        let block = Block {
            stream: head.stream,
            end_stream: head.has(flag::END_STREAM),
            self_dependent: dependency == Some(head.stream),
            bytes: Vec::new(),
        };
        if head.has(flag::END_HEADERS) {
            return self.on_block(&block, fragment, out, on);
        }
        self.check_block_size(fragment.len())?;
        self.block = Some(Block { bytes: fragment.to_vec(), ..block });
        Ok(())
    }

    fn on_continuation(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        let Some(block) = self.block.as_mut().filter(|b| b.stream == head.stream) else {
            return Err(Violation::HeaderBlockInterrupted.into());
        };
        let size = block.bytes.len() + payload.len();
        if size > 2 * self.settings.max_header_list as usize {
            return Err(Violation::HeaderBlockTooLarge.into());
        }
        block.bytes.extend_from_slice(payload);
        if head.has(flag::END_HEADERS) {
            let Some(block) = self.block.take() else { return Ok(()) };
            return self.on_block(&block, &block.bytes, out, on);
        }
        Ok(())
    }

    /// A header block may be at most twice the header list this client allows (HPACK rarely
    /// grows a list, and never by half): past it, the server is flooding.
    fn check_block_size(&self, size: usize) -> Result<(), ClientError> {
        if size > 2 * self.settings.max_header_list as usize {
            return Err(Violation::HeaderBlockTooLarge.into());
        }
        Ok(())
    }

    /// A whole header block on stream `id`: decoded always (the HPACK table must stay in step
    /// with the server's), then taken as a response head, an interim response or trailers.
    fn on_block(
        &mut self,
        info: &Block,
        block: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        let mut list = std::mem::take(&mut self.list);
        list.clear();
        let decoded = self.decoder.decode(block, &mut list);
        let status = list.get(b":status").and_then(parse_status);
        let content_length = list.get(b"content-length").map(parse_length);
        let overflowed = list.overflowed();
        self.list = list;
        decoded.map_err(ClientError::Compression)?;
        if overflowed {
            return Err(Violation::HeaderListTooLarge.into());
        }
        let (id, end_stream) = (info.stream, info.end_stream);
        if info.self_dependent && self.stream_mut(id).is_some() {
            return self.refuse(id, Violation::SelfDependency, out, on);
        }
        let Some(stream) = self.stream_mut(id) else { return self.on_closed(id, out, on) };
        if stream.tunnel.is_some() {
            self.on_tunnel_block(id, status, end_stream, out, on);
            return Ok(());
        }
        if stream.status != 0 {
            // Trailers: they end the stream, or the response is malformed.
            if end_stream {
                self.complete(id, out, on);
            } else {
                self.malformed(id, out, on);
            }
            return Ok(());
        }
        match (status, content_length) {
            (Some(code), _) if (100..200).contains(&code) => {
                // An interim response; the final one follows. Ending the stream here is malformed.
                if end_stream {
                    self.malformed(id, out, on);
                }
            }
            (Some(code), None | Some(Some(_))) => {
                stream.status = code;
                stream.expect = content_length.flatten();
                if end_stream {
                    self.complete(id, out, on);
                }
            }
            _ => self.malformed(id, out, on),
        }
        Ok(())
    }

    /// A header block on tunnel `id`: its answer (200 opens it, anything else refuses it), or
    /// trailers ending it.
    fn on_tunnel_block(
        &mut self,
        id: u32,
        status: Option<u16>,
        end_stream: bool,
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) {
        let Some(stream) = self.stream_mut(id) else { return };
        let tag = stream.tag;
        if stream.status != 0 {
            if end_stream {
                self.tunnel_remote_end(id, on);
            } else {
                self.malformed(id, out, on);
            }
            return;
        }
        match status {
            Some(code) if (100..200).contains(&code) => {
                if end_stream {
                    self.malformed(id, out, on);
                }
            }
            Some(200) => {
                stream.status = 200;
                on.tunnel_open(tag, &self.list);
                if end_stream {
                    self.tunnel_remote_end(id, on);
                }
            }
            Some(code) => {
                // Refused: the stream is no tunnel; what the server would say after is not read.
                self.remove(id);
                if !end_stream {
                    frame::put_rst(out, id, ErrorCode::Cancel);
                    self.reset_here.remember(id);
                }
                on.event(ClientEvent::Response { tag, status: code, body_len: 0 });
            }
            None => self.malformed(id, out, on),
        }
    }

    /// The server's END_STREAM on tunnel `id`: once this side's has gone too, the stream is
    /// closed.
    fn tunnel_remote_end(&mut self, id: u32, on: &mut impl ClientSink) {
        let Some(stream) = self.stream_mut(id) else { return };
        let tag = stream.tag;
        let Some(tunnel) = stream.tunnel.as_mut() else { return };
        tunnel.remote_ended = true;
        let local_ended = tunnel.local_ended;
        on.event(ClientEvent::TunnelEnd { tag });
        if local_ended {
            self.remove(id);
        }
    }

    fn on_reset(&mut self, head: Head, payload: &[u8], on: &mut impl ClientSink) -> Result<(), ClientError> {
        let code: [u8; 4] = payload.try_into().map_err(|_| Violation::RstLength)?;
        match self.remove(head.stream) {
            Some(stream) => on.event(ClientEvent::Reset { tag: stream.tag, code: u32::from_be_bytes(code) }),
            None => self.check_known(head.stream)?,
        }
        Ok(())
    }

    fn on_settings(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ClientError> {
        let Settings::Values(values) = Settings::parse(&head, payload)? else { return Ok(()) };
        // A client's to read: the last value given counts, and once 1 it stays 1 (RFC 8441 §3
        // forbids a 0 after a 1; nghttp2 answers one with PROTOCOL_ERROR, as this does).
        let connect = values.filter_map(|s| match s {
            Setting::EnableConnectProtocol(on) => Some(on),
            _ => None,
        });
        if let Some(enabled) = connect.last() {
            if self.connect_protocol && !enabled {
                return Err(Violation::ConnectProtocolWithdrawn.into());
            }
            self.connect_protocol = enabled;
        }
        let applied =
            self.peer.apply(values, self.streams.iter_mut().flatten().map(|stream| &mut stream.send_window))?;
        if applied.push_enabled {
            // Only a client may enable push (RFC 9113 §6.5.2).
            return Err(Violation::PushEnabledByServer.into());
        }
        if applied.header_table_changed && self.indexed_sent {
            // The request's entries are gone or may not fit: add them again after emptying.
            self.indexed_sent = false;
            self.table_resize = true;
        }
        self.seen_settings = true;
        frame::put_settings_ack(out);
        self.flush_bodies(out);
        self.flush_tunnels(out);
        Ok(())
    }

    /// GOAWAY (its shape checked by `rules::check_shape`).
    fn on_goaway(&mut self, payload: &[u8], on: &mut impl ClientSink) -> Result<(), ClientError> {
        let Some(f) = payload.first_chunk::<8>() else { return Err(Violation::GoawayLength.into()) };
        let last = u32::from_be_bytes([f[0], f[1], f[2], f[3]]) & MAX_STREAM_ID;
        let code = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
        self.goaway = Some(self.goaway.map_or(last, |earlier| earlier.min(last)));
        on.event(ClientEvent::GoAway { last_stream: last, code });
        let base = self.base;
        let refused: Vec<u32> = (self.streams.iter().enumerate())
            .filter(|(_, slot)| slot.is_some())
            .map(|(i, _)| base + 2 * i as u32)
            .filter(|&id| id > last)
            .collect();
        for id in refused {
            if let Some(stream) = self.remove(id) {
                on.event(ClientEvent::Refused { tag: stream.tag });
            }
        }
        Ok(())
    }

    fn on_window_update(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        on: &mut impl ClientSink,
    ) -> Result<(), ClientError> {
        if head.stream != 0 {
            self.check_known(head.stream)?;
        }
        let opened = rules::window_increment(&head, payload).and_then(|increment| {
            if head.stream == 0 {
                return rules::open_send_window(&mut self.send_window, increment, false);
            }
            match self.stream_mut(head.stream) {
                Some(stream) => rules::open_send_window(&mut stream.send_window, increment, true),
                // A stream that ended: its window no longer matters.
                None => Ok(()),
            }
        });
        if let Err(violation) = opened {
            self.refuse(head.stream, violation, out, on)?;
        }
        self.flush_bodies(out);
        self.flush_tunnels(out);
        Ok(())
    }

    /// Frame request bodies as far as the windows allow, oldest stream first.
    fn flush_bodies(&mut self, out: &mut Vec<u8>) {
        if self.sending == 0 {
            return;
        }
        let max_frame = self.peer.max_frame_size as usize;
        let base = self.base;
        let mut finished = 0;
        for (i, slot) in self.streams.iter_mut().enumerate() {
            let Some(stream) = slot.as_mut() else { continue };
            let Some(body) = stream.send.as_mut() else { continue };
            let id = base + 2 * i as u32;
            loop {
                let room = self.send_window.min(stream.send_window).max(0) as usize;
                let n = body.len().min(max_frame).min(room);
                if n == 0 && !body.is_empty() {
                    break;
                }
                let chunk = body.split_to(n);
                let last = body.is_empty();
                frame::put_head(out, n, kind::DATA, if last { flag::END_STREAM } else { 0 }, id);
                out.extend_from_slice(&chunk);
                self.send_window -= n as i64;
                stream.send_window -= n as i64;
                if last {
                    stream.send = None;
                    finished += 1;
                    break;
                }
            }
            if self.send_window <= 0 {
                break;
            }
        }
        self.sending -= finished;
    }
}

impl ClientConnection {
    /// Frame what tunnels hold as far as the windows allow, oldest stream first; END_STREAM
    /// after the last byte of a tunnel whose end was given.
    fn flush_tunnels(&mut self, out: &mut Vec<u8>) {
        if self.tunnels == 0 {
            return;
        }
        let max_frame = self.peer.max_frame_size as usize;
        let base = self.base;
        let mut closed = Vec::new();
        for (i, slot) in self.streams.iter_mut().enumerate() {
            let Some(stream) = slot.as_mut() else { continue };
            let Some(tunnel) = stream.tunnel.as_deref_mut() else { continue };
            if tunnel.local_ended {
                continue;
            }
            let id = base + 2 * i as u32;
            let mut from = 0;
            while from < tunnel.pending.len() {
                let room = self.send_window.min(stream.send_window).max(0) as usize;
                let n = (tunnel.pending.len() - from).min(max_frame).min(room);
                if n == 0 {
                    break;
                }
                let last = tunnel.finish && from + n == tunnel.pending.len();
                frame::put_head(out, n, kind::DATA, if last { flag::END_STREAM } else { 0 }, id);
                out.extend_from_slice(&tunnel.pending[from..from + n]);
                self.send_window -= n as i64;
                stream.send_window -= n as i64;
                from += n;
                tunnel.local_ended = last;
            }
            tunnel.pending.drain(..from);
            if tunnel.pending.is_empty() && tunnel.pending.capacity() > 64 << 10 {
                tunnel.pending = Vec::new();
            }
            if tunnel.finish && tunnel.pending.is_empty() && !tunnel.local_ended {
                // An empty DATA frame takes no window.
                frame::put_head(out, 0, kind::DATA, flag::END_STREAM, id);
                tunnel.local_ended = true;
            }
            if tunnel.local_ended && tunnel.remote_ended {
                closed.push(id);
            }
        }
        for id in closed {
            self.remove(id);
        }
    }
}

fn parse_status(value: &[u8]) -> Option<u16> {
    if value.len() != 3 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Content-Length: Some(n), or None for a value that is not a number (malformed).
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}
