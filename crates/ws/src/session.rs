//! A WebSocket connection after the upgrade, as a state machine: the octets received and the
//! time in, the octets to send and a verdict out. [`Session`] is the server's (it echoes every
//! message), [`ClientSession`] the client's (it hands messages over); both share the reading
//! and writing halves here, which differ by role only in the masking rules.

use std::collections::VecDeque;
use std::time::Instant;

use crate::deflate::{self, Compressor, DeflateParams, InflateError, Inflater};
use crate::frame::{self, Header, Opcode, Parsed, FIN, MAX_CONTROL_PAYLOAD, MAX_HEADER, RSV1, RSV2, RSV3};
use crate::stats::Stats;
use crate::Role;

/// Messages larger than this (after inflating) are refused by default: close 1009.
pub const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

/// Pings answered in a window of [`PING_WINDOW`]: one more is a flood, closed with 1008 (as
/// HTTP/2's PING budget: a peer that never reads its pongs would otherwise have them queued up
/// to the send cap, one for each ping).
pub const PING_BUDGET: u16 = 100;
pub const PING_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Octets on the wire (frame headers included) a message in progress may take, beyond
/// [`Config::max_message`]: a message of empty fragments never grows, so its frames are what
/// bound it (1009 past `2 * max_message + FRAGMENT_SLACK`).
pub const FRAGMENT_SLACK: u64 = 64 << 10;

/// Close codes (RFC 6455 §7.4.1).
pub mod code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const INVALID_PAYLOAD: u16 = 1007;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
}

/// Whether a peer may send `code` in a close frame: 1000-1003 and 1007-1011 (the codes RFC 6455
/// defines for the wire), and 3000-4999 (registered and private).
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999)
}

/// A connection's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The largest message accepted, after inflating (beyond: close 1009, the message never
    /// allocated past this).
    pub max_message: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { max_message: DEFAULT_MAX_MESSAGE }
    }
}

/// What the connection wants once the output of a call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Send the output (its close frame, if any, is last), then close the socket.
    Close(Closing),
}

/// Why a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// The close handshake is complete: the peer's close (its code, `None` if it had none) was
    /// answered, or it answered ours.
    Handshake { code: Option<u16> },
    /// The peer broke the protocol or a limit: a close frame with this code was sent.
    Failed(u16),
    /// A ping was not answered by the next: a close 1001 was sent.
    PingTimeout,
}

/// A data message's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Binary,
}

impl Kind {
    fn opcode(self) -> Opcode {
        match self {
            Kind::Text => Opcode::Text,
            Kind::Binary => Opcode::Binary,
        }
    }
}

/// A whole message received (text is valid UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: Kind,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Our close frame was sent; waiting for the peer's.
    CloseSent,
    /// Nothing more is read or written.
    Done(Closing),
}

/// The writing half's state between calls.
#[derive(Debug)]
struct WriteState {
    role: Role,
    phase: Phase,
    compressor: Option<Compressor>,
}

/// The writing half during a call: frames, masks (a client's) and compresses what is sent,
/// counting in `stats` (the caller's: a server keeps its counters out of the connection, so
/// an idle one holds none).
struct Writer<'a> {
    state: &'a mut WriteState,
    stats: &'a mut Stats,
    /// A client's masking keys (held by the client, so a server's connection holds none).
    rng: Option<&'a mut fastrand::Rng>,
}

impl std::ops::Deref for Writer<'_> {
    type Target = WriteState;
    fn deref(&self) -> &WriteState {
        self.state
    }
}

impl std::ops::DerefMut for Writer<'_> {
    fn deref_mut(&mut self) -> &mut WriteState {
        self.state
    }
}

