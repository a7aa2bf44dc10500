//! The sizes of a bench run. The seed ran 7,000 flooding and 12,000 rate-limited connections
//! and pushed to 50,000 on three client machines; `full` is that scale, `default` is three
//! rounds of every model within eight minutes on a 2-core machine (the measured figure is in
//! the README and `bench -h`), `quick` is one round for a first look (no spread: it says so),
//! `tiny` is for tests.

use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub name: &'static str,
    /// Echo message length.
    pub msg_len: usize,
    /// Flood row: connections, each sending as fast as its echoes come back.
    pub flood_conns: u64,
    /// Rate-limited row: connections in blocks of `block`, each block at `block_rate` B/s.
    pub rate_conns: u64,
    pub block: u64,
    pub block_rate: u64,
    /// Maximum row: connections added in blocks at `ramp_rate` per second, rate-limited, up to
    /// `max_conns` or `max_time`, whichever comes first.
    pub max_conns: u64,
    pub ramp_rate: u64,
    pub max_time: Duration,
    /// How long each of the flood and rate-limited rows is measured, once connected.
    pub row_time: Duration,
    /// The seed-003 sweep.
    pub http_concurrency: Vec<u64>,
    /// The same sweep over TLS: keep-alive, and a new connection (a full handshake) per
    /// request, at these concurrencies.
    pub https_concurrency: Vec<u64>,
    /// The HTTP/2 sweep (h2c and h2 over TLS) at these concurrencies, `h2_streams` concurrent
    /// streams on each connection (h2load's `-m`).
    pub h2_concurrency: Vec<u64>,
    pub h2_streams: u64,
    /// The HTTP/3 sweep (`load http --http3`, QUIC over UDP) at these concurrencies,
    /// `h3_streams` concurrent request streams on each connection, as the HTTP/2 sweep drives
    /// its streams; on every model that serves HTTP/3, and Caddy when it is found.
    pub h3_concurrency: Vec<u64>,
    pub h3_streams: u64,
    /// The WebSocket echo sweep (`serve --proto ws`, `load ws --pipeline 1`, `msg_len`-byte
    /// binary messages) at these concurrencies, each measured for `http_time`.
    pub ws_concurrency: Vec<u64>,
    /// Idle WebSockets: this many upgraded and held with no message, each pinged every
    /// `ws_ping` and held until every one has been (the server's memory per connection).
    pub ws_idle_conns: u64,
    pub ws_ping: Duration,
    pub http_time: Duration,
    pub udp_time: Duration,
    /// Rounds: every row and point is measured this many times, each round going through
    /// every model in turn (ABC ABC ABC), so that drift in the machine hits them all alike.
    pub rounds: u32,
    /// A first look, and says so: too few rounds for a spread.
    pub first_look: bool,
}

