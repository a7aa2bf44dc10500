//! One connection's task in the tokio model: wait for readiness, read into a pool buffer
//! taken only then, answer through the shared output queue, and apply the same policy clocks as
//! every model (`conn::Clocks`), with one timer per connection that moves only when a deadline
//! gets earlier.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ::tokio::io::Interest;
use ::tokio::net::TcpStream;
use ::tokio::sync::watch;
use sockscale_proto::{Closing, Session, Verdict};
use sockscale_sys as sys;

use super::{counters, with_local, Admitted, Shared, Stage};
use crate::config::Config;
use crate::conn::{Clocks, OutQueue, Written};
use crate::stats::CloseReason;

/// One connection's state between awaits.
pub(super) struct Conn {
    stream: TcpStream,
    session: Session,
    out: OutQueue,
    clocks: Clocks,
    /// Close once the output is flushed.
    closing: Option<CloseReason>,
    /// The peer sent FIN.
    read_eof: bool,
    /// Set once draining: when to close whatever is still open.
    drain_until: Option<Instant>,
}

/// What one read turn achieved.
struct ReadTurn {
    /// The socket took some output.
    progressed: bool,
    /// The read budget ran out with input possibly left: yield before reading on.
    budget_spent: bool,
    /// The pool had no buffer (only if buffers leak; kept defensive): wait a little.
    no_buffer: bool,
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
    pub(super) fn new(stream: TcpStream, session: Session) -> Self {
        Conn {
            stream,
            session,
            out: OutQueue::default(),
            clocks: Clocks::new(Instant::now()),
            closing: None,
            read_eof: false,
            drain_until: None,
        }
    }

