//! WebSocket over HTTP/2 (RFC 8441): an extended CONNECT whose `:protocol` is `websocket`
//! opens a tunnel in `sockscale-h2`, and the stream's DATA is a WebSocket connection, driven by
//! the same [`WsSession`] an HTTP/1.1 upgrade becomes. The HTTP/2 stage knows nothing of
//! WebSocket: [`WsTunnels`] is its [`Tunnels`], holding the sessions keyed by stream id, for
//! the length of one call into the stage.
//!
//! Each stream is a whole WebSocket: its own limits (message size, UTF-8, pings, inflation),
//! its own ping timer and close. Its close handshake ends the stream both ways (END_STREAM
//! after the close frame), an RST_STREAM from the peer ends the session (counted in
//! [`WsTotals`](crate::ws::WsTotals) `resets_h2`), and a session whose stream went otherwise
//! (a stream error, the connection's end) is dropped after the call that ended it.

use std::sync::Arc;
use std::time::Instant;

use sockscale_h2::{Fields, Flow, Opening, Request, Tunnels};
use sockscale_ws::Stats;

use crate::ws::{upgrade_h2, H2Upgrade, WsConfig, WsSession};
use crate::Verdict;

/// One stream carrying a WebSocket.
#[derive(Debug)]
pub(crate) struct WsStream {
    pub(crate) id: u32,
    pub(crate) ws: Box<WsSession>,
}

/// The WebSocket side of one HTTP/2 connection's tunnels, for one call into the stage.
pub(crate) struct WsTunnels<'a> {
    pub(crate) streams: &'a mut Vec<WsStream>,
    /// The server's WebSocket service (`None`: WebSocket off, so every extended CONNECT is
    /// refused; the stage does not announce it then).
    pub(crate) config: Option<&'a Arc<WsConfig>>,
    /// The thread's counters.
    pub(crate) stats: &'a mut Stats,
    /// The server is draining: new WebSockets are refused with 503, as on HTTP/1.1.
    pub(crate) draining: bool,
}

impl Tunnels for WsTunnels<'_> {
    /// A `:protocol` other than `websocket` gets 400: the request is well formed HTTP/2 but asks
    /// this target for a protocol it does not carry (RFC 8441 names no status for it; 501 is for
    /// a method not recognised and blames the server, 426 needs an `Upgrade` field, which
    /// HTTP/2 forbids, 405 is about the method).
    fn open(&mut self, request: &Request, now: Instant) -> Opening {
        let Some(config) = self.config else { return Opening::Refuse(501, Fields::new()) };
        if request.protocol() != Some(b"websocket") {
            return Opening::Refuse(400, Fields::new());
        }
        // Names are lower-case tokens (the stage checked them), so text.
        let headers: Vec<(&str, &[u8])> = request
            .fields
            .iter()
            .filter(|(name, _)| !name.starts_with(b":"))
            .filter_map(|(name, value)| Some((std::str::from_utf8(name).ok()?, value)))
            .collect();
        match upgrade_h2(config, headers.iter().copied(), self.draining, now) {
            H2Upgrade::Accepted(ws, extensions) => {
                self.streams.push(WsStream { id: request.stream, ws });
                let fields = extensions.map(|value| (b"sec-websocket-extensions".to_vec(), value.into_bytes()));
                Opening::Accept(fields.into_iter().collect())
            }
            H2Upgrade::Refused(426) => Opening::Refuse(426, vec![(b"sec-websocket-version".to_vec(), b"13".to_vec())]),
            H2Upgrade::Refused(status) => Opening::Refuse(status, Fields::new()),
        }
    }

    /// The stream's input to its session; its end (or the session's) ends the stream from this
    /// side too. A peer's END_STREAM without a close is an abrupt end (as a TCP FIN would be):
    /// the stream is ended, no close frame sent.
    fn data(&mut self, stream: u32, data: &[u8], end: bool, now: Instant, out: &mut Vec<u8>) -> Flow {
        let Some(ws) = self.streams.iter_mut().find(|s| s.id == stream) else { return Flow::Finish };
        let verdict = ws.ws.receive_into(data, now, self.stats, out);
        if end || verdict != Verdict::Continue {
            Flow::Finish
        } else {
            Flow::Open
        }
    }

    fn reset(&mut self, stream: u32) {
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            self.streams.swap_remove(i);
            if let Some(config) = self.config {
                config.totals.count_reset_h2();
            }
        }
    }
}
