//! Driving one connection on a readiness selector: its connection (`connection::Connection`,
//! carried out by `conn`'s `Connection::turn` and `conn::end`) says what to do, how to wait and
//! how to close; this file only turns the wait into a timer, a registration and a place on the
//! resume list.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use sockscale_sys::{Interest, Selector};

use super::{split, Worker};
use crate::policy::{closed_by_error, CloseReason, Wait};
use crate::socket_turn::{self, Close, RawSocket, TurnIo, Turned};
use crate::udp::{self, UdpTurn};

impl<S: Selector> Worker<'_, S> {
    /// Take a turn on a connection: carry out what its lifecycle asks (flush, read within the
    /// budget, answer), then wait as it says.
    pub(super) fn drive(&mut self, token: u64) {
        let (index, generation) = split(token);
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        if conn.generation != generation {
            return;
        }
        let mut socket = RawSocket(conn.fd.as_raw_fd());
        let mut io = TurnIo { kit: &mut self.kit, pool: self.pool, counters: self.counters, limits: &self.limits };
        match conn.x.turn(&mut socket, &mut io, self.now) {
            Turned::Close(close) => self.end(index, close),
            Turned::Wait { wait, input } => {
                if input {
                    self.core.on_input(&token, self.now);
                }
                self.wait_for(token, wait);
            }
        }
    }

    /// Carry out a lifecycle's wait: its timer, what the selector watches, and whether to come
    /// back without an event.
    fn wait_for(&mut self, token: u64, wait: Wait) {
        let (index, _) = split(token);
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        if wait.resume {
            self.resume.push(token);
        }
        self.timers.schedule(&mut conn.timer_at, wait.wake_at, token);
        let wanted = if self.edge {
            // An edge-triggered selector watches for input always (the lifecycle remembers what
            // it has not consumed), and for room only from the first time output was refused:
            // a new connection registered for writable would cost a wake-up for nothing.
            Interest { read: true, write: conn.registered.write || wait.write }
        } else {
            // Level-triggered: exactly what the connection may do now, or waiting would spin.
            Interest { read: wait.read, write: wait.write }
        };
        if wanted != conn.registered {
            if let Err(e) = self.selector.reregister(conn.fd.as_raw_fd(), token, wanted) {
                return self.close_on_error(index, e);
            }
            conn.registered = wanted;
        }
    }

    /// The connection's timer came due: close it if a deadline expired (the protocol's answer
    /// among its last bytes), or take a turn, which re-arms it.
    pub(super) fn on_deadline(&mut self, token: u64) {
        let (index, _) = split(token);
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        match conn.x.expire(&mut self.kit, self.counters, self.now, &self.limits) {
            Some(close) => self.end(index, close),
            None => self.drive(token),
        }
    }

    fn close_on_error(&mut self, index: usize, err: io::Error) {
        self.close(index, closed_by_error(&err));
    }

    /// Close a connection for `reason`, with the last bytes its connection owes the client.
    pub(super) fn close(&mut self, index: usize, reason: CloseReason) {
        let Some(conn) = self.conns.get_mut(index) else {
            return;
        };
        let close = conn.x.close(reason);
        self.end(index, close);
    }

    /// Carry out a close (`conn::end`), then forget the connection.
    pub(super) fn end(&mut self, index: usize, close: Close) {
        let Some(mut conn) = self.conns.try_remove(index) else {
            return;
        };
        let reason = close.reason;
        socket_turn::end(conn.fd.as_raw_fd(), &mut conn.x, &close, &mut self.kit.tls_scratch, self.counters);
        self.stats.delist(conn.fd.as_raw_fd());
        // Level-triggered selectors keep descriptor tables; epoll forgets a closed descriptor
        // by itself, so it is spared the syscall.
        if !self.edge {
            let _ = self.selector.deregister(conn.fd.as_raw_fd());
        }
        let (tok, was_waiting) = (super::token(index, conn.generation), conn.x.lc.is_waiting());
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
        let Some(udp) = &mut self.udp else {
            return;
        };
        match udp.serve(self.limits.read_budget, self.counters) {
            UdpTurn::Spent => self.resume.push(super::UDP),
            UdpTurn::Drained { wake_at } => {
                if let Some(at) = wake_at {
                    self.timers.schedule(&mut self.udp_timer_at, at, super::UDP);
                }
            }
            // Looked at again after the pause, from the timers: the worker may serve
            // connections too (`--http3`), which a sleep would hold up.
            UdpTurn::Failed => {
                self.timers.schedule(&mut self.udp_timer_at, Instant::now() + udp::ERROR_PAUSE, super::UDP);
            }
        }
        // In a drain, the socket closes once its endpoint has nothing left in flight.
        if self.core.is_draining() && udp.drained() {
            let _ = self.selector.deregister(udp.fd());
            self.udp = None;
        }
    }
}
