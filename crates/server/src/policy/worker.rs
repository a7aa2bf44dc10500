//! One worker's admission, active set and drain: [`WorkerCore`].
//!
//! Every engine has workers — a readiness loop's thread, an io_uring worker, the acceptor of
//! the thread models or of the connection groups, tokio's runtime — and each used to decide
//! for itself whom to admit, who may read, and when a drain ends. The core decides it once. The
//! engine reports what happened (a connection was taken, could not be set up, was started under
//! a key, sent input, closed; the drain began; the time) and carries out the answer:
//!
//! - **admit or refuse**: beyond `--max-conns` (counted across the workers of the process,
//!   through [`Slots`]), or when the engine could not set a connection up (no TLS session, no
//!   handshake slot, no room in the selector, no thread), the connection is refused: the answer
//!   [`Refused`] carries why, the last bytes to send (HTTP's 503 for a plain-text server, nothing
//!   for TLS, which gives no refused connection a handshake, nor for echo) and the ending
//!   (`Ending::Orderly`: the bytes, a FIN, the client's unread first bytes read, so no reset
//!   destroys the 503), the same on every model;
//! - **serve or hold**: with `--active-set`, a started connection reads at once or waits for a
//!   place ([`Entry`]); closes, idleness and turns rotate the places ([`ActiveSet`]);
//! - **the drain**: it ends the active set, refuses what is still handed over, and at its one
//!   deadline (or when forced) answers that whatever is left closes now ([`DrainStep::CloseAll`]);
//! - **when to wake**: the earliest of the drain deadline and the active set's next review.
//!
//! No I/O: plain values in, plain values out, tested on simulated time.

use std::fmt::Display;
use std::hash::Hash;
use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sockscale_sys::Ending;

use super::{ActiveConfig, ActiveSet, Entry, Handover, Limit, MapBudget, Swaps};

/// The `--max-conns` slots, shared by the workers of a process (an atomic count in `Stats`).
pub trait Slots {
    /// Take a slot for a new connection if fewer than `max` are taken.
    fn try_take(&self, max: usize) -> bool;
    /// Give back the slot of a connection that was never served.
    fn give_back(&self);
    /// Slots taken now.
    fn taken(&self) -> usize;
}

/// Why a connection is refused. Each engine reports which failure it met; the words and the
/// [`Limit`] counted are said here once.
#[derive(Debug)]
pub enum Refusal<'a> {
    /// `--max-conns` connections are open.
    MaxConns,
    /// The model cannot watch another descriptor; the selector's reason.
    Full(&'a str),
    /// The selector failed to watch this one (ENOMEM, ENOSPC: `max_user_watches`). Once a
    /// connection is served, the same failure is a close with `CloseReason::Error`.
    Unwatchable(&'a io::Error),
    /// No thread could be started for the connection.
    Thread(&'a io::Error),
    /// No thread could be started for another connection group.
    Group(&'a io::Error),
    /// The connection's threads would take the process past `max_map_count` memory maps.
    MemoryMaps { max_map_count: u64 },
    /// `bound` connections already wait for a worker.
    QueueFull { bound: usize },
    /// `max` TLS handshakes are in progress (`--max-handshakes`).
    Handshakes { max: usize },
    /// No TLS session could be made for the connection.
    TlsUnavailable,
    /// The server is draining.
    ShuttingDown,
}

impl Refusal<'_> {
    /// The limit this refusal is counted against, if any.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            Refusal::MaxConns => Some(Limit::MaxConns),
            Refusal::Full(_) => Some(Limit::Ceiling),
            Refusal::Thread(e) | Refusal::Group(e) => Some(Limit::of_error(e).unwrap_or(Limit::Threads)),
            Refusal::Unwatchable(e) => Limit::of_error(e),
            Refusal::QueueFull { .. } => Some(Limit::Queue),
            Refusal::MemoryMaps { .. } => Some(Limit::MemoryMaps),
            Refusal::Handshakes { .. } => Some(Limit::Handshakes),
            Refusal::TlsUnavailable => None,
            Refusal::ShuttingDown => None,
        }
    }
}

