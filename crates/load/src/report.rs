//! What a load run measured, as one serializable report.
//!
//! Every figure goes into `--json` together with the latency histograms (HDR, V2 deflate
//! encoding, base64), the client's own CPU use and the options used. Reports from several
//! processes or machines merge into one by adding counters and histograms, which is how
//! `--procs` and `sockscale load merge` work; rates are always recomputed from the merged
//! totals, never averaged.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

pub use crate::figures::{human_us, new_histogram, thousands, ByteCounts, Latency, MAX_LATENCY_NS};
pub use crate::ws_report::Ws;

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} is not a sockscale load report: {reason}")]
    Format { path: String, reason: String },
    #[error("cannot merge reports of different modes ({0} and {1})")]
    Mode(String, String),
    #[error("cannot merge: {0}")]
    Segments(String),
    #[error("cannot merge: {reports}' measured windows do not overlap (report {first} ran {first_window}, report {second} {second_window}): {hint}give --allow-disjoint to merge runs made one after another")]
    Disjoint {
        reports: &'static str,
        first: usize,
        first_window: String,
        second: usize,
        second_window: String,
        hint: &'static str,
    },
}

/// What `load merge` does with reports that did not run together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apart {
    /// Refuse them, naming their windows (the default).
    Refuse,
    /// Merge them over the time at least one ran, and say so (`--allow-disjoint`).
    Allow,
}

/// Reports ran together when the window common to all of them (from the last start to the
/// first end) covers at least this share of the shortest one's: agents started with
/// `--start-at` a few milliseconds apart, or a `--procs` child that ended early, are together;
/// runs made one after another, or overlapping by less than this, are not.
pub const OVERLAP_SHARE: f64 = 0.5;

/// Whether these windows are of runs made apart: the indices of the one that began last and of
/// the one that ended first, when their common window is shorter than [`OVERLAP_SHARE`] of the
/// shortest window (or there is none).
pub fn ran_apart(windows: &[Window]) -> Option<(usize, usize)> {
    let last_start =
        (0..windows.len()).max_by(|&a, &b| windows[a].started_unix_s.total_cmp(&windows[b].started_unix_s))?;
    let first_end = (0..windows.len()).min_by(|&a, &b| windows[a].ended_unix_s.total_cmp(&windows[b].ended_unix_s))?;
    let common = windows[first_end].ended_unix_s - windows[last_start].started_unix_s;
    let shortest = windows.iter().map(|w| w.ended_unix_s - w.started_unix_s).fold(f64::MAX, f64::min).max(0.0);
    (common < OVERLAP_SHARE * shortest || common < 0.0).then_some((last_start, first_end))
}

/// The time covered by at least one of these windows (sorted by start).
fn union_s(sorted: &[Window]) -> f64 {
    let mut total = 0.0;
    let mut reach = f64::MIN;
    for w in sorted {
        let from = w.started_unix_s.max(reach);
        if w.ended_unix_s > from {
            total += w.ended_unix_s - from;
        }
        reach = reach.max(w.ended_unix_s);
    }
    total
}

/// A Unix time as an RFC 3339 date, UTC, to the millisecond.
fn unix_date(unix_s: f64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::try_from_secs_f64(unix_s.max(0.0)).unwrap_or_default();
    humantime::format_rfc3339_millis(at).to_string()
}

/// "2026-11-26T18:55:00.000Z to 18:55:10.000Z (10.0 s)".
fn window_words(w: &Window) -> String {
    let (from, to) = (unix_date(w.started_unix_s), unix_date(w.ended_unix_s));
    // The end's date is left out when it is the start's.
    let to = match (from.split_once('T'), to.split_once('T')) {
        (Some((day, _)), Some((end_day, time))) if day == end_day => time.to_owned(),
        _ => to,
    };
    format!("{from} to {to} ({:.1} s)", w.ended_unix_s - w.started_unix_s)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Connections {
    /// Connect attempts, retries included.
    pub attempted: u64,
    /// Attempts that retried a connection whose connect or exchange had failed; each connection
    /// backs off between them (`backoff`). Absent in reports from before it was counted.
    #[serde(default)]
    pub retries: u64,
    /// Connections given up after `--connect-retries` failures in a row; absent in older
    /// reports.
    #[serde(default)]
    pub abandoned: u64,
    pub connected: u64,
    /// Most connections open at once (summed over processes).
    pub peak_open: u64,
    /// Connections asked for (`-c`; in a merge, their sum); 0 in reports from before it was
    /// recorded.
    #[serde(default)]
    pub asked: u64,
    /// Connections asked for that the run never attempted, by what held them back when it
    /// ended; absent when every one was attempted.
    #[serde(default, skip_serializing_if = "Unopened::is_empty")]
    pub never_attempted: Unopened,
}

/// Connections of `-c` never attempted, by what held them back when the run ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Unopened {
    /// `--connect-rate` had not reached them yet.
    pub connect_rate: u64,
    /// The most connects a thread keeps in progress at once were all still in progress: the
    /// target was slow to complete handshakes (or stopped: a full accept queue drops SYNs).
    pub pending_connects: u64,
    /// The run ended before (interrupted, or stopped for want of connections).
    pub run_ended: u64,
}

impl Unopened {
    pub fn total(&self) -> u64 {
        self.connect_rate + self.pending_connects + self.run_ended
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    pub fn add(&mut self, o: &Unopened) {
        self.connect_rate += o.connect_rate;
        self.pending_connects += o.pending_connects;
        self.run_ended += o.run_ended;
    }

    /// Why, in words: the biggest reason first.
    fn words(&self, per_thread: usize) -> String {
        let mut reasons = [
            (self.pending_connects, format!("the run ended with its {per_thread} connects per thread still in progress, the most it keeps at once (the target completed handshakes slower than asked, or stopped: a full accept queue drops new ones)")),
            (self.connect_rate, "--connect-rate had not reached them when the run ended".to_owned()),
            (self.run_ended, "the run ended first".to_owned()),
        ];
        reasons.sort_by_key(|r| std::cmp::Reverse(r.0));
        let listed: Vec<String> = reasons
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, why)| if *n == self.total() { why.clone() } else { format!("{}: {why}", thousands(*n)) })
            .collect();
        listed.join("; ")
    }
}

/// What was still in flight when the run's `-d` ended, and what became of it. Requests in
/// flight then are waited for up to a grace period (the longer of 1 s and twice the slowest
/// exchange the run measured, never longer than `--timeout`): those answered are counted as
/// completed, those still unanswered as errors (`errors.unanswered_*`, `connect_unfinished`,
/// `handshake_unfinished`; UDP: `udp.lost`). An interrupted run does not wait, and counts
/// nothing in flight as an error.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AtEnd {
    /// Exchanges (requests, echo messages, datagrams, HTTP/2 streams) in flight at the end.
    pub in_flight: u64,
    /// Connects, TLS handshakes and HTTP/2 greetings in progress at the end.
    pub connecting: u64,
    /// The longest the run would wait for them, in seconds.
    pub grace_s: f64,
    /// How long it waited (its slowest thread), in seconds; not part of `duration_s`.
    pub waited_s: f64,
    /// Exchanges answered while it waited: in `requests.completed` and the latency, not in
    /// `rates.requests_per_s` (over `duration_s`).
    pub answered: u64,
    /// Exchanges still unanswered after the wait (counted as errors).
    pub unanswered: u64,
    /// Connections among those with exchanges unanswered that never had one answered: taken
    /// by the server's kernel (connected) but never served.
    pub never_served: u64,
    /// Not waited for: the run was interrupted or stopped; nothing here counted as an error.
    pub not_waited_for: bool,
}

impl AtEnd {
    /// Nothing was in flight and nothing waited for (a WebSocket run waits for its closes with
    /// nothing in flight).
    pub fn is_empty(&self) -> bool {
        self.in_flight == 0 && self.connecting == 0 && self.grace_s == 0.0
    }

    pub fn add(&mut self, o: &AtEnd) {
        self.in_flight += o.in_flight;
        self.connecting += o.connecting;
        self.grace_s = self.grace_s.max(o.grace_s);
        self.waited_s = self.waited_s.max(o.waited_s);
        self.answered += o.answered;
        self.unanswered += o.unanswered;
        self.never_served += o.never_served;
        self.not_waited_for |= o.not_waited_for;
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Requests {
    /// Requests (HTTP), messages (echo) or datagrams (UDP) sent.
    pub sent: u64,
    /// Those answered completely (and, for echo, verified).
    pub completed: u64,
}

/// Final HTTP statuses by class. 1xx interim responses are skipped by the parser and never
/// counted; the field is kept for the format.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Statuses {
    #[serde(rename = "1xx")]
    pub s1xx: u64,
    #[serde(rename = "2xx")]
    pub s2xx: u64,
    #[serde(rename = "3xx")]
    pub s3xx: u64,
    #[serde(rename = "4xx")]
    pub s4xx: u64,
    #[serde(rename = "5xx")]
    pub s5xx: u64,
    pub other: u64,
    /// Final statuses by code ("404": 12); absent in reports from before they were counted.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub codes: std::collections::BTreeMap<u16, u64>,
}

impl Statuses {
    pub fn count(&mut self, status: u16) {
        match status {
            100..=199 => self.s1xx += 1,
            200..=299 => self.s2xx += 1,
            300..=399 => self.s3xx += 1,
            400..=499 => self.s4xx += 1,
            500..=599 => self.s5xx += 1,
            _ => self.other += 1,
        }
        *self.codes.entry(status).or_default() += 1;
    }

