//! What a connection counted, as plain data: an engine adds a connection's to its totals when
//! it ends (or reads them as it goes) and `/metrics` prints them.

/// The close codes counted by name; every other code is counted as "other".
pub const CLOSE_CODES: [u16; 10] = [1000, 1001, 1002, 1003, 1005, 1007, 1008, 1009, 1010, 1011];

/// Close frames by code. 1005 stands for a close frame with no code (RFC 6455 §7.1.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CloseCounts {
    by_code: [u64; CLOSE_CODES.len()],
    pub other: u64,
}

impl CloseCounts {
    pub fn count(&mut self, code: Option<u16>) {
        let code = code.unwrap_or(1005);
        match CLOSE_CODES.iter().position(|&c| c == code) {
            Some(i) => self.by_code[i] += 1,
            None => self.other += 1,
        }
    }

    /// How many closes had `code` (one of [`CLOSE_CODES`]; 0 for another).
    pub fn get(&self, code: u16) -> u64 {
        CLOSE_CODES.iter().position(|&c| c == code).map_or(0, |i| self.by_code[i])
    }

    /// Each counted code and its count (codes of [`CLOSE_CODES`] in order; "other" is `other`).
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        CLOSE_CODES.iter().copied().zip(self.by_code.iter().copied())
    }

    pub fn total(&self) -> u64 {
        self.by_code.iter().sum::<u64>() + self.other
    }

    pub fn add(&mut self, other: &CloseCounts) {
        for (mine, theirs) in self.by_code.iter_mut().zip(other.by_code) {
            *mine += theirs;
        }
        self.other += other.other;
    }
}

/// One connection's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Whole messages received (text and binary).
    pub messages_received: u64,
    pub messages_sent: u64,
    /// Message payload octets, after inflating.
    pub bytes_received: u64,
    /// Message payload octets, before compressing.
    pub bytes_sent: u64,
    pub pings_received: u64,
    pub pings_sent: u64,
    pub pongs_received: u64,
    pub pongs_sent: u64,
    /// Pings not answered by the next one: the connection was closed.
    pub ping_timeouts: u64,
    pub closes_received: CloseCounts,
    pub closes_sent: CloseCounts,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.messages_received += other.messages_received;
        self.messages_sent += other.messages_sent;
        self.bytes_received += other.bytes_received;
        self.bytes_sent += other.bytes_sent;
        self.pings_received += other.pings_received;
        self.pings_sent += other.pings_sent;
        self.pongs_received += other.pongs_received;
        self.pongs_sent += other.pongs_sent;
        self.ping_timeouts += other.ping_timeouts;
        self.closes_received.add(&other.closes_received);
        self.closes_sent.add(&other.closes_sent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_are_counted_by_code_and_added() {
        let mut counts = CloseCounts::default();
        counts.count(Some(1000));
        counts.count(None);
        counts.count(Some(4000));
        assert_eq!((counts.get(1000), counts.get(1005), counts.other, counts.total()), (1, 1, 1, 3));
        let mut stats = Stats { messages_received: 2, closes_sent: counts, ..Stats::default() };
        stats.add(&stats.clone());
        assert_eq!((stats.messages_received, stats.closes_sent.get(1000), stats.closes_sent.total()), (4, 2, 6));
    }
}
