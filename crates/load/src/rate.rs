//! Pacing: token buckets for `-r` (bytes per second per block of connections) and the
//! constant schedule for `-R` (open loop).
//!
//! A block's connections that want to send while its bucket is empty wait in a FIFO queue
//! ([`PacedBlock`]); one deadline per block (when the head's message will be paid for)
//! grants sends in order. Waiting connections hold no timer and are not looked at until
//! their turn, so a refill costs the sends it pays for, not the number of waiters.
//!
//! That deadline falls on a multiple of [`PACING_TICK_NS`] (counted from the run's start, so
//! every block of a thread shares the wake-up): a wake-up of the load thread costs far more
//! than a message, and one wake-up per message made a paced message cost ten times a flooded
//! one. A deadline is never put off past the moment the bucket would be full, so the rounding
//! loses no tokens and the rate is the bucket's.

/// Grants of a block are handed out on this tick (half the bucket's 20 ms burst).
pub const PACING_TICK_NS: u64 = 10_000_000;

use std::collections::VecDeque;

/// A token bucket of bytes. Tokens accrue at `rate` per second up to `burst`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// `rate` bytes per second; the burst holds 20 ms of rate, and at least one `unit` so a
    /// whole message can always pass eventually.
    pub fn new(rate: f64, unit: usize, now_ns: u64) -> Self {
        let burst = (rate * 0.02).max(unit as f64);
        TokenBucket { rate, burst, tokens: unit as f64, last_ns: now_ns }
    }

    /// The tokens there are at `now_ns`.
    fn tokens_at(&self, now_ns: u64) -> f64 {
        let elapsed = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        (self.tokens + elapsed * self.rate).min(self.burst)
    }

    fn refill(&mut self, now_ns: u64) {
        self.tokens = self.tokens_at(now_ns);
        self.last_ns = now_ns;
    }

    /// Take `n` tokens if there are enough.
    pub fn take(&mut self, n: usize, now_ns: u64) -> bool {
        self.refill(now_ns);
        if self.tokens >= n as f64 {
            self.tokens -= n as f64;
            true
        } else {
            false
        }
    }

    /// When the bucket will be full (no later than `now_ns` if it is).
    pub fn full_at(&self, now_ns: u64) -> u64 {
        let missing = (self.burst - self.tokens_at(now_ns)).max(0.0);
        now_ns + (missing / self.rate * 1e9) as u64
    }

    /// When `n` tokens will be there.
    pub fn ready_at(&self, n: usize, now_ns: u64) -> u64 {
        let missing = (n as f64 - self.tokens_at(now_ns)).max(0.0);
        now_ns + (missing / self.rate * 1e9).ceil() as u64
    }
}

/// One block's bucket and the connections waiting on it, first come first served.
#[derive(Debug, Clone)]
pub struct PacedBlock {
    bucket: TokenBucket,
    /// Bytes of one message: every send of a run costs the same.
    unit: usize,
    /// Connections (the caller's tokens) waiting for a send, oldest first.
    waiting: VecDeque<u64>,
}

impl PacedBlock {
    /// `rate` bytes per second for messages of `unit` bytes.
    pub fn new(rate: f64, unit: usize, now_ns: u64) -> Self {
        PacedBlock { bucket: TokenBucket::new(rate, unit, now_ns), unit, waiting: VecDeque::new() }
    }

    /// `who` wants to send one message now. True: it is paid for, send it. False: `who` is
    /// queued behind the connections already waiting, and is handed out by [`Self::grant_due`].
    /// A caller asks again for `who` only after it was granted.
    pub fn ask(&mut self, who: u64, now_ns: u64) -> bool {
        if self.waiting.is_empty() && self.bucket.take(self.unit, now_ns) {
            return true;
        }
        self.waiting.push_back(who);
        false
    }

    /// When the first waiting connection can be paid for, on the next [`PACING_TICK_NS`]
    /// (or before, when the bucket would be full sooner); None when nobody waits.
    pub fn next_grant_ns(&self, now_ns: u64) -> Option<u64> {
        if self.waiting.is_empty() {
            return None;
        }
        let ready = self.bucket.ready_at(self.unit, now_ns);
        let tick = ready.div_ceil(PACING_TICK_NS) * PACING_TICK_NS;
        Some(tick.min(self.bucket.full_at(now_ns).max(ready)))
    }

