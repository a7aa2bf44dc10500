//! QPACK (RFC 9204) with the static table only: this side advertises
//! QPACK_MAX_TABLE_CAPACITY 0 and QPACK_BLOCKED_STREAMS 0, so a peer may never reference a
//! dynamic table, and this side's encoder never uses one (static references and literals, each
//! string Huffman-coded when that is shorter). Integers, strings and the Huffman code are
//! HPACK's (RFC 9204 §4.1), shared with `sockscale-h2`.

use sockscale_h2::hpack::{huffman, integer, put_integer, HeaderList, HpackError};

use crate::error::{ErrorCode, H3Error};

/// The static table (RFC 9204 Appendix A), indices 0..=98.
#[rustfmt::skip]
pub const STATIC: [(&[u8], &[u8]); 99] = [
    (b":authority", b""), (b":path", b"/"), (b"age", b"0"), (b"content-disposition", b""),
    (b"content-length", b"0"), (b"cookie", b""), (b"date", b""), (b"etag", b""),
    (b"if-modified-since", b""), (b"if-none-match", b""), (b"last-modified", b""), (b"link", b""),
    (b"location", b""), (b"referer", b""), (b"set-cookie", b""), (b":method", b"CONNECT"),
    (b":method", b"DELETE"), (b":method", b"GET"), (b":method", b"HEAD"), (b":method", b"OPTIONS"),
    (b":method", b"POST"), (b":method", b"PUT"), (b":scheme", b"http"), (b":scheme", b"https"),
    (b":status", b"103"), (b":status", b"200"), (b":status", b"304"), (b":status", b"404"),
    (b":status", b"503"), (b"accept", b"*/*"), (b"accept", b"application/dns-message"),
    (b"accept-encoding", b"gzip, deflate, br"), (b"accept-ranges", b"bytes"),
    (b"access-control-allow-headers", b"cache-control"), (b"access-control-allow-headers", b"content-type"),
    (b"access-control-allow-origin", b"*"), (b"cache-control", b"max-age=0"),
    (b"cache-control", b"max-age=2592000"), (b"cache-control", b"max-age=604800"),
    (b"cache-control", b"no-cache"), (b"cache-control", b"no-store"),
    (b"cache-control", b"public, max-age=31536000"), (b"content-encoding", b"br"),
    (b"content-encoding", b"gzip"), (b"content-type", b"application/dns-message"),
    (b"content-type", b"application/javascript"), (b"content-type", b"application/json"),
    (b"content-type", b"application/x-www-form-urlencoded"), (b"content-type", b"image/gif"),
    (b"content-type", b"image/jpeg"), (b"content-type", b"image/png"), (b"content-type", b"text/css"),
    (b"content-type", b"text/html; charset=utf-8"), (b"content-type", b"text/plain"),
    (b"content-type", b"text/plain;charset=utf-8"), (b"range", b"bytes=0-"),
    (b"strict-transport-security", b"max-age=31536000"),
    (b"strict-transport-security", b"max-age=31536000; includesubdomains"),
    (b"strict-transport-security", b"max-age=31536000; includesubdomains; preload"),
    (b"vary", b"accept-encoding"), (b"vary", b"origin"), (b"x-content-type-options", b"nosniff"),
    (b"x-xss-protection", b"1; mode=block"), (b":status", b"100"), (b":status", b"204"),
    (b":status", b"206"), (b":status", b"302"), (b":status", b"400"), (b":status", b"403"),
    (b":status", b"421"), (b":status", b"425"), (b":status", b"500"), (b"accept-language", b""),
    (b"access-control-allow-credentials", b"FALSE"), (b"access-control-allow-credentials", b"TRUE"),
    (b"access-control-allow-headers", b"*"), (b"access-control-allow-methods", b"get"),
    (b"access-control-allow-methods", b"get, post, options"), (b"access-control-allow-methods", b"options"),
    (b"access-control-expose-headers", b"content-length"), (b"access-control-request-headers", b"content-type"),
    (b"access-control-request-method", b"get"), (b"access-control-request-method", b"post"),
    (b"alt-svc", b"clear"), (b"authorization", b""),
    (b"content-security-policy", b"script-src 'none'; object-src 'none'; base-uri 'none'"),
    (b"early-data", b"1"), (b"expect-ct", b""), (b"forwarded", b""), (b"if-range", b""), (b"origin", b""),
    (b"purpose", b"prefetch"), (b"server", b""), (b"timing-allow-origin", b"*"),
    (b"upgrade-insecure-requests", b"1"), (b"user-agent", b""), (b"x-forwarded-for", b""),
    (b"x-frame-options", b"deny"), (b"x-frame-options", b"sameorigin"),
];

