//! The client `Connection` over HTTP/2 with WebSockets on its streams (`load ws --http2`),
//! joined by buffers to a server made here of sockscale-h2's frame reader and HPACK and
//! sockscale-ws's server `Session`, on simulated time (no sockets, no sleeps): the CONNECT only
//! after SETTINGS_ENABLE_CONNECT_PROTOCOL, its fields, echoes through the stream in any split,
//! the server's windows obeyed, the close then END_STREAM, resets and refusals.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sockscale_h2::frame::setting::ENABLE_CONNECT_PROTOCOL;
use sockscale_h2::frame::{self, flag, kind, setting, ErrorCode, Head};
use sockscale_h2::hpack::{encode_response, Decoder};
use sockscale_h2::rules::FrameReader;
use sockscale_h2::{HeaderList, Violation};

use crate::client::Stamp;
use crate::config::{AcceptedStatuses, WsRun};
use crate::connection::{Close, Connection, Event, Kind, Now, Profile, Reason};
use crate::pattern::Pattern;
use crate::ws::{WsEnd, WsProfile};

const MSG_LEN: usize = 100;

fn profile(streams: usize) -> Profile {
    let run = WsRun {
        host: "localhost:9".into(),
        path: "/chat".into(),
        msg_len: MSG_LEN,
        text: false,
        deflate: false,
        pipeline: 16,
        idle: false,
        ping: None,
        http2: true,
        streams,
        close_timeout: None,
    };
    Profile {
        kind: Kind::Ws,
        pattern: Pattern::default(),
        requests: Vec::new(),
        request_len: 0,
        head_requests: false,
        h2_request: None,
        accept_status: AcceptedStatuses::default(),
        connect_timeout: Duration::from_secs(3),
        reply_timeout: Duration::from_secs(5),
        tls: None,
        origin: Instant::now(),
        ws: Some(WsProfile::new(&run)),
        h3: None,
    }
}

struct Client {
    profile: Profile,
    conn: Connection,
    events: Vec<Event>,
    now_ns: u64,
}

impl Client {
    fn connected(profile: Profile) -> Client {
        let mut conn = Connection::new(&profile, 7, Now::after(profile.origin, 1_000));
        assert!(conn.on_connected(&profile, Now::after(profile.origin, 2_000)).failed.is_none());
        Client { profile, conn, events: Vec::new(), now_ns: 2_000 }
    }

    fn transmit(&mut self) -> Vec<u8> {
        let mut wire = Vec::new();
        loop {
            let events = &mut self.events;
            let bytes = self.conn.poll_transmit(&self.profile, &mut |e| events.push(e)).expect("no close");
            if bytes.is_empty() {
                return wire;
            }
            wire.extend_from_slice(bytes);
            let n = bytes.len();
            self.conn.sent(n, &mut |e| events.push(e));
        }
    }

    /// `bytes` delivered `split` octets at a time; the first close, if any.
    fn receive(&mut self, bytes: &[u8], split: usize) -> Result<(), Close> {
        for piece in bytes.chunks(split) {
            let mut data = piece.to_vec();
            let now = Now::after(self.profile.origin, self.now_ns);
            let events = &mut self.events;
            self.conn.receive(&self.profile, now, &mut data, &mut Vec::new(), &mut |e| events.push(e))?;
        }
        Ok(())
    }

    fn begin(&mut self, n: usize) {
        let mut scratch = Vec::new();
        for _ in 0..n {
            assert!(self.conn.may_begin(16));
            let events = &mut self.events;
            self.conn.begin(&self.profile, Stamp::at(self.now_ns), &mut scratch, &mut |e| events.push(e));
        }
    }

    fn echoed(&self) -> usize {
        self.events.iter().filter(|e| matches!(e, Event::Echoed { .. })).count()
    }
}

