//! WebSocket over HTTP/2 (RFC 8441, `load ws --http2`), without the socket: an HTTP/2 client
//! connection whose streams are tunnels, each carrying one WebSocket stage ([`WsClient`]).
//!
//! ```text
//! WsH2Client::new(..)      preface and SETTINGS wait in `out`
//! receive(..)              the server's SETTINGS: without ENABLE_CONNECT_PROTOCOL the run cannot
//!                          go on (WsEnd::NoConnectProtocol); with it, one extended CONNECT a
//!                          WebSocket; each 200 opens its WebSocket; DATA feeds it
//! begin(..)                a message on the WebSocket with the fewest in flight
//! take_unsent()            the end: what the WebSockets still say (a close), then END_STREAM
//! ```
//!
//! What a WebSocket writes goes out as DATA on its stream as the HTTP/2 windows allow (the
//! client connection holds the rest); what arrives is handed to it as it comes, and the window
//! given back. One WebSocket's failure ends the connection (its WebSockets with it); the
//! connection ends in order once every WebSocket's close handshake is done.

use std::borrow::Cow;
use std::time::Duration;

use sockscale_h2::{ClientConnection, ClientError, ClientEvent, ClientSettings, ClientSink, HeaderList};

use crate::client::Stamp;
use crate::events::{Event, Now};
use crate::pattern::Pattern;
use crate::ws::{WsClient, WsEnd, WsProfile};

