//! A small HTTP/2 client written frame by frame, for the hostile and exact cases curl cannot
//! make (rapid resets, windows that never open, a request held open across a drain), and the
//! lookups of curl and h2spec, which the tests skip without, saying why.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub mod kind {
    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const PRIORITY: u8 = 2;
    pub const RST_STREAM: u8 = 3;
    pub const SETTINGS: u8 = 4;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const WINDOW_UPDATE: u8 = 8;
    pub const CONTINUATION: u8 = 9;
}

pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const NO_ERROR: u32 = 0x0;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const CANCEL: u32 = 0x8;

/// One frame as read.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// A frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET of `/` as a header block: `:method GET`, `:scheme http`, `:path /` indexed from the
/// static table, `:authority t` a literal with an indexed name.
pub fn get_block() -> Vec<u8> {
    vec![0x82, 0x86, 0x84, 0x01, 0x01, b't']
}

/// HEADERS for a GET on `stream`; `end`: the request has no body.
pub fn get(stream: u32, end: bool) -> Vec<u8> {
    frame(kind::HEADERS, END_HEADERS | if end { END_STREAM } else { 0 }, stream, &get_block())
}

/// HEADERS for a HEAD of `/` on `stream`, ending the request: `:method HEAD` a literal with
/// an indexed name, the rest as in [`get_block`] (nothing enters the dynamic table).
pub fn head(stream: u32) -> Vec<u8> {
    let block = [&[0x02, 0x04][..], b"HEAD", &[0x86, 0x84, 0x01, 0x01, b't']].concat();
    frame(kind::HEADERS, END_HEADERS | END_STREAM, stream, &block)
}

/// An HPACK integer with an `n`-bit prefix, the prefix's other bits `flags` (RFC 7541 §5.1).
pub fn hpack_integer(out: &mut Vec<u8>, mut value: usize, n: u32, flags: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A field as an HPACK literal with a new name, not indexed, raw (not Huffman) strings.
pub fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    for s in [name, value] {
        hpack_integer(&mut out, s.len(), 7, 0);
        out.extend_from_slice(s);
    }
    out
}

pub fn ping(data: [u8; 8]) -> Vec<u8> {
    frame(kind::PING, 0, 0, &data)
}

pub fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let payload: Vec<u8> =
        values.iter().flat_map(|(id, v)| [&id.to_be_bytes()[..], &v.to_be_bytes()[..]].concat()).collect();
    frame(kind::SETTINGS, 0, 0, &payload)
}

