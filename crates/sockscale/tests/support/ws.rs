//! A small blocking WebSocket client for the tests, on `sockscale-ws`'s `ClientHandshake` and
//! `ClientSession`: the upgrade, messages sent and received, and how the connection ended.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sockscale_ws::{ClientHandshake, ClientSession, Config, DeflateConfig, Kind, Message, Verdict};

/// How a read ended without a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The session's verdict: a close handshake (the code received), or a failure.
    Closed(sockscale_ws::Closing),
    /// The socket ended (EOF, an error, or the read timeout) with the session still open.
    Socket(String),
}

pub struct WsClient<S> {
    pub stream: S,
    pub session: ClientSession,
    ended: Option<Ended>,
}

/// The upgrade request's answer: the status and head, when it is not a 101.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub head: String,
}

/// Read a response head from `stream`: the head and the octets read behind it.
fn read_head(stream: &mut impl Read) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = got.split_off(end + 4);
            return Ok((got, rest));
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "EOF before the response head"));
        }
        got.extend_from_slice(&buf[..n]);
    }
}

impl<S: Read + Write> WsClient<S> {
    /// Upgrade `stream` on `path`, offering permessage-deflate if `deflate`.
    pub fn connect(stream: S, path: &str, deflate: Option<DeflateConfig>) -> Result<Self, Refused> {
        Self::connect_with(stream, path, deflate, &[])
    }

    /// As `connect`, with `extra` octets written right behind the request (pipelined frames).
    pub fn connect_with(
        mut stream: S,
        path: &str,
        deflate: Option<DeflateConfig>,
        extra: &[u8],
    ) -> Result<Self, Refused> {
        let mut rng = fastrand::Rng::new();
        let hs = ClientHandshake::random(&mut rng, deflate);
        let mut out = Vec::new();
        hs.write_request("localhost", path, &mut out);
        out.extend_from_slice(extra);
        stream.write_all(&out).expect("send the upgrade request");
        let (head, rest) = read_head(&mut stream).map_err(|e| Refused { status: 0, head: e.to_string() })?;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        response.parse(&head).expect("a response head");
        let status = response.code.unwrap_or(0);
        let text = String::from_utf8_lossy(&head).into_owned();
        let agreed = hs
            .verify(status, response.headers.iter().map(|h| (h.name, h.value)))
            .map_err(|_| Refused { status, head: text })?;
        let session = ClientSession::new(&Config { max_message: 64 << 20 }, agreed.as_ref(), rng, Instant::now());
        let mut client = WsClient { stream, session, ended: None };
        if !rest.is_empty() {
            client.feed(&rest);
        }
        Ok(client)
    }

    fn feed(&mut self, input: &[u8]) {
        let mut out = Vec::new();
        let verdict = self.session.receive(input, Instant::now(), &mut out);
        if !out.is_empty() {
            let _ = self.stream.write_all(&out);
        }
        if let Verdict::Close(closing) = verdict {
            self.ended.get_or_insert(Ended::Closed(closing));
        }
    }

    pub fn send(&mut self, kind: Kind, payload: &[u8]) {
        let mut out = Vec::new();
        assert!(self.session.send(kind, payload, &mut out), "the session is open");
        self.stream.write_all(&out).expect("send a message");
    }

    /// Octets as they are (hand-made frames).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Start the close handshake with `code`.
    pub fn close(&mut self, code: u16) {
        let mut out = Vec::new();
        self.session.initiate_close(code, &mut out);
        self.stream.write_all(&out).expect("send a close");
    }

    /// The next message, or how the connection ended.
    pub fn message(&mut self) -> Result<Message, Ended> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            if let Some(message) = self.session.poll_message() {
                return Ok(message);
            }
            if let Some(ended) = &self.ended {
                return Err(ended.clone());
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(Ended::Socket("EOF".into())),
                Ok(n) => {
                    let input = buf[..n].to_vec();
                    self.feed(&input);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Ended::Socket(e.to_string())),
            }
        }
    }

    /// Send `payload` as a message of `kind` and check the echo.
    pub fn echo(&mut self, kind: Kind, payload: &[u8]) {
        self.send(kind, payload);
        let got = self.message().unwrap_or_else(|e| panic!("no echo of {} octets: {e:?}", payload.len()));
        assert_eq!(got.kind, kind);
        assert!(got.data == payload, "echo of {} octets differs ({} back)", payload.len(), got.data.len());
    }

    /// Read until the connection ends: how it ended (messages are dropped).
    pub fn ending(&mut self) -> Ended {
        loop {
            if let Err(ended) = self.message() {
                return ended;
            }
        }
    }

    /// Read until the socket's EOF (after the close handshake), within `limit`: whether it came.
    pub fn eof_within(&mut self, limit: Duration) -> bool
    where
        S: AsTimeout,
    {
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            self.stream.timeout(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)));
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        false
    }
}

/// A stream whose read timeout can be set.
pub trait AsTimeout {
    fn timeout(&self, limit: Duration);
}

impl AsTimeout for std::net::TcpStream {
    fn timeout(&self, limit: Duration) {
        let _ = self.set_read_timeout(Some(limit));
    }
}

impl AsTimeout for std::os::unix::net::UnixStream {
    fn timeout(&self, limit: Duration) {
        let _ = self.set_read_timeout(Some(limit));
    }
}

/// A client frame made by hand: `first` (FIN, RSV, opcode), `payload`, masked with `mask` if any.
pub fn frame(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![first];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(bit | n as u8),
        n if n <= 0xffff => {
            f.push(bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            f.extend_from_slice(&key);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// `wstest`: `SOCKSCALE_WSTEST` (which `.ci/run` sets), else pyenv's Python 2.7, else PATH — but
/// not pyenv's shim, which fails while 2.7 is not the selected version.
pub fn wstest() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("SOCKSCALE_WSTEST").map(PathBuf::from).into_iter().collect();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".pyenv")));
    if let Some(Ok(versions)) = pyenv.map(|root| std::fs::read_dir(root.join("versions"))) {
        let mut pythons: Vec<PathBuf> = versions
            .filter_map(Result::ok)
            .filter(|v| v.file_name().to_string_lossy().starts_with("2.7"))
            .map(|v| v.path().join("bin/wstest"))
            .collect();
        pythons.sort();
        candidates.extend(pythons.into_iter().rev());
    }
    if let Some(path) = std::env::var_os("PATH") {
        let dirs = std::env::split_paths(&path).filter(|dir| !dir.ends_with("shims"));
        candidates.extend(dirs.map(|dir| dir.join("wstest")));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        "wstest not found (install: python2.7 -m pip install setuptools==44.0.0 autobahntestsuite)".to_owned()
    })
}
