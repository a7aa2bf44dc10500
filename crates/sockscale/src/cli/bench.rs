//! `sockscale bench`, `sockscale report` and `sockscale plan`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use sockscale_bench::harness::Children;
use sockscale_bench::run::BenchConfig;
use sockscale_bench::{plan, Profile, Results};
use sockscale_server::Model;
use sockscale_server::TerminationSignals;

use crate::output::say;
use crate::units::parse_size;

#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 when the run ended (a model that failed is recorded in the results and \
                        on the page, not in the status); 1 when it could not start or its files could not be \
                        written; 2 when the command line cannot be parsed; 130 when stopped by SIGINT (Ctrl-C), \
                        143 by SIGTERM: every process it started is stopped, and what was measured until then \
                        is written (results.json marked interrupted, the tables and the page).")]
pub struct BenchArgs {
    /// default (three rounds of every model, nginx and Caddy, WebSocket and HTTP/3 included:
    /// about 8 minutes on 2 cores, measured 8 min 7 s), quick
    /// (one round, a first look without spread), full (the seed's scale) or tiny (for tests)
    #[arg(long, default_value = "default", value_parser = ["tiny", "quick", "default", "full"])]
    pub profile: String,
    /// The quick profile: one round of smaller rows for a first look (no spread, so no verdict
    /// can tell close models apart; it says so)
    #[arg(long, conflicts_with = "profile")]
    pub quick: bool,
    /// Rounds: every row and point measured this many times, the models in turn in each round
    /// [default: the profile's; 3 but for quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: Option<u32>,
    /// Other processes' CPU on the server's or the load's cores, in cores, past which a
    /// measurement counts as disturbed and is measured again (while the run's re-runs last:
    /// a tenth of its measurements) or marked
    #[arg(long, value_name = "CORES", value_parser = positive_cores)]
    pub disturbed_above: Option<f64>,
    /// Print every table on stdout too (they are always in table.md), before the verdict
    #[arg(long)]
    pub print_tables: bool,
    /// Models to run, comma-separated, each once [default: all]
    #[arg(long, value_delimiter = ',', value_name = "MODELS", value_parser = parse_model)]
    pub models: Vec<Model>,
    /// Where to write results.json, the CSVs, table.md, the charts and report.html: a new
    /// directory, or one without a results.json; checked before the run
    /// [default: bench-results/<timestamp>]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results.json written by sockscale bench
    pub results: PathBuf,
    /// Where to write the charts and report.html [default: beside RESULTS]
    #[arg(long, value_name = "DIR", conflicts_with_all = ["verdict", "verdict_json"])]
    pub out: Option<PathBuf>,
    /// Print only the verdict in words (which model for what), drawing nothing
    #[arg(long, conflicts_with = "verdict_json")]
    pub verdict: bool,
    /// Print only the verdict as JSON (for scripts comparing runs), drawing nothing
    #[arg(long)]
    pub verdict_json: bool,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Connection counts to tabulate (each 1 or more)
    #[arg(long, value_delimiter = ',', default_value = "10,1000,50000", value_parser = at_least_one,
          allow_hyphen_values = true, conflicts_with = "from")]
    pub connections: Vec<u64>,
    /// Operations outstanding per connection (each 1 or more)
    #[arg(long, value_delimiter = ',', default_value = "10,2", value_parser = at_least_one,
          allow_hyphen_values = true, conflicts_with = "from")]
    pub ops: Vec<u64>,
    /// Buffer per operation (more than 0)
    #[arg(long, default_value = "16KiB", value_parser = nonzero_size, allow_hyphen_values = true,
          conflicts_with = "from")]
    pub buffer_size: usize,
    /// Context per operation, in bytes (the seed's 200)
    #[arg(long, default_value_t = 200, conflicts_with = "from")]
    pub context: u64,
    /// Link speeds in megabits per second, for bandwidth per connection (each more than 0)
    #[arg(long, value_delimiter = ',', default_value = "10,100", value_parser = positive_megabits,
          allow_hyphen_values = true, conflicts_with = "from")]
    pub link: Vec<f64>,
    /// Connection counts sharing the link (each 1 or more)
    #[arg(long, value_delimiter = ',', default_value = "100,1000,50000", value_parser = at_least_one,
          allow_hyphen_values = true, conflicts_with = "from")]
    pub link_connections: Vec<u64>,
    /// Predict from measured results instead (a results.json from sockscale bench): each figure
    /// is a line fitted through the measured rows, models that cannot hold the target say why
    #[arg(long, value_name = "RESULTS")]
    pub from: Option<PathBuf>,
    /// With --from: the connection count to predict for (1 or more) [default: 50000]
    #[arg(long, value_parser = at_least_one, allow_negative_numbers = true)]
    pub target: Option<u64>,
}

/// A count of connections or operations: a whole number, 1 or more.
fn at_least_one(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be 1 or more".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number, 1 or more".into()),
    }
}

/// A buffer size that holds something.
fn nonzero_size(text: &str) -> Result<usize, String> {
    match parse_size(text)? {
        0 => Err("must be more than 0 (e.g. 16KiB)".into()),
        n => Ok(n),
    }
}

/// A link speed: a finite number of megabits per second, more than 0.
fn positive_megabits(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(mb) if mb.is_finite() && mb > 0.0 => Ok(mb),
        _ => Err("expected megabits per second, more than 0 (e.g. 100 or 0.5)".into()),
    }
}

/// The connection count `plan --from` predicts for when no --target is given: the seeds' 50,000.
const DEFAULT_TARGET: u64 = 50_000;

