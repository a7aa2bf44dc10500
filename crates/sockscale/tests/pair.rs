//! The whole stack in memory, as quinn-proto's tests/util.rs `Pair`: the server's `Connection`
//! (sockscale-server) joined to the load generator's client `Connection` (sockscale-load) by two
//! byte pipes, with no socket, on simulated time (an `Instant` the test advances; no sleep).
//! Every byte goes through both sides' real code: TLS (rustls on both ends, the test CA), HTTP/1.1,
//! HTTP/2 (ALPN h2 and h2c prior knowledge) and echo. Each side is driven as its engine drives it
//! on a socket (the server as `socket_turn.rs`'s turn, the client as the load event loop's
//! read-then-pump), and a close is carried out as `end_socket` and the close after it would: its
//! last bytes, then a FIN, or a reset if an abort leaves input unread. Timers fire at their exact instants: `now` moves to the earliest
//! wake-up of the two sides.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use sockscale_load::client::Stamp;
use sockscale_load::connection::{Close as ClientClose, Connection as Client, Event, Kind, Now, Profile, Reason};
use sockscale_load::pattern::Pattern;
use sockscale_load::{AcceptedStatuses, LoadTls};
use sockscale_proto::http::{HttpConfig, ResponseBody};
use sockscale_proto::{Output, Protocol, Responder};
use sockscale_server::{
    Action, Close as ServerClose, CloseReason, Connection as Server, Delivery, Fed, Limits, Outbox, Pending, Stats,
    ThreadTools, TlsScratch, Wait, Written,
};
use sockscale_sys::Ending;
use sockscale_tls::{ClientTls, ServerOptions, ServerSession, ServerTls, TestCertificate, Trust};

const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const BODY: &[u8] = b"sockscale pair: the same bytes through both sides\n";
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
/// What the server's responder renders at Unix second 0 (the test's fixed wall clock).
const DATE: &str = "Thu, 01 Jan 1970 00:00:00 GMT";

/// The 200 response, written out here rather than taken from the server's renderer, so the
/// test checks the bytes against what HTTP/1.1 says they are, not against themselves.
fn expected_response(close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 200 OK\r\nServer: pair\r\nDate: {DATE}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{connection}\r\n",
        BODY.len()
    );
    [head.as_bytes(), BODY].concat()
}

/// What the pair speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speak {
    Echo { msg_len: usize },
    Http1,
    H2,
}

/// How a pipe hands its bytes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// Each read takes all that is there.
    Whole,
    /// Each read takes one byte: every parser and record layer meets every boundary.
    Bytes,
}

/// How a socket's end reaches its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Fin,
    Reset,
}

/// One direction of the connection: bytes in order, then how the sender ended its socket.
#[derive(Debug, Default)]
struct Pipe {
    bytes: Vec<u8>,
    /// After the bytes: a FIN or a reset.
    end: Option<End>,
    /// Every byte that ever went in (what the receiver should have seen).
    log: Vec<u8>,
}

impl Pipe {
    fn push(&mut self, bytes: &[u8]) {
        assert!(self.end.is_none(), "bytes written after the socket ended");
        self.bytes.extend_from_slice(bytes);
        self.log.extend_from_slice(bytes);
    }

    fn take(&mut self, max: usize) -> Vec<u8> {
        let n = max.min(self.bytes.len());
        self.bytes.drain(..n).collect()
    }
}

/// How `end_socket(fd, last, ending)` and the close after it reach the peer: an orderly end
/// is a FIN (after reading what the peer sent); an abort is a plain close, which the kernel
/// turns into a reset only if input is left unread (`unread`: the closer's inbound pipe).
fn ended(ending: Ending, unread: &Pipe) -> End {
    match ending {
        Ending::Orderly => End::Fin,
        Ending::Abort if unread.bytes.is_empty() => End::Fin,
        Ending::Abort => End::Reset,
    }
}

/// The server's outbox: records (or plaintext in clear) the "socket" takes whole.
#[derive(Debug, Default)]
struct Wire {
    queued: Vec<u8>,
}

impl Outbox for Wire {
    fn pending(&self) -> Pending {
        Pending { bytes: self.queued.len(), sends: 0, file_bytes: 0 }
    }

    fn push_records(&mut self, records: Bytes) {
        self.queued.extend_from_slice(&records);
    }

    fn push_sealed_file(&mut self, _body: &Arc<sockscale_server::BodyFile>, _range: std::ops::Range<u64>) {
        unreachable!("the pair serves its body from memory");
    }

