//! `sockscale load`: echo, HTTP and UDP load, and `merge` of saved reports.

use crate::output::{note, say};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use sockscale_load::report::{Apart, EndedEarly};
use sockscale_load::{AcceptedStatuses, Endpoint, HttpRequest, LoadConfig, LoadTls, Mode, Progress, Report, Segment};
use sockscale_server::TerminationSignals;
use sockscale_tls::{ClientTls, Trust};

use crate::cli::procs;
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

/// `load echo --block`: connections sharing one `-r` budget, as in the seed's client.
const DEFAULT_BLOCK: usize = 1000;

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
    #[arg(long, value_name = "TARGET", value_parser = super::slo::parse_target)]
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
    fn given(&self) -> Option<&'static str> {
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
    fn config(&self, host: &str, alpn: &[&[u8]]) -> Result<LoadTls> {
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

    fn options(&self) -> serde_json::Value {
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

pub fn run(command: &LoadCommand, argv: &[String]) -> Result<()> {
    let (common, cfg) = match command {
        LoadCommand::Merge(args) => return merge(args),
        LoadCommand::Echo(a) => (&a.common, echo_config(a)?),
        LoadCommand::Http(a) => (&a.common, http_config(a)?),
        LoadCommand::Udp(a) => (&a.common, udp_config(a)?),
    };
    if let Some(target) = &common.slo {
        return super::slo::search(common, &cfg, target, argv);
    }
    // Opened before the run: a path that cannot be written fails now, not after it.
    let json = common.json.as_deref().map(JsonSink::open).transpose()?;
    let html = match &common.html {
        Some(path) if common.proc_slot.is_none() => Some((
            path,
            std::fs::File::create(path).with_context(|| format!("cannot write --html {}", path.display()))?,
        )),
        _ => None,
    };
    // The page's latency second by second comes from the interval log: kept beside the page
    // when --hdr-log names none.
    let temp_log = (html.is_some() && common.hdr_log.is_none())
        .then(|| std::env::temp_dir().join(format!("sockscale-page-{}.hlog", std::process::id())));
    let hlog = common.hdr_log.clone().or_else(|| temp_log.clone());
    let mut cfg = cfg;
    cfg.hdr_log.clone_from(&hlog);
    let report = if common.procs > 1 && common.proc_slot.is_none() {
        // `cfg` is the largest process's share: checked once here, rather than failing in
        // every child.
        sockscale_load::preflight(&cfg)?;
        if let Some(path) = &common.hdr_log {
            // Made now, as a single process makes it: a path that cannot be written fails here.
            std::fs::File::create(path).with_context(|| format!("cannot write --hdr-log {}", path.display()))?;
        }
        procs::run_load_children(common.procs, argv, cfg.progress, hlog.as_deref())?
    } else {
        let stop = Arc::new(AtomicBool::new(false));
        // Ctrl-C ends the run early and still reports what was measured.
        let signals = TerminationSignals::block().context("cannot block SIGINT/SIGTERM")?;
        let flag = stop.clone();
        // A child of --procs reports to its parent, which exits with the signal's status.
        let child_of_procs = common.proc_slot.is_some();
        std::thread::Builder::new().name("sockscale-signals".into()).spawn(move || {
            if let Ok(signal) = signals.wait() {
                if !child_of_procs {
                    crate::cli::interrupted::record(signal);
                }
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })?;
        if let Some(at) = common.start_at.filter(|_| !cfg.connect_first) {
            wait_until(at, &stop);
        }
        let mut report = sockscale_load::run_with(cfg, &stop, |stop| match common.start_at {
            Some(at) => wait_until(at, stop),
            // A child of --procs: tell the parent it is ready and begin at its word.
            None if child_of_procs => procs::ready_then_wait_for_go(stop),
            None => {}
        })?;
        if let (Some(at), Some(window)) = (common.start_at, report.window.as_mut()) {
            window.start_at_unix_s = Some(unix_seconds(at));
        }
        report
    };
    let mut report = report;
    if common.proc_slot.is_none() {
        // The agent's report says which part of the run it is (a --procs child's is a part of
        // that part, merged by its parent).
        report.segment = common.segment;
    }
    if let (Some(path), None) = (&hlog, &common.proc_slot) {
        match std::fs::read(path)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| Ok(sockscale_load::hlog::read(&bytes, &path.display().to_string())?))
        {
            Ok(log) => sockscale_load::hlog::timeline_latency(&mut report.timeline, &log),
            Err(e) => note!("warning: the interval log {} was not read: {e:#}\n", path.display()),
        }
    }
    if let Some(path) = &temp_log {
        let _ = std::fs::remove_file(path);
    }
    let summary_to_stderr = matches!(json, Some(JsonSink::Stdout));
    if let Some(sink) = json {
        sink.write(&report)?;
    }
    if let Some((path, mut file)) = html {
        file.write_all(sockscale_load::page::render(&report).as_bytes())
            .with_context(|| format!("cannot write --html {}", path.display()))?;
    }
    if common.proc_slot.is_some() {
        // A child of --procs: its parent judges the merged report.
        return Ok(());
    }
    show_summary(&report, summary_to_stderr);
    verdict(&report, common.allow_errors)
}

fn merge(args: &MergeArgs) -> Result<()> {
    if let Some(out) = &args.hdr_log {
        return merge_hdr_logs(&args.reports, out);
    }
    let json = args.json.as_deref().map(JsonSink::open).transpose()?;
    let mut paths = Vec::new();
    for path in &args.reports {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read the directory {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
                .collect();
            if found.is_empty() {
                bail!("{} holds no .json report", path.display());
            }
            found.sort();
            paths.extend(found);
        } else {
            paths.push(path.clone());
        }
    }
    let reports = paths.iter().map(|p| Report::load(&p.display().to_string())).collect::<Result<Vec<_>, _>>()?;
    let apart = if args.allow_disjoint { Apart::Allow } else { Apart::Refuse };
    let merged = Report::merge_runs(&reports, apart)?;
    let summary_to_stderr = matches!(json, Some(JsonSink::Stdout));
    if let Some(sink) = json {
        sink.write(&merged)?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, sockscale_load::page::render(&merged))
            .with_context(|| format!("cannot write --html {}", path.display()))?;
    }
    show_summary(&merged, summary_to_stderr);
    verdict(&merged, args.allow_errors)
}

/// `load merge --hdr-log OUT LOGS...`: the interval logs of a run's parts, added interval by
/// interval into one.
fn merge_hdr_logs(inputs: &[PathBuf], out: &std::path::Path) -> Result<()> {
    let mut logs = Vec::new();
    for path in inputs {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        logs.push(sockscale_load::hlog::read(&bytes, &path.display().to_string())?);
    }
    let mut file = std::fs::File::create(out).with_context(|| format!("cannot write --hdr-log {}", out.display()))?;
    sockscale_load::hlog::merge(&logs, &mut file)?;
    let intervals: usize = logs.iter().map(|l| l.intervals.len()).sum();
    let count: u64 =
        logs.iter().flat_map(|l| &l.intervals).filter(|i| i.tag != "uncorrected").map(|i| i.histogram.len()).sum();
    say!(
        "merged {} interval logs ({intervals} interval histograms, {count} latencies) into {}",
        logs.len(),
        out.display()
    );
    Ok(())
}

fn show_summary(report: &Report, to_stderr: bool) {
    if to_stderr {
        note!("{}\n", report.summary());
    } else {
        say!("{}", report.summary());
    }
}

/// The exit status: an error when anything failed, unless --allow-errors; always when the
/// run stopped for want of connections.
fn verdict(report: &Report, allow_errors: bool) -> Result<()> {
    if let Some(why @ EndedEarly::NoConnection { .. }) = &report.ended_early {
        bail!("the run ended early: {why}");
    }
    let failures = report.failures();
    if failures == 0 && report.requests.completed == 0 && report.ended_early.is_none() && !allow_errors {
        let what = match report.mode.as_str() {
            "http" => "request",
            "udp" => "datagram",
            _ => "message",
        };
        return Err(RequestsFailed(format!(
            "no {what} completed ({} sent); --allow-errors exits 0 with nothing done",
            report.requests.sent
        ))
        .into());
    }
    if failures > 0 && !allow_errors {
        let noun = if failures == 1 { "error" } else { "errors" };
        return Err(RequestsFailed(format!(
            "{failures} {noun} ({}); --allow-errors exits 0 with errors",
            report.failure_list()
        ))
        .into());
    }
    Ok(())
}

/// The run went through and its report was written, but it counted errors: exit status
/// [`RequestsFailed::EXIT`], apart from a run that could not be made at all (1), so a script can
/// tell a server that failed requests from a load that never ran (as `curl --fail` has 22 and
/// k6's thresholds 99).
#[derive(Debug)]
pub struct RequestsFailed(String);

impl RequestsFailed {
    pub const EXIT: u8 = 3;
}

impl std::fmt::Display for RequestsFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RequestsFailed {}

/// Where `--json` goes. A file is opened (not truncated) before the run, so a path that cannot
/// be written is found at once; it is removed again if the run fails before writing it and it
/// did not exist before.
pub(super) enum JsonSink {
    Stdout,
    File { path: PathBuf, file: File, created: bool, written: bool },
}

impl JsonSink {
    pub(super) fn open(path: &Path) -> Result<JsonSink> {
        if path.as_os_str() == "-" {
            return Ok(JsonSink::Stdout);
        }
        let existed = path.exists();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot write --json {}", path.display()))?;
        Ok(JsonSink::File { path: path.to_owned(), file, created: !existed, written: false })
    }

    fn write(self, report: &Report) -> Result<()> {
        self.write_text(serde_json::to_string_pretty(report)? + "\n")
    }

    pub(super) fn write_text(mut self, text: String) -> Result<()> {
        match &mut self {
            // A closed stdout only loses what the reader chose not to read.
            JsonSink::Stdout => say!("{}", text.trim_end()),
            JsonSink::File { path, file, written, .. } => {
                file.set_len(0)
                    .and_then(|()| file.write_all(text.as_bytes()))
                    .with_context(|| format!("cannot write --json {}", path.display()))?;
                *written = true;
            }
        }
        Ok(())
    }
}

impl Drop for JsonSink {
    fn drop(&mut self) {
        if let JsonSink::File { path, created: true, written: false, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
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

/// The forms a server address takes, for the line a malformed one gets.
const ADDR_FORMS: &str = "give HOST:PORT, such as 127.0.0.1:8080, localhost:8080 or [::1]:8080";

/// The socket address of `target`, `HOST:PORT`, `[IPv6]:PORT` or, with a `default_port` (the
/// scheme's, for a URL, as curl), `HOST` alone: the host resolved, its first address taken.
fn resolve(target: &str, default_port: Option<u16>) -> Result<SocketAddr> {
    let (host, port) = split_host_port(target)?;
    let port = match (port, default_port) {
        (Some(port), _) => port,
        (None, Some(port)) => port,
        (None, None) => bail!("'{target}' has no port: {ADDR_FORMS}"),
    };
    let addrs = sockscale_server::resolve_host(host, port).map_err(anyhow::Error::msg)?;
    Ok(addrs[0])
}

/// `host:port`, `[v6]:port`, `host` or `[v6]` taken apart (the brackets dropped), the port
/// checked: a number from 1 to 65535.
fn split_host_port(target: &str) -> Result<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = target.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            bail!("'{target}' has no closing ']': {ADDR_FORMS}");
        };
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => bail!("'{target}' has '{after}' after the ']': {ADDR_FORMS}"),
        }
    } else if target.parse::<std::net::Ipv6Addr>().is_ok() {
        bail!("'{target}' is an IPv6 address without brackets or port: {ADDR_FORMS}");
    } else {
        match target.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                bail!("'{target}' is not HOST:PORT (an IPv6 address goes in brackets): {ADDR_FORMS}")
            }
            Some((host, port)) => (host, Some(port)),
            None => (target, None),
        }
    };
    if host.is_empty() {
        bail!("'{target}' has no host: {ADDR_FORMS}");
    }
    let port = match port.map(|p| (p, p.parse::<u16>())) {
        None => None,
        Some((_, Ok(port))) if port > 0 => Some(port),
        Some((text, _)) => {
            bail!("'{target}' has no port number ('{text}' is not a number from 1 to 65535): {ADDR_FORMS}")
        }
    };
    Ok((host, port))
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

