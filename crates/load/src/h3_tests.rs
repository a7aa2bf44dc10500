//! The HTTP/3 client in memory: an [`H3Client`] joined to a small HTTP/3 server (a
//! `QuicEndpoint` whose app is written here on `sockscale_h3`) by two queues of datagrams, on
//! simulated time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use sockscale_h3::{ErrorCode, RequestEvent, RequestStream, Settings};
use sockscale_proto::quic::quinn_proto::{Connection, Dir, Event, StreamEvent, StreamId, VarInt};
use sockscale_proto::quic::{Admission, Apps, QuicEndpoint, QuicSetup, QuicTuning, RetryMode};
use sockscale_proto::udp::Endpoint;
use sockscale_tls::{ClientTls, ServerOptions, ServerTls, TestCertificate, Trust};

use super::*;

const SERVER: &str = "127.0.0.1:4433";
const CLIENT: &str = "127.0.0.1:50000";

/// What the test server does with each request.
#[derive(Clone, Default)]
struct Script {
    status: u16,
    body: Vec<u8>,
    /// Reset every n-th request stream (H3_REQUEST_REJECTED) instead of answering.
    reset_every: Option<u32>,
    /// Send a DATA frame before the HEADERS: HTTP/3's H3_FRAME_UNEXPECTED.
    data_first: bool,
    /// After answering this many requests, send GOAWAY on the control stream.
    goaway_after: Option<u32>,
}

struct TestServer {
    script: Script,
    requests: u32,
    control: Option<StreamId>,
}

#[derive(Default)]
struct ServerConn {
    streams: HashMap<StreamId, RequestStream>,
}

impl TestServer {
    fn read_request(&mut self, app: &mut ServerConn, conn: &mut Connection, id: StreamId) {
        let Some(stream) = app.streams.get_mut(&id) else { return };
        let mut ended = false;
        {
            let mut recv = conn.recv_stream(id);
            let Ok(mut chunks) = recv.read(true) else { return };
            loop {
                let (bytes, fin) = match chunks.next(usize::MAX) {
                    Ok(Some(chunk)) => (chunk.bytes, false),
                    Ok(None) => (Bytes::new(), true),
                    Err(_) => break,
                };
                let mut input = &bytes[..];
                loop {
                    let (n, event) = stream.feed(input, fin).expect("a well-formed request");
                    input = &input[n..];
                    match event {
                        None => break,
                        Some(RequestEvent::End) => ended = true,
                        Some(_) => {}
                    }
                }
                if fin {
                    break;
                }
            }
            let _ = chunks.finalize();
        }
        if ended {
            app.streams.remove(&id);
            self.respond(conn, id);
        }
    }

    fn respond(&mut self, conn: &mut Connection, id: StreamId) {
        self.requests += 1;
        let mut send = conn.send_stream(id);
        if self.script.reset_every.is_some_and(|n| self.requests % n == 0) {
            let _ = send.reset(VarInt::from_u32(ErrorCode::H3_REQUEST_REJECTED.code() as u32));
            return;
        }
        let mut out = Vec::new();
        if self.script.data_first {
            sockscale_h3::put_data_frame_header(1, &mut out);
            out.push(b'x');
        }
        let status = self.script.status.to_string();
        let length = self.script.body.len().to_string();
        let mut block = Vec::new();
        let fields: [(&[u8], &[u8]); 2] = [(b":status", status.as_bytes()), (b"content-length", length.as_bytes())];
        sockscale_h3::encode_field_section(fields, &mut block);
        sockscale_h3::put_headers_frame(&block, &mut out);
        sockscale_h3::put_data_frame_header(self.script.body.len() as u64, &mut out);
        out.extend_from_slice(&self.script.body);
        let written = send.write(&out).expect("write");
        assert_eq!(written, out.len(), "the response fits the stream's window");
        let _ = send.finish();
        if self.script.goaway_after == Some(self.requests) {
            if let Some(control) = self.control {
                let mut goaway = Vec::new();
                // The next client bidi stream: none past those answered is taken.
                sockscale_h3::put_goaway(id.index() * 4 + 4, &mut goaway);
                let _ = conn.send_stream(control).write(&goaway);
            }
        }
    }
}

impl Apps for TestServer {
    type App = ServerConn;

