//! The connection driven with plain byte values: a client's frames in, the server's frames out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::frame::{self, flag, kind, setting, ErrorCode, Head, HEADER_LEN, PREFACE};
use crate::hpack::{test_encode, Decoder, HeaderList};
use crate::{Body, Budget, Closing, Connection, Event, Limit, Limits, Verdict};

/// A server frame: header and payload.
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

fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_settings(&mut out, values);
    out
}

fn get(stream: u32) -> Vec<u8> {
    client_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, stream, &test_encode::request("GET", "/", &[]))
}

fn window_update(stream: u32, n: u32) -> Vec<u8> {
    client_frame(kind::WINDOW_UPDATE, 0, stream, &n.to_be_bytes())
}

fn rst(stream: u32) -> Vec<u8> {
    client_frame(kind::RST_STREAM, 0, stream, &(ErrorCode::Cancel as u32).to_be_bytes())
}

fn ping(n: u8) -> Vec<u8> {
    client_frame(kind::PING, 0, 0, &[n; 8])
}

struct Test {
    conn: Connection,
    now: Instant,
    /// Everything the server wrote since the last look.
    out: Vec<u8>,
}

impl Test {
    fn new(limits: Limits) -> Self {
        let now = Instant::now();
        let mut out = Vec::new();
        let conn = Connection::new(Arc::new(limits), now, &mut out);
        Test { conn, now, out }
    }

    /// A connection past the preface and the SETTINGS exchange, its output so far dropped.
    fn open(limits: Limits, peer: &[(u16, u32)]) -> Self {
        let mut t = Test::new(limits);
        let mut hello = PREFACE.to_vec();
        hello.extend(settings(peer));
        assert_eq!(t.feed(&hello), Verdict::Continue);
        t.out.clear();
        t
    }

    fn feed(&mut self, input: &[u8]) -> Verdict {
        self.conn.receive(input, self.now, &mut self.out)
    }

    fn take(&mut self) -> Vec<Frame> {
        frames(&std::mem::take(&mut self.out))
    }

    fn requests(&mut self) -> Vec<crate::Request> {
        std::iter::from_fn(|| self.conn.poll_event()).map(|Event::Request(r)| r).collect()
    }

    fn answer(&mut self, stream: u32, body: &[u8]) {
        let len = body.len().to_string();
        self.conn.respond(
            stream,
            200,
            &[(b"content-length", len.as_bytes())],
            Body::Bytes(Bytes::copy_from_slice(body)),
            &mut self.out,
        );
    }

    fn transmit(&mut self) -> Verdict {
        self.conn.transmit(self.now, 0, &mut self.out)
    }
}

fn kinds(frames: &[Frame]) -> Vec<(u8, u32)> {
    frames.iter().map(|(h, _)| (h.kind, h.stream)).collect()
}

fn goaway(frames: &[Frame]) -> Option<(u32, u32)> {
    frames
        .iter()
        .find(|(h, _)| h.kind == kind::GOAWAY)
        .map(|(_, p)| (u32::from_be_bytes([p[0], p[1], p[2], p[3]]), u32::from_be_bytes([p[4], p[5], p[6], p[7]])))
}

fn rst_code(frames: &[Frame], stream: u32) -> Option<u32> {
    frames
        .iter()
        .find(|(h, _)| h.kind == kind::RST_STREAM && h.stream == stream)
        .map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
}

fn data_len(frames: &[Frame], stream: u32) -> usize {
    frames.iter().filter(|(h, _)| h.kind == kind::DATA && h.stream == stream).map(|(_, p)| p.len()).sum()
}

fn ended(frames: &[Frame], stream: u32) -> bool {
    frames
        .iter()
        .any(|(h, _)| h.stream == stream && matches!(h.kind, kind::DATA | kind::HEADERS) && h.has(flag::END_STREAM))
}

