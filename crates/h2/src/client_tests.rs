//! The client side driven against this crate's server side and against hand-made frames.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::client::{
    encode_request, encode_request_indexed, ClientConnection, ClientError, ClientEvent, ClientSettings, Request,
};
use crate::frame::{self, flag, kind, setting, ErrorCode, Head, HEADER_LEN};
use crate::hpack::encode_response;
use crate::{Body, Connection, Event, Limits};

fn get() -> Request {
    let block = encode_request("GET", "http", "localhost", "/", &[("user-agent", "sockscale")]);
    Request { block: block.into(), indexed: None, body: Bytes::new(), head: false }
}

fn get_indexed() -> Request {
    let fields = [("user-agent", "sockscale")];
    let indexed = encode_request_indexed("GET", "http", "localhost", "/", &fields);
    Request { indexed: Some(indexed), ..get() }
}

/// A client and a server stage, and the bytes between them.
struct Pair {
    client: ClientConnection,
    server: Connection,
    now: Instant,
    to_server: Vec<u8>,
    to_client: Vec<u8>,
    events: Vec<ClientEvent>,
    /// The body every request is answered with.
    page: Bytes,
    /// Deliver this many bytes at a time (1: every frame split across reads).
    chunk: usize,
}

impl Pair {
    fn new(limits: Limits, page: &[u8], chunk: usize) -> Pair {
        let now = Instant::now();
        let mut to_server = Vec::new();
        let mut to_client = Vec::new();
        let client = ClientConnection::new(ClientSettings::default(), &mut to_server);
        let server = Connection::new(Arc::new(limits), now, &mut to_client);
        Pair {
            client,
            server,
            now,
            to_server,
            to_client,
            events: Vec::new(),
            page: Bytes::copy_from_slice(page),
            chunk,
        }
    }

    /// Move bytes both ways until neither side has anything to say.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            if self.to_server.is_empty() && self.to_client.is_empty() {
                return;
            }
            let input = std::mem::take(&mut self.to_server);
            for piece in input.chunks(self.chunk) {
                self.server.receive(piece, self.now, &mut self.to_client);
            }
            while let Some(Event::Request(req)) = self.server.poll_event() {
                let body = if self.page.is_empty() { Body::Empty } else { Body::Bytes(self.page.clone()) };
                let len = self.page.len().to_string();
                self.server.respond(req.stream, 200, &[(b"content-length", len.as_bytes())], body, &mut self.to_client);
            }
            self.server.transmit(self.now, 0, &mut self.to_client);
            let input = std::mem::take(&mut self.to_client);
            let events = &mut self.events;
            for piece in input.chunks(self.chunk) {
                self.client.receive(piece, &mut self.to_server, &mut |e| events.push(e)).expect("no connection error");
            }
        }
        panic!("the pair never went quiet");
    }
}

fn responses(events: &[ClientEvent]) -> Vec<(u64, u16, u64)> {
    let mut all: Vec<_> = events
        .iter()
        .filter_map(|e| match *e {
            ClientEvent::Response { tag, status, body_len } => Some((tag, status, body_len)),
            _ => None,
        })
        .collect();
    all.sort_unstable();
    all
}

#[test]
fn many_streams_against_the_server_stage_each_answered_once() {
    for chunk in [usize::MAX, 7, 1] {
        let mut p = Pair::new(Limits::default(), &[b'x'; 4096], chunk);
        p.settle();
        for tag in 0..50 {
            assert!(p.client.can_open());
            p.client.open(&get(), tag, &mut p.to_server);
        }
        assert_eq!(p.client.oldest(), Some(0));
        p.settle();
        let want: Vec<_> = (0..50).map(|tag| (tag, 200, 4096)).collect();
        assert_eq!(responses(&p.events), want, "delivered {chunk} bytes at a time");
        assert_eq!(p.client.open_streams(), 0);
        assert_eq!(p.client.oldest(), None);
        assert_eq!(p.client.buffered(), 0, "an idle client connection holds no buffer");
    }
}

