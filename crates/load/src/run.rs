//! Running a load: check the target answers, start one event loop per thread, show progress, and
//! assemble the report.

use std::io::{IsTerminal, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use sockscale_tls::{ClientSession, FailureReason};

use crate::config::{Endpoint, LoadConfig, LoadConfigError, LoadTls, Mode, Progress};
use crate::event_loop::{EventLoop, Shared, ThreadResult};
use crate::hlog::Intervals;
use crate::limits::{self, Demand, LimitError};
use crate::report::{
    ByteCounts, Connections, Cpu, EndedEarly, Latency, PreStart, Report, Requests, Second, Window, H2, SCHEMA,
};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] LoadConfigError),
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error("cannot reach {target}: {reason}")]
    Unreachable { target: String, reason: String },
    /// The probe got through but no connection of the run ever did.
    #[error("cannot connect to {target}: {reason} (no connection succeeded in {waited_s:.1} s)")]
    CannotConnect { target: String, reason: String, waited_s: f64 },
    /// The probe's TLS handshake failed: the run would fail every one.
    #[error("TLS handshake with {target} failed: {reason}{hint}")]
    Tls { target: String, reason: String, hint: &'static str },
    #[error("cannot write --hdr-log {path}: {error}")]
    HdrLog { path: String, error: std::io::Error },
    /// `--http2`, and the probe found the server does not speak it.
    #[error("{target} does not speak HTTP/2: {reason}")]
    NotHttp2 { target: String, reason: String },
    #[error("cannot start a load thread: {0}")]
    Thread(std::io::Error),
    /// A plaintext run at a port that answers a ClientHello with a ServerHello.
    #[error("{target}: this port speaks TLS: {fix}")]
    SpeaksTls { target: String, fix: String },
    /// `load ws`: the probe's upgrade was refused, or its 101 was wrong; the run would fail
    /// every connection alike.
    #[error("{target}: {reason}")]
    NoWebSocket { target: String, reason: String },
    /// `--http3`: the probe's QUIC handshake failed (ALPN refused, the server closed it); the
    /// run would fail every connection alike.
    #[error("QUIC handshake with {target} failed: {reason}")]
    Quic { target: String, reason: String },
}

/// Run the load described by `cfg` to its end (duration or request count) or until `stop`
/// is set, and report what was measured.
pub fn run(cfg: LoadConfig, stop: &AtomicBool) -> Result<Report, LoadError> {
    run_with(cfg, stop, |_| {})
}

