//! `--hdr-log FILE`: the run's latency as an HdrHistogram interval log (format 1.3, as Java's
//! `HistogramLogWriter` writes it), one histogram a second, readable by HdrHistogram's own tools
//! (`HistogramLogProcessor`, Python hdrh's `HistogramLogReader`).
//!
//! Each thread records into its own interval histograms and hands them over when a second of the
//! measured phase ends ([`Intervals::contribute`]); the thread whose hand-over completes an
//! interval writes it. An open-loop run writes two histograms an interval, tagged `corrected`
//! (from each request's due time) and `uncorrected` (from its send); a closed-loop run writes one,
//! untagged (there is nothing to correct). Values are nanoseconds; the max column is in
//! milliseconds (`#[MaxValueDivisor: 1000000.000]`).
//!
//! Logs of the processes of one run (`--procs`) or of the segments of a split run merge
//! exactly ([`merge`]): the histograms of the same interval (by its second from the start) and
//! tag are added.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use crate::report::new_histogram;

/// The length of an interval.
pub const INTERVAL: Duration = Duration::from_secs(1);

pub const CORRECTED: &str = "corrected";
pub const UNCORRECTED: &str = "uncorrected";

#[derive(Debug, thiserror::Error)]
pub enum HlogError {
    #[error("cannot write the interval log: {0}")]
    Write(std::io::Error),
    #[error("{path}: not an HdrHistogram interval log ({reason})")]
    Format { path: String, reason: String },
}

/// One interval being gathered from the threads.
struct Pending {
    /// By tag ("" untagged).
    histograms: BTreeMap<String, Histogram<u64>>,
    threads: usize,
}

/// The run's interval log: intervals gathered from the threads, written in order.
pub struct Intervals {
    out: Box<dyn Write + Send>,
    threads: usize,
    open_loop: bool,
    pending: BTreeMap<u64, Pending>,
    /// The next interval to write: those before it are out.
    next: u64,
    /// When the measured phase began; None until the header is written.
    started: Option<SystemTime>,
    error: Option<std::io::Error>,
}

impl Intervals {
    pub fn new(out: Box<dyn Write + Send>, threads: usize, open_loop: bool) -> Self {
        Intervals { out, threads, open_loop, pending: BTreeMap::new(), next: 0, started: None, error: None }
    }

    /// The tags each interval has: corrected and uncorrected in open loop, one untagged otherwise.
    pub fn tags(open_loop: bool) -> &'static [&'static str] {
        if open_loop {
            &[CORRECTED, UNCORRECTED]
        } else {
            &[""]
        }
    }

    /// The measured phase began at `at` (Unix time): the header is written with it.
    pub fn begin(&mut self, at: SystemTime) {
        if self.started.is_some() {
            return;
        }
        self.started = Some(at);
        let written = header(at, self.open_loop).and_then(|h| self.out.write_all(&h));
        self.note(written);
    }

    fn note(&mut self, result: std::io::Result<()>) {
        if let Err(e) = result {
            self.error.get_or_insert(e);
        }
    }

    /// A thread's histograms for interval `index` (by tag, in [`Self::tags`] order); the
    /// thread that completes an interval writes it and any complete ones before it.
    pub fn contribute(&mut self, index: u64, histograms: &mut [Histogram<u64>]) {
        let tags = Self::tags(self.open_loop);
        let pending = self.pending.entry(index).or_insert_with(|| Pending { histograms: BTreeMap::new(), threads: 0 });
        for (tag, h) in tags.iter().zip(histograms.iter_mut()) {
            let sum = pending.histograms.entry((*tag).to_owned()).or_insert_with(new_histogram);
            // Same bounds on every histogram, so adding cannot fail.
            let _ = sum.add(&*h);
            h.reset();
        }
        pending.threads += 1;
        while self.pending.get(&self.next).is_some_and(|p| p.threads >= self.threads) {
            if let Some(done) = self.pending.remove(&self.next) {
                self.write(self.next, INTERVAL, &done);
            }
            self.next += 1;
        }
    }

    fn write(&mut self, index: u64, length: Duration, interval: &Pending) {
        let written = interval_lines(index, length, &interval.histograms).and_then(|l| self.out.write_all(&l));
        self.note(written);
    }

    /// The run is over, `length` after it began: write what is left (the last interval is as
    /// long as the run's last part), flush, and say whether everything was written.
    pub fn finish(&mut self, length: Duration) -> Result<(), HlogError> {
        let pending = std::mem::take(&mut self.pending);
        for (index, interval) in pending {
            let from = INTERVAL * index as u32;
            let len = length.saturating_sub(from).min(INTERVAL);
            self.write(index, len, &interval);
        }
        let flushed = self.out.flush();
        self.note(flushed);
        match self.error.take() {
            Some(e) => Err(HlogError::Write(e)),
            None => Ok(()),
        }
    }
}

/// The log's header: the format line, what the values are, StartTime and BaseTime (`at`), the
/// max column's divisor and the column names.
fn header(at: SystemTime, open_loop: bool) -> std::io::Result<Vec<u8>> {
    let mut header = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let comment = if open_loop {
        "sockscale load: latency in ns; open loop: Tag=corrected from each request's due time, Tag=uncorrected from its send"
    } else {
        "sockscale load: latency in ns; closed loop (from each request's send)"
    };
    IntervalLogWriterBuilder::new()
        .add_comment("[Histogram log format version 1.3]")
        .add_comment(comment)
        .with_start_time(at)
        .with_base_time(at)
        .with_max_value_divisor(1e6)
        .begin_log_with(&mut header, &mut serializer)?;
    header.extend_from_slice(
        b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
    );
    Ok(header)
}