#[test]
fn the_server_speaks_first_and_acknowledges_the_client_settings() {
    let limits = Limits { max_concurrent_streams: 7, ..Limits::default() };
    let mut t = Test::new(limits);
    let first = t.take();
    assert_eq!(kinds(&first), [(kind::SETTINGS, 0), (kind::WINDOW_UPDATE, 0)]);
    let payload = &first[0].1;
    assert_eq!(&payload[..6], &[0, setting::MAX_CONCURRENT_STREAMS as u8, 0, 0, 0, 7]);
    // The preface in two pieces, then the client's SETTINGS.
    assert_eq!(t.feed(&PREFACE[..10]), Verdict::Continue);
    assert_eq!(t.feed(&PREFACE[10..]), Verdict::Continue);
    assert!(t.take().is_empty());
    assert_eq!(t.feed(&settings(&[(setting::INITIAL_WINDOW_SIZE, 1000)])), Verdict::Continue);
    let ack = t.take();
    assert_eq!(kinds(&ack), [(kind::SETTINGS, 0)]);
    assert!(ack[0].0.has(flag::ACK));
    assert!(t.conn.is_between_requests());
}

#[test]
fn a_wrong_preface_or_a_first_frame_other_than_settings_is_a_protocol_error() {
    let mut t = Test::new(Limits::default());
    t.take();
    assert_eq!(t.feed(b"GET / HTTP/1.1\r\n"), Verdict::Close(Closing::Protocol(ErrorCode::Protocol)));
    assert_eq!(goaway(&t.take()), Some((0, ErrorCode::Protocol as u32)));
    let mut t = Test::new(Limits::default());
    let mut hello = PREFACE.to_vec();
    hello.extend(ping(1));
    assert_eq!(t.feed(&hello), Verdict::Close(Closing::Protocol(ErrorCode::Protocol)));
}

#[test]
fn a_get_on_stream_1_is_answered() {
    let mut t = Test::open(Limits::default(), &[]);
    assert_eq!(t.feed(&get(1)), Verdict::Continue);
    let requests = t.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!((r.stream, r.method(), r.path(), r.authority()), (1, &b"GET"[..], &b"/"[..], Some(&b"localhost"[..])));
    t.answer(1, &[b'x'; 4096]);
    assert_eq!(t.transmit(), Verdict::Continue);
    let out = t.take();
    assert_eq!(kinds(&out), [(kind::HEADERS, 1), (kind::DATA, 1)]);
    let mut fields = HeaderList::with_limit(1 << 16);
    Decoder::new(4096).decode(&out[0].1, &mut fields).expect("decodes");
    assert_eq!(fields.get(b":status"), Some(&b"200"[..]));
    assert_eq!(fields.get(b"content-length"), Some(&b"4096"[..]));
    assert_eq!(data_len(&out, 1), 4096);
    assert!(ended(&out, 1));
    assert_eq!(t.conn.open_streams(), 0);
    assert_eq!(t.conn.stats().requests, 1);
}

#[test]
fn many_streams_are_answered_each_in_turn() {
    let mut t = Test::open(Limits::default(), &[]);
    let input: Vec<u8> = (0..20).flat_map(|i| get(2 * i + 1)).collect();
    t.feed(&input);
    let requests = t.requests();
    assert_eq!(requests.iter().map(|r| r.stream).collect::<Vec<_>>(), (0..20).map(|i| 2 * i + 1).collect::<Vec<_>>());
    for r in &requests {
        t.answer(r.stream, &[b'y'; 1000]);
    }
    t.transmit();
    let out = t.take();
    for r in &requests {
        assert_eq!(data_len(&out, r.stream), 1000);
        assert!(ended(&out, r.stream));
    }
    assert_eq!(t.conn.open_streams(), 0);
}

#[test]
fn data_waits_for_the_window_and_goes_on_after_window_update() {
    let mut t = Test::open(Limits::default(), &[(setting::INITIAL_WINDOW_SIZE, 100)]);
    t.feed(&get(1));
    t.requests();
    t.answer(1, &[b'z'; 4096]);
    t.transmit();
    let out = t.take();
    assert_eq!(data_len(&out, 1), 100);
    assert!(!ended(&out, 1));
    assert_eq!(t.conn.window_stalled_since(), Some(t.now));
    // The stream window opens; the connection's (65,535) still has room.
    t.feed(&window_update(1, 10_000));
    t.transmit();
    let out = t.take();
    assert_eq!(data_len(&out, 1), 3996);
    assert!(ended(&out, 1));
    assert_eq!(t.conn.window_stalled_since(), None);
}

