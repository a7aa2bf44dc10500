//! A load thread's TLS figures (the sessions themselves are the connections', in
//! [`crate::connection`]).

use std::time::Duration;

use hdrhistogram::Histogram;
use sockscale_tls::Negotiated;

use crate::report::{new_histogram, Latency, Tls};

/// One thread's TLS figures: the report's block, and the handshake latency as a histogram
/// until the report encodes it.
#[derive(Debug)]
pub struct ThreadTls {
    pub counts: Tls,
    pub handshake_latency: Histogram<u64>,
}

impl Default for ThreadTls {
    fn default() -> Self {
        ThreadTls { counts: Tls::default(), handshake_latency: new_histogram() }
    }
}

impl ThreadTls {
    pub fn handshake_done(&mut self, took: Duration, negotiated: Option<Negotiated>) {
        self.handshake_latency.saturating_record((took.as_nanos() as u64).max(1));
        let Some(n) = negotiated else { return };
        if n.resumed {
            self.counts.handshakes.resumed += 1;
        } else {
            self.counts.handshakes.full += 1;
        }
        let alpn = n.alpn.as_deref().map(String::from_utf8_lossy);
        self.counts.agreed(n.version, &n.suite, alpn.as_deref(), 1);
    }

    /// A session failed: during its handshake, or after it (a bad record).
    pub fn failed(&mut self, reason: &'static str, detail: impl FnOnce() -> String, handshaking: bool) {
        *self.counts.failures.entry(reason.to_owned()).or_default() += 1;
        if handshaking {
            self.counts.handshakes.failed += 1;
        }
        if self.counts.first_failure.is_none() {
            self.counts.first_failure = Some(detail());
        }
    }

    pub fn add(&mut self, o: &ThreadTls) {
        self.counts.add_counts(&o.counts);
        // Same bounds on every histogram, so adding cannot fail.
        let _ = self.handshake_latency.add(&o.handshake_latency);
    }

    /// The report's block.
    pub fn report(&self) -> Tls {
        Tls { handshake_latency: Latency::from_histogram(&self.handshake_latency), ..self.counts.clone() }
    }
}
