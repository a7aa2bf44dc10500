//! One connection's task in the tokio model: wait for readiness, read into a pool buffer
//! taken only then, answer through the shared exchange (`conn::Exchange`), and carry out the
//! connection policy (`crate::policy`) as every model does, with one timer per connection that
//! moves only when a deadline gets earlier.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::tokio::io::Interest;
use ::tokio::net::TcpStream;
use ::tokio::sync::watch;
use sockscale_proto::Session;
use sockscale_sys as sys;

use super::active::Seat;
use super::{counters, with_local, Admitted, Shared, Stage};
use crate::conn::{closed_by_error, Exchange, Written};
use crate::policy::CloseReason;
use crate::policy::{ReadNext, ReadRound};
use crate::stats::Stats;

/// One connection's state between awaits.
pub(super) struct Conn {
    stream: TcpStream,
    x: Exchange,
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

/// What one read turn achieved.
struct ReadTurn {
    /// The socket took some output.
    progressed: bool,
    /// The read budget ran out with input possibly left: yield before reading on.
    budget_spent: bool,
    /// The pool had no buffer (only if buffers leak; kept defensive): wait a little.
    no_buffer: bool,
    /// An answer's body file turn was sent with more to come: yield before flushing on.
    yielded: bool,
}

/// One connection's task: serve it, then count its close. Built from the pieces the accept task
/// hands over, so that the connection's state is stored once in the task.
pub(super) async fn conn_task(mut conn: Conn, mut guard: Admitted, mut stage: watch::Receiver<Stage>) {
    let reason = conn.serve(&guard.shared, &mut stage).await;
    // Close the socket before the guard counts the close and wakes a paused accept, so that the
    // accept finds the descriptor free.
    drop(conn);
    guard.close(reason);
}

impl Conn {
    /// A connection of `stats`' process, listed for shedding (`--abort-storm-shed`) until it
    /// drops.
    pub(super) fn new(stream: TcpStream, session: Session, stats: &Arc<Stats>, seat: Option<Seat>) -> Self {
        let listed = stats.sheds().then(|| {
            stats.enlist(stream.as_raw_fd());
            stats.clone()
        });
        let mut x = Exchange::new(session, Instant::now());
        if seat.as_ref().is_some_and(|s| s.place.is_waiting()) {
            x.policy.set_waiting(true, Instant::now());
        }
        Conn { stream, x, listed, seat }
    }

    /// Serve until a policy, the protocol, the peer or the shutdown ends the connection.
    async fn serve(&mut self, shared: &Shared, stage: &mut watch::Receiver<Stage>) -> CloseReason {
        let limits = &shared.limits;
        // The drain may have begun between the accept and this task's first poll.
        match *stage.borrow_and_update() {
            Stage::Running => {}
            Stage::Draining { until } => self.begin_drain(until),
            Stage::Forced => return CloseReason::Shutdown,
        }
        let mut watching = true;
        let mut timer_at = self.deadline(shared, Instant::now());
        let timer = ::tokio::time::sleep_until(timer_at.into());
        ::tokio::pin!(timer);
        let mut progressed = false;
        loop {
            let now = Instant::now();
            // The gate may have given this connection a place, or taken it.
            if let Some(seat) = &self.seat {
                let waiting = seat.place.is_waiting();
                if waiting != self.x.policy.is_waiting() {
                    self.x.policy.set_waiting(waiting, now);
                }
                if seat.place.is_given() {
                    seat.take_up(now);
                }
            }
            if let Err(reason) = self.x.settle(now, progressed, limits) {
                return reason;
            }
            if let Some(seat) = &self.seat {
                seat.place.between.store(self.x.session.is_between_requests(), std::sync::atomic::Ordering::Release);
            }
            progressed = false;
            let deadline = self.deadline(shared, now);
            if deadline < timer_at {
                timer_at = deadline;
                timer.as_mut().reset(deadline.into());
            }
            // One readiness future for both directions keeps the task small.
            let interest = match (self.x.may_read(limits), !self.x.out.is_empty()) {
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
                        Stage::Running => {}
                        Stage::Draining { until } => self.begin_drain(until),
                        Stage::Forced => return CloseReason::Shutdown,
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
                    if let Some(reason) = self.on_deadline(shared, now) {
                        return reason;
                    }
                    timer_at = self.deadline(shared, now);
                    timer.as_mut().reset(timer_at.into());
                }
                ready = self.stream.ready(interest.unwrap_or(Interest::READABLE)), if interest.is_some() => {
                    let ready = match ready {
                        Ok(ready) => ready,
                        Err(e) => return closed_by_error(&e),
                    };
                    // Flush first, as the readiness loop does: it may bring the queue back
                    // under --max-pending-send and so allow reading.
                    let mut yielded = false;
                    if ready.is_writable() && !self.x.out.is_empty() {
                        match self.flush(shared) {
                            Ok(w) => (progressed, yielded) = (w.bytes > 0, w.yielded),
                            Err(reason) => return reason,
                        }
                    }
                    if ready.is_readable() && self.x.may_read(limits) {
                        let turn = match self.read(shared) {
                            Ok(turn) => turn,
                            Err(reason) => return reason,
                        };
                        progressed |= turn.progressed;
                        yielded |= turn.yielded;
                        if turn.no_buffer {
                            ::tokio::time::sleep(Duration::from_millis(1)).await;
                        } else if turn.budget_spent {
                            // Fairness: let the other connections run, then read on.
                            yielded = true;
                        }
                    }
                    if yielded {
                        // Fairness: the read budget or a body file's turn is spent; let the
                        // other connections run, then go on.
                        ::tokio::task::yield_now().await;
                    }
                }
            }
        }
    }

