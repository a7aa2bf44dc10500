//! HTTP/3 over QUIC (`load http --http3`): one load connection's QUIC endpoint and its HTTP/3
//! client, without the socket.
//!
//! Each load connection has its own connected UDP socket, as `load udp` has and as h2load's
//! HTTP/3 client has: the kernel sorts the datagrams by port, a connection's datagrams are read
//! only when it has some, and every part of the event loop (the schedule of `-R`, the `-n`
//! budget, `--per-conn`, reconnects, the wait at the end) serves QUIC unchanged. The QUIC
//! transport is `sockscale_proto::quic::QuicEndpoint` (quinn-proto, driven in quinn's order)
//! with one connection on it; the HTTP/3 client is its [`Apps`]: it opens the control stream,
//! reads the server's (SETTINGS, GOAWAY) and its QPACK streams, and runs each request on its
//! own bidirectional stream, its response read by `sockscale_h3::ResponseStream`.
//!
//! What happens is told as [`H3Event`]s (plain values: the event loop names no QUIC type), in
//! the order the connection met it:
//!
//! ```text
//! client = H3Client::new(&profile, now)?              // Initial queued
//! client.handle(now, datagram)*; client.after_datagrams(now, on)   // events drained to `on`
//! while client.may_begin(depth): client.begin(stamp, now)
//! client.poll_transmit(now, out)? -> datagrams to send    (events drained again)
//! at poll_timeout(): client.handle_timeout(now)
//! client.close(now) -> the CONNECTION_CLOSE datagram to send last
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sockscale_h3::{
    ControlEvent, ControlStream, DecoderStreamReader, EncoderStreamReader, ErrorCode, H3Error, ResponseEvent,
    ResponseStream, Settings, Side, UniStreamKind, UniStreamType,
};
use sockscale_proto::quic::quinn_proto::{
    self, Connection, ConnectionError, Dir, ReadError, StreamEvent, StreamId, VarInt,
};
use sockscale_proto::quic::{Admission, Apps, QuicEndpoint, QuicSetup, QuicTuning, RetryMode};
use sockscale_proto::udp::Endpoint;

use crate::client::Stamp;

/// The largest field section this client takes (SETTINGS_MAX_FIELD_SECTION_SIZE, sent).
const MAX_FIELD_SECTION: usize = 64 << 10;
/// The largest frame on the server's control stream this client reads.
const MAX_CONTROL_FRAME: usize = 16 << 10;

/// What every HTTP/3 connection of a run shares: the QUIC configuration (trust, ALPN `h3`, a
/// resumption store), where to connect, and the request, its frames made once.
pub struct H3Profile {
    setup: Arc<QuicSetup>,
    remote: SocketAddr,
    server_name: String,
    /// The request stream's bytes: HEADERS, then DATA with the body if there is one.
    request: Bytes,
    /// The control stream's bytes: its type, then SETTINGS.
    control: Bytes,
    head: bool,
    /// How long a handshake may take (`--connect-timeout`).
    pub handshake_timeout: Duration,
    /// `--0rtt`: a resumed connection sends its first requests as 0-RTT data.
    zero_rtt: bool,
    /// Connections carry many requests; false (`--no-keepalive`): one each, every request
    /// paying a handshake (resumed, and with `--0rtt` sent as 0-RTT data).
    pub keepalive: bool,
}

impl std::fmt::Debug for H3Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Profile")
            .field("remote", &self.remote)
            .field("server_name", &self.server_name)
            .field("request_len", &self.request.len())
            .finish_non_exhaustive()
    }
}

/// The fields of a request, in order: pseudo-fields first (RFC 9114 §4.3.1).
pub struct RequestHead<'a> {
    pub method: &'a str,
    pub scheme: &'a str,
    pub authority: &'a str,
    pub path: &'a str,
    /// Regular fields, names in lower case.
    pub fields: Vec<(String, &'a str)>,
}

#[derive(Debug, thiserror::Error)]
#[error("QUIC: {0}")]
pub struct H3SetupError(String);

/// The run's QUIC choices.
#[derive(Debug, Clone, Copy)]
pub struct H3Options {
    /// A handshake not done by then ends the connection (`--connect-timeout`).
    pub handshake_timeout: Duration,
    /// `--0rtt`: a resumed connection's first requests go as 0-RTT data.
    pub zero_rtt: bool,
    /// `--quic-max-mtu`.
    pub max_mtu: u16,
}