    fn start(&mut self, conn: &mut Connection, _now: Instant) -> ServerConn {
        if let Some(id) = conn.streams().open(Dir::Uni) {
            let mut control = Vec::new();
            sockscale_h3::encode_uni_stream_type(sockscale_h3::stream_type::CONTROL, &mut control);
            Settings::default().encode_frame(&mut control);
            let _ = conn.send_stream(id).write(&control);
            self.control = Some(id);
        }
        ServerConn::default()
    }

    fn event(&mut self, app: &mut ServerConn, conn: &mut Connection, event: Event, _now: Instant) {
        match event {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    app.streams.insert(id, RequestStream::new(64 << 10, false));
                    self.read_request(app, conn, id);
                }
            }
            Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                while let Some(id) = conn.streams().accept(Dir::Uni) {
                    discard(conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) if id.dir() == Dir::Bi => self.read_request(app, conn, id),
            Event::Stream(StreamEvent::Readable { id }) => discard(conn, id),
            _ => {}
        }
    }

    fn begin_drain(&mut self, _app: &mut ServerConn, conn: &mut Connection, now: Instant) {
        conn.close(now, VarInt::from_u32(0x100), Bytes::new());
    }
}

/// The client's control stream: read and dropped (the test server needs nothing of it).
fn discard(conn: &mut Connection, id: StreamId) {
    let mut recv = conn.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else { return };
    while let Ok(Some(_)) = chunks.next(usize::MAX) {}
    let _ = chunks.finalize();
}

struct Certs {
    _dir: tempfile::TempDir,
    files: sockscale_tls::CertificateFiles,
}

fn certs() -> Certs {
    let dir = tempfile::tempdir().expect("tempdir");
    let files =
        TestCertificate::generate(&["127.0.0.1".into()]).expect("certificate").write(dir.path()).expect("write");
    Certs { _dir: dir, files }
}

fn server(certs: &Certs, alpn: &[u8], script: Script) -> QuicEndpoint<TestServer> {
    server_with(certs, alpn, script, false)
}

/// A server; `zero_rtt`: it accepts 0-RTT data. Each has its own ticket keys.
fn server_with(certs: &Certs, alpn: &[u8], script: Script, zero_rtt: bool) -> QuicEndpoint<TestServer> {
    // rustls takes 0-RTT only with stateful resumption (RFC 8446 §8.1): no stateless tickets,
    // the session cache's ids as tickets instead.
    let options = ServerOptions { tickets: !zero_rtt, ..ServerOptions::default() };
    let tls = ServerTls::from_pem_files(&certs.files.cert, &certs.files.key, SystemTime::now(), &options)
        .expect("server tls");
    let mut config = tls.rustls_config(vec![alpn.to_vec()]);
    if zero_rtt {
        config.send_tls13_tickets = 2;
    }
    server_tuned(config, QuicTuning { zero_rtt, ..QuicTuning::default() }, script)
}

/// A server from its TLS configuration and transport settings.
fn server_tuned(
    config: sockscale_proto::quic::quinn_proto::rustls::ServerConfig,
    tuning: QuicTuning,
    script: Script,
) -> QuicEndpoint<TestServer> {
    let setup = QuicSetup::server(config, tuning, Default::default()).expect("setup");
    let admission = Admission {
        max_connections: 10,
        max_handshakes: 10,
        retry: RetryMode::Off,
        handshake_timeout: std::time::Duration::from_secs(10),
    };
    QuicEndpoint::new(Arc::new(setup), admission, TestServer { script, requests: 0, control: None })
}

fn profile(trust: &Trust, body: &[u8]) -> H3Profile {
    profile_with(trust, body, false)
}

fn profile_with(trust: &Trust, body: &[u8], zero_rtt: bool) -> H3Profile {
    let tls = ClientTls::new(trust, vec![b"h3".to_vec()], true).expect("client tls");
    let head = RequestHead {
        method: if body.is_empty() { "GET" } else { "POST" },
        scheme: "https",
        authority: "127.0.0.1:4433",
        path: "/",
        fields: vec![("user-agent".into(), "sockscale")],
    };
    let remote: SocketAddr = SERVER.parse().expect("addr");
    H3Profile::new(
        &tls,
        "127.0.0.1",
        remote,
        &head,
        &Bytes::copy_from_slice(body),
        H3Options { handshake_timeout: Duration::from_secs(5), zero_rtt, max_mtu: crate::DEFAULT_QUIC_MAX_MTU },
    )
    .expect("profile")
}

