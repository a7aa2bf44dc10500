//! The endpoint driver in memory: a quinn-proto client joined to a [`QuicEndpoint`] by two
//! queues of datagrams on simulated time, as quinn-proto's own `Pair`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Event, StreamEvent, StreamId};
use sockscale_tls::{ClientTls, ServerOptions, ServerTls, TestCertificate, Trust};

use super::config::transport;
use super::*;
use crate::udp::{Endpoint, Transmit};

pub(crate) const SERVER: &str = "127.0.0.1:4433";
pub(crate) const CLIENT: &str = "127.0.0.1:50000";

/// A CA and a server certificate for 127.0.0.1, written to a temporary directory.
pub(crate) struct Certs {
    pub _dir: tempfile::TempDir,
    pub files: sockscale_tls::CertificateFiles,
}

pub(crate) fn certs() -> Certs {
    let dir = tempfile::tempdir().expect("tempdir");
    let files =
        TestCertificate::generate(&["127.0.0.1".into()]).expect("certificate").write(dir.path()).expect("write");
    Certs { _dir: dir, files }
}

pub(crate) fn setup(certs: &Certs, alpn: &[u8], tuning: QuicTuning) -> Arc<QuicSetup> {
    let tls =
        ServerTls::from_pem_files(&certs.files.cert, &certs.files.key, SystemTime::now(), &ServerOptions::default())
            .expect("server tls");
    Arc::new(QuicSetup::server(tls.rustls_config(vec![alpn.to_vec()]), tuning, Arc::default()).expect("quic setup"))
}

pub(crate) fn client_config(certs: &Certs, alpn: &[u8], tuning: &QuicTuning) -> ClientConfig {
    let tls = ClientTls::new(&Trust::CaFile(certs.files.ca.clone()), vec![alpn.to_vec()], true).expect("client tls");
    let crypto = QuicClientConfig::try_from(tls.rustls_config(vec![alpn.to_vec()], true)).expect("quic client");
    let mut c = ClientConfig::new(super::resumption::client_config(crypto));
    c.transport_config(Arc::new(transport(tuning).expect("transport")));
    c
}

const HANDSHAKE: Duration = Duration::from_secs(10);

pub(crate) fn admission() -> Admission {
    Admission { max_connections: 100, max_handshakes: 100, retry: RetryMode::Off, handshake_timeout: HANDSHAKE }
}

/// A client endpoint and its connections, with the server endpoint under test, on simulated
/// time. Datagrams cross in the order they were sent; `lose` drops every n-th one.
pub(crate) struct Pair<E: Endpoint> {
    pub server: E,
    pub client: quinn_proto::Endpoint,
    pub conns: Vec<(ConnectionHandle, Connection)>,
    pub now: Instant,
    /// Datagrams in flight with the ECN bits each was sent with.
    to_server: VecDeque<(SocketAddr, Vec<u8>, u8)>,
    to_client: VecDeque<(Vec<u8>, u8)>,
    pub server_datagrams: usize,
    pub client_datagrams: usize,
    pub client_events: Vec<(usize, Event)>,
    /// The client's datagrams are dropped on their way (a peer that never acknowledges).
    pub mute_client: bool,
    /// The path marks this many more of the client's ECN-capable datagrams Congestion
    /// Experienced (a bounded number: a CE mark is acknowledged at once, so marking every
    /// datagram both ways would have the two sides acknowledge each other's ACKs forever).
    pub ce_marks_to_server: usize,
    /// The ECN bits of every datagram the server sent.
    pub server_marks: Vec<u8>,
}

impl<E: Endpoint> Pair<E> {
    pub fn new(server: E) -> Self {
        Self::with_client(server, quinn_proto::Endpoint::new(Arc::default(), None, false, None))
    }

    /// With the client's endpoint made by the test.
    pub fn with_client(server: E, client: quinn_proto::Endpoint) -> Self {
        Pair {
            server,
            client,
            conns: Vec::new(),
            now: Instant::now(),
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            server_datagrams: 0,
            client_datagrams: 0,
            client_events: Vec::new(),
            mute_client: false,
            ce_marks_to_server: 0,
            server_marks: Vec::new(),
        }
    }

