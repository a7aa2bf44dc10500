//! Extended CONNECT (RFC 8441) and tunnels, with plain byte values: a client's frames in, the
//! server's frames out, an echoing [`Tunnels`] as the application.

use std::sync::Arc;
use std::time::Instant;

use crate::frame::{self, flag, kind, setting, ErrorCode, Head, DEFAULT_WINDOW, HEADER_LEN, PREFACE};
use crate::hpack::{test_encode, Decoder, HeaderList};
use crate::tunnel::{Flow, Opening, Tunnels, TUNNEL_SEND_CAP};
use crate::{Connection, Event, Limits, Request, Verdict};

type Frame = (Head, Vec<u8>);

fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut all = Vec::new();
    while !bytes.is_empty() {
        let head = Head::parse(bytes[..HEADER_LEN].try_into().expect("a header"));
        let end = HEADER_LEN + head.len as usize;
        all.push((head, bytes[HEADER_LEN..end].to_vec()));
        bytes = &bytes[end..];
    }
    all
}

fn client_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_head(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        test_encode::literal(&mut out, n.as_bytes(), v.as_bytes());
    }
    out
}

const WS: [(&str, &str); 6] = [
    (":method", "CONNECT"),
    (":protocol", "websocket"),
    (":scheme", "https"),
    (":path", "/chat"),
    (":authority", "a"),
    ("sec-websocket-version", "13"),
];

fn connect(stream: u32, fields: &[(&str, &str)]) -> Vec<u8> {
    client_frame(kind::HEADERS, flag::END_HEADERS, stream, &block(fields))
}

fn data(stream: u32, payload: &[u8], end: bool) -> Vec<u8> {
    client_frame(kind::DATA, if end { flag::END_STREAM } else { 0 }, stream, payload)
}

/// The application: opens tunnels whose protocol is "websocket" (others: 400), echoes every
/// byte (upper-cased, to tell the answer from the input), finishes on "bye" or the peer's end.
#[derive(Default)]
struct Echo {
    opened: Vec<u32>,
    resets: Vec<u32>,
    received: usize,
}

impl Tunnels for Echo {
    fn open(&mut self, request: &Request, _: Instant) -> Opening {
        if request.protocol() != Some(b"websocket") {
            return Opening::Refuse(400, Vec::new());
        }
        self.opened.push(request.stream);
        Opening::Accept(vec![(b"x-tunnel".to_vec(), b"yes".to_vec())])
    }

    fn data(&mut self, _: u32, data: &[u8], end: bool, _: Instant, out: &mut Vec<u8>) -> Flow {
        self.received += data.len();
        out.extend(data.iter().map(u8::to_ascii_uppercase));
        if end || data.ends_with(b"bye") {
            Flow::Finish
        } else {
            Flow::Open
        }
    }

    fn reset(&mut self, stream: u32) {
        self.resets.push(stream);
    }
}

struct Test {
    conn: Connection,
    now: Instant,
    out: Vec<u8>,
    app: Echo,
}

impl Test {
    fn new(extended_connect: bool, peer: &[(u16, u32)]) -> Test {
        let now = Instant::now();
        let mut out = Vec::new();
        let limits = Limits { extended_connect, ..Limits::default() };
        let conn = Connection::new(Arc::new(limits), now, &mut out);
        let mut t = Test { conn, now, out: Vec::new(), app: Echo::default() };
        let mut hello = PREFACE.to_vec();
        frame::put_settings(&mut hello, peer);
        assert_eq!(t.feed(&hello), Verdict::Continue);
        t.out.clear();
        t
    }

    fn feed(&mut self, input: &[u8]) -> Verdict {
        let v = self.conn.receive_with(input, self.now, &mut self.out, &mut self.app);
        self.conn.transmit(self.now, 0, &mut self.out);
        v
    }

    fn take(&mut self) -> Vec<Frame> {
        frames(&std::mem::take(&mut self.out))
    }
}

