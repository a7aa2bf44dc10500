//! RFC 9113's rules for a received frame, written once for both sides: what a frame's header,
//! length and stream must be (§4.2, §6), its padding (§6.1, §6.2), a header block's priority
//! fields, SETTINGS (§6.5: parsed, every value checked, and applied to [`PeerSettings`] with the
//! send windows moved under the 2^31-1 bound, §6.9.2), WINDOW_UPDATE (§6.9: per stream and for
//! the connection, with the overflow check) and DATA against a receive window (§6.9.1).
//!
//! The server ([`crate::Connection`]) and the client ([`crate::ClientConnection`]) call these and
//! keep only what differs by role: which PUSH_PROMISE each refuses, a server's
//! SETTINGS_ENABLE_PUSH = 1 (an error for a client only), budgets (server), stream bookkeeping.
//! Nothing here allocates, but for [`FrameReader`]'s frame split across reads: each check reads
//! the payload in place.
//!
//! Both sides also cut frames out of received bytes with one [`FrameReader`].

use crate::frame::{
    flag, kind, setting, ErrorCode, Head, DEFAULT_WINDOW, HEADER_LEN, MAX_MAX_FRAME, MAX_WINDOW, MIN_MAX_FRAME,
};

/// A rule of RFC 9113 the peer broke, with the error code it is answered with
/// ([`Violation::code`]) and whether it ends the connection or one stream
/// ([`Violation::is_stream_error`]: RST_STREAM on the frame's stream; otherwise GOAWAY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    // ---- the frame's shape: stream 0 or not, length ----
    #[error("a frame over SETTINGS_MAX_FRAME_SIZE")]
    FrameTooLarge,
    #[error("a stream frame (type {0:#x}) on stream 0")]
    StreamFrameOnZero(u8),
    #[error("a connection frame (type {0:#x}) on a stream")]
    ConnectionFrameOnStream(u8),
    #[error("RST_STREAM not 4 octets")]
    RstLength,
    #[error("PING not 8 octets")]
    PingLength,
    #[error("GOAWAY under 8 octets")]
    GoawayLength,
    #[error("WINDOW_UPDATE not 4 octets")]
    WindowUpdateLength,
    #[error("PRIORITY not 5 octets")]
    PriorityLength,
    #[error("a stream that depends on itself")]
    SelfDependency,
    #[error("a padded frame without its pad length")]
    PadLengthMissing,
    #[error("padding as long as the frame or longer")]
    PaddingTooLong,
    #[error("HEADERS too short for its priority fields")]
    PriorityFieldsMissing,
    // ---- order ----
    #[error("the first frame is not SETTINGS")]
    FirstNotSettings,
    #[error("a frame inside a header block, or a CONTINUATION of none")]
    HeaderBlockInterrupted,
    #[error("a frame on a stream never opened")]
    IdleStream,
    #[error("HEADERS on a closed stream")]
    ClosedStream,
    #[error("DATA or HEADERS on a stream already ended")]
    StreamEnded,
    // ---- SETTINGS ----
    #[error("a SETTINGS acknowledgement with a payload")]
    SettingsAckPayload,
    #[error("SETTINGS not a multiple of 6 octets")]
    SettingsLength,
    #[error("SETTINGS_ENABLE_PUSH not 0 or 1")]
    EnablePushValue,
    #[error("SETTINGS_ENABLE_CONNECT_PROTOCOL not 0 or 1 (RFC 8441 §3)")]
    EnableConnectProtocolValue,
    #[error("SETTINGS_ENABLE_CONNECT_PROTOCOL = 0 after 1 (RFC 8441 §3)")]
    ConnectProtocolWithdrawn,
    #[error("SETTINGS_ENABLE_PUSH = 1 from a server")]
    PushEnabledByServer,
    #[error("SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")]
    InitialWindowTooLarge,
    #[error("SETTINGS_MAX_FRAME_SIZE out of 16,384..=2^24-1")]
    MaxFrameSizeRange,
    #[error("SETTINGS_INITIAL_WINDOW_SIZE pushes a stream's send window over 2^31-1")]
    SettingsWindowOverflow,
    // ---- WINDOW_UPDATE and DATA ----
    #[error("a connection WINDOW_UPDATE of 0")]
    ZeroConnectionIncrement,
    #[error("a stream WINDOW_UPDATE of 0")]
    ZeroStreamIncrement,
    #[error("the connection's send window over 2^31-1")]
    ConnectionWindowOverflow,
    #[error("a stream's send window over 2^31-1")]
    StreamWindowOverflow,
    #[error("DATA over the connection's receive window")]
    ConnectionWindowExceeded,
    #[error("DATA over a stream's receive window")]
    StreamWindowExceeded,
    // ---- by role ----
    #[error("PUSH_PROMISE from a client")]
    PushFromClient,
    #[error("PUSH_PROMISE with push disabled (SETTINGS_ENABLE_PUSH = 0)")]
    PushDisabled,
    #[error("a response header block over twice SETTINGS_MAX_HEADER_LIST_SIZE")]
    HeaderBlockTooLarge,
    #[error("a response header list over SETTINGS_MAX_HEADER_LIST_SIZE")]
    HeaderListTooLarge,
}

