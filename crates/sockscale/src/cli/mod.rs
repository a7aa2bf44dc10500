//! The command line: one module per subcommand, each turning flags into a library config.

pub mod bench;
pub mod cert;
pub mod completions;
pub mod interrupted;
mod json_sink;
pub mod load;
pub mod load_flags;
pub mod man;
pub mod models;
pub mod procs;
pub mod serve;
pub mod slo;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "sockscale",
    version,
    about = "Scalable socket servers on every Linux I/O model, measured side by side",
    long_about = "sockscale serves TCP echo, fixed-response HTTP/1.1 and HTTP/2 (h2c, and h2 over TLS) and UDP \
                  echo, over TCP, TLS 1.3/1.2 or Unix sockets, on the I/O models of the classic Winsock server \
                  comparison brought to Linux, with every resource policy of those texts as a flag; `sockscale load` \
                  drives it, or any HTTP server, as wrk, oha and h2load do."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve echo, HTTP/1.1 and HTTP/2, or UDP, over TCP, TLS or Unix sockets, on one I/O model
    Serve(Box<serve::ServeArgs>),
    /// Generate load: echo, HTTP/1.1 and HTTP/2, UDP; over TCP, TLS or Unix sockets
    #[command(subcommand)]
    Load(Box<load_flags::LoadCommand>),
    /// Reproduce the seeds' I/O-model table (Table 6-3) on this machine, for every model
    Bench(bench::BenchArgs),
    /// Draw charts and an HTML page from a bench results.json
    Report(bench::ReportArgs),
    /// Capacity arithmetic (seed 004's Tables 14-1 and 14-2), or predictions from measured results
    Plan(bench::PlanArgs),
    /// List the I/O models and what each can do (from the code's own table), and which run here
    Models(models::ModelsArgs),
    /// Make a private CA and a certificate it signed (ECDSA P-256), for trying TLS out
    Cert(cert::CertArgs),
    /// Print the completion script for a shell (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// Print the manual page, or write one page per command into a directory
    Man(man::ManArgs),
}
