//! The WebSocket block of a load report (`load ws`): upgrades and refusals, messages, bytes,
//! pings, pongs and closes by code, added up over connections, threads, processes and merges.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// What the WebSocket connections of a run met; absent from other runs' reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Ws {
    /// Upgrades answered with a verified 101.
    pub upgrades: u64,
    /// Of those, with permessage-deflate agreed.
    pub deflate_agreed: u64,
    /// Upgrades answered with another status, by status (counted in `errors.ws_refused`).
    pub refused: BTreeMap<u16, u64>,
    /// 101s that were wrong (a bad Sec-WebSocket-Accept...), counted in `errors.ws_handshake`.
    pub bad_handshakes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad_handshake: Option<String>,
    /// Messages and their payload octets (before compression) each way.
    pub messages_sent: u64,
    pub messages_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub pings_sent: u64,
    pub pongs_received: u64,
    pub pings_received: u64,
    pub pongs_sent: u64,
    /// Close frames by code ("none": a close with no code).
    pub closes_sent: BTreeMap<String, u64>,
    pub closes_received: BTreeMap<String, u64>,
    /// Connections the server's frames failed, by the close code this client sent
    /// (1002: a masked frame, a reserved opcode...), counted in `errors.ws_protocol`.
    pub protocol_errors: BTreeMap<u16, u64>,
    /// Closes sent at the end of the run (1000) that the server did not answer within the
    /// wait at the end, counted in `errors.ws_close_unanswered`.
    pub close_unanswered: u64,
    /// Pings unanswered by the next ping: the connection was closed (`errors.ws_ping_timeout`).
    pub ping_timeouts: u64,
}

fn code_name(code: u16) -> String {
    if code == 1005 {
        "none".to_owned()
    } else {
        code.to_string()
    }
}

fn add_map<K: Ord + Clone>(mine: &mut BTreeMap<K, u64>, theirs: &BTreeMap<K, u64>) {
    for (k, n) in theirs {
        *mine.entry(k.clone()).or_default() += n;
    }
}

fn add_closes(mine: &mut BTreeMap<String, u64>, counts: &sockscale_ws::CloseCounts) {
    for (code, n) in counts.iter().filter(|(_, n)| *n > 0) {
        *mine.entry(code_name(code)).or_default() += n;
    }
    if counts.other > 0 {
        *mine.entry("other".to_owned()).or_default() += counts.other;
    }
}

impl Ws {
    /// A connection's session counters, when it ends.
    pub fn add_stats(&mut self, stats: &sockscale_ws::Stats) {
        self.messages_sent += stats.messages_sent;
        self.messages_received += stats.messages_received;
        self.bytes_sent += stats.bytes_sent;
        self.bytes_received += stats.bytes_received;
        self.pings_sent += stats.pings_sent;
        self.pongs_received += stats.pongs_received;
        self.pings_received += stats.pings_received;
        self.pongs_sent += stats.pongs_sent;
        add_closes(&mut self.closes_sent, &stats.closes_sent);
        add_closes(&mut self.closes_received, &stats.closes_received);
    }

    pub fn add(&mut self, o: &Ws) {
        self.upgrades += o.upgrades;
        self.deflate_agreed += o.deflate_agreed;
        add_map(&mut self.refused, &o.refused);
        self.bad_handshakes += o.bad_handshakes;
        if self.first_bad_handshake.is_none() {
            self.first_bad_handshake.clone_from(&o.first_bad_handshake);
        }
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.pings_sent += o.pings_sent;
        self.pongs_received += o.pongs_received;
        self.pings_received += o.pings_received;
        self.pongs_sent += o.pongs_sent;
        add_map(&mut self.closes_sent, &o.closes_sent);
        add_map(&mut self.closes_received, &o.closes_received);
        add_map(&mut self.protocol_errors, &o.protocol_errors);
        self.close_unanswered += o.close_unanswered;
        self.ping_timeouts += o.ping_timeouts;
    }

    /// The refusals as "404 3, 503 1".
    pub fn refused_words(&self) -> String {
        self.refused.iter().map(|(status, n)| format!("{status} {n}")).collect::<Vec<_>>().join(", ")
    }

    /// The summary's lines for WebSocket.
    pub fn summary(&self, s: &mut String) {
        self.summary_answered(s, "101");
    }

    /// The summary's lines, an upgrade being answered with `answer` (over HTTP/2, a 200).
    pub fn summary_answered(&self, s: &mut String, answer: &str) {
        let refused = if self.refused.is_empty() {
            String::new()
        } else {
            format!(", refused by status: {}", self.refused_words())
        };
        let deflate = if self.deflate_agreed > 0 {
            format!(" ({} with permessage-deflate)", self.deflate_agreed)
        } else {
            String::new()
        };
        let _ = writeln!(s, "  websocket    {} upgrades ({answer}){deflate}{refused}", self.upgrades);
        if self.bad_handshakes > 0 {
            let first = self.first_bad_handshake.as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default();
            let _ = writeln!(s, "  bad 101      {}{first}", self.bad_handshakes);
        }
        let _ = writeln!(
            s,
            "  ws messages  {} sent, {} received; payload {} B sent, {} B received",
            self.messages_sent, self.messages_received, self.bytes_sent, self.bytes_received
        );
        if self.pings_sent + self.pings_received > 0 {
            let _ = writeln!(
                s,
                "  ws pings     {} sent, {} pongs back; {} received, {} answered{}",
                self.pings_sent,
                self.pongs_received,
                self.pings_received,
                self.pongs_sent,
                if self.ping_timeouts > 0 {
                    format!("; {} unanswered by the next", self.ping_timeouts)
                } else {
                    String::new()
                }
            );
        }
        let list = |m: &BTreeMap<String, u64>| m.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ");
        if !self.closes_sent.is_empty() || !self.closes_received.is_empty() {
            let unanswered = if self.close_unanswered > 0 {
                format!("; {} of this client's unanswered at the end", self.close_unanswered)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "  ws closes    sent: {}; received: {}{unanswered}",
                if self.closes_sent.is_empty() { "none".into() } else { list(&self.closes_sent) },
                if self.closes_received.is_empty() { "none".into() } else { list(&self.closes_received) },
            );
        }
        if !self.protocol_errors.is_empty() {
            let codes = self.protocol_errors.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ");
            let _ = writeln!(s, "  ws failed    the server's frames broke RFC 6455; closed with {codes}");
        }
    }
}
