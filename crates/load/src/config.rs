//! What a load run does, as the library takes it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;

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
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Echo { .. } => "echo",
            Mode::Http(_) => "http",
            Mode::Udp { .. } => "udp",
        }
    }
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
    /// Requests in flight per connection.
    pub pipeline: usize,
}

impl HttpRequest {
    /// The request's bytes, rendered once.
    pub fn render(&self) -> Vec<u8> {
        let mut head = format!("{} {} HTTP/1.1\r\nHost: {}\r\n", self.method, self.path, self.host);
        let has = |name: &str| self.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
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

    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }
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
    pub addr: SocketAddr,
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
    pub reply_timeout: Duration,
    /// This process's first connection number (for `--procs`), so patterns differ across
    /// processes.
    pub first_conn: u64,
    /// Connections of the whole run, all processes together (for `-r` block sizes).
    pub total_conns: u64,
    pub progress: Progress,
    /// The options as given, copied into the report.
    pub options: serde_json::Value,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoadConfigError {
    #[error("-{flag} must be at least 1")]
    Zero { flag: &'static str },
    #[error("-l must be at least {min} bytes for UDP (each datagram carries a sequence number)")]
    UdpTooShort { min: usize },
    #[error("give a duration (-d) or a request count (-n)")]
    NoEnd,
    #[error("{flag} must be a positive number")]
    Rate { flag: &'static str },
}

impl LoadConfig {
    pub fn validate(&self) -> Result<(), LoadConfigError> {
        for (flag, v) in [("c", self.conns), ("t", self.threads), ("-depth", self.depth), ("-block", self.block)] {
            if v == 0 {
                return Err(LoadConfigError::Zero { flag });
            }
        }
        match &self.mode {
            Mode::Echo { msg_len } if *msg_len == 0 => return Err(LoadConfigError::Zero { flag: "l" }),
            Mode::Udp { msg_len } if *msg_len < crate::client::UdpClient::MIN_LEN => {
                return Err(LoadConfigError::UdpTooShort { min: crate::client::UdpClient::MIN_LEN })
            }
            Mode::Http(h) if h.pipeline == 0 => return Err(LoadConfigError::Zero { flag: "-pipeline" }),
            _ => {}
        }
        if self.duration.is_none() && self.requests.is_none() {
            return Err(LoadConfigError::NoEnd);
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

    /// Exchanges in flight allowed per connection.
    pub fn per_conn_depth(&self) -> usize {
        match &self.mode {
            Mode::Http(h) => h.pipeline,
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
        };
        assert_eq!(
            String::from_utf8(r.render()).unwrap(),
            "POST /x HTTP/1.1\r\nHost: h:80\r\nUser-Agent: sockscale\r\nX-A: 1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
        );
        r.keepalive = true;
        r.body = Bytes::new();
        assert!(!String::from_utf8(r.render()).unwrap().contains("Connection"));
    }
}