impl Violation {
    /// The RFC 9113 §7 code it is answered with.
    pub fn code(self) -> ErrorCode {
        use Violation as V;
        match self {
            V::FrameTooLarge
            | V::RstLength
            | V::PingLength
            | V::GoawayLength
            | V::WindowUpdateLength
            | V::PriorityLength
            | V::PriorityFieldsMissing
            | V::SettingsAckPayload
            | V::SettingsLength => ErrorCode::FrameSize,
            V::InitialWindowTooLarge
            | V::SettingsWindowOverflow
            | V::ConnectionWindowOverflow
            | V::StreamWindowOverflow
            | V::ConnectionWindowExceeded
            | V::StreamWindowExceeded => ErrorCode::FlowControl,
            V::ClosedStream | V::StreamEnded => ErrorCode::StreamClosed,
            V::StreamFrameOnZero(_)
            | V::ConnectionFrameOnStream(_)
            | V::SelfDependency
            | V::PadLengthMissing
            | V::PaddingTooLong
            | V::FirstNotSettings
            | V::HeaderBlockInterrupted
            | V::IdleStream
            | V::EnablePushValue
            | V::EnableConnectProtocolValue
            | V::ConnectProtocolWithdrawn
            | V::PushEnabledByServer
            | V::MaxFrameSizeRange
            | V::ZeroConnectionIncrement
            | V::ZeroStreamIncrement
            | V::PushFromClient
            | V::PushDisabled
            | V::HeaderBlockTooLarge
            | V::HeaderListTooLarge => ErrorCode::Protocol,
        }
    }

    /// A stream error (RST_STREAM on the frame's stream, the connection goes on); otherwise a
    /// connection error (GOAWAY).
    pub fn is_stream_error(self) -> bool {
        matches!(
            self,
            Violation::PriorityLength
                | Violation::SelfDependency
                | Violation::ZeroStreamIncrement
                | Violation::StreamWindowOverflow
                | Violation::StreamWindowExceeded
                | Violation::StreamEnded
        )
    }
}

/// A frame's header against the largest frame this side advertised (§4.2): checked as soon as
/// the 9 octets are in, before the payload is kept.
pub fn check_size(head: &Head, max_frame: u32) -> Result<(), Violation> {
    if head.len > max_frame {
        return Err(Violation::FrameTooLarge);
    }
    Ok(())
}

/// Cuts whole frames out of received bytes, for both sides: a frame wholly inside one read is
/// handed over in place (no copy); only a frame split across reads is kept, and copied, until
/// its last byte comes. Each frame's length is checked against the SETTINGS_MAX_FRAME_SIZE this
/// side advertised as soon as its 9-octet header is in, before its payload is kept (§4.2).
#[derive(Debug, Default)]
pub struct FrameReader {
    /// A frame received in part (its header, or header and some payload): empty and
    /// unallocated between whole frames.
    partial: Vec<u8>,
}

impl FrameReader {
    /// Hand every whole frame in `input` (after the one kept from earlier reads) to `on_frame`,
    /// in order, and keep the part of a frame that ends `input`. Stops at the first error,
    /// `on_frame`'s or a frame over `max_frame` ([`Violation::FrameTooLarge`]); the rest of
    /// `input` is then not read (the connection is over).
    pub fn read<E: From<Violation>>(
        &mut self,
        mut input: &[u8],
        max_frame: u32,
        mut on_frame: impl FnMut(Head, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.partial.is_empty() {
            // Complete the frame begun earlier: its header first, then its payload.
            if self.partial.len() < HEADER_LEN {
                let take = (HEADER_LEN - self.partial.len()).min(input.len());
                self.partial.extend_from_slice(&input[..take]);
                input = &input[take..];
                let Some(head) = self.pending_head() else { return Ok(()) };
                check_size(&head, max_frame)?;
            }
            let Some(head) = self.pending_head() else { return Ok(()) };
            let total = HEADER_LEN + head.len as usize;
            let take = (total - self.partial.len()).min(input.len());
            self.partial.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.partial.len() < total {
                return Ok(());
            }
            let frame = std::mem::take(&mut self.partial);
            on_frame(head, &frame[HEADER_LEN..])?;
        }
        while let Some(bytes) = input.first_chunk::<HEADER_LEN>() {
            let head = Head::parse(bytes);
            check_size(&head, max_frame)?;
            let total = HEADER_LEN + head.len as usize;
            let Some(payload) = input.get(HEADER_LEN..total) else { break };
            on_frame(head, payload)?;
            input = &input[total..];
        }
        self.partial.extend_from_slice(input);
        Ok(())
    }

    /// No frame is half received.
    pub fn is_empty(&self) -> bool {
        self.partial.is_empty()
    }

    /// The header of the frame half received, once its 9 octets are in.
    pub fn pending_head(&self) -> Option<Head> {
        self.partial.first_chunk().map(Head::parse)
    }

    /// Bytes held for a frame half received.
    pub fn buffered(&self) -> usize {
        self.partial.capacity()
    }

    /// Forget a frame half received (the connection closed).
    pub fn clear(&mut self) {
        self.partial = Vec::new();
    }
}

/// Where a frame may come (§3.4, §6.10): the peer's first frame is SETTINGS (not an
/// acknowledgement), and nothing but a CONTINUATION of its stream comes inside a header block.
/// `settings_seen`: the peer's first SETTINGS came; `open_block`: the stream of a header block
/// awaiting its CONTINUATIONs.
pub fn check_order(head: &Head, settings_seen: bool, open_block: Option<u32>) -> Result<(), Violation> {
    if !settings_seen && (head.kind != kind::SETTINGS || head.has(flag::ACK)) {
        return Err(Violation::FirstNotSettings);
    }
    match open_block {
        Some(stream) if head.kind != kind::CONTINUATION || head.stream != stream => {
            Err(Violation::HeaderBlockInterrupted)
        }
        None if head.kind == kind::CONTINUATION => Err(Violation::HeaderBlockInterrupted),
        _ => Ok(()),
    }
}

/// The fixed shape of each known frame type (§6): stream frames not on stream 0, connection
/// frames only there, and the lengths the type fixes. PRIORITY's length is a stream error.
/// Unknown types pass (§4.1: ignored).
pub fn check_shape(head: &Head, payload: &[u8]) -> Result<(), Violation> {
    let len = payload.len();
    match head.kind {
        kind::DATA | kind::HEADERS | kind::PRIORITY | kind::CONTINUATION | kind::PUSH_PROMISE if head.stream == 0 => {
            return Err(Violation::StreamFrameOnZero(head.kind));
        }
        kind::SETTINGS | kind::PING | kind::GOAWAY if head.stream != 0 => {
            return Err(Violation::ConnectionFrameOnStream(head.kind));
        }
        _ => {}
    }
    match head.kind {
        kind::PRIORITY if len != 5 => Err(Violation::PriorityLength),
        kind::RST_STREAM if len != 4 => Err(Violation::RstLength),
        kind::RST_STREAM if head.stream == 0 => Err(Violation::StreamFrameOnZero(head.kind)),
        kind::SETTINGS if head.has(flag::ACK) && len != 0 => Err(Violation::SettingsAckPayload),
        kind::SETTINGS if len % 6 != 0 => Err(Violation::SettingsLength),
        kind::PING if len != 8 => Err(Violation::PingLength),
        kind::GOAWAY if len < 8 => Err(Violation::GoawayLength),
        kind::WINDOW_UPDATE if len != 4 => Err(Violation::WindowUpdateLength),
        _ => Ok(()),
    }
}

/// A DATA or HEADERS payload without its padding (§6.1, §6.2): the pad length octet, then the
/// content, then the padding. A pad length as long as the payload or longer is a connection
/// error.
pub fn unpad<'p>(head: &Head, payload: &'p [u8]) -> Result<&'p [u8], Violation> {
    if !head.has(flag::PADDED) {
        return Ok(payload);
    }
    let (&pad, rest) = payload.split_first().ok_or(Violation::PadLengthMissing)?;
    let len = rest.len().checked_sub(usize::from(pad)).ok_or(Violation::PaddingTooLong)?;
    Ok(&rest[..len])
}

