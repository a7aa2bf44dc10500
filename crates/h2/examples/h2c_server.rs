//! A test-only h2c server (prior knowledge) over blocking std::net, one thread per connection,
//! that drives the stage and answers every request with a fixed 4 KiB page (HEAD: the head
//! only). It proves the stage against real clients (h2spec, curl --http2-prior-knowledge); the
//! engines are not involved.
//!
//! ```sh
//! cargo run -p sockscale-h2 --example h2c_server -- 127.0.0.1:8080
//! h2spec -h 127.0.0.1 -p 8080
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sockscale_h2::{Body, Connection, Event, Limits, Verdict};

fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&addr)?;
    eprintln!("h2c_server listening on {}", listener.local_addr()?);
    let limits = Arc::new(Limits { header_timeout: Duration::from_secs(5), ..Limits::default() });
    let body = Bytes::from(vec![b'x'; 4096]);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let limits = limits.clone();
        let body = body.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve(stream, limits, body) {
                eprintln!("connection: {e}");
            }
        });
    }
    Ok(())
}

fn serve(mut sock: TcpStream, limits: Arc<Limits>, body: Bytes) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut out = Vec::new();
    let mut conn = Connection::new(limits, Instant::now(), &mut out);
    let mut buf = vec![0u8; 64 << 10];
    let length = body.len().to_string();
    loop {
        sock.write_all(&out)?;
        out.clear();
        let now = Instant::now();
        // Wake for the stage's deadline, or poll every second for nothing.
        let wait = conn.deadline().map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
        sock.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        let verdict = match sock.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => conn.receive(&buf[..n], Instant::now(), &mut out),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                conn.on_timer(Instant::now(), &mut out)
            }
            Err(e) => return Err(e),
        };
        while let Some(Event::Request(request)) = conn.poll_event() {
            let fields: [(&[u8], &[u8]); 2] =
                [(b"content-type", b"text/plain"), (b"content-length", length.as_bytes())];
            let answer = if request.is_head() { Body::Empty } else { Body::Bytes(body.clone()) };
            conn.respond(request.stream, 200, &fields, answer, &mut out);
        }
        let after = conn.transmit(Instant::now(), 0, &mut out);
        if let Verdict::Close(why) = verdict.min_close(after) {
            sock.write_all(&out)?;
            let _ = sock.shutdown(std::net::Shutdown::Write);
            // Let the peer read the GOAWAY before the socket goes.
            sock.set_read_timeout(Some(Duration::from_millis(200)))?;
            while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
            eprintln!("closed: {why:?}");
            return Ok(());
        }
    }
}

trait Either {
    fn min_close(self, other: Verdict) -> Verdict;
}

impl Either for Verdict {
    fn min_close(self, other: Verdict) -> Verdict {
        match self {
            Verdict::Close(_) => self,
            Verdict::Continue => other,
        }
    }
}
