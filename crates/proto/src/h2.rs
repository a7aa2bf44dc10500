//! HTTP/2 on the HTTP service's port: the session an HTTP connection becomes when its first
//! bytes are the HTTP/2 preface (h2c with prior knowledge, or h2 over TLS after ALPN, where
//! the client sends the same preface). It drives `sockscale-h2`'s I/O-free connection and
//! answers every request with the server's one response (the fields HTTP/1.1 sends: status
//! 200, content-type, content-length, server, date), as shared `Bytes` output.
//!
//! HTTP/2 has more to send after a call returns: response DATA waits on flow-control windows
//! and on the output cap, so the lifecycle asks [`H2Session::wants_transmit`] when the socket
//! has taken output and calls [`H2Session::transmit`] then (see `Responder::transmit`).
//!
//! A body in a file (`--body FILE`, [`ResponseBody::File`], of any size) is a
//! [`Body::Chunks`] body: read [`FILE_CHUNK`] at a time at the stream's offset through the
//! server's [`FileChunks`] (its open file, `pread`), only while a stream's window is open and
//! the output is under its cap, and framed at once. So a stream holds at most what one chunk
//! left unframed, a slow reader's stream holds nothing while its window is shut, and an idle
//! connection holds no buffer. A file that can no longer fill a stream's body (it shrank)
//! resets that stream with INTERNAL_ERROR; the connection goes on.
//!
//! With WebSocket on, the stage announces extended CONNECT (RFC 8441) and a stream may carry a
//! WebSocket (`h2_ws`): its sessions live here, keyed by stream id (none: an empty `Vec`).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sockscale_h2::{Body, Connection, ErrorCode, Event, Limit, Limits, Stats};

pub use crate::h2_totals::{default_limits, H2Totals};
use crate::h2_ws::{WsStream, WsTunnels};
use crate::http::{FileChunks, HttpConfig, ResponseBody, Responses, PREFACE};
use crate::{Closing, Output, Verdict};

/// Bytes of a body file read for a stream at a time, at most (less if its window or the
/// connection's is smaller): the default window of a peer (65,535) fits in one read, and what
/// the output cap leaves unframed of it is all a stream holds.
pub const FILE_CHUNK: usize = 64 << 10;

/// One HTTP/2 connection (boxed in [`crate::Session::H2`]: an HTTP/1.1 connection pays nothing).
#[derive(Debug)]
pub struct H2Session {
    conn: Connection,
    /// The drain asked for a GOAWAY, written by the next call that has output at hand.
    drain_owed: bool,
    /// The drain was asked for (once is enough).
    drain_asked: bool,
    totals: Arc<H2Totals>,
    /// The streams that carry a WebSocket (RFC 8441).
    ws: Vec<WsStream>,
}

impl Drop for H2Session {
    fn drop(&mut self) {
        self.totals.add(self.conn.stats());
    }
}

/// Output in a fresh buffer, handed over as shared bytes.
fn flush(buf: Vec<u8>, out: &mut Output) {
    if !buf.is_empty() {
        out.push_shared(Bytes::from(buf));
    }
}

impl H2Session {
    /// A connection that began with the preface, at `now`: the server's SETTINGS are written,
    /// then `replay` octets of the preface already taken and `input` are fed.
    pub fn start(
        limits: Arc<Limits>,
        replay: usize,
        input: &[u8],
        now: Instant,
        responses: &mut Responses,
        out: &mut Output,
    ) -> (Self, Verdict) {
        let totals = responses.config().h2_totals.clone();
        let mut buf = Vec::with_capacity(256);
        let conn = Connection::new(limits, now, &mut buf);
        let mut session = H2Session { conn, drain_owed: false, drain_asked: false, totals, ws: Vec::new() };
        if replay > 0 {
            session.conn.receive(&PREFACE[..replay], now, &mut buf);
        }
        let verdict = session.feed(input, now, responses, buf, out);
        (session, verdict)
    }

    pub fn on_input(&mut self, input: &[u8], now: Instant, responses: &mut Responses, out: &mut Output) -> Verdict {
        self.feed(input, now, responses, Vec::new(), out)
    }

