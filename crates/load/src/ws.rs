//! The WebSocket stage of a load connection (`load ws`), without the socket: the upgrade
//! request and the check of its 101, then sockscale-ws's client session. Messages carry the
//! connection's pattern (as echo's bytes do), masked on the way out; every echoed message is
//! verified whole against the one sent, and timed from its send to its last byte back.
//!
//! ```text
//! WsClient::new(..)             the upgrade request waits in `out` for the connect
//! receive(..)                   the response head (101 checked), then frames: messages verified
//! begin(..)                     a message framed into `out` (its payload from the pattern)
//! on_timeout(..)                the upgrade's deadline, the next ping
//! initiate_close()              the end of the run: close 1000, and the server's close awaited
//! ```
//!
//! Over HTTP/2 (RFC 8441, `--http2`) the same stage rides a stream instead of the connection
//! ([`WsClient::tunneled`]): no upgrade request; `ws_h2.rs` sends the extended CONNECT and hands
//! over its 200 ([`WsClient::tunnel_open`]) and the stream's bytes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sockscale_ws::{ClientHandshake, ClientSession, Closing, Config, DeflateConfig, Kind as WsKind, Stats, Verdict};

use crate::client::Stamp;
use crate::config::WsRun;
use crate::events::{Event, Now};
use crate::pattern::{Pattern, TABLE};

/// The longest response head to an upgrade request read; past it the answer is not HTTP.
const MAX_HEAD: usize = 16 << 10;

/// What every WebSocket connection of a run shares.
#[derive(Debug, Clone)]
pub struct WsProfile {
    /// The Host header of the upgrade request.
    pub host: String,
    pub path: String,
    pub msg_len: usize,
    pub kind: WsKind,
    /// permessage-deflate offered, with these wishes.
    pub deflate: Option<DeflateConfig>,
    /// Send no message.
    pub idle: bool,
    /// Ping every connection this often.
    pub ping: Option<Duration>,
    pub config: Config,
    /// WebSocket over HTTP/2 (`--http2`).
    pub h2: Option<WsH2Profile>,
    /// The end's wait for the closes, at least (`--close-timeout`).
    pub close_timeout: Option<Duration>,
}

/// What every WebSocket over HTTP/2 connection sends.
#[derive(Debug, Clone)]
pub struct WsH2Profile {
    /// The extended CONNECT's header block (RFC 8441 §4), encoded once.
    pub block: Vec<u8>,
    /// WebSockets (streams) per connection.
    pub streams: usize,
}

impl WsH2Profile {
    /// `scheme`: `https` over TLS, else `http` (RFC 8441 §4: the `:scheme` of the target).
    pub fn new(run: &WsRun, scheme: &str) -> Self {
        let offer = run.deflate.then(|| sockscale_ws::deflate::offer_value(&DeflateConfig::default()));
        let mut fields = vec![("sec-websocket-version", "13")];
        if let Some(offer) = &offer {
            fields.push(("sec-websocket-extensions", offer));
        }
        let block = sockscale_h2::encode_connect("websocket", scheme, &run.host, &run.path, &fields);
        WsH2Profile { block, streams: run.streams.max(1) }
    }
}

impl WsProfile {
    pub fn new(run: &WsRun) -> Self {
        WsProfile {
            host: run.host.clone(),
            path: run.path.clone(),
            msg_len: run.msg_len,
            kind: if run.text { WsKind::Text } else { WsKind::Binary },
            deflate: run.deflate.then(DeflateConfig::default),
            idle: run.idle,
            ping: run.ping,
            // An echo is never larger than what was sent; a server sending much more is
            // refused (close 1009) before it is held. The limit also bounds a compressed
            // message's octets on the wire, which for incompressible payloads (the pattern is
            // random) exceed the payload by a few octets a block: hence the margin.
            config: Config { max_message: run.msg_len.saturating_add(run.msg_len / 8).saturating_add(1024) },
            h2: run.http2.then(|| WsH2Profile::new(run, "http")),
            close_timeout: run.close_timeout,
        }
    }

    /// Over TLS: the extended CONNECT's `:scheme` is `https`.
    pub fn over_tls(mut self, run: &WsRun) -> Self {
        if self.h2.is_some() {
            self.h2 = Some(WsH2Profile::new(run, "https"));
        }
        self
    }
}

