//! What a load run does, as the library takes it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use socket2::SockAddr;

/// Connects in flight per thread: more would only overflow the server's backlog and turn
/// into SYN retransmissions that look like slow connects.
pub const MAX_PENDING_CONNECTS: usize = 512;

/// Where a run connects: an IP address and port, or the path of a Unix stream socket
/// (`--unix-socket`, curl's and oha's flag), which then needs no port, source address or
/// TCP option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Inet(SocketAddr),
    Unix(PathBuf),
}

impl Endpoint {
    /// The address to connect(2) to.
    pub fn sockaddr(&self) -> std::io::Result<SockAddr> {
        match self {
            Endpoint::Inet(addr) => Ok(SockAddr::from(*addr)),
            Endpoint::Unix(path) => SockAddr::unix(path),
        }
    }

    pub fn inet(&self) -> Option<SocketAddr> {
        match self {
            Endpoint::Inet(addr) => Some(*addr),
            Endpoint::Unix(_) => None,
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Endpoint::Unix(_))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Inet(addr) => write!(f, "{addr}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Self {
        Endpoint::Inet(addr)
    }
}

/// The protocol and its parameters.
#[derive(Debug, Clone)]
pub enum Mode {
    /// TCP echo with messages of `msg_len` bytes.
    Echo {
        msg_len: usize,
    },
    Http(HttpRequest),
    /// UDP echo with datagrams of `msg_len` bytes.
    Udp {
        msg_len: usize,
    },
    /// WebSocket echo (`load ws`): messages sent after an upgrade, every echoed one verified.
    Ws(WsRun),
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Echo { .. } => "echo",
            Mode::Http(_) => "http",
            Mode::Udp { .. } => "udp",
            Mode::Ws(_) => "ws",
        }
    }
}

/// A WebSocket run (`load ws ws://HOST:PORT/PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsRun {
    /// The Host header of the upgrade request (`host[:port]`, as the URL gave it).
    pub host: String,
    /// The request target of the upgrade request.
    pub path: String,
    /// The payload of every message, in bytes.
    pub msg_len: usize,
    /// Text messages (their payload valid UTF-8) rather than binary.
    pub text: bool,
    /// Offer permessage-deflate (RFC 7692).
    pub deflate: bool,
    /// Messages in flight per connection.
    pub pipeline: usize,
    /// Send no message: hold the connections open (with `ping`, pinging them).
    pub idle: bool,
    /// Ping every connection this often; a ping unanswered by the next one closes it.
    pub ping: Option<Duration>,
    /// WebSocket over HTTP/2 (RFC 8441): extended CONNECT instead of the HTTP/1.1 upgrade.
    pub http2: bool,
    /// With `http2`: WebSockets per connection, each on its own stream.
    pub streams: usize,
    /// How long the end of the run waits for the server to answer the closes, at least
    /// (`--close-timeout`); none: the wait for what is in flight.
    pub close_timeout: Option<Duration>,
}

/// The one request an HTTP run sends, over and over.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: String,
    pub host: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Keep connections open between requests; otherwise each request gets its own
    /// connection, as ab does without -k.
    pub keepalive: bool,
    /// Requests in flight per connection: pipelined over HTTP/1.1, concurrent streams over
    /// HTTP/2.
    pub pipeline: usize,
    /// Speak HTTP/2: prior knowledge (h2c) in clear, ALPN h2 over TLS.
    pub http2: bool,
    /// Speak HTTP/3 over QUIC (UDP, ALPN h3): `--http3`, an https:// URL.
    pub http3: bool,
    /// HTTP/3 (`--0rtt`): a resumed connection sends its first requests as 0-RTT data, which
    /// an attacker could replay.
    pub zero_rtt: bool,
    /// HTTP/3 (`--quic-max-mtu`): the ceiling of path MTU discovery, and the largest packet the
    /// server is told it may send.
    pub quic_max_mtu: u16,
    /// `https` or `http`: HTTP/2's `:scheme`.
    pub scheme: String,
}