/// The lines of interval `index` (one a tag; "" untagged), `length` long.
fn interval_lines(
    index: u64,
    length: Duration,
    histograms: &BTreeMap<String, Histogram<u64>>,
) -> std::io::Result<Vec<u8>> {
    let mut lines = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut writer =
        IntervalLogWriterBuilder::new().with_max_value_divisor(1e6).begin_log_with(&mut lines, &mut serializer)?;
    for (tag, h) in histograms {
        let tag = if tag.is_empty() { None } else { Tag::new(tag) };
        writer
            .write_histogram(h, INTERVAL * index as u32, length, tag)
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    }
    // The builder wrote its divisor comment again: keep only the interval lines.
    Ok(lines.split_inclusive(|&b| b == b'\n').filter(|line| !line.starts_with(b"#")).flatten().copied().collect())
}

/// One interval histogram read from a log.
#[derive(Debug)]
pub struct Read {
    pub tag: String,
    /// Seconds from the log's base time.
    pub start_s: f64,
    pub length_s: f64,
    pub histogram: Histogram<u64>,
}

/// A log read whole: its start time (Unix seconds, when it says) and its intervals.
#[derive(Debug)]
pub struct Log {
    pub start_time_s: Option<f64>,
    pub intervals: Vec<Read>,
}

/// Read an interval log.
pub fn read(bytes: &[u8], path: &str) -> Result<Log, HlogError> {
    let bad = |reason: String| HlogError::Format { path: path.to_owned(), reason };
    let mut log = Log { start_time_s: None, intervals: Vec::new() };
    let mut base = None;
    for entry in IntervalLogIterator::new(bytes) {
        match entry.map_err(|e| bad(format!("{e:?}")))? {
            LogEntry::StartTime(t) => log.start_time_s = Some(t.as_secs_f64()),
            LogEntry::BaseTime(t) => base = Some(t.as_secs_f64()),
            LogEntry::Interval(i) => {
                let encoded = base64::engine::general_purpose::STANDARD
                    .decode(i.encoded_histogram())
                    .map_err(|e| bad(format!("an interval's histogram is not base64: {e}")))?;
                let histogram: Histogram<u64> = Deserializer::new()
                    .deserialize(&mut &encoded[..])
                    .map_err(|e| bad(format!("an interval's histogram does not decode: {e:?}")))?;
                log.intervals.push(Read {
                    tag: i.tag().map(|t| t.as_str().to_owned()).unwrap_or_default(),
                    start_s: i.start_timestamp().as_secs_f64(),
                    length_s: i.duration().as_secs_f64(),
                    histogram,
                });
            }
        }
    }
    if log.start_time_s.is_none() {
        log.start_time_s = base;
    }
    if log.start_time_s.is_none() && log.intervals.is_empty() {
        return Err(bad("no StartTime, BaseTime or interval in it".into()));
    }
    Ok(log)
}

/// Merge the logs of the parts of one run: the histograms of the same interval (its whole
/// second from each log's start) and tag are added; the merged log starts at the earliest start.
pub fn merge(logs: &[Log], out: &mut dyn Write) -> Result<(), HlogError> {
    let mut intervals: BTreeMap<u64, (f64, BTreeMap<String, Histogram<u64>>)> = BTreeMap::new();
    let open_loop = logs.iter().flat_map(|l| &l.intervals).any(|i| i.tag == CORRECTED);
    for log in logs {
        for interval in &log.intervals {
            let index = interval.start_s.round().max(0.0) as u64;
            let (length, by_tag) = intervals.entry(index).or_insert_with(|| (0.0, BTreeMap::new()));
            *length = f64::max(*length, interval.length_s);
            let sum = by_tag.entry(interval.tag.clone()).or_insert_with(new_histogram);
            sum.add(&interval.histogram).map_err(|e| HlogError::Format {
                path: "merge".into(),
                reason: format!("histograms that do not add: {e:?}"),
            })?;
        }
    }
    let start = logs.iter().filter_map(|l| l.start_time_s).fold(f64::INFINITY, f64::min);
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(if start.is_finite() { start } else { 0.0 });
    let mut bytes = header(start, open_loop).map_err(HlogError::Write)?;
    for (index, (length, by_tag)) in &intervals {
        bytes.extend(interval_lines(*index, Duration::from_secs_f64(*length), by_tag).map_err(HlogError::Write)?);
    }
    out.write_all(&bytes).map_err(HlogError::Write)
}

/// Fill each second's latency from an interval log of the same run.
pub fn timeline_latency(timeline: &mut [crate::report::Second], log: &Log) {
    let us = |ns: u64| ns as f64 / 1000.0;
    for second in timeline.iter_mut() {
        let at = |tag: &str| {
            log.intervals.iter().find(|i| i.tag == tag && i.start_s.round() as u64 == second.t).map(|i| &i.histogram)
        };
        let Some(h) = at(CORRECTED).or_else(|| at("")) else { continue };
        second.latency = Some(crate::report::SecondLatency {
            count: h.len(),
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            uncorrected_p99_us: at(UNCORRECTED).map(|u| us(u.value_at_quantile(0.99))),
        });
    }
}
