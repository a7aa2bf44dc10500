//! `sockscale serve`.

use crate::output::say;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sockscale_proto::http::HttpConfig;
use sockscale_proto::quic::QuicKeys;
use sockscale_proto::ws::WsConfig;
use sockscale_server::TerminationSignals;
use sockscale_server::{
    ActiveConfig, BodySource, Config, Http3Config, ListenAddr, ListenerMode, Model, QuicRetry, Resources, SendfileMode,
    Server, Service, StormConfig, TlsFiles, UdpOffload, DEFAULT_QUIC_MAX_MTU, DEFAULT_UNIX_MODE,
};
use sockscale_tls::ServerOptions;

use crate::cli::models::ModelParser;
use crate::units::{parse_duration, parse_duration_or_zero, parse_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Proto {
    /// TCP echo: every byte received is sent back
    Echo,
    /// HTTP/1.1 and HTTP/2, answering every request with one fixed response
    Http,
    /// UDP echo: every datagram is sent back to its sender
    Udp,
    /// WebSocket echo (RFC 6455): every message sent back as a message, on any path
    Ws,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListenerArg {
    /// One SO_REUSEPORT listener per worker thread
    Reuseport,
    /// One listener shared by all workers with EPOLLEXCLUSIVE
    Exclusive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuicRetryArg {
    /// A stateless Retry only under load, when handshakes in progress near their bound
    Auto,
    /// Every new connection first proves its address (one round trip more)
    On,
    /// Never: the 3x anti-amplification limit alone bounds an unvalidated address
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SendfileArg {
    /// From the file (sendfile) from --sendfile-min up, from memory below it
    Auto,
    /// Always from the file, with sendfile
    On,
    /// Always from memory: the file is read once at start, in every process
    Off,
}

/// Where `serve --help` sends a reader for the long story.
const SERVE_AFTER_HELP: &str = "Every flag, the listen forms and the policies at length: docs/serve.md and \
docs/policies.md; the I/O models: `sockscale models` and docs/models.md. '-h' gives a summary, '--help' the \
whole text.";

// The headings of `serve -h`, in the order they are shown.
const LISTENING: &str = "Listening";
const PROTOCOL: &str = "Protocol";
const IO_MODEL: &str = "I/O model";
const TIMEOUTS: &str = "Policies: timeouts";
const ADMISSION: &str = "Policies: admission";
const BUFFERS: &str = "Policies: buffers and sockets";
const TLS: &str = "TLS";
const OBSERVABILITY: &str = "Metrics and stats";

#[derive(Debug, Args)]
// A negative value (`--drain-timeout -1`) reaches the flag's parser, which names the flag and
// says why, instead of being taken for an unknown flag `-1`.
#[command(next_line_help = false, allow_negative_numbers = true, after_help = SERVE_AFTER_HELP)]
pub struct ServeArgs {
    /// Address to listen on: PORT, :PORT, IP:PORT, [IPv6]:PORT, HOST:PORT or unix:PATH
    ///
    /// 8080 and :8080 listen on every IPv4 address (0.0.0.0:8080, as nginx's `listen 8080`);
    /// [::]:8080 on every IPv6 address, and IPv4 too unless net.ipv6.bindv6only is 1;
    /// HOST:PORT is resolved at start (localhost:0), its first IPv4 address taken. Port 0 picks
    /// a free port; the address bound is printed on the first line, "listening on ADDR".
    /// unix:PATH is a Unix stream socket (its file made with --unix-mode, a stale one replaced,
    /// removed at exit)
    #[arg(short = 'l', long, default_value = "127.0.0.1:8080", value_name = "ADDR", help_heading = LISTENING)]
    pub listen: ListenAddr,
    /// Permission bits of a unix:PATH socket file, octal [default: 0660]
    ///
    /// Connecting needs write permission; 0660 lets the owner and group in
    #[arg(long, value_name = "MODE", value_parser = parse_mode, help_heading = LISTENING)]
    pub unix_mode: Option<u32>,
    /// Server processes sharing the port, as nginx's workers
    ///
    /// They share it with SO_REUSEPORT (on unix:PATH, one listener inherited), to go past the per-process open-files limit; a worker that dies is restarted. UDP (--proto udp,
    /// --http3): the parent binds every worker's sockets in order and worker K serves its own, inherited (--http3: steered by connection ID); --http3's workers share the QUIC keys (reset, tokens). With --metrics,
    /// worker K serves it on the given port + K (port 0: each worker picks a free port)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..), help_heading = LISTENING)]
    pub procs: u16,
    /// listen(2) backlog, capped by net.core.somaxconn
    #[arg(long, value_name = "N", default_value_t = 4096, help_heading = LISTENING)]
    pub backlog: u32,
    /// Accepts per listener wake-up (AcceptEx watermarks)
    #[arg(long, value_name = "N", default_value_t = 64, help_heading = LISTENING)]
    pub accept_batch: usize,
    /// TCP_DEFER_ACCEPT: accept with the first bytes [default: off]
    ///
    /// The kernel hands a connection to the server only with its first bytes (or after about
    /// SECS, whole seconds), so silent connections hold no server slot (the seeds' AcceptEx
    /// with first data)
    #[arg(long, value_parser = parse_duration, value_name = "SECS", help_heading = LISTENING)]
    pub defer_accept: Option<Duration>,

    /// Protocol to serve (http: HTTP/1.1 and HTTP/2, h2c or h2 over TLS)
    #[arg(short = 'p', long, value_name = "PROTO", default_value = "echo", value_parser = ProtoParser, help_heading = PROTOCOL)]
    pub proto: Proto,
    /// HTTP/2 beside HTTP/1.1 (off: HTTP/1.1 only)
    ///
    /// On the same port: h2c with prior knowledge (a connection opening with the preface) and h2 over TLS by
    /// ALPN (`h2` offered first)
    #[arg(long, value_name = "on|off", value_enum, default_value_t = OnOff::On, hide_possible_values = true, help_heading = PROTOCOL)]
    pub http2: OnOff,
    /// HTTP/2 streams open at once per connection
    ///
    /// SETTINGS_MAX_CONCURRENT_STREAMS; one stream more is refused with REFUSED_STREAM
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..), help_heading = PROTOCOL)]
    pub max_streams: u32,
    /// HTTP/3 over QUIC on UDP at the same port number [default: off]
    ///
    /// With --proto http and --tls-cert/--tls-key, on every model that serves UDP (`sockscale
    /// models`); HTTP/1.1 and HTTP/2 responses then advertise it (`Alt-Svc: h3=":PORT"`).
    /// --max-conns, --idle-timeout, --max-streams, --max-handshakes, --header-timeout (the
    /// handshake's) and --drain-timeout apply to it as to TCP
    #[arg(long, help_heading = PROTOCOL)]
    pub http3: bool,
    /// HTTP/3: when QUIC answers a new connection with a stateless Retry [default: auto]
    ///
    /// auto: under load only (handshakes in progress near their bound); on: always, so every
    /// client proves its address first (a round trip more); off: never. With --http3
    #[arg(long, value_name = "auto|on|off", value_enum, hide_possible_values = true, help_heading = PROTOCOL)]
    pub quic_retry: Option<QuicRetryArg>,
    /// HTTP/3: accept 0-RTT requests, which are replayable [default: off]
    ///
    /// A resuming client may send requests in its first flight (0-RTT), a round trip sooner.
    /// They are replayable: an attacker who captured one can send it again, and the server
    /// answers it again. Turn on only where every request is safe to repeat. With --http3
    #[arg(long, help_heading = PROTOCOL)]
    pub quic_0rtt: bool,
    /// HTTP/3: the largest QUIC packet path MTU discovery may probe for [default: 1452]
    ///
    /// 1452 is what fits an Ethernet path (IPv6 included); on loopback (MTU 65,536) or a jumbo
    /// frame LAN a larger ceiling lets discovery find room for fewer, larger packets: fewer
    /// packets to encrypt and acknowledge per response. Lost probes cost a little where the
    /// path is smaller. 1200 to 65,527. With --http3
    #[arg(long, value_name = "BYTES", help_heading = PROTOCOL)]
    pub quic_max_mtu: Option<u16>,
    /// UDP GSO: equal datagrams to one peer go in one message [default: on]
    ///
    /// Off: one datagram per message. UDP_SEGMENT, where the kernel has it (Linux 4.18); counted as udp_gso_sends and udp_gso_datagrams
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true, help_heading = PROTOCOL)]
    pub udp_gso: Option<OnOff>,
    /// UDP GRO: the kernel hands over a flow's datagrams coalesced [default: on]
    ///
    /// Off: one datagram per buffer. UDP_GRO, where the kernel has it (Linux 5.0); counted as udp_gro_buffers and udp_gro_datagrams
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true, help_heading = PROTOCOL)]
    pub udp_gro: Option<OnOff>,
    /// HTTP response body file [default: a generated 4096-byte HTML page]
    #[arg(long, value_name = "FILE", help_heading = PROTOCOL)]
    pub body: Option<PathBuf>,
    /// How --body is sent: sendfile or from memory
    ///
    /// on: always with sendfile, from the page cache (memory flat in the file's size, the
    /// seeds' TransmitFile); off: always from a copy in memory, read once at start in every
    /// process; auto: from the file from --sendfile-min up, from memory below it
    #[arg(long, value_enum, default_value_t = SendfileArg::Auto, hide_possible_values = true, value_name = "auto|on|off", help_heading = PROTOCOL)]
    pub sendfile: SendfileArg,
    /// --sendfile auto: from the file from this size up
    #[arg(long, value_name = "BYTES", default_value_t = sockscale_server::AUTO_MIN_FILE_BYTES as usize, value_parser = parse_size, help_heading = PROTOCOL)]
    pub sendfile_min: usize,
    /// Content-Type of the HTTP response
    #[arg(long, value_name = "TYPE", default_value = "text/html; charset=utf-8", help_heading = PROTOCOL)]
    pub content_type: String,
    /// Largest request head; longer gets 431 or 414
    ///
    /// 414 when the request line alone is longer
    #[arg(long, value_name = "BYTES", default_value = "8KiB", value_parser = parse_size, help_heading = PROTOCOL)]
    pub max_header_bytes: usize,
    /// Largest request body; longer gets 413
    #[arg(long, value_name = "BYTES", default_value = "8MiB", value_parser = parse_size, help_heading = PROTOCOL)]
    pub max_body_bytes: usize,
    /// WebSocket: largest message, after inflating [default: 16MiB]
    ///
    /// A message announced or inflated past it is refused with close 1009, never allocated past
    /// the limit. For --proto ws, and --proto http (which accepts WebSocket upgrades too)
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = PROTOCOL)]
    pub ws_max_message: Option<usize>,
    /// WebSocket: permessage-deflate (RFC 7692) when a client offers it [default: on]
    ///
    /// With context takeover (--ws-deflate-takeover) zlib's state costs about 300-430 KB a
    /// connection once a compressed message went each way
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true, help_heading = PROTOCOL)]
    pub ws_deflate: Option<OnOff>,
    /// WebSocket: the largest LZ77 window of permessage-deflate, 9-15 bits [default: 15]
    ///
    /// The server compresses with at most this window, and asks it of a client that offers
    /// client_max_window_bits; zlib's state per connection shrinks with it
    #[arg(long, value_name = "BITS", value_parser = clap::value_parser!(u8).range(9..=15), help_heading = PROTOCOL)]
    pub ws_deflate_window: Option<u8>,
    /// WebSocket: context takeover in permessage-deflate [default: on]
    ///
    /// Off: the answer carries server_no_context_takeover and client_no_context_takeover, each
    /// message is compressed on its own, and zlib's state is freed after each message, so an idle
    /// connection holds none of it (a little less compression, and zlib's set-up per message)
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true, help_heading = PROTOCOL)]
    pub ws_deflate_takeover: Option<OnOff>,
    /// WebSocket: ping connections silent this long; 0 = off [default: off]
    ///
    /// A ping not answered by the next one (or within --idle-timeout of the connection's last
    /// input) closes the connection with 1001, counted as ws_ping_timeouts
    #[arg(long, value_name = "SECS", value_parser = parse_duration_or_zero, help_heading = PROTOCOL)]
    pub ws_ping: Option<Duration>,

    /// I/O model; `sockscale models` describes each
    #[arg(short = 'm', long, default_value = "epoll", value_parser = ModelParser, help_heading = IO_MODEL)]
    pub model: Model,
    /// Worker threads [default: the number of CPUs]
    #[arg(short = 't', long, value_name = "N", help_heading = IO_MODEL)]
    pub threads: Option<usize>,
    /// How the epoll workers share the port
    ///
    /// reuseport: one SO_REUSEPORT listener per worker thread; exclusive: one listener shared
    /// by all workers with EPOLLEXCLUSIVE
    #[arg(long, value_enum, default_value_t = ListenerArg::Reuseport, hide_possible_values = true, value_name = "reuseport|exclusive", help_heading = IO_MODEL)]
    pub listener: ListenerArg,
    /// Thread pool: waiting connections per worker
    ///
    /// Connections waiting for a worker, per worker; beyond it new connections are refused
    /// (HTTP gets a 503)
    #[arg(long, value_name = "N", default_value_t = 128, help_heading = IO_MODEL)]
    pub queue_depth: usize,
    /// Sends in flight per connection (completion models)
    #[arg(long, value_name = "N", default_value_t = 200, help_heading = IO_MODEL)]
    pub max_outstanding_sends: usize,
    /// Stack size of per-connection threads (blocking model)
    #[arg(long, value_name = "BYTES", default_value = "64KiB", value_parser = parse_size, help_heading = IO_MODEL)]
    pub stack_size: usize,

    /// Close a connection with no traffic for this long
    ///
    /// Idle and stale connections alike
    #[arg(long, default_value = "60", value_parser = parse_duration, value_name = "SECS", help_heading = TIMEOUTS)]
    pub idle_timeout: Duration,
    /// Time to send a whole request head (slowloris guard)
    ///
    /// A request head must be complete this long after its first byte; for HTTP/2: the preface, a control frame or a header block
    #[arg(long, default_value = "10", value_parser = parse_duration, value_name = "SECS", help_heading = TIMEOUTS)]
    pub header_timeout: Duration,
    /// Close a connection silent this long after accept [default: off]
    ///
    /// The seeds' sweep of accepted connections that never send; counted as closed_first_data
    #[arg(long, value_parser = parse_duration, value_name = "SECS", help_heading = TIMEOUTS)]
    pub first_data_timeout: Option<Duration>,
    /// Disconnect a client stuck this long: over --max-pending-send, or taking no output
    #[arg(long, default_value = "10", value_parser = parse_duration, value_name = "SECS", help_heading = TIMEOUTS)]
    pub send_timeout: Duration,
    /// On SIGTERM/SIGINT, wait this long for in-flight work
    ///
    /// On SIGINT/SIGTERM, wait this long for in-flight responses, then close the rest; 0
    /// closes every connection at once
    #[arg(long, default_value = "5", value_parser = parse_duration_or_zero, value_name = "SECS", help_heading = TIMEOUTS)]
    pub drain_timeout: Duration,

    /// More connections are closed at once (HTTP: 503)
    ///
    /// Connections beyond this are accepted and closed at once (HTTP gets a 503), counted as
    /// refused
    #[arg(long, value_name = "N", default_value_t = 100_000, help_heading = ADMISSION)]
    pub max_conns: usize,
    /// Stop accepting at this many aborts a second [default: off]
    ///
    /// Admission control under an abort storm (seed 004): when this many established
    /// connections are aborted (reset, aborted, timed out) within one second, stop accepting
    /// until fewer than --abort-storm-resume are established
    #[arg(long, value_name = "RATE", value_parser = clap::value_parser!(u32).range(1..), help_heading = ADMISSION)]
    pub abort_storm: Option<u32>,
    /// With --abort-storm: accept again below N connections
    ///
    /// [default: three quarters of the number established when the storm began]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = ADMISSION)]
    pub abort_storm_resume: Option<u64>,
    /// With --abort-storm: also shed the newest connections
    ///
    /// As a storm begins, close the newest connections down to the resume threshold (seed
    /// 004), counted as storm_shed
    #[arg(long, help_heading = ADMISSION)]
    pub abort_storm_shed: bool,
    /// Serve only N connections at a time, in FIFO order [default: off]
    ///
    /// The seeds' high-throughput strategy: read from (and so serve) only N connections at a
    /// time, in FIFO order; the rest are held, with no read posted, until one of the N closes,
    /// idles past --active-grace or has had --active-turn
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = ADMISSION)]
    pub active_set: Option<u64>,
    /// With --active-set: silence that gives a place up
    ///
    /// An active connection that has sent nothing this long gives its place to the next
    /// waiting one
    #[arg(long, default_value = "100ms", value_parser = parse_duration, value_name = "SECS", requires = "active_set", help_heading = ADMISSION)]
    pub active_grace: Duration,
    /// With --active-set: a turn while others wait
    ///
    /// An active connection that has held its place this long while others wait queues again
    /// at the back, so no waiting connection starves
    #[arg(long, default_value = "1", value_parser = parse_duration, value_name = "SECS", requires = "active_set", help_heading = ADMISSION)]
    pub active_turn: Duration,

    /// Bytes read per connection before serving others
    #[arg(long, value_name = "BYTES", default_value = "64KiB", value_parser = parse_size, help_heading = BUFFERS)]
    pub read_budget: usize,
    /// Unsent output beyond which a client is not read
    #[arg(long, value_name = "BYTES", default_value = "1MiB", value_parser = parse_size, help_heading = BUFFERS)]
    pub max_pending_send: usize,
    /// Receive buffer size, a multiple of the page size
    #[arg(long, value_name = "BYTES", default_value = "16KiB", value_parser = parse_size, help_heading = BUFFERS)]
    pub buffer_size: usize,
    /// Receive buffers in the pool, shared by the workers
    ///
    /// A buffer is taken only while a socket is readable
    #[arg(long, value_name = "N", default_value_t = 256, help_heading = BUFFERS)]
    pub pool_buffers: usize,
    /// mlock the buffer pool (the VirtualLock analogue)
    ///
    /// Fails clearly if RLIMIT_MEMLOCK forbids it
    #[arg(long, help_heading = BUFFERS)]
    pub lock_memory: bool,
    /// SO_SNDBUF of every connection [default: the kernel's]
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = BUFFERS)]
    pub sndbuf: Option<usize>,
    /// SO_RCVBUF of every connection [default: the kernel's]
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = BUFFERS)]
    pub rcvbuf: Option<usize>,
    /// Disable Nagle's algorithm (TCP_NODELAY) [default]
    #[arg(long, overrides_with = "no_nodelay", help_heading = BUFFERS)]
    pub nodelay: bool,
    /// Keep Nagle's algorithm on
    #[arg(long, help_heading = BUFFERS)]
    pub no_nodelay: bool,

    /// Serve TLS 1.3 and 1.2 with this PEM certificate chain, leaf first
    ///
    /// With --tls-key; for echo and http
    #[arg(long, value_name = "FILE", requires = "tls_key", help_heading = TLS)]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key, PEM: PKCS#8, SEC1 or PKCS#1
    ///
    /// With --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = TLS)]
    pub tls_key: Option<PathBuf>,
    /// Sessions kept for resumption by ID (0: none)
    #[arg(long, value_name = "N", default_value_t = 4096, help_heading = TLS)]
    pub tls_session_cache: usize,
    /// Resumption tickets (stateless, rotating keys)
    #[arg(long, value_name = "on|off", value_enum, default_value_t = OnOff::On, hide_possible_values = true, help_heading = TLS)]
    pub tls_tickets: OnOff,
    /// TLS handshakes in progress at once; more are refused
    ///
    /// Connections beyond it are refused (closed at once, counted as limit_handshakes) so a
    /// handshake flood cannot starve served ones
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), requires = "tls_cert", help_heading = TLS)]
    pub max_handshakes: Option<u64>,

    /// Print the counters every SECS seconds [default: no stats lines]
    #[arg(long, value_parser = parse_duration, value_name = "SECS", help_heading = OBSERVABILITY)]
    pub stats_interval: Option<Duration>,
    /// Stats lines with every counter, not only those that moved
    ///
    /// By default a stats line has accepted, refused and connections, then only the counters
    /// that are not 0; with this flag, every counter (about a hundred). The final line at exit
    /// always has every counter.
    #[arg(long, requires = "stats_interval", help_heading = OBSERVABILITY)]
    pub stats_all: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (ADDR as --listen's)
    ///
    /// The same IP forms as --listen (:9090, 127.0.0.1:9090, localhost:0); port 0 picks a free
    /// port, logged at start-up
    #[arg(long, value_name = "ADDR", value_parser = parse_metrics_addr, help_heading = OBSERVABILITY)]
    pub metrics: Option<SocketAddr>,

    /// Internal: this process is worker K of N of a --procs server
    #[arg(long, hide = true, value_name = "K/N")]
    pub proc_slot: Option<String>,
    /// Internal: a --procs worker on unix:PATH serves the listener its parent bound, inherited
    /// as this descriptor
    #[arg(long, hide = true, value_name = "FD", requires = "proc_slot")]
    pub listen_fd: Option<i32>,
    /// Internal: a --procs worker's UDP sockets (--proto udp, --http3), which its parent bound
    /// at the port in this order, inherited as these descriptors
    #[arg(long, hide = true, value_name = "FD,...", value_delimiter = ',', requires = "proc_slot")]
    pub udp_fd: Vec<i32>,
    /// Internal: how a --procs worker's --http3 sockets are steered by connection ID: the group
    /// index of the first (the parent attached the program), or `refused` (the kernel refused it)
    #[arg(long, hide = true, value_name = "INDEX|refused", value_parser = parse_udp_steering, requires = "udp_fd")]
    pub udp_steering: Option<sockscale_server::GroupSteering>,
    /// Internal: a --procs worker with --http3 reads the server's QUIC keys from this inherited
    /// pipe (not an argument: `ps` shows arguments to everyone)
    #[arg(long, hide = true, value_name = "FD", requires = "proc_slot")]
    pub quic_keys_fd: Option<i32>,
}

