//! The client `Connection` joined by buffers to a server side, on simulated time (no sockets,
//! no sleeps), as quinn-proto's `Pair`: TLS through sockscale-tls's server session, HTTP/1.1
//! through byte fixtures, HTTP/2 through sockscale-h2's server connection.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sockscale_tls::{ClientTls, FailureReason, ServerOptions, ServerSession, ServerTls, TestCertificate, Trust};

use super::*;
use crate::config::AcceptedStatuses;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

fn profile(kind: Kind, tls: Option<LoadTls>) -> Profile {
    let requests = REQUEST.repeat(4);
    Profile {
        kind,
        pattern: Pattern::default(),
        request_len: REQUEST.len(),
        requests,
        head_requests: false,
        h2_request: (kind == Kind::H2).then(|| sockscale_h2::ClientRequest {
            block: sockscale_h2::encode_request("GET", "http", "x", "/", &[]).into(),
            indexed: None,
            body: bytes::Bytes::new(),
            head: false,
        }),
        accept_status: AcceptedStatuses::default(),
        connect_timeout: CONNECT_TIMEOUT,
        reply_timeout: REPLY_TIMEOUT,
        tls,
        origin: Instant::now(),
        ws: None,
        h3: None,
    }
}

/// A server's TLS and a client's trusting `trusted`'s CA (the server's own CA unless given).
struct Certs {
    server: ServerTls,
    client: LoadTls,
    _dir: tempfile::TempDir,
}

fn certs(alpn: &[&[u8]], trust_another_ca: bool) -> Certs {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let names = ["localhost".to_owned()];
    let files = TestCertificate::generate(&names).expect("a certificate").write(dir.path()).expect("written");
    let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
    let options = ServerOptions { alpn: alpn.clone(), ..ServerOptions::default() };
    let server = ServerTls::from_pem_files(&files.cert, &files.key, SystemTime::now(), &options).expect("server TLS");
    let ca = if trust_another_ca {
        let other = dir.path().join("other");
        std::fs::create_dir(&other).expect("a directory");
        TestCertificate::generate(&names).expect("a certificate").write(&other).expect("written").ca
    } else {
        files.ca
    };
    let client = ClientTls::new(&Trust::CaFile(ca), alpn, false).expect("client TLS");
    Certs { server, client: LoadTls { client, server_name: "localhost".into(), resume: false }, _dir: dir }
}

/// The client connection, the events it reported, and the simulated clock.
struct Client {
    profile: Profile,
    conn: Connection,
    events: Vec<Event>,
    now_ns: u64,
}

impl Client {
    /// A connection whose connect completes `connect_ns` after it began.
    fn connected(profile: Profile, connect_ns: u64) -> Client {
        let mut conn = Connection::new(&profile, 0, Now::after(profile.origin, 1_000));
        let now = Now::after(profile.origin, 1_000 + connect_ns);
        let connected = conn.on_connected(&profile, now);
        assert_eq!(connected.took, Duration::from_nanos(connect_ns));
        assert!(connected.failed.is_none());
        Client { profile, conn, events: Vec::new(), now_ns: 1_000 + connect_ns }
    }

    fn now(&self) -> Now {
        Now::after(self.profile.origin, self.now_ns)
    }

    fn begin(&mut self, n: usize) {
        let mut datagram = Vec::new();
        for _ in 0..n {
            assert!(self.conn.may_begin(16));
            let stamp = Stamp::at(self.now_ns);
            let events = &mut self.events;
            assert!(self.conn.begin(&self.profile, stamp, &mut datagram, &mut |e| events.push(e)).is_none());
        }
    }

    /// Everything the connection has to send, as a socket taking it all would.
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

    /// Feed `bytes` as one read.
    fn receive(&mut self, bytes: &[u8]) -> Result<bool, Close> {
        let mut data = bytes.to_vec();
        let now = self.now();
        let events = &mut self.events;
        self.conn.receive(&self.profile, now, &mut data, &mut Vec::new(), &mut |e| events.push(e))
    }

    fn responses(&self) -> Vec<(u64, u16)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Response { stamp, status, .. } => Some((stamp.sent_ns, *status)),
                _ => None,
            })
            .collect()
    }
}