    fn push_clear(&mut self, _plain: Bytes) {
        unreachable!("plaintext waits only behind a body file");
    }
}

/// The server side: the connection and its thread's tools, as a worker holds them.
struct ServerSide {
    conn: Server<Wire>,
    responder: Responder,
    scratch: Output,
    buffers: TlsScratch,
    stats: Stats,
    limits: Limits,
    /// The wake-up of its last turn.
    wake_at: Instant,
    /// Come back at once (the lifecycle's `resume`).
    resume: bool,
    closed: Option<ServerClose>,
}

macro_rules! tools {
    ($s:expr) => {
        ThreadTools {
            responder: &mut $s.responder,
            scratch: &mut $s.scratch,
            buffers: &mut $s.buffers,
            body: None,
            counters: $s.stats.shard(0),
        }
    };
}

/// The client side: the connection, what it reported, and what it decrypted.
struct ClientSide {
    profile: Profile,
    conn: Client,
    events: Vec<Event>,
    /// Every byte of plaintext the client's protocol was handed.
    plain: Vec<u8>,
    /// The server's close_notify came (`receive` said so).
    close_notify: bool,
    /// The socket takes this many more bytes, at most (None: all); a full socket, in effect.
    send_room: Option<usize>,
    /// How it ended: its close, or a socket error (a reset).
    closed: Option<ClientClose>,
    reset: bool,
}

struct Pair {
    origin: Instant,
    now: Instant,
    server: ServerSide,
    client: ClientSide,
    to_server: Pipe,
    to_client: Pipe,
    split: Split,
    _ca: CaFile,
}

/// The test CA on disk for the client's `--cacert`, removed when dropped.
struct CaFile(Option<std::path::PathBuf>);