    /// A new client connection from `from`; returns its index.
    pub fn connect_from(&mut self, config: ClientConfig, from: SocketAddr) -> usize {
        let (ch, conn) =
            self.client.connect(self.now, config, SERVER.parse().expect("addr"), "127.0.0.1").expect("connect");
        let _ = from;
        self.conns.push((ch, conn));
        self.conns.len() - 1
    }

    pub fn connect(&mut self, config: ClientConfig) -> usize {
        self.connect_from(config, CLIENT.parse().expect("addr"))
    }

    /// Move datagrams both ways until neither side has any, without advancing time.
    /// Returns whether anything moved.
    pub fn step(&mut self) -> bool {
        let mut moved = false;
        let from: SocketAddr = CLIENT.parse().expect("addr");
        // The client's side.
        for i in 0..self.conns.len() {
            loop {
                let (ch, conn) = &mut self.conns[i];
                while let Some(ev) = conn.poll_endpoint_events() {
                    if let Some(answer) = self.client.handle_event(*ch, ev) {
                        conn.handle_event(answer);
                    }
                }
                while let Some(ev) = conn.poll() {
                    self.client_events.push((i, ev));
                }
                let mut buf = Vec::new();
                let Some(t) = conn.poll_transmit(self.now, 10, &mut buf) else { break };
                moved = true;
                let seg = t.segment_size.unwrap_or(t.size);
                let sent_ecn = t.ecn.map_or(0, |e| e as u8);
                for d in buf[..t.size].chunks(seg) {
                    self.client_datagrams += 1;
                    let ecn = if sent_ecn != 0 && self.ce_marks_to_server > 0 {
                        self.ce_marks_to_server -= 1;
                        0b11
                    } else {
                        sent_ecn
                    };
                    if !self.mute_client {
                        self.to_server.push_back((from, d.to_vec(), ecn));
                    }
                }
            }
        }
        // Across to the server.
        while let Some((peer, d, ecn)) = self.to_server.pop_front() {
            moved = true;
            self.server.handle_ecn(self.now, peer, ecn, &d);
        }
        let mut buf = Vec::new();
        while let Some(Transmit { size, segment_size, ecn, .. }) = self.server.poll_transmit(self.now, 10, &mut buf) {
            moved = true;
            let start = buf.len() - size;
            for d in buf[start..].chunks(segment_size.unwrap_or(size)) {
                self.server_datagrams += 1;
                self.server_marks.push(ecn);
                self.to_client.push_back((d.to_vec(), ecn));
            }
        }
        // Back to the client.
        while let Some((d, ecn)) = self.to_client.pop_front() {
            moved = true;
            let mut resp = Vec::new();
            match self.client.handle(
                self.now,
                SERVER.parse().expect("addr"),
                None,
                quinn_proto::EcnCodepoint::from_bits(ecn),
                BytesMut::from(&d[..]),
                &mut resp,
            ) {
                Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                    if let Some((_, conn)) = self.conns.iter_mut().find(|(c, _)| *c == ch) {
                        conn.handle_event(ev);
                    }
                }
                Some(DatagramEvent::Response(t)) => {
                    self.to_server.push_back((from, resp[..t.size].to_vec(), 0));
                }
                _ => {}
            }
        }
        moved
    }

    /// The earliest timeout on either side.
    fn next_timeout(&mut self) -> Option<Instant> {
        let client = self.conns.iter_mut().filter_map(|(_, c)| c.poll_timeout()).min();
        [client, self.server.poll_timeout()].into_iter().flatten().min()
    }

    /// Step, advancing simulated time to each next timeout, until `done` or `limit` of
    /// simulated time passed. Returns whether `done` came true.
    pub fn drive_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            while self.step() {}
            if done(self) {
                return true;
            }
            let Some(at) = self.next_timeout() else { return false };
            if at > end {
                return false;
            }
            self.now = self.now.max(at);
            for (_, c) in self.conns.iter_mut() {
                if c.poll_timeout().is_some_and(|t| t <= self.now) {
                    c.handle_timeout(self.now);
                }
            }
            if self.server.poll_timeout().is_some_and(|t| t <= self.now) {
                self.server.handle_timeout(self.now);
            }
        }
    }

    pub fn connected(&self, i: usize) -> bool {
        self.client_events.iter().any(|(j, e)| *j == i && matches!(e, Event::Connected))
    }

    pub fn lost(&self, i: usize) -> Option<&quinn_proto::ConnectionError> {
        self.client_events.iter().find_map(|(j, e)| match e {
            Event::ConnectionLost { reason } if *j == i => Some(reason),
            _ => None,
        })
    }

    /// Everything readable on a client stream now, and whether it ended.
    pub fn read_client(&mut self, i: usize, id: StreamId) -> (Vec<u8>, bool) {
        let conn = &mut self.conns[i].1;
        let mut out = Vec::new();
        let mut fin = false;
        let mut stream = conn.recv_stream(id);
        if let Ok(mut chunks) = stream.read(true) {
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(c)) => out.extend_from_slice(&c.bytes),
                    Ok(None) => {
                        fin = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            let _ = chunks.finalize();
        }
        (out, fin)
    }
}

