//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-octet header, the types, flags, error codes and
//! settings, and writers that append whole frames to an output buffer.

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const HEADER_LEN: usize = 9;

/// The largest flow-control window (2^31 - 1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The window every stream and the connection start with until SETTINGS say otherwise.
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The smallest and largest SETTINGS_MAX_FRAME_SIZE.
pub const MIN_MAX_FRAME: u32 = 1 << 14;
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;

pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// RFC 8441 §3: the server accepts extended CONNECT (`:protocol`).
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// Error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    SettingsTimeout = 0x4,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    Compression = 0x9,
    Connect = 0xa,
    EnhanceYourCalm = 0xb,
    InadequateSecurity = 0xc,
    Http11Required = 0xd,
}

/// An error code's name as RFC 9113 §7 gives it; an unknown code (§5.4.1 allows them) in hex.
pub fn error_code_name(code: u32) -> std::borrow::Cow<'static, str> {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    match NAMES.get(code as usize) {
        Some(name) => (*name).into(),
        None => format!("0x{code:x}").into(),
    }
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier, its reserved bit cleared (§4.1: ignored on receipt).
    pub stream: u32,
}

impl Head {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Head {
        Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Append a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = (len as u32).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    put_head(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn put_ping_ack(out: &mut Vec<u8>, payload: &[u8; 8]) {
    put_head(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(payload);
}

pub fn put_rst(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    put_head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    put_head(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
}

/// Append a header block as HEADERS and as many CONTINUATION frames as `max_frame` requires.
pub fn put_header_block(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let mut kind = kind::HEADERS;
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if block.is_empty() {
        put_head(out, 0, kind, flags | flag::END_HEADERS, stream);
        return;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= flag::END_HEADERS;
        }
        put_head(out, chunk.len(), kind, flags, stream);
        out.extend_from_slice(chunk);
        kind = kind::CONTINUATION;
        flags = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_the_reserved_bit_is_dropped() {
        let mut out = Vec::new();
        put_head(&mut out, 0x01_02_03, kind::HEADERS, flag::END_HEADERS, 7);
        assert_eq!(out, [1, 2, 3, 1, 4, 0, 0, 0, 7]);
        out[5] |= 0x80;
        let head = Head::parse(out[..9].try_into().expect("nine octets"));
        assert_eq!(head, Head { len: 0x01_02_03, kind: kind::HEADERS, flags: flag::END_HEADERS, stream: 7 });
    }

    #[test]
    fn a_large_block_is_split_into_continuations() {
        let mut out = Vec::new();
        put_header_block(&mut out, 1, &[7; 10], true, 4);
        // HEADERS(4, END_STREAM), CONTINUATION(4), CONTINUATION(2, END_HEADERS).
        assert_eq!(&out[..9], &[0, 0, 4, kind::HEADERS, flag::END_STREAM, 0, 0, 0, 1]);
        assert_eq!(&out[13..22], &[0, 0, 4, kind::CONTINUATION, 0, 0, 0, 0, 1]);
        assert_eq!(&out[26..35], &[0, 0, 2, kind::CONTINUATION, flag::END_HEADERS, 0, 0, 0, 1]);
        assert_eq!(out.len(), 37);
    }
}