/// Why a WebSocket connection ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEnd {
    /// The server answered the upgrade with this status, not 101.
    Refused { status: u16 },
    /// The 101 was wrong (its Sec-WebSocket-Accept, Upgrade, Connection or extensions): why.
    BadHandshake(String),
    /// The answer to the upgrade request is not an HTTP response: its start, escaped.
    BadHead { sample: String },
    /// No answer to the upgrade request within the reply timeout.
    UpgradeTimeout,
    /// The server's frames broke RFC 6455 (masked, a reserved opcode, a bad length...): the
    /// close code this client sent.
    Protocol { code: u16 },
    /// The server began the close (its close frame, answered), with its code.
    ClosedByServer { code: Option<u16> },
    /// This client's close (the end of the run) was answered.
    Closed,
    /// A ping was not answered by the next.
    PingTimeout,
    /// An echoed message differs from the one sent, or came with none in flight.
    Mismatch,
    /// HTTP/2: the server's SETTINGS did not enable extended CONNECT (RFC 8441 §3).
    NoConnectProtocol,
    /// HTTP/2: the server reset the WebSocket's stream (RST_STREAM), with its code's name.
    StreamReset { code: std::borrow::Cow<'static, str> },
    /// HTTP/2: the stream was above a GOAWAY's last stream: the server did not process it.
    StreamRefused,
    /// HTTP/2: the server ended the stream (END_STREAM) with no close handshake.
    StreamEnded,
}

/// The line a run without extended CONNECT ends with.
pub const NO_CONNECT_PROTOCOL: &str =
    "server does not support WebSocket over HTTP/2 (no SETTINGS_ENABLE_CONNECT_PROTOCOL)";

// Every connection that upgrades needs the larger variant's room, and the whole client is
// boxed in the connection: boxing the session too would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Stage {
    /// The upgrade request is sent or waits to be; the response head read so far.
    Upgrading {
        handshake: ClientHandshake,
        head: Vec<u8>,
    },
    /// Over HTTP/2: the extended CONNECT's 200 is awaited.
    Tunneling,
    Open(ClientSession),
}

/// One connection's WebSocket stage.
#[derive(Debug)]
pub struct WsClient {
    phase: u32,
    stage: Stage,
    /// Frames (and before them the upgrade request) not yet handed on; released when all are
    /// and nothing is in flight, so an idle connection holds no buffer.
    out: Vec<u8>,
    written: usize,
    stamps: VecDeque<Stamp>,
    /// Messages begun and messages verified, each the index of the next.
    begun: u64,
    received: u64,
    /// When the connect completed (the upgrade is timed from it), in ns of the run.
    connected_ns: Option<u64>,
    next_ping_ns: Option<u64>,
    /// This client sent its close (the end of the run).
    closing: bool,
    idle: bool,
}

impl WsClient {
    /// Connection number `index`'s stage: its upgrade request waits for the connect.
    pub fn new(profile: Option<&WsProfile>, index: u64) -> WsClient {
        let mut rng = fastrand::Rng::new();
        let deflate = profile.and_then(|p| p.deflate);
        let handshake = ClientHandshake::random(&mut rng, deflate);
        let mut out = Vec::new();
        let (host, path) = profile.map_or(("localhost", "/"), |p| (p.host.as_str(), p.path.as_str()));
        handshake.write_request(host, path, &mut out);
        WsClient {
            phase: Pattern::phase(index),
            stage: Stage::Upgrading { handshake, head: Vec::new() },
            out,
            written: 0,
            stamps: VecDeque::new(),
            begun: 0,
            received: 0,
            connected_ns: None,
            next_ping_ns: None,
            closing: false,
            idle: profile.is_some_and(|p| p.idle),
        }
    }

    /// Connection number `index`'s stage over an HTTP/2 stream: nothing to send until the
    /// extended CONNECT's 200 ([`WsClient::tunnel_open`]).
    pub fn tunneled(profile: &WsProfile, index: u64) -> WsClient {
        WsClient {
            phase: Pattern::phase(index),
            stage: Stage::Tunneling,
            out: Vec::new(),
            written: 0,
            stamps: VecDeque::new(),
            begun: 0,
            received: 0,
            connected_ns: None,
            next_ping_ns: None,
            closing: false,
            idle: profile.idle,
        }
    }

