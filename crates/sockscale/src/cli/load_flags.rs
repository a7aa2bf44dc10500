//! The flags of `sockscale load`: a struct a subcommand, `Common` to those that run load, and
//! the parsers that check them. Both the run (`load.rs`) and the `--slo` search (`slo.rs`) read
//! them, so they live apart from either.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use sockscale_load::{AcceptedStatuses, LoadTls, Segment};
use sockscale_tls::{ClientTls, Trust};

use crate::cli::serve::OnOff;
use crate::units::{parse_duration, parse_size};

/// What the load subcommands count as an error, and their exit statuses.
const ERRORS_AND_EXIT: &str = "\
Errors: a connect refused, timed out or failed (no local port, no file descriptor); a reset or a close \
by the server mid-exchange; a reply that did not come within --timeout; an echoed byte that differs; a \
malformed HTTP response; an HTTP status not accepted (--accept-status, default 2xx); a TLS handshake or \
session that failed (by reason in the report's tls block); an HTTP/2 stream reset by the server or refused \
by its GOAWAY (by code in the report's h2 block); a UDP datagram lost; and what was still in flight \
when -d ended and stayed so: an exchange unanswered (nothing back, its answer cut off, or not all sent \
because the server stopped reading), a connect or TLS handshake unfinished. The summary and the --json \
report count each kind.

The end of -d: no new request begins, and those in flight (connects and handshakes too) get the longer \
of 1 s and twice the slowest exchange of the run to finish, never more than --timeout (a healthy \
server answers them within that; wrk drops them uncounted). Those answered count as completed; the \
rest are errors. The wait is not in the run's time or rate (those are over -d, as wrk's); the summary says how \
long it was. A run \
stopped by a signal does not wait and counts nothing in flight as an error. A run that completed \
nothing fails even with no error counted.

Exit status: 0 when the run counted no error; 3 when it counted any, or completed nothing (the summary \
and the report are still written; --allow-errors exits 0 instead); 1 when it ended early because the target took no \
connection, or when it could not start; 2 when the command line cannot be parsed; 130 when stopped by \
SIGINT (Ctrl-C), 143 by SIGTERM, after the summary and the report of what was measured until then are \
written (marked interrupted).";

/// `load ws`'s own errors, before those of every load subcommand.
const WS_ERRORS_AND_EXIT: &str = concat!(
    "WebSocket errors: an upgrade answered with another status than 101 (counted by status; when every \
     upgrade of the run is refused, the run fails with the status, exit 1), a 101 whose Sec-WebSocket-Accept \
     (or Upgrade, Connection, extensions) is wrong, server frames that break RFC 6455 (a masked frame: this \
     client closes with 1002), a close begun by the server during the run, a ping unanswered by the next \
     (--ping), and a close of this client's at the end of -d that the server did not answer within the wait \
     at the end (the wait for what is in flight, or --close-timeout, moved on while closes keep being \
     answered). A message counts as completed when its echo has \
     come back whole and equal to what was sent.\n\n",
    "Errors: a connect refused, timed out or failed (no local port, no file descriptor); a reset or a close \
by the server mid-exchange; a reply that did not come within --timeout; an echoed byte that differs; a \
malformed HTTP response; a TLS handshake or session that failed. The end of -d: every connection sends \
a close (1000) and waits for the server's; exit status as for `load echo` (see its --help)."
);

/// `load echo --block`: connections sharing one `-r` budget, as in the seed's client.
pub(super) const DEFAULT_BLOCK: usize = 1000;