/// `--proto`: echo, http or udp; a number is taken for the port it most likely is.
#[derive(Debug, Clone, Copy)]
struct ProtoParser;

impl clap::builder::TypedValueParser for ProtoParser {
    type Value = Proto;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Proto, clap::Error> {
        let text = value.to_string_lossy();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            let arg = arg.map_or_else(|| "--proto".to_owned(), ToString::to_string);
            let message = format!(
                "invalid value '{text}' for '{arg}': a protocol is echo, http, udp or ws; for port {text}, give \
                 --listen :{text} (-l :{text})\n"
            );
            return Err(clap::Error::raw(clap::error::ErrorKind::InvalidValue, message).with_cmd(cmd));
        }
        clap::builder::EnumValueParser::<Proto>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(Proto::value_variants().iter().filter_map(ValueEnum::to_possible_value)))
    }
}

/// `--metrics`: an IP address and port in the forms `--listen` takes.
fn parse_metrics_addr(text: &str) -> Result<SocketAddr, String> {
    ListenAddr::parse_inet(text).map_err(|e| e.to_string().replace(" or unix:PATH", ""))
}

impl ServeArgs {
    pub fn to_config(&self) -> Result<Config> {
        self.check_ws_flags()?;
        // HTTP/2 beside HTTP/1.1 on an HTTP or WebSocket port; both take WebSockets over it
        // (RFC 8441 extended CONNECT).
        let http2 = (self.http2 == OnOff::On).then(|| {
            Arc::new(sockscale_h2::Limits {
                max_concurrent_streams: self.max_streams,
                max_header_list_size: u32::try_from(self.max_header_bytes).unwrap_or(u32::MAX),
                max_body_bytes: self.max_body_bytes as u64,
                header_timeout: self.header_timeout,
                output_cap: self.max_pending_send,
                window_timeout: Some(self.send_timeout),
                extended_connect: true,
                ..sockscale_proto::h2::default_limits()
            })
        });
        let service = match self.proto {
            Proto::Echo => Service::Echo,
            Proto::Udp => Service::UdpEcho,
            Proto::Ws => Service::Http(Arc::new(HttpConfig {
                max_header_bytes: self.max_header_bytes,
                header_timeout: self.header_timeout,
                http2,
                websocket: Some(self.websocket()?),
                websocket_only: true,
                ..HttpConfig::default()
            })),
            Proto::Http => Service::Http(Arc::new(HttpConfig {
                content_type: self.content_type.clone(),
                max_header_bytes: self.max_header_bytes,
                max_body_bytes: self.max_body_bytes as u64,
                header_timeout: self.header_timeout,
                http2,
                websocket: Some(self.websocket()?),
                ..HttpConfig::default()
            })),
        };
        // HTTP's response body, read or opened when the server starts (`Resources::load`).
        let body = self.body.as_ref().filter(|_| self.proto == Proto::Http).map(|path| BodySource {
            path: path.clone(),
            sendfile: match self.sendfile {
                SendfileArg::Auto => SendfileMode::Auto,
                SendfileArg::On => SendfileMode::On,
                SendfileArg::Off => SendfileMode::Off,
            },
            sendfile_min: self.sendfile_min as u64,
            processes: u64::from(self.procs),
        });
        let http2 = matches!(&service, Service::Http(http) if http.http2.is_some());
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let alpn = match (self.proto, http2) {
                    (Proto::Http | Proto::Ws, true) => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
                    (Proto::Http | Proto::Ws, false) => vec![b"http/1.1".to_vec()],
                    _ => Vec::new(),
                };
                let options = ServerOptions {
                    session_cache: self.tls_session_cache,
                    tickets: self.tls_tickets == OnOff::On,
                    alpn,
                    max_handshakes: self.max_handshakes.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                };
                Some(TlsFiles { cert: cert.clone(), key: key.clone(), options })
            }
            _ => None,
        };
        let defaults = Config::default();
        if let ListenAddr::Unix(_) = &self.listen {
            for (flag, given, why) in [
                ("--nodelay", self.nodelay, "TCP_NODELAY is a TCP option"),
                ("--no-nodelay", self.no_nodelay, "TCP_NODELAY is a TCP option"),
            ] {
                if given {
                    anyhow::bail!("{flag} does not apply to a Unix socket (--listen {}): {why}", self.listen);
                }
            }
        } else if self.unix_mode.is_some() {
            anyhow::bail!("--unix-mode is the mode of a socket file: it needs --listen unix:PATH");
        }
        Ok(Config {
            listen: self.listen.clone(),
            unix_mode: self.unix_mode.unwrap_or(DEFAULT_UNIX_MODE),
            service,
            model: self.model,
            threads: self.threads.unwrap_or(defaults.threads),
            listener_mode: match self.listener {
                ListenerArg::Reuseport => ListenerMode::ReusePort,
                ListenerArg::Exclusive => ListenerMode::Exclusive,
            },
            read_budget: self.read_budget,
            max_conns: self.max_conns,
            backlog: self.backlog,
            accept_batch: self.accept_batch,
            idle_timeout: self.idle_timeout,
            first_data_timeout: self.first_data_timeout,
            defer_accept: self.defer_accept,
            abort_storm: match (self.abort_storm, self.abort_storm_resume) {
                (Some(rate), resume) => {
                    Some(StormConfig { rate, resume_below: resume.map(|n| n as usize), shed: self.abort_storm_shed })
                }
                (None, _) if self.abort_storm_shed => anyhow::bail!("--abort-storm-shed needs --abort-storm RATE"),
                (None, Some(_)) => anyhow::bail!("--abort-storm-resume needs --abort-storm RATE"),
                (None, None) => None,
            },
            active_set: self.active_set.map(|n| ActiveConfig {
                size: usize::try_from(n).unwrap_or(usize::MAX),
                grace: self.active_grace,
                turn: self.active_turn,
            }),
            max_pending_send: self.max_pending_send,
            send_timeout: self.send_timeout,
            buffer_size: self.buffer_size,
            pool_buffers: self.pool_buffers,
            lock_memory: self.lock_memory,
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            nodelay: !self.no_nodelay,
            drain_timeout: self.drain_timeout,
            metrics: self.metrics,
            stack_size: self.stack_size,
            max_outstanding_sends: self.max_outstanding_sends,
            queue_depth: self.queue_depth,
            shared_port: self.proc_slot.is_some(),
            listener_fd: self.listen_fd,
            udp_fds: self.udp_fd.clone(),
            udp_steering: self.udp_steering,
            quic_keys: self.quic_keys_fd.map(read_quic_keys).transpose()?,
            body,
            udp_offload: self.udp_offload()?,
            http3: self.http3()?,
            tls,
        })
    }

    /// The metrics address of worker `k` of a `--procs` server: the given port plus K, or port 0
    /// (a free port of its own) when that was asked for.
    fn worker_metrics(metrics: SocketAddr, k: u16) -> Result<SocketAddr> {
        if metrics.port() == 0 {
            return Ok(metrics);
        }
        let port = metrics.port().checked_add(k).with_context(|| {
            format!(
                "--metrics {metrics}: worker {k} would serve metrics on port {} + {k}, past 65535; give a lower port",
                metrics.port()
            )
        })?;
        Ok(SocketAddr::new(metrics.ip(), port))
    }

    /// The WebSocket stage's settings (`--ws-*`, and `--idle-timeout`, which bounds a ping's
    /// answer too).
    fn websocket(&self) -> Result<Arc<WsConfig>> {
        let max_message = self.ws_max_message.unwrap_or(sockscale_ws::DEFAULT_MAX_MESSAGE);
        if max_message == 0 {
            anyhow::bail!(
                "--ws-max-message 0 would refuse every message: give a size of at least 1 byte, such as 64KiB"
            );
        }
        Ok(Arc::new(WsConfig {
            session: sockscale_ws::Config { max_message },
            deflate: (self.ws_deflate != Some(OnOff::Off)).then(|| {
                let bits = self.ws_deflate_window.unwrap_or(15);
                let takeover = self.ws_deflate_takeover != Some(OnOff::Off);
                sockscale_ws::DeflateConfig {
                    server_max_window_bits: bits,
                    client_max_window_bits: bits,
                    server_no_context_takeover: !takeover,
                    client_no_context_takeover: !takeover,
                    ..sockscale_ws::DeflateConfig::default()
                }
            }),
            ping: self.ws_ping.filter(|every| !every.is_zero()),
            idle_timeout: self.idle_timeout,
            ..WsConfig::default()
        }))
    }

    /// The name `--proto` was given as.
    fn proto_name(&self) -> &'static str {
        match self.proto {
            Proto::Echo => "echo",
            Proto::Http => "http",
            Proto::Udp => "udp",
            Proto::Ws => "ws",
        }
    }

    /// `--ws-*` given for a protocol with no WebSocket.
    fn check_ws_flags(&self) -> Result<()> {
        let given = [
            ("--ws-max-message", self.ws_max_message.is_some()),
            ("--ws-deflate", self.ws_deflate.is_some()),
            ("--ws-ping", self.ws_ping.is_some()),
            ("--ws-deflate-window", self.ws_deflate_window.is_some()),
            ("--ws-deflate-takeover", self.ws_deflate_takeover.is_some()),
        ];
        for (flag, given) in given {
            if given && matches!(self.proto, Proto::Echo | Proto::Udp) {
                anyhow::bail!(
                    "{flag} applies to --proto ws and --proto http, and --proto {} has no WebSocket",
                    self.proto_name()
                );
            }
        }
        if self.ws_deflate == Some(OnOff::Off) {
            for (flag, given) in [
                ("--ws-deflate-window", self.ws_deflate_window.is_some()),
                ("--ws-deflate-takeover", self.ws_deflate_takeover.is_some()),
            ] {
                if given {
                    anyhow::bail!("{flag} shapes permessage-deflate, which --ws-deflate off turns off");
                }
            }
        }
        Ok(())
    }

    /// `--http3`, `--quic-retry`, `--quic-0rtt`; the QUIC options without `--http3` refused.
    /// What `--http3` itself needs (`--proto http`, TLS, a port, a model that serves UDP) is
    /// the configuration's to check (`Config::validate`).
    fn http3(&self) -> Result<Option<Http3Config>> {
        if !self.http3 {
            for (flag, given) in [
                ("--quic-retry", self.quic_retry.is_some()),
                ("--quic-0rtt", self.quic_0rtt),
                ("--quic-max-mtu", self.quic_max_mtu.is_some()),
            ] {
                if given {
                    anyhow::bail!("{flag} applies to HTTP/3: add --http3 (with --proto http and --tls-cert/--tls-key)");
                }
            }
            return Ok(None);
        }
        let retry = match self.quic_retry.unwrap_or(QuicRetryArg::Auto) {
            QuicRetryArg::Auto => QuicRetry::Auto,
            QuicRetryArg::On => QuicRetry::On,
            QuicRetryArg::Off => QuicRetry::Off,
        };
        let max_mtu = self.quic_max_mtu.unwrap_or(DEFAULT_QUIC_MAX_MTU);
        if !(1200..=65_527).contains(&max_mtu) {
            anyhow::bail!("--quic-max-mtu {max_mtu}: QUIC packets are 1200 to 65527 bytes");
        }
        Ok(Some(Http3Config { retry, zero_rtt: self.quic_0rtt, max_streams: self.max_streams, max_mtu }))
    }

    /// `--udp-gso`, `--udp-gro` (on unless turned off); refused for a protocol without datagrams.
    fn udp_offload(&self) -> Result<UdpOffload> {
        for (flag, given) in [("--udp-gso", self.udp_gso), ("--udp-gro", self.udp_gro)] {
            if given.is_some() && self.proto != Proto::Udp && !self.http3 {
                let proto = self.proto_name();
                anyhow::bail!("{flag} applies to --proto udp and --http3, and --proto {proto} has no datagrams");
            }
        }
        Ok(UdpOffload { gso: self.udp_gso != Some(OnOff::Off), gro: self.udp_gro != Some(OnOff::Off) })
    }

    /// Worker number K of a `--procs` server.
    fn slot(&self) -> Result<Option<u16>> {
        let Some(slot) = &self.proc_slot else { return Ok(None) };
        let k = slot
            .split_once('/')
            .and_then(|(k, _)| k.parse().ok())
            .with_context(|| format!("bad --proc-slot '{slot}'"))?;
        Ok(Some(k))
    }
}

