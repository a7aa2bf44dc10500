//! A server [`Connection`] and a client joined by buffers, on simulated time, as quinn-proto's
//! tests/util.rs `Pair`: no socket, no sleep. The client is crates/tls's `ClientSession` (or
//! plain bytes); the server side is driven as an engine that writes at once drives it (poll,
//! read what is there, send what it answers), with every read as small as a test asks, down to
//! one byte, and every timer fired at its exact instant.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use sockscale_proto::http::HttpConfig;
use sockscale_proto::{Output, Protocol, Responder};
use sockscale_sys::Ending;
use sockscale_tls::{ClientSession, ClientTls, ServerOptions, ServerSession, ServerTls, TestCertificate, Trust};

use super::{Close, Connection, Outbox, ThreadTools, TlsScratch};
use crate::body::BodyFile;
use crate::policy::{Action, CloseReason, Delivery, Fed, Limits, Pending, Wait, Written};
use crate::stats::Stats;

const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The wire from the server to the client: what the connection queued, taken whole by the
/// "socket".
#[derive(Debug, Default)]
struct Wire {
    queued: Vec<Bytes>,
    len: usize,
}

impl Outbox for Wire {
    fn pending(&self) -> Pending {
        Pending { bytes: self.len, sends: 0, file_bytes: 0 }
    }

    fn push_records(&mut self, records: Bytes) {
        self.len += records.len();
        self.queued.push(records);
    }

    fn push_sealed_file(&mut self, _body: &Arc<BodyFile>, _range: std::ops::Range<u64>) {
        unreachable!("these tests serve no body file");
    }

    fn push_clear(&mut self, _plain: Bytes) {
        unreachable!("plaintext waits only behind a body file");
    }
}

/// The pair's thread tools, borrowed field by field (the connection is borrowed beside them).
macro_rules! tools {
    ($pair:expr) => {
        ThreadTools {
            responder: &mut $pair.responder,
            scratch: &mut $pair.scratch,
            buffers: &mut $pair.buffers,
            body: None,
            counters: $pair.stats.shard(0),
        }
    };
}

/// A server connection, its thread's tools, and a client, joined by two buffers.
struct Pair {
    now: Instant,
    server: Connection<Wire>,
    responder: Responder,
    scratch: Output,
    buffers: TlsScratch,
    stats: Stats,
    limits: Limits,
    /// The most the server's reads take at once.
    read_size: usize,
    /// The most the socket takes of the server's output in one write (None: all of it), as
    /// from a client that reads slowly; what it refuses stays queued.
    room: Option<usize>,
    client: Option<ClientSession>,
    to_server: Vec<u8>,
    to_client: Vec<u8>,
    /// The close the server carried out, once it did.
    closed: Option<Close>,
}

impl Pair {
    /// A connection accepted now, speaking TLS when `tls`.
    fn new(tls: bool) -> Pair {
        let now = Instant::now();
        let config = HttpConfig { header_timeout: HEADER_TIMEOUT, ..HttpConfig::default() };
        let responder = Protocol::Http(Arc::new(config)).responder(0);
        let mut server = Connection::new(responder.new_session(), now, Delivery::Pulled, Wire::default());
        let mut to_server = Vec::new();
        let client = tls.then(|| {
            let (server_tls, client_tls) = configs();
            server.start_tls(Some(Box::new(ServerSession::new(&server_tls, now).expect("a place").expect("session"))));
            ClientSession::start(&client_tls, "localhost", now, &mut to_server).expect("hello")
        });
        Pair {
            now,
            server,
            responder,
            scratch: Output::default(),
            buffers: TlsScratch::default(),
            stats: Stats::new(1),
            limits: Limits { read_budget: 1 << 20, max_pending_send: 1 << 20, ..Limits::example() },
            read_size: 1 << 16,
            room: None,
            client,
            to_server,
            to_client: Vec::new(),
            closed: None,
        }
    }

    /// Run the handshake to its end, with the server's reads `read_size` bytes at most.
    fn handshake(&mut self) {
        for _ in 0..10 {
            self.drive();
            let (_, closed) = self.client_read();
            assert!(!closed && self.closed.is_none(), "the handshake ended the connection");
            let client = self.client.as_ref().expect("a TLS pair");
            if !client.is_handshaking() && !self.server_handshaking() && self.to_server.is_empty() {
                return;
            }
        }
        panic!("the handshake did not complete");
    }

    fn server_handshaking(&self) -> bool {
        self.server.tls.as_deref().is_some_and(ServerSession::is_handshaking)
    }

