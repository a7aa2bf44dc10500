//! Every policy of the server, as one plain struct with the defaults the CLI documents.
//!
//! The policies come from the seeds: accept watermarks (`accept_batch`, `backlog`), zero-byte
//! receives (buffers taken only when readable), page-aligned locked buffers, capped sends with
//! a flood cut-off, idle and stale-connection timeouts, refusing when busy (`max_conns`), and
//! backing off when descriptors or memory run out.

use std::fmt;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sockscale_proto::http::{HttpConfig, ResponseBody};
use sockscale_sys as sys;
/// `--udp-gso`, `--udp-gro`.
pub use sockscale_sys::udp::Offload as UdpOffload;

use sockscale_tls::ServerOptions;

use crate::body::SendfileMode;
use crate::model::{Model, Policy};
use crate::policy::{ActiveConfig, Limits, StormConfig};

/// What the server speaks.
#[derive(Debug, Clone)]
pub enum Service {
    Echo,
    Http(Arc<HttpConfig>),
    UdpEcho,
}

impl Service {
    pub fn is_udp(&self) -> bool {
        matches!(self, Service::UdpEcho)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Service::Echo => "echo",
            Service::Http(_) => "http",
            Service::UdpEcho => "udp",
        }
    }
}

/// Where the server listens: an IP address and port (TCP, or UDP with `--proto udp`), or the
/// path of a Unix domain stream socket (`unix:PATH`). Parses from `127.0.0.1:8080`,
/// `[::1]:0` or `unix:/run/app.sock`; prints the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Inet(SocketAddr),
    Unix(PathBuf),
}

/// The longest path a Unix socket address holds: `sun_path` is 108 bytes, with its NUL.
pub const UNIX_PATH_MAX: usize = 107;

/// The socket file's mode when none is given (`--unix-mode`): owner and group may connect
/// (connecting needs write permission on the file), others may not. A TCP port on 127.0.0.1
/// is open to every local user; a socket file can be narrower, and 0660 is what php-fpm's
/// `listen.mode` and docker's socket use.
pub const DEFAULT_UNIX_MODE: u32 = 0o660;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ListenAddrError(String);

impl ListenAddr {
    /// The IP address and port, unless this is a Unix socket.
    pub fn inet(&self) -> Option<SocketAddr> {
        match self {
            ListenAddr::Inet(addr) => Some(*addr),
            ListenAddr::Unix(_) => None,
        }
    }

    /// The socket file's path, for a Unix socket.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            ListenAddr::Inet(_) => None,
            ListenAddr::Unix(path) => Some(path),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, ListenAddr::Unix(_))
    }
}

/// A path a Unix socket can be bound to: not empty, no NUL, short enough for `sun_path`.
pub fn check_unix_path(path: &Path) -> Result<(), String> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err("unix: needs a path, such as unix:/run/sockscale.sock".into());
    }
    if bytes.contains(&0) {
        return Err(format!("unix:{} holds a NUL byte", path.display()));
    }
    if bytes.len() > UNIX_PATH_MAX {
        return Err(format!(
            "unix:{}: the path is {} bytes, and a Unix socket's path holds at most {UNIX_PATH_MAX} \
             (sun_path is 108 bytes with its NUL); use a shorter path, or a relative one",
            path.display(),
            bytes.len()
        ));
    }
    Ok(())
}

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(path) = text.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            check_unix_path(&path).map_err(ListenAddrError)?;
            return Ok(ListenAddr::Unix(path));
        }
        if text.starts_with("unixgram:") {
            return Err(ListenAddrError(format!("'{text}': {UNIXGRAM_REFUSED}")));
        }
        ListenAddr::parse_inet(text).map(ListenAddr::Inet)
    }
}

/// The forms `--listen` takes, for the one line a mistake gets.
const LISTEN_FORMS: &str = "give PORT or :PORT (every IPv4 address), IP:PORT (127.0.0.1:8080, \
     0.0.0.0:8080), [IPv6]:PORT ([::]:8080, [::1]:8080), HOST:PORT (localhost:0) or unix:PATH; \
     port 0 picks a free port";