#[test]
fn the_connection_window_bounds_every_stream_together() {
    let mut t = Test::open(Limits::default(), &[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
    t.feed(&[get(1), get(3)].concat());
    t.requests();
    t.answer(1, &[1; 50_000]);
    t.answer(3, &[3; 50_000]);
    t.transmit();
    let out = t.take();
    assert_eq!(data_len(&out, 1) + data_len(&out, 3), 65_535);
    t.feed(&window_update(0, 1 << 20));
    t.transmit();
    let out = t.take();
    assert_eq!(data_len(&out, 1) + data_len(&out, 3), 100_000 - 65_535);
    assert!(ended(&out, 1) && ended(&out, 3));
}

#[test]
fn a_peer_that_never_opens_its_window_is_cut_off_at_the_window_timeout() {
    let limits = Limits { window_timeout: Some(Duration::from_secs(5)), ..Limits::default() };
    let mut t = Test::open(limits, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    t.feed(&get(1));
    t.requests();
    t.answer(1, b"hello");
    t.transmit();
    assert_eq!(data_len(&t.take(), 1), 0);
    let due = t.conn.deadline().expect("a deadline");
    assert_eq!(due, t.now + Duration::from_secs(5));
    assert_eq!(t.conn.on_timer(due - Duration::from_millis(1), &mut t.out), Verdict::Continue);
    assert_eq!(t.conn.on_timer(due, &mut t.out), Verdict::Close(Closing::Limit(Limit::WindowStall)));
    assert_eq!(goaway(&t.take()), Some((1, ErrorCode::FlowControl as u32)));
    assert_eq!(t.conn.stats().hits(Limit::WindowStall), 1);
}

#[test]
fn rst_stream_mid_response_stops_its_data() {
    let mut t = Test::open(Limits::default(), &[(setting::INITIAL_WINDOW_SIZE, 1000)]);
    t.feed(&get(1));
    t.requests();
    t.answer(1, &[0; 10_000]);
    t.transmit();
    assert_eq!(data_len(&t.take(), 1), 1000);
    t.feed(&[rst(1), window_update(1, 50_000)].concat());
    t.transmit();
    let out = t.take();
    assert_eq!(data_len(&out, 1), 0);
    assert!(out.is_empty(), "a WINDOW_UPDATE on a stream the peer reset is ignored: {:?}", kinds(&out));
    assert_eq!(t.conn.open_streams(), 0);
    assert_eq!(t.conn.stats().resets_received, 1);
}

#[test]
fn rapid_reset_is_bounded() {
    let limits = Limits { resets: Budget::new(10, Duration::from_secs(1)), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let mut flood = Vec::new();
    for i in 0..50 {
        let open = client_frame(kind::HEADERS, flag::END_HEADERS, 2 * i + 1, &test_encode::request("GET", "/", &[]));
        flood.extend(open);
        flood.extend(rst(2 * i + 1));
    }
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::RapidReset)));
    assert_eq!(goaway(&t.take()), Some((21, ErrorCode::EnhanceYourCalm as u32)));
    assert_eq!(t.conn.stats().hits(Limit::RapidReset), 1);
    assert_eq!(t.conn.stats().resets_received, 11);
    // Once closed, input is not even parsed.
    assert_eq!(t.feed(&get(101)), Verdict::Close(Closing::Limit(Limit::RapidReset)));
    assert!(t.take().is_empty());
    // Within the budget, spread over time, resets are fine.
    let limits = Limits { resets: Budget::new(10, Duration::from_secs(1)), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    for i in 0..30 {
        t.now += Duration::from_millis(200);
        let open = client_frame(kind::HEADERS, flag::END_HEADERS, 2 * i + 1, &test_encode::request("GET", "/", &[]));
        assert_eq!(t.feed(&[open, rst(2 * i + 1)].concat()), Verdict::Continue);
    }
}

#[test]
fn provoked_resets_count_against_the_same_budget() {
    // "Made you reset": WINDOW_UPDATE of 0 on each stream makes the server reset it.
    let limits = Limits { resets: Budget::new(5, Duration::from_secs(1)), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let mut flood = Vec::new();
    for i in 0..10 {
        flood.extend(client_frame(kind::HEADERS, flag::END_HEADERS, 2 * i + 1, &test_encode::request("GET", "/", &[])));
        flood.extend(window_update(2 * i + 1, 0));
    }
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::RapidReset)));
}

