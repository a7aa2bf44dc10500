//! Driving one connection: flush, read within the budget, feed the protocol, write, and then
//! settle what the connection waits for next. Every decision is the policy's
//! (`crate::policy`, through `conn::Exchange`); this file only carries them out on a
//! readiness selector.

use std::io;
use std::os::fd::AsRawFd;

use sockscale_sys::{Interest, Selector};

use super::{split, Worker};
use crate::policy::CloseReason;
use crate::policy::{close_reason, ReadNext, ReadRound};

impl<S: Selector> Worker<'_, S> {
    /// Do all the I/O a connection is ready for.
    pub(super) fn drive(&mut self, token: u64) {
        let (index, generation) = split(token);
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        if conn.generation != generation {
            return;
        }
        let fd = conn.fd.as_raw_fd();
        let mut progressed = false;

        if conn.writable && !conn.x.out.is_empty() {
            match conn.x.flush(fd, self.now) {
                Ok(w) => {
                    conn.writable = !w.blocked;
                    if w.bytes > 0 {
                        progressed = true;
                        self.counters.bytes_out(w.bytes);
                    }
                    if w.yielded {
                        // Fairness: the others first, then this body's next chunk.
                        self.resume.push(token);
                    }
                }
                Err(e) => return self.close_on_error(index, e),
            }
        }

        if conn.readable && conn.x.may_read(&self.limits) {
            let Some(mut buf) = self.pool.take(self.counters) else {
                // The pool is shared and empty: try again shortly rather than spin.
                self.resume.push(token);
                return;
            };
            let mut round = ReadRound::new(&self.limits);
            loop {
                let want = round.want(buf.len());
                match sockscale_sys::recv(fd, &mut buf[..want]) {
                    Ok(0) => {
                        conn.x.policy.on_eof();
                        conn.readable = false;
                        break;
                    }
                    Ok(n) => {
                        self.counters.bytes_in(n);
                        if let Some(set) = &mut self.active {
                            set.on_input(&token, self.now);
                        }
                        match conn.x.feed(fd, &mut self.kit, &buf[..n], self.now) {
                            Ok(Some(w)) => {
                                if w.bytes > 0 {
                                    progressed = true;
                                    self.counters.bytes_out(w.bytes);
                                }
                                conn.writable = !w.blocked;
                                if w.yielded {
                                    self.resume.push(token);
                                }
                            }
                            Ok(None) => {}
                            Err(e) => {
                                drop(buf);
                                return self.close_on_error(index, e);
                            }
                        }
                        match round.after_read(n, want, conn.hangup, &conn.x.policy, conn.x.pending(), &self.limits) {
                            ReadNext::More => {}
                            ReadNext::Stop => break,
                            ReadNext::Yield => {
                                // Fairness: the others first, then this one again next turn.
                                self.resume.push(token);
                                break;
                            }
                            ReadNext::Drained => {
                                // Any byte arriving later raises a new event.
                                conn.readable = false;
                                break;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        conn.readable = false;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        drop(buf);
                        return self.close_on_error(index, e);
                    }
                }
            }
        }
        self.settle(token, progressed);
    }

    /// After I/O: close the connection if it is finished, otherwise update its policy clocks,
    /// its timer and what the selector watches for.
    pub(super) fn settle(&mut self, token: u64, progressed: bool) {
        let (index, generation) = split(token);
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        if conn.generation != generation {
            return;
        }
        let resumed = match conn.x.settle(self.now, progressed, &self.limits) {
            Ok(resumed) => resumed,
            Err(reason) => return self.close(index, reason),
        };
        if resumed && conn.readable {
            // Back under the caps with input waiting: read it without waiting for an edge
            // that already happened.
            self.resume.push(token);
        }
        let deadline = conn.x.deadline(&self.kit.engine, &self.limits);
        self.timers.schedule(&mut conn.timer_at, deadline, token);

        let wanted = if self.edge {
            // An edge-triggered selector watches for input always (the loop remembers what it
            // has not consumed), and for room only from the first time output was refused: a
            // new connection registered for writable would cost a wake-up for nothing.
            Interest { read: true, write: conn.registered.write || !conn.x.out.is_empty() }
        } else {
            // Level-triggered: exactly what the connection may do now, or waiting would spin.
            Interest { read: conn.x.may_read(&self.limits), write: !conn.x.out.is_empty() }
        };
        if wanted != conn.registered {
            if let Err(e) = self.selector.reregister(conn.fd.as_raw_fd(), token, wanted) {
                return self.close_on_error(index, e);
            }
            conn.registered = wanted;
        }
    }

    /// The connection's timer came due: act on whichever policy expired, or re-arm.
    pub(super) fn on_deadline(&mut self, token: u64) {
        let (index, _) = split(token);
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        let fd = conn.fd.as_raw_fd();
        match conn.x.expire(fd, &mut self.kit, self.now, &self.limits) {
            Some((reason, sent)) => {
                self.counters.bytes_out(sent);
                self.close(index, reason);
            }
            None => self.settle(token, false),
        }
    }

    fn close_on_error(&mut self, index: usize, err: io::Error) {
        let reason = close_reason(&err);
        if reason == CloseReason::Error {
            tracing::debug!(error = %err, "closing a connection after a socket error");
        }
        self.close(index, reason);
    }

    pub(super) fn close(&mut self, index: usize, reason: CloseReason) {
        let Some(conn) = self.conns.try_remove(index) else {
            return;
        };
        self.stats.delist(conn.fd.as_raw_fd());
        // Level-triggered selectors keep descriptor tables; epoll forgets a closed descriptor
        // by itself, so it is spared the syscall.
        if !self.edge {
            let _ = self.selector.deregister(conn.fd.as_raw_fd());
        }
        let (tok, was_waiting) = (super::token(index, conn.generation), conn.x.policy.is_waiting());
        drop(conn);
        self.leave_active_set(tok, was_waiting);
        self.stats.closed(self.counters, reason);
        // A descriptor is free again: a listener paused on EMFILE may take one more.
        self.resume_accepting(true);
    }

    pub(super) fn close_all(&mut self) {
        let indices: Vec<usize> = self.conns.iter().map(|(i, _)| i).collect();
        for index in indices {
            self.close(index, CloseReason::Shutdown);
        }
    }

    pub(super) fn udp_ready(&mut self) {
        let Some(super::Source::Udp(udp)) = &mut self.source else {
            return;
        };
        match udp.serve(self.limits.read_budget, self.counters) {
            Ok(true) => self.resume.push(super::UDP),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "UDP receive failed"),
        }
    }
}