impl H3Profile {
    /// `tls`: the client's rustls configuration (trust, resumption), its ALPN set to `h3` here;
    /// `zero_rtt`: send a resumed connection's first requests as 0-RTT data (`--0rtt`).
    pub fn new(
        tls: &sockscale_tls::ClientTls,
        server_name: &str,
        remote: SocketAddr,
        head: &RequestHead<'_>,
        body: &Bytes,
        options: H3Options,
    ) -> Result<Self, H3SetupError> {
        let H3Options { handshake_timeout, zero_rtt, max_mtu } = options;
        let tuning = QuicTuning {
            // Path MTU discovery up to `--quic-max-mtu` (the socket never fragments), which is
            // also the largest packet the server is told it may send.
            allow_mtud: true,
            max_mtu,
            // The server opens no request stream (RFC 9114 §6.1): push is never allowed.
            max_streams: 0,
            stream_window: 2 << 20,
            connection_window: 16 << 20,
            ..QuicTuning::default()
        };
        let rustls = tls.rustls_config(vec![b"h3".to_vec()], zero_rtt);
        let mut setup = QuicSetup::client(rustls, tuning.clone()).map_err(|e| H3SetupError(e.to_string()))?;
        // A connection between requests (a low -R rate, --per-conn done) must not reach the
        // idle timeout, which would close it as failed: a PING a third of the way there keeps
        // it open (and finds a server that went away, by the ICMP its PING meets).
        let mut transport = sockscale_proto::quic::transport(&tuning).map_err(|e| H3SetupError(e.to_string()))?;
        transport.keep_alive_interval(Some(tuning.idle_timeout / 3));
        if let Some(client) = setup.client.as_mut() {
            client.transport_config(Arc::new(transport));
        }
        Ok(H3Profile {
            setup: Arc::new(setup),
            remote,
            server_name: server_name.to_owned(),
            request: Bytes::from(request_frames(head, body)),
            control: Bytes::from(control_stream()),
            head: head.method.eq_ignore_ascii_case("HEAD"),
            handshake_timeout,
            zero_rtt,
            keepalive: true,
        })
    }

    /// The bytes one request sends on its stream.
    pub fn request_len(&self) -> usize {
        self.request.len()
    }
}

/// A request stream's frames: HEADERS (QPACK, static table only), and DATA with `body`.
pub fn request_frames(head: &RequestHead<'_>, body: &[u8]) -> Vec<u8> {
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", head.method.as_bytes()),
        (b":scheme", head.scheme.as_bytes()),
        (b":authority", head.authority.as_bytes()),
        (b":path", head.path.as_bytes()),
    ];
    fields.extend(head.fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    let mut block = Vec::new();
    sockscale_h3::encode_field_section(fields, &mut block);
    let mut out = Vec::with_capacity(block.len() + body.len() + 16);
    sockscale_h3::put_headers_frame(&block, &mut out);
    if !body.is_empty() {
        sockscale_h3::put_data_frame_header(body.len() as u64, &mut out);
        out.extend_from_slice(body);
    }
    out
}

/// The client's control stream: its type and SETTINGS (no QPACK dynamic table, so no encoder or
/// decoder stream is needed: the server may not refer to a table this side never allowed).
fn control_stream() -> Vec<u8> {
    let mut out = Vec::new();
    sockscale_h3::encode_uni_stream_type(sockscale_h3::stream_type::CONTROL, &mut out);
    let settings = Settings { max_field_section_size: Some(MAX_FIELD_SECTION as u64), ..Settings::default() };
    settings.encode_frame(&mut out);
    out
}

/// What an HTTP/3 connection met, for the event loop to count.
#[derive(Debug, Clone, PartialEq)]
pub enum H3Event {
    /// The QUIC handshake completed `took` after the first Initial; `resumed`: the server
    /// accepted a session ticket (its ServerHello said so); `zero_rtt_sent`: requests went as
    /// 0-RTT data (`--0rtt`), which the server accepted or not.
    Handshake { took: Duration, alpn: Option<String>, resumed: bool, zero_rtt_sent: bool, zero_rtt_accepted: bool },
    /// A request's stream was opened and its bytes handed to QUIC (`early`: as 0-RTT data).
    RequestSent { bytes: usize, early: bool },
    /// A response ended (its stream's FIN after the body).
    Response { stamp: Stamp, status: u16 },
    /// Response octets read from a request stream (frames: head, body, trailers).
    Received { bytes: usize },
    /// The server reset a request stream before its response ended: its code's name.
    StreamReset { code: String },
    /// A response that broke HTTP/3 on its stream (H3_MESSAGE_ERROR, a bad field section...).
    StreamMalformed { code: String },
    /// The server's GOAWAY: it takes no request past those in flight.
    GoAway,
    /// The connection's transport figures when it ended.
    Ended(Box<QuicFigures>),
}

