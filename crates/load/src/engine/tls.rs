//! A load connection's TLS: the I/O-free client session of sockscale-tls between the socket
//! and the client's bytes. The engine reads ciphertext into its receive buffer, has it
//! decrypted in place, and hands the plaintext to the client; what the client would send is
//! encrypted into the connection's records, which the engine writes like any other bytes.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sockscale_tls::{ClientSession, Failure, Negotiated};

use crate::config::LoadTls;
use crate::report::{new_histogram, Latency, Tls};

/// Records encrypted ahead of the socket at most: past this the client's bytes wait unencrypted
/// (they are cheap to keep: a slice of the pattern or the request), so a connection whose
/// socket is full does not grow a buffer.
pub(super) const MAX_RECORDS_AHEAD: usize = 64 << 10;

/// One connection's session and the records it has not written yet.
pub(super) struct TlsConn {
    pub session: ClientSession,
    /// Records (a handshake flight, encrypted requests) not yet taken by the socket; empty and
    /// unallocated on an idle connection once they are sent.
    pub records: Vec<u8>,
    /// When the ClientHello left, in ns of the run: a handshake not done a reply timeout later
    /// has failed.
    pub started_ns: u64,
}

impl TlsConn {
    /// A session opened now, its ClientHello waiting in `records`.
    pub fn start(tls: &LoadTls, now: Instant, now_ns: u64) -> Result<Box<TlsConn>, Failure> {
        let mut records = Vec::new();
        let session = ClientSession::start(&tls.client, &tls.server_name, now, &mut records)?;
        Ok(Box::new(TlsConn { session, records, started_ns: now_ns }))
    }

    pub fn handshaking(&self) -> bool {
        self.session.is_handshaking()
    }

    /// Bytes written from the front of `records`; an emptied buffer is given back.
    pub fn written(&mut self, n: usize) {
        self.records.drain(..n);
        if self.records.is_empty() {
            self.records = Vec::new();
        }
    }
}

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
