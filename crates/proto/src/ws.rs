//! WebSocket on the HTTP service's port: the session an HTTP/1.1 connection becomes when a
//! request asks for `Upgrade: websocket` and the handshake is accepted (RFC 6455 §4), as an
//! HTTP/2 connection is made by its preface. It drives `sockscale-ws`'s I/O-free [`Session`]
//! (every message echoed as a message of its kind, pings answered, closes answered with their
//! code) and adds what the server's core asks of a protocol:
//!
//! - its timer ([`WsSession::deadline`]): with `--ws-ping S`, a ping to a connection that sent
//!   nothing for S; a ping not answered by the next one (or within the idle timeout of the last
//!   input, if that comes first) closes it with 1001, counted as a ping timeout. The timer only
//!   marks the ping owed; it goes out by [`WsSession::transmit`], as HTTP/2's held-back DATA does.
//! - the drain ([`WsSession::finish_current`]): a close 1001 is owed, and the session is not
//!   between requests until the peer's close answers it (or the drain's deadline ends it).
//!
//! Connections count in their thread's [`Tally`] (an idle connection holds no counters), added
//! to the server's [`WsTotals`] once a second and as the thread ends; upgrades, refusals and
//! ended connections are counted in the totals as they happen.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sockscale_ws::{code, handshake, DeflateConfig, Session, Stats};

use crate::{Closing, Output, Verdict};

/// The WebSocket service's settings (`--ws-*`), shared by every connection.
#[derive(Debug, Clone)]
pub struct WsConfig {
    /// The stage's own settings (`--ws-max-message`).
    pub session: sockscale_ws::Config,
    /// permessage-deflate as the server offers it (`--ws-deflate on`), or `None` to decline.
    pub deflate: Option<DeflateConfig>,
    /// `--ws-ping`: ping a connection that sent nothing for this long.
    pub ping: Option<Duration>,
    /// `--idle-timeout`: an unanswered ping closes the connection at the latest this long after
    /// its last input (the core's idle clock counts pings sent as traffic).
    pub idle_timeout: Duration,
    /// What the connections counted.
    pub totals: Arc<WsTotals>,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            session: sockscale_ws::Config::default(),
            deflate: Some(DeflateConfig::default()),
            ping: None,
            idle_timeout: Duration::from_secs(60),
            totals: Arc::default(),
        }
    }
}

/// What every WebSocket connection of a server counted: upgrades, refusals and ended
/// connections as they happen, the stage's [`Stats`] summed from each thread's [`Tally`]
/// (behind a lock taken once a second a thread).
#[derive(Debug, Default)]
pub struct WsTotals {
    upgrades: AtomicU64,
    refused_400: AtomicU64,
    refused_426: AtomicU64,
    refused_405: AtomicU64,
    refused_503: AtomicU64,
    ended: AtomicU64,
    /// Of the upgrades, extended CONNECTs over HTTP/2 (RFC 8441), and of those, streams the
    /// peer reset (RST_STREAM) before the close handshake ended them.
    upgrades_h2: AtomicU64,
    resets_h2: AtomicU64,
    counted: Mutex<Stats>,
}

/// [`WsTotals`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsCounts {
    /// Upgrades answered 101.
    pub upgrades: u64,
    /// Upgrade requests refused with 400 (a malformed handshake), and requests answered 426
    /// (no upgrade asked on a WebSocket-only port, or a version other than 13).
    pub refused_400: u64,
    pub refused_426: u64,
    /// Requests over HTTP/2 on a WebSocket-only port other than an extended CONNECT, answered
    /// 405 (HTTP/1.1's 426 cannot be said in HTTP/2).
    pub refused_405: u64,
    /// Upgrade requests that arrived during a drain, refused with 503.
    pub refused_503: u64,
    /// Connections that ended, and what they counted.
    pub ended: u64,
    /// Of `upgrades`, those over HTTP/2 (extended CONNECT answered 200; each a stream, and
    /// counted in `ended` when it ends), and of those, streams the peer reset.
    pub upgrades_h2: u64,
    pub resets_h2: u64,
    pub stats: Stats,
}