impl Writer<'_> {
    fn mask(&mut self) -> Option<[u8; 4]> {
        self.rng.as_mut().map(|rng| rng.u32(..).to_ne_bytes())
    }

    /// Appends a message as one frame, compressed if permessage-deflate was agreed; nothing once
    /// a close was sent.
    fn message(&mut self, kind: Kind, payload: &[u8], out: &mut Vec<u8>) -> bool {
        if self.phase != Phase::Open {
            return false;
        }
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += payload.len() as u64;
        let mask = self.mask();
        let first = FIN | kind.opcode().value();
        if let Some(compressor) = self.compressor.as_mut() {
            let mut compressed = Vec::new();
            if compressor.compress(payload, &mut compressed) {
                frame::write_frame(first | RSV1, &compressed, mask, out);
                return true;
            }
        }
        frame::write_frame(first, payload, mask, out);
        true
    }

    fn control(&mut self, opcode: Opcode, payload: &[u8], out: &mut Vec<u8>) {
        let mask = self.mask();
        frame::write_frame(FIN | opcode.value(), payload, mask, out);
    }

    /// Sends a close frame with `code` (none: an empty close) unless one was sent.
    fn close(&mut self, code: Option<u16>, out: &mut Vec<u8>) {
        if self.phase == Phase::Open {
            let payload = code.map(u16::to_be_bytes);
            self.control(Opcode::Close, payload.as_ref().map_or(&[][..], |p| &p[..]), out);
            self.stats.closes_sent.count(code);
            self.phase = Phase::CloseSent;
        }
    }

    /// Fails the connection: a close with `code` (if none was sent yet), and the end.
    fn fail(&mut self, code: u16, out: &mut Vec<u8>) -> Verdict {
        self.close(Some(code), out);
        self.end(Closing::Failed(code))
    }

    fn end(&mut self, closing: Closing) -> Verdict {
        self.phase = Phase::Done(closing);
        Verdict::Close(closing)
    }
}

/// What is done with each whole message: the writer (to answer it), its kind and octets, and
/// the output.
type Deliver<'a> = dyn FnMut(&mut Writer<'_>, Kind, Vec<u8>, &mut Vec<u8>) + 'a;

/// Where the reader is in a frame.
#[derive(Debug, Clone, Copy)]
enum Recv {
    /// Reading a header: its first `have` octets are in `Reader::header`.
    Header { have: usize },
    /// Reading a payload: `offset` octets taken, `remaining` to come.
    Payload { opcode: Opcode, fin: bool, mask: Option<[u8; 4]>, offset: usize, remaining: u64 },
}

/// A data message being reassembled.
#[derive(Debug)]
struct Partial {
    kind: Kind,
    compressed: bool,
    data: Vec<u8>,
    /// Octets of `data` known to be valid UTF-8 (a text message's incomplete tail starts here).
    utf8_valid: usize,
    /// Octets of its frames received so far, headers included (compressed octets, for a
    /// compressed message, are what its limit is counted in).
    wire: u64,
}

/// What a frame cut across inputs holds until it is whole.
#[derive(Debug)]
struct Scratch {
    header: [u8; MAX_HEADER],
    control: [u8; MAX_CONTROL_PAYLOAD],
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch { header: [0; MAX_HEADER], control: [0; MAX_CONTROL_PAYLOAD] }
    }
}

/// Octets of a compressed payload unmasked at a time on the stack.
const SCRATCH: usize = 4096;

/// The reading half: frames parsed as octets arrive, messages reassembled, inflated and checked.
#[derive(Debug)]
struct Reader {
    max_message: usize,
    recv: Recv,
    /// A frame header or control payload cut across inputs, gathered (none between frames).
    scratch: Option<Box<Scratch>>,
    /// Boxed: an idle connection holds only the pointer.
    partial: Option<Box<Partial>>,
    inflater: Option<Inflater>,
    /// The last ping sent (its payload is `pings`, big-endian) awaits its pong.
    ping_outstanding: bool,
    pings: u64,
    last_input: Instant,
    /// Pings received since `ping_window` (see [`PING_BUDGET`]).
    pings_in_window: u16,
    ping_window: Instant,
}