    /// The client sends `plain` (encrypted under TLS).
    fn client_send(&mut self, plain: &[u8]) {
        match &mut self.client {
            Some(client) => client.send(plain, &mut self.to_server).expect("the client seals"),
            None => self.to_server.extend_from_slice(plain),
        }
    }

    /// What the client reads of what the server sent (decrypted under TLS), and whether the
    /// server's close_notify was among it.
    fn client_read(&mut self) -> (Vec<u8>, bool) {
        let mut wire = std::mem::take(&mut self.to_client);
        match &mut self.client {
            Some(client) => {
                let mut plain = Vec::new();
                let received = client
                    .receive(&mut wire, self.now, &mut plain, &mut self.to_server)
                    .expect("records the client accepts");
                (plain, received.closed)
            }
            None => (wire, false),
        }
    }

    /// The socket takes what is queued, as much as it has room for: what it wrote.
    fn take_queued(&mut self) -> Written {
        let mut room = self.room.unwrap_or(usize::MAX);
        let mut written = Written::default();
        while let Some(chunk) = self.server.out.queued.first_mut() {
            if room == 0 {
                written.blocked = true;
                break;
            }
            let n = chunk.len().min(room);
            self.to_client.extend_from_slice(&chunk.split_to(n));
            if chunk.is_empty() {
                self.server.out.queued.remove(0);
            }
            room -= n;
            written.bytes += n;
        }
        self.server.out.len -= written.bytes;
        written
    }

    /// The protocol's answer written at once behind what is queued: what the socket has no
    /// room for is queued, as `OutQueue::send` does.
    fn send(&mut self, answer: Vec<u8>) -> Written {
        if !self.server.out.queued.is_empty() {
            self.server.out.push_records(Bytes::from(answer));
            return self.take_queued();
        }
        let n = answer.len().min(self.room.unwrap_or(usize::MAX));
        self.to_client.extend_from_slice(&answer[..n]);
        if n < answer.len() {
            self.server.out.push_records(Bytes::copy_from_slice(&answer[n..]));
        }
        Written { bytes: n, blocked: n < answer.len(), ..Written::default() }
    }

    /// The client's bytes arrived: a turn of the server, as an engine that writes at once
    /// takes it. Returns how it waits, or None once it closed.
    fn drive(&mut self) -> Option<Wait> {
        assert!(self.closed.is_none(), "driven after its close");
        self.server.lc.on_ready(true, true, false);
        loop {
            match self.server.poll(self.now, &self.responder, &self.limits) {
                Action::Flush => {
                    let written = self.take_queued();
                    self.server.lc.on_written(self.now, written);
                }
                Action::Read { max } => {
                    let wanted = max.min(self.read_size);
                    let got = wanted.min(self.to_server.len());
                    if got == 0 {
                        self.server.lc.on_drained();
                        continue;
                    }
                    let mut read: Vec<u8> = self.to_server.drain(..got).collect();
                    let now = self.now;
                    let mut tools = tools!(self);
                    match self.server.receive(&mut read, wanted, now, &mut tools) {
                        Ok(Fed::Send) => {
                            let written = self.send(self.scratch.to_vec(&read));
                            self.server.lc.on_written(self.now, written);
                        }
                        Ok(_) => {
                            let written = self.take_queued();
                            self.server.lc.on_written(self.now, written);
                        }
                        Err(close) => return self.end(close),
                    }
                }
                Action::Transmit => {
                    let now = self.now;
                    let mut tools = tools!(self);
                    match self.server.transmit(now, &mut tools) {
                        Ok(Fed::Send) => {
                            let written = self.send(self.scratch.to_vec(&[]));
                            self.server.lc.on_written(self.now, written);
                        }
                        Ok(_) => {}
                        Err(close) => return self.end(close),
                    }
                }
                Action::Close(reason) => {
                    let close = self.server.close(reason);
                    return self.end(close);
                }
                Action::Wait(wait) => return Some(wait),
            }
        }
    }

    /// Time passes to `at`: the server's timer fires there. Returns whether it closed.
    fn advance_to(&mut self, at: Instant) -> bool {
        self.now = at;
        let (now, limits) = (self.now, self.limits);
        let mut tools = tools!(self);
        match self.server.on_timer(now, &mut tools, &limits) {
            Some(close) => {
                self.end(close);
                true
            }
            None => {
                self.drive();
                false
            }
        }
    }