/// [`run`], and with `cfg.connect_first`, call `before_start` once every connection has
/// connected or failed its first attempt: the measured phase begins when it returns (it may
/// wait for a start time, or for the word of a parent process). It is given `stop`, which it
/// should heed.
pub fn run_with(
    cfg: LoadConfig,
    stop: &AtomicBool,
    before_start: impl FnOnce(&AtomicBool),
) -> Result<Report, LoadError> {
    preflight(&cfg)?;
    let (requests, request_len, head_requests) = match &cfg.mode {
        Mode::Http(h) => {
            let one = h.render();
            (one.repeat(h.pipeline), one.len(), h.is_head())
        }
        _ => (Vec::new(), 0, false),
    };
    let threads = cfg.threads.min(cfg.conns).max(1);
    let cpu_before = sockscale_sys::cpu_times().unwrap_or_default();
    let hdr_log = match &cfg.hdr_log {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|error| LoadError::HdrLog { path: path.display().to_string(), error })?;
            let open_loop = cfg.total_rate.is_some();
            Some(std::sync::Mutex::new(Intervals::new(Box::new(std::io::BufWriter::new(file)), threads, open_loop)))
        }
        None => None,
    };
    let mut shared = Shared::new(cfg, requests, request_len, head_requests, threads).map_err(LoadError::Thread)?;
    shared.intervals = hdr_log;
    let mut started_unix_s = unix_now();
    let mut cpu_at_start = cpu_before;
    let mut pre_start = None;
    let mut seconds = Vec::new();
    let mut results = std::thread::scope(|scope| -> Result<Vec<ThreadResult>, LoadError> {
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let event_loop = EventLoop::new(&shared, t, threads).map_err(LoadError::Thread)?;
            let handle = std::thread::Builder::new()
                .name(format!("sockscale-load-{t}"))
                .spawn_scoped(scope, move || event_loop.run())
                .map_err(LoadError::Thread)?;
            handles.push(handle);
        }
        let done = AtomicBool::new(false);
        std::thread::scope(|inner| {
            inner.spawn(|| show_progress(&shared, &done, stop));
            let timeline = inner.spawn(|| sample_timeline(&shared, &done));
            if let Some(gate) = &shared.gate {
                // Connect first: wait for every thread (or the end of the run), let the caller
                // choose the instant, then open the gate.
                while shared.ready.load(std::sync::atomic::Ordering::Acquire) < threads
                    && !shared.stop.load(Relaxed)
                    && !stop.load(Relaxed)
                    && !handles.iter().all(|h| h.is_finished())
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let connect_s = shared.start.elapsed().as_secs_f64();
                before_start(stop);
                cpu_at_start = sockscale_sys::cpu_times().unwrap_or_default();
                started_unix_s = unix_now();
                // Counted before the gate opens: a short run may close them all at once.
                pre_start = Some(PreStart {
                    wanted: shared.cfg.conns as u64,
                    open: shared.open.load(Relaxed),
                    connect_s,
                    cpu: cpu_between(cpu_before, cpu_at_start),
                });
                let _ = shared.began.set(Instant::now());
                gate.wake();
            }
            let results: Vec<ThreadResult> = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();
            done.store(true, Relaxed);
            seconds = timeline.join().unwrap_or_default();
            Ok(results)
        })
    })?;
    let began = *shared.began.get_or_init(Instant::now);
    // The measured phase: without the wait at its end for what was in flight (the threads
    // wait side by side, so the longest of their waits).
    let waited = results.iter().map(|r| r.at_end.waited_s).fold(0.0, f64::max);
    let ran = began.elapsed();
    let elapsed = ran.saturating_sub(Duration::from_secs_f64(waited));
    if let Some(intervals) = &shared.intervals {
        // The log has the answers of the wait too: its intervals run to now.
        let mut log = intervals.lock().unwrap_or_else(|e| e.into_inner());
        log.begin(std::time::SystemTime::now() - ran);
        if let Err(e) = log.finish(ran) {
            tracing::error!(
                "--hdr-log {}: {e}",
                shared.cfg.hdr_log.as_deref().map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
    }
    let cpu_after = sockscale_sys::cpu_times().unwrap_or_default();
    // Closed now, after the measured phase was timed: tearing down is not part of it.
    drop(results.iter_mut().flat_map(|r| std::mem::take(&mut r.unclosed)).collect::<Vec<_>>());
    let mut report = assemble(&shared, threads, results, elapsed, cpu_at_start, cpu_after);
    report.pre_start = pre_start;
    report.timeline = seconds;
    report.window =
        Some(Window { start_at_unix_s: None, started_unix_s, ended_unix_s: started_unix_s + elapsed.as_secs_f64() });
    if let Some(reason) = shared.gave_up.get() {
        let waited_s = shared.cfg.connect_timeout.as_secs_f64();
        if report.connections.connected == 0 {
            return Err(LoadError::CannotConnect {
                target: shared.cfg.target.clone(),
                reason: reason.clone(),
                waited_s,
            });
        }
        report.ended_early = Some(EndedEarly::NoConnection { reason: reason.clone(), waited_s });
    } else if stop.load(Relaxed) {
        report.ended_early = Some(EndedEarly::Interrupted);
    } else if let Some(retries) =
        shared.cfg.connect_retries.filter(|_| report.connections.abandoned >= shared.cfg.conns as u64)
    {
        if report.connections.connected == 0 {
            // Nothing ever connected: the target takes no connection, as without the flag.
            return Err(LoadError::CannotConnect {
                target: shared.cfg.target.clone(),
                reason: format!("every connection failed {} times in a row (--connect-retries {retries})", retries + 1),
                waited_s: elapsed.as_secs_f64(),
            });
        }
        report.ended_early = Some(EndedEarly::AllGivenUp { retries });
    }
    Ok(report)
}

/// Everything checked before a run starts: the configuration, this machine's limits for it
/// (raising the open-files soft limit to the hard one first), and that the target answers.
/// `--procs` runs it once in the parent, for the largest process share, before starting any.
pub fn preflight(cfg: &LoadConfig) -> Result<(), LoadError> {
    cfg.validate()?;
    let open_files = limits::raise_open_files().unwrap_or(None);
    let demand = Demand {
        total_conns: cfg.total_conns.max(cfg.conns as u64),
        per_process: cfg.conns as u64,
        threads: cfg.threads.min(cfg.conns).max(1),
        target: cfg.addr.inet(),
        sources: cfg.sources.clone(),
    };
    let ports = limits::local_port_range();
    limits::check(&demand, open_files, ports)?;
    // A --procs child's parent has warned once for the run (its preflight sees the largest
    // share): every child saying it again would print the same line N + 1 times.
    let child_of_procs = cfg.progress == Progress::JsonLines;
    if !matches!(cfg.mode, Mode::Udp { .. }) && !child_of_procs {
        if let Some(warning) = limits::crowded_ports(&demand, ports) {
            tracing::warn!("{warning}");
        }
    }
    probe(cfg)
}

/// Fail fast, with one clear reason, when the target does not answer at all.
fn probe(cfg: &LoadConfig) -> Result<(), LoadError> {
    let unreachable = |reason: String| LoadError::Unreachable { target: cfg.target.clone(), reason };
    let addr = match &cfg.addr {
        Endpoint::Inet(addr) => *addr,
        Endpoint::Unix(path) => {
            // A Unix connect is answered at once: no timeout to wait for.
            let stream = std::os::unix::net::UnixStream::connect(path).map_err(|e| unreachable(unix_reason(&e)))?;
            return probe_stream(cfg, stream);
        }
    };
    if matches!(&cfg.mode, Mode::Http(h) if h.http3) {
        return probe_h3(cfg, addr);
    }
    match cfg.mode {
        Mode::Udp { msg_len } => {
            let local: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
                .parse()
                .map_err(|_| unreachable("bad address".into()))?;
            let socket = UdpSocket::bind(local).map_err(|e| unreachable(e.to_string()))?;
            socket.connect(addr).map_err(|e| unreachable(e.to_string()))?;
            socket.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| unreachable(e.to_string()))?;
            socket.send(&vec![0u8; msg_len]).map_err(|e| unreachable(e.to_string()))?;
            let mut buf = vec![0u8; msg_len.max(1)];
            match socket.recv(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    Err(unreachable("connection refused (ICMP port unreachable)".into()))
                }
                // No answer may be one lost datagram; the run will count losses.
                _ => Ok(()),
            }
        }
        _ => {
            let began = Instant::now();
            let stream =
                TcpStream::connect_timeout(&addr, cfg.connect_timeout).map_err(|e| unreachable(e.to_string()))?;
            let round_trip = began.elapsed();
            // HTTP/1.1 only: HTTP/2 in clear finds out with its preface, below; echo sends
            // nothing before the run (an echo server would take any byte for load).
            if cfg.tls.is_none() && matches!(&cfg.mode, Mode::Http(h) if !h.http2) {
                let stream = stream.try_clone().map_err(|e| unreachable(e.to_string()))?;
                if plain_bytes_refused(cfg, stream, round_trip) && speaks_tls(cfg, addr) {
                    return Err(speaks_tls_error(cfg, addr));
                }
            }
            probe_stream(cfg, stream)
        }
    }
}