/// Why a field section could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QpackError {
    #[error("a reference to the dynamic table, which this side does not allow")]
    Dynamic,
    #[error("the field section ends inside a field line")]
    Truncated,
    #[error("an integer longer than this decoder accepts")]
    IntegerOverflow,
    #[error("a static index above 98")]
    BadIndex,
    #[error("a Huffman-coded string with bad padding or EOS")]
    Huffman,
    #[error("the decoded fields exceed the field section limit")]
    TooLarge,
}

impl QpackError {
    /// The error as the stream reports it: over the limit is a stream error
    /// (H3_EXCESSIVE_LOAD, RFC 9114 §4.2.2: a server may answer 431 first); anything else is
    /// QPACK_DECOMPRESSION_FAILED on the connection (RFC 9204 §2.2.3, §6).
    pub fn to_h3(self) -> H3Error {
        match self {
            QpackError::TooLarge => H3Error::Stream(ErrorCode::H3_EXCESSIVE_LOAD, "a field section over the limit"),
            QpackError::Dynamic => {
                H3Error::Connection(ErrorCode::QPACK_DECOMPRESSION_FAILED, "a dynamic table reference")
            }
            _ => H3Error::Connection(ErrorCode::QPACK_DECOMPRESSION_FAILED, "a malformed field section"),
        }
    }
}

impl From<HpackError> for QpackError {
    fn from(e: HpackError) -> Self {
        match e {
            HpackError::IntegerOverflow => QpackError::IntegerOverflow,
            HpackError::Huffman => QpackError::Huffman,
            _ => QpackError::Truncated,
        }
    }
}

/// The static index of (name, value), and of the first entry with `name`.
fn find(name: &[u8], value: &[u8]) -> (Option<usize>, Option<usize>) {
    let mut by_name = None;
    for (i, (n, v)) in STATIC.iter().enumerate() {
        if *n == name {
            if *v == value {
                return (Some(i), Some(i));
            }
            by_name.get_or_insert(i);
        }
    }
    (None, by_name)
}

/// Append a string with an `prefix`-bit length whose H bit is `h_bit`, over `flags`:
/// Huffman-coded when that is shorter.
fn put_str(out: &mut Vec<u8>, s: &[u8], prefix: u8, flags: u8, h_bit: u8) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        put_integer(out, coded, prefix, flags | h_bit);
        huffman::encode_into(s, out);
    } else {
        put_integer(out, s.len(), prefix, flags);
        out.extend_from_slice(s);
    }
}

/// Encode a field section (names in lower case): the prefix `00 00` (Required Insert Count 0,
/// Base 0), then per field a static index when name and value match an entry (§4.5.2), a
/// static name reference with a literal value when the name does (§4.5.4), else a literal name
/// and value (§4.5.6).
pub fn encode_field_section<'f>(fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>, out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0]);
    for (name, value) in fields {
        match find(name, value) {
            (Some(i), _) => put_integer(out, i, 6, 0xc0),
            (None, Some(i)) => {
                put_integer(out, i, 4, 0x50);
                put_str(out, value, 7, 0, 0x80);
            }
            (None, None) => {
                put_str(out, name, 3, 0x20, 0x08);
                put_str(out, value, 7, 0, 0x80);
            }
        }
    }
}

