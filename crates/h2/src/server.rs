//! One HTTP/2 server connection as a state machine: bytes and the time in, bytes and events out.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::{Budget, Limits};
use crate::frame::{self, flag, kind, setting, ErrorCode, Head, DEFAULT_WINDOW, HEADER_LEN, PREFACE};
use crate::hpack::{self, Decoder, HeaderList};
use crate::request::{check_request, check_trailers, Malformed, Request};
use crate::rules::{self, FrameReader, PeerSettings, ReceiveWindow, RecentResets, Settings, Violation};
use crate::stats::{Limit, Stats};
use crate::tunnel::{Flow, NoTunnels, Opening, Tunnels, TUNNEL_SEND_CAP};

/// What the connection wants once the output of a call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Send what is queued (a GOAWAY is last), then close.
    Close(Closing),
}

/// Why a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// In good order: the drain finished, or the peer's GOAWAY and nothing left to answer.
    Done,
    /// The peer broke the protocol: GOAWAY with this code.
    Protocol(ErrorCode),
    /// The peer went over a limit: GOAWAY(ENHANCE_YOUR_CALM), or the timeout's answer.
    Limit(Limit),
}

/// What the application is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A complete request: answer it with [`Connection::respond`].
    Request(Request),
}

/// A response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No body: HEADERS carries END_STREAM.
    Empty,
    /// The whole body, shared: framed as DATA as the windows allow.
    Bytes(Bytes),
    /// A body the application supplies in pieces with [`Connection::send_data`] (a file read a
    /// chunk at a time): ask [`Connection::wants_data`] which stream has room for more.
    Chunks,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Matching the client preface: this many octets matched so far.
    Preface(u8),
    /// The preface arrived; the first frame must be SETTINGS.
    FirstSettings,
    Open,
    /// A GOAWAY for an error was written: nothing more is read.
    Closed,
}

/// Where a stream's response stands.
#[derive(Debug, Default)]
enum Send {
    /// Not answered yet.
    #[default]
    Waiting,
    /// Headers sent; `queue` is the body not yet framed, `end` whether it is all of it,
    /// `given` the bytes of a [`Body::Chunks`] body handed over so far (where the next chunk
    /// starts).
    Body {
        queue: VecDeque<Bytes>,
        end: bool,
        given: u64,
    },
    Done,
}

#[derive(Debug)]
struct Stream {
    id: u32,
    /// The peer sent END_STREAM.
    remote_done: bool,
    send: Send,
    send_window: i64,
    /// What the peer may still send (its body is discarded, the window given back).
    recv: ReceiveWindow,
    content_length: Option<u64>,
    body_len: u64,
    /// The request's fields, kept until its END_STREAM.
    fields: Option<HeaderList>,
    /// The request was answered by the stage itself (431, 413): later DATA is dropped.
    rejected: bool,
    /// An extended CONNECT accepted: its DATA goes to the application's [`Tunnels`].
    tunnel: bool,
    /// A tunnel's input octets whose window is held back while its output is over the cap.
    withheld: u32,
}

/// A header block arriving in HEADERS and CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
    continuations: u32,
}

/// Events counted in a window of time.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Option<Instant>,
    count: u32,
}

impl Window {
    const fn new() -> Self {
        Window { start: None, count: 0 }
    }

    /// Count one at `now`: true once the budget is spent.
    fn over(&mut self, now: Instant, budget: Budget) -> bool {
        match self.start {
            Some(start) if now.saturating_duration_since(start) < budget.per => {}
            _ => {
                self.start = Some(now);
                self.count = 0;
            }
        }
        self.count = self.count.saturating_add(1);
        self.count > budget.count
    }
}

/// Why a read of frames stopped early.
enum Stop {
    /// A frame's header broke a rule (its size): a connection error.
    Refused(Violation),
    /// Handling a frame closed the connection.
    Closed,
}

impl From<Violation> for Stop {
    fn from(violation: Violation) -> Self {
        Stop::Refused(violation)
    }
}

/// An HTTP/2 server connection (see the crate's documentation for how an engine drives it).
#[derive(Debug)]
pub struct Connection {
    limits: Arc<Limits>,
    phase: Phase,
    /// Cuts frames out of what is received; holds a frame received in part (unallocated
    /// between whole frames).
    reader: FrameReader,
    /// When the unfinished unit (the preface, a frame other than DATA, a header block) began.
    unfinished_since: Option<Instant>,
    decoder: Decoder,
    block: Option<Box<Block>>,
    streams: Vec<Stream>,
    events: VecDeque<Event>,
    /// The highest stream the peer opened (or tried to).
    last_stream: u32,
    /// Which of the 64 odd stream ids up to `last_stream` were opened (bit k: `last_stream - 2k`):
    /// HEADERS on one of them is on a closed stream (STREAM_CLOSED), on a skipped one a
    /// protocol error.
    opened: u64,
    /// A HEADERS frame whose priority made its stream depend on itself: reset once decoded.
    self_dependent: Option<u32>,
    /// A connection error's GOAWAY, written at the end of the call.
    pending_goaway: Option<ErrorCode>,
    /// Streams this server reset lately: the peer's frames on them are ignored.
    reset_by_us: RecentResets,
    /// What the peer's SETTINGS said.
    peer: PeerSettings,
    /// SETTINGS this server sent that the peer has not acknowledged (one: those of `new`); an
    /// acknowledgement past them answers nothing, and counts as an empty frame.
    settings_unacked: u32,
    /// The peer changed SETTINGS_HEADER_TABLE_SIZE: the next header block begins with a size update.
    table_size_changed: bool,
    send_window: i64,
    recv: ReceiveWindow,
    /// The GOAWAY of a drain was sent.
    draining: bool,
    peer_goaway: bool,
    closing: Option<Closing>,
    resets: Window,
    pings: Window,
    settings: Window,
    empty: Window,
    /// Since when response data waits on a window the peer keeps shut.
    stalled_since: Option<Instant>,
    /// The next stream to frame DATA for (round robin).
    turn: usize,
    stats: Stats,
}