    /// Carry out a close as `conn::end` does: one attempt to write what is queued, then the
    /// last bytes only behind a queue that emptied.
    fn end(&mut self, close: Close) -> Option<Wait> {
        if close.ending == Ending::Orderly {
            self.take_queued();
        }
        self.to_client.extend_from_slice(close.last_behind(self.server.out.len == 0));
        self.closed = Some(close);
        None
    }

    fn close_reason(&self) -> Option<(CloseReason, Ending)> {
        self.closed.as_ref().map(|c| (c.reason, c.ending))
    }
}

fn configs() -> (ServerTls, ClientTls) {
    let made = TestCertificate::generate(&["localhost".to_owned()]).expect("certificate");
    let (cert, key) = (made.cert_pem.as_bytes(), made.key_pem.as_bytes());
    let options = ServerOptions::default();
    let server = ServerTls::from_pem(cert, Path::new("cert"), key, Path::new("key"), SystemTime::now(), &options)
        .expect("server tls");
    let client = ClientTls::new(&Trust::Insecure, Vec::new(), false).expect("client tls");
    (server, client)
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle).count()
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// The handshake and a request, every byte of both read on its own: the answer comes whole.
#[test]
fn a_tls_handshake_and_a_request_read_a_byte_at_a_time() {
    let mut pair = Pair::new(true);
    pair.read_size = 1;
    pair.handshake();
    pair.client_send(GET);
    pair.drive();
    let (answer, closed) = pair.client_read();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    assert_eq!(count(&answer, b"HTTP/1.1 "), 1);
    assert!(!closed && pair.closed.is_none(), "keep-alive");
    assert_eq!(pair.stats.snapshot().tls_handshakes, 1);
}