/// `--udp-steering`: a group index, or `refused`.
fn parse_udp_steering(s: &str) -> Result<sockscale_server::GroupSteering, String> {
    match s {
        "refused" => Ok(sockscale_server::GroupSteering::Refused),
        index => index
            .parse()
            .map(sockscale_server::GroupSteering::From)
            .map_err(|_| format!("expected a group index (0-255) or `refused`, not {index:?}")),
    }
}

/// The QUIC keys a `--procs` parent wrote into the pipe inherited as `fd` (and closed).
fn read_quic_keys(fd: i32) -> Result<QuicKeys> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let not_ours = || anyhow::anyhow!("descriptor {fd} is not an inherited pipe of QUIC keys");
    // Checked before it is owned: only a pipe is taken over.
    let meta = std::fs::metadata(format!("/proc/self/fd/{fd}")).map_err(|_| not_ours())?;
    if !std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()) {
        return Err(not_ours());
    }
    // SAFETY: a `--procs` parent leaves this pipe's read end open across exec for this worker
    // (the hidden `--quic-keys-fd`); nothing else in the process owns it, and from here the
    // File alone closes it.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::with_capacity(QuicKeys::LEN);
    pipe.by_ref().take(QuicKeys::LEN as u64 + 1).read_to_end(&mut bytes).with_context(not_ours)?;
    QuicKeys::from_bytes(&bytes).with_context(not_ours)
}

