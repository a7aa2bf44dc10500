//! Counters every model keeps, readable at any time from any thread.
//!
//! Counters are sharded: each worker increments its own cache line, so counting costs an
//! uncontended relaxed add. Readers sum the shards. The current-connection count is the one
//! global counter, because `--max-conns` must compare against the whole process.

use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

use serde::Serialize;

use std::sync::Arc;

use sockscale_h2::Limit as H2Limit;
use sockscale_proto::h2::H2Totals;
use sockscale_proto::quic::{HandshakeFailure as QuicFailure, LostReason as QuicLost, QuicCounts, QuicTotals};
use sockscale_proto::ws::{WsCounts, WsTotals};

use crate::policy::StormConfig;
use crate::storm_gate::StormGate;

use sockscale_tls::FailureReason;

use crate::policy::{CloseReason, Limit, Written};

/// One worker's counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    closed: [AtomicU64; CloseReason::ALL.len()],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    datagrams_in: AtomicU64,
    datagrams_out: AtomicU64,
    datagrams_dropped: AtomicU64,
    datagrams_overflowed: AtomicU64,
    udp_gro_buffers: AtomicU64,
    udp_gro_datagrams: AtomicU64,
    udp_gso_sends: AtomicU64,
    udp_gso_datagrams: AtomicU64,
    buffers_in_use: AtomicI64,
    tls_handshakes: AtomicU64,
    tls_resumed: AtomicU64,
    tls_handshake_micros: AtomicU64,
    tls_failed: [AtomicU64; FailureReason::ALL.len()],
    tls_file_bytes: AtomicU64,
    closes_unflushed: AtomicU64,
}

impl Counters {
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Relaxed);
    }
    pub fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }
    pub fn closed(&self, reason: CloseReason) {
        self.closed[reason as usize].fetch_add(1, Relaxed);
    }
    pub fn bytes_in(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Relaxed);
    }
    pub fn bytes_out(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Relaxed);
    }
    /// A write: its bytes, and the body file bytes it read and encrypted for TLS.
    pub fn written(&self, written: &Written) {
        self.bytes_out(written.bytes);
        if written.sealed > 0 {
            self.tls_file_bytes.fetch_add(written.sealed, Relaxed);
        }
    }
    /// Datagrams received, sent and dropped; the UDP path counts each where it happens, so
    /// most calls carry zeroes, which cost no atomic add.
    pub fn datagrams(&self, received: usize, sent: usize, dropped: usize) {
        for (counter, n) in
            [(&self.datagrams_in, received), (&self.datagrams_out, sent), (&self.datagrams_dropped, dropped)]
        {
            if n > 0 {
                counter.fetch_add(n as u64, Relaxed);
            }
        }
    }
    /// A TLS handshake completed, `took` after its first byte; `resumed`: not a full one.
    pub fn tls_handshake(&self, took: std::time::Duration, resumed: bool) {
        self.tls_handshakes.fetch_add(1, Relaxed);
        if resumed {
            self.tls_resumed.fetch_add(1, Relaxed);
        }
        self.tls_handshake_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }
    /// A TLS session failed (the connection is closed).
    pub fn tls_failed(&self, reason: FailureReason) {
        self.tls_failed[reason as usize].fetch_add(1, Relaxed);
    }
    /// A close waited in its closing phase for queued output to flush, and the phase's deadline
    /// came first: the output and the close's last bytes were not sent.
    pub fn close_unflushed(&self) {
        self.closes_unflushed.fetch_add(1, Relaxed);
    }
    /// Datagrams the kernel dropped before the server saw them (receive queue full).
    pub fn datagrams_overflowed(&self, n: u64) {
        self.datagrams_overflowed.fetch_add(n, Relaxed);
    }
    /// One received buffer held `datagrams` datagrams the kernel coalesced (UDP GRO).
    pub fn gro_coalesced(&self, datagrams: usize) {
        self.udp_gro_buffers.fetch_add(1, Relaxed);
        self.udp_gro_datagrams.fetch_add(datagrams as u64, Relaxed);
    }
    /// `messages` GSO messages were sent, carrying `datagrams` datagrams (UDP GSO).
    pub fn gso_sent(&self, messages: usize, datagrams: usize) {
        self.udp_gso_sends.fetch_add(messages as u64, Relaxed);
        self.udp_gso_datagrams.fetch_add(datagrams as u64, Relaxed);
    }
    pub(crate) fn buffer_taken(&self) {
        self.buffers_in_use.fetch_add(1, Relaxed);
    }
    pub(crate) fn buffer_returned(&self) {
        self.buffers_in_use.fetch_sub(1, Relaxed);
    }
}