    /// The extended CONNECT was answered 200 at `now` (`extensions`: its
    /// Sec-WebSocket-Extensions): the session begins, with the permessage-deflate agreed.
    pub fn tunnel_open(
        &mut self,
        profile: &WsProfile,
        now: Now,
        extensions: Option<&[u8]>,
        on: &mut impl FnMut(Event),
    ) -> Result<(), WsEnd> {
        if !matches!(self.stage, Stage::Tunneling) {
            return Ok(());
        }
        let agreed = agreed_extension(profile.deflate.as_ref(), extensions).map_err(WsEnd::BadHandshake)?;
        self.stage = Stage::Open(ClientSession::new(&profile.config, agreed.as_ref(), fastrand::Rng::new(), now.at));
        self.next_ping_ns = profile.ping.map(|p| now.ns + p.as_nanos() as u64);
        on(Event::WsUpgraded { deflate: agreed.is_some() });
        Ok(())
    }

    /// The connect completed at `ns`: the upgrade's answer is awaited from now.
    pub fn connected(&mut self, ns: u64) {
        self.connected_ns = Some(ns);
    }

    pub fn upgraded(&self) -> bool {
        matches!(self.stage, Stage::Open(_))
    }

    /// Whether a message may begin: upgraded, not idle, not closing.
    pub fn may_send(&self) -> bool {
        !self.idle && !self.closing && matches!(&self.stage, Stage::Open(s) if !s.closing())
    }

    pub fn outstanding(&self) -> usize {
        self.stamps.len()
    }

    pub fn oldest(&self) -> Option<Stamp> {
        self.stamps.front().copied()
    }

    /// This client's close was sent and the server's is awaited.
    pub fn awaiting_close(&self) -> bool {
        self.closing
    }

    pub fn stats(&self) -> Option<&Stats> {
        match &self.stage {
            Stage::Open(session) => Some(session.stats()),
            Stage::Upgrading { .. } | Stage::Tunneling => None,
        }
    }

    /// The room the frames' buffer holds (0 on an idle connection).
    pub fn out_capacity(&self) -> usize {
        self.out.capacity()
    }

    pub fn to_send(&self) -> &[u8] {
        &self.out[self.written..]
    }

    pub fn sent(&mut self, n: usize) {
        self.written += n;
        if self.written >= self.out.len() {
            self.written = 0;
            if self.stamps.is_empty() {
                self.out = Vec::new();
            } else {
                self.out.clear();
            }
        }
    }

