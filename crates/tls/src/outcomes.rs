//! The words both sides' sessions answer in: what a batch of received ciphertext came to, what
//! a handshake agreed on, and why a session failed.

use std::time::Duration;

/// What one batch of received ciphertext came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Plaintext bytes appended to the caller's buffer.
    pub plaintext: usize,
    /// The handshake completed with this input, so long after its first byte.
    pub handshake_done: Option<Duration>,
    /// The peer sent close_notify: no more plaintext will come.
    pub closed: bool,
}

/// Why a session failed: send what the failing call appended to its `out` (the fatal alert that
/// tells the peer why; nothing for a peer not speaking TLS), then close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct Failure {
    pub reason: FailureReason,
    pub detail: String,
}

/// A failure's kind, as the counters name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The first bytes were not a TLS handshake record (plain text on a TLS port).
    NotTls,
    /// The client offered nothing in common (versions, cipher suites, groups, ALPN).
    Incompatible,
    /// The client sent an alert (it refused the certificate, say).
    PeerAlert,
    /// A malformed or unexpected message.
    Protocol,
    /// The peer's certificate failed verification (a client's view of the server).
    Certificate,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] = [
        FailureReason::NotTls,
        FailureReason::Incompatible,
        FailureReason::PeerAlert,
        FailureReason::Protocol,
        FailureReason::Certificate,
    ];

    /// A short identifier, for counters.
    pub fn name(self) -> &'static str {
        match self {
            FailureReason::NotTls => "not_tls",
            FailureReason::Incompatible => "incompatible",
            FailureReason::PeerAlert => "peer_alert",
            FailureReason::Protocol => "protocol",
            FailureReason::Certificate => "certificate",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a completed handshake agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// "TLSv1.3" or "TLSv1.2".
    pub version: &'static str,
    /// The cipher suite's IANA name, e.g. "TLS13_AES_128_GCM_SHA256".
    pub suite: String,
    pub alpn: Option<Vec<u8>>,
    /// The session was resumed (a ticket or a cached session ID), not a full handshake.
    pub resumed: bool,
}

/// A certificate refusal already in words (the client's verifier's, which knows the file
/// trusted and the certificate), carried through rustls as its "other" certificate error.
#[derive(Debug)]
pub(crate) struct CertificateWords(pub String);

impl std::fmt::Display for CertificateWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CertificateWords {}

/// Why the server's certificate was refused, in words a user reads (not rustls's debug form).
pub(crate) fn certificate(error: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    let date = |t: &rustls::pki_types::UnixTime| {
        i64::try_from(t.as_secs())
            .ok()
            .and_then(|secs| x509_parser::time::ASN1Time::from_timestamp(secs).ok())
            .map_or_else(|| format!("Unix time {}", t.as_secs()), |t| t.to_string())
    };
    match error {
        C::Other(other) => match other.0.downcast_ref::<CertificateWords>() {
            Some(words) => words.0.clone(),
            None => format!("the server's certificate was refused: {other}"),
        },
        C::NotValidForNameContext { expected, presented } => {
            let names: Vec<String> = presented.iter().map(|name| presented_name(name)).collect();
            let names = if names.is_empty() { "no name".to_owned() } else { names.join(", ") };
            format!("the server's certificate is not valid for {} (it names {names})", expected.to_str())
        }
        C::NotValidForName => "the server's certificate is not valid for the name asked for".to_owned(),
        C::ExpiredContext { not_after, .. } => format!("the server's certificate expired on {}", date(not_after)),
        C::Expired => "the server's certificate has expired".to_owned(),
        C::NotValidYetContext { not_before, .. } => {
            format!("the server's certificate is not valid before {}", date(not_before))
        }
        C::NotValidYet => "the server's certificate is not valid yet".to_owned(),
        C::UnknownIssuer => "the server's certificate is signed by a CA that is not trusted".to_owned(),
        C::BadSignature => "the server's certificate is not correctly signed by its issuer".to_owned(),
        C::BadEncoding => "the server's certificate is not a well-formed X.509 certificate".to_owned(),
        C::Revoked => "the server's certificate is revoked".to_owned(),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "the server's certificate is not for serving TLS (its extendedKeyUsage lacks serverAuth)".to_owned()
        }
        C::UnhandledCriticalExtension => {
            "the server's certificate has a critical extension no client here knows".to_owned()
        }
        other => format!("the server's certificate was refused: {other}"),
    }
}

/// A name as webpki lists it (`DnsName("localhost")`, `IpAddress(127.0.0.1)`), bare.
fn presented_name(name: &str) -> String {
    let bare = name
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| name.strip_prefix("IpAddress(").and_then(|rest| rest.strip_suffix(')')));
    bare.unwrap_or(name).to_owned()
}
