//! One load connection without its socket: the client side of a `Connection`, as quinn-proto's.
//!
//! It owns the TLS stage (behind `sockscale_tls::Crypto`, shared with the server, as quinn-proto holds its crypto session), the
//! protocol session (echo, HTTP/1.1, HTTP/2, UDP) and its timers (the connect timeout, the
//! handshake timeout, the reply timeout, a datagram's loss, the end-of-run grace). It is fed what the socket did and
//! the time ([`Now`]), and answers with the bytes to send ([`Connection::poll_transmit`]), what
//! happened ([`Event`], through a callback: nothing is queued, so an exchange allocates
//! nothing here), when to wake it ([`Connection::poll_timeout`]) and, once, how it ends
//! ([`Close`]: the reason, the last bytes — a fatal alert, a close_notify — and the ending).
//!
//! The event loop (`event_loop/`) moves the bytes, waits, paces and counts; which bytes, which deadline and what an
//! answer means are decided here.
//!
//! ```text
//! conn = Connection::new(&profile, index, now)              // connect begun: connect timeout
//! conn.on_connected(&profile, now)                          // TLS: the ClientHello waits to go
//! while the event loop's pacing allows && conn.may_begin(depth): conn.begin(&profile, stamp, ..)
//! bytes = conn.poll_transmit(&profile, on)?; n = send(bytes); conn.sent(n, on)
//! on input:    conn.receive(&profile, now, bytes, scratch, on)?   (and conn.poll_close())
//! on EOF:      close = conn.receive_eof(&profile, on)
//! at poll_timeout(): conn.on_timeout(&profile, now, on)?
//! the run ends: conn.begin_grace(now, grace)                // a busy connection: Reason::GraceOver
//! ```
//!
//! The event loop carries out a close: it sends `last` once without waiting and ends the socket
//! with `sockscale_sys::end_socket(fd, last, ending)`.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use sockscale_sys::Ending;
use sockscale_tls::{ClientSession, Crypto, Failure};

use crate::client::{EchoClient, Failure as Mismatch, H2Client, HttpClient, Reply, Stamp, StreamEnd, UdpClient};
use crate::config::{AcceptedStatuses, LoadConfig, LoadTls, Mode};
pub use crate::events::{Event, Now};
use crate::h3::{H3Client, H3Failure, H3Profile, RequestHead};
use crate::http::Response;
use crate::pattern::Pattern;
use crate::ws::{WsClient, WsEnd, WsProfile};
use crate::ws_h2::{WsH2Client, WsH2End};

/// Records encrypted ahead of the socket at most: past this the client's bytes wait unencrypted
/// (they are cheap to keep: a slice of the pattern or the request), so a connection whose
/// socket is full does not grow a buffer.
pub const MAX_RECORDS_AHEAD: usize = 64 << 10;

/// What speaks on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Echo {
        msg_len: usize,
    },
    Http,
    H2,
    Udp {
        msg_len: usize,
    },
    /// WebSocket (`load ws`): what it sends is in [`Profile::ws`].
    Ws,
    /// HTTP/3 over QUIC (`load http --http3`): see [`Profile::h3`].
    H3,
}

/// What every connection of a run shares: what it sends, what it accepts, its timeouts and
/// its TLS configuration. Borrowed by every call, so a connection holds none of it.
#[derive(Debug)]
pub struct Profile {
    pub kind: Kind,
    pub pattern: Pattern,
    /// The HTTP request repeated `pipeline` times.
    pub requests: Vec<u8>,
    pub request_len: usize,
    pub head_requests: bool,
    /// HTTP/2 (`--http2`): the request every stream sends, its header block encoded once.
    pub h2_request: Option<sockscale_h2::ClientRequest>,
    pub accept_status: AcceptedStatuses,
    pub connect_timeout: Duration,
    /// `--timeout`: for a reply, and for a TLS handshake.
    pub reply_timeout: Duration,
    pub tls: Option<LoadTls>,
    /// The clock's origin: every `ns` of the run counts from here.
    pub origin: Instant,
    /// WebSocket (`load ws`): the upgrade and the messages.
    pub ws: Option<WsProfile>,
    /// HTTP/3 (`--http3`): the QUIC configuration and the request's frames; None for other
    /// runs (and if QUIC could not be set up, which the probe before the run says).
    pub h3: Option<H3Profile>,
}

impl Profile {
    pub fn new(cfg: &LoadConfig, requests: Vec<u8>, request_len: usize, head_requests: bool, origin: Instant) -> Self {
        let (kind, h2_request) = match &cfg.mode {
            Mode::Echo { msg_len } => (Kind::Echo { msg_len: *msg_len }, None),
            Mode::Udp { msg_len } => (Kind::Udp { msg_len: *msg_len }, None),
            Mode::Http(h) if h.http3 => (Kind::H3, None),
            Mode::Http(h) if h.http2 => (Kind::H2, Some(h.h2_request())),
            Mode::Http(_) => (Kind::Http, None),
            Mode::Ws(_) => (Kind::Ws, None),
        };
        Profile {
            kind,
            pattern: Pattern::default(),
            requests,
            request_len,
            head_requests,
            h2_request,
            accept_status: cfg.accept_status.clone(),
            connect_timeout: cfg.connect_timeout,
            reply_timeout: cfg.reply_timeout,
            tls: cfg.tls.clone(),
            origin,
            ws: match &cfg.mode {
                Mode::Ws(run) if cfg.tls.is_some() => Some(WsProfile::new(run).over_tls(run)),
                Mode::Ws(run) => Some(WsProfile::new(run)),
                _ => None,
            },
            h3: match &cfg.mode {
                Mode::Http(h) if h.http3 => h3_profile(cfg, h).ok(),
                _ => None,
            },
        }
    }