/// A half request at the header deadline, under TLS: nothing before the exact instant; at it,
/// the 408, encrypted, then close_notify, and an orderly end. (On the base code the 408 went
/// by a direct send and the socket closed with no close_notify: a client saw a truncation.)
#[test]
fn a_half_request_under_tls_gets_its_408_at_the_header_deadline_then_close_notify() {
    let mut pair = Pair::new(true);
    pair.handshake();
    let began = pair.now;
    pair.client_send(b"GET / HT");
    let wait = pair.drive().expect("waiting for the rest");
    assert_eq!(wait.wake_at, began + HEADER_TIMEOUT, "the header deadline is the next wake-up");
    assert!(!pair.advance_to(began + HEADER_TIMEOUT - Duration::from_nanos(1)), "not a nanosecond early");
    assert!(pair.advance_to(began + HEADER_TIMEOUT));
    assert_eq!(pair.close_reason(), Some((CloseReason::HeaderTimeout, Ending::Orderly)));
    let (answer, closed) = pair.client_read();
    assert!(answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
    assert!(closed, "close_notify follows the 408");
}

/// The same in clear: the 408 is the last bytes, and the socket ends in good order.
#[test]
fn a_half_request_in_clear_gets_its_408_at_the_header_deadline() {
    let mut pair = Pair::new(false);
    pair.client_send(b"GET / HT");
    let began = pair.now;
    let wait = pair.drive().expect("waiting for the rest");
    assert_eq!(wait.wake_at, began + HEADER_TIMEOUT);
    assert!(!pair.advance_to(began + HEADER_TIMEOUT - Duration::from_nanos(1)));
    assert!(pair.advance_to(began + HEADER_TIMEOUT));
    assert_eq!(pair.close_reason(), Some((CloseReason::HeaderTimeout, Ending::Orderly)));
    let (answer, _) = pair.client_read();
    assert!(answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
}

/// A ClientHello that stops half-way is closed at the handshake deadline (the header timeout
/// from acceptance), exactly then, with no bytes (there is no key) and a FIN.
#[test]
fn a_stalled_client_hello_is_closed_at_the_handshake_deadline() {
    let mut pair = Pair::new(true);
    let accepted = pair.now;
    let half = pair.to_server.len() / 2;
    pair.to_server.truncate(half);
    let wait = pair.drive().expect("waiting for the rest of the hello");
    assert_eq!(wait.wake_at, accepted + HEADER_TIMEOUT, "the handshake deadline is in the timer table");
    assert_eq!(pair.server.deadline(&pair.responder, &pair.limits), accepted + HEADER_TIMEOUT);
    assert!(!pair.advance_to(accepted + HEADER_TIMEOUT - Duration::from_nanos(1)));
    assert!(pair.advance_to(accepted + HEADER_TIMEOUT));
    assert_eq!(pair.close_reason(), Some((CloseReason::HeaderTimeout, Ending::Orderly)));
    assert!(pair.to_client.is_empty(), "no key: nothing to say");
}

/// `Connection: close` with a request pipelined behind it: answered once, then close_notify.
#[test]
fn connection_close_with_a_pipelined_request_is_answered_once_then_close_notify() {
    for tls in [true, false] {
        let mut pair = Pair::new(tls);
        if tls {
            pair.handshake();
        }
        pair.client_send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(pair.drive(), None, "closed once answered");
        assert_eq!(pair.close_reason(), Some((CloseReason::Done, Ending::Orderly)), "tls: {tls}");
        let (answer, closed) = pair.client_read();
        assert_eq!(count(&answer, b"HTTP/1.1 "), 1, "answered once: {}", String::from_utf8_lossy(&answer));
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        assert_eq!(closed, tls, "close_notify under TLS");
    }
}

/// A malformed request: a 400, then close_notify under TLS, and an orderly end.
#[test]
fn a_malformed_request_gets_a_400_then_close_notify() {
    for tls in [true, false] {
        let mut pair = Pair::new(tls);
        if tls {
            pair.handshake();
        }
        pair.read_size = 3;
        pair.client_send(b"NOT HTTP AT ALL\r\n\r\n");
        assert_eq!(pair.drive(), None);
        assert_eq!(pair.close_reason(), Some((CloseReason::Protocol, Ending::Orderly)), "tls: {tls}");
        let (answer, closed) = pair.client_read();
        assert!(answer.starts_with(b"HTTP/1.1 400"), "{}", String::from_utf8_lossy(&answer));
        assert_eq!(closed, tls);
    }
}

/// Bytes that are not TLS on a TLS connection: the session fails, the close carries no alert
/// (the peer speaks no TLS) and ends in good order.
#[test]
fn plain_http_on_a_tls_connection_is_closed_without_a_word() {
    let mut pair = Pair::new(true);
    pair.to_server.clear();
    pair.to_server.extend_from_slice(GET);
    assert_eq!(pair.drive(), None);
    assert_eq!(pair.close_reason(), Some((CloseReason::Protocol, Ending::Orderly)));
    assert!(pair.to_client.is_empty());
}

/// A handshake the server refuses (a TLS 1.1 ClientHello is what openssl sends with
/// `-tls1_1`; here a hello rustls cannot accept) closes with the fatal alert as last bytes.
#[test]
fn a_failed_handshake_closes_with_its_fatal_alert() {
    let mut pair = Pair::new(true);
    // A ClientHello record whose body is garbage: a decode error.
    pair.to_server.clear();
    pair.to_server.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00]);
    assert_eq!(pair.drive(), None);
    let close = pair.closed.as_ref().expect("closed");
    assert_eq!(close.reason, CloseReason::Protocol);
    assert!(matches!(close.last.as_slice(), [0x15, 0x03, _, 0x00, 0x02, 0x02, _]), "an alert: {:?}", close.last);
    assert_eq!(pair.to_client, close.last);
}

/// The drain: an idle TLS connection closes at once with close_notify; one with half a request
/// is given until the drain's end, and closes then, with close_notify too.
#[test]
fn a_drain_closes_idle_and_half_sent_tls_connections_with_close_notify() {
    let mut idle = Pair::new(true);
    idle.handshake();
    let until = idle.now + Duration::from_secs(5);
    idle.server.lc.begin_drain(idle.now, until, false);
    assert_eq!(idle.drive(), None);
    assert_eq!(idle.close_reason(), Some((CloseReason::Shutdown, Ending::Orderly)));
    assert!(idle.client_read().1, "close_notify");

    let mut half = Pair::new(true);
    half.handshake();
    half.client_send(b"GET / HTTP/1.1\r\n");
    half.drive().expect("waiting for the rest");
    let until = half.now + Duration::from_secs(5);
    half.server.lc.begin_drain(half.now, until, false);
    let wait = half.drive().expect("a request in progress may finish");
    assert_eq!(wait.wake_at, until);
    assert!(!half.advance_to(until - Duration::from_nanos(1)));
    assert!(half.advance_to(until));
    assert_eq!(half.close_reason(), Some((CloseReason::Shutdown, Ending::Orderly)));
    let (said, closed) = half.client_read();
    assert!(said.is_empty() && closed, "no answer to half a request; close_notify: {said:?}");
}