/// The client and the server joined in memory.
struct Net {
    client: H3Client,
    server: QuicEndpoint<TestServer>,
    now: Instant,
    events: Vec<H3Event>,
}

impl Net {
    fn new(profile: &H3Profile, server: QuicEndpoint<TestServer>) -> Net {
        let now = Instant::now();
        let client = H3Client::new(profile, now).expect("client");
        Net { client, server, now, events: Vec::new() }
    }

    /// Move datagrams both ways until neither side has any, without advancing time.
    fn step(&mut self) -> bool {
        let mut moved = false;
        let from: SocketAddr = CLIENT.parse().expect("addr");
        let mut buf = Vec::new();
        while let Some((size, segment)) = self.client.poll_transmit(self.now, 10, &mut buf) {
            for datagram in buf[..size].chunks(segment.unwrap_or(size)) {
                self.server.handle(self.now, from, datagram);
            }
            buf.clear();
            moved = true;
        }
        let events = &mut self.events;
        self.client.drain(&mut |e| events.push(e));
        while let Some(t) = self.server.poll_transmit(self.now, 10, &mut buf) {
            for datagram in buf[..t.size].chunks(t.segment_size.unwrap_or(t.size)) {
                self.client.handle(self.now, datagram);
            }
            buf.clear();
            moved = true;
        }
        self.client.after_datagrams(self.now, &mut |e| events.push(e));
        moved
    }

    /// Step, advancing time to each next timeout, until `done` or `limit` of simulated time.
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            while self.step() {}
            if done(self) {
                return true;
            }
            let next = [self.client.poll_timeout(), self.server.poll_timeout()].into_iter().flatten().min();
            let Some(next) = next.filter(|&at| at <= end) else { return false };
            self.now = self.now.max(next);
            self.client.handle_timeout(self.now);
            self.server.handle_timeout(self.now);
        }
    }

    fn responses(&self) -> Vec<(Stamp, u16)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                H3Event::Response { stamp, status } => Some((*stamp, *status)),
                _ => None,
            })
            .collect()
    }

    fn resets(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                H3Event::StreamReset { code } => Some(code.clone()),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn requests_are_sent_on_their_streams_answered_and_timed() {
    let certs = certs();
    let body = vec![b'z'; 3000];
    let script = Script { status: 200, body: body.clone(), ..Script::default() };
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"h3", script));
    assert!(!net.client.may_begin(4), "no request before the handshake");
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()), "no handshake");
    let handshake = net.events.iter().find(|e| matches!(e, H3Event::Handshake { .. })).cloned();
    assert!(
        matches!(&handshake, Some(H3Event::Handshake { alpn: Some(alpn), zero_rtt_accepted: false, .. }) if alpn == "h3"),
        "{handshake:?}"
    );
    let stamps: Vec<Stamp> = (1..=4).map(|i| Stamp { due_ns: i, sent_ns: 10 + i }).collect();
    for &stamp in &stamps {
        assert!(net.client.may_begin(4));
        net.client.begin(stamp);
    }
    assert!(!net.client.may_begin(4), "--pipeline 4 is reached");
    assert_eq!(net.client.outstanding(), 4);
    assert_eq!(net.client.oldest(), Some(stamps[0]));
    assert!(net.run_until(Duration::from_secs(5), |n| n.responses().len() == 4), "{:?}", net.events);
    let mut got = net.responses();
    got.sort_by_key(|(s, _)| s.due_ns);
    assert_eq!(got, stamps.iter().map(|&s| (s, 200)).collect::<Vec<_>>());
    assert_eq!(net.client.outstanding(), 0);
    let sent: Vec<usize> = net
        .events
        .iter()
        .filter_map(|e| match e {
            H3Event::RequestSent { bytes, early: false } => Some(*bytes),
            _ => None,
        })
        .collect();
    assert_eq!(sent, vec![profile.request_len(); 4]);
    let received: usize = net
        .events
        .iter()
        .map(|e| match e {
            H3Event::Received { bytes } => *bytes,
            _ => 0,
        })
        .sum();
    assert!(received > 4 * body.len(), "{received} bytes of response streams");
    // Closing tells the transport's figures, and returns the CONNECTION_CLOSE to send.
    let mut ended = Vec::new();
    let last = net.client.close(net.now, &mut |e| ended.push(e));
    assert!(!last.is_empty(), "a CONNECTION_CLOSE datagram");
    match ended.as_slice() {
        [H3Event::Ended(f)] => {
            assert!(f.rtt.is_some() && f.packets_sent > 0 && f.datagrams_received > 0, "{f:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!net.client.may_begin(4), "a closed connection begins nothing");
}

#[test]
fn a_request_body_goes_whole_and_the_status_is_what_the_server_said() {
    let certs = certs();
    let script = Script { status: 503, body: b"busy".to_vec(), ..Script::default() };
    // Larger than a stream's first flight: written as QUIC's flow control allows.
    let body = vec![7u8; 300_000];
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), &body);
    assert!(profile.request_len() > body.len());
    let mut net = Net::new(&profile, server(&certs, b"h3", script));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    net.client.begin(Stamp::at(1));
    assert!(net.run_until(Duration::from_secs(10), |n| !n.responses().is_empty()), "{:?}", net.events);
    assert_eq!(net.responses(), vec![(Stamp::at(1), 503)]);
}