#[test]
fn the_servers_stream_limit_bounds_what_opens() {
    let limits = Limits { max_concurrent_streams: 7, ..Limits::default() };
    let mut p = Pair::new(limits, b"ok", usize::MAX);
    p.settle();
    assert_eq!(p.client.peer_max_streams(), Some(7));
    let mut opened = 0;
    while p.client.can_open() {
        p.client.open(&get(), opened, &mut p.to_server);
        opened += 1;
    }
    assert_eq!(opened, 7);
    p.settle();
    assert_eq!(responses(&p.events).len(), 7);
    assert!(p.client.can_open());
}

#[test]
fn a_request_body_waits_for_the_servers_windows() {
    // 200 KiB against the server's 65,535-octet initial windows: the body goes out as the
    // server gives its windows back.
    let body = Bytes::from(vec![7u8; 200 << 10]);
    let block = encode_request("POST", "http", "localhost", "/upload", &[]);
    let post = Request { block: block.into(), indexed: None, body, head: false };
    let mut p = Pair::new(Limits::default(), b"done", usize::MAX);
    p.settle();
    p.client.open(&post, 1, &mut p.to_server);
    assert!(p.to_server.len() < 70_000, "no more than the window is framed at once");
    p.settle();
    assert_eq!(responses(&p.events), vec![(1, 200, 4)]);
}

