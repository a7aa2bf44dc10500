//! The driver of quinn-proto's `Endpoint` and its `Connection`s, as one datagram
//! [`Endpoint`](crate::udp::Endpoint).
//!
//! The order of calls is quinn's own (quinn 0.11 `endpoint.rs`, `connection.rs`): a datagram
//! goes to the endpoint, which names its connection (or a new `Incoming`, or a response to send
//! at once); the connection is then *driven*: its endpoint events go back through the
//! endpoint (whose answer, new connection IDs, goes back to it), its application events go to
//! its [`App`], and its datagrams are polled until it has none, after which its next timeout
//! is armed. A connection whose endpoint event says it is drained is dropped in that same step:
//! quinn-proto reuses its handle at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::{ConnectError, Connection, ConnectionHandle, DatagramEvent, Event, Incoming};

use super::config::{QuicSetup, RetryMode};
use super::totals::{Full, HandshakeFailure, QuicTotals};
use crate::udp::{Endpoint, Transmit, MAX_TRANSMIT};

/// The application on QUIC connections (HTTP/3), one state per connection (`App`), with what
/// the endpoint's connections share (this value: the rendered responses, the counts). It is
/// handed each connection's application events and reads and writes the streams through the
/// `Connection` itself.
pub trait Apps: Send {
    type App: Send;

    /// A connection was accepted (or opened, on a client): its state. The application may open
    /// its own streams now (HTTP/3's control stream goes out in the server's first flight, as
    /// 0.5-RTT data).
    fn start(&mut self, conn: &mut Connection, now: Instant) -> Self::App;

    /// One of the connection's application events (streams opened, readable, writable…).
    fn event(&mut self, app: &mut Self::App, conn: &mut Connection, event: Event, now: Instant);

    /// The server began to drain: take no new requests, finish those in flight, then close
    /// (HTTP/3: GOAWAY, then CONNECTION_CLOSE with H3_NO_ERROR).
    fn begin_drain(&mut self, app: &mut Self::App, conn: &mut Connection, now: Instant);
}

/// What the endpoint admits, from the server's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Connections at once on this endpoint (one socket); a new one beyond is refused
    /// (CONNECTION_REFUSED), as `--max-conns` refuses a TCP accept.
    pub max_connections: usize,
    /// Handshakes in progress at once; beyond it a new connection's Initial is dropped (the
    /// client sends it again), after a Retry if Retry is on or automatic and its address is
    /// not yet validated.
    pub max_handshakes: usize,
    pub retry: RetryMode,
    /// A handshake not complete this long after its first datagram was accepted is closed
    /// (counted as a handshake timeout), however steadily its packets trickle in.
    pub handshake_timeout: std::time::Duration,
}

struct Conn<A> {
    conn: Connection,
    app: A,
    /// In the ready queue.
    queued: bool,
    /// Still handshaking, as last counted.
    handshaking: bool,
    /// Closed for taking longer than the handshake timeout.
    timed_out: bool,
    /// Its loss was reported (by the peer, a timeout, an error): else we closed it.
    lost: bool,
    /// When the connection wants its timeout handled.
    wants: Option<Instant>,
    /// The earliest instant this connection has in the timer heap (entries later than it are
    /// stale: they are skipped when they come up).
    armed: Option<Instant>,
    accepted_at: Instant,
}

/// QUIC over one UDP socket: quinn-proto's endpoint, its connections each with an [`App`], one
/// timer heap, the admission policy and the counts.
pub struct QuicEndpoint<F: Apps> {
    endpoint: quinn_proto::Endpoint,
    /// A client's configuration, for [`QuicEndpoint::connect`].
    client: Option<quinn_proto::ClientConfig>,
    admission: Admission,
    apps: F,
    conns: Vec<Option<Conn<F::App>>>,
    open: usize,
    /// Connections to drive and poll for datagrams, in turn.
    ready: VecDeque<usize>,
    /// (instant, connection handle), earliest first.
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Datagrams the endpoint itself answers with (version negotiation, stateless reset, a
    /// refusal or Retry), sent before any connection's.
    responses: VecDeque<(SocketAddr, Vec<u8>)>,
    scratch: Vec<u8>,
    draining: bool,
    totals: Arc<QuicTotals>,
    dropped: u64,
}

/// Endpoint responses held at most before more are dropped (counted): a flood of Initials
/// is answered no faster than the socket takes them.
const MAX_RESPONSES: usize = 1024;

impl<F: Apps> QuicEndpoint<F> {
    pub fn new(setup: Arc<QuicSetup>, admission: Admission, apps: F) -> Self {
        let mtud = setup.tuning.allow_mtud;
        Self::on_socket(setup, admission, apps, mtud, None)
    }