fn parse_model(text: &str) -> Result<Model, String> {
    text.trim().parse()
}

/// A fraction of a core: more than 0.
fn positive_cores(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(c) if c.is_finite() && c > 0.0 => Ok(c),
        _ => Err("expected a number of cores, more than 0 (e.g. 0.15)".into()),
    }
}

pub fn bench(args: &BenchArgs) -> Result<()> {
    let name = if args.quick { "quick" } else { args.profile.as_str() };
    let profile = Profile::named(name).with_context(|| format!("unknown --profile {name}"))?;
    for (i, model) in args.models.iter().enumerate() {
        if args.models[..i].contains(model) {
            bail!("--models names {model} twice: list each model once");
        }
    }
    let models = if args.models.is_empty() { Model::ALL.to_vec() } else { args.models.clone() };
    let out_dir =
        args.out.clone().unwrap_or_else(|| PathBuf::from("bench-results").join(sockscale_bench::run::stamp()));
    sockscale_bench::run::prepare_out_dir(&out_dir)?;
    let exe = std::env::current_exe().context("cannot find this program to start servers and load")?;
    let (server_cpus, client_cpus) = BenchConfig::split_cores();
    let rounds = args.rounds.unwrap_or(profile.rounds);
    let disturbed_above_cores =
        args.disturbed_above.unwrap_or(sockscale_bench::interference::DEFAULT_DISTURBED_ABOVE_CORES);
    let cfg = BenchConfig {
        exe,
        profile,
        models,
        out_dir: out_dir.clone(),
        server_cpus,
        client_cpus,
        progress: true,
        rounds,
        disturbed_above_cores,
    };

    // Ctrl-C (or SIGTERM) stops the run: every process started is killed, the rows measured
    // so far are kept and reported.
    let signals = TerminationSignals::block().context("cannot block SIGINT/SIGTERM")?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let children = Children::default();
    {
        let (flag, children) = (interrupted.clone(), children.clone());
        std::thread::Builder::new().name("sockscale-signals".into()).spawn(move || {
            while let Ok(signal) = signals.wait() {
                crate::cli::interrupted::record(signal);
                flag.store(true, Ordering::SeqCst);
                children.kill_all();
            }
        })?;
    }
    let results = sockscale_bench::run::run(&cfg, &interrupted, children)
        .with_context(|| format!("cannot write results to {}", out_dir.display()))?;
    let files = sockscale_bench::run::render_report(&results, &out_dir)
        .with_context(|| format!("cannot draw the report in {}", out_dir.display()))?;
    if args.print_tables {
        say!("{}", sockscale_bench::verdict::table_md(&results));
    }
    say!("{}", sockscale_bench::verdict::text(&results).trim_end());
    say!("");
    say!("tables:  {}", out_dir.join("table.md").display());
    say!("results: {}", out_dir.join("results.json").display());
    say!("report:  {}", files.last().map_or_else(String::new, |p| p.display().to_string()));
    if results.interrupted {
        let kept = format!("the rows measured before are in {}", out_dir.display());
        return Err(crate::cli::interrupted::Stopped(kept).into());
    }
    Ok(())
}

pub fn report(args: &ReportArgs) -> Result<()> {
    let results = Results::load(&args.results.display().to_string())?;
    if args.verdict {
        say!("{}", sockscale_bench::verdict::text(&results).trim_end());
        return Ok(());
    }
    if args.verdict_json {
        say!("{}", serde_json::to_string_pretty(&sockscale_bench::verdict::json(&results))?);
        return Ok(());
    }
    let dir = args.out.clone().unwrap_or_else(|| args.results.parent().map(PathBuf::from).unwrap_or_default());
    // Each file whole, as bench writes them: drawn aside, then renamed into place.
    let files = sockscale_bench::run::render_report(&results, &dir)
        .with_context(|| format!("cannot draw the report in {}", dir.display()))?;
    for file in files {
        say!("{}", file.display());
    }
    Ok(())
}

pub fn plan(args: &PlanArgs) -> Result<()> {
    if let Some(from) = &args.from {
        // An SLO search (`load --slo … --json`) plans requests a second within its target.
        let text = std::fs::read_to_string(from).with_context(|| format!("cannot read {}", from.display()))?;
        if let Some(slo) = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v.get("slo").cloned()) {
            let answer: sockscale_load::slo::Answer = serde_json::from_value(slo)
                .with_context(|| format!("{} is not a load --slo result", from.display()))?;
            let Some(target) = args.target else {
                bail!("--from an SLO search plans for a rate: give --target REQUESTS_PER_SECOND");
            };
            let text =
                sockscale_load::slo::plan(&answer, target).map_err(|e| anyhow::anyhow!("{}: {e}", from.display()))?;
            say!("{}", text.trim_end());
            return Ok(());
        }
        let results = Results::load(&from.display().to_string())?;
        let target = args.target.unwrap_or(DEFAULT_TARGET);
        let table = plan::predict(&results, target).with_context(|| format!("cannot plan from {}", from.display()))?;
        say!("{table}");
        return Ok(());
    }
    if let Some(target) = args.target {
        // Without measured results there is nothing to predict for a target from: say so
        // rather than print the seed's tables as if they answered it.
        bail!("--target {target} predicts from measured results: add --from RESULTS (a results.json from sockscale bench)");
    }

    say!("{}", plan::memory_table(&args.connections, &args.ops, args.buffer_size as u64, args.context));
    say!("{}", plan::bandwidth_table(&args.link_connections, &args.link));
    Ok(())
}