/// Frames from a hand-made server.
fn server_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_head(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn response_head(status: u16, fields: &[(&[u8], &[u8])], stream: u32, end_stream: bool) -> Vec<u8> {
    let mut block = Vec::new();
    encode_response(&mut block, status, fields, false);
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    server_frame(kind::HEADERS, flags, stream, &block)
}

/// A client whose server said SETTINGS (max streams 100), with `streams` streams open.
fn opened(streams: u64) -> (ClientConnection, Vec<u8>) {
    let mut out = Vec::new();
    let mut client = ClientConnection::new(ClientSettings::default(), &mut out);
    let mut settings = Vec::new();
    frame::put_settings(&mut settings, &[(setting::MAX_CONCURRENT_STREAMS, 100)]);
    client.receive(&settings, &mut out, &mut |_| {}).expect("SETTINGS");
    out.clear();
    for tag in 0..streams {
        client.open(&get(), tag, &mut out);
    }
    out.clear();
    (client, out)
}

fn feed(client: &mut ClientConnection, bytes: &[u8], out: &mut Vec<u8>) -> Result<Vec<ClientEvent>, ClientError> {
    let mut events = Vec::new();
    client.receive(bytes, out, &mut |e| events.push(e))?;
    Ok(events)
}

fn out_frames(mut bytes: &[u8]) -> Vec<Head> {
    let mut all = Vec::new();
    while bytes.len() >= HEADER_LEN {
        let head = Head::parse(bytes[..HEADER_LEN].try_into().expect("a header"));
        bytes = &bytes[HEADER_LEN + head.len as usize..];
        all.push(head);
    }
    all
}

#[test]
fn the_preface_is_settings_and_a_connection_window_update() {
    let mut out = Vec::new();
    let _client = ClientConnection::new(ClientSettings::default(), &mut out);
    assert_eq!(&out[..24], frame::PREFACE);
    let heads = out_frames(&out[24..]);
    assert_eq!(heads.iter().map(|h| h.kind).collect::<Vec<_>>(), vec![kind::SETTINGS, kind::WINDOW_UPDATE]);
}

#[test]
fn an_http1_answer_or_a_first_frame_not_settings_is_refused() {
    let mut out = Vec::new();
    let mut client = ClientConnection::new(ClientSettings::default(), &mut out);
    assert_eq!(feed(&mut client, b"HTTP/1.1 400 Bad Request\r\n\r\n", &mut out), Err(ClientError::NotHttp2));

    let mut client = ClientConnection::new(ClientSettings::default(), &mut out);
    out.clear();
    let ping = server_frame(kind::PING, 0, 0, &[0; 8]);
    assert_eq!(protocol_code(feed(&mut client, &ping, &mut out)), Some(ErrorCode::Protocol));
    assert_eq!(out_frames(&out).last().map(|h| h.kind), Some(kind::GOAWAY), "the error is said with GOAWAY");
}

#[test]
fn settings_and_ping_are_acknowledged() {
    let mut out = Vec::new();
    let mut client = ClientConnection::new(ClientSettings::default(), &mut out);
    out.clear();
    let mut input = Vec::new();
    frame::put_settings(&mut input, &[]);
    input.extend(server_frame(kind::PING, 0, 0, &[9; 8]));
    feed(&mut client, &input, &mut out).expect("fine");
    let heads = out_frames(&out);
    assert_eq!(heads.len(), 2);
    assert_eq!((heads[0].kind, heads[0].flags), (kind::SETTINGS, flag::ACK));
    assert_eq!((heads[1].kind, heads[1].flags), (kind::PING, flag::ACK));
    assert_eq!(&out[out.len() - 8..], &[9; 8]);
}

#[test]
fn a_reset_and_a_goaway_end_streams_by_kind() {
    let (mut client, mut out) = opened(4);
    // Streams 1, 3, 5, 7 (tags 0..4): 3 is reset, GOAWAY says 3 was the last processed.
    let mut input = server_frame(kind::RST_STREAM, 0, 3, &(ErrorCode::Cancel as u32).to_be_bytes());
    let mut goaway = Vec::new();
    frame::put_goaway(&mut goaway, 3, ErrorCode::NoError, b"");
    input.extend(goaway);
    input.extend(response_head(200, &[(b"content-length", b"0")], 1, true));
    let events = feed(&mut client, &input, &mut out).expect("fine");
    assert_eq!(
        events,
        vec![
            ClientEvent::Reset { tag: 1, code: ErrorCode::Cancel as u32 },
            ClientEvent::GoAway { last_stream: 3, code: 0 },
            ClientEvent::Refused { tag: 2 },
            ClientEvent::Refused { tag: 3 },
            ClientEvent::Response { tag: 0, status: 200, body_len: 0 },
        ]
    );
    assert!(client.exhausted() && !client.can_open());
    assert_eq!(client.open_streams(), 0);
}

#[test]
fn a_body_that_contradicts_its_length_is_malformed_and_reset() {
    let (mut client, mut out) = opened(1);
    let mut input = response_head(200, &[(b"content-length", b"10")], 1, false);
    input.extend(server_frame(kind::DATA, flag::END_STREAM, 1, b"short"));
    let events = feed(&mut client, &input, &mut out).expect("a stream error only");
    assert_eq!(events, vec![ClientEvent::Malformed { tag: 0 }]);
    assert_eq!(out_frames(&out).last().map(|h| h.kind), Some(kind::RST_STREAM));

    let (mut client, mut out) = opened(1);
    let input = server_frame(kind::DATA, flag::END_STREAM, 1, b"no head first");
    assert_eq!(feed(&mut client, &input, &mut out), Ok(vec![ClientEvent::Malformed { tag: 0 }]));
}

#[test]
fn interim_responses_trailers_and_padding_are_understood() {
    let (mut client, mut out) = opened(1);
    let mut input = response_head(100, &[], 1, false);
    input.extend(response_head(200, &[], 1, false));
    // DATA padded with 3 octets: "abc" is the body.
    input.extend(server_frame(kind::DATA, flag::PADDED, 1, &[3, b'a', b'b', b'c', 0, 0, 0]));
    input.extend(response_head(200, &[(b"x-trailer", b"1")], 1, true));
    let events = feed(&mut client, &input, &mut out).expect("fine");
    assert_eq!(events, vec![ClientEvent::Response { tag: 0, status: 200, body_len: 3 }]);
}

#[test]
fn frames_on_streams_never_opened_and_oversized_frames_are_connection_errors() {
    let (mut client, mut out) = opened(1);
    let input = response_head(200, &[], 5, true);
    assert!(matches!(feed(&mut client, &input, &mut out), Err(ClientError::Protocol(_))));

    let (mut client, mut out) = opened(1);
    let mut head = Vec::new();
    frame::put_head(&mut head, 1 << 20, kind::DATA, 0, 1);
    assert_eq!(protocol_code(feed(&mut client, &head, &mut out)), Some(ErrorCode::FrameSize));
}

#[test]
fn a_push_promise_is_refused_and_a_continuation_flood_is_cut_off() {
    let (mut client, mut out) = opened(1);
    let input = server_frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]);
    assert!(matches!(feed(&mut client, &input, &mut out), Err(ClientError::Protocol(_))));

    let (mut client, mut out) = opened(1);
    let mut flood = server_frame(kind::HEADERS, 0, 1, &[0; 100]);
    let mut result = Ok(Vec::new());
    for _ in 0..10_000 {
        flood.extend(server_frame(kind::CONTINUATION, 0, 1, &[0; 16_000]));
        result = feed(&mut client, &flood, &mut out);
        flood.clear();
        if result.is_err() {
            break;
        }
    }
    assert!(matches!(result, Err(ClientError::Protocol(_))), "{result:?}");
    assert!(client.buffered() < 200 << 10, "held {} bytes", client.buffered());
}