/// One connection's transport figures, read as it ends.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuicFigures {
    /// The smoothed RTT; None if the handshake never completed (no sample is an RTT).
    pub rtt: Option<Duration>,
    pub packets_sent: u64,
    pub packets_lost: u64,
    pub bytes_lost: u64,
    pub congestion_events: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

/// Why an HTTP/3 connection failed, in words and as a short name to count by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H3Failure {
    /// `timeout`, `alpn_refused`, `certificate`, `tls_alert`, `refused`, `closed`, `reset`,
    /// `version`, `protocol`, or an HTTP/3 error code's name (`H3_FRAME_UNEXPECTED`).
    pub kind: String,
    pub words: String,
    /// During the handshake.
    pub handshaking: bool,
}

impl std::fmt::Display for H3Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words)
    }
}

/// The words of a TLS failure quinn-proto passed on as rustls's error in its debug form: the
/// certificate's refusal that `sockscale_tls`'s verifier put in words (what to trust, which
/// flag) is taken out of `Other(OtherError(CertificateWords("…")))`.
fn tls_words(reason: &str) -> String {
    const START: &str = "CertificateWords(\"";
    let Some(at) = reason.find(START) else { return reason.to_owned() };
    let inner = &reason[at + START.len()..];
    let mut words = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return words,
            '\\' => words.extend(chars.next()),
            c => words.push(c),
        }
    }
    reason.to_owned()
}

/// A TLS alert's name (RFC 8446 §6), as QUIC carries it in a CONNECTION_CLOSE (0x100 + alert).
fn alert_name(alert: u8) -> String {
    format!("{:?}", quinn_proto::rustls::AlertDescription::from(alert))
}

impl H3Failure {
    fn of(e: &ConnectionError, handshaking: bool, timeout: Duration) -> H3Failure {
        let (kind, words): (String, String) = match e {
            ConnectionError::TimedOut if handshaking => (
                "timeout".into(),
                format!(
                    "no QUIC handshake within {:.1} s: nothing answers on that UDP port, or not QUIC",
                    timeout.as_secs_f64()
                ),
            ),
            ConnectionError::TimedOut => ("timeout".into(), "the connection went idle (QUIC idle timeout)".into()),
            ConnectionError::TransportError(t) => {
                let code = u64::from(t.code);
                // Raised here: our TLS refused the server (its certificate, mostly).
                if (0x100..0x200).contains(&code) {
                    let alert = (code - 0x100) as u8;
                    let kind =
                        if alert == 42 || (44..=46).contains(&alert) || alert == 48 { "certificate" } else { "tls" };
                    let reason = if t.reason.is_empty() { alert_name(alert) } else { tls_words(&t.reason) };
                    if kind == "certificate" {
                        // The verifier's words say what to do (--cacert, --insecure).
                        (kind.into(), reason)
                    } else {
                        (kind.into(), format!("{reason} (TLS alert {alert}, {}, sent)", alert_name(alert)))
                    }
                } else {
                    ("protocol".into(), format!("the server broke QUIC: {t}"))
                }
            }
            ConnectionError::ConnectionClosed(c) => {
                let code = u64::from(c.error_code);
                let reason = String::from_utf8_lossy(&c.reason);
                let said = if reason.is_empty() { String::new() } else { format!(": {reason}") };
                if code == 0x100 + 120 {
                    (
                        "alpn_refused".into(),
                        format!("the server refused ALPN h3 (TLS alert 120, no_application_protocol{said}): it serves no HTTP/3 there"),
                    )
                } else if (0x100..0x200).contains(&code) {
                    let alert = (code - 0x100) as u8;
                    ("tls_alert".into(), format!("the server sent TLS alert {alert} ({}){said}", alert_name(alert)))
                } else if code == 0x2 {
                    ("refused".into(), format!("the server refused the connection (CONNECTION_REFUSED{said})"))
                } else {
                    ("closed".into(), format!("the server closed the connection with QUIC error {code:#x}{said}"))
                }
            }
            ConnectionError::ApplicationClosed(c) => {
                let name = ErrorCode(u64::from(c.error_code)).name().to_owned();
                let reason = String::from_utf8_lossy(&c.reason);
                let said = if reason.is_empty() { String::new() } else { format!(": {reason}") };
                (name.clone(), format!("the server closed the connection with {name}{said}"))
            }
            ConnectionError::Reset => ("reset".into(), "the server reset the connection (stateless reset)".into()),
            ConnectionError::VersionMismatch => ("version".into(), "the server speaks no QUIC version 1".into()),
            ConnectionError::CidsExhausted => ("protocol".into(), "connection IDs exhausted".into()),
            ConnectionError::LocallyClosed => ("local".into(), "closed by this client".into()),
        };
        H3Failure { kind, words, handshaking }
    }
}