/// A stream echo: every bidirectional stream's bytes come back on it, and its end.
pub(crate) struct EchoApps;

impl Apps for EchoApps {
    type App = ();

    fn start(&mut self, _conn: &mut Connection, _now: Instant) {}

    fn event(&mut self, _app: &mut (), conn: &mut Connection, event: Event, _now: Instant) {
        let id = match event {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => match conn.streams().accept(Dir::Bi) {
                Some(id) => id,
                None => return,
            },
            Event::Stream(StreamEvent::Readable { id }) => id,
            _ => return,
        };
        let mut data = Vec::new();
        let mut fin = false;
        if let Ok(mut chunks) = conn.recv_stream(id).read(true) {
            while let Ok(Some(c)) = chunks.next(usize::MAX) {
                data.extend_from_slice(&c.bytes);
            }
            if matches!(chunks.next(usize::MAX), Ok(None)) {
                fin = true;
            }
            let _ = chunks.finalize();
        }
        let mut send = conn.send_stream(id);
        let _ = send.write(&data);
        if fin {
            let _ = send.finish();
        }
    }

    fn begin_drain(&mut self, _app: &mut (), conn: &mut Connection, now: Instant) {
        conn.close(now, 0u32.into(), bytes::Bytes::from_static(b"drain"));
    }
}

fn echo_pair(admission: Admission) -> (Pair<QuicEndpoint<EchoApps>>, ClientConfig, Certs, Arc<QuicSetup>) {
    let certs = certs();
    let tuning = QuicTuning::default();
    let setup = setup(&certs, b"echo", tuning.clone());
    let server = QuicEndpoint::new(setup.clone(), admission, EchoApps);
    let client = client_config(&certs, b"echo", &tuning);
    (Pair::new(server), client, certs, setup)
}

#[test]
fn a_handshake_completes_and_a_stream_is_echoed() {
    let (mut pair, client, _certs, setup) = echo_pair(admission());
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)), "no handshake");
    let id = pair.conns[c].1.streams().open(Dir::Bi).expect("a stream");
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut send = pair.conns[c].1.send_stream(id);
        let mut at = 0;
        while at < payload.len() {
            at += send.write(&payload[at..]).expect("write");
        }
        send.finish().expect("finish");
    }
    let mut got = Vec::new();
    let done = pair.drive_until(Duration::from_secs(5), |p| {
        let (bytes, fin) = p.read_client(c, id);
        got.extend_from_slice(&bytes);
        fin
    });
    assert!(done, "the echo did not end ({} of {} bytes)", got.len(), payload.len());
    assert_eq!(got, payload);
    let counts = setup.totals.snapshot();
    assert_eq!(counts.handshakes, 1);
    assert_eq!(pair.server.open_connections(), 1);
}