    /// As [`QuicEndpoint::new`], on a socket that may (`mtud`) or may not take path MTU
    /// discovery's probes (it must never fragment). Endpoints of one setup share its keys (the
    /// stateless-reset key, the Retry and NEW_TOKEN key), so any of a server's sockets can
    /// answer for another's connection.
    /// `steering`: the socket's index in its port's SO_REUSEPORT group, which steers by
    /// connection ID (`QuicSetup::endpoint_for_socket`).
    pub fn on_socket(setup: Arc<QuicSetup>, admission: Admission, apps: F, mtud: bool, steering: Option<u8>) -> Self {
        let allow_mtud = mtud && setup.tuning.allow_mtud;
        let config = setup.endpoint_for_socket(steering);
        let endpoint = quinn_proto::Endpoint::new(config, setup.server.clone(), allow_mtud, None);
        let totals = setup.totals.clone();
        QuicEndpoint {
            endpoint,
            client: setup.client.clone(),
            admission,
            apps,
            conns: Vec::new(),
            open: 0,
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            responses: VecDeque::new(),
            scratch: Vec::new(),
            draining: false,
            totals,
            dropped: 0,
        }
    }

    /// Open a connection to `remote` (a client's endpoint: its setup has a client
    /// configuration); its datagrams go out at the next [`Endpoint::poll_transmit`]. Returns its
    /// handle.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr, server_name: &str) -> Result<usize, ConnectError> {
        let Some(config) = self.client.clone() else { return Err(ConnectError::NoDefaultClientConfig) };
        let (ch, mut conn) = self.endpoint.connect(now, config, remote, server_name)?;
        self.totals.opened();
        let app = self.apps.start(&mut conn, now);
        self.insert(ch.0, conn, app, now);
        Ok(ch.0)
    }

    fn insert(&mut self, ch: usize, conn: Connection, app: F::App, now: Instant) {
        if self.conns.len() <= ch {
            self.conns.resize_with(ch + 1, || None);
        }
        self.conns[ch] = Some(Conn {
            conn,
            app,
            queued: false,
            handshaking: true,
            timed_out: false,
            lost: false,
            wants: None,
            armed: None,
            accepted_at: now,
        });
        // Counted in the totals already: a client's by `connect`, a server's by `try_open`.
        self.open += 1;
        self.queue(ch);
    }

    /// The connection with handle `ch` and its application state, to act on it from outside
    /// an event (a client starting a request); call [`QuicEndpoint::touch`] after.
    pub fn connection_mut(&mut self, ch: usize) -> Option<(&mut Connection, &mut F::App, &mut F)> {
        let apps = &mut self.apps;
        self.conns.get_mut(ch)?.as_mut().map(|c| (&mut c.conn, &mut c.app, apps))
    }

    /// The connection with handle `ch`, its application state and the shared context, to
    /// read.
    pub fn connection(&self, ch: usize) -> Option<(&Connection, &F::App, &F)> {
        self.conns.get(ch)?.as_ref().map(|c| (&c.conn, &c.app, &self.apps))
    }

    /// The connection `ch` was acted on from outside an event: drive it and poll its datagrams
    /// at the next [`Endpoint::poll_transmit`].
    pub fn touch(&mut self, ch: usize) {
        self.queue(ch);
    }