/// A request in flight on its stream.
struct InFlight {
    stamp: Stamp,
    response: ResponseStream,
    status: Option<u16>,
    /// The request's bytes not yet taken by QUIC (its flow control).
    unsent: Bytes,
}

/// A stream the server opened.
enum Uni {
    Typing(UniStreamType),
    Control(Box<ControlStream>),
    Encoder(EncoderStreamReader),
    Decoder(DecoderStreamReader),
    /// An unknown type (a grease stream): read and dropped.
    Discard,
}

/// One HTTP/3 connection's state: [`Apps::App`].
pub struct H3Conn {
    started: Instant,
    requests: HashMap<StreamId, InFlight>,
    uni: HashMap<StreamId, Uni>,
    /// Requests begun while the server's stream limit was reached: opened when it allows.
    waiting: VecDeque<Stamp>,
    /// Requests went as 0-RTT data.
    early: bool,
    /// The transport's figures were told (once, when the connection ended).
    told_end: bool,
}

/// The HTTP/3 client as the QUIC endpoint's application: the run's shared bytes and the events
/// waiting to be told.
pub struct H3Apps {
    request: Bytes,
    control: Bytes,
    head: bool,
    handshake_timeout: Duration,
    zero_rtt: bool,
    events: Vec<H3Event>,
    /// The endpoint carries one connection: its state that outlives it is kept here.
    established: bool,
    /// The server's GOAWAY came: no new request.
    goaway: bool,
    failure: Option<H3Failure>,
}

impl Apps for H3Apps {
    type App = H3Conn;

    fn start(&mut self, _conn: &mut Connection, now: Instant) -> H3Conn {
        H3Conn {
            started: now,
            requests: HashMap::new(),
            uni: HashMap::new(),
            waiting: VecDeque::new(),
            early: false,
            told_end: false,
        }
    }