    pub fn is_empty(&self) -> bool {
        *self == Statuses::default()
    }
}

/// Every kind of failure, counted separately; none is dropped. Fields missing from an older
/// report read as zero.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Errors {
    pub connect_refused: u64,
    pub connect_timeout: u64,
    /// No local port left for the destination (EADDRNOTAVAIL): the ephemeral-port range is
    /// used up; more source addresses (`--source`) help.
    pub no_local_port: u64,
    /// No file descriptor left (EMFILE, ENFILE): the open-files limit; `--procs` helps.
    pub no_descriptor: u64,
    /// Any other failure to connect (no route, ...).
    pub connect_other: u64,
    pub reset: u64,
    pub reply_timeout: u64,
    pub closed_by_peer: u64,
    pub bad_response: u64,
    pub verify_mismatch: u64,
    /// HTTP responses with a status not accepted (by default anything but 2xx).
    pub http_status: u64,
    /// A TLS handshake or session that failed (its reason in `tls.failures`), or a handshake
    /// that did not finish within the reply timeout.
    pub tls: u64,
    /// HTTP/2: streams the server reset (RST_STREAM) before their response ended (by code in
    /// `h2.resets`).
    pub h2_reset: u64,
    /// HTTP/2: streams above a GOAWAY's last stream identifier, which the server did not
    /// process (the GOAWAYs by code in `h2.goaways`).
    pub h2_refused: u64,
    /// WebSocket: upgrades answered with a status other than 101 (by status in `ws.refused`).
    pub ws_refused: u64,
    /// WebSocket: a 101 that was wrong (its Sec-WebSocket-Accept, Upgrade, Connection or
    /// extensions).
    pub ws_handshake: u64,
    /// WebSocket: server frames that broke RFC 6455 (by the close code sent in
    /// `ws.protocol_errors`).
    pub ws_protocol: u64,
    /// WebSocket: pings unanswered by the next ping (`--ping`).
    pub ws_ping_timeout: u64,
    /// WebSocket: this client's close at the end of the run, unanswered within the wait.
    pub ws_close_unanswered: u64,
    /// HTTP/3: a QUIC connection that failed, during its handshake or after (by reason in
    /// `quic.failures`), or whose server broke HTTP/3.
    pub quic: u64,
    /// HTTP/3: request streams the server reset before their response ended (by code in
    /// `quic.resets`).
    pub h3_reset: u64,
    /// Socket errors not in the classes above.
    pub other: u64,
    /// Exchanges in flight when `-d` ended and still unanswered after the wait for them (see
    /// [`AtEnd`]), nothing of their answer received (HTTP/2: every stream still open).
    pub unanswered_waiting: u64,
    /// The same, their answer begun but not finished (a response head or body cut off, an
    /// echo partly returned).
    pub unanswered_partial: u64,
    /// The same, not even sent whole: the server stopped reading (its receive window full).
    pub unanswered_unsent: u64,
    /// Connects still in progress after the wait at the end.
    pub connect_unfinished: u64,
    /// TLS handshakes (HTTP/2: the server's SETTINGS) still awaited after the wait at the end.
    pub handshake_unfinished: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.fields().iter().map(|(_, n)| n).sum()
    }

    fn fields(&self) -> [(&'static str, u64); 27] {
        [
            ("connect refused", self.connect_refused),
            ("connect timeout", self.connect_timeout),
            ("no local port", self.no_local_port),
            ("out of file descriptors", self.no_descriptor),
            ("connect failed", self.connect_other),
            ("reset", self.reset),
            ("reply timeout", self.reply_timeout),
            ("closed by peer", self.closed_by_peer),
            ("bad response", self.bad_response),
            ("verification mismatch", self.verify_mismatch),
            ("HTTP status", self.http_status),
            ("TLS failed", self.tls),
            ("HTTP/2 stream reset", self.h2_reset),
            ("HTTP/2 refused by GOAWAY", self.h2_refused),
            ("WebSocket upgrade refused", self.ws_refused),
            ("WebSocket 101 wrong", self.ws_handshake),
            ("WebSocket protocol error by the server", self.ws_protocol),
            ("WebSocket ping unanswered", self.ws_ping_timeout),
            ("WebSocket close unanswered at the end", self.ws_close_unanswered),
            ("QUIC connection failed", self.quic),
            ("HTTP/3 stream reset", self.h3_reset),
            ("other", self.other),
            ("unanswered at the end (nothing back)", self.unanswered_waiting),
            ("unanswered at the end (answer cut off)", self.unanswered_partial),
            ("unanswered at the end (not all sent: the server stopped reading)", self.unanswered_unsent),
            ("connect unfinished at the end", self.connect_unfinished),
            ("handshake unfinished at the end", self.handshake_unfinished),
        ]
    }

    /// A send that failed: reset (ECONNRESET, EPIPE) or other.
    pub fn count_send_error(&mut self, e: &std::io::Error) {
        match e.raw_os_error() {
            Some(libc::ECONNRESET | libc::EPIPE) => self.reset += 1,
            _ => self.other += 1,
        }
    }

    /// Add another's counts to these.
    pub fn add(&mut self, o: &Errors) {
        self.connect_refused += o.connect_refused;
        self.connect_timeout += o.connect_timeout;
        self.no_local_port += o.no_local_port;
        self.no_descriptor += o.no_descriptor;
        self.connect_other += o.connect_other;
        self.reset += o.reset;
        self.reply_timeout += o.reply_timeout;
        self.closed_by_peer += o.closed_by_peer;
        self.bad_response += o.bad_response;
        self.verify_mismatch += o.verify_mismatch;
        self.http_status += o.http_status;
        self.tls += o.tls;
        self.h2_reset += o.h2_reset;
        self.h2_refused += o.h2_refused;
        self.ws_refused += o.ws_refused;
        self.ws_handshake += o.ws_handshake;
        self.ws_protocol += o.ws_protocol;
        self.ws_ping_timeout += o.ws_ping_timeout;
        self.ws_close_unanswered += o.ws_close_unanswered;
        self.quic += o.quic;
        self.h3_reset += o.h3_reset;
        self.other += o.other;
        self.unanswered_waiting += o.unanswered_waiting;
        self.unanswered_partial += o.unanswered_partial;
        self.unanswered_unsent += o.unanswered_unsent;
        self.connect_unfinished += o.connect_unfinished;
        self.handshake_unfinished += o.handshake_unfinished;
    }
}

impl Statuses {
    /// Add another's counts to these.
    pub fn add(&mut self, o: &Statuses) {
        self.s1xx += o.s1xx;
        self.s2xx += o.s2xx;
        self.s3xx += o.s3xx;
        self.s4xx += o.s4xx;
        self.s5xx += o.s5xx;
        self.other += o.other;
        for (code, n) in &o.codes {
            *self.codes.entry(*code).or_default() += n;
        }
    }
}

impl Udp {
    pub fn is_empty(&self) -> bool {
        *self == Udp::default()
    }

    /// Add another's counts to these.
    pub fn add(&mut self, o: &Udp) {
        self.sent += o.sent;
        self.received += o.received;
        self.lost += o.lost;
        self.late += o.late;
        self.send_calls += o.send_calls;
        self.gso_datagrams += o.gso_datagrams;
        self.gro_datagrams += o.gro_datagrams;
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Udp {
    pub sent: u64,
    pub received: u64,
    /// Sent and not answered within the reply timeout, or, in flight when `-d` ended, within
    /// the wait for them (see [`AtEnd`]; an interrupted run counts those neither received nor
    /// lost).
    pub lost: u64,
    /// Answers that came after their datagram had been counted lost.
    pub late: u64,
    /// System calls that sent the datagrams (`sendmmsg`, and `sendto` where the kernel refused a
    /// GSO message): `sent / send_calls` datagrams per call.
    #[serde(default)]
    pub send_calls: u64,
    /// Datagrams the kernel took in GSO messages (`--udp-gso`), several per message.
    #[serde(default)]
    pub gso_datagrams: u64,
    /// Datagrams received coalesced by the kernel (`--udp-gro`), several per buffer.
    #[serde(default)]
    pub gro_datagrams: u64,
}

/// TLS: the handshakes, what they agreed on, and what failed; absent for a plaintext run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Tls {
    pub handshakes: Handshakes,
    /// Failed handshakes and sessions by reason (`certificate`, `protocol`, `peer_alert`,
    /// `incompatible`, `not_tls`, `timeout`).
    pub failures: std::collections::BTreeMap<String, u64>,
    /// The first failure in words (a certificate that failed verification says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// From the ClientHello to the end of the handshake, for every handshake that completed:
    /// apart from the requests' latency, which counts from the first request.
    pub handshake_latency: Latency,
    /// What the handshakes agreed on, with how many connections agreed on each.
    pub negotiated: Vec<Agreed>,
    /// The bytes the sockets moved (records, handshakes, alerts); `bytes` counts the
    /// application's.
    pub wire: ByteCounts,
}

/// One second of the measured phase: what completed and failed in it, the connections open and
/// the client's CPU at its end, and (from the interval log) its latency.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Second {
    /// Its start, in whole seconds from the start of the measured phase.
    pub t: u64,
    /// How long it lasted: 1 but for the last, which the run's end cuts short.
    pub length_s: f64,
    pub completed: u64,
    pub errors: u64,
    /// Connections open at its end.
    pub open: u64,
    /// Client CPU-seconds spent in it (user and system).
    pub cpu_s: f64,
    /// From the interval log (`--hdr-log`, `--html`); absent without one, and in a merge of
    /// reports whose logs were not merged with them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<SecondLatency>,
}

/// A second's latency percentiles, in µs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SecondLatency {
    pub count: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Open loop: the uncorrected p99 (from each actual send).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncorrected_p99_us: Option<f64>,
}

/// Add the seconds of another part of the run to these, second by second; latency is dropped
/// (percentiles do not add: the merged interval log gives them again).
pub fn merge_timelines(mine: &mut Vec<Second>, theirs: &[Second]) {
    for s in theirs {
        match mine.iter_mut().find(|m| m.t == s.t) {
            Some(m) => {
                m.length_s = m.length_s.max(s.length_s);
                m.completed += s.completed;
                m.errors += s.errors;
                m.open += s.open;
                m.cpu_s += s.cpu_s;
                m.latency = None;
            }
            None => mine.push(Second { latency: None, ..s.clone() }),
        }
    }
    mine.sort_by_key(|s| s.t);
}