pub fn run(args: &ServeArgs, argv: &[String]) -> Result<()> {
    let mut cfg = args.to_config()?;
    if args.procs > 1 && args.proc_slot.is_none() {
        cfg.validate()?;
        // The files are read here too, so a bad one is one line before any worker starts.
        Resources::load(&cfg)?;
        if let Some(metrics) = cfg.metrics {
            // The last worker's port, checked before any worker starts.
            ServeArgs::worker_metrics(metrics, args.procs - 1)?;
        }
        let workers = usize::from(args.procs);
        let reservation = match &cfg.listen {
            ListenAddr::Inet(addr) => {
                // As many UDP sockets for each worker as its model serves: the parent binds
                // them all, so the port's group has a known order.
                let per_worker = cfg.model.udp_sockets(cfg.threads);
                sockscale_server::Reservation::new(
                    *addr,
                    cfg.service.is_udp(),
                    cfg.http3.is_some(),
                    workers,
                    per_worker,
                )?
            }
            // No SO_REUSEPORT for AF_UNIX: the parent listens, and every worker inherits it.
            ListenAddr::Unix(path) => sockscale_server::Reservation::unix(path, cfg.unix_mode, cfg.backlog)?,
        };
        // Every process's endpoints must take each other's Retry tokens and send the same
        // stateless resets: one set of keys for the whole server.
        let quic_keys = match cfg.http3 {
            Some(_) => Some(QuicKeys::generate()?),
            None => None,
        };
        return crate::cli::procs::run_serve_children(workers, argv, reservation, quic_keys);
    }
    if let (Some(k), Some(metrics)) = (args.slot()?, cfg.metrics) {
        cfg.metrics = Some(ServeArgs::worker_metrics(metrics, k)?);
    }
    // Before any thread exists, so every thread inherits the blocked mask.
    let signals = TerminationSignals::block().context("cannot block SIGINT/SIGTERM")?;
    let server = Server::start(cfg)?;
    say!("listening on {}", server.local_addr());
    if let Some(addr) = server.metrics_addr() {
        tracing::info!("metrics at http://{addr}/metrics");
    }
    signals.forward_to(server.shutdown_handle()).context("cannot start the signal thread")?;
    if let Some(every) = args.stats_interval {
        let stats = server.stats();
        let shutdown = server.shutdown_handle();
        let all = args.stats_all;
        std::thread::Builder::new().name("sockscale-stats".into()).spawn(move || {
            while shutdown.is_running() {
                std::thread::sleep(every);
                let snapshot = stats.snapshot();
                if all {
                    say!("stats {snapshot}");
                } else {
                    say!("stats {}", snapshot.nonzero());
                }
            }
        })?;
    }
    let totals = server.wait()?;
    say!("final {totals}");
    Ok(())
}

