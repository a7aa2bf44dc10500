//! The report's QUIC block (`load http --http3`): handshakes with their latency, the agreed
//! version and ALPN, each connection's RTT, and the transport's packets, losses and datagrams.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::figures::{human_us, new_histogram, thousands, ByteCounts, Latency};
use crate::h3::{H3Event, QuicFigures};

/// HTTP/3 over QUIC: absent for every other run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Quic {
    /// The QUIC version every connection used: 1 (RFC 9000), the only one offered.
    pub version: u32,
    /// The ALPN the handshakes agreed on, with how many connections agreed on it.
    pub alpn: BTreeMap<String, u64>,
    /// Handshakes completed …
    pub handshakes: u64,
    /// … of which resumed a session (the server's ServerHello accepted a ticket); the others
    /// were full handshakes.
    pub resumed: u64,
    /// Handshakes that sent requests as 0-RTT data (`--0rtt`, a resumed session allowing it).
    pub zero_rtt_sent: u64,
    /// … of which the server accepted the 0-RTT data (the others' requests went again in 1-RTT).
    pub zero_rtt_accepted: u64,
    /// Requests sent as 0-RTT data.
    pub early_requests: u64,
    /// Connections that failed (during the handshake or after), by reason (`timeout`,
    /// `alpn_refused`, `certificate`, `tls_alert`, `refused`, `closed`, `reset`, an HTTP/3
    /// error code).
    pub failures: BTreeMap<String, u64>,
    /// … of which during the handshake.
    pub handshakes_failed: u64,
    /// The first failure in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// From the first Initial to the handshake's completion, for every handshake that completed.
    pub handshake_latency: Latency,
    /// Each connection's smoothed RTT as it ended (one sample a connection that completed its
    /// handshake).
    pub rtt: Latency,
    /// Request streams opened.
    pub streams: u64,
    /// Request streams the server reset, by error code.
    pub resets: BTreeMap<String, u64>,
    /// GOAWAY frames received.
    pub goaways: u64,
    /// Packets sent, as quinn-proto counts them, over the connections that ended.
    pub packets_sent: u64,
    /// Packets its loss detection declared lost (their frames were sent again: QUIC has no
    /// retransmitted packet, only frames sent again).
    pub packets_lost: u64,
    pub bytes_lost: u64,
    pub congestion_events: u64,
    /// UDP datagrams each way.
    pub datagrams: ByteCounts,
    /// UDP payload bytes each way (`bytes` counts HTTP/3's request and response streams).
    pub wire: ByteCounts,
}

impl Quic {
    /// Add another's counts and histograms to these.
    pub fn add(&mut self, o: &Quic) -> Result<(), String> {
        self.add_counts(o);
        for (mine, theirs) in [(&mut self.handshake_latency, &o.handshake_latency), (&mut self.rtt, &o.rtt)] {
            let mut h = mine.histogram()?;
            h.add(theirs.histogram()?).map_err(|e| format!("{e:?}"))?;
            *mine = Latency::from_histogram(&h);
        }
        Ok(())
    }