/// How a WebSocket over HTTP/2 connection ends, when it does not go on.
#[derive(Debug)]
pub enum WsH2End {
    /// A WebSocket's end (the first, when several end in one read).
    Ws(WsEnd),
    /// An HTTP/2 connection error: this client's GOAWAY waits in the output.
    H2(ClientError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Its CONNECT is not sent yet (the server's SETTINGS are awaited), or not answered.
    Connecting,
    Open,
    /// Its close handshake is done: END_STREAM goes (or went) after its last bytes.
    Closed,
}

#[derive(Debug)]
struct Slot {
    ws: WsClient,
    /// Its stream (0 until the CONNECT is sent).
    stream: u32,
    state: State,
    /// END_STREAM given to the connection.
    ended: bool,
}

/// One connection's WebSockets over HTTP/2.
#[derive(Debug)]
pub struct WsH2Client {
    h2: ClientConnection,
    out: Vec<u8>,
    written: usize,
    slots: Vec<Slot>,
    /// The CONNECTs were sent.
    opened: bool,
}

impl WsH2Client {
    /// Connection number `index`: its preface and SETTINGS wait to be written.
    pub fn new(profile: &WsProfile, index: u64) -> Self {
        let mut out = Vec::new();
        // Windows as `load http --http2` has them: the server is never held up by this client.
        let h2 = ClientConnection::new(ClientSettings::default(), &mut out);
        let streams = profile.h2.as_ref().map_or(1, |h| h.streams) as u64;
        let slots = (0..streams)
            .map(|k| Slot {
                ws: WsClient::tunneled(profile, index * streams + k),
                stream: 0,
                state: State::Connecting,
                ended: false,
            })
            .collect();
        WsH2Client { h2, out, written: 0, slots, opened: false }
    }

    /// The connect completed at `ns`: the CONNECTs' answers are awaited from now.
    pub fn connected(&mut self, ns: u64) {
        for slot in &mut self.slots {
            slot.ws.connected(ns);
        }
    }

    /// Every WebSocket is open (or was): the connection is set up.
    pub fn upgraded(&self) -> bool {
        self.slots.iter().all(|s| s.state != State::Connecting)
    }

    /// Some WebSocket opened: the server served this connection.
    pub fn any_upgraded(&self) -> bool {
        self.slots.iter().any(|s| s.state != State::Connecting)
    }

    /// The server's SETTINGS came.
    pub fn greeted(&self) -> bool {
        self.h2.greeted()
    }

    pub fn outstanding(&self) -> usize {
        self.slots.iter().map(|s| s.ws.outstanding()).sum()
    }

    pub fn oldest(&self) -> Option<Stamp> {
        self.slots.iter().filter_map(|s| s.ws.oldest()).min_by_key(|stamp| stamp.sent_ns)
    }

    /// A message may begin on some WebSocket with fewer than `depth` in flight.
    pub fn may_begin(&self, depth: usize) -> bool {
        self.slots.iter().any(|s| s.ws.may_send() && s.ws.outstanding() < depth)
    }

    /// Begin a message on the WebSocket with the fewest in flight.
    pub fn begin(&mut self, profile: &WsProfile, pattern: &Pattern, stamp: Stamp, scratch: &mut Vec<u8>) {
        let slot = self.slots.iter_mut().filter(|s| s.ws.may_send()).min_by_key(|s| s.ws.outstanding());
        if let Some(slot) = slot {
            slot.ws.begin(profile, pattern, stamp, scratch);
        }
        self.pump();
    }

    /// The WebSockets' counters, each once opened.
    pub fn stats(&self) -> impl Iterator<Item = &sockscale_ws::Stats> {
        self.slots.iter().filter_map(|s| s.ws.stats())
    }

    /// A close sent at the end of the run awaits its answer.
    pub fn awaiting_close(&self) -> bool {
        self.slots.iter().any(|s| s.state == State::Open && s.ws.awaiting_close())
    }

    /// Some WebSocket is open and not closing: the end of a run has a close to make.
    pub fn open_unclosed(&self) -> bool {
        self.slots.iter().any(|s| s.state == State::Open && !s.ws.awaiting_close())
    }

    pub fn to_send(&self) -> &[u8] {
        &self.out[self.written..]
    }

    /// `n` bytes were written; an emptied buffer is reused, or given back when it grew large.
    pub fn sent(&mut self, n: usize) {
        self.written += n;
        if self.written >= self.out.len() {
            self.written = 0;
            if self.out.capacity() > 64 << 10 {
                self.out = Vec::new();
            } else {
                self.out.clear();
            }
        }
    }

    /// The end: what the WebSockets still have to say (a close, the answer to the server's)
    /// and END_STREAM on each open stream, taken.
    pub fn take_unsent(&mut self) -> Vec<u8> {
        self.pump();
        for slot in self.slots.iter_mut().filter(|s| s.stream != 0 && !s.ended) {
            self.h2.tunnel_end(slot.stream, &mut self.out);
            slot.ended = true;
        }
        let mut out = std::mem::take(&mut self.out);
        out.drain(..self.written.min(out.len()));
        self.written = 0;
        out
    }

    /// Bytes received `now`.
    pub fn receive(
        &mut self,
        profile: &WsProfile,
        pattern: &Pattern,
        now: Now,
        data: &[u8],
        on: &mut impl FnMut(Event),
    ) -> Result<(), WsH2End> {
        let greeted = self.h2.greeted();
        let mut sink = Sink { slots: &mut self.slots, profile, pattern, now, on: &mut *on, end: None };
        let received = self.h2.receive_into(data, &mut self.out, &mut sink);
        let end = sink.end.take();
        if !greeted && self.h2.greeted() {
            on(Event::Greeted { max_streams: self.h2.peer_max_streams() });
        }
        received.map_err(WsH2End::H2)?;
        if self.h2.greeted() && !self.opened {
            self.open(profile, on)?;
        }
        self.pump();
        if let Some(end) = end {
            return Err(WsH2End::Ws(end));
        }
        if self.slots.iter().all(|s| s.state == State::Closed) {
            return Err(WsH2End::Ws(WsEnd::Closed));
        }
        Ok(())
    }

    /// The server's SETTINGS came: one extended CONNECT a WebSocket, if it allows them.
    fn open(&mut self, profile: &WsProfile, on: &mut impl FnMut(Event)) -> Result<(), WsH2End> {
        if !self.h2.connect_protocol() {
            return Err(WsH2End::Ws(WsEnd::NoConnectProtocol));
        }
        self.opened = true;
        let Some(h2) = &profile.h2 else { return Ok(()) };
        for (tag, slot) in self.slots.iter_mut().enumerate() {
            let Some(stream) = self.h2.open_tunnel(&h2.block, tag as u64, &mut self.out) else {
                let limit = self.h2.peer_max_streams().map_or_else(String::new, |n| format!(" (it allows {n})"));
                let why = format!("the server's stream limit leaves no stream for WebSocket {}{limit}", tag + 1);
                return Err(WsH2End::Ws(WsEnd::BadHandshake(why)));
            };
            slot.stream = stream;
            on(Event::StreamOpened);
        }
        Ok(())
    }

    /// What the WebSockets wrote goes onto their streams; a closed one's END_STREAM after it.
    fn pump(&mut self) {
        for slot in self.slots.iter_mut().filter(|s| s.stream != 0 && !s.ended) {
            let bytes = slot.ws.to_send();
            if !bytes.is_empty() {
                let n = bytes.len();
                self.h2.tunnel_send(slot.stream, bytes, &mut self.out);
                slot.ws.sent(n);
            }
            if slot.state == State::Closed {
                self.h2.tunnel_end(slot.stream, &mut self.out);
                slot.ended = true;
            }
        }
    }

    /// The next deadline of any WebSocket still going (its CONNECT's answer, its next ping).
    pub fn deadline(&self, reply: Duration) -> Option<u64> {
        self.slots.iter().filter(|s| s.state != State::Closed).filter_map(|s| s.ws.deadline(reply)).min()
    }

    /// A deadline may have passed at `now`.
    pub fn on_timeout(&mut self, profile: &WsProfile, reply: Duration, now: Now) -> Result<(), WsEnd> {
        let mut outcome = Ok(());
        for slot in self.slots.iter_mut().filter(|s| s.state != State::Closed) {
            outcome = slot.ws.on_timeout(profile, reply, now);
            if outcome.is_err() {
                break;
            }
        }
        self.pump();
        outcome
    }

    /// The run ended: every open WebSocket sends close 1000. False if none had one to send.
    pub fn initiate_close(&mut self) -> bool {
        let mut any = false;
        for slot in self.slots.iter_mut().filter(|s| s.state == State::Open) {
            any |= slot.ws.initiate_close();
        }
        self.pump();
        any
    }
}

/// What the HTTP/2 connection received, handed to the WebSockets as it comes.
struct Sink<'a, F: FnMut(Event)> {
    slots: &'a mut [Slot],
    profile: &'a WsProfile,
    pattern: &'a Pattern,
    now: Now,
    on: &'a mut F,
    /// The first WebSocket that ended otherwise than by its close handshake.
    end: Option<WsEnd>,
}

impl<F: FnMut(Event)> Sink<'_, F> {
    fn end(&mut self, end: WsEnd) {
        self.end.get_or_insert(end);
    }
}

