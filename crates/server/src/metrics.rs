//! `--metrics ADDR`: the counters in Prometheus text format at `GET /metrics`.
//!
//! A small blocking server on its own threads: scrapes are rare and tiny, and keeping them off
//! the workers keeps the workers' loops free of anything but their connections. The acceptor
//! hands each scrape to a thread of its own, so a scraper that connects and sends nothing (or
//! trickles its request) delays no other; each has [`SCRAPE_DEADLINE`] in all to send its
//! request and take the answer, and at most [`MAX_SCRAPES`] are answered at once (one more is
//! answered 503 at once).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sockscale_sys::syscall;

use crate::stats::Stats;

/// The most time one scrape may take, its request and its answer together.
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(2);
/// Scrapes answered at once; a scraper past it gets 503 (Prometheus scrapes a target once an
/// interval, so more than a few at once is a fault or an attack).
pub const MAX_SCRAPES: usize = 16;

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve --metrics on {addr}: {error}")]
pub struct MetricsError {
    addr: SocketAddr,
    error: io::Error,
}

pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    pub fn start(addr: SocketAddr, stats: Arc<Stats>) -> Result<Self, MetricsError> {
        let error = |error| MetricsError { addr, error };
        let listener = TcpListener::bind(addr).map_err(error)?;
        let local = listener.local_addr().map_err(error)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sockscale-metrics".into())
            .spawn(move || serve(listener, stats, thread_stop))
            .map_err(error)?;
        Ok(MetricsServer { addr: local, stop, thread: Some(thread) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: TcpListener, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Acquire) {
        let mut pollfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd; the 200 ms timeout bounds how long a stop goes unnoticed.
        match syscall!(poll(&mut pollfd, 1, 200)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(_) => continue,
        }
        let Ok((mut stream, _)) = listener.accept() else { continue };
        if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_SCRAPES {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            // Answered without reading: the socket's buffer takes these few bytes at once.
            let _ = stream.set_nonblocking(true);
            let _ = stream.write_all(&response("503 Service Unavailable", "too many scrapes at once\n"));
            continue;
        }
        let (stats, done) = (stats.clone(), in_flight.clone());
        let spawned = std::thread::Builder::new().name("sockscale-scrape".into()).spawn(move || {
            if let Err(e) = answer(stream, &stats, Instant::now() + SCRAPE_DEADLINE) {
                tracing::debug!(error = %e, "metrics scrape failed");
            }
            done.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(e) = spawned {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(error = %e, "cannot answer a metrics scrape");
        }
    }
}

/// The time left before `deadline`, as a socket timeout (never zero, which means none).
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "scrape deadline passed"));
    }
    Ok(left)
}

fn answer(mut stream: TcpStream, stats: &Stats, deadline: Instant) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let path = loop {
        stream.set_read_timeout(Some(left(deadline)?))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {
                break (req.method == Some("GET")).then(|| req.path.map(str::to_owned)).flatten()
            }
            Ok(httparse::Status::Partial) if head.len() < 8192 => continue,
            _ => break None,
        }
    };
    let reply = match path.as_deref() {
        Some("/metrics") => response("200 OK", &stats.snapshot().prometheus()),
        _ => response("404 Not Found", "only GET /metrics is served here\n"),
    };
    stream.set_write_timeout(Some(left(deadline)?))?;
    stream.write_all(&reply)
}

fn response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
