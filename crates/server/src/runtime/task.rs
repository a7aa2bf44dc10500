//! One connection's task in the tokio model: wait for readiness, read into a pool buffer
//! taken only then, answer through the connection (`connection::Connection`), and carry out the
//! connection policy (`crate::policy`) as every model does, with one timer per connection that
//! moves only when a deadline gets earlier.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use ::tokio::io::Interest;
use ::tokio::sync::watch;
use sockscale_proto::Output;
use sockscale_sys as sys;

use super::active::Seat;
use super::stream::Stream;
use super::{counters, with_local, Admitted, Shared, TaskPhase};
use crate::body::{BodyFile, Seal};
use crate::policy::CloseReason;
use crate::socket_turn::{
    self as carry, closed_by_error, Close, Connection, OutQueue, Socket, TurnIo, Turned, Written,
};
use crate::stats::Stats;

/// One connection's state between awaits.
pub(super) struct Conn {
    stream: Stream,
    pub(super) x: Connection,
    /// With `--abort-storm-shed`, the stats whose roster lists this connection: delisted when
    /// the connection drops, however its task ends (a cancelled or panicked task included),
    /// before the stream closes the descriptor.
    listed: Option<Arc<Stats>>,
    /// `--active-set`: this connection's place (dropped with the connection, handing it on).
    seat: Option<Seat>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(stats) = self.listed.take() {
            stats.delist(self.stream.as_raw_fd());
        }
    }
}

/// One connection's task: serve it, then count its close. Built from the pieces the accept task
/// hands over, so that the connection's state is stored once in the task.
pub(super) async fn conn_task(mut conn: Conn, mut guard: Admitted, mut stage: watch::Receiver<TaskPhase>) {
    let close = conn.serve(&guard.shared, &mut stage).await;
    conn.end(&guard.shared, &close);
    // Close the socket before the guard counts the close and wakes a paused accept, so that the
    // accept finds the descriptor free.
    drop(conn);
    guard.close(close.reason);
}

impl Conn {
    /// A connection of `stats`' process, listed for shedding (`--abort-storm-shed`) until it
    /// drops.
    /// Connection `x` (see [`Connection::pulled`]) on `stream`.
    pub(super) fn new(stream: Stream, mut x: Connection, stats: &Arc<Stats>, seat: Option<Seat>) -> Self {
        let listed = stats.sheds().then(|| {
            stats.enlist(stream.as_raw_fd());
            stats.clone()
        });
        if seat.as_ref().is_some_and(|s| s.place.is_waiting()) {
            x.lc.set_waiting(true, Instant::now());
        }
        Conn { stream, x, listed, seat }
    }