#[test]
fn a_continuation_flood_is_bounded_by_frames_and_by_bytes() {
    let limits = Limits { max_continuations: 8, ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let block = test_encode::request("GET", "/", &[]);
    let mut flood = client_frame(kind::HEADERS, 0, 1, &block[..4]);
    for _ in 0..100 {
        flood.extend(client_frame(kind::CONTINUATION, 0, 1, &[0x00, 0x01, b'a', 0x01, b'b'][..1]));
    }
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::ContinuationFlood)));
    assert_eq!(goaway(&t.take()).map(|g| g.1), Some(ErrorCode::EnhanceYourCalm as u32));
    assert_eq!(t.conn.stats().hits(Limit::ContinuationFlood), 1);

    let limits = Limits { max_header_block: 20_000, ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let mut flood = client_frame(kind::HEADERS, 0, 1, &[0; 16_000]);
    flood.extend(client_frame(kind::CONTINUATION, 0, 1, &[0; 16_000]));
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::ContinuationFlood)));
    // A legitimate block in three frames is decoded as one.
    let mut t = Test::open(Limits::default(), &[]);
    let mut split = client_frame(kind::HEADERS, flag::END_STREAM, 1, &block[..5]);
    split.extend(client_frame(kind::CONTINUATION, 0, 1, &block[5..10]));
    split.extend(client_frame(kind::CONTINUATION, flag::END_HEADERS, 1, &block[10..]));
    assert_eq!(t.feed(&split), Verdict::Continue);
    assert_eq!(t.requests().len(), 1);
}

#[test]
fn ping_and_settings_floods_are_bounded() {
    let limits = Limits { pings: Budget::new(5, Duration::from_secs(10)), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let flood: Vec<u8> = (0..100).flat_map(ping).collect();
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::PingFlood)));
    let out = t.take();
    assert_eq!(out.iter().filter(|(h, _)| h.kind == kind::PING && h.has(flag::ACK)).count(), 5);
    assert_eq!(goaway(&out).map(|g| g.1), Some(ErrorCode::EnhanceYourCalm as u32));

    let limits = Limits { settings: Budget::new(3, Duration::from_secs(10)), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let flood: Vec<u8> = (0..100).flat_map(|_| settings(&[])).collect();
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::SettingsFlood)));
    assert_eq!(t.take().iter().filter(|(h, _)| h.kind == kind::SETTINGS).count(), 2, "the first was the hello's");
    assert_eq!(t.conn.stats().hits(Limit::SettingsFlood), 1);
}

#[test]
fn empty_frames_are_bounded() {
    let limits = Limits { empty_frames: Budget::new(50, Duration::from_secs(10)), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS, 1, &test_encode::request("POST", "/", &[])));
    let flood: Vec<u8> = (0..100).flat_map(|_| client_frame(kind::DATA, 0, 1, &[])).collect();
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::EmptyFrames)));
}

/// The server sends no PING and one SETTINGS: PING acknowledgements, and SETTINGS ones past
/// the first, answer nothing asked and carry nothing, so they spend the empty-frame budget.
#[test]
fn acknowledgements_nobody_asked_for_are_empty_frames() {
    let limits = Limits { empty_frames: Budget::new(50, Duration::from_secs(10)), ..Limits::default() };
    let mut t = Test::open(limits.clone(), &[]);
    let flood: Vec<u8> = (0..100).flat_map(|n| client_frame(kind::PING, flag::ACK, 0, &[n; 8])).collect();
    assert_eq!(t.feed(&flood), Verdict::Close(Closing::Limit(Limit::EmptyFrames)));
    assert_eq!(goaway(&t.take()).map(|g| g.1), Some(ErrorCode::EnhanceYourCalm as u32));
    assert_eq!(t.conn.stats().hits(Limit::EmptyFrames), 1);

    let mut t = Test::open(limits, &[]);
    let ack = client_frame(kind::SETTINGS, flag::ACK, 0, &[]);
    // The acknowledgement of the server's SETTINGS, then 50 more within the budget.
    for _ in 0..51 {
        assert_eq!(t.feed(&ack), Verdict::Continue);
    }
    assert_eq!(t.feed(&ack), Verdict::Close(Closing::Limit(Limit::EmptyFrames)));
    assert_eq!(t.conn.stats().hits(Limit::EmptyFrames), 1);
}

