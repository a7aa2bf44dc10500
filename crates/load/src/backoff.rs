//! How long a connection waits before it tries to connect again after a failure.
//!
//! A refused connect costs the server almost nothing and the client a syscall or two, so
//! retrying every few milliseconds turns a full server into a storm: one bench row counted a
//! million refusals for 12,000 connections. Each connection backs off on its own, doubling from
//! [`FIRST`] up to [`CAP`], with jitter so that connections refused together do not come back
//! together. A connection that completes an exchange starts it over; a connect alone does not,
//! since a server refusing when busy accepts and closes at once.

/// The wait after the first failure.
pub const FIRST_NS: u64 = 50_000_000;
/// The longest wait: a server that frees a slot is found again within this.
pub const CAP_NS: u64 = 2_000_000_000;

/// The wait before the next attempt of a connection that has failed `failures` times in a row
/// (1 or more), in nanoseconds: `FIRST_NS · 2^(failures-1)`, capped at `CAP_NS`, then drawn
/// uniformly from its upper half by `seed` (the connection's number), so the same connection
/// and count always wait the same ("equal jitter").
pub fn delay_ns(failures: u32, seed: u64) -> u64 {
    let doublings = failures.saturating_sub(1).min(63);
    let base = FIRST_NS.saturating_mul(1u64 << doublings).min(CAP_NS);
    let half = base / 2;
    half + splitmix64(seed ^ (u64::from(failures) << 48)) % (half + 1)
}

/// A well-mixed 64-bit hash of `x` (Steele, Lea and Flood's SplitMix64 finaliser).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_50ms_to_a_2s_cap_within_its_upper_half() {
        for seed in 0..1000 {
            let mut last_base = 0;
            for failures in 1..=40 {
                let base = (FIRST_NS << (failures - 1).min(20)).min(CAP_NS);
                let d = delay_ns(failures, seed);
                assert!(d >= base / 2 && d <= base, "failure {failures}: {d} not in [{}, {base}]", base / 2);
                assert!(base >= last_base);
                last_base = base;
            }
            assert!(delay_ns(u32::MAX, seed) <= CAP_NS);
        }
        assert!(delay_ns(1, 7) <= FIRST_NS);
        assert!(delay_ns(7, 7) >= CAP_NS / 2, "the cap is reached at the 7th failure");
    }

    /// Connections refused at the same instant spread out instead of returning together.
    #[test]
    fn connections_refused_together_come_back_apart() {
        let waits: std::collections::BTreeSet<u64> = (0..100).map(|conn| delay_ns(5, conn) / 1_000_000).collect();
        assert!(waits.len() > 50, "100 connections share only {} distinct waits (ms)", waits.len());
    }

    /// Over 20 s of refusals one connection tries about a dozen times, not the 400 a fixed
    /// 50 ms pause made.
    #[test]
    fn twenty_seconds_of_refusals_cost_a_bounded_number_of_attempts() {
        let (mut t, mut attempts, mut failures) = (0u64, 0u32, 0u32);
        while t < 20_000_000_000 {
            attempts += 1;
            failures += 1;
            t += delay_ns(failures, 42);
        }
        assert!((10..=30).contains(&attempts), "{attempts} attempts");
    }
}