impl Display for Refusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::MaxConns => f.write_str("--max-conns reached"),
            Refusal::Full(reason) => f.write_str(reason),
            Refusal::Unwatchable(e) => write!(f, "cannot watch an accepted connection: {e}"),
            Refusal::Thread(e) => write!(f, "cannot start a thread for a connection: {e}"),
            Refusal::Group(e) => write!(f, "cannot start another connection group: {e}"),
            Refusal::QueueFull { bound } => {
                write!(f, "{bound} connections already wait for a worker (the queue is full)")
            }
            Refusal::MemoryMaps { max_map_count } => write!(
                f,
                "another connection's threads would pass the process's memory-map limit (vm.max_map_count {max_map_count})"
            ),
            Refusal::Handshakes { max } => write!(f, "{max} TLS handshakes are in progress (--max-handshakes)"),
            Refusal::TlsUnavailable => f.write_str("no TLS session could be made for the connection"),
            Refusal::ShuttingDown => f.write_str("the server is shutting down"),
        }
    }
}

/// A refusal as the engine carries it out: send `last` (if anything), end the socket with
/// `ending` (`sockscale_sys::end_socket`), count it as refused, and against `why`'s limit.
#[derive(Debug)]
pub struct Refused<'a> {
    pub why: Refusal<'a>,
    /// The protocol's refusal: HTTP's 503 in plain text; None for TLS and echo.
    pub last: Option<Bytes>,
    pub ending: Ending,
}

/// What the drain asks of the engine now (see [`WorkerCore::drain_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// No drain: serve on.
    Serving,
    /// Draining: connections finish their exchange and close at their next request boundary;
    /// wait (at the latest until [`WorkerCore::next_wake`]).
    Draining,
    /// The drain is over: no connection is left.
    Done,
    /// The drain deadline passed, or a second signal forced the end: close every connection
    /// left now (`CloseReason::Shutdown`), then the drain is over.
    CloseAll,
}

/// One worker's admission, active set and drain (see the module).
#[derive(Debug)]
pub struct WorkerCore<K> {
    max_conns: usize,
    /// The server speaks TLS: a refusal sends nothing (it is given no handshake).
    tls: bool,
    active: Option<ActiveSet<K>>,
    /// A model whose connections have threads of their own: admit only while their memory
    /// maps fit.
    maps: Option<MapBudget>,
    /// Set once the drain began: its one deadline.
    drain_until: Option<Instant>,
}

impl<K: Copy + Eq + Hash> WorkerCore<K> {
    /// A worker admitting up to `max_conns` connections (counted across the process), for a
    /// server that speaks TLS or not, with this worker's share of `--active-set` if any.
    pub fn new(max_conns: usize, tls: bool, active: Option<ActiveConfig>, handover: Handover) -> Self {
        WorkerCore {
            max_conns,
            tls,
            active: active.map(|cfg| ActiveSet::with_handover(cfg, handover)),
            maps: None,
            drain_until: None,
        }
    }

    /// Admit a connection only while the memory maps of its threads fit in `budget`.
    pub fn set_map_budget(&mut self, budget: MapBudget) {
        self.maps = Some(budget);
    }