/// Whether a plaintext client's first bytes meet what a TLS server does with them: an alert
/// record, or a close (or reset) with nothing said. Only the request line is sent, never a
/// whole request, so a plain server counts no request for the probe; it waits for the rest,
/// and the probe waits for it no longer than a few round trips (at least 20 ms).
fn plain_bytes_refused(cfg: &LoadConfig, mut stream: TcpStream, round_trip: Duration) -> bool {
    let Mode::Http(h) = &cfg.mode else { return false };
    let request = h.render();
    let first = &request[..request.iter().position(|&b| b == b'\n').map_or(request.len(), |i| i + 1)];
    let wait = (4 * round_trip).max(Duration::from_millis(20)).min(cfg.reply_timeout);
    if stream.write_all(first).is_err() || stream.set_read_timeout(Some(wait)).is_err() {
        return false;
    }
    let mut buf = [0u8; 2];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => n < 2 || buf == [0x15, 0x03],
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// Whether `addr` answers a ClientHello with a TLS handshake record (a ServerHello, or an
/// alert for a handshake it refuses): asked only when plain bytes met a TLS server's refusal,
/// so that a server that closes on every plain client is not taken for one.
fn speaks_tls(cfg: &LoadConfig, addr: SocketAddr) -> bool {
    let Ok(client) = sockscale_tls::ClientTls::new(&sockscale_tls::Trust::Insecure, Vec::new(), false) else {
        return false;
    };
    let mut hello = Vec::new();
    if ClientSession::start(&client, &addr.ip().to_string(), Instant::now(), &mut hello).is_err() {
        return false;
    }
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, cfg.connect_timeout) else { return false };
    let timeout = cfg.connect_timeout.max(cfg.reply_timeout);
    if stream.write_all(&hello).is_err() || stream.set_read_timeout(Some(timeout)).is_err() {
        return false;
    }
    let mut record = [0u8; 2];
    stream.read_exact(&mut record).is_ok() && matches!(record, [0x15 | 0x16, 0x03])
}