pub(super) fn unix_seconds(at: std::time::SystemTime) -> f64 {
    at.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Sleep until `at` (at once if it has passed), waking early if the run is stopped.
fn wait_until(at: std::time::SystemTime, stop: &AtomicBool) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Ok(left) = at.duration_since(std::time::SystemTime::now()) else { return };
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Which slot of a --procs run this process is: from the hidden --proc-slot in a child; in
/// a --procs parent slot 0, the largest share, which the parent checks before starting any.
fn slot(common: &Common) -> Result<Option<(usize, usize)>> {
    let Some(slot) = &common.proc_slot else {
        return Ok((common.procs > 1).then_some((0, common.procs)));
    };
    let parsed = slot
        .split_once('/')
        .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|(k, n)| k < n)
        .with_context(|| format!("bad --proc-slot '{slot}'"))?;
    Ok(Some(parsed))
}

/// This process's share of a run.
struct Share {
    conns: usize,
    /// The number of its first connection in the whole run.
    first_conn: u64,
    requests: Option<u64>,
    total_rate: Option<f64>,
    connect_rate: Option<f64>,
}

/// This process's share of the run: the agent's segment first (`--segment`), then this
/// process's slot of it (`--procs`); connection numbers stay those of the whole run.
fn share(common: &Common) -> Result<Share> {
    let segment = common.segment.unwrap_or(Segment::WHOLE);
    let total = common.conns as u64;
    let mine = segment.range(total);
    let conns = mine.end - mine.start;
    let requests = common.requests.map(|n| segment.part(n));
    let rate = common.total_rate.map(|r| segment.rate(r, total));
    let connect_rate = common.connect_rate.map(|r| segment.rate(r, total));
    let Some((k, n)) = slot(common)? else {
        return Ok(Share { conns: conns as usize, first_conn: mine.start, requests, total_rate: rate, connect_rate });
    };
    let slot = Segment { index: k as u32, count: n as u32 };
    let part = slot.range(conns);
    Ok(Share {
        conns: (part.end - part.start) as usize,
        first_conn: mine.start + part.start,
        requests: requests.map(|q| slot.part(q)),
        total_rate: rate.map(|r| r / n as f64),
        connect_rate: connect_rate.map(|r| r / n as f64),
    })
}