/// HTTP/2 (`load http --http2`): what the connections and streams met; absent otherwise.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct H2 {
    /// `h2c` (prior knowledge, in clear) or `h2` (over TLS, by ALPN).
    pub protocol: String,
    /// Connections whose server answered the preface with its SETTINGS.
    pub connections: u64,
    /// Streams opened: one a request.
    pub streams: u64,
    /// The smallest SETTINGS_MAX_CONCURRENT_STREAMS a server advertised (absent: none did), which
    /// bounds the streams in flight on a connection whatever `--pipeline` asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_max_streams: Option<u32>,
    /// GOAWAY frames received, by error code (NO_ERROR is a server draining in good order).
    pub goaways: std::collections::BTreeMap<String, u64>,
    /// RST_STREAM frames received on open streams, by error code.
    pub resets: std::collections::BTreeMap<String, u64>,
    /// Connection errors (this client sent GOAWAY and closed), by kind; counted in
    /// `errors.bad_response`.
    pub connection_errors: std::collections::BTreeMap<String, u64>,
    /// The first connection error in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl H2 {
    pub fn add(&mut self, o: &H2) {
        if self.protocol.is_empty() {
            self.protocol.clone_from(&o.protocol);
        }
        self.connections += o.connections;
        self.streams += o.streams;
        self.server_max_streams = match (self.server_max_streams, o.server_max_streams) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (mine, theirs) in [
            (&mut self.goaways, &o.goaways),
            (&mut self.resets, &o.resets),
            (&mut self.connection_errors, &o.connection_errors),
        ] {
            for (code, n) in theirs {
                *mine.entry(code.clone()).or_default() += n;
            }
        }
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
    }

    /// The summary's lines for HTTP/2.
    fn summary(&self, s: &mut String, pipeline: Option<u64>) {
        let limit = match (pipeline, self.server_max_streams) {
            (Some(p), Some(m)) => format!(", streams in flight a connection: --pipeline {p}, server's limit {m}"),
            (Some(p), None) => format!(", streams in flight a connection: --pipeline {p}"),
            (None, Some(m)) => format!(", server's stream limit {m}"),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            s,
            "  http/2       {}, {} connections, {} streams{limit}",
            self.protocol, self.connections, self.streams
        );
        let list = |m: &std::collections::BTreeMap<String, u64>| {
            m.iter().map(|(code, n)| format!("{code} {n}")).collect::<Vec<_>>().join(", ")
        };
        if !self.goaways.is_empty() {
            let _ = writeln!(s, "  goaway       {} received", list(&self.goaways));
        }
        if !self.resets.is_empty() {
            let _ = writeln!(s, "  rst_stream   {} received", list(&self.resets));
        }
        if !self.connection_errors.is_empty() {
            let first = self.first_error.as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default();
            let _ = writeln!(s, "  h2 errors    {}{first}", list(&self.connection_errors));
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Handshakes {
    /// Full handshakes (a certificate sent and verified, a key exchanged).
    pub full: u64,
    /// Abbreviated handshakes that resumed an earlier session (a ticket or a session ID).
    pub resumed: u64,
    /// Handshakes that failed or did not finish.
    pub failed: u64,
}

/// One set of agreed parameters and the connections that agreed on it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Agreed {
    pub version: String,
    pub suite: String,
    pub alpn: Option<String>,
    pub connections: u64,
}

impl Tls {
    /// Add another's counts and histogram to these.
    pub fn add(&mut self, o: &Tls) -> Result<(), String> {
        self.add_counts(o);
        let mut latency = self.handshake_latency.histogram()?;
        latency.add(o.handshake_latency.histogram()?).map_err(|e| format!("{e:?}"))?;
        self.handshake_latency = Latency::from_histogram(&latency);
        Ok(())
    }

    /// Add another's counts to these (not the handshake latency).
    pub fn add_counts(&mut self, o: &Tls) {
        self.handshakes.full += o.handshakes.full;
        self.handshakes.resumed += o.handshakes.resumed;
        self.handshakes.failed += o.handshakes.failed;
        for (reason, n) in &o.failures {
            *self.failures.entry(reason.clone()).or_default() += n;
        }
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&o.first_failure);
        }
        for agreed in &o.negotiated {
            self.agreed(&agreed.version, &agreed.suite, agreed.alpn.as_deref(), agreed.connections);
        }
        self.wire.sent += o.wire.sent;
        self.wire.received += o.wire.received;
    }

    /// Count `n` connections that agreed on these parameters.
    pub fn agreed(&mut self, version: &str, suite: &str, alpn: Option<&str>, n: u64) {
        match self.negotiated.iter_mut().find(|a| a.version == version && a.suite == suite && a.alpn.as_deref() == alpn)
        {
            Some(a) => a.connections += n,
            None => {
                self.negotiated.push(Agreed {
                    version: version.to_owned(),
                    suite: suite.to_owned(),
                    alpn: alpn.map(str::to_owned),
                    connections: n,
                });
                self.negotiated.sort();
            }
        }
    }

    /// The summary's lines for TLS.
    fn summary(&self, s: &mut String) {
        let agreed: Vec<String> = self
            .negotiated
            .iter()
            .map(|a| {
                let alpn = a.alpn.as_deref().map_or_else(|| "no ALPN".to_owned(), |p| format!("ALPN {p}"));
                format!("{} {} {alpn} ({} connections)", a.version, a.suite, a.connections)
            })
            .collect();
        let agreed = if agreed.is_empty() { "no handshake completed".to_owned() } else { agreed.join("; ") };
        let _ = writeln!(s, "  tls          {agreed}");
        let h = &self.handshakes;
        let failures: Vec<String> = self.failures.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
        let failed = if failures.is_empty() { String::new() } else { format!(" ({})", failures.join(", ")) };
        let _ = writeln!(s, "  handshakes   {} full, {} resumed, {} failed{failed}", h.full, h.resumed, h.failed);
        if let Some(first) = &self.first_failure {
            let _ = writeln!(s, "  first failed {first}");
        }
        let l = &self.handshake_latency;
        if !l.is_empty() {
            let _ = writeln!(s, "  handshake    {}; not in the latency above)", l.quantiles());
        }
        let _ = writeln!(
            s,
            "  on the wire  {} sent, {} received (records and handshakes)",
            thousands(self.wire.sent),
            thousands(self.wire.received)
        );
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Cpu {
    pub user_s: f64,
    pub system_s: f64,
}

impl Cpu {
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// Rates derived from the totals; recomputed after every merge.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Rates {
    pub requests_per_s: f64,
    pub sent_bytes_per_s: f64,
    pub received_bytes_per_s: f64,
    /// Completed requests per second of the load generator's own CPU.
    pub requests_per_cpu_s: f64,
    /// The load generator's CPU use, as a percentage of one core.
    pub cpu_percent: f64,
    /// The load generator used 90% or more of the cores it could use (`client_cores`): its
    /// figures may measure itself rather than the server.
    #[serde(default)]
    pub client_bound: bool,
}

/// A client that uses this share of the cores it can use or more is called client-bound.
pub const CLIENT_BOUND_SHARE: f64 = 0.9;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub schema: u32,
    /// echo, http or udp.
    pub mode: String,
    pub target: String,
    /// The options used, as given.
    pub options: serde_json::Value,
    pub procs: u32,
    pub threads: u32,
    pub duration_s: f64,
    pub connections: Connections,
    pub requests: Requests,
    pub bytes: ByteCounts,
    /// HTTP only: absent from the JSON of echo and UDP runs (and of an HTTP run that got no
    /// response).
    #[serde(default, skip_serializing_if = "Statuses::is_empty")]
    pub statuses: Statuses,
    pub errors: Errors,
    /// The first bytes (at most [`SAMPLE_LEN`], escaped as Rust's `escape_ascii` does) of the
    /// first response counted in `errors.bad_response`: what the server said instead; absent
    /// when none was bad (and in reports from before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad_response: Option<String>,
    /// What was in flight when `-d` ended and what became of it; absent when nothing was.
    #[serde(default, skip_serializing_if = "AtEnd::is_empty")]
    pub at_end: AtEnd,
    /// UDP only: absent from the JSON of echo and HTTP runs (and of a UDP run that sent
    /// nothing).
    #[serde(default, skip_serializing_if = "Udp::is_empty")]
    pub udp: Udp,
    /// From each request's due time: in open loop (`-R`) its place in the schedule, so
    /// corrected for coordinated omission; in closed loop, from its send.
    pub latency: Latency,
    /// Open loop only: the same requests timed from their actual send, as a closed-loop tool
    /// would time them (what the correction corrected).
    #[serde(default, skip_serializing_if = "Latency::is_empty")]
    pub latency_uncorrected: Latency,
    /// Open loop only: how late each request left after its due time (0 when the schedule
    /// was kept).
    #[serde(default, skip_serializing_if = "Latency::is_empty")]
    pub schedule_slip: Latency,
    /// TCP handshakes; absent when none completed (always for UDP, which has none).
    #[serde(default, skip_serializing_if = "Latency::is_empty")]
    pub connect_latency: Latency,
    /// TLS runs only (https://, `echo --tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// HTTP/2 runs only (`load http --http2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2: Option<H2>,
    /// WebSocket runs only (`load ws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ws: Option<Ws>,
    /// HTTP/3 runs only (`load http --http3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<crate::quic_report::Quic>,
    /// The measured phase second by second.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Second>,
    pub cpu: Cpu,
    /// The cores the load generator could use: its threads, at most the CPUs it was allowed
    /// to run on; in a merge, added up per host and capped at that host's CPUs. 0 in reports
    /// from before it was recorded (never judged client-bound).
    #[serde(default)]
    pub client_cores: u32,
    /// The CPUs the load generator was allowed to run on (its affinity mask); in a merge of
    /// several hosts, their sum.
    #[serde(default)]
    pub cpus: u32,
    pub rates: Rates,
    /// `--connect-before-start`: the phase before the measured one, not in any other figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_start: Option<PreStart>,
    /// Why the run ended before its -d or -n did (interrupted, or no connection could be
    /// made); absent when it ran to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<EndedEarly>,
    /// The agent's part of a run split with `--segment I/N`; absent for a whole run (and in a
    /// merge of every segment, which is the whole run again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<crate::Segment>,
    /// The machine that ran it (for a merge of segments, see `agents`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// When the measured phase ran, in Unix seconds; in a merge, the window common to every
    /// report. Absent in reports from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// A merge (`load merge --allow-disjoint`) of reports whose windows did not overlap: each
    /// report's window, in order of start. Then `window` is absent (there is no common one)
    /// and `duration_s` is the time at least one of them was measuring (the union of their
    /// windows), which the rates are computed over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disjoint_windows: Vec<Window>,
    /// A merge of segments: every agent's segment, host, window and CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<Agent>,
}

/// When a run's measured phase began and ended, and when it was asked to begin.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Window {
    /// `--start-at`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_unix_s: Option<f64>,
    pub started_unix_s: f64,
    pub ended_unix_s: f64,
}

impl Window {
    /// How long after `--start-at` the run began (negative: before it); None without one.
    pub fn late_s(&self) -> Option<f64> {
        Some(self.started_unix_s - self.start_at_unix_s?)
    }
}

/// `--connect-before-start`: what was opened before the measured phase began.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PreStart {
    /// Connections asked for.
    pub wanted: u64,
    /// Connections open when the measured phase began.
    pub open: u64,
    /// From the run's start until every connection had connected or failed once.
    pub connect_s: f64,
    /// The load generator's CPU until the measured phase began.
    pub cpu: Cpu,
}

/// One agent of a segmented run, as its own report said.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Agent {
    pub segment: Option<crate::Segment>,
    pub host: Option<String>,
    pub window: Option<Window>,
    pub cpu: Cpu,
    pub completed: u64,
    #[serde(default)]
    pub cpu_percent: f64,
    #[serde(default)]
    pub client_cores: u32,
    #[serde(default)]
    pub client_bound: bool,
}

impl Agent {
    /// "1/3" and the host, or "?" and "an unnamed host".
    fn names(&self) -> (String, &str) {
        (
            self.segment.map_or_else(|| "?".to_owned(), |seg| seg.to_string()),
            self.host.as_deref().unwrap_or("an unnamed host"),
        )
    }
}

/// An agent that began more than this after `--start-at` is named in the merged summary.
pub const LATE_START_S: f64 = 0.1;

