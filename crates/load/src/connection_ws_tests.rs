//! The client `Connection`'s WebSocket stage joined by buffers to sockscale-ws's server
//! `Session`, on simulated time (no sockets, no sleeps): the upgrade and its refusals, messages
//! verified and timed, each timer at its exact instant, and the close at the end of a run.

use std::time::{Duration, Instant};

use super::*;
use crate::config::{AcceptedStatuses, WsRun};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
const MSG_LEN: usize = 100;

fn profile(ping: Option<Duration>, text: bool) -> Profile {
    let run = WsRun {
        host: "localhost:9".into(),
        path: "/chat".into(),
        msg_len: MSG_LEN,
        text,
        deflate: false,
        pipeline: 4,
        idle: false,
        ping,
        http2: false,
        streams: 1,
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
        connect_timeout: CONNECT_TIMEOUT,
        reply_timeout: REPLY_TIMEOUT,
        tls: None,
        origin: Instant::now(),
        ws: Some(WsProfile::new(&run)),
        h3: None,
    }
}

/// The client, what it reported, and the simulated clock.
struct Client {
    profile: Profile,
    conn: Connection,
    events: Vec<Event>,
    now_ns: u64,
}

impl Client {
    fn connected(profile: Profile) -> Client {
        let mut conn = Connection::new(&profile, 7, Now::after(profile.origin, 1_000));
        let connected = conn.on_connected(&profile, Now::after(profile.origin, 2_000));
        assert!(connected.failed.is_none());
        Client { profile, conn, events: Vec::new(), now_ns: 2_000 }
    }

    fn now(&self) -> Now {
        Now::after(self.profile.origin, self.now_ns)
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

    fn receive(&mut self, bytes: &[u8]) -> Result<bool, Close> {
        let mut data = bytes.to_vec();
        let now = self.now();
        let events = &mut self.events;
        self.conn.receive(&self.profile, now, &mut data, &mut Vec::new(), &mut |e| events.push(e))
    }

    fn begin(&mut self, n: usize) {
        let mut scratch = Vec::new();
        for _ in 0..n {
            assert!(self.conn.may_begin(16));
            let stamp = Stamp::at(self.now_ns);
            let events = &mut self.events;
            assert!(self.conn.begin(&self.profile, stamp, &mut scratch, &mut |e| events.push(e)).is_none());
        }
    }

    fn timeout(&mut self) -> Result<(), Close> {
        let now = self.now();
        let events = &mut self.events;
        self.conn.on_timeout(&self.profile, now, &mut |e| events.push(e))
    }

    fn deadline_ns(&self) -> Option<u64> {
        self.conn.poll_timeout(&self.profile).map(|at| at.duration_since(self.profile.origin).as_nanos() as u64)
    }

    fn echoed(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Echoed { stamp } => Some(stamp.sent_ns),
                _ => None,
            })
            .collect()
    }
}

/// The server's side: the upgrade request answered by `sockscale_ws::accept`, then a `Session`.
/// The ws crate's server `Session` with the counters its owner keeps (the server keeps them per
/// thread; here, beside the one session).
struct EchoServer {
    session: sockscale_ws::Session,
    stats: sockscale_ws::Stats,
}

impl EchoServer {
    fn receive(&mut self, input: &[u8], now: Instant, out: &mut Vec<u8>) -> sockscale_ws::Verdict {
        self.session.receive(input, now, &mut self.stats, out)
    }

    fn initiate_close(&mut self, code: u16, out: &mut Vec<u8>) -> sockscale_ws::Verdict {
        self.session.initiate_close(code, &mut self.stats, out)
    }

    fn stats(&self) -> &sockscale_ws::Stats {
        &self.stats
    }
}

fn upgrade(request: &[u8]) -> (Vec<u8>, EchoServer) {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut parsed = httparse::Request::new(&mut headers);
    assert!(parsed.parse(request).expect("an HTTP request").is_complete());
    assert_eq!(parsed.path, Some("/chat"));
    let pairs: Vec<(&str, &[u8])> = parsed.headers.iter().map(|h| (h.name, h.value)).collect();
    assert!(pairs.iter().any(|(n, v)| *n == "Host" && *v == b"localhost:9"));
    let accepted = sockscale_ws::accept("GET", pairs.iter().copied(), None).expect("a valid upgrade request");
    let session = EchoServer {
        session: sockscale_ws::Session::new(&sockscale_ws::Config::default(), None, Instant::now()),
        stats: sockscale_ws::Stats::default(),
    };
    (accepted.response, session)
}

fn reason(result: Result<impl std::fmt::Debug, Close>) -> Reason {
    result.expect_err("the connection closes").reason
}

/// Connected and upgraded at 2 µs + 10 µs: the client and the server's session.
fn upgraded(profile: Profile) -> (Client, EchoServer) {
    let mut client = Client::connected(profile);
    assert!(client.conn.greeting() && !client.conn.may_begin(16), "no message before the 101");
    let request = client.transmit();
    let (response, session) = upgrade(&request);
    client.now_ns += 10_000;
    // The 101 split across reads, down to single octets.
    for byte in &response {
        assert!(!client.receive(std::slice::from_ref(byte)).expect("no close"));
    }
    assert!(!client.conn.greeting() && client.conn.may_begin(16), "upgraded");
    assert!(client.events.iter().any(|e| matches!(e, Event::WsUpgraded { deflate: false })));
    assert!(client.conn.answered());
    (client, session)
}