/// A HEADERS frame's header block fragment, its padding and priority fields taken off, and the
/// stream it says it depends on (with its PRIORITY flag). A stream that depends on itself is
/// for the caller to reset once the block is decoded (HPACK must stay in step).
pub fn header_fragment<'p>(head: &Head, payload: &'p [u8]) -> Result<(&'p [u8], Option<u32>), Violation> {
    let fragment = unpad(head, payload)?;
    if !head.has(flag::PRIORITY) {
        return Ok((fragment, None));
    }
    let Some((fields, rest)) = fragment.split_first_chunk::<5>() else {
        return Err(Violation::PriorityFieldsMissing);
    };
    Ok((rest, Some(dependency(fields))))
}

/// A PRIORITY frame (its shape checked by [`check_shape`]): a stream error if the stream depends
/// on itself; otherwise nothing to do (RFC 9113 deprecates priorities).
pub fn check_priority(head: &Head, payload: &[u8]) -> Result<(), Violation> {
    match payload.first_chunk::<5>() {
        Some(fields) if dependency(fields) == head.stream => Err(Violation::SelfDependency),
        Some(_) => Ok(()),
        None => Err(Violation::PriorityLength),
    }
}

fn dependency(fields: &[u8; 5]) -> u32 {
    u32::from_be_bytes([fields[0], fields[1], fields[2], fields[3]]) & 0x7fff_ffff
}

/// A WINDOW_UPDATE's increment (§6.9), its reserved bit cleared; 0 is an error, for the
/// connection (stream 0) or for the frame's stream.
pub fn window_increment(head: &Head, payload: &[u8]) -> Result<u32, Violation> {
    let bytes: [u8; 4] = payload.try_into().map_err(|_| Violation::WindowUpdateLength)?;
    match u32::from_be_bytes(bytes) & 0x7fff_ffff {
        0 if head.stream == 0 => Err(Violation::ZeroConnectionIncrement),
        0 => Err(Violation::ZeroStreamIncrement),
        increment => Ok(increment),
    }
}

/// Open a send window by a WINDOW_UPDATE's increment: past 2^31-1 is a flow-control error, for
/// the connection or the stream as `stream` says (§6.9.1). The window is left as it was on error.
pub fn open_send_window(window: &mut i64, increment: u32, stream: bool) -> Result<(), Violation> {
    let opened = *window + i64::from(increment);
    if opened > MAX_WINDOW {
        return Err(if stream { Violation::StreamWindowOverflow } else { Violation::ConnectionWindowOverflow });
    }
    *window = opened;
    Ok(())
}

/// A receive window (§6.9), of the connection or of a stream: what the peer may still send, and
/// what was received and not yet given back by a WINDOW_UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveWindow {
    window: i64,
    unacked: u32,
}

impl ReceiveWindow {
    /// A window of `size` octets (the one advertised).
    pub fn new(size: u32) -> Self {
        ReceiveWindow { window: i64::from(size), unacked: 0 }
    }

    /// What the peer may still send.
    pub fn available(&self) -> i64 {
        self.window
    }

    /// Take a DATA frame's whole length (padding included, §6.9.1): more than the window holds
    /// is a flow-control error, for the connection (`stream` 0) or the stream.
    pub fn take(&mut self, len: u32, stream: u32) -> Result<(), Violation> {
        let len = i64::from(len);
        if len > self.window {
            return Err(if stream == 0 {
                Violation::ConnectionWindowExceeded
            } else {
                Violation::StreamWindowExceeded
            });
        }
        self.window -= len;
        Ok(())
    }

    /// Give `len` octets taken back (read, or discarded): once half of the advertised `size` is
    /// owed, a WINDOW_UPDATE for `stream` (0: the connection) is appended to `out`.
    pub fn give_back(&mut self, len: u32, size: u32, stream: u32, out: &mut Vec<u8>) {
        self.unacked = self.unacked.saturating_add(len);
        if self.unacked >= size / 2 {
            crate::frame::put_window_update(out, stream, self.unacked);
            self.window += i64::from(self.unacked);
            self.unacked = 0;
        }
    }
}

