//! The HTTP request state machine (`sockscale_proto::http::HttpSession`) fed arbitrary bytes,
//! cut into arbitrary reads, at arbitrary times.
//!
//! Input: a 5-byte header, then the bytes of the connection (see `sockscale_fuzz` for bytes
//! 0..=2). Byte 3 picks how far the clock moves between reads (0: not at all; n: up to 2^n ms).
//! Byte 4 picks the configuration: bits 0..=2 the head limit, bits 3..=5 the body limit, bit 6 an
//! empty response body.
//!
//! Invariants:
//! - no panic, whatever the bytes;
//! - every output segment is exactly one of the server's responses: a 200 (in one of its three
//!   connection modes, full or HEAD), a `100 Continue`, or an error page;
//! - an error is only ever the last thing sent, with `Connection: close`, and the verdict is
//!   `Close(BadRequest)`; `Close(Done)` comes only after a 200 with `Connection: close`; and a
//!   closed session says nothing more;
//! - output stays bounded: every request head has at least two line feeds and earns at most a
//!   100 and a 200, so neither count can exceed half the line feeds read, and the bytes sent
//!   cannot exceed (line feeds + 1) times the longest response;
//! - the same bytes give the same answers (the same sequence of responses, by status, connection
//!   mode and HEAD-ness, and the same verdict) whether they come in one read at one instant or
//!   in the pieces and at the times chosen by the input;
//! - the header deadline exists exactly while a head is unfinished, and `on_timeout` answers 408
//!   at the deadline and not a nanosecond before.

#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sockscale_fuzz::{chunks, debug, payload, seed, split_header, Rng};
use sockscale_proto::http::{ConnectionMode, HttpConfig, HttpSession, Responses, Status, CONTINUE};
use sockscale_proto::{Closing, Output, Segment, Verdict};

const T0: u64 = 1_700_000_000;

const HEAD_LIMITS: [usize; 8] = [8192, 8192, 0, 16, 40, 128, 1024, 65536];
const BODY_LIMITS: [u64; 8] = [8 << 20, 0, 1, 10, 100, 4096, 1 << 20, u64::MAX];
/// The errors a request can earn; 408 only comes from `on_timeout`, 503 only from a full server.
const REQUEST_ERRORS: [Status; 4] =
    [Status::BadRequest, Status::PayloadTooLarge, Status::UriTooLong, Status::HeaderFieldsTooLarge];
const MODES: [ConnectionMode; 3] = [ConnectionMode::KeepAlive11, ConnectionMode::KeepAlive10, ConnectionMode::Close];

/// One response, as far as the client can tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Continue,
    Ok { mode: ConnectionMode, head_only: bool },
    Error(Status),
}

/// Which response `bytes` is; panics on anything the server should never send.
fn classify(bytes: &[u8], responses: &Responses) -> Sent {
    if bytes == CONTINUE {
        return Sent::Continue;
    }
    for mode in MODES {
        for head_only in [false, true] {
            if bytes == responses.ok(mode, head_only) {
                return Sent::Ok { mode, head_only };
            }
        }
    }
    for status in REQUEST_ERRORS {
        if bytes == responses.error(status) {
            return Sent::Error(status);
        }
    }
    panic!("unexpected output segment: {:?}", String::from_utf8_lossy(bytes));
}

/// What one connection saw.
#[derive(Debug, PartialEq, Eq)]
struct Transcript {
    sent: Vec<Sent>,
    verdict: Verdict,
    /// A head was unfinished at the end: the header deadline is armed.
    deadline_armed: bool,
    between_requests: bool,
}

struct Conn {
    responses: Responses,
    session: HttpSession,
    out: Output,
    sent: Vec<Sent>,
    line_feeds: usize,
    bytes_out: usize,
    longest: usize,
}

impl Conn {
    fn new(cfg: Arc<HttpConfig>) -> Self {
        let responses = Responses::new(cfg, T0);
        let longest = REQUEST_ERRORS
            .iter()
            .map(|&s| responses.error(s).len())
            .chain([CONTINUE.len(), responses.ok(ConnectionMode::Close, false).len()])
            .max()
            .unwrap();
        Conn {
            responses,
            session: HttpSession::default(),
            out: Output::default(),
            sent: Vec::new(),
            line_feeds: 0,
            bytes_out: 0,
            longest,
        }
    }

