//! `--slo 'p99.9<=10ms'`: the highest open-loop rate at which a latency target holds, found by a
//! bounded search. I/O-free: [`Search`] is told each step's outcome and says which rate to try
//! next, or that it is done; the caller runs the steps (`sockscale load` with `-R`).
//!
//! The search starts at the throughput a closed-loop run measured (its ceiling: an open-loop
//! rate above what the server completes cannot hold any target), halves while the target fails,
//! then bisects between the highest rate that passed and the lowest that failed until they are
//! within [`TOLERANCE`] of each other. A step passes when the percentile is within the target,
//! no error was counted, and the generator sent at least 95% of the rate asked (a step whose
//! rate was not sent says nothing about that rate).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The answer is within this fraction of the boundary: the highest rate that passed and the
/// lowest that failed are at most this far apart.
pub const TOLERANCE: f64 = 0.02;
/// Steps at most, the closed-loop probe not counted.
pub const MAX_STEPS: usize = 16;
/// A rate below this per second is not tried: the target is not met at any useful rate.
const MIN_RATE: f64 = 1.0;

/// A latency target: a percentile and its limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// As written: `p99.9`.
    pub percentile: String,
    /// 0.999 for p99.9.
    pub quantile: f64,
    pub limit_us: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--slo '{given}': {reason} (e.g. 'p99.9<=10ms', 'p50<=500us', 'p99<=1s')")]
pub struct TargetError {
    given: String,
    reason: String,
}

impl Target {
    pub fn parse(text: &str) -> Result<Target, TargetError> {
        let bad = |reason: &str| TargetError { given: text.to_owned(), reason: reason.to_owned() };
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let (left, right) = compact
            .split_once("<=")
            .or_else(|| compact.split_once('<'))
            .ok_or_else(|| bad("no '<=' between the percentile and the limit"))?;
        let number = left.strip_prefix('p').ok_or_else(|| bad("the percentile is written p50, p99, p99.9…"))?;
        let percent: f64 = number.parse().map_err(|_| bad("the percentile is not a number"))?;
        if !(percent > 0.0 && percent < 100.0) {
            return Err(bad("the percentile must be above 0 and below 100"));
        }
        let split = right.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(right.len());
        let (value, unit) = right.split_at(split);
        let value: f64 = value.parse().map_err(|_| bad("the limit is not a number"))?;
        let us = match unit {
            "us" | "µs" => value,
            "ms" => value * 1e3,
            "" | "s" => value * 1e6,
            "m" | "min" => value * 60e6,
            _ => return Err(bad("unknown unit of the limit (us, ms, s, m)")),
        };
        if !(us > 0.0 && us.is_finite()) {
            return Err(bad("the limit must be above zero"));
        }
        Ok(Target { percentile: left.to_owned(), quantile: percent / 100.0, limit_us: us })
    }

    pub fn limit(&self) -> Duration {
        Duration::from_secs_f64(self.limit_us / 1e6)
    }
}

/// One step of the search, as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub asked_per_s: f64,
    pub sent_per_s: f64,
    pub completed_per_s: f64,
    /// The target's percentile, corrected (from the schedule), µs.
    pub percentile_us: f64,
    pub errors: u64,
    pub passed: bool,
    /// Why it failed, in words; empty when it passed.
    pub why: String,
}

impl Step {
    /// Judge a step against `target`.
    pub fn judge(target: &Target, asked: f64, sent: f64, completed: f64, percentile_us: f64, errors: u64) -> Step {
        let mut why = Vec::new();
        if percentile_us > target.limit_us {
            why.push(format!(
                "{} {} over {}",
                target.percentile,
                crate::report::human_us(percentile_us),
                crate::report::human_us(target.limit_us)
            ));
        }
        if errors > 0 {
            why.push(format!("{errors} errors"));
        }
        if sent < 0.95 * asked {
            why.push(format!("sent only {sent:.0}/s of {asked:.0}/s (the generator or the server fell behind)"));
        }
        Step {
            asked_per_s: asked,
            sent_per_s: sent,
            completed_per_s: completed,
            percentile_us,
            errors,
            passed: why.is_empty(),
            why: why.join("; "),
        }
    }
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub target: Target,
    /// The closed-loop probe's completed requests per second: the ceiling.
    pub ceiling_per_s: f64,
    pub steps: Vec<Step>,
    /// The highest rate that passed; None when none did.
    pub rate_per_s: Option<f64>,
    /// The lowest rate that failed; None when none did (the target held at the ceiling).
    pub failed_at_per_s: Option<f64>,
    /// What the answer means, in words.
    pub verdict: String,
}