/// ECN both ways through the endpoint: the server's datagrams leave marked ECT(0) as
/// quinn-proto asks, and the client's marks reach quinn-proto, whose ACKs report them: once the
/// path marks some of the client's datagrams Congestion Experienced, the client slows down (a
/// congestion event) with no packet lost, which it could not do had the server dropped the
/// marks it was given.
#[test]
fn ecn_marks_go_out_and_come_in_and_a_ce_mark_is_a_congestion_signal_without_loss() {
    let (mut pair, client, _certs, _setup) = echo_pair(admission());
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)), "no handshake");
    assert!(pair.server_marks.contains(&0b10), "the server marks ECT(0): {:?}", pair.server_marks);
    pair.ce_marks_to_server = 20;
    let id = pair.conns[c].1.streams().open(Dir::Bi).expect("a stream");
    let payload = vec![7u8; 200_000];
    let mut sent = 0;
    let mut got = 0;
    let done = pair.drive_until(Duration::from_secs(10), |p| {
        if sent < payload.len() {
            let mut send = p.conns[c].1.send_stream(id);
            sent += send.write(&payload[sent..]).unwrap_or(0);
            if sent == payload.len() {
                send.finish().expect("finish");
            }
        }
        let (bytes, fin) = p.read_client(c, id);
        got += bytes.len();
        fin
    });
    assert!(done && got == payload.len(), "echoed {got} of {}", payload.len());
    let stats = pair.conns[c].1.stats();
    assert!(stats.path.congestion_events > 0, "CE marks reported by the server: {:?}", stats.path);
    assert_eq!(stats.path.lost_packets, 0, "{:?}", stats.path);
}

#[test]
fn an_idle_connection_is_dropped_after_the_idle_timeout_and_its_handle_freed() {
    let (mut pair, client, _certs, setup) = echo_pair(admission());
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
    let start = pair.now;
    assert!(pair.drive_until(Duration::from_secs(120), |p| p.server.open_connections() == 0), "never freed");
    let idle = pair.now - start;
    // 30 s idle on both sides, then the server's handle goes at once (no draining period
    // after an idle timeout).
    assert!(idle >= Duration::from_secs(30) && idle < Duration::from_secs(31), "freed after {idle:?}");
    let counts = setup.totals.snapshot();
    assert_eq!(counts.lost[LostReason::TimedOut as usize], 1, "{counts:?}");
    assert_eq!(counts.connections_ended, 1);
    assert!(pair.drive_until(Duration::from_secs(1), |p| p.lost(c).is_some()));
    assert!(matches!(pair.lost(c), Some(quinn_proto::ConnectionError::TimedOut)), "{:?}", pair.lost(c));
}

#[test]
fn connections_over_the_limit_are_refused_and_counted() {
    let (mut pair, client, _certs, setup) = echo_pair(Admission {
        max_connections: 2,
        max_handshakes: 100,
        retry: RetryMode::Off,
        handshake_timeout: HANDSHAKE,
    });
    let ids: Vec<usize> = (0..3).map(|_| pair.connect(client.clone())).collect();
    pair.drive_until(Duration::from_secs(5), |p| ids.iter().all(|&i| p.connected(i) || p.lost(i).is_some()));
    let connected = ids.iter().filter(|&&i| pair.connected(i)).count();
    assert_eq!(connected, 2);
    let refused = ids.iter().find(|&&i| !pair.connected(i)).copied().expect("one refused");
    assert!(
        matches!(pair.lost(refused), Some(quinn_proto::ConnectionError::ConnectionClosed(c)) if u64::from(c.error_code) == 0x2),
        "refused with CONNECTION_REFUSED: {:?}",
        pair.lost(refused)
    );
    assert_eq!(setup.totals.snapshot().refused_busy, 1);
}

#[test]
fn retry_on_validates_the_address_first_and_the_handshake_still_completes() {
    let (mut pair, client, _certs, setup) = echo_pair(Admission {
        max_connections: 100,
        max_handshakes: 100,
        retry: RetryMode::On,
        handshake_timeout: HANDSHAKE,
    });
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
    let counts = setup.totals.snapshot();
    assert_eq!((counts.retries, counts.handshakes), (1, 1));
}

#[test]
fn retry_auto_retries_only_under_load() {
    let (mut pair, client, _certs, setup) = echo_pair(Admission {
        max_connections: 100,
        max_handshakes: 4,
        retry: RetryMode::Auto,
        handshake_timeout: HANDSHAKE,
    });
    // One at a time: never two handshakes at once, no Retry.
    for _ in 0..3 {
        let c = pair.connect(client.clone());
        assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
    }
    assert_eq!(setup.totals.snapshot().retries, 0);
    // Six at once: from the third on, half the budget (2 of 4) is in use.
    let ids: Vec<usize> = (0..6).map(|_| pair.connect(client.clone())).collect();
    assert!(pair.drive_until(Duration::from_secs(5), |p| ids.iter().all(|&i| p.connected(i))));
    let counts = setup.totals.snapshot();
    assert_eq!(counts.retries, 4, "{counts:?}");
    assert_eq!(counts.handshakes, 9);
}