#[test]
fn a_response_after_a_stream_was_reset_here_keeps_hpack_in_step() {
    // The server indexes a field in its table on a stream the client has reset; the client must
    // still decode that block, or the next response refers to an entry it never saw.
    let (mut client, mut out) = opened(2);
    let mut input = server_frame(kind::DATA, flag::END_STREAM, 1, b"x");
    // HEADERS for stream 1 (reset by now) with an indexed literal "x-a: 1" (0x40 = incremental).
    let mut block = vec![0x88, 0x40, 3];
    block.extend_from_slice(b"x-a");
    block.extend_from_slice(&[1, b'1']);
    input.extend(server_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block));
    // Stream 3: :status 200 and the dynamic entry 62.
    input.extend(server_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &[0x88, 0xbe]));
    let events = feed(&mut client, &input, &mut out).expect("fine");
    assert_eq!(
        events,
        vec![ClientEvent::Malformed { tag: 0 }, ClientEvent::Response { tag: 1, status: 200, body_len: 0 }]
    );
}

#[test]
fn an_indexed_request_adds_its_fields_once_then_names_them_by_index() {
    let mut p = Pair::new(Limits::default(), &[b'x'; 100], usize::MAX);
    p.settle();
    p.client.open(&get_indexed(), 0, &mut p.to_server);
    let first = std::mem::take(&mut p.to_server);
    p.client.open(&get_indexed(), 1, &mut p.to_server);
    let second = p.to_server.clone();
    assert!(second.len() < 20 && second.len() < first.len() / 2, "{} then {} octets", first.len(), second.len());
    p.to_server = [first, second].concat();
    for tag in 2..40 {
        p.client.open(&get_indexed(), tag, &mut p.to_server);
    }
    p.settle();
    let want: Vec<_> = (0..40).map(|tag| (tag, 200, 100)).collect();
    assert_eq!(responses(&p.events), want, "the server's decoder read every indexed block");
}