    /// Drive the connections with something to do (datagrams handled, a timeout, a touch):
    /// their events go through the endpoint and to their apps, without their datagrams being
    /// polled yet. A client acts on what arrived (responses completed, the handshake done) and
    /// starts what follows (new requests) before [`Endpoint::poll_transmit`] builds the
    /// packets, so that one flight carries the acknowledgements and the new requests.
    pub fn drive_ready(&mut self, now: Instant) {
        for i in 0..self.ready.len() {
            let ch = self.ready[i];
            // A drained connection is gone from `conns`; poll_transmit drops its entry.
            self.drive(ch, now);
        }
    }

    /// What the endpoint's connections share.
    pub fn apps(&mut self) -> &mut F {
        &mut self.apps
    }

    /// The earliest timer of its connections, leaving out work queued to drive now (which
    /// [`Endpoint::poll_timeout`] asks for at once): a client whose socket is full waits for it
    /// to drain, or for this, rather than spinning.
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    /// What the endpoint's connections share, to read.
    pub fn shared(&self) -> &F {
        &self.apps
    }

    /// Connections open on this endpoint (handshaking or established, not yet drained).
    pub fn open_connections(&self) -> usize {
        self.open
    }

    fn respond(&mut self, destination: SocketAddr, size: usize) {
        if self.responses.len() >= MAX_RESPONSES {
            self.dropped += 1;
        } else {
            self.responses.push_back((destination, self.scratch[..size].to_vec()));
        }
    }

    fn queue(&mut self, ch: usize) {
        if let Some(Some(c)) = self.conns.get_mut(ch) {
            if !c.queued {
                c.queued = true;
                self.ready.push_back(ch);
            }
        }
    }

    /// Admit, retry, refuse or ignore a new connection's first datagram.
    fn incoming(&mut self, incoming: Incoming, now: Instant) {
        self.scratch.clear();
        if self.draining {
            self.totals.refused_draining();
            return self.refuse(incoming);
        }
        // The limits are the server's, over all its sockets: the totals' gauges. Full already:
        // refused before any Retry is spent on it (the place itself is taken in `accept`).
        if self.totals.open() >= self.admission.max_connections {
            self.totals.refused_busy();
            return self.refuse(incoming);
        }
        let retry = match self.admission.retry {
            RetryMode::Off => false,
            RetryMode::On => true,
            // Under load: half the handshake budget in use.
            RetryMode::Auto => self.totals.handshaking() * 2 >= self.admission.max_handshakes,
        };
        if retry && !incoming.remote_address_validated() && incoming.may_retry() {
            match self.endpoint.retry(incoming, &mut self.scratch) {
                Ok(t) => {
                    self.totals.retry_sent();
                    return self.respond(t.destination, t.size);
                }
                // Cannot happen after `may_retry`; accept rather than lose it.
                Err(e) => return self.accept(e.into_incoming(), now),
            }
        }
        self.accept(incoming, now)
    }

    /// Answer `incoming` with CONNECTION_CLOSE (CONNECTION_REFUSED), keeping nothing.
    fn refuse(&mut self, incoming: Incoming) {
        self.scratch.clear();
        let t = self.endpoint.refuse(incoming, &mut self.scratch);
        self.respond(t.destination, t.size);
    }

    /// Accept `incoming` if a place is free under both limits (taken at once, over every
    /// socket), else defer or refuse it.
    fn accept(&mut self, incoming: Incoming, now: Instant) {
        match self.totals.try_open(self.admission.max_connections, self.admission.max_handshakes) {
            Ok(()) => {}
            Err(Full::Handshakes) => {
                // As a full SYN queue drops a SYN: the client sends its Initial again after its
                // probe timeout, and is admitted once handshakes have finished.
                self.totals.handshake_deferred();
                return self.endpoint.ignore(incoming);
            }
            Err(Full::Connections) => {
                self.totals.refused_busy();
                return self.refuse(incoming);
            }
        }
        self.scratch.clear();
        match self.endpoint.accept(incoming, now, &mut self.scratch, None) {
            Ok((ch, mut conn)) => {
                let app = self.apps.start(&mut conn, now);
                self.insert(ch.0, conn, app, now);
            }
            Err(e) => {
                self.totals.unopened();
                self.totals.handshake_failed(HandshakeFailure::from_connection_error(&e.cause));
                if let Some(t) = e.response {
                    self.respond(t.destination, t.size);
                }
            }
        }
    }