    /// Serve until a policy, the protocol, the peer or the shutdown ends the connection.
    async fn serve(&mut self, shared: &Shared, stage: &mut watch::Receiver<Stage>) -> CloseReason {
        let cfg = &shared.cfg;
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
            if let Some(reason) = self.settle(cfg, now, progressed) {
                return reason;
            }
            progressed = false;
            let deadline = self.deadline(shared, now);
            if deadline < timer_at {
                timer_at = deadline;
                timer.as_mut().reset(deadline.into());
            }
            // One readiness future for both directions keeps the task small.
            let interest = match (self.may_read(cfg), !self.out.is_empty()) {
                (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
                (true, false) => Some(Interest::READABLE),
                (false, true) => Some(Interest::WRITABLE),
                (false, false) => None,
            };
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
                        Err(e) => return error_reason(&e),
                    };
                    // Flush first, as drive.rs does: it may bring the queue back under
                    // --max-pending-send and so allow reading.
                    if ready.is_writable() && !self.out.is_empty() {
                        match self.flush(shared) {
                            Ok(p) => progressed = p,
                            Err(reason) => return reason,
                        }
                    }
                    if ready.is_readable() && self.may_read(cfg) {
                        let turn = match self.read(shared) {
                            Ok(turn) => turn,
                            Err(reason) => return reason,
                        };
                        progressed |= turn.progressed;
                        if turn.no_buffer {
                            ::tokio::time::sleep(Duration::from_millis(1)).await;
                        } else if turn.budget_spent {
                            // Fairness: let the other connections run, then read on.
                            ::tokio::task::yield_now().await;
                        }
                    }
                }
            }
        }
    }

    fn begin_drain(&mut self, until: Instant) {
        self.session.finish_current();
        self.drain_until = Some(until);
    }

    /// Whether to read: not after EOF or a close verdict, not while over `--max-pending-send`,
    /// not between requests while draining.
    fn may_read(&self, cfg: &Config) -> bool {
        !self.read_eof
            && self.closing.is_none()
            && self.out.len() <= cfg.max_pending_send
            && !(self.drain_until.is_some() && self.session.is_between_requests())
    }

    /// After I/O, as `Worker::settle`: the reason to close if the connection is finished, or
    /// else update the flood and stall clocks. `progressed`: the socket took output.
    fn settle(&mut self, cfg: &Config, now: Instant, progressed: bool) -> Option<CloseReason> {
        if self.out.is_empty() {
            let finished = self.closing.or_else(|| {
                if self.read_eof {
                    Some(CloseReason::Peer)
                } else if self.drain_until.is_some() && self.session.is_between_requests() {
                    Some(CloseReason::Shutdown)
                } else {
                    None
                }
            });
            if finished.is_some() {
                return finished;
            }
        }
        self.clocks.account(now, self.out.len(), self.out.len() > cfg.max_pending_send, progressed);
        None
    }

    /// The next instant a policy may act on this connection.
    fn deadline(&self, shared: &Shared, now: Instant) -> Instant {
        let cfg = &shared.cfg;
        let protocol = with_local(shared, now, |local| local.engine.deadline(&self.session));
        let deadline = self.clocks.deadline(cfg.idle_timeout, cfg.send_timeout, protocol);
        self.drain_until.map_or(deadline, |until| deadline.min(until))
    }

    /// The timer came due: the reason to close if a policy expired (as `Worker::on_deadline`,
    /// plus the drain deadline), or None to re-arm.
    fn on_deadline(&mut self, shared: &Shared, now: Instant) -> Option<CloseReason> {
        let cfg = &shared.cfg;
        let fd = self.stream.as_raw_fd();
        let (session, out, clocks) = (&mut self.session, &mut self.out, &self.clocks);
        let (reason, sent) = with_local(shared, now, |local| {
            let protocol_due = local.engine.deadline(session).is_some_and(|at| at <= now);
            let reason = clocks.expired(now, cfg.idle_timeout, cfg.send_timeout, protocol_due);
            let mut sent = 0;
            if reason == Some(CloseReason::HeaderTimeout) {
                local.scratch.clear();
                local.engine.on_timeout(session, now, &mut local.scratch);
                // One attempt to tell the client why (the 408); the connection closes either way.
                sent = out.send(fd, &local.scratch, &[]).map_or(0, |w| w.bytes);
            }
            (reason, sent)
        });
        counters(shared).bytes_out(sent);
        if reason.is_some() {
            return reason;
        }
        if self.drain_until.is_some_and(|at| at <= now) {
            return Some(CloseReason::Shutdown);
        }
        None
    }

    /// Write queued output; Ok(whether the socket took any).
    fn flush(&mut self, shared: &Shared) -> Result<bool, CloseReason> {
        let fd = self.stream.as_raw_fd();
        let out = &mut self.out;
        let mut written = Written::default();
        // Through try_io, so that EAGAIN clears tokio's write readiness and the next
        // writable() waits for the edge.
        let attempt = self.stream.try_io(Interest::WRITABLE, || {
            written = out.flush(fd)?;
            if written.blocked {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        if let Err(e) = attempt {
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(error_reason(&e));
            }
        }
        if written.bytes == 0 {
            return Ok(false);
        }
        self.clocks.touch(Instant::now());
        counters(shared).bytes_out(written.bytes);
        Ok(true)
    }

    /// Read within the budget into a pool buffer taken now and returned before the next await,
    /// feed the protocol and write its answer.
    fn read(&mut self, shared: &Shared) -> Result<ReadTurn, CloseReason> {
        let cfg = &shared.cfg;
        let counters = counters(shared);
        let mut turn = ReadTurn { progressed: false, budget_spent: false, no_buffer: false };
        let Some(mut buf) = shared.pool.take(counters) else {
            turn.no_buffer = true;
            return Ok(turn);
        };
        let fd = self.stream.as_raw_fd();
        let mut budget = cfg.read_budget;
        loop {
            let want = budget.min(buf.len());
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
                (None, Err(e)) if e.kind() != io::ErrorKind::WouldBlock => return Err(error_reason(&e)),
                (None, _) => break,
            };
            if n == 0 {
                self.read_eof = true;
                break;
            }
            let now = Instant::now();
            self.clocks.touch(now);
            budget -= n;
            counters.bytes_in(n);
            let input = &buf[..n];
            let (session, out) = (&mut self.session, &mut self.out);
            let (verdict, sent) = with_local(shared, now, |local| {
                local.scratch.clear();
                let verdict = local.engine.on_input(session, input, now, &mut local.scratch);
                // Written here, straight from the receive buffer and the shared responses;
                // only what the socket refuses is copied into the queue.
                let sent =
                    if local.scratch.is_empty() { Ok(Written::default()) } else { out.send(fd, &local.scratch, input) };
                (verdict, sent)
            });
            match sent {
                Ok(w) if w.bytes > 0 => {
                    turn.progressed = true;
                    counters.bytes_out(w.bytes);
                }
                Ok(_) => {}
                Err(e) => return Err(error_reason(&e)),
            }
            if let Verdict::Close(closing) = verdict {
                self.closing = Some(match closing {
                    Closing::Done => CloseReason::Done,
                    Closing::BadRequest => CloseReason::Protocol,
                    Closing::HeaderTimeout => CloseReason::HeaderTimeout,
                });
                break;
            }
            if self.out.len() > cfg.max_pending_send {
                break;
            }
            if budget == 0 {
                turn.budget_spent = true;
                break;
            }
            if n < want {
                break;
            }
        }
        Ok(turn)
    }
}

/// The close reason for a socket error, as `Worker::close_on_error`.
fn error_reason(err: &io::Error) -> CloseReason {
    match err.raw_os_error() {
        Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => CloseReason::Peer,
        _ => {
            tracing::debug!(error = %err, "closing a connection after a socket error");
            CloseReason::Error
        }
    }
}
