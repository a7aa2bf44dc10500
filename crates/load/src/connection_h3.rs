//! A [`Connection`]'s HTTP/3 side: its QUIC datagrams, deadlines and end, and what its
//! HTTP/3 client tells, turned into the events every protocol reports.

use std::time::{Duration, Instant};

use super::{Close, Connection, Event, Now, Profile, Protocol, Reason};
use crate::config::AcceptedStatuses;
use crate::h3::{H3Client, H3Event, H3Failure};

/// Tell one HTTP/3 event the way every protocol tells it: a response with its status judged,
/// a malformed one as such, the rest for the QUIC block.
fn tell(answered: &mut bool, accept: &AcceptedStatuses, on: &mut impl FnMut(Event), event: H3Event) {
    match event {
        H3Event::Response { stamp, status } => {
            let accepted = accept.accepts(status);
            *answered |= accepted;
            on(Event::Response { stamp, status, accepted });
        }
        H3Event::StreamMalformed { .. } => on(Event::StreamMalformed),
        other => on(Event::Quic(other)),
    }
}

impl Connection {
    fn h3(&mut self) -> Option<&mut H3Client> {
        match &mut self.protocol {
            Protocol::H3(Some(c)) => Some(c),
            _ => None,
        }
    }

    /// HTTP/3: the datagrams of one read were handed over: act on them (the handshake,
    /// responses), telling `on`, before new requests begin. Err: the connection is over.
    pub fn after_datagrams(&mut self, profile: &Profile, now: Now, on: &mut impl FnMut(Event)) -> Result<(), Close> {
        let (answered, accept) = (&mut self.answered, &profile.accept_status);
        let Protocol::H3(Some(c)) = &mut self.protocol else { return Ok(()) };
        c.after_datagrams(now.at, &mut |event| tell(answered, accept, on, event));
        self.h3_settle()
    }

    /// HTTP/3: the next datagrams to send, appended to `out`: (bytes, segment size if several).
    /// Ok(None): nothing more now; what happened meanwhile went to `on`.
    pub fn poll_datagrams(
        &mut self,
        profile: &Profile,
        now: Now,
        max_segments: usize,
        out: &mut Vec<u8>,
        on: &mut impl FnMut(Event),
    ) -> Result<Option<(usize, Option<usize>)>, Close> {
        let (answered, accept) = (&mut self.answered, &profile.accept_status);
        let Protocol::H3(Some(c)) = &mut self.protocol else { return Ok(None) };
        if let Some(t) = c.poll_transmit(now.at, max_segments, out) {
            return Ok(Some(t));
        }
        c.drain(&mut |event| tell(answered, accept, on, event));
        self.h3_settle().map(|()| None)
    }

    /// After the client told what happened: a failure ends the connection; a GOAWAY closes
    /// it once the requests in flight are answered.
    fn h3_settle(&mut self) -> Result<(), Close> {
        let Some(c) = self.h3() else { return Ok(()) };
        if let Some(failure) = c.failure() {
            let idle = c.outstanding() == 0;
            // A server that said GOAWAY and closed with no error once every request was
            // answered ended the connection as it should (as a FIN after `Connection: close`).
            if failure.kind == "H3_NO_ERROR" && c.going_away() && idle {
                return Err(self.close_in_order(Reason::Done));
            }
            return Err(Close::bare(Reason::Quic(failure)));
        }
        if c.going_away() {
            self.closing = true;
        }
        if self.closing && self.protocol.outstanding() == 0 {
            // Every request the server took is answered: close (H3_NO_ERROR, sent as the
            // connection is retired) and connect again.
            return Err(self.close_in_order(Reason::Done));
        }
        Ok(())
    }

    /// HTTP/3: an ICMP port unreachable came back for a datagram: nothing listens on the
    /// server's port (its process ended), as a TCP connection's reset says. How it ends.
    pub fn quic_refused(&mut self) -> Close {
        let handshaking = !self.h3().is_some_and(|c| c.established());
        let words = "nothing listens on the server's UDP port (ICMP port unreachable)".to_owned();
        Close::bare(Reason::Quic(H3Failure { kind: "unreachable".into(), words, handshaking }))
    }

    /// HTTP/3: when the QUIC handshake must have completed (`--connect-timeout`), in ns of the
    /// run, while it has not.
    fn h3_handshake_deadline(&self, profile: &Profile) -> Option<u64> {
        match &self.protocol {
            Protocol::H3(Some(c)) if !c.established() => {
                Some(self.connect_started_ns + profile.connect_timeout.as_nanos() as u64)
            }
            _ => None,
        }
    }

    /// HTTP/3: the QUIC deadlines (the transport's timer, the handshake's), in ns of the run.
    pub(super) fn h3_poll_timeout(&self, profile: &Profile) -> Option<u64> {
        let Protocol::H3(Some(c)) = &self.protocol else { return None };
        let quic = c.poll_timeout().map(|at| at.saturating_duration_since(profile.origin).as_nanos() as u64);
        match (quic, self.h3_handshake_deadline(profile)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// HTTP/3: a deadline may have passed `now`.
    pub(super) fn h3_on_timeout(&mut self, profile: &Profile, now: Now) -> Result<(), Close> {
        if self.h3_handshake_deadline(profile).is_some_and(|ns| now.ns >= ns) {
            let waited = Duration::from_nanos(now.ns.saturating_sub(self.connect_started_ns));
            let words = format!(
                "no QUIC handshake within {:.1} s (--connect-timeout): nothing answers on that UDP port, or not QUIC",
                waited.as_secs_f64()
            );
            return Err(Close::bare(Reason::Quic(H3Failure { kind: "timeout".into(), words, handshaking: true })));
        }
        if let Some(c) = self.h3() {
            c.handle_timeout(now.at);
        }
        Ok(())
    }

    /// HTTP/3: the connection goes (closed, failed, or the run ended): close it in QUIC if it
    /// is open (its figures told to `on`) and return the datagram carrying the
    /// CONNECTION_CLOSE, to send last. None for any other protocol.
    pub fn quic_close(&mut self, profile: &Profile, now: Instant, on: &mut impl FnMut(Event)) -> Option<Vec<u8>> {
        let (answered, accept) = (&mut self.answered, &profile.accept_status);
        let Protocol::H3(Some(c)) = &mut self.protocol else { return None };
        Some(c.close(now, &mut |event| tell(answered, accept, on, event)))
    }
}
