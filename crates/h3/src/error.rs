//! HTTP/3 error codes (RFC 9114 §8.1, RFC 9204 §6) and how a broken rule ends: the stream or
//! the whole connection.

use std::fmt;

/// An application error code, as carried by CONNECTION_CLOSE, RESET_STREAM and STOP_SENDING.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u64);

impl ErrorCode {
    pub const H3_NO_ERROR: ErrorCode = ErrorCode(0x100);
    pub const H3_GENERAL_PROTOCOL_ERROR: ErrorCode = ErrorCode(0x101);
    pub const H3_INTERNAL_ERROR: ErrorCode = ErrorCode(0x102);
    pub const H3_STREAM_CREATION_ERROR: ErrorCode = ErrorCode(0x103);
    pub const H3_CLOSED_CRITICAL_STREAM: ErrorCode = ErrorCode(0x104);
    pub const H3_FRAME_UNEXPECTED: ErrorCode = ErrorCode(0x105);
    pub const H3_FRAME_ERROR: ErrorCode = ErrorCode(0x106);
    pub const H3_EXCESSIVE_LOAD: ErrorCode = ErrorCode(0x107);
    pub const H3_ID_ERROR: ErrorCode = ErrorCode(0x108);
    pub const H3_SETTINGS_ERROR: ErrorCode = ErrorCode(0x109);
    pub const H3_MISSING_SETTINGS: ErrorCode = ErrorCode(0x10a);
    pub const H3_REQUEST_REJECTED: ErrorCode = ErrorCode(0x10b);
    pub const H3_REQUEST_CANCELLED: ErrorCode = ErrorCode(0x10c);
    pub const H3_REQUEST_INCOMPLETE: ErrorCode = ErrorCode(0x10d);
    pub const H3_MESSAGE_ERROR: ErrorCode = ErrorCode(0x10e);
    pub const H3_CONNECT_ERROR: ErrorCode = ErrorCode(0x10f);
    pub const H3_VERSION_FALLBACK: ErrorCode = ErrorCode(0x110);
    pub const QPACK_DECOMPRESSION_FAILED: ErrorCode = ErrorCode(0x200);
    pub const QPACK_ENCODER_STREAM_ERROR: ErrorCode = ErrorCode(0x201);
    pub const QPACK_DECODER_STREAM_ERROR: ErrorCode = ErrorCode(0x202);

    /// Every code this crate names, in order.
    pub const ALL: [ErrorCode; 20] = [
        Self::H3_NO_ERROR,
        Self::H3_GENERAL_PROTOCOL_ERROR,
        Self::H3_INTERNAL_ERROR,
        Self::H3_STREAM_CREATION_ERROR,
        Self::H3_CLOSED_CRITICAL_STREAM,
        Self::H3_FRAME_UNEXPECTED,
        Self::H3_FRAME_ERROR,
        Self::H3_EXCESSIVE_LOAD,
        Self::H3_ID_ERROR,
        Self::H3_SETTINGS_ERROR,
        Self::H3_MISSING_SETTINGS,
        Self::H3_REQUEST_REJECTED,
        Self::H3_REQUEST_CANCELLED,
        Self::H3_REQUEST_INCOMPLETE,
        Self::H3_MESSAGE_ERROR,
        Self::H3_CONNECT_ERROR,
        Self::H3_VERSION_FALLBACK,
        Self::QPACK_DECOMPRESSION_FAILED,
        Self::QPACK_ENCODER_STREAM_ERROR,
        Self::QPACK_DECODER_STREAM_ERROR,
    ];

    pub fn code(self) -> u64 {
        self.0
    }