    /// The drain began: finish the exchange, including a request the kernel holds unread. The
    /// drain ends the active set (see `ConnPolicy::begin_drain`): the seat is given up, so a
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
        with_local(shared, now, |local| self.x.deadline(&local.kit.engine, &shared.limits))
    }

    /// The timer came due: the reason to close if a deadline expired, or None to re-arm.
    fn on_deadline(&mut self, shared: &Shared, now: Instant) -> Option<CloseReason> {
        let fd = self.stream.as_raw_fd();
        let x = &mut self.x;
        let expired = with_local(shared, now, |local| x.expire(fd, &mut local.kit, now, &shared.limits));
        let (reason, sent) = expired?;
        counters(shared).bytes_out(sent);
        Some(reason)
    }

    /// Write queued output; Ok(what the socket took, and whether a body file's turn ended it).
    fn flush(&mut self, shared: &Shared) -> Result<Written, CloseReason> {
        let fd = self.stream.as_raw_fd();
        let x = &mut self.x;
        let mut written = Written::default();
        // Through try_io, so that EAGAIN clears tokio's write readiness and the next
        // writable() waits for the edge.
        let attempt = self.stream.try_io(Interest::WRITABLE, || {
            written = x.flush(fd, Instant::now())?;
            if written.blocked {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        if let Err(e) = attempt {
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(closed_by_error(&e));
            }
        }
        counters(shared).bytes_out(written.bytes);
        Ok(written)
    }

    /// Read within the budget into a pool buffer taken now and returned before the next await,
    /// feed the protocol and write its answer.
    fn read(&mut self, shared: &Shared) -> Result<ReadTurn, CloseReason> {
        let limits = &shared.limits;
        let counters = counters(shared);
        let mut turn = ReadTurn { progressed: false, budget_spent: false, no_buffer: false, yielded: false };
        if let Some(seat) = &self.seat {
            seat.on_input(Instant::now());
        }
        let Some(mut buf) = shared.pool.take(counters) else {
            turn.no_buffer = true;
            return Ok(turn);
        };
        let fd = self.stream.as_raw_fd();
        let mut round = ReadRound::new(limits);
        loop {
            let want = round.want(buf.len());
            let mut received = None;
            let attempt = self.stream.try_io(Interest::READABLE, || {
                let n = sys::recv(fd, &mut buf[..want])?;
                received = Some(n);
                // A short read emptied the socket's queue, and any later byte raises a new
                // edge: have tokio forget the readiness now (only if no newer event came in).
                if n > 0 && n < want {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(())
                }
            });
            let n = match (received, attempt) {
                (Some(n), _) => n,
                (None, Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                (None, Err(e)) if e.kind() != io::ErrorKind::WouldBlock => return Err(closed_by_error(&e)),
                (None, _) => break,
            };
            if n == 0 {
                self.x.policy.on_eof();
                break;
            }
            counters.bytes_in(n);
            let now = Instant::now();
            let input = &buf[..n];
            let x = &mut self.x;
            // Written here, straight from the receive buffer and the shared responses; only
            // what the socket refuses is copied into the queue.
            let fed = with_local(shared, now, |local| x.feed(fd, &mut local.kit, input, now));
            match fed {
                Ok(Some(w)) => {
                    turn.progressed |= w.bytes > 0;
                    turn.yielded |= w.yielded;
                    counters.bytes_out(w.bytes);
                }
                Ok(None) => {}
                Err(e) => return Err(closed_by_error(&e)),
            }
            match round.after_read(n, want, false, &self.x.policy, self.x.pending(), limits) {
                ReadNext::More => {}
                ReadNext::Stop | ReadNext::Drained => break,
                ReadNext::Yield => {
                    turn.budget_spent = true;
                    break;
                }
            }
        }
        Ok(turn)
    }
}
