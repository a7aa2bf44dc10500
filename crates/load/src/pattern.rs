//! The bytes every echo connection sends, and checks coming back.
//!
//! Byte `i` of connection `c`'s stream is `TABLE[(phase(c) + i) mod 64 KiB]`: a fixed random
//! table read at a per-connection phase. Sending is a slice of the table and checking is one
//! `memcmp` against the same slice, so verification costs about what the copy into the socket
//! does and can stay on. Phases differ between connections, so data echoed on the wrong
//! connection, reordered, lost or altered all show up as a mismatch at the first wrong byte.

/// Length of the pattern table; also the longest slice handed out at once.
pub const TABLE: usize = 64 << 10;

#[derive(Debug)]
pub struct Pattern {
    /// The table twice over, so any window of up to TABLE bytes is contiguous.
    bytes: Box<[u8]>,
}

impl Default for Pattern {
    fn default() -> Self {
        Self::new(0x5eed_5ca1e)
    }
}

impl Pattern {
    pub fn new(seed: u64) -> Self {
        let mut x = seed | 1;
        let mut bytes = vec![0u8; 2 * TABLE];
        for chunk in bytes[..TABLE].chunks_mut(8) {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        let (first, second) = bytes.split_at_mut(TABLE);
        second.copy_from_slice(first);
        Pattern { bytes: bytes.into_boxed_slice() }
    }

    /// The phase of connection number `index`: distinct for the first 65,536 connections,
    /// and spread so that neighbours do not share long runs.
    pub fn phase(index: u64) -> u32 {
        (index.wrapping_mul(40_503) % TABLE as u64) as u32
    }

    /// Bytes `offset..offset+len` of the stream with `phase`; `len` is capped at TABLE.
    pub fn slice(&self, phase: u32, offset: u64, len: usize) -> &[u8] {
        let start = ((u64::from(phase) + offset) % TABLE as u64) as usize;
        &self.bytes[start..start + len.min(TABLE)]
    }

    /// Check `data`, received at stream `offset`, against the pattern. Returns the position in
    /// `data` of the first wrong byte, if any.
    pub fn verify(&self, phase: u32, offset: u64, data: &[u8]) -> Option<usize> {
        let mut checked = 0;
        while checked < data.len() {
            let expected = self.slice(phase, offset + checked as u64, data.len() - checked);
            let got = &data[checked..checked + expected.len()];
            if got != expected {
                return got.iter().zip(expected).position(|(a, b)| a != b).map(|i| checked + i);
            }
            checked += expected.len();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_continue_across_the_table_end() {
        let p = Pattern::default();
        let phase = Pattern::phase(3);
        let whole: Vec<u8> =
            (0..3 * TABLE as u64).step_by(1000).flat_map(|o| p.slice(phase, o, 1000).to_vec()).collect();
        assert_eq!(p.verify(phase, 0, &whole), None);
    }

    #[test]
    fn detects_corruption_reordering_and_wrong_connection() {
        let p = Pattern::default();
        let (a, b) = (Pattern::phase(1), Pattern::phase(2));
        let good = p.slice(a, 100, 512).to_vec();
        assert_eq!(p.verify(a, 100, &good), None);
        let mut flipped = good.clone();
        flipped[300] ^= 1;
        assert_eq!(p.verify(a, 100, &flipped), Some(300));
        let mut swapped = good.clone();
        swapped.swap(10, 11);
        assert!(p.verify(a, 100, &swapped).is_some() || good[10] == good[11]);
        assert!(p.verify(b, 100, &good).is_some(), "another connection's bytes");
        assert!(p.verify(a, 101, &good).is_some(), "a lost byte shifts everything after it");
    }

    #[test]
    fn phases_are_distinct_for_many_connections() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..TABLE as u64 {
            assert!(seen.insert(Pattern::phase(i)), "phase of {i} repeats");
        }
    }
}