impl<F: FnMut(Event)> ClientSink for Sink<'_, F> {
    fn event(&mut self, event: ClientEvent) {
        let name = |code: u32| -> Cow<'static, str> { sockscale_h2::error_code_name(code) };
        match event {
            ClientEvent::Response { status, .. } => self.end(WsEnd::Refused { status }),
            ClientEvent::Reset { code, .. } => {
                (self.on)(Event::StreamReset { code: name(code) });
                self.end(WsEnd::StreamReset { code: name(code) });
            }
            ClientEvent::Refused { .. } => {
                (self.on)(Event::StreamRefused);
                self.end(WsEnd::StreamRefused);
            }
            ClientEvent::Malformed { .. } => {
                (self.on)(Event::StreamMalformed);
                self.end(WsEnd::BadHandshake("the answer on its stream broke HTTP/2 (this client reset it)".into()));
            }
            ClientEvent::GoAway { code, .. } => (self.on)(Event::GoAway { code: name(code) }),
            ClientEvent::TunnelEnd { tag } => {
                if self.slots.get(tag as usize).is_some_and(|s| s.state != State::Closed) {
                    self.end(WsEnd::StreamEnded);
                }
            }
        }
    }

    fn tunnel_open(&mut self, tag: u64, head: &HeaderList) {
        let Some(slot) = self.slots.get_mut(tag as usize) else { return };
        let opened = slot.ws.tunnel_open(self.profile, self.now, head.get(b"sec-websocket-extensions"), self.on);
        match opened {
            Ok(()) => slot.state = State::Open,
            Err(end) => self.end(end),
        }
    }

    fn tunnel_data(&mut self, tag: u64, data: &[u8]) {
        let Some(slot) = self.slots.get_mut(tag as usize) else { return };
        if slot.state != State::Open {
            return;
        }
        match slot.ws.receive(self.profile, self.pattern, self.now, data, self.on) {
            Ok(()) => {}
            Err(WsEnd::Closed) => slot.state = State::Closed,
            Err(end) => self.end(end),
        }
    }
}

#[cfg(test)]
#[path = "connection_ws_h2_tests.rs"]
mod tests;