fn status(frames: &[Frame], stream: u32) -> Option<(u16, bool, HeaderList)> {
    let (head, payload) = frames.iter().find(|(h, _)| h.kind == kind::HEADERS && h.stream == stream)?;
    let mut list = HeaderList::with_limit(1 << 16);
    Decoder::new(4096).decode(payload, &mut list).expect("decodes");
    let status = std::str::from_utf8(list.get(b":status")?).ok()?.parse().ok()?;
    Some((status, head.has(flag::END_STREAM), list))
}

fn rst_code(frames: &[Frame], stream: u32) -> Option<u32> {
    frames
        .iter()
        .find(|(h, _)| h.kind == kind::RST_STREAM && h.stream == stream)
        .map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
}

fn data_of(frames: &[Frame], stream: u32) -> Vec<u8> {
    frames.iter().filter(|(h, _)| h.kind == kind::DATA && h.stream == stream).flat_map(|(_, p)| p.clone()).collect()
}

fn ended(frames: &[Frame], stream: u32) -> bool {
    frames.iter().any(|(h, _)| h.stream == stream && h.kind == kind::DATA && h.has(flag::END_STREAM))
}

fn window_updates(frames: &[Frame], stream: u32) -> u32 {
    frames
        .iter()
        .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE && h.stream == stream)
        .map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
        .sum()
}

fn server_settings(extended_connect: bool) -> Vec<(u16, u32)> {
    let mut out = Vec::new();
    let limits = Limits { extended_connect, ..Limits::default() };
    Connection::new(Arc::new(limits), Instant::now(), &mut out);
    let (head, payload) = &frames(&out)[0];
    assert_eq!(head.kind, kind::SETTINGS);
    payload
        .chunks(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
        .collect()
}

#[test]
fn the_settings_carry_enable_connect_protocol_only_when_on() {
    assert!(server_settings(true).contains(&(setting::ENABLE_CONNECT_PROTOCOL, 1)));
    assert!(!server_settings(false).iter().any(|&(id, _)| id == setting::ENABLE_CONNECT_PROTOCOL));
}

#[test]
fn an_extended_connect_opens_a_tunnel_that_echoes_and_ends_both_ways() {
    let mut t = Test::new(true, &[]);
    t.feed(&connect(1, &WS));
    let f = t.take();
    let (code, end, fields) = status(&f, 1).expect("a response");
    assert_eq!((code, end), (200, false), "200 without END_STREAM");
    assert_eq!(fields.get(b"x-tunnel"), Some(&b"yes"[..]));
    assert_eq!(t.app.opened, [1]);
    assert!(t.conn.poll_event().is_none(), "a tunnel is no request event");
    assert!(t.conn.is_tunnel(1));
    // Any split of the input: each DATA goes through as it comes.
    for piece in [&b"h"[..], b"ello ", b"", b"world"] {
        t.feed(&data(1, piece, false));
    }
    let f = t.take();
    assert_eq!(data_of(&f, 1), b"HELLO WORLD");
    assert!(!ended(&f, 1));
    t.feed(&data(1, b"bye", false));
    let f = t.take();
    assert_eq!(data_of(&f, 1), b"BYE");
    assert!(ended(&f, 1), "the application finished: END_STREAM");
    assert!(t.conn.is_tunnel(1), "open until the peer's END_STREAM");
    t.feed(&data(1, b"", true));
    assert!(!t.conn.is_tunnel(1) && t.conn.open_streams() == 0, "both ended: gone");
    assert!(t.take().iter().all(|(h, _)| h.kind != kind::RST_STREAM));
}

#[test]
fn malformed_extended_connects_are_stream_errors() {
    let without_scheme: Vec<_> = WS.iter().copied().filter(|f| f.0 != ":scheme").collect();
    let without_path: Vec<_> = WS.iter().copied().filter(|f| f.0 != ":path").collect();
    let without_authority: Vec<_> = WS.iter().copied().filter(|f| f.0 != ":authority").collect();
    let mut on_get = WS.to_vec();
    on_get[0].1 = "GET";
    let mut empty = WS.to_vec();
    empty[1].1 = "";
    let cases: [(bool, &[(&str, &str)]); 6] = [
        (false, &WS),
        (true, &without_scheme),
        (true, &without_path),
        (true, &without_authority),
        (true, &on_get),
        (true, &empty),
    ];
    for (on, fields) in cases {
        let mut t = Test::new(on, &[]);
        assert_eq!(t.feed(&connect(1, fields)), Verdict::Continue, "a stream error only");
        let f = t.take();
        assert_eq!(rst_code(&f, 1), Some(ErrorCode::Protocol as u32), "on {on}: {fields:?}");
        assert!(status(&f, 1).is_none() && t.app.opened.is_empty());
        assert_eq!(t.conn.stats().malformed, 1);
        // The connection goes on: a GET is answered.
        t.feed(&client_frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            3,
            &test_encode::request("GET", "/", &[]),
        ));
        assert!(matches!(t.conn.poll_event(), Some(Event::Request(r)) if r.stream == 3));
    }
}