/// Streams this side reset lately, remembered so that frames the peer sent before it saw the
/// reset are ignored (RFC 9113 §5.1, "closed") rather than answered as errors. A fixed ring: no
/// allocation, and a peer cannot grow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecentResets {
    ids: [u32; RecentResets::KEPT],
    next: usize,
}

impl RecentResets {
    /// How many are remembered.
    pub const KEPT: usize = 8;

    pub fn remember(&mut self, stream: u32) {
        self.ids[self.next % Self::KEPT] = stream;
        self.next = self.next.wrapping_add(1);
    }

    pub fn contains(&self, stream: u32) -> bool {
        stream != 0 && self.ids.contains(&stream)
    }
}

/// One setting of a SETTINGS frame, its value checked against §6.5.2's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    HeaderTableSize(u32),
    EnablePush(bool),
    MaxConcurrentStreams(u32),
    InitialWindowSize(u32),
    MaxFrameSize(u32),
    MaxHeaderListSize(u32),
    /// RFC 8441 §3: the server takes extended CONNECT (a client's to read; a server ignores it).
    EnableConnectProtocol(bool),
    /// An identifier this crate does not know: ignored (§6.5.2).
    Unknown(u16, u32),
}

impl Setting {
    fn parse(entry: &[u8; 6]) -> Result<Setting, Violation> {
        let id = u16::from_be_bytes([entry[0], entry[1]]);
        let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
        Ok(match id {
            setting::HEADER_TABLE_SIZE => Setting::HeaderTableSize(value),
            setting::ENABLE_PUSH => match value {
                0 | 1 => Setting::EnablePush(value == 1),
                _ => return Err(Violation::EnablePushValue),
            },
            setting::MAX_CONCURRENT_STREAMS => Setting::MaxConcurrentStreams(value),
            setting::INITIAL_WINDOW_SIZE if i64::from(value) > MAX_WINDOW => {
                return Err(Violation::InitialWindowTooLarge)
            }
            setting::INITIAL_WINDOW_SIZE => Setting::InitialWindowSize(value),
            setting::MAX_FRAME_SIZE if !(MIN_MAX_FRAME..=MAX_MAX_FRAME).contains(&value) => {
                return Err(Violation::MaxFrameSizeRange)
            }
            setting::MAX_FRAME_SIZE => Setting::MaxFrameSize(value),
            setting::MAX_HEADER_LIST_SIZE => Setting::MaxHeaderListSize(value),
            setting::ENABLE_CONNECT_PROTOCOL => match value {
                0 | 1 => Setting::EnableConnectProtocol(value == 1),
                _ => return Err(Violation::EnableConnectProtocolValue),
            },
            _ => Setting::Unknown(id, value),
        })
    }
}

/// A SETTINGS frame, its shape and every value checked (§6.5): an acknowledgement, or the
/// values in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settings<'p> {
    Ack,
    Values(SettingValues<'p>),
}

/// The values of a checked SETTINGS frame, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingValues<'p>(&'p [u8]);

impl Iterator for SettingValues<'_> {
    type Item = Setting;

    fn next(&mut self) -> Option<Setting> {
        let (entry, rest) = self.0.split_first_chunk::<6>()?;
        self.0 = rest;
        // Every entry was checked by `Settings::parse`; one that no longer parses cannot be.
        Setting::parse(entry).ok()
    }
}

impl<'p> Settings<'p> {
    /// Parse a SETTINGS frame: on a stream, an acknowledgement with a payload, a length not a
    /// multiple of 6, or a value out of its range is a connection error.
    pub fn parse(head: &Head, payload: &'p [u8]) -> Result<Settings<'p>, Violation> {
        if head.stream != 0 {
            return Err(Violation::ConnectionFrameOnStream(head.kind));
        }
        if head.has(flag::ACK) {
            return if payload.is_empty() { Ok(Settings::Ack) } else { Err(Violation::SettingsAckPayload) };
        }
        if payload.len() % 6 != 0 {
            return Err(Violation::SettingsLength);
        }
        for entry in payload.chunks_exact(6) {
            Setting::parse(entry.try_into().map_err(|_| Violation::SettingsLength)?)?;
        }
        Ok(Settings::Values(SettingValues(payload)))
    }
}

/// What the peer's SETTINGS said so far (§6.5.2's initial values until then), kept alike by both
/// sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSettings {
    pub header_table_size: u32,
    pub enable_push: bool,
    /// None: unlimited (no value received).
    pub max_concurrent_streams: Option<u32>,
    /// What each new stream's send window starts at.
    pub initial_window: i64,
    pub max_frame_size: u32,
    pub max_header_list_size: Option<u32>,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            header_table_size: 4096,
            enable_push: true,
            max_concurrent_streams: None,
            initial_window: i64::from(DEFAULT_WINDOW),
            max_frame_size: MIN_MAX_FRAME,
            max_header_list_size: None,
        }
    }
}

/// What one SETTINGS frame changed that the caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// SETTINGS_HEADER_TABLE_SIZE was in the frame (whatever its value).
    pub header_table_seen: bool,
    /// ... with a value other than the one before the frame.
    pub header_table_changed: bool,
    /// SETTINGS_ENABLE_PUSH = 1 was in the frame.
    pub push_enabled: bool,
    /// How much every open stream's send window moves (the new initial window less the old).
    window_delta: i64,
    /// The most a send window rose at any point in the frame (values apply in order, §6.5.3).
    window_peak: i64,
}