    fn feed(
        &mut self,
        input: &[u8],
        now: Instant,
        responses: &mut Responses,
        mut buf: Vec<u8>,
        out: &mut Output,
    ) -> Verdict {
        let (cfg, stats) = responses.config_and_ws_stats();
        let mut tunnels =
            WsTunnels { streams: &mut self.ws, config: cfg.websocket.as_ref(), stats, draining: self.drain_asked };
        let received = self.conn.receive_with(input, now, &mut buf, &mut tunnels);
        self.answer(responses, &mut buf);
        let verdict = self.after(received, now, 0, responses, &mut buf, out);
        flush(buf, out);
        verdict
    }

    /// Answer every complete request with the server's response; on a WebSocket-only port
    /// (`--proto ws`), with 405 and `allow: CONNECT`: HTTP/1.1's answer there, 426, must name
    /// the protocol in an `Upgrade` field, which HTTP/2 forbids (RFC 9113 §8.2.2), and the one
    /// method the port takes is the extended CONNECT.
    fn answer(&mut self, responses: &Responses, buf: &mut Vec<u8>) {
        let cfg = responses.config();
        while let Some(Event::Request(request)) = self.conn.poll_event() {
            if let (true, Some(ws)) = (cfg.websocket_only, &cfg.websocket) {
                ws.totals.refused(405);
                let fields: [(&[u8], &[u8]); 4] = [
                    (b"server", cfg.server.as_bytes()),
                    (b"date", responses.date().as_bytes()),
                    (b"allow", b"CONNECT"),
                    (b"content-length", b"0"),
                ];
                self.conn.respond(request.stream, 405, &fields, Body::Empty, buf);
                continue;
            }
            // `alt-svc` last, present with `--http3` only: the array is fixed, the slice taken.
            let alt_svc = cfg.alt_svc.as_deref().unwrap_or_default().as_bytes();
            let fields: [(&[u8], &[u8]); 5] = [
                (b"server", cfg.server.as_bytes()),
                (b"date", responses.date().as_bytes()),
                (b"content-type", cfg.content_type.as_bytes()),
                (b"content-length", responses.content_length().as_bytes()),
                (b"alt-svc", alt_svc),
            ];
            let fields = if cfg.alt_svc.is_some() { &fields[..] } else { &fields[..4] };
            let body = if request.is_head() || cfg.body.is_empty() {
                Body::Empty
            } else {
                match (&cfg.body, &cfg.file_chunks) {
                    (ResponseBody::Bytes(bytes), _) => Body::Bytes(bytes.clone()),
                    // Read a chunk at a time as the windows open (see `pump`).
                    (ResponseBody::File { .. }, Some(_)) => Body::Chunks,
                    // No file to read (a library user's config): the head only.
                    (ResponseBody::File { .. }, None) => Body::Empty,
                }
            };
            self.conn.respond(request.stream, 200, fields, body, buf);
        }
    }

    /// After input or a timer: frame DATA (and the drain's GOAWAY if owed); the first closing
    /// verdict wins.
    fn after(
        &mut self,
        first: sockscale_h2::Verdict,
        now: Instant,
        queued: usize,
        responses: &mut Responses,
        buf: &mut Vec<u8>,
        out: &mut Output,
    ) -> Verdict {
        if self.drain_owed {
            self.drain_owed = false;
            self.conn.begin_drain(buf);
            // Each WebSocket is closed with 1001, as an upgraded HTTP/1.1 connection is.
            for stream in &mut self.ws {
                stream.ws.finish_current();
            }
        }
        let (cfg, stats) = responses.config_and_ws_stats();
        self.ws_transmit(now, stats);
        let then = self.pump(now, queued, cfg, buf, out);
        self.forget_ended_ws();
        match first {
            sockscale_h2::Verdict::Close(why) => self.closing(why),
            sockscale_h2::Verdict::Continue => match then {
                sockscale_h2::Verdict::Continue => Verdict::Continue,
                sockscale_h2::Verdict::Close(why) => self.closing(why),
            },
        }
    }

