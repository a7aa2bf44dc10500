//! Deadlines of many connections, in one heap per worker.
//!
//! Deadlines move later on every byte of traffic, and updating a heap on every read would cost
//! more than the traffic. So the heap is lazy: each connection has one authoritative entry
//! (`Conn::timer_at`); when an entry comes due, the worker recomputes the connection's real
//! deadline and either acts or re-inserts it. An entry is pushed early only when a deadline
//! moves *earlier* (a header or send timeout starting), and entries of closed or superseded
//! connections are skipped when they surface.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Timers {
    /// Schedule `token` at `at` unless its authoritative entry `timer_at` is already earlier.
    pub fn schedule(&mut self, timer_at: &mut Option<Instant>, at: Instant, token: u64) {
        if timer_at.is_none_or(|current| at < current) {
            *timer_at = Some(at);
            self.heap.push(Reverse((at, token)));
        }
    }

    /// The earliest entry, due or not.
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Pop one entry due at `now`: (its time, token).
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, u64)> {
        match self.heap.peek() {
            Some(Reverse((at, _))) if *at <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn earlier_deadlines_supersede_later_ones_lazily() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        let mut timer_at = None;
        timers.schedule(&mut timer_at, t0 + Duration::from_secs(60), 1);
        timers.schedule(&mut timer_at, t0 + Duration::from_secs(90), 1);
        assert_eq!(timers.len(), 1, "a later deadline does not add an entry");
        timers.schedule(&mut timer_at, t0 + Duration::from_secs(10), 1);
        assert_eq!(timer_at, Some(t0 + Duration::from_secs(10)));
        assert_eq!(timers.pop_due(t0 + Duration::from_secs(9)), None);
        assert_eq!(timers.pop_due(t0 + Duration::from_secs(10)), Some((t0 + Duration::from_secs(10), 1)));
        // The superseded 60 s entry is still there; the owner skips it since timer_at differs.
        assert_eq!(timers.next(), Some(t0 + Duration::from_secs(60)));
    }
}