/// `--unix-mode`: octal permission bits, `0660`, `660` or `0o660`.
fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.trim().trim_start_matches("0o");
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 && !digits.is_empty() => Ok(mode),
        _ => Err(format!("'{text}' is not a permission mode: give octal bits from 0 to 0777, such as 0660")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn serve(args: &[&str]) -> Result<Config> {
        let argv = [&["sockscale", "serve"], args].concat();
        let Cli { command: Command::Serve(args) } = Cli::try_parse_from(argv)? else { panic!("serve") };
        args.to_config()
    }

    /// `--http3` and the QUIC options as the configuration holds them; `--max-streams` is the
    /// limit HTTP/2 and HTTP/3 share.
    #[test]
    fn http3_flags_become_the_http3_config() {
        let tls = ["--proto", "http", "--tls-cert", "c.pem", "--tls-key", "k.pem"];
        let with = |more: &[&str]| serve(&[&tls[..], more].concat());
        assert_eq!(with(&[]).unwrap().http3, None);
        let h3 = with(&["--http3"]).unwrap().http3.expect("http3");
        assert_eq!(h3, Http3Config { retry: QuicRetry::Auto, zero_rtt: false, max_streams: 128, max_mtu: 1452 });
        let h3 = with(&["--http3", "--quic-retry", "off", "--quic-0rtt", "--max-streams", "7"]).unwrap().http3;
        assert_eq!(h3, Some(Http3Config { retry: QuicRetry::Off, zero_rtt: true, max_streams: 7, max_mtu: 1452 }));
        assert_eq!(with(&["--http3", "--quic-retry", "on"]).unwrap().http3.map(|h| h.retry), Some(QuicRetry::On));
        let offload = with(&["--http3", "--udp-gso", "off"]).unwrap().udp_offload;
        assert_eq!((offload.gso, offload.gro), (false, true));
        let h3 = with(&["--http3", "--quic-max-mtu", "8952"]).unwrap().http3;
        assert_eq!(h3.map(|h| h.max_mtu), Some(8952));
        let err = format!("{:#}", with(&["--http3", "--quic-max-mtu", "1100"]).unwrap_err());
        assert!(err.starts_with("--quic-max-mtu 1100: QUIC packets are 1200 to 65527 bytes"), "{err}");
        let err = format!("{:#}", with(&["--quic-0rtt"]).unwrap_err());
        assert!(err.starts_with("--quic-0rtt applies to HTTP/3: add --http3"), "{err}");
    }

    #[test]
    fn unix_sockets_parse_and_tcp_only_flags_are_refused() {
        let cfg = serve(&["--listen", "unix:/tmp/s.sock"]).unwrap();
        assert_eq!(cfg.listen, ListenAddr::Unix("/tmp/s.sock".into()));
        assert_eq!(cfg.unix_mode, 0o660);
        assert_eq!(serve(&["--listen", "unix:s.sock", "--unix-mode", "0600"]).unwrap().unix_mode, 0o600);
        assert_eq!(serve(&["--listen", "unix:s.sock", "--unix-mode", "0o666"]).unwrap().unix_mode, 0o666);
        for bad in ["0688", "1777", "", "rw"] {
            assert!(serve(&["--listen", "unix:s.sock", "--unix-mode", bad]).is_err(), "{bad}");
        }
        let err = |args: &[&str]| format!("{:#}", serve(args).unwrap_err());
        assert!(err(&["--unix-mode", "0600"]).contains("needs --listen unix:PATH"));
        assert!(err(&["--listen", "unix:s.sock", "--no-nodelay"]).contains("TCP_NODELAY"));
        assert!(err(&["--listen", "unixgram:s.sock"]).contains("not served"));
        assert!(err(&["--listen", &format!("unix:/{}", "x".repeat(200))]).contains("at most 107"));
    }

    #[test]
    fn listen_forms_and_short_flags() {
        let listen = |args: &[&str]| serve(args).map(|cfg| cfg.listen.to_string()).map_err(|e| e.to_string());
        assert_eq!(listen(&["-l", ":8080"]), Ok("0.0.0.0:8080".into()));
        assert_eq!(listen(&["--listen", "8080"]), Ok("0.0.0.0:8080".into()));
        assert_eq!(listen(&["-l", "0.0.0.0:8080"]), Ok("0.0.0.0:8080".into()));
        assert_eq!(listen(&["-l", "[::]:8080"]), Ok("[::]:8080".into()));
        assert_eq!(listen(&["-l=unix:/tmp/s.sock"]), Ok("unix:/tmp/s.sock".into()));
        assert!(listen(&["-l", "localhost:0"]).is_ok_and(|a| a == "127.0.0.1:0" || a == "[::1]:0"));
        let err = listen(&["-l", "127.0.0.1"]).unwrap_err();
        assert!(err.contains("'127.0.0.1' has no port") && err.contains("unix:PATH"), "{err}");
        let cfg = serve(&["-p", "http", "-m", "poll64", "-t", "3", "--metrics", ":0"]).unwrap();
        assert!(matches!(cfg.service, Service::Http(_)));
        assert_eq!((cfg.model, cfg.threads), (Model::Poll64, 3));
        assert_eq!(cfg.metrics, Some("0.0.0.0:0".parse().unwrap()));
        let err = serve(&["--metrics", "unix:/x"]).unwrap_err().to_string();
        assert!(!err.contains("or unix:PATH"), "{err}");
        let err = serve(&["-p", "8080"]).unwrap_err().to_string();
        assert!(err.contains("--listen :8080"), "{err}");
    }

    /// `serve -h` is a summary: every flag under a heading, its first paragraph one short
    /// sentence; `--help` has the whole text of every flag.
    #[test]
    fn every_flag_has_a_heading_and_a_short_summary() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let serve = cli.find_subcommand_mut("serve").expect("serve");
        let long = serve.render_long_help().to_string();
        for arg in serve.get_arguments().filter(|a| !a.is_hide_set() && a.get_id() != "help") {
            let name = arg.get_long().unwrap_or_default();
            assert!(arg.get_help_heading().is_some(), "--{name} has no heading");
            let summary = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(
                !summary.is_empty() && summary.len() <= 90,
                "--{name}: summary of {} chars: {summary}",
                summary.len()
            );
            assert!(long.contains(&format!("--{name}")), "--help lacks --{name}");
        }
    }

    #[test]
    fn cli_defaults_are_the_library_defaults() {
        let Cli { command: Command::Serve(args) } = Cli::parse_from(["sockscale", "serve"]) else { panic!("serve") };
        let cfg = args.to_config().unwrap();
        let lib = Config::default();
        assert_eq!(cfg.listen, lib.listen);
        assert_eq!(cfg.model, lib.model);
        assert_eq!(cfg.threads, lib.threads);
        assert_eq!(cfg.listener_mode, lib.listener_mode);
        assert_eq!(cfg.read_budget, lib.read_budget);
        assert_eq!(cfg.max_conns, lib.max_conns);
        assert_eq!(cfg.backlog, lib.backlog);
        assert_eq!(cfg.accept_batch, lib.accept_batch);
        assert_eq!(cfg.idle_timeout, lib.idle_timeout);
        assert_eq!(cfg.first_data_timeout, lib.first_data_timeout);
        assert_eq!(cfg.defer_accept, lib.defer_accept);
        assert_eq!(cfg.max_pending_send, lib.max_pending_send);
        assert_eq!(cfg.send_timeout, lib.send_timeout);
        assert_eq!(cfg.buffer_size, lib.buffer_size);
        assert_eq!(cfg.pool_buffers, lib.pool_buffers);
        assert_eq!(cfg.lock_memory, lib.lock_memory);
        assert_eq!(cfg.nodelay, lib.nodelay);
        assert_eq!(cfg.drain_timeout, lib.drain_timeout);
        assert_eq!(cfg.stack_size, lib.stack_size);
        assert_eq!(cfg.max_outstanding_sends, lib.max_outstanding_sends);

        let Cli { command: Command::Serve(args) } = Cli::parse_from(["sockscale", "serve", "--proto", "http"]) else {
            panic!("serve")
        };
        let Service::Http(http) = args.to_config().unwrap().service else { panic!("http") };
        let lib = HttpConfig::default();
        assert_eq!(http.body, lib.body);
        assert_eq!(http.content_type, lib.content_type);
        assert_eq!(http.max_header_bytes, lib.max_header_bytes);
        assert_eq!(http.max_body_bytes, lib.max_body_bytes);
        assert_eq!(http.header_timeout, lib.header_timeout);
    }
}
