//! Tunnels (RFC 8441 extended CONNECT) on the client side, against hand-made server frames.

use crate::client::{encode_connect, ClientConnection, ClientError, ClientEvent, ClientSettings, ClientSink};
use crate::frame::{self, flag, kind, setting, ErrorCode, Head, HEADER_LEN};
use crate::hpack::{encode_response, Decoder, HeaderList};
use crate::rules::Violation;

#[derive(Default)]
struct Sink {
    events: Vec<ClientEvent>,
    /// Tunnels opened: their tag and Sec-WebSocket-Extensions.
    opened: Vec<(u64, Option<Vec<u8>>)>,
    data: Vec<u8>,
}

impl ClientSink for Sink {
    fn event(&mut self, event: ClientEvent) {
        self.events.push(event);
    }
    fn tunnel_open(&mut self, tag: u64, head: &HeaderList) {
        self.opened.push((tag, head.get(b"sec-websocket-extensions").map(<[u8]>::to_vec)));
    }
    fn tunnel_data(&mut self, _tag: u64, data: &[u8]) {
        self.data.extend_from_slice(data);
    }
}

fn server_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_head(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn head(status: u16, fields: &[(&[u8], &[u8])], stream: u32, end_stream: bool) -> Vec<u8> {
    let mut block = Vec::new();
    encode_response(&mut block, status, fields, false);
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    server_frame(kind::HEADERS, flags, stream, &block)
}

fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_settings(&mut out, values);
    out
}

fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_window_update(&mut out, stream, increment);
    out
}

/// The frames in `bytes`, each with its payload.
fn frames(mut bytes: &[u8]) -> Vec<(Head, Vec<u8>)> {
    let mut all = Vec::new();
    while bytes.len() >= HEADER_LEN {
        let head = Head::parse(bytes[..HEADER_LEN].try_into().expect("a header"));
        let end = HEADER_LEN + head.len as usize;
        all.push((head, bytes[HEADER_LEN..end].to_vec()));
        bytes = &bytes[end..];
    }
    assert!(bytes.is_empty(), "whole frames");
    all
}

/// The DATA on `stream` in `bytes`: its octets, and whether END_STREAM came.
fn data_on(bytes: &[u8], stream: u32) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    let mut ended = false;
    for (head, payload) in frames(bytes).into_iter().filter(|(h, _)| h.kind == kind::DATA && h.stream == stream) {
        assert!(!ended, "nothing after END_STREAM");
        data.extend_from_slice(&payload);
        ended = head.has(flag::END_STREAM);
    }
    (data, ended)
}

fn block() -> Vec<u8> {
    encode_connect("websocket", "http", "localhost:8080", "/chat", &[("sec-websocket-version", "13")])
}

fn feed(client: &mut ClientConnection, bytes: &[u8], out: &mut Vec<u8>, sink: &mut Sink) {
    client.receive_into(bytes, out, sink).expect("no connection error");
}

/// A client whose server sent SETTINGS `values` and ENABLE_CONNECT_PROTOCOL = 1, with a tunnel
/// (tag 7, stream 1) answered 200.
fn tunnel(settings_values: &[(u16, u32)], client_settings: ClientSettings) -> (ClientConnection, Vec<u8>, Sink) {
    let mut out = Vec::new();
    let mut sink = Sink::default();
    let mut client = ClientConnection::new(client_settings, &mut out);
    let mut values = settings_values.to_vec();
    values.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
    feed(&mut client, &settings(&values), &mut out, &mut sink);
    assert_eq!(client.open_tunnel(&block(), 7, &mut out), Some(1));
    feed(&mut client, &head(200, &[], 1, false), &mut out, &mut sink);
    assert_eq!(sink.opened, vec![(7, None)]);
    out.clear();
    (client, out, sink)
}