    fn add_counts(&mut self, o: &Quic) {
        self.version = self.version.max(o.version);
        for (mine, theirs) in
            [(&mut self.alpn, &o.alpn), (&mut self.failures, &o.failures), (&mut self.resets, &o.resets)]
        {
            for (k, n) in theirs {
                *mine.entry(k.clone()).or_default() += n;
            }
        }
        self.handshakes += o.handshakes;
        self.zero_rtt_sent += o.zero_rtt_sent;
        self.zero_rtt_accepted += o.zero_rtt_accepted;
        self.resumed += o.resumed;
        self.early_requests += o.early_requests;
        self.handshakes_failed += o.handshakes_failed;
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&o.first_failure);
        }
        self.streams += o.streams;
        self.goaways += o.goaways;
        self.packets_sent += o.packets_sent;
        self.packets_lost += o.packets_lost;
        self.bytes_lost += o.bytes_lost;
        self.congestion_events += o.congestion_events;
        self.datagrams.sent += o.datagrams.sent;
        self.datagrams.received += o.datagrams.received;
        self.wire.sent += o.wire.sent;
        self.wire.received += o.wire.received;
    }

    /// The summary's lines for QUIC. `offloaded`: the datagrams sent in GSO messages and received coalesced by GRO (the report's
    /// `udp` block), said at the end of the datagrams line when there were any.
    pub fn summary(&self, s: &mut String, offloaded: (u64, u64)) {
        let (gso_datagrams, gro_datagrams) = offloaded;
        let alpn: Vec<String> = self.alpn.iter().map(|(p, n)| format!("ALPN {p} ({n} connections)")).collect();
        let alpn = if alpn.is_empty() { "no handshake completed".to_owned() } else { alpn.join("; ") };
        let _ = writeln!(s, "  quic         version {}, {alpn}", self.version);
        let failures: Vec<String> = self.failures.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let failed =
            if failures.is_empty() { String::new() } else { format!("; connections failed: {}", failures.join(", ")) };
        let _ = writeln!(
            s,
            "  handshakes   {} completed ({} full, {} resumed; {} sent 0-RTT, {} accepted; {} requests as 0-RTT), {} failed{failed}",
            self.handshakes,
            self.handshakes - self.resumed.min(self.handshakes),
            self.resumed,
            self.zero_rtt_sent,
            self.zero_rtt_accepted,
            self.early_requests,
            self.handshakes_failed
        );
        if let Some(first) = &self.first_failure {
            let _ = writeln!(s, "  first failed {first}");
        }
        let l = &self.handshake_latency;
        if !l.is_empty() {
            let _ = writeln!(s, "  handshake    {}; not in the latency above)", l.quantiles());
        }
        let r = &self.rtt;
        if !r.is_empty() {
            let _ = writeln!(
                s,
                "  rtt          p50 {} p99 {} max {} (each connection's smoothed RTT at its end, {} connections)",
                human_us(r.p50_us),
                human_us(r.p99_us),
                human_us(r.max_us),
                r.count
            );
        }
        let _ = writeln!(
            s,
            "  packets      {} sent, {} lost ({} bytes), {} congestion events",
            thousands(self.packets_sent),
            thousands(self.packets_lost),
            thousands(self.bytes_lost),
            thousands(self.congestion_events)
        );
        let _ = write!(
            s,
            "  datagrams    {} sent ({} bytes), {} received ({} bytes)",
            thousands(self.datagrams.sent),
            thousands(self.wire.sent),
            thousands(self.datagrams.received),
            thousands(self.wire.received)
        );
        // What the kernel's offloads took (`--udp-gso`, `--udp-gro`), when they took any.
        let offloads: Vec<String> =
            [(gso_datagrams, "sent in GSO messages"), (gro_datagrams, "received coalesced by GRO")]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{} {what}", thousands(*n)))
                .collect();
        if !offloads.is_empty() {
            let _ = write!(s, "; {}", offloads.join(", "));
        }
        s.push('\n');
        let resets: Vec<String> = self.resets.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let mut streams = format!("  http/3       {} request streams", thousands(self.streams));
        if !resets.is_empty() {
            let _ = write!(streams, ", reset by the server: {}", resets.join(", "));
        }
        if self.goaways > 0 {
            let _ = write!(streams, ", {} GOAWAY received", self.goaways);
        }
        let _ = writeln!(s, "{streams}");
    }
}

/// One thread's QUIC figures, the latencies as histograms until the report encodes them.
#[derive(Debug)]
pub struct ThreadQuic {
    pub counts: Quic,
    pub handshake_latency: Histogram<u64>,
    pub rtt: Histogram<u64>,
}

impl Default for ThreadQuic {
    fn default() -> Self {
        ThreadQuic {
            counts: Quic { version: 1, ..Quic::default() },
            handshake_latency: new_histogram(),
            rtt: new_histogram(),
        }
    }
}

fn ns(d: Duration) -> u64 {
    (d.as_nanos() as u64).max(1)
}

impl ThreadQuic {
    /// Count what a connection met: the HTTP/3 stream bytes each way go to `sent` and
    /// `received`, a stream the server reset to `resets` (an error) too.
    pub fn count(&mut self, event: &H3Event, sent: &mut u64, received: &mut u64, resets: &mut u64) {
        let c = &mut self.counts;
        match event {
            H3Event::Handshake { took, alpn, resumed, zero_rtt_sent, zero_rtt_accepted } => {
                c.handshakes += 1;
                c.resumed += u64::from(*resumed);
                c.zero_rtt_sent += u64::from(*zero_rtt_sent);
                c.zero_rtt_accepted += u64::from(*zero_rtt_accepted);
                *c.alpn.entry(alpn.clone().unwrap_or_else(|| "none".into())).or_default() += 1;
                self.handshake_latency.saturating_record(ns(*took));
            }
            H3Event::RequestSent { bytes: n, early } => {
                c.streams += 1;
                c.early_requests += u64::from(*early);
                *sent += *n as u64;
            }
            H3Event::Received { bytes: n } => *received += *n as u64,
            H3Event::Response { .. } | H3Event::StreamMalformed { .. } => {}
            H3Event::StreamReset { code } => {
                *c.resets.entry(code.clone()).or_default() += 1;
                *resets += 1;
            }
            H3Event::GoAway => c.goaways += 1,
            H3Event::Ended(f) => self.ended(f),
        }
    }