#[derive(Debug, Subcommand)]
pub enum LoadCommand {
    /// TCP echo over TCP, TLS (--tls) or a Unix socket: every byte that comes back checked
    #[command(after_help = ERRORS_AND_EXIT)]
    Echo(EchoArgs),
    /// HTTP/1.1 or HTTP/2 (--http2) over TCP, TLS (https://) or a Unix socket; responses checked
    #[command(after_help = ERRORS_AND_EXIT)]
    Http(HttpArgs),
    /// UDP echo: datagrams with sequence numbers; reports the rate each way and the loss
    #[command(after_help = ERRORS_AND_EXIT)]
    Udp(UdpArgs),
    /// WebSocket echo (ws://, wss://, or a Unix socket): messages after the upgrade, every
    /// echoed one verified whole; or --idle connections held with pings
    #[command(after_help = WS_ERRORS_AND_EXIT)]
    Ws(WsArgs),
    /// Merge reports of runs made side by side (processes, machines) into one
    #[command(after_help = "Exit status: 0 when the merged reports counted no error; 3 when they counted any \
                            (the summary and --json are still written; --allow-errors exits 0 instead); 1 when \
                            a report cannot be read or the reports do not belong together; 2 when the command \
                            line cannot be parsed.")]
    Merge(MergeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Connections (UDP: sockets)
    #[arg(short = 'c', long = "connections", default_value_t = 10, value_parser = at_least_one, allow_negative_numbers = true)]
    pub conns: usize,
    /// Run for this long [default: 10 s unless -n is given]
    #[arg(short = 'd', long = "duration", value_parser = parse_duration, value_name = "SECS", allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Stop after exactly this many requests (messages, datagrams) have been answered or
    /// have failed
    #[arg(short = 'n', long = "requests", value_parser = at_least_one_u64, allow_negative_numbers = true)]
    pub requests: Option<u64>,
    /// Threads, each with its own event loop [default: the number of CPUs]
    #[arg(short = 't', long = "threads", value_parser = at_least_one, allow_negative_numbers = true)]
    pub threads: Option<usize>,
    /// Open-loop total rate in requests per second; latency is measured from the scheduled
    /// send time (coordinated omission corrected, as in wrk2). The summary says when the
    /// rate sent fell short of it
    #[arg(short = 'R', long = "rate", value_parser = positive_rate, allow_negative_numbers = true)]
    pub total_rate: Option<f64>,
    /// New connections per second [default: as fast as they complete]
    #[arg(long, value_name = "N", value_parser = positive_rate, allow_negative_numbers = true)]
    pub connect_rate: Option<f64>,
    /// Local source addresses: a range (127.0.0.1-127.0.0.50) or a list, to pass the
    /// ephemeral-port limit
    #[arg(long, value_parser = sockscale_load::source::parse_sources, value_name = "ADDRS")]
    pub source: Option<std::vec::Vec<std::net::IpAddr>>,
    /// Spread the connections over this many processes (past the per-process open-files
    /// limit) and merge their results
    #[arg(long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub procs: usize,
    /// Give up on a connect after this long; a run with nothing open and no connect
    /// succeeding for this long ends with an error
    #[arg(long, default_value = "5", value_parser = parse_duration, value_name = "SECS", allow_negative_numbers = true)]
    pub connect_timeout: Duration,
    /// Give a connection up for the rest of the run once it has failed this many times in a
    /// row after its first attempt (refused, timed out, or closed by the server before any
    /// answer, as a server refusing when busy does); counted as given up. 0: never retry
    /// [default: retry for the whole run, backing off from 50 ms to 2 s]
    #[arg(long, value_name = "N")]
    pub connect_retries: Option<u32>,
    /// Count a reply as timed out (UDP: lost) after this long
    #[arg(long = "timeout", default_value = "10", value_parser = parse_duration, value_name = "SECS", allow_negative_numbers = true)]
    pub reply_timeout: Duration,
    /// Write the full report (every figure, HDR histograms, client CPU, options) as JSON;
    /// '-' writes it to standard output and the summary to standard error. The file is
    /// opened before the run
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Exit 0 even when errors were counted (they are still counted and reported)
    #[arg(long)]
    pub allow_errors: bool,
    /// Write the latency as an HdrHistogram interval log (format 1.3), one histogram a second:
    /// with -R tagged corrected (from the schedule) and uncorrected (from each send). Readable by
    /// HdrHistogram's HistogramLogProcessor and Python hdrh; `load merge --hdr-log` merges the
    /// logs of segments. Created before the run
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Search the highest open-loop rate at which a latency target holds with no error, e.g.
    /// 'p99.9<=10ms' (any percentile; us, ms, s or m): a closed-loop run measures the ceiling,
    /// then runs of -d each at chosen -R rates narrow the answer to 2% (16 steps at most), each
    /// step reported; with --procs every step runs over the processes' merged result. --json
    /// writes the search (target, steps, answer)
    #[arg(long, value_name = "TARGET", value_parser = parse_target)]
    pub slo: Option<sockscale_load::slo::Target>,
    /// With --slo and --segment: a directory every agent shares (a volume, as the Kubernetes
    /// Job's): each step's segment reports meet there, every agent merges them and takes the
    /// same next step. Steps begin at --start-at, then every -d plus as long again (2 to 10 s)
    #[arg(long, value_name = "DIR", requires = "slo")]
    pub slo_dir: Option<PathBuf>,
    /// Write the run as one offline HTML page: the summary, the latency percentile spectrum
    /// (corrected and uncorrected), requests, errors and latency second by second, connections
    /// and client CPU, errors by kind and the settings. Created before the run
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Run segment I of N of a run split across N agents (machines, pods): this agent's share
    /// of the connections and of -n, in proportion its share of -R and --connect-rate, so that
    /// the N shares add up to exactly the whole; `load merge` joins the N reports. `auto/N`
    /// takes I from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job)
    #[arg(long, value_name = "I/N")]
    pub segment: Option<Segment>,
    /// Begin at this instant (RFC 3339, e.g. 2026-11-23T22:30:00Z, or Unix seconds), so that
    /// the agents of a segmented run measure the same window; the report says how far from it
    /// this one began. Connections are made after it, as without it
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<std::time::SystemTime>,
    /// Open every connection first, send nothing until each has connected (or failed once),
    /// then begin the measured phase: at --start-at if given, else at once (with --procs,
    /// when every process is ready). Connecting is reported apart and counts in no other
    /// figure
    #[arg(long)]
    pub connect_before_start: bool,
    /// Exchanges each connection makes; after them it stays open, idle, until -d ends the run
    /// (without -d or -n the run ends when every connection has made them), e.g. one verified
    /// echo on each of many held connections
    #[arg(long, value_name = "N", value_parser = at_least_one_u64, allow_negative_numbers = true)]
    pub per_conn: Option<u64>,
    /// Internal: this process is slot K of N of a --procs run
    #[arg(long, hide = true, value_name = "K/N")]
    pub proc_slot: Option<String>,
}

/// TLS options of `load http https://...` and `load echo --tls`.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// Trust the CA certificates in this PEM file instead of the system's roots; a certificate
    /// in it that the server presents is trusted as itself (a self-signed one, as curl does),
    /// its names and dates still checked
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub cacert: Option<PathBuf>,
    /// Do not verify the server's certificate (the handshake's signatures are still checked)
    #[arg(long, short = 'k', conflicts_with = "cacert", help_heading = "TLS")]
    pub insecure: bool,
    /// Resume earlier sessions on new connections (tickets, session IDs); off: every handshake
    /// is full [default: on]
    #[arg(long, value_name = "on|off", help_heading = "TLS")]
    pub tls_resume: Option<OnOff>,
    /// The server name sent as SNI and checked against the certificate [default: the host of
    /// the URL or address]
    #[arg(long, value_name = "NAME", help_heading = "TLS")]
    pub sni: Option<String>,
}

