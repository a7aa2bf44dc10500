//! One client-side TLS session as an I/O-free stage (the load generator's): the same record
//! loop as the server's ([`crate::stage`]), started by a ClientHello instead of answering one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, UnbufferedClientConnection};
use rustls::crypto::ring as provider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::version::{TLS12, TLS13};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;

use crate::config::TlsConfigError;
use crate::outcomes::{Failure, FailureReason, Negotiated, Received};
use crate::record_loop::{classify, RecordLoop};

/// Whom the client trusts to have signed the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The system's roots (a PEM bundle: `SSL_CERT_FILE`, else Debian's
    /// /etc/ssl/certs/ca-certificates.crt).
    System,
    /// The certificates in this PEM file (`--cacert FILE`).
    CaFile(PathBuf),
    /// Anyone: the certificate is not verified (`--insecure`).
    Insecure,
}

/// The system's bundle of roots.
pub fn system_bundle() -> PathBuf {
    std::env::var_os("SSL_CERT_FILE").map_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"), PathBuf::from)
}

/// A client's TLS configuration, shared by every connection.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
}

impl ClientTls {
    /// TLS 1.3 and 1.2, trusting `trust`, offering `alpn`; `resume`: keep sessions and resume
    /// them on new connections (tickets or session IDs), else every handshake is full.
    pub fn new(trust: &Trust, alpn: Vec<Vec<u8>>, resume: bool) -> Result<Self, TlsConfigError> {
        let provider = Arc::new(provider::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&TLS13, &TLS12])
            .map_err(|e| TlsConfigError::Setup(e.to_string()))?;
        let verifier: Arc<dyn ServerCertVerifier> = match trust {
            Trust::Insecure => Arc::new(AnyCertificate(provider)),
            Trust::System => Arc::new(Verifier::new(&system_bundle(), false, provider)?),
            Trust::CaFile(path) => Arc::new(Verifier::new(path, true, provider)?),
        };
        let mut config = builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth();
        config.alpn_protocols = alpn;
        config.resumption =
            if resume { Resumption::store(Arc::new(ManyTickets::default())) } else { Resumption::disabled() };
        Ok(ClientTls { config: Arc::new(config) })
    }

    /// A copy of the rustls configuration (trust, resumption store) offering `alpn`, for QUIC
    /// (quinn-proto runs the handshake); `early_data`: offer 0-RTT when resuming.
    pub fn rustls_config(&self, alpn: Vec<Vec<u8>>, early_data: bool) -> rustls::ClientConfig {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn;
        config.enable_early_data = early_data;
        config
    }

    /// The same trust and ALPN, resuming nothing: a probe's handshake must not leave a session
    /// behind for the run's first connection to resume.
    pub fn without_resumption(&self) -> ClientTls {
        let mut config = (*self.config).clone();
        config.resumption = Resumption::disabled();
        ClientTls { config: Arc::new(config) }
    }
}

/// The certificates in a PEM file: the roots webpki can use as anchors, and every certificate
/// as it is (DER).
fn roots(path: &Path) -> Result<(rustls::RootCertStore, Vec<CertificateDer<'static>>), TlsConfigError> {
    let pem = std::fs::read(path).map_err(|error| TlsConfigError::Read { path: path.into(), error })?;
    let mut store = rustls::RootCertStore::empty();
    let mut all = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| TlsConfigError::BadCertificate { path: path.into(), reason: e.to_string() })?;
        // A bundle may hold a certificate webpki cannot use as an anchor; the others still count.
        let _ = store.add(cert.clone());
        all.push(cert);
    }
    if store.is_empty() {
        return Err(TlsConfigError::NoCertificate { path: path.into() });
    }
    Ok((store, all))
}

/// The certificate check of a client that trusts a PEM file (`--cacert`, or the system's
/// bundle): webpki's, as rustls does it, with two differences.
///
/// - A certificate in `--cacert` that the server presents exactly (the same DER) is trusted as
///   itself, as curl and OpenSSL trust a self-signed certificate named in their CA file: the
///   common `openssl req -x509` certificate is CA:TRUE, which webpki refuses as a server's
///   (CaUsedAsEndEntity) even when it is the very anchor. Its validity dates and its names
///   (against the name asked for) are still checked, and the handshake's signatures are, as
///   always, against its key.
/// - A refusal says why in words (see [`crate::outcomes::certificate`]), naming the file trusted,
///   and tells the user what to do only with a flag they did not pass.
#[derive(Debug)]
struct Verifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    /// The file's certificates, trusted as themselves (`--cacert` only; none for the system's).
    pinned: Vec<CertificateDer<'static>>,
    /// The file trusted, and whether the user named it (`--cacert`) or it is the system's.
    file: PathBuf,
    cacert: bool,
}