#[test]
fn streams_past_the_limit_are_refused() {
    let limits = Limits { max_concurrent_streams: 3, ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let open = |id| client_frame(kind::HEADERS, flag::END_HEADERS, id, &test_encode::request("POST", "/", &[]));
    t.feed(&[open(1), open(3), open(5), open(7)].concat());
    let out = t.take();
    assert_eq!(rst_code(&out, 7), Some(ErrorCode::RefusedStream as u32));
    assert_eq!(t.conn.open_streams(), 3);
    assert_eq!(t.conn.stats().hits(Limit::RefusedStream), 1);
}

#[test]
fn a_header_list_too_large_gets_431_and_the_connection_goes_on() {
    let limits = Limits { max_header_list_size: 200, ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    let big = "v".repeat(300);
    let block = test_encode::request("GET", "/", &[("x-big", &big)]);
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block));
    assert!(t.requests().is_empty());
    let out = t.take();
    let mut fields = HeaderList::with_limit(1 << 16);
    Decoder::new(4096).decode(&out[0].1, &mut fields).expect("decodes");
    assert_eq!(fields.get(b":status"), Some(&b"431"[..]));
    assert!(ended(&out, 1));
    assert_eq!(t.conn.stats().hits(Limit::HeaderListTooLarge), 1);
    t.feed(&get(3));
    assert_eq!(t.requests().len(), 1);
}

#[test]
fn a_request_body_is_counted_and_its_window_given_back() {
    let mut t = Test::open(Limits::default(), &[]);
    let head = test_encode::request("POST", "/", &[("content-length", "40000")]);
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS, 1, &head));
    for _ in 0..3 {
        t.feed(&client_frame(kind::DATA, 0, 1, &[7; 12_000]));
    }
    let out = t.take();
    // Half the stream's window (65,535) was used: it is given back.
    assert_eq!(kinds(&out), [(kind::WINDOW_UPDATE, 1)]);
    t.feed(&client_frame(kind::DATA, flag::END_STREAM, 1, &[7; 4_000]));
    let requests = t.requests();
    assert_eq!((requests[0].stream, requests[0].body_len), (1, 40_000));
    // A body that does not match its content-length is malformed.
    let head = test_encode::request("POST", "/", &[("content-length", "10")]);
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS, 3, &head));
    t.feed(&client_frame(kind::DATA, flag::END_STREAM, 3, &[7; 11]));
    assert_eq!(rst_code(&t.take(), 3), Some(ErrorCode::Protocol as u32));
}

#[test]
fn the_drain_sends_goaway_with_the_last_stream_and_finishes_what_is_open() {
    let mut t = Test::open(Limits::default(), &[]);
    t.feed(&[get(1), get(3)].concat());
    let requests = t.requests();
    assert_eq!(t.conn.begin_drain(&mut t.out), Verdict::Continue);
    assert_eq!(goaway(&t.take()), Some((3, ErrorCode::NoError as u32)));
    // A stream opened after the GOAWAY is not processed.
    t.feed(&get(5));
    assert!(t.requests().is_empty());
    t.answer(requests[0].stream, b"one");
    assert_eq!(t.transmit(), Verdict::Continue);
    t.answer(requests[1].stream, b"two");
    assert_eq!(t.transmit(), Verdict::Close(Closing::Done));
    let out = t.take();
    assert!(ended(&out, 1) && ended(&out, 3));
    assert!(!out.iter().any(|(h, _)| h.stream == 5));
}