/// Checks the new octets of a text message: false at the first invalid one. A sequence cut at
/// the end stays unchecked until more arrives.
fn check_utf8(data: &[u8], valid: &mut usize) -> bool {
    match std::str::from_utf8(&data[*valid..]) {
        Ok(_) => {
            *valid = data.len();
            true
        }
        Err(error) => {
            *valid += error.valid_up_to();
            error.error_len().is_none()
        }
    }
}

/// Grows `data` for `more` octets, never past `cap` in all: doubling as a `Vec` does, but a
/// message never holds more room than its frames announced.
fn reserve_within(data: &mut Vec<u8>, more: usize, cap: usize) {
    if data.capacity() - data.len() >= more {
        return;
    }
    let wanted = (data.capacity() * 2).max(data.len() + more).min(cap).max(data.len() + more);
    data.reserve_exact(wanted - data.len());
}

impl Reader {
    /// Reads `input`, calling `deliver` with each whole message.
    fn receive(
        &mut self,
        mut input: &[u8],
        w: &mut Writer<'_>,
        out: &mut Vec<u8>,
        deliver: &mut Deliver<'_>,
    ) -> Verdict {
        loop {
            if let Phase::Done(closing) = w.phase {
                return Verdict::Close(closing);
            }
            match self.recv {
                Recv::Header { have } => {
                    if input.is_empty() {
                        if have == 0 {
                            // Between frames: nothing is held.
                            self.scratch = None;
                        }
                        return Verdict::Continue;
                    }
                    let take = (MAX_HEADER - have).min(input.len());
                    // A header whole in the input is read there; one cut is gathered aside.
                    let parsed = if have == 0 {
                        frame::parse_header(&input[..take])
                    } else {
                        let scratch = self.scratch.get_or_insert_with(Box::default);
                        scratch.header[have..have + take].copy_from_slice(&input[..take]);
                        frame::parse_header(&scratch.header[..have + take])
                    };
                    match parsed {
                        Parsed::Partial => {
                            let scratch = self.scratch.get_or_insert_with(Box::default);
                            if have == 0 {
                                scratch.header[..take].copy_from_slice(&input[..take]);
                            }
                            self.recv = Recv::Header { have: have + take };
                            input = &input[take..];
                        }
                        Parsed::BadLength => return w.fail(code::PROTOCOL_ERROR, out),
                        Parsed::Header(header, used) => {
                            input = &input[used - have..];
                            if let Err(code) = self.start_frame(header, used, w.role) {
                                self.abandon();
                                return w.fail(code, out);
                            }
                        }
                    }
                }
                Recv::Payload { opcode, fin, mask, offset, remaining } => {
                    let mut control = [0u8; MAX_CONTROL_PAYLOAD];
                    if opcode.is_control() && offset == 0 && remaining <= input.len() as u64 {
                        // A control frame whole in the input: read there, nothing held.
                        let len = remaining as usize;
                        control[..len].copy_from_slice(&input[..len]);
                        if let Some(key) = mask {
                            frame::apply_mask(&mut control[..len], key, 0);
                        }
                        input = &input[len..];
                        self.recv = Recv::Header { have: 0 };
                        let verdict = self.end_frame(opcode, fin, &control[..len], w, out, deliver);
                        if verdict != Verdict::Continue {
                            return verdict;
                        }
                        continue;
                    }
                    let take = remaining.min(input.len() as u64) as usize;
                    if take > 0 {
                        if let Err(code) = self.payload(opcode, &input[..take], mask, offset) {
                            self.abandon();
                            return w.fail(code, out);
                        }
                        input = &input[take..];
                    }
                    let remaining = remaining - take as u64;
                    if remaining > 0 {
                        self.recv = Recv::Payload { opcode, fin, mask, offset: offset + take, remaining };
                        return Verdict::Continue;
                    }
                    self.recv = Recv::Header { have: 0 };
                    // A control payload cut across inputs was gathered aside; a data frame's
                    // went to its message.
                    let mut len = 0;
                    if opcode.is_control() {
                        len = offset + take;
                        if let Some(scratch) = self.scratch.as_ref() {
                            control[..len].copy_from_slice(&scratch.control[..len]);
                        }
                    }
                    let verdict = self.end_frame(opcode, fin, &control[..len], w, out, deliver);
                    if verdict != Verdict::Continue {
                        return verdict;
                    }
                }
            }
        }
    }