#[test]
fn a_server_table_too_small_or_resized_gets_literals_or_a_size_update() {
    // A table of 0: literals only, as the encoder may not add anything.
    let limits = Limits { header_table_size: 0, ..Limits::default() };
    let mut p = Pair::new(limits, b"ok", usize::MAX);
    p.settle();
    let before = p.to_server.len();
    p.client.open(&get_indexed(), 0, &mut p.to_server);
    assert_eq!(p.to_server.len() - before, 9 + get().block.len(), "the literal block");
    p.settle();
    assert_eq!(responses(&p.events), vec![(0, 200, 2)]);

    // Resized after use: the next block starts with size updates (0, then the new size) and
    // adds the fields again; the server decodes it.
    let (mut client, mut out) = opened(0);
    client.open(&get_indexed(), 0, &mut out);
    client.open(&get_indexed(), 1, &mut out);
    let mut settings = Vec::new();
    frame::put_settings(&mut settings, &[(setting::HEADER_TABLE_SIZE, 2048)]);
    feed(&mut client, &settings, &mut out).expect("fine");
    out.clear();
    client.open(&get_indexed(), 2, &mut out);
    let block = &out[HEADER_LEN..];
    assert_eq!(&block[..2], &[0x20, 0x3f], "size update to 0, then to 2048 (a multi-octet integer)");
    assert!(block.ends_with(&get_indexed().indexed.unwrap().first), "the fields added again");
}