    /// Pay for waiting connections in order while the bucket allows, appending them to
    /// `granted`. Entries `still_waiting` rejects (closed since) are dropped unpaid.
    pub fn grant_due(&mut self, now_ns: u64, mut still_waiting: impl FnMut(u64) -> bool, granted: &mut Vec<u64>) {
        while let Some(&who) = self.waiting.front() {
            if !still_waiting(who) {
                self.waiting.pop_front();
                continue;
            }
            if !self.bucket.take(self.unit, now_ns) {
                break;
            }
            self.waiting.pop_front();
            granted.push(who);
        }
    }

    /// Connections waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_enforced_over_time() {
        let mut b = TokenBucket::new(1000.0, 100, 0);
        let mut sent = 0;
        let mut now = 0;
        while now < 10_000_000_000 {
            if b.take(100, now) {
                sent += 100;
            } else {
                now = b.ready_at(100, now);
            }
        }
        // 10 s at 1000 B/s, plus the initial unit.
        assert!((10_000..=10_100).contains(&sent), "{sent}");
    }

    /// 1,000 connections share 200,000 B/s in 512-byte messages (the seed's rate-limited row)
    /// for 10 simulated seconds; each sends again as soon as its message is out. The block
    /// keeps the rate, serves the connections in turn, and has one deadline per pacing tick
    /// at most: nothing for the connections that merely wait.
    #[test]
    fn paced_block_keeps_the_rate_in_fifo_order_with_one_deadline_per_tick() {
        let (rate, unit, conns) = (200_000.0, 512, 1000u64);
        let mut block = PacedBlock::new(rate, unit, 0);
        let mut sent = Vec::new();
        for who in 0..conns {
            if block.ask(who, 0) {
                sent.push(who);
            }
        }
        // Those sent at once ask again behind the others.
        for &who in &sent.clone() {
            assert!(!block.ask(who, 0));
        }
        let mut deadlines = 0u64;
        let mut granted = Vec::new();
        let end = 10_000_000_000;
        let mut now = 0;
        while let Some(at) = block.next_grant_ns(now) {
            if at > end {
                break;
            }
            now = at;
            deadlines += 1;
            granted.clear();
            block.grant_due(now, |_| true, &mut granted);
            for &who in &granted {
                sent.push(who);
                assert!(!block.ask(who, now), "a granted connection asks again behind the rest");
            }
            assert_eq!(block.waiting(), conns as usize, "every connection is always waiting or granted");
        }
        let expected = 10.0 * rate / unit as f64;
        let got = sent.len() as f64;
        assert!((got - expected).abs() <= expected * 0.01 + 2.0, "{got} messages, expected {expected}");
        // First come, first served: connection k's n-th send is send number n * conns + k.
        assert!(sent.iter().enumerate().all(|(i, &who)| who == i as u64 % conns), "not in FIFO order");
        // One deadline per tick for the block (not one per send, nor per waiter).
        assert!(deadlines <= end / PACING_TICK_NS + 1, "{deadlines} deadlines for {} sends", sent.len());
    }

    #[test]
    fn paced_block_drops_connections_gone_without_paying_for_them() {
        let mut block = PacedBlock::new(1000.0, 100, 0);
        assert!(block.ask(1, 0), "the first message is in the bucket");
        assert!(!block.ask(2, 0));
        assert!(!block.ask(3, 0));
        let at = block.next_grant_ns(0).expect("2 and 3 wait");
        assert_eq!(at, 100_000_000, "100 bytes at 1000 B/s");
        let mut granted = Vec::new();
        // Connection 2 closed while waiting: 3 gets the send it would have had.
        block.grant_due(at, |who| who != 2, &mut granted);
        assert_eq!(granted, vec![3]);
        assert_eq!(block.waiting(), 0);
        assert_eq!(block.next_grant_ns(at), None, "nobody waits: no deadline");
    }

    /// A block too slow to fill its bucket within a tick (512-byte messages at 1,000 B/s: the
    /// bucket holds one message) is granted the moment a message is paid for: rounding to the
    /// tick would waste tokens and lower the rate.
    #[test]
    fn paced_block_at_a_slow_rate_keeps_the_rate() {
        let mut block = PacedBlock::new(1000.0, 512, 0);
        let mut sends = u64::from(block.ask(0, 0));
        assert!(!block.ask(0, 0));
        let mut granted = Vec::new();
        let mut now = 0;
        while let Some(at) = block.next_grant_ns(now) {
            if at > 100_000_000_000 {
                break;
            }
            now = at;
            granted.clear();
            block.grant_due(now, |_| true, &mut granted);
            for &who in &granted {
                sends += 1;
                assert!(!block.ask(who, now));
            }
        }
        // 100 s at 1000 B/s in 512-byte messages, plus the first.
        assert!((195..=197).contains(&sends), "{sends} messages");
    }
}