impl PeerSettings {
    /// Apply a checked SETTINGS frame's values in order, then move every open stream's send
    /// window by the change of the initial window (§6.9.2). A window past 2^31-1, at any point of
    /// the frame, is a connection error (FLOW_CONTROL_ERROR), which ends the connection.
    pub fn apply<'w>(
        &mut self,
        values: SettingValues<'_>,
        send_windows: impl IntoIterator<Item = &'w mut i64>,
    ) -> Result<Applied, Violation> {
        let applied = self.apply_values(values);
        if applied.window_peak > 0 || applied.window_delta != 0 {
            for window in send_windows {
                if *window + applied.window_peak > MAX_WINDOW {
                    return Err(Violation::SettingsWindowOverflow);
                }
                *window += applied.window_delta;
            }
        }
        Ok(applied)
    }

    fn apply_values(&mut self, values: SettingValues<'_>) -> Applied {
        let mut applied = Applied::default();
        let start = self.initial_window;
        for value in values {
            match value {
                Setting::HeaderTableSize(size) => {
                    applied.header_table_seen = true;
                    applied.header_table_changed |= size != self.header_table_size;
                    self.header_table_size = size;
                }
                Setting::EnablePush(on) => {
                    applied.push_enabled |= on;
                    self.enable_push = on;
                }
                Setting::MaxConcurrentStreams(n) => self.max_concurrent_streams = Some(n),
                Setting::InitialWindowSize(size) => {
                    self.initial_window = i64::from(size);
                    applied.window_peak = applied.window_peak.max(self.initial_window - start);
                }
                Setting::MaxFrameSize(size) => self.max_frame_size = size,
                Setting::MaxHeaderListSize(size) => self.max_header_list_size = Some(size),
                Setting::EnableConnectProtocol(_) | Setting::Unknown(..) => {}
            }
        }
        applied.window_delta = self.initial_window - start;
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::put_settings;

    fn head(kind: u8, flags: u8, stream: u32, len: usize) -> Head {
        Head { len: len as u32, kind, flags, stream }
    }

    /// SETTINGS, a PING, a DATA of `data_len` bytes and another PING, as a peer sends them.
    fn frames(data_len: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        put_settings(&mut bytes, &[(setting::MAX_CONCURRENT_STREAMS, 10)]);
        crate::frame::put_ping_ack(&mut bytes, &[7; 8]);
        crate::frame::put_head(&mut bytes, data_len, kind::DATA, flag::END_STREAM, 1);
        bytes.extend((0..data_len).map(|i| i as u8));
        crate::frame::put_ping_ack(&mut bytes, &[8; 8]);
        bytes
    }

    /// Read `pieces` in turn: the frames handed over, as (header, payload).
    fn read_all(pieces: &[&[u8]], max_frame: u32) -> Result<Vec<(Head, Vec<u8>)>, Violation> {
        let mut reader = FrameReader::default();
        let mut got = Vec::new();
        for piece in pieces {
            reader.read(piece, max_frame, |head, payload| {
                got.push((head, payload.to_vec()));
                Ok::<(), Violation>(())
            })?;
        }
        assert!(reader.is_empty() && reader.buffered() == 0, "nothing held once the last frame is in");
        Ok(got)
    }

    #[test]
    fn the_frame_reader_hands_whole_frames_over_in_place_and_copies_only_a_split_one() {
        let bytes = frames(100);
        let cut = bytes.len() - 9 - 40; // within the DATA frame's payload
        let (first, rest) = bytes.split_at(cut);
        let mut reader = FrameReader::default();
        let mut in_place = Vec::new();
        reader
            .read(first, MIN_MAX_FRAME, |head, payload| {
                in_place.push((head.kind, first.as_ptr_range().contains(&payload.as_ptr())));
                Ok::<(), Violation>(())
            })
            .unwrap();
        assert_eq!(in_place, [(kind::SETTINGS, true), (kind::PING, true)]);
        // The DATA frame's header and the part of its payload that came are kept.
        assert_eq!(reader.pending_head().map(|h| (h.kind, h.len)), Some((kind::DATA, 100)));
        let mut later = Vec::new();
        reader
            .read(rest, MIN_MAX_FRAME, |head, payload| {
                later.push((head.kind, payload.len(), rest.as_ptr_range().contains(&payload.as_ptr())));
                Ok::<(), Violation>(())
            })
            .unwrap();
        // The DATA frame was completed in the reader's copy; the frame after it read in place.
        assert_eq!(later, [(kind::DATA, 100, false), (kind::PING, 8, true)]);
        assert!(reader.is_empty() && reader.buffered() == 0);
    }

    #[test]
    fn the_frame_reader_gives_the_same_frames_however_the_bytes_are_split() {
        let bytes = frames(300);
        let whole = read_all(&[&bytes], MIN_MAX_FRAME).unwrap();
        assert_eq!(whole.len(), 4);
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(read_all(&[a, b], MIN_MAX_FRAME).unwrap(), whole, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read_all(&singles, MIN_MAX_FRAME).unwrap(), whole, "a byte at a time");
    }

    #[test]
    fn the_frame_reader_refuses_a_frame_over_the_limit_at_its_header() {
        let max = MIN_MAX_FRAME;
        let mut at_limit = Vec::new();
        crate::frame::put_head(&mut at_limit, max as usize, kind::DATA, 0, 1);
        at_limit.resize(HEADER_LEN + max as usize, 0);
        assert_eq!(read_all(&[&at_limit], max).unwrap().len(), 1, "a frame of SETTINGS_MAX_FRAME_SIZE is whole");
        let mut over = Vec::new();
        crate::frame::put_head(&mut over, max as usize + 1, kind::DATA, 0, 1);
        // Refused as soon as the 9 octets are in, whole or split, before any payload is kept.
        for cut in 0..HEADER_LEN {
            let mut reader = FrameReader::default();
            let mut called = false;
            let mut read = |bytes: &[u8]| {
                reader.read(bytes, max, |_, _| {
                    called = true;
                    Ok::<(), Violation>(())
                })
            };
            assert_eq!(read(&over[..cut]), Ok(()), "cut at {cut}");
            assert_eq!(read(&over[cut..]), Err(Violation::FrameTooLarge), "cut at {cut}");
            assert!(!called);
        }
        assert_eq!(Violation::FrameTooLarge.code(), ErrorCode::FrameSize);
    }

    #[test]
    fn the_frame_reader_stops_at_the_first_error_and_reads_no_further() {
        let bytes = frames(10);
        let mut reader = FrameReader::default();
        let mut seen = 0;
        let read = reader.read(&bytes, MIN_MAX_FRAME, |_, _| {
            seen += 1;
            if seen == 2 {
                return Err(Violation::PingLength);
            }
            Ok(())
        });
        assert_eq!((read, seen), (Err(Violation::PingLength), 2));
        assert!(reader.is_empty(), "the rest of the input is not kept");
    }

    /// A SETTINGS frame's header and payload, as bytes a peer sends.
    fn settings_frame(values: &[(u16, u32)]) -> (Head, Vec<u8>) {
        let mut bytes = Vec::new();
        put_settings(&mut bytes, values);
        let head = Head::parse(bytes[..9].try_into().expect("a header"));
        (head, bytes[9..].to_vec())
    }

    fn values(payload: &[u8]) -> SettingValues<'_> {
        let h = head(kind::SETTINGS, 0, 0, payload.len());
        match Settings::parse(&h, payload) {
            Ok(Settings::Values(values)) => values,
            other => panic!("not values: {other:?}"),
        }
    }

    #[test]
    fn every_violation_maps_to_its_code_and_scope() {
        assert_eq!(Violation::SettingsWindowOverflow.code(), ErrorCode::FlowControl);
        assert_eq!(Violation::SettingsLength.code(), ErrorCode::FrameSize);
        assert_eq!(Violation::PushEnabledByServer.code(), ErrorCode::Protocol);
        assert_eq!(Violation::StreamEnded.code(), ErrorCode::StreamClosed);
        assert!(Violation::StreamWindowOverflow.is_stream_error());
        assert!(!Violation::ConnectionWindowOverflow.is_stream_error());
        assert!(!Violation::ZeroConnectionIncrement.is_stream_error());
        assert!(Violation::ZeroStreamIncrement.is_stream_error());
    }

    #[test]
    fn a_frame_over_the_advertised_size_is_refused_from_its_header() {
        assert_eq!(check_size(&head(kind::DATA, 0, 1, 16_384), 16_384), Ok(()));
        assert_eq!(check_size(&head(kind::DATA, 0, 1, 16_385), 16_384), Err(Violation::FrameTooLarge));
    }

    #[test]
    fn the_first_frame_is_settings_and_a_header_block_is_not_interrupted() {
        let settings = head(kind::SETTINGS, 0, 0, 0);
        let ack = head(kind::SETTINGS, flag::ACK, 0, 0);
        let ping = head(kind::PING, 0, 0, 8);
        assert_eq!(check_order(&settings, false, None), Ok(()));
        assert_eq!(check_order(&ack, false, None), Err(Violation::FirstNotSettings));
        assert_eq!(check_order(&ping, false, None), Err(Violation::FirstNotSettings));
        assert_eq!(check_order(&ping, true, None), Ok(()));
        let continuation = |stream| head(kind::CONTINUATION, 0, stream, 0);
        assert_eq!(check_order(&continuation(1), true, Some(1)), Ok(()));
        assert_eq!(check_order(&continuation(3), true, Some(1)), Err(Violation::HeaderBlockInterrupted));
        assert_eq!(check_order(&ping, true, Some(1)), Err(Violation::HeaderBlockInterrupted));
        assert_eq!(check_order(&continuation(1), true, None), Err(Violation::HeaderBlockInterrupted));
    }

    #[test]
    fn stream_frames_are_not_on_stream_0_and_connection_frames_only_there() {
        for kind in [kind::DATA, kind::HEADERS, kind::PRIORITY, kind::CONTINUATION, kind::PUSH_PROMISE] {
            let payload = [0; 5];
            assert_eq!(check_shape(&head(kind, 0, 0, 5), &payload), Err(Violation::StreamFrameOnZero(kind)));
        }
        assert_eq!(check_shape(&head(kind::RST_STREAM, 0, 0, 4), &[0; 4]), Err(Violation::StreamFrameOnZero(3)));
        for (kind, len) in [(kind::SETTINGS, 0), (kind::PING, 8), (kind::GOAWAY, 8)] {
            let payload = vec![0; len];
            assert_eq!(check_shape(&head(kind, 0, 1, len), &payload), Err(Violation::ConnectionFrameOnStream(kind)));
        }
        // WINDOW_UPDATE goes on either; an unknown type anywhere.
        assert_eq!(check_shape(&head(kind::WINDOW_UPDATE, 0, 0, 4), &[0, 0, 0, 1]), Ok(()));
        assert_eq!(check_shape(&head(kind::WINDOW_UPDATE, 0, 7, 4), &[0, 0, 0, 1]), Ok(()));
        assert_eq!(check_shape(&head(0xfa, 0, 0, 3), &[1, 2, 3]), Ok(()));
    }

    #[test]
    fn fixed_lengths_are_frame_size_errors_and_priority_a_stream_error() {
        let bad = |kind, flags, stream, len: usize| check_shape(&head(kind, flags, stream, len), &vec![0; len]);
        assert_eq!(bad(kind::RST_STREAM, 0, 1, 3), Err(Violation::RstLength));
        // RST_STREAM's length is checked before its stream (as h2spec's 6.4 cases expect).
        assert_eq!(bad(kind::RST_STREAM, 0, 0, 3), Err(Violation::RstLength));
        assert_eq!(bad(kind::PING, 0, 0, 7), Err(Violation::PingLength));
        assert_eq!(bad(kind::GOAWAY, 0, 0, 7), Err(Violation::GoawayLength));
        assert_eq!(bad(kind::GOAWAY, 0, 0, 20), Ok(()), "GOAWAY may carry debug data");
        assert_eq!(bad(kind::WINDOW_UPDATE, 0, 0, 5), Err(Violation::WindowUpdateLength));
        assert_eq!(bad(kind::SETTINGS, flag::ACK, 0, 6), Err(Violation::SettingsAckPayload));
        assert_eq!(bad(kind::SETTINGS, 0, 0, 7), Err(Violation::SettingsLength));
        assert_eq!(bad(kind::PRIORITY, 0, 1, 4), Err(Violation::PriorityLength));
        assert!(Violation::PriorityLength.is_stream_error());
        assert_eq!(Violation::PriorityLength.code(), ErrorCode::FrameSize);
    }

    #[test]
    fn padding_is_taken_off_and_may_not_reach_the_frame_length() {
        let padded = |len| head(kind::DATA, flag::PADDED, 1, len);
        assert_eq!(unpad(&head(kind::DATA, 0, 1, 3), &[3, 1, 2]), Ok(&[3, 1, 2][..]), "not padded");
        assert_eq!(unpad(&padded(6), &[2, b'a', b'b', b'c', 0, 0]), Ok(&b"abc"[..]));
        // Padding of all but the pad length octet: no content, still valid.
        assert_eq!(unpad(&padded(3), &[2, 0, 0]), Ok(&[][..]));
        // A pad length of the payload's length or more is an error (RFC 9113 §6.1).
        assert_eq!(unpad(&padded(3), &[3, 0, 0]), Err(Violation::PaddingTooLong));
        assert_eq!(unpad(&padded(0), &[]), Err(Violation::PadLengthMissing));
        assert_eq!(Violation::PaddingTooLong.code(), ErrorCode::Protocol);
    }

    #[test]
    fn a_header_fragment_loses_its_padding_and_priority_fields() {
        let flags = flag::PADDED | flag::PRIORITY | flag::END_HEADERS;
        let payload = [1, 0, 0, 0, 3, 16, 0x82, 0];
        assert_eq!(header_fragment(&head(kind::HEADERS, flags, 5, 8), &payload), Ok((&[0x82][..], Some(3))));
        let short = [0, 0, 0, 3];
        assert_eq!(
            header_fragment(&head(kind::HEADERS, flag::PRIORITY, 5, 4), &short),
            Err(Violation::PriorityFieldsMissing)
        );
        assert_eq!(Violation::PriorityFieldsMissing.code(), ErrorCode::FrameSize);
    }

    #[test]
    fn a_priority_that_depends_on_its_own_stream_is_a_stream_error() {
        assert_eq!(check_priority(&head(kind::PRIORITY, 0, 3, 5), &[0, 0, 0, 1, 16]), Ok(()));
        // The exclusive bit is not part of the dependency.
        assert_eq!(
            check_priority(&head(kind::PRIORITY, 0, 3, 5), &[0x80, 0, 0, 3, 16]),
            Err(Violation::SelfDependency)
        );
    }

    #[test]
    fn a_window_increment_of_0_is_a_connection_or_a_stream_error() {
        let update = |stream| head(kind::WINDOW_UPDATE, 0, stream, 4);
        assert_eq!(window_increment(&update(0), &[0x80, 0, 0, 7]), Ok(7), "the reserved bit is cleared");
        assert_eq!(window_increment(&update(0), &[0x80, 0, 0, 0]), Err(Violation::ZeroConnectionIncrement));
        assert_eq!(window_increment(&update(1), &[0, 0, 0, 0]), Err(Violation::ZeroStreamIncrement));
        assert_eq!(window_increment(&update(1), &[0, 0, 1]), Err(Violation::WindowUpdateLength));
    }

    #[test]
    fn a_send_window_opens_up_to_2_31_minus_1_and_no_further() {
        let mut window = MAX_WINDOW - 10;
        assert_eq!(open_send_window(&mut window, 10, true), Ok(()));
        assert_eq!(window, MAX_WINDOW);
        assert_eq!(open_send_window(&mut window, 1, true), Err(Violation::StreamWindowOverflow));
        assert_eq!(open_send_window(&mut window, 1, false), Err(Violation::ConnectionWindowOverflow));
        assert_eq!(window, MAX_WINDOW, "left as it was");
        // A window SETTINGS drove below zero opens from there.
        let mut window = -100;
        assert_eq!(open_send_window(&mut window, 150, true), Ok(()));
        assert_eq!(window, 50);
    }

    #[test]
    fn data_takes_its_whole_length_from_a_receive_window_given_back_at_half() {
        let mut window = ReceiveWindow::new(100);
        assert_eq!(window.take(100, 1), Ok(()));
        assert_eq!(window.available(), 0);
        assert_eq!(window.take(1, 1), Err(Violation::StreamWindowExceeded));
        assert_eq!(window.take(1, 0), Err(Violation::ConnectionWindowExceeded));
        assert!(Violation::StreamWindowExceeded.is_stream_error());
        assert!(!Violation::ConnectionWindowExceeded.is_stream_error());
        let mut out = Vec::new();
        window.give_back(49, 100, 1, &mut out);
        assert!(out.is_empty(), "under half the window owed: nothing yet");
        window.give_back(1, 100, 1, &mut out);
        assert_eq!(out, [0, 0, 4, kind::WINDOW_UPDATE, 0, 0, 0, 0, 1, 0, 0, 0, 50], "WINDOW_UPDATE(1, 50)");
        assert_eq!(window.available(), 50);
    }

    #[test]
    fn the_latest_resets_are_remembered_and_older_ones_forgotten() {
        let mut resets = RecentResets::default();
        assert!(!resets.contains(0), "stream 0 is never a reset stream");
        for id in (1..=2 * RecentResets::KEPT as u32 + 1).step_by(2) {
            resets.remember(id);
        }
        assert!(!resets.contains(1), "the oldest is forgotten");
        assert!(resets.contains(3) && resets.contains(17));
    }

    #[test]
    fn settings_values_are_checked_against_their_ranges() {
        let parse = |values: &[(u16, u32)]| {
            let (head, payload) = settings_frame(values);
            Settings::parse(&head, &payload).map(|s| matches!(s, Settings::Values(_)))
        };
        assert_eq!(parse(&[(setting::ENABLE_PUSH, 0), (setting::ENABLE_PUSH, 1)]), Ok(true));
        assert_eq!(parse(&[(setting::ENABLE_PUSH, 2)]), Err(Violation::EnablePushValue));
        assert_eq!(parse(&[(setting::ENABLE_CONNECT_PROTOCOL, 1)]), Ok(true));
        assert_eq!(parse(&[(setting::ENABLE_CONNECT_PROTOCOL, 2)]), Err(Violation::EnableConnectProtocolValue));
        assert_eq!(parse(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]), Err(Violation::InitialWindowTooLarge));
        assert_eq!(parse(&[(setting::INITIAL_WINDOW_SIZE, (1 << 31) - 1)]), Ok(true));
        assert_eq!(parse(&[(setting::MAX_FRAME_SIZE, (1 << 14) - 1)]), Err(Violation::MaxFrameSizeRange));
        assert_eq!(parse(&[(setting::MAX_FRAME_SIZE, 1 << 24)]), Err(Violation::MaxFrameSizeRange));
        assert_eq!(parse(&[(setting::MAX_FRAME_SIZE, (1 << 24) - 1)]), Ok(true));
        assert_eq!(parse(&[(0x99, u32::MAX)]), Ok(true), "an unknown setting is ignored");
        // The frame's own shape: the same rules as check_shape, for a caller that parses alone.
        let ack = head(kind::SETTINGS, flag::ACK, 0, 0);
        assert_eq!(Settings::parse(&ack, &[]), Ok(Settings::Ack));
        assert_eq!(Settings::parse(&ack, &[0; 6]), Err(Violation::SettingsAckPayload));
        assert_eq!(Settings::parse(&head(kind::SETTINGS, 0, 0, 5), &[0; 5]), Err(Violation::SettingsLength));
        assert_eq!(
            Settings::parse(&head(kind::SETTINGS, 0, 1, 0), &[]),
            Err(Violation::ConnectionFrameOnStream(kind::SETTINGS))
        );
    }

    #[test]
    fn settings_apply_in_order_and_report_what_the_caller_acts_on() {
        let (_, payload) = settings_frame(&[
            (setting::HEADER_TABLE_SIZE, 4096),
            (setting::MAX_CONCURRENT_STREAMS, 7),
            (setting::MAX_FRAME_SIZE, 1 << 20),
            (setting::MAX_HEADER_LIST_SIZE, 9000),
            (setting::ENABLE_PUSH, 1),
        ]);
        let mut peer = PeerSettings::default();
        let applied = peer.apply(values(&payload), std::iter::empty()).expect("valid");
        assert!(applied.header_table_seen && !applied.header_table_changed, "4096 is the value already");
        assert!(applied.push_enabled);
        assert_eq!(peer.max_concurrent_streams, Some(7));
        assert_eq!(peer.max_frame_size, 1 << 20);
        assert_eq!(peer.max_header_list_size, Some(9000));
        let (_, payload) = settings_frame(&[(setting::HEADER_TABLE_SIZE, 0)]);
        let applied = peer.apply(values(&payload), std::iter::empty()).expect("valid");
        assert!(applied.header_table_changed);
        assert_eq!(peer.header_table_size, 0);
    }

    #[test]
    fn the_initial_window_moves_every_send_window_and_2_31_is_a_flow_control_error() {
        let mut peer = PeerSettings::default();
        let mut windows = [65_535, 0, -5];
        let (_, payload) = settings_frame(&[(setting::INITIAL_WINDOW_SIZE, 65_545)]);
        peer.apply(values(&payload), windows.iter_mut()).expect("valid");
        assert_eq!(windows, [65_545, 10, 5], "each moved by the difference");
        assert_eq!(peer.initial_window, 65_545);

        // One stream's window at 2^31-1: raising the initial window by one pushes it over.
        let mut windows = [100, MAX_WINDOW];
        let (_, payload) = settings_frame(&[(setting::INITIAL_WINDOW_SIZE, 65_546)]);
        assert_eq!(peer.apply(values(&payload), windows.iter_mut()), Err(Violation::SettingsWindowOverflow));
        assert_eq!(Violation::SettingsWindowOverflow.code(), ErrorCode::FlowControl);

        // Values apply in order: a window over 2^31-1 in the middle of a frame is an error even
        // if a later value brings it back.
        let mut peer = PeerSettings::default();
        let mut windows = [MAX_WINDOW - 10];
        let (_, payload) =
            settings_frame(&[(setting::INITIAL_WINDOW_SIZE, 65_535 + 11), (setting::INITIAL_WINDOW_SIZE, 65_535)]);
        assert_eq!(peer.apply(values(&payload), windows.iter_mut()), Err(Violation::SettingsWindowOverflow));

        // Lowering the initial window may take a window below zero: allowed (§6.9.2).
        let mut peer = PeerSettings::default();
        let mut windows = [100];
        let (_, payload) = settings_frame(&[(setting::INITIAL_WINDOW_SIZE, 0)]);
        peer.apply(values(&payload), windows.iter_mut()).expect("valid");
        assert_eq!(windows, [100 - 65_535]);
    }
}