    fn event(&mut self, app: &mut H3Conn, conn: &mut Connection, event: quinn_proto::Event, now: Instant) {
        match event {
            quinn_proto::Event::Connected => {
                self.established = true;
                if app.early && !conn.accepted_0rtt() {
                    // The server refused the 0-RTT data: quinn-proto dropped those streams (their
                    // ids will be used again). Their requests go again, first, in 1-RTT.
                    let mut again: Vec<Stamp> = app.requests.drain().map(|(_, r)| r.stamp).collect();
                    again.sort_by_key(|s| (s.sent_ns, s.due_ns));
                    for stamp in again.into_iter().rev() {
                        app.waiting.push_front(stamp);
                    }
                }
                let handshake = sockscale_proto::quic::Handshake::of(conn).unwrap_or_default();
                let alpn = handshake.protocol.map(|p| String::from_utf8_lossy(&p).into_owned());
                self.events.push(H3Event::Handshake {
                    took: now.saturating_duration_since(app.started),
                    alpn,
                    resumed: handshake.resumed,
                    zero_rtt_sent: app.early,
                    zero_rtt_accepted: app.early && conn.accepted_0rtt(),
                });
                if let Some(id) = conn.streams().open(Dir::Uni) {
                    let mut control = [self.control.clone()];
                    // A fresh stream takes a few bytes whatever the window: the whole SETTINGS.
                    let _ = conn.send_stream(id).write_chunks(&mut control);
                }
                self.open_waiting(app, conn);
            }
            quinn_proto::Event::ConnectionLost { reason } => {
                if self.failure.is_none() && !matches!(reason, ConnectionError::LocallyClosed) {
                    self.failure = Some(H3Failure::of(&reason, !self.established, self.handshake_timeout));
                }
                self.tell_end(app, conn);
            }
            quinn_proto::Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                while let Some(id) = conn.streams().accept(Dir::Uni) {
                    app.uni.insert(id, Uni::Typing(UniStreamType::default()));
                    self.read_uni(app, conn, id, now);
                }
            }
            quinn_proto::Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                // Not allowed (max_streams 0): quinn-proto refuses it before it gets here.
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    let _ = conn
                        .recv_stream(id)
                        .stop(VarInt::from_u64(ErrorCode::H3_STREAM_CREATION_ERROR.code()).unwrap_or(VarInt::MAX));
                }
            }
            quinn_proto::Event::Stream(StreamEvent::Readable { id }) => {
                if id.dir() == Dir::Uni {
                    self.read_uni(app, conn, id, now);
                } else {
                    self.read_response(app, conn, id, now);
                }
            }
            quinn_proto::Event::Stream(StreamEvent::Writable { id }) => {
                if let Some(r) = app.requests.get_mut(&id) {
                    write_request(conn, id, r);
                }
            }
            quinn_proto::Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => self.open_waiting(app, conn),
            _ => {}
        }
    }

    fn begin_drain(&mut self, _app: &mut H3Conn, conn: &mut Connection, now: Instant) {
        conn.close(now, VarInt::from_u32(ErrorCode::H3_NO_ERROR.code() as u32), Bytes::new());
    }
}

/// Hand QUIC what it takes of a request's bytes; finish the stream once all are taken.
fn write_request(conn: &mut Connection, id: StreamId, r: &mut InFlight) {
    if r.unsent.is_empty() {
        return;
    }
    let mut send = conn.send_stream(id);
    let mut chunks = [std::mem::take(&mut r.unsent)];
    // Write until all is taken or quinn-proto says Blocked: only a write refused as Blocked
    // marks the stream to be woken (`Writable`) when the server gives credit; one that took
    // part of the chunk does not (a 10 MiB upload stalled so).
    while !chunks[0].is_empty() {
        match send.write_chunks(&mut chunks) {
            Ok(w) if w.bytes > 0 => {}
            _ => break,
        }
    }
    let [left] = chunks;
    r.unsent = left;
    if r.unsent.is_empty() {
        let _ = send.finish();
    }
}

impl H3Apps {
    /// Open a stream for each request waiting for one, while the server allows.
    fn open_waiting(&mut self, app: &mut H3Conn, conn: &mut Connection) {
        while !app.waiting.is_empty() {
            let Some(id) = conn.streams().open(Dir::Bi) else { return };
            let Some(stamp) = app.waiting.pop_front() else { return };
            let mut r = InFlight {
                stamp,
                response: ResponseStream::new(MAX_FIELD_SECTION, self.head),
                status: None,
                unsent: self.request.clone(),
            };
            write_request(conn, id, &mut r);
            app.requests.insert(id, r);
            let early = !self.established;
            app.early |= early;
            self.events.push(H3Event::RequestSent { bytes: self.request.len(), early });
        }
    }