impl Drop for CaFile {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Both sides' TLS: the server's certificate for `localhost` from a fresh test CA, which the
/// client trusts (the chain is verified, as `--cacert` does), and ALPN as each side offers it.
fn tls(speak: Speak) -> (ServerTls, LoadTls, CaFile) {
    static N: AtomicU64 = AtomicU64::new(0);
    let made = TestCertificate::generate(&["localhost".to_owned()]).expect("a certificate");
    let ca = std::env::temp_dir().join(format!(
        "sockscale-pair-{}-{}.pem",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&ca, &made.ca_pem).expect("the CA written");
    let server_alpn: Vec<Vec<u8>> = match speak {
        Speak::Echo { .. } => Vec::new(),
        _ => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    let client_alpn: Vec<Vec<u8>> = match speak {
        Speak::Echo { .. } => Vec::new(),
        Speak::Http1 => vec![b"http/1.1".to_vec()],
        Speak::H2 => vec![b"h2".to_vec()],
    };
    let options = ServerOptions { alpn: server_alpn, ..ServerOptions::default() };
    let (cert, key) = (made.cert_pem.as_bytes(), made.key_pem.as_bytes());
    let server = ServerTls::from_pem(
        cert,
        std::path::Path::new("cert"),
        key,
        std::path::Path::new("key"),
        SystemTime::now(),
        &options,
    )
    .expect("server TLS");
    let client = ClientTls::new(&Trust::CaFile(ca.clone()), client_alpn, false).expect("client TLS");
    (server, LoadTls { client, server_name: "localhost".into(), resume: false }, CaFile(Some(ca)))
}

impl Pair {
    /// A connection accepted and connected at the same instant, speaking `speak`, over TLS when
    /// `over_tls`, its pipes splitting as `split`; `reply_timeout` is the client's `--timeout`.
    fn new(speak: Speak, over_tls: bool, split: Split, reply_timeout: Duration) -> Pair {
        let origin = Instant::now();
        let (server_tls, client_tls, ca) = if over_tls {
            let (s, c, ca) = tls(speak);
            (Some(s), Some(c), ca)
        } else {
            (None, None, CaFile(None))
        };
        let protocol = match speak {
            Speak::Echo { .. } => Protocol::Echo,
            Speak::Http1 | Speak::H2 => Protocol::Http(Arc::new(HttpConfig {
                body: ResponseBody::Bytes(Bytes::from_static(BODY)),
                content_type: "text/plain".into(),
                server: "pair".into(),
                header_timeout: HEADER_TIMEOUT,
                ..HttpConfig::default()
            })),
        };
        // Unix second 0: the Date the expected responses carry.
        let responder = protocol.responder(0);
        let mut conn = Server::new(responder.new_session(), origin, Delivery::Pulled, Wire::default());
        if let Some(server_tls) = &server_tls {
            let session = ServerSession::new(server_tls, origin).expect("not busy").expect("a session");
            conn.start_tls(Some(Box::new(session)));
        }
        let limits = Limits {
            idle_timeout: IDLE_TIMEOUT,
            send_timeout: Duration::from_secs(10),
            max_pending_send: 1 << 20,
            max_outstanding_sends: 64,
            read_budget: 1 << 20,
            first_data_timeout: None,
        };
        let server = ServerSide {
            conn,
            responder,
            scratch: Output::default(),
            buffers: TlsScratch::default(),
            stats: Stats::new(1),
            limits,
            wake_at: origin,
            resume: false,
            closed: None,
        };

        let kind = match speak {
            Speak::Echo { msg_len } => Kind::Echo { msg_len },
            Speak::Http1 => Kind::Http,
            Speak::H2 => Kind::H2,
        };
        let scheme = if over_tls { "https" } else { "http" };
        let profile = Profile {
            kind,
            pattern: Pattern::default(),
            requests: REQUEST.repeat(16),
            request_len: REQUEST.len(),
            head_requests: false,
            h2_request: (kind == Kind::H2).then(|| sockscale_h2::ClientRequest {
                block: sockscale_h2::encode_request("GET", scheme, "localhost", "/", &[]).into(),
                indexed: None,
                body: Bytes::new(),
                head: false,
            }),
            accept_status: AcceptedStatuses::default(),
            connect_timeout: Duration::from_secs(3),
            reply_timeout,
            tls: client_tls,
            origin,
            ws: None,
            h3: None,
        };
        let start = Now::after(origin, 0);
        let mut conn = Client::new(&profile, 0, start);
        let connected = conn.on_connected(&profile, start);
        assert!(connected.failed.is_none(), "TLS began");
        let client = ClientSide {
            profile,
            conn,
            events: Vec::new(),
            plain: Vec::new(),
            close_notify: false,
            send_room: None,
            closed: None,
            reset: false,
        };
        let mut pair = Pair {
            origin,
            now: origin,
            server,
            client,
            to_server: Pipe::default(),
            to_client: Pipe::default(),
            split,
            _ca: ca,
        };
        pair.server_turn();
        pair.drive();
        pair
    }

    fn client_now(&self) -> Now {
        Now::after(self.origin, (self.now - self.origin).as_nanos() as u64)
    }

    fn read_size(&self) -> usize {
        match self.split {
            Split::Whole => usize::MAX,
            Split::Bytes => 1,
        }
    }

    /// Move bytes until both sides wait: neither has anything to read, send or resume.
    fn drive(&mut self) {
        for _ in 0..1_000_000 {
            let server_due = self.server.closed.is_none()
                && (!self.to_server.bytes.is_empty() || self.to_server.end.is_some() || self.server.resume);
            if server_due {
                self.server_turn();
            }
            let client_due =
                self.client.closed.is_none() && (!self.to_client.bytes.is_empty() || self.to_client.end.is_some());
            if client_due {
                self.client_read();
            }
            let sent = self.client_pump();
            if !server_due && !client_due && !sent {
                return;
            }
        }
        panic!("the pair never settled");
    }

    /// One turn of the server, as an engine that writes at once takes it (`socket_turn.rs`).
    fn server_turn(&mut self) {
        let s = &mut self.server;
        let now = self.now;
        s.resume = false;
        s.conn.lc.on_ready(true, true, false);
        let read_size = match self.split {
            Split::Whole => usize::MAX,
            Split::Bytes => 1,
        };
        loop {
            match s.conn.poll(now, &s.responder, &s.limits) {
                Action::Flush => {
                    let bytes = std::mem::take(&mut s.conn.out.queued);
                    self.to_client.push(&bytes);
                    s.conn.lc.on_written(now, Written { bytes: bytes.len(), ..Written::default() });
                }
                Action::Read { max } => {
                    let wanted = max.min(read_size);
                    let mut read = self.to_server.take(wanted);
                    if read.is_empty() {
                        match self.to_server.end {
                            None => s.conn.lc.on_drained(),
                            Some(End::Fin) => s.conn.lc.on_eof(),
                            Some(End::Reset) => {
                                let reason = s.conn.lc.on_failed(&std::io::Error::from_raw_os_error(libc::ECONNRESET));
                                let close = s.conn.close(reason);
                                return self.server_end(close);
                            }
                        }
                        continue;
                    }
                    match s.conn.receive(&mut read, wanted, now, &mut tools!(s)) {
                        Ok(Fed::Send) => {
                            let answer = s.scratch.to_vec(&read);
                            self.to_client.push(&answer);
                            s.conn.lc.on_written(now, Written { bytes: answer.len(), ..Written::default() });
                        }
                        Ok(_) => {
                            let bytes = std::mem::take(&mut s.conn.out.queued);
                            self.to_client.push(&bytes);
                            s.conn.lc.on_written(now, Written { bytes: bytes.len(), ..Written::default() });
                        }
                        Err(close) => return self.server_end(close),
                    }
                }
                Action::Transmit => match s.conn.transmit(now, &mut tools!(s)) {
                    Ok(Fed::Send) => {
                        let answer = s.scratch.to_vec(&[]);
                        self.to_client.push(&answer);
                        s.conn.lc.on_written(now, Written { bytes: answer.len(), ..Written::default() });
                    }
                    Ok(_) => {}
                    Err(close) => return self.server_end(close),
                },
                Action::Close(reason) => {
                    let close = s.conn.close(reason);
                    return self.server_end(close);
                }
                Action::Wait(Wait { wake_at, resume, .. }) => {
                    s.wake_at = wake_at;
                    s.resume = resume;
                    return;
                }
            }
        }
    }

    /// The server carries out its close as `socket_turn::end` does: what is queued, then the
    /// last bytes behind an emptied queue, then the socket ends.
    fn server_end(&mut self, close: ServerClose) {
        let s = &mut self.server;
        if close.ending == Ending::Orderly {
            let bytes = std::mem::take(&mut s.conn.out.queued);
            self.to_client.push(&bytes);
        }
        self.to_client.push(close.last_behind(s.conn.out.queued.is_empty()));
        self.to_client.end = Some(ended(close.ending, &self.to_server));
        s.closed = Some(close);
    }

    /// The client reads what came, as the load event loop's `receive` does.
    fn client_read(&mut self) {
        let now = self.client_now();
        let read_size = self.read_size();
        let c = &mut self.client;
        let over_tls = c.profile.tls.is_some();
        let mut eof = false;
        while !self.to_client.bytes.is_empty() {
            let mut data = self.to_client.take(read_size);
            let mut scratch = Vec::new();
            let events = &mut c.events;
            let received = c.conn.receive(&c.profile, now, &mut data, &mut scratch, &mut |e| events.push(e));
            match received {
                Err(close) => return self.client_end(close),
                Ok(closed) => {
                    c.plain.extend_from_slice(if over_tls { &scratch } else { &data });
                    if closed {
                        // close_notify: the end of the stream, as a FIN.
                        c.close_notify = true;
                        eof = true;
                        break;
                    }
                }
            }
        }
        match self.to_client.end {
            _ if eof => {}
            Some(End::Fin) if self.to_client.bytes.is_empty() => eof = true,
            Some(End::Reset) if self.to_client.bytes.is_empty() => {
                // ECONNRESET: the event loop counts a reset and ends the socket.
                c.reset = true;
                c.closed = Some(ClientClose { reason: Reason::ClosedByPeer, last: Vec::new(), ending: Ending::Abort });
                return;
            }
            _ => {}
        }
        if eof {
            let events = &mut c.events;
            let close = c.conn.receive_eof(&c.profile, &mut |e| events.push(e));
            return self.client_end(close);
        }
        if let Some(close) = c.conn.poll_close() {
            self.client_end(close);
        }
    }

    /// The client writes what it has, as far as its socket takes it. Whether anything moved.
    fn client_pump(&mut self) -> bool {
        let c = &mut self.client;
        if c.closed.is_some() {
            return false;
        }
        let mut moved = false;
        loop {
            let events = &mut c.events;
            let bytes = match c.conn.poll_transmit(&c.profile, &mut |e| events.push(e)) {
                Ok(bytes) => bytes,
                Err(close) => {
                    self.client_end(close);
                    return true;
                }
            };
            let n = bytes.len().min(c.send_room.unwrap_or(usize::MAX));
            if n == 0 {
                return moved;
            }
            self.to_server.push(&bytes[..n]);
            if let Some(room) = &mut c.send_room {
                *room -= n;
            }
            c.conn.sent(n, &mut |e| events.push(e));
            moved = true;
        }
    }

    /// The client carries out its close: its last bytes once, then the socket ends.
    fn client_end(&mut self, close: ClientClose) {
        if self.to_server.end.is_none() && self.server.closed.is_none() {
            self.to_server.push(&close.last);
            self.to_server.end = Some(ended(close.ending, &self.to_client));
        }
        self.client.closed = Some(close);
    }

    /// Begin `n` exchanges on the client (each must be allowed) and move the bytes.
    fn begin(&mut self, n: usize) {
        let stamp = Stamp::at(self.client_now().ns);
        let c = &mut self.client;
        for _ in 0..n {
            assert!(c.conn.may_begin(64), "an exchange may begin");
            let events = &mut c.events;
            assert!(c.conn.begin(&c.profile, stamp, &mut Vec::new(), &mut |e| events.push(e)).is_none());
        }
        self.drive();
    }

    /// The earliest wake-up of the two sides.
    fn next_wake(&self) -> Option<Instant> {
        let server = self.server.closed.is_none().then_some(self.server.wake_at);
        let client =
            self.client.closed.is_none().then(|| self.client.conn.poll_timeout(&self.client.profile)).flatten();
        match (server, client) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passes to the earliest wake-up (which must come before `limit`); each side whose
    /// deadline it is is woken, exactly then, and the bytes move. The instant it woke.
    fn advance(&mut self) -> Instant {
        let at = self.next_wake().expect("someone waits for a time");
        assert!(at >= self.now, "a wake-up in the past");
        self.now = at;
        let now = self.now;
        if self.server.closed.is_none() && self.server.wake_at <= now {
            let s = &mut self.server;
            let limits = s.limits;
            match s.conn.on_timer(now, &mut tools!(s), &limits) {
                Some(close) => self.server_end(close),
                None => self.server_turn(),
            }
        }
        let client_due = self.client.conn.poll_timeout(&self.client.profile).is_some_and(|t| t <= now);
        if self.client.closed.is_none() && client_due {
            let c = &mut self.client;
            let events = &mut c.events;
            let cnow = Now::after(self.origin, (now - self.origin).as_nanos() as u64);
            if let Err(close) = c.conn.on_timeout(&c.profile, cnow, &mut |e| events.push(e)) {
                self.client_end(close);
            }
        }
        self.drive();
        at
    }

    /// Run the TLS handshake (and HTTP/2's greeting) to its end: the connection set up.
    fn set_up(&mut self) {
        self.drive();
        assert!(self.client.closed.is_none() && self.server.closed.is_none(), "the set-up ended the connection");
        assert!(!self.client.conn.greeting(), "the client is still greeting");
    }

    fn responses(&self) -> Vec<(u16, bool)> {
        self.client
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Response { status, accepted, .. } => Some((*status, *accepted)),
                _ => None,
            })
            .collect()
    }

    /// The GOAWAYs the client saw, by the error code's name (the client Connection names them).
    fn goaways(&self) -> Vec<String> {
        self.client
            .events
            .iter()
            .filter_map(|e| match e {
                Event::GoAway { code } => Some(code.to_string()),
                _ => None,
            })
            .collect()
    }

    fn server_closed(&self) -> Option<(CloseReason, Ending)> {
        self.server.closed.as_ref().map(|c| (c.reason, c.ending))
    }
}

/// What an HTTP/2 stream carried from the server, decoded independently of both sides' stages
/// (frames walked here; HPACK through the crate's decoder).
#[derive(Debug, Default)]
struct H2Stream {
    fields: Vec<(String, String)>,
    body: Vec<u8>,
    ended: bool,
}

/// Walk the server's HTTP/2 byte stream: each stream's fields and body, and every GOAWAY's
/// (last stream, code).
fn h2_streams(bytes: &[u8]) -> (BTreeMap<u32, H2Stream>, Vec<(u32, u32)>) {
    let mut decoder = sockscale_h2::hpack::Decoder::new(4096);
    let mut streams: BTreeMap<u32, H2Stream> = BTreeMap::new();
    let mut goaways = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        assert!(rest.len() >= 9, "a frame cut short: {} octets left", rest.len());
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        let (kind, flags) = (rest[3], rest[4]);
        let id = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        assert!(rest.len() >= 9 + len, "a frame's payload cut short");
        let mut payload = &rest[9..9 + len];
        rest = &rest[9 + len..];
        if flags & 0x8 != 0 && (kind == 0 || kind == 1) {
            let pad = payload[0] as usize;
            payload = &payload[1..payload.len() - pad];
        }
        match kind {
            0 => {
                let stream = streams.entry(id).or_default();
                assert!(!stream.fields.is_empty(), "DATA before HEADERS on stream {id}");
                stream.body.extend_from_slice(payload);
                stream.ended |= flags & 0x1 != 0;
            }
            1 => {
                if flags & 0x20 != 0 {
                    payload = &payload[5..];
                }
                assert!(flags & 0x4 != 0, "a header block continued: not expected for these responses");
                let mut list = sockscale_h2::HeaderList::with_limit(64 << 10);
                decoder.decode(payload, &mut list).expect("the response's header block decodes");
                let stream = streams.entry(id).or_default();
                stream.fields = list
                    .iter()
                    .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
                    .collect();
                stream.ended |= flags & 0x1 != 0;
            }
            7 => {
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                goaways.push((last, code));
            }
            _ => {}
        }
    }
    (streams, goaways)
}

/// The fields of the server's 200 over HTTP/2, as RFC 9113 puts them.
fn expected_h2_fields() -> Vec<(String, String)> {
    [
        (":status", "200"),
        ("server", "pair"),
        ("date", DATE),
        ("content-type", "text/plain"),
        ("content-length", &BODY.len().to_string()),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect()
}

/// The streams `ids` each carried the 200 and the body, whole and ended.
fn assert_h2_answered(plain: &[u8], ids: &[u32]) {
    let (streams, _) = h2_streams(plain);
    let answered: Vec<u32> = streams.keys().copied().filter(|id| *id != 0).collect();
    assert_eq!(answered, ids, "the streams answered");
    for id in ids {
        let stream = &streams[id];
        assert_eq!(stream.fields, expected_h2_fields(), "stream {id}'s fields");
        assert_eq!(stream.body, BODY, "stream {id}'s body");
        assert!(stream.ended, "stream {id} ended");
    }
}

const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// HTTP/1.1 in clear and over TLS, whole reads and single bytes both ways: every response is
/// the client's to verify, byte for byte, and the client counts each as accepted.
#[test]
fn http1_requests_are_answered_byte_for_byte_in_clear_and_over_tls_whole_and_byte_by_byte() {
    for over_tls in [false, true] {
        for split in [Split::Whole, Split::Bytes] {
            let mut pair = Pair::new(Speak::Http1, over_tls, split, REPLY_TIMEOUT);
            pair.set_up();
            // One at a time, then four pipelined.
            pair.begin(1);
            pair.begin(4);
            let case = format!("tls {over_tls}, {split:?}");
            assert_eq!(pair.client.plain, expected_response(false).repeat(5), "{case}");
            assert_eq!(pair.responses(), [(200, true); 5], "{case}");
            assert_eq!(pair.client.conn.outstanding(), 0, "{case}");
            assert!(pair.client.closed.is_none() && pair.server.closed.is_none(), "keep-alive: {case}");
            if over_tls {
                let handshakes = pair.client.events.iter().filter(|e| matches!(e, Event::HandshakeDone { .. }));
                assert_eq!(handshakes.count(), 1, "{case}");
                assert_eq!(pair.server.stats.snapshot().tls_handshakes, 1, "{case}");
            }
        }
    }
}

/// HTTP/2 over TLS (ALPN h2) and with prior knowledge (h2c): several streams at once, each
/// answered whole, verified frame by frame here and counted by the client.
#[test]
fn h2_streams_are_answered_over_tls_alpn_and_h2c_whole_and_byte_by_byte() {
    for over_tls in [true, false] {
        for split in [Split::Whole, Split::Bytes] {
            let mut pair = Pair::new(Speak::H2, over_tls, split, REPLY_TIMEOUT);
            pair.set_up();
            let case = format!("tls {over_tls}, {split:?}");
            if over_tls {
                let alpn = pair.client.events.iter().find_map(|e| match e {
                    Event::HandshakeDone { negotiated: Some(n), .. } => n.alpn.clone(),
                    _ => None,
                });
                assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "{case}");
            }
            assert!(pair.client.events.iter().any(|e| matches!(e, Event::Greeted { .. })), "{case}");
            pair.begin(3);
            pair.begin(2);
            assert_h2_answered(&pair.client.plain, &[1, 3, 5, 7, 9]);
            assert_eq!(pair.responses(), [(200, true); 5], "{case}");
            assert_eq!(pair.client.conn.outstanding(), 0, "{case}");
            assert!(pair.client.closed.is_none() && pair.server.closed.is_none(), "{case}");
        }
    }
}

/// Echo in clear and over TLS: what comes back is what went out, every byte, and the client
/// verified it as it came.
#[test]
fn echo_comes_back_verified_in_clear_and_over_tls() {
    for over_tls in [false, true] {
        for split in [Split::Whole, Split::Bytes] {
            let mut pair = Pair::new(Speak::Echo { msg_len: 100 }, over_tls, split, REPLY_TIMEOUT);
            pair.set_up();
            pair.begin(3);
            pair.begin(1);
            let case = format!("tls {over_tls}, {split:?}");
            let echoed = pair.client.events.iter().filter(|e| matches!(e, Event::Echoed { .. })).count();
            assert_eq!(echoed, 4, "{case}");
            assert_eq!(pair.client.plain.len(), 400, "{case}");
            if !over_tls {
                assert_eq!(pair.client.plain, pair.to_server.log, "{case}");
            }
            assert!(pair.client.closed.is_none() && pair.server.closed.is_none(), "{case}");
        }
    }
}

/// The client sends half a request and its socket takes no more. The server's header timeout
/// (10 s) comes before the client's reply timeout (20 s): at exactly 10 s the 408 arrives, and
/// the client reads it as the answer to its request (counted, not accepted) and the close as
/// the server said it would close (done, not an error).
#[test]
fn half_a_request_in_clear_meets_the_server_header_timeout_before_the_client_reply_timeout() {
    let mut pair = Pair::new(Speak::Http1, false, Split::Whole, REPLY_TIMEOUT);
    pair.set_up();
    pair.client.send_room = Some(10);
    let began = pair.now;
    pair.begin(1);
    assert_eq!(pair.to_server.log, &REQUEST[..10]);
    assert!(pair.to_server.bytes.is_empty(), "the server read the half it was sent");
    assert_eq!(pair.next_wake(), Some(began + HEADER_TIMEOUT), "the header deadline first");
    assert_eq!(pair.advance(), began + HEADER_TIMEOUT);
    assert_eq!(pair.server_closed(), Some((CloseReason::HeaderTimeout, Ending::Orderly)));
    assert_eq!(pair.responses(), [(408, false)]);
    assert!(pair.client.plain.starts_with(b"HTTP/1.1 408 Request Timeout\r\n"));
    let close = pair.client.closed.as_ref().expect("the client closed");
    assert!(matches!(close.reason, Reason::Done), "{close:?}");
}

/// Over TLS the client's half is half a record: the protocol sees nothing of the head, yet
/// the record is held to the header timeout from its first byte. At exactly 10 s the server
/// closes with close_notify (no 408: it read no byte of a head), and the client sees an
/// orderly TLS close with its request unanswered: closed by the peer. (Before, the partial
/// record met only the idle timeout, each dribbled byte restarting it.)
#[test]
fn half_a_record_meets_the_server_header_timeout_before_the_client_reply_timeout() {
    let mut pair = Pair::new(Speak::Http1, true, Split::Whole, REPLY_TIMEOUT);
    pair.set_up();
    pair.client.send_room = Some(10);
    let began = pair.now;
    pair.begin(1);
    assert!(pair.to_server.bytes.is_empty(), "the server read the half it was sent");
    assert_eq!(pair.next_wake(), Some(began + HEADER_TIMEOUT), "the header deadline first");
    assert_eq!(pair.advance(), began + HEADER_TIMEOUT);
    assert_eq!(pair.server_closed(), Some((CloseReason::HeaderTimeout, Ending::Orderly)));
    assert!(pair.client.close_notify, "close_notify, not a truncation");
    assert!(pair.client.plain.is_empty(), "no answer: {:?}", String::from_utf8_lossy(&pair.client.plain));
    let close = pair.client.closed.as_ref().expect("the client saw the close");
    assert!(matches!(close.reason, Reason::ClosedByPeer), "{close:?}");
}

/// The same half request with the client's reply timeout (5 s) before the server's header
/// timeout: the client gives up at exactly 5 s and closes its socket (no last bytes; nothing
/// unread, so the kernel sends a FIN, not a reset); the server reads the end of the stream
/// then, not at its own deadline, and counts the peer's close.
#[test]
fn half_a_request_meets_the_client_reply_timeout_before_the_server_header_timeout() {
    for over_tls in [false, true] {
        let reply = Duration::from_secs(5);
        let mut pair = Pair::new(Speak::Http1, over_tls, Split::Whole, reply);
        pair.set_up();
        pair.client.send_room = Some(10);
        let began = pair.now;
        pair.begin(1);
        assert_eq!(pair.next_wake(), Some(began + reply), "tls {over_tls}");
        assert_eq!(pair.advance(), began + reply);
        let close = pair.client.closed.as_ref().expect("the client gave up");
        assert!(matches!(close.reason, Reason::ReplyTimeout), "tls {over_tls}: {close:?}");
        assert_eq!(pair.server_closed(), Some((CloseReason::Peer, Ending::Orderly)), "tls {over_tls}");
        assert!(pair.client.plain.is_empty());
    }
}

/// An idle keep-alive connection: the server closes it at exactly its idle timeout after the
/// last exchange, with close_notify under TLS; the client sees an orderly close (close_notify
/// then the FIN, not a truncation) with nothing in flight, and counts it as the server closing.
#[test]
fn the_server_idle_timeout_closes_a_keep_alive_connection_at_its_instant_with_close_notify() {
    for over_tls in [false, true] {
        let mut pair = Pair::new(Speak::Http1, over_tls, Split::Whole, REPLY_TIMEOUT);
        pair.set_up();
        pair.now += Duration::from_secs(2);
        let last = pair.now;
        pair.begin(1);
        assert_eq!(pair.responses(), [(200, true)]);
        assert_eq!(pair.client.conn.poll_timeout(&pair.client.profile), None, "an idle client waits for nothing");
        assert_eq!(pair.next_wake(), Some(last + IDLE_TIMEOUT), "tls {over_tls}");
        assert_eq!(pair.advance(), last + IDLE_TIMEOUT);
        assert_eq!(pair.server_closed(), Some((CloseReason::Idle, Ending::Orderly)), "tls {over_tls}");
        assert_eq!(pair.client.close_notify, over_tls, "tls {over_tls}");
        let close = pair.client.closed.as_ref().expect("the client saw the close");
        assert!(matches!(close.reason, Reason::ClosedByPeer), "tls {over_tls}: {close:?}");
        assert!(!pair.client.reset);
    }
}

/// A drain begins while a request is in the socket unread: HTTP/1.1 answers it with
/// `Connection: close` and closes; the client takes that as the server closing as it said
/// (Done, not an error), over TLS with close_notify both ways.
#[test]
fn a_drain_answers_http1_with_connection_close_and_the_client_counts_it_done() {
    for over_tls in [false, true] {
        let mut pair = Pair::new(Speak::Http1, over_tls, Split::Whole, REPLY_TIMEOUT);
        pair.set_up();
        pair.begin(2);
        // The next request is in the socket when the drain begins.
        let c = &mut pair.client;
        let stamp = Stamp::at(0);
        let events = &mut c.events;
        c.conn.begin(&c.profile, stamp, &mut Vec::new(), &mut |e| events.push(e));
        pair.client_pump();
        assert!(!pair.to_server.bytes.is_empty());
        let until = pair.now + Duration::from_secs(5);
        pair.server.conn.lc.begin_drain(pair.now, until, true);
        pair.server_turn();
        pair.drive();
        let expected = [expected_response(false).repeat(2), expected_response(true)].concat();
        assert_eq!(pair.client.plain, expected, "tls {over_tls}");
        assert_eq!(pair.responses(), [(200, true); 3]);
        assert_eq!(pair.server_closed(), Some((CloseReason::Done, Ending::Orderly)), "tls {over_tls}");
        let close = pair.client.closed.as_ref().expect("the client closed");
        assert!(matches!(close.reason, Reason::Done), "tls {over_tls}: {close:?}");
        assert_eq!(pair.client.close_notify, over_tls);
    }
}

/// A drain on HTTP/2: the server's GOAWAY(NO_ERROR) naming the last stream it took; the client
/// counts the GOAWAY, opens no stream after it, and closes as done once its streams are in.
#[test]
fn a_drain_sends_h2_a_goaway_and_the_client_counts_it_done() {
    for over_tls in [true, false] {
        let mut pair = Pair::new(Speak::H2, over_tls, Split::Whole, REPLY_TIMEOUT);
        pair.set_up();
        pair.begin(2);
        let until = pair.now + Duration::from_secs(5);
        pair.server.conn.lc.begin_drain(pair.now, until, false);
        pair.server_turn();
        pair.drive();
        let (_, goaways) = h2_streams(&pair.client.plain);
        assert_eq!(goaways, [(3, 0)], "tls {over_tls}: GOAWAY(last stream 3, NO_ERROR)");
        assert_eq!(pair.goaways(), ["NO_ERROR"], "tls {over_tls}");
        assert!(!pair.client.conn.may_begin(64), "no stream after a GOAWAY");
        assert_h2_answered(&pair.client.plain, &[1, 3]);
        let close = pair.client.closed.as_ref().expect("the client closed");
        assert!(matches!(close.reason, Reason::Done), "tls {over_tls}: {close:?}");
        let server = pair.server_closed().expect("the server closed");
        assert_eq!(server, (CloseReason::Done, Ending::Orderly), "tls {over_tls}");
        assert_eq!(pair.client.close_notify, over_tls, "close_notify behind the GOAWAY under TLS");
    }
}