impl TlsArgs {
    /// The first TLS flag given, for a run without TLS to refuse.
    pub(super) fn given(&self) -> Option<&'static str> {
        [
            (self.cacert.is_some(), "--cacert"),
            (self.insecure, "--insecure"),
            (self.tls_resume.is_some(), "--tls-resume"),
            (self.sni.is_some(), "--sni"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// The run's TLS, for the server `host`, offering `alpn`.
    pub(super) fn config(&self, host: &str, alpn: &[&[u8]]) -> Result<LoadTls> {
        let trust = match (&self.cacert, self.insecure) {
            (_, true) => Trust::Insecure,
            (Some(path), false) => Trust::CaFile(path.clone()),
            (None, false) => Trust::System,
        };
        let resume = self.tls_resume != Some(OnOff::Off);
        let client =
            ClientTls::new(&trust, alpn.iter().map(|p| p.to_vec()).collect(), resume).map_err(|e| match trust {
                Trust::System => anyhow::anyhow!("{e} (the system's roots; give --cacert FILE or --insecure)"),
                _ => anyhow::anyhow!("--cacert {e}"),
            })?;
        let server_name = self.sni.clone().unwrap_or_else(|| host.to_owned());
        Ok(LoadTls { client, server_name, resume })
    }

    pub(super) fn options(&self) -> serde_json::Value {
        serde_json::json!({
            "cacert": self.cacert.as_ref().map(|p| p.display().to_string()),
            "insecure": self.insecure,
            "resume": self.tls_resume != Some(OnOff::Off),
            "sni": self.sni,
        })
    }
}

#[derive(Debug, Args)]
pub struct EchoArgs {
    /// Server address, e.g. 127.0.0.1:8080; with --unix-socket it may be left out, and names
    /// the server only (its host is the TLS server name)
    #[arg(required_unless_present = "unix_socket")]
    pub addr: Option<String>,
    /// Connect to this Unix stream socket instead (curl's flag)
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Message length in bytes
    #[arg(short = 'l', long = "length", default_value = "512", value_parser = positive_size)]
    pub length: usize,
    /// Messages in flight per connection
    #[arg(long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub depth: usize,
    /// Limit each block's total send rate to this many bytes per second (the seed's -r)
    #[arg(short = 'r', long = "byte-rate", value_parser = positive_size, value_name = "BYTES_PER_SEC")]
    pub byte_rate: Option<usize>,
    /// Connections per block; each block of connections shares one -r budget
    #[arg(long, default_value_t = DEFAULT_BLOCK, value_parser = at_least_one, allow_negative_numbers = true)]
    pub block: usize,
    /// Keep Nagle's algorithm on
    #[arg(long)]
    pub no_nodelay: bool,
    /// Speak TLS (1.3 or 1.2, no ALPN) to the server; every echoed byte is still verified
    #[arg(long, help_heading = "TLS")]
    pub tls: bool,
    #[command(flatten)]
    pub tls_args: TlsArgs,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct HttpArgs {
    /// URL, e.g. http://127.0.0.1:8080/ or https://localhost:8443/ (TLS 1.3 or 1.2, ALPN
    /// http/1.1, the certificate verified unless --insecure); with --unix-socket the URL gives
    /// only the Host header, the path and the scheme
    pub url: String,
    /// Connect to this Unix stream socket instead of the URL's host and port (curl's flag)
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// A new connection for every request, as ab does without -k
    #[arg(long)]
    pub no_keepalive: bool,
    /// Requests in flight per connection: pipelined over HTTP/1.1, concurrent streams over
    /// HTTP/2 (h2load's -m)
    #[arg(long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub pipeline: usize,
    /// Speak HTTP/2: with prior knowledge (h2c) to http://, by ALPN h2 to https:// (a server
    /// that chooses http/1.1 is an error)
    #[arg(long)]
    pub http2: bool,
    /// Speak HTTP/3 over QUIC v1 (UDP, ALPN h3) to an https:// URL's host and port; --pipeline
    /// is concurrent streams a connection
    #[arg(long, conflicts_with_all = ["http2", "unix_socket"])]
    pub http3: bool,
    /// With --http3: a connection that resumes a session sends its first requests (up to
    /// --pipeline) as 0-RTT data, before the handshake completes; the server may refuse them
    /// (they then go again). 0-RTT requests can be replayed: use it on idempotent ones
    #[arg(long = "0rtt", requires = "http3")]
    pub zero_rtt: bool,
    /// With --http3: the largest QUIC packet path MTU discovery may probe for, and the most
    /// the server may send in one [default: 1452]. On loopback or a jumbo-frame LAN a larger
    /// ceiling lets both ends use fewer, larger packets (the server's own --quic-max-mtu
    /// bounds what it sends). 1200 to 65527
    #[arg(long, value_name = "BYTES", requires = "http3", value_parser = clap::value_parser!(u16).range(1200..=65527))]
    pub quic_max_mtu: Option<u16>,
    /// With --http3: a connection's datagrams go in one message the kernel cuts [default: on]
    ///
    /// Off: one datagram per message. UDP_SEGMENT, where the kernel has it (Linux 4.18); counted as udp.gso_datagrams
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true, requires = "http3")]
    pub udp_gso: Option<OnOff>,
    /// With --http3: the kernel hands over a connection's datagrams coalesced [default: on]
    ///
    /// Off: one datagram per read. UDP_GRO, where the kernel has it (Linux 5.0); counted as udp.gro_datagrams. On
    /// loopback it also spares the server's CPU the cutting of its GSO messages, as a quinn, quic-go or ngtcp2 client
    /// with GRO does
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true, requires = "http3")]
    pub udp_gro: Option<OnOff>,
    /// Disable Nagle's algorithm [default]
    #[arg(long, overrides_with = "no_nodelay")]
    pub nodelay: bool,
    /// Keep Nagle's algorithm on
    #[arg(long)]
    pub no_nodelay: bool,
    /// Request method (oha's -m; h2load's -m N, streams, is --pipeline N here)
    #[arg(short = 'm', long = "method", default_value = "GET", value_parser = parse_method)]
    pub method: String,
    /// Extra header, 'Name: value'; may be repeated. Host, User-Agent, Connection and
    /// Content-Length given here replace sockscale's own
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Statuses that count as success: classes and codes, comma-separated (2xx,3xx or
    /// 2xx,404); any other status is an error
    #[arg(long, default_value = "2xx", value_parser = AcceptedStatuses::parse, value_name = "LIST")]
    pub accept_status: AcceptedStatuses,
    /// Request body from a file
    #[arg(long, value_name = "FILE")]
    pub body: Option<PathBuf>,
    #[command(flatten)]
    pub tls_args: TlsArgs,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct UdpArgs {
    /// Server address, e.g. 127.0.0.1:9000
    pub addr: String,
    /// Datagram length in bytes (8 to 65507 over IPv4)
    #[arg(short = 'l', long = "length", default_value = "512", value_parser = parse_size)]
    pub length: usize,
    /// Datagrams in flight per socket
    #[arg(long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub depth: usize,
    /// UDP GSO: a turn's datagrams go in one message [default: on]
    ///
    /// Off: one datagram per message (still one sendmmsg a turn). UDP_SEGMENT, where the kernel has it (Linux 4.18); counted as udp.gso_datagrams
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true)]
    pub udp_gso: Option<OnOff>,
    /// UDP GRO: the kernel hands over the answers coalesced [default: on]
    ///
    /// Off: one datagram per buffer. UDP_GRO, where the kernel has it (Linux 5.0); counted as udp.gro_datagrams
    #[arg(long, value_name = "on|off", value_enum, hide_possible_values = true)]
    pub udp_gro: Option<OnOff>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct WsArgs {
    /// URL, e.g. ws://127.0.0.1:8080/ or wss://localhost:8443/chat (TLS 1.3 or 1.2, the
    /// certificate verified unless --insecure); with --unix-socket the URL gives only the Host
    /// header, the path and the scheme
    pub url: String,
    /// Connect to this Unix stream socket instead of the URL's host and port (curl's flag)
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Message payload in bytes (0: empty messages, each still echoed and timed)
    #[arg(short = 's', long = "size", default_value = "512", value_parser = parse_size)]
    pub size: usize,
    /// Send text messages (their payload printable ASCII, so valid UTF-8)
    #[arg(long, conflicts_with = "binary")]
    pub text: bool,
    /// Send binary messages [default]
    #[arg(long)]
    pub binary: bool,
    /// Messages in flight per connection
    #[arg(long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub pipeline: usize,
    /// Offer permessage-deflate (RFC 7692); the report says how many servers agreed
    #[arg(long)]
    pub deflate: bool,
    /// Send no message: hold the connections open until -d ends the run (with --ping, pinging
    /// each); the million-connection case
    #[arg(long)]
    pub idle: bool,
    /// Ping every connection every SECS; one whose ping is unanswered by the next is closed
    /// and counted
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub ping: Option<Duration>,
    /// WebSocket over HTTP/2 (RFC 8441): an extended CONNECT on an HTTP/2 connection (h2c with
    /// prior knowledge for ws://, ALPN h2 for wss://) instead of the HTTP/1.1 upgrade
    #[arg(long)]
    pub http2: bool,
    /// With --http2: WebSockets per connection, each its own stream (--pipeline is per
    /// WebSocket)
    #[arg(long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true, requires = "http2")]
    pub streams: usize,
    /// At the end of -d, wait at least SECS for the server to answer the closes [default: the
    /// wait for what is in flight, the longer of 1 s and twice the slowest exchange]
    ///
    /// Every connection closes at once, and a server answers that burst at its own pace (a million
    /// took about 30 s on 2 cores): the wait also goes on while closes keep being answered, up to
    /// --timeout from the end
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub close_timeout: Option<Duration>,
    /// Keep Nagle's algorithm on
    #[arg(long)]
    pub no_nodelay: bool,
    #[command(flatten)]
    pub tls_args: TlsArgs,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Reports written with --json, or directories of them (every *.json file in each, in
    /// name order: the segments a Kubernetes Job left in one volume)
    #[arg(required = true, num_args = 1..)]
    pub reports: Vec<PathBuf>,
    /// Write the merged report here; '-' writes it to standard output and the summary to
    /// standard error
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Exit 0 even when the reports counted errors
    #[arg(long)]
    pub allow_errors: bool,
    /// Merge reports whose measured windows do not overlap (runs made one after another):
    /// refused without it, since adding them up reads as one run of their summed rate. The
    /// merge says so, and its rates are over the time at least one of them was measuring
    #[arg(long)]
    pub allow_disjoint: bool,
    /// Merge interval logs (--hdr-log files) into this one instead: the inputs are the logs
    /// of the processes or segments of one run
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "html"])]
    pub hdr_log: Option<PathBuf>,
    /// Draw the merged run as one HTML page (as `load --html`; latency second by second needs
    /// the interval logs, which a merge of reports does not have)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// A count flag: a whole number of at least 1.