    /// The server's side of a request stream: the response, as far as it came.
    fn read_response(&mut self, app: &mut H3Conn, conn: &mut Connection, id: StreamId, now: Instant) {
        let Some(r) = app.requests.get_mut(&id) else {
            // A stream already answered (or reset): read nothing more of it.
            let _ = conn.recv_stream(id).stop(VarInt::from_u32(ErrorCode::H3_NO_ERROR.code() as u32));
            return;
        };
        let mut outcome: Result<bool, H3Error> = Ok(false);
        let mut reset = None;
        let mut received = 0;
        {
            let mut recv = conn.recv_stream(id);
            let Ok(mut chunks) = recv.read(true) else { return };
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(chunk)) => {
                        received += chunk.bytes.len();
                        outcome = feed_response(r, &chunk.bytes, false);
                    }
                    Ok(None) => {
                        outcome = feed_response(r, &[], true);
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(code)) => {
                        reset = Some(code);
                        break;
                    }
                }
                if !matches!(outcome, Ok(false)) {
                    break;
                }
            }
            let _ = chunks.finalize();
        }
        if received > 0 {
            self.events.push(H3Event::Received { bytes: received });
        }
        let code_name = |code: u64| {
            let name = ErrorCode(code).name();
            if name.is_empty() || name.starts_with("0x") {
                format!("{code:#x}")
            } else {
                name.to_owned()
            }
        };
        match (outcome, reset) {
            (Ok(true), _) => {
                if let Some(r) = app.requests.remove(&id) {
                    let status = r.status.unwrap_or(0);
                    self.events.push(H3Event::Response { stamp: r.stamp, status });
                }
            }
            (Ok(false), Some(code)) => {
                app.requests.remove(&id);
                self.events.push(H3Event::StreamReset { code: code_name(u64::from(code)) });
            }
            (Ok(false), None) => {}
            (Err(e), _) => {
                app.requests.remove(&id);
                let code = VarInt::from_u64(e.code().code()).unwrap_or(VarInt::MAX);
                if e.is_connection() {
                    self.fail(conn, now, &e);
                } else {
                    let _ = conn.recv_stream(id).stop(code);
                    let _ = conn.send_stream(id).reset(code);
                    self.events.push(H3Event::StreamMalformed { code: e.code().name().to_owned() });
                }
            }
        }
    }

    /// A stream the server opened: its type, then what it carries.
    fn read_uni(&mut self, app: &mut H3Conn, conn: &mut Connection, id: StreamId, now: Instant) {
        let Some(mut state) = app.uni.remove(&id) else { return };
        let mut outcome: Result<(), H3Error> = Ok(());
        let mut closed = false;
        let mut goaway = false;
        {
            let mut recv = conn.recv_stream(id);
            let Ok(mut chunks) = recv.read(true) else { return };
            loop {
                let (bytes, fin) = match chunks.next(usize::MAX) {
                    Ok(Some(chunk)) => (chunk.bytes, false),
                    Ok(None) => {
                        closed = true;
                        (Bytes::new(), true)
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(_)) => {
                        closed = true;
                        if matches!(state, Uni::Control(_)) {
                            outcome = Err(H3Error::Connection(
                                ErrorCode::H3_CLOSED_CRITICAL_STREAM,
                                "the control stream was reset",
                            ));
                        }
                        break;
                    }
                };
                outcome = feed_uni(&mut state, &bytes, fin, &mut goaway);
                if outcome.is_err() || fin {
                    break;
                }
            }
            let _ = chunks.finalize();
        }
        if goaway && !self.goaway {
            self.goaway = true;
            self.events.push(H3Event::GoAway);
        }
        if let Err(e) = outcome {
            return self.fail(conn, now, &e);
        }
        if matches!(state, Uni::Discard) {
            let _ = conn.recv_stream(id).stop(VarInt::from_u32(ErrorCode::H3_STREAM_CREATION_ERROR.code() as u32));
        } else if !closed {
            app.uni.insert(id, state);
        }
    }

    /// An HTTP/3 connection error: close with its code, and say why.
    fn fail(&mut self, conn: &mut Connection, now: Instant, e: &H3Error) {
        let code = e.code();
        if self.failure.is_none() {
            self.failure = Some(H3Failure {
                kind: code.name().to_owned(),
                words: format!("the server broke HTTP/3: {} ({})", e.reason(), code.name()),
                handshaking: false,
            });
        }
        conn.close(
            now,
            VarInt::from_u64(code.code()).unwrap_or(VarInt::MAX),
            Bytes::from_static(e.reason().as_bytes()),
        );
    }

    fn tell_end(&mut self, app: &mut H3Conn, conn: &Connection) {
        if app.told_end {
            return;
        }
        app.told_end = true;
        let stats = conn.stats();
        self.events.push(H3Event::Ended(Box::new(QuicFigures {
            rtt: self.established.then(|| conn.rtt()),
            packets_sent: stats.path.sent_packets,
            packets_lost: stats.path.lost_packets,
            bytes_lost: stats.path.lost_bytes,
            congestion_events: stats.path.congestion_events,
            datagrams_sent: stats.udp_tx.datagrams,
            datagrams_received: stats.udp_rx.datagrams,
            bytes_sent: stats.udp_tx.bytes,
            bytes_received: stats.udp_rx.bytes,
        })));
    }
}