    fn at(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns)
    }

    /// The longest to wait at the end of a run for the exchanges in flight: the longer of 1 s
    /// and twice the slowest exchange measured (`slowest`), never longer than the reply
    /// timeout. A server that answered everything within the run answers these too; one that
    /// stopped answering is not waited for longer than the slowest answer it gave justifies.
    pub fn end_of_run_grace(&self, slowest: Duration) -> Duration {
        (slowest * 2).max(Duration::from_secs(1)).min(self.reply_timeout)
    }

    /// With nothing of the run open, no connect succeeded for `since`: whether the target
    /// takes no connection (the connect timeout has passed), and the run should stop rather
    /// than retry for ever.
    pub fn takes_no_connection(&self, since: Duration) -> bool {
        since >= self.connect_timeout
    }

    /// The bytes one exchange sends (what a `-r` bucket pays for it).
    pub fn exchange_len(&self) -> usize {
        match self.kind {
            Kind::Echo { msg_len } | Kind::Udp { msg_len } => msg_len,
            Kind::Http | Kind::H2 => self.request_len,
            Kind::H3 => self.h3.as_ref().map_or(0, H3Profile::request_len),
            Kind::Ws => self.ws.as_ref().map_or(0, |ws| ws.msg_len),
        }
    }
}

/// An HTTP/3 run's profile: the request's fields as over HTTP/2 (Host becomes `:authority`).
pub fn h3_profile(cfg: &LoadConfig, h: &crate::config::HttpRequest) -> Result<H3Profile, String> {
    let tls = cfg.tls.as_ref().ok_or("HTTP/3 runs over QUIC, which needs an https:// URL")?;
    let remote = cfg.addr.inet().ok_or("HTTP/3 needs an IP address, not a Unix socket")?;
    let has = |name: &str| h.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let authority = h.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("host")).map_or(h.host.as_str(), |(_, v)| v);
    let length = h.body.len().to_string();
    let mut fields: Vec<(String, &str)> = Vec::new();
    if !has("user-agent") {
        fields.push(("user-agent".into(), "sockscale"));
    }
    for (name, value) in &h.headers {
        if !name.eq_ignore_ascii_case("host") {
            fields.push((name.to_ascii_lowercase(), value));
        }
    }
    if !h.body.is_empty() && !has("content-length") {
        fields.push(("content-length".into(), &length));
    }
    let head = RequestHead { method: &h.method, scheme: "https", authority, path: &h.path, fields };
    let mut profile = H3Profile::new(
        &tls.client,
        &tls.server_name,
        remote,
        &head,
        &h.body,
        crate::h3::H3Options { handshake_timeout: cfg.connect_timeout, zero_rtt: h.zero_rtt, max_mtu: h.quic_max_mtu },
    )
    .map_err(|e| e.to_string())?;
    profile.keepalive = h.keepalive;
    Ok(profile)
}

/// The protocol session.
#[derive(Debug)]
enum Protocol {
    Echo(EchoClient),
    Http(HttpClient),
    /// Boxed: its HPACK table and stream ring would make every connection's slot larger.
    H2(Box<H2Client>),
    Udp(UdpClient),
    /// Boxed: its session (frame reader, counters) would make every connection's slot larger.
    Ws(Box<WsClient>),
    /// WebSocket over HTTP/2 (`load ws --http2`).
    WsH2(Box<WsH2Client>),
    /// HTTP/3: its QUIC endpoint and connection, made when the socket is connected.
    H3(Option<Box<H3Client>>),
}

impl Protocol {
    fn outstanding(&self) -> usize {
        match self {
            Protocol::Echo(c) => c.outstanding(),
            Protocol::Http(c) => c.outstanding(),
            Protocol::H2(c) => c.outstanding(),
            Protocol::Udp(c) => c.outstanding(),
            Protocol::Ws(c) => c.outstanding(),
            Protocol::WsH2(c) => c.outstanding(),
            Protocol::H3(c) => c.as_ref().map_or(0, |c| c.outstanding()),
        }
    }

    fn oldest(&self) -> Option<Stamp> {
        match self {
            Protocol::Echo(c) => c.oldest(),
            Protocol::Http(c) => c.oldest(),
            Protocol::H2(c) => c.oldest(),
            Protocol::Udp(c) => c.oldest(),
            Protocol::Ws(c) => c.oldest(),
            Protocol::WsH2(c) => c.oldest(),
            Protocol::H3(c) => c.as_ref().and_then(|c| c.oldest()),
        }
    }

