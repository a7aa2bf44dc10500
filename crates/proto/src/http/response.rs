//! The fixed responses, rendered once a second per thread.
//!
//! Every 200 response is the same bytes for a whole second, so a thread renders the three
//! connection variants (HTTP/1.1 keep-alive, HTTP/1.0 keep-alive, close) when the second
//! changes and hands out reference-counted clones. A HEAD answer is a prefix of the same bytes.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use super::{HttpConfig, ResponseBody, Status};
use crate::Output;

/// How the connection continues after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionMode {
    /// HTTP/1.1 keep-alive: no `Connection` header.
    KeepAlive11,
    /// HTTP/1.0 keep-alive: `Connection: keep-alive`.
    KeepAlive10,
    Close,
}

const MODES: [ConnectionMode; 3] = [ConnectionMode::KeepAlive11, ConnectionMode::KeepAlive10, ConnectionMode::Close];

/// Bodies in memory up to this size are rendered behind their head, into one buffer sent
/// with one send; larger ones stay one shared buffer sent behind the head in the same writev,
/// so a large body is never copied, neither per thread nor when the Date changes.
const INLINE_BODY_MAX: usize = 64 << 10;

#[derive(Debug, Clone)]
struct Rendered {
    /// Head and, for a body in memory up to `INLINE_BODY_MAX`, the body.
    full: Bytes,
    head_len: usize,
}

/// The per-thread cache of rendered responses.
#[derive(Debug)]
pub struct Responses {
    cfg: Arc<HttpConfig>,
    rendered_second: u64,
    date: String,
    ok: [Rendered; 3],
    /// The body's length as text, for HTTP/2's content-length field.
    length: String,
    /// This thread's WebSocket counters (added to the server's totals as it is renewed).
    pub(crate) ws_tally: crate::ws::Tally,
}

impl Responses {
    pub fn new(cfg: Arc<HttpConfig>, unix_secs: u64) -> Self {
        let date = http_date(unix_secs);
        let ok = MODES.map(|mode| render_ok(&cfg, &date, mode));
        let length = cfg.body.len().to_string();
        let ws_tally = crate::ws::Tally::new(cfg.websocket.as_ref());
        Responses { cfg, rendered_second: unix_secs, date, ok, length, ws_tally }
    }

    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// The configuration and this thread's WebSocket counters at once (HTTP/2's WebSocket
    /// streams count while the configuration is read).
    pub(crate) fn config_and_ws_stats(&mut self) -> (&HttpConfig, &mut sockscale_ws::Stats) {
        (&self.cfg, &mut self.ws_tally.stats)
    }

    /// The `Date` of the current second, as the rendered responses carry it.
    pub fn date(&self) -> &str {
        &self.date
    }

    /// The 200 response's body length, as text.
    pub fn content_length(&self) -> &str {
        &self.length
    }

    /// Re-render if the second has changed.
    pub fn tick(&mut self, unix_secs: u64) {
        if unix_secs != self.rendered_second {
            *self = Responses::new(self.cfg.clone(), unix_secs);
        }
    }

    /// Queue the 200 response; `head_only` for HEAD. A body in a file follows its head as a
    /// file range, which the server sends from the file.
    pub fn ok(&self, mode: ConnectionMode, head_only: bool, out: &mut Output) {
        let rendered = &self.ok[mode as usize];
        if head_only {
            out.push_shared(rendered.full.slice(..rendered.head_len));
            return;
        }
        out.push_shared(rendered.full.clone());
        match &self.cfg.body {
            ResponseBody::Bytes(body) if body.len() > INLINE_BODY_MAX => out.push_shared(body.clone()),
            ResponseBody::Bytes(_) => {}
            ResponseBody::File { len } => out.push_file(0..*len),
        }
    }

    /// An error response, always with `Connection: close`. Errors are rare, so these are
    /// rendered on demand, but with the cached date.
    pub fn error(&self, status: Status) -> Bytes {
        let body = format!("{} {}\n", status.code(), status.reason());
        let mut head = String::with_capacity(160);
        // Writing to a String cannot fail.
        let _ = write!(
            head,
            "HTTP/1.1 {} {}\r\nServer: {}\r\nDate: {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            status.code(),
            status.reason(),
            self.cfg.server,
            self.date,
            body.len()
        );
        head.push_str(&body);
        Bytes::from(head)
    }
}

/// `100 Continue`, sent before reading a body whose sender waits for it.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

fn render_ok(cfg: &HttpConfig, date: &str, mode: ConnectionMode) -> Rendered {
    let connection = match mode {
        ConnectionMode::KeepAlive11 => "",
        ConnectionMode::KeepAlive10 => "Connection: keep-alive\r\n",
        ConnectionMode::Close => "Connection: close\r\n",
    };
    let alt_svc = cfg.alt_svc.as_deref().map(|value| format!("Alt-Svc: {value}\r\n")).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 200 OK\r\nServer: {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{alt_svc}{}\r\n",
        cfg.server,
        date,
        cfg.content_type,
        cfg.body.len(),
        connection
    );
    let in_memory: &[u8] = match &cfg.body {
        ResponseBody::Bytes(body) if body.len() <= INLINE_BODY_MAX => body,
        ResponseBody::Bytes(_) | ResponseBody::File { .. } => &[],
    };
    let mut full = BytesMut::with_capacity(head.len() + in_memory.len());
    full.put_slice(head.as_bytes());
    full.put_slice(in_memory);
    Rendered { full: full.freeze(), head_len: head.len() }
}