/// Feed a response's octets: Ok(true) once it ended.
fn feed_response(r: &mut InFlight, mut input: &[u8], fin: bool) -> Result<bool, H3Error> {
    loop {
        let (n, event) = r.response.feed(input, fin)?;
        input = &input[n..];
        match event {
            None => return Ok(false),
            Some(ResponseEvent::Head(head)) => r.status = Some(head.status),
            Some(ResponseEvent::Body(_) | ResponseEvent::Trailers(_)) => {}
            Some(ResponseEvent::End) => return Ok(true),
        }
    }
}

/// Feed a server's unidirectional stream.
fn feed_uni(state: &mut Uni, mut input: &[u8], fin: bool, goaway: &mut bool) -> Result<(), H3Error> {
    loop {
        match state {
            Uni::Typing(t) => {
                let (n, kind) = t.feed(input);
                input = &input[n..];
                match kind {
                    // The rest of the type comes later (or never: a stream ended in its type
                    // is dropped).
                    None => return Ok(()),
                    Some(UniStreamKind::Control) => {
                        *state = Uni::Control(Box::new(ControlStream::new(Side::Client, MAX_CONTROL_FRAME)))
                    }
                    Some(UniStreamKind::QpackEncoder) => *state = Uni::Encoder(EncoderStreamReader),
                    Some(UniStreamKind::QpackDecoder) => *state = Uni::Decoder(DecoderStreamReader::default()),
                    Some(UniStreamKind::Push) => {
                        return Err(H3Error::Connection(ErrorCode::H3_ID_ERROR, "a push stream, never allowed"))
                    }
                    Some(UniStreamKind::Unknown(_)) => {
                        *state = Uni::Discard;
                        return Ok(());
                    }
                }
            }
            Uni::Control(c) => {
                let (n, event) = c.feed(input, fin)?;
                input = &input[n..];
                match event {
                    None => return Ok(()),
                    Some(ControlEvent::GoAway(_)) => *goaway = true,
                    Some(_) => {}
                }
            }
            Uni::Encoder(e) => return e.feed(input, fin),
            Uni::Decoder(d) => return d.feed(input, fin),
            Uni::Discard => return Ok(()),
        }
    }
}

/// One load connection's QUIC endpoint and its HTTP/3 connection (see the module).
pub struct H3Client {
    endpoint: QuicEndpoint<H3Apps>,
    handle: usize,
    remote: SocketAddr,
    /// The connection ended (lost, or closed by this side): nothing more begins.
    ended: bool,
}

