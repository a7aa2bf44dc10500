//! A load connection's TLS: the I/O-free client session of sockscale-tls between the socket
//! and the client's bytes. The engine reads ciphertext into its receive buffer, has it
//! decrypted in place, and hands the plaintext to the client; what the client would send is
//! encrypted into the connection's records, which the engine writes like any other bytes.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sockscale_tls::{ClientSession, Failure, Negotiated};

use crate::config::LoadTls;
use crate::report::{new_histogram, ByteCounts, Handshakes, Latency, Tls};

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

/// One thread's TLS figures.
#[derive(Debug)]
pub struct ThreadTls {
    pub handshakes: Handshakes,
    pub failures: BTreeMap<&'static str, u64>,
    pub first_failure: Option<String>,
    pub handshake_latency: Histogram<u64>,
    pub negotiated: HashMap<(&'static str, String, Option<Vec<u8>>), u64>,
    pub wire: ByteCounts,
}

impl Default for ThreadTls {
    fn default() -> Self {
        ThreadTls {
            handshakes: Handshakes::default(),
            failures: BTreeMap::new(),
            first_failure: None,
            handshake_latency: new_histogram(),
            negotiated: HashMap::new(),
            wire: ByteCounts::default(),
        }
    }
}

impl ThreadTls {
    pub fn handshake_done(&mut self, took: Duration, negotiated: Option<Negotiated>) {
        self.handshake_latency.saturating_record((took.as_nanos() as u64).max(1));
        let Some(n) = negotiated else { return };
        if n.resumed {
            self.handshakes.resumed += 1;
        } else {
            self.handshakes.full += 1;
        }
        *self.negotiated.entry((n.version, n.suite, n.alpn)).or_default() += 1;
    }

    /// A session failed: during its handshake, or after it (a bad record).
    pub fn failed(&mut self, reason: &'static str, detail: impl FnOnce() -> String, handshaking: bool) {
        *self.failures.entry(reason).or_default() += 1;
        if handshaking {
            self.handshakes.failed += 1;
        }
        if self.first_failure.is_none() {
            self.first_failure = Some(detail());
        }
    }

    pub fn add(&mut self, o: &ThreadTls) {
        self.handshakes.full += o.handshakes.full;
        self.handshakes.resumed += o.handshakes.resumed;
        self.handshakes.failed += o.handshakes.failed;
        for (reason, n) in &o.failures {
            *self.failures.entry(reason).or_default() += n;
        }
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&o.first_failure);
        }
        // Same bounds on every histogram, so adding cannot fail.
        let _ = self.handshake_latency.add(&o.handshake_latency);
        for (key, n) in &o.negotiated {
            *self.negotiated.entry(key.clone()).or_default() += n;
        }
        self.wire.sent += o.wire.sent;
        self.wire.received += o.wire.received;
    }

    /// The report's block.
    pub fn report(&self) -> Tls {
        let mut tls = Tls {
            handshakes: self.handshakes,
            failures: self.failures.iter().map(|(reason, n)| ((*reason).to_owned(), *n)).collect(),
            first_failure: self.first_failure.clone(),
            handshake_latency: Latency::from_histogram(&self.handshake_latency),
            negotiated: Vec::new(),
            wire: self.wire.clone(),
        };
        for ((version, suite, alpn), n) in &self.negotiated {
            let alpn = alpn.as_deref().map(String::from_utf8_lossy);
            tls.agreed(version, suite, alpn.as_deref(), *n);
        }
        tls
    }
}