/// The server's side of a TLS pair: records in, plaintext out, and back.
struct TlsServer {
    session: ServerSession,
    now: Instant,
}

impl TlsServer {
    fn new(certs: &Certs) -> TlsServer {
        let now = Instant::now();
        let session = ServerSession::new(&certs.server, now).expect("not busy").expect("a session");
        TlsServer { session, now }
    }

    /// Records from the client in: (the plaintext, the records to send back).
    fn receive(&mut self, records: &[u8]) -> Result<(Vec<u8>, Vec<u8>), sockscale_tls::Failure> {
        let (mut data, mut plain, mut out) = (records.to_vec(), Vec::new(), Vec::new());
        self.session.receive(&mut data, self.now, &mut plain, &mut out)?;
        Ok((plain, out))
    }

    fn send(&mut self, plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.session.send(plaintext, &mut out).expect("encrypted");
        out
    }
}

/// Run the handshake to its end: the client's flights to the server and back.
fn handshake(client: &mut Client, server: &mut TlsServer) {
    for _ in 0..4 {
        let flight = client.transmit();
        if flight.is_empty() && !client.conn.greeting() {
            return;
        }
        let (_, back) = server.receive(&flight).expect("the server takes the client's flight");
        if !back.is_empty() {
            assert!(!client.receive(&back).expect("the client takes the server's flight"));
        }
    }
    assert!(!client.conn.greeting(), "the handshake did not finish");
}

#[test]
fn tls_handshake_then_an_echo_through_it() {
    let certs = certs(&[], false);
    let mut client = Client::connected(profile(Kind::Echo { msg_len: 100 }, Some(certs.client.clone())), 50);
    let mut server = TlsServer::new(&certs);
    assert!(client.conn.greeting());
    assert!(!client.conn.may_begin(16), "no request before the handshake is done");
    handshake(&mut client, &mut server);
    assert!(client.events.iter().any(|e| matches!(e, Event::HandshakeDone { negotiated: Some(_), .. })));

    client.now_ns += 7_000;
    client.begin(2);
    let records = client.transmit();
    let (echoed, _) = server.receive(&records).expect("decrypted");
    assert_eq!(echoed.len(), 200);
    let back = server.send(&echoed);
    client.now_ns += 3_000;
    // One byte at a time: the messages complete on their last byte, not before.
    let mut completed = 0;
    for (i, byte) in back.iter().enumerate() {
        assert!(!client.receive(std::slice::from_ref(byte)).expect("no close"), "at byte {i}");
        let now = client.events.iter().filter(|e| matches!(e, Event::Echoed { .. })).count();
        if now > completed {
            assert_eq!(i, back.len() - 1, "an echo completed before its record was whole");
            completed = now;
        }
    }
    assert_eq!(completed, 2);
    assert!(client.conn.answered());
    let (plain, wire): (usize, usize) = client.events.iter().fold((0, 0), |(p, w), e| match e {
        Event::Received { plaintext, wire } => (p + plaintext, w + wire),
        _ => (p, w),
    });
    assert_eq!(plain, 200);
    assert!(wire > back.len(), "the handshake's records and the echo's are counted on the wire");
}

#[test]
fn http1_responses_split_to_single_bytes_complete_on_their_last_byte() {
    let mut client = Client::connected(profile(Kind::Http, None), 10);
    client.begin(2);
    assert_eq!(client.transmit(), REQUEST.repeat(2));
    let first = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let second = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nnot";
    let reply = [&first[..], &second[..]].concat();
    for (i, byte) in reply.iter().enumerate() {
        client.now_ns += 1;
        assert!(!client.receive(std::slice::from_ref(byte)).expect("no close"));
        let expected = usize::from(i + 1 >= first.len()) + usize::from(i + 1 == reply.len());
        assert_eq!(client.responses().len(), expected, "after byte {i}");
        // The close comes only once every response is in.
        assert_eq!(client.conn.poll_close().is_some(), i + 1 == reply.len(), "after byte {i}");
    }
    assert_eq!(client.responses().iter().map(|r| r.1).collect::<Vec<_>>(), [200, 404]);
    // 404 is not accepted by default, 200 is: the target served the connection.
    assert!(client.events.iter().any(|e| matches!(e, Event::Response { status: 404, accepted: false, .. })));
    assert!(client.conn.answered());
}