#[test]
fn a_request_body_larger_than_the_servers_connection_window_goes_whole() {
    let certs = certs();
    let tls =
        ServerTls::from_pem_files(&certs.files.cert, &certs.files.key, SystemTime::now(), &ServerOptions::default())
            .expect("server tls");
    // The server grants 100 KB a connection at a time, less than a stream's window: the body
    // is written, blocked by the connection's window and woken by its credit many times. (A
    // write that stopped at a partial chunk without going on to `Blocked` was never woken: a
    // 10 MiB upload to quic-go stalled so; this fails then.)
    let tuning = QuicTuning { connection_window: 100_000, ..QuicTuning::default() };
    let script = Script { status: 200, body: b"ok".to_vec(), ..Script::default() };
    let server = server_tuned(tls.rustls_config(vec![b"h3".to_vec()]), tuning, script);
    let body = vec![7u8; 1_000_000];
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), &body);
    let mut net = Net::new(&profile, server);
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    net.client.begin(Stamp::at(1));
    assert!(net.run_until(Duration::from_secs(10), |n| !n.responses().is_empty()), "{:?}", net.events);
    assert_eq!(net.responses(), vec![(Stamp::at(1), 200)]);
}

#[test]
fn a_stream_the_server_resets_is_counted_with_its_code() {
    let certs = certs();
    let script = Script { status: 200, reset_every: Some(2), ..Script::default() };
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"h3", script));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    for i in 0..4 {
        net.client.begin(Stamp::at(i));
    }
    assert!(net.run_until(Duration::from_secs(5), |n| n.responses().len() + n.resets().len() == 4), "{:?}", net.events);
    assert_eq!(net.responses().len(), 2);
    assert_eq!(net.resets(), vec!["H3_REQUEST_REJECTED".to_owned(); 2]);
    assert_eq!(net.client.outstanding(), 0);
    assert!(net.client.failure().is_none(), "a reset stream is not the connection's failure");
}

#[test]
fn a_response_that_breaks_http3_closes_the_connection_with_its_code() {
    let certs = certs();
    let script = Script { status: 200, data_first: true, ..Script::default() };
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"h3", script));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    net.client.begin(Stamp::at(1));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.failure().is_some()), "{:?}", net.events);
    let failure = net.client.failure().expect("failure");
    assert_eq!(failure.kind, "H3_FRAME_UNEXPECTED", "{failure:?}");
    assert!(!failure.handshaking);
    assert!(net.responses().is_empty());
}

#[test]
fn a_server_that_refuses_alpn_h3_fails_the_handshake_in_words() {
    let certs = certs();
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"hq-interop", Script::default()));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.failure().is_some()));
    let failure = net.client.failure().expect("failure");
    assert_eq!(failure.kind, "alpn_refused", "{failure:?}");
    assert!(failure.handshaking);
    assert!(failure.words.contains("refused ALPN h3") && failure.words.contains("120"), "{}", failure.words);
    assert!(!net.client.established());
}

#[test]
fn an_untrusted_certificate_fails_the_handshake_with_the_verifiers_words() {
    let certs = certs();
    let other = self::certs();
    let profile = profile(&Trust::CaFile(other.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"h3", Script::default()));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.failure().is_some()));
    let failure = net.client.failure().expect("failure");
    assert_eq!(failure.kind, "certificate", "{failure:?}");
    assert!(failure.handshaking);
    assert!(!failure.words.contains("CertificateWords"), "words, not rustls's debug form: {}", failure.words);
    assert!(failure.words.contains("--cacert") || failure.words.contains("--insecure"), "{}", failure.words);
}