/// Read a string whose length has an `prefix`-bit prefix and whose H bit is `h_bit`: the
/// octets (raw), whether Huffman-coded, and the octets used.
fn read_str(input: &[u8], prefix: u8, h_bit: u8) -> Result<(&[u8], bool, usize), QpackError> {
    let huffman = input.first().ok_or(QpackError::Truncated)? & h_bit != 0;
    let (len, n) = integer(input, prefix)?;
    let body = input.get(n..).and_then(|rest| rest.get(..len)).ok_or(QpackError::Truncated)?;
    Ok((body, huffman, n + len))
}

/// Decode a field section into `list` (cleared first), whose limit is the field section size
/// this side allows (name + value + 32 per field, RFC 9114 §4.2.2): past it, decoding stops
/// with [`QpackError::TooLarge`]. Any dynamic reference, or a Required Insert Count other than
/// 0, is [`QpackError::Dynamic`].
pub fn decode_field_section(block: &[u8], list: &mut HeaderList) -> Result<(), QpackError> {
    list.clear();
    let (required, n) = integer(block, 8)?;
    if required != 0 {
        return Err(QpackError::Dynamic);
    }
    let sign = *block.get(n).ok_or(QpackError::Truncated)? & 0x80 != 0;
    let (_delta_base, m) = integer(&block[n..], 7)?;
    // With Required Insert Count 0, a negative Base (S=1) is an error (§4.5.1.2).
    if sign {
        return Err(QpackError::Dynamic);
    }
    let mut at = n + m;
    // Huffman-decoded strings, reused field to field.
    let mut scratch = Vec::new();
    while at < block.len() {
        let rest = &block[at..];
        let first = rest[0];
        let (name, name_huff, value, value_huff);
        if first & 0x80 != 0 {
            // Indexed field line (§4.5.2): T=1 static.
            if first & 0x40 == 0 {
                return Err(QpackError::Dynamic);
            }
            let (i, used) = integer(rest, 6)?;
            let &(n, v) = STATIC.get(i).ok_or(QpackError::BadIndex)?;
            at += used;
            list.push(n, v);
            if list.overflowed() {
                return Err(QpackError::TooLarge);
            }
            continue;
        } else if first & 0xc0 == 0x40 {
            // Literal field line with name reference (§4.5.4): T=1 static.
            if first & 0x10 == 0 {
                return Err(QpackError::Dynamic);
            }
            let (i, used) = integer(rest, 4)?;
            (name, name_huff) = (STATIC.get(i).ok_or(QpackError::BadIndex)?.0, false);
            let (v, h, vused) = read_str(&rest[used..], 7, 0x80)?;
            (value, value_huff) = (v, h);
            at += used + vused;
        } else if first & 0xe0 == 0x20 {
            // Literal field line with literal name (§4.5.6).
            let (nm, h, nused) = read_str(rest, 3, 0x08)?;
            (name, name_huff) = (nm, h);
            let (v, h, vused) = read_str(&rest[nused..], 7, 0x80)?;
            (value, value_huff) = (v, h);
            at += nused + vused;
        } else {
            // Post-base index or name reference (§4.5.3, §4.5.5): dynamic only.
            return Err(QpackError::Dynamic);
        }
        if !name_huff && !value_huff {
            list.push(name, value);
        } else {
            scratch.clear();
            if name_huff {
                huffman::decode(name, &mut scratch)?;
            } else {
                scratch.extend_from_slice(name);
            }
            let name_end = scratch.len();
            if value_huff {
                huffman::decode(value, &mut scratch)?;
            } else {
                scratch.extend_from_slice(value);
            }
            list.push(&scratch[..name_end], &scratch[name_end..]);
        }
        if list.overflowed() {
            return Err(QpackError::TooLarge);
        }
    }
    Ok(())
}

