//! `sockscale load`: echo, HTTP and UDP load, and `merge` of saved reports.

use crate::output::say;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use sockscale_load::{HttpRequest, LoadConfig, Mode, Progress, Report};
use sockscale_server::TerminationSignals;

use crate::cli::procs;
use crate::units::{parse_duration, parse_size};

#[derive(Debug, Subcommand)]
pub enum LoadCommand {
    /// TCP echo: each connection sends messages and checks every byte that comes back
    Echo(EchoArgs),
    /// HTTP/1.1: requests answered by Content-Length or chunked responses, checked
    Http(HttpArgs),
    /// UDP echo: datagrams with sequence numbers; reports rate each way and loss
    Udp(UdpArgs),
    /// Merge reports of runs made side by side (processes, machines) into one
    Merge(MergeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Connections (UDP: sockets)
    #[arg(short = 'c', long = "connections", default_value_t = 10)]
    pub conns: usize,
    /// Run for this long [default: 10 s unless -n is given]
    #[arg(short = 'd', long = "duration", value_parser = parse_duration, value_name = "SECS")]
    pub duration: Option<Duration>,
    /// Stop after exactly this many requests (messages, datagrams) have been answered
    #[arg(short = 'n', long = "requests")]
    pub requests: Option<u64>,
    /// Threads, each with its own event loop [default: the number of CPUs]
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Open-loop total rate in requests per second; latency is measured from the scheduled
    /// send time (coordinated omission corrected, as in wrk2)
    #[arg(short = 'R', long = "rate")]
    pub total_rate: Option<f64>,
    /// Connections per block; each block shares one -r budget
    #[arg(long, default_value_t = 1000)]
    pub block: usize,
    /// New connections per second [default: as fast as they complete]
    #[arg(long, value_name = "N")]
    pub connect_rate: Option<f64>,
    /// Local source addresses: a range (127.0.0.1-127.0.0.50) or a list, to pass the
    /// ephemeral-port limit
    #[arg(long, value_parser = sockscale_load::source::parse_sources, value_name = "ADDRS")]
    pub source: Option<std::vec::Vec<std::net::IpAddr>>,
    /// Spread the connections over this many processes (past the per-process open-files
    /// limit) and merge their results
    #[arg(long, default_value_t = 1)]
    pub procs: usize,
    /// Give up on a connect after this long
    #[arg(long, default_value = "5", value_parser = parse_duration, value_name = "SECS")]
    pub connect_timeout: Duration,
    /// Count a reply as timed out (UDP: lost) after this long
    #[arg(long = "timeout", default_value = "10", value_parser = parse_duration, value_name = "SECS")]
    pub reply_timeout: Duration,
    /// Write the full report (every figure, HDR histograms, client CPU, options) as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Internal: this process is slot K of N of a --procs run
    #[arg(long, hide = true, value_name = "K/N")]
    pub proc_slot: Option<String>,
}

#[derive(Debug, Args)]
pub struct EchoArgs {
    /// Server address, e.g. 127.0.0.1:8080
    pub addr: String,
    /// Message length in bytes
    #[arg(short = 'l', long = "length", default_value = "512", value_parser = parse_size)]
    pub length: usize,
    /// Messages in flight per connection
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Limit each block's total send rate to this many bytes per second (the seed's -r)
    #[arg(short = 'r', long = "byte-rate", value_parser = parse_size, value_name = "BYTES_PER_SEC")]
    pub byte_rate: Option<usize>,
    /// Keep Nagle's algorithm on
    #[arg(long)]
    pub no_nodelay: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct HttpArgs {
    /// URL, e.g. http://127.0.0.1:8080/
    pub url: String,
    /// A new connection for every request, as ab does without -k
    #[arg(long)]
    pub no_keepalive: bool,
    /// Requests in flight per connection
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Disable Nagle's algorithm [default]
    #[arg(long, overrides_with = "no_nodelay")]
    pub nodelay: bool,
    /// Keep Nagle's algorithm on
    #[arg(long)]
    pub no_nodelay: bool,
    /// Request method
    #[arg(short = 'm', long = "method", default_value = "GET")]
    pub method: String,
    /// Extra header, 'Name: value'; may be repeated
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Request body from a file
    #[arg(long, value_name = "FILE")]
    pub body: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct UdpArgs {
    /// Server address, e.g. 127.0.0.1:9000
    pub addr: String,
    /// Datagram length in bytes (at least 8)
    #[arg(short = 'l', long = "length", default_value = "512", value_parser = parse_size)]
    pub length: usize,
    /// Datagrams in flight per socket
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Reports written with --json
    #[arg(required = true, num_args = 1..)]
    pub reports: Vec<PathBuf>,
    /// Write the merged report here
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn run(command: &LoadCommand, argv: &[String]) -> Result<()> {
    let (common, cfg) = match command {
        LoadCommand::Merge(args) => return merge(args),
        LoadCommand::Echo(a) => (&a.common, echo_config(a)?),
        LoadCommand::Http(a) => (&a.common, http_config(a)?),
        LoadCommand::Udp(a) => (&a.common, udp_config(a)?),
    };
    let report = if common.procs > 1 && common.proc_slot.is_none() {
        procs::run_load_children(common.procs, argv, cfg.progress)?
    } else {
        let stop = Arc::new(AtomicBool::new(false));
        // Ctrl-C ends the run early and still reports what was measured.
        let signals = TerminationSignals::block().context("cannot block SIGINT/SIGTERM")?;
        let flag = stop.clone();
        std::thread::Builder::new().name("sockscale-signals".into()).spawn(move || {
            if signals.wait().is_ok() {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })?;
        sockscale_load::run(cfg, &stop)?
    };
    if let Some(path) = &common.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    if common.proc_slot.is_none() {
        say!("{}", report.summary());
    }
    Ok(())
}

fn merge(args: &MergeArgs) -> Result<()> {
    let reports = args.reports.iter().map(|p| Report::load(&p.display().to_string())).collect::<Result<Vec<_>, _>>()?;
    let merged = Report::merge(&reports)?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&merged)? + "\n")
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    say!("{}", merged.summary());
    Ok(())
}

fn resolve(target: &str) -> Result<SocketAddr> {
    let mut addrs =
        target.to_socket_addrs().with_context(|| format!("cannot resolve '{target}' (expected HOST:PORT)"))?;
    addrs.next().with_context(|| format!("'{target}' resolves to no address"))
}

/// This process's share of the run: (connections, first connection number, requests, rate).
fn share(common: &Common) -> Result<(usize, u64, Option<u64>, Option<f64>)> {
    let Some(slot) = &common.proc_slot else {
        return Ok((common.conns, 0, common.requests, common.total_rate));
    };
    let (k, n) = slot
        .split_once('/')
        .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|(k, n)| k < n)
        .with_context(|| format!("bad --proc-slot '{slot}'"))?;
    let part = |total: u64| total / n as u64 + u64::from((k as u64) < total % n as u64);
    let first =
        (0..k).map(|i| common.conns as u64 / n as u64 + u64::from((i as u64) < common.conns as u64 % n as u64)).sum();
    Ok((part(common.conns as u64) as usize, first, common.requests.map(part), common.total_rate.map(|r| r / n as f64)))
}

fn base_config(
    common: &Common,
    mode: Mode,
    addr: SocketAddr,
    target: String,
    options: serde_json::Value,
) -> Result<LoadConfig> {
    let (conns, first_conn, requests, total_rate) = share(common)?;
    let duration = match (common.duration, common.requests) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let threads = common.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let progress = if common.proc_slot.is_some() { Progress::JsonLines } else { Progress::Line };
    if conns == 0 {
        bail!("-c {} is fewer connections than --procs {}", common.conns, common.procs);
    }
    Ok(LoadConfig {
        mode,
        addr,
        target,
        conns,
        threads,
        duration,
        requests,
        depth: 1,
        block: common.block,
        connect_rate: common.connect_rate.map(|r| r / common.procs as f64),
        block_byte_rate: None,
        total_rate,
        nodelay: true,
        sources: common.source.clone().unwrap_or_default(),
        connect_timeout: common.connect_timeout,
        reply_timeout: common.reply_timeout,
        first_conn,
        total_conns: common.conns as u64,
        progress,
        options,
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
        "block": common.block,
        "connect_rate": common.connect_rate,
        "source": common.source.as_ref().map(|s| s.iter().map(ToString::to_string).collect::<Vec<_>>()),
        "procs": common.procs,
        "connect_timeout_s": common.connect_timeout.as_secs_f64(),
        "timeout_s": common.reply_timeout.as_secs_f64(),
    });
    if let (Some(map), serde_json::Value::Object(more)) = (v.as_object_mut(), extra) {
        map.extend(more);
    }
    v
}

fn echo_config(a: &EchoArgs) -> Result<LoadConfig> {
    let addr = resolve(&a.addr)?;
    let options = options_json(
        "echo",
        &a.addr,
        &a.common,
        serde_json::json!({
            "length": a.length, "depth": a.depth, "byte_rate": a.byte_rate, "nodelay": !a.no_nodelay,
        }),
    );
    let mut cfg = base_config(&a.common, Mode::Echo { msg_len: a.length }, addr, a.addr.clone(), options)?;
    cfg.depth = a.depth;
    cfg.block_byte_rate = a.byte_rate.map(|r| r as f64);
    cfg.nodelay = !a.no_nodelay;
    Ok(cfg)
}

fn udp_config(a: &UdpArgs) -> Result<LoadConfig> {
    let addr = resolve(&a.addr)?;
    let options = options_json("udp", &a.addr, &a.common, serde_json::json!({ "length": a.length, "depth": a.depth }));
    let mut cfg = base_config(&a.common, Mode::Udp { msg_len: a.length }, addr, a.addr.clone(), options)?;
    cfg.depth = a.depth;
    Ok(cfg)
}

fn http_config(a: &HttpArgs) -> Result<LoadConfig> {
    let (authority, path) = parse_url(&a.url)?;
    let addr = resolve(&with_default_port(&authority))?;
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
    };
    let options = options_json(
        "http",
        &a.url,
        &a.common,
        serde_json::json!({
            "keepalive": !a.no_keepalive, "pipeline": a.pipeline, "nodelay": !a.no_nodelay, "method": a.method,
            "headers": a.headers, "body": a.body.as_ref().map(|p| p.display().to_string()),
        }),
    );
    let mut cfg = base_config(&a.common, Mode::Http(request), addr, a.url.clone(), options)?;
    cfg.nodelay = !a.no_nodelay;
    Ok(cfg)
}

/// Split `http://host[:port]/path` into the authority and the path.
fn parse_url(url: &str) -> Result<(String, String)> {
    let rest = url.strip_prefix("http://").with_context(|| {
        if url.starts_with("https://") {
            format!("'{url}': https is not supported; use an http:// URL")
        } else {
            format!("'{url}' is not an http:// URL")
        }
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        bail!("'{url}' has no host");
    }
    Ok((authority.to_owned(), path.to_owned()))
}

fn with_default_port(authority: &str) -> String {
    let has_port = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("http://127.0.0.1:8080/a/b").unwrap(), ("127.0.0.1:8080".into(), "/a/b".into()));
        assert_eq!(parse_url("http://localhost").unwrap(), ("localhost".into(), "/".into()));
        assert!(parse_url("https://x/").unwrap_err().to_string().contains("https"));
        assert!(parse_url("ftp://x/").is_err());
        assert_eq!(with_default_port("localhost"), "localhost:80");
        assert_eq!(with_default_port("[::1]:81"), "[::1]:81");
        assert_eq!(with_default_port("[::1]"), "[::1]:80");
    }
}