#[test]
fn garbage_datagrams_are_ignored_and_counted_and_a_bystander_is_served() {
    let (mut pair, client, _certs, setup) = echo_pair(admission());
    let peer: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
    for i in 0..1000u32 {
        let len = (i as usize * 7) % 1400 + 1;
        let junk: Vec<u8> = (0..len).map(|j| (j as u32 * 31 + i) as u8).collect();
        pair.server.handle(pair.now, peer, &junk);
    }
    let mut buf = Vec::new();
    let mut answered = 0;
    while let Some(t) = pair.server.poll_transmit(pair.now, 1, &mut buf) {
        answered += 1;
        assert!(t.size <= 1400, "no answer larger than its datagram's bound");
    }
    let counts = setup.totals.snapshot();
    assert_eq!(pair.server.open_connections(), 0);
    assert_eq!(counts.handshakes, 0);
    assert!(counts.datagrams_ignored + counts.endpoint_responses >= 900, "{counts:?} answered {answered}");
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
}

#[test]
fn a_drain_closes_every_connection_and_then_says_drained() {
    let (mut pair, client, _certs, setup) = echo_pair(admission());
    let ids: Vec<usize> = (0..3).map(|_| pair.connect(client.clone())).collect();
    assert!(pair.drive_until(Duration::from_secs(5), |p| ids.iter().all(|&i| p.connected(i))));
    assert!(!pair.server.drained());
    let now = pair.now;
    pair.server.begin_drain(now);
    assert!(pair.drive_until(Duration::from_secs(10), |p| p.server.drained()), "never drained");
    for i in ids {
        assert!(matches!(pair.lost(i), Some(quinn_proto::ConnectionError::ApplicationClosed(_))), "{:?}", pair.lost(i));
    }
    assert_eq!(setup.totals.snapshot().lost[LostReason::Local as usize], 3);
    // A new connection during the drain is refused.
    let late = pair.connect(client);
    pair.drive_until(Duration::from_secs(5), |p| p.lost(late).is_some());
    assert!(!pair.connected(late));
}

#[test]
fn a_second_connection_resumes_with_the_first_ones_ticket() {
    let (mut pair, client, _certs, setup) = echo_pair(admission());
    let first = pair.connect(client.clone());
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(first)));
    // Let the NewSessionTicket arrive.
    pair.drive_until(Duration::from_millis(100), |_| false);
    assert_eq!(setup.totals.snapshot().resumed, 0);
    let second = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(second)));
    let counts = setup.totals.snapshot();
    assert_eq!((counts.handshakes, counts.resumed), (2, 1), "{counts:?}");
    // The client reads the same from the ServerHello it received.
    let seen: Vec<Option<super::Handshake>> =
        [first, second].iter().map(|&i| super::Handshake::of(&pair.conns[i].1)).collect();
    assert_eq!(seen.iter().map(|h| h.as_ref().map(|h| h.resumed)).collect::<Vec<_>>(), [Some(false), Some(true)]);
    assert_eq!(seen[1].as_ref().and_then(|h| h.protocol.clone()), Some(b"echo".to_vec()), "{seen:?}");
}

#[test]
fn a_handshake_that_does_not_finish_ends_at_the_handshake_timeout() {
    let (mut pair, client, _certs, setup) = echo_pair(admission());
    let c = pair.connect(client);
    // The client's first flight reaches the server; nothing of the client's comes after it.
    let mut first = Vec::new();
    let t = pair.conns[c].1.poll_transmit(pair.now, 1, &mut first).expect("an Initial");
    let from: SocketAddr = CLIENT.parse().expect("addr");
    pair.server.handle(pair.now, from, &first[..t.size]);
    let start = pair.now;
    let mut now = pair.now;
    let mut buf = Vec::new();
    for _ in 0..10_000 {
        // The server's answers go nowhere.
        while pair.server.poll_transmit(now, 10, &mut buf).is_some() {}
        buf.clear();
        if pair.server.open_connections() == 0 {
            break;
        }
        let Some(at) = pair.server.poll_timeout() else { break };
        now = now.max(at);
        pair.server.handle_timeout(now);
    }
    assert_eq!(pair.server.open_connections(), 0, "still open after {:?}", now - start);
    let took = now - start;
    // Closed at 10 s, then gone after its closing period (3 PTOs), far before the 30 s idle
    // timeout that would end it otherwise.
    assert!(took >= HANDSHAKE && took < HANDSHAKE + Duration::from_secs(8), "gone after {took:?}");
    let counts = setup.totals.snapshot();
    assert_eq!(counts.failed[HandshakeFailure::TimedOut as usize], 1, "{counts:?}");
    assert_eq!(counts.handshakes, 0);
    assert_eq!(setup.totals.handshaking(), 0);
}

