//! What the fuzz targets share: how a fuzz input is decoded into a few control bytes, a byte
//! stream, the pieces that stream arrives in, and a clock.
//!
//! Every input is `header ++ payload`. The header is a few control bytes, fixed per target
//! (missing bytes read as 0, so any input is valid); byte 0 is common to both targets:
//!
//! - bits 0..=2: how the payload is cut into reads, see [`Chunks`];
//! - bit 3: the payload is run-length coded, see [`inflate`], so that inputs far past the
//!   parsers' 8 KiB and 64 KiB limits stay a few bytes long;
//!
//! and bytes 1..=2 seed the generator that picks the cut points and the clock steps. The rest of
//! the header is read by each target. With a zero header the payload is fed whole and verbatim,
//! which is what the hand-written seeds in `corpus/` use: four or eight zero bytes, then a
//! plain HTTP message.

use std::borrow::Cow;
use std::sync::OnceLock;

/// `FUZZ_DEBUG=1` in the environment: the targets print what each input did, e.g.
/// `FUZZ_DEBUG=1 cargo +nightly fuzz run http_request seeds/http_request/get`.
pub fn debug() -> bool {
    static DEBUG: OnceLock<bool> = OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("FUZZ_DEBUG").is_some_and(|v| v != "0"))
}

/// Byte 0, bit 3: the payload is run-length coded.
pub const INFLATE: u8 = 0x08;

/// An inflated payload never grows past this, so no input can exhaust memory.
pub const MAX_INFLATED: usize = 256 << 10;

/// Split `data` into a header of `N` bytes (zero-padded) and the payload.
pub fn split_header<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut header = [0u8; N];
    let n = data.len().min(N);
    header[..n].copy_from_slice(&data[..n]);
    (header, &data[n..])
}

/// Decode a run-length coded payload: `0xFF n c` stands for `n * 256` copies of `c` when `n` is
/// not 0, and `0xFF 0` for one literal `0xFF`; every other byte stands for itself. A trailing
/// lone `0xFF` is kept as it is.
pub fn inflate(payload: &[u8]) -> Cow<'_, [u8]> {
    if !payload.contains(&0xFF) {
        return Cow::Borrowed(payload);
    }
    let mut out = Vec::with_capacity(payload.len());
    let mut i = 0;
    while i < payload.len() && out.len() < MAX_INFLATED {
        match payload[i..] {
            [0xFF, 0, ..] => {
                out.push(0xFF);
                i += 2;
            }
            [0xFF, n, c, ..] => {
                let count = (usize::from(n) * 256).min(MAX_INFLATED - out.len());
                out.resize(out.len() + count, c);
                i += 3;
            }
            [b, ..] => {
                out.push(b);
                i += 1;
            }
            [] => unreachable!("loop condition"),
        }
    }
    Cow::Owned(out)
}

/// The payload named by byte 0 of the header.
pub fn payload(flags: u8, raw: &[u8]) -> Cow<'_, [u8]> {
    if flags & INFLATE != 0 {
        inflate(raw)
    } else {
        Cow::Borrowed(raw)
    }
}

/// The most reads a payload is cut into.
pub const MAX_PIECES: usize = 1024;

/// splitmix64: small, fast and good enough to pick cut points.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..=max`.
    pub fn below_or_eq(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            Some(n) => self.next_u64() % n,
            None => self.next_u64(),
        }
    }
}

/// The pieces a payload arrives in, chosen by bits 0..=2 of byte 0 and the seed:
///
/// | style | pieces |
/// | --- | --- |
/// | 0 | the whole payload in one read |
/// | 1 | one byte at a time |
/// | 2 | 1 to 4 bytes |
/// | 3 | 1 to 64 bytes |
/// | 4 | 1 to 4096 bytes |
/// | 5 | 0 to 16 bytes: empty reads too |
/// | 6 | two pieces, cut at `seed % (len + 1)` |
/// | 7 | `2^k` bytes, k in 0..=16, so big and small reads mix |
///
/// After [`MAX_PIECES`]` - 1` pieces the rest comes in one: re-parsing a growing head on every
/// read is quadratic in both parsers, and a 64 KiB head fed a byte at a time would take seconds.
pub fn chunks<'a>(data: &'a [u8], flags: u8, rng: &mut Rng, seed: u16) -> Vec<&'a [u8]> {
    let style = flags & 0x07;
    let mut pieces = Vec::new();
    if style == 6 {
        let (a, b) = data.split_at(usize::from(seed) % (data.len() + 1));
        return vec![a, b];
    }
    let mut rest = data;
    loop {
        let len = match style {
            _ if pieces.len() + 1 == MAX_PIECES => rest.len(),
            0 => rest.len(),
            1 => 1,
            2 => 1 + rng.below_or_eq(3) as usize,
            3 => 1 + rng.below_or_eq(63) as usize,
            4 => 1 + rng.below_or_eq(4095) as usize,
            5 => rng.below_or_eq(16) as usize,
            _ => 1usize << rng.below_or_eq(16),
        };
        let (piece, tail) = rest.split_at(len.min(rest.len()));
        pieces.push(piece);
        rest = tail;
        if rest.is_empty() {
            return pieces;
        }
    }
}

/// The seed in header bytes 1..=2.
pub fn seed(header: &[u8]) -> u16 {
    u16::from_le_bytes([header[1], header[2]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflate_expands_runs_and_escapes() {
        assert_eq!(&*inflate(b"abc"), b"abc");
        assert_eq!(&*inflate(b"a\xff\x00b"), b"a\xffb");
        assert_eq!(inflate(b"\xff\x02x").len(), 512);
        assert_eq!(&*inflate(b"a\xff"), b"a\xff");
        assert_eq!(inflate(&[0xFF, 0xFF, b'x'].repeat(100)).len(), MAX_INFLATED);
    }

    #[test]
    fn chunks_cover_the_payload_in_order() {
        let data: Vec<u8> = (0..=255).cycle().take(10_000).collect();
        for flags in 0..8 {
            let mut rng = Rng::new(7);
            let pieces = chunks(&data, flags, &mut rng, 1234);
            assert_eq!(pieces.concat(), data, "style {flags}");
        }
        assert_eq!(chunks(b"", 0, &mut Rng::new(0), 0), vec![b""]);
        let pieces = chunks(&data, 1, &mut Rng::new(0), 0);
        assert_eq!(pieces.len(), MAX_PIECES);
        assert_eq!(pieces.concat(), data);
    }
}
