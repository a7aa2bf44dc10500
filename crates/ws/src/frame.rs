//! RFC 6455 §5: frame headers written and read, and the mask.

/// An opcode (§5.2). The values 3-7 and 11-15 are reserved: a frame with one is a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    pub fn from_u8(value: u8) -> Option<Opcode> {
        Some(match value {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    pub fn value(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// The first header bit: the last frame of a message.
pub const FIN: u8 = 0x80;
/// RSV1: with permessage-deflate, the message is compressed (set on its first frame only).
pub const RSV1: u8 = 0x40;
pub const RSV2: u8 = 0x20;
pub const RSV3: u8 = 0x10;
/// The largest header: 2 octets, a 64-bit length and a masking key.
pub const MAX_HEADER: usize = 14;
/// Control frames carry at most this many octets (§5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// A frame's header as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    /// RSV1, RSV2 and RSV3 as they were in the first octet (`RSV1 | RSV2 | RSV3` bits).
    pub rsv: u8,
    /// The raw opcode (a reserved one is refused by the session, not here).
    pub opcode: u8,
    pub mask: Option<[u8; 4]>,
    pub len: u64,
}

/// What reading a header found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// The header and how many octets it took.
    Header(Header, usize),
    /// Not all of it has arrived.
    Partial,
    /// A 64-bit length with its most significant bit set (§5.2).
    BadLength,
}

/// Reads a frame header from the start of `buf`.
pub fn parse_header(buf: &[u8]) -> Parsed {
    if buf.len() < 2 {
        return Parsed::Partial;
    }
    let (b0, b1) = (buf[0], buf[1]);
    let masked = b1 & 0x80 != 0;
    let (len, mut at) = match b1 & 0x7f {
        126 => {
            let Some(octets) = buf.get(2..4) else { return Parsed::Partial };
            (u64::from(u16::from_be_bytes([octets[0], octets[1]])), 4)
        }
        127 => {
            let Some(octets) = buf.get(2..10) else { return Parsed::Partial };
            let mut word = [0u8; 8];
            word.copy_from_slice(octets);
            let len = u64::from_be_bytes(word);
            if len >> 63 != 0 {
                return Parsed::BadLength;
            }
            (len, 10)
        }
        short => (u64::from(short), 2),
    };
    let mask = if masked {
        let Some(key) = buf.get(at..at + 4) else { return Parsed::Partial };
        at += 4;
        Some([key[0], key[1], key[2], key[3]])
    } else {
        None
    };
    let header = Header { fin: b0 & FIN != 0, rsv: b0 & (RSV1 | RSV2 | RSV3), opcode: b0 & 0x0f, mask, len };
    Parsed::Header(header, at)
}

/// Appends a header: `first` is the first octet (FIN, RSV and opcode), the length in the
/// fewest octets (§5.2), and the masking key if any.
pub fn write_header(first: u8, len: usize, mask: Option<[u8; 4]>, out: &mut Vec<u8>) {
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    if len < 126 {
        // `len < 126` fits the 7-bit field.
        out.extend_from_slice(&[first, mask_bit | len as u8]);
    } else if let Ok(short) = u16::try_from(len) {
        out.extend_from_slice(&[first, mask_bit | 126]);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.extend_from_slice(&[first, mask_bit | 127]);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
}

/// Appends one whole frame; `payload` is masked with `mask` as it is copied.
pub fn write_frame(first: u8, payload: &[u8], mask: Option<[u8; 4]>, out: &mut Vec<u8>) {
    write_header(first, payload.len(), mask, out);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key, 0);
    }
}

/// XORs `buf` with the masking key, `offset` being where `buf` starts in the frame's payload
/// (so a payload unmasked in pieces gives the same octets). Eight octets at a time: masking is
/// the one per-byte cost WebSocket adds to a plain echo.
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    let shift = offset % 4;
    let rotated = [key[shift], key[(shift + 1) % 4], key[(shift + 2) % 4], key[(shift + 3) % 4]];
    let word = u64::from_ne_bytes([
        rotated[0], rotated[1], rotated[2], rotated[3], rotated[0], rotated[1], rotated[2], rotated[3],
    ]);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut octets = [0u8; 8];
        octets.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(octets) ^ word).to_ne_bytes());
    }
    // The whole chunks covered a multiple of 8 octets, so the key's phase is unchanged.
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= rotated[i % 4];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask_bytewise(buf: &mut [u8], key: [u8; 4], offset: usize) {
        for (i, byte) in buf.iter_mut().enumerate() {
            *byte ^= key[(offset + i) % 4];
        }
    }

    #[test]
    fn mask_matches_the_bytewise_definition_at_every_offset_and_length() {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        for offset in 0..8 {
            for len in 0..40 {
                let data: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(31)).collect();
                let mut fast = data.clone();
                let mut slow = data.clone();
                apply_mask(&mut fast, key, offset);
                mask_bytewise(&mut slow, key, offset);
                assert_eq!(fast, slow, "offset {offset} len {len}");
            }
        }
    }

    #[test]
    fn a_frame_is_its_header_then_its_payload_masked_from_the_first_octet() {
        let key = [0x91, 0x05, 0xee, 0x4a];
        for len in [0, 1, 7, 8, 9, 125, 126, 127, 512, 65535, 65536] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
            for mask in [None, Some(key)] {
                // Behind other bytes, as a second frame in one output is.
                let mut out = vec![0xaa; 3];
                write_frame(FIN | 0x2, &payload, mask, &mut out);
                let Parsed::Header(header, at) = parse_header(&out[3..]) else { panic!("len {len}: no header") };
                assert_eq!((header.fin, header.opcode, header.mask, header.len), (true, 2, mask, len as u64));
                let mut body = out[3 + at..].to_vec();
                if let Some(key) = mask {
                    mask_bytewise(&mut body, key, 0);
                }
                assert_eq!(body, payload, "len {len} mask {mask:?}");
                assert_eq!(out[..3], [0xaa; 3]);
            }
        }
    }

    #[test]
    fn rfc_masked_hello_example() {
        // RFC 6455 §5.7: a single-frame masked text message "Hello".
        let mut out = Vec::new();
        write_frame(FIN | 0x1, b"Hello", Some([0x37, 0xfa, 0x21, 0x3d]), &mut out);
        assert_eq!(out, [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]);
    }

    #[test]
    fn lengths_use_the_fewest_octets_and_read_back() {
        for len in [0usize, 125, 126, 65535, 65536, 1 << 20] {
            let mut out = Vec::new();
            write_header(FIN | 0x2, len, None, &mut out);
            let expected = if len < 126 {
                2
            } else if len <= 65535 {
                4
            } else {
                10
            };
            assert_eq!(out.len(), expected, "len {len}");
            let Parsed::Header(header, used) = parse_header(&out) else {
                panic!("len {len}: {:?}", parse_header(&out))
            };
            assert_eq!((header.len, used, header.fin, header.opcode), (len as u64, expected, true, 2));
            for cut in 0..out.len() {
                assert_eq!(parse_header(&out[..cut]), Parsed::Partial, "len {len} cut {cut}");
            }
        }
    }

    #[test]
    fn a_64_bit_length_with_its_top_bit_set_is_refused() {
        let mut frame = vec![0x82, 127];
        frame.extend_from_slice(&(1u64 << 63).to_be_bytes());
        assert_eq!(parse_header(&frame), Parsed::BadLength);
    }
}