#[derive(Debug)]
pub struct Stats {
    shards: Box<[Counters]>,
    current: AtomicUsize,
    /// Indexed by `Limit as usize`; rare events, so not sharded.
    limits: [AtomicU64; Limit::ALL.len()],
    /// `--abort-storm`: the process's one detector, fed by every close.
    storm: Option<StormGate>,
    /// `--active-set`: connections waiting for a place now, and places given by rotation.
    waiting: AtomicI64,
    rotations: AtomicU64,
    /// What the HTTP service's HTTP/2 connections counted, added as each ends.
    h2: Option<Arc<H2Totals>>,
    /// What the WebSocket connections counted: upgrades as they happen, the rest as each ends.
    ws: Option<Arc<WsTotals>>,
    /// What the QUIC endpoints (HTTP/3, `--http3`) counted.
    quic: Option<Arc<QuicTotals>>,
}

impl Stats {
    /// Report the WebSocket connections' counts (`ws_*`) from `totals`.
    pub fn with_ws(mut self, totals: Option<Arc<WsTotals>>) -> Self {
        self.ws = totals;
        self
    }

    /// Report the QUIC endpoints' counts (`quic_*`, `h3_*`) from `totals`.
    pub fn with_quic(mut self, totals: Option<Arc<QuicTotals>>) -> Self {
        self.quic = totals;
        self
    }

    /// Report the HTTP/2 connections' counts (`h2_*`) from `totals`.
    pub fn with_h2(mut self, totals: Option<Arc<H2Totals>>) -> Self {
        self.h2 = totals;
        self
    }

    pub fn new(shards: usize) -> Self {
        Self::with_storm(shards, None)
    }

    /// Stats whose closes feed the abort-storm policy `storm` (`--abort-storm`).
    pub fn with_storm(shards: usize, storm: Option<StormConfig>) -> Self {
        Stats {
            shards: (0..shards.max(1)).map(|_| Counters::default()).collect(),
            current: AtomicUsize::new(0),
            limits: Default::default(),
            storm: storm.map(StormGate::new),
            waiting: AtomicI64::new(0),
            rotations: AtomicU64::new(0),
            h2: None,
            quic: None,
            ws: None,
        }
    }

    /// With `--abort-storm-shed`: connection `fd` is open and served (after it was admitted);
    /// it may be shed from now until [`Stats::delist`].
    pub fn enlist(&self, fd: RawFd) {
        if let Some(gate) = &self.storm {
            gate.enlist(fd);
        }
    }

    #[cfg(test)]
    pub(crate) fn storm_gate(&self) -> Option<&StormGate> {
        self.storm.as_ref()
    }

    /// Whether connections are listed for shedding (`--abort-storm-shed`).
    pub fn sheds(&self) -> bool {
        self.storm.as_ref().is_some_and(StormGate::sheds)
    }

    /// Connection `fd` is about to close its descriptor: it can no longer be shed.
    pub fn delist(&self, fd: RawFd) {
        if let Some(gate) = &self.storm {
            gate.delist(fd);
        }
    }

    /// With `--abort-storm-shed` and `--active-set`: listed connection `fd` waits for a place
    /// (`true`, it is not shed) or has one again.
    pub fn shed_waiting(&self, fd: RawFd, waiting: bool) {
        if let Some(gate) = &self.storm {
            gate.shed_waiting(fd, waiting);
        }
    }

    /// `--active-set`: `delta` connections started (+) or stopped (-) waiting for a place.
    pub fn waiting_changed(&self, delta: i64) {
        self.waiting.fetch_add(delta, Relaxed);
    }

    /// `--active-set`: `n` places were given by rotation (idleness or a turn's end).
    pub fn rotated(&self, n: usize) {
        self.rotations.fetch_add(n as u64, Relaxed);
    }

    /// A connection counted by `try_open` has closed for `reason`: counted in `counters`, and,
    /// with `--abort-storm`, told to the storm policy (an abort may start a storm; any close
    /// may end one).
    pub fn closed(&self, counters: &Counters, reason: CloseReason) {
        self.close();
        counters.closed(reason);
        if let Some(gate) = &self.storm {
            gate.closed(reason, self.current());
        }
    }

    /// Whether an abort storm holds accepting now (`--abort-storm`); checked by every acceptor
    /// before it takes connections in. Ends the storm if the connections established have
    /// fallen below its threshold meanwhile.
    pub fn storm_holds(&self) -> bool {
        self.storm.as_ref().is_some_and(|gate| gate.holds(self.current()))
    }

    /// `limit` kept a connection out (a refusal), or paused accepting (an accept error).
    pub fn limit_hit(&self, limit: Limit) {
        self.limits[limit as usize].fetch_add(1, Relaxed);
    }

