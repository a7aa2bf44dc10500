//! `sockscale cert`: a private CA and a certificate it signed, for trying TLS out.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sockscale_tls::{TestCertificate, Validity};

use crate::output::say;

/// The names every certificate is for: this machine, by name and by loopback address.
const LOCAL_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

#[derive(Debug, Args)]
pub struct CertArgs {
    /// Write ca.pem, cert.pem and key.pem here (made if missing; files already there are not
    /// overwritten)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// A further name the certificate is for, beside localhost, 127.0.0.1 and ::1: a DNS name
    /// or an IP address; may be repeated (the first is also its common name)
    #[arg(long = "san", visible_alias = "name", value_name = "NAME")]
    pub names: Vec<String>,
    /// Days the certificate is valid, from an hour ago (for clocks a little behind)
    #[arg(long, value_name = "DAYS", default_value_t = Validity::default().leaf_days,
          value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub days: u32,
    /// Days the CA is valid, at least --days
    #[arg(long, value_name = "DAYS", default_value_t = Validity::default().ca_days,
          value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub ca_days: u32,
}

pub fn run(args: &CertArgs) -> Result<()> {
    if args.ca_days < args.days {
        anyhow::bail!(
            "--days {} outlives the CA (--ca-days {}): the CA must be valid at least as long",
            args.days,
            args.ca_days
        );
    }
    let mut names = args.names.clone();
    for local in LOCAL_NAMES {
        if !names.iter().any(|n| n == local) {
            names.push(local.to_owned());
        }
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot make the directory {}", args.out.display()))?;
    let validity = Validity { leaf_days: args.days, ca_days: args.ca_days };
    let made = TestCertificate::issue(&names, validity, std::time::SystemTime::now())?;
    let files = made.write(&args.out)?;
    say!(
        "wrote {} (the CA, valid {} days: give it to clients, --cacert), {} and {} (for {}; valid {} days; \
         ECDSA P-256)\n\
         serve:  sockscale serve --proto http --tls-cert {} --tls-key {}\n\
         load:   sockscale load http https://localhost:PORT/ --cacert {}",
        files.ca.display(),
        args.ca_days,
        files.cert.display(),
        files.key.display(),
        names.join(", "),
        args.days,
        files.cert.display(),
        files.key.display(),
        files.ca.display()
    );
    Ok(())
}