#[test]
fn http1_server_closing_over_tls_gets_close_notify_and_a_fin() {
    let certs = certs(&[b"http/1.1"], false);
    let mut client = Client::connected(profile(Kind::Http, Some(certs.client.clone())), 10);
    let mut server = TlsServer::new(&certs);
    handshake(&mut client, &mut server);
    client.begin(1);
    let (request, _) = server.receive(&client.transmit()).expect("decrypted");
    assert_eq!(request, REQUEST);
    let reply = server.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    client.receive(&reply).expect("no close");
    let close = client.conn.poll_close().expect("the server said it closes");
    assert!(matches!(close.reason, Reason::Done));
    assert_eq!(close.ending, Ending::Orderly);
    // The last bytes are a close_notify the server reads as the end of the session.
    let mut data = close.last.clone();
    let (mut plain, mut out) = (Vec::new(), Vec::new());
    let received = server.session.receive(&mut data, server.now, &mut plain, &mut out).expect("a clean close");
    assert!(received.closed, "no close_notify in {:?}", close.last);
}

#[test]
fn http2_exchange_with_the_h2_server_connection() {
    let mut client = Client::connected(profile(Kind::H2, None), 10);
    let now = Instant::now();
    let mut out = Vec::new();
    let mut server = sockscale_h2::Connection::new(Arc::new(sockscale_h2::Limits::default()), now, &mut out);
    assert!(client.conn.greeting(), "an HTTP/2 connection greets before its first stream");
    // The preface and SETTINGS both ways; then three streams.
    assert_eq!(server.receive(&client.transmit(), now, &mut out), sockscale_h2::Verdict::Continue);
    client.receive(&std::mem::take(&mut out)).expect("no close");
    assert!(!client.conn.greeting());
    assert!(client.events.iter().any(|e| matches!(e, Event::Greeted { .. })));
    client.begin(3);
    assert_eq!(client.events.iter().filter(|e| matches!(e, Event::StreamOpened)).count(), 3);
    assert_eq!(server.receive(&client.transmit(), now, &mut out), sockscale_h2::Verdict::Continue);
    let mut streams = Vec::new();
    while let Some(sockscale_h2::Event::Request(request)) = server.poll_event() {
        streams.push(request.stream);
    }
    assert_eq!(streams, [1, 3, 5]);
    for stream in streams {
        let body = sockscale_h2::Body::Bytes(bytes::Bytes::from_static(b"hello"));
        server.respond(stream, 200, &[(b"content-length", b"5")], body, &mut out);
    }
    let _ = server.transmit(now, 0, &mut out);
    let frames = std::mem::take(&mut out);
    for byte in &frames {
        client.receive(std::slice::from_ref(byte)).expect("no close");
    }
    assert_eq!(client.responses().len(), 3);
    assert_eq!(client.conn.outstanding(), 0);
    assert!(client.conn.poll_close().is_none(), "an HTTP/2 connection stays open for more streams");
}

#[test]
fn http2_resets_goaways_and_connection_errors_come_named_by_the_connection() {
    use sockscale_h2::frame::{put_goaway, put_head, put_rst};
    use sockscale_h2::ErrorCode;
    let mut client = Client::connected(profile(Kind::H2, None), 10);
    let now = Instant::now();
    let mut out = Vec::new();
    let mut server = sockscale_h2::Connection::new(Arc::new(sockscale_h2::Limits::default()), now, &mut out);
    assert_eq!(server.receive(&client.transmit(), now, &mut out), sockscale_h2::Verdict::Continue);
    client.receive(&std::mem::take(&mut out)).expect("no close");
    client.begin(2);
    let _ = client.transmit();
    let mut frames = Vec::new();
    put_rst(&mut frames, 1, ErrorCode::Cancel);
    // An unknown code (RFC 9113 §5.4.1 allows them) is named in hex.
    frames.extend_from_slice(&[0, 0, 4, sockscale_h2::frame::kind::RST_STREAM, 0, 0, 0, 0, 3, 0, 0, 0x12, 0x34]);
    put_goaway(&mut frames, 3, ErrorCode::EnhanceYourCalm, b"");
    client.receive(&frames).expect("no close");
    let names = |pick: fn(&Event) -> Option<&str>| client.events.iter().filter_map(pick).collect::<Vec<_>>();
    let resets = names(|e| match e {
        Event::StreamReset { code } => Some(code),
        _ => None,
    });
    assert_eq!(resets, ["CANCEL", "0x1234"]);
    let goaways = names(|e| match e {
        Event::GoAway { code } => Some(code),
        _ => None,
    });
    assert_eq!(goaways, ["ENHANCE_YOUR_CALM"]);
    // A frame past the client's SETTINGS_MAX_FRAME_SIZE (16,384 by default) is a connection error.
    let mut oversize = Vec::new();
    put_head(&mut oversize, 16_385, sockscale_h2::frame::kind::DATA, 0, 5);
    oversize.resize(oversize.len() + 16_385, 0);
    let close = client.receive(&oversize).expect_err("a connection error");
    match close.reason {
        Reason::H2 { code, error, .. } => {
            assert_eq!(code, "FRAME_SIZE_ERROR");
            assert!(!error.is_empty());
        }
        other => panic!("closed as {other:?}"),
    }
}

