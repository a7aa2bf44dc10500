//! The stage's limits, given once per server and shared by its connections.

use std::time::Duration;

use crate::frame::{DEFAULT_WINDOW, MAX_MAX_FRAME, MAX_WINDOW, MIN_MAX_FRAME};

/// At most `count` events per `per`: more is a flood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub count: u32,
    pub per: Duration,
}

impl Budget {
    pub const fn new(count: u32, per: Duration) -> Self {
        Budget { count, per }
    }
}

/// Every limit of an HTTP/2 connection. The SETTINGS the server sends are taken from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Streams the peer may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS, `--max-streams`);
    /// one more is refused with RST_STREAM(REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE), at least 65,535.
    pub stream_window: u32,
    /// The connection's receive window, at least 65,535 (raised by a WINDOW_UPDATE at the start).
    pub connection_window: u32,
    /// The largest frame the peer may send (SETTINGS_MAX_FRAME_SIZE), 16,384 to 2^24-1.
    pub max_frame_size: u32,
    /// The largest request header list (SETTINGS_MAX_HEADER_LIST_SIZE, RFC 9113's size: name,
    /// value and 32 per field); a larger one is answered 431 on its stream.
    pub max_header_list_size: u32,
    /// The HPACK dynamic table the peer may fill (SETTINGS_HEADER_TABLE_SIZE).
    pub header_table_size: u32,
    /// The most bytes of one header block (HEADERS and its CONTINUATIONs) kept to decode it; more
    /// is a CONTINUATION flood: GOAWAY(ENHANCE_YOUR_CALM).
    pub max_header_block: usize,
    /// The most CONTINUATION frames one header block may take; more is a CONTINUATION flood.
    pub max_continuations: u32,
    /// A request body longer than this is answered 413 and its stream reset (NO_ERROR).
    pub max_body_bytes: u64,
    /// RST_STREAMs received, and streams this server had to reset for the peer's errors
    /// (rapid reset, CVE-2023-44487, and its "made you reset" variant): more is GOAWAY.
    pub resets: Budget,
    /// PINGs (CVE-2019-9512).
    pub pings: Budget,
    /// SETTINGS frames (CVE-2019-9515).
    pub settings: Budget,
    /// Frames that carry nothing: empty DATA without END_STREAM, empty CONTINUATION, PRIORITY,
    /// unknown types, and acknowledgements nobody asked for (PING ACK: the server sends no
    /// PING; SETTINGS ACK past the one the server's SETTINGS asked for) (CVE-2019-9518,
    /// CVE-2019-9516).
    pub empty_frames: Budget,
    /// Response bytes the stage frames ahead of the socket: DATA is written only while the
    /// engine's unsent output is below this.
    pub output_cap: usize,
    /// How long the preface, a frame other than DATA, or a header block may take to arrive
    /// whole, from its first byte (the HTTP/1.1 header timeout's counterpart).
    pub header_timeout: Duration,
    /// How long response data may wait on a window the peer keeps shut; `None`: only reported
    /// ([`crate::Connection::window_stalled_since`]), for the engine's own send timeout.
    pub window_timeout: Option<Duration>,
    /// Send SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441) and take extended CONNECT requests
    /// (`:protocol`), opened as tunnels through [`crate::Tunnels`]; off, a `:protocol` is a
    /// malformed request.
    pub extended_connect: bool,
}

impl Default for Limits {
    fn default() -> Self {
        let ten = Duration::from_secs(10);
        Limits {
            max_concurrent_streams: 100,
            stream_window: DEFAULT_WINDOW,
            connection_window: 1 << 20,
            max_frame_size: MIN_MAX_FRAME,
            max_header_list_size: 16 << 10,
            header_table_size: 4096,
            max_header_block: 32 << 10,
            max_continuations: 32,
            max_body_bytes: 8 << 20,
            resets: Budget::new(200, ten),
            pings: Budget::new(100, ten),
            settings: Budget::new(100, ten),
            empty_frames: Budget::new(1000, ten),
            output_cap: 256 << 10,
            header_timeout: ten,
            window_timeout: Some(Duration::from_secs(30)),
            extended_connect: false,
        }
    }
}

/// A limit out of the protocol's range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LimitsError(&'static str);

impl Limits {
    /// Check the limits against the protocol's ranges.
    pub fn validate(&self) -> Result<(), LimitsError> {
        if self.max_concurrent_streams == 0 {
            return Err(LimitsError("at least one concurrent stream is needed"));
        }
        let windows = DEFAULT_WINDOW..=MAX_WINDOW as u32;
        if !windows.contains(&self.stream_window) || !windows.contains(&self.connection_window) {
            return Err(LimitsError("windows must be from 65,535 to 2^31-1"));
        }
        if !(MIN_MAX_FRAME..=MAX_MAX_FRAME).contains(&self.max_frame_size) {
            return Err(LimitsError("the maximum frame size must be from 16,384 to 2^24-1"));
        }
        if self.max_header_block < self.max_frame_size as usize {
            return Err(LimitsError("a header block must be allowed at least one whole frame"));
        }
        Ok(())
    }
}