fn base_config(
    common: &Common,
    mode: Mode,
    addr: Endpoint,
    target: String,
    options: serde_json::Value,
) -> Result<LoadConfig> {
    // Every agent of a segmented run, and every process of a --procs run, needs a
    // connection and, with -n, a request.
    if let Some(segment) = common.segment {
        if (common.conns as u64) < u64::from(segment.count) {
            bail!(
                "-c {} is fewer than the {} segments of --segment {segment}: each agent needs a connection",
                common.conns,
                segment.count
            );
        }
        if let Some(n) = common.requests.filter(|&n| n < u64::from(segment.count)) {
            bail!(
                "-n {n} is fewer than the {} segments of --segment {segment}: each agent needs a request",
                segment.count
            );
        }
        let conns = segment.part(common.conns as u64);
        if conns < common.procs as u64 {
            bail!(
                "segment {segment} has {conns} of the {} connections, fewer than --procs {}: use --procs {conns} or fewer",
                common.conns,
                common.procs
            );
        }
    }
    if common.conns < common.procs {
        bail!(
            "-c {} is fewer than --procs {}: each process needs a connection; use --procs {} or fewer",
            common.conns,
            common.procs,
            common.conns
        );
    }
    if let Some(n) = common.requests.filter(|&n| n < common.procs as u64) {
        bail!("-n {n} is fewer than --procs {}: each process needs a request; use --procs {n} or fewer", common.procs);
    }
    let Share { conns, first_conn, requests, total_rate, connect_rate } = share(common)?;
    let duration = match (common.duration, common.requests, common.per_conn) {
        (None, None, None) => Some(Duration::from_secs(10)),
        (d, _, _) => d,
    };
    let threads = common.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let progress = if common.proc_slot.is_some() { Progress::JsonLines } else { Progress::Line };
    Ok(LoadConfig {
        mode,
        addr,
        target,
        conns,
        threads,
        duration,
        requests,
        depth: 1,
        // Blocks matter only to echo's -r, which sets its own.
        block: DEFAULT_BLOCK,
        connect_rate,
        block_byte_rate: None,
        total_rate,
        nodelay: true,
        sources: common.source.clone().unwrap_or_default(),
        connect_timeout: common.connect_timeout,
        connect_retries: common.connect_retries,
        reply_timeout: common.reply_timeout,
        first_conn,
        total_conns: common.conns as u64,
        progress,
        accept_status: AcceptedStatuses::default(),
        options,
        connect_first: common.connect_before_start,
        per_conn: common.per_conn,
        tls: None,
        hdr_log: common.hdr_log.clone(),
    })
}