#[test]
fn the_connect_waits_for_the_servers_enable_connect_protocol_and_its_fields_are_exact() {
    let mut out = Vec::new();
    let mut sink = Sink::default();
    let mut client = ClientConnection::new(ClientSettings::default(), &mut out);
    out.clear();
    assert_eq!(client.open_tunnel(&block(), 0, &mut out), None, "before the server's SETTINGS");
    feed(&mut client, &settings(&[(setting::MAX_CONCURRENT_STREAMS, 100)]), &mut out, &mut sink);
    out.clear();
    assert!(client.greeted() && !client.connect_protocol());
    assert_eq!(client.open_tunnel(&block(), 0, &mut out), None, "SETTINGS without ENABLE_CONNECT_PROTOCOL");
    assert!(out.is_empty(), "nothing sent");
    feed(&mut client, &settings(&[(setting::ENABLE_CONNECT_PROTOCOL, 1)]), &mut out, &mut sink);
    out.clear();
    assert!(client.connect_protocol());
    assert_eq!(client.open_tunnel(&block(), 0, &mut out), Some(1));
    let sent = frames(&out);
    assert_eq!(sent.len(), 1);
    let (h, payload) = &sent[0];
    assert_eq!((h.kind, h.stream), (kind::HEADERS, 1));
    assert!(h.has(flag::END_HEADERS) && !h.has(flag::END_STREAM), "the stream stays open for the tunnel");
    let mut list = HeaderList::with_limit(1 << 16);
    Decoder::new(4096).decode(payload, &mut list).expect("decodes");
    let fields: Vec<(String, String)> = list
        .iter()
        .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    let want = [
        (":method", "CONNECT"),
        (":scheme", "http"),
        (":authority", "localhost:8080"),
        (":path", "/chat"),
        (":protocol", "websocket"),
        ("sec-websocket-version", "13"),
    ];
    assert_eq!(fields, want.map(|(n, v)| (n.to_owned(), v.to_owned())));
    // A 1 repeated is fine; a 0 after it is a connection error (RFC 8441 §3), as is a 2.
    feed(&mut client, &settings(&[(setting::ENABLE_CONNECT_PROTOCOL, 1)]), &mut out, &mut sink);
    assert!(client.connect_protocol());
    let withdrawn = client.receive_into(&settings(&[(setting::ENABLE_CONNECT_PROTOCOL, 0)]), &mut out, &mut sink);
    assert!(matches!(withdrawn, Err(ClientError::Protocol(Violation::ConnectProtocolWithdrawn))), "{withdrawn:?}");
    let (mut other, mut out, mut sink) = tunnel(&[], ClientSettings::default());
    let two = other.receive_into(&settings(&[(setting::ENABLE_CONNECT_PROTOCOL, 2)]), &mut out, &mut sink);
    assert!(matches!(two, Err(ClientError::Protocol(Violation::EnableConnectProtocolValue))), "{two:?}");
}

#[test]
fn received_data_in_any_split_reaches_the_sink_and_windows_are_given_back_as_it_is_consumed() {
    let payload: Vec<u8> = (0..4500u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut input = Vec::new();
    for piece in payload.chunks(1500) {
        input.extend(server_frame(kind::DATA, 0, 1, piece));
    }
    // A padded frame too: padding counts for flow control, not as data.
    input.extend(server_frame(kind::DATA, flag::PADDED, 1, &[3, b'x', b'y', 0, 0, 0]));
    let small = ClientSettings { stream_window: 4096, ..ClientSettings::default() };
    for split in [usize::MAX, 7, 1] {
        let (mut client, mut out, mut sink) = tunnel(&[], small);
        for piece in input.chunks(split) {
            feed(&mut client, piece, &mut out, &mut sink);
        }
        let mut want = payload.clone();
        want.extend_from_slice(b"xy");
        assert_eq!(sink.data, want, "delivered {split} octets at a time");
        let given: u32 = frames(&out)
            .iter()
            .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE && h.stream == 1)
            .map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
            .sum();
        // The 4096-octet window is given back once half of it is consumed: 3000 after two frames.
        assert_eq!(given, 3000, "split {split}");
        assert!(sink.events.is_empty(), "{:?}", sink.events);
    }
    // More than the window given (4096 - 1500 = 2596 left after one frame) is a stream error.
    let (mut client, mut out, mut sink) = tunnel(&[], small);
    feed(&mut client, &server_frame(kind::DATA, 0, 1, &[0; 1500]), &mut out, &mut sink);
    feed(&mut client, &server_frame(kind::DATA, 0, 1, &[0; 2597]), &mut out, &mut sink);
    assert_eq!(sink.events, vec![ClientEvent::Malformed { tag: 7 }]);
    assert_eq!(sink.data.len(), 1500, "the frame past the window is not handed on");
}

#[test]
fn bytes_sent_on_a_tunnel_wait_for_the_stream_and_connection_windows() {
    let (mut client, mut out, _sink) = tunnel(&[(setting::INITIAL_WINDOW_SIZE, 100)], ClientSettings::default());
    let bytes: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
    assert!(client.tunnel_send(1, &bytes, &mut out));
    assert_eq!(data_on(&out, 1), (bytes[..100].to_vec(), false), "no DATA beyond the stream's window");
    assert_eq!(client.tunnel_unsent(1), 150);
    client.tunnel_end(1, &mut out);
    assert!(!data_on(&out, 1).1, "END_STREAM waits for the bytes held");
    let mut sink = Sink::default();
    feed(&mut client, &window_update(1, 60), &mut out, &mut sink);
    assert_eq!(data_on(&out, 1), (bytes[..160].to_vec(), false));
    feed(&mut client, &window_update(1, 1000), &mut out, &mut sink);
    assert_eq!(data_on(&out, 1), (bytes.clone(), true), "the last DATA carries END_STREAM");
    assert!(!client.tunnel_send(1, b"more", &mut out), "nothing after the end");

    // The connection's window (65,535 until the server raises it) bounds every stream.
    let (mut client, mut out, mut sink) = tunnel(&[(setting::INITIAL_WINDOW_SIZE, 1 << 20)], ClientSettings::default());
    let big = vec![5u8; 70_000];
    assert!(client.tunnel_send(1, &big, &mut out));
    assert_eq!(data_on(&out, 1).0.len(), 65_535);
    assert!(frames(&out).iter().all(|(h, _)| h.len <= frame::MIN_MAX_FRAME), "no frame past the peer's maximum");
    feed(&mut client, &window_update(0, 10_000), &mut out, &mut sink);
    assert_eq!(data_on(&out, 1), (big, false));
    assert_eq!(client.tunnel_unsent(1), 0);
}