impl ListenAddr {
    /// An IP address and port to listen on, in the forms servers take: `8080` and `:8080`
    /// (every IPv4 address, 0.0.0.0, as nginx's `listen 8080`), `IP:PORT`, `[IPv6]:PORT`
    /// (`[::]` is every IPv6 address, and every IPv4 one too unless the
    /// `net.ipv6.bindv6only` sysctl says otherwise), or `HOST:PORT`, resolved now, its first
    /// IPv4 address taken if it has one (`localhost:0`).
    pub fn parse_inet(text: &str) -> Result<SocketAddr, ListenAddrError> {
        let refuse = |why: String| ListenAddrError(format!("'{text}' {why}: {LISTEN_FORMS}"));
        let port_of = |port: &str| {
            port.parse::<u16>()
                .map_err(|_| refuse(format!("has no port number ('{port}' is not a number from 0 to 65535)")))
        };
        if text.is_empty() {
            return Err(refuse("is empty".into()));
        }
        let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if all_digits(text) {
            return Ok(SocketAddr::from(([0, 0, 0, 0], port_of(text)?)));
        }
        if text.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(refuse("is an IPv6 address without brackets or port".into()));
        }
        if let Some(port) = text.strip_prefix(':') {
            return Ok(SocketAddr::from(([0, 0, 0, 0], port_of(port)?)));
        }
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(addr);
        }
        if let Some(rest) = text.strip_prefix('[') {
            let Some((ip, after)) = rest.split_once(']') else {
                return Err(refuse("has no closing ']'".into()));
            };
            if ip.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(refuse(format!("holds '{ip}', not an IPv6 address")));
            }
            return match after.strip_prefix(':') {
                Some(port) => Err(refuse(format!("has no port number ('{port}' is not a number from 0 to 65535)"))),
                None => Err(refuse("has no port".into())),
            };
        }
        if text.parse::<std::net::Ipv4Addr>().is_ok() {
            return Err(refuse("has no port".into()));
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(refuse("has no port".into()));
        };
        if host.contains(':') {
            return Err(refuse("is not HOST:PORT (an IPv6 address goes in brackets)".into()));
        }
        let port = port_of(port)?;
        let addrs = resolve_host(host, port).map_err(ListenAddrError)?;
        Ok(addrs.iter().find(|a| a.is_ipv4()).unwrap_or(&addrs[0]).to_owned())
    }
}

/// The addresses of `host` (a name or an IP address) at `port`, at least one; the error is one
/// line naming the host and saying why, as `cannot resolve host 'x': Name or service not known`.
pub fn resolve_host(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
        return Err(format!("'{host}' is not a host name"));
    }
    let addrs: Vec<SocketAddr> = match (host, port).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            // The resolver's own words, without std's prefix that says nothing more.
            let text = e.to_string();
            let why = text.strip_prefix("failed to lookup address information: ").unwrap_or(&text);
            return Err(format!("cannot resolve host '{host}': {why}"));
        }
    };
    if addrs.is_empty() {
        return Err(format!("cannot resolve host '{host}': it has no address"));
    }
    Ok(addrs)
}

/// Why `--proto udp` takes no Unix socket.
const UNIXGRAM_REFUSED: &str = "Unix datagram sockets are not served: a client's datagram gets \
     an answer only if the client bound a socket file of its own; UDP echo needs IP:PORT";

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Inet(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        ListenAddr::Inet(addr)
    }
}

/// How a `serve --procs` parent steers the QUIC packets of the port's SO_REUSEPORT group
/// (`sockscale_sys::reuseport`), as it tells a worker (`Config::udp_steering`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSteering {
    /// By connection ID: this worker's inherited sockets are the group's from this index on.
    From(u8),
    /// The kernel refused the steering program (the parent said so): the hash alone.
    Refused,
}

