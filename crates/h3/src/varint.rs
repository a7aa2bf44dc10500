//! QUIC variable-length integers (RFC 9000 §16): the two high bits of the first octet give the
//! length (1, 2, 4 or 8 octets), the rest is the value, big-endian, up to 2^62 - 1.

/// The largest value a varint holds.
pub const MAX: u64 = (1 << 62) - 1;

/// The octets `v` takes. Values above [`MAX`] are not encodable; callers never produce them
/// (stream ids, lengths and codes are all below 2^62).
pub fn len(v: u64) -> usize {
    match v {
        0..=0x3f => 1,
        0x40..=0x3fff => 2,
        0x4000..=0x3fff_ffff => 4,
        _ => 8,
    }
}

/// Append `v` (clamped to [`MAX`]: a larger value is a caller's bug, and a clamped one still
/// parses).
pub fn encode(v: u64, out: &mut Vec<u8>) {
    let v = v.min(MAX);
    match len(v) {
        1 => out.push(v as u8),
        2 => out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        4 => out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// The octets the varint starting with `first` takes.
pub fn len_of_first(first: u8) -> usize {
    1 << (first >> 6)
}

/// Decode a varint at the start of `buf`: (value, octets used), or None if `buf` ends first.
/// Every octet sequence is a valid varint (a non-minimal encoding included, as RFC 9000 allows).
pub fn decode(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let n = len_of_first(first);
    let bytes = buf.get(..n)?;
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    Some((v, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9000 Appendix A.1's examples.
    #[test]
    fn rfc_9000_a1_examples() {
        let cases: &[(&[u8], u64)] = &[
            (&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c], 151_288_809_941_952_652),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
            (&[0x40, 0x25], 37),
        ];
        for (bytes, value) in cases {
            assert_eq!(decode(bytes), Some((*value, bytes.len())));
            for cut in 0..bytes.len() {
                assert_eq!(decode(&bytes[..cut]), None);
            }
        }
    }

    #[test]
    fn round_trips_at_every_boundary() {
        for v in [0, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30, MAX] {
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!(out.len(), len(v), "{v}");
            assert_eq!(decode(&out), Some((v, out.len())));
        }
    }
}