/// A WebSocket over HTTP/2 server: frames cut by sockscale-h2's reader, CONNECTs decoded and
/// answered, each stream's bytes fed to a sockscale-ws server `Session` whose output goes back
/// as DATA. It checks that the client never sends past the windows it advertised.
struct Server {
    preface: usize,
    reader: FrameReader,
    decoder: Decoder,
    /// What the server sends, not yet delivered.
    out: Vec<u8>,
    /// Every header block the client sent, decoded.
    blocks: Vec<(u32, Vec<(String, String)>)>,
    status: u16,
    sessions: HashMap<u32, (sockscale_ws::Session, sockscale_ws::Stats)>,
    /// What the client may still send: a stream's window, the connection's.
    stream_left: HashMap<u32, i64>,
    connection_left: i64,
    initial_window: u32,
    /// DATA octets received a stream, and END_STREAM seen (with what followed it).
    data: HashMap<u32, usize>,
    ended: Vec<u32>,
    after_end: usize,
}

impl Server {
    fn new(enable_connect: bool, initial_window: u32) -> Server {
        let mut out = Vec::new();
        let mut values = vec![(setting::INITIAL_WINDOW_SIZE, initial_window)];
        if enable_connect {
            values.push((ENABLE_CONNECT_PROTOCOL, 1));
        }
        frame::put_settings(&mut out, &values);
        Server {
            preface: 0,
            reader: FrameReader::default(),
            decoder: Decoder::new(4096),
            out,
            blocks: Vec::new(),
            status: 200,
            sessions: HashMap::new(),
            stream_left: HashMap::new(),
            connection_left: 65_535,
            initial_window,
            data: HashMap::new(),
            ended: Vec::new(),
            after_end: 0,
        }
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    fn receive(&mut self, mut bytes: &[u8]) {
        if self.preface < frame::PREFACE.len() {
            let n = (frame::PREFACE.len() - self.preface).min(bytes.len());
            assert_eq!(bytes[..n], frame::PREFACE[self.preface..self.preface + n]);
            self.preface += n;
            bytes = &bytes[n..];
        }
        let mut reader = std::mem::take(&mut self.reader);
        reader
            .read(bytes, 1 << 20, |head, payload| -> Result<(), Violation> {
                self.frame(head, payload);
                Ok(())
            })
            .expect("frames");
        self.reader = reader;
    }

    fn frame(&mut self, head: Head, payload: &[u8]) {
        if self.ended.contains(&head.stream) {
            self.after_end += 1;
        }
        match head.kind {
            kind::SETTINGS if !head.has(flag::ACK) => frame::put_settings_ack(&mut self.out),
            kind::HEADERS => {
                assert!(head.has(flag::END_HEADERS), "one frame is enough for a CONNECT");
                let mut list = HeaderList::with_limit(1 << 16);
                self.decoder.decode(payload, &mut list).expect("HPACK");
                let fields = list
                    .iter()
                    .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
                    .collect();
                self.blocks.push((head.stream, fields));
                let mut block = Vec::new();
                encode_response(&mut block, self.status, &[], false);
                let end = if self.status == 200 { 0 } else { flag::END_STREAM };
                frame::put_head(&mut self.out, block.len(), kind::HEADERS, flag::END_HEADERS | end, head.stream);
                self.out.extend_from_slice(&block);
                if self.status == 200 {
                    let session = sockscale_ws::Session::new(&sockscale_ws::Config::default(), None, Instant::now());
                    self.sessions.insert(head.stream, (session, sockscale_ws::Stats::default()));
                    self.stream_left.insert(head.stream, i64::from(self.initial_window));
                }
            }
            kind::DATA => {
                let len = i64::from(head.len);
                let left = self.stream_left.get_mut(&head.stream).expect("DATA on a tunnel");
                *left -= len;
                self.connection_left -= len;
                assert!(*left >= 0, "DATA past the stream's window");
                assert!(self.connection_left >= 0, "DATA past the connection's window");
                *self.data.entry(head.stream).or_default() += payload.len();
                if let Some((session, stats)) = self.sessions.get_mut(&head.stream) {
                    let mut answer = Vec::new();
                    session.receive(payload, Instant::now(), stats, &mut answer);
                    if !answer.is_empty() {
                        frame::put_head(&mut self.out, answer.len(), kind::DATA, 0, head.stream);
                        self.out.extend_from_slice(&answer);
                    }
                }
                if head.has(flag::END_STREAM) {
                    self.ended.push(head.stream);
                }
            }
            _ => {}
        }
    }

    /// Open the windows by `n` (the stream's and the connection's).
    fn give_window(&mut self, stream: u32, n: u32) {
        frame::put_window_update(&mut self.out, 0, n);
        frame::put_window_update(&mut self.out, stream, n);
        self.connection_left += i64::from(n);
        *self.stream_left.entry(stream).or_default() += i64::from(n);
    }

    fn stats(&self, stream: u32) -> &sockscale_ws::Stats {
        &self.sessions[&stream].1
    }
}

fn reason(result: Result<(), Close>) -> Reason {
    result.expect_err("the connection closes").reason
}

/// Connected, greeted with ENABLE_CONNECT_PROTOCOL, every WebSocket's CONNECT answered 200.
fn open(streams: usize, initial_window: u32) -> (Client, Server) {
    let mut client = Client::connected(profile(streams));
    let mut server = Server::new(true, initial_window);
    server.receive(&client.transmit());
    assert!(server.blocks.is_empty(), "no CONNECT before the server's SETTINGS");
    client.receive(&server.take(), 1).expect("no close");
    server.receive(&client.transmit());
    assert_eq!(server.blocks.len(), streams);
    client.receive(&server.take(), 7).expect("no close");
    assert!(!client.conn.greeting() && client.conn.may_begin(16), "open");
    (client, server)
}

#[test]
fn the_connect_waits_for_the_setting_and_messages_echo_through_the_stream_in_any_split() {
    for split in [usize::MAX, 7, 1] {
        let (mut client, mut server) = open(1, 65_535);
        let want = [
            (":method", "CONNECT"),
            (":scheme", "http"),
            (":authority", "localhost:9"),
            (":path", "/chat"),
            (":protocol", "websocket"),
            ("sec-websocket-version", "13"),
        ];
        assert_eq!(server.blocks, vec![(1, want.map(|(n, v)| (n.to_owned(), v.to_owned())).to_vec())]);
        assert!(client.events.iter().any(|e| matches!(e, Event::Greeted { .. })));
        assert_eq!(client.events.iter().filter(|e| matches!(e, Event::StreamOpened)).count(), 1);
        assert!(client.events.iter().any(|e| matches!(e, Event::WsUpgraded { deflate: false })));
        assert!(client.conn.answered());
        client.begin(5);
        server.receive(&client.transmit());
        assert_eq!(server.stats(1).messages_received, 5);
        assert_eq!(server.stats(1).bytes_received, 5 * MSG_LEN as u64);
        client.receive(&server.take(), split).expect("no close");
        assert_eq!(client.echoed(), 5, "split {split}");
        assert_eq!(client.conn.outstanding(), 0);
    }
}

#[test]
fn a_server_without_enable_connect_protocol_ends_the_connection_before_any_connect() {
    let mut client = Client::connected(profile(1));
    let mut server = Server::new(false, 65_535);
    server.receive(&client.transmit());
    let close = client.receive(&server.take(), usize::MAX).expect_err("the connection closes");
    assert!(matches!(close.reason, Reason::Ws(WsEnd::NoConnectProtocol)), "{:?}", close.reason);
    server.receive(&close.last);
    assert!(server.blocks.is_empty(), "no CONNECT was sent");
}

#[test]
fn data_never_goes_past_the_servers_windows_and_waits_for_its_window_updates() {
    // A 300-octet stream window: 16 messages of 100 octets (106 with their frame head) wait.
    let (mut client, mut server) = open(1, 300);
    client.begin(16);
    server.receive(&client.transmit());
    assert_eq!(server.data[&1], 300, "the window's worth, no more (the server asserts it)");
    assert_eq!(server.stats(1).messages_received, 2);
    let echoes = server.take();
    client.receive(&echoes, usize::MAX).expect("no close");
    assert_eq!(client.echoed(), 2);
    server.give_window(1, 1000);
    client.receive(&server.take(), 3).expect("no close");
    server.receive(&client.transmit());
    assert_eq!(server.data[&1], 1300, "1,000 more octets: no more");
    server.give_window(1, 1000);
    client.receive(&server.take(), 3).expect("no close");
    server.receive(&client.transmit());
    assert_eq!(server.data[&1], 16 * (MSG_LEN + 6));
    assert_eq!(server.stats(1).messages_received, 16);
    client.receive(&server.take(), usize::MAX).expect("no close");
    assert_eq!(client.echoed(), 16);
}

#[test]
fn the_end_of_the_run_is_the_close_handshake_then_end_stream_on_every_stream() {
    let (mut client, mut server) = open(3, 65_535);
    assert_eq!(server.blocks.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 3, 5]);
    client.begin(9);
    server.receive(&client.transmit());
    for stream in [1, 3, 5] {
        assert_eq!(server.stats(stream).messages_received, 3, "spread over the WebSockets");
    }
    client.receive(&server.take(), 5).expect("no close");
    assert_eq!(client.echoed(), 9);
    client.conn.begin_grace(Now::after(client.profile.origin, client.now_ns), Duration::from_secs(1));
    assert!(client.conn.ws_awaiting_close());
    server.receive(&client.transmit());
    for stream in [1, 3, 5] {
        assert_eq!(server.stats(stream).closes_received.get(1000), 1);
    }
    assert!(server.ended.is_empty(), "END_STREAM waits for the close handshake");
    let answers = server.take();
    let close = client.receive(&answers, usize::MAX).expect_err("every close answered");
    assert!(matches!(close.reason, Reason::Ws(WsEnd::Closed)), "{:?}", close.reason);
    server.receive(&close.last);
    server.ended.sort_unstable();
    assert_eq!(server.ended, [1, 3, 5], "END_STREAM on each stream after its close");
    assert_eq!(server.after_end, 0);
    let stats: Vec<_> =
        client.conn.ws_stats_each().map(|s| (s.messages_received, s.closes_received.get(1000))).collect();
    assert_eq!(stats, [(3, 1), (3, 1), (3, 1)]);
}

#[test]
fn a_reset_stream_and_a_goaway_are_counted_and_a_refused_connect_is_its_status() {
    let (mut client, _server) = open(1, 65_535);
    let mut rst = Vec::new();
    frame::put_goaway(&mut rst, 1, ErrorCode::NoError, b"");
    frame::put_rst(&mut rst, 1, ErrorCode::Cancel);
    let close = reason(client.receive(&rst, usize::MAX));
    assert!(matches!(&close, Reason::Ws(WsEnd::StreamReset { code }) if code == "CANCEL"), "{close:?}");
    assert!(client.events.iter().any(|e| matches!(e, Event::StreamReset { code } if code == "CANCEL")));
    assert!(client.events.iter().any(|e| matches!(e, Event::GoAway { code } if code == "NO_ERROR")));

    let mut client = Client::connected(profile(1));
    let mut server = Server::new(true, 65_535);
    server.status = 403;
    server.receive(&client.transmit());
    client.receive(&server.take(), usize::MAX).expect("no close");
    server.receive(&client.transmit());
    let close = reason(client.receive(&server.take(), usize::MAX));
    assert!(matches!(close, Reason::Ws(WsEnd::Refused { status: 403 })), "{close:?}");
}