    /// The plaintext not yet handed on (to the socket, or to TLS).
    fn to_send<'p>(&'p self, profile: &'p Profile) -> &'p [u8] {
        match self {
            Protocol::Echo(c) if c.unsent > 0 => c.to_send(&profile.pattern),
            Protocol::Http(c) if c.unsent > 0 => c.to_send(&profile.requests),
            Protocol::H2(c) if c.unsent() > 0 => c.to_send(),
            Protocol::Ws(c) => c.to_send(),
            Protocol::WsH2(c) => c.to_send(),
            _ => &[],
        }
    }

    fn sent(&mut self, n: usize) {
        match self {
            Protocol::Echo(c) => c.sent(n),
            Protocol::Http(c) => c.sent(n),
            Protocol::H2(c) => c.sent(n),
            Protocol::Ws(c) => c.sent(n),
            Protocol::WsH2(c) => c.sent(n),
            Protocol::Udp(_) | Protocol::H3(_) => {}
        }
    }
}

/// The TLS stage: the session, and the records it has not handed to the socket yet.
struct Tls<S: ?Sized> {
    /// Records (a handshake flight, encrypted requests) not yet taken by the socket; empty and
    /// unallocated on an idle connection once they are sent.
    records: Vec<u8>,
    /// When the ClientHello was made, in ns of the run: a handshake not done a reply timeout
    /// later has failed.
    started_ns: u64,
    session: S,
}

/// Why a connection ends.
#[derive(Debug)]
pub enum Reason {
    /// Normally: the server closes after the responses in flight (HTTP `Connection: close`,
    /// an HTTP/2 connection out of streams), and they all came.
    Done,
    /// The server closed (FIN, or TLS close_notify) with exchanges in flight, or without saying
    /// it would.
    ClosedByPeer,
    /// The TLS session failed (`handshaking`: during its handshake).
    Tls {
        failure: Failure,
        handshaking: bool,
    },
    /// The server did not agree to HTTP/2 (ALPN h2).
    NoH2,
    /// Echoed bytes differ from those sent, or more came back.
    Mismatch,
    /// A response did not parse; `sample` is its start, escaped.
    BadResponse {
        sample: String,
    },
    /// A response that runs to the close did not end well at the close.
    BadResponseAtEof,
    /// HTTP/2: a connection error (GOAWAY sent): `code`, its name (an RFC 9113 error code's,
    /// `COMPRESSION_ERROR` for HPACK, `not_http2` for a peer that is no HTTP/2 server);
    /// `error`, what broke; `sample`, the start of the bytes.
    H2 {
        code: Cow<'static, str>,
        error: String,
        sample: String,
    },
    ConnectTimeout {
        waited: Duration,
    },
    HandshakeTimeout {
        waited: Duration,
    },
    ReplyTimeout,
    /// The run ended and its grace passed with the connection still connecting, greeting or
    /// waiting for answers: what is in flight is left unanswered.
    GraceOver,
    /// WebSocket: the upgrade refused or wrong, the server's frames, a close (see [`WsEnd`]).
    Ws(WsEnd),
    /// HTTP/3: the QUIC connection failed (its handshake, or later), or the server broke HTTP/3.
    Quic(H3Failure),
}

/// How a connection ends: why, the last bytes to send, and how the socket ends after them.
#[derive(Debug)]
pub struct Close {
    pub reason: Reason,
    /// A TLS fatal alert or close_notify: sent once, without waiting, before the end.
    pub last: Vec<u8>,
    pub ending: Ending,
}

impl Close {
    fn bare(reason: Reason) -> Close {
        Close { reason, last: Vec::new(), ending: Ending::Abort }
    }
}

/// A connect completed: how long it took, and the close if TLS could not begin.
#[derive(Debug)]
pub struct Connected {
    pub took: Duration,
    pub failed: Option<Close>,
}

/// One load connection's protocol, TLS and timers (see the module).
pub struct Connection {
    protocol: Protocol,
    /// The TLS session (https://, `echo --tls`); boxed, so a plaintext connection pays a
    /// pointer.
    tls: Option<Box<Tls<dyn Crypto + Send>>>,
    connected: bool,
    connect_started_ns: u64,
    /// The server will close after the responses in flight (HTTP `Connection: close`, an
    /// HTTP/2 connection with no stream left to open).
    closing: bool,
    /// An exchange completed and was accepted: the target served this connection.
    answered: bool,
    /// The run ended: when the grace for what is in flight ends, in ns of the run.
    grace_until_ns: Option<u64>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("protocol", &self.protocol)
            .field("tls", &self.tls.is_some())
            .field("connected", &self.connected)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connection number `index` of the run, its connect begun `now`.
    pub fn new(profile: &Profile, index: u64, now: Now) -> Self {
        let protocol = match profile.kind {
            Kind::Echo { msg_len } => Protocol::Echo(EchoClient::new(index, msg_len)),
            Kind::Http => Protocol::Http(HttpClient::default()),
            Kind::H2 => Protocol::H2(Box::new(H2Client::new(sockscale_h2::ClientSettings::default()))),
            Kind::Udp { msg_len } => Protocol::Udp(UdpClient::new(index, msg_len)),
            Kind::Ws => match profile.ws.as_ref().filter(|ws| ws.h2.is_some()) {
                Some(ws) => Protocol::WsH2(Box::new(WsH2Client::new(ws, index))),
                None => Protocol::Ws(Box::new(WsClient::new(profile.ws.as_ref(), index))),
            },
            Kind::H3 => Protocol::H3(None),
        };
        Connection {
            protocol,
            tls: None,
            connected: false,
            connect_started_ns: now.ns,
            closing: false,
            answered: false,
            grace_until_ns: None,
        }
    }