#[test]
fn handshake_timeout_fires_at_its_exact_instant() {
    let certs = certs(&[], false);
    let mut client = Client::connected(profile(Kind::Echo { msg_len: 10 }, Some(certs.client.clone())), 250);
    let started_ns = client.now_ns;
    assert!(!client.transmit().is_empty(), "the ClientHello");
    let at = client.profile.origin + Duration::from_nanos(started_ns) + REPLY_TIMEOUT;
    assert_eq!(client.conn.poll_timeout(&client.profile), Some(at));
    let deadline_ns = started_ns + REPLY_TIMEOUT.as_nanos() as u64;
    let (profile, mut events) = (&client.profile, Vec::new());
    let early = Now::after(profile.origin, deadline_ns - 1);
    assert!(client.conn.on_timeout(profile, early, &mut |e| events.push(e)).is_ok(), "1 ns early");
    let close = client
        .conn
        .on_timeout(profile, Now::after(profile.origin, deadline_ns), &mut |e| events.push(e))
        .expect_err("the handshake timed out");
    assert!(matches!(close.reason, Reason::HandshakeTimeout { waited } if waited == REPLY_TIMEOUT), "{close:?}");
    assert!(close.last.is_empty());
}

#[test]
fn connect_and_reply_timeouts_fire_at_their_exact_instants() {
    let p = profile(Kind::Http, None);
    let origin = p.origin;
    let mut conn = Connection::new(&p, 0, Now::after(origin, 100));
    let connect_deadline = 100 + CONNECT_TIMEOUT.as_nanos() as u64;
    assert_eq!(conn.poll_timeout(&p), Some(origin + Duration::from_nanos(connect_deadline)));
    assert!(conn.on_timeout(&p, Now::after(origin, connect_deadline - 1), &mut |_| {}).is_ok());
    let close = conn.on_timeout(&p, Now::after(origin, connect_deadline), &mut |_| {}).expect_err("timed out");
    assert!(matches!(close.reason, Reason::ConnectTimeout { waited } if waited == CONNECT_TIMEOUT));

    let mut client = Client::connected(profile(Kind::Http, None), 10);
    client.now_ns = 5_000;
    client.begin(1);
    client.transmit();
    let deadline = 5_000 + REPLY_TIMEOUT.as_nanos() as u64;
    let (profile, conn) = (&client.profile, &mut client.conn);
    assert_eq!(conn.poll_timeout(profile), Some(profile.origin + Duration::from_nanos(deadline)));
    assert!(conn.on_timeout(profile, Now::after(profile.origin, deadline - 1), &mut |_| {}).is_ok());
    let close = conn.on_timeout(profile, Now::after(profile.origin, deadline), &mut |_| {}).expect_err("timed out");
    assert!(matches!(close.reason, Reason::ReplyTimeout));
}

