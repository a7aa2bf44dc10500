//! The event loop's share of `load ws`: counting how WebSocket connections end, adding up
//! their session counters, and the close handshake at the end of a run.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{End, EventLoop, ThreadResult};
use crate::connection::Connection;
use crate::ws::WsEnd;

/// Count how a WebSocket connection ended; how it ended for the reconnect.
pub(super) fn count_end(result: &mut ThreadResult, end: &WsEnd) -> End {
    let errors = &mut result.errors;
    let ws = &mut result.ws;
    match end {
        WsEnd::Closed => return End::Done,
        WsEnd::Refused { status } => {
            errors.ws_refused += 1;
            *ws.refused.entry(*status).or_default() += 1;
        }
        WsEnd::BadHandshake(why) => {
            errors.ws_handshake += 1;
            ws.bad_handshakes += 1;
            ws.first_bad_handshake.get_or_insert_with(|| why.clone());
        }
        WsEnd::BadHead { sample } => {
            errors.bad_response += 1;
            result.first_bad_response.get_or_insert_with(|| sample.clone());
        }
        WsEnd::UpgradeTimeout => errors.reply_timeout += 1,
        WsEnd::Protocol { code } => {
            errors.ws_protocol += 1;
            *ws.protocol_errors.entry(*code).or_default() += 1;
        }
        WsEnd::ClosedByServer { .. } => errors.closed_by_peer += 1,
        WsEnd::PingTimeout => {
            errors.ws_ping_timeout += 1;
            ws.ping_timeouts += 1;
        }
        WsEnd::Mismatch => errors.verify_mismatch += 1,
        WsEnd::NoConnectProtocol => {
            errors.ws_handshake += 1;
            ws.bad_handshakes += 1;
            ws.first_bad_handshake.get_or_insert_with(|| crate::ws::NO_CONNECT_PROTOCOL.to_owned());
        }
        // Counted by their events (`h2.resets`, `errors.h2_reset`; `errors.h2_refused`).
        WsEnd::StreamReset { .. } | WsEnd::StreamRefused => {}
        WsEnd::StreamEnded => errors.closed_by_peer += 1,
    }
    End::Failed
}

/// A connection leaves the run: its session's counters join the thread's.
pub(super) fn retire(result: &mut ThreadResult, core: &Connection) {
    for stats in core.ws_stats_each() {
        result.ws.add_stats(stats);
    }
}

/// The run's grace ended with this connection's close unanswered.
pub(super) fn close_unanswered(result: &mut ThreadResult, core: &Connection) {
    if core.ws_awaiting_close() {
        result.errors.ws_close_unanswered += 1;
        result.ws.close_unanswered += 1;
    }
}

impl EventLoop<'_> {
    /// After a turn of the end's wait: if closes were answered since the graces last moved,
    /// move them (see [`CloseProgress`]).
    pub(super) fn ws_extend_grace(&mut self, progress: &mut crate::ws::CloseProgress, began: Instant, grace: Duration) {
        let profile = &self.shared.profile;
        if profile.ws.is_none() {
            return;
        }
        let Some(until) = progress.moved_grace(self.conns.len(), self.now, grace, began + profile.reply_timeout) else {
            return;
        };
        let until_ns = until.saturating_duration_since(self.shared.start).as_nanos() as u64;
        let waiting: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.core.ws_awaiting_close())
            .map(|(i, c)| (u64::from(c.generation) << 32) | i as u64)
            .collect();
        for token in waiting {
            if let Some(conn) = self.conn_mut(token) {
                conn.core.extend_grace(until_ns);
            }
            self.settle(token);
        }
    }

    /// Whether a WebSocket connection has a close handshake to make at the end of the run.
    pub(super) fn ws_to_close(&self) -> bool {
        self.shared.profile.ws.is_some() && self.conns.iter().any(|(_, c)| c.core.ws_open())
    }

    /// The end of the run: every WebSocket sends its close now (`begin_grace` made it).
    pub(super) fn ws_send_closes(&mut self, tokens: &[u64]) {
        if self.shared.profile.ws.is_none() || self.shared.stop.load(Relaxed) {
            return;
        }
        for &token in tokens {
            self.drive(token);
        }
    }
}