/// The peer's QPACK encoder stream, after its type (RFC 9204 §4.3), for a decoder that allows no
/// dynamic table: "Set Dynamic Table Capacity 0" (the octet 0x20) is the one instruction that
/// may come; anything else (a capacity above 0, an insert, a duplicate) is
/// QPACK_ENCODER_STREAM_ERROR. It keeps no state: each instruction allowed is one octet.
#[derive(Debug, Default)]
pub struct EncoderStreamReader;

impl EncoderStreamReader {
    /// Read the stream's next octets; `fin`: the stream ended (H3_CLOSED_CRITICAL_STREAM).
    pub fn feed(&mut self, input: &[u8], fin: bool) -> Result<(), H3Error> {
        if let Some(&b) = input.iter().find(|&&b| b != 0x20) {
            let reason = match b {
                0x21..=0x3f => "a dynamic table capacity above the 0 allowed",
                0x00..=0x1f => "a Duplicate with no dynamic table",
                _ => "an insert into a dynamic table of capacity 0",
            };
            return Err(H3Error::Connection(ErrorCode::QPACK_ENCODER_STREAM_ERROR, reason));
        }
        if fin {
            return Err(H3Error::Connection(ErrorCode::H3_CLOSED_CRITICAL_STREAM, "the QPACK encoder stream ended"));
        }
        Ok(())
    }
}

/// The peer's QPACK decoder stream, after its type (RFC 9204 §4.4), for an encoder that never
/// references a dynamic table: Stream Cancellation (01 + 6-bit prefix stream id) may come and is
/// read across any split; Section Acknowledgment and Insert Count Increment acknowledge what
/// was never sent: QPACK_DECODER_STREAM_ERROR.
#[derive(Debug, Default)]
pub struct DecoderStreamReader {
    /// Continuation octets of a stream id read so far (0: between instructions).
    continuation: u8,
}

impl DecoderStreamReader {
    /// Read the stream's next octets; `fin`: the stream ended (H3_CLOSED_CRITICAL_STREAM).
    pub fn feed(&mut self, input: &[u8], fin: bool) -> Result<(), H3Error> {
        let error = |reason| H3Error::Connection(ErrorCode::QPACK_DECODER_STREAM_ERROR, reason);
        for &b in input {
            if self.continuation > 0 {
                // A stream id is below 2^62: ten octets past the prefix is never needed.
                if self.continuation > 10 {
                    return Err(error("a stream id longer than any"));
                }
                self.continuation = if b & 0x80 != 0 { self.continuation + 1 } else { 0 };
                continue;
            }
            match b {
                0x80..=0xff => return Err(error("a Section Acknowledgment for a section without dynamic references")),
                0x00..=0x3f => return Err(error("an Insert Count Increment with no inserts")),
                0x7f => self.continuation = 1,
                _ => {}
            }
        }
        if fin {
            return Err(H3Error::Connection(ErrorCode::H3_CLOSED_CRITICAL_STREAM, "the QPACK decoder stream ended"));
        }
        Ok(())
    }