/// The `Date` field's value for a second since the epoch (RFC 9110 §5.6.7).
pub fn http_date(unix_secs: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(unix_secs))
}

/// Seconds since the Unix epoch now; for callers, since this crate itself reads no clock.
pub fn unix_secs(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The default body: an HTML page of exactly `len` bytes, so the default response matches the
/// 4 KiB page of the seed-003 benchmark.
pub fn generated_page(len: usize) -> Bytes {
    const HEAD: &str = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>sockscale</title></head>\n<body>\n<h1>sockscale</h1>\n";
    const TAIL: &str = "</body></html>\n";
    const LINE: &str = "<p>A fixed response from sockscale, the scalable socket server toolkit.</p>\n";
    let mut page = String::with_capacity(len);
    page.push_str(HEAD);
    while page.len() + LINE.len() + TAIL.len() <= len {
        page.push_str(LINE);
    }
    // Pad the remainder inside an HTML comment so the page stays valid.
    let room = len.saturating_sub(page.len() + TAIL.len());
    if room >= 7 {
        page.push_str("<!--");
        page.extend(std::iter::repeat_n('.', room - 7));
        page.push_str("-->");
    } else {
        page.extend(std::iter::repeat_n('\n', room));
    }
    page.push_str(TAIL);
    let mut bytes = page.into_bytes();
    bytes.truncate(len);
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_page_has_exact_length_and_is_html() {
        for len in [0, 10, 200, 4096, 4097, 65536] {
            assert_eq!(generated_page(len).len(), len);
        }
        let page = generated_page(4096);
        assert!(page.starts_with(b"<!DOCTYPE html>"));
        assert!(page.ends_with(b"</body></html>\n"));
    }

    #[test]
    fn date_changes_only_with_the_second() {
        let cfg = Arc::new(HttpConfig::default());
        let mut r = Responses::new(cfg, 1_700_000_000);
        let ok = |r: &Responses| {
            let mut out = Output::default();
            r.ok(ConnectionMode::KeepAlive11, false, &mut out);
            match out.segments() {
                [crate::Segment::Shared(bytes)] => bytes.clone(),
                other => panic!("one shared response expected: {other:?}"),
            }
        };
        let first = ok(&r);
        r.tick(1_700_000_000);
        assert!(std::ptr::eq(first.as_ptr(), ok(&r).as_ptr()));
        r.tick(1_700_000_001);
        let second = ok(&r);
        assert_ne!(first, second);
        assert!(String::from_utf8_lossy(&second).contains("Date: Tue, 14 Nov 2023 22:13:21 GMT\r\n"));
    }

    /// With `alt_svc` set, every prepared 200 head (each connection mode, HEAD too) carries it
    /// once; without, none does.
    #[test]
    fn alt_svc_is_part_of_the_prepared_response() {
        let head_of = |r: &Responses, mode, head_only| {
            let mut out = Output::default();
            r.ok(mode, head_only, &mut out);
            let [crate::Segment::Shared(bytes)] = out.segments() else { panic!("one shared response expected") };
            let text = String::from_utf8_lossy(bytes).into_owned();
            text[..text.find("\r\n\r\n").expect("a head") + 4].to_owned()
        };
        let cfg = HttpConfig { alt_svc: Some(crate::http::alt_svc_h3(8443)), ..HttpConfig::default() };
        let with = Responses::new(Arc::new(cfg), 1_700_000_000);
        let without = Responses::new(Arc::new(HttpConfig::default()), 1_700_000_000);
        for mode in MODES {
            for head_only in [false, true] {
                let head = head_of(&with, mode, head_only);
                assert_eq!(head.matches("\r\nAlt-Svc: h3=\":8443\"; ma=86400\r\n").count(), 1, "{head}");
                assert!(!head_of(&without, mode, head_only).contains("Alt-Svc"), "{mode:?}");
            }
        }
        // Prepared once: two requests get the same bytes.
        let shared = |r: &Responses| {
            let mut out = Output::default();
            r.ok(ConnectionMode::KeepAlive11, false, &mut out);
            match out.segments() {
                [crate::Segment::Shared(bytes)] => bytes.as_ptr(),
                _ => panic!("one shared response expected"),
            }
        };
        assert!(std::ptr::eq(shared(&with), shared(&with)));
    }

    /// A large body in memory is shared, never copied: every response, in every second,
    /// points at the configured buffer, behind its own head.
    #[test]
    fn a_large_body_in_memory_is_sent_behind_its_head_without_a_copy() {
        let body = Bytes::from(vec![7u8; INLINE_BODY_MAX + 1]);
        let cfg = Arc::new(HttpConfig { body: ResponseBody::Bytes(body.clone()), ..HttpConfig::default() });
        let mut r = Responses::new(cfg, 1_700_000_000);
        for second in 0..2 {
            r.tick(1_700_000_000 + second);
            let mut out = Output::default();
            r.ok(ConnectionMode::KeepAlive11, false, &mut out);
            let [crate::Segment::Shared(head), crate::Segment::Shared(sent)] = out.segments() else {
                panic!("head and body expected: {:?}", out.segments().len())
            };
            assert!(String::from_utf8_lossy(head).ends_with(&format!("Content-Length: {}\r\n\r\n", body.len())));
            assert!(std::ptr::eq(sent.as_ptr(), body.as_ptr()), "the body was copied");
            let mut head_only = Output::default();
            r.ok(ConnectionMode::KeepAlive11, true, &mut head_only);
            assert_eq!(head_only.segments().len(), 1);
        }
    }
}
