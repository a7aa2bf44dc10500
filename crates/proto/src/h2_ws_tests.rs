//! WebSocket over HTTP/2 (RFC 8441) through the HTTP responder, with plain byte values: a
//! client's HTTP/2 frames carrying masked WebSocket frames in, the server's frames out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sockscale_h2::hpack::{Decoder, HeaderList};
use sockscale_h2::ErrorCode;

use crate::h2::default_limits;
use crate::http::{HttpConfig, PREFACE};
use crate::ws::WsConfig;
use crate::{Closing, Output, Protocol, Responder, Session, Verdict};

fn port(ws: WsConfig, extended_connect: bool) -> (Responder, Arc<WsConfig>) {
    port_with(ws, extended_connect, false)
}

/// `websocket_only`: `--proto ws`, no pages.
fn port_with(ws: WsConfig, extended_connect: bool, websocket_only: bool) -> (Responder, Arc<WsConfig>) {
    let ws = Arc::new(ws);
    let limits = sockscale_h2::Limits { extended_connect, ..default_limits() };
    let cfg = HttpConfig {
        http2: Some(Arc::new(limits)),
        websocket: Some(ws.clone()),
        websocket_only,
        ..HttpConfig::default()
    };
    (Protocol::Http(Arc::new(cfg)).responder(1_700_000_000), ws)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A header block of literals (no indexing, raw strings shorter than 127 octets).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0);
        out.push(n.len() as u8);
        out.extend_from_slice(n.as_bytes());
        out.push(v.len() as u8);
        out.extend_from_slice(v.as_bytes());
    }
    out
}

const WS: [(&str, &str); 6] = [
    (":method", "CONNECT"),
    (":protocol", "websocket"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "t"),
    ("sec-websocket-version", "13"),
];

fn connect(stream: u32, fields: &[(&str, &str)]) -> Vec<u8> {
    frame(1, 4, stream, &block(fields))
}

fn get(stream: u32) -> Vec<u8> {
    frame(1, 5, stream, &block(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "t")]))
}

/// The client's preface and SETTINGS, its windows (each stream's and the connection's) 1 MiB.
fn opening() -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    v.extend(frame(4, 0, 0, &[0, 4, 0, 0x10, 0, 0]));
    v.extend(frame(8, 0, 0, &((1u32 << 20) - 65_535).to_be_bytes()));
    v
}

/// A masked client WebSocket frame.
fn ws_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n < 65536 => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask = [0x12, 0x34, 0x56, 0x78];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

fn close(code: u16) -> Vec<u8> {
    ws_frame(true, 8, &code.to_be_bytes())
}

/// What the server sent, by stream.
#[derive(Debug, Default)]
struct Got {
    status: HashMap<u32, (u16, HeaderList)>,
    data: HashMap<u32, Vec<u8>>,
    ended: HashMap<u32, bool>,
    reset: HashMap<u32, u32>,
    settings: Vec<(u16, u32)>,
    goaway: bool,
    decoder: Option<Decoder>,
}

impl Got {
    fn add(&mut self, mut bytes: &[u8]) {
        let decoder = self.decoder.get_or_insert_with(|| Decoder::new(4096));
        while bytes.len() >= 9 {
            let len = (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
            let (kind, flags) = (bytes[3], bytes[4]);
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
            let payload = &bytes[9..9 + len];
            match kind {
                0 => self.data.entry(stream).or_default().extend_from_slice(payload),
                1 => {
                    let mut list = HeaderList::with_limit(1 << 16);
                    decoder.decode(payload, &mut list).expect("a header block");
                    let status = std::str::from_utf8(list.get(b":status").unwrap()).unwrap().parse().unwrap();
                    self.status.insert(stream, (status, list));
                }
                3 => {
                    self.reset.insert(stream, u32::from_be_bytes(payload[..4].try_into().unwrap()));
                }
                4 if flags & 1 == 0 => self.settings.extend(
                    payload
                        .chunks(6)
                        .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]]))),
                ),
                7 => self.goaway = true,
                _ => {}
            }
            if matches!(kind, 0 | 1) && flags & 1 == 1 {
                self.ended.insert(stream, true);
            }
            bytes = &bytes[9 + len..];
        }
        assert!(bytes.is_empty(), "whole frames");
    }

    /// The server's WebSocket frames on `stream`: (opcode, payload), all of them whole.
    fn messages(&self, stream: u32) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        let mut b = self.data.get(&stream).map(Vec::as_slice).unwrap_or_default();
        while !b.is_empty() {
            assert_eq!(b[1] & 0x80, 0, "server frames are not masked");
            let (len, at) = match b[1] & 0x7f {
                126 => (usize::from(u16::from_be_bytes([b[2], b[3]])), 4),
                127 => (u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize, 10),
                n => (usize::from(n), 2),
            };
            v.push((b[0] & 0x0f, b[at..at + len].to_vec()));
            b = &b[at + len..];
        }
        v
    }
}

