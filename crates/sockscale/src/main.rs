//! The `sockscale` command.

mod cli;
mod output;
mod units;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    sockscale_sys::default_termination_signals();
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
            output::note!("{}\n", one_line(&e.render().to_string()));
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
        Command::Cert(args) => cli::cert::run(args),
        Command::Completions(args) => cli::completions::run(args),
        Command::Man(args) => cli::man::run(args),
    };
    // A run stopped by SIGINT or SIGTERM (load, bench) has written what it measured; its
    // status is the signal's (see cli::interrupted), unless it then failed to write.
    let stopped_by = cli::interrupted::signal();
    match outcome {
        Ok(()) => match stopped_by {
            Some(signal) => interrupted(signal, "what was measured until then is reported above"),
            None => ExitCode::SUCCESS,
        },
        Err(e) => {
            if let (Some(stopped), Some(signal)) = (e.downcast_ref::<cli::interrupted::Stopped>(), stopped_by) {
                return interrupted(signal, &stopped.0);
            }
            output::note!("error: {e:#}\n");
            match (e.downcast_ref::<cli::load::RequestsFailed>(), stopped_by) {
                (Some(_), Some(signal)) => interrupted(signal, "the errors above were counted before it"),
                (Some(_), None) => ExitCode::from(cli::load::RequestsFailed::EXIT),
                (None, _) => ExitCode::FAILURE,
            }
        }
    }
}

/// The line and the status of a run stopped by `signal` after writing its results.
fn interrupted(signal: i32, what: &str) -> ExitCode {
    let status = cli::interrupted::exit_status(signal);
    output::note!("interrupted by {}: {what} (exit status {status})\n", cli::interrupted::name(signal));
    ExitCode::from(status)
}

/// A clap error as one line: the message with everything clap puts on the lines under it (the
/// possible values, the missing arguments, a "similar argument exists" tip), without the usage
/// block and the "For more information" line, which would bury it.
///
/// clap renders paragraphs separated by blank lines: the message (its continuation lines
/// indented), then tips, then `Usage:`, then the pointer to `--help`.
fn one_line(rendered: &str) -> String {
    let paragraphs: Vec<String> = rendered
        .split("\n\n")
        .map(|paragraph| paragraph.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty() && !p.starts_with("Usage:") && !p.starts_with("For more information"))
        .collect();
    if paragraphs.is_empty() {
        return "error: bad arguments; see --help".to_owned();
    }
    paragraphs.join("; ")
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
        // On by default, it reports a failed log write with eprintln!, which panics when stderr
        // is a closed pipe (`serve 2>&1 | head -n1`): the panic killed the thread that logged,
        // and when that was the signal thread, SIGINT and SIGTERM were never taken again. A log
        // line that cannot be written is dropped instead.
        .log_internal_errors(false)
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_error(args: &[&str]) -> String {
        let args = std::iter::once("sockscale").chain(args.iter().copied());
        let err = Cli::try_parse_from(args).expect_err("bad arguments");
        one_line(&err.render().to_string())
    }

    #[test]
    fn a_bad_enum_value_lists_the_valid_ones_on_its_one_line() {
        let line = parse_error(&["serve", "--proto", "gopher"]);
        assert_eq!(line, "error: invalid value 'gopher' for '--proto <PROTO>' [possible values: echo, http, udp, ws]");
        let line = parse_error(&["serve", "--proto", "htp"]);
        assert!(
            line.ends_with("[possible values: echo, http, udp, ws]; tip: a similar value exists: 'http'"),
            "{line}"
        );
        let line = parse_error(&["bench", "--profile", "huge"]);
        assert!(line.ends_with("[possible values: tiny, quick, default, full]"), "{line}");
        let line = parse_error(&["serve", "--listener", "shared"]);
        assert!(line.contains("[possible values: reuseport, exclusive]"), "{line}");
    }

    #[test]
    fn missing_arguments_and_tips_stay_on_the_one_line() {
        let line = parse_error(&["report"]);
        assert!(line.contains("required arguments were not provided") && line.contains("<RESULTS>"), "{line}");
        let line = parse_error(&["serve", "--thread", "2"]);
        assert!(line.contains("'--thread'") && line.contains("'--threads'"), "{line}");
        for line in [line, parse_error(&["serve", "--stats-interval", "0"])] {
            assert!(!line.contains('\n') && !line.contains("Usage") && !line.contains("--help"), "{line}");
        }
    }
}