    /// What the WebSockets owe without input (a ping, the drain's close), queued on their
    /// streams; a session that ended ends its stream.
    fn ws_transmit(&mut self, now: Instant, stats: &mut sockscale_ws::Stats) {
        for stream in &mut self.ws {
            if !stream.ws.wants_transmit() {
                continue;
            }
            let mut owed = Vec::new();
            let end = stream.ws.transmit_into(now, stats, &mut owed) != Verdict::Continue;
            if !owed.is_empty() || end {
                self.conn.send_data(stream.id, Bytes::from(owed), end);
            }
        }
    }

    /// Drop the sessions whose streams are gone (ended both ways, reset, or the connection's
    /// end); an empty list gives its memory back.
    fn forget_ended_ws(&mut self) {
        if self.ws.is_empty() {
            return;
        }
        let conn = &self.conn;
        self.ws.retain(|stream| conn.is_tunnel(stream.id));
        if self.ws.is_empty() {
            self.ws = Vec::new();
        }
    }

    /// Frame DATA as the windows and the output cap allow, reading a body file's chunks for the
    /// streams that want more while there is room for them: one chunk of one stream at a time,
    /// framed at once, so nothing is read that cannot go out now. `queued`: bytes the engine
    /// holds unsent already. Framed chunks go to `out` a piece of about a chunk at a time, so
    /// no buffer grows to the whole cap (a `Vec` doubling to twice what it holds).
    fn pump(
        &mut self,
        now: Instant,
        queued: usize,
        cfg: &HttpConfig,
        buf: &mut Vec<u8>,
        out: &mut Output,
    ) -> sockscale_h2::Verdict {
        let cap = self.conn.limits().output_cap;
        // Bytes framed by this call, in `out` already and in `buf` from `first` on.
        let mut moved = 0;
        let mut first = buf.len();
        loop {
            let verdict = self.conn.transmit(now, queued + moved + (buf.len() - first), buf);
            // Read only with room for a frame of it: then the transmit before emptied every
            // queue it could, and the chunk is framed at least in part at once.
            let room = cap.saturating_sub(queued + moved + (buf.len() - first));
            if verdict != sockscale_h2::Verdict::Continue || room <= sockscale_h2::frame::HEADER_LEN {
                return verdict;
            }
            let (Some(file), ResponseBody::File { len }) = (&cfg.file_chunks, &cfg.body) else { return verdict };
            let Some((stream, window)) = self.conn.wants_data() else { return verdict };
            if buf.len() >= FILE_CHUNK {
                moved += buf.len() - first;
                flush(std::mem::replace(buf, Vec::with_capacity(FILE_CHUNK + 256)), out);
                first = 0;
            }
            self.read_chunk(file.as_ref(), *len, stream, window, buf);
        }
    }

    /// Give `stream` its body file's next chunk (at most `window` bytes), read where the stream
    /// has got to; a file that cannot give it resets the stream (INTERNAL_ERROR).
    fn read_chunk(&mut self, file: &dyn FileChunks, len: u64, stream: u32, window: usize, buf: &mut Vec<u8>) {
        let at = self.conn.chunks_given(stream).unwrap_or(len);
        let left = usize::try_from(len.saturating_sub(at)).unwrap_or(usize::MAX);
        let want = left.min(window).min(FILE_CHUNK);
        if want == 0 {
            // Never asked for past the end (its last chunk ended it), but if so: the end.
            self.conn.send_data(stream, Bytes::new(), true);
            return;
        }
        match file.read_chunk(at, want) {
            Ok(mut chunk) if !chunk.is_empty() => {
                chunk.truncate(want);
                let last = chunk.len() == left;
                self.conn.send_data(stream, chunk, last);
            }
            // Short of its length (the file shrank), or unreadable: the body cannot be finished.
            _ => self.conn.reset_stream(stream, ErrorCode::Internal, buf),
        }
    }