#[test]
fn a_slow_header_block_meets_the_header_timeout() {
    let limits = Limits { header_timeout: Duration::from_secs(3), ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    assert_eq!(t.conn.deadline(), None);
    let block = test_encode::request("GET", "/", &[]);
    t.feed(&client_frame(kind::HEADERS, 0, 1, &block));
    assert_eq!(t.conn.deadline(), Some(t.now + Duration::from_secs(3)));
    let late = t.now + Duration::from_secs(3);
    assert_eq!(t.conn.on_timer(late, &mut t.out), Verdict::Close(Closing::Limit(Limit::HeaderTimeout)));
    assert_eq!(t.conn.stats().hits(Limit::HeaderTimeout), 1);
    // So does a silent connection that never sent its preface.
    let t = Test::new(Limits { header_timeout: Duration::from_secs(3), ..Limits::default() });
    assert_eq!(t.conn.deadline(), Some(t.now + Duration::from_secs(3)));
    // But a DATA frame on its way is an upload, not a slow header.
    let mut t = Test::open(Limits::default(), &[]);
    t.feed(&client_frame(kind::HEADERS, flag::END_HEADERS, 1, &test_encode::request("POST", "/", &[])));
    t.feed(&client_frame(kind::DATA, 0, 1, &[1; 100])[..50]);
    assert_eq!(t.conn.deadline(), None);
}

#[test]
fn output_stays_under_the_cap() {
    let limits = Limits { output_cap: 40_000, ..Limits::default() };
    let mut t = Test::open(limits, &[(setting::INITIAL_WINDOW_SIZE, 1 << 30)]);
    t.feed(&[get(1), window_update(0, 1 << 30)].concat());
    t.requests();
    t.answer(1, &vec![5; 1 << 20]);
    t.out.clear();
    t.conn.transmit(t.now, 0, &mut t.out);
    assert!(t.out.len() <= 40_000, "{}", t.out.len());
    let first = t.out.len();
    // The engine still holds all of it unsent: nothing more.
    t.out.clear();
    t.conn.transmit(t.now, first, &mut t.out);
    assert!(t.out.is_empty());
    // A peer that does not read is no window stall: that is the engine's send timeout.
    assert_eq!(t.conn.window_stalled_since(), None);
}

#[test]
fn a_body_in_chunks_is_asked_for_as_the_window_allows() {
    let mut t = Test::open(Limits::default(), &[]);
    t.feed(&get(1));
    t.requests();
    t.conn.respond(1, 200, &[], Body::Chunks, &mut t.out);
    assert_eq!(t.conn.wants_data(), Some((1, 65_535)));
    t.conn.send_data(1, Bytes::from_static(b"first "), false);
    assert_eq!(t.conn.wants_data(), None);
    t.transmit();
    assert_eq!(t.conn.wants_data(), Some((1, 65_535 - 6)));
    t.conn.send_data(1, Bytes::from_static(b"last"), true);
    t.transmit();
    let out = t.take();
    assert_eq!(data_len(&out, 1), 10);
    assert!(ended(&out, 1));
    assert_eq!(t.conn.open_streams(), 0);
}

/// A chunked body says where its next chunk starts, and a chunked stream that waits on a shut
/// window (nothing queued) is a window stall, as a queued body is: the window timeout applies.
#[test]
fn a_chunked_body_counts_what_was_given_and_a_shut_window_is_a_stall() {
    let mut t = Test::open(Limits::default(), &[(setting::INITIAL_WINDOW_SIZE, 10)]);
    t.feed(&get(1));
    t.requests();
    assert_eq!(t.conn.chunks_given(1), None, "not answered yet");
    t.conn.respond(1, 200, &[], Body::Chunks, &mut t.out);
    assert_eq!(t.conn.chunks_given(1), Some(0));
    assert_eq!(t.conn.wants_data(), Some((1, 10)));
    t.conn.send_data(1, Bytes::from_static(b"0123456789"), false);
    assert_eq!(t.conn.chunks_given(1), Some(10));
    t.transmit();
    assert_eq!(data_len(&t.take(), 1), 10);
    assert_eq!(t.conn.wants_data(), None, "the window is spent");
    assert_eq!(t.conn.window_stalled_since(), Some(t.now), "waiting on the peer, nothing queued");
    let later = t.now + Duration::from_secs(1);
    assert_eq!(t.conn.deadline(), t.now.checked_add(Limits::default().window_timeout.unwrap()));
    t.feed(&window_update(1, 5));
    t.conn.transmit(later, 0, &mut t.out);
    assert_eq!(t.conn.window_stalled_since(), None, "an open window waits on the application: no stall");
    assert_eq!(t.conn.wants_data(), Some((1, 5)));
}

/// The application resets a stream it cannot finish (its body file shrank): RST_STREAM with
/// its code, the stream is gone, the other streams and the connection go on, and the peer's
/// reset budget is not charged.
#[test]
fn the_application_resets_a_stream_it_cannot_finish() {
    let limits = Limits { resets: Budget { count: 1, per: Duration::from_secs(10) }, ..Limits::default() };
    let mut t = Test::open(limits, &[]);
    t.feed(&[get(1), get(3), get(5)].concat());
    t.requests();
    for stream in [1, 3, 5] {
        t.conn.respond(stream, 200, &[], Body::Chunks, &mut t.out);
    }
    t.take();
    t.conn.reset_stream(1, ErrorCode::Internal, &mut t.out);
    t.conn.reset_stream(3, ErrorCode::Internal, &mut t.out);
    t.conn.reset_stream(9, ErrorCode::Internal, &mut t.out);
    let out = t.take();
    assert_eq!(rst_code(&out, 1), Some(ErrorCode::Internal as u32));
    assert_eq!(rst_code(&out, 3), Some(ErrorCode::Internal as u32));
    assert_eq!(kinds(&out).len(), 2, "no stream 9: nothing: {out:?}");
    assert_eq!(t.conn.open_streams(), 1);
    assert_eq!(t.conn.stats().resets_sent, 2);
    // DATA the peer sent before it saw the reset is ignored, not an error.
    assert_eq!(t.feed(&window_update(1, 100)), Verdict::Continue);
    t.conn.send_data(5, Bytes::from_static(b"end"), true);
    assert_eq!(t.transmit(), Verdict::Continue);
    let out = t.take();
    assert_eq!((data_len(&out, 5), ended(&out, 5), goaway(&out)), (3, true, None));
    assert!(t.conn.is_between_requests());
}

/// An idle connection holds no buffer: no partial frame, no streams, no events.
#[test]
fn an_idle_connection_holds_no_buffer() {
    let mut t = Test::open(Limits::default(), &[]);
    let block = test_encode::request("GET", "/", &[]);
    let frame = client_frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block);
    t.feed(&frame[..7]);
    assert!(t.conn.buffered() > 0);
    t.feed(&frame[7..]);
    t.requests();
    t.answer(1, b"done");
    t.transmit();
    assert_eq!(t.conn.buffered(), 0);
    assert!(t.conn.is_between_requests());
}