/// The client's windows and settings follow the same rules as the server's (the shared layer in
/// `rules`): each of these was accepted or answered otherwise before.
fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    server_frame(kind::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

fn rst_codes(out: &[u8]) -> Vec<(u32, u32)> {
    let mut all = Vec::new();
    let mut bytes = out;
    while bytes.len() >= HEADER_LEN {
        let head = Head::parse(bytes[..HEADER_LEN].try_into().expect("a header"));
        let payload = &bytes[HEADER_LEN..HEADER_LEN + head.len as usize];
        if head.kind == kind::RST_STREAM {
            all.push((head.stream, u32::from_be_bytes(payload.try_into().expect("4 octets"))));
        }
        bytes = &bytes[HEADER_LEN + head.len as usize..];
    }
    all
}

fn protocol_code(result: Result<Vec<ClientEvent>, ClientError>) -> Option<ErrorCode> {
    match result {
        Err(ClientError::Protocol(violation)) => Some(violation.code()),
        _ => None,
    }
}

#[test]
fn settings_that_push_a_stream_window_past_2_31_is_a_flow_control_error() {
    // Stream 1's send window at 2^31-1 (65,535 and the rest by WINDOW_UPDATE); then
    // SETTINGS_INITIAL_WINDOW_SIZE one above the initial 65,535 would push it to 2^31.
    let (mut client, mut out) = opened(1);
    feed(&mut client, &window_update(1, (1 << 31) - 1 - 65_535), &mut out).expect("up to 2^31-1 is fine");
    let mut settings = Vec::new();
    frame::put_settings(&mut settings, &[(setting::INITIAL_WINDOW_SIZE, 65_536)]);
    assert_eq!(protocol_code(feed(&mut client, &settings, &mut out)), Some(ErrorCode::FlowControl));
    assert_eq!(out_frames(&out).last().map(|h| h.kind), Some(kind::GOAWAY), "the error is said with GOAWAY");
}

#[test]
fn a_stream_window_update_of_0_or_past_2_31_resets_the_stream() {
    let (mut client, mut out) = opened(2);
    let mut input = window_update(1, 0);
    input.extend(window_update(3, (1 << 31) - 65_535));
    let events = feed(&mut client, &input, &mut out).expect("stream errors only");
    assert_eq!(events, vec![ClientEvent::Malformed { tag: 0 }, ClientEvent::Malformed { tag: 1 }]);
    assert_eq!(
        rst_codes(&out),
        vec![(1, ErrorCode::Protocol as u32), (3, ErrorCode::FlowControl as u32)],
        "RST_STREAM with the codes the server uses"
    );
}

#[test]
fn a_window_update_on_an_idle_stream_or_a_push_enabling_server_is_a_protocol_error() {
    let (mut client, mut out) = opened(1);
    assert_eq!(protocol_code(feed(&mut client, &window_update(5, 1), &mut out)), Some(ErrorCode::Protocol));

    // RFC 9113 §6.5.2: a client treats SETTINGS_ENABLE_PUSH = 1 from a server as a
    // connection error (a server may only send 0).
    let (mut client, mut out) = opened(1);
    let mut settings = Vec::new();
    frame::put_settings(&mut settings, &[(setting::ENABLE_PUSH, 1)]);
    assert_eq!(protocol_code(feed(&mut client, &settings, &mut out)), Some(ErrorCode::Protocol));
}

#[test]
fn priority_frames_and_short_priority_fields_are_checked() {
    let (mut client, mut out) = opened(1);
    let priority = server_frame(kind::PRIORITY, 0, 0, &[0, 0, 0, 1, 16]);
    assert_eq!(protocol_code(feed(&mut client, &priority, &mut out)), Some(ErrorCode::Protocol), "on stream 0");

    let (mut client, mut out) = opened(1);
    let priority = server_frame(kind::PRIORITY, 0, 1, &[0, 0, 0, 0]);
    let events = feed(&mut client, &priority, &mut out).expect("a stream error");
    assert_eq!(events, vec![ClientEvent::Malformed { tag: 0 }]);
    assert_eq!(rst_codes(&out), vec![(1, ErrorCode::FrameSize as u32)]);

    // HEADERS whose PRIORITY flag promises 5 octets it does not have: a frame size error.
    let (mut client, mut out) = opened(1);
    let headers = server_frame(kind::HEADERS, flag::END_HEADERS | flag::PRIORITY, 1, &[0, 0, 0]);
    assert_eq!(protocol_code(feed(&mut client, &headers, &mut out)), Some(ErrorCode::FrameSize));
}

#[test]
fn data_past_a_streams_window_is_a_flow_control_reset() {
    // A stream window of 100 octets: 101 of DATA (padding counts) is past it.
    let settings = ClientSettings { stream_window: 100, ..ClientSettings::default() };
    let mut out = Vec::new();
    let mut client = ClientConnection::new(settings, &mut out);
    let mut input = Vec::new();
    frame::put_settings(&mut input, &[]);
    feed(&mut client, &input, &mut out).expect("SETTINGS");
    client.open(&get(), 0, &mut out);
    out.clear();
    let mut input = response_head(200, &[], 1, false);
    input.extend(server_frame(kind::DATA, flag::PADDED, 1, &[[50].as_slice(), &[0; 100]].concat()));
    let events = feed(&mut client, &input, &mut out).expect("a stream error");
    assert_eq!(events, vec![ClientEvent::Malformed { tag: 0 }]);
    assert_eq!(rst_codes(&out), vec![(1, ErrorCode::FlowControl as u32)]);
}

#[test]
fn frames_on_a_closed_stream_are_reset_unless_this_client_reset_it() {
    // Stream 1 ends whole; stream 3 is reset here (DATA before its HEADERS).
    let (mut client, mut out) = opened(2);
    let mut input = response_head(200, &[], 1, true);
    input.extend(server_frame(kind::DATA, 0, 3, b"x"));
    let events = feed(&mut client, &input, &mut out).expect("fine");
    assert_eq!(
        events,
        vec![ClientEvent::Response { tag: 0, status: 200, body_len: 0 }, ClientEvent::Malformed { tag: 1 }]
    );
    assert_eq!(rst_codes(&out), vec![(3, ErrorCode::Protocol as u32)]);
    out.clear();
    // DATA on the ended stream 1: STREAM_CLOSED; on stream 3, which this client reset: ignored,
    // as is a WINDOW_UPDATE there; a WINDOW_UPDATE of 0 on stream 1: PROTOCOL_ERROR.
    let mut input = server_frame(kind::DATA, 0, 1, b"late");
    input.extend(server_frame(kind::DATA, 0, 3, b"in flight"));
    input.extend(window_update(3, 0));
    input.extend(window_update(1, 0));
    assert_eq!(feed(&mut client, &input, &mut out), Ok(vec![]));
    assert_eq!(rst_codes(&out), vec![(1, ErrorCode::StreamClosed as u32)], "stream 1 reset once, then remembered");
}