    /// The stage's closing verdict, as the server acts on it. A peer's own GOAWAY with nothing
    /// left to answer is left to the peer to close (its EOF, or the idle timeout): closing at
    /// once would reset a connection whose peer sent more behind it (h2spec's PING after its
    /// GOAWAY), and the peer's last frames would not be answered.
    fn closing(&self, why: sockscale_h2::Closing) -> Verdict {
        if why == sockscale_h2::Closing::Done && !self.drain_asked {
            return Verdict::Continue;
        }
        Verdict::Close(closing(why))
    }

    /// Something to send now that the socket took output: DATA the windows allow, a body
    /// file's next chunk a window has room for, or the drain's GOAWAY.
    pub fn wants_transmit(&self) -> bool {
        self.drain_owed
            || self.conn.wants_transmit()
            || self.conn.wants_data().is_some()
            || self.ws.iter().any(|s| s.ws.wants_transmit())
    }

    /// Frame what the windows and the cap allow, `queued` bytes being unsent already.
    pub fn transmit(&mut self, now: Instant, queued: usize, responses: &mut Responses, out: &mut Output) -> Verdict {
        let mut buf = Vec::new();
        let verdict = self.after(sockscale_h2::Verdict::Continue, now, queued, responses, &mut buf, out);
        flush(buf, out);
        verdict
    }

    /// The stage's deadline, or a WebSocket's ping timer, whichever is first.
    pub fn deadline(&self) -> Option<Instant> {
        let ws = self.ws.iter().filter_map(|s| s.ws.deadline()).min();
        match (self.conn.deadline(), ws) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A deadline passed: the header timeout or a window kept shut, answered with a GOAWAY;
    /// a WebSocket's ping timer marks its ping owed (sent by the next transmit).
    pub fn on_timeout(&mut self, now: Instant, out: &mut Output) -> Verdict {
        for stream in &mut self.ws {
            stream.ws.on_timeout(now);
        }
        let mut buf = Vec::new();
        let verdict = verdict(self.conn.on_timer(now, &mut buf));
        flush(buf, out);
        verdict
    }

    /// No stream open and nothing half received, and no GOAWAY owed.
    pub fn is_between_requests(&self) -> bool {
        !self.drain_owed && self.conn.is_between_requests()
    }

    /// The drain: GOAWAY with the last stream id at the next call, then the open streams are
    /// answered and the connection closes.
    pub fn finish_current(&mut self) {
        if !self.drain_asked {
            self.drain_asked = true;
            self.drain_owed = true;
        }
    }

    pub fn stats(&self) -> &Stats {
        self.conn.stats()
    }
}

fn verdict(v: sockscale_h2::Verdict) -> Verdict {
    match v {
        sockscale_h2::Verdict::Continue => Verdict::Continue,
        sockscale_h2::Verdict::Close(why) => Verdict::Close(closing(why)),
    }
}

fn closing(why: sockscale_h2::Closing) -> Closing {
    match why {
        sockscale_h2::Closing::Done => Closing::Done,
        sockscale_h2::Closing::Protocol(_) => Closing::BadRequest,
        sockscale_h2::Closing::Limit(Limit::HeaderTimeout) => Closing::HeaderTimeout,
        sockscale_h2::Closing::Limit(limit) => Closing::Limit(limit),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::http::HttpConfig;
    use crate::{Protocol, Responder, Session};

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";

    fn responder(http2: bool) -> Responder {
        let cfg = HttpConfig { http2: http2.then(|| Arc::new(default_limits())), ..HttpConfig::default() };
        Protocol::Http(Arc::new(cfg)).responder(1_700_000_000)
    }

    /// The client's opening: preface, empty SETTINGS, and a GET on stream 1 (`:method GET`,
    /// `:scheme http`, `:path /` indexed, `:authority t`).
    fn opening() -> Vec<u8> {
        let mut v = PREFACE.to_vec();
        v.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        v.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x01, 0x01, b't']);
        v
    }