    /// What is still to send, taken (the last bytes of a close).
    pub fn take_unsent(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.out);
        out.drain(..self.written.min(out.len()));
        self.written = 0;
        out
    }

    /// Begin a message stamped `stamp` (`scratch` holds its payload when it is not one slice
    /// of the pattern).
    pub fn begin(&mut self, profile: &WsProfile, pattern: &Pattern, stamp: Stamp, scratch: &mut Vec<u8>) {
        let Stage::Open(session) = &mut self.stage else { return };
        let offset = self.begun * profile.msg_len as u64;
        let payload = payload(pattern, self.phase, offset, profile.msg_len, profile.kind, scratch);
        if session.send(profile.kind, payload, &mut self.out) {
            self.begun += 1;
            self.stamps.push_back(stamp);
        }
    }

    /// Bytes received `now`.
    pub fn receive(
        &mut self,
        profile: &WsProfile,
        pattern: &Pattern,
        now: Now,
        data: &[u8],
        on: &mut impl FnMut(Event),
    ) -> Result<(), WsEnd> {
        let rest = match &mut self.stage {
            Stage::Open(_) => data,
            Stage::Tunneling => return Err(WsEnd::BadHandshake("bytes on the stream before its 200".into())),
            Stage::Upgrading { handshake, head } => {
                let before = head.len();
                let take = data.len().min(MAX_HEAD + 4 - before);
                head.extend_from_slice(&data[..take]);
                // The end of the head may straddle two reads.
                let from = before.saturating_sub(3);
                let Some(end) = head[from..].windows(4).position(|w| w == b"\r\n\r\n").map(|i| from + i + 4) else {
                    if head.len() > MAX_HEAD {
                        return Err(WsEnd::BadHead { sample: crate::report::sample(head) });
                    }
                    return Ok(());
                };
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut response = httparse::Response::new(&mut headers);
                let status = match response.parse(&head[..end]) {
                    Ok(httparse::Status::Complete(_)) => response.code.unwrap_or(0),
                    _ => return Err(WsEnd::BadHead { sample: crate::report::sample(head) }),
                };
                let pairs = response.headers.iter().map(|h| (h.name, h.value));
                let agreed = handshake.verify(status, pairs).map_err(|e| match e {
                    sockscale_ws::HandshakeError::Status(status) => WsEnd::Refused { status },
                    other => WsEnd::BadHandshake(other.to_string()),
                })?;
                let session = ClientSession::new(&profile.config, agreed.as_ref(), fastrand::Rng::new(), now.at);
                on(Event::WsUpgraded { deflate: agreed.is_some() });
                // What followed the head in this read: the first frames.
                let consumed = end - before;
                self.stage = Stage::Open(session);
                self.next_ping_ns = profile.ping.map(|p| now.ns + p.as_nanos() as u64);
                &data[consumed..]
            }
        };
        let Stage::Open(session) = &mut self.stage else { return Ok(()) };
        let verdict = session.receive(rest, now.at, &mut self.out);
        // Messages before a close frame in the same read count.
        while let Some(message) = session.poll_message() {
            let Some(stamp) = self.stamps.pop_front() else { return Err(WsEnd::Mismatch) };
            let offset = self.received * profile.msg_len as u64;
            if message.kind != profile.kind
                || message.data.len() != profile.msg_len
                || !matches_payload(pattern, self.phase, offset, &message.data, profile.kind)
            {
                return Err(WsEnd::Mismatch);
            }
            self.received += 1;
            on(Event::Echoed { stamp });
        }
        self.verdict(verdict)
    }

    fn verdict(&self, verdict: Verdict) -> Result<(), WsEnd> {
        match verdict {
            Verdict::Continue => Ok(()),
            Verdict::Close(Closing::Handshake { .. }) if self.closing => Err(WsEnd::Closed),
            Verdict::Close(Closing::Handshake { code }) => Err(WsEnd::ClosedByServer { code }),
            Verdict::Close(Closing::Failed(code)) => Err(WsEnd::Protocol { code }),
            Verdict::Close(Closing::PingTimeout) => Err(WsEnd::PingTimeout),
        }
    }

    /// The next deadline: the upgrade's answer (a reply timeout after the connect), or the next
    /// ping.
    pub fn deadline(&self, reply: Duration) -> Option<u64> {
        match &self.stage {
            Stage::Upgrading { .. } | Stage::Tunneling => self.connected_ns.map(|ns| ns + reply.as_nanos() as u64),
            Stage::Open(_) if self.closing => None,
            Stage::Open(_) => self.next_ping_ns,
        }
    }

    /// A deadline may have passed at `now`.
    pub fn on_timeout(&mut self, profile: &WsProfile, reply: Duration, now: Now) -> Result<(), WsEnd> {
        match &mut self.stage {
            Stage::Upgrading { .. } | Stage::Tunneling => match self.connected_ns {
                Some(ns) if now.ns >= ns + reply.as_nanos() as u64 => Err(WsEnd::UpgradeTimeout),
                _ => Ok(()),
            },
            Stage::Open(session) => {
                let (Some(due), Some(every)) = (self.next_ping_ns, profile.ping) else { return Ok(()) };
                if now.ns < due || self.closing {
                    return Ok(());
                }
                let every = every.as_nanos() as u64;
                // One ping however late the timer fired; the next one interval on.
                self.next_ping_ns = Some(due + every * ((now.ns - due) / every + 1));
                let verdict = session.on_ping_due(now.at, &mut self.out);
                self.verdict(verdict)
            }
        }
    }

    /// The run ended: send close 1000 and await the server's. False if there is nothing to
    /// close (not upgraded, or already closing).
    pub fn initiate_close(&mut self) -> bool {
        let Stage::Open(session) = &mut self.stage else { return false };
        if self.closing || session.closing() {
            return false;
        }
        self.closing = true;
        let _ = session.initiate_close(sockscale_ws::code::NORMAL, &mut self.out);
        true
    }
}