#[test]
fn a_refused_tunnel_gets_its_status_and_a_reset_and_a_plain_connect_is_a_request() {
    let mut t = Test::new(true, &[]);
    let mut other = WS.to_vec();
    other[1].1 = "chat";
    t.feed(&connect(1, &other));
    let f = t.take();
    assert_eq!(status(&f, 1).map(|s| (s.0, s.1)), Some((400, true)));
    assert_eq!(rst_code(&f, 1), Some(ErrorCode::NoError as u32), "the rest of the request is not wanted");
    // DATA already on its way is ignored.
    assert_eq!(t.feed(&data(1, b"x", false)), Verdict::Continue);
    assert!(rst_code(&t.take(), 1).is_none());
    // An extended CONNECT with END_STREAM carries nothing: 400.
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &block(&WS)));
    assert_eq!(status(&t.take(), 3).map(|s| s.0), Some(400));
    // A plain CONNECT is a request, as before.
    t.feed(&client_frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        5,
        &block(&[(":method", "CONNECT"), (":authority", "a:443")]),
    ));
    assert!(matches!(t.conn.poll_event(), Some(Event::Request(r)) if r.stream == 5 && r.protocol().is_none()));
    assert!(t.app.opened.is_empty());
}

/// A peer that gives no window: the answer waits, and once it holds the cap the input's window
/// is no longer given back (the input pauses); a WINDOW_UPDATE lets it out and the window
/// held back is given.
#[test]
fn a_tunnel_that_cannot_send_stops_giving_window_to_its_input() {
    let mut t = Test::new(true, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    t.feed(&connect(1, &WS));
    t.take();
    let chunk = vec![b'a'; 16 << 10];
    let mut given = 0;
    let mut sent = 0;
    // The stream's receive window is 65,535: the peer may send that much, then waits.
    while sent + chunk.len() <= DEFAULT_WINDOW as usize {
        assert_eq!(t.feed(&data(1, &chunk, false)), Verdict::Continue);
        sent += chunk.len();
        let f = t.take();
        assert!(data_of(&f, 1).is_empty(), "no window: nothing sent");
        given += window_updates(&f, 1);
    }
    assert_eq!(t.app.received, sent);
    // The cap (64 KiB) is not reached before the window is spent: half was given back once.
    assert!(given > 0 && (given as usize) < sent, "given back {given} of {sent}");
    // Now over the cap: nothing more is given back, and more input than the window is a
    // flow-control error, so the output stays bounded.
    let left = DEFAULT_WINDOW as usize - sent + given as usize;
    let mut more = left;
    while more > 0 {
        let n = more.min(chunk.len());
        t.feed(&data(1, &chunk[..n], false));
        more -= n;
        given += window_updates(&t.take(), 1);
    }
    let queued = t.app.received;
    assert!(queued >= TUNNEL_SEND_CAP, "{queued}");
    assert!(t.conn.deadline().is_some(), "the window stall runs");
    let before = given;
    t.feed(&data(1, b"x", false));
    let f = t.take();
    assert_eq!(rst_code(&f, 1), Some(ErrorCode::FlowControl as u32), "past the window: {f:?}");
    assert!(window_updates(&f, 1) == 0 && given == before);
}

#[test]
fn output_over_the_cap_holds_the_window_until_it_drains() {
    let mut t = Test::new(true, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    t.feed(&connect(1, &WS));
    t.take();
    let chunk = vec![b'a'; 16 << 10];
    let mut given = 0;
    for _ in 0..3 {
        t.feed(&data(1, &chunk, false));
        given += window_updates(&t.take(), 1);
    }
    // 48 KiB queued: under the cap, the window was given back (a WINDOW_UPDATE once half of
    // it is owed).
    assert_eq!(given, 32 << 10);
    for _ in 0..2 {
        t.feed(&data(1, &chunk, false));
        given += window_updates(&t.take(), 1);
    }
    assert_eq!(given, 32 << 10, "over the cap (80 KiB queued): held back");
    // The peer opens its windows: the output goes, and the held window with it.
    let mut wu = client_frame(kind::WINDOW_UPDATE, 0, 1, &(1u32 << 20).to_be_bytes());
    wu.extend(client_frame(kind::WINDOW_UPDATE, 0, 0, &(1u32 << 20).to_be_bytes()));
    t.feed(&wu);
    let f = t.take();
    assert_eq!(data_of(&f, 1).len(), 80 << 10);
    assert_eq!(window_updates(&f, 1), 48 << 10, "the held back input's window, and what was owed");
}

#[test]
fn a_reset_from_the_peer_ends_the_tunnel() {
    let mut t = Test::new(true, &[]);
    t.feed(&connect(1, &WS));
    t.feed(&data(1, b"abc", false));
    t.take();
    t.feed(&client_frame(kind::RST_STREAM, 0, 1, &(ErrorCode::Cancel as u32).to_be_bytes()));
    assert_eq!(t.app.resets, [1]);
    assert!(!t.conn.is_tunnel(1) && t.conn.open_streams() == 0);
    // HEADERS on a tunnel is malformed.
    t.feed(&connect(3, &WS));
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &block(&[("x", "1")])));
    assert_eq!(rst_code(&t.take(), 3), Some(ErrorCode::Protocol as u32));
}