/// The search in progress.
#[derive(Debug, Clone)]
pub struct Search {
    target: Target,
    ceiling: f64,
    steps: Vec<Step>,
}

impl Search {
    pub fn new(target: Target, ceiling_per_s: f64) -> Search {
        Search { target, ceiling: ceiling_per_s, steps: Vec::new() }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    fn passed(&self) -> Option<f64> {
        self.steps.iter().filter(|s| s.passed).map(|s| s.asked_per_s).reduce(f64::max)
    }

    fn failed(&self) -> Option<f64> {
        self.steps.iter().filter(|s| !s.passed).map(|s| s.asked_per_s).reduce(f64::min)
    }

    /// The rate to try next, or None when the search is done.
    pub fn next_rate(&self) -> Option<f64> {
        if self.steps.len() >= MAX_STEPS || self.ceiling < MIN_RATE {
            return None;
        }
        match (self.passed(), self.failed()) {
            (None, None) => Some(self.ceiling),
            // Held at the ceiling: no higher rate is sent, so nothing is left to find.
            (Some(_), None) => None,
            (None, Some(hi)) => Some(hi / 2.0).filter(|&r| r >= MIN_RATE),
            (Some(lo), Some(hi)) => (hi - lo > TOLERANCE * lo).then_some((lo + hi) / 2.0),
        }
    }

    pub fn record(&mut self, step: Step) {
        self.steps.push(step);
    }

    pub fn answer(self) -> Answer {
        let (passed, failed) = (self.passed(), self.failed());
        let t = &self.target;
        let target = format!("{} <= {}", t.percentile, crate::report::human_us(t.limit_us));
        let verdict = match (passed, failed) {
            (Some(lo), Some(hi)) if hi - lo <= TOLERANCE * lo => {
                format!("{target} holds up to {lo:.0} requests/s (it failed at {hi:.0}/s, within {:.0}%)", TOLERANCE * 100.0)
            }
            (Some(lo), Some(hi)) => format!(
                "{target} holds at {lo:.0}/s and failed at {hi:.0}/s; the search stopped after {MAX_STEPS} steps before narrowing it to {:.0}%",
                TOLERANCE * 100.0
            ),
            (Some(lo), None) => format!(
                "{target} holds at {lo:.0}/s, the most the server completed in closed loop: the target is not what limits it"
            ),
            (None, Some(hi)) => format!("{target} failed at every rate tried, down to {hi:.0}/s"),
            (None, None) => "no step was run".to_owned(),
        };
        Answer {
            target: self.target,
            ceiling_per_s: self.ceiling,
            steps: self.steps,
            rate_per_s: passed,
            failed_at_per_s: failed,
            verdict,
        }
    }
}

/// `plan --from` an SLO search: how many servers like the one searched serve `target`
/// requests per second within the same latency target. Linear in the servers, which it says.
pub fn plan(answer: &Answer, target_per_s: u64) -> Result<String, String> {
    let t = &answer.target;
    let within = format!("{} <= {}", t.percentile, crate::report::human_us(t.limit_us));
    let Some(rate) = answer.rate_per_s.filter(|&r| r > 0.0) else {
        return Err(format!("the search found no rate within {within}: nothing to plan from"));
    };
    let servers = (target_per_s as f64 / rate).ceil().max(1.0) as u64;
    let bracket = match answer.failed_at_per_s {
        Some(hi) => format!("it failed at {hi:.0}/s"),
        None => "it held at the closed-loop ceiling, so the rate, not the latency, limited it".to_owned(),
    };
    let mut out = format!(
        "Within {within} with no error, the server searched held {rate:.0} requests/s ({bracket}; {} steps).\n",
        answer.steps.len()
    );
    if servers == 1 {
        out.push_str(&format!("{target_per_s} requests/s: one such server, measured (at most {rate:.0}/s).\n"));
    } else {
        out.push_str(&format!(
            "{target_per_s} requests/s: {servers} such servers at {:.0}/s each, extrapolated: it assumes the load is spread evenly and the servers do not share what limited the one measured (cores, a link, a database); only one server was measured.\n",
            target_per_s as f64 / servers as f64
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_from_a_search_scales_the_rate_that_passed_and_says_it_extrapolates() {
        let target = Target::parse("p99<=10ms").unwrap();
        let mut search = Search::new(target.clone(), 20_000.0);
        search.record(Step::judge(&target, 20_000.0, 20_000.0, 20_000.0, 50_000.0, 0));
        search.record(Step::judge(&target, 10_000.0, 10_000.0, 10_000.0, 1_000.0, 0));
        let answer = search.answer();
        let one = plan(&answer, 8_000).unwrap();
        assert!(one.contains("one such server, measured"), "{one}");
        let many = plan(&answer, 35_000).unwrap();
        assert!(many.contains("4 such servers") && many.contains("extrapolated"), "{many}");
        let mut none = Search::new(target.clone(), 100.0);
        none.record(Step::judge(&target, 100.0, 100.0, 100.0, 1e9, 0));
        assert!(plan(&none.answer(), 10).unwrap_err().contains("no rate"));
    }

    #[test]
    fn targets_parse_with_any_unit_and_bad_ones_say_why() {
        let t = Target::parse("p99.9<=10ms").unwrap();
        assert_eq!((t.percentile.as_str(), t.limit_us), ("p99.9", 10_000.0));
        assert!((t.quantile - 0.999).abs() < 1e-12);
        assert_eq!(Target::parse(" p50 < 500us ").unwrap().limit_us, 500.0);
        assert_eq!(Target::parse("p99<=1.5s").unwrap().limit_us, 1_500_000.0);
        assert_eq!(Target::parse("p99<=2").unwrap().limit_us, 2_000_000.0);
        for bad in ["p99", "99<=1ms", "p100<=1ms", "p99<=0ms", "p99<=1xs", "pq<=1ms"] {
            let e = Target::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--slo '{bad}'")), "{e}");
        }
    }

    /// A server whose p99 is 1 ms below 10,000/s and 50 ms above: the search finds 10,000
    /// within 2% in a bounded number of steps, each recorded.
    #[test]
    fn the_search_brackets_the_boundary_within_the_tolerance() {
        let target = Target::parse("p99<=10ms").unwrap();
        let boundary = 10_000.0;
        let mut search = Search::new(target.clone(), 31_000.0);
        while let Some(rate) = search.next_rate() {
            let p99 = if rate <= boundary { 1_000.0 } else { 50_000.0 };
            search.record(Step::judge(&target, rate, rate, rate, p99, 0));
        }
        let answer = search.answer();
        let lo = answer.rate_per_s.unwrap();
        let hi = answer.failed_at_per_s.unwrap();
        assert!(lo <= boundary && hi > boundary && (hi - lo) <= TOLERANCE * lo, "{lo} {hi}");
        assert!(answer.steps.len() <= 10, "{} steps", answer.steps.len());
        assert!(answer.verdict.contains("holds up to"), "{}", answer.verdict);
    }

    #[test]
    fn errors_and_a_short_schedule_fail_a_step_and_a_target_held_at_the_ceiling_ends_it() {
        let target = Target::parse("p99<=10ms").unwrap();
        let step = Step::judge(&target, 1000.0, 900.0, 900.0, 10.0, 0);
        assert!(!step.passed && step.why.contains("sent only 900/s"), "{step:?}");
        let step = Step::judge(&target, 1000.0, 1000.0, 990.0, 10.0, 3);
        assert!(!step.passed && step.why.contains("3 errors"), "{step:?}");
        let mut search = Search::new(target.clone(), 5000.0);
        assert_eq!(search.next_rate(), Some(5000.0));
        search.record(Step::judge(&target, 5000.0, 5000.0, 5000.0, 10.0, 0));
        assert_eq!(search.next_rate(), None);
        assert!(search.answer().verdict.contains("not what limits it"));

        let mut search = Search::new(target.clone(), 64.0);
        while let Some(rate) = search.next_rate() {
            search.record(Step::judge(&target, rate, rate, rate, 1e9, 0));
        }
        let answer = search.answer();
        assert_eq!(answer.rate_per_s, None);
        assert!(answer.verdict.contains("failed at every rate"), "{}", answer.verdict);
    }
}
