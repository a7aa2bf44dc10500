//! HPACK (RFC 7541): the request decoder with its dynamic table, and the response encoder.
//!
//! The decoder is bounded three ways: its dynamic table by the size this server advertises
//! (SETTINGS_HEADER_TABLE_SIZE), the header block it is given by the connection (the
//! CONTINUATION bound), and what it decodes into a [`HeaderList`] by the list's limit (a block of
//! one-byte references to a large table entry would otherwise decode to megabytes: past the
//! limit, fields are decoded, so the table stays in step with the peer's, but not kept).
//!
//! The encoder keeps no dynamic table: every response field is a literal "without indexing",
//! its name by static index where the static table has it. That costs a few bytes a response
//! and saves a table per connection.

pub mod huffman;

use std::collections::VecDeque;
use std::ops::Range;

/// Why a header block could not be decoded: a connection error of type COMPRESSION_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("the header block ends inside a field")]
    Truncated,
    #[error("an integer longer than this decoder accepts")]
    IntegerOverflow,
    #[error("an index outside the static and dynamic tables")]
    BadIndex,
    #[error("a Huffman-coded string with bad padding or EOS")]
    Huffman,
    #[error("a dynamic table size update above the advertised limit")]
    TableSizeTooLarge,
    #[error("a dynamic table size update after the first field")]
    TableSizeMisplaced,
}

/// The static table (RFC 7541 Appendix A), indices 1..=61.
#[rustfmt::skip]
pub(crate) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"),
    (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"), (b":status", b"200"),
    (b":status", b"204"), (b":status", b"206"), (b":status", b"304"), (b":status", b"400"),
    (b":status", b"404"), (b":status", b"500"), (b"accept-charset", b""), (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""), (b"accept-ranges", b""), (b"accept", b""), (b"access-control-allow-origin", b""),
    (b"age", b""), (b"allow", b""), (b"authorization", b""), (b"cache-control", b""),
    (b"content-disposition", b""), (b"content-encoding", b""), (b"content-language", b""), (b"content-length", b""),
    (b"content-location", b""), (b"content-range", b""), (b"content-type", b""), (b"cookie", b""),
    (b"date", b""), (b"etag", b""), (b"expect", b""), (b"expires", b""),
    (b"from", b""), (b"host", b""), (b"if-match", b""), (b"if-modified-since", b""),
    (b"if-none-match", b""), (b"if-range", b""), (b"if-unmodified-since", b""), (b"last-modified", b""),
    (b"link", b""), (b"location", b""), (b"max-forwards", b""), (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""), (b"range", b""), (b"referer", b""), (b"refresh", b""),
    (b"retry-after", b""), (b"server", b""), (b"set-cookie", b""), (b"strict-transport-security", b""),
    (b"transfer-encoding", b""), (b"user-agent", b""), (b"vary", b""), (b"via", b""),
    (b"www-authenticate", b""),
];

/// What a table entry costs (RFC 7541 §4.1): its octets plus 32.
pub const ENTRY_OVERHEAD: usize = 32;

/// The decoded fields of one header block, in one buffer, with a limit on their size as RFC 9113
/// counts it (SETTINGS_MAX_HEADER_LIST_SIZE: name, value and 32 per field).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderList {
    bytes: Vec<u8>,
    fields: Vec<(Range<u32>, Range<u32>)>,
    size: usize,
    limit: usize,
    /// A field did not fit under the limit: the list is incomplete and the request too large.
    overflowed: bool,
}

impl HeaderList {
    pub fn with_limit(limit: usize) -> Self {
        HeaderList { limit, ..HeaderList::default() }
    }

    /// As [`HeaderList::with_limit`], for the fields of one encoded block of `block_len`
    /// octets: room is made once for what it likely decodes to (an indexed field expands a
    /// few octets into tens), so a typical request's list is two allocations rather than a
    /// dozen reallocations (measured: `realloc` under `HeaderList::push` was 1.6% of an
    /// HTTP/3 server's CPU).
    pub fn for_block(limit: usize, block_len: usize) -> Self {
        let bytes = block_len.saturating_mul(4).saturating_add(64).min(limit);
        HeaderList { limit, bytes: Vec::with_capacity(bytes), fields: Vec::with_capacity(16), ..HeaderList::default() }
    }