    /// A connection was taken. `counted`: whoever took it (the groups' acceptor) already took
    /// its `--max-conns` slot. None: set it up (a TLS session, a registration, a thread), then
    /// report [`WorkerCore::on_started`] or [`WorkerCore::on_unserved`]. Some: refuse it as said
    /// (no slot was taken).
    pub fn on_accepted(
        &mut self,
        counted: bool,
        slots: &impl Slots,
        refusal: impl FnOnce() -> Option<Bytes>,
    ) -> Option<Refused<'static>> {
        if self.drain_until.is_some() {
            if counted {
                slots.give_back();
            }
            return Some(self.refused(Refusal::ShuttingDown, refusal));
        }
        if !counted && !slots.try_take(self.max_conns) {
            return Some(self.refused(Refusal::MaxConns, refusal));
        }
        if let Some(maps) = self.maps.filter(|maps| !maps.has_room(slots.taken())) {
            slots.give_back();
            return Some(self.refused(Refusal::MemoryMaps { max_map_count: maps.max_map_count }, refusal));
        }
        None
    }

    /// A connection admitted by [`WorkerCore::on_accepted`] could not be set up, for `why`: its
    /// slot is given back, and it is refused as answered.
    pub fn on_unserved<'a>(
        &mut self,
        why: Refusal<'a>,
        slots: &impl Slots,
        refusal: impl FnOnce() -> Option<Bytes>,
    ) -> Refused<'a> {
        slots.give_back();
        self.refused(why, refusal)
    }

    /// The refusal for `why`: the protocol's refusal (`refusal`, HTTP's 503) only in plain text,
    /// always in good order.
    fn refused<'a>(&self, why: Refusal<'a>, refusal: impl FnOnce() -> Option<Bytes>) -> Refused<'a> {
        let last = if self.tls { None } else { refusal() };
        Refused { why, last, ending: Ending::Orderly }
    }

    /// An admitted connection was set up under `key` at `now`: it reads at once, or it waits for
    /// a place in the active set (the engine stops its reading: `active_places::stop`).
    pub fn on_started(&mut self, key: K, now: Instant) -> Entry {
        match &mut self.active {
            Some(set) => set.enter(key, now),
            None => Entry::Active,
        }
    }

    /// [`Handover::ByTheConnection`]: connection `key` took its place up at `now`.
    pub fn on_taken_up(&mut self, key: &K, now: Instant) {
        if let Some(set) = &mut self.active {
            set.take_up(key, now);
        }
    }

    /// Connection `key` received input at `now` (its active-set grace starts again).
    pub fn on_input(&mut self, key: &K, now: Instant) {
        if let Some(set) = &mut self.active {
            set.on_input(key, now);
        }
    }

    /// Connection `key` closed at `now`: the waiting connection that takes its place, if any
    /// (the engine starts its reading: `active_places::start`).
    pub fn on_closed(&mut self, key: &K, now: Instant) -> Option<K> {
        self.active.as_mut()?.leave(key, now)
    }

    /// When the active set wants its next review: only while connections wait for a place.
    pub fn next_review(&self) -> Option<Instant> {
        self.active.as_ref().and_then(ActiveSet::next_review)
    }

    /// Whether the active set wants a review at `now`.
    pub fn review_due(&self, now: Instant) -> bool {
        self.next_review().is_some_and(|at| at <= now)
    }

    /// Give places up at `now` if a review is due (see [`ActiveSet::review`]): the connections
    /// that stop reading and those that start. `between`: whether a connection is between
    /// requests (only those give their place up).
    pub fn review(&mut self, now: Instant, between: impl Fn(&K) -> bool) -> Swaps<K> {
        match &mut self.active {
            Some(set) if self.drain_until.is_none() && set.next_review().is_some_and(|at| at <= now) => {
                set.review(now, between)
            }
            _ => Swaps { stop: Vec::new(), start: Vec::new() },
        }
    }

    /// The drain began, to end at `until` (the process's one deadline). True the first time:
    /// the engine then stops taking connections and tells each one (`active_places::drain`); the drain
    /// ends the active set, so a waiting connection reads what it sent before the drain.
    pub fn begin_drain(&mut self, until: Instant) -> bool {
        if self.drain_until.is_some() {
            return false;
        }
        self.drain_until = Some(until);
        self.active = None;
        true
    }

    /// Whether the drain began.
    pub fn is_draining(&self) -> bool {
        self.drain_until.is_some()
    }

    /// What the drain asks at `now`, with `open` connections left on this worker. `forced`: a
    /// second signal ends the drain at once.
    pub fn drain_step(&self, now: Instant, open: usize, forced: bool) -> DrainStep {
        let Some(until) = self.drain_until else {
            return DrainStep::Serving;
        };
        if open == 0 {
            DrainStep::Done
        } else if forced || now >= until {
            DrainStep::CloseAll
        } else {
            DrainStep::Draining
        }
    }

    /// When an engine that cannot close its connections itself (tokio's tasks close their own)
    /// stops waiting for them: `grace` past the drain deadline, or `grace` from `now` without one.
    pub fn drain_backstop(&self, now: Instant, grace: Duration) -> Instant {
        super::after(self.drain_until.unwrap_or(now), grace)
    }

    /// When the worker must look again by itself: the drain deadline or the active set's next
    /// review, whichever is first.
    pub fn next_wake(&self) -> Option<Instant> {
        match (self.drain_until, self.next_review()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// The process's `--max-conns` count, as `Stats` keeps it.
    #[derive(Default)]
    struct Count(Cell<usize>);

    impl Slots for Count {
        fn try_take(&self, max: usize) -> bool {
            if self.0.get() >= max {
                return false;
            }
            self.0.set(self.0.get() + 1);
            true
        }

        fn give_back(&self) {
            self.0.set(self.0.get() - 1);
        }

        fn taken(&self) -> usize {
            self.0.get()
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn http_503() -> Option<Bytes> {
        Some(Bytes::from_static(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"))
    }

    fn plain(max: usize) -> WorkerCore<u32> {
        WorkerCore::new(max, false, None, Handover::AtOnce)
    }

    #[test]
    fn connections_beyond_max_conns_are_refused_with_the_protocols_refusal_in_good_order() {
        let (mut core, slots) = (plain(2), Count::default());
        assert!(core.on_accepted(false, &slots, http_503).is_none());
        assert!(core.on_accepted(false, &slots, http_503).is_none());
        let refused = core.on_accepted(false, &slots, http_503).expect("the third is beyond --max-conns 2");
        assert!(matches!(refused.why, Refusal::MaxConns));
        assert_eq!(refused.why.limit(), Some(Limit::MaxConns));
        assert_eq!(refused.last, http_503());
        assert_eq!(refused.ending, Ending::Orderly, "a FIN, the client's first bytes read: never a reset");
        assert_eq!(slots.0.get(), 2, "a refused connection takes no slot");
        // Echo has no refusal to send: nothing, in the same good order.
        let echo = core.on_accepted(false, &slots, || None).expect("still full");
        assert_eq!((echo.last, echo.ending), (None, Ending::Orderly));
    }

    #[test]
    fn a_tls_server_refuses_with_no_bytes_and_the_same_ending() {
        let (mut core, slots) = (WorkerCore::<u32>::new(1, true, None, Handover::AtOnce), Count::default());
        assert!(core.on_accepted(false, &slots, http_503).is_none());
        let asked = Cell::new(false);
        let refused = core
            .on_accepted(false, &slots, || {
                asked.set(true);
                http_503()
            })
            .expect("beyond --max-conns 1");
        assert_eq!(refused.last, None, "no clear-text 503 before a handshake");
        assert_eq!(refused.ending, Ending::Orderly);
        assert!(!asked.get(), "the protocol's refusal is not even rendered");
    }

    #[test]
    fn a_connection_that_cannot_be_set_up_gives_its_slot_back() {
        let (mut core, slots) = (WorkerCore::<u32>::new(1, true, None, Handover::AtOnce), Count::default());
        assert!(core.on_accepted(false, &slots, http_503).is_none());
        assert_eq!(slots.0.get(), 1);
        let refused = core.on_unserved(Refusal::Handshakes { max: 4 }, &slots, http_503);
        assert_eq!(refused.why.limit(), Some(Limit::Handshakes));
        assert_eq!((refused.last, refused.ending), (None, Ending::Orderly));
        assert_eq!(slots.0.get(), 0, "the slot is free again");
        assert!(core.on_accepted(false, &slots, http_503).is_none(), "so the next is admitted");
        // Handed over with its slot taken by another thread (the groups' acceptor).
        let mut worker = plain(1);
        assert!(worker.on_accepted(true, &slots, http_503).is_none(), "counted already: not counted twice");
        assert_eq!(slots.0.get(), 1);
    }

    #[test]
    fn connections_whose_threads_would_pass_the_memory_map_limit_are_refused() {
        // Room for two connections' threads (see `MapBudget`): 1,024 headroom + 2 × 8 maps.
        let budget = MapBudget::new(Some(60 + 1_024 + 16), Some(60), 2);
        assert_eq!(budget.connections, Some(2));
        let (mut core, slots) = (plain(100), Count::default());
        core.set_map_budget(budget);
        assert!(core.on_accepted(false, &slots, http_503).is_none());
        assert!(core.on_accepted(false, &slots, http_503).is_none());
        let refused = core.on_accepted(false, &slots, http_503).expect("a third would pass the limit");
        assert!(matches!(refused.why, Refusal::MemoryMaps { max_map_count: 1_100 }));
        assert_eq!(refused.last, http_503());
        assert_eq!(slots.0.get(), 2, "its slot is given back");
    }

    #[test]
    fn a_drain_refuses_what_is_handed_over_and_gives_its_slot_back() {
        let (mut core, slots, t0) = (plain(4), Count::default(), Instant::now());
        assert!(slots.try_take(4), "the acceptor took it");
        assert!(core.begin_drain(t0 + ms(100)));
        let refused = core.on_accepted(true, &slots, http_503).expect("draining");
        assert!(matches!(refused.why, Refusal::ShuttingDown));
        assert_eq!(refused.last, http_503());
        assert_eq!(slots.0.get(), 0);
    }

    #[test]
    fn the_drain_closes_what_is_left_at_its_one_deadline_or_when_forced() {
        let (mut core, t0) = (plain(10), Instant::now());
        assert_eq!(core.drain_step(t0, 3, false), DrainStep::Serving);
        assert_eq!(core.next_wake(), None, "nothing to wake for");
        let until = t0 + ms(500);
        assert!(core.begin_drain(until));
        assert!(!core.begin_drain(t0 + ms(9_000)), "the deadline is set once");
        assert_eq!(core.next_wake(), Some(until));
        assert_eq!(core.drain_step(t0 + ms(499), 2, false), DrainStep::Draining);
        assert_eq!(core.drain_step(until, 2, false), DrainStep::CloseAll, "at the deadline exactly");
        assert_eq!(core.drain_step(t0 + ms(1), 2, true), DrainStep::CloseAll, "a second signal");
        assert_eq!(core.drain_step(t0 + ms(1), 0, false), DrainStep::Done);
        assert_eq!(core.drain_step(until + ms(1), 0, true), DrainStep::Done, "nothing left to close");
        assert_eq!(core.drain_backstop(t0, ms(50)), until + ms(50));
        assert_eq!(plain(1).drain_backstop(t0, ms(50)), t0 + ms(50));
    }

    fn with_set(size: usize) -> WorkerCore<u32> {
        WorkerCore::new(100, false, Some(ActiveConfig { size, grace: ms(50), turn: ms(1000) }), Handover::AtOnce)
    }

    #[test]
    fn the_active_set_serves_the_first_n_and_hands_places_on_in_order() {
        let t0 = Instant::now();
        let mut core = with_set(2);
        assert_eq!(core.on_started(1, t0), Entry::Active);
        assert_eq!(core.on_started(2, t0), Entry::Active);
        assert_eq!(core.on_started(3, t0), Entry::Waiting);
        assert_eq!(core.on_started(4, t0), Entry::Waiting);
        assert_eq!(core.on_closed(&2, t0), Some(3), "the first waiting takes the place");
        assert_eq!(core.on_closed(&4, t0), None, "a waiting one leaves the queue");
        assert_eq!(plain(1).on_started(7, t0), Entry::Active, "no set: every connection reads");
    }

    #[test]
    fn the_active_set_rotates_idle_places_when_a_review_is_due() {
        let t0 = Instant::now();
        let mut core = with_set(1);
        core.on_started(1, t0);
        core.on_started(2, t0);
        let review = core.next_wake().expect("a review while one waits");
        assert!(!core.review_due(review - ms(1)));
        assert!(core.review(review - ms(1), |_| true).stop.is_empty(), "not due");
        core.on_input(&1, t0 + ms(40));
        assert!(core.review(t0 + ms(60), |_| true).stop.is_empty(), "1 spoke 20 ms ago");
        let swaps = core.review(t0 + ms(95), |_| true);
        assert_eq!((swaps.stop, swaps.start), (vec![1], vec![2]), "1 idled past the grace");
        // The drain ends the set: no review, no rotation, and its deadline is the next wake.
        let until = t0 + ms(10_000);
        core.begin_drain(until);
        assert_eq!(core.next_wake(), Some(until));
        assert!(core.review(t0 + ms(5_000), |_| true).stop.is_empty());
        assert_eq!(core.on_closed(&2, t0 + ms(5_000)), None, "no place is handed on while draining");
    }

    #[test]
    fn a_handed_over_place_counts_from_when_it_is_taken_up() {
        let t0 = Instant::now();
        let cfg = ActiveConfig { size: 1, grace: ms(50), turn: ms(100) };
        let mut core = WorkerCore::<u32>::new(100, false, Some(cfg), Handover::ByTheConnection);
        core.on_started(1, t0);
        core.on_started(2, t0);
        assert!(core.review(t0 + ms(500), |_| true).stop.is_empty(), "1's task has not run yet");
        core.on_taken_up(&1, t0 + ms(500));
        assert_eq!(core.review(t0 + ms(550), |_| true).stop, vec![1], "1 idled from when it was taken up");
    }
}
