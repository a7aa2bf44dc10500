//! Running a load: check the target answers, start one engine per thread, show progress, and
//! assemble the report.

use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::config::{LoadConfig, LoadConfigError, Mode, Progress};
use crate::engine::{Engine, Live, Shared, ThreadResult};
use crate::pattern::Pattern;
use crate::report::{ByteCounts, Connections, Cpu, Latency, Report, Requests, SCHEMA};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] LoadConfigError),
    #[error("cannot reach {target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error("cannot start a load thread: {0}")]
    Thread(std::io::Error),
}

/// Run the load described by `cfg` to its end (duration or request count) or until `stop`
/// is set, and report what was measured.
pub fn run(cfg: LoadConfig, stop: &AtomicBool) -> Result<Report, LoadError> {
    cfg.validate()?;
    probe(&cfg)?;
    let (requests, request_len, head_requests) = match &cfg.mode {
        Mode::Http(h) => {
            let one = h.render();
            (one.repeat(h.pipeline), one.len(), h.is_head())
        }
        _ => (Vec::new(), 0, false),
    };
    let threads = cfg.threads.min(cfg.conns).max(1);
    let cpu_before = sockscale_sys::cpu_times().unwrap_or_default();
    let start = Instant::now();
    let shared = Shared {
        pattern: Pattern::default(),
        requests,
        request_len,
        head_requests,
        start,
        end: cfg.duration.map(|d| start + d),
        budget: cfg.requests.map(AtomicU64::new),
        stop: AtomicBool::new(false),
        open: AtomicU64::new(0),
        peak_open: AtomicU64::new(0),
        live: (0..threads).map(|_| Live::default()).collect(),
        cfg,
    };
    let results = std::thread::scope(|scope| -> Result<Vec<ThreadResult>, LoadError> {
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let engine = Engine::new(&shared, t, threads).map_err(LoadError::Thread)?;
            let handle = std::thread::Builder::new()
                .name(format!("sockscale-load-{t}"))
                .spawn_scoped(scope, move || engine.run())
                .map_err(LoadError::Thread)?;
            handles.push(handle);
        }
        let done = AtomicBool::new(false);
        std::thread::scope(|inner| {
            inner.spawn(|| show_progress(&shared, &done, stop));
            let results: Vec<ThreadResult> = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();
            done.store(true, Relaxed);
            Ok(results)
        })
    })?;
    let elapsed = start.elapsed();
    let cpu_after = sockscale_sys::cpu_times().unwrap_or_default();
    Ok(assemble(&shared, threads, results, elapsed, cpu_before, cpu_after))
}

/// Fail fast, with one clear reason, when the target does not answer at all.
fn probe(cfg: &LoadConfig) -> Result<(), LoadError> {
    let unreachable = |reason: String| LoadError::Unreachable { target: cfg.target.clone(), reason };
    match cfg.mode {
        Mode::Udp { msg_len } => {
            let local: SocketAddr = if cfg.addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
                .parse()
                .map_err(|_| unreachable("bad address".into()))?;
            let socket = UdpSocket::bind(local).map_err(|e| unreachable(e.to_string()))?;
            socket.connect(cfg.addr).map_err(|e| unreachable(e.to_string()))?;
            socket.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| unreachable(e.to_string()))?;
            let _ = socket.send(&vec![0u8; msg_len]);
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
            let stream =
                TcpStream::connect_timeout(&cfg.addr, cfg.connect_timeout).map_err(|e| unreachable(e.to_string()))?;
            drop(stream);
            Ok(())
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
        total.connected += r.connected;
        total.sent += r.sent;
        total.completed += r.completed;
        total.bytes_sent += r.bytes_sent;
        total.bytes_received += r.bytes_received;
        let s = &mut total.statuses;
        s.s1xx += r.statuses.s1xx;
        s.s2xx += r.statuses.s2xx;
        s.s3xx += r.statuses.s3xx;
        s.s4xx += r.statuses.s4xx;
        s.s5xx += r.statuses.s5xx;
        s.other += r.statuses.other;
        let e = &mut total.errors;
        e.connect_refused += r.errors.connect_refused;
        e.connect_timeout += r.errors.connect_timeout;
        e.connect_other += r.errors.connect_other;
        e.reset += r.errors.reset;
        e.reply_timeout += r.errors.reply_timeout;
        e.closed_by_peer += r.errors.closed_by_peer;
        e.bad_response += r.errors.bad_response;
        e.verify_mismatch += r.errors.verify_mismatch;
        e.other += r.errors.other;
        total.udp.sent += r.udp.sent;
        total.udp.received += r.udp.received;
        total.udp.lost += r.udp.lost;
        total.udp.late += r.udp.late;
        // Same bounds on every histogram, so adding cannot fail.
        let _ = total.latency.add(&r.latency);
        let _ = total.connect_latency.add(&r.connect_latency);
    }
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
            connected: total.connected,
            peak_open: shared.peak_open.load(Relaxed),
        },
        requests: Requests { sent: total.sent, completed: total.completed },
        bytes: ByteCounts { sent: total.bytes_sent, received: total.bytes_received },
        statuses: total.statuses,
        errors: total.errors,
        udp: total.udp,
        latency: Latency::from_histogram(&total.latency),
        connect_latency: Latency::from_histogram(&total.connect_latency),
        cpu: Cpu {
            user_s: cpu_after.0.saturating_sub(cpu_before.0).as_secs_f64(),
            system_s: cpu_after.1.saturating_sub(cpu_before.1).as_secs_f64(),
        },
        rates: Default::default(),
    };
    report.compute_rates();
    report
}