    /// The counters of shard `index` (wrapping), for a worker to keep.
    pub fn shard(&self, index: usize) -> &Counters {
        &self.shards[index % self.shards.len()]
    }

    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Count a new connection if that keeps the total within `max`; false means refuse it.
    pub fn try_open(&self, max: usize) -> bool {
        let before = self.current.fetch_add(1, Relaxed);
        if before >= max {
            self.current.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// A connection counted by `try_open` has closed.
    pub fn close(&self) {
        self.current.fetch_sub(1, Relaxed);
    }

    pub fn current(&self) -> usize {
        self.current.load(Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot { connections: self.current() as u64, ..Snapshot::default() };
        if let Some(gate) = &self.storm {
            (s.storm_pauses, s.storm_resumes, s.storm_shed) = gate.counts();
        }
        s.waiting = self.waiting.load(Relaxed).max(0) as u64;
        if let Some(h2) = &self.h2 {
            let (counted, connections) = h2.snapshot();
            s.h2 = H2Counts {
                connections,
                streams: counted.streams,
                requests: counted.requests,
                resets_received: counted.resets_received,
                resets_sent: counted.resets_sent,
                malformed: counted.malformed,
                protocol_errors: counted.protocol_errors,
                goaways: counted.goaways,
                limits: counted.limits,
            };
        }
        if let Some(ws) = &self.ws {
            s.ws = ws.snapshot();
        }
        if let Some(quic) = &self.quic {
            s.quic = quic.snapshot();
            s.quic_connections = quic.open() as u64;
        }
        s.active_rotations = self.rotations.load(Relaxed);
        for (total, count) in s.limits.iter_mut().zip(&self.limits) {
            *total = count.load(Relaxed);
        }
        for c in self.shards.iter() {
            s.accepted += c.accepted.load(Relaxed);
            s.refused += c.refused.load(Relaxed);
            for (total, count) in s.closed.iter_mut().zip(&c.closed) {
                *total += count.load(Relaxed);
            }
            s.bytes_in += c.bytes_in.load(Relaxed);
            s.bytes_out += c.bytes_out.load(Relaxed);
            s.datagrams_in += c.datagrams_in.load(Relaxed);
            s.datagrams_out += c.datagrams_out.load(Relaxed);
            s.datagrams_dropped += c.datagrams_dropped.load(Relaxed);
            s.datagrams_overflowed += c.datagrams_overflowed.load(Relaxed);
            s.udp_gro_buffers += c.udp_gro_buffers.load(Relaxed);
            s.udp_gro_datagrams += c.udp_gro_datagrams.load(Relaxed);
            s.udp_gso_sends += c.udp_gso_sends.load(Relaxed);
            s.udp_gso_datagrams += c.udp_gso_datagrams.load(Relaxed);
            s.buffers_in_use += c.buffers_in_use.load(Relaxed);
            s.tls_handshakes += c.tls_handshakes.load(Relaxed);
            s.tls_resumed += c.tls_resumed.load(Relaxed);
            s.tls_handshake_micros += c.tls_handshake_micros.load(Relaxed);
            for (total, count) in s.tls_failed.iter_mut().zip(&c.tls_failed) {
                *total += count.load(Relaxed);
            }
            s.tls_file_bytes += c.tls_file_bytes.load(Relaxed);
            s.closes_unflushed += c.closes_unflushed.load(Relaxed);
        }
        s
    }
}

/// The counters at one moment, summed over shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub accepted: u64,
    pub refused: u64,
    /// Indexed by `CloseReason as usize`.
    pub closed: [u64; CloseReason::ALL.len()],
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub datagrams_dropped: u64,
    /// Datagrams the kernel dropped because the socket's receive queue was full (SO_RXQ_OVFL).
    pub datagrams_overflowed: u64,
    /// Received buffers holding several datagrams the kernel coalesced (UDP GRO), and the
    /// datagrams in them.
    pub udp_gro_buffers: u64,
    pub udp_gro_datagrams: u64,
    /// Messages sent carrying several datagrams for the kernel to cut (UDP GSO), and the
    /// datagrams in them.
    pub udp_gso_sends: u64,
    pub udp_gso_datagrams: u64,
    pub connections: u64,
    pub buffers_in_use: i64,
    /// Indexed by `Limit as usize`: refusals and accept pauses each limit caused.
    pub limits: [u64; Limit::ALL.len()],
    /// Abort storms that paused accepting, and the resumes after them (`--abort-storm`).
    pub storm_pauses: u64,
    pub storm_resumes: u64,
    /// Connections closed as a storm began (`--abort-storm-shed`).
    pub storm_shed: u64,
    /// Connections held without a read posted, waiting for a place in the active set, now
    /// (`--active-set`), and places given by rotation (idleness or a turn's end).
    pub waiting: u64,
    pub active_rotations: u64,
    /// TLS handshakes completed, those of them resumed, and their summed time (first byte to
    /// done), in microseconds.
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    pub tls_handshake_micros: u64,
    /// Indexed by `FailureReason as usize`: TLS sessions that failed.
    pub tls_failed: [u64; FailureReason::ALL.len()],
    /// Body file bytes read and encrypted in chunks for TLS: under TLS sendfile is off (it
    /// would send the page cache in clear, and kernel TLS is not built).
    pub tls_file_bytes: u64,
    /// Orderly closes that waited for their queued output and met their deadline (the send
    /// timeout, or the drain's) first: ended without their last bytes (a 408, close_notify).
    pub closes_unflushed: u64,
    /// HTTP/2 connections that ended, and what they counted.
    pub h2: H2Counts,
    /// WebSocket upgrades and refusals, and what the connections that ended counted.
    #[serde(skip)]
    pub ws: WsCounts,
    /// What the QUIC endpoints counted (HTTP/3), and their connections open now.
    #[serde(skip)]
    pub quic: QuicCounts,
    pub quic_connections: u64,
}

/// What the HTTP/2 connections that ended counted (`sockscale_h2::Stats`, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct H2Counts {
    pub connections: u64,
    /// Streams the peers opened (refused ones included), and complete requests answered.
    pub streams: u64,
    pub requests: u64,
    pub resets_received: u64,
    /// Stream errors this server sent (RST_STREAM).
    pub resets_sent: u64,
    pub malformed: u64,
    /// Connection errors for protocol violations (GOAWAY with an error code).
    pub protocol_errors: u64,
    pub goaways: u64,
    /// Indexed by `sockscale_h2::Limit as usize`: each limit the stage enforced (refused
    /// streams, 431, 413, rapid reset, CONTINUATION, PING, SETTINGS and empty-frame floods,
    /// header timeouts, window stalls).
    pub limits: [u64; H2Limit::ALL.len()],
}

impl Snapshot {
    pub fn closed(&self, reason: CloseReason) -> u64 {
        self.closed[reason as usize]
    }