/// What to give instead: the URL with https:// (and its port, which the plain default would
/// not keep).
fn speaks_tls_error(cfg: &LoadConfig, addr: SocketAddr) -> LoadError {
    let fix = match cfg.target.strip_prefix("http://") {
        Some(rest) => {
            let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
            let has_port = authority.rsplit_once(':').is_some_and(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
                && !authority.ends_with(']');
            let authority = if has_port { authority.to_owned() } else { format!("{authority}:{}", addr.port()) };
            format!("use https://{authority}{path}")
        }
        None => "use https://".to_owned(),
    };
    LoadError::SpeaksTls { target: cfg.target.clone(), fix }
}

/// The probe on a connected stream: the TLS handshake, and with `--http2` whether the server
/// agrees to HTTP/2 (ALPN over TLS; its SETTINGS answering the preface in clear).
fn probe_stream(cfg: &LoadConfig, stream: impl ProbeStream) -> Result<(), LoadError> {
    let timeout = cfg.connect_timeout.max(cfg.reply_timeout);
    let ws_h2 = matches!(&cfg.mode, Mode::Ws(w) if w.http2);
    let http2 = matches!(&cfg.mode, Mode::Http(h) if h.http2) || ws_h2;
    let not_http2 = |reason: String| LoadError::NotHttp2 { target: cfg.target.clone(), reason };
    let hint = if ws_h2 { WS_H2C_HINT } else { H2C_HINT };
    let checked = match &cfg.tls {
        Some(tls) => {
            let alpn = handshake(stream, tls, timeout).map_err(|(reason, hint)| LoadError::Tls {
                target: cfg.target.clone(),
                reason,
                hint,
            })?;
            match alpn {
                _ if !http2 => Ok(()),
                Some(p) if p == b"h2" => Ok(()),
                chosen => Err(not_http2(format!(
                    "over TLS it chose ALPN {} when offered h2 and http/1.1 (leave out --http2)",
                    chosen.map_or_else(|| "none".to_owned(), |p| String::from_utf8_lossy(&p).into_owned())
                ))),
            }
        }
        None if matches!(cfg.mode, Mode::Ws(_)) && !ws_h2 => {
            let no_websocket = |reason| LoadError::NoWebSocket { target: cfg.target.clone(), reason };
            stream.set_read_timeout(Some(timeout)).map_err(|e| no_websocket(e.to_string()))?;
            crate::ws::probe_upgrade(cfg, stream, timeout).map_err(no_websocket)
        }
        None if http2 => h2c_greeting(stream, timeout, hint).map_err(|reason| match (&cfg.addr, reason) {
            (Endpoint::Inet(addr), H2cRefusal::Tls) if speaks_tls(cfg, *addr) => speaks_tls_error(cfg, *addr),
            (_, H2cRefusal::Tls) => not_http2(format!("the server closed the connection at the HTTP/2 preface{hint}")),
            (_, H2cRefusal::Other(reason)) => not_http2(reason),
        }),
        None => Ok(()),
    };
    checked?;
    if ws_h2 {
        probe_tunnel(cfg, timeout)?;
    }
    Ok(())
}

/// `load ws --http2`: on a fresh connection, the server's SETTINGS must enable extended CONNECT
/// and a WebSocket's CONNECT be answered 200 (see `ws_h2_probe::probe`).
fn probe_tunnel(cfg: &LoadConfig, timeout: Duration) -> Result<(), LoadError> {
    let no_websocket = |reason: String| LoadError::NoWebSocket { target: cfg.target.clone(), reason };
    // Reads wake now and then, so that the probe's deadline is its own.
    let poll = Some(Duration::from_millis(50));
    match &cfg.addr {
        Endpoint::Inet(addr) => {
            let stream =
                TcpStream::connect_timeout(addr, cfg.connect_timeout).map_err(|e| no_websocket(e.to_string()))?;
            stream.set_read_timeout(poll).map_err(|e| no_websocket(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            crate::ws_h2_probe::probe(cfg, stream, timeout).map_err(no_websocket)
        }
        Endpoint::Unix(path) => {
            let stream = std::os::unix::net::UnixStream::connect(path).map_err(|e| no_websocket(unix_reason(&e)))?;
            stream.set_read_timeout(poll).map_err(|e| no_websocket(e.to_string()))?;
            crate::ws_h2_probe::probe(cfg, stream, timeout).map_err(no_websocket)
        }
    }
}

const H2C_HINT: &str = " (leave out --http2, or give an https:// URL for h2 by ALPN)";
const WS_H2C_HINT: &str = " (leave out --http2, or give a wss:// URL for h2 by ALPN)";

/// Why a server did not greet the HTTP/2 preface.
enum H2cRefusal {
    /// As a TLS server refuses plain bytes: an alert, or a close with nothing said.
    Tls,
    Other(String),
}

impl From<String> for H2cRefusal {
    fn from(reason: String) -> Self {
        H2cRefusal::Other(reason)
    }
}

/// Send the HTTP/2 preface and wait for the server's SETTINGS.
fn h2c_greeting(mut stream: impl ProbeStream, timeout: Duration, hint: &str) -> Result<(), H2cRefusal> {
    let mut out = Vec::new();
    let mut conn = sockscale_h2::ClientConnection::new(sockscale_h2::ClientSettings::default(), &mut out);
    stream.write_all(&out).map_err(|e| format!("{e} sending the preface"))?;
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 16 << 10];
    let mut first = true;
    while !conn.greeted() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no SETTINGS within {:.1} s of the preface{hint}", timeout.as_secs_f64()).into());
        }
        stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        let n = match stream.read(&mut buf) {
            Ok(0) if first => return Err(H2cRefusal::Tls),
            Ok(0) => return Err(format!("the server closed the connection at the HTTP/2 preface{hint}").into()),
            Ok(n) if first && buf[..n].starts_with(&[0x15, 0x03]) => return Err(H2cRefusal::Tls),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(format!("no SETTINGS within {:.1} s of the preface{hint}", timeout.as_secs_f64()).into())
            }
            Err(e) if first && e.kind() == std::io::ErrorKind::ConnectionReset => return Err(H2cRefusal::Tls),
            Err(e) => return Err(e.to_string().into()),
        };
        first = false;
        out.clear();
        if let Err(e) = conn.receive(&buf[..n], &mut out, &mut |_| {}) {
            return Err(match e {
                sockscale_h2::ClientError::NotHttp2 => {
                    let line = buf[..n].split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
                    let line = String::from_utf8_lossy(&line[..line.len().min(80)]);
                    format!("it answered the preface (h2c, prior knowledge) with '{line}'{hint}")
                }
                e => format!("{e}, answering the preface{hint}"),
            }
            .into());
        }
    }
    Ok(())
}