    /// Checks a frame's header against the rules of RFC 6455 §5 and RFC 7692 §6.
    fn start_frame(&mut self, header: Header, header_len: usize, role: Role) -> Result<(), u16> {
        let opcode = Opcode::from_u8(header.opcode).ok_or(code::PROTOCOL_ERROR)?;
        if header.rsv & (RSV2 | RSV3) != 0 {
            return Err(code::PROTOCOL_ERROR);
        }
        // A client masks every frame; a server masks none (§5.1).
        if header.mask.is_some() != (role == Role::Server) {
            return Err(code::PROTOCOL_ERROR);
        }
        let rsv1 = header.rsv & RSV1 != 0;
        match opcode {
            Opcode::Close | Opcode::Ping | Opcode::Pong => {
                if !header.fin || header.len > MAX_CONTROL_PAYLOAD as u64 || rsv1 {
                    return Err(code::PROTOCOL_ERROR);
                }
            }
            Opcode::Continuation => {
                let Some(partial) = self.partial.as_ref() else { return Err(code::PROTOCOL_ERROR) };
                if rsv1 {
                    return Err(code::PROTOCOL_ERROR);
                }
                self.check_size(partial, header_len, header.len)?;
                if let Some(partial) = self.partial.as_mut() {
                    partial.wire += header_len as u64;
                }
            }
            Opcode::Text | Opcode::Binary => {
                // RSV1 marks a compressed message, only with permessage-deflate agreed.
                if self.partial.is_some() || (rsv1 && self.inflater.is_none()) {
                    return Err(code::PROTOCOL_ERROR);
                }
                let kind = if opcode == Opcode::Text { Kind::Text } else { Kind::Binary };
                let partial =
                    Partial { kind, compressed: rsv1, data: Vec::new(), utf8_valid: 0, wire: header_len as u64 };
                self.check_size(&partial, 0, header.len)?;
                self.partial = Some(Box::new(partial));
            }
        }
        self.recv = Recv::Payload { opcode, fin: header.fin, mask: header.mask, offset: 0, remaining: header.len };
        Ok(())
    }

    /// A frame of `len` octets (after a header of `header_len`) would take the message past
    /// the limit: 1009 before any of it is kept. Compressed octets are bounded too (a stream
    /// of empty blocks never ends otherwise), and so are a message's frames on the wire (a
    /// stream of empty fragments never ends otherwise: see [`FRAGMENT_SLACK`]).
    fn check_size(&self, partial: &Partial, header_len: usize, len: u64) -> Result<(), u16> {
        let max = self.max_message as u64;
        let so_far = if partial.compressed { partial.wire } else { partial.data.len() as u64 };
        let wire = partial.wire.saturating_add(header_len as u64).saturating_add(len);
        if so_far.saturating_add(len) > max || wire > max.saturating_mul(2).saturating_add(FRAGMENT_SLACK) {
            return Err(code::TOO_BIG);
        }
        Ok(())
    }

    /// A frame's payload octets (a piece of them: `offset` is where they start).
    fn payload(&mut self, opcode: Opcode, chunk: &[u8], mask: Option<[u8; 4]>, offset: usize) -> Result<(), u16> {
        if opcode.is_control() {
            let scratch = self.scratch.get_or_insert_with(Box::default);
            let piece = &mut scratch.control[offset..offset + chunk.len()];
            piece.copy_from_slice(chunk);
            if let Some(key) = mask {
                frame::apply_mask(piece, key, offset);
            }
            return Ok(());
        }
        let Some(partial) = self.partial.as_mut() else { return Err(code::PROTOCOL_ERROR) };
        partial.wire += chunk.len() as u64;
        if partial.compressed {
            let Some(inflater) = self.inflater.as_mut() else { return Err(code::PROTOCOL_ERROR) };
            let mut scratch = [0u8; SCRATCH];
            for (i, piece) in chunk.chunks(SCRATCH).enumerate() {
                let scratch = &mut scratch[..piece.len()];
                scratch.copy_from_slice(piece);
                if let Some(key) = mask {
                    frame::apply_mask(scratch, key, offset + i * SCRATCH);
                }
                inflater.inflate(scratch, &mut partial.data, self.max_message).map_err(inflate_code)?;
            }
        } else {
            let start = partial.data.len();
            reserve_within(&mut partial.data, chunk.len(), self.max_message);
            partial.data.extend_from_slice(chunk);
            if let Some(key) = mask {
                frame::apply_mask(&mut partial.data[start..], key, offset);
            }
        }
        if partial.kind == Kind::Text && !check_utf8(&partial.data, &mut partial.utf8_valid) {
            return Err(code::INVALID_PAYLOAD);
        }
        Ok(())
    }