/// A bystander's stream echoed while `pair.server` is under whatever the test did.
fn bystander_is_served(pair: &mut Pair<QuicEndpoint<EchoApps>>, c: usize) {
    let id = pair.conns[c].1.streams().open(Dir::Bi).expect("a stream");
    let mut send = pair.conns[c].1.send_stream(id);
    send.write(b"still here").expect("write");
    send.finish().expect("finish");
    let mut got = Vec::new();
    let done = pair.drive_until(Duration::from_secs(5), |p| {
        let (bytes, fin) = p.read_client(c, id);
        got.extend_from_slice(&bytes);
        fin
    });
    assert!(done && got == b"still here", "the bystander was not served: {got:?}");
}

/// `n` clients' first Initials, each from its own source port, none of which goes on.
fn initial_flood(pair: &mut Pair<QuicEndpoint<EchoApps>>, client: &ClientConfig, n: u16) {
    let mut flooder = quinn_proto::Endpoint::new(Arc::default(), None, false, None);
    let server: SocketAddr = SERVER.parse().expect("addr");
    for port in 0..n {
        let (_, mut conn) = flooder.connect(pair.now, client.clone(), server, "127.0.0.1").expect("connect");
        let mut buf = Vec::new();
        let t = conn.poll_transmit(pair.now, 1, &mut buf).expect("an Initial");
        let from = SocketAddr::from(([127, 0, 0, 2], 10_000 + port));
        pair.server.handle(pair.now, from, &buf[..t.size]);
    }
    let mut out = Vec::new();
    while pair.server.poll_transmit(pair.now, 10, &mut out).is_some() {}
}

#[test]
fn an_initial_flood_is_held_to_the_handshake_budget_and_a_bystander_is_served() {
    let (mut pair, client, _certs, setup) = echo_pair(Admission {
        max_connections: 10_000,
        max_handshakes: 16,
        retry: RetryMode::Off,
        handshake_timeout: HANDSHAKE,
    });
    let c = pair.connect(client.clone());
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
    initial_flood(&mut pair, &client, 500);
    // The bystander and 16 flooders hold state; the other 484 Initials were dropped.
    assert_eq!(pair.server.open_connections(), 17);
    let counts = setup.totals.snapshot();
    assert_eq!(counts.deferred, 484, "{counts:?}");
    bystander_is_served(&mut pair, c);
    // The flooders never finish: they go at the handshake timeout, the bystander stays.
    pair.drive_until(HANDSHAKE + Duration::from_secs(8), |p| p.server.open_connections() == 1);
    assert_eq!(pair.server.open_connections(), 1);
    assert_eq!(setup.totals.snapshot().failed[HandshakeFailure::TimedOut as usize], 16);
}

#[test]
fn under_an_initial_flood_retry_auto_keeps_no_state_for_unvalidated_addresses() {
    let (mut pair, client, _certs, setup) = echo_pair(Admission {
        max_connections: 10_000,
        max_handshakes: 16,
        retry: RetryMode::Auto,
        handshake_timeout: HANDSHAKE,
    });
    initial_flood(&mut pair, &client, 500);
    // Half the budget is taken before Retry starts; spoofed sources never echo the token.
    assert_eq!(pair.server.open_connections(), 8);
    let counts = setup.totals.snapshot();
    assert_eq!((counts.retries, counts.deferred), (492, 0), "{counts:?}");
    // A real client answers the Retry and gets in.
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
    bystander_is_served(&mut pair, c);
}