    pub fn closed_total(&self) -> u64 {
        self.closed.iter().sum()
    }

    pub fn limit(&self, limit: Limit) -> u64 {
        self.limits[limit as usize]
    }

    /// Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        let mut out = String::with_capacity(2048);
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, String)]| {
            out.push_str(&format!("# HELP sockscale_{name} {help}\n# TYPE sockscale_{name} {kind}\n"));
            for (labels, value) in samples {
                out.push_str(&format!("sockscale_{name}{labels} {value}\n"));
            }
        };
        let one = |v: u64| vec![(String::new(), v.to_string())];
        metric("accepted_total", "counter", "Connections accepted.", &one(self.accepted));
        metric("refused_total", "counter", "Connections refused because the server was full.", &one(self.refused));
        let closed: Vec<_> = CloseReason::ALL
            .iter()
            .map(|r| (format!("{{reason=\"{}\"}}", r.name()), self.closed(*r).to_string()))
            .collect();
        metric("closed_total", "counter", "Connections closed, by reason.", &closed);
        metric("received_bytes_total", "counter", "Bytes received from clients.", &one(self.bytes_in));
        metric("sent_bytes_total", "counter", "Bytes sent to clients.", &one(self.bytes_out));
        metric("datagrams_received_total", "counter", "UDP datagrams received.", &one(self.datagrams_in));
        metric("datagrams_sent_total", "counter", "UDP datagrams sent.", &one(self.datagrams_out));
        metric("datagrams_dropped_total", "counter", "UDP replies dropped.", &one(self.datagrams_dropped));
        metric(
            "datagrams_overflowed_total",
            "counter",
            "UDP datagrams the kernel dropped because the receive queue was full.",
            &one(self.datagrams_overflowed),
        );
        metric(
            "udp_gro_buffers_total",
            "counter",
            "Received UDP buffers that held several datagrams coalesced by the kernel (GRO).",
            &one(self.udp_gro_buffers),
        );
        metric(
            "udp_gro_datagrams_total",
            "counter",
            "UDP datagrams received coalesced by the kernel (GRO).",
            &one(self.udp_gro_datagrams),
        );
        metric(
            "udp_gso_sends_total",
            "counter",
            "UDP messages sent carrying several datagrams for the kernel to cut (GSO).",
            &one(self.udp_gso_sends),
        );
        metric(
            "udp_gso_datagrams_total",
            "counter",
            "UDP datagrams sent in GSO messages.",
            &one(self.udp_gso_datagrams),
        );
        let limits: Vec<_> =
            Limit::ALL.iter().map(|l| (format!("{{limit=\"{}\"}}", l.name()), self.limit(*l).to_string())).collect();
        metric(
            "limit_hits_total",
            "counter",
            "Connections refused, and accept pauses, by the limit that caused them.",
            &limits,
        );
        metric(
            "storm_pauses_total",
            "counter",
            "Abort storms that paused accepting (--abort-storm).",
            &one(self.storm_pauses),
        );
        metric(
            "storm_resumes_total",
            "counter",
            "Resumes of accepting after an abort storm.",
            &one(self.storm_resumes),
        );
        metric(
            "storm_shed_total",
            "counter",
            "Connections closed as an abort storm began (--abort-storm-shed).",
            &one(self.storm_shed),
        );
        metric(
            "active_set_waiting",
            "gauge",
            "Connections held without a read, waiting for a place in the active set (--active-set).",
            &one(self.waiting),
        );
        metric(
            "active_set_rotations_total",
            "counter",
            "Places in the active set given by rotation: an idle connection or one whose turn ended.",
            &one(self.active_rotations),
        );
        metric("tls_handshakes_total", "counter", "TLS handshakes completed.", &one(self.tls_handshakes));
        metric("tls_resumed_total", "counter", "TLS handshakes that resumed a session.", &one(self.tls_resumed));
        metric(
            "tls_handshake_seconds_total",
            "counter",
            "Time TLS handshakes took, first byte to done, summed.",
            &[(String::new(), format!("{:.6}", self.tls_handshake_micros as f64 / 1e6))],
        );
        let failed: Vec<_> = FailureReason::ALL
            .iter()
            .map(|r| (format!("{{reason=\"{}\"}}", r.name()), self.tls_failed[*r as usize].to_string()))
            .collect();
        metric("tls_failed_total", "counter", "TLS sessions that failed, by reason.", &failed);
        metric(
            "tls_file_bytes_total",
            "counter",
            "Body file bytes read and encrypted in chunks for TLS (sendfile is off under TLS: no kernel TLS).",
            &one(self.tls_file_bytes),
        );
        metric(
            "closes_unflushed_total",
            "counter",
            "Orderly closes whose queued output (and last bytes: a 408, close_notify) met the send or drain deadline unsent.",
            &one(self.closes_unflushed),
        );
        let h2 = &self.h2;
        metric("h2_connections_total", "counter", "HTTP/2 connections that ended.", &one(h2.connections));
        metric("h2_streams_total", "counter", "HTTP/2 streams the peers opened.", &one(h2.streams));
        metric("h2_requests_total", "counter", "HTTP/2 requests answered.", &one(h2.requests));
        metric("h2_resets_received_total", "counter", "HTTP/2 RST_STREAMs received.", &one(h2.resets_received));
        metric("h2_resets_sent_total", "counter", "HTTP/2 RST_STREAMs sent.", &one(h2.resets_sent));
        metric("h2_malformed_total", "counter", "HTTP/2 requests refused as malformed.", &one(h2.malformed));
        metric(
            "h2_protocol_errors_total",
            "counter",
            "HTTP/2 connection errors for protocol violations.",
            &one(h2.protocol_errors),
        );
        metric("h2_goaways_total", "counter", "HTTP/2 GOAWAYs sent.", &one(h2.goaways));
        let h2_limits: Vec<_> = H2Limit::ALL
            .iter()
            .map(|l| (format!("{{limit=\"{}\"}}", l.name()), h2.limits[*l as usize].to_string()))
            .collect();
        metric(
            "h2_limit_hits_total",
            "counter",
            "HTTP/2 limits enforced, by kind (floods end the connection: closed reason hostile).",
            &h2_limits,
        );
        let ws = &self.ws;
        metric(
            "ws_upgrades_total",
            "counter",
            "WebSocket upgrades answered 101 (over HTTP/2: extended CONNECTs answered 200).",
            &one(ws.upgrades),
        );
        metric(
            "ws_refused_total",
            "counter",
            "WebSocket upgrade requests refused, by status (426: no upgrade asked on a WebSocket port, or another version; 503: during a drain).",
            &[
                ("{status=\"400\"}".to_string(), ws.refused_400.to_string()),
                ("{status=\"426\"}".to_string(), ws.refused_426.to_string()),
                ("{status=\"405\"}".to_string(), ws.refused_405.to_string()),
                ("{status=\"503\"}".to_string(), ws.refused_503.to_string()),
            ],
        );
        metric("ws_connections_total", "counter", "WebSocket connections that ended.", &one(ws.ended));
        metric(
            "ws_h2_streams_total",
            "counter",
            "WebSockets over HTTP/2 (RFC 8441): extended CONNECTs answered 200 (also in ws_upgrades_total), and those the peer reset.",
            &[
                ("{event=\"opened\"}".to_string(), ws.upgrades_h2.to_string()),
                ("{event=\"reset\"}".to_string(), ws.resets_h2.to_string()),
            ],
        );
        let st = &ws.stats;
        let way = |received: u64, sent: u64| {
            vec![
                ("{way=\"received\"}".to_string(), received.to_string()),
                ("{way=\"sent\"}".to_string(), sent.to_string()),
            ]
        };
        metric(
            "ws_messages_total",
            "counter",
            "WebSocket messages, each way (counted as connections end).",
            &way(st.messages_received, st.messages_sent),
        );
        metric(
            "ws_message_bytes_total",
            "counter",
            "WebSocket message payload bytes, uncompressed, each way (counted as connections end).",
            &way(st.bytes_received, st.bytes_sent),
        );
        metric("ws_pings_total", "counter", "WebSocket pings, each way.", &way(st.pings_received, st.pings_sent));
        metric("ws_pongs_total", "counter", "WebSocket pongs, each way.", &way(st.pongs_received, st.pongs_sent));
        metric(
            "ws_ping_timeouts_total",
            "counter",
            "WebSocket connections closed for a ping not answered (--ws-ping).",
            &one(st.ping_timeouts),
        );
        let mut closes = Vec::new();
        for (way, counts) in [("received", &st.closes_received), ("sent", &st.closes_sent)] {
            for (code, n) in counts.iter() {
                closes.push((format!("{{way=\"{way}\",code=\"{code}\"}}"), n.to_string()));
            }
            closes.push((format!("{{way=\"{way}\",code=\"other\"}}"), counts.other.to_string()));
        }
        metric("ws_closes_total", "counter", "WebSocket close frames by code, each way (1005: no code).", &closes);
        let q = &self.quic;
        metric("quic_connections", "gauge", "QUIC connections open now.", &one(self.quic_connections));
        metric(
            "quic_handshakes_total",
            "counter",
            "QUIC handshakes completed; kind=resumed counts session tickets accepted (an upper bound), kind=0rtt those whose early data was accepted.",
            &[
                ("{kind=\"all\"}".to_string(), q.handshakes.to_string()),
                ("{kind=\"resumed\"}".to_string(), q.resumed.to_string()),
                ("{kind=\"0rtt\"}".to_string(), q.handshakes_0rtt.to_string()),
            ],
        );
        let failed: Vec<_> = QuicFailure::ALL
            .iter()
            .map(|r| (format!("{{reason=\"{}\"}}", r.name()), q.failed[*r as usize].to_string()))
            .collect();
        metric("quic_handshakes_failed_total", "counter", "QUIC handshakes that failed, by reason.", &failed);
        let lost: Vec<_> = QuicLost::ALL
            .iter()
            .map(|r| (format!("{{reason=\"{}\"}}", r.name()), q.lost[*r as usize].to_string()))
            .collect();
        metric(
            "quic_connections_closed_total",
            "counter",
            "Established QUIC connections that ended, by reason.",
            &lost,
        );
        metric("quic_retries_total", "counter", "QUIC stateless Retry packets sent (--quic-retry).", &one(q.retries));
        metric(
            "quic_refused_total",
            "counter",
            "New QUIC connections refused (CONNECTION_REFUSED), by why.",
            &[
                ("{why=\"busy\"}".to_string(), q.refused_busy.to_string()),
                ("{why=\"draining\"}".to_string(), q.refused_draining.to_string()),
            ],
        );
        metric(
            "quic_deferred_total",
            "counter",
            "New QUIC connections' Initials dropped while the handshake budget was in use (the client sends them again).",
            &one(q.deferred),
        );
        metric(
            "quic_datagrams_ignored_total",
            "counter",
            "UDP datagrams that belonged to no QUIC connection and started none.",
            &one(q.datagrams_ignored),
        );
        metric(
            "quic_steering_refused_total",
            "counter",
            "UDP ports whose kernel refused to steer QUIC packets by connection ID (served by the 4-tuple hash).",
            &one(q.steering_refused),
        );
        metric(
            "quic_endpoint_responses_total",
            "counter",
            "Datagrams the QUIC endpoint answered itself (version negotiation, stateless reset).",
            &one(q.endpoint_responses),
        );
        metric(
            "quic_packets_sent_total",
            "counter",
            "QUIC packets sent (counted as connections end).",
            &one(q.packets_sent),
        );
        metric(
            "quic_packets_lost_total",
            "counter",
            "QUIC packets declared lost, their frames sent again (counted as connections end).",
            &one(q.packets_lost),
        );
        metric("h3_requests_total", "counter", "HTTP/3 requests answered.", &one(q.requests));
        metric(
            "h3_errors_total",
            "counter",
            "HTTP/3 errors: streams reset by the peer, stream errors (a malformed request), connection errors.",
            &[
                ("{kind=\"stream_reset\"}".to_string(), q.streams_reset.to_string()),
                ("{kind=\"stream\"}".to_string(), q.stream_errors.to_string()),
                ("{kind=\"connection\"}".to_string(), q.connection_errors.to_string()),
            ],
        );
        metric(
            "h3_bodies_too_large_total",
            "counter",
            "HTTP/3 request bodies past --max-body-bytes: answered 413, the rest refused with STOP_SENDING.",
            &one(q.bodies_too_large),
        );
        metric("connections", "gauge", "Connections open now.", &one(self.connections));
        metric(
            "buffers_in_use",
            "gauge",
            "Receive buffers taken from the pool now.",
            &[(String::new(), self.buffers_in_use.to_string())],
        );
        out
    }
}

