//! `sockscale load`: echo, HTTP and UDP load, and `merge` of saved reports.

use crate::output::{note, say};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use sockscale_load::report::{Apart, EndedEarly};
use sockscale_load::{AcceptedStatuses, Endpoint, HttpRequest, LoadConfig, Mode, Progress, Report, Segment};
use sockscale_server::TerminationSignals;

use crate::cli::json_sink::JsonSink;
use crate::cli::load_flags::{
    unix_seconds, Common, EchoArgs, HttpArgs, LoadCommand, MergeArgs, UdpArgs, WsArgs, DEFAULT_BLOCK,
};
use crate::cli::procs;

pub fn run(command: &LoadCommand, argv: &[String]) -> Result<()> {
    let (common, cfg) = match command {
        LoadCommand::Merge(args) => return merge(args),
        LoadCommand::Echo(a) => (&a.common, echo_config(a)?),
        LoadCommand::Http(a) => (&a.common, http_config(a)?),
        LoadCommand::Udp(a) => (&a.common, udp_config(a)?),
        LoadCommand::Ws(a) => (&a.common, ws_config(a)?),
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
    if let Some(ws) = report.ws.as_ref().filter(|ws| ws.upgrades == 0 && !ws.refused.is_empty()) {
        // As a wrong port: the target serves no WebSocket here, whatever else is counted.
        bail!("every WebSocket upgrade was refused: the server answered {}", refusal_words(ws));
    }
    let failures = report.failures();
    // --idle sends nothing: holding the connections upgraded is what it does.
    let idle_held = report.ws.as_ref().is_some_and(|ws| ws.upgrades > 0)
        && report.options.get("idle").and_then(serde_json::Value::as_bool) == Some(true);
    if failures == 0 && report.requests.completed == 0 && report.ended_early.is_none() && !allow_errors && !idle_held {
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

/// Refusals by status in words: "404 (12 times)", or several joined.
fn refusal_words(ws: &sockscale_load::report::Ws) -> String {
    let words: Vec<String> = ws
        .refused
        .iter()
        .map(|(&status, &n)| match n {
            1 => format!("{status} (once)"),
            n => format!("{status} ({n} times)"),
        })
        .collect();
    format!("{} instead of 101 Switching Protocols", words.join(", "))
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
        udp_offload: Default::default(),
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

/// `--udp-gso`, `--udp-gro`: each on unless turned off.
fn udp_offload(
    gso: Option<crate::cli::serve::OnOff>,
    gro: Option<crate::cli::serve::OnOff>,
) -> sockscale_sys::udp::Offload {
    use crate::cli::serve::OnOff::Off;
    sockscale_sys::udp::Offload { gso: gso != Some(Off), gro: gro != Some(Off) }
}

fn udp_config(a: &UdpArgs) -> Result<LoadConfig> {
    let addr = resolve(&a.addr, None)?;
    let udp_offload = udp_offload(a.udp_gso, a.udp_gro);
    let extra = serde_json::json!({ "length": a.length, "depth": a.depth, "udp_gso": udp_offload.gso, "udp_gro": udp_offload.gro });
    let options = options_json("udp", &a.addr, &a.common, extra);
    let mut cfg = base_config(&a.common, Mode::Udp { msg_len: a.length }, addr.into(), a.addr.clone(), options)?;
    cfg.depth = a.depth;
    cfg.udp_offload = udp_offload;
    Ok(cfg)
}

fn http_config(a: &HttpArgs) -> Result<LoadConfig> {
    let Url { https, authority, path } = parse_url(&a.url)?;
    let (addr, target) = match &a.unix_socket {
        // As curl: the URL still names the host (the Host header, the TLS server name).
        Some(socket) => (unix_endpoint(socket, a.no_nodelay, a.nodelay)?, via(Some(&a.url), socket)),
        None => (resolve(&authority, Some(if https { 443 } else { 80 }))?.into(), a.url.clone()),
    };
    if a.http3 && !https {
        bail!("--http3: QUIC is always encrypted: give an https:// URL");
    }
    let tls = match (https, a.tls_args.given()) {
        (true, _) if a.http3 => Some(a.tls_args.config(host_of(&authority), &[b"h3"])?),
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
    let offload = udp_offload(a.udp_gso, a.udp_gro);
    let request = HttpRequest {
        method: a.method.clone(),
        host: authority.clone(),
        path,
        headers,
        body,
        keepalive: !a.no_keepalive,
        pipeline: a.pipeline,
        http2: a.http2,
        http3: a.http3,
        zero_rtt: a.zero_rtt,
        quic_max_mtu: a.quic_max_mtu.unwrap_or(sockscale_load::DEFAULT_QUIC_MAX_MTU),
        scheme: if https { "https" } else { "http" }.to_owned(),
    };
    let options = options_json(
        "http",
        &target,
        &a.common,
        serde_json::json!({
            "keepalive": !a.no_keepalive, "pipeline": a.pipeline, "http2": a.http2, "http3": a.http3, "0rtt": a.zero_rtt, "quic_max_mtu": a.quic_max_mtu,
            "udp_gso": a.http3.then_some(offload.gso), "udp_gro": a.http3.then_some(offload.gro), "nodelay": !a.no_nodelay, "method": a.method,
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
    cfg.udp_offload = offload;
    Ok(cfg)
}

fn ws_config(a: &WsArgs) -> Result<LoadConfig> {
    let (wss, rest) = match a.url.find("://").map(|i| (a.url[..i].to_ascii_lowercase(), &a.url[i + 3..])) {
        Some((scheme, rest)) if scheme == "ws" => (false, rest),
        Some((scheme, rest)) if scheme == "wss" => (true, rest),
        Some((scheme, _)) => bail!("'{}' is a {scheme}:// URL; load ws speaks ws:// and wss://", a.url),
        None => bail!("'{}' is not a URL: give ws://HOST[:PORT]/PATH or wss://HOST[:PORT]/PATH", a.url),
    };
    // The same form as http:// and https://, whose ports they default to.
    let Url { authority, path, .. } = parse_url(&format!("http://{rest}"))
        .map_err(|e| anyhow::anyhow!("{}", format!("{e:#}").replace(&format!("http://{rest}"), &a.url)))?;
    let (addr, target) = match &a.unix_socket {
        Some(socket) => (unix_endpoint(socket, a.no_nodelay, false)?, via(Some(&a.url), socket)),
        None => (resolve(&authority, Some(if wss { 443 } else { 80 }))?.into(), a.url.clone()),
    };
    let tls = match (wss, a.tls_args.given()) {
        // ALPN http/1.1: the upgrade is an HTTP/1.1 request; with --http2, h2 first (and
        // http/1.1, so that a server without h2 is told apart by the probe).
        (true, _) if a.http2 => Some(a.tls_args.config(host_of(&authority), &[b"h2", b"http/1.1"])?),
        (true, _) => Some(a.tls_args.config(host_of(&authority), &[b"http/1.1"])?),
        (false, Some(flag)) => bail!("{flag} is for a wss:// URL"),
        (false, None) => None,
    };
    if a.idle && a.common.duration.is_none() {
        bail!("--idle holds the connections until -d ends the run: give -d");
    }
    let run = sockscale_load::WsRun {
        host: authority.clone(),
        path,
        msg_len: a.size,
        text: a.text,
        deflate: a.deflate,
        pipeline: a.pipeline,
        idle: a.idle,
        ping: a.ping,
        http2: a.http2,
        streams: a.streams,
        close_timeout: a.close_timeout,
    };
    let options = options_json(
        "ws",
        &target,
        &a.common,
        serde_json::json!({
            "size": a.size, "text": a.text, "pipeline": a.pipeline, "deflate": a.deflate, "idle": a.idle,
            "ping_s": a.ping.map(|p| p.as_secs_f64()), "nodelay": !a.no_nodelay,
            "http2": a.http2, "streams": a.streams,
            "tls": wss.then(|| a.tls_args.options()),
            "unix_socket": a.unix_socket.as_ref().map(|p| p.display().to_string()),
        }),
    );
    let mut cfg = base_config(&a.common, Mode::Ws(run), addr, target, options)?;
    cfg.nodelay = !a.no_nodelay;
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
            LoadCommand::Ws(a) => ws_config(&a),
            LoadCommand::Merge(_) => panic!("echo, http, udp or ws"),
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
    fn ws_urls_and_flags() {
        let cfg = load(&["ws", "ws://127.0.0.1:9/chat?room=1", "-n", "5", "--text", "--pipeline", "3"]).unwrap();
        let Mode::Ws(run) = &cfg.mode else { panic!("ws") };
        assert_eq!(
            (run.host.as_str(), run.path.as_str(), run.text, run.pipeline),
            ("127.0.0.1:9", "/chat?room=1", true, 3)
        );
        assert_eq!(cfg.per_conn_depth(), 3);
        assert!(cfg.tls.is_none());
        let wss = load(&["ws", "wss://localhost:8443/", "-n", "1", "-k", "--sni", "example.test"]).unwrap();
        assert_eq!(wss.tls.as_ref().map(|t| t.server_name.as_str()), Some("example.test"));
        assert_eq!(
            load(&["ws", "wss://127.0.0.1/", "-n", "1", "-k"]).unwrap().addr,
            Endpoint::Inet("127.0.0.1:443".parse().unwrap())
        );
        let unix = load(&["ws", "ws://app/x", "--unix-socket", "s.sock", "-n", "1"]).unwrap();
        assert_eq!(unix.target, "ws://app/x via unix:s.sock");
        let err = |args: &[&str]| format!("{:#}", load(args).unwrap_err());
        assert!(err(&["ws", "http://h/"]).contains("load ws speaks ws:// and wss://"));
        assert!(err(&["ws", "h:1"]).contains("give ws://HOST[:PORT]/PATH"));
        assert!(err(&["ws", "ws://127.0.0.1:1/", "-k"]).contains("--insecure is for a wss:// URL"));
        assert!(err(&["ws", "ws://127.0.0.1:1/", "--idle"]).contains("give -d"));
        assert!(err(&["ws", "ws://127.0.0.1:1/", "--text", "--binary"]).contains("cannot be used with"));
        let idle = load(&["ws", "ws://127.0.0.1:1/", "--idle", "-d", "5", "-n", "3"]).unwrap();
        assert!(idle.validate().unwrap_err().to_string().contains("--idle sends no message"));
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