#[test]
fn tls_words_come_out_of_rustls_debug_form() {
    let debug = r#"invalid peer certificate: Other(OtherError(CertificateWords("signed by \"X\" \\ not trusted: give --cacert")))"#;
    assert_eq!(tls_words(debug), r#"signed by "X" \ not trusted: give --cacert"#);
    assert_eq!(tls_words("plain words"), "plain words");
}

#[test]
fn a_goaway_stops_new_requests_and_those_in_flight_are_answered() {
    let certs = certs();
    let script = Script { status: 200, goaway_after: Some(2), ..Script::default() };
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"h3", script));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    net.client.begin(Stamp::at(1));
    net.client.begin(Stamp::at(2));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.going_away()), "{:?}", net.events);
    assert!(net.run_until(Duration::from_secs(5), |n| n.responses().len() == 2));
    assert_eq!(net.events.iter().filter(|e| matches!(e, H3Event::GoAway)).count(), 1);
    assert!(!net.client.may_begin(16), "no request after a GOAWAY");
    assert!(net.client.failure().is_none());
}

/// The events of the handshake and of the requests sent: (0-RTT sent, accepted), and whether
/// each request went early.
fn zero_rtt_outcome(events: &[H3Event]) -> (Option<(bool, bool)>, Vec<bool>) {
    let handshake = events.iter().find_map(|e| match e {
        H3Event::Handshake { zero_rtt_sent, zero_rtt_accepted, .. } => Some((*zero_rtt_sent, *zero_rtt_accepted)),
        _ => None,
    });
    let sent = events
        .iter()
        .filter_map(|e| match e {
            H3Event::RequestSent { early, .. } => Some(*early),
            _ => None,
        })
        .collect();
    (handshake, sent)
}

/// A first connection to `net`'s server, for its session ticket; then a second one.
fn resume(net: &mut Net, profile: &H3Profile) {
    assert!(!net.client.may_begin(2), "no 0-RTT without a session");
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    // The ticket comes after the handshake.
    net.run_until(Duration::from_millis(100), |_| false);
    let _ = net.client.close(net.now, &mut |_| {});
    while net.step() {}
    net.client = H3Client::new(profile, net.now).expect("client");
    net.events.clear();
}

#[test]
fn zero_rtt_sends_a_resumed_connections_first_requests_before_the_handshake() {
    let certs = certs();
    let script = Script { status: 200, ..Script::default() };
    let profile = profile_with(&Trust::CaFile(certs.files.ca.clone()), b"", true);
    let mut net = Net::new(&profile, server_with(&certs, b"h3", script, true));
    resume(&mut net, &profile);
    assert!(net.client.may_begin(2), "a resumed session's 0-RTT keys are there at once");
    assert!(!net.client.established());
    net.client.begin(Stamp::at(1));
    net.client.begin(Stamp::at(2));
    assert!(!net.client.may_begin(2), "--pipeline 2 is reached");
    assert!(net.run_until(Duration::from_secs(5), |n| n.responses().len() == 2), "{:?}", net.events);
    assert_eq!(zero_rtt_outcome(&net.events), (Some((true, true)), vec![true, true]));
}

#[test]
fn zero_rtt_refused_by_the_server_sends_the_requests_again() {
    let certs = certs();
    let script = Script { status: 200, ..Script::default() };
    let profile = profile_with(&Trust::CaFile(certs.files.ca.clone()), b"", true);
    let mut net = Net::new(&profile, server_with(&certs, b"h3", script.clone(), true));
    resume(&mut net, &profile);
    // Another server (other ticket keys): the ticket is not taken, nor its 0-RTT data.
    net.server = server_with(&certs, b"h3", script, true);
    assert!(net.client.may_begin(2));
    net.client.begin(Stamp::at(1));
    net.client.begin(Stamp::at(2));
    assert!(net.run_until(Duration::from_secs(5), |n| n.responses().len() == 2), "{:?}", net.events);
    let mut stamps: Vec<Stamp> = net.responses().into_iter().map(|(s, _)| s).collect();
    stamps.sort_by_key(|s| s.due_ns);
    assert_eq!(stamps, vec![Stamp::at(1), Stamp::at(2)], "each request answered once, timed from its first send");
    assert_eq!(zero_rtt_outcome(&net.events), (Some((true, false)), vec![true, true, false, false]));
}

