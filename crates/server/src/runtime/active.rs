//! `--active-set` on tokio: one FIFO set for the whole runtime. The policy is the shared
//! [`ActiveSet`]; this is only who is told, and how: each connection task holds a [`Seat`]
//! whose place flag the gate flips and whose `Notify` wakes the task to act on it, and one
//! review task gives places up on time. A woken task may run long after its place was given
//! (tokio runs it when the scheduler gets to it), so the set counts a place's grace and turn
//! from when the task takes it up ([`Handover::ByTheConnection`]).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use ::tokio::sync::Notify;

use crate::policy::{ActiveConfig, ActiveSet, Entry, Handover};
use crate::seats;
use crate::stats::Stats;

/// One connection's place, as its task sees it.
#[derive(Debug)]
pub(super) struct Place {
    waiting: AtomicBool,
    /// The task has taken up the place it was last given (cleared by the gate with each place
    /// it gives, so a place taken, given up and given again before the task ran is taken anew).
    taken: AtomicBool,
    /// Signalled whenever `waiting` changes; a permit is kept if the task is not waiting yet.
    pub(super) changed: Notify,
    /// Kept by the task: its session is between requests (only then may it give its place up).
    pub(super) between: AtomicBool,
    fd: RawFd,
}

impl Place {
    pub(super) fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Holding a place the task has not yet taken up (see [`Seat::take_up`]).
    pub(super) fn is_given(&self) -> bool {
        !self.is_waiting() && !self.taken.load(Ordering::Acquire)
    }

    fn set(&self, waiting: bool) {
        if !waiting {
            self.taken.store(false, Ordering::Release);
        }
        self.waiting.store(waiting, Ordering::Release);
        self.changed.notify_one();
    }
}

#[derive(Debug)]
struct State {
    set: ActiveSet<u64>,
    places: HashMap<u64, Arc<Place>>,
    next_id: u64,
}

/// The runtime's one active set.
#[derive(Debug)]
pub(super) struct ActiveGate {
    state: Mutex<State>,
    stats: Arc<Stats>,
    cfg: ActiveConfig,
    /// Wakes the review task when a connection starts waiting (it sleeps while none does).
    someone_waits: Notify,
}

/// A connection's membership: leaves the set (handing its place on) when dropped, however the
/// task ends.
#[derive(Debug)]
pub(super) struct Seat {
    gate: Arc<ActiveGate>,
    id: u64,
    pub(super) place: Arc<Place>,
}

impl ActiveGate {
    pub(super) fn new(cfg: ActiveConfig, stats: Arc<Stats>) -> Self {
        let set = ActiveSet::with_handover(cfg, Handover::ByTheConnection);
        let state = State { set, places: HashMap::new(), next_id: 0 };
        ActiveGate { state: Mutex::new(state), stats, cfg, someone_waits: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection, on descriptor `fd`, takes a place or waits for one.
    pub(super) fn enter(self: &Arc<Self>, fd: RawFd, now: Instant) -> Seat {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        let place = Arc::new(Place {
            waiting: AtomicBool::new(false),
            taken: AtomicBool::new(false),
            changed: Notify::new(),
            between: AtomicBool::new(true),
            fd,
        });
        if state.set.enter(id, now) == Entry::Waiting {
            place.waiting.store(true, Ordering::Release);
            seats::count(&self.stats, fd, true);
            self.someone_waits.notify_one();
        }
        state.places.insert(id, place.clone());
        Seat { gate: self.clone(), id, place }
    }

    /// The review task: give places up on time, until the runtime drops it.
    pub(super) async fn review_loop(self: Arc<Self>) {
        let every = self.cfg.review_every();
        loop {
            let idle = self.lock().set.next_review().is_none();
            if idle {
                // Nobody waits: nothing to review until somebody does.
                self.someone_waits.notified().await;
            }
            ::tokio::time::sleep(every).await;
            let now = Instant::now();
            let mut guard = self.lock();
            let state = &mut *guard;
            if state.set.next_review().is_none_or(|at| now < at) {
                continue;
            }
            let places = &state.places;
            let between = |id: &u64| places.get(id).is_some_and(|p| p.between.load(Ordering::Acquire));
            let swaps = state.set.review(now, between);
            self.stats.rotated(swaps.stop.len());
            for id in &swaps.stop {
                if let Some(place) = state.places.get(id) {
                    place.set(true);
                    seats::count(&self.stats, place.fd, true);
                }
            }
            for id in &swaps.start {
                if let Some(place) = state.places.get(id) {
                    place.set(false);
                    seats::count(&self.stats, place.fd, false);
                }
            }
        }
    }
}

impl Seat {
    /// The task serves its connection from `now` on: the place's grace and turn start here.
    pub(super) fn take_up(&self, now: Instant) {
        let mut state = self.gate.lock();
        // Under the lock, so a place the gate gives again meanwhile is not marked taken.
        if self.place.is_given() {
            state.set.take_up(&self.id, now);
            self.place.taken.store(true, Ordering::Release);
        }
    }

    /// Input arrived at `now`.
    pub(super) fn on_input(&self, now: Instant) {
        self.gate.lock().set.on_input(&self.id, now);
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.places.remove(&self.id);
        seats::closed(self.place.is_waiting(), &self.gate.stats);
        if let Some(next) = state.set.leave(&self.id, Instant::now()) {
            if let Some(place) = state.places.get(&next) {
                place.set(false);
                seats::count(&self.gate.stats, place.fd, false);
            }
        }
    }
}
