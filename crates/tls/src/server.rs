//! One server-side TLS session as an I/O-free stage, over rustls's unbuffered API: the caller
//! owns every buffer. Fed the ciphertext a socket received (decrypted in place, in the caller's
//! receive buffer) and the time, it appends the plaintext to the caller's buffer and the records
//! to send (handshake flights, tickets, alerts) to the caller's output; given plaintext, it
//! appends the encrypted records. It never touches a socket, so every engine drives it alike.
//!
//! Between receives it keeps only a record that arrived in part (its bytes, copied out of the
//! caller's buffer); an idle session holds no buffer, as the seeds' zero-byte receive asks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::server::UnbufferedServerConnection;

use crate::config::ServerTls;
use crate::crypto::Crypto;
use crate::outcomes::{Failure, Negotiated, Received};
use crate::record_loop::{classify, RecordLoop};

/// A new session refused: `max` handshakes are in progress (`ServerOptions::max_handshakes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{max} TLS handshakes are in progress (--max-handshakes)")]
pub struct Busy {
    pub max: usize,
}

/// What a server connection asks of its TLS session beyond [`Crypto`]: when the handshake
/// began (its deadline counts from there) and whether it resumed. Implemented by
/// [`ServerSession`].
pub trait ServerCrypto: Crypto + Send + std::fmt::Debug {
    /// When the handshake began (the connection's acceptance): its deadline counts from here.
    fn handshake_started_at(&self) -> Instant;

    /// Since when a record has been arriving in part, if one is: the peer stopped (or
    /// dribbles) half-way through it.
    fn record_started_at(&self) -> Option<Instant>;

    /// The handshake resumed an earlier session (known once it is done).
    fn resumed(&self) -> bool {
        self.negotiated().is_some_and(|n| n.resumed)
    }
}

impl ServerCrypto for ServerSession {
    fn handshake_started_at(&self) -> Instant {
        self.stage.opened_at()
    }

    fn record_started_at(&self) -> Option<Instant> {
        self.stage.partial_since()
    }
}

/// One server-side TLS session.
pub struct ServerSession {
    stage: RecordLoop<UnbufferedServerConnection>,
    /// This session's place among the handshakes in progress, given up when the handshake
    /// completes or fails, or the session ends.
    slot: Option<Arc<AtomicUsize>>,
}

impl std::fmt::Debug for ServerSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSession").field("handshaking", &self.stage.is_handshaking()).finish_non_exhaustive()
    }
}

impl ServerSession {
    /// A session for a connection accepted at `now`. Err(Busy): refuse the connection.
    pub fn new(tls: &ServerTls, now: Instant) -> Result<Result<Self, Failure>, Busy> {
        let slot = match tls.max_handshakes {
            Some(max) => {
                if tls.handshakes.fetch_add(1, Ordering::Relaxed) >= max {
                    tls.handshakes.fetch_sub(1, Ordering::Relaxed);
                    return Err(Busy { max });
                }
                Some(tls.handshakes.clone())
            }
            None => None,
        };
        match UnbufferedServerConnection::new(tls.config.clone()) {
            Ok(conn) => Ok(Ok(ServerSession { stage: RecordLoop::new(conn, now), slot })),
            Err(e) => {
                release(slot);
                Ok(Err(classify(&e, false)))
            }
        }
    }

    /// Take `ciphertext` as received at `now` (it is decrypted in place, so it is the caller's
    /// receive buffer), appending what it decrypts to `plaintext` and the records to send to
    /// `out`. On a failure, send what was appended to `out` (the fatal alert), then close.
    pub fn receive(
        &mut self,
        ciphertext: &mut [u8],
        now: Instant,
        plaintext: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Received, Failure> {
        let received = self.stage.receive(ciphertext, now, plaintext, out);
        if received.is_err() || !self.stage.is_handshaking() {
            release(self.slot.take());
        }
        received
    }

    /// Encrypt `plaintext` into records appended to `out`. Before the handshake completes it
    /// is held, and encrypted as soon as the handshake allows.
    pub fn send(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
        self.stage.send(plaintext, out)
    }

    /// End the session politely: append a close_notify alert to `out`.
    pub fn close(&mut self, out: &mut Vec<u8>) {
        self.stage.close(out)
    }

    pub fn is_handshaking(&self) -> bool {
        self.stage.is_handshaking()
    }

    /// While the handshake is under way, when it must be done if it may take `limit` from the
    /// connection's acceptance (a stalled ClientHello is closed then, like a slow request head).
    pub fn handshake_deadline(&self, limit: Duration) -> Option<Instant> {
        self.stage.handshake_deadline(limit)
    }

    /// The bytes kept between receives (a record received in part, plaintext waiting for the
    /// handshake): what an idle session costs beyond its fixed state.
    pub fn buffered(&self) -> usize {
        self.stage.buffered()
    }

    /// What the handshake agreed on, once it is done.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.stage.negotiated()
    }
}

impl Drop for ServerSession {
    fn drop(&mut self) {
        release(self.slot.take());
    }
}

/// Give up a place among the handshakes in progress.
fn release(slot: Option<Arc<AtomicUsize>>) {
    if let Some(count) = slot {
        count.fetch_sub(1, Ordering::Relaxed);
    }
}