/// A wait at the end of -d shorter than this is not mentioned in the summary.
const WAIT_WORTH_SAYING_S: f64 = 0.01;

/// Why a run ended before its -d or -n.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum EndedEarly {
    /// SIGINT or SIGTERM.
    Interrupted,
    /// Nothing was open and no connect had succeeded for the connect timeout: the server is
    /// gone, and waiting longer would measure nothing.
    NoConnection { reason: String, waited_s: f64 },
    /// Every connection failed `--connect-retries` times in a row after its first attempt
    /// and was given up.
    AllGivenUp { retries: u32 },
}

impl std::fmt::Display for EndedEarly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndedEarly::Interrupted => f.write_str("interrupted (SIGINT or SIGTERM)"),
            EndedEarly::NoConnection { reason, waited_s } => {
                write!(f, "no connection open and none succeeded for {waited_s:.1} s: {reason}")
            }
            EndedEarly::AllGivenUp { retries } => {
                write!(
                    f,
                    "every connection was given up after {} failed attempts in a row (--connect-retries {retries})",
                    retries + 1
                )
            }
        }
    }
}

pub const SCHEMA: u32 = 1;

/// The cores a merged run could use, and its CPUs: reports of one host (its `--procs`
/// processes, say) share that host's CPUs, so their cores add up to at most those; reports of
/// different hosts (or of no named host) add up.
fn cores_by_host(reports: &[Report]) -> (u32, u32) {
    let mut hosts: Vec<(Option<&str>, u32, u32)> = Vec::new();
    for r in reports {
        match hosts.iter_mut().find(|(h, _, _)| h.is_some() && *h == r.host.as_deref()) {
            Some((_, cores, cpus)) => {
                *cores += r.client_cores;
                *cpus = (*cpus).max(r.cpus);
            }
            None => hosts.push((r.host.as_deref(), r.client_cores, r.cpus)),
        }
    }
    hosts.iter().fold((0, 0), |(cores, cpus), &(_, c, n)| (cores + if n > 0 { c.min(n) } else { c }, cpus + n))
}

/// Reports of a segmented run (`--segment I/N`) belong together only if every one is a segment
/// of the same N, each index appears once, none is missing, and they ran the same workload
/// against the same target. Reports without segments (side by side runs, `--procs` children)
/// are not checked.
fn check_segments(reports: &[Report]) -> Result<(), ReportError> {
    let Some(first) = reports.iter().find_map(|r| r.segment) else { return Ok(()) };
    let fail = |why: String| Err(ReportError::Segments(why));
    let count = first.count;
    let mut seen = vec![false; count as usize];
    for (i, r) in reports.iter().enumerate() {
        let Some(s) = r.segment else {
            return fail(format!("report {} is a whole run, the others segments of {count}", i + 1));
        };
        if s.count != count {
            return fail(format!("report {} is segment {s}, the others of {count}", i + 1));
        }
        if std::mem::replace(&mut seen[s.index as usize], true) {
            return fail(format!("segment {s} is given twice (report {})", i + 1));
        }
        if r.mode != reports[0].mode || r.target != reports[0].target {
            return fail(format!(
                "report {} ran {} against {}, report 1 {} against {}",
                i + 1,
                r.mode,
                r.target,
                reports[0].mode,
                reports[0].target
            ));
        }
        if r.run_options() != reports[0].run_options() {
            return fail(format!("report {} (segment {s}) ran with other options than report 1", i + 1));
        }
    }
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| !**s).map(|(i, _)| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        return fail(format!("segment {} missing: merge all {count} segments of the run", missing.join(", ")));
    }
    Ok(())
}

impl Report {
    pub fn compute_rates(&mut self) {
        let d = self.duration_s.max(1e-9);
        let cpu = self.cpu.total_s();
        self.rates = Rates {
            // Answers that came in the wait after -d are counted, but not in the rate over -d
            // (as wrk, which stops counting at the end).
            requests_per_s: self.requests.completed.saturating_sub(self.at_end.answered) as f64 / d,
            sent_bytes_per_s: self.bytes.sent as f64 / d,
            received_bytes_per_s: self.bytes.received as f64 / d,
            requests_per_cpu_s: if cpu > 0.0 { self.requests.completed as f64 / cpu } else { 0.0 },
            cpu_percent: 100.0 * cpu / d,
            client_bound: self.client_cores > 0 && cpu / d >= CLIENT_BOUND_SHARE * f64::from(self.client_cores),
        };
    }