#[test]
fn the_tunnel_closes_once_both_ends_sent_end_stream_in_either_order() {
    // This side first: END_STREAM (an empty DATA), then the server's.
    let (mut client, mut out, mut sink) = tunnel(&[], ClientSettings::default());
    client.tunnel_end(1, &mut out);
    assert_eq!(frames(&out).len(), 1);
    assert_eq!(data_on(&out, 1), (Vec::new(), true));
    assert_eq!(client.open_streams(), 1, "half-closed: the server's bytes may still come");
    feed(&mut client, &server_frame(kind::DATA, 0, 1, b"bye"), &mut out, &mut sink);
    feed(&mut client, &server_frame(kind::DATA, flag::END_STREAM, 1, b""), &mut out, &mut sink);
    assert_eq!(sink.data, b"bye");
    assert_eq!(sink.events, vec![ClientEvent::TunnelEnd { tag: 7 }]);
    assert_eq!(client.open_streams(), 0);

    // The server first: this side may still send, then ends.
    let (mut client, mut out, mut sink) = tunnel(&[], ClientSettings::default());
    feed(&mut client, &server_frame(kind::DATA, flag::END_STREAM, 1, b"last"), &mut out, &mut sink);
    assert_eq!(sink.events, vec![ClientEvent::TunnelEnd { tag: 7 }]);
    assert_eq!(client.open_streams(), 1);
    assert!(client.tunnel_send(1, b"answer", &mut out));
    client.tunnel_end(1, &mut out);
    assert_eq!(data_on(&out, 1), (b"answer".to_vec(), true));
    assert_eq!(client.open_streams(), 0);
}

#[test]
fn a_refused_connect_is_its_status_and_resets_and_goaway_end_tunnels() {
    let mut out = Vec::new();
    let mut sink = Sink::default();
    let mut client = ClientConnection::new(ClientSettings::default(), &mut out);
    feed(&mut client, &settings(&[(setting::ENABLE_CONNECT_PROTOCOL, 1)]), &mut out, &mut sink);
    for tag in 0..3 {
        client.open_tunnel(&block(), tag, &mut out);
    }
    out.clear();
    // 403 without END_STREAM: refused, and this side resets the stream (CANCEL).
    feed(&mut client, &head(403, &[(b"content-length", b"5")], 1, false), &mut out, &mut sink);
    assert_eq!(sink.events, vec![ClientEvent::Response { tag: 0, status: 403, body_len: 0 }]);
    let rst = frames(&out);
    assert_eq!(rst.len(), 1);
    assert_eq!((rst[0].0.kind, rst[0].0.stream), (kind::RST_STREAM, 1));
    assert_eq!(rst[0].1, (ErrorCode::Cancel as u32).to_be_bytes());
    // The body the server had on its way is ignored (the stream was reset here lately).
    out.clear();
    feed(&mut client, &server_frame(kind::DATA, flag::END_STREAM, 1, b"nope!"), &mut out, &mut sink);
    assert!(out.is_empty() && sink.data.is_empty());
    // A tunnel the server resets, and one a GOAWAY leaves out.
    feed(
        &mut client,
        &head(200, &[(b"sec-websocket-extensions", b"permessage-deflate")], 3, false),
        &mut out,
        &mut sink,
    );
    assert_eq!(sink.opened, vec![(1, Some(b"permessage-deflate".to_vec()))]);
    feed(
        &mut client,
        &server_frame(kind::RST_STREAM, 0, 3, &(ErrorCode::Internal as u32).to_be_bytes()),
        &mut out,
        &mut sink,
    );
    let mut goaway = Vec::new();
    frame::put_goaway(&mut goaway, 3, ErrorCode::NoError, b"");
    feed(&mut client, &goaway, &mut out, &mut sink);
    assert_eq!(
        sink.events[1..],
        [
            ClientEvent::Reset { tag: 1, code: ErrorCode::Internal as u32 },
            ClientEvent::GoAway { last_stream: 3, code: 0 },
            ClientEvent::Refused { tag: 2 },
        ]
    );
    assert_eq!(client.open_streams(), 0);
    assert!(!client.tunnel_send(3, b"x", &mut out), "a reset tunnel takes no bytes");
}
