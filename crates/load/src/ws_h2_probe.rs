//! The run's probe for `load ws --http2`: one connection as the run's are, its one WebSocket
//! opened over HTTP/2 and closed, before the run begins. It drives the whole client
//! `Connection`, so it lives above both the connection and the WebSocket-over-HTTP/2 stage (in
//! `ws_h2.rs` it made an import circle with `connection.rs`).

use std::time::Duration;

use crate::events::Now;
use crate::ws::WsEnd;

/// The run's probe for `--http2` (blocking, within `timeout`, on a fresh connection): a
/// connection as the run's are (TLS too), its one WebSocket opened and closed. Why not, in one
/// line: no SETTINGS_ENABLE_CONNECT_PROTOCOL, a refused CONNECT, a reset...
pub(crate) fn probe(
    cfg: &crate::config::LoadConfig,
    mut stream: impl std::io::Read + std::io::Write,
    timeout: Duration,
) -> Result<(), String> {
    use crate::connection::{Connection, Profile, Reason};
    let origin = std::time::Instant::now();
    let mut profile = Profile::new(cfg, Vec::new(), 0, false, origin);
    if let Some(tls) = &mut profile.tls {
        // It leaves no session behind: the run's first handshakes are as without it.
        tls.client = tls.client.without_resumption();
    }
    if let Some(ws) = &mut profile.ws {
        ws.idle = true;
        ws.ping = None;
        if let Some(h2) = &mut ws.h2 {
            h2.streams = 1;
        }
    }
    let now = || Now::after(origin, origin.elapsed().as_nanos() as u64);
    let why = |reason: &Reason| match reason {
        Reason::Ws(WsEnd::NoConnectProtocol) => crate::ws::NO_CONNECT_PROTOCOL.to_owned(),
        Reason::Ws(WsEnd::Refused { status }) => format!(
            "the WebSocket over HTTP/2 CONNECT was refused: the server answered :status {status} instead of 200 \
             (is the path right, and does this port serve WebSocket?)"
        ),
        Reason::Ws(WsEnd::StreamReset { code }) => format!("the server reset the WebSocket's stream ({code})"),
        Reason::Ws(WsEnd::BadHandshake(why)) => format!("the WebSocket over HTTP/2 CONNECT failed: {why}"),
        Reason::Ws(end) => format!("the WebSocket over HTTP/2 ended at its CONNECT: {end:?}"),
        Reason::NoH2 => "over TLS it did not choose ALPN h2".to_owned(),
        Reason::H2 { error, .. } => format!("HTTP/2 connection error at the CONNECT: {error}"),
        Reason::Tls { failure, .. } => format!("TLS: {failure}"),
        other => format!("{other:?} at the CONNECT"),
    };
    let mut conn = Connection::new(&profile, 0, now());
    if let Some(close) = conn.on_connected(&profile, now()).failed {
        return Err(why(&close.reason));
    }
    let deadline = origin + timeout;
    let mut buf = vec![0u8; 32 << 10];
    let mut scratch = Vec::new();
    loop {
        loop {
            let bytes = conn.poll_transmit(&profile, &mut |_| {}).map_err(|close| why(&close.reason))?;
            if bytes.is_empty() {
                break;
            }
            let n = bytes.len();
            stream.write_all(bytes).map_err(|e| format!("{e} sending the WebSocket over HTTP/2 CONNECT"))?;
            conn.sent(n, &mut |_| {});
        }
        if !conn.greeting() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "no answer to the WebSocket over HTTP/2 CONNECT within {:.1} s",
                timeout.as_secs_f64()
            ));
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("the server closed the connection at the WebSocket over HTTP/2 CONNECT".into()),
            Ok(n) => {
                conn.receive(&profile, now(), &mut buf[..n], &mut scratch, &mut |_| {}).map_err(|c| why(&c.reason))?;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{e} waiting for the answer to the WebSocket over HTTP/2 CONNECT")),
        }
    }
    // Closed as a client should: its close frame and END_STREAM (the server need not be waited for).
    conn.begin_grace(now(), Duration::ZERO);
    if let Ok(bytes) = conn.poll_transmit(&profile, &mut |_| {}) {
        let _ = stream.write_all(bytes);
    }
    Ok(())
}
