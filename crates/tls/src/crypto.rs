//! What a connection asks of its TLS session, on either side: the server's and the load
//! generator's connections hold their session behind [`Crypto`], as quinn-proto's `Connection`
//! holds its `crypto::Session`, and never see rustls. Written once, for both sides.

use std::time::Instant;

use crate::outcomes::{Failure, Negotiated, Received};

/// A TLS session fed ciphertext and the time, appending plaintext and the records to send.
/// Implemented by [`crate::ServerSession`] and [`crate::ClientSession`].
pub trait Crypto {
    /// Take `ciphertext` as received at `now` (decrypted in place), appending the plaintext to
    /// `plaintext` and the records to send to `out`. On a failure, `out` ends with the fatal
    /// alert the peer is owed (if any): send it, then close.
    fn receive(
        &mut self,
        ciphertext: &mut [u8],
        now: Instant,
        plaintext: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Received, Failure>;

    /// Seal `plaintext` into records appended to `out` (held until the handshake allows).
    fn send(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), Failure>;

    /// End the session in good order: append close_notify to `out` (nothing while the
    /// handshake is under way or after a failure: there is no key, or no session).
    fn close(&mut self, out: &mut Vec<u8>);

    fn is_handshaking(&self) -> bool;

    /// What the handshake agreed (once it is done).
    fn negotiated(&self) -> Option<Negotiated>;
}

/// Each session's inherent methods, as the trait's.
macro_rules! crypto_for {
    ($session:ty) => {
        impl Crypto for $session {
            fn receive(
                &mut self,
                ciphertext: &mut [u8],
                now: Instant,
                plaintext: &mut Vec<u8>,
                out: &mut Vec<u8>,
            ) -> Result<Received, Failure> {
                <$session>::receive(self, ciphertext, now, plaintext, out)
            }
            fn send(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
                <$session>::send(self, plaintext, out)
            }
            fn close(&mut self, out: &mut Vec<u8>) {
                <$session>::close(self, out)
            }
            fn is_handshaking(&self) -> bool {
                <$session>::is_handshaking(self)
            }
            fn negotiated(&self) -> Option<Negotiated> {
                <$session>::negotiated(self)
            }
        }
    };
}

crypto_for!(crate::ServerSession);
crypto_for!(crate::ClientSession);
