//! Driving one connection: flush, read within the budget, feed the protocol, write, and then
//! settle what the connection waits for next.

use std::io;
use std::os::fd::AsRawFd;

use sockscale_proto::{Closing, Verdict};
use sockscale_sys::{self as sys, Interest, Selector};

use super::{split, Worker};
use crate::stats::CloseReason;

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

        if conn.writable && !conn.out.is_empty() {
            match conn.out.flush(fd) {
                Ok(w) => {
                    conn.writable = !w.blocked;
                    if w.bytes > 0 {
                        progressed = true;
                        conn.clocks.touch(self.now);
                        self.counters.bytes_out(w.bytes);
                    }
                }
                Err(e) => return self.close_on_error(index, e),
            }
        }

        let draining = self.drain_deadline.is_some();
        let may_read = conn.readable
            && !conn.read_eof
            && conn.closing.is_none()
            && conn.out.len() <= self.cfg.max_pending_send
            && !(draining && conn.session.is_between_requests());
        if may_read {
            let Some(mut buf) = self.pool.take(self.counters) else {
                // The pool is shared and empty: try again shortly rather than spin.
                self.resume.push(token);
                return;
            };
            let mut budget = self.cfg.read_budget;
            loop {
                let want = budget.min(buf.len());
                match sys::recv(fd, &mut buf[..want]) {
                    Ok(0) => {
                        conn.read_eof = true;
                        conn.readable = false;
                        break;
                    }
                    Ok(n) => {
                        conn.clocks.touch(self.now);
                        budget -= n;
                        self.counters.bytes_in(n);
                        self.scratch.clear();
                        let verdict = self.engine.on_input(&mut conn.session, &buf[..n], self.now, &mut self.scratch);
                        if !self.scratch.is_empty() {
                            match conn.out.send(fd, &self.scratch, &buf[..n]) {
                                Ok(w) => {
                                    if w.bytes > 0 {
                                        progressed = true;
                                        self.counters.bytes_out(w.bytes);
                                    }
                                    conn.writable = !w.blocked;
                                }
                                Err(e) => {
                                    drop(buf);
                                    return self.close_on_error(index, e);
                                }
                            }
                        }
                        if let Verdict::Close(closing) = verdict {
                            conn.closing = Some(match closing {
                                Closing::Done => CloseReason::Done,
                                Closing::BadRequest => CloseReason::Protocol,
                                Closing::HeaderTimeout => CloseReason::HeaderTimeout,
                            });
                            break;
                        }
                        if conn.out.len() > self.cfg.max_pending_send {
                            break;
                        }
                        if budget == 0 {
                            // Fairness: yield to the other connections, come back next turn.
                            self.resume.push(token);
                            break;
                        }
                        if n < want && !conn.hangup {
                            // A short read emptied the socket's queue; any byte arriving later
                            // raises a new event, so there is no need to wait for EAGAIN. Not
                            // after a hang-up: its FIN or reset sits behind the data just read
                            // and raises no new event (see `Conn::hangup`).
                            conn.readable = false;
                            break;
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
        let draining = self.drain_deadline.is_some();
        if let Some(reason) = conn.finished(draining) {
            return self.close(index, reason);
        }
        let was_over = conn.clocks.is_over();
        conn.account_output(self.now, self.cfg.max_pending_send, progressed);
        if was_over && !conn.clocks.is_over() && conn.readable {
            // Back under the limit with input waiting: read it without waiting for an edge
            // that already happened.
            self.resume.push(token);
        }
        let protocol_deadline = self.engine.deadline(&conn.session);
        let deadline = conn.clocks.deadline(self.cfg.idle_timeout, self.cfg.send_timeout, protocol_deadline);
        self.timers.schedule(&mut conn.timer_at, deadline, token);

        if !self.edge {
            let wanted = Interest {
                read: !conn.read_eof
                    && conn.closing.is_none()
                    && conn.out.len() <= self.cfg.max_pending_send
                    && !(draining && conn.session.is_between_requests()),
                write: !conn.out.is_empty(),
            };
            if wanted != conn.registered {
                if let Err(e) = self.selector.reregister(conn.fd.as_raw_fd(), token, wanted) {
                    return self.close_on_error(index, e);
                }
                conn.registered = wanted;
            }
        }
    }

    /// The connection's timer came due: act on whichever policy expired, or re-arm.
    pub(super) fn on_deadline(&mut self, token: u64) {
        let (index, _) = split(token);
        let now = self.now;
        let cfg = self.cfg;
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        let protocol_due = self.engine.deadline(&conn.session).is_some_and(|at| at <= now);
        let reason = conn.clocks.expired(now, cfg.idle_timeout, cfg.send_timeout, protocol_due);
        if reason == Some(CloseReason::HeaderTimeout) {
            self.scratch.clear();
            self.engine.on_timeout(&mut conn.session, now, &mut self.scratch);
            // One attempt to tell the client why (the 408); the connection closes either way.
            if let Ok(written) = conn.out.send(conn.fd.as_raw_fd(), &self.scratch, &[]) {
                self.counters.bytes_out(written.bytes);
            }
        }
        match reason {
            Some(reason) => self.close(index, reason),
            None => self.settle(token, false),
        }
    }

    fn close_on_error(&mut self, index: usize, err: io::Error) {
        let reason = match err.raw_os_error() {
            Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => CloseReason::Peer,
            _ => CloseReason::Error,
        };
        if reason == CloseReason::Error {
            tracing::debug!(error = %err, "closing a connection after a socket error");
        }
        self.close(index, reason);
    }

    pub(super) fn close(&mut self, index: usize, reason: CloseReason) {
        let Some(conn) = self.conns.try_remove(index) else {
            return;
        };
        // Level-triggered selectors keep descriptor tables; epoll forgets a closed descriptor
        // by itself, so it is spared the syscall.
        if !self.edge {
            let _ = self.selector.deregister(conn.fd.as_raw_fd());
        }
        drop(conn);
        self.stats.close();
        self.counters.closed(reason);
        // A descriptor is free again: a listener paused on EMFILE may take one more.
        self.resume_accepting();
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
        match udp.serve(self.cfg.read_budget, self.counters) {
            Ok(true) => self.resume.push(super::UDP),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "UDP receive failed"),
        }
    }
}