    /// A whole frame has arrived.
    fn end_frame(
        &mut self,
        opcode: Opcode,
        fin: bool,
        control: &[u8],
        w: &mut Writer<'_>,
        out: &mut Vec<u8>,
        deliver: &mut Deliver<'_>,
    ) -> Verdict {
        match opcode {
            Opcode::Ping => {
                w.stats.pings_received += 1;
                if self.ping_flood() {
                    self.abandon();
                    return w.fail(code::POLICY_VIOLATION, out);
                }
                if w.phase == Phase::Open {
                    w.control(Opcode::Pong, control, out);
                    w.stats.pongs_sent += 1;
                }
                Verdict::Continue
            }
            Opcode::Pong => {
                w.stats.pongs_received += 1;
                if self.ping_outstanding && self.pings.to_be_bytes()[..] == *control {
                    self.ping_outstanding = false;
                }
                Verdict::Continue
            }
            Opcode::Close => self.peer_close(control, w, out),
            Opcode::Text | Opcode::Binary | Opcode::Continuation => {
                if !fin {
                    return Verdict::Continue;
                }
                let Some(mut partial) = self.partial.take() else { return w.fail(code::PROTOCOL_ERROR, out) };
                if partial.compressed {
                    let finished = match self.inflater.as_mut() {
                        Some(inflater) => {
                            inflater.finish_message(&mut partial.data, self.max_message).map_err(inflate_code)
                        }
                        None => Err(code::PROTOCOL_ERROR),
                    };
                    if let Err(code) = finished {
                        self.abandon();
                        return w.fail(code, out);
                    }
                }
                // The whole message must be valid: an incomplete sequence at its end is not.
                if partial.kind == Kind::Text
                    && (!check_utf8(&partial.data, &mut partial.utf8_valid) || partial.utf8_valid != partial.data.len())
                {
                    return w.fail(code::INVALID_PAYLOAD, out);
                }
                w.stats.messages_received += 1;
                w.stats.bytes_received += partial.data.len() as u64;
                deliver(w, partial.kind, partial.data, out);
                Verdict::Continue
            }
        }
    }

    /// Counts a ping received (at the time of the last input): true past [`PING_BUDGET`] in
    /// [`PING_WINDOW`].
    fn ping_flood(&mut self) -> bool {
        if self.last_input.saturating_duration_since(self.ping_window) >= PING_WINDOW {
            self.ping_window = self.last_input;
            self.pings_in_window = 0;
        }
        self.pings_in_window = self.pings_in_window.saturating_add(1);
        self.pings_in_window > PING_BUDGET
    }

    /// The peer's close frame (§5.5.1, §7.4): answered with its code, or failed if malformed.
    fn peer_close(&mut self, payload: &[u8], w: &mut Writer<'_>, out: &mut Vec<u8>) -> Verdict {
        let code = match payload {
            [] => None,
            [_] => return w.fail(code::PROTOCOL_ERROR, out),
            [high, low, reason @ ..] => {
                let code = u16::from_be_bytes([*high, *low]);
                if !valid_close_code(code) {
                    return w.fail(code::PROTOCOL_ERROR, out);
                }
                if std::str::from_utf8(reason).is_err() {
                    return w.fail(code::INVALID_PAYLOAD, out);
                }
                Some(code)
            }
        };
        w.stats.closes_received.count(code);
        w.close(code, out);
        self.abandon();
        w.end(Closing::Handshake { code })
    }