impl Snapshot {
    /// Every counter as `(name, value)`, in the order of the `key=value` lines.
    pub fn fields(&self) -> Vec<(String, i64)> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut fields: Vec<(String, i64)> = vec![
            ("accepted".into(), n(self.accepted)),
            ("refused".into(), n(self.refused)),
            ("connections".into(), n(self.connections)),
        ];
        fields.extend(CloseReason::ALL.iter().map(|r| (format!("closed_{}", r.name()), n(self.closed(*r)))));
        fields.extend([
            ("bytes_in".into(), n(self.bytes_in)),
            ("bytes_out".into(), n(self.bytes_out)),
            ("datagrams_in".into(), n(self.datagrams_in)),
            ("datagrams_out".into(), n(self.datagrams_out)),
            ("datagrams_dropped".into(), n(self.datagrams_dropped)),
            ("datagrams_overflowed".into(), n(self.datagrams_overflowed)),
            ("udp_gro_buffers".into(), n(self.udp_gro_buffers)),
            ("udp_gro_datagrams".into(), n(self.udp_gro_datagrams)),
            ("udp_gso_sends".into(), n(self.udp_gso_sends)),
            ("udp_gso_datagrams".into(), n(self.udp_gso_datagrams)),
            ("buffers_in_use".into(), self.buffers_in_use),
        ]);
        fields.extend(Limit::ALL.iter().map(|l| (format!("limit_{}", l.name()), n(self.limit(*l)))));
        let mean_us = self.tls_handshake_micros.checked_div(self.tls_handshakes).unwrap_or(0);
        fields.extend([
            ("storm_pauses".into(), n(self.storm_pauses)),
            ("storm_resumes".into(), n(self.storm_resumes)),
            ("storm_shed".into(), n(self.storm_shed)),
            ("waiting".into(), n(self.waiting)),
            ("active_rotations".into(), n(self.active_rotations)),
            ("tls_handshakes".into(), n(self.tls_handshakes)),
            ("tls_resumed".into(), n(self.tls_resumed)),
            ("tls_handshake_mean_us".into(), n(mean_us)),
        ]);
        fields.extend(
            FailureReason::ALL.iter().map(|r| (format!("tls_failed_{}", r.name()), n(self.tls_failed[*r as usize]))),
        );
        fields.push(("tls_file_bytes".into(), n(self.tls_file_bytes)));
        fields.push(("closes_unflushed".into(), n(self.closes_unflushed)));
        let h2 = &self.h2;
        fields.extend([
            ("h2_connections".into(), n(h2.connections)),
            ("h2_streams".into(), n(h2.streams)),
            ("h2_requests".into(), n(h2.requests)),
            ("h2_resets_received".into(), n(h2.resets_received)),
            ("h2_resets_sent".into(), n(h2.resets_sent)),
            ("h2_malformed".into(), n(h2.malformed)),
            ("h2_protocol_errors".into(), n(h2.protocol_errors)),
            ("h2_goaways".into(), n(h2.goaways)),
        ]);
        fields.extend(H2Limit::ALL.iter().map(|l| (format!("h2_limit_{}", l.name()), n(h2.limits[*l as usize]))));
        let (ws, st) = (&self.ws, &self.ws.stats);
        fields.extend([
            ("ws_upgrades".into(), n(ws.upgrades)),
            ("ws_refused_400".into(), n(ws.refused_400)),
            ("ws_refused_426".into(), n(ws.refused_426)),
            ("ws_refused_405".into(), n(ws.refused_405)),
            ("ws_refused_503".into(), n(ws.refused_503)),
            ("ws_connections".into(), n(ws.ended)),
            ("ws_upgrades_h2".into(), n(ws.upgrades_h2)),
            ("ws_resets_h2".into(), n(ws.resets_h2)),
            ("ws_messages_in".into(), n(st.messages_received)),
            ("ws_messages_out".into(), n(st.messages_sent)),
            ("ws_bytes_in".into(), n(st.bytes_received)),
            ("ws_bytes_out".into(), n(st.bytes_sent)),
            ("ws_pings_in".into(), n(st.pings_received)),
            ("ws_pings_out".into(), n(st.pings_sent)),
            ("ws_pongs_in".into(), n(st.pongs_received)),
            ("ws_pongs_out".into(), n(st.pongs_sent)),
            ("ws_ping_timeouts".into(), n(st.ping_timeouts)),
        ]);
        for (way, counts) in [("in", &st.closes_received), ("out", &st.closes_sent)] {
            fields.extend(counts.iter().map(|(code, c)| (format!("ws_closes_{way}_{code}"), n(c))));
            fields.push((format!("ws_closes_{way}_other"), n(counts.other)));
        }
        let q = &self.quic;
        let mean_us = q.handshake_micros.checked_div(q.handshakes).unwrap_or(0);
        fields.extend([
            ("quic_connections".into(), n(self.quic_connections)),
            ("quic_handshakes".into(), n(q.handshakes)),
            ("quic_resumed".into(), n(q.resumed)),
            ("quic_0rtt".into(), n(q.handshakes_0rtt)),
            ("quic_handshake_mean_us".into(), n(mean_us)),
        ]);
        fields.extend(QuicFailure::ALL.iter().map(|r| (format!("quic_failed_{}", r.name()), n(q.failed[*r as usize]))));
        fields.extend(QuicLost::ALL.iter().map(|r| (format!("quic_closed_{}", r.name()), n(q.lost[*r as usize]))));
        fields.extend([
            ("quic_retries".into(), n(q.retries)),
            ("quic_refused_busy".into(), n(q.refused_busy)),
            ("quic_refused_draining".into(), n(q.refused_draining)),
            ("quic_deferred".into(), n(q.deferred)),
            ("quic_datagrams_ignored".into(), n(q.datagrams_ignored)),
            ("quic_steering_refused".into(), n(q.steering_refused)),
            ("quic_endpoint_responses".into(), n(q.endpoint_responses)),
            ("quic_packets_sent".into(), n(q.packets_sent)),
            ("quic_packets_lost".into(), n(q.packets_lost)),
            ("quic_bytes_lost".into(), n(q.bytes_lost)),
            ("h3_requests".into(), n(q.requests)),
            ("h3_streams_reset".into(), n(q.streams_reset)),
            ("h3_stream_errors".into(), n(q.stream_errors)),
            ("h3_connection_errors".into(), n(q.connection_errors)),
            ("h3_bodies_too_large".into(), n(q.bodies_too_large)),
        ]);
        fields
    }

    /// The line a person reads every few seconds: accepted, refused and connections always,
    /// then only the counters that are not 0 (of a hundred, a run moves a handful). The
    /// `Display` form (`serve --stats-all`, and the `final` line scripts read) has every one.
    pub fn nonzero(&self) -> NonZero<'_> {
        NonZero(self)
    }
}