/// The permessage-deflate a 200's Sec-WebSocket-Extensions agrees to (as a 101's is checked):
/// none if it names none; an error if it names what was not offered, or it twice.
fn agreed_extension(
    offered: Option<&DeflateConfig>,
    extensions: Option<&[u8]>,
) -> Result<Option<sockscale_ws::DeflateParams>, String> {
    let Some(value) = extensions else { return Ok(None) };
    let text = String::from_utf8_lossy(value);
    let bad = || format!("the 200's sec-websocket-extensions is not one the CONNECT offered: {}", text.trim());
    let mut agreed = None;
    for (name, params) in sockscale_ws::deflate::extensions(&text) {
        let config = offered.filter(|_| name.eq_ignore_ascii_case(sockscale_ws::deflate::EXTENSION));
        let Some(config) = config.filter(|_| agreed.is_none()) else { return Err(bad()) };
        agreed = Some(sockscale_ws::deflate::accept_response(params, config).ok_or_else(bad)?);
    }
    Ok(agreed)
}

/// A text message's octet for a pattern octet: printable ASCII, so the payload is UTF-8.
fn text_octet(b: u8) -> u8 {
    0x20 + b % 0x5f
}

/// The payload of the message at stream `offset`: a slice of the pattern when it can be, else
/// made in `scratch`.
fn payload<'a>(
    pattern: &'a Pattern,
    phase: u32,
    offset: u64,
    len: usize,
    kind: WsKind,
    scratch: &'a mut Vec<u8>,
) -> &'a [u8] {
    if kind == WsKind::Binary && len <= TABLE {
        return pattern.slice(phase, offset, len);
    }
    scratch.clear();
    while scratch.len() < len {
        let piece = pattern.slice(phase, offset + scratch.len() as u64, len - scratch.len());
        match kind {
            WsKind::Binary => scratch.extend_from_slice(piece),
            WsKind::Text => scratch.extend(piece.iter().map(|&b| text_octet(b))),
        }
    }
    scratch
}

/// Whether `data` is the payload of the message at stream `offset`.
fn matches_payload(pattern: &Pattern, phase: u32, offset: u64, data: &[u8], kind: WsKind) -> bool {
    match kind {
        WsKind::Binary => pattern.verify(phase, offset, data).is_none(),
        WsKind::Text => {
            let mut checked = 0;
            while checked < data.len() {
                let expected = pattern.slice(phase, offset + checked as u64, data.len() - checked);
                let got = &data[checked..checked + expected.len()];
                if got.iter().zip(expected).any(|(&g, &e)| g != text_octet(e)) {
                    return false;
                }
                checked += expected.len();
            }
            true
        }
    }
}

