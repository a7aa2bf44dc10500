//! HTTP/2 on the HTTP service's port: the session an HTTP connection becomes when its first
//! bytes are the HTTP/2 preface (h2c with prior knowledge, or h2 over TLS after ALPN, where
//! the client sends the same preface). It drives `sockscale-h2`'s I/O-free connection and
//! answers every request with the server's one response (the fields HTTP/1.1 sends: status
//! 200, content-type, content-length, server, date), as shared `Bytes` output.
//!
//! HTTP/2 has more to send after a call returns: response DATA waits on flow-control windows
//! and on the output cap, so the lifecycle asks [`H2Session::wants_transmit`] when the socket
//! has taken output and calls [`H2Session::transmit`] then (see `Engine::transmit`).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sockscale_h2::{Body, Connection, Event, Limit, Limits, Stats};

pub use crate::h2_totals::{default_limits, H2Totals};
use crate::http::{ResponseBody, Responses, PREFACE};
use crate::{Closing, Output, Verdict};

/// One HTTP/2 connection (boxed in [`crate::Session::H2`]: an HTTP/1.1 connection pays nothing).
#[derive(Debug)]
pub struct H2Session {
    conn: Connection,
    /// The drain asked for a GOAWAY, written by the next call that has output at hand.
    drain_owed: bool,
    /// The drain was asked for (once is enough).
    drain_asked: bool,
    totals: Arc<H2Totals>,
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
        responses: &Responses,
        out: &mut Output,
    ) -> (Self, Verdict) {
        let totals = responses.config().h2_totals.clone();
        let mut buf = Vec::with_capacity(256);
        let conn = Connection::new(limits, now, &mut buf);
        let mut session = H2Session { conn, drain_owed: false, drain_asked: false, totals };
        if replay > 0 {
            session.conn.receive(&PREFACE[..replay], now, &mut buf);
        }
        let verdict = session.feed(input, now, responses, buf, out);
        (session, verdict)
    }

    pub fn on_input(&mut self, input: &[u8], now: Instant, responses: &Responses, out: &mut Output) -> Verdict {
        self.feed(input, now, responses, Vec::new(), out)
    }

    fn feed(
        &mut self,
        input: &[u8],
        now: Instant,
        responses: &Responses,
        mut buf: Vec<u8>,
        out: &mut Output,
    ) -> Verdict {
        let received = self.conn.receive(input, now, &mut buf);
        self.answer(responses, &mut buf);
        let verdict = self.after(received, now, 0, &mut buf);
        flush(buf, out);
        verdict
    }

    /// Answer every complete request with the server's response.
    fn answer(&mut self, responses: &Responses, buf: &mut Vec<u8>) {
        let cfg = responses.config();
        while let Some(Event::Request(request)) = self.conn.poll_event() {
            let fields: [(&[u8], &[u8]); 4] = [
                (b"server", cfg.server.as_bytes()),
                (b"date", responses.date().as_bytes()),
                (b"content-type", cfg.content_type.as_bytes()),
                (b"content-length", responses.content_length().as_bytes()),
            ];
            let body = if request.is_head() || cfg.body.is_empty() {
                Body::Empty
            } else {
                match (&cfg.body, &cfg.http2_body) {
                    (ResponseBody::Bytes(bytes), _) => Body::Bytes(bytes.clone()),
                    (ResponseBody::File { .. }, Some(copy)) => Body::Bytes(copy.clone()),
                    // No copy in memory (a library user's config): the head only.
                    (ResponseBody::File { .. }, None) => Body::Empty,
                }
            };
            self.conn.respond(request.stream, 200, &fields, body, buf);
        }
    }

    /// After input or a timer: frame DATA (and the drain's GOAWAY if owed); the first closing
    /// verdict wins.
    fn after(&mut self, first: sockscale_h2::Verdict, now: Instant, queued: usize, buf: &mut Vec<u8>) -> Verdict {
        if self.drain_owed {
            self.drain_owed = false;
            self.conn.begin_drain(buf);
        }
        let then = self.conn.transmit(now, queued, buf);
        match first {
            sockscale_h2::Verdict::Close(why) => self.closing(why),
            sockscale_h2::Verdict::Continue => match then {
                sockscale_h2::Verdict::Continue => Verdict::Continue,
                sockscale_h2::Verdict::Close(why) => self.closing(why),
            },
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

    /// Something to send now that the socket took output: DATA the windows allow, or the
    /// drain's GOAWAY.
    pub fn wants_transmit(&self) -> bool {
        self.drain_owed || self.conn.wants_transmit()
    }

    /// Frame what the windows and the cap allow, `queued` bytes being unsent already.
    pub fn transmit(&mut self, now: Instant, queued: usize, out: &mut Output) -> Verdict {
        let mut buf = Vec::new();
        let verdict = self.after(sockscale_h2::Verdict::Continue, now, queued, &mut buf);
        flush(buf, out);
        verdict
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.conn.deadline()
    }

    /// A deadline passed: the header timeout or a window kept shut, answered with a GOAWAY.
    pub fn on_timeout(&mut self, now: Instant, out: &mut Output) -> Verdict {
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
    use crate::{Engine, Protocol, Session};

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";

    fn engine(http2: bool) -> Engine {
        let cfg = HttpConfig { http2: http2.then(|| Arc::new(default_limits())), ..HttpConfig::default() };
        Protocol::Http(Arc::new(cfg)).engine(1_700_000_000)
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
    fn feed(engine: &mut Engine, session: &mut Session, chunks: &[&[u8]]) -> (Vec<u8>, Verdict) {
        let now = Instant::now();
        let mut all = Vec::new();
        let mut verdict = Verdict::Continue;
        for chunk in chunks {
            let mut out = Output::default();
            verdict = engine.on_input(session, chunk, now, &mut out);
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
            let mut e = engine(true);
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

    #[test]
    fn http11_is_untouched_and_a_partial_preface_that_turns_out_http11_is_replayed() {
        for (chunks, on) in [
            (vec![GET], true),
            (vec![GET], false),
            (vec![&b"P"[..], b"UT / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"], true),
        ] {
            let mut e = engine(on);
            let mut s = e.new_session();
            let (out, verdict) = feed(&mut e, &mut s, &chunks);
            assert_eq!(verdict, Verdict::Continue);
            assert!(matches!(s, Session::Http(_)));
            assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&out));
        }
        // HTTP/2 off: the preface is a bad HTTP/1.1 request.
        let mut e = engine(false);
        let mut s = e.new_session();
        let (out, verdict) = feed(&mut e, &mut s, &[&opening()]);
        assert!(out.starts_with(b"HTTP/1.1 400"), "{}", String::from_utf8_lossy(&out));
        assert_eq!(verdict, Verdict::Close(Closing::BadRequest));
        // Neither protocol: closed without an answer; other garbage still gets its 400.
        let mut s = engine(true).new_session();
        let (out, verdict) = feed(&mut engine(true), &mut s, &[b"INVALID CONNECTION PREFACE\r\n\r\n"]);
        assert!(out.is_empty() && verdict == Verdict::Close(Closing::BadRequest));
        let mut s = engine(true).new_session();
        let (out, _) = feed(&mut engine(true), &mut s, &[b"GET / HTTP/2.0\r\nHost: t\r\n\r\n"]);
        assert!(out.starts_with(b"HTTP/1.1 400"));
    }

    /// DATA held back by the output cap is framed by `transmit` once output moved; the drain's
    /// GOAWAY waits for the next transmit, and the session is not between requests until then.
    #[test]
    fn transmit_frames_what_the_cap_held_back_and_the_drain_owes_a_goaway() {
        let limits = Limits { output_cap: 1024, ..default_limits() };
        let cfg = HttpConfig { http2: Some(Arc::new(limits)), ..HttpConfig::default() };
        let mut e = Protocol::Http(Arc::new(cfg)).engine(1_700_000_000);
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
        let mut e = Protocol::Http(Arc::new(cfg)).engine(1_700_000_000);
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
}