    /// Drops a message in progress (the connection is ending).
    fn abandon(&mut self) {
        self.partial = None;
        if let Some(inflater) = self.inflater.as_mut() {
            inflater.forget_message();
        }
    }

    fn buffered(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.data.capacity())
    }
}

fn inflate_code(error: InflateError) -> u16 {
    match error {
        InflateError::TooBig => code::TOO_BIG,
        InflateError::Corrupt => code::INVALID_PAYLOAD,
    }
}

/// Both halves of one side of a connection.
#[derive(Debug)]
struct Core {
    reader: Reader,
    writer: WriteState,
}

impl Core {
    fn new(config: &Config, deflate: Option<&DeflateParams>, role: Role, now: Instant) -> Core {
        let (compressor, inflater) = match deflate.map(|params| deflate::codec(params, role)) {
            Some((compressor, inflater)) => (Some(compressor), Some(inflater)),
            None => (None, None),
        };
        Core {
            reader: Reader {
                max_message: config.max_message,
                recv: Recv::Header { have: 0 },
                scratch: None,
                partial: None,
                inflater,
                ping_outstanding: false,
                pings: 0,
                last_input: now,
                pings_in_window: 0,
                ping_window: now,
            },
            writer: WriteState { role, phase: Phase::Open, compressor },
        }
    }

    fn receive(
        &mut self,
        input: &[u8],
        now: Instant,
        stats: &mut Stats,
        rng: Option<&mut fastrand::Rng>,
        out: &mut Vec<u8>,
        deliver: &mut Deliver<'_>,
    ) -> Verdict {
        if !input.is_empty() {
            self.reader.last_input = now;
        }
        self.reader.receive(input, &mut Writer { state: &mut self.writer, stats, rng }, out, deliver)
    }

    fn on_ping_due(&mut self, stats: &mut Stats, rng: Option<&mut fastrand::Rng>, out: &mut Vec<u8>) -> Verdict {
        let mut writer = Writer { state: &mut self.writer, stats, rng };
        match writer.phase {
            Phase::Done(closing) => return Verdict::Close(closing),
            Phase::CloseSent => return Verdict::Continue,
            Phase::Open => {}
        }
        if self.reader.ping_outstanding {
            writer.stats.ping_timeouts += 1;
            writer.close(Some(code::GOING_AWAY), out);
            return writer.end(Closing::PingTimeout);
        }
        self.reader.pings += 1;
        let payload = self.reader.pings.to_be_bytes();
        writer.control(Opcode::Ping, &payload, out);
        writer.stats.pings_sent += 1;
        self.reader.ping_outstanding = true;
        Verdict::Continue
    }

    fn initiate_close(
        &mut self,
        code: u16,
        stats: &mut Stats,
        rng: Option<&mut fastrand::Rng>,
        out: &mut Vec<u8>,
    ) -> Verdict {
        match self.writer.phase {
            Phase::Done(closing) => Verdict::Close(closing),
            _ => {
                Writer { state: &mut self.writer, stats, rng }.close(Some(code), out);
                Verdict::Continue
            }
        }
    }

    fn closing(&self) -> bool {
        self.writer.phase != Phase::Open
    }
}

/// The server's connection after the upgrade: every message is echoed as a message of the same
/// kind, pings are answered, and a close is answered with its code.
#[derive(Debug)]
pub struct Session {
    core: Core,
}

impl Session {
    /// A connection whose 101 was just sent, with the permessage-deflate it agreed.
    pub fn new(config: &Config, deflate: Option<&DeflateParams>, now: Instant) -> Session {
        Session { core: Core::new(config, deflate, Role::Server, now) }
    }