struct Client {
    e: Responder,
    s: Session,
    now: Instant,
    got: Got,
}

impl Client {
    fn new(ws: WsConfig) -> (Client, Arc<WsConfig>) {
        Client::on(port(ws, true))
    }

    fn on((e, config): (Responder, Arc<WsConfig>)) -> (Client, Arc<WsConfig>) {
        let s = e.new_session();
        let mut c = Client { e, s, now: Instant::now(), got: Got::default() };
        assert_eq!(c.feed(&opening()), Verdict::Continue);
        (c, config)
    }

    fn feed(&mut self, input: &[u8]) -> Verdict {
        let mut out = Output::default();
        let v = self.e.on_input(&mut self.s, input, self.now, &mut out);
        self.got.add(&out.to_vec(input));
        v
    }

    fn transmit(&mut self) -> Verdict {
        let mut v = Verdict::Continue;
        let mut rounds = 0;
        while self.e.wants_transmit(&self.s) {
            let mut out = Output::default();
            v = self.e.transmit(&mut self.s, self.now, 0, &mut out);
            self.got.add(&out.to_vec(&[]));
            rounds += 1;
            assert!(rounds < 100, "no progress");
        }
        v
    }

    /// `bytes` as DATA on `stream`, cut at `cuts`.
    fn send(&mut self, stream: u32, bytes: &[u8], cuts: &[usize]) -> Verdict {
        let mut v = Verdict::Continue;
        let mut at = 0;
        for &cut in cuts.iter().chain([&bytes.len()]) {
            v = self.feed(&frame(0, 0, stream, &bytes[at..cut]));
            at = cut;
        }
        v
    }

    fn h2(&self) -> &crate::h2::H2Session {
        match &self.s {
            Session::H2(h2) => h2,
            other => panic!("not HTTP/2: {other:?}"),
        }
    }
}

#[test]
fn the_settings_announce_extended_connect_only_with_websocket_on() {
    let (c, _) = Client::new(WsConfig::default());
    assert!(c.got.settings.contains(&(8, 1)), "{:?}", c.got.settings);
    let (mut e, _) = port(WsConfig::default(), false);
    let mut s = e.new_session();
    let mut out = Output::default();
    e.on_input(&mut s, &opening(), Instant::now(), &mut out);
    let mut got = Got::default();
    got.add(&out.to_vec(&[]));
    assert!(!got.settings.iter().any(|s| s.0 == 8));
}

/// Text and binary messages echoed, however the client's frames are cut into DATA frames
/// (a frame across DATA frames, several frames in one, a message in fragments).
#[test]
fn messages_are_echoed_however_the_data_frames_cut_them() {
    let mut input = ws_frame(true, 1, "héllo over h2".as_bytes());
    input.extend(ws_frame(true, 2, &[0, 1, 2, 255]));
    input.extend(ws_frame(false, 1, b"frag"));
    input.extend(ws_frame(true, 0, b"ment"));
    let big = vec![7u8; 70_000];
    input.extend(ws_frame(true, 2, &big));
    let cut_sets: Vec<Vec<usize>> =
        vec![vec![], vec![1], vec![3, 4, 5, 20, 21], (1..40).collect(), vec![input.len() / 2]];
    for cuts in cut_sets {
        let (mut c, ws) = Client::new(WsConfig::default());
        assert_eq!(c.feed(&connect(1, &WS)), Verdict::Continue);
        let (status, fields) = &c.got.status[&1];
        assert_eq!(*status, 200);
        assert!(fields.get(b"sec-websocket-accept").is_none(), "no accept key over HTTP/2");
        assert!(!c.got.ended.contains_key(&1));
        // The stream window (65,535) is given back as the echo goes: send within it.
        let mut at = 0;
        let mut all_cuts: Vec<usize> = cuts.iter().copied().filter(|&x| x < input.len()).collect();
        all_cuts.extend((16_000..input.len()).step_by(16_000));
        all_cuts.sort_unstable();
        all_cuts.dedup();
        for &cut in all_cuts.iter().chain([&input.len()]) {
            assert_eq!(c.send(1, &input[at..cut], &[]), Verdict::Continue);
            at = cut;
            c.transmit();
        }
        let echoed = c.got.messages(1);
        let want: Vec<(u8, Vec<u8>)> =
            vec![(1, "héllo over h2".into()), (2, vec![0, 1, 2, 255]), (1, b"fragment".to_vec()), (2, big.clone())];
        assert_eq!(echoed.len(), 4, "cuts {cuts:?}");
        assert!(echoed == want, "cuts {cuts:?}");
        drop(c);
        let counts = ws.totals.snapshot();
        assert_eq!((counts.upgrades, counts.upgrades_h2, counts.ended), (1, 1, 1));
    }
}

