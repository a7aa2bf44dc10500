//! Certificates for the tests, made at test time: a CA and a `localhost` leaf it signed
//! (ECDSA P-256), as PEM.
#![allow(dead_code)]

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// (CA PEM, leaf PEM, leaf key PEM).
pub fn certificates() -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("CA key");
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .signed_by(&leaf_key, &issuer)
        .expect("leaf");
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}
