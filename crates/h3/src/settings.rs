//! SETTINGS (RFC 9114 §7.2.4, RFC 9204 §5, RFC 9220 §3, RFC 9297 §2.1.1).

use crate::error::{ErrorCode, H3Error};
use crate::varint;

/// The SETTINGS frame's type (RFC 9114 §7.2.4); `frame::SETTINGS` is this.
pub const FRAME_TYPE: u64 = 0x04;

pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
pub const H3_DATAGRAM: u64 = 0x33;

/// One side's settings. The default is what a peer that sends none means: no dynamic table, no
/// blocked streams, no field section limit, no extended CONNECT, no datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    pub qpack_max_table_capacity: u64,
    /// None: unlimited (the default).
    pub max_field_section_size: Option<u64>,
    pub qpack_blocked_streams: u64,
    pub enable_connect_protocol: bool,
    pub h3_datagram: bool,
}

fn setting_error(reason: &'static str) -> H3Error {
    H3Error::Connection(ErrorCode::H3_SETTINGS_ERROR, reason)
}

impl Settings {
    /// The (identifier, value) pairs this side sends: every value that differs from the default.
    fn pairs(&self) -> impl Iterator<Item = (u64, u64)> {
        [
            (QPACK_MAX_TABLE_CAPACITY, Some(self.qpack_max_table_capacity).filter(|&v| v != 0)),
            (MAX_FIELD_SECTION_SIZE, self.max_field_section_size),
            (QPACK_BLOCKED_STREAMS, Some(self.qpack_blocked_streams).filter(|&v| v != 0)),
            (ENABLE_CONNECT_PROTOCOL, self.enable_connect_protocol.then_some(1)),
            (H3_DATAGRAM, self.h3_datagram.then_some(1)),
        ]
        .into_iter()
        .filter_map(|(id, v)| Some((id, v?)))
    }

    /// Append a whole SETTINGS frame (type, length, payload).
    pub fn encode_frame(&self, out: &mut Vec<u8>) {
        let len: usize = self.pairs().map(|(id, v)| varint::len(id) + varint::len(v)).sum();
        varint::encode(FRAME_TYPE, out);
        varint::encode(len as u64, out);
        for (id, v) in self.pairs() {
            varint::encode(id, out);
            varint::encode(v, out);
        }
    }

    /// Decode a SETTINGS frame's payload. A repeated identifier, an HTTP/2 identifier
    /// (0x02-0x05), a boolean setting other than 0 or 1, or a payload that ends inside a pair is
    /// a connection error (H3_SETTINGS_ERROR, or H3_FRAME_ERROR for the last); unknown and
    /// reserved identifiers are ignored (§7.2.4.1, §9).
    pub fn decode_payload(mut payload: &[u8]) -> Result<Settings, H3Error> {
        let mut settings = Settings::default();
        let mut ids = Vec::new();
        while !payload.is_empty() {
            let (id, n) = varint::decode(payload).ok_or(H3Error::frame("SETTINGS ends inside an identifier"))?;
            payload = &payload[n..];
            let (value, n) = varint::decode(payload).ok_or(H3Error::frame("SETTINGS ends inside a value"))?;
            payload = &payload[n..];
            ids.push(id);
            let flag = || match value {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(setting_error("a boolean setting other than 0 or 1")),
            };
            match id {
                QPACK_MAX_TABLE_CAPACITY => settings.qpack_max_table_capacity = value,
                MAX_FIELD_SECTION_SIZE => settings.max_field_section_size = Some(value),
                QPACK_BLOCKED_STREAMS => settings.qpack_blocked_streams = value,
                ENABLE_CONNECT_PROTOCOL => settings.enable_connect_protocol = flag()?,
                H3_DATAGRAM => settings.h3_datagram = flag()?,
                0x02..=0x05 => return Err(setting_error("an HTTP/2 setting")),
                _ => {}
            }
        }
        // Sorting finds repeats in n log n: a hostile frame of many ids costs no quadratic time.
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(setting_error("a setting repeated"));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(id, v) in pairs {
            varint::encode(id, &mut out);
            varint::encode(v, &mut out);
        }
        out
    }

    #[test]
    fn settings_round_trip_through_a_frame() {
        let s = Settings {
            qpack_max_table_capacity: 0,
            max_field_section_size: Some(16 << 10),
            qpack_blocked_streams: 0,
            enable_connect_protocol: true,
            h3_datagram: true,
        };
        let mut out = Vec::new();
        s.encode_frame(&mut out);
        assert_eq!(out[0], 0x04);
        let (len, n) = varint::decode(&out[1..]).expect("length");
        assert_eq!(1 + n + len as usize, out.len());
        assert_eq!(Settings::decode_payload(&out[1 + n..]), Ok(s));
        let mut empty = Vec::new();
        Settings::default().encode_frame(&mut empty);
        assert_eq!(empty, [0x04, 0x00]);
    }

    #[test]
    fn bad_settings_are_settings_errors() {
        let err = |p: &[(u64, u64)]| Settings::decode_payload(&payload(p)).map_err(|e| e.code());
        assert_eq!(err(&[(0x06, 100), (0x06, 100)]), Err(ErrorCode::H3_SETTINGS_ERROR));
        assert_eq!(err(&[(0x21, 1), (0x21, 2)]), Err(ErrorCode::H3_SETTINGS_ERROR), "unknown ids repeated");
        for h2 in 0x02..=0x05 {
            assert_eq!(err(&[(h2, 0)]), Err(ErrorCode::H3_SETTINGS_ERROR), "{h2}");
        }
        assert_eq!(err(&[(0x08, 2)]), Err(ErrorCode::H3_SETTINGS_ERROR));
        assert_eq!(err(&[(0x33, 7)]), Err(ErrorCode::H3_SETTINGS_ERROR));
        // Reserved (0x1f * N + 0x21) and unknown ids are ignored.
        assert_eq!(err(&[(0x21, 5), (0x1f * 7 + 0x21, 1), (0x4242, 9)]), Ok(Settings::default()));
        assert_eq!(
            Settings::decode_payload(&[0x06]).map_err(|e| e.code()),
            Err(ErrorCode::H3_FRAME_ERROR),
            "a pair cut short"
        );
    }
}
