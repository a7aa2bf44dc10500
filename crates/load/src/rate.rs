//! Pacing: token buckets for `-r` (bytes per second per block of connections) and the
//! constant schedule for `-R` (open loop).

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

    fn refill(&mut self, now_ns: u64) {
        let elapsed = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
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

    /// When `n` tokens will be there.
    pub fn ready_at(&self, n: usize, now_ns: u64) -> u64 {
        let missing = (n as f64 - self.tokens).max(0.0);
        now_ns + (missing / self.rate * 1e9).ceil() as u64
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
}
