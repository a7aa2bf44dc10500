//! TLS for the tests: a CA and a `localhost` certificate made at test time (never checked in),
//! written where `serve --tls-cert/--tls-key` can read them, and rustls clients that trust it.

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConnection, StreamOwned};

/// A certificate and key on disk, and the CA that signed the certificate.
pub struct TestCert {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA's certificate, PEM, for `load --cacert`.
    pub ca_file: PathBuf,
    ca: CertificateDer<'static>,
    dir: PathBuf,
}

impl TestCert {
    /// A fresh CA and ECDSA P-256 leaf for `localhost`, in a directory of this test's own.
    pub fn new(name: &str) -> TestCert {
        let dir = std::env::temp_dir().join(format!("sockscale-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cert dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: with rcgen's default on both, the leaf's issuer is its own subject
        // and OpenSSL (Python's ssl) takes it for a self-signed certificate.
        ca_params.distinguished_name = DistinguishedName::new();
        ca_params.distinguished_name.push(DnType::CommonName, "sockscale test CA");
        let ca_key = KeyPair::generate().expect("CA key");
        let ca = ca_params.self_signed(&ca_key).expect("CA");
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("leaf");
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, leaf.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).expect("write CA");
        let ca = CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("CA PEM");
        TestCert { cert: cert_path, key: key_path, ca_file, ca, dir }
    }

    /// `serve` arguments that turn TLS on with this certificate.
    pub fn args(&self) -> [String; 4] {
        [
            "--tls-cert".to_owned(),
            self.cert.display().to_string(),
            "--tls-key".to_owned(),
            self.key.display().to_string(),
        ]
    }

    /// A client configuration trusting the CA, for `versions`, offering `alpn`; it keeps
    /// sessions for resumption.
    pub fn client(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
        alpn: &[&[u8]],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).expect("trust the CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

impl Drop for TestCert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TLS session over `stream`, for `localhost`; the handshake runs on first use.
pub fn over(stream: TcpStream, config: &Arc<rustls::ClientConfig>) -> StreamOwned<ClientConnection, TcpStream> {
    let conn = ClientConnection::new(config.clone(), ServerName::try_from("localhost").expect("name")).expect("client");
    StreamOwned::new(conn, stream)
}