    pub fn load(path: &str) -> Result<Report, ReportError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ReportError::Read { path: path.into(), error: source })?;
        let report: Report = serde_json::from_str(&text)
            .map_err(|e| ReportError::Format { path: path.into(), reason: e.to_string() })?;
        if report.schema != SCHEMA {
            return Err(ReportError::Format {
                path: path.into(),
                reason: format!("schema {} (expected {SCHEMA})", report.schema),
            });
        }
        let tls_latency = report.tls.as_ref().map(|t| &t.handshake_latency);
        let all = [&report.latency, &report.latency_uncorrected, &report.schedule_slip, &report.connect_latency];
        for latency in all.into_iter().chain(tls_latency) {
            latency.histogram().map_err(|reason| ReportError::Format { path: path.into(), reason })?;
        }
        Ok(report)
    }

    /// Merge reports of the processes of one run (`--procs`), which ran together by
    /// construction: counters and histograms add, the duration is the longest. Segments whose
    /// windows do not overlap at all are refused.
    pub fn merge(reports: &[Report]) -> Result<Report, ReportError> {
        Report::merge_with(reports, None)
    }

    /// Merge reports saved apart (`load merge`), which may not have run together: those whose
    /// windows do not overlap enough (see [`ran_apart`]) are refused, or with [`Apart::Allow`]
    /// merged over the time at least one of them ran, saying so (`disjoint_windows`).
    pub fn merge_runs(reports: &[Report], apart: Apart) -> Result<Report, ReportError> {
        Report::merge_with(reports, Some(apart))
    }

    fn merge_with(reports: &[Report], apart_runs: Option<Apart>) -> Result<Report, ReportError> {
        check_segments(reports)?;
        let mut merged = reports.first().cloned().unwrap_or_default();
        if reports.is_empty() {
            return Ok(merged);
        }
        merged.segment = None;
        if reports.iter().any(|r| r.segment.is_some()) {
            merged.agents = reports
                .iter()
                .map(|r| Agent {
                    segment: r.segment,
                    host: r.host.clone(),
                    window: r.window,
                    cpu: r.cpu.clone(),
                    completed: r.requests.completed,
                    cpu_percent: r.rates.cpu_percent,
                    client_cores: r.client_cores,
                    client_bound: r.rates.client_bound,
                })
                .collect();
            merged.agents.sort_by_key(|a| a.segment.map(|s| s.index));
            merged.host = None;
        }
        merged.disjoint_windows = Vec::new();
        let mut apart = None;
        let segments = reports.iter().any(|r| r.segment.is_some());
        // The window every report was measuring in: from the last start to the first end.
        if let Some(windows) = reports.iter().map(|r| r.window).collect::<Option<Vec<Window>>>() {
            let started = windows.iter().map(|w| w.started_unix_s).fold(f64::MIN, f64::max);
            let ended = windows.iter().map(|w| w.ended_unix_s).fold(f64::MAX, f64::min);
            let found = ran_apart(&windows);
            let (refuse, allow) = match apart_runs {
                Some(Apart::Refuse) => (found.is_some(), false),
                Some(Apart::Allow) => (false, found.is_some()),
                // Processes of one run: only segments with no common window at all.
                None => (segments && started >= ended, false),
            };
            if let (Some((late, early)), true) = (found, refuse || allow) {
                if refuse {
                    return Err(ReportError::Disjoint {
                        reports: if segments { "the segments" } else { "the reports" },
                        first: early + 1,
                        first_window: window_words(&windows[early]),
                        second: late + 1,
                        second_window: window_words(&windows[late]),
                        hint: if segments { "start them together, with --start-at, or " } else { "" },
                    });
                }
                let mut sorted = windows.clone();
                sorted.sort_by(|a, b| a.started_unix_s.total_cmp(&b.started_unix_s));
                apart = Some(union_s(&sorted));
                merged.disjoint_windows = sorted;
                merged.window = None;
            } else {
                merged.window = Some(Window {
                    start_at_unix_s: windows[0].start_at_unix_s,
                    started_unix_s: started,
                    ended_unix_s: ended,
                });
            }
        } else {
            merged.window = None;
        }
        let first = |reason| ReportError::Format { path: "report 1".into(), reason };
        let mut latency = merged.latency.histogram().map_err(first)?;
        let mut uncorrected = merged.latency_uncorrected.histogram().map_err(first)?;
        let mut slip = merged.schedule_slip.histogram().map_err(first)?;
        let mut connect = merged
            .connect_latency
            .histogram()
            .map_err(|reason| ReportError::Format { path: "report 1".into(), reason })?;
        for (i, r) in reports.iter().enumerate().skip(1) {
            if r.mode != merged.mode {
                return Err(ReportError::Mode(merged.mode.clone(), r.mode.clone()));
            }
            let bad = |reason| ReportError::Format { path: format!("report {}", i + 1), reason };
            latency.add(r.latency.histogram().map_err(bad)?).map_err(|e| bad(format!("{e:?}")))?;
            uncorrected.add(r.latency_uncorrected.histogram().map_err(bad)?).map_err(|e| bad(format!("{e:?}")))?;
            slip.add(r.schedule_slip.histogram().map_err(bad)?).map_err(|e| bad(format!("{e:?}")))?;
            connect.add(r.connect_latency.histogram().map_err(bad)?).map_err(|e| bad(format!("{e:?}")))?;
            let m = &mut merged;
            m.procs += r.procs;
            m.threads += r.threads;
            m.duration_s = m.duration_s.max(r.duration_s);
            m.connections.attempted += r.connections.attempted;
            m.connections.retries += r.connections.retries;
            m.connections.abandoned += r.connections.abandoned;
            m.connections.connected += r.connections.connected;
            m.connections.peak_open += r.connections.peak_open;
            m.connections.asked += r.connections.asked;
            m.connections.never_attempted.add(&r.connections.never_attempted);
            m.at_end.add(&r.at_end);
            m.requests.sent += r.requests.sent;
            m.requests.completed += r.requests.completed;
            m.bytes.sent += r.bytes.sent;
            m.bytes.received += r.bytes.received;
            m.statuses.add(&r.statuses);
            m.errors.add(&r.errors);
            m.udp.add(&r.udp);
            m.tls = match (m.tls.take(), &r.tls) {
                (Some(mut a), Some(b)) => {
                    a.add(b).map_err(bad)?;
                    Some(a)
                }
                (a, b) => a.or_else(|| b.clone()),
            };
            merge_timelines(&mut m.timeline, &r.timeline);
            m.h2 = match (m.h2.take(), &r.h2) {
                (Some(mut a), Some(b)) => {
                    a.add(b);
                    Some(a)
                }
                (a, b) => a.or_else(|| b.clone()),
            };
            m.quic = match (m.quic.take(), &r.quic) {
                (Some(mut a), Some(b)) => {
                    a.add(b).map_err(bad)?;
                    Some(a)
                }
                (a, b) => a.or_else(|| b.clone()),
            };
            m.ws = match (m.ws.take(), &r.ws) {
                (Some(mut a), Some(b)) => {
                    a.add(b);
                    Some(a)
                }
                (a, b) => a.or_else(|| b.clone()),
            };
            m.cpu.user_s += r.cpu.user_s;
            m.cpu.system_s += r.cpu.system_s;
            m.pre_start = match (m.pre_start.take(), &r.pre_start) {
                (Some(a), Some(b)) => Some(PreStart {
                    wanted: a.wanted + b.wanted,
                    open: a.open + b.open,
                    connect_s: a.connect_s.max(b.connect_s),
                    cpu: Cpu { user_s: a.cpu.user_s + b.cpu.user_s, system_s: a.cpu.system_s + b.cpu.system_s },
                }),
                (a, b) => a.or_else(|| b.clone()),
            };
        }
        (merged.client_cores, merged.cpus) = cores_by_host(reports);
        // The first process's reason to end early; every connection given up only if every
        // process gave all of its up (one that did, while the others ran on, did not end the run).
        let given_up = |r: &Report| matches!(r.ended_early, Some(EndedEarly::AllGivenUp { .. }));
        merged.ended_early = match reports.iter().find(|r| r.ended_early.is_some() && !given_up(r)) {
            Some(r) => r.ended_early.clone(),
            None if reports.iter().all(given_up) => reports.first().and_then(|r| r.ended_early.clone()),
            None => None,
        };
        merged.latency = Latency::from_histogram(&latency);
        merged.latency_uncorrected = Latency::from_histogram(&uncorrected);
        merged.schedule_slip = Latency::from_histogram(&slip);
        merged.connect_latency = Latency::from_histogram(&connect);
        if let Some(union) = apart {
            // Runs one after another: the rate is what they did over the time they ran, not
            // their sum as if side by side.
            merged.duration_s = union;
        }
        merged.first_bad_response =
            reports.iter().find_map(|r| r.first_bad_response.clone()).filter(|_| merged.errors.bad_response > 0);
        merged.compute_rates();
        Ok(merged)
    }

    /// The options that describe the whole run: everything but how this process was started
    /// (its segment, its --json path).
    fn run_options(&self) -> serde_json::Value {
        let mut options = self.options.clone();
        if let Some(map) = options.as_object_mut() {
            map.remove("segment");
        }
        options
    }

    /// Everything that failed: errors of every class, and UDP datagrams lost.
    pub fn failures(&self) -> u64 {
        self.errors.total() + self.udp.lost
    }

    /// The failures by kind, as "reset 2, lost 5"; empty when none. HTTP statuses not accepted
    /// are named with their codes, and bad responses with the first one's start.
    pub fn failure_list(&self) -> String {
        let mut listed: Vec<String> = self
            .errors
            .fields()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|&(name, n)| match name {
                "HTTP status" => self.unaccepted_words(),
                "bad response" => match &self.first_bad_response {
                    Some(first) => format!("{name} {} (first: \"{first}\")", thousands(n)),
                    None => format!("{name} {}", thousands(n)),
                },
                _ => format!("{name} {}", thousands(n)),
            })
            .collect();
        if self.udp.lost > 0 {
            listed.push(format!("lost {}", thousands(self.udp.lost)));
        }
        listed.join(", ")
    }

    /// "non-2xx responses 48,276 (404: 48,276)": the responses whose status was not accepted,
    /// with the commonest codes; "responses outside --accept-status 2xx,404 ..." when it was
    /// given.
    fn unaccepted_words(&self) -> String {
        let given = self.options.get("accept_status").and_then(serde_json::Value::as_str).filter(|a| *a != "2xx");
        let accepted = match given {
            Some(text) => crate::config::AcceptedStatuses::parse(text).unwrap_or_default(),
            None => crate::config::AcceptedStatuses::default(),
        };
        let mut codes: Vec<(u16, u64)> =
            self.statuses.codes.iter().filter(|(c, _)| !accepted.accepts(**c)).map(|(&c, &n)| (c, n)).collect();
        codes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        const SHOWN: usize = 4;
        let mut listed: Vec<String> =
            codes.iter().take(SHOWN).map(|(c, n)| format!("{c}: {}", thousands(*n))).collect();
        if codes.len() > SHOWN {
            let rest: u64 = codes[SHOWN..].iter().map(|(_, n)| n).sum();
            listed.push(format!("{} other codes: {}", codes.len() - SHOWN, thousands(rest)));
        }
        let codes = if listed.is_empty() { String::new() } else { format!(" ({})", listed.join(", ")) };
        let n = thousands(self.errors.http_status);
        match given {
            Some(text) => format!("responses outside --accept-status {text} {n}{codes}"),
            None => format!("non-2xx responses {n}{codes}"),
        }
    }

    /// What was in flight when -d ended and what became of it, in words; None when nothing
    /// was.
    fn at_end_words(&self, what: &str) -> Option<String> {
        let e = &self.at_end;
        let unfinished = self.errors.connect_unfinished + self.errors.handshake_unfinished;
        // A healthy run's last answers, come at once, are not worth a line (the JSON has them).
        if e.is_empty()
            || (e.unanswered == 0 && unfinished == 0 && e.waited_s < WAIT_WORTH_SAYING_S && !e.not_waited_for)
        {
            return None;
        }
        let mut parts = Vec::new();
        if e.in_flight > 0 {
            parts.push(format!("{} {what} in flight", thousands(e.in_flight)));
        }
        if e.connecting > 0 {
            parts.push(format!("{} connects or handshakes in progress", thousands(e.connecting)));
        }
        let held = parts.join(" and ");
        if e.not_waited_for {
            return Some(format!("{held} when the run was stopped: not waited for, not counted"));
        }
        let waited = human_us(e.waited_s * 1e6);
        let mut line = if e.waited_s + 1e-3 < e.grace_s {
            format!("{held} when -d ended; waited {waited} (at most {})", human_us(e.grace_s * 1e6))
        } else {
            format!("{held} when -d ended; waited {waited}, the most allowed")
        };
        if e.in_flight > 0 {
            let _ = write!(line, ": {} answered, {} unanswered", thousands(e.answered), thousands(e.unanswered));
        }
        if unfinished > 0 {
            let _ = write!(line, ", {} connects or handshakes unfinished", thousands(unfinished));
        }
        if e.never_served > 0 {
            let how = if self.mode == "udp" {
                "sockets never answered at all"
            } else {
                "connections never answered at all (connected, so taken by the server's kernel, but never served)"
            };
            let _ = write!(line, "; {} {how}", thousands(e.never_served));
        }
        Some(line)
    }

    /// The open-loop rate asked for with -R, in requests per second.
    pub fn asked_rate(&self) -> Option<f64> {
        self.options.get("rate").and_then(serde_json::Value::as_f64)
    }

    /// The human-readable summary. It shows only what was measured: no latency figures without
    /// samples, no block for a protocol that did not run.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let what = match self.mode.as_str() {
            "http" => "requests",
            "udp" => "datagrams",
            _ => "messages",
        };
        let waited = if self.at_end.waited_s >= WAIT_WORTH_SAYING_S {
            format!(" (then {} waiting for what was in flight)", human_us(self.at_end.waited_s * 1e6))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "{} load on {}: {:.2} s{waited}, {} process(es), {} thread(s)",
            self.mode, self.target, self.duration_s, self.procs, self.threads
        );
        for agent in &self.agents {
            let late = agent.window.and_then(|w| w.late_s());
            let (segment, host) = agent.names();
            let _ = writeln!(
                s,
                "  agent {segment} on {host}: {} completed, {:.2} s CPU ({:.0}% of a core){}{}{}",
                agent.completed,
                agent.cpu.total_s(),
                agent.cpu_percent,
                if agent.client_bound {
                    format!(", client-bound on its {} core(s)", agent.client_cores)
                } else {
                    String::new()
                },
                late.map_or_else(String::new, |l| format!(", began {:+.3} s from --start-at", l)),
                if late.is_some_and(|l| l > LATE_START_S) {
                    " (late: its window is shorter than the others')"
                } else {
                    ""
                },
            );
        }
        for warning in self.agent_warnings() {
            let _ = writeln!(s, "  warning      {warning}");
        }
        if !self.disjoint_windows.is_empty() {
            let windows: Vec<String> = self.disjoint_windows.iter().map(window_words).collect();
            let _ = writeln!(
                s,
                "  not together these runs' windows do not overlap ({}): merged with --allow-disjoint, the rates over the {:.2} s at least one was measuring, not as if side by side",
                windows.join("; "),
                self.duration_s
            );
        }
        if let Some(why) = &self.ended_early {
            let _ = writeln!(s, "  ended early  {why}");
        }
        if let Some(p) = &self.pre_start {
            let short = if p.open < p.wanted {
                format!(" (the measured phase began with {} fewer than asked)", p.wanted - p.open)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "  before start {} of {} connections open after {:.2} s, {:.2} s CPU; not in the figures below{short}",
                p.open,
                p.wanted,
                p.connect_s,
                p.cpu.total_s()
            );
        }
        let sockets = if self.mode == "udp" { "sockets" } else { "connections" };
        let peak = if self.procs > 1 { "open at most (the processes' peaks added)" } else { "open at most" };
        let retries = match self.connections.retries {
            0 => String::new(),
            n => format!(" ({n} of them retries after a failure, backing off)"),
        };
        let abandoned = match self.connections.abandoned {
            0 => String::new(),
            n => format!(", {n} given up (--connect-retries)"),
        };
        let never = &self.connections.never_attempted;
        let unopened = if never.is_empty() {
            String::new()
        } else {
            format!(
                "; {} of the {} asked (-c) never attempted: {}",
                thousands(never.total()),
                thousands(self.connections.asked),
                never.words(crate::config::MAX_PENDING_CONNECTS)
            )
        };
        let _ = writeln!(
            s,
            "  {sockets:<12} {} attempted{retries}, {} connected, {} {peak}{abandoned}{unopened}",
            thousands(self.connections.attempted),
            thousands(self.connections.connected),
            thousands(self.connections.peak_open)
        );
        if let Some(line) = self.at_end_words(what) {
            let _ = writeln!(s, "  at the end   {line}");
        }
        let _ = writeln!(
            s,
            "  {what:<12} {} sent, {} completed, {}/s",
            thousands(self.requests.sent),
            thousands(self.requests.completed),
            thousands(self.rates.requests_per_s.round() as u64)
        );
        if let Some(asked) = self.asked_rate() {
            let sent_rate = self.requests.sent as f64 / self.duration_s.max(1e-9);
            // Within 5 %: the schedule's first and last intervals are partly outside the run.
            let verdict = if sent_rate < 0.95 * asked {
                format!(
                    ": fell short by {:.0}% (the generator or the server could not keep up; latency still counts from the schedule)",
                    100.0 * (1.0 - sent_rate / asked)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "  rate         asked {}/s, sent {}/s{verdict}",
                thousands(asked.round() as u64),
                thousands(sent_rate.round() as u64)
            );
        }
        let _ = writeln!(
            s,
            "  bytes        {} sent ({}, {}/s), {} received ({}, {}/s)",
            thousands(self.bytes.sent),
            binary_bytes(self.bytes.sent),
            binary_bytes(self.rates.sent_bytes_per_s as u64),
            thousands(self.bytes.received),
            binary_bytes(self.bytes.received),
            binary_bytes(self.rates.received_bytes_per_s as u64)
        );
        if self.mode == "http" {
            let st = &self.statuses;
            let _ = writeln!(
                s,
                "  statuses     2xx {} 3xx {} 4xx {} 5xx {} other {}",
                thousands(st.s2xx),
                thousands(st.s3xx),
                thousands(st.s4xx),
                thousands(st.s5xx),
                thousands(st.other)
            );
        }
        if self.mode == "udp" {
            let u = &self.udp;
            let lost_pct = if u.sent > 0 { 100.0 * u.lost as f64 / u.sent as f64 } else { 0.0 };
            let _ = writeln!(
                s,
                "  datagrams    {:.0}/s sent, {:.0}/s received, {} lost ({lost_pct:.2}%), {} late",
                u.sent as f64 / self.duration_s.max(1e-9),
                u.received as f64 / self.duration_s.max(1e-9),
                u.lost,
                u.late
            );
        }
        let l = &self.latency;
        if l.is_empty() {
            let _ = writeln!(s, "  latency      none measured (no {what} completed)");
        } else {
            let _ = writeln!(
                s,
                "  latency      p50 {} p90 {} p99 {} p99.9 {} max {} (mean {}, stdev {}, {} samples)",
                human_us(l.p50_us),
                human_us(l.p90_us),
                human_us(l.p99_us),
                human_us(l.p999_us),
                human_us(l.max_us),
                human_us(l.mean_us),
                human_us(l.stdev_us),
                l.count
            );
            if self.asked_rate().is_some() {
                s.pop();
                let _ = writeln!(s, "; from the schedule, corrected)");
            }
        }
        for (label, l, what) in [
            ("uncorrected", &self.latency_uncorrected, "from each actual send, as a closed-loop tool times it"),
            ("slip", &self.schedule_slip, "how late sends left their schedule"),
        ] {
            if !l.is_empty() {
                let _ = writeln!(
                    s,
                    "  {label:<12} p50 {} p90 {} p99 {} p99.9 {} max {} ({what})",
                    human_us(l.p50_us),
                    human_us(l.p90_us),
                    human_us(l.p99_us),
                    human_us(l.p999_us),
                    human_us(l.max_us)
                );
            }
        }
        let c = &self.connect_latency;
        if !c.is_empty() {
            let _ = writeln!(
                s,
                "  connect      p50 {} p99 {} max {}",
                human_us(c.p50_us),
                human_us(c.p99_us),
                human_us(c.max_us)
            );
        }
        if let Some(tls) = &self.tls {
            tls.summary(&mut s);
        }
        if let Some(quic) = &self.quic {
            quic.summary(&mut s, (self.udp.gso_datagrams, self.udp.gro_datagrams));
        }
        if let Some(h2) = &self.h2 {
            // WebSocket over HTTP/2: --pipeline is messages a WebSocket, not streams.
            let pipeline =
                self.options.get("pipeline").and_then(serde_json::Value::as_u64).filter(|_| self.ws.is_none());
            h2.summary(&mut s, pipeline);
        }
        if let Some(ws) = &self.ws {
            ws.summary_answered(&mut s, if self.h2.is_some() { "200 to extended CONNECT" } else { "101" });
        }
        let failures = self.failures();
        let idle = self.options.get("idle").and_then(serde_json::Value::as_bool) == Some(true);
        if failures == 0 && self.requests.completed == 0 && idle && self.ws.as_ref().is_some_and(|w| w.upgrades > 0) {
            let _ = writeln!(s, "  errors       none (--idle: connections held, no message sent)");
        } else if failures == 0 && self.requests.completed == 0 {
            // Nothing failed, and nothing was done either: not a pass.
            let _ = writeln!(s, "  errors       none counted, but no {what} completed");
        } else if failures == 0 {
            let _ = writeln!(s, "  errors       none");
        } else {
            let _ = writeln!(s, "  errors       {}: {}", thousands(failures), self.failure_list());
        }
        let _ = write!(
            s,
            "  client CPU   {:.2} s user, {:.2} s system ({:.0}% of a core), {:.0} {what} per CPU-second",
            self.cpu.user_s, self.cpu.system_s, self.rates.cpu_percent, self.rates.requests_per_cpu_s
        );
        if self.rates.client_bound {
            let _ = write!(
                s,
                "\n  client-bound the load generator used {:.0}% of the {} core(s) it could use: these figures may measure it, not the server (add --procs, threads or machines)",
                self.rates.cpu_percent,
                self.client_cores
            );
        }
        s
    }

    /// A merge of segments: one line for each agent that was client-bound or started late,
    /// since either makes the merged figures less than the sum of equal parts.
    pub fn agent_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let name = |a: &Agent| {
            let (segment, host) = a.names();
            format!("agent {segment} ({host})")
        };
        for a in &self.agents {
            if a.client_bound {
                out.push(format!(
                    "{} was client-bound ({:.0}% of its {} core(s)): its share may be short of what was asked",
                    name(a),
                    a.cpu_percent,
                    a.client_cores
                ));
            }
            if let Some(late) = a.window.and_then(|w| w.late_s()).filter(|&l| l > LATE_START_S) {
                out.push(format!("{} began {late:.3} s after --start-at: the common window is shorter", name(a)));
            }
        }
        out
    }
}