#[test]
fn a_bad_certificate_closes_with_a_fatal_alert_the_server_reads() {
    let certs = certs(&[], true);
    let mut client = Client::connected(profile(Kind::Echo { msg_len: 10 }, Some(certs.client.clone())), 10);
    let mut server = TlsServer::new(&certs);
    let (_, flight) = server.receive(&client.transmit()).expect("the ClientHello");
    let close = client.receive(&flight).expect_err("the certificate is refused");
    let Reason::Tls { failure, handshaking: true } = &close.reason else { panic!("{close:?}") };
    assert_eq!(failure.reason, FailureReason::Certificate, "{failure}");
    assert!(!close.last.is_empty(), "no alert in the close");
    assert_eq!(close.ending, Ending::Orderly, "the alert must not be destroyed by a reset");
    // The server reads the alert as the client's refusal.
    let refused = server.receive(&close.last).expect_err("the server sees the alert");
    assert_eq!(refused.reason, FailureReason::PeerAlert, "{refused}");
}

#[test]
fn the_peer_closing_mid_exchange_is_closed_by_peer_and_a_response_to_the_close_completes() {
    let mut client = Client::connected(profile(Kind::Http, None), 10);
    client.begin(1);
    client.transmit();
    client.receive(b"HTTP/1.0 200 OK\r\n\r\nbody to the close").expect("no close");
    assert!(client.responses().is_empty());
    let (p, events) = (&client.profile, &mut client.events);
    let close = client.conn.receive_eof(p, &mut |e| events.push(e));
    assert_eq!(client.responses().len(), 1);
    // HTTP/1.0 without keep-alive: the server closes after it, as it said.
    assert!(matches!(close.reason, Reason::Done), "{close:?}");

    let mut client = Client::connected(profile(Kind::Http, None), 10);
    client.begin(1);
    client.transmit();
    let (p, events) = (&client.profile, &mut client.events);
    let close = client.conn.receive_eof(p, &mut |e| events.push(e));
    assert!(matches!(close.reason, Reason::ClosedByPeer), "{close:?}");
    assert_eq!(close.ending, Ending::Abort);
}

#[test]
fn end_of_run_grace_is_twice_the_slowest_within_one_second_and_the_timeout() {
    let p = profile(Kind::Http, None);
    let s = Duration::from_secs;
    assert_eq!(p.end_of_run_grace(Duration::from_millis(100)), s(1));
    assert_eq!(p.end_of_run_grace(s(2)), s(4));
    assert_eq!(p.end_of_run_grace(s(20)), REPLY_TIMEOUT);
}

#[test]
fn the_run_grace_ends_a_busy_connection_at_its_exact_instant_and_an_idle_one_never() {
    let mut client = Client::connected(profile(Kind::Http, None), 10);
    client.now_ns = 1_000_000;
    client.begin(1);
    client.transmit();
    let grace = Duration::from_secs(1);
    let ended_ns = 2_000_000;
    client.conn.begin_grace(Now::after(client.profile.origin, ended_ns), grace);
    let until = ended_ns + grace.as_nanos() as u64;
    let (p, conn) = (&client.profile, &mut client.conn);
    // The grace (1 s) ends before the reply timeout (5 s after the send).
    assert_eq!(conn.poll_timeout(p), Some(p.origin + Duration::from_nanos(until)));
    assert!(conn.on_timeout(p, Now::after(p.origin, until - 1), &mut |_| {}).is_ok());
    let close = conn.on_timeout(p, Now::after(p.origin, until), &mut |_| {}).expect_err("grace over");
    assert!(matches!(close.reason, Reason::GraceOver), "{close:?}");

    // Answered before the grace ends: idle, nothing to wake for, nothing to end.
    let mut client = Client::connected(profile(Kind::Http, None), 10);
    client.begin(1);
    client.transmit();
    client.conn.begin_grace(Now::after(client.profile.origin, 2_000_000), grace);
    client.receive(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").expect("no close");
    let (p, conn) = (&client.profile, &mut client.conn);
    assert!(!conn.busy());
    assert_eq!(conn.poll_timeout(p), None);
    assert!(conn.on_timeout(p, Now::after(p.origin, u64::MAX / 2), &mut |_| {}).is_ok());
}

#[test]
fn a_target_takes_no_connection_once_none_succeeded_for_the_connect_timeout() {
    let p = profile(Kind::Http, None);
    assert!(!p.takes_no_connection(CONNECT_TIMEOUT - Duration::from_nanos(1)));
    assert!(p.takes_no_connection(CONNECT_TIMEOUT));
}
