//! The seeds' high-throughput strategy: I/O on a FIFO active set (`--active-set N`).
//!
//! The server keeps accepting and holding connections, but reads from (and so serves) only N of
//! them at a time, in the order they arrived; the rest wait, costing a descriptor and a slot but
//! no posted read, no buffer and no work. A connection gives its place to the first waiting one
//! when it closes, when it has sent nothing for `--active-grace`, or when it has held the place
//! for `--active-turn` while others wait (then it queues again at the back). The last rule is
//! what keeps a waiting connection from starving behind N clients that never pause: every
//! connection is served within about (waiting / N) turns.
//!
//! A place's clocks start when its connection is served, not when the place is given: an engine
//! that hands the place to the connection's own task ([`Handover::ByTheConnection`], tokio)
//! says when the task takes it up. Before that the connection has not been asked for input, so
//! it is neither idle nor at the end of a turn; counting from the handover instead lost a
//! scheduled-late task its whole turn, and it queued again at the back unserved (measured on
//! tokio with 1,000 places and 10,000 flooding connections: 3 stops in 10 were of connections
//! that had not yet read, and the p99 wait was two rounds of turns instead of one).
//!
//! No I/O: fed arrivals, input, closes and the time, it answers which connections start and
//! stop reading. Keys are whatever names a connection to its engine (a slab token).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The active set's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveConfig {
    /// Connections read from at once (at least 1).
    pub size: usize,
    /// An active connection that has sent nothing this long gives its place up, if any wait.
    pub grace: Duration,
    /// An active connection that has held its place this long gives it up, if any wait.
    pub turn: Duration,
}

impl ActiveConfig {
    /// This worker's share of the set when `workers` threads each own their connections: the
    /// size split evenly, the first ones taking the remainder, at least 1 each.
    pub fn share(self, worker: usize, workers: usize) -> ActiveConfig {
        let workers = workers.max(1);
        let size = self.size / workers + usize::from(worker < self.size % workers);
        ActiveConfig { size: size.max(1), ..self }
    }

    /// How often a set with connections waiting looks for a place to give: often enough that a
    /// place is given within a tenth of the shorter interval.
    pub fn review_every(&self) -> Duration {
        (self.grace.min(self.turn) / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
    }
}

/// How an engine puts a connection to work when it gives it a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// In the same step (a readiness loop or a ring starts reading it at once): the place's
    /// clocks start when it is given.
    AtOnce,
    /// Through the connection's own task, which may run later: the place's clocks start when
    /// the task takes it up ([`ActiveSet::take_up`]); until then it is never given up by grace
    /// or turn.
    ByTheConnection,
}

/// Where a new connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// It may read at once.
    Active,
    /// It waits for a place.
    Waiting,
}

/// What a review decided: connections that stop reading (they have queued again at the back)
/// and connections that start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swaps<K> {
    pub stop: Vec<K>,
    pub start: Vec<K>,
}

/// An active connection's clocks.
#[derive(Debug, Clone, Copy)]
struct Place {
    since: Instant,
    last_input: Instant,
    /// The connection is being served: its clocks run (see [`Handover`]).
    taken: bool,
}

/// The set and its queue.
#[derive(Debug)]
pub struct ActiveSet<K> {
    cfg: ActiveConfig,
    handover: Handover,
    active: HashMap<K, Place>,
    /// Waiting connections in arrival order, each with the ticket it queued under: a connection
    /// that closed while waiting is left in the queue and skipped when its turn comes (its
    /// ticket no longer matches), so leaving is O(1) however long the queue.
    queue: VecDeque<(K, u64)>,
    waiting: HashMap<K, u64>,
    next_ticket: u64,
    next_review: Option<Instant>,
}

impl<K: Copy + Eq + Hash> ActiveSet<K> {
    /// A set whose engine starts reading a connection in the step that gives it a place (tests;
    /// engines hold theirs in `WorkerCore`).
    #[cfg(test)]
    pub fn new(cfg: ActiveConfig) -> Self {
        Self::with_handover(cfg, Handover::AtOnce)
    }

    pub fn with_handover(cfg: ActiveConfig, handover: Handover) -> Self {
        ActiveSet {
            cfg: ActiveConfig { size: cfg.size.max(1), ..cfg },
            handover,
            active: HashMap::new(),
            queue: VecDeque::new(),
            waiting: HashMap::new(),
            next_ticket: 0,
            next_review: None,
        }
    }