impl WsTotals {
    /// An HTTP/2 stream carrying a WebSocket was reset by the peer.
    pub(crate) fn count_reset_h2(&self) {
        self.resets_h2.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused(&self, status: u16) {
        match status {
            426 => self.refused_426.fetch_add(1, Relaxed),
            405 => self.refused_405.fetch_add(1, Relaxed),
            503 => self.refused_503.fetch_add(1, Relaxed),
            _ => self.refused_400.fetch_add(1, Relaxed),
        };
    }

    fn add(&self, stats: &Stats) {
        self.counted.lock().unwrap_or_else(|e| e.into_inner()).add(stats);
    }

    /// The counts now: each thread's counters are added at least once a second (as its
    /// clock ticks) and when the thread ends.
    pub fn snapshot(&self) -> WsCounts {
        let stats = *self.counted.lock().unwrap_or_else(|e| e.into_inner());
        let ended = self.ended.load(Relaxed);
        WsCounts {
            upgrades: self.upgrades.load(Relaxed),
            refused_400: self.refused_400.load(Relaxed),
            refused_426: self.refused_426.load(Relaxed),
            refused_405: self.refused_405.load(Relaxed),
            refused_503: self.refused_503.load(Relaxed),
            ended,
            upgrades_h2: self.upgrades_h2.load(Relaxed),
            resets_h2: self.resets_h2.load(Relaxed),
            stats,
        }
    }
}

/// One thread's WebSocket counters: its connections count here (an idle connection holds no
/// counters), and they are added to the server's [`WsTotals`] when the tally is dropped (the
/// HTTP responses renew theirs, with it, as the second changes, and the thread's go when it
/// ends).
#[derive(Debug, Default)]
pub struct Tally {
    /// Boxed: the responder is kept small.
    pub(crate) stats: Box<Stats>,
    totals: Option<Arc<WsTotals>>,
}

impl Tally {
    pub(crate) fn new(config: Option<&Arc<WsConfig>>) -> Tally {
        Tally { stats: Box::default(), totals: config.map(|c| c.totals.clone()) }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if let Some(totals) = &self.totals {
            if *self.stats != Stats::default() {
                totals.add(&self.stats);
            }
        }
    }
}

/// What the session owes the peer without new input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    Nothing,
    /// The ping timer fired: a ping, or the close of a ping timeout.
    Ping,
    /// The drain: close 1001.
    Close,
}

/// One WebSocket connection (boxed in [`crate::Session::Ws`]).
#[derive(Debug)]
pub struct WsSession {
    session: Session,
    config: Arc<WsConfig>,
    owed: Owed,
    /// When the last ping was sent.
    ping_sent: Option<Instant>,
    /// The drain asked for the close (once is enough).
    drain_asked: bool,
}

impl Drop for WsSession {
    fn drop(&mut self) {
        self.config.totals.ended.fetch_add(1, Relaxed);
    }
}

/// The 426 a WebSocket-only port answers a request that asks for no upgrade (RFC 9110
/// §15.5.22: it names the protocol to upgrade to).
const UPGRADE_REQUIRED: &[u8] =
    b"HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n\
Sec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n";

/// The 503 an upgrade request gets during a drain (as one past `--max-conns` does): the server
/// is going away, so a WebSocket would be closed (1001) as soon as it opened.
pub(crate) const DRAINING: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// Refuse an upgrade request that arrived during a drain: the 503 is in the output; close.
pub fn refuse_draining(config: &WsConfig, out: &mut Output) {
    config.totals.refused(503);
    out.push_shared(Bytes::from_static(DRAINING));
}

/// What an upgrade request came to.
#[derive(Debug)]
pub enum Upgrade {
    /// Accepted: the 101 is in the output, and the connection is this session's from now on.
    Accepted(Box<WsSession>, Verdict),
    /// Refused: the answer (400 or 426) is in the output; close.
    Refused,
}