    /// The RFC's name, or "UNKNOWN" (reserved codes `0x1f * N + 0x21` included).
    pub fn name(self) -> &'static str {
        match self.0 {
            0x100 => "H3_NO_ERROR",
            0x101 => "H3_GENERAL_PROTOCOL_ERROR",
            0x102 => "H3_INTERNAL_ERROR",
            0x103 => "H3_STREAM_CREATION_ERROR",
            0x104 => "H3_CLOSED_CRITICAL_STREAM",
            0x105 => "H3_FRAME_UNEXPECTED",
            0x106 => "H3_FRAME_ERROR",
            0x107 => "H3_EXCESSIVE_LOAD",
            0x108 => "H3_ID_ERROR",
            0x109 => "H3_SETTINGS_ERROR",
            0x10a => "H3_MISSING_SETTINGS",
            0x10b => "H3_REQUEST_REJECTED",
            0x10c => "H3_REQUEST_CANCELLED",
            0x10d => "H3_REQUEST_INCOMPLETE",
            0x10e => "H3_MESSAGE_ERROR",
            0x10f => "H3_CONNECT_ERROR",
            0x110 => "H3_VERSION_FALLBACK",
            0x200 => "QPACK_DECOMPRESSION_FAILED",
            0x201 => "QPACK_ENCODER_STREAM_ERROR",
            0x202 => "QPACK_DECODER_STREAM_ERROR",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:x})", self.name(), self.0)
    }
}

/// A broken rule and its scope. `Connection`: close the connection with the code
/// (CONNECTION_CLOSE). `Stream`: only this request's stream fails (RESET_STREAM and
/// STOP_SENDING with the code; RFC 9114 §4.1.2 allows a server to answer first, e.g. 431 or
/// 400, then reset); the connection goes on. The text says which rule, for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum H3Error {
    #[error("connection error {0}: {1}")]
    Connection(ErrorCode, &'static str),
    #[error("stream error {0}: {1}")]
    Stream(ErrorCode, &'static str),
}

impl H3Error {
    pub fn code(&self) -> ErrorCode {
        match self {
            H3Error::Connection(c, _) | H3Error::Stream(c, _) => *c,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            H3Error::Connection(_, r) | H3Error::Stream(_, r) => r,
        }
    }

    pub fn is_connection(&self) -> bool {
        matches!(self, H3Error::Connection(..))
    }

    /// The same error on a critical stream (control, QPACK), which cannot be reset alone: the
    /// connection fails.
    pub fn on_critical_stream(self) -> H3Error {
        H3Error::Connection(self.code(), self.reason())
    }

    pub(crate) fn frame(reason: &'static str) -> H3Error {
        H3Error::Connection(ErrorCode::H3_FRAME_ERROR, reason)
    }

    pub(crate) fn unexpected(reason: &'static str) -> H3Error {
        H3Error::Connection(ErrorCode::H3_FRAME_UNEXPECTED, reason)
    }

    pub(crate) fn message(reason: &'static str) -> H3Error {
        H3Error::Stream(ErrorCode::H3_MESSAGE_ERROR, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9114 §8.1 and RFC 9204 §6, code by code.
    #[test]
    fn codes_and_names_match_the_rfcs() {
        let want = [
            (0x100, "H3_NO_ERROR"),
            (0x101, "H3_GENERAL_PROTOCOL_ERROR"),
            (0x102, "H3_INTERNAL_ERROR"),
            (0x103, "H3_STREAM_CREATION_ERROR"),
            (0x104, "H3_CLOSED_CRITICAL_STREAM"),
            (0x105, "H3_FRAME_UNEXPECTED"),
            (0x106, "H3_FRAME_ERROR"),
            (0x107, "H3_EXCESSIVE_LOAD"),
            (0x108, "H3_ID_ERROR"),
            (0x109, "H3_SETTINGS_ERROR"),
            (0x10a, "H3_MISSING_SETTINGS"),
            (0x10b, "H3_REQUEST_REJECTED"),
            (0x10c, "H3_REQUEST_CANCELLED"),
            (0x10d, "H3_REQUEST_INCOMPLETE"),
            (0x10e, "H3_MESSAGE_ERROR"),
            (0x10f, "H3_CONNECT_ERROR"),
            (0x110, "H3_VERSION_FALLBACK"),
            (0x200, "QPACK_DECOMPRESSION_FAILED"),
            (0x201, "QPACK_ENCODER_STREAM_ERROR"),
            (0x202, "QPACK_DECODER_STREAM_ERROR"),
        ];
        for (code, (value, name)) in ErrorCode::ALL.iter().zip(want) {
            assert_eq!((code.code(), code.name()), (value, name));
        }
        assert_eq!(ErrorCode(0x21).name(), "UNKNOWN");
        assert_eq!(ErrorCode::H3_ID_ERROR.to_string(), "H3_ID_ERROR (0x108)");
    }
}