    #[cfg(test)]
    fn active(&self) -> usize {
        self.active.len()
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiting.len()
    }

    #[cfg(test)]
    fn is_active(&self, key: &K) -> bool {
        self.active.contains_key(key)
    }

    /// A connection arrived at `now`.
    pub fn enter(&mut self, key: K, now: Instant) -> Entry {
        if self.active.len() < self.cfg.size && self.waiting.is_empty() {
            self.active.insert(key, self.place(now));
            Entry::Active
        } else {
            self.enqueue(key, now);
            Entry::Waiting
        }
    }

    fn enqueue(&mut self, key: K, now: Instant) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.queue.push_back((key, ticket));
        self.waiting.insert(key, ticket);
        self.next_review.get_or_insert(now + self.cfg.review_every());
    }

    fn place(&self, now: Instant) -> Place {
        Place { since: now, last_input: now, taken: self.handover == Handover::AtOnce }
    }

    /// [`Handover::ByTheConnection`]: the connection's task took its place up at `now` and is
    /// being served; its grace and turn count from here. Nothing if it is not active or has
    /// already taken it up.
    pub fn take_up(&mut self, key: &K, now: Instant) {
        if let Some(place) = self.active.get_mut(key).filter(|p| !p.taken) {
            *place = Place { since: now, last_input: now, taken: true };
        }
    }

    /// An active connection received input at `now`.
    pub fn on_input(&mut self, key: &K, now: Instant) {
        if let Some(place) = self.active.get_mut(key) {
            place.last_input = now;
        }
    }

    /// A connection closed; returns the waiting one that takes its place, if it was active.
    pub fn leave(&mut self, key: &K, now: Instant) -> Option<K> {
        if self.waiting.remove(key).is_some() {
            return None;
        }
        self.active.remove(key)?;
        let next = self.pop_waiting()?;
        self.active.insert(next, self.place(now));
        Some(next)
    }

    fn pop_waiting(&mut self) -> Option<K> {
        while let Some((key, ticket)) = self.queue.pop_front() {
            if self.waiting.get(&key) == Some(&ticket) {
                self.waiting.remove(&key);
                if self.waiting.is_empty() {
                    self.next_review = None;
                }
                return Some(key);
            }
        }
        None
    }

    /// When the set next wants a review: only while connections wait.
    pub fn next_review(&self) -> Option<Instant> {
        self.next_review
    }

    /// Give places up at `now`: each active connection idle for the grace time or holding its
    /// place for a turn makes room for a waiting one, as many as wait. The ones that stop queue
    /// again at the back, behind the ones already waiting. Only a connection `between` requests
    /// gives its place up: one stopped half-way through a request would have the rest of it
    /// left unread while the protocol's own clock (HTTP's header timeout) runs on. A client
    /// slow in the middle of a request holds its place until that clock closes it.
    pub fn review(&mut self, now: Instant, between: impl Fn(&K) -> bool) -> Swaps<K> {
        let mut swaps = Swaps { stop: Vec::new(), start: Vec::new() };
        if self.waiting.is_empty() {
            self.next_review = None;
            return swaps;
        }
        if self.next_review.is_some_and(|at| now < at) {
            return swaps;
        }
        let (grace, turn) = (self.cfg.grace, self.cfg.turn);
        let mut due: Vec<(Instant, K)> = self
            .active
            .iter()
            .filter(|(_, p)| {
                p.taken
                    && (now.saturating_duration_since(p.last_input) >= grace
                        || now.saturating_duration_since(p.since) >= turn)
            })
            .filter(|(k, _)| between(k))
            .map(|(k, p)| (p.since, *k))
            .collect();
        // The longest-held first, so a short queue goes to those that waited longest for it.
        due.sort_by_key(|(since, _)| *since);
        let mut gives = due.into_iter().map(|(_, k)| k);
        while !self.waiting.is_empty() {
            let Some(stop) = gives.next() else { break };
            let Some(start) = self.pop_waiting() else { break };
            self.active.remove(&stop);
            self.active.insert(start, self.place(now));
            swaps.stop.push(stop);
            swaps.start.push(start);
        }
        for &stop in &swaps.stop {
            self.enqueue(stop, now);
        }
        // Fill places left empty (a set that started short, or closes that found no one).
        while self.active.len() < self.cfg.size {
            let Some(start) = self.pop_waiting() else { break };
            self.active.insert(start, self.place(now));
            swaps.start.push(start);
        }
        self.next_review = (!self.waiting.is_empty()).then(|| now + self.cfg.review_every());
        swaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn cfg(size: usize) -> ActiveConfig {
        ActiveConfig { size, grace: ms(50), turn: ms(1000) }
    }

    #[test]
    fn the_first_n_read_and_the_rest_wait_in_order() {
        let t0 = Instant::now();
        let mut set = ActiveSet::new(cfg(2));
        assert_eq!(set.enter(1, t0), Entry::Active);
        assert_eq!(set.enter(2, t0), Entry::Active);
        assert_eq!(set.enter(3, t0), Entry::Waiting);
        assert_eq!(set.enter(4, t0), Entry::Waiting);
        assert_eq!((set.active(), set.waiting()), (2, 2));
        assert_eq!(set.leave(&2, t0), Some(3), "the first waiting takes the place");
        assert_eq!(set.leave(&4, t0), None, "a waiting one leaves the queue");
        assert_eq!(set.leave(&3, t0), None, "no one waits");
        assert_eq!(set.enter(5, t0), Entry::Active);
        assert_eq!(set.leave(&9, t0), None, "an unknown key is nothing");
    }

    #[test]
    fn an_idle_connection_gives_its_place_after_the_grace_and_queues_again() {
        let t0 = Instant::now();
        let mut set = ActiveSet::new(cfg(1));
        set.enter(1, t0);
        set.enter(2, t0);
        set.on_input(&1, t0 + ms(40));
        assert_eq!(set.review(t0 + ms(60), |_| true), Swaps { stop: vec![], start: vec![] }, "1 spoke 20 ms ago");
        let swaps = set.review(t0 + ms(95), |_| true);
        assert_eq!(swaps, Swaps { stop: vec![1], start: vec![2] });
        assert!(set.is_active(&2) && !set.is_active(&1));
        assert_eq!(set.waiting(), 1, "1 waits again at the back");
        // 2 is busy; nothing is idle; 1 waits until 2's turn ends or 2 idles.
        set.on_input(&2, t0 + ms(120));
        assert!(set.review(t0 + ms(130), |_| true).stop.is_empty());
    }

    #[test]
    fn nothing_changes_while_no_one_waits() {
        let t0 = Instant::now();
        let mut set = ActiveSet::new(cfg(2));
        set.enter(1, t0);
        assert_eq!(set.next_review(), None, "no review while no one waits");
        assert!(
            set.review(t0 + ms(10_000), |_| true).stop.is_empty(),
            "an idle connection keeps its place when no one wants it"
        );
        assert!(set.is_active(&1));
    }

    /// The property the issue asks for: waiting connections are never starved, even behind
    /// active ones that never pause.
    #[test]
    fn every_connection_is_served_behind_clients_that_never_pause() {
        let t0 = Instant::now();
        let cfg = ActiveConfig { size: 3, grace: ms(50), turn: ms(200) };
        let mut set = ActiveSet::new(cfg);
        let n = 20;
        let mut served = [false; 20];
        for (k, served) in served.iter_mut().enumerate() {
            *served = set.enter(k, t0) == Entry::Active;
        }
        let mut now = t0;
        for _ in 0..2_000 {
            now += ms(5);
            // Every active connection sends all the time: none is ever idle.
            let active: Vec<usize> = (0..n).filter(|k| set.is_active(k)).collect();
            assert_eq!(active.len(), 3, "the set stays full");
            for k in &active {
                set.on_input(k, now);
            }
            for k in set.review(now, |_| true).start {
                served[k] = true;
            }
            if served.iter().all(|s| *s) {
                break;
            }
        }
        assert!(served.iter().all(|s| *s), "served: {served:?}");
        assert!(
            now - t0 <= ms(200) * (n as u32 / 3 + 1) + ms(100),
            "every one within a round of turns: {:?}",
            now - t0
        );
    }

    #[test]
    fn the_longest_held_give_way_first_and_only_as_many_as_wait() {
        let t0 = Instant::now();
        let mut set = ActiveSet::new(ActiveConfig { size: 3, grace: ms(1_000), turn: ms(100) });
        set.enter(1, t0);
        set.enter(2, t0 + ms(10));
        set.enter(3, t0 + ms(20));
        set.enter(4, t0 + ms(30));
        let swaps = set.review(t0 + ms(200), |_| true);
        assert_eq!(swaps, Swaps { stop: vec![1], start: vec![4] }, "one waits: the longest-held gives way");
    }

    #[test]
    fn a_connection_in_the_middle_of_a_request_keeps_its_place() {
        let t0 = Instant::now();
        let mut set = ActiveSet::new(cfg(1));
        set.enter(1, t0);
        set.enter(2, t0);
        assert!(set.review(t0 + ms(500), |k| *k != 1).stop.is_empty(), "1 is half-way through a request");
        assert_eq!(set.review(t0 + ms(600), |_| true), Swaps { stop: vec![1], start: vec![2] });
    }

    #[test]
    fn a_closed_waiting_connection_is_skipped_and_places_are_refilled() {
        let t0 = Instant::now();
        let mut set = ActiveSet::new(cfg(2));
        for k in 1..=5 {
            set.enter(k, t0);
        }
        set.leave(&3, t0);
        assert_eq!(set.leave(&1, t0), Some(4), "3 left the queue: 4 is next");
        // A key reused after it closed while waiting queues anew, behind the others.
        set.leave(&5, t0);
        set.enter(5, t0);
        assert_eq!(set.leave(&2, t0), Some(5));
        assert_eq!(set.waiting(), 0);
    }

    /// tokio hands a place to the connection's task, which may run long after: the turn counts
    /// from when the task takes the place up, so a late task is served before it gives way.
    #[test]
    fn a_handed_over_place_counts_from_when_its_connection_takes_it_up() {
        let t0 = Instant::now();
        let mut set =
            ActiveSet::with_handover(ActiveConfig { size: 1, grace: ms(50), turn: ms(100) }, Handover::ByTheConnection);
        set.enter(1, t0);
        set.take_up(&1, t0);
        set.enter(2, t0);
        set.on_input(&1, t0 + ms(100));
        assert_eq!(set.review(t0 + ms(100), |_| true), Swaps { stop: vec![1], start: vec![2] }, "1's turn ended");
        // 2's task has not run yet: not idle, not at a turn's end, however long it takes.
        assert!(set.review(t0 + ms(500), |_| true).stop.is_empty(), "2 was not yet served");
        set.take_up(&2, t0 + ms(500));
        assert!(set.review(t0 + ms(540), |_| true).stop.is_empty(), "2 is within its grace");
        set.take_up(&2, t0 + ms(540));
        let swaps = set.review(t0 + ms(555), |_| true);
        assert_eq!(swaps, Swaps { stop: vec![2], start: vec![1] }, "2 idled: a second take-up moved no clock");
        // A place given again before the task saw the last one is taken up anew.
        assert!(set.review(t0 + ms(900), |_| true).stop.is_empty(), "1 was not yet served again");
        set.take_up(&1, t0 + ms(900));
        set.on_input(&1, t0 + ms(990));
        assert!(set.review(t0 + ms(995), |_| true).stop.is_empty(), "1 is within its turn");
        assert_eq!(set.review(t0 + ms(1000), |_| true).stop, vec![1], "1's turn ended");
        // The plain set starts the clocks when it gives the place: a take-up changes nothing.
        let mut plain = ActiveSet::new(cfg(1));
        plain.enter(1, t0);
        plain.enter(2, t0);
        plain.take_up(&1, t0 + ms(40));
        assert_eq!(plain.review(t0 + ms(50), |_| true).stop, vec![1]);
    }

    #[test]
    fn shares_split_the_size_across_workers() {
        let c = ActiveConfig { size: 10, grace: ms(50), turn: ms(1000) };
        let sizes: Vec<usize> = (0..3).map(|w| c.share(w, 3).size).collect();
        assert_eq!(sizes, [4, 3, 3]);
        assert_eq!(ActiveConfig { size: 1, ..c }.share(1, 2).size, 1, "at least one each");
        assert_eq!(c.review_every(), ms(5));
    }
}
