//! HPACK's Huffman code (RFC 7541 Appendix B), decoded canonically.
//!
//! The code is canonical: the codes of one length are consecutive numbers, and each length's first
//! code follows from the previous length's last. So a decoder needs, per length, the first code,
//! how many codes there are and where their symbols start in a list sorted by (length, symbol):
//! tables computed at compile time from [`CODES`], with no allocation and no table per call.
//! (`tests::the_code_is_canonical` checks the premise against the RFC's codes.)

use super::HpackError;

/// The RFC's table: for each symbol 0..=256 (256 is EOS), its code, right-aligned, and length in bits.
#[rustfmt::skip]
pub(crate) const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28),
    (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28),
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28),
    (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10),
    (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6),
    (0x1c, 6), (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13), (0x21, 6),
    (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7),
    (0x69, 7), (0x6a, 7), (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5),
    (0x25, 6), (0x26, 6), (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
    (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14),
    (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23),
    (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23),
    (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21),
    (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22),
    (0x7fffeb, 23), (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22),
    (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23),
    (0x3fffe8, 22), (0x1ffffec, 25), (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21),
    (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27),
    (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22),
    (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27), (0x7ffffe8, 27),
    (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26), (0x3fffffff, 30),
];
/// The longest code (EOS and a few control characters).
const MAX_LEN: usize = 30;

/// Per length: the first code, how many codes, and the index of the first one's symbol in
/// [`SORTED`].
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    /// The symbols sorted by (length, symbol): the order of their codes.
    sorted: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut c =
        Canonical { first: [0; MAX_LEN + 1], count: [0; MAX_LEN + 1], start: [0; MAX_LEN + 1], sorted: [0; 257] };
    let mut next = 0usize;
    let mut len = 1;
    while len <= MAX_LEN {
        c.start[len] = next as u16;
        let mut symbol = 0;
        let mut lowest = u32::MAX;
        while symbol < 257 {
            if CODES[symbol].1 as usize == len {
                c.sorted[next] = symbol as u16;
                next += 1;
                c.count[len] += 1;
                if CODES[symbol].0 < lowest {
                    lowest = CODES[symbol].0;
                }
            }
            symbol += 1;
        }
        c.first[len] = if c.count[len] == 0 { 0 } else { lowest };
        len += 1;
    }
    c
}

static CANONICAL: Canonical = canonical();

/// EOS: a decoded EOS is an error (RFC 7541 §5.2).
const EOS: u16 = 256;

/// Decode the Huffman-coded `input`, appending the octets to `out`. Padding must be the most
/// significant bits of EOS (all ones) and shorter than 8 bits; EOS itself must not appear.
/// Public for QPACK (`sockscale-h3`), whose strings use the same code.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let table = &CANONICAL;
    let mut code: u32 = 0;
    let mut len = 0usize;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            // A prefix of a longer code is never below the first code of its length and is at
            // least the first plus the count, so one comparison tells a code from a prefix.
            let offset = code.wrapping_sub(table.first[len]);
            if offset < table.count[len] {
                let symbol = table.sorted[usize::from(table.start[len]) + offset as usize];
                if symbol == EOS {
                    return Err(HpackError::Huffman);
                }
                out.push(symbol as u8);
                code = 0;
                len = 0;
            } else if len == MAX_LEN {
                return Err(HpackError::Huffman);
            }
        }
    }
    // What is left is padding: fewer than 8 bits, all ones.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok(())
}

/// Encode `input` (HPACK's server sends its strings as they are; QPACK's encoder in
/// `sockscale-h3` uses [`encode_into`] when it is shorter).
pub fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(input, &mut out);
    out
}

/// The octets [`encode`] makes of `input`.
pub fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input.iter().map(|&b| usize::from(CODES[usize::from(b)].1)).sum();
    bits.div_ceil(8)
}

/// Encode `input`, appending the octets to `out`.
pub fn encode_into(input: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &b in input {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_is_canonical() {
        // Rebuild the codes from the lengths alone, canonically, and compare.
        let mut code = 0u32;
        let mut prev_len = 0u8;
        for &symbol in CANONICAL.sorted.iter() {
            let (want, len) = CODES[usize::from(symbol)];
            code <<= len - prev_len;
            assert_eq!(code, want, "symbol {symbol}");
            code += 1;
            prev_len = len;
        }
    }

    #[test]
    fn every_octet_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        decode(&encode(&all), &mut out).expect("decodes");
        assert_eq!(out, all);
    }

    #[test]
    fn rfc_7541_c4_example() {
        // "www.example.com" (RFC 7541 C.4.1).
        let coded = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        let mut out = Vec::new();
        decode(&coded, &mut out).expect("decodes");
        assert_eq!(out, b"www.example.com");
        assert_eq!(encode(b"www.example.com"), coded);
    }

    #[test]
    fn bad_padding_and_eos_are_errors() {
        let mut out = Vec::new();
        // 'a' is 00011 (5 bits): padded with zeros instead of ones.
        assert_eq!(decode(&[0b0001_1000], &mut out), Err(HpackError::Huffman));
        // 'a' then 8 bits of ones: padding too long.
        assert_eq!(decode(&[0b0001_1111, 0xff], &mut out), Err(HpackError::Huffman));
        // EOS: thirty ones, then padding.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out), Err(HpackError::Huffman));
        // Padding alone, under 8 bits of ones, is fine only as a whole byte's tail.
        out.clear();
        assert_eq!(decode(&[0b0001_1111], &mut out), Ok(()));
        assert_eq!(out, b"a");
    }
}