/// `--quic-max-mtu`'s default: quinn's ceiling, Ethernet's 1,500 less the IP and UDP headers
/// with room for IPv6.
pub const DEFAULT_QUIC_MAX_MTU: u16 = 1452;

/// Request headers sockscale writes itself; a user header of the same name (any case)
/// replaces the default rather than being sent beside it.
const DEFAULT_HEADERS: [&str; 4] = ["host", "user-agent", "content-length", "connection"];

impl HttpRequest {
    /// The request's bytes, rendered once. Host, User-Agent, Content-Length and Connection
    /// have defaults; a header given in `headers` takes the place of its default.
    pub fn render(&self) -> Vec<u8> {
        let has = |name: &str| self.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        if !has("host") {
            head.push_str(&format!("Host: {}\r\n", self.host));
        }
        if !has("user-agent") {
            head.push_str("User-Agent: sockscale\r\n");
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !self.body.is_empty() && !has("content-length") && !has("transfer-encoding") {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        if !self.keepalive && !has("connection") {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// The request as every HTTP/2 stream sends it: its header block encoded once (Host becomes
    /// `:authority`; names lower case), and its body.
    pub fn h2_request(&self) -> sockscale_h2::ClientRequest {
        let has = |name: &str| self.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let authority =
            self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("host")).map_or(self.host.as_str(), |(_, v)| v);
        let length = self.body.len().to_string();
        let mut fields: Vec<(&str, &str)> = Vec::new();
        if !has("user-agent") {
            fields.push(("user-agent", "sockscale"));
        }
        for (name, value) in &self.headers {
            if !name.eq_ignore_ascii_case("host") {
                fields.push((name, value));
            }
        }
        if !self.body.is_empty() && !has("content-length") {
            fields.push(("content-length", &length));
        }
        let block = sockscale_h2::encode_request(&self.method, &self.scheme, authority, &self.path, &fields);
        let indexed = sockscale_h2::encode_request_indexed(&self.method, &self.scheme, authority, &self.path, &fields);
        sockscale_h2::ClientRequest {
            block: block.into(),
            indexed: Some(indexed),
            body: self.body.clone(),
            head: self.is_head(),
        }
    }

    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// Refuse a request the server could not read as meant: a method or header that is not
    /// HTTP, a default header given twice, a Content-Length that contradicts the body, or a
    /// Connection header that contradicts `--no-keepalive`.
    pub fn validate(&self) -> Result<(), LoadConfigError> {
        if let Some(why) = method_problem(&self.method) {
            return Err(LoadConfigError::Method { method: self.method.escape_debug().to_string(), why });
        }
        if self.path.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err(LoadConfigError::Path { path: self.path.clone() });
        }
        let header = |name: &str, value: &str, reason: String| LoadConfigError::Header {
            header: format!("{name}: {value}"),
            reason,
        };
        for (i, (name, value)) in self.headers.iter().enumerate() {
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(header(name, value, "the name is not an HTTP header name".into()));
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(header(name, value, "the value holds a line break or NUL".into()));
            }
            let lower = name.to_ascii_lowercase();
            if DEFAULT_HEADERS.contains(&lower.as_str())
                && self.headers[..i].iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                return Err(header(name, value, format!("{name} is given twice; give it once")));
            }
            match lower.as_str() {
                "content-length" => {
                    let given: Option<u64> = value.parse().ok();
                    if given != Some(self.body.len() as u64) {
                        return Err(header(
                            name,
                            value,
                            format!(
                                "the body is {} bytes; drop the header (sockscale sets Content-Length from --body)",
                                self.body.len()
                            ),
                        ));
                    }
                }
                "connection" if !self.keepalive && value.to_ascii_lowercase().contains("keep-alive") => {
                    return Err(header(name, value, "contradicts --no-keepalive; give one or the other".into()));
                }
                // RFC 9113 §8.2.2: connection-specific fields make an HTTP/2 message malformed.
                "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" if self.http3 => {
                    return Err(header(
                        name,
                        value,
                        "HTTP/3 has no connection-specific headers (RFC 9114 §4.2); drop it or leave out --http3"
                            .into(),
                    ));
                }
                "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" if self.http2 => {
                    return Err(header(
                        name,
                        value,
                        "HTTP/2 has no connection-specific headers (RFC 9113 §8.2.2); drop it or leave out --http2"
                            .into(),
                    ));
                }
                "te" if self.http2 && !value.eq_ignore_ascii_case("trailers") => {
                    return Err(header(name, value, "HTTP/2 allows TE only as 'trailers' (RFC 9113 §8.2.2)".into()));
                }
                "te" if self.http3 && !value.eq_ignore_ascii_case("trailers") => {
                    return Err(header(name, value, "HTTP/3 allows TE only as 'trailers' (RFC 9114 §4.2)".into()));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Why `method` cannot be a request's method, if it cannot: it is not an RFC 9110 token (a
/// space, a control character), or it is all digits, which is h2load's `-m N` (streams per
/// connection, `--pipeline` here) sent as a method.
pub fn method_problem(method: &str) -> Option<String> {
    if !method.is_empty() && method.bytes().all(|b| b.is_ascii_digit()) {
        return Some(format!(
            "not an HTTP method: did you mean --pipeline {method}? (-m is the method here, as in oha)"
        ));
    }
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return Some(
            "not an HTTP method: give a token such as GET, POST or PURGE (no spaces or control characters)".into(),
        );
    }
    None
}

/// RFC 9110 `tchar`: what a method or a header name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Which HTTP statuses count as success; every other final status is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedStatuses {
    /// Classes accepted whole: 2 for 2xx.
    classes: Vec<u16>,
    codes: Vec<u16>,
}

impl Default for AcceptedStatuses {
    /// 2xx only, as `curl --fail` and k6's `http_req_failed` count.
    fn default() -> Self {
        AcceptedStatuses { classes: vec![2], codes: Vec::new() }
    }
}

impl AcceptedStatuses {
    pub fn accepts(&self, status: u16) -> bool {
        self.classes.contains(&(status / 100)) || self.codes.contains(&status)
    }

    /// Parse `2xx,3xx,404`: classes and single codes, comma-separated.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut accepted = AcceptedStatuses { classes: Vec::new(), codes: Vec::new() };
        for part in text.split(',').map(str::trim) {
            let bad = || format!("'{part}' is not a status class (2xx) or code (404); give e.g. 2xx,3xx or 2xx,404");
            let bytes = part.as_bytes();
            match bytes {
                [c @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => accepted.classes.push(u16::from(c - b'0')),
                [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => accepted.codes.push(part.parse().map_err(|_| bad())?),
                _ => return Err(bad()),
            }
        }
        Ok(accepted)
    }
}

impl std::fmt::Display for AcceptedStatuses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> =
            self.classes.iter().map(|c| format!("{c}xx")).chain(self.codes.iter().map(u16::to_string)).collect();
        f.write_str(&parts.join(","))
    }
}

/// TLS for a run (https://, `echo --tls`): whom to trust, what to offer, whether to resume.
#[derive(Debug, Clone)]
pub struct LoadTls {
    pub client: sockscale_tls::ClientTls,
    /// The name sent as SNI and checked against the certificate (the URL's host, or `--sni`).
    pub server_name: String,
    /// Reconnects resume an earlier session (`--tls-resume on`); else every handshake is full.
    pub resume: bool,
}

/// How progress is shown while running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Off,
    /// One refreshed line on stderr every second.
    Line,
    /// One JSON line of live counters on stdout every second (a `--procs` child to its parent).
    JsonLines,
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub mode: Mode,
    pub addr: Endpoint,
    /// The target as the user wrote it, for reports.
    pub target: String,
    pub conns: usize,
    pub threads: usize,
    pub duration: Option<Duration>,
    /// Stop after exactly this many requests (HTTP) or messages (echo, UDP).
    pub requests: Option<u64>,
    /// Messages (echo, UDP) in flight per connection; HTTP uses the pipeline depth.
    pub depth: usize,
    /// Connections per block: each block shares one `block_byte_rate`.
    pub block: usize,
    /// New connections per second; None: as fast as the handshakes complete.
    pub connect_rate: Option<f64>,
    /// -r: bytes per second for each block's connections together.
    pub block_byte_rate: Option<f64>,
    /// -R: requests per second in total, open loop.
    pub total_rate: Option<f64>,
    pub nodelay: bool,
    pub sources: Vec<IpAddr>,
    pub connect_timeout: Duration,
    /// A connection that fails this many times in a row after its first attempt (refused,
    /// timed out, or closed before any answer) is given up for the rest of the run; None:
    /// retried for the whole run, backing off.
    pub connect_retries: Option<u32>,
    pub reply_timeout: Duration,
    /// This process's first connection number (for `--procs`), so patterns differ across
    /// processes.
    pub first_conn: u64,
    /// Connections of the whole run, all processes together (for `-r` block sizes).
    pub total_conns: u64,
    pub progress: Progress,
    /// HTTP: the statuses that count as success.
    pub accept_status: AcceptedStatuses,
    /// The options as given, copied into the report.
    pub options: serde_json::Value,
    /// Open every connection before the measured phase: nothing is sent until every
    /// connection has connected or failed its first attempt, and the measured phase (its
    /// duration, latency, CPU) begins when `run_with`'s hook returns.
    pub connect_first: bool,
    /// Exchanges each connection makes; after them it stays open and idle until the run ends
    /// (with no -d or -n, the run ends when every connection has made them).
    pub per_conn: Option<u64>,
    /// TLS over every connection; None: plaintext.
    pub tls: Option<LoadTls>,
    /// `load udp --udp-gso`, `--udp-gro`: the segmentation offloads to ask the kernel for.
    pub udp_offload: sockscale_sys::udp::Offload,
    /// `--hdr-log`: write the latency as an HdrHistogram interval log here, one histogram a
    /// second (see `hlog`).
    pub hdr_log: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoadConfigError {
    #[error("--no-keepalive (a new connection for every request) is HTTP/1.1's; an HTTP/2 connection carries many streams: leave out one of --no-keepalive and --http2")]
    Http2WithoutKeepalive,
    #[error("-{flag} must be at least 1")]
    Zero { flag: &'static str },
    #[error("-l must be at least {min} bytes for UDP (each datagram carries a sequence number)")]
    UdpTooShort { min: usize },
    #[error("-l {len} is more than a UDP datagram can carry over {family} ({max} bytes)")]
    UdpTooLong { len: usize, max: usize, family: &'static str },
    #[error("give a duration (-d), a request count (-n) or exchanges per connection (--per-conn)")]
    NoEnd,
    #[error("--per-conn counts exchanges on a kept-alive connection; without keep-alive every connection makes one (drop --no-keepalive or --per-conn)")]
    PerConnWithoutKeepalive,
    #[error("{flag} must be a positive number")]
    Rate { flag: &'static str },
    #[error("{flag} must be longer than 0 s")]
    ZeroDuration { flag: &'static str },
    #[error("-m '{method}' is {why}")]
    Method { method: String, why: String },
    #[error("the URL path '{path}' holds a space or control character; percent-encode it (%20)")]
    Path { path: String },
    #[error("-H '{header}': {reason}")]
    Header { header: String, reason: String },
    #[error("--idle sends no message: -n, -R and --per-conn count messages (leave them out, or --idle)")]
    IdleSendsNothing,
    #[error("--idle holds the connections until -d ends the run: give -d")]
    IdleWithoutDuration,
    #[error("--http3: {why}")]
    Http3 { why: &'static str },
    #[error("{flag} does not apply to --unix-socket: {why}")]
    NotForUnix { flag: &'static str, why: &'static str },
}

/// The largest UDP payload: 65,535 less the UDP header and, over IPv4, the IPv4 header.
const MAX_UDP_PAYLOAD_V4: usize = 65_507;
const MAX_UDP_PAYLOAD_V6: usize = 65_527;

impl LoadConfig {
    /// Whether the run speaks QUIC (`load http --http3`): its UDP sockets never fragment.
    pub fn quic(&self) -> bool {
        matches!(&self.mode, Mode::Http(h) if h.http3)
    }

    pub fn validate(&self) -> Result<(), LoadConfigError> {
        for (flag, v) in [("c", self.conns), ("t", self.threads), ("-depth", self.depth), ("-block", self.block)] {
            if v == 0 {
                return Err(LoadConfigError::Zero { flag });
            }
        }
        if self.requests == Some(0) {
            return Err(LoadConfigError::Zero { flag: "n" });
        }
        match &self.mode {
            Mode::Echo { msg_len } if *msg_len == 0 => return Err(LoadConfigError::Zero { flag: "l" }),
            Mode::Udp { msg_len } if *msg_len < crate::client::UdpClient::MIN_LEN => {
                return Err(LoadConfigError::UdpTooShort { min: crate::client::UdpClient::MIN_LEN })
            }
            Mode::Udp { .. } if self.addr.is_unix() => {
                return Err(LoadConfigError::NotForUnix { flag: "udp", why: "UDP echo needs an IP address" })
            }
            Mode::Udp { msg_len } => {
                let v4 = self.addr.inet().is_some_and(|a| a.is_ipv4());
                let (max, family) = if v4 { (MAX_UDP_PAYLOAD_V4, "IPv4") } else { (MAX_UDP_PAYLOAD_V6, "IPv6") };
                if *msg_len > max {
                    return Err(LoadConfigError::UdpTooLong { len: *msg_len, max, family });
                }
            }
            Mode::Http(h) if h.pipeline == 0 => return Err(LoadConfigError::Zero { flag: "-pipeline" }),
            Mode::Http(h) if h.http2 && !h.keepalive => return Err(LoadConfigError::Http2WithoutKeepalive),
            Mode::Http(h) if h.http3 && h.http2 => {
                return Err(LoadConfigError::Http3 { why: "give one of --http2 and --http3" })
            }
            Mode::Http(h) if h.http3 && self.tls.is_none() => {
                return Err(LoadConfigError::Http3 { why: "QUIC is always encrypted: give an https:// URL" })
            }
            Mode::Http(h) if h.http3 && self.addr.is_unix() => {
                return Err(LoadConfigError::Http3 { why: "QUIC runs over UDP: leave out --unix-socket" })
            }
            Mode::Http(h) => h.validate()?,
            Mode::Ws(w) if w.pipeline == 0 => return Err(LoadConfigError::Zero { flag: "-pipeline" }),
            Mode::Ws(w) if w.streams == 0 => return Err(LoadConfigError::Zero { flag: "-streams" }),
            Mode::Ws(w) if w.ping.is_some_and(|p| p.is_zero()) => {
                return Err(LoadConfigError::ZeroDuration { flag: "--ping" })
            }
            Mode::Ws(w)
                if w.idle && (self.requests.is_some() || self.per_conn.is_some() || self.total_rate.is_some()) =>
            {
                return Err(LoadConfigError::IdleSendsNothing)
            }
            Mode::Ws(w) if w.idle && self.duration.is_none() => return Err(LoadConfigError::IdleWithoutDuration),
            _ => {}
        }
        if self.addr.is_unix() && !self.sources.is_empty() {
            return Err(LoadConfigError::NotForUnix {
                flag: "--source",
                why: "a Unix socket has no source address (and no ephemeral ports to run out of)",
            });
        }
        if self.per_conn == Some(0) {
            return Err(LoadConfigError::Zero { flag: "-per-conn" });
        }
        if self.per_conn.is_some() && matches!(&self.mode, Mode::Http(h) if !h.keepalive) {
            return Err(LoadConfigError::PerConnWithoutKeepalive);
        }
        if self.duration.is_none() && self.requests.is_none() && self.per_conn.is_none() {
            return Err(LoadConfigError::NoEnd);
        }
        for (flag, d) in [
            ("-d", self.duration),
            ("--connect-timeout", Some(self.connect_timeout)),
            ("--timeout", Some(self.reply_timeout)),
        ] {
            if d.is_some_and(|d| d.is_zero()) {
                return Err(LoadConfigError::ZeroDuration { flag });
            }
        }
        for (flag, rate) in
            [("--connect-rate", self.connect_rate), ("-r", self.block_byte_rate), ("-R", self.total_rate)]
        {
            if rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
                return Err(LoadConfigError::Rate { flag });
            }
        }
        Ok(())
    }

    /// Datagrams that may arrive together on one socket, which decides whether GRO can
    /// coalesce anything: `load udp`'s `--depth`; under HTTP/3 many (a 4 KiB response is three
    /// packets, and a connection has `--pipeline` of them in flight).
    pub fn datagrams_in_flight(&self) -> usize {
        if self.quic() {
            usize::MAX
        } else {
            self.depth
        }
    }

    /// Exchanges in flight allowed per connection.
    pub fn per_conn_depth(&self) -> usize {
        match &self.mode {
            Mode::Http(h) => h.pipeline,
            Mode::Ws(w) => w.pipeline,
            _ => self.depth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rendering() {
        let mut r = HttpRequest {
            method: "POST".into(),
            host: "h:80".into(),
            path: "/x".into(),
            headers: vec![("X-A".into(), "1".into())],
            body: Bytes::from_static(b"abc"),
            keepalive: false,
            pipeline: 1,
            http2: false,
            http3: false,
            zero_rtt: false,
            quic_max_mtu: DEFAULT_QUIC_MAX_MTU,
            scheme: "http".into(),
        };
        assert_eq!(
            String::from_utf8(r.render()).unwrap(),
            "POST /x HTTP/1.1\r\nHost: h:80\r\nUser-Agent: sockscale\r\nX-A: 1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
        );
        r.keepalive = true;
        r.body = Bytes::new();
        assert!(!String::from_utf8(r.render()).unwrap().contains("Connection"));
    }

    fn get(headers: &[(&str, &str)]) -> HttpRequest {
        HttpRequest {
            method: "GET".into(),
            host: "h:80".into(),
            path: "/".into(),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: Bytes::new(),
            keepalive: true,
            pipeline: 1,
            http2: false,
            http3: false,
            zero_rtt: false,
            quic_max_mtu: DEFAULT_QUIC_MAX_MTU,
            scheme: "http".into(),
        }
    }

    #[test]
    fn an_http2_request_is_encoded_once_with_host_as_authority_and_refuses_connection_headers() {
        let mut r = get(&[("Host", "example.test"), ("X-A", "1")]);
        r.http2 = true;
        r.method = "POST".into();
        r.body = Bytes::from_static(b"abc");
        let request = r.h2_request();
        let mut list = sockscale_h2::HeaderList::with_limit(1 << 16);
        sockscale_h2::hpack::Decoder::new(4096).decode(&request.block, &mut list).unwrap();
        let fields: Vec<(String, String)> = list
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        let want = [
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", "example.test"),
            (":path", "/"),
            ("user-agent", "sockscale"),
            ("x-a", "1"),
            ("content-length", "3"),
        ];
        assert_eq!(fields, want.map(|(n, v)| (n.to_string(), v.to_string())));
        assert_eq!(&request.body[..], b"abc");
        assert!(r.validate().is_ok());
        for bad in ["Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade"] {
            let mut r = get(&[(bad, "x")]);
            r.http2 = true;
            assert!(r.validate().is_err(), "{bad} is refused over HTTP/2");
        }
    }

    #[test]
    fn an_http3_request_refuses_connection_specific_headers() {
        for bad in ["Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"] {
            let mut r = get(&[(bad, "x")]);
            r.http3 = true;
            let err = r.validate().unwrap_err().to_string();
            assert!(err.contains("HTTP/3"), "{bad}: {err}");
        }
        let mut te = get(&[("TE", "gzip")]);
        te.http3 = true;
        assert!(te.validate().is_err());
        let mut ok = get(&[("TE", "trailers"), ("X-A", "1")]);
        ok.http3 = true;
        assert_eq!(ok.validate(), Ok(()));
    }

    /// Parse the rendered request with httparse and return its header names, lowercased.
    fn sent_header_names(r: &HttpRequest) -> Vec<String> {
        let bytes = r.render();
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(&bytes).unwrap().is_complete());
        req.headers.iter().map(|h| h.name.to_ascii_lowercase()).collect()
    }

    #[test]
    fn a_user_header_replaces_the_default_of_the_same_name() {
        let r = get(&[("host", "example.test"), ("User-Agent", "me")]);
        let names = sent_header_names(&r);
        assert_eq!(names.iter().filter(|n| *n == "host").count(), 1, "{names:?}");
        assert_eq!(names.iter().filter(|n| *n == "user-agent").count(), 1, "{names:?}");
        let text = String::from_utf8(r.render()).unwrap();
        assert!(text.contains("host: example.test\r\n") && !text.contains("h:80"), "{text}");
        let mut r = get(&[("Connection", "close")]);
        r.keepalive = false;
        assert_eq!(sent_header_names(&r).iter().filter(|n| *n == "connection").count(), 1);
    }

    #[test]
    fn requests_the_server_cannot_read_as_meant_are_refused() {
        assert!(get(&[("Host", "a"), ("Host", "b")]).validate().unwrap_err().to_string().contains("twice"));
        let err = get(&[("Content-Length", "5")]).validate().unwrap_err().to_string();
        assert!(err.contains("Content-Length: 5") && err.contains("0 bytes"), "{err}");
        let mut with_body = get(&[("Content-Length", "3")]);
        with_body.body = Bytes::from_static(b"abc");
        assert_eq!(with_body.validate(), Ok(()));
        assert!(get(&[("X-A", "1\r\nX-B: 2")]).validate().is_err(), "header injection");
        assert!(get(&[("Bad Name", "1")]).validate().is_err());
        let mut close = get(&[("Connection", "keep-alive")]);
        close.keepalive = false;
        assert!(close.validate().unwrap_err().to_string().contains("--no-keepalive"));
        let mut method = get(&[]);
        method.method = "GET /x".into();
        assert!(matches!(method.validate(), Err(LoadConfigError::Method { .. })));
        method.method = "16".into();
        assert!(method.validate().unwrap_err().to_string().contains("did you mean --pipeline 16?"));
        for ok in ["GET", "PURGE", "M-SEARCH", "GET2"] {
            assert_eq!(method_problem(ok), None, "{ok}");
        }
        for bad in ["", "G T", "GET\r\n", "\u{7f}", "GÉT"] {
            assert!(method_problem(bad).is_some_and(|why| why.contains("token")), "{bad:?}");
        }
        let mut path = get(&[]);
        path.path = "/a b".into();
        assert!(matches!(path.validate(), Err(LoadConfigError::Path { .. })));
        assert_eq!(get(&[("X-Trace", "1"), ("x-trace", "2")]).validate(), Ok(()), "other headers may repeat");
    }

    #[test]
    fn accepted_statuses() {
        let default = AcceptedStatuses::default();
        assert!(default.accepts(200) && default.accepts(299));
        assert!(!default.accepts(301) && !default.accepts(404) && !default.accepts(500));
        let more = AcceptedStatuses::parse("2xx, 3XX,404").unwrap();
        assert!(more.accepts(302) && more.accepts(404) && !more.accepts(403));
        assert_eq!(more.to_string(), "2xx,3xx,404");
        for bad in ["", "2x", "600", "abc", "2xx,", "99"] {
            assert!(AcceptedStatuses::parse(bad).is_err(), "{bad}");
        }
    }
}
