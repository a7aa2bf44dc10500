//! HTTP/2's words the HTTP service's configuration holds: the default limits and the totals
//! every HTTP/2 connection adds to as it ends. Apart from `h2.rs` (the session), which uses
//! the HTTP module's responses, so that the HTTP module's configuration does not import the
//! session that imports it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use sockscale_h2::{Limit, Limits, Stats};

/// The server's default HTTP/2 limits: the stage's, with 128 concurrent streams.
pub fn default_limits() -> Limits {
    Limits { max_concurrent_streams: 128, ..Limits::default() }
}

/// What every HTTP/2 connection of a server counted, added as each one ends.
#[derive(Debug, Default)]
pub struct H2Totals {
    pub connections: AtomicU64,
    pub streams: AtomicU64,
    pub requests: AtomicU64,
    pub resets_received: AtomicU64,
    pub resets_sent: AtomicU64,
    pub malformed: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub goaways: AtomicU64,
    /// Each limit's hits, in the order of [`Limit::ALL`].
    pub limits: [AtomicU64; Limit::ALL.len()],
}

impl H2Totals {
    pub(crate) fn add(&self, s: &Stats) {
        self.connections.fetch_add(1, Relaxed);
        self.streams.fetch_add(s.streams, Relaxed);
        self.requests.fetch_add(s.requests, Relaxed);
        self.resets_received.fetch_add(s.resets_received, Relaxed);
        self.resets_sent.fetch_add(s.resets_sent, Relaxed);
        self.malformed.fetch_add(s.malformed, Relaxed);
        self.protocol_errors.fetch_add(s.protocol_errors, Relaxed);
        self.goaways.fetch_add(s.goaways, Relaxed);
        for (total, n) in self.limits.iter().zip(s.limits) {
            total.fetch_add(n, Relaxed);
        }
    }

    /// The counts now (connections counted once they end).
    pub fn snapshot(&self) -> (Stats, u64) {
        let mut s = Stats {
            streams: self.streams.load(Relaxed),
            requests: self.requests.load(Relaxed),
            resets_received: self.resets_received.load(Relaxed),
            resets_sent: self.resets_sent.load(Relaxed),
            malformed: self.malformed.load(Relaxed),
            protocol_errors: self.protocol_errors.load(Relaxed),
            goaways: self.goaways.load(Relaxed),
            ..Stats::default()
        };
        for (mine, total) in s.limits.iter_mut().zip(&self.limits) {
            *mine = total.load(Relaxed);
        }
        (s, self.connections.load(Relaxed))
    }
}