impl Verifier {
    fn new(path: &Path, cacert: bool, provider: Arc<rustls::crypto::CryptoProvider>) -> Result<Self, TlsConfigError> {
        let (store, all) = roots(path)?;
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|e| TlsConfigError::Setup(e.to_string()))?;
        Ok(Verifier { webpki, pinned: if cacert { all } else { Vec::new() }, file: path.into(), cacert })
    }

    /// The pinned certificate's own checks: valid at `now`, and for `name`.
    fn as_itself(cert: &CertificateDer<'_>, name: &ServerName<'_>, now: UnixTime) -> Result<(), rustls::Error> {
        use rustls::CertificateError as C;
        let (_, parsed) =
            x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|_| rustls::Error::from(C::BadEncoding))?;
        let unix = |t: x509_parser::time::ASN1Time| {
            UnixTime::since_unix_epoch(Duration::from_secs(t.timestamp().max(0) as u64))
        };
        let validity = parsed.validity();
        let seconds = now.as_secs() as i64;
        if seconds > validity.not_after.timestamp() {
            return Err(C::ExpiredContext { time: now, not_after: unix(validity.not_after) }.into());
        }
        if seconds < validity.not_before.timestamp() {
            return Err(C::NotValidYetContext { time: now, not_before: unix(validity.not_before) }.into());
        }
        rustls::client::verify_server_name(&rustls::server::ParsedCertificate::try_from(cert)?, name)
    }

    /// `error` about `cert`, in words where webpki's own are a type name.
    fn explain(&self, error: rustls::Error, cert: &CertificateDer<'_>) -> rustls::Error {
        let rustls::Error::InvalidCertificate(kind) = &error else { return error };
        let file = self.file.display();
        let parsed = x509_parser::parse_x509_certificate(cert.as_ref()).ok().map(|(_, c)| c);
        let self_signed = parsed.as_ref().is_some_and(|c| c.subject().as_raw() == c.issuer().as_raw());
        let issuer = match &parsed {
            Some(c) if !self_signed => format!(" (its issuer: {})", c.issuer()),
            _ => String::new(),
        };
        let words = match kind {
            rustls::CertificateError::UnknownIssuer if self_signed && self.cacert => {
                format!("the server's certificate is self-signed, and it is not in --cacert {file}")
            }
            rustls::CertificateError::UnknownIssuer if self_signed => "the server's certificate is self-signed (trust \
                 it with --cacert FILE holding it, or skip verification with --insecure)"
                .to_owned(),
            rustls::CertificateError::UnknownIssuer if self.cacert => {
                format!("the server's certificate is signed by a CA not in --cacert {file}{issuer}")
            }
            // webpki found a CA of the issuer's name in the file, whose key did not sign it.
            rustls::CertificateError::BadSignature if self.cacert => format!(
                "the server's certificate is signed by a CA not in --cacert {file}{issuer}: a CA there has \
                 that name but another key (a CA made again?)"
            ),
            rustls::CertificateError::UnknownIssuer => format!(
                "the server's certificate is signed by a CA not among the system's roots in {file}{issuer}: \
                 trust that CA with --cacert FILE, or skip verification with --insecure"
            ),
            rustls::CertificateError::Other(other) if is_ca_used_as_end_entity(other) => {
                let what = if self_signed {
                    "self-signed, a CA certificate (CA:TRUE) used as a server certificate"
                } else {
                    "a CA certificate (CA:TRUE) used as a server certificate"
                };
                if self.cacert {
                    format!("the server's certificate is {what}, and it is not in --cacert {file}{issuer}")
                } else {
                    format!(
                        "the server's certificate is {what} (trust it as itself with --cacert FILE holding it, \
                         or skip verification with --insecure)"
                    )
                }
            }
            _ => return error,
        };
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(Arc::new(
            crate::outcomes::CertificateWords(words),
        ))))
    }
}