#[test]
fn path_mtu_discovery_grows_the_packets_up_to_the_ceiling() {
    let certs = certs();
    let tuning = QuicTuning { allow_mtud: true, max_mtu: 8952, ..QuicTuning::default() };
    let setup = setup(&certs, b"echo", tuning.clone());
    // The client takes datagrams as large as the server's ceiling, and probes its own way too.
    let client = quinn_proto::Endpoint::new(setup.endpoint.clone(), None, true, None);
    let mut pair = Pair::with_client(QuicEndpoint::new(setup, admission(), EchoApps), client);
    let c = pair.connect(client_config(&certs, b"echo", &tuning));
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(c)));
    // Traffic for path MTU discovery to probe along (within one stream window: the test's
    // echo does not wait for credit).
    let id = pair.conns[c].1.streams().open(Dir::Bi).expect("a stream");
    let payload = vec![7u8; 800_000];
    let mut at = 0;
    let mut got = 0;
    let done = pair.drive_until(Duration::from_secs(30), |p| {
        if at < payload.len() {
            at += p.conns[c].1.send_stream(id).write(&payload[at..]).unwrap_or(0);
        }
        got += p.read_client(c, id).0.len();
        got >= payload.len()
    });
    assert!(done, "echoed {got} of {}", payload.len());
    let server_mtu = pair.server.connection_mut(0).map(|(conn, _, _)| conn.current_mtu());
    assert!(server_mtu.is_some_and(|m| m > 8000), "the server's path MTU grew to {server_mtu:?}, not near 8952");
    let client_mtu = pair.conns[c].1.current_mtu();
    assert!(client_mtu > 8000, "the client's path MTU grew to {client_mtu}, not near 8952");
}

#[test]
fn a_handshake_ended_at_its_deadline_frees_its_place_in_the_budget_at_once() {
    // One handshake at a time; the flooder's Initial reaches the server and nothing else of
    // it does (no acknowledgement: no RTT sample, so its closing period is three 1 s probe
    // timeouts).
    let (mut pair, client, _certs, setup) = echo_pair(Admission {
        max_connections: 100,
        max_handshakes: 1,
        retry: RetryMode::Off,
        handshake_timeout: HANDSHAKE,
    });
    let mut flooder = quinn_proto::Endpoint::new(Arc::default(), None, false, None);
    let server: SocketAddr = SERVER.parse().expect("addr");
    let (_, mut conn) = flooder.connect(pair.now, client.clone(), server, "127.0.0.1").expect("connect");
    let mut first = Vec::new();
    let t = conn.poll_transmit(pair.now, 1, &mut first).expect("an Initial");
    pair.server.handle(pair.now, SocketAddr::from(([127, 0, 0, 2], 10_000)), &first[..t.size]);
    let mut buf = Vec::new();
    let start = pair.now;
    // Past the deadline (the server's answers go nowhere).
    while pair.now < start + HANDSHAKE + Duration::from_millis(10) {
        while pair.server.poll_transmit(pair.now, 10, &mut buf).is_some() {}
        buf.clear();
        let Some(at) = pair.server.poll_timeout() else { break };
        pair.now = pair.now.max(at).min(start + HANDSHAKE + Duration::from_millis(10));
        pair.server.handle_timeout(pair.now);
    }
    // Closed by the deadline: counted, and no longer a handshake in progress, though its
    // closing period has not ended.
    let counts = setup.totals.snapshot();
    assert_eq!(counts.failed[HandshakeFailure::TimedOut as usize], 1, "{counts:?}");
    assert_eq!(setup.totals.handshaking(), 0);
    // A real client is admitted now, not once the closing period is over.
    let c = pair.connect(client);
    assert!(pair.drive_until(Duration::from_millis(100), |p| p.connected(c)), "the budget is still taken");
    assert_eq!(setup.totals.snapshot().deferred, 0);
    // The closed handshake is gone after its closing period, counted once, not as a close.
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.server.open_connections() == 1));
    let counts = setup.totals.snapshot();
    assert_eq!(counts.failed[HandshakeFailure::TimedOut as usize], 1, "{counts:?}");
    assert_eq!(counts.lost, [0; LostReason::ALL.len()], "{counts:?}");
    assert_eq!(counts.handshakes, 1, "{counts:?}");
}