/// How many of [`Snapshot::fields`] lead every line, 0 or not.
const ALWAYS_SHOWN: usize = 3;

/// [`Snapshot::nonzero`]'s line.
pub struct NonZero<'a>(&'a Snapshot);

impl fmt::Display for NonZero<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = self.0.fields();
        let shown = fields.iter().enumerate().filter(|(i, (_, v))| *i < ALWAYS_SHOWN || *v != 0);
        for (k, (_, (name, value))) in shown.enumerate() {
            write!(f, "{}{name}={value}", if k == 0 { "" } else { " " })?;
        }
        Ok(())
    }
}

/// One line of every counter as `key=value` pairs, for the final report and `--stats-all`.
impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, (name, value)) in self.fields().iter().enumerate() {
            write!(f, "{}{name}={value}", if k == 0 { "" } else { " " })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_sum_and_max_conns_is_enforced() {
        let stats = Stats::new(2);
        stats.shard(0).closed(CloseReason::Idle);
        stats.shard(3).closed(CloseReason::Idle);
        stats.shard(1).bytes_in(10);
        assert!(stats.try_open(2));
        assert!(stats.try_open(2));
        assert!(!stats.try_open(2));
        stats.close();
        let s = stats.snapshot();
        assert_eq!(s.closed(CloseReason::Idle), 2);
        assert_eq!(s.bytes_in, 10);
        assert_eq!(s.connections, 1);
        assert!(s.prometheus().contains("sockscale_closed_total{reason=\"idle\"} 2\n"));
        assert!(s.to_string().contains("closed_idle=2"));
        stats.limit_hit(Limit::Threads);
        stats.limit_hit(Limit::Threads);
        let s = stats.snapshot();
        assert_eq!(s.limit(Limit::Threads), 2);
        assert!(s.to_string().contains(" limit_threads=2 "), "{s}");
        assert!(s.prometheus().contains("sockscale_limit_hits_total{limit=\"threads\"} 2\n"));
    }

    #[test]
    fn the_nonzero_line_keeps_the_head_and_what_moved() {
        let stats = Stats::new(1);
        stats.shard(0).bytes_in(10);
        stats.shard(0).closed(CloseReason::Peer);
        let s = stats.snapshot();
        assert_eq!(s.nonzero().to_string(), "accepted=0 refused=0 connections=0 closed_peer=1 bytes_in=10");
        let all = s.to_string();
        assert_eq!(all.split(' ').count(), s.fields().len());
        assert!(all.contains(" limit_threads=0 ") && all.contains(" closed_peer=1 "), "{all}");
    }
}