impl std::fmt::Debug for H3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Client").field("remote", &self.remote).field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl H3Client {
    /// A connection to the profile's server, its first Initial queued.
    pub fn new(profile: &H3Profile, now: Instant) -> Result<Self, H3Failure> {
        let apps = H3Apps {
            request: profile.request.clone(),
            control: profile.control.clone(),
            head: profile.head,
            handshake_timeout: profile.handshake_timeout,
            zero_rtt: profile.zero_rtt,
            events: Vec::new(),
            established: false,
            goaway: false,
            failure: None,
        };
        // A client endpoint admits nothing (the limits are never consulted); its handshake
        // ends at the connect timeout.
        let admission = Admission {
            max_connections: 0,
            max_handshakes: 0,
            retry: RetryMode::Off,
            handshake_timeout: profile.handshake_timeout,
        };
        let mut endpoint = QuicEndpoint::new(profile.setup.clone(), admission, apps);
        let handle = endpoint.connect(now, profile.remote, &profile.server_name).map_err(|e| H3Failure {
            kind: "local".into(),
            words: format!("cannot start a QUIC connection: {e}"),
            handshaking: true,
        })?;
        Ok(H3Client { endpoint, handle, remote: profile.remote, ended: false })
    }

    /// The handshake completed.
    pub fn established(&self) -> bool {
        self.apps().established
    }

    fn apps(&self) -> &H3Apps {
        // The shared context outlives the connection: read it through the endpoint, even
        // once the connection is gone.
        self.endpoint.shared()
    }

    /// Requests in flight (waiting for a stream, sent, or being answered).
    pub fn outstanding(&self) -> usize {
        self.endpoint.connection(self.handle).map_or(0, |(_, app, _)| app.requests.len() + app.waiting.len())
    }

    /// The stamp of the request in flight longest.
    pub fn oldest(&self) -> Option<Stamp> {
        let (_, app, _) = self.endpoint.connection(self.handle)?;
        let open = app.requests.values().map(|r| r.stamp);
        open.chain(app.waiting.iter().copied()).min_by_key(|s| s.sent_ns)
    }

    /// Whether a request may begin with at most `depth` in flight: the handshake done, no
    /// GOAWAY, the connection not ended.
    pub fn may_begin(&self, depth: usize) -> bool {
        if self.ended {
            return false;
        }
        let Some((conn, app, apps)) = self.endpoint.connection(self.handle) else { return false };
        // `--0rtt`: a resumed session's 0-RTT keys are there before the handshake completes.
        let early = apps.zero_rtt && !apps.established && conn.has_0rtt() && conn.is_handshaking();
        (apps.established || early)
            && !apps.goaway
            && apps.failure.is_none()
            && app.waiting.is_empty()
            && app.requests.len() < depth
    }

    /// The server said GOAWAY: the connection takes no new request.
    pub fn going_away(&self) -> bool {
        self.apps().goaway
    }

    /// Begin a request stamped `stamp`: on a new stream, or once the server allows one more.
    pub fn begin(&mut self, stamp: Stamp) {
        let Some((conn, app, apps)) = self.endpoint.connection_mut(self.handle) else { return };
        app.waiting.push_back(stamp);
        apps.open_waiting(app, conn);
        self.endpoint.touch(self.handle);
    }

    /// A datagram arrived.
    pub fn handle(&mut self, now: Instant, datagram: &[u8]) {
        self.endpoint.handle(now, self.remote, datagram);
    }

    /// A datagram arrived whose IP header carried the ECN bits `ecn`.
    pub fn handle_ecn(&mut self, now: Instant, ecn: u8, datagram: &[u8]) {
        self.endpoint.handle_ecn(now, self.remote, ecn, datagram);
    }

    /// After the datagrams of one read: act on them (the handshake, responses), before the
    /// next requests begin; what happened goes to `on`.
    pub fn after_datagrams(&mut self, now: Instant, on: &mut impl FnMut(H3Event)) {
        self.endpoint.drive_ready(now);
        self.drain(on);
    }

    /// Datagrams to send: appended to `out`, with their segment size if several. None: nothing
    /// more now.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        max_segments: usize,
        out: &mut Vec<u8>,
    ) -> Option<(usize, Option<usize>)> {
        let t = self.endpoint.poll_transmit(now, max_segments, out)?;
        Some((t.size, t.segment_size))
    }

    /// What happened since the last call.
    pub fn drain(&mut self, on: &mut impl FnMut(H3Event)) {
        let events = std::mem::take(&mut self.endpoint.apps().events);
        for event in events {
            on(event);
        }
        if !self.ended && self.endpoint.open_connections() == 0 {
            self.ended = true;
        }
    }

    /// When to call [`H3Client::handle_timeout`]. Work queued by datagrams or new requests is
    /// not a timer: the caller polls the datagrams after each (unless its socket is full: then
    /// it waits for room).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.endpoint.next_timer()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
    }

    /// Why the connection failed, once it did (lost, or an HTTP/3 error found here).
    pub fn failure(&self) -> Option<H3Failure> {
        if let Some(failure) = &self.apps().failure {
            return Some(failure.clone());
        }
        self.ended.then(|| H3Failure {
            kind: "closed".into(),
            words: "the connection ended".into(),
            handshaking: false,
        })
    }

    /// The connection is gone (lost, drained).
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Close the connection now (H3_NO_ERROR): its transport figures go to `on`, and the one
    /// datagram carrying the CONNECTION_CLOSE is returned, to send last.
    pub fn close(&mut self, now: Instant, on: &mut impl FnMut(H3Event)) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some((conn, app, apps)) = self.endpoint.connection_mut(self.handle) {
            if !conn.is_closed() {
                conn.close(now, VarInt::from_u32(ErrorCode::H3_NO_ERROR.code() as u32), Bytes::new());
            }
            apps.tell_end(app, conn);
            self.endpoint.touch(self.handle);
            if let Some((size, segment)) = self.poll_transmit(now, 1, &mut out) {
                out.truncate(segment.unwrap_or(size));
            }
        }
        self.ended = true;
        self.drain(on);
        out
    }
}

#[cfg(test)]
#[path = "h3_tests.rs"]
mod tests;