/// Why a Unix socket could not be connected to, in the words of what to do about it.
fn unix_reason(e: &std::io::Error) -> String {
    let hint = match e.raw_os_error() {
        Some(libc::ENOENT) => " (no socket file there: is the server running? it creates the file when it starts)",
        Some(libc::ECONNREFUSED) => " (a socket file nothing listens on: the server that made it has gone)",
        Some(libc::EACCES) => " (connecting needs write permission on the socket file: see serve --unix-mode)",
        Some(libc::ENOTSOCK) => " (the file is not a socket)",
        _ => "",
    };
    format!("{e}{hint}")
}

/// A blocking stream the probe's handshake runs over: TCP or Unix.
trait ProbeStream: std::io::Read + std::io::Write {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()>;
}

impl ProbeStream for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

impl ProbeStream for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
}

/// The probe's TLS handshake, blocking, within `timeout`: a certificate the client does not
/// trust, a server that does not speak TLS, or nothing in common fails it here, once, with the
/// reason, instead of failing every connection of the run. It resumes nothing and leaves no
/// session behind, so the run's first handshakes are as they would be without it.
fn handshake(
    mut stream: impl ProbeStream,
    tls: &LoadTls,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, (String, &'static str)> {
    let io = |e: std::io::Error| (format!("{e} during the handshake"), "");
    let client = tls.client.without_resumption();
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut session = ClientSession::start(&client, &tls.server_name, Instant::now(), &mut out)
        .map_err(|failure| (failure.to_string(), ""))?;
    let mut buf = vec![0u8; 32 << 10];
    let mut plain = Vec::new();
    loop {
        stream.write_all(&out).map_err(io)?;
        out.clear();
        if !session.is_handshaking() {
            return Ok(session.negotiated().and_then(|n| n.alpn));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((format!("no handshake within {:.1} s", timeout.as_secs_f64()), ""));
        }
        stream.set_read_timeout(Some(left)).map_err(io)?;
        let n = match stream.read(&mut buf) {
            Ok(0) => return Err(("the server closed the connection during the handshake".into(), NOT_TLS_HINT)),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err((format!("no handshake within {:.1} s", timeout.as_secs_f64()), NOT_TLS_HINT))
            }
            Err(e) => return Err(io(e)),
        };
        session.receive(&mut buf[..n], Instant::now(), &mut plain, &mut out).map_err(|failure| {
            // The fatal alert that tells the server why (a bad certificate, say), best effort.
            let _ = stream.write_all(&out);
            // A certificate's refusal carries its own advice, which knows the flags passed.
            let hint = match failure.reason {
                FailureReason::Protocol | FailureReason::NotTls => NOT_TLS_HINT,
                _ => "",
            };
            (failure.to_string(), hint)
        })?;
    }
}

