//! `load … --slo TARGET`: the search for the highest rate within a latency target, driven
//! from the CLI: each step is this same command run with `-R` (so `--procs` and every other
//! flag apply), judged by the I/O-free search in `sockscale_load::slo`; split over agents, the
//! steps' reports meet in a shared directory.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use sockscale_load::Report;

use super::json_sink::JsonSink;
use super::load_flags::{unix_seconds, Common};
use super::procs;
use crate::output::say;

/// Between the steps of a search split over agents: time for every agent to end its step and
/// write its report before the next begins: as long as a step, at least 2 s and at most 10 s.
const SLO_STEP_SLACK_S: (f64, f64) = (2.0, 10.0);
/// How long past a step's planned end an agent waits for the others' reports.
const SLO_AGENT_WAIT_S: f64 = 60.0;

/// `--slo`: the search, each step a run of this same command with -R chosen (so --procs and
/// every other flag apply to every step), its report read back from --json.
pub fn search(
    common: &Common,
    cfg: &sockscale_load::LoadConfig,
    target: &sockscale_load::slo::Target,
    argv: &[String],
) -> Result<()> {
    use sockscale_load::slo::{Search, Step};
    if common.total_rate.is_some() {
        bail!("--slo chooses the rate (-R) of each step itself; leave out -R");
    }
    if common.requests.is_some() || common.duration.is_none() && common.per_conn.is_some() {
        bail!("--slo runs each step for -d seconds; give -d rather than -n or --per-conn");
    }
    // Split over agents: each step is every agent's segment at one agreed instant, judged on
    // their merge, which every agent reads from the shared directory.
    let shared = match (common.segment, &common.slo_dir, common.start_at) {
        (None, None, _) => None,
        (None, Some(_), _) => bail!("--slo-dir is for a search split with --segment"),
        (Some(_), None, _) => bail!("--slo with --segment needs --slo-dir DIR, a directory every agent shares, where the steps' segment reports meet"),
        (Some(_), Some(_), None) => bail!("--slo with --segment needs --start-at TIME: the agents begin each step together"),
        (Some(segment), Some(dir), Some(at)) => Some((segment, dir.clone(), at)),
    };
    let duration_s = common.duration.map_or(10.0, |d| d.as_secs_f64());
    let step_s = duration_s + duration_s.clamp(SLO_STEP_SLACK_S.0, SLO_STEP_SLACK_S.1);
    if common.html.is_some() || common.hdr_log.is_some() {
        bail!("--slo makes several runs: --html and --hdr-log describe one; run the rate it finds with -R to draw it");
    }
    sockscale_load::preflight(cfg)?;
    let json = common.json.as_deref().map(JsonSink::open).transpose()?;
    let dir = std::env::temp_dir().join(format!("sockscale-slo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let base = slo_step_args(argv);
    let run_step = |rate: Option<f64>, k: usize| -> Result<Report> {
        let path = dir.join(format!("step-{k}.json"));
        let exe = std::env::current_exe().context("cannot find this program to run the steps")?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(&base).args(["--json", &path.display().to_string(), "--allow-errors"]);
        if let Some(rate) = rate {
            cmd.args(["-R", &format!("{rate:.3}")]);
        }
        if let Some((_, _, at)) = &shared {
            let begin = unix_seconds(*at) + k as f64 * step_s;
            cmd.args(["--start-at", &format!("{begin:.3}")]);
        }
        let status = cmd.stdout(std::process::Stdio::null()).status().context("cannot run a step of the search")?;
        if !status.success() {
            bail!("a step of the search failed ({status})");
        }
        let Some((segment, shared_dir, _)) = &shared else {
            return Ok(Report::load(&path.display().to_string())?);
        };
        // Put this agent's part where the others find it (whole: renamed into place), then
        // wait for theirs and judge the merge, as every agent does.
        let step_dir = shared_dir.join(format!("step-{k}"));
        std::fs::create_dir_all(&step_dir).with_context(|| format!("cannot create {}", step_dir.display()))?;
        let mine = step_dir.join(format!("segment-{}.json", segment.index));
        let staged = step_dir.join(format!(".segment-{}.json.part", segment.index));
        std::fs::copy(&path, &staged)
            .and_then(|_| std::fs::rename(&staged, &mine))
            .with_context(|| format!("cannot write {}", mine.display()))?;
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(step_s + SLO_AGENT_WAIT_S);
        let parts: Vec<PathBuf> = (0..segment.count).map(|i| step_dir.join(format!("segment-{i}.json"))).collect();
        while parts.iter().any(|p| !p.exists()) {
            if std::time::Instant::now() > deadline {
                let missing: Vec<String> =
                    parts.iter().filter(|p| !p.exists()).map(|p| p.display().to_string()).collect();
                bail!(
                    "step {k} of the search: no report from every agent within {SLO_AGENT_WAIT_S} s of the step's end ({} missing)",
                    missing.join(", ")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let reports = parts.iter().map(|p| Report::load(&p.display().to_string())).collect::<Result<Vec<_>, _>>()?;
        Ok(Report::merge(&reports)?)
    };
    let ceiling = run_step(None, 0)?;
    let ceiling_rate = ceiling.rates.requests_per_s;
    say!(
        "closed loop: {ceiling_rate:.0} requests/s completed ({} errors), the ceiling of the search for {} <= {}",
        ceiling.failures(),
        target.percentile,
        sockscale_load::report::human_us(target.limit_us)
    );
    let mut search = Search::new(target.clone(), ceiling_rate);
    let mut k = 1;
    while let Some(rate) = search.next_rate() {
        let r = run_step(Some(rate), k)?;
        let percentile_us = r
            .latency
            .histogram()
            .map(|h| h.value_at_quantile(target.quantile) as f64 / 1000.0)
            .map_err(|e| anyhow::anyhow!("step {k}: {e}"))?;
        let sent = r.requests.sent as f64 / r.duration_s.max(1e-9);
        let step = Step::judge(target, rate, sent, r.rates.requests_per_s, percentile_us, r.failures());
        say!(
            "step {k:>2}: asked {rate:>9.0}/s  sent {sent:>9.0}/s  {} {:>9}  {}",
            target.percentile,
            sockscale_load::report::human_us(percentile_us),
            if step.passed { "pass".to_owned() } else { format!("fail: {}", step.why) }
        );
        search.record(step);
        k += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let answer = search.answer();
    say!("{}", answer.verdict);
    if let Some(sink) = json {
        sink.write_text(serde_json::to_string_pretty(&serde_json::json!({ "slo": answer }))? + "\n")?;
    }
    if answer.rate_per_s.is_none() {
        bail!("the target was not met at any rate tried");
    }
    Ok(())
}

/// This command's arguments (without the program's name) less the flags the search owns.
fn slo_step_args(argv: &[String]) -> Vec<String> {
    let owned = ["--slo", "--slo-dir", "--json", "-R", "--rate", "--start-at"];
    procs::child_args(argv, &owned).into_iter().filter(|a| a != "--allow-errors").collect()
}