pub fn human_bytes(per_s: f64) -> String {
    match per_s {
        b if b >= 1e9 => format!("{:.2} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.2} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.2} kB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

/// The most of a bad response the report keeps.
pub const SAMPLE_LEN: usize = 60;

/// The first [`SAMPLE_LEN`] bytes of `data`, escaped as Rust's `escape_ascii` does
/// (`SSH-2.0-OpenSSH_9.2p1\\r\\n`).
pub fn sample(data: &[u8]) -> String {
    data[..data.len().min(SAMPLE_LEN)].escape_ascii().to_string()
}

/// A count of bytes in binary units, as "1.23 GiB" (exact below a KiB: "512 B").
pub fn binary_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report_with(latencies_ns: &[u64], completed: u64) -> Report {
        let mut h = new_histogram();
        for &v in latencies_ns {
            h.record(v).unwrap();
        }
        let mut r = Report {
            schema: SCHEMA,
            mode: "http".into(),
            procs: 1,
            threads: 1,
            duration_s: 2.0,
            requests: Requests { sent: completed, completed },
            latency: Latency::from_histogram(&h),
            connect_latency: Latency::from_histogram(&h),
            cpu: Cpu { user_s: 0.5, system_s: 0.5 },
            ..Report::default()
        };
        r.compute_rates();
        r
    }

    /// A report of one process with `threads` threads on `host` (`cpus` CPUs) that used
    /// `cpu_s` of CPU in 2 s.
    fn agent(host: &str, cpus: u32, threads: u32, cpu_s: f64, segment: Option<crate::Segment>) -> Report {
        let mut r = report_with(&[1000], 10);
        (r.host, r.cpus, r.threads, r.client_cores) = (Some(host.into()), cpus, threads, threads.min(cpus));
        r.cpu = Cpu { user_s: cpu_s / 2.0, system_s: cpu_s / 2.0 };
        r.segment = segment;
        r.compute_rates();
        r
    }

    #[test]
    fn client_bound_is_judged_against_the_cores_it_could_use() {
        // 1.9 s of CPU in 2 s: 95% of one core.
        assert!(agent("a", 4, 1, 1.9, None).rates.client_bound);
        assert!(!agent("a", 4, 2, 1.9, None).rates.client_bound, "half of two cores");
        // Eight threads on two CPUs can use two cores, not eight.
        assert!(agent("a", 2, 8, 3.7, None).rates.client_bound);
        // A report from before the field (0 cores) is never called client-bound.
        let mut old = agent("a", 2, 1, 2.0, None);
        old.client_cores = 0;
        old.compute_rates();
        assert!(!old.rates.client_bound);
        let summary = agent("a", 4, 1, 1.9, None).summary();
        assert!(summary.contains("client-bound the load generator used 95% of the 1 core(s)"), "{summary}");
    }

    #[test]
    fn processes_of_one_host_share_its_cores_and_hosts_add_up() {
        // --procs 3 on one 2-CPU host, 2 threads each: 2 cores, not 6.
        let same: Vec<Report> = (0..3).map(|_| agent("box", 2, 2, 1.0, None)).collect();
        let m = Report::merge(&same).unwrap();
        assert_eq!((m.client_cores, m.cpus), (2, 2));
        // 3 s of CPU over 2 s on 2 cores: 75%, not bound; the same on one core each of
        // three hosts is bound.
        assert!(!m.rates.client_bound);
        let seg = |i| Some(crate::Segment { index: i, count: 3 });
        let hosts: Vec<Report> = (0..3).map(|i| agent(&format!("h{i}"), 1, 1, 1.9, seg(i))).collect();
        let m = Report::merge(&hosts).unwrap();
        assert_eq!((m.client_cores, m.cpus), (3, 3));
        assert!(m.rates.client_bound);
    }

    #[test]
    fn a_merge_names_each_client_bound_or_late_agent() {
        let seg = |i| Some(crate::Segment { index: i, count: 3 });
        let window =
            |late: f64| Window { start_at_unix_s: Some(100.0), started_unix_s: 100.0 + late, ended_unix_s: 110.0 };
        let mut agents =
            vec![agent("h0", 2, 2, 1.0, seg(0)), agent("h1", 2, 1, 1.95, seg(1)), agent("h2", 2, 2, 1.0, seg(2))];
        for (a, late) in agents.iter_mut().zip([0.01, 0.02, 0.5]) {
            a.window = Some(window(late));
        }
        let m = Report::merge(&agents).unwrap();
        let warnings = m.agent_warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("agent 1/3 (h1) was client-bound (98% of its 1 core(s))"), "{warnings:?}");
        assert!(warnings[1].starts_with("agent 2/3 (h2) began 0.500 s after --start-at"), "{warnings:?}");
        assert!(m.agents[1].client_bound && !m.agents[0].client_bound);
        assert!(m.summary().contains("  warning      agent 1/3 (h1) was client-bound"));
    }

    #[test]
    fn the_phase_before_start_merges_and_is_reported_apart() {
        let pre = |open, connect_s| PreStart { wanted: 10, open, connect_s, cpu: Cpu { user_s: 0.1, system_s: 0.2 } };
        let mut a = report_with(&[1000], 10);
        a.pre_start = Some(pre(10, 1.5));
        let mut b = report_with(&[1000], 10);
        b.pre_start = Some(pre(8, 2.5));
        let m = Report::merge(&[a, b]).unwrap();
        let p = m.pre_start.clone().unwrap();
        assert_eq!((p.wanted, p.open, p.connect_s), (20, 18, 2.5));
        assert!((p.cpu.total_s() - 0.6).abs() < 1e-9);
        // The measured CPU is only the two runs' own.
        assert!((m.cpu.total_s() - 2.0).abs() < 1e-9);
        let summary = m.summary();
        assert!(
            summary.contains("before start 18 of 20 connections open after 2.50 s")
                && summary.contains("began with 2 fewer than asked"),
            "{summary}"
        );
    }

    #[test]
    fn merge_adds_histograms_and_counters() {
        let a = report_with(&[1_000; 90], 90);
        let b = report_with(&[100_000; 10], 10);
        let m = Report::merge(&[a, b]).unwrap();
        assert_eq!(m.requests.completed, 100);
        assert_eq!(m.latency.count, 100);
        let h = m.latency.histogram().unwrap();
        assert_eq!(h.count_at(1_000), 90);
        assert_eq!(h.count_between(99_000, 101_000), 10);
        assert!((m.latency.p50_us - 1.0).abs() < 0.01);
        assert!((m.latency.p99_us - 100.0).abs() < 0.1);
        assert_eq!(m.procs, 2);
        assert!((m.rates.requests_per_s - 50.0).abs() < 1e-9, "rates come from merged totals");
        assert!((m.rates.requests_per_cpu_s - 50.0).abs() < 1e-9);
    }

    #[test]
    fn json_round_trip_keeps_the_histogram() {
        let r = report_with(&[5_000, 6_000, 7_000], 3);
        let text = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.latency.histogram().unwrap().len(), 3);
    }

    #[test]
    fn merge_refuses_mixed_modes() {
        let a = report_with(&[1], 1);
        let mut b = a.clone();
        b.mode = "echo".into();
        assert!(matches!(Report::merge(&[a, b]), Err(ReportError::Mode(..))));
    }

    fn keys(r: &Report) -> Vec<String> {
        let v = serde_json::to_value(r).unwrap();
        v.as_object().unwrap().keys().cloned().collect()
    }

    #[test]
    fn json_has_no_block_for_a_protocol_that_did_not_run() {
        let mut echo = report_with(&[1_000], 1);
        echo.mode = "echo".into();
        echo.connect_latency = Latency::from_histogram(&new_histogram());
        let k = keys(&echo);
        for absent in ["udp", "statuses", "connect_latency", "ended_early"] {
            assert!(!k.contains(&absent.to_owned()), "{absent} in an echo report: {k:?}");
        }
        let mut http = report_with(&[1_000], 1);
        http.statuses.count(200);
        assert!(keys(&http).contains(&"statuses".to_owned()));
        let mut udp = report_with(&[1_000], 1);
        udp.mode = "udp".into();
        udp.udp.sent = 1;
        assert!(keys(&udp).contains(&"udp".to_owned()));
        // A report without the blocks, or from before them (all-zero udp, no stdev, fewer
        // error classes), reads back.
        let text = serde_json::to_string(&echo).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&text).unwrap().udp, Udp::default());
        let mut old = serde_json::to_value(&echo).unwrap();
        old["udp"] = serde_json::json!({"sent": 0, "received": 0, "lost": 0, "late": 0});
        old["errors"].as_object_mut().unwrap().remove("http_status");
        old["latency"].as_object_mut().unwrap().remove("stdev_us");
        let back: Report = serde_json::from_value(old).unwrap();
        assert_eq!(back.errors.http_status, 0);
        assert_eq!(Report::merge(&[back.clone(), back]).unwrap().requests.completed, 2);
    }

    #[test]
    fn latency_standard_deviation_from_the_histogram() {
        let r = report_with(&[1_000, 3_000, 1_000, 3_000], 4);
        assert!((r.latency.mean_us - 2.0).abs() < 0.01, "{}", r.latency.mean_us);
        assert!((r.latency.stdev_us - 1.0).abs() < 0.01, "{}", r.latency.stdev_us);
        assert!(r.summary().contains("stdev 1us"), "{}", r.summary());
        // Merged: recomputed from the merged histogram, not averaged.
        let m = Report::merge(&[report_with(&[1_000; 2], 2), report_with(&[3_000; 2], 2)]).unwrap();
        assert!((m.latency.stdev_us - 1.0).abs() < 0.01, "{}", m.latency.stdev_us);
        assert!(report_with(&[], 0).summary().contains("latency      none measured"));
    }

    #[test]
    fn every_failure_shows_in_the_summary_and_survives_a_merge() {
        let mut a = report_with(&[1_000], 1);
        a.statuses.count(404);
        a.errors.http_status = 1;
        let mut b = report_with(&[1_000], 1);
        b.statuses.count(200);
        b.errors.reset = 2;
        let m = Report::merge(&[a.clone(), b]).unwrap();
        assert_eq!((m.statuses.s2xx, m.statuses.s4xx), (1, 1));
        assert_eq!((m.errors.http_status, m.errors.reset, m.failures()), (1, 2, 3));
        assert!(m.summary().contains("errors       3: reset 2, non-2xx responses 1 (404: 1)"), "{}", m.summary());
        assert!(a.summary().contains("4xx 1"), "{}", a.summary());

        let mut udp = report_with(&[1_000], 1);
        udp.mode = "udp".into();
        udp.udp = Udp { sent: 10, received: 5, lost: 5, late: 0, ..Udp::default() };
        assert_eq!(udp.failures(), 5);
        assert!(udp.summary().contains("errors       5: lost 5"), "{}", udp.summary());
    }

    /// What was in flight at the end of -d: said in a line, counted by kind, added up in a
    /// merge, and left out of the rate over -d; a healthy run's instant last answers are not
    /// worth a line.
    #[test]
    fn what_was_in_flight_at_the_end_is_said_counted_and_merged() {
        let mut a = report_with(&[1_000; 4], 4);
        a.requests.sent = 8;
        a.at_end = AtEnd {
            in_flight: 5,
            grace_s: 1.0,
            waited_s: 1.0,
            answered: 1,
            unanswered: 4,
            never_served: 3,
            ..AtEnd::default()
        };
        a.errors.unanswered_waiting = 3;
        a.errors.unanswered_partial = 1;
        a.compute_rates();
        assert_eq!(a.rates.requests_per_s, 1.5, "3 answered within the 2 s of -d");
        let summary = a.summary();
        assert!(summary.contains("2.00 s (then 1.00s waiting for what was in flight)"), "{summary}");
        assert!(summary.contains("5 requests in flight when -d ended; waited 1.00s, the most allowed: 1 answered, 4 unanswered; 3 connections never answered at all"), "{summary}");
        assert!(
            summary.contains(
                "errors       4: unanswered at the end (nothing back) 3, unanswered at the end (answer cut off) 1"
            ),
            "{summary}"
        );
        let mut b = report_with(&[1_000], 1);
        b.at_end = AtEnd { in_flight: 2, connecting: 1, grace_s: 2.0, waited_s: 0.5, answered: 2, ..AtEnd::default() };
        b.errors.connect_unfinished = 1;
        b.connections = Connections {
            asked: 10,
            never_attempted: Unopened { connect_rate: 6, ..Unopened::default() },
            ..Connections::default()
        };
        let m = Report::merge(&[a.clone(), b.clone()]).unwrap();
        assert_eq!((m.at_end.in_flight, m.at_end.connecting, m.at_end.answered, m.at_end.unanswered), (7, 1, 3, 4));
        assert_eq!((m.at_end.grace_s, m.at_end.waited_s), (2.0, 1.0));
        assert_eq!((m.errors.connect_unfinished, m.failures()), (1, 5));
        assert_eq!((m.connections.asked, m.connections.never_attempted.connect_rate), (10, 6));
        let summary = b.summary();
        assert!(
            summary.contains("6 of the 10 asked (-c) never attempted: --connect-rate had not reached them"),
            "{summary}"
        );
        // Older reports have none of it, and read as before.
        let old: Report = serde_json::from_str(&serde_json::to_string(&report_with(&[1_000], 1)).unwrap()).unwrap();
        assert!(old.at_end.is_empty() && old.connections.never_attempted.is_empty());
        let mut quick = report_with(&[1_000], 1);
        quick.at_end = AtEnd { in_flight: 20, grace_s: 1.0, waited_s: 0.0003, answered: 20, ..AtEnd::default() };
        assert!(!quick.summary().contains("at the end") && !quick.summary().contains("waiting"), "{}", quick.summary());
    }

    /// A run that completed nothing is never "errors none".
    #[test]
    fn nothing_completed_is_not_errors_none() {
        let mut r = report_with(&[], 0);
        r.requests.sent = 5;
        assert!(r.summary().contains("errors       none counted, but no requests completed"), "{}", r.summary());
    }

    #[test]
    fn a_rate_that_fell_short_says_so() {
        let mut r = report_with(&[1_000; 10], 10);
        r.options = serde_json::json!({ "rate": 1000.0 });
        assert!(r.summary().contains("asked 1,000/s, sent 5/s: fell short by 100%"), "{}", r.summary());
        r.options = serde_json::json!({ "rate": 5.0 });
        let text = r.summary();
        assert!(text.contains("asked 5/s, sent 5/s\n"), "{text}");
    }

    fn tls_block(full: u64, resumed: u64, handshake_ns: &[u64]) -> Tls {
        let mut h = new_histogram();
        for &v in handshake_ns {
            h.record(v).unwrap();
        }
        let mut tls = Tls {
            handshakes: Handshakes { full, resumed, failed: 0 },
            handshake_latency: Latency::from_histogram(&h),
            wire: ByteCounts { sent: 100, received: 1000 },
            ..Tls::default()
        };
        tls.agreed("TLSv1.3", "TLS13_AES_256_GCM_SHA384", Some("http/1.1"), full + resumed);
        tls
    }

    #[test]
    fn tls_blocks_merge_and_the_summary_names_failures() {
        let mut a = report_with(&[1_000], 1);
        a.tls = Some(tls_block(2, 1, &[2_000_000, 3_000_000, 500_000]));
        let mut b = report_with(&[1_000], 1);
        let mut tb = tls_block(1, 0, &[4_000_000]);
        tb.agreed("TLSv1.2", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", Some("http/1.1"), 1);
        tb.failures.insert("certificate".into(), 2);
        tb.handshakes.failed = 2;
        tb.first_failure = Some("certificate: invalid peer certificate: UnknownIssuer".into());
        b.tls = Some(tb);
        b.errors.tls = 2;
        let m = Report::merge(&[a, b]).unwrap();
        let tls = m.tls.as_ref().expect("merged TLS block");
        assert_eq!(tls.handshakes, Handshakes { full: 3, resumed: 1, failed: 2 });
        assert_eq!(tls.handshake_latency.count, 4);
        assert!((tls.handshake_latency.max_us - 4_000.0).abs() < 10.0, "{}", tls.handshake_latency.max_us);
        assert_eq!(tls.negotiated.len(), 2, "{:?}", tls.negotiated);
        let v13 = tls.negotiated.iter().find(|n| n.version == "TLSv1.3").expect("1.3");
        assert_eq!(v13.connections, 4);
        assert_eq!(tls.wire, ByteCounts { sent: 200, received: 2000 });
        let text = m.summary();
        assert!(text.contains("handshakes   3 full, 1 resumed, 2 failed (certificate 2)"), "{text}");
        assert!(text.contains("first failed certificate: invalid peer certificate: UnknownIssuer"), "{text}");
        assert!(text.contains("errors       2: TLS failed 2"), "{text}");
        let json = serde_json::to_string(&m).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        let (back, merged) = (back.tls.expect("TLS after a round trip"), m.tls.clone().expect("TLS"));
        assert_eq!(
            (back.handshakes, &back.negotiated, &back.handshake_latency.hdr),
            (merged.handshakes, &merged.negotiated, &merged.handshake_latency.hdr)
        );
        let plain = report_with(&[1_000], 1);
        assert!(serde_json::to_value(&plain).unwrap().get("tls").is_none(), "no TLS block without TLS");
        assert!(!plain.summary().contains("handshakes"));
    }

    fn windowed(started: f64, ended: f64, completed: u64) -> Report {
        let mut r = report_with(&[1_000], completed);
        r.duration_s = ended - started;
        r.window = Some(Window { start_at_unix_s: None, started_unix_s: started, ended_unix_s: ended });
        r.compute_rates();
        r
    }

    // 2026-11-26T18:00:00Z
    const T0: f64 = 1_795_716_000.0;

    #[test]
    fn runs_made_one_after_another_are_not_merged_without_being_asked() {
        // Two 10 s runs, the second 140 s after the first.
        let (a, b) = (windowed(T0, T0 + 10.0, 1_000_000), windowed(T0 + 150.0, T0 + 160.0, 1_000_000));
        let err = Report::merge_runs(&[a.clone(), b.clone()], Apart::Refuse).unwrap_err().to_string();
        // The processes of one run are together by construction: not judged.
        assert!(Report::merge(&[a.clone(), b.clone()]).is_ok());
        assert!(!err.contains('\n'), "{err}");
        for words in [
            "do not overlap",
            "report 1 ran 2026-11-26T18:00:00.000Z to 18:00:10.000Z (10.0 s)",
            "report 2 2026-11-26T18:02:30.000Z to 18:02:40.000Z (10.0 s)",
            "--allow-disjoint",
        ] {
            assert!(err.contains(words), "{words:?} in {err}");
        }
        // Asked: merged over the 20 s they ran, not the 10 s of one, nor the 160 s span.
        let m = Report::merge_runs(&[b, a], Apart::Allow).unwrap();
        assert_eq!(m.requests.completed, 2_000_000);
        assert!((m.duration_s - 20.0).abs() < 1e-9 && (m.rates.requests_per_s - 100_000.0).abs() < 1e-6, "{m:?}");
        assert_eq!(m.window, None);
        assert_eq!(m.disjoint_windows.len(), 2);
        assert!(m.disjoint_windows[0].started_unix_s < m.disjoint_windows[1].started_unix_s);
        let text = m.summary();
        assert!(
            text.contains(
                "windows do not overlap (2026-11-26T18:00:00.000Z to 18:00:10.000Z (10.0 s); 2026-11-26T18:02:30.000Z"
            ),
            "{text}"
        );
        assert!(
            text.contains("merged with --allow-disjoint, the rates over the 20.00 s at least one was measuring"),
            "{text}"
        );
        let back: Report = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.disjoint_windows, m.disjoint_windows);
    }

    #[test]
    fn runs_that_mostly_overlap_merge_silently_and_slight_ones_do_not() {
        // Agents started with --start-at a few ms apart: together, whatever --allow-disjoint.
        let skewed = [windowed(T0, T0 + 10.0, 10), windowed(T0 + 0.004, T0 + 10.004, 10)];
        for apart in [Apart::Refuse, Apart::Allow] {
            let m = Report::merge_runs(&skewed, apart).unwrap();
            assert!(m.disjoint_windows.is_empty() && m.window.is_some(), "{m:?}");
            assert!(!m.summary().contains("not together"), "{}", m.summary());
            assert!((m.duration_s - 10.0).abs() < 1e-9);
        }
        // A process that ended early, inside the others' window: together.
        assert!(
            Report::merge_runs(&[windowed(T0, T0 + 10.0, 10), windowed(T0 + 1.0, T0 + 2.0, 1)], Apart::Refuse).is_ok()
        );
        // Common window 6 s of the shortest 10 s: together; 4 s of it: apart.
        assert!(Report::merge_runs(&[windowed(T0, T0 + 10.0, 10), windowed(T0 + 4.0, T0 + 14.0, 10)], Apart::Refuse)
            .is_ok());
        let slight = [windowed(T0, T0 + 10.0, 10), windowed(T0 + 6.0, T0 + 16.0, 10)];
        assert!(Report::merge_runs(&slight, Apart::Refuse).unwrap_err().to_string().contains("do not overlap"));
        // Their union is 16 s, not the 20 s of their sum.
        let m = Report::merge_runs(&slight, Apart::Allow).unwrap();
        assert!((m.duration_s - 16.0).abs() < 1e-9, "{}", m.duration_s);
        // Reports from before windows were recorded: nothing to judge, merged as before.
        assert!(Report::merge_runs(&[report_with(&[1_000], 1), report_with(&[1_000], 1)], Apart::Refuse).is_ok());
    }

    #[test]
    fn statuses_not_accepted_are_named_by_code() {
        let mut r = report_with(&[1_000], 48_300);
        for _ in 0..48_276 {
            r.statuses.count(404);
        }
        for _ in 0..24 {
            r.statuses.count(200);
        }
        r.errors.http_status = 48_276;
        let text = r.summary();
        assert!(text.contains("errors       48,276: non-2xx responses 48,276 (404: 48,276)"), "{text}");
        assert!(!text.contains("HTTP status"), "{text}");
        // Per code in the JSON, beside the classes and the old field.
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["statuses"]["codes"]["404"], 48_276);
        assert_eq!(json["statuses"]["4xx"], 48_276);
        assert_eq!(json["errors"]["http_status"], 48_276);
        // A report from before the codes were counted still reads and merges.
        let mut old = json.clone();
        old["statuses"].as_object_mut().unwrap().remove("codes");
        let old: Report = serde_json::from_value(old).unwrap();
        let m = Report::merge(&[old, r.clone()]).unwrap();
        assert_eq!((m.statuses.codes[&404], m.errors.http_status), (48_276, 96_552));

        // With --accept-status the words follow it, and accepted codes are not listed.
        let mut r = report_with(&[1_000], 10);
        r.options = serde_json::json!({ "accept_status": "2xx,404" });
        for (code, n) in [(404, 3), (500, 4), (503, 2), (418, 1), (302, 5), (301, 1)] {
            for _ in 0..n {
                r.statuses.count(code);
            }
        }
        r.errors.http_status = 13;
        let text = r.summary();
        assert!(
            text.contains(
                "responses outside --accept-status 2xx,404 13 (302: 5, 500: 4, 503: 2, 301: 1, 1 other codes: 1)"
            ),
            "{text}"
        );
    }

    #[test]
    fn bytes_read_in_binary_units_and_counts_with_separators() {
        assert_eq!(binary_bytes(512), "512 B");
        assert_eq!(binary_bytes(1536), "1.50 KiB");
        assert_eq!(binary_bytes(3_246_391_296), "3.02 GiB");
        assert_eq!(
            (thousands(0), thousands(999), thousands(1_000), thousands(48_276)),
            ("0".into(), "999".into(), "1,000".into(), "48,276".into())
        );
        assert_eq!(thousands(1_234_567_890), "1,234,567,890");
        let mut r = report_with(&[1_000], 1_234_567);
        r.requests.sent = 1_234_600;
        r.bytes = ByteCounts { sent: 47_815_065, received: 1_320_702_444 };
        r.compute_rates();
        let text = r.summary();
        assert!(text.contains("requests     1,234,600 sent, 1,234,567 completed, 617,284/s"), "{text}");
        assert!(
            text.contains("bytes        47,815,065 sent (45.60 MiB, 22.80 MiB/s), 1,320,702,444 received (1.23 GiB, 629.76 MiB/s)"),
            "{text}"
        );
        // Exact in the JSON.
        assert_eq!(serde_json::to_value(&r).unwrap()["bytes"]["received"], 1_320_702_444u64);
    }

    #[test]
    fn a_bad_response_shows_how_it_began() {
        assert_eq!(sample(b"SSH-2.0-OpenSSH_9.2p1\r\n"), "SSH-2.0-OpenSSH_9.2p1\\r\\n");
        assert_eq!(sample(&[0x15, 0x03, 0x03, 0, 2, 2, 40]), "\\x15\\x03\\x03\\x00\\x02\\x02(");
        assert_eq!(sample(&[b'a'; 100]).len(), SAMPLE_LEN);
        let mut r = report_with(&[1_000], 1);
        r.errors.bad_response = 12;
        r.first_bad_response = Some(sample(b"SSH-2.0-OpenSSH_9.2p1\r\n"));
        assert!(r.summary().contains(r#"bad response 12 (first: "SSH-2.0-OpenSSH_9.2p1\r\n")"#), "{}", r.summary());
        let m = Report::merge(&[report_with(&[1_000], 1), r.clone()]).unwrap();
        assert_eq!(m.first_bad_response, r.first_bad_response);
        assert_eq!(serde_json::to_value(&m).unwrap()["first_bad_response"], r#"SSH-2.0-OpenSSH_9.2p1\r\n"#);
    }
}