/// How the threads of a multi-threaded model share the listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerMode {
    /// One SO_REUSEPORT listener per thread; the kernel spreads connections by hash.
    ReusePort,
    /// One listener in every thread's epoll with EPOLLEXCLUSIVE, so one waiter wakes per
    /// connection.
    Exclusive,
}

/// `--body FILE`, `--sendfile`, `--sendfile-min`: where the HTTP response body is and how it
/// is sent (`BodyFile::load`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodySource {
    pub path: PathBuf,
    pub sendfile: SendfileMode,
    /// `--sendfile auto` sends a body this long or longer from the file.
    pub sendfile_min: u64,
    /// Server processes that each hold their own copy of a body kept in memory (`--procs`).
    pub processes: u64,
}

/// `--quic-retry`: when the QUIC endpoint answers a new connection's Initial with a stateless
/// Retry (RFC 9000 §8.1.2), so that the client proves its address before the server spends a
/// handshake on it. The endpoint's own word for it.
pub use sockscale_proto::quic::RetryMode as QuicRetry;

/// `--http3` and its options: HTTP/3 over QUIC on UDP at the TCP listener's port number. The
/// policies QUIC shares with TCP are not repeated here: [`Config::http3_limits`] gathers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http3Config {
    /// `--quic-retry`.
    pub retry: QuicRetry,
    /// `--quic-0rtt`: accept 0-RTT requests, which an attacker may replay.
    pub zero_rtt: bool,
    /// `--max-streams`: request streams open at once per connection (as HTTP/2's
    /// SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_streams: u32,
    /// `--quic-max-mtu`: the largest packet path MTU discovery probes for.
    pub max_mtu: u16,
}

/// Without path MTU discovery a QUIC packet is 1,200 bytes; with it, probed up to
/// `--quic-max-mtu`, by default this: quinn's own ceiling, Ethernet's 1,500 less the IP and UDP
/// headers, with room for IPv6.
pub const DEFAULT_QUIC_MAX_MTU: u16 = 1452;

impl Default for Http3Config {
    fn default() -> Self {
        Http3Config { retry: QuicRetry::default(), zero_rtt: false, max_streams: 128, max_mtu: DEFAULT_QUIC_MAX_MTU }
    }
}

/// The limits of an HTTP/3 endpoint, all from the flags TCP uses for the same policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http3Limits {
    /// `--max-conns`: QUIC connections beyond it are refused.
    pub max_conns: usize,
    /// `--idle-timeout`: QUIC's max_idle_timeout.
    pub idle_timeout: Duration,
    /// `--max-streams`: concurrent bidirectional (request) streams per connection.
    pub max_streams: u32,
    /// `--max-handshakes`: handshakes in progress at once; None: unbounded.
    pub max_handshakes: Option<usize>,
    /// `--header-timeout`: a handshake (as a request head) must complete within it.
    pub handshake_timeout: Duration,
    /// `--drain-timeout`: how long a drain waits for requests in flight after GOAWAY.
    pub drain_timeout: Duration,
    pub retry: QuicRetry,
    pub zero_rtt: bool,
    pub max_mtu: u16,
}

/// `--tls-cert`, `--tls-key` and the TLS options: the certificate chain and key files, read
/// when the server starts (`ServerTls::from_pem_files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub options: ServerOptions,
}