/// A client's whole conversation, fed at once and one byte at a time, gives the same output
/// and the same requests.
#[test]
fn bytes_fed_one_at_a_time_give_the_same_result() {
    let block = test_encode::request("POST", "/upload", &[("content-length", "5"), ("user-agent", "test")]);
    let mut talk = PREFACE.to_vec();
    talk.extend(settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 16)]));
    talk.extend(client_frame(kind::HEADERS, 0, 1, &block[..6]));
    talk.extend(client_frame(kind::CONTINUATION, flag::END_HEADERS, 1, &block[6..]));
    talk.extend(client_frame(kind::DATA, flag::PADDED, 1, &[3, b'a', b'b', 0, 0, 0]));
    talk.extend(ping(9));
    talk.extend(client_frame(kind::DATA, flag::END_STREAM, 1, b"cde"));
    talk.extend(get(3));
    talk.extend(client_frame(kind::PRIORITY, 0, 5, &[0, 0, 0, 3, 16]));
    talk.extend(client_frame(0xfa, 0, 0, b"unknown"));
    talk.extend(window_update(0, 1000));

    let run = |pieces: &mut dyn Iterator<Item = &[u8]>| {
        let mut t = Test::new(Limits::default());
        let mut requests = Vec::new();
        for piece in pieces {
            assert_eq!(t.feed(piece), Verdict::Continue);
            requests.extend(t.requests());
        }
        (t.out, requests)
    };
    let whole = run(&mut std::iter::once(&talk[..]));
    let bytes = run(&mut talk.chunks(1));
    assert_eq!(whole, bytes);
    assert_eq!(whole.1.len(), 2);
    assert_eq!((whole.1[0].path(), whole.1[0].body_len), (&b"/upload"[..], 5));
    // Every split in two gives the same too.
    for at in 0..talk.len() {
        let (a, b) = talk.split_at(at);
        assert_eq!(run(&mut [a, b].into_iter()), whole, "split at {at}");
    }
}

/// Arbitrary input after the preface never panics, and the connection's memory stays bounded.
#[test]
fn arbitrary_frames_never_panic() {
    use proptest::prelude::*;
    proptest!(|(input in proptest::collection::vec(any::<u8>(), 0..2000), cut in 0usize..2000)| {
        let mut t = Test::open(Limits::default(), &[]);
        let cut = cut.min(input.len());
        let _ = t.feed(&input[..cut]);
        let _ = t.feed(&input[cut..]);
        t.requests();
        let _ = t.transmit();
        prop_assert!(t.conn.buffered() < 1 << 20);
    });
}