#[test]
fn without_0rtt_a_resumed_connection_waits_for_its_handshake() {
    let certs = certs();
    let script = Script { status: 200, ..Script::default() };
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server_with(&certs, b"h3", script, true));
    resume(&mut net, &profile);
    assert!(!net.client.may_begin(2));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    assert_eq!(zero_rtt_outcome(&net.events), (Some((false, false)), vec![]));
}

/// A load `Connection` speaking HTTP/3, its QUIC connection begun, and no server.
fn load_connection(connect_timeout: Duration) -> (crate::connection::Profile, crate::connection::Connection, Now) {
    use crate::connection::{Connection, Kind, Profile};
    let certs = certs();
    let origin = Instant::now();
    let profile = Profile {
        kind: Kind::H3,
        pattern: crate::pattern::Pattern::default(),
        requests: Vec::new(),
        request_len: 0,
        head_requests: false,
        h2_request: None,
        accept_status: crate::config::AcceptedStatuses::default(),
        connect_timeout,
        reply_timeout: Duration::from_secs(10),
        tls: None,
        origin,
        ws: None,
        h3: Some(profile(&Trust::CaFile(certs.files.ca.clone()), b"")),
    };
    let start = Now::after(origin, 0);
    let mut conn = Connection::new(&profile, 0, start);
    let connected = conn.on_connected(&profile, start);
    assert!(connected.failed.is_none(), "{:?}", connected.failed);
    (profile, conn, start)
}

use crate::events::Now;

#[test]
fn a_handshake_not_done_within_the_connect_timeout_ends_the_load_connection() {
    let (profile, mut conn, start) = load_connection(Duration::from_secs(2));
    assert!(conn.is_quic() && conn.is_connected() && conn.greeting());
    assert!(!conn.may_begin(1), "nothing begins before the handshake");
    // Its Initial is ready to go.
    let mut out = Vec::new();
    let first = conn.poll_datagrams(&profile, start, 10, &mut out, &mut |_| {}).expect("no close");
    assert!(first.is_some_and(|(size, _)| size >= 1200), "a padded Initial: {first:?}");
    // Retransmissions come and go; the connect timeout ends it.
    let deadline = profile.origin + Duration::from_secs(2);
    let mut now = start;
    let close = loop {
        let at = conn.poll_timeout(&profile).expect("a deadline");
        assert!(at <= deadline, "woken by {at:?}, after the connect timeout");
        let ns = at.saturating_duration_since(profile.origin).as_nanos() as u64;
        now = Now::after(profile.origin, ns.max(now.ns));
        match conn.on_timeout(&profile, now, &mut |_| {}) {
            Err(close) => break close,
            Ok(()) => while let Ok(Some(_)) = conn.poll_datagrams(&profile, now, 10, &mut Vec::new(), &mut |_| {}) {},
        }
    };
    assert_eq!(now.at, deadline);
    match close.reason {
        crate::connection::Reason::Quic(failure) => {
            assert_eq!(failure.kind, "timeout");
            assert!(failure.handshaking);
            assert!(failure.words.contains("no QUIC handshake within 2.0 s"), "{}", failure.words);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_icmp_port_unreachable_ends_the_load_connection() {
    let (_profile, mut conn, _) = load_connection(Duration::from_secs(2));
    match conn.quic_refused().reason {
        crate::connection::Reason::Quic(failure) => {
            assert_eq!(failure.kind, "unreachable");
            assert!(failure.handshaking && failure.words.contains("ICMP port unreachable"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_idle_connection_is_kept_open_by_pings() {
    let certs = certs();
    let script = Script { status: 200, ..Script::default() };
    let profile = profile(&Trust::CaFile(certs.files.ca.clone()), b"");
    let mut net = Net::new(&profile, server(&certs, b"h3", script));
    assert!(net.run_until(Duration::from_secs(5), |n| n.client.established()));
    // Twice the 30 s idle timeout with no request.
    assert!(!net.run_until(Duration::from_secs(60), |n| n.client.failure().is_some()), "{:?}", net.client.failure());
    assert_eq!(net.server.open_connections(), 1);
    net.client.begin(Stamp::at(1));
    assert!(net.run_until(Duration::from_secs(5), |n| n.responses().len() == 1));
}