    /// Feed `chunks`; the output flattened and the last verdict.
    fn feed(responder: &mut Responder, session: &mut Session, chunks: &[&[u8]]) -> (Vec<u8>, Verdict) {
        let now = Instant::now();
        let mut all = Vec::new();
        let mut verdict = Verdict::Continue;
        for chunk in chunks {
            let mut out = Output::default();
            verdict = responder.on_input(session, chunk, now, &mut out);
            all.extend(out.to_vec(chunk));
        }
        (all, verdict)
    }

    /// Frames in `bytes`: (type, flags, stream, payload length).
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, usize)> {
        let mut v = Vec::new();
        while bytes.len() >= 9 {
            let len = (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
            v.push((bytes[3], bytes[4], stream, len));
            bytes = &bytes[9 + len..];
        }
        v
    }

    #[test]
    fn the_preface_makes_the_connection_http2_however_it_is_split() {
        let opening = opening();
        for split in [1, 3, 10, 23, 24, 30, opening.len()] {
            let mut e = responder(true);
            let mut s = e.new_session();
            let (out, verdict) = feed(&mut e, &mut s, &[&opening[..split], &opening[split..]]);
            assert_eq!(verdict, Verdict::Continue);
            assert!(matches!(s, Session::H2(_)), "split at {split}");
            let f = frames(&out);
            assert_eq!(f[0].0, 4, "the server's SETTINGS first");
            let data: usize = f.iter().filter(|f| f.0 == 0 && f.2 == 1).map(|f| f.3).sum();
            assert_eq!(data, 4096, "the page as DATA on stream 1 (split at {split}): {f:?}");
            assert!(f.iter().any(|f| f.0 == 0 && f.1 & 1 == 1), "END_STREAM");
        }
    }

    /// With `alt_svc` set, the 200 response's HEADERS carry `alt-svc` with it; without, no
    /// `alt-svc` field.
    #[test]
    fn alt_svc_is_in_the_response_headers_when_set() {
        for alt_svc in [Some(crate::http::alt_svc_h3(4433)), None] {
            let cfg = HttpConfig {
                http2: Some(Arc::new(default_limits())),
                alt_svc: alt_svc.clone(),
                ..HttpConfig::default()
            };
            let mut e = Protocol::Http(Arc::new(cfg)).responder(1_700_000_000);
            let mut s = e.new_session();
            let (out, _) = feed(&mut e, &mut s, &[&opening()]);
            // The HEADERS frame of stream 1, decoded.
            let (mut at, mut block) = (0, None);
            while at + 9 <= out.len() {
                let len = (usize::from(out[at]) << 16) | (usize::from(out[at + 1]) << 8) | usize::from(out[at + 2]);
                let stream = u32::from_be_bytes([out[at + 5], out[at + 6], out[at + 7], out[at + 8]]);
                if out[at + 3] == 1 && stream == 1 {
                    block = Some(out[at + 9..at + 9 + len].to_vec());
                }
                at += 9 + len;
            }
            let mut list = sockscale_h2::HeaderList::with_limit(1 << 16);
            sockscale_h2::hpack::Decoder::new(4096)
                .decode(&block.expect("HEADERS on stream 1"), &mut list)
                .expect("a valid header block");
            assert_eq!(list.get(b":status"), Some(&b"200"[..]));
            assert_eq!(list.get(b"alt-svc"), alt_svc.as_deref().map(str::as_bytes), "{alt_svc:?}");
        }
    }

    #[test]
    fn http11_is_untouched_and_a_partial_preface_that_turns_out_http11_is_replayed() {
        for (chunks, on) in [
            (vec![GET], true),
            (vec![GET], false),
            (vec![&b"P"[..], b"UT / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"], true),
        ] {
            let mut e = responder(on);
            let mut s = e.new_session();
            let (out, verdict) = feed(&mut e, &mut s, &chunks);
            assert_eq!(verdict, Verdict::Continue);
            assert!(matches!(s, Session::Http(_)));
            assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&out));
        }
        // HTTP/2 off: the preface is a bad HTTP/1.1 request.
        let mut e = responder(false);
        let mut s = e.new_session();
        let (out, verdict) = feed(&mut e, &mut s, &[&opening()]);
        assert!(out.starts_with(b"HTTP/1.1 400"), "{}", String::from_utf8_lossy(&out));
        assert_eq!(verdict, Verdict::Close(Closing::BadRequest));
        // Neither protocol: closed without an answer; other garbage still gets its 400.
        let mut s = responder(true).new_session();
        let (out, verdict) = feed(&mut responder(true), &mut s, &[b"INVALID CONNECTION PREFACE\r\n\r\n"]);
        assert!(out.is_empty() && verdict == Verdict::Close(Closing::BadRequest));
        let mut s = responder(true).new_session();
        let (out, _) = feed(&mut responder(true), &mut s, &[b"GET / HTTP/2.0\r\nHost: t\r\n\r\n"]);
        assert!(out.starts_with(b"HTTP/1.1 400"));
    }

    /// DATA held back by the output cap is framed by `transmit` once output moved; the drain's
    /// GOAWAY waits for the next transmit, and the session is not between requests until then.
    #[test]
    fn transmit_frames_what_the_cap_held_back_and_the_drain_owes_a_goaway() {
        let limits = Limits { output_cap: 1024, ..default_limits() };
        let cfg = HttpConfig { http2: Some(Arc::new(limits)), ..HttpConfig::default() };
        let mut e = Protocol::Http(Arc::new(cfg)).responder(1_700_000_000);
        let mut s = e.new_session();
        let (out, _) = feed(&mut e, &mut s, &[&opening()]);
        let first: usize = frames(&out).iter().filter(|f| f.0 == 0).map(|f| f.3).sum();
        assert!(first < 4096, "capped: {first}");
        assert!(e.wants_transmit(&s));
        let mut sent = first;
        let now = Instant::now();
        while e.wants_transmit(&s) {
            let mut out = Output::default();
            assert_eq!(e.transmit(&mut s, now, 0, &mut out), Verdict::Continue);
            sent += frames(&out.to_vec(&[])).iter().filter(|f| f.0 == 0).map(|f| f.3).sum::<usize>();
        }
        assert_eq!(sent, 4096);
        assert!(s.is_between_requests());
        s.finish_current();
        assert!(!s.is_between_requests() && e.wants_transmit(&s), "a GOAWAY is owed");
        let mut out = Output::default();
        assert_eq!(e.transmit(&mut s, now, 0, &mut out), Verdict::Close(Closing::Done));
        assert_eq!(frames(&out.to_vec(&[])), [(7, 0, 0, 8)], "GOAWAY(last stream 1, NO_ERROR)");
        assert!(!e.wants_transmit(&s));
    }

    /// A window that never opens: the deadline is the window timeout, closed as a window stall.
    #[test]
    fn a_shut_window_times_out() {
        let limits = Limits { window_timeout: Some(Duration::from_secs(1)), ..default_limits() };
        let cfg = HttpConfig { http2: Some(Arc::new(limits)), ..HttpConfig::default() };
        let mut e = Protocol::Http(Arc::new(cfg)).responder(1_700_000_000);
        let mut s = e.new_session();
        let mut opening = PREFACE.to_vec();
        opening.extend_from_slice(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0]);
        opening.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x01, 0x01, b't']);
        let t0 = Instant::now();
        let mut out = Output::default();
        e.on_input(&mut s, &opening, t0, &mut out);
        let due = e.deadline(&s).expect("the window timeout");
        assert_eq!(due, t0 + Duration::from_secs(1));
        let mut out = Output::default();
        assert_eq!(e.on_timeout(&mut s, due, &mut out), Verdict::Close(Closing::Limit(Limit::WindowStall)));
    }

    /// A body file in memory for the tests: byte `i` is `i % 251`; reads from `fail_from` on
    /// fail (the file shrank there). Every read is recorded.
    #[derive(Debug)]
    struct Pattern {
        fail_from: u64,
        reads: std::sync::Mutex<Vec<(u64, usize)>>,
    }

    impl FileChunks for Pattern {
        fn read_chunk(&self, at: u64, max: usize) -> std::io::Result<Bytes> {
            self.reads.lock().unwrap().push((at, max));
            if at >= self.fail_from {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let end = (at + max as u64).min(self.fail_from);
            Ok((at..end).map(|i| (i % 251) as u8).collect())
        }
    }

    fn file_engine(len: u64, fail_from: u64, output_cap: usize) -> (Responder, Arc<Pattern>) {
        let file = Arc::new(Pattern { fail_from, reads: Default::default() });
        let chunks: Arc<dyn FileChunks> = file.clone();
        let cfg = HttpConfig {
            body: ResponseBody::File { len },
            file_chunks: Some(chunks),
            http2: Some(Arc::new(Limits { output_cap, ..default_limits() })),
            ..HttpConfig::default()
        };
        (Protocol::Http(Arc::new(cfg)).responder(1_700_000_000), file)
    }

    fn client_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// The client's opening with `window` for each stream (and the connection's opened wide
    /// unless it is 0), and GETs on `streams`.
    fn opening_with(window: u32, streams: &[u32]) -> Vec<u8> {
        let mut v = PREFACE.to_vec();
        v.extend(client_frame(4, 0, 0, &[&[0u8, 4][..], &window.to_be_bytes()].concat()));
        if window > 0 {
            v.extend(client_frame(8, 0, 0, &((1u32 << 31) - 1 - 65_535).to_be_bytes()));
        }
        for &s in streams {
            v.extend(client_frame(1, 5, s, &[0x82, 0x86, 0x84, 0x01, 0x01, b't']));
        }
        v
    }

    /// Each stream's DATA payload, whether it ended, and its RST_STREAM code, from `bytes`.
    #[derive(Debug, Default)]
    struct Got {
        data: std::collections::HashMap<u32, Vec<u8>>,
        ended: std::collections::HashMap<u32, bool>,
        reset: std::collections::HashMap<u32, u32>,
    }

    impl Got {
        fn add(&mut self, mut bytes: &[u8]) {
            while bytes.len() >= 9 {
                let len = (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
                let (kind, flags) = (bytes[3], bytes[4]);
                let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
                let payload = &bytes[9..9 + len];
                match kind {
                    0 => self.data.entry(stream).or_default().extend_from_slice(payload),
                    3 => {
                        self.reset.insert(stream, u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]));
                    }
                    _ => {}
                }
                if matches!(kind, 0 | 1) && flags & 1 == 1 {
                    self.ended.insert(stream, true);
                }
                bytes = &bytes[9 + len..];
            }
            assert!(bytes.is_empty(), "whole frames");
        }
    }

    /// A body file of 1 MiB and 7 bytes on two streams: read a chunk at a time where each stream
    /// has got to, never more than the output cap has room for (each call's output stays within
    /// the cap and a frame), every byte read once, and both bodies arrive whole and exact. The
    /// first chunk goes with the answer to the request; the rest by transmits.
    #[test]
    fn a_file_body_is_read_a_chunk_at_a_time_as_the_output_cap_allows() {
        let len = (1 << 20) + 7;
        let cap = 100_000;
        let (mut e, file) = file_engine(len, u64::MAX, cap);
        let mut s = e.new_session();
        let (out, verdict) = feed(&mut e, &mut s, &[&opening_with((1 << 31) - 1, &[1, 3])]);
        assert_eq!(verdict, Verdict::Continue);
        assert!(out.len() <= cap + (16 << 10) + 9, "{}", out.len());
        let mut got = Got::default();
        got.add(&out);
        assert!(!got.data.is_empty(), "the first chunk goes with the answer");
        let now = Instant::now();
        let mut calls = 0;
        while e.wants_transmit(&s) {
            let mut out = Output::default();
            assert_eq!(e.transmit(&mut s, now, 0, &mut out), Verdict::Continue);
            let bytes = out.to_vec(&[]);
            assert!(!bytes.is_empty() && bytes.len() <= cap + (16 << 10) + 9, "{}", bytes.len());
            got.add(&bytes);
            // Read but not yet framed: what one chunk left behind the cap, at most.
            let read: usize = file.reads.lock().unwrap().iter().map(|&(_, max)| max).sum();
            let framed: usize = got.data.values().map(Vec::len).sum();
            assert!(read - framed <= FILE_CHUNK, "{} bytes read and held", read - framed);
            calls += 1;
            assert!(calls < 1000, "no progress");
        }
        let want: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        for stream in [1, 3] {
            assert!(got.data[&stream] == want, "stream {stream}: {} bytes, not the file's", got.data[&stream].len());
            assert!(got.ended[&stream], "stream {stream} ended");
        }
        let reads = file.reads.lock().unwrap();
        assert!(reads.iter().all(|&(_, max)| max <= FILE_CHUNK), "a chunk at most");
        let read: u64 = reads.iter().map(|&(_, max)| max as u64).sum();
        assert_eq!(read, 2 * len, "every byte read once: {reads:?}");
        assert!(s.is_between_requests(), "nothing held once the bodies are out");
    }

    /// A shut window: nothing is read while it stays shut (a slow reader holds no chunk), the
    /// window stall deadline runs, and a WINDOW_UPDATE lets one window's worth be read.
    #[test]
    fn nothing_is_read_for_a_shut_window() {
        let (mut e, file) = file_engine(1 << 20, u64::MAX, 256 << 10);
        let mut s = e.new_session();
        let mut opening = opening_with(0, &[1]);
        // The connection's window is the default 65,535; the stream's is 0.
        opening.truncate(opening.len() - 15);
        opening.extend(client_frame(1, 5, 1, &[0x82, 0x86, 0x84, 0x01, 0x01, b't']));
        let (out, _) = feed(&mut e, &mut s, &[&opening]);
        let mut got = Got::default();
        got.add(&out);
        assert!(got.data.is_empty() && file.reads.lock().unwrap().is_empty(), "nothing read");
        assert!(!e.wants_transmit(&s));
        assert!(e.deadline(&s).is_some(), "the window timeout runs");
        let (out, _) = feed(&mut e, &mut s, &[&client_frame(8, 0, 1, &1000u32.to_be_bytes())]);
        got.add(&out);
        assert_eq!(got.data[&1].len(), 1000);
        assert_eq!(*file.reads.lock().unwrap(), [(0, 1000)]);
    }

    /// A file that ends short of its length (it shrank): the stream that reaches the end is
    /// reset with INTERNAL_ERROR, having had only the file's bytes; the connection goes on and
    /// answers the next request the same way.
    #[test]
    fn a_file_that_shrank_resets_the_stream_and_the_connection_goes_on() {
        let (mut e, _) = file_engine(1 << 20, 100_000, 256 << 10);
        let mut s = e.new_session();
        let (out, verdict) = feed(&mut e, &mut s, &[&opening_with((1 << 31) - 1, &[1])]);
        assert_eq!(verdict, Verdict::Continue);
        let mut got = Got::default();
        got.add(&out);
        let now = Instant::now();
        while e.wants_transmit(&s) {
            let mut out = Output::default();
            assert_eq!(e.transmit(&mut s, now, 0, &mut out), Verdict::Continue);
            got.add(&out.to_vec(&[]));
        }
        assert_eq!(got.reset.get(&1), Some(&2), "RST_STREAM(INTERNAL_ERROR): {got:?}");
        assert_eq!(got.data[&1].len(), 100_000, "what the file still had");
        assert!(!got.ended.contains_key(&1), "no END_STREAM on a short body");
        assert!(s.is_between_requests());
        let (out, verdict) = feed(&mut e, &mut s, &[&client_frame(1, 5, 3, &[0x82, 0x86, 0x84, 0x01, 0x01, b't'])]);
        assert_eq!(verdict, Verdict::Continue);
        got.add(&out);
        while e.wants_transmit(&s) {
            let mut out = Output::default();
            e.transmit(&mut s, now, 0, &mut out);
            got.add(&out.to_vec(&[]));
        }
        assert_eq!((got.reset.get(&3), got.data[&3].len()), (Some(&2), 100_000));
    }
}