#[test]
fn messages_are_echoed_by_the_server_session_and_complete_on_their_last_octet() {
    for text in [false, true] {
        let (mut client, mut server) = upgraded(profile(None, text));
        client.begin(3);
        let frames = client.transmit();
        let mut echo = Vec::new();
        assert_eq!(server.receive(&frames, Instant::now(), &mut echo), sockscale_ws::Verdict::Continue);
        assert_eq!(server.stats().messages_received, 3);
        assert_eq!(server.stats().bytes_received, 3 * MSG_LEN as u64);
        client.now_ns += 5_000;
        let frame_len = echo.len() / 3;
        for (i, byte) in echo.iter().enumerate() {
            assert!(!client.receive(std::slice::from_ref(byte)).expect("no close"));
            assert_eq!(client.echoed().len(), (i + 1) / frame_len, "after octet {i} (text: {text})");
        }
        assert_eq!(client.echoed(), [12_000; 3], "stamped at their send");
        assert_eq!(client.conn.outstanding(), 0);
    }
}

#[test]
fn an_echo_altered_by_one_octet_is_a_mismatch() {
    let (mut client, mut server) = upgraded(profile(None, false));
    client.begin(2);
    let frames = client.transmit();
    let mut echo = Vec::new();
    server.receive(&frames, Instant::now(), &mut echo);
    // The second message's payload (a server's frame of 100 octets: a 2-octet header).
    let at = echo.len() - 10;
    echo[at] ^= 1;
    assert!(matches!(reason(client.receive(&echo)), Reason::Ws(WsEnd::Mismatch)));
    assert_eq!(client.echoed().len(), 1, "the first message was good");
}