/// Answer the request whose head is `head` (complete, parsed before) on a port serving
/// WebSocket: the 101 and the session, fed `rest` (the octets behind the head in the same
/// input), or a refusal. A request that asks for no upgrade gets 426.
pub fn upgrade(
    config: &Arc<WsConfig>,
    head: &[u8],
    rest: &[u8],
    now: Instant,
    stats: &mut Stats,
    out: &mut Output,
) -> Upgrade {
    let mut headers = [httparse::EMPTY_HEADER; crate::MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let parsed = matches!(request.parse(head), Ok(httparse::Status::Complete(_)));
    let pairs = request.headers.iter().map(|h| (h.name, h.value));
    let refuse = |status: u16, answer: Bytes, out: &mut Output| {
        config.totals.refused(status);
        out.push_shared(answer);
        Upgrade::Refused
    };
    if !parsed || request.version != Some(1) {
        // HTTP/1.0 has no upgrade (RFC 6455 §4.1 asks for 1.1 at least).
        let mut answer = Vec::new();
        handshake::Refusal::NotGet.write_response(&mut answer);
        return refuse(400, Bytes::from(answer), out);
    }
    if !handshake::is_upgrade(pairs.clone()) {
        return refuse(426, Bytes::from_static(UPGRADE_REQUIRED), out);
    }
    // A body would be read as frames (the HTTP stage passes one on only on a WebSocket-only port).
    let body = pairs.clone().any(|(name, value)| {
        name.eq_ignore_ascii_case("transfer-encoding")
            || (name.eq_ignore_ascii_case("content-length") && value.trim_ascii() != b"0")
    });
    if body {
        let mut answer = Vec::new();
        handshake::Refusal::NotGet.write_response(&mut answer);
        return refuse(400, Bytes::from(answer), out);
    }
    match handshake::accept(request.method.unwrap_or(""), pairs, config.deflate.as_ref()) {
        Ok(accepted) => {
            config.totals.upgrades.fetch_add(1, Relaxed);
            out.push_shared(Bytes::from(accepted.response));
            let session = Session::new(&config.session, accepted.deflate.as_ref(), now);
            let mut ws = Box::new(WsSession {
                session,
                config: config.clone(),
                owed: Owed::Nothing,
                ping_sent: None,
                drain_asked: false,
            });
            let verdict = if rest.is_empty() { Verdict::Continue } else { ws.on_input(rest, now, stats, out) };
            Upgrade::Accepted(ws, verdict)
        }
        Err(refusal) => {
            let mut answer = Vec::new();
            refusal.write_response(&mut answer);
            refuse(refusal.status(), Bytes::from(answer), out)
        }
    }
}

/// What an extended CONNECT for a WebSocket (RFC 8441) came to.
#[derive(Debug)]
pub(crate) enum H2Upgrade {
    /// Accepted: answer 200 with this `sec-websocket-extensions` (if deflate was agreed); the
    /// stream carries this session.
    Accepted(Box<WsSession>, Option<String>),
    /// Refused with this status (counted): 400, 426 (a version other than 13), 503 (a drain).
    Refused(u16),
}

/// Answer an extended CONNECT whose `:protocol` is `websocket`, its regular fields
/// `headers`: the session, or the status of a refusal. `draining`: the server is going away
/// (503, as an upgrade on HTTP/1.1 gets).
pub(crate) fn upgrade_h2<'a>(
    config: &Arc<WsConfig>,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
    draining: bool,
    now: Instant,
) -> H2Upgrade {
    if draining {
        config.totals.refused(503);
        return H2Upgrade::Refused(503);
    }
    match handshake::accept_h2(headers, config.deflate.as_ref()) {
        Ok(accepted) => {
            config.totals.upgrades.fetch_add(1, Relaxed);
            config.totals.upgrades_h2.fetch_add(1, Relaxed);
            let session = Session::new(&config.session, accepted.deflate.as_ref(), now);
            let ws = Box::new(WsSession {
                session,
                config: config.clone(),
                owed: Owed::Nothing,
                ping_sent: None,
                drain_asked: false,
            });
            H2Upgrade::Accepted(ws, accepted.extensions)
        }
        Err(refusal) => {
            config.totals.refused(refusal.status());
            H2Upgrade::Refused(refusal.status())
        }
    }
}

/// Output in a fresh buffer, handed over as shared bytes.
fn flush(buf: Vec<u8>, out: &mut Output) {
    if !buf.is_empty() {
        out.push_shared(Bytes::from(buf));
    }
}