/// In clear, a request read a byte at a time is answered whole, once.
#[test]
fn a_request_in_clear_read_a_byte_at_a_time() {
    let mut pair = Pair::new(false);
    pair.read_size = 1;
    pair.client_send(GET);
    pair.drive();
    let (answer, _) = pair.client_read();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    assert_eq!(count(&answer, b"HTTP/1.1 "), 1);
    assert!(pair.closed.is_none(), "keep-alive");
}

/// One timer table: a TLS connection that says nothing meets `--first-data-timeout` before its
/// handshake deadline, and is closed for it at its instant.
#[test]
fn a_silent_tls_connection_meets_the_first_data_timeout_before_the_handshake_deadline() {
    let mut pair = Pair::new(true);
    pair.limits.first_data_timeout = Some(Duration::from_secs(1));
    let accepted = pair.now;
    pair.to_server.clear();
    let wait = pair.drive().expect("waiting");
    assert_eq!(wait.wake_at, accepted + Duration::from_secs(1));
    assert!(pair.advance_to(accepted + Duration::from_secs(1)));
    assert_eq!(pair.close_reason(), Some((CloseReason::FirstData, Ending::Orderly)));
    assert!(pair.to_client.is_empty());
}

/// A request answered, and half of the next behind it in the same read, from a client that
/// reads slowly (the socket takes `room` bytes a write): the answer is mostly still queued when
/// the header deadline passes. Returns the instant the half request came.
fn answered_then_half_a_request(pair: &mut Pair, room: usize) -> Instant {
    pair.room = Some(room);
    let mut both = GET.to_vec();
    both.extend_from_slice(b"GET / HT");
    pair.client_send(&both);
    let began = pair.now;
    let wait = pair.drive().expect("waiting for the client to take the answer");
    assert!(wait.write && !pair.server.out.queued.is_empty(), "the answer is queued: {wait:?}");
    began
}

/// A deadline that expires with output queued does not drop the close's last bytes: the 408
/// waits behind the answer still queued, the connection keeps flushing as the client reads, and
/// it closes, in good order, once the queue is empty: the whole answer, the 408, then (TLS)
/// close_notify. In clear and under TLS. (On the base code the close came at the deadline, and
/// with output queued its last bytes, the 408 and close_notify, were dropped: a truncation.)
#[test]
fn a_close_with_output_queued_delivers_all_of_it_then_its_last_bytes() {
    for tls in [true, false] {
        let mut pair = Pair::new(tls);
        if tls {
            pair.handshake();
        }
        // Past the header deadline: the stall clock, which the first write started, is not what
        // ends the connection here.
        pair.limits.send_timeout = HEADER_TIMEOUT * 3;
        let began = answered_then_half_a_request(&mut pair, 1000);
        assert!(!pair.advance_to(began + HEADER_TIMEOUT), "tls {tls}: not closed while output is queued");
        assert!(pair.closed.is_none() && !pair.server.out.queued.is_empty(), "tls {tls}: still flushing");
        assert!(pair.server.lc.is_in_closing_phase());
        // The client reads on, a write a second; nothing more is read from it meanwhile.
        let mut turns = 0;
        while pair.closed.is_none() {
            turns += 1;
            assert!(turns < 100, "tls {tls}: the queue never emptied");
            pair.now += Duration::from_secs(1);
            pair.client_send(b"ignored: the connection is closing\r\n\r\n");
            pair.drive();
        }
        assert_eq!(pair.close_reason(), Some((CloseReason::HeaderTimeout, Ending::Orderly)), "tls {tls}");
        assert!(pair.server.out.queued.is_empty());
        let (said, closed) = pair.client_read();
        let said = String::from_utf8_lossy(&said);
        assert!(said.starts_with("HTTP/1.1 200"), "tls {tls}: {said}");
        assert_eq!(count(said.as_bytes(), b"HTTP/1.1 "), 2, "tls {tls}: the answer then the 408: {said}");
        let at = said.find("HTTP/1.1 408").expect("a 408");
        let (head, body) = said[at..].split_once("\r\n\r\n").expect("the 408's head");
        let whole = head.contains(&format!("Content-Length: {}", body.len()));
        assert!(whole && !body.is_empty(), "tls {tls}: the 408 is whole and last: {said}");
        assert_eq!(closed, tls, "close_notify last under TLS");
        assert_eq!(pair.stats.snapshot().closes_unflushed, 0);
    }
}