    /// Serve until a policy, the protocol, the peer or the shutdown ends the connection: take
    /// a turn of the lifecycle, then wait as it says.
    async fn serve(&mut self, shared: &Shared, stage: &mut watch::Receiver<TaskPhase>) -> Close {
        // The drain may have begun between the accept and this task's first poll.
        match *stage.borrow_and_update() {
            TaskPhase::Running => {}
            TaskPhase::Draining { until } => self.begin_drain(until),
            TaskPhase::Forced => return self.x.close(CloseReason::Shutdown),
        }
        let mut watching = true;
        let mut timer_at = self.deadline(shared, Instant::now());
        let timer = ::tokio::time::sleep_until(timer_at.into());
        ::tokio::pin!(timer);
        loop {
            let now = Instant::now();
            // The gate may have given this connection a place, or taken it.
            if let Some(seat) = &self.seat {
                let waiting = seat.place.is_waiting();
                if waiting != self.x.lc.is_waiting() {
                    self.x.lc.set_waiting(waiting, now);
                }
                if seat.place.is_given() {
                    seat.take_up(now);
                }
            }
            let wait = match self.turn(shared, now) {
                Turned::Close(close) => return close,
                Turned::Wait { wait, input } => {
                    if input {
                        if let Some(seat) = &self.seat {
                            seat.on_input(now);
                        }
                    }
                    wait
                }
            };
            if let Some(seat) = &self.seat {
                seat.place.between.store(self.x.lc.is_between_requests(), std::sync::atomic::Ordering::Release);
            }
            if wait.wake_at < timer_at {
                timer_at = wait.wake_at;
                timer.as_mut().reset(wait.wake_at.into());
            }
            if wait.resume {
                // Fairness: the read budget or a body file's turn is spent; let the other
                // connections run, then go on.
                ::tokio::task::yield_now().await;
                continue;
            }
            // One readiness future for both directions keeps the task small.
            let interest = match (wait.read, wait.write) {
                (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
                (true, false) => Some(Interest::READABLE),
                (false, true) => Some(Interest::WRITABLE),
                (false, false) => None,
            };
            let place = self.seat.as_ref().map(|s| s.place.clone());
            ::tokio::select! {
                biased;
                changed = stage.changed(), if watching => match changed {
                    Ok(()) => match *stage.borrow_and_update() {
                        TaskPhase::Running => {}
                        TaskPhase::Draining { until } => self.begin_drain(until),
                        TaskPhase::Forced => return self.x.close(CloseReason::Shutdown),
                    },
                    // The publisher is gone only as the runtime shuts down; stop listening.
                    Err(_) => watching = false,
                },
                // `--active-set`: the gate gave this connection a place or took it.
                () = async {
                    match &place {
                        Some(place) => place.changed.notified().await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = &mut timer => {
                    let now = Instant::now();
                    if let Some(close) = self.on_deadline(shared, now) {
                        return close;
                    }
                    timer_at = self.deadline(shared, now);
                    timer.as_mut().reset(timer_at.into());
                }
                ready = self.stream.ready(interest.unwrap_or(Interest::READABLE)), if interest.is_some() => {
                    match ready {
                        Ok(ready) => {
                            let hangup = ready.is_read_closed() || ready.is_write_closed() || ready.is_error();
                            self.x.lc.on_ready(ready.is_readable(), ready.is_writable(), hangup);
                        }
                        Err(e) => return self.x.close(closed_by_error(&e)),
                    }
                }
            }
        }
    }

    /// One turn of the lifecycle on this task's stream, with this worker thread's protocol kit.
    fn turn(&mut self, shared: &Shared, now: Instant) -> Turned {
        let (x, stream) = (&mut self.x, &self.stream);
        with_local(shared, now, |local| {
            let mut io =
                TurnIo { kit: &mut local.kit, pool: &shared.pool, counters: counters(shared), limits: &shared.limits };
            x.turn(&mut TokioSocket(stream), &mut io, now)
        })
    }

    /// The drain began: finish the exchange, including a request the kernel holds unread. The
    /// drain ends the active set (see `Lifecycle::begin_drain`): the seat is given up, so a
    /// waiting connection reads what it sent before the drain, or closes now if it sent nothing.
    fn begin_drain(&mut self, until: Instant) {
        let fd = self.stream.as_raw_fd();
        if self.seat.take().is_some_and(|seat| seat.place.is_waiting()) {
            if let Some(stats) = &self.listed {
                stats.shed_waiting(fd, false);
            }
        }
        self.x.begin_drain(fd, Instant::now(), until);
    }

    /// The next instant a policy may act on this connection.
    fn deadline(&self, shared: &Shared, now: Instant) -> Instant {
        with_local(shared, now, |local| self.x.deadline(&local.kit.responder, &shared.limits))
    }

    /// The timer came due: the close if a deadline expired, or None to re-arm.
    fn on_deadline(&mut self, shared: &Shared, now: Instant) -> Option<Close> {
        let x = &mut self.x;
        with_local(shared, now, |local| x.expire(&mut local.kit, counters(shared), now, &shared.limits))
    }

    /// Carry out `close` on the stream (`task::end`), before it drops.
    fn end(&mut self, shared: &Shared, close: &Close) {
        let (fd, x) = (self.stream.as_raw_fd(), &mut self.x);
        with_local(shared, Instant::now(), |local| {
            carry::end(fd, x, close, &mut local.kit.tls_scratch, counters(shared));
        });
    }
}

/// A tokio stream (TCP or Unix) as a turn's socket: reads and flushes go through `try_io`, so that a call
/// that finds the socket drained or full clears tokio's readiness, and the next `ready()` waits
/// for a new edge (only if no newer event came in meanwhile).
struct TokioSocket<'s>(&'s Stream);

impl Socket for TokioSocket<'_> {
    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    fn recv(&mut self, buf: &mut [u8], short_drains: bool) -> io::Result<usize> {
        let fd = self.fd();
        let mut received = None;
        let attempt = self.0.try_io(Interest::READABLE, || {
            let n = sys::recv(fd, buf)?;
            received = Some(n);
            // The lifecycle takes this short read to mean drained: forget the readiness now.
            if short_drains && n > 0 && n < buf.len() {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        match (received, attempt) {
            (Some(n), _) => Ok(n),
            (None, Err(e)) => Err(e),
            (None, Ok(())) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self, out: &mut OutQueue, mut seal: Option<&mut Seal<'_>>) -> io::Result<Written> {
        let fd = self.fd();
        self.write(|| out.flush(fd, seal.as_deref_mut()))
    }

    fn send(
        &mut self,
        out: &mut OutQueue,
        output: &Output,
        input: &[u8],
        body: Option<&Arc<BodyFile>>,
    ) -> io::Result<Written> {
        // Not through `try_io`: it would not call the write at all while tokio believes the
        // socket full, and this output must be written or queued, never dropped. What the
        // socket refuses is queued, and the next flush (through `try_io`) clears the readiness.
        out.send(self.fd(), output, input, body)
    }
}

impl TokioSocket<'_> {
    /// A write through `try_io`: one the socket refused in part clears the write readiness. Only
    /// for what stays queued if `try_io` does not call it.
    fn write(&mut self, mut write: impl FnMut() -> io::Result<Written>) -> io::Result<Written> {
        let mut written = Written::default();
        let attempt = self.0.try_io(Interest::WRITABLE, || {
            written = write()?;
            if written.blocked {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        match attempt {
            Ok(()) => Ok(written),
            // Refused in part, or not tried because tokio knows the socket is full.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Written { blocked: true, ..written }),
            Err(e) => Err(e),
        }
    }
}