    /// The connect completed `now`: how long it took and, over TLS, the ClientHello made (the
    /// handshake is timed from it, apart from the connect before it and the requests after
    /// it), or the close if the session could not begin.
    pub fn on_connected(&mut self, profile: &Profile, now: Now) -> Connected {
        self.connected = true;
        let took = Duration::from_nanos(now.ns.saturating_sub(self.connect_started_ns));
        match &mut self.protocol {
            Protocol::Ws(c) => c.connected(now.ns),
            Protocol::WsH2(c) => c.connected(now.ns),
            _ => {}
        }
        let mut failed = None;
        if let Protocol::H3(slot) = &mut self.protocol {
            // The QUIC handshake begins: its Initial goes at the next transmit.
            match profile.h3.as_ref().map(|h3| H3Client::new(h3, now.at)) {
                Some(Ok(client)) => *slot = Some(Box::new(client)),
                Some(Err(failure)) => failed = Some(Close::bare(Reason::Quic(failure))),
                None => {
                    let words = "QUIC could not be set up".to_owned();
                    failed =
                        Some(Close::bare(Reason::Quic(H3Failure { kind: "local".into(), words, handshaking: true })));
                }
            }
            return Connected { took, failed };
        }
        if let (Some(tls), false) = (&profile.tls, self.is_udp()) {
            let mut records = Vec::new();
            match ClientSession::start(&tls.client, &tls.server_name, now.at, &mut records) {
                Ok(session) => {
                    let stage: Box<Tls<dyn Crypto + Send>> = Box::new(Tls { records, started_ns: now.ns, session });
                    self.tls = Some(stage);
                }
                Err(failure) => failed = Some(Close::bare(Reason::Tls { failure, handshaking: true })),
            }
        }
        Connected { took, failed }
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    pub fn is_udp(&self) -> bool {
        matches!(self.protocol, Protocol::Udp(_))
    }

    /// Its socket is a datagram socket: UDP echo, or QUIC.
    pub fn is_datagram(&self) -> bool {
        matches!(self.protocol, Protocol::Udp(_) | Protocol::H3(_))
    }

    /// QUIC: its datagrams are the endpoint's, polled by [`Connection::poll_datagrams`].
    pub fn is_quic(&self) -> bool {
        matches!(self.protocol, Protocol::H3(_))
    }

    fn handshaking(&self) -> bool {
        self.tls.as_deref().is_some_and(|t| t.session.is_handshaking())
    }

    /// Still being set up: connecting, in its TLS handshake, (HTTP/2) waiting for the
    /// server's SETTINGS, or (WebSocket) for the 101.
    pub fn greeting(&self) -> bool {
        !self.connected
            || self.handshaking()
            || matches!(&self.protocol, Protocol::H2(c) if !c.greeted())
            || matches!(&self.protocol, Protocol::Ws(c) if !c.upgraded())
            || matches!(&self.protocol, Protocol::WsH2(c) if !c.upgraded())
            || matches!(&self.protocol, Protocol::H3(c) if !c.as_ref().is_some_and(|c| c.established()))
    }

    /// An exchange completed and was accepted: the target served this connection.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Exchanges in flight.
    pub fn outstanding(&self) -> usize {
        self.protocol.outstanding()
    }

    /// Whether another exchange may begin now with at most `depth` in flight: connected, its
    /// handshake done (its time is not a request's), the server not closing, and over HTTP/2
    /// the server's stream limit and GOAWAY allowing.
    pub fn may_begin(&self, depth: usize) -> bool {
        self.connected
            && !self.closing
            && !self.handshaking()
            && match &self.protocol {
                Protocol::H2(c) => c.outstanding() < depth && c.can_begin(),
                Protocol::Ws(c) => c.outstanding() < depth && c.may_send(),
                // --pipeline is per WebSocket.
                Protocol::WsH2(c) => c.may_begin(depth),
                Protocol::H3(c) => c.as_ref().is_some_and(|c| c.may_begin(depth)),
                p => p.outstanding() < depth,
            }
    }

    /// Begin an exchange stamped `stamp`. A datagram is made in `datagram` and returned, to be
    /// sent now (or taken back with [`Connection::cancel_datagram`]); a stream's bytes wait
    /// for [`Connection::poll_transmit`].
    pub fn begin<'d>(
        &mut self,
        profile: &Profile,
        stamp: Stamp,
        datagram: &'d mut Vec<u8>,
        on: &mut impl FnMut(Event),
    ) -> Option<&'d [u8]> {
        match &mut self.protocol {
            Protocol::Echo(c) => c.begin(stamp),
            Protocol::Http(c) => c.begin(stamp, profile.request_len, profile.head_requests),
            Protocol::H2(c) => {
                if let Some(request) = &profile.h2_request {
                    c.begin(stamp, request);
                    on(Event::StreamOpened);
                }
            }
            Protocol::Udp(c) => return Some(c.next_datagram(&profile.pattern, stamp, datagram)),
            Protocol::Ws(c) => {
                if let Some(ws) = &profile.ws {
                    // The datagram buffer is scratch for a payload not sent as one slice.
                    c.begin(ws, &profile.pattern, stamp, datagram);
                }
            }
            Protocol::WsH2(c) => {
                if let Some(ws) = &profile.ws {
                    c.begin(ws, &profile.pattern, stamp, datagram);
                }
            }
            // Its bytes go on a stream, out at the next poll of its datagrams.
            Protocol::H3(c) => {
                if let Some(c) = c {
                    c.begin(stamp);
                }
                // `--no-keepalive`: this connection's one request; it closes once answered.
                self.closing |= profile.h3.as_ref().is_some_and(|h3| !h3.keepalive);
            }
        }
        None
    }

    /// Take back the last `n` datagrams made: the socket would not send them.
    pub fn cancel_datagrams(&mut self, n: usize) {
        if let Protocol::Udp(c) = &mut self.protocol {
            for _ in 0..n {
                c.cancel_last();
            }
        }
    }

    /// The bytes to send now (over TLS, what is unsent is encrypted first, unless records
    /// enough wait already). Empty: nothing to send.
    pub fn poll_transmit<'s>(
        &'s mut self,
        profile: &'s Profile,
        on: &mut impl FnMut(Event),
    ) -> Result<&'s [u8], Close> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Ok(self.protocol.to_send(profile));
        };
        let unsent = self.protocol.to_send(profile);
        let plaintext = unsent.len();
        if plaintext > 0 && tls.records.len() < MAX_RECORDS_AHEAD && !tls.session.is_handshaking() {
            if let Err(failure) = tls.session.send(unsent, &mut tls.records) {
                return Err(Close::bare(Reason::Tls { failure, handshaking: false }));
            }
            on(Event::Sent { plaintext, wire: 0 });
            self.protocol.sent(plaintext);
        }
        Ok(&tls.records)
    }

    /// The socket took `n` bytes of what [`Connection::poll_transmit`] gave.
    pub fn sent(&mut self, n: usize, on: &mut impl FnMut(Event)) {
        match self.tls.as_deref_mut() {
            None => {
                on(Event::Sent { plaintext: n, wire: 0 });
                self.protocol.sent(n);
            }
            Some(tls) => {
                on(Event::Sent { plaintext: 0, wire: n });
                tls.records.drain(..n);
                if tls.records.is_empty() {
                    // An idle connection keeps no buffer.
                    tls.records = Vec::new();
                }
            }
        }
    }

    /// Bytes received `now` (`data` is the receive buffer: TLS decrypts in place, into
    /// `scratch`). Ok(true): the peer's close_notify came, the end of its stream.
    pub fn receive(
        &mut self,
        profile: &Profile,
        now: Now,
        data: &mut [u8],
        scratch: &mut Vec<u8>,
        on: &mut impl FnMut(Event),
    ) -> Result<bool, Close> {
        if self.is_udp() {
            self.receive_datagram(profile, now, 0, data, on);
            return Ok(false);
        }
        let mut peer_closed = false;
        let plain: &[u8] = match self.tls.as_deref_mut() {
            None => {
                on(Event::Received { plaintext: data.len(), wire: 0 });
                data
            }
            Some(tls) => {
                scratch.clear();
                // Records received count on the wire whatever they turn out to be.
                on(Event::Received { plaintext: 0, wire: data.len() });
                let handshaking = tls.session.is_handshaking();
                let quiet = tls.records.is_empty();
                match tls.session.receive(data, now.at, scratch, &mut tls.records) {
                    Ok(received) => {
                        if let Some(took) = received.handshake_done {
                            let negotiated = tls.session.negotiated();
                            let h2 = negotiated.as_ref().and_then(|n| n.alpn.as_deref()) == Some(b"h2");
                            on(Event::HandshakeDone { took, negotiated });
                            if matches!(self.protocol, Protocol::H2(_) | Protocol::WsH2(_)) && !h2 {
                                // A server that chose http/1.1 (or nothing) does not speak
                                // HTTP/2 (the probe says so before the run).
                                return Err(Close::bare(Reason::NoH2));
                            }
                        }
                        peer_closed = received.closed;
                    }
                    Err(failure) => {
                        // The fatal alert that tells the server why, unless records are queued
                        // ahead of it (then the server would not read it in time anyway).
                        let last = if quiet { std::mem::take(&mut tls.records) } else { Vec::new() };
                        let ending = if last.is_empty() { Ending::Abort } else { Ending::Orderly };
                        return Err(Close { reason: Reason::Tls { failure, handshaking }, last, ending });
                    }
                }
                on(Event::Received { plaintext: scratch.len(), wire: 0 });
                scratch
            }
        };
        if let Protocol::Ws(_) | Protocol::WsH2(_) = self.protocol {
            self.take_ws(profile, now, plain, on)?;
        } else {
            self.take(profile, plain, on)?;
        }
        Ok(peer_closed)
    }

    /// UDP: one datagram received (a datagram socket has no TLS and no end of stream; a
    /// datagram that is no answer is counted and the socket lives on).
    /// A datagram arrived, with the ECN bits of its IP header (0: none, or not reported), which
    /// QUIC reports back in its ACKs.
    pub fn receive_datagram(
        &mut self,
        profile: &Profile,
        now: Now,
        ecn: u8,
        datagram: &[u8],
        on: &mut impl FnMut(Event),
    ) {
        if let Protocol::H3(c) = &mut self.protocol {
            // Acted on once the read is over: `after_datagrams`.
            if let Some(c) = c {
                c.handle_ecn(now.at, ecn, datagram);
            }
            return;
        }
        on(Event::Received { plaintext: datagram.len(), wire: 0 });
        if let Protocol::Udp(c) = &mut self.protocol {
            match c.on_datagram(&profile.pattern, datagram) {
                Ok(Reply::Answer(stamp)) => {
                    self.answered = true;
                    on(Event::Datagram { stamp });
                }
                Ok(Reply::Late) => on(Event::LateDatagram),
                Err(_) => on(Event::BadDatagram),
            }
        }
    }

    /// Hand received plaintext to the protocol.
    fn take(&mut self, profile: &Profile, data: &[u8], on: &mut impl FnMut(Event)) -> Result<(), Close> {
        let answered = &mut self.answered;
        let accept = &profile.accept_status;
        let response = |answered: &mut bool, on: &mut dyn FnMut(Event), stamp: Stamp, status: u16| {
            let accepted = accept.accepts(status);
            *answered |= accepted;
            on(Event::Response { stamp, status, accepted });
        };
        match &mut self.protocol {
            Protocol::Echo(c) => {
                let outcome = c.on_data(&profile.pattern, data, |stamp| {
                    *answered = true;
                    on(Event::Echoed { stamp });
                });
                outcome.map_err(|_| Close::bare(Reason::Mismatch))
            }
            Protocol::Http(c) => {
                let closing = &mut self.closing;
                let outcome = c.on_data(data, |stamp, r| {
                    response(answered, on, stamp, r.status);
                    *closing |= r.close;
                });
                outcome.map_err(|failure| match failure {
                    Mismatch::BadResponse(_) => {
                        Close::bare(Reason::BadResponse { sample: crate::report::sample(data) })
                    }
                    Mismatch::Mismatch | Mismatch::Surplus => Close::bare(Reason::Mismatch),
                })
            }
            Protocol::H2(c) => {
                let greeted = c.greeted();
                let mut goaway = None;
                let outcome = c.on_data(
                    data,
                    |stamp, end| match end {
                        StreamEnd::Response(Response { status, .. }) => response(answered, on, stamp, status),
                        StreamEnd::Reset(code) => on(Event::StreamReset { code: sockscale_h2::error_code_name(code) }),
                        StreamEnd::Refused => on(Event::StreamRefused),
                        StreamEnd::Malformed => on(Event::StreamMalformed),
                    },
                    |code| goaway = Some(code),
                );
                // GOAWAY is reported after the streams it ended (its count does not depend on
                // the order).
                if let Some(code) = goaway {
                    on(Event::GoAway { code: sockscale_h2::error_code_name(code) });
                }
                if !greeted && c.greeted() {
                    on(Event::Greeted { max_streams: c.server_max_streams() });
                }
                self.closing |= c.exhausted();
                outcome.map_err(|error| {
                    let (code, error) = (h2_error_code(&error), error.to_string());
                    Close::bare(Reason::H2 { code, error, sample: crate::report::sample(data) })
                })
            }
            // Datagrams go to `receive_datagram`, one at a time, with no TLS.
            Protocol::Udp(_) | Protocol::H3(_) => Ok(()),
            // Read by `take_ws`, which needs the time.
            Protocol::Ws(_) | Protocol::WsH2(_) => Ok(()),
        }
    }

    /// WebSocket plaintext received `now`: the 101, then frames.
    fn take_ws(&mut self, profile: &Profile, now: Now, data: &[u8], on: &mut impl FnMut(Event)) -> Result<(), Close> {
        if let (Protocol::WsH2(c), Some(ws)) = (&mut self.protocol, &profile.ws) {
            let outcome = c.receive(ws, &profile.pattern, now, data, on);
            self.answered |= c.any_upgraded();
            if outcome.is_ok() && self.grace_until_ns.is_some() {
                c.initiate_close();
            }
            return outcome.map_err(|end| match end {
                WsH2End::Ws(end) => self.ws_close(end),
                WsH2End::H2(error) => {
                    let (code, error) = (h2_error_code(&error), error.to_string());
                    self.close_with_unsent(Reason::H2 { code, error, sample: crate::report::sample(data) })
                }
            });
        }
        let (Protocol::Ws(c), Some(ws)) = (&mut self.protocol, &profile.ws) else { return Ok(()) };
        let outcome = c.receive(ws, &profile.pattern, now, data, on);
        self.answered |= c.upgraded();
        if outcome.is_ok() && self.grace_until_ns.is_some() {
            // Upgraded after the run ended: it closes in order too, within the same grace.
            c.initiate_close();
        }
        outcome.map_err(|end| self.ws_close(end))
    }

    /// A WebSocket connection ends: what its session still has to send (a close frame, the
    /// answer to the server's) goes last, then, over TLS, close_notify.
    fn ws_close(&mut self, end: WsEnd) -> Close {
        self.close_with_unsent(Reason::Ws(end))
    }

    /// A close whose last bytes are what the protocol still has to send (a WebSocket's close,
    /// END_STREAM, a GOAWAY), then, over TLS, close_notify.
    fn close_with_unsent(&mut self, reason: Reason) -> Close {
        let unsent = match &mut self.protocol {
            Protocol::Ws(c) => c.take_unsent(),
            Protocol::WsH2(c) => c.take_unsent(),
            _ => Vec::new(),
        };
        let last = match self.tls.as_deref_mut() {
            None => unsent,
            Some(tls) => {
                let mut last = std::mem::take(&mut tls.records);
                if !unsent.is_empty() && !tls.session.is_handshaking() {
                    // A session that cannot encrypt is ending anyway: its close_notify follows.
                    let _ = tls.session.send(&unsent, &mut last);
                }
                tls.session.close(&mut last);
                last
            }
        };
        let ending = if last.is_empty() { Ending::Abort } else { Ending::Orderly };
        Close { reason, last, ending }
    }

    /// WebSocket: the connection's counters (once upgraded; over HTTP/2, its first WebSocket's).
    pub fn ws_stats(&self) -> Option<&sockscale_ws::Stats> {
        self.ws_stats_each().next()
    }

    /// WebSocket: each WebSocket's counters (one, or over HTTP/2 one a stream), once upgraded.
    pub fn ws_stats_each(&self) -> Box<dyn Iterator<Item = &sockscale_ws::Stats> + '_> {
        match &self.protocol {
            Protocol::Ws(c) => Box::new(c.stats().into_iter()),
            Protocol::WsH2(c) => Box::new(c.stats()),
            _ => Box::new(std::iter::empty()),
        }
    }

    /// WebSocket: this client's close was sent at the end of the run and the server's is
    /// awaited.
    pub fn ws_awaiting_close(&self) -> bool {
        match &self.protocol {
            Protocol::Ws(c) => c.awaiting_close(),
            Protocol::WsH2(c) => c.awaiting_close(),
            _ => false,
        }
    }

    /// WebSocket: upgraded and not closing: at the end of a run it has a close handshake to make.
    pub fn ws_open(&self) -> bool {
        match &self.protocol {
            Protocol::Ws(c) => c.upgraded() && !c.awaiting_close(),
            Protocol::WsH2(c) => c.open_unclosed(),
            _ => false,
        }
    }

    /// After what was received: the close the connection is ready for (every response came
    /// and the server said it closes), if any.
    pub fn poll_close(&mut self) -> Option<Close> {
        (self.closing && self.protocol.outstanding() == 0).then(|| self.close_in_order(Reason::Done))
    }

    /// The server ended its stream (a FIN, or the TLS close_notify before it): a
    /// response running to the close completes; how the connection ends.
    pub fn receive_eof(&mut self, profile: &Profile, on: &mut impl FnMut(Event)) -> Close {
        if let Protocol::Http(c) = &mut self.protocol {
            let (closing, answered) = (&mut self.closing, &mut self.answered);
            let finished = c.on_eof(|stamp, r| {
                let accepted = profile.accept_status.accepts(r.status);
                *answered |= accepted;
                on(Event::Response { stamp, status: r.status, accepted });
                *closing |= r.close;
            });
            if finished.is_err() {
                return Close::bare(Reason::BadResponseAtEof);
            }
        }
        if self.closing && self.protocol.outstanding() == 0 {
            return self.close_in_order(Reason::Done);
        }
        Close::bare(Reason::ClosedByPeer)
    }

    /// A clean close: over TLS, close_notify first, then a FIN that no reset can overtake.
    /// Without last bytes the socket is simply closed: every answer was read, so the kernel
    /// sends a FIN anyway, without the two more system calls of an orderly ending (a run
    /// without keep-alive closes once a request).
    fn close_in_order(&mut self, reason: Reason) -> Close {
        let mut last = Vec::new();
        if let Some(tls) = self.tls.as_deref_mut() {
            tls.session.close(&mut last);
        }
        let ending = if last.is_empty() { Ending::Abort } else { Ending::Orderly };
        Close { reason, last, ending }
    }

    /// The run ended `now`: no exchange begins (the event loop's pacing says so), and what is in
    /// flight, connects and handshakes included, has `grace` to finish.
    /// A WebSocket sends its close (1000) now and awaits the server's within the grace.
    pub fn begin_grace(&mut self, now: Now, grace: Duration) {
        self.grace_until_ns = Some(now.ns + grace.as_nanos() as u64);
        match &mut self.protocol {
            Protocol::Ws(c) => {
                c.initiate_close();
            }
            Protocol::WsH2(c) => {
                c.initiate_close();
            }
            _ => {}
        }
    }

    /// Move the end of the run's grace out to `until_ns` (never in): the WebSocket close
    /// handshakes of a whole run are a burst, answered at the server's pace rather than within
    /// one exchange's time (see `EventLoop::drain`).
    pub fn extend_grace(&mut self, until_ns: u64) {
        if let Some(until) = &mut self.grace_until_ns {
            *until = (*until).max(until_ns);
        }
    }

    /// Connecting, greeting, waiting for answers, or (WebSocket) for the close's.
    pub fn busy(&self) -> bool {
        self.greeting() || self.protocol.outstanding() > 0 || self.ws_awaiting_close()
    }

    /// When the connection must be woken: its connect timeout, its handshake's, its oldest
    /// exchange's reply timeout, the end of the run's grace.
    pub fn poll_timeout(&self, profile: &Profile) -> Option<Instant> {
        let reply = profile.reply_timeout.as_nanos() as u64;
        let mut due = self.grace_until_ns.filter(|_| self.busy());
        let mut consider = |ns: u64| due = Some(due.map_or(ns, |d| d.min(ns)));
        if !self.connected {
            consider(self.connect_started_ns + profile.connect_timeout.as_nanos() as u64);
        } else {
            if let Some(tls) = self.tls.as_deref().filter(|t| t.session.is_handshaking()) {
                consider(tls.started_ns + reply);
            }
            if let Some(stamp) = self.protocol.oldest() {
                consider(stamp.sent_ns + reply);
            }
            let ws_deadline = match &self.protocol {
                Protocol::Ws(c) => c.deadline(profile.reply_timeout),
                Protocol::WsH2(c) => c.deadline(profile.reply_timeout),
                _ => None,
            };
            if let Some(ns) = ws_deadline {
                consider(ns);
            }
            if let Some(ns) = self.h3_poll_timeout(profile) {
                consider(ns);
            }
        }
        due.map(|ns| profile.at(ns))
    }

    /// A deadline of [`Connection::poll_timeout`] may have passed: `now`.
    pub fn on_timeout(&mut self, profile: &Profile, now: Now, on: &mut impl FnMut(Event)) -> Result<(), Close> {
        let reply = profile.reply_timeout.as_nanos() as u64;
        // The run's grace is looked at last: a deadline of its own that falls at the same
        // instant is what ends the connection.
        let grace_over = self.grace_until_ns.is_some_and(|until| now.ns >= until) && self.busy();
        if !self.connected {
            if now.ns >= self.connect_started_ns + profile.connect_timeout.as_nanos() as u64 {
                return Err(Close::bare(Reason::ConnectTimeout { waited: profile.connect_timeout }));
            }
            if grace_over {
                return Err(Close::bare(Reason::GraceOver));
            }
            return Ok(());
        }
        if self.is_quic() {
            self.h3_on_timeout(profile, now)?;
        }
        if let Some(tls) = self.tls.as_deref().filter(|t| t.session.is_handshaking() && now.ns >= t.started_ns + reply)
        {
            let waited = Duration::from_nanos(now.ns - tls.started_ns);
            return Err(Close::bare(Reason::HandshakeTimeout { waited }));
        }
        if let Protocol::Udp(udp) = &mut self.protocol {
            let lost = udp.expire(now.ns.saturating_sub(reply));
            if lost > 0 {
                on(Event::Lost(lost));
            }
        } else if self.protocol.oldest().is_some_and(|stamp| now.ns >= stamp.sent_ns + reply) {
            return Err(Close::bare(Reason::ReplyTimeout));
        }
        let timed_out = match (&mut self.protocol, &profile.ws) {
            (Protocol::Ws(c), Some(ws)) => c.on_timeout(ws, profile.reply_timeout, now),
            (Protocol::WsH2(c), Some(ws)) => c.on_timeout(ws, profile.reply_timeout, now),
            _ => Ok(()),
        };
        if let Err(end) = timed_out {
            return Err(self.ws_close(end));
        }
        if grace_over {
            return Err(Close::bare(Reason::GraceOver));
        }
        Ok(())
    }

    /// The exchanges in flight by how far they got: (nothing of the answer back, the answer
    /// begun, not all sent). Only the oldest can be begun; only the newest can be unsent.
    pub fn in_flight_kinds(&self, profile: &Profile) -> (u64, u64, u64) {
        let n = self.protocol.outstanding();
        let (unsent, begun) = match &self.protocol {
            Protocol::Echo(c) => (c.unsent_messages(), c.answering()),
            Protocol::Http(c) => (c.unsent_requests(profile.request_len), c.answering()),
            Protocol::H2(_) | Protocol::Udp(_) | Protocol::Ws(_) | Protocol::WsH2(_) | Protocol::H3(_) => (0, false),
        };
        let unsent = unsent.min(n);
        let partial = usize::from(begun && n > unsent);
        ((n - unsent - partial) as u64, partial as u64, unsent as u64)
    }
}

/// The name an HTTP/2 connection error is counted under.
fn h2_error_code(error: &sockscale_h2::ClientError) -> Cow<'static, str> {
    match error {
        sockscale_h2::ClientError::NotHttp2 => "not_http2".into(),
        sockscale_h2::ClientError::Protocol(violation) => sockscale_h2::error_code_name(violation.code() as u32),
        sockscale_h2::ClientError::Compression(_) => "COMPRESSION_ERROR".into(),
    }
}

#[path = "connection_h3.rs"]
mod h3_link;

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "connection_ws_tests.rs"]
mod ws_tests;