    /// Pass a connection's endpoint events through the endpoint and its application events to
    /// its app, until neither has more. Returns false if the connection was drained (and is
    /// gone).
    fn drive(&mut self, ch: usize, now: Instant) -> bool {
        let Some(Some(c)) = self.conns.get_mut(ch) else { return false };
        let mut drained = false;
        loop {
            let mut moved = false;
            // Application events first: a connection that is drained now (an idle timeout)
            // still reports its loss to its app before it goes.
            while let Some(ev) = c.conn.poll() {
                moved = true;
                match &ev {
                    Event::Connected if c.handshaking => {
                        c.handshaking = false;
                        self.totals.handshake_ended();
                        self.totals.handshake_done(now.saturating_duration_since(c.accepted_at), &c.conn);
                    }
                    Event::ConnectionLost { reason } => {
                        c.lost = true;
                        if c.handshaking {
                            c.handshaking = false;
                            self.totals.handshake_ended();
                            let why = if c.timed_out {
                                HandshakeFailure::TimedOut
                            } else {
                                HandshakeFailure::from_connection_error(reason)
                            };
                            self.totals.handshake_failed(why);
                        } else if !c.timed_out {
                            self.totals.connection_lost(reason);
                        }
                    }
                    _ => {}
                }
                self.apps.event(&mut c.app, &mut c.conn, ev, now);
            }
            while let Some(ev) = c.conn.poll_endpoint_events() {
                moved = true;
                drained |= ev.is_drained();
                if let Some(answer) = self.endpoint.handle_event(ConnectionHandle(ch), ev) {
                    c.conn.handle_event(answer);
                }
            }
            if drained || !moved {
                break;
            }
        }
        if drained {
            if let Some(c) = self.conns[ch].take() {
                // quinn-proto reports no loss for a close of our own: counted here.
                if c.handshaking {
                    self.totals.handshake_ended();
                    let why = if c.timed_out { HandshakeFailure::TimedOut } else { HandshakeFailure::Local };
                    self.totals.handshake_failed(why);
                } else if !c.lost {
                    self.totals.closed_locally();
                }
                self.totals.connection_ended(&c.conn.stats());
            }
            self.open -= 1;
            self.totals.closed();
            return false;
        }
        true
    }

    /// Arm the connection's next timeout in the heap (lazily: a later instant replaces an
    /// earlier one only when that one comes up).
    fn arm(&mut self, ch: usize) {
        let handshake_timeout = self.admission.handshake_timeout;
        let Some(Some(c)) = self.conns.get_mut(ch) else { return };
        c.wants = c.conn.poll_timeout();
        if c.handshaking && !c.timed_out {
            // A handshake kept alive by a trickle of packets still ends at its deadline.
            let deadline = c.accepted_at + handshake_timeout;
            c.wants = Some(c.wants.map_or(deadline, |w| w.min(deadline)));
        }
        if let Some(at) = c.wants {
            if c.armed.is_none_or(|armed| at < armed) {
                c.armed = Some(at);
                self.timers.push(Reverse((at, ch)));
            }
        }
    }
}

