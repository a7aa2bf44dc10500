//! The active set's wiring, once for every engine that keeps a set per worker (the readiness
//! loop, io_uring) and for tokio's runtime-wide one: what changes for a connection, and what is
//! counted, when it starts or stops waiting for a place. Which connection gets a place is the
//! policy's (`policy::ActiveSet`); this is only what follows from the answer.

use std::os::fd::RawFd;
use std::time::Instant;

use crate::policy::Lifecycle;
use crate::stats::Stats;

/// Connection `fd` must wait for a place from `now` (it entered a full set, or its place was
/// given to a waiting one): it reads nothing, its idle clocks stand still, the shed passes over
/// it, and the waiting gauge counts it.
pub fn stop(lc: &mut Lifecycle, fd: RawFd, now: Instant, stats: &Stats) {
    if lc.is_waiting() {
        return;
    }
    lc.set_waiting(true, now);
    count(stats, fd, true);
}

/// Count connection `fd` as waiting for a place (true) or given one (false): the waiting gauge,
/// and the shed roster, which passes over waiting connections (they read nothing, so their
/// engine would not see a shed until their turn). Where the connection's lifecycle lives
/// elsewhere (tokio's tasks), the gate calls only this.
pub fn count(stats: &Stats, fd: RawFd, waiting: bool) {
    stats.shed_waiting(fd, waiting);
    stats.waiting_changed(if waiting { 1 } else { -1 });
}

/// Connection `fd` was given a place at `now`: it looks for input at once (what it sent while
/// waiting raised no event anybody consumed).
pub fn start(lc: &mut Lifecycle, fd: RawFd, now: Instant, stats: &Stats) {
    if !lc.is_waiting() {
        return;
    }
    lc.set_waiting(false, now);
    count(stats, fd, false);
}

/// The drain began at `now` and ends at `until`: it ends the active set, so a waiting
/// connection stops waiting and reads what it sent before the drain (FIONREAD on `fd`, see
/// `Lifecycle::begin_drain`).
pub fn drain(lc: &mut Lifecycle, fd: RawFd, now: Instant, until: Instant, stats: &Stats) {
    let unread = sockscale_sys::unread_bytes(fd).is_ok_and(|n| n > 0);
    if lc.is_waiting() {
        count(stats, fd, false);
    }
    lc.begin_drain(now, until, unread);
}

/// A connection that closes while waiting leaves the waiting gauge.
pub fn closed(was_waiting: bool, stats: &Stats) {
    if was_waiting {
        stats.waiting_changed(-1);
    }
}