fn options_json(mode: &str, target: &str, common: &Common, extra: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "mode": mode,
        "target": target,
        "connections": common.conns,
        "duration_s": common.duration.map(|d| d.as_secs_f64()),
        "requests": common.requests,
        "threads": common.threads,
        "rate": common.total_rate,
        "connect_rate": common.connect_rate,
        "source": common.source.as_ref().map(|s| s.iter().map(ToString::to_string).collect::<Vec<_>>()),
        "procs": common.procs,
        "segment": common.segment.map(|s| s.to_string()),
        "start_at": common.start_at.map(unix_seconds),
        "connect_before_start": common.connect_before_start,
        "per_conn": common.per_conn,
        "connect_timeout_s": common.connect_timeout.as_secs_f64(),
        "connect_retries": common.connect_retries,
        "timeout_s": common.reply_timeout.as_secs_f64(),
        "allow_errors": common.allow_errors,
    });
    if let (Some(map), serde_json::Value::Object(more)) = (v.as_object_mut(), extra) {
        map.extend(more);
    }
    v
}

/// `--unix-socket PATH`: the endpoint, after refusing what has no meaning over a Unix socket.
fn unix_endpoint(path: &Path, no_nodelay: bool, nodelay: bool) -> Result<Endpoint> {
    sockscale_server::check_unix_path(path).map_err(|e| anyhow::anyhow!("--unix-socket {e}"))?;
    for (flag, given) in [("--no-nodelay", no_nodelay), ("--nodelay", nodelay)] {
        if given {
            bail!("{flag} does not apply to --unix-socket: TCP_NODELAY is a TCP option");
        }
    }
    Ok(Endpoint::Unix(path.to_owned()))
}