/// The closing phase is bounded: a client that takes its output too slowly (it moves, so the
/// stall clock never runs out) is closed at the send timeout after the close was decided,
/// exactly then, as the close's reason says (a FIN without the last bytes), and counted; the
/// drain's deadline bounds it too, when it is sooner.
#[test]
fn a_closing_phase_ends_at_its_deadline_without_the_last_bytes() {
    for tls in [true, false] {
        let mut pair = Pair::new(tls);
        if tls {
            pair.handshake();
        }
        // Past the header deadline: the stall clock, which the first write started, is not what
        // ends the connection here.
        pair.limits.send_timeout = HEADER_TIMEOUT * 3;
        let began = answered_then_half_a_request(&mut pair, 100);
        let decided = began + HEADER_TIMEOUT;
        assert!(!pair.advance_to(decided));
        let by = decided + pair.limits.send_timeout;
        assert_eq!(pair.server.deadline(&pair.responder, &pair.limits), by, "the phase's end is the next deadline");
        // A write a second keeps the stall clock from running out.
        let mut t = decided;
        while t + Duration::from_secs(1) < by {
            t += Duration::from_secs(1);
            assert!(!pair.advance_to(t), "tls {tls}: not before its deadline");
        }
        assert!(!pair.advance_to(by - Duration::from_nanos(1)), "tls {tls}: not a nanosecond early");
        assert!(pair.advance_to(by), "tls {tls}: closed at the phase's deadline");
        assert_eq!(pair.close_reason(), Some((CloseReason::HeaderTimeout, Ending::Orderly)), "tls {tls}");
        assert!(!pair.server.out.queued.is_empty(), "the output was not all taken");
        let (said, closed) = pair.client_read();
        assert_eq!(count(&said, b"HTTP/1.1 408"), 0, "tls {tls}: no 408 inside the cut answer");
        assert!(!closed, "no close_notify behind output that was not sent");
        assert_eq!(pair.stats.snapshot().closes_unflushed, 1, "counted");
    }

    // Draining, the drain's deadline is the phase's when it is sooner.
    let mut pair = Pair::new(true);
    pair.handshake();
    pair.limits.send_timeout = HEADER_TIMEOUT * 3;
    let began = answered_then_half_a_request(&mut pair, 100);
    let until = began + HEADER_TIMEOUT + Duration::from_secs(3);
    pair.server.lc.begin_drain(pair.now, until, false);
    assert!(!pair.advance_to(began + HEADER_TIMEOUT));
    assert_eq!(pair.server.deadline(&pair.responder, &pair.limits), until);
    assert!(!pair.advance_to(until - Duration::from_nanos(1)));
    assert!(pair.advance_to(until));
    assert_eq!(pair.close_reason(), Some((CloseReason::HeaderTimeout, Ending::Orderly)));
    assert_eq!(pair.stats.snapshot().closes_unflushed, 1);

    // The drain's own deadline leaves no time: output still queued then is cut at once, as
    // before, and counted.
    let mut pair = Pair::new(true);
    pair.handshake();
    pair.limits.send_timeout = HEADER_TIMEOUT * 3;
    pair.room = Some(100);
    pair.client_send(GET);
    pair.drive().expect("waiting for the client to take the answer");
    let until = pair.now + Duration::from_secs(2);
    pair.server.lc.begin_drain(pair.now, until, false);
    assert!(!pair.advance_to(until - Duration::from_nanos(1)), "the answer may go until the drain's end");
    assert!(pair.advance_to(until));
    assert_eq!(pair.close_reason(), Some((CloseReason::Shutdown, Ending::Orderly)));
    assert!(!pair.client_read().1, "no close_notify behind output that was not sent");
    assert_eq!(pair.stats.snapshot().closes_unflushed, 1);
}

/// An abortive close is never delayed: a client that takes nothing is cut off at its stall
/// deadline, with a reset, while the half request's header deadline is still ahead.
#[test]
fn an_abortive_close_with_output_queued_is_immediate() {
    let mut pair = Pair::new(true);
    pair.handshake();
    pair.limits.send_timeout = Duration::from_secs(2);
    let began = answered_then_half_a_request(&mut pair, 100);
    pair.room = Some(0);
    let stalled = began + pair.limits.send_timeout;
    assert!(pair.advance_to(stalled));
    assert_eq!(pair.close_reason(), Some((CloseReason::SendTimeout, Ending::Abort)));
    assert!(!pair.server.lc.is_in_closing_phase());
    assert_eq!(pair.stats.snapshot().closes_unflushed, 0);
}