/// What the server is asked to do, as plain data: addresses, paths, numbers and modes, as the
/// flags said. The files it names are read when the server starts (`Resources::load`).
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: ListenAddr,
    /// The socket file's permission bits, for a `unix:` listener (`--unix-mode`).
    pub unix_mode: u32,
    pub service: Service,
    pub model: Model,
    /// Worker threads, for the models that have a fixed number.
    pub threads: usize,
    pub listener_mode: ListenerMode,
    /// Bytes read from one connection before yielding to the others.
    pub read_budget: usize,
    /// Connections beyond this are accepted and closed at once (HTTP gets a 503 first).
    pub max_conns: usize,
    pub backlog: u32,
    /// Accepts per wake-up of the listener: the analogue of the AcceptEx watermarks.
    pub accept_batch: usize,
    pub idle_timeout: Duration,
    /// Close a connection that has sent nothing this long after it was accepted.
    pub first_data_timeout: Option<Duration>,
    /// TCP_DEFER_ACCEPT on the listener: a connection reaches the server only with its first
    /// bytes, or after this long.
    pub defer_accept: Option<Duration>,
    /// Output waiting for a client beyond this stops the server reading from it.
    pub max_pending_send: usize,
    /// A client over `max_pending_send`, or whose socket has taken none of its output, for this
    /// long is disconnected.
    pub send_timeout: Duration,
    /// Size of each receive buffer; a multiple of the page size.
    pub buffer_size: usize,
    /// Receive buffers in the process, shared out among the workers.
    pub pool_buffers: usize,
    /// mlock the buffer pool.
    pub lock_memory: bool,
    pub sndbuf: Option<usize>,
    pub rcvbuf: Option<usize>,
    pub nodelay: bool,
    /// How long a draining server waits for in-flight responses before closing the rest.
    pub drain_timeout: Duration,
    /// Serve Prometheus metrics here.
    pub metrics: Option<SocketAddr>,
    /// Stack size of threads in the thread-per-connection models.
    pub stack_size: usize,
    /// Sends in flight per connection, for the completion models.
    pub max_outstanding_sends: usize,
    /// Thread pool: connections that may wait for a worker, per worker, before new ones are
    /// refused.
    pub queue_depth: usize,
    /// The port is shared with sibling server processes (`serve --procs`): bind with
    /// SO_REUSEPORT and skip the busy-port probe, which the parent process has done.
    pub shared_port: bool,
    /// A listening Unix socket inherited from a `serve --procs` parent, which bound it: served
    /// instead of binding `listen` (whose path it is).
    pub listener_fd: Option<std::os::fd::RawFd>,
    /// The UDP sockets inherited from a `serve --procs` parent, which bound them (SO_REUSEPORT)
    /// at `listen`'s port, in the order they joined the port's group: this worker's UDP sockets
    /// (`--proto udp`'s, or `--http3`'s), as many as its model serves, so every socket of the
    /// group is one a worker serves and the group's order is the parent's.
    pub udp_fds: Vec<std::os::fd::RawFd>,
    /// `--http3` in a `serve --procs` worker: how the parent steers the port's group.
    pub udp_steering: Option<GroupSteering>,
    /// `--http3` in a `serve --procs` worker: the QUIC keys every process of the server
    /// shares (stateless reset, Retry and NEW_TOKEN tokens); `None`: new random ones.
    pub quic_keys: Option<sockscale_proto::quic::QuicKeys>,
    /// `--body FILE` and how to send it: the HTTP service's response body, read or opened
    /// when the server starts (`Resources::load`).
    pub body: Option<BodySource>,
    /// `--abort-storm RATE` and `--abort-storm-resume N`: pause accepting while connections
    /// are aborted faster than RATE a second, until fewer than N are established.
    pub abort_storm: Option<StormConfig>,
    /// `--active-set N`, `--active-grace`, `--active-turn`: read from only N connections at a
    /// time, in FIFO order (the seeds' high-throughput strategy).
    pub active_set: Option<ActiveConfig>,
    /// `--tls-cert`, `--tls-key`: serve TLS with this certificate (read and checked when the
    /// server starts, before anything listens: `Resources::load`).
    pub tls: Option<TlsFiles>,
    /// `--udp-gso`, `--udp-gro`: the UDP segmentation offloads to ask the kernel for.
    pub udp_offload: UdpOffload,
    /// `--http3`: also serve HTTP/3 over QUIC on UDP at the TCP port's number.
    pub http3: Option<Http3Config>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: ListenAddr::Inet(SocketAddr::from(([127, 0, 0, 1], 8080))),
            unix_mode: DEFAULT_UNIX_MODE,
            service: Service::Echo,
            model: Model::Epoll,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            listener_mode: ListenerMode::ReusePort,
            read_budget: 64 << 10,
            max_conns: 100_000,
            backlog: 4096,
            accept_batch: 64,
            idle_timeout: Duration::from_secs(60),
            first_data_timeout: None,
            defer_accept: None,
            max_pending_send: 1 << 20,
            send_timeout: Duration::from_secs(10),
            buffer_size: 16 << 10,
            pool_buffers: 256,
            lock_memory: false,
            sndbuf: None,
            rcvbuf: None,
            nodelay: true,
            drain_timeout: Duration::from_secs(5),
            metrics: None,
            stack_size: 64 << 10,
            max_outstanding_sends: 200,
            queue_depth: 128,
            shared_port: false,
            listener_fd: None,
            udp_fds: Vec::new(),
            udp_steering: None,
            quic_keys: None,
            body: None,
            tls: None,
            abort_storm: None,
            active_set: None,
            udp_offload: UdpOffload::default(),
            http3: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("--buffer-size {size} is not a positive multiple of the page size ({page} bytes)")]
    BufferSize { size: usize, page: usize },
    #[error("--{flag} must be at least 1")]
    Zero { flag: &'static str },
    #[error("--{flag} must be longer than zero")]
    ZeroDuration { flag: &'static str },
    #[error("--pool-buffers {buffers} is fewer than one per worker thread ({threads})")]
    PoolTooSmall { buffers: usize, threads: usize },
    #[error("--{flag} applies to TCP connections, and --proto udp has none")]
    NotForUdp { flag: &'static str },
    #[error("the HTTP body is {body} bytes from a file, and no body file is given (Config::body)")]
    BodyFile { body: u64 },
    #[error("--{flag} does not apply to a Unix socket (--listen unix:PATH): {why}")]
    NotForUnix { flag: &'static str, why: &'static str },
    #[error("--proto udp with --listen unix:PATH: {UNIXGRAM_REFUSED}")]
    UnixDatagram,
    #[error("--unix-mode {mode:o} is not a permission mode (0 to 0777)")]
    UnixMode { mode: u32 },
    #[error("--{flag} is not available with --model {model}: {why}")]
    ModelCannot { flag: &'static str, model: &'static str, why: &'static str },
    #[error("--http3 serves HTTP/3, and --proto {proto} is not HTTP: use --proto http")]
    Http3NeedsHttp { proto: &'static str },
    #[error("--http3 needs --tls-cert and --tls-key: QUIC is always encrypted (TLS 1.3)")]
    Http3NeedsTls,
    #[error("--max-streams 0 would refuse every HTTP/3 request: give at least 1")]
    Http3NoStreams,
}

/// Why `--http3` is refused on a Unix socket.
const HTTP3_UNIX: &str = "HTTP/3 runs on UDP at the TCP port's number, and a Unix socket has no \
     port; give --listen IP:PORT";

/// Why `--sndbuf` and `--rcvbuf` are refused with a Unix socket.
const UNIX_BUFFERS: &str = "the server sets buffer sizes once, on the listener, and Linux gives \
     accepted Unix sockets the default sizes instead of the listener's";

impl Config {
    /// The per-connection limits, copied once per worker.
    pub fn limits(&self) -> Limits {
        Limits {
            idle_timeout: self.idle_timeout,
            send_timeout: self.send_timeout,
            max_pending_send: self.max_pending_send,
            max_outstanding_sends: self.max_outstanding_sends,
            read_budget: self.read_budget,
            first_data_timeout: self.first_data_timeout,
        }
    }

    /// The limits of the HTTP/3 endpoint, with `--http3`: QUIC's share of the policies TCP has.
    pub fn http3_limits(&self) -> Option<Http3Limits> {
        let http3 = self.http3.as_ref()?;
        let handshake_timeout = match &self.service {
            Service::Http(http) => http.header_timeout,
            Service::Echo | Service::UdpEcho => Duration::from_secs(10),
        };
        Some(Http3Limits {
            max_conns: self.max_conns,
            idle_timeout: self.idle_timeout,
            max_streams: http3.max_streams,
            max_handshakes: self.tls.as_ref().and_then(|t| t.options.max_handshakes),
            handshake_timeout,
            drain_timeout: self.drain_timeout,
            retry: http3.retry,
            zero_rtt: http3.zero_rtt,
            max_mtu: http3.max_mtu,
        })
    }

    /// With `--http3`, why it cannot be served as configured (checked before the other TLS and
    /// UDP checks, so the line names `--http3`).
    fn validate_http3(&self) -> Result<(), ConfigError> {
        let Some(http3) = &self.http3 else { return Ok(()) };
        match &self.service {
            Service::Http(http) if !http.websocket_only => {}
            Service::Http(_) => return Err(ConfigError::Http3NeedsHttp { proto: "ws" }),
            other => return Err(ConfigError::Http3NeedsHttp { proto: other.name() }),
        }
        if self.listen.is_unix() {
            return Err(ConfigError::NotForUnix { flag: "http3", why: HTTP3_UNIX });
        }
        if self.tls.is_none() {
            return Err(ConfigError::Http3NeedsTls);
        }
        if let Some(why) = self.model.limitation(Policy::Http3) {
            return Err(ConfigError::ModelCannot { flag: "http3", model: self.model.name(), why });
        }
        if http3.max_streams == 0 {
            return Err(ConfigError::Http3NoStreams);
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_http3()?;
        let page = sys::page_size();
        if self.buffer_size == 0 || self.buffer_size % page != 0 {
            return Err(ConfigError::BufferSize { size: self.buffer_size, page });
        }
        for (flag, value) in [
            ("threads", self.threads),
            ("read-budget", self.read_budget),
            ("max-conns", self.max_conns),
            ("backlog", self.backlog as usize),
            ("accept-batch", self.accept_batch),
            ("max-pending-send", self.max_pending_send),
            ("pool-buffers", self.pool_buffers),
            ("max-outstanding-sends", self.max_outstanding_sends),
            ("queue-depth", self.queue_depth),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { flag });
            }
        }
        for (flag, value) in [("stack-size", Some(self.stack_size)), ("sndbuf", self.sndbuf), ("rcvbuf", self.rcvbuf)] {
            if value == Some(0) {
                return Err(ConfigError::Zero { flag });
            }
        }
        for (flag, value) in [("idle-timeout", self.idle_timeout), ("send-timeout", self.send_timeout)] {
            if value.is_zero() {
                return Err(ConfigError::ZeroDuration { flag });
            }
        }
        if let Some(storm) = self.abort_storm {
            if storm.rate == 0 {
                return Err(ConfigError::Zero { flag: "abort-storm" });
            }
            if storm.resume_below == Some(0) {
                return Err(ConfigError::Zero { flag: "abort-storm-resume" });
            }
            if self.service.is_udp() {
                return Err(ConfigError::NotForUdp { flag: "abort-storm" });
            }
        }
        if let Some(active) = self.active_set {
            if active.size == 0 {
                return Err(ConfigError::Zero { flag: "active-set" });
            }
            for (flag, value) in [("active-grace", active.grace), ("active-turn", active.turn)] {
                if value.is_zero() {
                    return Err(ConfigError::ZeroDuration { flag });
                }
            }
            if self.service.is_udp() {
                return Err(ConfigError::NotForUdp { flag: "active-set" });
            }
        }
        if self.tls.is_some() && self.service.is_udp() {
            return Err(ConfigError::NotForUdp { flag: "tls-cert" });
        }
        for (flag, policy, asked) in [
            ("tls-cert", Policy::Tls, self.tls.is_some()),
            ("active-set", Policy::ActiveSet, self.active_set.is_some()),
            ("abort-storm-shed", Policy::StormShed, self.abort_storm.is_some_and(|s| s.shed)),
        ] {
            if let Some(why) = self.model.limitation(policy).filter(|_| asked) {
                return Err(ConfigError::ModelCannot { flag, model: self.model.name(), why });
            }
        }
        for (flag, value) in [("first-data-timeout", self.first_data_timeout), ("defer-accept", self.defer_accept)] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(ConfigError::ZeroDuration { flag });
            }
            if value.is_some() && self.service.is_udp() {
                return Err(ConfigError::NotForUdp { flag });
            }
        }
        if self.listen.is_unix() {
            if self.service.is_udp() {
                return Err(ConfigError::UnixDatagram);
            }
            for (flag, given, why) in [
                ("defer-accept", self.defer_accept.is_some(), "TCP_DEFER_ACCEPT is a TCP option"),
                ("sndbuf", self.sndbuf.is_some(), UNIX_BUFFERS),
                ("rcvbuf", self.rcvbuf.is_some(), UNIX_BUFFERS),
            ] {
                if given {
                    return Err(ConfigError::NotForUnix { flag, why });
                }
            }
        }
        if self.unix_mode > 0o777 {
            return Err(ConfigError::UnixMode { mode: self.unix_mode });
        }
        if let Service::Http(http) = &self.service {
            if http.header_timeout.is_zero() {
                return Err(ConfigError::ZeroDuration { flag: "header-timeout" });
            }
            if http.max_header_bytes == 0 {
                return Err(ConfigError::Zero { flag: "max-header-bytes" });
            }
            // A body from `--body` replaces the service's when the server starts; without one,
            // a body in a file has no file to come from.
            if let (ResponseBody::File { len }, None) = (&http.body, &self.body) {
                return Err(ConfigError::BodyFile { body: *len });
            }
        }
        if self.model.fixed_threads() && self.pool_buffers < self.threads {
            return Err(ConfigError::PoolTooSmall { buffers: self.pool_buffers, threads: self.threads });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse_and_print() {
        let tcp: ListenAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(tcp, ListenAddr::Inet("127.0.0.1:0".parse().unwrap()));
        assert_eq!("[::1]:80".parse::<ListenAddr>().unwrap().to_string(), "[::1]:80");
        let unix: ListenAddr = "unix:/run/s.sock".parse().unwrap();
        assert_eq!(unix, ListenAddr::Unix("/run/s.sock".into()));
        assert_eq!(unix.to_string(), "unix:/run/s.sock");
        assert_eq!(unix.inet(), None);
        assert_eq!("unix:rel.sock".parse::<ListenAddr>().unwrap().unix_path(), Some(Path::new("rel.sock")));
        let err = |text: &str| text.parse::<ListenAddr>().unwrap_err().to_string();
        assert!(err("unix:").contains("needs a path"), "{}", err("unix:"));
        assert!(err("unixgram:/x").contains("not served"), "{}", err("unixgram:/x"));
        assert!(err("local host:80").contains("not a host name"), "{}", err("local host:80"));
        let long = format!("unix:/{}", "a".repeat(UNIX_PATH_MAX));
        assert!(err(&long).contains("108 bytes"), "{}", err(&long));
        let fits = format!("unix:/{}", "a".repeat(UNIX_PATH_MAX - 1));
        assert!(fits.parse::<ListenAddr>().is_ok());
    }

    #[test]
    fn listen_takes_the_forms_servers_take() {
        let inet = |text: &str| ListenAddr::parse_inet(text).map_err(|e| e.to_string());
        let v4 = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert_eq!(inet(":8080"), Ok(v4("0.0.0.0:8080")));
        assert_eq!(inet("8080"), Ok(v4("0.0.0.0:8080")));
        assert_eq!(inet("0"), Ok(v4("0.0.0.0:0")));
        assert_eq!(inet("0.0.0.0:8080"), Ok(v4("0.0.0.0:8080")));
        assert_eq!(inet("[::]:8080"), Ok(v4("[::]:8080")));
        assert_eq!(inet("[::1]:0"), Ok(v4("[::1]:0")));
        let local = inet("localhost:0").unwrap();
        assert!(local.ip().is_loopback() && local.port() == 0, "{local}");
        for (bad, why) in [
            ("", "is empty"),
            (":", "is not a number from 0 to 65535"),
            ("65536", "'65536' is not a number from 0 to 65535"),
            (":http", "'http' is not a number"),
            ("127.0.0.1", "has no port"),
            ("localhost", "has no port"),
            ("127.0.0.1:x", "'x' is not a number"),
            ("::1", "without brackets"),
            ("[::1]", "has no port"),
            ("[::1", "no closing ']'"),
            ("[::1]:99999", "'99999' is not a number"),
            ("[nope]:80", "not an IPv6 address"),
            ("fe80::1:x:80", "an IPv6 address goes in brackets"),
        ] {
            let err = inet(bad).unwrap_err();
            assert!(err.contains(why) && err.contains(&format!("'{bad}'")), "{bad}: {err}");
            assert!(err.contains("unix:PATH") && !err.contains('\n'), "{bad}: {err}");
        }
        let unknown = inet("nosuchhost.invalid:80").unwrap_err();
        assert!(unknown.starts_with("cannot resolve host 'nosuchhost.invalid': "), "{unknown}");
    }

    /// `--http3`: each misuse is one error naming the flag and the fix.
    #[test]
    fn http3_is_refused_where_it_cannot_be_served() {
        let tls = TlsFiles { cert: "c.pem".into(), key: "k.pem".into(), options: ServerOptions::default() };
        let http3 = Http3Config { max_streams: 100, ..Http3Config::default() };
        let ok = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            service: Service::Http(Arc::default()),
            tls: Some(tls),
            http3: Some(http3.clone()),
            ..Config::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        let limits = ok.http3_limits().expect("limits");
        assert_eq!((limits.max_conns, limits.max_streams, limits.retry), (ok.max_conns, 100, QuicRetry::Auto));
        let err = |cfg: Config| cfg.validate().unwrap_err().to_string();
        let echo = err(Config { service: Service::Echo, ..ok.clone() });
        assert_eq!(echo, "--http3 serves HTTP/3, and --proto echo is not HTTP: use --proto http");
        let ws = Arc::new(HttpConfig { websocket_only: true, ..HttpConfig::default() });
        assert!(err(Config { service: Service::Http(ws), ..ok.clone() }).contains("--proto ws is not HTTP"));
        let clear = err(Config { tls: None, ..ok.clone() });
        assert!(clear.starts_with("--http3 needs --tls-cert and --tls-key"), "{clear}");
        let unix = err(Config { listen: "unix:/tmp/h3.sock".parse().unwrap(), ..ok.clone() });
        assert!(unix.starts_with("--http3 does not apply to a Unix socket") && unix.contains("IP:PORT"), "{unix}");
        let uring64 = err(Config { model: Model::Uring64, ..ok.clone() });
        assert!(uring64.starts_with("--http3 is not available with --model uring64: "), "{uring64}");
        let streams = err(Config { http3: Some(Http3Config { max_streams: 0, ..http3 }), ..ok.clone() });
        assert!(streams.contains("--max-streams 0"), "{streams}");
        for line in [echo, clear, unix, uring64, streams] {
            assert!(!line.contains('\n'), "{line}");
        }
        assert_eq!(Config { http3: None, ..ok }.http3_limits(), None);
    }

    #[test]
    fn tcp_only_options_are_refused_with_a_unix_socket() {
        let unix = Config { listen: "unix:/tmp/x.sock".parse().unwrap(), ..Config::default() };
        assert_eq!(unix.validate(), Ok(()));
        let defer = Config { defer_accept: Some(std::time::Duration::from_secs(1)), ..unix.clone() };
        assert!(matches!(defer.validate(), Err(ConfigError::NotForUnix { flag: "defer-accept", .. })));
        let sndbuf = Config { sndbuf: Some(1 << 16), ..unix.clone() };
        assert!(matches!(sndbuf.validate(), Err(ConfigError::NotForUnix { flag: "sndbuf", .. })));
        let udp = Config { service: Service::UdpEcho, ..unix.clone() };
        assert_eq!(udp.validate(), Err(ConfigError::UnixDatagram));
        let mode = Config { unix_mode: 0o1777, ..unix };
        assert_eq!(mode.validate(), Err(ConfigError::UnixMode { mode: 0o1777 }));
    }
}