#[test]
fn a_refused_upgrade_closes_with_its_status_and_a_bad_accept_is_said() {
    let mut client = Client::connected(profile(None, false));
    client.transmit();
    let refused = client.receive(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    assert!(matches!(reason(refused), Reason::Ws(WsEnd::Refused { status: 404 })));

    let mut client = Client::connected(profile(None, false));
    client.transmit();
    let bad = client.receive(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    );
    match reason(bad) {
        Reason::Ws(WsEnd::BadHandshake(why)) => assert!(why.contains("Sec-WebSocket-Accept"), "{why}"),
        other => panic!("{other:?}"),
    }

    let mut client = Client::connected(profile(None, false));
    client.transmit();
    let not_http = client.receive(&[b'x'; 17 << 10]);
    assert!(matches!(reason(not_http), Reason::Ws(WsEnd::BadHead { .. })));
}

#[test]
fn masked_server_frames_fail_the_connection_with_1002_sent_last() {
    let (mut client, _server) = upgraded(profile(None, false));
    let close = client.receive(&[0x82, 0x83, 1, 2, 3, 4, b'a' ^ 1, b'b' ^ 2, b'c' ^ 3]).expect_err("closed");
    assert!(matches!(close.reason, Reason::Ws(WsEnd::Protocol { code: 1002 })));
    // The client's close frame, masked: FIN|close, MASK|2, the key, then 1002 masked.
    assert_eq!(&close.last[..2], &[0x88, 0x82]);
    let key = &close.last[2..6];
    assert_eq!([close.last[6] ^ key[0], close.last[7] ^ key[1]], 1002u16.to_be_bytes());
    assert_eq!(close.ending, Ending::Orderly);
}

#[test]
fn the_upgrade_times_out_at_its_exact_instant() {
    let mut client = Client::connected(profile(None, false));
    client.transmit();
    let due = 2_000 + REPLY_TIMEOUT.as_nanos() as u64;
    assert_eq!(client.deadline_ns(), Some(due));
    client.now_ns = due - 1;
    assert!(client.timeout().is_ok());
    client.now_ns = due;
    assert!(matches!(reason(client.timeout()), Reason::Ws(WsEnd::UpgradeTimeout)));
}

#[test]
fn pings_go_at_their_exact_instants_and_one_unanswered_by_the_next_closes() {
    let second = 1_000_000_000;
    let (mut client, mut server) = upgraded(profile(Some(Duration::from_secs(1)), false));
    let upgraded_at = client.now_ns;
    assert_eq!(client.deadline_ns(), Some(upgraded_at + second));
    client.now_ns = upgraded_at + second - 1;
    assert!(client.timeout().is_ok());
    assert!(client.transmit().is_empty(), "no ping before its instant");
    client.now_ns = upgraded_at + second;
    assert!(client.timeout().is_ok());
    let ping = client.transmit();
    let mut pong = Vec::new();
    server.receive(&ping, Instant::now(), &mut pong);
    assert_eq!(server.stats().pings_received, 1);
    assert!(!client.receive(&pong).expect("no close"));
    assert_eq!(client.deadline_ns(), Some(upgraded_at + 2 * second));
    // The second ping goes unanswered: the third instant closes with 1001.
    client.now_ns = upgraded_at + 2 * second;
    assert!(client.timeout().is_ok());
    assert!(!client.transmit().is_empty());
    client.now_ns = upgraded_at + 3 * second;
    let close = client.timeout().expect_err("closed");
    assert!(matches!(close.reason, Reason::Ws(WsEnd::PingTimeout)));
    assert_eq!(&close.last[..2], &[0x88, 0x82]);
    assert_eq!(client.conn.ws_stats().map(|s| (s.pings_sent, s.pongs_received)), Some((2, 1)));
}

#[test]
fn the_end_of_the_run_sends_close_1000_and_the_answer_ends_it_or_the_grace_does() {
    let (mut client, mut server) = upgraded(profile(None, false));
    client.begin(1);
    let grace = Duration::from_secs(1);
    client.conn.begin_grace(client.now(), grace);
    assert!(client.conn.busy() && !client.conn.may_begin(16), "closing: nothing new begins");
    let frames = client.transmit();
    let mut answer = Vec::new();
    let verdict = server.receive(&frames, Instant::now(), &mut answer);
    assert!(matches!(verdict, sockscale_ws::Verdict::Close(sockscale_ws::Closing::Handshake { code: Some(1000) })));
    // The message in flight is echoed before the server's close: it counts, then the close ends.
    let close = client.receive(&answer).expect_err("closed");
    assert!(matches!(close.reason, Reason::Ws(WsEnd::Closed)));
    assert_eq!(client.echoed().len(), 1);
    let stats = client.conn.ws_stats().copied().expect("upgraded");
    assert_eq!((stats.closes_sent.get(1000), stats.closes_received.get(1000)), (1, 1));

    // A server that never answers: the grace ends the connection at its exact instant.
    let (mut client, _server) = upgraded(profile(None, false));
    let end = client.now_ns + grace.as_nanos() as u64;
    client.conn.begin_grace(client.now(), grace);
    assert!(client.conn.ws_awaiting_close() && client.conn.busy());
    assert!(!client.transmit().is_empty(), "the close is sent");
    assert_eq!(client.deadline_ns(), Some(end));
    client.now_ns = end - 1;
    assert!(client.timeout().is_ok());
    client.now_ns = end;
    assert!(matches!(reason(client.timeout()), Reason::GraceOver));
}

#[test]
fn an_idle_connection_holds_no_output_buffer() {
    let (mut client, mut server) = upgraded(profile(Some(Duration::from_secs(1)), false));
    let out_capacity = |client: &Client| match &client.conn.protocol {
        Protocol::Ws(ws) => ws.out_capacity(),
        _ => panic!("a WebSocket connection"),
    };
    assert_eq!(out_capacity(&client), 0, "the upgrade request's buffer is released once sent");
    client.now_ns += 1_000_000_000;
    client.timeout().expect("a ping");
    let ping = client.transmit();
    assert_eq!(out_capacity(&client), 0, "and a ping's");
    let mut pong = Vec::new();
    server.receive(&ping, Instant::now(), &mut pong);
    client.receive(&pong).expect("no close");
    assert_eq!(out_capacity(&client), 0);
}

#[test]
fn a_close_begun_by_the_server_is_answered_with_its_code_and_said() {
    let (mut client, mut server) = upgraded(profile(None, false));
    let mut close = Vec::new();
    server.initiate_close(1001, &mut close);
    let ended = client.receive(&close).expect_err("closed");
    assert!(matches!(ended.reason, Reason::Ws(WsEnd::ClosedByServer { code: Some(1001) })));
    // The answer goes last: the server's handshake completes on it.
    let verdict = server.receive(&ended.last, Instant::now(), &mut Vec::new());
    assert!(matches!(verdict, sockscale_ws::Verdict::Close(sockscale_ws::Closing::Handshake { code: Some(1001) })));
    let stats = client.conn.ws_stats().copied().expect("upgraded");
    assert_eq!((stats.closes_received.get(1001), stats.closes_sent.get(1001)), (1, 1));
}

#[test]
fn a_connection_upgraded_after_the_run_ended_closes_within_the_same_grace() {
    let mut client = Client::connected(profile(None, false));
    let request = client.transmit();
    let grace = Duration::from_secs(1);
    let end = client.now_ns + grace.as_nanos() as u64;
    client.conn.begin_grace(client.now(), grace);
    assert!(client.conn.busy(), "greeting");
    let (response, mut server) = upgrade(&request);
    client.receive(&response).expect("no close");
    assert!(client.conn.ws_awaiting_close() && client.conn.busy(), "its close is owed");
    let close = client.transmit();
    let mut answer = Vec::new();
    let verdict = server.receive(&close, Instant::now(), &mut answer);
    assert!(matches!(verdict, sockscale_ws::Verdict::Close(sockscale_ws::Closing::Handshake { code: Some(1000) })));
    assert_eq!(client.deadline_ns(), Some(end));
    assert!(matches!(reason(client.receive(&answer)), Reason::Ws(WsEnd::Closed)));
}