impl Connection {
    /// A new connection at `now`; the server's SETTINGS (and a connection WINDOW_UPDATE) are
    /// appended to `out` at once, as RFC 9113 allows before the client's preface.
    pub fn new(limits: Arc<Limits>, now: Instant, out: &mut Vec<u8>) -> Self {
        let l = &limits;
        let mut settings = vec![
            (setting::MAX_CONCURRENT_STREAMS, l.max_concurrent_streams),
            (setting::MAX_HEADER_LIST_SIZE, l.max_header_list_size),
        ];
        if l.stream_window != DEFAULT_WINDOW {
            settings.push((setting::INITIAL_WINDOW_SIZE, l.stream_window));
        }
        if l.max_frame_size != frame::MIN_MAX_FRAME {
            settings.push((setting::MAX_FRAME_SIZE, l.max_frame_size));
        }
        if l.header_table_size != 4096 {
            settings.push((setting::HEADER_TABLE_SIZE, l.header_table_size));
        }
        if l.extended_connect {
            settings.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        frame::put_settings(out, &settings);
        if l.connection_window > DEFAULT_WINDOW {
            frame::put_window_update(out, 0, l.connection_window - DEFAULT_WINDOW);
        }
        Connection {
            phase: Phase::Preface(0),
            reader: FrameReader::default(),
            unfinished_since: Some(now),
            decoder: Decoder::new(l.header_table_size as usize),
            block: None,
            streams: Vec::new(),
            events: VecDeque::new(),
            last_stream: 0,
            opened: 0,
            self_dependent: None,
            pending_goaway: None,
            reset_by_us: RecentResets::default(),
            peer: PeerSettings::default(),
            settings_unacked: 1,
            table_size_changed: false,
            send_window: i64::from(DEFAULT_WINDOW),
            recv: ReceiveWindow::new(l.connection_window),
            draining: false,
            peer_goaway: false,
            closing: None,
            resets: Window::new(),
            pings: Window::new(),
            settings: Window::new(),
            empty: Window::new(),
            stalled_since: None,
            turn: 0,
            stats: Stats::default(),
            limits,
        }
    }

    /// Feed `input`, received at `now`. Control frames (SETTINGS and PING acknowledgements,
    /// WINDOW_UPDATE, RST_STREAM, GOAWAY) are appended to `out`; complete requests become
    /// events ([`Connection::poll_event`]). Then call [`Connection::transmit`].
    pub fn receive(&mut self, input: &[u8], now: Instant, out: &mut Vec<u8>) -> Verdict {
        self.receive_with(input, now, out, &mut NoTunnels)
    }

    /// [`Connection::receive`], extended CONNECTs opened and fed through `tunnels` (with
    /// [`Limits::extended_connect`]).
    pub fn receive_with(
        &mut self,
        input: &[u8],
        now: Instant,
        out: &mut Vec<u8>,
        tunnels: &mut dyn Tunnels,
    ) -> Verdict {
        let mut input = input;
        if let Phase::Preface(matched) = self.phase {
            let matched = usize::from(matched);
            let want = &PREFACE[matched..];
            let n = want.len().min(input.len());
            if input[..n] != want[..n] {
                self.connection_error(ErrorCode::Protocol);
                self.flush_goaway(out);
                return self.verdict();
            }
            input = &input[n..];
            if matched + n < PREFACE.len() {
                self.phase = Phase::Preface((matched + n) as u8);
                return self.verdict();
            }
            self.phase = Phase::FirstSettings;
        }
        if self.phase != Phase::Closed {
            self.receive_frames(input, now, out, tunnels);
        }
        self.flush_goaway(out);
        self.verdict()
    }

    fn flush_goaway(&mut self, out: &mut Vec<u8>) {
        if let Some(code) = self.pending_goaway.take() {
            frame::put_goaway(out, self.last_stream, code, b"");
            self.stats.goaways += 1;
        }
    }

    /// Cut `input` into frames and handle each; then the header deadline for what is held.
    fn receive_frames(&mut self, input: &[u8], now: Instant, out: &mut Vec<u8>, tunnels: &mut dyn Tunnels) {
        // Taken for the read, so that each frame may be handled with the whole connection.
        let mut reader = std::mem::take(&mut self.reader);
        let max_frame = self.limits.max_frame_size;
        let read = reader.read(input, max_frame, |head, payload| {
            self.frame(head, payload, now, out, tunnels);
            if self.phase == Phase::Closed {
                return Err(Stop::Closed);
            }
            Ok(())
        });
        self.reader = reader;
        match read {
            Ok(()) => {}
            Err(Stop::Closed) => return,
            Err(Stop::Refused(violation)) => return self.connection_error(violation.code()),
        }
        if !self.reader.is_empty() {
            let data = self.reader.pending_head().is_some_and(|h| h.kind == kind::DATA);
            if !data {
                // A frame other than DATA under way is a header that may be slow.
                self.unfinished_since.get_or_insert(now);
            } else if self.block.is_none() && self.phase != Phase::FirstSettings {
                // A DATA frame on the way is an upload, not a slow header.
                self.unfinished_since = None;
            }
        }
        if self.reader.is_empty() && self.block.is_none() && self.phase != Phase::FirstSettings {
            self.unfinished_since = None;
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front();
        if self.events.is_empty() && self.events.capacity() > 0 {
            self.events = VecDeque::new();
        }
        event
    }

    /// Answer `stream` with `status`, `fields` (lower-case names) and `body`; HEADERS (and
    /// CONTINUATION) are appended to `out` at once, the body is framed by
    /// [`Connection::transmit`]. A stream the peer has reset meanwhile is skipped.
    pub fn respond(&mut self, stream: u32, status: u16, fields: &[(&[u8], &[u8])], body: Body, out: &mut Vec<u8>) {
        let Some(i) = self.index(stream) else { return };
        if !matches!(self.streams[i].send, Send::Waiting) {
            return;
        }
        let end = body == Body::Empty;
        self.write_headers(stream, status, fields, end, out);
        let s = &mut self.streams[i];
        s.send = match body {
            Body::Empty => Send::Done,
            Body::Bytes(bytes) => Send::Body { queue: VecDeque::from([bytes]), end: true, given: 0 },
            Body::Chunks => Send::Body { queue: VecDeque::new(), end: false, given: 0 },
        };
        self.retire(i);
    }

    /// Add a piece of a [`Body::Chunks`] body to `stream`'s queue; `end` with its last piece.
    pub fn send_data(&mut self, stream: u32, data: Bytes, end: bool) {
        let Some(i) = self.index(stream) else { return };
        if let Send::Body { queue, end: ended, given } = &mut self.streams[i].send {
            if !*ended {
                *given += data.len() as u64;
                if !data.is_empty() {
                    queue.push_back(data);
                }
                *ended = end;
            }
        }
    }

    /// The bytes of `stream`'s [`Body::Chunks`] body handed to [`Connection::send_data`] so far:
    /// where its next chunk starts. None: no such stream is sending a body.
    pub fn chunks_given(&self, stream: u32) -> Option<u64> {
        match &self.streams[self.index(stream)?].send {
            Send::Body { given, .. } => Some(*given),
            _ => None,
        }
    }

    /// The application cannot go on with `stream`'s response (a body file that shrank, a read
    /// that failed): RST_STREAM with `code` is appended to `out` and the stream is gone; the
    /// connection and its other streams go on. Not counted against the peer's reset budget.
    pub fn reset_stream(&mut self, stream: u32, code: ErrorCode, out: &mut Vec<u8>) {
        let Some(i) = self.index(stream) else { return };
        self.streams.swap_remove(i);
        self.shrink();
        frame::put_rst(out, stream, code);
        self.stats.resets_sent += 1;
        self.remember_reset(stream);
    }

    /// A stream whose [`Body::Chunks`] body has nothing queued and whose window is open: the
    /// application may read its next chunk, of at most the bytes returned.
    pub fn wants_data(&self) -> Option<(u32, usize)> {
        if self.send_window <= 0 {
            return None;
        }
        self.streams.iter().find_map(|s| match &s.send {
            Send::Body { queue, end: false, .. } if queue.is_empty() && s.send_window > 0 && !s.tunnel => {
                Some((s.id, s.send_window.min(self.send_window) as usize))
            }
            _ => None,
        })
    }

    /// Frame queued response bodies as DATA into `out`, as the flow-control windows allow and
    /// while the engine's unsent output (`queued`, not counting `out`) stays under the output
    /// cap. Call it after every [`Connection::receive`] and [`Connection::respond`], and when
    /// the socket has taken output.
    pub fn transmit(&mut self, now: Instant, queued: usize, out: &mut Vec<u8>) -> Verdict {
        let start = out.len();
        let cap = self.limits.output_cap;
        let mut blocked = false;
        let mut sent = false;
        let mut idle_rounds = 0;
        while !self.streams.is_empty() && idle_rounds < self.streams.len() {
            if queued + (out.len() - start) >= cap {
                break;
            }
            let i = self.turn % self.streams.len();
            self.turn = self.turn.wrapping_add(1);
            let room = cap - queued - (out.len() - start);
            match self.frame_data(i, room, out) {
                Framed::Sent => {
                    sent = true;
                    idle_rounds = 0;
                }
                Framed::Blocked => {
                    blocked = true;
                    idle_rounds += 1;
                }
                Framed::Nothing => idle_rounds += 1,
            }
        }
        // Waiting on a shut window since now, or since earlier if nothing moved meanwhile.
        if !blocked {
            self.stalled_since = None;
        } else if sent || self.stalled_since.is_none() {
            self.stalled_since = Some(now);
        }
        // Streams that finished.
        let mut i = 0;
        while i < self.streams.len() {
            if !self.retire(i) {
                i += 1;
            }
        }
        self.verdict()
    }

    /// One DATA frame for stream `i`, at most `room` bytes of output.
    fn frame_data(&mut self, i: usize, room: usize, out: &mut Vec<u8>) -> Framed {
        let max_frame = self.peer.max_frame_size as usize;
        let conn_window = self.send_window;
        let s = &mut self.streams[i];
        let Send::Body { queue, end, .. } = &mut s.send else { return Framed::Nothing };
        let left: usize = queue.iter().map(Bytes::len).sum();
        let window = s.send_window.min(conn_window);
        if left == 0 {
            if *end {
                // All framed but END_STREAM (a chunked body's last piece was empty).
                frame::put_head(out, 0, kind::DATA, flag::END_STREAM, s.id);
                s.send = Send::Done;
                return Framed::Sent;
            }
            // A chunked body waits for its next chunk; with its window shut, it waits on the
            // peer (a stall, as for a body queued), not on the application. A tunnel with
            // nothing to send waits on nobody.
            return if window <= 0 && !s.tunnel { Framed::Blocked } else { Framed::Nothing };
        }
        if window <= 0 {
            return Framed::Blocked;
        }
        if room <= HEADER_LEN {
            return Framed::Nothing;
        }
        let n = left.min(max_frame).min(window as usize).min(room - HEADER_LEN);
        let last = *end && n == left;
        frame::put_head(out, n, kind::DATA, if last { flag::END_STREAM } else { 0 }, s.id);
        let mut want = n;
        while want > 0 {
            let Some(front) = queue.front_mut() else { break };
            let take = want.min(front.len());
            out.extend_from_slice(&front[..take]);
            if take == front.len() {
                queue.pop_front();
            } else {
                *front = front.slice(take..);
            }
            want -= take;
        }
        s.send_window -= n as i64;
        self.send_window -= n as i64;
        if s.tunnel && s.withheld > 0 && queue.iter().map(Bytes::len).sum::<usize>() < TUNNEL_SEND_CAP {
            // Its output went below the cap: the input held back may come.
            let withheld = std::mem::take(&mut s.withheld);
            s.recv.give_back(withheld, self.limits.stream_window, s.id, out);
        }
        if last {
            s.send = Send::Done;
        }
        Framed::Sent
    }

    /// The server is draining: GOAWAY with the last stream the peer opened, so it opens no more;
    /// the streams already open are answered, then [`Verdict::Close`] with [`Closing::Done`].
    pub fn begin_drain(&mut self, out: &mut Vec<u8>) -> Verdict {
        if !self.draining && self.closing.is_none() && self.phase != Phase::Closed {
            self.draining = true;
            frame::put_goaway(out, self.last_stream, ErrorCode::NoError, b"");
            self.stats.goaways += 1;
        }
        self.verdict()
    }

    /// The earliest time [`Connection::on_timer`] has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        if self.closing.is_some() {
            return None;
        }
        let header = self.unfinished_since.and_then(|t| t.checked_add(self.limits.header_timeout));
        let window = match (self.stalled_since, self.limits.window_timeout) {
            (Some(t), Some(d)) => t.checked_add(d),
            _ => None,
        };
        match (header, window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passed: a header block (or the preface) late past the header timeout, or a window
    /// shut past the window timeout, ends the connection with a GOAWAY.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<u8>) -> Verdict {
        if self.closing.is_some() {
            return self.verdict();
        }
        let due = |since: Option<Instant>, after: Option<Duration>| match (since, after) {
            (Some(t), Some(d)) => t.checked_add(d).is_some_and(|at| now >= at),
            _ => false,
        };
        if due(self.unfinished_since, Some(self.limits.header_timeout)) {
            self.limit_hit(Limit::HeaderTimeout, ErrorCode::NoError, out);
        } else if due(self.stalled_since, self.limits.window_timeout) {
            self.limit_hit(Limit::WindowStall, ErrorCode::FlowControl, out);
        }
        self.verdict()
    }

    /// Since when response data has waited on a flow-control window the peer keeps shut (for
    /// the engine's send timeout when [`Limits::window_timeout`] is `None`).
    pub fn window_stalled_since(&self) -> Option<Instant> {
        self.stalled_since
    }

    /// What the connection wants now.
    pub fn verdict(&self) -> Verdict {
        if let Some(closing) = self.closing {
            return Verdict::Close(closing);
        }
        if (self.draining || self.peer_goaway) && self.streams.is_empty() && self.block.is_none() {
            return Verdict::Close(Closing::Done);
        }
        Verdict::Continue
    }

    /// Response data is queued on a stream whose window (and the connection's) is open, or a
    /// body's END_STREAM is owed: [`Connection::transmit`] would frame something, given room.
    /// An engine asks this after its output drained, so it calls `transmit` only when it helps.
    pub fn wants_transmit(&self) -> bool {
        if self.closing.is_some() {
            return false;
        }
        self.streams.iter().any(|s| match &s.send {
            Send::Body { queue, end, .. } => {
                if queue.is_empty() {
                    *end
                } else {
                    s.send_window > 0 && self.send_window > 0
                }
            }
            _ => false,
        })
    }

    /// No stream is open and no frame or header block is half received: a drain may close it,
    /// an active set may take its place.
    pub fn is_between_requests(&self) -> bool {
        self.streams.is_empty() && self.reader.is_empty() && self.block.is_none() && self.phase == Phase::Open
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The limits the connection was made with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Whether `stream` is a tunnel still open (accepted, and not yet ended or reset either way).
    pub fn is_tunnel(&self, stream: u32) -> bool {
        self.streams.iter().any(|s| s.id == stream && s.tunnel)
    }

    /// Bytes held between calls beyond the fixed state: a partial frame, a header block, the
    /// streams and their requests, the HPACK table (queued response bodies are shared `Bytes`).
    pub fn buffered(&self) -> usize {
        self.reader.buffered()
            + self.block.as_ref().map_or(0, |b| b.bytes.capacity())
            + self.streams.capacity() * std::mem::size_of::<Stream>()
            + self.decoder.table_size()
            + self.events.capacity() * std::mem::size_of::<Event>()
    }

    // ---- frames ----

    fn frame(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>, tunnels: &mut dyn Tunnels) {
        let settings_seen = self.phase != Phase::FirstSettings;
        let checked = rules::check_order(&head, settings_seen, self.block.as_ref().map(|b| b.stream))
            .and_then(|()| rules::check_shape(&head, payload));
        if let Err(violation) = checked {
            return self.refuse(head.stream, violation, now, out);
        }
        if !settings_seen {
            self.phase = Phase::Open;
            self.unfinished_since = None;
        }
        match head.kind {
            kind::DATA => self.on_data(head, payload, now, out, tunnels),
            kind::HEADERS => self.on_headers(head, payload, now, out, tunnels),
            kind::PRIORITY => self.on_priority(head, payload, now, out),
            kind::RST_STREAM => self.on_rst(head, now, out, tunnels),
            kind::SETTINGS => self.on_settings(head, payload, now, out),
            // Only a server pushes (RFC 9113 §8.4).
            kind::PUSH_PROMISE => self.connection_error(Violation::PushFromClient.code()),
            kind::PING => self.on_ping(head, payload, now, out),
            kind::GOAWAY => self.on_goaway(),
            kind::WINDOW_UPDATE => self.on_window_update(head, payload, now, out),
            kind::CONTINUATION => self.on_continuation(head, payload, now, out, tunnels),
            // Unknown types are ignored (§4.1), but they cost a frame's work: counted.
            _ => self.count_empty(now, out),
        }
    }

    fn on_data(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>, tunnels: &mut dyn Tunnels) {
        let data = match rules::unpad(&head, payload) {
            Ok(data) => data,
            Err(violation) => return self.refuse(head.stream, violation, now, out),
        };
        if head.stream > self.last_stream {
            return self.connection_error(Violation::IdleStream.code());
        }
        // The whole frame counts against the connection's window, whatever becomes of it.
        if let Err(violation) = self.recv.take(head.len, 0) {
            return self.refuse(head.stream, violation, now, out);
        }
        self.recv.give_back(head.len, self.limits.connection_window, 0, out);
        let end = head.has(flag::END_STREAM);
        if data.is_empty() && !end {
            self.count_empty(now, out);
        }
        let Some(i) = self.index(head.stream) else {
            if !self.was_reset_by_us(head.stream) {
                self.stream_error(head.stream, ErrorCode::StreamClosed, now, out);
            }
            return;
        };
        let s = &mut self.streams[i];
        if s.remote_done {
            return self.refuse(head.stream, Violation::StreamEnded, now, out);
        }
        if let Err(violation) = s.recv.take(head.len, s.id) {
            return self.refuse(head.stream, violation, now, out);
        }
        s.body_len += data.len() as u64;
        if s.rejected {
            return;
        }
        if s.tunnel {
            return self.tunnel_data(i, head.len, data, end, now, out, tunnels);
        }
        if s.content_length.is_some_and(|cl| s.body_len > cl || (end && s.body_len != cl)) {
            self.malformed(i, Malformed::LengthMismatch, now, out);
            return;
        }
        if s.body_len > self.limits.max_body_bytes {
            self.stats.limit(Limit::BodyTooLarge);
            self.reject(i, 413, out);
            return;
        }
        if end {
            self.end_request(i);
        } else {
            // The body is discarded: give its window back once half is used.
            let s = &mut self.streams[i];
            s.recv.give_back(head.len, self.limits.stream_window, s.id, out);
        }
    }

    fn on_headers(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>, tunnels: &mut dyn Tunnels) {
        if head.stream % 2 == 0 {
            // An even stream is the server's to open (§5.1.1).
            return self.connection_error(Violation::IdleStream.code());
        }
        let (fragment, dependency) = match rules::header_fragment(&head, payload) {
            Ok(parts) => parts,
            Err(violation) => return self.refuse(head.stream, violation, now, out),
        };
        if dependency == Some(head.stream) {
            // Decoded all the same, to keep HPACK in step, then reset.
            self.self_dependent = Some(head.stream);
        }
        if head.stream <= self.last_stream && self.index(head.stream).is_none() && !self.was_reset_by_us(head.stream) {
            // A closed stream (RFC 9113 §5.1), or an id below one already used (§5.1.1).
            let code = if self.was_opened(head.stream) { ErrorCode::StreamClosed } else { ErrorCode::Protocol };
            return self.connection_error(code);
        }
        let block =
            Block { stream: head.stream, end_stream: head.has(flag::END_STREAM), bytes: Vec::new(), continuations: 0 };
        if head.has(flag::END_HEADERS) {
            self.header_block(block, fragment, now, out, tunnels);
        } else {
            if fragment.len() > self.limits.max_header_block {
                return self.limit_hit(Limit::ContinuationFlood, ErrorCode::EnhanceYourCalm, out);
            }
            let mut block = Box::new(block);
            block.bytes.extend_from_slice(fragment);
            self.block = Some(block);
            if self.unfinished_since.is_none() {
                self.unfinished_since = Some(now);
            }
        }
    }

    fn on_continuation(
        &mut self,
        head: Head,
        payload: &[u8],
        now: Instant,
        out: &mut Vec<u8>,
        tunnels: &mut dyn Tunnels,
    ) {
        let Some(mut block) = self.block.take() else {
            return self.connection_error(ErrorCode::Protocol);
        };
        block.continuations += 1;
        if payload.is_empty() && !head.has(flag::END_HEADERS) {
            self.count_empty(now, out);
        }
        if block.continuations > self.limits.max_continuations
            || block.bytes.len() + payload.len() > self.limits.max_header_block
        {
            return self.limit_hit(Limit::ContinuationFlood, ErrorCode::EnhanceYourCalm, out);
        }
        if head.has(flag::END_HEADERS) {
            let mut bytes = std::mem::take(&mut block.bytes);
            bytes.extend_from_slice(payload);
            self.header_block(*block, &bytes, now, out, tunnels);
            self.unfinished_since = None;
        } else {
            block.bytes.extend_from_slice(payload);
            self.block = Some(block);
        }
    }

    /// A whole header block: decode it (always, to keep HPACK in step), then open the stream,
    /// take trailers, or refuse.
    fn header_block(
        &mut self,
        block: Block,
        fragment: &[u8],
        now: Instant,
        out: &mut Vec<u8>,
        tunnels: &mut dyn Tunnels,
    ) {
        let mut fields = HeaderList::with_limit(self.limits.max_header_list_size as usize);
        if self.decoder.decode(fragment, &mut fields).is_err() {
            self.stats.compression_errors += 1;
            return self.connection_error(ErrorCode::Compression);
        }
        let id = block.stream;
        let self_dependent = self.self_dependent.take() == Some(id);
        if let Some(i) = self.index(id) {
            // Trailers, or HEADERS on a stream whose request already ended.
            if self.streams[i].remote_done {
                return self.streams_error_at(i, ErrorCode::StreamClosed, now, out);
            }
            if self.streams[i].tunnel {
                return self.malformed(i, Malformed::HeadersOnTunnel, now, out);
            }
            if !block.end_stream {
                return self.malformed(i, Malformed::TrailersWithoutEnd, now, out);
            }
            if let Err(why) = check_trailers(&fields) {
                return self.malformed(i, why, now, out);
            }
            let s = &self.streams[i];
            if s.content_length.is_some_and(|cl| cl != s.body_len) {
                return self.malformed(i, Malformed::LengthMismatch, now, out);
            }
            if !s.rejected {
                self.end_request(i);
            } else {
                self.streams[i].remote_done = true;
                self.retire(i);
            }
            return;
        }
        if self.was_reset_by_us(id) {
            return;
        }
        // A new stream.
        self.open_id(id);
        if self.draining || self.peer_goaway {
            // Past the GOAWAY's last stream: not processed.
            return;
        }
        self.stats.streams += 1;
        if self_dependent {
            return self.stream_error(id, ErrorCode::Protocol, now, out);
        }
        if self.streams.len() >= self.limits.max_concurrent_streams as usize {
            self.stats.limit(Limit::RefusedStream);
            // Refusals count as resets: a peer that keeps opening past the limit is a flood.
            return self.stream_error(id, ErrorCode::RefusedStream, now, out);
        }
        let head = if fields.overflowed() {
            Ok(Default::default())
        } else {
            check_request(&fields, self.limits.extended_connect)
        };
        let extended_connect = head.is_ok_and(|h| h.extended_connect);
        self.streams.push(Stream {
            id,
            remote_done: false,
            send: Send::Waiting,
            send_window: self.peer.initial_window,
            recv: ReceiveWindow::new(self.limits.stream_window),
            content_length: head.map(|h| h.content_length).unwrap_or_default(),
            body_len: 0,
            fields: None,
            rejected: false,
            tunnel: false,
            withheld: 0,
        });
        let i = self.streams.len() - 1;
        if let Err(why) = head {
            return self.malformed(i, why, now, out);
        }
        if fields.overflowed() {
            self.stats.limit(Limit::HeaderListTooLarge);
            self.streams[i].remote_done = block.end_stream;
            return self.reject(i, 431, out);
        }
        if extended_connect {
            return self.open_tunnel(i, fields, block.end_stream, now, out, tunnels);
        }
        self.streams[i].fields = Some(fields);
        if block.end_stream {
            if self.streams[i].content_length.is_some_and(|cl| cl != 0) {
                return self.malformed(i, Malformed::LengthMismatch, now, out);
            }
            self.end_request(i);
        }
    }

    /// An extended CONNECT on stream `i`: the application opens a tunnel (200, and the stream's
    /// DATA is its) or refuses it.
    fn open_tunnel(
        &mut self,
        i: usize,
        fields: HeaderList,
        end_stream: bool,
        now: Instant,
        out: &mut Vec<u8>,
        tunnels: &mut dyn Tunnels,
    ) {
        self.stats.requests += 1;
        if end_stream {
            // A tunnel the peer closed before it opened: nothing to carry.
            self.streams[i].remote_done = true;
            return self.reject(i, 400, out);
        }
        let request = Request { stream: self.streams[i].id, fields, body_len: 0 };
        match tunnels.open(&request, now) {
            Opening::Accept(fields) => {
                let fields: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
                self.write_headers(request.stream, 200, &fields, false, out);
                let s = &mut self.streams[i];
                s.send = Send::Body { queue: VecDeque::new(), end: false, given: 0 };
                s.tunnel = true;
            }
            Opening::Refuse(status, fields) => {
                let fields: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
                self.reject_with(i, status, &fields, out);
            }
        }
    }

    /// DATA on the tunnel at `i` (its windows taken): to the application, its answer queued, and
    /// the input's window given back unless the output is over the cap.
    #[allow(clippy::too_many_arguments)]
    fn tunnel_data(
        &mut self,
        i: usize,
        len: u32,
        data: &[u8],
        end: bool,
        now: Instant,
        out: &mut Vec<u8>,
        tunnels: &mut dyn Tunnels,
    ) {
        let mut answer = Vec::new();
        let flow = tunnels.data(self.streams[i].id, data, end, now, &mut answer);
        let s = &mut self.streams[i];
        s.remote_done |= end;
        let queued = match &mut s.send {
            Send::Body { queue, end: ended, .. } => {
                if !*ended {
                    if !answer.is_empty() {
                        queue.push_back(Bytes::from(answer));
                    }
                    *ended = flow == Flow::Finish;
                }
                queue.iter().map(Bytes::len).sum::<usize>()
            }
            _ => 0,
        };
        if end {
            self.retire(i);
            return;
        }
        if queued < TUNNEL_SEND_CAP {
            let owed = len.saturating_add(std::mem::take(&mut s.withheld));
            s.recv.give_back(owed, self.limits.stream_window, s.id, out);
        } else {
            s.withheld = s.withheld.saturating_add(len);
        }
    }

    /// The request on stream `i` is complete: hand it to the application.
    fn end_request(&mut self, i: usize) {
        let s = &mut self.streams[i];
        s.remote_done = true;
        if let Some(fields) = s.fields.take() {
            self.stats.requests += 1;
            self.events.push_back(Event::Request(Request { stream: s.id, fields, body_len: s.body_len }));
        }
    }

    fn on_priority(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>) {
        if let Err(violation) = rules::check_priority(&head, payload) {
            return self.refuse(head.stream, violation, now, out);
        }
        // Priorities are not acted on (RFC 9113 deprecates them), but each costs a frame.
        self.count_empty(now, out);
    }

    /// RST_STREAM (its shape checked by `rules::check_shape`).
    fn on_rst(&mut self, head: Head, now: Instant, out: &mut Vec<u8>, tunnels: &mut dyn Tunnels) {
        if head.stream > self.last_stream {
            return self.connection_error(Violation::IdleStream.code());
        }
        self.stats.resets_received += 1;
        if let Some(i) = self.index(head.stream) {
            if self.streams.swap_remove(i).tunnel {
                tunnels.reset(head.stream);
            }
            self.shrink();
            if self.resets.over(now, self.limits.resets) {
                self.limit_hit(Limit::RapidReset, ErrorCode::EnhanceYourCalm, out);
            }
        }
    }

    fn on_settings(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>) {
        let values = match Settings::parse(&head, payload) {
            Ok(Settings::Values(values)) => values,
            Ok(Settings::Ack) => {
                match self.settings_unacked.checked_sub(1) {
                    Some(left) => self.settings_unacked = left,
                    None => self.count_empty(now, out),
                }
                return;
            }
            Err(violation) => return self.refuse(head.stream, violation, now, out),
        };
        if self.settings.over(now, self.limits.settings) {
            return self.limit_hit(Limit::SettingsFlood, ErrorCode::EnhanceYourCalm, out);
        }
        match self.peer.apply(values, self.streams.iter_mut().map(|s| &mut s.send_window)) {
            Ok(applied) => self.table_size_changed |= applied.header_table_seen,
            Err(violation) => return self.refuse(head.stream, violation, now, out),
        }
        frame::put_settings_ack(out);
    }

    /// PING (its shape checked by `rules::check_shape`).
    fn on_ping(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>) {
        let Ok(data) = <&[u8; 8]>::try_from(payload) else {
            return self.connection_error(Violation::PingLength.code());
        };
        if head.has(flag::ACK) {
            // This server sends no PING: an acknowledgement answers nothing.
            return self.count_empty(now, out);
        }
        if self.pings.over(now, self.limits.pings) {
            return self.limit_hit(Limit::PingFlood, ErrorCode::EnhanceYourCalm, out);
        }
        frame::put_ping_ack(out, data);
    }

    /// GOAWAY (its shape checked by `rules::check_shape`).
    fn on_goaway(&mut self) {
        self.peer_goaway = true;
    }

    fn on_window_update(&mut self, head: Head, payload: &[u8], now: Instant, out: &mut Vec<u8>) {
        if head.stream > self.last_stream {
            return self.connection_error(Violation::IdleStream.code());
        }
        let opened = rules::window_increment(&head, payload).and_then(|increment| {
            if head.stream == 0 {
                return rules::open_send_window(&mut self.send_window, increment, false);
            }
            match self.streams.iter_mut().find(|s| s.id == head.stream) {
                Some(s) => rules::open_send_window(&mut s.send_window, increment, true),
                // A stream that ended: its window no longer matters.
                None => Ok(()),
            }
        });
        if let Err(violation) = opened {
            self.refuse(head.stream, violation, now, out);
        }
    }

    // ---- answers and errors ----

    fn write_headers(&mut self, stream: u32, status: u16, fields: &[(&[u8], &[u8])], end: bool, out: &mut Vec<u8>) {
        let mut block = Vec::with_capacity(64);
        hpack::encode_response(&mut block, status, fields, std::mem::take(&mut self.table_size_changed));
        frame::put_header_block(out, stream, &block, end, self.peer.max_frame_size as usize);
    }

    /// Answer stream `i` with a status of the stage's own (431, 413), then stop its request.
    fn reject(&mut self, i: usize, status: u16, out: &mut Vec<u8>) {
        self.reject_with(i, status, &[], out)
    }

    /// [`Connection::reject`] with `fields` besides content-length.
    fn reject_with(&mut self, i: usize, status: u16, fields: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
        let id = self.streams[i].id;
        let mut all: Vec<(&[u8], &[u8])> = Vec::with_capacity(fields.len() + 1);
        all.extend_from_slice(fields);
        all.push((b"content-length", b"0"));
        self.write_headers(id, status, &all, true, out);
        let s = &mut self.streams[i];
        s.send = Send::Done;
        s.rejected = true;
        s.fields = None;
        if !s.remote_done {
            // The rest of the request is not wanted (RFC 9113 §8.1).
            frame::put_rst(out, id, ErrorCode::NoError);
            self.stats.resets_sent += 1;
            self.remember_reset(id);
            self.streams.swap_remove(i);
            self.shrink();
            return;
        }
        self.retire(i);
    }

    fn malformed(&mut self, i: usize, _why: Malformed, now: Instant, out: &mut Vec<u8>) {
        self.stats.malformed += 1;
        self.streams_error_at(i, ErrorCode::Protocol, now, out);
    }

    /// A rule broken on `stream`: a stream error resets it (unless this server reset it already:
    /// the frame was on its way before the peer saw the reset), a connection error closes.
    fn refuse(&mut self, stream: u32, violation: Violation, now: Instant, out: &mut Vec<u8>) {
        if !violation.is_stream_error() {
            return self.connection_error(violation.code());
        }
        match self.index(stream) {
            Some(i) => self.streams_error_at(i, violation.code(), now, out),
            None if !self.was_reset_by_us(stream) => self.stream_error(stream, violation.code(), now, out),
            None => {}
        }
    }

    /// A stream error on the open stream at `i`: RST_STREAM, and the stream is gone.
    fn streams_error_at(&mut self, i: usize, code: ErrorCode, now: Instant, out: &mut Vec<u8>) {
        let id = self.streams[i].id;
        self.streams.swap_remove(i);
        self.shrink();
        self.stream_error(id, code, now, out);
    }

    /// RST_STREAM for `stream`, counted against the reset budget (a peer that makes the server
    /// reset streams floods as surely as one that resets them itself).
    fn stream_error(&mut self, stream: u32, code: ErrorCode, now: Instant, out: &mut Vec<u8>) {
        frame::put_rst(out, stream, code);
        self.stats.resets_sent += 1;
        self.remember_reset(stream);
        if self.resets.over(now, self.limits.resets) {
            self.limit_hit(Limit::RapidReset, ErrorCode::EnhanceYourCalm, out);
        }
    }

    fn count_empty(&mut self, now: Instant, out: &mut Vec<u8>) {
        if self.empty.over(now, self.limits.empty_frames) {
            self.limit_hit(Limit::EmptyFrames, ErrorCode::EnhanceYourCalm, out);
        }
    }

    /// A limit was hit: GOAWAY with `code` (written at once), and close.
    fn limit_hit(&mut self, limit: Limit, code: ErrorCode, out: &mut Vec<u8>) {
        if self.closing.is_some() {
            return;
        }
        self.stats.limit(limit);
        frame::put_goaway(out, self.last_stream, code, b"");
        self.stats.goaways += 1;
        self.close(Closing::Limit(limit));
    }

    /// A connection error: close, the GOAWAY written at the end of the call (the frame handlers
    /// that find errors do not all have the output at hand).
    fn connection_error(&mut self, code: ErrorCode) {
        if self.closing.is_some() {
            return;
        }
        self.stats.protocol_errors += 1;
        self.pending_goaway = Some(code);
        self.close(Closing::Protocol(code));
    }

    fn close(&mut self, closing: Closing) {
        self.closing = Some(closing);
        self.phase = Phase::Closed;
        self.reader.clear();
        self.block = None;
        self.streams = Vec::new();
        self.events.clear();
        self.unfinished_since = None;
        self.stalled_since = None;
    }

    fn open_id(&mut self, id: u32) {
        let shift = (id - self.last_stream) / 2;
        self.opened = if shift >= 64 { 0 } else { self.opened << shift } | 1;
        self.last_stream = id;
    }

    fn was_opened(&self, id: u32) -> bool {
        let k = (self.last_stream - id) / 2;
        k >= 64 || (self.opened >> k) & 1 == 1
    }

    fn remember_reset(&mut self, stream: u32) {
        self.reset_by_us.remember(stream);
    }

    fn was_reset_by_us(&self, stream: u32) -> bool {
        self.reset_by_us.contains(stream)
    }

    fn index(&self, stream: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == stream)
    }

    /// Remove stream `i` if both sides are done; true if it was removed.
    fn retire(&mut self, i: usize) -> bool {
        let s = &self.streams[i];
        if s.remote_done && matches!(s.send, Send::Done) {
            self.streams.swap_remove(i);
            self.shrink();
            return true;
        }
        false
    }

    fn shrink(&mut self) {
        if self.streams.is_empty() && self.streams.capacity() > 0 {
            self.streams = Vec::new();
        }
    }
}

enum Framed {
    Sent,
    Blocked,
    Nothing,
}

/// The size of a stream's state, for the test that watches it.
#[cfg(test)]
pub(crate) const STREAM_SIZE: usize = std::mem::size_of::<Stream>();