    /// Empty the list for the next block, keeping its buffers and its limit.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
        self.size = 0;
        self.overflowed = false;
    }

    /// The fields, in order: (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|(n, v)| {
            (&self.bytes[n.start as usize..n.end as usize], &self.bytes[v.start as usize..v.end as usize])
        })
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The size RFC 9113 counts, of every field decoded (kept or not).
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The value of the first field named `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Keep the field whose name and value were appended to `bytes` from `start` (name ending at
    /// `name_end`), if it fits under the limit.
    fn commit(&mut self, start: usize, name_end: usize) {
        let added = self.bytes.len() - start + ENTRY_OVERHEAD;
        self.size = self.size.saturating_add(added);
        // Offsets are u32: a list is far below 4 GiB, as its limit is.
        if self.overflowed || self.size > self.limit || self.bytes.len() > u32::MAX as usize {
            self.overflowed = true;
            self.bytes.truncate(start);
            return;
        }
        self.fields.push((start as u32..name_end as u32, name_end as u32..self.bytes.len() as u32));
    }

    /// Append a field, counted against the limit (kept only if it fits).
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        let name_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.commit(start, name_end);
    }
}

/// One dynamic table entry, name and value in one allocation.
#[derive(Debug)]
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }
    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }
    fn size(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD
    }
}

/// The request decoder of one connection.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    /// The table's current maximum, as the peer's last size update set it.
    max_size: usize,
    /// The most this server allows (its SETTINGS_HEADER_TABLE_SIZE).
    allowed: usize,
}

impl Decoder {
    /// A decoder whose table may hold `allowed` bytes (SETTINGS_HEADER_TABLE_SIZE, 4,096 by
    /// default in the protocol).
    pub fn new(allowed: usize) -> Self {
        Decoder { table: VecDeque::new(), size: 0, max_size: allowed, allowed }
    }

    /// The bytes the dynamic table holds (RFC 7541's size, with the per-entry 32).
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Decode a whole header block into `list`.
    pub fn decode(&mut self, block: &[u8], list: &mut HeaderList) -> Result<(), HpackError> {
        let mut at = 0;
        let mut fields_seen = false;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let (index, n) = integer(&block[at..], 7)?;
                at += n;
                let (name, value) = self.entry(index)?;
                list.push(name, value);
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first field.
                if fields_seen {
                    return Err(HpackError::TableSizeMisplaced);
                }
                let (size, n) = integer(&block[at..], 5)?;
                at += n;
                if size > self.allowed {
                    return Err(HpackError::TableSizeTooLarge);
                }
                self.max_size = size;
                self.evict(0);
                continue;
            } else {
                // Literal (§6.2): with incremental indexing (01), without (0000), never (0001).
                let indexing = first & 0x40 != 0;
                let (index, n) = integer(&block[at..], if indexing { 6 } else { 4 })?;
                at += n;
                let start = list.bytes.len();
                let strings = (|| {
                    if index == 0 {
                        at += string(&block[at..], &mut list.bytes)?;
                    } else {
                        let (name, _) = self.entry(index)?;
                        list.bytes.extend_from_slice(name);
                    }
                    let name_end = list.bytes.len();
                    at += string(&block[at..], &mut list.bytes)?;
                    Ok(name_end)
                })();
                let name_end = match strings {
                    Ok(name_end) => name_end,
                    Err(e) => {
                        list.bytes.truncate(start);
                        return Err(e);
                    }
                };
                if indexing {
                    self.insert(&list.bytes[start..], name_end - start);
                }
                list.commit(start, name_end);
            }
            fields_seen = true;
        }
        Ok(())
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self.table.get(index - 62).map(|e| (e.name(), e.value())).ok_or(HpackError::BadIndex),
        }
    }

    fn insert(&mut self, bytes: &[u8], name_len: usize) {
        let size = bytes.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // Larger than the table: it empties the table (§4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.table.push_front(Entry { bytes: bytes.into(), name_len });
        self.size += size;
    }

    /// Evict the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            match self.table.pop_back() {
                Some(old) => self.size -= old.size(),
                None => break,
            }
        }
        if self.table.is_empty() {
            // An emptied table gives its memory back.
            self.table = VecDeque::new();
        }
    }
}

/// Decode an integer with an `prefix`-bit prefix (§5.1): (value, octets used). Values above
/// 2^28 are refused, which no sane field needs. Public for QPACK (RFC 9204 §4.1.1 is the same).
pub fn integer(input: &[u8], prefix: u8) -> Result<(usize, usize), HpackError> {
    let mask = (1usize << prefix) - 1;
    let first = *input.first().ok_or(HpackError::Truncated)?;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok((value, 1));
    }
    for (i, &byte) in input.iter().enumerate().skip(1) {
        let shift = 7 * (i - 1);
        if shift > 21 {
            return Err(HpackError::IntegerOverflow);
        }
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(HpackError::Truncated)
}

/// Decode a string literal (§5.2), appending its octets to `out`: octets used.
fn string(input: &[u8], out: &mut Vec<u8>) -> Result<usize, HpackError> {
    let huffman = input.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let (len, n) = integer(input, 7)?;
    let body = input.get(n..n + len).ok_or(HpackError::Truncated)?;
    if huffman {
        huffman::decode(body, out)?;
    } else {
        out.extend_from_slice(body);
    }
    Ok(n + len)
}

/// Append an integer with a `prefix`-bit prefix, the first octet's other bits being `flags`.
/// Public for QPACK (RFC 9204 §4.1.1).
pub fn put_integer(out: &mut Vec<u8>, value: usize, prefix: u8, flags: u8) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Append a string literal, raw (no Huffman), with a 7-bit length prefix.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_integer(out, s.len(), 7, 0);
    out.extend_from_slice(s);
}

/// Encode a response's fields: `:status`, then `fields` (names in lower case), each a literal
/// without indexing (or `:status` indexed when the static table has it). `size_update`: begin
/// with a dynamic table size update to 0 (the peer lowered SETTINGS_HEADER_TABLE_SIZE, and this
/// encoder uses no table).
pub fn encode_response(out: &mut Vec<u8>, status: u16, fields: &[(&[u8], &[u8])], size_update: bool) {
    if size_update {
        put_integer(out, 0, 5, 0x20);
    }
    let code = status.to_string();
    match STATIC[7..14].iter().position(|(_, v)| *v == code.as_bytes()) {
        Some(i) => put_integer(out, 8 + i, 7, 0x80),
        None => {
            put_integer(out, 8, 4, 0);
            put_string(out, code.as_bytes());
        }
    }
    for (name, value) in fields {
        match STATIC.iter().position(|(n, _)| n == name) {
            Some(i) => put_integer(out, i + 1, 4, 0),
            None => {
                out.push(0);
                put_string(out, name);
            }
        }
        put_string(out, value);
    }
}

/// Encode a request's fields with the given representation, for tests (an encoder that may
/// index, as clients do).
#[cfg(test)]
pub(crate) mod test_encode {
    /// A literal with a new name, without indexing, raw strings.
    pub(crate) fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        out.push(0);
        super::put_string(out, name);
        super::put_string(out, value);
    }

    /// A literal with a new name, with incremental indexing.
    pub(crate) fn indexed_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        out.push(0x40);
        super::put_string(out, name);
        super::put_string(out, value);
    }

    /// A whole request block: the pseudo-fields, then `fields`, as literals.
    pub(crate) fn request(method: &str, path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in [(":method", method), (":scheme", "http"), (":path", path), (":authority", "localhost")] {
            literal(&mut out, n.as_bytes(), v.as_bytes());
        }
        for (n, v) in fields {
            literal(&mut out, n.as_bytes(), v.as_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut list = HeaderList::with_limit(1 << 20);
        d.decode(block, &mut list)?;
        Ok(list
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
            .collect())
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn integers_per_rfc_7541_c1() {
        assert_eq!(integer(&[10], 5), Ok((10, 1)));
        assert_eq!(integer(&[31, 154, 10], 5), Ok((1337, 3)));
        assert_eq!(integer(&[42], 8), Ok((42, 1)));
        assert_eq!(integer(&[31, 154], 5), Err(HpackError::Truncated));
        assert_eq!(integer(&[31, 0xff, 0xff, 0xff, 0xff, 0x0f], 5), Err(HpackError::IntegerOverflow));
        for value in [0, 30, 31, 32, 127, 128, 1337, 1 << 20] {
            let mut out = Vec::new();
            put_integer(&mut out, value, 5, 0xe0);
            assert_eq!(integer(&out, 5), Ok((value, out.len())));
        }
    }

    /// RFC 7541 C.3: three requests without Huffman, sharing the dynamic table.
    #[test]
    fn rfc_7541_c3_requests() {
        let mut d = Decoder::new(4096);
        let first = [
            0x82, 0x86, 0x84, 0x41, 0x0f, b'w', b'w', b'w', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c',
            b'o', b'm',
        ];
        assert_eq!(
            decode(&mut d, &first),
            Ok(pairs(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]))
        );
        assert_eq!(d.table_size(), 57);
        let second = [0x82, 0x86, 0x84, 0xbe, 0x58, 0x08, b'n', b'o', b'-', b'c', b'a', b'c', b'h', b'e'];
        assert_eq!(
            decode(&mut d, &second),
            Ok(pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ]))
        );
        assert_eq!(d.table_size(), 110);
    }

    /// RFC 7541 C.4.1: the first request with Huffman.
    #[test]
    fn rfc_7541_c4_huffman_request() {
        let mut d = Decoder::new(4096);
        let block =
            [0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        assert_eq!(
            decode(&mut d, &block),
            Ok(pairs(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]))
        );
    }

    /// A Huffman-coded literal, as browsers and curl send them, indexed and then referenced.
    #[test]
    fn huffman_literals_with_indexing() {
        let mut block = vec![0x40];
        for s in [&b"user-agent"[..], b"curl/8.0"] {
            let coded = huffman::encode(s);
            put_integer(&mut block, coded.len(), 7, 0x80);
            block.extend(coded);
        }
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &block), Ok(pairs(&[("user-agent", "curl/8.0")])));
        assert_eq!(decode(&mut d, &[0x80 | 62]), Ok(pairs(&[("user-agent", "curl/8.0")])));
    }

    #[test]
    fn errors_are_compression_errors_not_panics() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &[0x80]), Err(HpackError::BadIndex));
        assert_eq!(decode(&mut d, &[0xbe]), Err(HpackError::BadIndex));
        // A literal whose value is missing.
        assert_eq!(decode(&mut d, &[0x41]), Err(HpackError::Truncated));
        assert_eq!(decode(&mut d, &[0x00, 0x03, b'a']), Err(HpackError::Truncated));
        // A size update above the advertised size, and one after a field.
        assert_eq!(decode(&mut d, &[0x3f, 0xe2, 0x1f]), Err(HpackError::TableSizeTooLarge));
        assert_eq!(decode(&mut d, &[0x82, 0x20]), Err(HpackError::TableSizeMisplaced));
        assert_eq!(decode(&mut d, &[0x20, 0x82]), Ok(pairs(&[(":method", "GET")])));
    }

    #[test]
    fn the_table_is_bounded_and_evicts_oldest() {
        let mut d = Decoder::new(100);
        let mut block = Vec::new();
        test_encode::indexed_literal(&mut block, b"aaaa", b"1111"); // 40 bytes
        test_encode::indexed_literal(&mut block, b"bbbb", b"2222");
        test_encode::indexed_literal(&mut block, b"cccc", b"3333");
        decode(&mut d, &block).expect("decodes");
        assert_eq!(d.table_size(), 80);
        // Index 62 is the newest, 63 the one before; "aaaa" was evicted.
        assert_eq!(decode(&mut d, &[0x80 | 62, 0x80 | 63]), Ok(pairs(&[("cccc", "3333"), ("bbbb", "2222")])));
        assert_eq!(decode(&mut d, &[0x80 | 64]), Err(HpackError::BadIndex));
        // An entry larger than the table empties it.
        let mut big = Vec::new();
        test_encode::indexed_literal(&mut big, b"x", &[b'y'; 100]);
        decode(&mut d, &big).expect("decodes");
        assert_eq!(d.table_size(), 0);
    }

    /// A block of references to one large entry decodes to no more than the list's limit.
    #[test]
    fn a_decompression_bomb_stops_at_the_limit_but_keeps_the_table_in_step() {
        let mut d = Decoder::new(4096);
        let mut block = Vec::new();
        test_encode::indexed_literal(&mut block, b"big", &[b'v'; 4000]);
        block.extend(std::iter::repeat_n(0x80 | 62, 10_000));
        test_encode::indexed_literal(&mut block, b"after", b"x");
        let mut list = HeaderList::with_limit(16 << 10);
        d.decode(&block, &mut list).expect("decodes");
        assert!(list.overflowed());
        assert!(list.bytes.len() <= 16 << 10);
        assert_eq!(list.len(), 4);
        // The entry inserted past the limit is in the table all the same.
        assert_eq!(decode(&mut d, &[0x80 | 62]), Ok(pairs(&[("after", "x")])));
    }

    #[test]
    fn responses_encode_and_decode_back() {
        let mut out = Vec::new();
        encode_response(&mut out, 200, &[(b"content-length", b"4096"), (b"x-custom", b"yes")], false);
        assert_eq!(out[0], 0x88);
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &out),
            Ok(pairs(&[(":status", "200"), ("content-length", "4096"), ("x-custom", "yes")]))
        );
        out.clear();
        encode_response(&mut out, 431, &[], true);
        assert_eq!(decode(&mut d, &out), Ok(pairs(&[(":status", "431")])));
    }

    /// Arbitrary bytes never panic, and what they decode to never exceeds the limit by more
    /// than one field's copy in progress.
    #[test]
    fn arbitrary_blocks_never_panic() {
        use proptest::prelude::*;
        proptest!(|(block in proptest::collection::vec(any::<u8>(), 0..300))| {
            let mut d = Decoder::new(256);
            let mut list = HeaderList::with_limit(512);
            let _ = d.decode(&block, &mut list);
            prop_assert!(d.table_size() <= 256);
            prop_assert!(list.bytes.len() <= 512);
        });
    }
}