impl<F: Apps> Endpoint for QuicEndpoint<F> {
    fn handle(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]) {
        self.handle_ecn(now, peer, 0, datagram);
    }

    fn uses_ecn(&self) -> bool {
        true
    }

    fn handle_ecn(&mut self, now: Instant, peer: SocketAddr, ecn: u8, datagram: &[u8]) {
        self.scratch.clear();
        // quinn-proto decrypts in place: it owns the datagram's bytes.
        let data = BytesMut::from(datagram);
        // Its ACKs report the ECN counts it saw, and a CE mark is a congestion signal to the
        // sender (RFC 9002 §7.1) without a loss.
        let ecn = quinn_proto::EcnCodepoint::from_bits(ecn);
        match self.endpoint.handle(now, peer, None, ecn, data, &mut self.scratch) {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(Some(c)) = self.conns.get_mut(ch.0) {
                    c.conn.handle_event(event);
                    self.queue(ch.0);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.incoming(incoming, now),
            Some(DatagramEvent::Response(t)) => {
                self.totals.endpoint_response();
                self.respond(t.destination, t.size);
            }
            None => self.totals.datagram_ignored(),
        }
    }

    fn poll_transmit(&mut self, now: Instant, max_segments: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((destination, bytes)) = self.responses.pop_front() {
            buf.extend_from_slice(&bytes);
            return Some(Transmit { destination, size: bytes.len(), segment_size: None, ecn: 0 });
        }
        while let Some(&ch) = self.ready.front() {
            if !self.drive(ch, now) {
                self.ready.pop_front();
                continue;
            }
            let Some(Some(c)) = self.conns.get_mut(ch) else {
                self.ready.pop_front();
                continue;
            };
            self.scratch.clear();
            // GSO: segments of the path's MTU, at most one UDP message's worth.
            let mtu = usize::from(c.conn.current_mtu()).max(1);
            let max = max_segments.min(MAX_TRANSMIT / mtu).max(1);
            match c.conn.poll_transmit(now, max, &mut self.scratch) {
                Some(t) => {
                    buf.extend_from_slice(&self.scratch[..t.size]);
                    // Take turns: the next connection's datagrams go next.
                    self.ready.pop_front();
                    self.ready.push_back(ch);
                    let segment_size = t.segment_size.filter(|&s| s > 0 && t.size > s);
                    // ECN as quinn-proto asks (ECT(0) while the path's validation holds, RFC 9000 §13.4.2).
                    let ecn = t.ecn.map_or(0, |e| e as u8);
                    return Some(Transmit { destination: t.destination, size: t.size, segment_size, ecn });
                }
                None => {
                    self.ready.pop_front();
                    c.queued = false;
                    self.arm(ch);
                }
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if !self.ready.is_empty() || !self.responses.is_empty() {
            // Work queued outside a flush (cannot happen through the socket layer, which
            // flushes after every call): ask to be served at once.
            return Some(Instant::now());
        }
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, ch))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(Some(c)) = self.conns.get_mut(ch) else { continue };
            if c.armed != Some(at) {
                continue; // stale: a later entry replaced it
            }
            c.armed = None;
            match c.wants {
                Some(wants) if wants <= now => {
                    if c.handshaking && !c.timed_out && now >= c.accepted_at + self.admission.handshake_timeout {
                        c.timed_out = true;
                        c.conn.close(now, 0u32.into(), bytes::Bytes::from_static(b"handshake timeout"));
                        // Counted now, and its place in the handshake budget given back now: its
                        // closing period (three probe timeouts, 3 s for a peer that never
                        // acknowledged anything) is no handshake in progress. `lost`: accounted
                        // for, not to be counted again as it goes.
                        c.handshaking = false;
                        c.lost = true;
                        self.totals.handshake_ended();
                        self.totals.handshake_failed(HandshakeFailure::TimedOut);
                    }
                    c.conn.handle_timeout(now);
                    self.queue(ch);
                }
                Some(wants) => {
                    c.armed = Some(wants);
                    self.timers.push(Reverse((wants, ch)));
                }
                None => {}
            }
        }
    }

    fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    fn begin_drain(&mut self, now: Instant) {
        if self.draining {
            return;
        }
        self.draining = true;
        for ch in 0..self.conns.len() {
            if let Some(Some(c)) = self.conns.get_mut(ch) {
                self.apps.begin_drain(&mut c.app, &mut c.conn, now);
                self.queue(ch);
            }
        }
    }

    fn drained(&self) -> bool {
        self.open == 0
    }
}

impl<F: Apps> Drop for QuicEndpoint<F> {
    fn drop(&mut self) {
        // Connections still open when the socket goes (a drain's deadline passed): their
        // transport counts still belong in the totals.
        for c in self.conns.iter().flatten() {
            self.totals.connection_ended(&c.conn.stats());
            if c.handshaking {
                self.totals.handshake_ended();
            }
            self.totals.closed();
        }
    }
}
