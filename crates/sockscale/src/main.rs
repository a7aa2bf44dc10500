//! The `sockscale` command.

mod cli;
mod output;
mod units;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            // One line that names the flag; clap's usage block would bury it.
            let rendered = e.render().to_string();
            output::note!("{}\n", rendered.lines().next().unwrap_or("error: bad arguments"));
            return ExitCode::from(2);
        }
    };
    init_logging();
    let argv: Vec<String> = std::env::args().collect();
    let outcome = match &cli.command {
        Command::Serve(args) => cli::serve::run(args, &argv),
        Command::Load(command) => cli::load::run(command, &argv),
        Command::Bench(args) => cli::bench::bench(args),
        Command::Report(args) => cli::bench::report(args),
        Command::Plan(args) => cli::bench::plan(args),
        Command::Models(args) => cli::models::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::note!("error: {e:#}\n");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr through `tracing`; RUST_LOG sets the level (default: info).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}