const NOT_TLS_HINT: &str = " (is it serving TLS on that port?)";

/// `--http3`: one QUIC handshake, blocking, within the connect timeout: nothing listening (an
/// ICMP port unreachable), nothing answering, a refused ALPN or an untrusted certificate fails
/// it here, once, with the reason. It resumes nothing and leaves no session behind.
fn probe_h3(cfg: &LoadConfig, addr: SocketAddr) -> Result<(), LoadError> {
    use crate::h3::H3Client;
    let target = || cfg.target.clone();
    let unreachable = |reason: String| LoadError::Unreachable { target: target(), reason };
    let Mode::Http(request) = &cfg.mode else { return Ok(()) };
    let mut fresh = cfg.clone();
    if let Some(tls) = &mut fresh.tls {
        tls.client = tls.client.without_resumption();
    }
    let profile = crate::connection::h3_profile(&fresh, request)
        .map_err(|reason| LoadError::Quic { target: target(), reason })?;
    let local: SocketAddr =
        if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().map_err(|_| unreachable("bad address".into()))?;
    let socket = UdpSocket::bind(local).map_err(|e| unreachable(e.to_string()))?;
    socket.connect(addr).map_err(|e| unreachable(e.to_string()))?;
    let began = Instant::now();
    let deadline = began + cfg.connect_timeout;
    let mut client =
        H3Client::new(&profile, began).map_err(|f| LoadError::Quic { target: target(), reason: f.words })?;
    let (mut out, mut buf) = (Vec::new(), vec![0u8; 64 << 10]);
    loop {
        let now = Instant::now();
        out.clear();
        while let Some((size, segment)) = client.poll_transmit(now, 1, &mut out) {
            for datagram in out[..size].chunks(segment.unwrap_or(size).max(1)) {
                let _ = socket.send(datagram);
            }
            out.clear();
        }
        client.drain(&mut |_| {});
        if client.established() {
            let last = client.close(Instant::now(), &mut |_| {});
            let _ = socket.send(&last);
            return Ok(());
        }
        if let Some(failure) = client.failure() {
            return Err(match failure.kind.as_str() {
                "certificate" | "tls" => LoadError::Tls { target: target(), reason: failure.words, hint: "" },
                _ => LoadError::Quic { target: target(), reason: failure.words },
            });
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(unreachable(format!(
                "no QUIC handshake within {:.1} s (--connect-timeout): nothing answers on UDP port {}, or it does not speak QUIC",
                cfg.connect_timeout.as_secs_f64(),
                addr.port()
            )));
        }
        let wake = client.poll_timeout().map_or(deadline, |at| at.min(deadline));
        let wait = wake.saturating_duration_since(now).max(Duration::from_millis(1));
        socket.set_read_timeout(Some(wait)).map_err(|e| unreachable(e.to_string()))?;
        match socket.recv(&mut buf) {
            Ok(n) => {
                let now = Instant::now();
                client.handle(now, &buf[..n]);
                client.after_datagrams(now, &mut |_| {});
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(unreachable(format!("nothing listens on UDP port {} (ICMP port unreachable)", addr.port())))
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                client.handle_timeout(Instant::now());
            }
            Err(e) => return Err(unreachable(e.to_string())),
        }
    }
}