/// The target as reports name it: what was asked, and the socket it went through.
fn via(named: Option<&str>, path: &Path) -> String {
    match named {
        Some(named) => format!("{named} via unix:{}", path.display()),
        None => format!("unix:{}", path.display()),
    }
}

fn echo_config(a: &EchoArgs) -> Result<LoadConfig> {
    let (addr, target) = match (&a.unix_socket, &a.addr) {
        (Some(path), named) => (unix_endpoint(path, a.no_nodelay, false)?, via(named.as_deref(), path)),
        (None, Some(addr)) => (resolve(addr, None)?.into(), addr.clone()),
        (None, None) => bail!("give the server's address, or --unix-socket PATH"),
    };
    let tls = match (a.tls, a.tls_args.given()) {
        (true, _) => {
            let Some(host) = a.addr.as_deref().map(host_of).or(a.tls_args.sni.as_deref()) else {
                bail!("--tls over --unix-socket needs the name the certificate is for: give ADDR (its host) or --sni NAME")
            };
            Some(a.tls_args.config(host, &[])?)
        }
        (false, Some(flag)) => bail!("{flag} is for a TLS run: add --tls"),
        (false, None) => None,
    };
    let options = options_json(
        "echo",
        &target,
        &a.common,
        serde_json::json!({
            "length": a.length, "depth": a.depth, "byte_rate": a.byte_rate, "block": a.block, "nodelay": !a.no_nodelay,
            "tls": a.tls.then(|| a.tls_args.options()),
            "unix_socket": a.unix_socket.as_ref().map(|p| p.display().to_string()),
        }),
    );
    let mut cfg = base_config(&a.common, Mode::Echo { msg_len: a.length }, addr, target, options)?;
    cfg.depth = a.depth;
    cfg.block_byte_rate = a.byte_rate.map(|r| r as f64);
    cfg.block = a.block;
    cfg.nodelay = !a.no_nodelay;
    cfg.tls = tls;
    Ok(cfg)
}