/// The close handshake ends the stream both ways; the session is counted and gone.
#[test]
fn a_close_handshake_ends_the_stream_with_end_stream() {
    let (mut c, ws) = Client::new(WsConfig::default());
    c.feed(&connect(1, &WS));
    c.send(1, &ws_frame(true, 1, b"hi"), &[]);
    c.send(1, &close(1000), &[]);
    assert_eq!(c.got.messages(1).last(), Some(&(8, 1000u16.to_be_bytes().to_vec())), "the close answered");
    assert!(c.got.ended[&1], "END_STREAM after the close");
    assert!(!c.got.reset.contains_key(&1));
    assert_eq!(c.feed(&frame(0, 1, 1, &[])), Verdict::Continue);
    assert!(c.h2().is_between_requests(), "the stream is gone");
    // The responder's thread tally holds the stage's counts until it is renewed.
    drop(c);
    let counts = ws.totals.snapshot();
    assert_eq!((counts.ended, counts.stats.messages_received, counts.stats.closes_received.get(1000)), (1, 1, 1));
}

#[test]
fn a_reset_from_the_peer_ends_the_session_and_is_counted() {
    let (mut c, ws) = Client::new(WsConfig::default());
    c.feed(&connect(1, &WS));
    c.send(1, &ws_frame(true, 1, b"hi"), &[]);
    assert_eq!(c.feed(&frame(3, 0, 1, &(ErrorCode::Cancel as u32).to_be_bytes())), Verdict::Continue);
    assert!(c.h2().is_between_requests());
    let counts = ws.totals.snapshot();
    assert_eq!((counts.resets_h2, counts.ended), (1, 1));
}

/// Two WebSockets and a GET on one connection; the drain closes each WebSocket with 1001 and
/// the connection ends once both close handshakes are done.
#[test]
fn two_websockets_and_a_get_share_a_connection_and_the_drain_closes_each_with_1001() {
    let (mut c, _) = Client::new(WsConfig::default());
    let mut input = connect(1, &WS);
    input.extend(connect(3, &WS));
    input.extend(get(5));
    input.extend(frame(0, 0, 3, &ws_frame(true, 1, b"three")));
    input.extend(frame(0, 0, 1, &ws_frame(true, 1, b"one")));
    c.feed(&input);
    c.transmit();
    assert_eq!(c.got.messages(1), [(1, b"one".to_vec())]);
    assert_eq!(c.got.messages(3), [(1, b"three".to_vec())]);
    assert_eq!(c.got.status[&5].0, 200);
    assert!(c.got.ended[&5] && !c.got.ended.contains_key(&1));
    c.s.finish_current();
    assert_eq!(c.transmit(), Verdict::Continue);
    assert!(c.got.goaway);
    for s in [1, 3] {
        assert_eq!(c.got.messages(s).last(), Some(&(8, 1001u16.to_be_bytes().to_vec())), "stream {s}");
    }
    assert!(!c.s.is_between_requests());
    // A WebSocket asked for during the drain would be refused (503) but the GOAWAY already
    // ignores new streams; the peers answer the closes.
    c.send(1, &close(1001), &[]);
    assert!(c.got.ended[&1]);
    c.feed(&frame(0, 1, 1, &[]));
    c.send(3, &close(1001), &[]);
    let v = c.feed(&frame(0, 1, 3, &[]));
    let v = if v == Verdict::Continue { c.transmit() } else { v };
    assert_eq!(v, Verdict::Close(Closing::Done));
}

/// Each stream's limits are its own: a message over the limit closes that stream's WebSocket
/// with 1009 and the other goes on; bad UTF-8 is 1007.
#[test]
fn limits_apply_per_stream() {
    let config = WsConfig { session: sockscale_ws::Config { max_message: 1000 }, deflate: None, ..WsConfig::default() };
    let (mut c, _) = Client::new(config);
    c.feed(&connect(1, &WS));
    c.feed(&connect(3, &WS));
    c.feed(&connect(5, &WS));
    c.send(1, &ws_frame(true, 2, &[1; 1001]), &[]);
    c.send(5, &ws_frame(true, 1, &[0xff, 0xfe]), &[]);
    c.send(3, &ws_frame(true, 2, &[1; 1000]), &[]);
    assert_eq!(c.got.messages(1), [(8, 1009u16.to_be_bytes().to_vec())]);
    assert!(c.got.ended[&1]);
    assert_eq!(c.got.messages(5), [(8, 1007u16.to_be_bytes().to_vec())]);
    assert_eq!(c.got.messages(3), [(2, vec![1; 1000])]);
    assert!(!c.got.ended.contains_key(&3));
}