fn show_progress(shared: &Shared, done: &AtomicBool, stop: &AtomicBool) {
    let mode = shared.cfg.progress;
    if mode == Progress::Off || (mode == Progress::Line && !std::io::stderr().is_terminal()) {
        while !done.load(Relaxed) {
            if stop.load(Relaxed) {
                shared.stop.store(true, Relaxed);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        return;
    }
    let mut last_completed = 0;
    let mut last = Instant::now();
    let mut next = last + Duration::from_secs(1);
    while !done.load(Relaxed) {
        if stop.load(Relaxed) {
            shared.stop.store(true, Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
        if Instant::now() < next {
            continue;
        }
        next += Duration::from_secs(1);
        let completed: u64 = shared.live.iter().map(|l| l.completed.load(Relaxed)).sum();
        let errors: u64 = shared.live.iter().map(|l| l.errors.load(Relaxed)).sum();
        let open: u64 = shared.live.iter().map(|l| l.open.load(Relaxed)).sum();
        let now = Instant::now();
        let rate = (completed - last_completed) as f64 / now.duration_since(last).as_secs_f64();
        (last_completed, last) = (completed, now);
        let elapsed = now.duration_since(shared.start).as_secs();
        match mode {
            // Output errors (a closed pipe) are ignored: progress is a courtesy.
            Progress::Line => {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r[{elapsed:>4}s] connections {open:>7}  completed {completed:>11}  {rate:>10.0}/s  errors {errors:>6}   ");
                let _ = err.flush();
            }
            Progress::JsonLines => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{{\"progress\":{{\"elapsed_s\":{elapsed},\"open\":{open},\"completed\":{completed},\"errors\":{errors}}}}}");
                let _ = out.flush();
            }
            Progress::Off => {}
        }
    }
    if mode == Progress::Line {
        let _ = writeln!(std::io::stderr());
    }
}

/// The measured phase second by second, from the threads' live counters and the process's
/// CPU, sampled at each whole second from its start and once more at the end.
fn sample_timeline(shared: &Shared, done: &AtomicBool) -> Vec<Second> {
    let totals = || {
        let completed: u64 = shared.live.iter().map(|l| l.completed.load(Relaxed)).sum();
        let errors: u64 = shared.live.iter().map(|l| l.errors.load(Relaxed)).sum();
        let open: u64 = shared.live.iter().map(|l| l.open.load(Relaxed)).sum();
        let (user, system) = sockscale_sys::cpu_times().unwrap_or_default();
        (completed, errors, open, (user + system).as_secs_f64())
    };
    let began = loop {
        if let Some(began) = shared.began.get() {
            break *began;
        }
        if done.load(Relaxed) {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut seconds: Vec<Second> = Vec::new();
    let mut last = totals();
    // The live counters are published after each loop turn of a thread: at most 100 ms late.
    // They start from zero: this thread sees `began` up to 5 ms after it was set, and
    // exchanges that completed in between belong to the first second, not to no second.
    let (mut last_completed, mut last_errors, mut last_cpu) = (0, 0, last.3);
    let mut t = 0u64;
    loop {
        let next = began + Duration::from_secs(t + 1);
        while Instant::now() < next && !done.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(10).min(next.saturating_duration_since(Instant::now())));
        }
        let finished = done.load(Relaxed);
        let length_s = if finished { began.elapsed().as_secs_f64() - t as f64 } else { 1.0 };
        last = totals();
        let tail = seconds.last_mut().filter(|_| finished && length_s < 0.1);
        if let Some(previous) = tail {
            // A sliver of a second at the end (the run's last moments, its connections closed):
            // counted with the second before it rather than drawn as a second of its own.
            previous.length_s += length_s.max(0.0);
            previous.completed += last.0.saturating_sub(last_completed);
            previous.errors += last.1.saturating_sub(last_errors);
            previous.cpu_s += (last.3 - last_cpu).max(0.0);
        } else {
            seconds.push(Second {
                t,
                length_s: length_s.min(1.0),
                completed: last.0.saturating_sub(last_completed),
                errors: last.1.saturating_sub(last_errors),
                open: last.2,
                cpu_s: (last.3 - last_cpu).max(0.0),
                latency: None,
            });
        }
        (last_completed, last_errors, last_cpu) = (last.0, last.1, last.3);
        if finished {
            return seconds;
        }
        t += 1;
    }
}

fn assemble(
    shared: &Shared,
    threads: usize,
    results: Vec<ThreadResult>,
    elapsed: Duration,
    cpu_before: (Duration, Duration),
    cpu_after: (Duration, Duration),
) -> Report {
    let cfg = &shared.cfg;
    let mut total = ThreadResult::default();
    for r in results {
        total.attempted += r.attempted;
        total.retries += r.retries;
        total.abandoned += r.abandoned;
        total.connected += r.connected;
        total.sent += r.sent;
        total.completed += r.completed;
        total.bytes_sent += r.bytes_sent;
        total.bytes_received += r.bytes_received;
        total.statuses.add(&r.statuses);
        total.errors.add(&r.errors);
        if total.first_bad_response.is_none() {
            total.first_bad_response.clone_from(&r.first_bad_response);
        }
        total.udp.add(&r.udp);
        total.never_attempted.add(&r.never_attempted);
        total.at_end.add(&r.at_end);
        // Same bounds on every histogram, so adding cannot fail.
        total.latency.add(&r.latency);
        let _ = total.connect_latency.add(&r.connect_latency);
        total.tls.add(&r.tls);
        total.h2.add(&r.h2);
        total.ws.add(&r.ws);
        total.quic.add(&r.quic);
    }
    let http3 = matches!(&cfg.mode, Mode::Http(h) if h.http3);
    let mut report = Report {
        schema: SCHEMA,
        mode: cfg.mode.name().into(),
        target: cfg.target.clone(),
        options: cfg.options.clone(),
        procs: 1,
        threads: threads as u32,
        duration_s: elapsed.as_secs_f64(),
        connections: Connections {
            attempted: total.attempted,
            retries: total.retries,
            abandoned: total.abandoned,
            connected: total.connected,
            peak_open: shared.peak_open.load(Relaxed),
            asked: cfg.conns as u64,
            never_attempted: total.never_attempted,
        },
        requests: Requests { sent: total.sent, completed: total.completed },
        bytes: ByteCounts { sent: total.bytes_sent, received: total.bytes_received },
        statuses: total.statuses,
        errors: total.errors,
        first_bad_response: total.first_bad_response,
        at_end: total.at_end,
        udp: total.udp,
        latency: Latency::from_histogram(&total.latency.corrected),
        latency_uncorrected: Latency::from_histogram(&total.latency.uncorrected),
        schedule_slip: Latency::from_histogram(&total.latency.slip),
        connect_latency: Latency::from_histogram(&total.connect_latency),
        // HTTP/3's TLS is inside QUIC: its handshakes are in the QUIC block.
        tls: cfg.tls.as_ref().filter(|_| !http3).map(|_| total.tls.report()),
        timeline: Vec::new(),
        h2: (matches!(&cfg.mode, Mode::Http(h) if h.http2) || matches!(&cfg.mode, Mode::Ws(w) if w.http2))
            .then(|| H2 { protocol: if cfg.tls.is_some() { "h2" } else { "h2c" }.to_owned(), ..total.h2 }),
        ws: matches!(&cfg.mode, Mode::Ws(_)).then_some(total.ws),
        quic: http3.then(|| total.quic.report()),
        cpu: cpu_between(cpu_before, cpu_after),
        client_cores: 0,
        cpus: 0,
        rates: Default::default(),
        pre_start: None,
        ended_early: None,
        segment: None,
        host: host_name(),
        window: None,
        disjoint_windows: Vec::new(),
        agents: Vec::new(),
    };
    // What this process may run on: its affinity mask (and a cgroup's CPU quota).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    (report.cpus, report.client_cores) = (cpus, (threads as u32).min(cpus));
    report.compute_rates();
    report
}

/// The CPU used between two readings of (user, system).
fn cpu_between(before: (Duration, Duration), after: (Duration, Duration)) -> Cpu {
    Cpu {
        user_s: after.0.saturating_sub(before.0).as_secs_f64(),
        system_s: after.1.saturating_sub(before.1).as_secs_f64(),
    }
}

/// Now, in Unix seconds.
fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// This machine's name, as the kernel has it (a pod's name under Kubernetes).
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_owned()).filter(|n| !n.is_empty())
}