    /// Feed one read and check what came out of it.
    fn feed(&mut self, input: &[u8], now: Instant) -> Verdict {
        self.out.clear();
        let verdict = self.session.on_input(input, now, &mut self.responses, &mut self.out);
        self.line_feeds += input.iter().filter(|&&b| b == b'\n').count();
        let segments = self.out.segments();
        for (i, segment) in segments.iter().enumerate() {
            let Segment::Shared(bytes) = segment else { panic!("HTTP output refers to the input: {segment:?}") };
            let sent = classify(bytes, &self.responses);
            let last = i + 1 == segments.len();
            match sent {
                Sent::Error(_) => {
                    assert!(last, "an error is the last thing sent");
                    assert_eq!(verdict, Verdict::Close(Closing::BadRequest));
                }
                Sent::Ok { mode: ConnectionMode::Close, .. } => {
                    assert!(last, "nothing follows a 200 with Connection: close");
                    assert_eq!(verdict, Verdict::Close(Closing::Done));
                }
                Sent::Continue => {
                    assert_ne!(self.sent.last(), Some(&Sent::Continue), "two 100s with no answer between");
                }
                Sent::Ok { .. } => {}
            }
            self.bytes_out += bytes.len();
            self.sent.push(sent);
        }
        match verdict {
            Verdict::Continue => {}
            Verdict::Close(Closing::Done) => assert!(
                matches!(self.sent.last(), Some(Sent::Ok { mode: ConnectionMode::Close, .. })),
                "Close(Done) without a closing 200: {:?}",
                self.sent
            ),
            Verdict::Close(Closing::BadRequest) => {
                assert!(matches!(self.sent.last(), Some(Sent::Error(_))), "Close(BadRequest) without an error")
            }
            Verdict::Close(Closing::HeaderTimeout) => panic!("input gave a header-timeout verdict"),
        }
        let oks = self.sent.iter().filter(|s| matches!(s, Sent::Ok { .. })).count();
        let continues = self.sent.iter().filter(|s| matches!(s, Sent::Continue)).count();
        assert!(oks * 2 <= self.line_feeds, "{oks} answers to {} line feeds", self.line_feeds);
        assert!(continues * 2 <= self.line_feeds, "{continues} 100s to {} line feeds", self.line_feeds);
        assert!(self.bytes_out <= (self.line_feeds + 1) * self.longest, "{} bytes out", self.bytes_out);
        verdict
    }

    fn transcript(&self, verdict: Verdict) -> Transcript {
        let timeout = self.responses.config().header_timeout;
        Transcript {
            sent: self.sent.clone(),
            verdict,
            deadline_armed: self.session.deadline(timeout).is_some(),
            between_requests: self.session.is_between_requests(),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (header, raw) = split_header::<5>(data);
    let flags = header[0];
    let seed = seed(&header);
    let time_style = header[3];
    let cfg_byte = header[4];
    let cfg = Arc::new(HttpConfig {
        body: if cfg_byte & 0x40 != 0 { Bytes::new() } else { Bytes::from_static(b"0123456789") },
        max_header_bytes: HEAD_LIMITS[usize::from(cfg_byte & 0x07)],
        max_body_bytes: BODY_LIMITS[usize::from((cfg_byte >> 3) & 0x07)],
        ..HttpConfig::default()
    });
    let timeout = cfg.header_timeout;
    let input = payload(flags, raw);
    let mut rng = Rng::new(u64::from(seed) | u64::from(flags) << 16 | u64::from(time_style) << 24);
    let pieces = chunks(&input, flags, &mut rng, seed);

    // All at once, at one instant.
    let start = Instant::now();
    let mut whole = Conn::new(cfg.clone());
    let whole_verdict = whole.feed(&input, start);

    // In pieces, with the clock moving (and the Date second with it) between them.
    let max_step_ms: u64 = if time_style == 0 { 0 } else { 1 << (time_style % 26) };
    let mut split = Conn::new(cfg);
    let mut now = start;
    let mut verdict = Verdict::Continue;
    let mut head_began: Option<Instant> = None;
    for piece in &pieces {
        now += Duration::from_millis(rng.below_or_eq(max_step_ms));
        split.responses.tick(T0 + (now - start).as_secs());
        let armed_before = split.session.deadline(timeout);
        verdict = split.feed(piece, now);
        // The deadline counts from the read that began the head, and trickling does not move it.
        match (armed_before, split.session.deadline(timeout)) {
            (_, None) => head_began = None,
            (Some(before), Some(after)) if head_began.is_some() && before == after => {}
            (_, Some(after)) => {
                assert_eq!(after, now + timeout, "a new deadline counts from this read");
                head_began = Some(now);
            }
        }
        if verdict != Verdict::Continue {
            break;
        }
    }

    if debug() {
        eprintln!("{} bytes in {} pieces: {:?}", input.len(), pieces.len(), split.transcript(verdict));
    }
    assert_eq!(split.transcript(verdict), whole.transcript(whole_verdict), "pieces: {:?}", pieces.len());

    if let Verdict::Close(_) = verdict {
        // A closed session ignores whatever else arrives and has no deadline.
        let before = split.sent.len();
        split.out.clear();
        let again =
            split.session.on_input(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", now, &mut split.responses, &mut split.out);
        assert!(matches!(again, Verdict::Close(_)), "a closed session reopened: {again:?}");
        assert!(split.out.is_empty(), "a closed session answered");
        assert_eq!(split.sent.len(), before);
        assert_eq!(split.session.deadline(timeout), None);
        return;
    }

    // The header timeout, on the session that was fed in pieces.
    let mut out = Output::default();
    match split.session.deadline(timeout) {
        None => {
            assert!(head_began.is_none());
            let v = split.session.on_timeout(now + Duration::from_secs(86_400), &mut split.responses, &mut out);
            assert_eq!(v, Verdict::Continue);
            assert!(out.is_empty());
        }
        Some(deadline) => {
            assert!(!split.session.is_between_requests());
            assert_eq!(Some(deadline - timeout), head_began);
            let early = deadline - Duration::from_nanos(1);
            assert_eq!(split.session.on_timeout(early, &mut split.responses, &mut out), Verdict::Continue);
            assert!(out.is_empty(), "408 before the deadline");
            assert_eq!(
                split.session.on_timeout(deadline, &mut split.responses, &mut out),
                Verdict::Close(Closing::HeaderTimeout)
            );
            assert_eq!(out.to_vec(&[]), split.responses.error(Status::RequestTimeout));
            assert_eq!(split.session.deadline(timeout), None);
        }
    }
});