/// The ping budget is each stream's: more than 100 pings in 10 s closes that WebSocket with
/// 1008, and its neighbour's pings are still answered.
#[test]
fn the_ping_budget_is_per_stream() {
    let (mut c, _) = Client::new(WsConfig::default());
    c.feed(&connect(1, &WS));
    c.feed(&connect(3, &WS));
    let pings: Vec<u8> = (0..=sockscale_ws::session::PING_BUDGET).flat_map(|_| ws_frame(true, 9, b"p")).collect();
    c.send(1, &pings, &[]);
    c.send(3, &ws_frame(true, 9, b"q"), &[]);
    let one = c.got.messages(1);
    assert_eq!(one.iter().filter(|m| m.0 == 10).count(), usize::from(sockscale_ws::session::PING_BUDGET));
    assert_eq!(one.last(), Some(&(8, 1008u16.to_be_bytes().to_vec())));
    assert!(c.got.ended[&1]);
    assert_eq!(c.got.messages(3), [(10, b"q".to_vec())]);
}

#[test]
fn other_protocols_versions_and_deflate_are_answered_as_on_http1() {
    let (mut c, ws) = Client::new(WsConfig::default());
    let mut other = WS.to_vec();
    other[1].1 = "chat";
    c.feed(&connect(1, &other));
    assert_eq!(c.got.status[&1].0, 400);
    let mut v8 = WS.to_vec();
    v8[5].1 = "8";
    c.feed(&connect(3, &v8));
    let (status, fields) = &c.got.status[&3];
    assert_eq!((*status, fields.get(b"sec-websocket-version")), (426, Some(&b"13"[..])));
    let mut deflate = WS.to_vec();
    deflate.push(("sec-websocket-extensions", "permessage-deflate"));
    c.feed(&connect(5, &deflate));
    let (status, fields) = &c.got.status[&5];
    assert_eq!(*status, 200);
    assert!(fields.get(b"sec-websocket-extensions").is_some_and(|v| v.starts_with(b"permessage-deflate")));
    let counts = ws.totals.snapshot();
    assert_eq!((counts.upgrades_h2, counts.refused_426), (1, 1));
}

/// `--proto ws` over HTTP/2: a WebSocket-only port answers any other request 405 with
/// `allow: CONNECT` (426 needs an `Upgrade` field, which HTTP/2 forbids), counted, and still
/// takes WebSockets on the same connection.
#[test]
fn a_websocket_only_port_answers_other_requests_405_and_takes_websockets() {
    let (mut c, ws) = Client::on(port_with(WsConfig::default(), true, true));
    c.feed(&get(1));
    let (status, fields) = &c.got.status[&1];
    assert_eq!((*status, fields.get(b"allow")), (405, Some(&b"CONNECT"[..])));
    assert_eq!(fields.get(b"content-length"), Some(&b"0"[..]));
    c.feed(&connect(3, &WS));
    assert_eq!(c.got.status[&3].0, 200);
    c.feed(&frame(0, 0, 3, &ws_frame(true, 1, b"still")));
    assert_eq!(c.got.messages(3), [(1, b"still".to_vec())]);
    let counts = ws.totals.snapshot();
    assert_eq!((counts.refused_405, counts.upgrades_h2, counts.refused_426), (1, 1, 0));
    // On a port with pages, the same request gets the page.
    let (mut pages, _) = Client::new(WsConfig::default());
    pages.feed(&get(1));
    assert_eq!(pages.got.status[&1].0, 200);
}

/// `--ws-ping` per stream: the connection's deadline is the ping's, the timer marks it owed,
/// and the transmit sends it on that stream; unanswered by the next, 1001 and END_STREAM.
#[test]
fn each_stream_is_pinged_and_an_unanswered_ping_ends_it() {
    let every = Duration::from_secs(5);
    let (mut c, ws) = Client::new(WsConfig { ping: Some(every), ..WsConfig::default() });
    c.feed(&connect(1, &WS));
    let due = c.e.deadline(&c.s).expect("the ping timer");
    assert_eq!(due, c.now + every);
    c.now = due;
    let mut out = Output::default();
    assert_eq!(c.e.on_timeout(&mut c.s, c.now, &mut out), Verdict::Continue);
    c.transmit();
    assert_eq!(c.got.messages(1), [(9, 1u64.to_be_bytes().to_vec())], "a ping");
    c.now += every;
    let mut out = Output::default();
    c.e.on_timeout(&mut c.s, c.now, &mut out);
    c.transmit();
    assert_eq!(c.got.messages(1).last(), Some(&(8, 1001u16.to_be_bytes().to_vec())));
    assert!(c.got.ended[&1]);
    drop(c);
    assert_eq!(ws.totals.snapshot().stats.ping_timeouts, 1);
}