impl WsSession {
    /// Input, counted in `stats` (the thread's).
    pub fn on_input(&mut self, input: &[u8], now: Instant, stats: &mut Stats, out: &mut Output) -> Verdict {
        let mut buf = Vec::new();
        let verdict = self.receive_into(input, now, stats, &mut buf);
        flush(buf, out);
        verdict
    }

    /// [`WsSession::on_input`] into a plain buffer (HTTP/2 frames it as DATA).
    pub(crate) fn receive_into(&mut self, input: &[u8], now: Instant, stats: &mut Stats, buf: &mut Vec<u8>) -> Verdict {
        verdict_of(self.session.receive(input, now, stats, buf))
    }

    /// A ping or a close is owed (see the module).
    pub fn wants_transmit(&self) -> bool {
        self.owed != Owed::Nothing
    }

    /// Send what is owed: the drain's close 1001, or the ping timer's ping (or its timeout's
    /// close 1001).
    pub fn transmit(&mut self, now: Instant, stats: &mut Stats, out: &mut Output) -> Verdict {
        let mut buf = Vec::new();
        let verdict = self.transmit_into(now, stats, &mut buf);
        flush(buf, out);
        verdict
    }

    /// [`WsSession::transmit`] into a plain buffer (HTTP/2 frames it as DATA).
    pub(crate) fn transmit_into(&mut self, now: Instant, stats: &mut Stats, buf: &mut Vec<u8>) -> Verdict {
        let owed = std::mem::replace(&mut self.owed, Owed::Nothing);
        match owed {
            Owed::Nothing => Verdict::Continue,
            Owed::Close => verdict_of(self.session.initiate_close(code::GOING_AWAY, stats, buf)),
            Owed::Ping => {
                let before = buf.len();
                let verdict = verdict_of(self.session.on_ping_due(now, stats, buf));
                if buf.len() > before && verdict == Verdict::Continue {
                    self.ping_sent = Some(now);
                }
                verdict
            }
        }
    }

    /// The ping timer (see the module), while nothing is owed and no close was sent.
    pub fn deadline(&self) -> Option<Instant> {
        let every = self.config.ping?;
        if self.owed != Owed::Nothing || self.session.closing() {
            return None;
        }
        let last_input = self.session.last_input();
        Some(match self.ping_sent {
            // Nothing came since the ping: it is unanswered.
            Some(sent) if last_input <= sent => {
                crate::after(sent, every).min(crate::after(last_input, self.config.idle_timeout))
            }
            Some(sent) => crate::after(sent.max(last_input), every),
            None => crate::after(last_input, every),
        })
    }

    /// The ping timer fired: the ping (or the timeout's close) is owed, sent by the next
    /// transmit. Nothing is written here: a timer's answer would close the connection.
    pub fn on_timeout(&mut self, now: Instant) -> Verdict {
        if self.deadline().is_some_and(|at| at <= now) {
            self.owed = Owed::Ping;
        }
        Verdict::Continue
    }

    /// Between messages: nothing half received, no ping unanswered (a connection waiting for
    /// its pong keeps its active-set place, so the pong is read), and no drain under way (a
    /// drained connection ends by its close handshake).
    pub fn is_between_requests(&self) -> bool {
        !self.drain_asked && self.session.buffered() == 0 && self.ping_unanswered().is_none()
    }

    fn ping_unanswered(&self) -> Option<Instant> {
        self.ping_sent.filter(|&sent| self.session.last_input() <= sent)
    }

    /// The drain: close 1001 at the next transmit, then wait for the peer's close.
    pub fn finish_current(&mut self) {
        if !self.drain_asked {
            self.drain_asked = true;
            self.owed = Owed::Close;
        }
    }
}

fn verdict_of(verdict: sockscale_ws::Verdict) -> Verdict {
    match verdict {
        sockscale_ws::Verdict::Continue => Verdict::Continue,
        sockscale_ws::Verdict::Close(sockscale_ws::Closing::Handshake { .. }) => Verdict::Close(Closing::Done),
        sockscale_ws::Verdict::Close(sockscale_ws::Closing::Failed(_)) => Verdict::Close(Closing::BadRequest),
        sockscale_ws::Verdict::Close(sockscale_ws::Closing::PingTimeout) => Verdict::Close(Closing::PingTimeout),
    }
}