fn is_ca_used_as_end_entity(other: &rustls::OtherError) -> bool {
    matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned.iter().any(|pinned| pinned.as_ref() == end_entity.as_ref()) {
            return Self::as_itself(end_entity, server_name, now).map(|()| ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            .map_err(|e| self.explain(e, end_entity))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Sessions kept for resumption, for a load generator: many connections to one server, each
/// reconnect wanting a ticket of its own. rustls's memory cache keeps eight TLS 1.3 tickets a
/// server, and a ticket is used once, so 50 connections reconnecting together found none for
/// most of them: measured against nginx, 1,855 of 7,322 reconnects were full handshakes (and
/// 261 of 400 against sockscale serve, in tests/load.rs). This keeps up to
/// [`ManyTickets::PER_SERVER`] tickets a server (the newest; a few hundred bytes each) and one
/// TLS 1.2 session.
#[derive(Default)]
struct ManyTickets {
    servers: std::sync::Mutex<std::collections::HashMap<ServerName<'static>, Kept>>,
}

#[derive(Default)]
struct Kept {
    kx_hint: Option<rustls::NamedGroup>,
    tls12: Option<rustls::client::Tls12ClientSessionValue>,
    tls13: std::collections::VecDeque<rustls::client::Tls13ClientSessionValue>,
}

impl std::fmt::Debug for ManyTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The sessions' secrets are not shown.
        f.debug_struct("ManyTickets").finish_non_exhaustive()
    }
}

impl ManyTickets {
    const PER_SERVER: usize = 4096;
    const SERVERS: usize = 64;

    fn edit<T>(&self, name: &ServerName<'_>, f: impl FnOnce(&mut Kept) -> T) -> Option<T> {
        // A poisoned lock only means another thread panicked mid-edit: the sessions are still
        // sessions, and a wrong one fails its resumption, which falls back to a full handshake.
        let mut servers = self.servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        servers.get_mut(&name.to_owned()).map(f)
    }

    fn insert(&self, name: ServerName<'static>, f: impl FnOnce(&mut Kept)) {
        let mut servers = self.servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !servers.contains_key(&name) && servers.len() >= Self::SERVERS {
            servers.clear();
        }
        f(servers.entry(name).or_default());
    }
}

impl rustls::client::ClientSessionStore for ManyTickets {
    fn set_kx_hint(&self, name: ServerName<'static>, group: rustls::NamedGroup) {
        self.insert(name, |kept| kept.kx_hint = Some(group));
    }

    fn kx_hint(&self, name: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.edit(name, |kept| kept.kx_hint).flatten()
    }

    fn set_tls12_session(&self, name: ServerName<'static>, value: rustls::client::Tls12ClientSessionValue) {
        self.insert(name, |kept| kept.tls12 = Some(value));
    }

    fn tls12_session(&self, name: &ServerName<'_>) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.edit(name, |kept| kept.tls12.clone()).flatten()
    }

    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.edit(name, |kept| kept.tls12 = None);
    }

    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: rustls::client::Tls13ClientSessionValue) {
        self.insert(name, |kept| {
            if kept.tls13.len() >= Self::PER_SERVER {
                kept.tls13.pop_front();
            }
            kept.tls13.push_back(value);
        });
    }

    fn take_tls13_ticket(&self, name: &ServerName<'static>) -> Option<rustls::client::Tls13ClientSessionValue> {
        self.edit(name, |kept| kept.tls13.pop_back()).flatten()
    }
}

/// `--insecure`: every certificate is accepted, signatures still checked for the handshake's
/// integrity by the provider's algorithms.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One client-side TLS session.
pub struct ClientSession {
    stage: RecordLoop<UnbufferedClientConnection>,
}

impl std::fmt::Debug for ClientSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSession").field("handshaking", &self.stage.is_handshaking()).finish_non_exhaustive()
    }
}

impl ClientSession {
    /// A session to `server_name` (sent as SNI, and checked against the certificate), opened at
    /// `now`: its ClientHello is appended to `out`, and the handshake is timed from `now`.
    pub fn start(tls: &ClientTls, server_name: &str, now: Instant, out: &mut Vec<u8>) -> Result<Self, Failure> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| Failure { reason: FailureReason::Protocol, detail: format!("{server_name}: {e}") })?;
        let conn = UnbufferedClientConnection::new(tls.config.clone(), name).map_err(|e| classify(&e, false))?;
        let mut stage = RecordLoop::new(conn, now);
        stage.receive(&mut [], now, &mut Vec::new(), out)?;
        stage.began_at(now);
        Ok(ClientSession { stage })
    }

    /// Take `ciphertext` received at `now` (decrypted in place), appending the plaintext to
    /// `plaintext` and the records to send to `out`.
    pub fn receive(
        &mut self,
        ciphertext: &mut [u8],
        now: Instant,
        plaintext: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Received, Failure> {
        self.stage.receive(ciphertext, now, plaintext, out)
    }

    /// Encrypt `plaintext` into records appended to `out` (held until the handshake allows).
    pub fn send(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
        self.stage.send(plaintext, out)
    }

    /// Append a close_notify alert to `out`.
    pub fn close(&mut self, out: &mut Vec<u8>) {
        self.stage.close(out)
    }

    pub fn is_handshaking(&self) -> bool {
        self.stage.is_handshaking()
    }

    /// What the handshake agreed on, once it is done.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.stage.negotiated()
    }
}
