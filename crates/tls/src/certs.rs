//! Certificates for trying TLS out: a private CA and a leaf it signed (ECDSA P-256), made on the
//! spot with rcgen, as `sockscale cert` and the bench use them. Nothing here is for a service
//! the public reaches: the CA's key is thrown away, so the leaf cannot be renewed, only made
//! again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::config::TlsConfigError;

/// A random positive serial number of 16 bytes (RFC 5280 allows 20; the CA/Browser Forum asks
/// for 64 random bits at least), so that two certificates made alike never share one.
fn serial() -> Result<rcgen::SerialNumber, TlsConfigError> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| TlsConfigError::Setup("no random bytes for a serial number".to_owned()))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(rcgen::SerialNumber::from_slice(&bytes))
}

/// A CA certificate and a leaf certificate and key, PEM.
#[derive(Debug, Clone)]
pub struct TestCertificate {
    /// The CA that signed the leaf: what a client is told to trust (`--cacert`).
    pub ca_pem: String,
    /// The leaf certificate followed by nothing else (the CA is the trust anchor).
    pub cert_pem: String,
    /// The leaf's private key, PKCS#8.
    pub key_pem: String,
}

/// Where [`TestCertificate::write`] put the three files.
#[derive(Debug, Clone)]
pub struct CertificateFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How long what [`TestCertificate::issue`] makes is valid, in days from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// The leaf's (`sockscale cert --days`): 90 by default, as public CAs issue them.
    pub leaf_days: u32,
    /// The CA's (`--ca-days`): ten years by default; at least the leaf's.
    pub ca_days: u32,
}

impl Default for Validity {
    fn default() -> Self {
        Validity { leaf_days: 90, ca_days: 3650 }
    }
}

/// Both certificates are valid from this long before they are made, so that a client whose
/// clock runs a little behind the maker's does not find them not yet valid.
const CLOCK_SKEW: time::Duration = time::Duration::hours(1);

impl TestCertificate {
    /// A fresh CA and a leaf for `names`, valid as [`Validity::default`] says from now.
    pub fn generate(names: &[String]) -> Result<TestCertificate, TlsConfigError> {
        Self::issue(names, Validity::default(), std::time::SystemTime::now())
    }

    /// A fresh CA and a leaf for `names` (DNS names or IP addresses, as subject alternative
    /// names; the first is also the leaf's common name), both ECDSA P-256, made at `now`: what
    /// a private CA issues. The CA: CA:TRUE with a path length of 0 (it signs leaves only),
    /// keyCertSign and cRLSign, valid `ca_days`. The leaf: CA:FALSE, digitalSignature (all an
    /// ECDSA key does in TLS), extendedKeyUsage serverAuth, subject and authority key
    /// identifiers, valid `leaf_days`. Both begin an hour before `now` (clock skew).
    pub fn issue(
        names: &[String],
        validity: Validity,
        now: std::time::SystemTime,
    ) -> Result<TestCertificate, TlsConfigError> {
        let setup = |e: rcgen::Error| TlsConfigError::Setup(format!("cannot make a certificate: {e}"));
        if names.is_empty() {
            return Err(TlsConfigError::Setup("a certificate needs at least one name".to_owned()));
        }
        if validity.leaf_days == 0 || validity.ca_days < validity.leaf_days {
            return Err(TlsConfigError::Setup(format!(
                "a certificate valid {} days cannot be signed by a CA valid {} (the CA must outlive it)",
                validity.leaf_days, validity.ca_days
            )));
        }
        let now = time::OffsetDateTime::from(now);
        let begins = now - CLOCK_SKEW;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(setup)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        ca_params.not_before = begins;
        ca_params.not_after = now + time::Duration::days(i64::from(validity.ca_days));
        ca_params.distinguished_name = rcgen::DistinguishedName::new();
        ca_params.distinguished_name.push(rcgen::DnType::OrganizationName, "sockscale");
        // Named apart from every other CA made so (by its serial's first bytes): a client
        // trusting an earlier one finds no CA of this name, rather than one whose key did not
        // sign the leaf.
        let ca_serial = serial()?;
        let tag: String = ca_serial.as_ref().iter().take(4).map(|b| format!("{b:02X}")).collect();
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, format!("sockscale test CA {tag}"));
        ca_params.serial_number = Some(ca_serial);
        let ca_key = rcgen::KeyPair::generate().map_err(setup)?;
        let ca = ca_params.self_signed(&ca_key).map_err(setup)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().map_err(setup)?;
        let mut leaf_params = rcgen::CertificateParams::new(names.to_vec()).map_err(setup)?;
        leaf_params.is_ca = rcgen::IsCa::ExplicitNoCa;
        leaf_params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        leaf_params.use_authority_key_identifier_extension = true;
        leaf_params.not_before = begins;
        leaf_params.not_after = now + time::Duration::days(i64::from(validity.leaf_days));
        leaf_params.distinguished_name = rcgen::DistinguishedName::new();
        leaf_params.distinguished_name.push(rcgen::DnType::CommonName, names[0].clone());
        leaf_params.serial_number = Some(serial()?);
        let leaf = leaf_params.signed_by(&key, &issuer).map_err(setup)?;
        Ok(TestCertificate { ca_pem: ca.pem(), cert_pem: leaf.pem(), key_pem: key.serialize_pem() })
    }

    /// Write `ca.pem`, `cert.pem` and `key.pem` (the key readable by its owner only) into
    /// `dir`, which must exist; a file already there is not overwritten.
    pub fn write(&self, dir: &Path) -> Result<CertificateFiles, TlsConfigError> {
        let files = CertificateFiles { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        for (path, text, mode) in
            [(&files.ca, &self.ca_pem, 0o644), (&files.cert, &self.cert_pem, 0o644), (&files.key, &self.key_pem, 0o600)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let write = |path: &Path| -> std::io::Result<()> {
                let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
                file.write_all(text.as_bytes())
            };
            write(path).map_err(|error| match error.kind() {
                std::io::ErrorKind::AlreadyExists => TlsConfigError::Exists { path: path.clone() },
                _ => TlsConfigError::Write { path: path.clone(), error },
            })?;
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaf_is_signed_by_the_ca_and_a_server_takes_it() {
        let made = TestCertificate::generate(&["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("generate");
        let dir = std::env::temp_dir().join(format!("sockscale-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let files = made.write(&dir).expect("write");
        crate::ServerTls::from_pem_files(
            &files.cert,
            &files.key,
            std::time::SystemTime::now(),
            &crate::ServerOptions::default(),
        )
        .expect("a server takes it");
        crate::ClientTls::new(&crate::Trust::CaFile(files.ca.clone()), Vec::new(), true).expect("a client trusts it");
        let again = made.write(&dir).expect_err("no overwrite").to_string();
        assert!(again.contains("ca.pem"), "{again}");
        std::fs::remove_dir_all(&dir).expect("clean");
        assert!(TestCertificate::generate(&[]).is_err());
    }
}
