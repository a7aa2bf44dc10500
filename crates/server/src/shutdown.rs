//! Asking a running server to stop, from any thread.
//!
//! Stopping is two-staged, as for nginx: `shutdown` starts a graceful drain (stop accepting,
//! finish in-flight responses, close the rest after the drain timeout); `force` ends the drain
//! at once. Workers sleeping in a selector are woken through their registered wakers.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sockscale_sys::Waker;

const RUNNING: u8 = 0;
const DRAINING: u8 = 1;
const FORCED: u8 = 2;

#[derive(Debug, Default)]
struct Inner {
    state: AtomicU8,
    wakers: Mutex<Vec<Arc<Waker>>>,
    drain: Mutex<DrainClock>,
}

/// The drain's one deadline: `--drain-timeout` from the first signal, computed once when the
/// drain begins, so every thread of every engine closes what is left at the same instant.
#[derive(Debug, Default)]
struct DrainClock {
    timeout: Option<Duration>,
    until: Option<Instant>,
}

/// Shared by the server's threads and whoever may stop it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    inner: Arc<Inner>,
}

/// The phase a server is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    Draining,
    Forced,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// A shutdown whose drain lasts at most `timeout` (`--drain-timeout`; without one, the drain
    /// lasts until a second signal forces the end).
    pub fn with_drain_timeout(timeout: Duration) -> Self {
        let shutdown = Self::default();
        shutdown.clock().timeout = Some(timeout);
        shutdown
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, DrainClock> {
        self.inner.drain.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start a graceful drain.
    pub fn shutdown(&self) {
        {
            let mut clock = self.clock();
            if clock.until.is_none() {
                let now = Instant::now();
                clock.until = Some(
                    clock.timeout.map_or(crate::policy::after(now, Duration::MAX), |t| crate::policy::after(now, t)),
                );
            }
        }
        let _ = self.inner.state.compare_exchange(RUNNING, DRAINING, Ordering::SeqCst, Ordering::SeqCst);
        self.wake_all();
    }

    /// When whatever the drain left must close: set once, by the first signal. None while
    /// running. A forced end closes everything at once, whatever this says.
    pub fn drain_until(&self) -> Option<Instant> {
        if self.is_running() {
            return None;
        }
        let mut clock = self.clock();
        // Forced without a drain first: the end is now.
        Some(*clock.until.get_or_insert_with(Instant::now))
    }

    /// End the drain now: close every connection.
    pub fn force(&self) {
        self.inner.state.store(FORCED, Ordering::SeqCst);
        self.wake_all();
    }

    pub fn phase(&self) -> Phase {
        match self.inner.state.load(Ordering::SeqCst) {
            RUNNING => Phase::Running,
            DRAINING => Phase::Draining,
            _ => Phase::Forced,
        }
    }

    pub fn is_running(&self) -> bool {
        self.phase() == Phase::Running
    }

    /// Register a waker to be signalled on every phase change.
    pub fn register(&self, waker: Arc<Waker>) {
        self.inner.wakers.lock().unwrap_or_else(|e| e.into_inner()).push(waker.clone());
        // A phase change that raced with registration must not be missed.
        if !self.is_running() {
            waker.wake();
        }
    }

    fn wake_all(&self) {
        for waker in self.inner.wakers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            waker.wake();
        }
    }
}
