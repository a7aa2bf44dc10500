//! The wall clock, read as rarely as HTTP's `Date` header needs: once a second, not on every
//! wake-up. Every engine keeps a [`DateClock`] per thread (or per runtime worker) and ticks its
//! protocol engine through it.

use std::time::{Duration, Instant, SystemTime};

use sockscale_proto::Responder;

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    sockscale_proto::http::unix_secs(SystemTime::now())
}

/// When a thread next reads the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct DateClock {
    next_check: Instant,
}

impl DateClock {
    /// A clock that reads the wall clock at its first tick.
    pub fn new(now: Instant) -> Self {
        DateClock { next_check: now }
    }

    /// Bring `engine`'s pre-rendered responses to the current second, if the monotonic clock
    /// (`now`) says a second may have turned since the last look.
    pub fn tick(&mut self, now: Instant, responder: &mut Responder) {
        if now < self.next_check {
            return;
        }
        let wall = SystemTime::now();
        let into_second = wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        self.next_check = now + Duration::from_nanos(1_000_000_000 - u64::from(into_second));
        responder.tick(sockscale_proto::http::unix_secs(wall));
    }
}