    fn ended(&mut self, f: &QuicFigures) {
        let c = &mut self.counts;
        if let Some(rtt) = f.rtt {
            self.rtt.saturating_record(ns(rtt));
        }
        c.packets_sent += f.packets_sent;
        c.packets_lost += f.packets_lost;
        c.bytes_lost += f.bytes_lost;
        c.congestion_events += f.congestion_events;
        c.datagrams.sent += f.datagrams_sent;
        c.datagrams.received += f.datagrams_received;
        c.wire.sent += f.bytes_sent;
        c.wire.received += f.bytes_received;
    }

    /// A connection failed: `kind` counted, `words` kept if it is the first.
    pub fn failed(&mut self, kind: &str, words: impl FnOnce() -> String, handshaking: bool) {
        *self.counts.failures.entry(kind.to_owned()).or_default() += 1;
        if handshaking {
            self.counts.handshakes_failed += 1;
        }
        if self.counts.first_failure.is_none() {
            self.counts.first_failure = Some(words());
        }
    }

    pub fn add(&mut self, o: &ThreadQuic) {
        self.counts.add_counts(&o.counts);
        // Same bounds on every histogram, so adding cannot fail.
        let _ = self.handshake_latency.add(&o.handshake_latency);
        let _ = self.rtt.add(&o.rtt);
    }

    /// The report's block.
    pub fn report(&self) -> Quic {
        Quic {
            handshake_latency: Latency::from_histogram(&self.handshake_latency),
            rtt: Latency::from_histogram(&self.rtt),
            ..self.counts.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Stamp;

    fn thread(handshake_ms: u64, rtt_ms: u64) -> ThreadQuic {
        let mut t = ThreadQuic::default();
        let (mut sent, mut received, mut resets) = (0, 0, 0);
        let events = [
            H3Event::Handshake {
                took: Duration::from_millis(handshake_ms),
                alpn: Some("h3".into()),
                resumed: true,
                zero_rtt_sent: true,
                zero_rtt_accepted: false,
            },
            H3Event::RequestSent { bytes: 40, early: true },
            H3Event::Received { bytes: 100 },
            H3Event::Response { stamp: Stamp::at(1), status: 200 },
            H3Event::StreamReset { code: "H3_REQUEST_REJECTED".into() },
            H3Event::Ended(Box::new(QuicFigures {
                rtt: Some(Duration::from_millis(rtt_ms)),
                packets_sent: 10,
                packets_lost: 1,
                bytes_lost: 1200,
                ..QuicFigures::default()
            })),
        ];
        for e in &events {
            t.count(e, &mut sent, &mut received, &mut resets);
        }
        assert_eq!((sent, received, resets), (40, 100, 1));
        t.failed("timeout", || "no QUIC handshake within 1.0 s".into(), true);
        t
    }

    #[test]
    fn quic_blocks_count_merge_and_say_what_was_measured() {
        let mut a = thread(2, 1).report();
        let b = thread(4, 3).report();
        a.add(&b).expect("merge");
        assert_eq!((a.handshakes, a.resumed, a.zero_rtt_sent, a.zero_rtt_accepted, a.early_requests), (2, 2, 2, 0, 2));
        assert_eq!(a.alpn.get("h3"), Some(&2));
        assert_eq!(a.resets.get("H3_REQUEST_REJECTED"), Some(&2));
        assert_eq!((a.packets_sent, a.packets_lost, a.bytes_lost), (20, 2, 2400));
        assert_eq!((a.failures.get("timeout"), a.handshakes_failed), (Some(&2), 2));
        assert_eq!((a.handshake_latency.count, a.rtt.count), (2, 2));
        assert!(a.rtt.max_us >= 2900.0, "{:?}", a.rtt);
        let mut s = String::new();
        a.summary(&mut s, (0, 0));
        assert!(s.contains("quic         version 1, ALPN h3 (2 connections)"), "{s}");
        assert!(!s.contains("GRO") && !s.contains("GSO"), "no offload took anything: {s}");
        let mut offloaded = String::new();
        a.summary(&mut offloaded, (0, 90));
        assert!(offloaded.contains("; 90 received coalesced by GRO\n"), "{offloaded}");
        assert!(!offloaded.contains("GSO"), "{offloaded}");
        assert!(
            s.contains("2 completed (0 full, 2 resumed; 2 sent 0-RTT, 0 accepted; 2 requests as 0-RTT), 2 failed"),
            "{s}"
        );
        assert!(s.contains("first failed no QUIC handshake within 1.0 s"), "{s}");
        let json = serde_json::to_string(&a).expect("json");
        assert_eq!(serde_json::from_str::<Quic>(&json).expect("back"), a);
    }
}
