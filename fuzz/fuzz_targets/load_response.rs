//! The load generator's response parser (`sockscale_load::http::ResponseParser`) fed arbitrary
//! bytes, cut into arbitrary reads, then the end of the connection.
//!
//! Input: an 8-byte header, then the bytes the server sent (see `sockscale_fuzz` for bytes
//! 0..=2). Byte 3 says how many requests were sent (0..=31, low five bits); bytes 4..=7 say, bit
//! by bit (little-endian), which of them were HEAD requests.
//!
//! Invariants:
//! - no panic: every read and the end of the stream give `Ok` or a `ResponseError`;
//! - responses never outnumber requests, and those completed plus those outstanding are the
//!   requests sent; no 1xx is ever reported as a response;
//! - the answer to a HEAD request, a 204 or a 304 has no body, and the bodies counted never add
//!   up to more bytes than were read;
//! - the same bytes give the same responses and the same error whether they come in one read
//!   or in the pieces chosen by the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sockscale_fuzz::{chunks, debug, payload, seed, split_header, Rng};
use sockscale_load::http::{Response, ResponseError, ResponseParser};

/// What one connection saw: the responses, then `Ok` if the stream ended cleanly.
#[derive(Debug, PartialEq, Eq)]
struct Transcript {
    responses: Vec<Response>,
    end: Result<(), ResponseError>,
}

fn parse(pieces: &[&[u8]], heads: &[bool]) -> Transcript {
    let mut parser = ResponseParser::default();
    for &head in heads {
        parser.expect(head);
    }
    let mut responses = Vec::new();
    let mut got = |r: Response| {
        assert!(responses.len() < heads.len(), "a response to no request: {r:?}");
        assert!(!(100..200).contains(&r.status), "an interim response reported: {r:?}");
        if heads[responses.len()] || r.status == 204 || r.status == 304 {
            assert_eq!(r.body_len, 0, "a bodiless response with a body: {r:?}");
        }
        responses.push(r);
    };
    let mut end = Ok(());
    for piece in pieces {
        end = parser.feed(piece, &mut got);
        if end.is_err() {
            break;
        }
    }
    if end.is_ok() {
        end = parser.eof(&mut got);
    }
    assert_eq!(responses.len() + parser.outstanding(), heads.len());
    let read: usize = pieces.iter().map(|p| p.len()).sum();
    let body: u64 = responses.iter().map(|r| r.body_len).sum();
    assert!(body <= read as u64, "{body} bytes of body in {read} bytes");
    Transcript { responses, end }
}

fuzz_target!(|data: &[u8]| {
    let (header, raw) = split_header::<8>(data);
    let flags = header[0];
    let seed = seed(&header);
    let count = usize::from(header[3] & 0x1F);
    let mask = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let heads: Vec<bool> = (0..count).map(|i| mask & (1 << i) != 0).collect();
    let input = payload(flags, raw);
    let mut rng = Rng::new(u64::from(seed) | u64::from(flags) << 16 | u64::from(mask) << 24);
    let pieces = chunks(&input, flags, &mut rng, seed);

    let whole = parse(&[&input], &heads);
    let split = parse(&pieces, &heads);
    if debug() {
        eprintln!("{} bytes in {} pieces, {count} requests: {split:?}", input.len(), pieces.len());
    }
    assert_eq!(split, whole, "{} pieces", pieces.len());
});
