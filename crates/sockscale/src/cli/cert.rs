//! `sockscale cert`: a private CA and a certificate it signed, for trying TLS out.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sockscale_tls::TestCertificate;

use crate::output::say;

#[derive(Debug, Args)]
pub struct CertArgs {
    /// Write ca.pem, cert.pem and key.pem here (made if missing; files already there are not
    /// overwritten)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// A name the certificate is for: a DNS name or an IP address; may be repeated
    #[arg(long = "name", value_name = "NAME", default_values = ["localhost", "127.0.0.1", "::1"])]
    pub names: Vec<String>,
}

pub fn run(args: &CertArgs) -> Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot make the directory {}", args.out.display()))?;
    let made = TestCertificate::generate(&args.names)?;
    let files = made.write(&args.out)?;
    say!(
        "wrote {} (the CA: give it to clients, --cacert), {} and {} (for {}; ECDSA P-256)\n\
         serve:  sockscale serve --proto http --tls-cert {} --tls-key {}\n\
         load:   sockscale load http https://localhost:PORT/ --cacert {}",
        files.ca.display(),
        files.cert.display(),
        files.key.display(),
        args.names.join(", "),
        files.cert.display(),
        files.key.display(),
        files.ca.display()
    );
    Ok(())
}
