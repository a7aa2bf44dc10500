//! The figures every report shares: latency histograms and their summaries, byte counts, and how
//! counts and durations are written for people. Apart from `report.rs`, so that a protocol's own
//! report block (`quic_report.rs`, `ws_report.rs`) can use them without importing the report
//! that holds it.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latencies are recorded in nanoseconds, from 1 ns to one hour, to three significant digits.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

pub fn new_histogram() -> Histogram<u64> {
    // Bounds are constants within hdrhistogram's limits, so this cannot fail.
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).unwrap_or_else(|_| unreachable!("valid histogram bounds"))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ByteCounts {
    pub sent: u64,
    pub received: u64,
}

/// A latency histogram with its summary, in microseconds for people and the HDR encoding for
/// machines.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Latency {
    pub count: u64,
    pub mean_us: f64,
    /// Standard deviation, as wrk reports it.
    pub stdev_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// HDR histogram of nanoseconds, V2 deflate encoding, base64.
    pub hdr: String,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut encoded = Vec::new();
        // Serializing into a Vec cannot fail for a valid histogram.
        let _ = V2DeflateSerializer::new().serialize(h, &mut encoded);
        Latency {
            count: h.len(),
            mean_us: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            stdev_us: if h.is_empty() { 0.0 } else { h.stdev() / 1000.0 },
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            hdr: base64::engine::general_purpose::STANDARD.encode(encoded),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// A report line's figures: "p50 … p90 … p99 … max … (mean …, N samples", the caller
    /// closing the parenthesis.
    pub fn quantiles(&self) -> String {
        format!(
            "p50 {} p90 {} p99 {} max {} (mean {}, {} samples",
            human_us(self.p50_us),
            human_us(self.p90_us),
            human_us(self.p99_us),
            human_us(self.max_us),
            human_us(self.mean_us),
            self.count
        )
    }

    pub fn histogram(&self) -> Result<Histogram<u64>, String> {
        if self.hdr.is_empty() {
            return Ok(new_histogram());
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(&self.hdr).map_err(|e| e.to_string())?;
        let decoded: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).map_err(|e| format!("{e:?}"))?;
        let mut h = new_histogram();
        h.add(&decoded).map_err(|e| format!("{e:?}"))?;
        Ok(h)
    }
}

/// A count with thousands separators: "48,276".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn human_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{us:.0}us")
    }
}
