//! Admission control under an abort storm (seed 004): when established connections are being
//! aborted (reset, aborted, timed out by TCP) faster than `--abort-storm RATE` a second, stop
//! accepting new ones until the number established falls below `--abort-storm-resume N`
//! (default: three quarters of the number when the storm began). Accepting resumes by itself.
//!
//! No I/O: fed aborts, the number of open connections and the time, it answers whether
//! accepting is paused, and says when it pauses and resumes, so the server can count them.

use std::time::{Duration, Instant};

/// The storm policy's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormConfig {
    /// Aborts within one second that start a storm.
    pub rate: u32,
    /// Resume accepting once fewer than this many connections are established; None: three
    /// quarters of the number when the storm began.
    pub resume_below: Option<usize>,
    /// `--abort-storm-shed`: as a storm begins, close the newest connections down to the
    /// threshold (seed 004: closing some connections brings the congestion down, so that the
    /// others can be served, rather than losing many more to aborts).
    pub shed: bool,
}

/// A change of state, for the server to count and log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StormEvent {
    /// Accepting stops until fewer than `resume_below` connections are established.
    /// `shed`: close the newest connections until `resume_below` are left (`--abort-storm-shed`).
    Paused { aborts: u32, open: usize, resume_below: usize, shed: bool },
    /// Accepting goes on.
    Resumed { open: usize },
}

/// Buckets of the one-second window.
const BUCKETS: usize = 10;
const BUCKET: Duration = Duration::from_millis(100);

/// The detector.
#[derive(Debug, Clone)]
pub struct AbortStorm {
    cfg: StormConfig,
    start: Instant,
    /// Aborts per 100 ms bucket, with the bucket's number (time since `start` / 100 ms).
    buckets: [(u64, u32); BUCKETS],
    /// Paused: resume below this many established connections.
    paused: Option<usize>,
}

impl AbortStorm {
    pub fn new(cfg: StormConfig, now: Instant) -> Self {
        AbortStorm { cfg, start: now, buckets: [(u64::MAX, 0); BUCKETS], paused: None }
    }

    #[cfg(test)]
    pub fn is_paused(&self) -> bool {
        self.paused.is_some()
    }

    fn bucket_of(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_nanos() / BUCKET.as_nanos()) as u64
    }

    /// Aborts in the second up to `now`.
    pub fn aborts_in_last_second(&self, now: Instant) -> u32 {
        let current = self.bucket_of(now);
        self.buckets
            .iter()
            .filter(|(bucket, _)| *bucket != u64::MAX && *bucket + BUCKETS as u64 > current && *bucket <= current)
            .map(|(_, count)| count)
            .sum()
    }

    /// A connection was aborted at `now`, leaving `open` established.
    pub fn on_abort(&mut self, now: Instant, open: usize) -> Option<StormEvent> {
        let current = self.bucket_of(now);
        let slot = &mut self.buckets[(current % BUCKETS as u64) as usize];
        if slot.0 != current {
            *slot = (current, 0);
        }
        slot.1 = slot.1.saturating_add(1);
        if self.paused.is_some() {
            return None;
        }
        let aborts = self.aborts_in_last_second(now);
        if aborts < self.cfg.rate {
            return None;
        }
        let resume_below = self.cfg.resume_below.unwrap_or(open * 3 / 4).max(1);
        self.paused = Some(resume_below);
        Some(StormEvent::Paused { aborts, open, resume_below, shed: self.cfg.shed })
    }

    /// `open` connections are established now (one closed, or an acceptor looks again):
    /// resume if the storm's threshold is passed.
    pub fn on_open_count(&mut self, open: usize) -> Option<StormEvent> {
        match self.paused {
            Some(below) if open < below => {
                self.paused = None;
                Some(StormEvent::Resumed { open })
            }
            _ => None,
        }
    }
}

