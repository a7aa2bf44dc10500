//! HTTP/2's words the HTTP service's configuration holds: the default limits and the totals
//! every HTTP/2 connection adds to as it ends. Apart from `h2.rs` (the session), which uses
//! the HTTP module's responses, so that the HTTP module's configuration does not import the
//! session that imports it.

use std::sync::Mutex;

use sockscale_h2::{Limits, Stats};

/// The server's default HTTP/2 limits: the stage's, with 128 concurrent streams.
pub fn default_limits() -> Limits {
    Limits { max_concurrent_streams: 128, ..Limits::default() }
}

/// What every HTTP/2 connection of a server counted, added as each one ends: the stage's own
/// [`Stats`], summed, and the connections. Behind a lock taken once a connection, when it ends.
#[derive(Debug, Default)]
pub struct H2Totals {
    counted: Mutex<(Stats, u64)>,
}

impl H2Totals {
    pub(crate) fn add(&self, s: &Stats) {
        let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
        counted.0.add(s);
        counted.1 += 1;
    }

    /// The counts now (connections counted once they end).
    pub fn snapshot(&self) -> (Stats, u64) {
        *self.counted.lock().unwrap_or_else(|e| e.into_inner())
    }
}
