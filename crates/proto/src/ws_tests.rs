//! The WebSocket stage's tests through the HTTP responder (an upgrade on an HTTP port): apart
//! from `ws.rs` so that the stage does not import the HTTP session that hands connections to it.

use std::sync::Arc;
use std::time::Instant;

use crate::http::HttpConfig;
use crate::ws::*;
use crate::Protocol;
use crate::{Closing, Output, Verdict};

fn ws_port() -> (crate::Responder, Arc<WsConfig>) {
    let ws = Arc::new(WsConfig::default());
    let http = HttpConfig { websocket: Some(ws.clone()), websocket_only: true, ..HttpConfig::default() };
    (Protocol::Http(Arc::new(http)).responder(0), ws)
}

const UPGRADE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

#[test]
fn an_upgrade_is_accepted_but_refused_503_during_a_drain() {
    let now = Instant::now();
    let (mut responder, ws) = ws_port();
    let mut session = responder.new_session();
    let mut out = Output::default();
    assert_eq!(responder.on_input(&mut session, UPGRADE, now, &mut out), Verdict::Continue);
    assert!(out.to_vec(&[]).starts_with(b"HTTP/1.1 101 "));
    assert!(matches!(session, crate::Session::Ws(_)));
    // The same request on a connection the drain has asked to finish: 503 and close.
    let mut session = responder.new_session();
    session.finish_current();
    let mut out = Output::default();
    assert_eq!(responder.on_input(&mut session, UPGRADE, now, &mut out), Verdict::Close(Closing::Done));
    assert_eq!(out.to_vec(&[]), DRAINING);
    let counts = ws.totals.snapshot();
    assert_eq!((counts.upgrades, counts.refused_503), (1, 1));
}
