//! sockscale's TLS stage: rustls driven through in-memory slices, so that a session is fed the
//! ciphertext a socket received and the time, and hands back plaintext and the records to send.
//! No socket is inside; every engine (readiness, completion, threads, runtime) drives it alike,
//! between the socket's bytes and the protocol's state machine.
//!
//! - [`ServerTls`]: the certificate chain and key from PEM files, checked before listening
//!   (missing, unreadable, empty, mismatched, expired: one error naming the file), with TLS 1.3
//!   and 1.2, ALPN, a bounded session cache and rotating ticket keys.
//! - [`ServerSession`]: one connection's session: [`ServerSession::receive`],
//!   [`ServerSession::send`], [`ServerSession::take_ciphertext`], and what the handshake
//!   agreed on ([`Negotiated`]) or why it failed ([`Failure`], with the fatal alert that tells
//!   the peer why appended to the records to send).
//! - [`ClientTls`], [`ClientSession`]: the client side (the load generator's), over the same
//!   record loop, trusting the system's roots, a CA file (whose certificates are also trusted
//!   as themselves: a self-signed server certificate named in `--cacert`), or anyone
//!   (`--insecure`); a refused certificate is named in words.
//! - [`TestCertificate`]: a private CA and a leaf it signed, made on the spot (`sockscale cert`),
//!   as a private CA issues them (bounded validity, key usages, key identifiers).

mod certs;
mod client;
mod config;
mod crypto;
mod outcomes;
mod record_loop;
mod server;

pub use certs::{CertificateFiles, TestCertificate, Validity};
pub use client::{system_bundle, ClientSession, ClientTls, Trust};
pub use config::{ServerOptions, ServerTls, TlsConfigError};
pub use crypto::Crypto;
pub use outcomes::{Failure, FailureReason, Negotiated, Received};
pub use server::{Busy, ServerCrypto, ServerSession};