pub fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(kind::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

pub fn rst(stream: u32, code: u32) -> Vec<u8> {
    frame(kind::RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// An HTTP/2 connection over a socket, with prior knowledge.
pub struct H2 {
    pub sock: TcpStream,
    /// Acknowledge the server's SETTINGS as they are read (a client that sent its preface and
    /// SETTINGS); off for one that sends the server nothing it did not write itself.
    pub ack_settings: bool,
}

impl H2 {
    /// The preface and SETTINGS (`initial_window`: each stream's window the server may fill),
    /// and, `open`, the connection's window opened wide.
    pub fn start(sock: TcpStream, initial_window: u32, open: bool) -> H2 {
        let mut h2 = H2 { sock, ack_settings: true };
        let mut hello = PREFACE.to_vec();
        hello.extend(settings(&[(INITIAL_WINDOW_SIZE, initial_window)]));
        if open {
            hello.extend(window_update(0, (1 << 31) - 1 - 65_535));
        }
        h2.send(&hello);
        h2
    }

    /// A connection over which the test writes every byte itself: SETTINGS are not
    /// acknowledged, nothing is sent.
    pub fn silent(sock: TcpStream) -> H2 {
        H2 { sock, ack_settings: false }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).expect("write frames");
    }

    /// The next frame; None at EOF or a reset. SETTINGS are acknowledged as they come (unless
    /// [`H2::silent`]).
    pub fn read(&mut self) -> Option<Frame> {
        let mut head = [0u8; 9];
        self.sock.read_exact(&mut head).ok()?;
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        self.sock.read_exact(&mut payload).ok()?;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let f = Frame { kind: head[3], flags: head[4], stream, payload };
        if self.ack_settings && f.kind == kind::SETTINGS && f.flags & ACK == 0 {
            let _ = self.sock.write_all(&frame(kind::SETTINGS, ACK, 0, &[]));
        }
        Some(f)
    }

    /// Read until every stream of `streams` has ended (END_STREAM or RST_STREAM): each one's
    /// response, as (HEADERS seen, DATA bytes, reset code).
    pub fn responses(&mut self, streams: &[u32]) -> HashMap<u32, Answer> {
        let mut got: HashMap<u32, Answer> = HashMap::new();
        let done = |got: &HashMap<u32, Answer>| streams.iter().all(|s| got.get(s).is_some_and(|a| a.ended));
        while !done(&got) {
            let f = self.read().unwrap_or_else(|| panic!("the connection ended with streams open: {got:?}"));
            let answer = got.entry(f.stream).or_default();
            match f.kind {
                kind::HEADERS => {
                    if !answer.headers {
                        answer.status = status(&f.payload);
                    }
                    answer.headers = true;
                }
                kind::DATA => answer.data += f.payload.len(),
                kind::RST_STREAM => {
                    answer.reset = Some(u32::from_be_bytes(f.payload[..4].try_into().expect("4 octets")));
                    answer.ended = true;
                }
                kind::GOAWAY => panic!("GOAWAY before the responses ended: {f:?}"),
                _ => {}
            }
            if matches!(f.kind, kind::HEADERS | kind::DATA) && f.flags & END_STREAM != 0 {
                answer.ended = true;
            }
        }
        got
    }

    /// Frames until a GOAWAY: its last stream id and error code (None: closed without one).
    pub fn goaway(&mut self) -> Option<(u32, u32)> {
        while let Some(f) = self.read() {
            if f.kind == kind::GOAWAY {
                let last = u32::from_be_bytes(f.payload[..4].try_into().ok()?) & 0x7fff_ffff;
                let code = u32::from_be_bytes(f.payload[4..8].try_into().ok()?);
                return Some((last, code));
            }
        }
        None
    }

    /// The frames before a GOAWAY, and the GOAWAY's last stream id and error code (None:
    /// closed without one).
    pub fn until_goaway(&mut self) -> (Vec<Frame>, Option<(u32, u32)>) {
        let mut before = Vec::new();
        while let Some(f) = self.read() {
            if f.kind == kind::GOAWAY {
                let last = u32::from_be_bytes(f.payload[..4].try_into().expect("4 octets")) & 0x7fff_ffff;
                let code = u32::from_be_bytes(f.payload[4..8].try_into().expect("4 octets"));
                return (before, Some((last, code)));
            }
            before.push(f);
        }
        (before, None)
    }

    /// Whether the server closed the connection within `wait` (frames before it are skipped).
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        self.sock.set_read_timeout(Some(wait)).expect("timeout");
        let mut buf = [0u8; 4096];
        loop {
            match self.sock.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// The `:status` a response's header block begins with, as this server encodes it: an indexed
/// static entry (200, 204, 206, 304, 400, 404, 500) or a literal with `:status`'s name indexed
/// and a raw value, after a table size update if any.
pub fn status(block: &[u8]) -> Option<u16> {
    let mut b = block;
    while b.first().is_some_and(|&x| x & 0xe0 == 0x20) {
        b = &b[1..];
    }
    let first = *b.first()?;
    if first & 0x80 != 0 {
        let statuses = [200, 204, 206, 304, 400, 404, 500];
        return statuses.get(usize::from(first & 0x7f).checked_sub(8)?).copied();
    }
    if first & 0x0f != 8 || first & 0xf0 > 0x10 {
        return None;
    }
    let len = usize::from(*b.get(1)?);
    std::str::from_utf8(b.get(2..2 + len)?).ok()?.parse().ok()
}

/// One stream's answer.
#[derive(Debug, Default, Clone, Copy)]
pub struct Answer {
    pub headers: bool,
    /// The status of its first HEADERS.
    pub status: Option<u16>,
    pub data: usize,
    pub reset: Option<u32>,
    pub ended: bool,
}

/// A program on the PATH or in one of `also`, if it is there.
pub fn find_program(name: &str, also: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(also.iter().cloned()).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// curl, with HTTP/2 (nghttp2) built in; Err: why not.
pub fn curl() -> Result<PathBuf, String> {
    let curl = find_program("curl", &[]).ok_or("curl is not installed (apt-get install curl)")?;
    let version = std::process::Command::new(&curl).arg("--version").output().map_err(|e| format!("curl: {e}"))?;
    if !String::from_utf8_lossy(&version.stdout).contains("HTTP2") {
        return Err("this curl is built without HTTP/2".into());
    }
    Ok(curl)
}

/// h2spec (`go install github.com/summerwind/h2spec/cmd/h2spec@latest`); Err: why not.
pub fn h2spec() -> Result<PathBuf, String> {
    let mut also = Vec::new();
    if let Some(home) = std::env::var_os("HOME") {
        also.push(PathBuf::from(home).join("go/bin"));
    }
    if let Some(gopath) = std::env::var_os("GOPATH") {
        also.push(PathBuf::from(gopath).join("bin"));
    }
    find_program("h2spec", &also).ok_or_else(|| {
        "h2spec is not installed (with Go: go install github.com/summerwind/h2spec/cmd/h2spec@latest)".to_owned()
    })
}
