//! One agent's part of a run split across N agents (`load --segment I/N`): which of the run's
//! connections and requests are this agent's, so that the N parts add up to exactly the whole.
//!
//! No I/O. Whole things (connections, requests) are split with no rounding loss: each segment
//! gets `total / N`, and the first `total % N` segments one more. Rates follow the connections:
//! a segment with 3 of 7 connections sends 3/7 of the total rate.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Segment `index` of `count` (0 ≤ index < count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Segment {
    pub index: u32,
    pub count: u32,
}

/// The environment variable a Kubernetes Indexed Job sets to each pod's index.
pub const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

impl Segment {
    /// The whole run, as one segment.
    pub const WHOLE: Segment = Segment { index: 0, count: 1 };

    /// `I/N`, or `auto/N` to take I from `index_env` (the value of [`INDEX_ENV`], if set).
    pub fn parse(text: &str, index_env: Option<&str>) -> Result<Segment, String> {
        let (index, count) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| format!("'{text}' is not a segment: expected I/N (e.g. 0/4) or auto/N"))?;
        let count: u32 = count
            .trim()
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("'{text}': N must be a whole number, 1 or more"))?;
        let index: u32 = if index.trim() == "auto" {
            let value = index_env
                .ok_or_else(|| format!("'{text}': auto takes the index from {INDEX_ENV}, which is not set"))?;
            value.trim().parse().map_err(|_| format!("{INDEX_ENV}={value:?} is not a whole number"))?
        } else {
            index.trim().parse().map_err(|_| format!("'{text}': I must be a whole number from 0"))?
        };
        if index >= count {
            return Err(format!("segment {index}/{count}: the index must be below {count} (0 to {})", count - 1));
        }
        Ok(Segment { index, count })
    }

    /// This segment's part of `total` whole things, as a range of their numbers: the parts of
    /// all N segments are disjoint and cover `0..total` exactly.
    pub fn range(self, total: u64) -> Range<u64> {
        let (n, i) = (u64::from(self.count), u64::from(self.index));
        let (base, extra) = (total / n, total % n);
        let start = i * base + i.min(extra);
        start..start + base + u64::from(i < extra)
    }

    /// This segment's part of `total` whole things.
    pub fn part(self, total: u64) -> u64 {
        let r = self.range(total);
        r.end - r.start
    }

    /// This segment's part of a rate shared by `conns` connections: in proportion to its
    /// connections.
    pub fn rate(self, total: f64, conns: u64) -> f64 {
        if conns == 0 {
            return 0.0;
        }
        total * self.part(conns) as f64 / conns as f64
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Segment {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Segment::parse(s, std::env::var(INDEX_ENV).ok().as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(index: u32, count: u32) -> Segment {
        Segment { index, count }
    }

    #[test]
    fn seven_connections_over_three_agents_add_up() {
        let parts: Vec<Range<u64>> = (0..3).map(|i| seg(i, 3).range(7)).collect();
        assert_eq!(parts, [0..3, 3..5, 5..7]);
    }

    #[test]
    fn every_split_covers_the_whole_exactly() {
        for count in 1..=12u32 {
            for total in [0u64, 1, 2, 5, 7, 11, 100, 1_000_003] {
                let mut next = 0;
                for index in 0..count {
                    let r = seg(index, count).range(total);
                    assert_eq!(r.start, next, "{index}/{count} of {total}");
                    next = r.end;
                }
                assert_eq!(next, total, "{count} segments of {total}");
                let rates: f64 = (0..count).map(|i| seg(i, count).rate(1000.0, total)).sum();
                if total > 0 {
                    assert!((rates - 1000.0).abs() < 1e-6, "{count} of {total}: {rates}");
                }
            }
        }
    }

    #[test]
    fn parsing_takes_an_index_or_the_job_index() {
        assert_eq!(Segment::parse("2/5", None), Ok(seg(2, 5)));
        assert_eq!(Segment::parse("auto/4", Some("3")), Ok(seg(3, 4)));
        for bad in ["5/5", "1", "a/2", "0/0", "-1/3"] {
            assert!(Segment::parse(bad, None).is_err(), "{bad}");
        }
        assert!(Segment::parse("auto/4", None).unwrap_err().contains(INDEX_ENV));
        assert!(Segment::parse("auto/4", Some("4")).unwrap_err().contains("below 4"));
        assert_eq!(seg(1, 3).to_string(), "1/3");
    }
}