/// The run's probe (blocking, within `timeout`): one upgrade, its answer checked as every
/// connection's will be, then the connection closed. Why not, in words: a refusal with the
/// server's status line, a wrong 101, no answer.
pub(crate) fn probe_upgrade(
    cfg: &crate::config::LoadConfig,
    mut stream: impl std::io::Read + std::io::Write,
    timeout: Duration,
) -> Result<(), String> {
    let crate::config::Mode::Ws(run) = &cfg.mode else { return Ok(()) };
    let profile = WsProfile::new(run);
    let handshake = ClientHandshake::random(&mut fastrand::Rng::new(), profile.deflate);
    let mut request = Vec::new();
    handshake.write_request(&profile.host, &profile.path, &mut request);
    stream.write_all(&request).map_err(|e| format!("{e} sending the upgrade request"))?;
    let now = std::time::Instant::now;
    let deadline = now() + timeout;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > MAX_HEAD || now() >= deadline {
            return Err(format!(
                "no answer to the WebSocket upgrade within {:.1} s: {}",
                timeout.as_secs_f64(),
                crate::report::sample(&head)
            ));
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("the server closed the connection at the WebSocket upgrade request".into()),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{e} waiting for the answer to the WebSocket upgrade")),
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = response.parse(&head[..end]) else {
        return Err(format!("the answer to the WebSocket upgrade is not HTTP: {}", crate::report::sample(&head)));
    };
    let status = response.code.unwrap_or(0);
    let pairs = response.headers.iter().map(|h| (h.name, h.value));
    match handshake.verify(status, pairs) {
        Ok(agreed) => {
            // Closed as a client should: a close frame (the server need not be waited for).
            let mut session = ClientSession::new(&profile.config, agreed.as_ref(), fastrand::Rng::new(), now());
            let mut close = Vec::new();
            let _ = session.initiate_close(sockscale_ws::code::NORMAL, &mut close);
            let _ = stream.write_all(&close);
            Ok(())
        }
        Err(sockscale_ws::HandshakeError::Status(status)) => Err(format!(
            "the WebSocket upgrade was refused: the server answered {status}{} instead of 101 Switching Protocols \
             (is the path right, and does this port serve WebSocket?)",
            response.reason.map(|r| format!(" {r}")).unwrap_or_default()
        )),
        Err(e) => Err(format!("the WebSocket upgrade failed: {e}")),
    }
}

/// The end of a WebSocket run: every connection sends its close at once, and a server answers
/// that burst at its own pace (a million closes took about 30 s here), not within one exchange's
/// time. So while closes keep being answered, the grace of those still waiting moves out: to a
/// grace after the latest progress, never past the reply timeout from the end of the run. A
/// server that stops answering is waited for one grace, as before.
#[derive(Debug)]
pub struct CloseProgress {
    /// Connections of this thread still open at the last move (each ends as its close
    /// handshake completes).
    open: usize,
    /// When the grace was last moved.
    moved: Instant,
}

impl CloseProgress {
    /// How often at most the graces are moved (each move visits the thread's connections).
    pub const MOVE_EVERY: Duration = Duration::from_millis(100);

    pub fn new(open: usize, now: Instant) -> CloseProgress {
        CloseProgress { open, moved: now }
    }

    /// With `open` connections left at `now`: where the waiting graces move to (a `grace` on,
    /// never past `cap`), if closes were answered since the last move and it was long enough ago.
    pub fn moved_grace(&mut self, open: usize, now: Instant, grace: Duration, cap: Instant) -> Option<Instant> {
        if open >= self.open || now.saturating_duration_since(self.moved) < Self::MOVE_EVERY {
            return None;
        }
        (self.open, self.moved) = (open, now);
        Some((now + grace).min(cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end's closes: the graces move only on progress, at most every 100 ms, a grace past
    /// the latest progress and never past the cap.
    #[test]
    fn close_graces_move_on_progress_within_the_cap() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (grace, cap) = (Duration::from_secs(1), t0 + Duration::from_secs(3));
        let mut p = CloseProgress::new(10, t0);
        assert_eq!(p.moved_grace(10, t0 + ms(500), grace, cap), None, "no close answered");
        assert_eq!(p.moved_grace(8, t0 + ms(50), grace, cap), None, "too soon after the last move");
        assert_eq!(p.moved_grace(8, t0 + ms(600), grace, cap), Some(t0 + ms(1600)));
        assert_eq!(p.moved_grace(8, t0 + ms(900), grace, cap), None, "none since that move");
        assert_eq!(p.moved_grace(5, t0 + ms(2500), grace, cap), Some(cap), "never past the cap");
    }

    #[test]
    fn payloads_past_the_pattern_table_are_made_and_verified_to_the_last_octet() {
        let pattern = Pattern::default();
        let phase = Pattern::phase(3);
        for kind in [WsKind::Binary, WsKind::Text] {
            let len = TABLE + 5_000;
            let mut scratch = Vec::new();
            let mut made = payload(&pattern, phase, 777, len, kind, &mut scratch).to_vec();
            assert_eq!(made.len(), len);
            if kind == WsKind::Text {
                assert!(std::str::from_utf8(&made).is_ok(), "text is UTF-8");
            }
            assert!(matches_payload(&pattern, phase, 777, &made, kind));
            assert!(!matches_payload(&pattern, phase, 778, &made, kind), "another offset");
            made[len - 1] ^= 1;
            assert!(!matches_payload(&pattern, phase, 777, &made, kind), "the last octet altered ({kind:?})");
        }
    }
}