/// Which connections `--abort-storm-shed` closes: from `listed`, newest first, each with
/// whether it waits for an active-set place, the newest that do not wait, until `keep` are left
/// (a waiting one is kept: it carries no traffic, and reading nothing, its engine would not see
/// the close until its turn).
pub fn shed_choice<K>(listed: impl ExactSizeIterator<Item = (K, bool)>, keep: usize) -> Vec<K> {
    let mut left = listed.len();
    let mut shed = Vec::new();
    for (key, waiting) in listed {
        if left <= keep {
            break;
        }
        if !waiting {
            shed.push(key);
            left -= 1;
        }
    }
    shed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_rate_of_aborts_within_one_second_pauses_and_fewer_do_not() {
        let t0 = Instant::now();
        let mut storm = AbortStorm::new(StormConfig { rate: 5, resume_below: None, shed: false }, t0);
        // Four aborts a second, spread out: never a storm.
        for i in 0..20 {
            assert_eq!(storm.on_abort(t0 + ms(250 * i), 100), None, "abort {i}");
        }
        let t1 = t0 + ms(10_000);
        for i in 0..4 {
            assert_eq!(storm.on_abort(t1 + ms(i), 100), None);
        }
        assert_eq!(
            storm.on_abort(t1 + ms(900), 80),
            Some(StormEvent::Paused { aborts: 5, open: 80, resume_below: 60, shed: false }),
            "the fifth within the second"
        );
        assert!(storm.is_paused());
        assert_eq!(storm.on_abort(t1 + ms(901), 79), None, "paused already");
    }

    #[test]
    fn shedding_closes_the_newest_down_to_the_threshold() {
        let t0 = Instant::now();
        let mut storm = AbortStorm::new(StormConfig { rate: 2, resume_below: None, shed: true }, t0);
        storm.on_abort(t0, 101);
        assert_eq!(
            storm.on_abort(t0, 100),
            Some(StormEvent::Paused { aborts: 2, open: 100, resume_below: 75, shed: true }),
            "shed down to the threshold: a quarter by default"
        );
    }

    #[test]
    fn the_newest_that_do_not_wait_are_shed_down_to_the_threshold() {
        let newest_first = [(5, false), (4, true), (3, false), (2, false), (1, false)];
        assert_eq!(shed_choice(newest_first.into_iter(), 3), [5, 3], "4 waits: it is kept, and counts as kept");
        assert_eq!(shed_choice(newest_first.into_iter(), 1), [5, 3, 2, 1]);
        assert!(shed_choice(newest_first.into_iter(), 5).is_empty(), "at the threshold already");
    }

    #[test]
    fn old_aborts_leave_the_window() {
        let t0 = Instant::now();
        let mut storm = AbortStorm::new(StormConfig { rate: 3, resume_below: Some(10), shed: false }, t0);
        storm.on_abort(t0, 50);
        storm.on_abort(t0 + ms(100), 50);
        assert_eq!(storm.aborts_in_last_second(t0 + ms(100)), 2);
        assert_eq!(storm.aborts_in_last_second(t0 + ms(1_150)), 0, "both are more than a second old");
        assert_eq!(storm.on_abort(t0 + ms(1_150), 50), None);
    }

    #[test]
    fn accepting_resumes_below_the_threshold_by_itself() {
        let t0 = Instant::now();
        let mut storm = AbortStorm::new(StormConfig { rate: 2, resume_below: Some(10), shed: false }, t0);
        storm.on_abort(t0, 20);
        assert!(matches!(storm.on_abort(t0, 19), Some(StormEvent::Paused { resume_below: 10, .. })));
        assert_eq!(storm.on_open_count(10), None, "at the threshold is not below it");
        assert_eq!(storm.on_open_count(9), Some(StormEvent::Resumed { open: 9 }));
        assert!(!storm.is_paused());
        assert_eq!(storm.on_open_count(0), None, "not paused");
    }

    #[test]
    fn the_default_threshold_is_three_quarters_and_at_least_one() {
        let t0 = Instant::now();
        let mut storm = AbortStorm::new(StormConfig { rate: 1, resume_below: None, shed: false }, t0);
        assert_eq!(
            storm.on_abort(t0, 0),
            Some(StormEvent::Paused { aborts: 1, open: 0, resume_below: 1, shed: false })
        );
        assert_eq!(storm.on_open_count(0), Some(StormEvent::Resumed { open: 0 }), "nothing left: resume");
    }
}