fn udp_config(a: &UdpArgs) -> Result<LoadConfig> {
    let addr = resolve(&a.addr, None)?;
    let options = options_json("udp", &a.addr, &a.common, serde_json::json!({ "length": a.length, "depth": a.depth }));
    let mut cfg = base_config(&a.common, Mode::Udp { msg_len: a.length }, addr.into(), a.addr.clone(), options)?;
    cfg.depth = a.depth;
    Ok(cfg)
}

fn http_config(a: &HttpArgs) -> Result<LoadConfig> {
    let Url { https, authority, path } = parse_url(&a.url)?;
    let (addr, target) = match &a.unix_socket {
        // As curl: the URL still names the host (the Host header, the TLS server name).
        Some(socket) => (unix_endpoint(socket, a.no_nodelay, a.nodelay)?, via(Some(&a.url), socket)),
        None => (resolve(&authority, Some(if https { 443 } else { 80 }))?.into(), a.url.clone()),
    };
    let tls = match (https, a.tls_args.given()) {
        (true, _) => {
            // With --http2, http/1.1 is offered too (as curl does), so that a server without
            // HTTP/2 says so by choosing it, rather than by failing the handshake.
            let alpn: &[&[u8]] = if a.http2 { &[b"h2", b"http/1.1"] } else { &[b"http/1.1"] };
            Some(a.tls_args.config(host_of(&authority), alpn)?)
        }
        (false, Some(flag)) => bail!("{flag} is for an https:// URL"),
        (false, None) => None,
    };
    let mut headers = Vec::new();
    for h in &a.headers {
        let (name, value) = h.split_once(':').with_context(|| format!("-H '{h}' is not 'Name: value'"))?;
        if name.trim().is_empty() {
            bail!("-H '{h}' has no header name");
        }
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let body = match &a.body {
        Some(p) => Bytes::from(std::fs::read(p).with_context(|| format!("cannot read --body {}", p.display()))?),
        None => Bytes::new(),
    };
    let request = HttpRequest {
        method: a.method.clone(),
        host: authority.clone(),
        path,
        headers,
        body,
        keepalive: !a.no_keepalive,
        pipeline: a.pipeline,
        http2: a.http2,
        scheme: if https { "https" } else { "http" }.to_owned(),
    };
    let options = options_json(
        "http",
        &target,
        &a.common,
        serde_json::json!({
            "keepalive": !a.no_keepalive, "pipeline": a.pipeline, "http2": a.http2, "nodelay": !a.no_nodelay, "method": a.method,
            "headers": a.headers, "body": a.body.as_ref().map(|p| p.display().to_string()),
            "accept_status": a.accept_status.to_string(),
            "tls": https.then(|| a.tls_args.options()),
            "unix_socket": a.unix_socket.as_ref().map(|p| p.display().to_string()),
        }),
    );
    let mut cfg = base_config(&a.common, Mode::Http(request), addr, target, options)?;
    cfg.nodelay = !a.no_nodelay;
    cfg.accept_status = a.accept_status.clone();
    cfg.tls = tls;
    Ok(cfg)
}

/// A URL taken apart.
#[derive(Debug, PartialEq, Eq)]
struct Url {
    https: bool,
    authority: String,
    path: String,
}

/// Split `http[s]://host[:port][/path][?query]` into the scheme, the authority and the path
/// (with its query; a `#fragment` is not sent, as curl does not send it). The authority's form
/// is checked here; its host is resolved only when connecting to it.
fn parse_url(url: &str) -> Result<Url> {
    const URL_FORM: &str = "give http://HOST[:PORT]/PATH or https://HOST[:PORT]/PATH, such as http://127.0.0.1:8080/";
    let scheme_end = url.find("://");
    let (https, rest) = match scheme_end.map(|i| (url[..i].to_ascii_lowercase(), &url[i + 3..])) {
        Some((scheme, rest)) if scheme == "http" => (false, rest),
        Some((scheme, rest)) if scheme == "https" => (true, rest),
        Some((scheme, _)) => bail!("'{url}' is a {scheme}:// URL; load http speaks http:// and https://"),
        None => bail!("'{url}' is not a URL: {URL_FORM}"),
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    if authority.is_empty() {
        bail!("'{url}' has no host: {URL_FORM}");
    }
    if authority.contains('@') {
        bail!("'{url}' holds user credentials, which are not sent: give -H 'Authorization: ...' instead");
    }
    split_host_port(authority).with_context(|| format!("'{url}'"))?;
    Ok(Url { https, authority: authority.to_owned(), path })
}

/// The host of `host:port`, `host`, `[v6]:port` or `[v6]`: the TLS server name.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(host, _)| host);
    }
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn load(args: &[&str]) -> Result<LoadConfig> {
        let argv = [&["sockscale", "load"], args].concat();
        let Cli { command: Command::Load(command) } = Cli::try_parse_from(argv)? else { panic!("load") };
        match *command {
            LoadCommand::Echo(a) => echo_config(&a),
            LoadCommand::Http(a) => http_config(&a),
            LoadCommand::Udp(a) => udp_config(&a),
            LoadCommand::Merge(_) => panic!("echo, http or udp"),
        }
    }

    #[test]
    fn unix_socket_flags() {
        let cfg = load(&["http", "http://localhost/x", "--unix-socket", "/tmp/s.sock", "-n", "5"]).unwrap();
        assert_eq!(cfg.addr, Endpoint::Unix("/tmp/s.sock".into()));
        assert_eq!(cfg.target, "http://localhost/x via unix:/tmp/s.sock");
        let Mode::Http(request) = &cfg.mode else { panic!("http") };
        assert_eq!((request.host.as_str(), request.path.as_str()), ("localhost", "/x"));
        // The URL's host is not resolved: it only names the server.
        assert!(load(&["http", "http://no-such-host.invalid/", "--unix-socket", "s.sock"]).is_ok());
        let echo = load(&["echo", "--unix-socket", "s.sock"]).unwrap();
        assert_eq!((echo.addr, echo.target.as_str()), (Endpoint::Unix("s.sock".into()), "unix:s.sock"));
        assert_eq!(load(&["echo", "app:1", "--unix-socket", "s.sock"]).unwrap().target, "app:1 via unix:s.sock");
        let err = |args: &[&str]| format!("{:#}", load(args).unwrap_err());
        assert!(err(&["echo"]).contains("<ADDR>"), "{}", err(&["echo"]));
        assert!(err(&["echo", "--unix-socket", "s.sock", "--tls"]).contains("--sni NAME"));
        assert!(load(&["echo", "--unix-socket", "s.sock", "--tls", "--sni", "localhost", "-k"]).is_ok());
        assert!(err(&["echo", "--unix-socket", "s.sock", "--no-nodelay"]).contains("TCP_NODELAY"));
        assert!(err(&["http", "http://h/", "--unix-socket", "s.sock", "--nodelay"]).contains("TCP_NODELAY"));
        let long = format!("/{}", "s".repeat(120));
        assert!(err(&["echo", "--unix-socket", &long]).contains("at most 107"));
        let source = load(&["echo", "--unix-socket", "s.sock", "--source", "127.0.0.1"]).unwrap();
        assert!(source.validate().unwrap_err().to_string().contains("--source does not apply to --unix-socket"));
    }

    #[test]
    fn malformed_targets_say_what_form_is_expected() {
        let err = |args: &[&str]| format!("{:#}", load(args).unwrap_err());
        for (args, want) in [
            (&["echo", "127.0.0.1"][..], "'127.0.0.1' has no port: give HOST:PORT"),
            (&["echo", "127.0.0.1:abc"], "('abc' is not a number from 1 to 65535): give HOST:PORT"),
            (&["echo", "127.0.0.1:0"], "('0' is not a number from 1 to 65535)"),
            (&["udp", "localhost"], "'localhost' has no port: give HOST:PORT"),
            (&["echo", ":8080"], "':8080' has no host: give HOST:PORT"),
            (&["echo", "::1:8080"], "without brackets or port: give HOST:PORT"),
            (&["echo", "[::1:8080"], "no closing ']'"),
            (&["http", "127.0.0.1:8080/"], "is not a URL: give http://HOST[:PORT]/PATH"),
            (&["http", "http://127.0.0.1:99999/"], "('99999' is not a number from 1 to 65535)"),
            (&["http", "http:///x"], "has no host"),
            (&["http", "http://u:p@h/"], "-H 'Authorization: ...'"),
        ] {
            let line = err(args);
            assert!(line.contains(want) && !line.contains('\n'), "{args:?}: {line}");
        }
        for args in [
            &["echo", "nosuchhost.invalid:80"][..],
            &["udp", "nosuchhost.invalid:80"],
            &["http", "http://nosuchhost.invalid/"],
        ] {
            let line = err(args);
            assert!(line.starts_with("cannot resolve host 'nosuchhost.invalid': "), "{args:?}: {line}");
            assert!(!line.contains("HOST:PORT"), "{line}");
        }
    }

    #[test]
    fn urls() {
        let url = |https, authority: &str, path: &str| Url { https, authority: authority.into(), path: path.into() };
        assert_eq!(parse_url("http://127.0.0.1:8080/a/b").unwrap(), url(false, "127.0.0.1:8080", "/a/b"));
        assert_eq!(parse_url("http://localhost").unwrap(), url(false, "localhost", "/"));
        assert_eq!(parse_url("https://localhost:8443/x").unwrap(), url(true, "localhost:8443", "/x"));
        assert!(parse_url("ftp://x/").unwrap_err().to_string().contains("https://"));
        assert_eq!(parse_url("HTTP://h?q=1#frag").unwrap(), url(false, "h", "/?q=1"));
        assert_eq!(parse_url("http://h/a?b#c").unwrap(), url(false, "h", "/a?b"));
        // As curl: the scheme's port when the URL gives none.
        assert_eq!(resolve("127.0.0.1", Some(80)).unwrap(), "127.0.0.1:80".parse().unwrap());
        assert_eq!(resolve("[::1]", Some(443)).unwrap(), "[::1]:443".parse().unwrap());
        assert_eq!(resolve("[::1]:81", Some(80)).unwrap(), "[::1]:81".parse().unwrap());
        assert_eq!(resolve("localhost:9", None).unwrap().port(), 9);
        assert_eq!(host_of("localhost:8443"), "localhost");
        assert_eq!(host_of("localhost"), "localhost");
        assert_eq!(host_of("[::1]:8443"), "::1");
        assert_eq!(host_of("[::1]"), "::1");
        assert_eq!(host_of("127.0.0.1:1"), "127.0.0.1");
    }
}