fn at_least_one_u64(text: &str) -> Result<u64, String> {
    let text = text.trim();
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) if text.parse::<i64>().is_ok() => Err("must be at least 1".into()),
        Err(_) => Err(format!("'{text}' is not a whole number (give 1 or more)")),
    }
}

fn at_least_one(text: &str) -> Result<usize, String> {
    at_least_one_u64(text).and_then(|n| usize::try_from(n).map_err(|_| format!("{n} is too large")))
}

/// A rate flag: a finite number above zero.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        Ok(_) => Err("must be a number above 0 (per second)".into()),
        Err(_) => Err(format!("'{}' is not a number (per second, e.g. 1000 or 2.5)", text.trim())),
    }
}

/// A size flag: at least one byte.
fn positive_size(text: &str) -> Result<usize, String> {
    match parse_size(text)? {
        0 => Err("must be at least 1 byte".into()),
        n => Ok(n),
    }
}

/// `-m`: a method the server can read as one (see [`sockscale_load::config::method_problem`]).
fn parse_method(text: &str) -> Result<String, String> {
    match sockscale_load::config::method_problem(text) {
        Some(why) => Err(why),
        None => Ok(text.to_owned()),
    }
}

/// `--slo`: a latency target, such as `p99.9<=10ms`.
fn parse_target(text: &str) -> Result<sockscale_load::slo::Target, String> {
    sockscale_load::slo::Target::parse(text).map_err(|e| e.to_string())
}

/// `--start-at`: RFC 3339 or Unix seconds, within a day from now.
fn parse_start_at(text: &str) -> Result<std::time::SystemTime, String> {
    let text = text.trim();
    let at = match text.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => std::time::UNIX_EPOCH + Duration::from_secs_f64(secs),
        Ok(_) => return Err(format!("'{text}' is not a time: Unix seconds are 0 or more")),
        Err(_) => humantime::parse_rfc3339_weak(text).map_err(|e| {
            format!("'{text}' is not a time ({e}): give RFC 3339 (2026-11-23T22:30:00Z) or Unix seconds")
        })?,
    };
    let now = std::time::SystemTime::now();
    if at.duration_since(now).is_ok_and(|ahead| ahead > Duration::from_secs(24 * 3600)) {
        return Err(format!("'{text}' is more than a day away: a run waits for it in the foreground"));
    }
    Ok(at)
}

/// `--start-at` as Unix seconds, as the reports give it.
pub(super) fn unix_seconds(at: std::time::SystemTime) -> f64 {
    at.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