    /// True between instructions.
    pub fn is_between_instructions(&self) -> bool {
        self.continuation == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn decode(block: &[u8]) -> Result<Fields, QpackError> {
        let mut list = HeaderList::with_limit(1 << 16);
        decode_field_section(block, &mut list)?;
        Ok(list.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect())
    }

    fn owned(fields: &[(&str, &str)]) -> Fields {
        fields.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
    }

    /// Every entry, index by index, against the table in the RFC's text.
    #[test]
    fn the_static_table_is_rfc_9204_appendix_a() {
        let text = include_str!("rfc9204_static_table.txt");
        let rows: Vec<(usize, String, String)> = text
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let index = cells.get(1)?.parse().ok()?;
                // The source is Markdown: a backslash escapes `*` and `'`.
                let unescape = |s: &str| s.replace("\\*", "*").replace("\\'", "'");
                Some((index, unescape(cells[2]), unescape(cells[3])))
            })
            .collect();
        assert_eq!(rows.len(), 99);
        for (i, (index, name, value)) in rows.iter().enumerate() {
            assert_eq!(*index, i);
            assert_eq!(STATIC[i], (name.as_bytes(), value.as_bytes()), "entry {i}");
        }
    }

    /// RFC 9204 B.1: a literal with a static name reference, `:path=/index.html`.
    #[test]
    fn rfc_9204_b1_example() {
        let block = [0x00, 0x00, 0x51, 0x0b, b'/', b'i', b'n', b'd', b'e', b'x', b'.', b'h', b't', b'm', b'l'];
        assert_eq!(decode(&block), Ok(owned(&[(":path", "/index.html")])));
        // B.4's section references the dynamic table: refused.
        assert_eq!(decode(&[0x05, 0x00, 0x80, 0xc1, 0x81]), Err(QpackError::Dynamic));
        // B.2's too (Required Insert Count 2, post-base indices).
        assert_eq!(decode(&[0x03, 0x81, 0x10, 0x11]), Err(QpackError::Dynamic));
    }

    #[test]
    fn the_encoder_picks_the_shortest_representation() {
        let mut out = Vec::new();
        encode_field_section([(&b":method"[..], &b"GET"[..]), (b":path", b"/index.html")], &mut out);
        // :method GET is static 17; :path by name (1), its value Huffman-coded (shorter).
        assert_eq!(&out[..4], &[0x00, 0x00, 0xc0 | 17, 0x51]);
        assert_ne!(out[4] & 0x80, 0, "Huffman-coded value");
        assert_eq!(decode(&out), Ok(owned(&[(":method", "GET"), (":path", "/index.html")])));
        out.clear();
        encode_field_section([(&b"x-id"[..], &[0xffu8, 0xfe][..])], &mut out);
        // A literal name Huffman-coded ("x-id" is 3 octets coded), a binary value raw.
        assert_eq!(out[2] & 0xe8, 0x28);
        assert_eq!(decode(&out), Ok(vec![(b"x-id".to_vec(), vec![0xff, 0xfe])]));
    }

    #[test]
    fn bad_sections_are_errors_not_panics() {
        assert_eq!(decode(&[]), Err(QpackError::Truncated));
        assert_eq!(decode(&[0]), Err(QpackError::Truncated));
        assert_eq!(decode(&[0, 0x80]), Err(QpackError::Dynamic), "negative base");
        assert_eq!(decode(&[0, 0, 0x80]), Err(QpackError::Dynamic), "dynamic indexed");
        assert_eq!(decode(&[0, 0, 0x40, 0]), Err(QpackError::Dynamic), "dynamic name reference");
        assert_eq!(decode(&[0, 0, 0x10]), Err(QpackError::Dynamic), "post-base");
        assert_eq!(decode(&[0, 0, 0x00]), Err(QpackError::Dynamic), "post-base name reference");
        assert_eq!(decode(&[0, 0, 0xff, 0x25]), Err(QpackError::BadIndex), "static 100");
        assert_eq!(decode(&[0, 0, 0x51, 0x05, b'/']), Err(QpackError::Truncated));
        assert_eq!(decode(&[0, 0, 0x23, b'a', b'b']), Err(QpackError::Truncated));
        assert_eq!(decode(&[0, 0, 0x51, 0x81, 0x00]), Err(QpackError::Huffman));
        assert_eq!(decode(&[0, 0]), Ok(vec![]));
    }

    /// Size as RFC 9114 counts it: name + value + 32 per field; past the limit, TooLarge.
    #[test]
    fn the_limit_counts_32_per_field() {
        let mut out = Vec::new();
        encode_field_section([(&b"aa"[..], &b"bb"[..]), (b"cc", b"dd")], &mut out);
        let mut list = HeaderList::with_limit(72);
        assert_eq!(decode_field_section(&out, &mut list), Ok(()));
        assert_eq!(list.size(), 72);
        let mut list = HeaderList::with_limit(71);
        assert_eq!(decode_field_section(&out, &mut list), Err(QpackError::TooLarge));
        assert_eq!(
            QpackError::TooLarge.to_h3(),
            H3Error::Stream(ErrorCode::H3_EXCESSIVE_LOAD, "a field section over the limit")
        );
        assert_eq!(QpackError::Dynamic.to_h3().code(), ErrorCode::QPACK_DECOMPRESSION_FAILED);
    }

    #[test]
    fn round_trips_and_arbitrary_bytes() {
        use proptest::prelude::*;
        let field = (
            prop_oneof![
                Just(b":path".to_vec()),
                Just(b"content-type".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..40)
            ],
            prop_oneof![Just(b"/".to_vec()), Just(b"text/css".to_vec()), proptest::collection::vec(any::<u8>(), 0..60)],
        );
        proptest!(|(fields in proptest::collection::vec(field, 0..12))| {
            let mut out = Vec::new();
            encode_field_section(fields.iter().map(|(n, v)| (&n[..], &v[..])), &mut out);
            prop_assert_eq!(decode(&out), Ok(fields.clone()));
        });
        proptest!(|(bytes in proptest::collection::vec(any::<u8>(), 0..200))| {
            let mut list = HeaderList::with_limit(256);
            let _ = decode_field_section(&bytes, &mut list);
            let kept: usize = list.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
            prop_assert!(kept <= 256);
        });
    }

    #[test]
    fn encoder_stream_allows_only_capacity_zero() {
        let mut r = EncoderStreamReader;
        assert_eq!(r.feed(&[0x20, 0x20], false), Ok(()));
        // RFC 9204 B.2's encoder stream: capacity 220, then inserts.
        let b2 = [0x3f, 0xbd, 0x01, 0xc0, 0x0f];
        assert_eq!(r.feed(&b2, false).map_err(|e| e.code()), Err(ErrorCode::QPACK_ENCODER_STREAM_ERROR));
        for insert in [&[0xc0u8, 0x00][..], &[0x4a], &[0x02]] {
            assert_eq!(r.feed(insert, false).map_err(|e| e.code()), Err(ErrorCode::QPACK_ENCODER_STREAM_ERROR));
        }
        assert_eq!(r.feed(&[], true).map_err(|e| e.code()), Err(ErrorCode::H3_CLOSED_CRITICAL_STREAM));
    }

    #[test]
    fn decoder_stream_allows_only_cancellations_across_splits() {
        // Stream Cancellation of stream 8 (B.4), and of a large stream id (multi-octet).
        let mut input = vec![0x48];
        put_integer(&mut input, 1 << 40, 6, 0x40);
        input.push(0x48);
        for cut in 0..=input.len() {
            let mut r = DecoderStreamReader::default();
            assert_eq!(r.feed(&input[..cut], false), Ok(()));
            assert_eq!(r.feed(&input[cut..], false), Ok(()));
            assert!(r.is_between_instructions());
            // What follows is read as an instruction, not as part of the id.
            assert_eq!(r.feed(&[0x84], false).map_err(|e| e.code()), Err(ErrorCode::QPACK_DECODER_STREAM_ERROR));
        }
        let mut r = DecoderStreamReader::default();
        assert_eq!(r.feed(&[0x01], false).map_err(|e| e.code()), Err(ErrorCode::QPACK_DECODER_STREAM_ERROR));
        let mut r = DecoderStreamReader::default();
        let endless = [0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(r.feed(&endless, false).map_err(|e| e.code()), Err(ErrorCode::QPACK_DECODER_STREAM_ERROR));
        let mut r = DecoderStreamReader::default();
        assert_eq!(r.feed(&[], true).map_err(|e| e.code()), Err(ErrorCode::H3_CLOSED_CRITICAL_STREAM));
    }
}
