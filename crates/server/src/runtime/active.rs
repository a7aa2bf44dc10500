//! The runtime's one worker core on tokio: admission, `--active-set` (one FIFO set for the whole
//! runtime) and the drain are the shared [`WorkerCore`]'s; this is only who is told, and how.
//! The accept task reports each connection taken; each connection task holds a [`Seat`]
//! whose place flag the core's answers flip and whose `Notify` wakes the task to act on it,
//! and one review task gives places up on time. A woken task may run long after its place was
//! given (tokio runs it when the scheduler gets to it), so the set counts a place's grace and
//! turn from when the task takes it up ([`Handover::ByTheConnection`]).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ::tokio::sync::Notify;
use bytes::Bytes;

use crate::active_places;
use crate::config::Config;
use crate::policy::{ActiveConfig, Entry, Handover, Refusal, Refused, WorkerCore};
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
    core: WorkerCore<u64>,
    places: HashMap<u64, Arc<Place>>,
    next_id: u64,
}

/// The runtime's one worker core, shared by its tasks.
#[derive(Debug)]
pub(super) struct RuntimeCore {
    state: Mutex<State>,
    stats: Arc<Stats>,
    /// `--active-set`: without one, connections hold no seat.
    active: Option<ActiveConfig>,
    /// Wakes the review task when a connection starts waiting (it sleeps while none does).
    someone_waits: Notify,
}

/// A connection's membership: leaves the set (handing its place on) when dropped, however the
/// task ends.
#[derive(Debug)]
pub(super) struct Seat {
    gate: Arc<RuntimeCore>,
    id: u64,
    pub(super) place: Arc<Place>,
}

impl RuntimeCore {
    pub(super) fn new(cfg: &Config, stats: Arc<Stats>) -> Self {
        let core = WorkerCore::new(cfg.max_conns, cfg.tls.is_some(), cfg.active_set, Handover::ByTheConnection);
        let state = State { core, places: HashMap::new(), next_id: 0 };
        RuntimeCore { state: Mutex::new(state), stats, active: cfg.active_set, someone_waits: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection was taken: None to set it up, or the refusal to carry out.
    pub(super) fn on_accepted(&self, refusal: impl FnOnce() -> Option<Bytes>) -> Option<Refused<'static>> {
        self.lock().core.on_accepted(false, &*self.stats, refusal)
    }

    /// A connection taken could not be set up, for `why`: the refusal to carry out.
    pub(super) fn on_unserved<'a>(&self, why: Refusal<'a>, refusal: impl FnOnce() -> Option<Bytes>) -> Refused<'a> {
        self.lock().core.on_unserved(why, &*self.stats, refusal)
    }

    /// The drain began, to end at `until`; returns when the runtime stops waiting for the
    /// connection tasks (they close themselves by then): `grace` past the deadline.
    pub(super) fn begin_drain(&self, until: Instant, grace: Duration) -> Instant {
        let mut state = self.lock();
        state.core.begin_drain(until);
        state.core.drain_backstop(Instant::now(), grace)
    }

    /// A new connection, on descriptor `fd`, takes a place or waits for one (None: no set).
    pub(super) fn enter(self: &Arc<Self>, fd: RawFd, now: Instant) -> Option<Seat> {
        self.active?;
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
        if state.core.on_started(id, now) == Entry::Waiting {
            place.waiting.store(true, Ordering::Release);
            active_places::count(&self.stats, fd, true);
            self.someone_waits.notify_one();
        }
        state.places.insert(id, place.clone());
        Some(Seat { gate: self.clone(), id, place })
    }

    /// The review task: give places up on time, until the runtime drops it. Nothing to do
    /// without a set.
    pub(super) async fn review_loop(self: Arc<Self>) {
        let Some(cfg) = self.active else { return };
        let every = cfg.review_every();
        loop {
            let idle = self.lock().core.next_review().is_none();
            if idle {
                // Nobody waits: nothing to review until somebody does.
                self.someone_waits.notified().await;
            }
            ::tokio::time::sleep(every).await;
            let now = Instant::now();
            let mut guard = self.lock();
            let state = &mut *guard;
            if !state.core.review_due(now) {
                continue;
            }
            let places = &state.places;
            let between = |id: &u64| places.get(id).is_some_and(|p| p.between.load(Ordering::Acquire));
            let swaps = state.core.review(now, between);
            self.stats.rotated(swaps.stop.len());
            for id in &swaps.stop {
                if let Some(place) = state.places.get(id) {
                    place.set(true);
                    active_places::count(&self.stats, place.fd, true);
                }
            }
            for id in &swaps.start {
                if let Some(place) = state.places.get(id) {
                    place.set(false);
                    active_places::count(&self.stats, place.fd, false);
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
            state.core.on_taken_up(&self.id, now);
            self.place.taken.store(true, Ordering::Release);
        }
    }

    /// Input arrived at `now`.
    pub(super) fn on_input(&self, now: Instant) {
        self.gate.lock().core.on_input(&self.id, now);
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.places.remove(&self.id);
        active_places::closed(self.place.is_waiting(), &self.gate.stats);
        if let Some(next) = state.core.on_closed(&self.id, Instant::now()) {
            if let Some(place) = state.places.get(&next) {
                place.set(false);
                active_places::count(&self.gate.stats, place.fd, false);
            }
        }
    }
}
