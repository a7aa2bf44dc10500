//! A server's TLS configuration from PEM files, checked before anything listens: a missing,
//! unreadable, empty, mismatched, expired or not-yet-valid certificate or key is one error
//! that names the file and the problem.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::ring as provider;
use rustls::server::ServerSessionMemoryCache;
use rustls::version::{TLS12, TLS13};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// What can be wrong with a certificate and key. Each says which file.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The I/O error is part of the message, not a source: the one line says it once.
    #[error("{path}: cannot read it: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: PathBuf },
    #[error("{path}: not a PEM certificate chain: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path}: no PEM private key in it (PKCS#8, SEC1 or PKCS#1)")]
    NoKey { path: PathBuf },
    #[error("{path}: not a usable private key: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("{key} is not the key of the certificate in {cert}")]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("{path}: the certificate expired on {not_after} (its notAfter)")]
    Expired { path: PathBuf, not_after: String },
    #[error("{path}: the certificate is not valid before {not_before} (its notBefore)")]
    NotYetValid { path: PathBuf, not_before: String },
    #[error("{path}: cannot write it: {error}")]
    Write { path: PathBuf, error: std::io::Error },
    #[error("{path} is there already: remove it or choose another directory")]
    Exists { path: PathBuf },
    #[error("cannot set up TLS: {0}")]
    Setup(String),
}

/// How the server resumes sessions and which application protocols it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// TLS 1.2 session IDs (and TLS 1.3 stateful tickets) remembered, at most; 0 turns the
    /// cache off. Each entry holds a session's secrets, a few hundred bytes.
    pub session_cache: usize,
    /// Stateless resumption tickets (TLS 1.2 and 1.3), encrypted with a key that rotates.
    pub tickets: bool,
    /// ALPN protocols offered, in preference order (`http/1.1`; none for echo).
    pub alpn: Vec<Vec<u8>>,
    /// Handshakes in progress at once, at most, over every session of this configuration: a
    /// new session beyond it is refused ([`crate::Busy`]), so a flood of handshakes (the
    /// expensive part of TLS) cannot take the CPU from connections already served.
    pub max_handshakes: Option<usize>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions { session_cache: 4096, tickets: true, alpn: Vec::new(), max_handshakes: None }
    }
}

/// A server's TLS configuration, shared by every connection.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    /// Handshakes in progress now, shared by every clone, and the most allowed.
    pub(crate) handshakes: Arc<AtomicUsize>,
    pub(crate) max_handshakes: Option<usize>,
}

impl ServerTls {
    /// A copy of the rustls configuration (certificate, key, session cache, tickets) offering
    /// `alpn`, for a stage that runs rustls itself: QUIC (quinn-proto drives the TLS 1.3
    /// handshake in its CRYPTO frames, so it is given the configuration, not a session).
    pub fn rustls_config(&self, alpn: Vec<Vec<u8>>) -> rustls::ServerConfig {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn;
        config
    }

    /// Handshakes in progress now.
    pub fn handshakes_in_progress(&self) -> usize {
        self.handshakes.load(Ordering::Relaxed)
    }
}

impl ServerTls {
    /// Read `cert` (a PEM chain, leaf first) and `key` (PEM: PKCS#8, SEC1 or PKCS#1), and check
    /// that they belong together and that the leaf is valid at `now`.
    pub fn from_pem_files(
        cert: &Path,
        key: &Path,
        now: SystemTime,
        options: &ServerOptions,
    ) -> Result<Self, TlsConfigError> {
        let read = |path: &Path| std::fs::read(path).map_err(|error| TlsConfigError::Read { path: path.into(), error });
        Self::from_pem(&read(cert)?, cert, &read(key)?, key, now, options)
    }

    /// As [`ServerTls::from_pem_files`], from bytes already read; the paths name them in errors.
    pub fn from_pem(
        cert_pem: &[u8],
        cert: &Path,
        key_pem: &[u8],
        key: &Path,
        now: SystemTime,
        options: &ServerOptions,
    ) -> Result<Self, TlsConfigError> {
        let chain = certificates(cert_pem, cert)?;
        check_validity(&chain[0], cert, now)?;
        let key_der = private_key(key_pem, key)?;
        let provider = Arc::new(provider::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&TLS13, &TLS12])
            .map_err(|e| TlsConfigError::Setup(e.to_string()))?
            .with_no_client_auth();
        let mut config = builder.with_single_cert(chain, key_der).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsConfigError::Mismatch { cert: cert.into(), key: key.into() },
            other => TlsConfigError::BadKey { path: key.into(), reason: other.to_string() },
        })?;
        config.alpn_protocols = options.alpn.clone();
        config.session_storage = if options.session_cache > 0 {
            ServerSessionMemoryCache::new(options.session_cache)
        } else {
            Arc::new(rustls::server::NoServerSessionStorage {})
        };
        if options.tickets {
            config.ticketer = provider::Ticketer::new().map_err(|e| TlsConfigError::Setup(e.to_string()))?;
        } else {
            config.send_tls13_tickets = 0;
        }
        Ok(ServerTls {
            config: Arc::new(config),
            handshakes: Arc::new(AtomicUsize::new(0)),
            max_handshakes: options.max_handshakes,
        })
    }
}

fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsConfigError::BadCertificate { path: path.into(), reason: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsConfigError::NoCertificate { path: path.into() });
    }
    Ok(chain)
}

fn private_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsConfigError::NoKey { path: path.into() },
        other => TlsConfigError::BadKey { path: path.into(), reason: other.to_string() },
    })
}

/// The leaf must be valid now: a server that starts with an expired certificate fails every
/// handshake with a verifying client, so it is refused before listening.
fn check_validity(leaf: &CertificateDer<'_>, path: &Path, now: SystemTime) -> Result<(), TlsConfigError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| TlsConfigError::BadCertificate { path: path.into(), reason: e.to_string() })?;
    let seconds = match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(_) => 0,
    };
    let validity = parsed.validity();
    if seconds > validity.not_after.timestamp() {
        return Err(TlsConfigError::Expired { path: path.into(), not_after: validity.not_after.to_string() });
    }
    if seconds < validity.not_before.timestamp() {
        return Err(TlsConfigError::NotYetValid { path: path.into(), not_before: validity.not_before.to_string() });
    }
    Ok(())
}