    /// Reads `input` (any part of the stream, down to one octet), appending the echoes, pongs
    /// and close frames to `out`, counting in `stats` (the caller's: several connections may
    /// count in one).
    pub fn receive(&mut self, input: &[u8], now: Instant, stats: &mut Stats, out: &mut Vec<u8>) -> Verdict {
        self.core.receive(input, now, stats, None, out, &mut |w, kind, data, out| {
            w.message(kind, &data, out);
        })
    }

    /// The ping timer fired: a ping, or, if the last one is unanswered, close 1001 and
    /// [`Closing::PingTimeout`] (counted in [`Stats::ping_timeouts`]). No ping once closing.
    pub fn on_ping_due(&mut self, _now: Instant, stats: &mut Stats, out: &mut Vec<u8>) -> Verdict {
        self.core.on_ping_due(stats, None, out)
    }

    /// Sends a close with `code` (1001 for a drain) and waits for the peer's: a later
    /// [`Session::receive`] returns [`Closing::Handshake`] when it arrives; the engine bounds the
    /// wait (the drain timeout). Messages arriving meanwhile are read but not echoed.
    pub fn initiate_close(&mut self, code: u16, stats: &mut Stats, out: &mut Vec<u8>) -> Verdict {
        self.core.initiate_close(code, stats, None, out)
    }

    /// A close frame was sent (by either side's start).
    pub fn closing(&self) -> bool {
        self.core.closing()
    }

    /// When input last arrived (the ping timer pings connections idle since).
    pub fn last_input(&self) -> Instant {
        self.core.reader.last_input
    }

    /// Octets of message held between calls (a message in progress); 0 when idle.
    pub fn buffered(&self) -> usize {
        self.core.reader.buffered()
    }
}

/// The client's connection after the 101: it sends messages masked, hands over those received
/// ([`ClientSession::poll_message`]), answers pings and closes.
#[derive(Debug)]
pub struct ClientSession {
    core: Core,
    messages: VecDeque<Message>,
    stats: Stats,
    rng: fastrand::Rng,
}

impl ClientSession {
    /// `rng` draws the masking keys (RFC 6455 §5.3 wants them unpredictable: seed it from the
    /// system's entropy, as `fastrand::Rng::new()` does).
    pub fn new(config: &Config, deflate: Option<&DeflateParams>, rng: fastrand::Rng, now: Instant) -> ClientSession {
        ClientSession {
            core: Core::new(config, deflate, Role::Client, now),
            messages: VecDeque::new(),
            stats: Stats::default(),
            rng,
        }
    }

    /// Appends `payload` as one message (compressed if agreed); false once closing (nothing sent).
    pub fn send(&mut self, kind: Kind, payload: &[u8], out: &mut Vec<u8>) -> bool {
        Writer { state: &mut self.core.writer, stats: &mut self.stats, rng: Some(&mut self.rng) }
            .message(kind, payload, out)
    }

    /// Reads `input`; whole messages wait in [`ClientSession::poll_message`].
    pub fn receive(&mut self, input: &[u8], now: Instant, out: &mut Vec<u8>) -> Verdict {
        let messages = &mut self.messages;
        self.core.receive(input, now, &mut self.stats, Some(&mut self.rng), out, &mut |_, kind, data, _| {
            messages.push_back(Message { kind, data })
        })
    }

    pub fn poll_message(&mut self) -> Option<Message> {
        self.messages.pop_front()
    }

    /// As [`Session::on_ping_due`].
    pub fn on_ping_due(&mut self, _now: Instant, out: &mut Vec<u8>) -> Verdict {
        self.core.on_ping_due(&mut self.stats, Some(&mut self.rng), out)
    }

    /// As [`Session::initiate_close`] (1000 at the end of a run).
    pub fn initiate_close(&mut self, code: u16, out: &mut Vec<u8>) -> Verdict {
        self.core.initiate_close(code, &mut self.stats, Some(&mut self.rng), out)
    }

    pub fn closing(&self) -> bool {
        self.core.closing()
    }

    pub fn last_input(&self) -> Instant {
        self.core.reader.last_input
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}