/// Two tunnels and a GET on one connection; the drain waits for the tunnels to end.
#[test]
fn tunnels_and_requests_share_a_connection_and_the_drain_waits_for_them() {
    let mut t = Test::new(true, &[]);
    let mut input = connect(1, &WS);
    input.extend(connect(3, &WS));
    input.extend(data(3, b"three", false));
    input.extend(client_frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        5,
        &test_encode::request("GET", "/", &[]),
    ));
    input.extend(data(1, b"one", false));
    t.feed(&input);
    let f = t.take();
    assert_eq!((data_of(&f, 1), data_of(&f, 3)), (b"ONE".to_vec(), b"THREE".to_vec()));
    let Some(Event::Request(get)) = t.conn.poll_event() else { panic!("the GET") };
    t.conn.respond(get.stream, 204, &[], crate::Body::Empty, &mut t.out);
    assert_eq!(status(&t.take(), 5).map(|s| s.0), Some(204));
    assert_eq!(t.conn.begin_drain(&mut t.out), Verdict::Continue, "tunnels open");
    // The application finishes its tunnels (as WebSocket's close 1001 would).
    for s in [1, 3] {
        t.conn.send_data(s, bytes::Bytes::from_static(b"end"), true);
    }
    t.conn.transmit(t.now, 0, &mut t.out);
    let f = t.take();
    assert!(ended(&f, 1) && ended(&f, 3));
    t.feed(&data(1, b"", true));
    assert_eq!(t.feed(&data(3, b"", true)), Verdict::Close(crate::Closing::Done));
}

/// A tunnel's two fields (a flag and the window held back) cost an open stream 8 bytes (176
/// before, on x86-64); the connection itself has no new field, so one with no tunnel (or no
/// stream) holds what it held.
const _: () = assert!(crate::server::STREAM_SIZE <= 184, "a stream grew past 184 bytes");
