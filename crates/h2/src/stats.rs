//! What a connection counted: its streams and requests, and every limit it enforced, by kind.

/// A limit the stage enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// A stream past `max_concurrent_streams`: RST_STREAM(REFUSED_STREAM).
    RefusedStream,
    /// A header list past `max_header_list_size`: 431 on its stream.
    HeaderListTooLarge,
    /// A body past `max_body_bytes`: 413 and RST_STREAM(NO_ERROR).
    BodyTooLarge,
    /// Resets (received or provoked) past the budget: GOAWAY(ENHANCE_YOUR_CALM).
    RapidReset,
    /// A header block past `max_header_block` bytes or `max_continuations` frames.
    ContinuationFlood,
    PingFlood,
    SettingsFlood,
    /// Frames that carry nothing, past their budget.
    EmptyFrames,
    /// The preface, a control frame or a header block not whole within the header timeout.
    HeaderTimeout,
    /// Response data waited on a shut window past the window timeout.
    WindowStall,
}

impl Limit {
    pub const ALL: [Limit; 10] = [
        Limit::RefusedStream,
        Limit::HeaderListTooLarge,
        Limit::BodyTooLarge,
        Limit::RapidReset,
        Limit::ContinuationFlood,
        Limit::PingFlood,
        Limit::SettingsFlood,
        Limit::EmptyFrames,
        Limit::HeaderTimeout,
        Limit::WindowStall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Limit::RefusedStream => "refused_stream",
            Limit::HeaderListTooLarge => "header_list_too_large",
            Limit::BodyTooLarge => "body_too_large",
            Limit::RapidReset => "rapid_reset",
            Limit::ContinuationFlood => "continuation_flood",
            Limit::PingFlood => "ping_flood",
            Limit::SettingsFlood => "settings_flood",
            Limit::EmptyFrames => "empty_frames",
            Limit::HeaderTimeout => "header_timeout",
            Limit::WindowStall => "window_stall",
        }
    }
}

/// One connection's counters; an engine adds them to its own when the connection ends (or
/// reads them as it goes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Streams the peer opened (refused ones included).
    pub streams: u64,
    /// Complete requests handed to the application.
    pub requests: u64,
    pub resets_received: u64,
    /// Stream errors this server sent (RST_STREAM).
    pub resets_sent: u64,
    /// Requests refused as malformed (RFC 9113 §8.1.1).
    pub malformed: u64,
    /// Connection errors for protocol violations (GOAWAY with an error code).
    pub protocol_errors: u64,
    /// Header blocks HPACK could not decode (also counted as protocol errors).
    pub compression_errors: u64,
    pub goaways: u64,
    /// Each limit's hits, in the order of [`Limit::ALL`].
    pub limits: [u64; Limit::ALL.len()],
}

impl Stats {
    pub fn limit(&mut self, limit: Limit) {
        self.limits[limit as usize] += 1;
    }

    pub fn hits(&self, limit: Limit) -> u64 {
        self.limits[limit as usize]
    }

    /// Add `other`'s counts to these.
    pub fn add(&mut self, other: &Stats) {
        self.streams += other.streams;
        self.requests += other.requests;
        self.resets_received += other.resets_received;
        self.resets_sent += other.resets_sent;
        self.malformed += other.malformed;
        self.protocol_errors += other.protocol_errors;
        self.compression_errors += other.compression_errors;
        self.goaways += other.goaways;
        for (mine, theirs) in self.limits.iter_mut().zip(other.limits) {
            *mine += theirs;
        }
    }
}