impl Profile {
    pub fn named(name: &str) -> Option<Profile> {
        match name {
            "tiny" => Some(Profile {
                name: "tiny",
                msg_len: 512,
                flood_conns: 20,
                rate_conns: 40,
                block: 20,
                block_rate: 200_000,
                max_conns: 120,
                ramp_rate: 200,
                max_time: Duration::from_millis(1500),
                row_time: Duration::from_millis(500),
                http_concurrency: vec![10, 50],
                https_concurrency: vec![10],
                h2_concurrency: vec![10],
                h2_streams: 16,
                h3_concurrency: vec![10],
                h3_streams: 16,
                ws_concurrency: vec![10],
                ws_idle_conns: 100,
                ws_ping: Duration::from_millis(200),
                http_time: Duration::from_millis(300),
                udp_time: Duration::from_millis(300),
                rounds: 3,
                first_look: false,
            }),
            "quick" => Some(Profile {
                name: "quick",
                msg_len: 512,
                flood_conns: 1_000,
                rate_conns: 2_000,
                block: 1_000,
                block_rate: 200_000,
                max_conns: 4_000,
                ramp_rate: 4_000,
                max_time: Duration::from_secs(2),
                row_time: Duration::from_millis(500),
                http_concurrency: vec![10, 100],
                https_concurrency: vec![100],
                h2_concurrency: vec![100],
                h2_streams: 16,
                h3_concurrency: vec![100],
                h3_streams: 16,
                ws_concurrency: vec![100],
                ws_idle_conns: 2_000,
                ws_ping: Duration::from_millis(250),
                http_time: Duration::from_millis(300),
                udp_time: Duration::from_millis(300),
                rounds: 1,
                first_look: true,
            }),
            "default" => Some(Profile {
                name: "default",
                msg_len: 512,
                flood_conns: 1_000,
                rate_conns: 3_000,
                block: 1_000,
                block_rate: 200_000,
                max_conns: 8_000,
                ramp_rate: 4_000,
                max_time: Duration::from_secs(4),
                row_time: Duration::from_secs(1),
                // 10,000 is the full profile's: its points spend most of their time connecting,
                // and three rounds of them would not fit the default's eight minutes.
                http_concurrency: vec![10, 100, 1_000],
                // The verdict's concurrency; more points would not fit three rounds.
                https_concurrency: vec![100],
                h2_concurrency: vec![100],
                h2_streams: 16,
                // The verdict's concurrency, as for HTTP/2 (the goal is judged at c=100
                // with 16 streams).
                h3_concurrency: vec![100],
                h3_streams: 16,
                // The verdict's concurrency, as for HTTPS and HTTP/2: 10 and 1,000 too would add
                // about 30 s to the three rounds.
                // The verdict's concurrency, as for HTTPS and HTTP/2: 10 and 1,000 as well would
                // add about half a minute to the three rounds.
                ws_concurrency: vec![100],
                ws_idle_conns: 5_000,
                ws_ping: Duration::from_millis(250),
                http_time: Duration::from_millis(500),
                udp_time: Duration::from_millis(500),
                rounds: 3,
                first_look: false,
            }),
            "full" => Some(Profile {
                name: "full",
                msg_len: 512,
                flood_conns: 7_000,
                rate_conns: 12_000,
                block: 1_000,
                block_rate: 200_000,
                max_conns: 50_000,
                ramp_rate: 5_000,
                max_time: Duration::from_secs(20),
                // Three rounds of 5 s measure each row for 15 s (one round of 10 s did before),
                // and each sweep point for 6 s in three rounds of 2 s (one of 5 s before): the
                // run stays within about 45 minutes on 2 cores.
                row_time: Duration::from_secs(5),
                http_concurrency: vec![10, 100, 1_000, 10_000],
                https_concurrency: vec![10, 100, 1_000, 10_000],
                h2_concurrency: vec![10, 100, 1_000],
                h2_streams: 16,
                h3_concurrency: vec![10, 100, 1_000],
                h3_streams: 16,
                ws_concurrency: vec![10, 100, 1_000, 10_000],
                ws_idle_conns: 50_000,
                ws_ping: Duration::from_secs(1),
                http_time: Duration::from_secs(2),
                udp_time: Duration::from_secs(2),
                rounds: 3,
                first_look: false,
            }),
            _ => None,
        }
    }

    /// Points of the plain HTTP sweep: each concurrency with and without keep-alive.
    pub fn http_points(&self) -> usize {
        self.http_concurrency.len() * 2
    }

    /// Points of the HTTPS sweep: each concurrency with keep-alive and with a full handshake
    /// per request.
    pub fn https_points(&self) -> usize {
        self.https_concurrency.len() * 2
    }

    /// Points of the HTTP/2 sweep: each concurrency as h2c and as h2 over TLS.
    pub fn h2_points(&self) -> usize {
        self.h2_concurrency.len() * 2
    }

    /// Points of the HTTP/3 sweep: one at each concurrency.
    pub fn h3_points(&self) -> usize {
        self.h3_concurrency.len()
    }

    pub const NAMES: [&'static str; 4] = ["tiny", "quick", "default", "full"];
}
