//! `--metrics ADDR`: the counters in Prometheus text format at `GET /metrics`.
//!
//! A small blocking server on its own thread: scrapes are rare and tiny, and keeping them off
//! the workers keeps the workers' loops free of anything but their connections. Each scrape
//! has a two-second read deadline, so a stuck client cannot hold it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sockscale_sys::syscall;

use crate::stats::Stats;

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
    while !stop.load(Ordering::Acquire) {
        let mut pollfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd; the 200 ms timeout bounds how long a stop goes unnoticed.
        match syscall!(poll(&mut pollfd, 1, 200)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(_) => continue,
        }
        if let Ok((stream, _)) = listener.accept() {
            if let Err(e) = answer(stream, &stats) {
                tracing::debug!(error = %e, "metrics scrape failed");
            }
        }
    }
}

fn answer(mut stream: TcpStream, stats: &Stats) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let path = loop {
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
    let (status, body) = match path.as_deref() {
        Some("/metrics") => ("200 OK", stats.snapshot().prometheus()),
        _ => ("404 Not Found", "only GET /metrics is served here\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}
