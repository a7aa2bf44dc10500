//! Driving one connection on a ring: receive completions feed its lifecycle
//! (`policy::Lifecycle`, with input pushed), output is sent by one gathering send at a time,
//! and after every completion `settle` carries out what the lifecycle says: post a send, keep
//! or cancel the multishot receive, set the timer, close.
//!
//! The connection's own state and the entries it posts are `ring_conn.rs`; this is the worker's
//! side, which pushes them and owns what connections share (the buffer ring, the protocol
//! engine, the timers, the counters).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use bytes::Bytes;
use io_uring::cqueue;
use sockscale_proto::Segment;

use super::ring_conn::{NextSend, UConn};
use super::worker::{conn_token, split_token, UringWorker};
use crate::active_places;
use crate::body::{no_body_file, BodyFile, FileStep, FILE_CHUNK};
use crate::connection::{Close, Connection};
use crate::policy::{Action, CloseReason, Entry, Fed, Written};
use crate::socket_turn::closed_by_error;

impl UringWorker<'_> {
    /// Take in an accepted connection. `counted`: the max-conns slot was taken by whoever
    /// accepted it.
    pub(super) fn admit(&mut self, fd: OwnedFd, counted: bool) {
        let responder = &mut self.kit.responder;
        if let Some(refused) = self.core.on_accepted(counted, self.stats, || responder.refusal()) {
            return self.refuse(fd, refused);
        }
        let session = self.kit.responder.new_session();
        let x = match Connection::pushed(session, self.now, &self.kit.resources, self.counters) {
            Ok(x) => x,
            Err(why) => {
                let responder = &mut self.kit.responder;
                let refused = self.core.on_unserved(why, self.stats, || responder.refusal());
                return self.refuse(fd, refused);
            }
        };
        let generation = self.next_generation();
        let raw = fd.as_raw_fd();
        let index = self.conns.insert(UConn::new(fd, x, generation));
        self.counters.accepted();
        self.stats.enlist(raw);
        let token = conn_token(index, generation);
        if self.core.on_started(token, self.now) == Entry::Waiting {
            if let Some(conn) = self.conns.get_mut(index) {
                active_places::stop(&mut conn.x.lc, raw, self.now, self.stats);
            }
        }
        self.settle(index, generation);
    }

    /// Give places in the active set up to waiting connections when a review is due: the ones
    /// that stop have their receive cancelled, the ones that start get one.
    pub(super) fn review_active_set(&mut self) {
        if !self.core.review_due(self.now) {
            return;
        }
        let conns = &self.conns;
        let between = |token: &u64| conns.get(split_token(*token).0).is_some_and(|c| c.x.lc.is_between_requests());
        let swaps = self.core.review(self.now, between);
        self.stats.rotated(swaps.stop.len());
        for token in swaps.stop {
            let (index, generation) = split_token(token);
            if let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) {
                active_places::stop(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, self.stats);
            }
            self.settle(index, generation);
        }
        for token in swaps.start {
            self.start_reading(token);
        }
    }

    /// A waiting connection was given a place: post its receive.
    fn start_reading(&mut self, token: u64) {
        let (index, generation) = split_token(token);
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else { return };
        active_places::start(&mut conn.x.lc, conn.fd.as_raw_fd(), self.now, self.stats);
        self.settle(index, generation);
    }

    fn arm_recv(&mut self, index: usize) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        let entry = conn.arm_recv(index);
        self.push(entry);
    }

    fn cancel_recv(&mut self, index: usize) {
        let Some(entry) = self.conns.get_mut(index).and_then(|conn| conn.cancel_recv(index)) else { return };
        self.push(entry);
    }

    pub(super) fn on_recv(&mut self, index: usize, generation: u32, result: i32, flags: u32) {
        let buffer = cqueue::buffer_select(flags);
        if buffer.is_some() {
            self.bufs.taken();
        }
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else {
            if let Some(bid) = buffer {
                self.bufs.give_back(bid);
            }
            return;
        };
        if !cqueue::more(flags) {
            conn.recv_ended();
        }
        if conn.closed {
            if let Some(bid) = buffer {
                self.bufs.give_back(bid);
            }
            return self.reclaim(index);
        }
        if result < 0 {
            match -result {
                // Out of ring buffers: wait for some to come back, then receive again.
                libc::ENOBUFS => self.starved.push((index, generation)),
                libc::ECANCELED => {}
                errno => {
                    let reason = conn.x.lc.on_failed(&io::Error::from_raw_os_error(errno));
                    return self.close(index, reason);
                }
            }
            return self.settle(index, generation);
        }
        let Some(bid) = buffer.filter(|_| result > 0) else {
            conn.x.lc.on_eof();
            return self.settle(index, generation);
        };
        let n = result as usize;
        self.counters.bytes_in(n);
        let mut tools = self.kit.tools(self.counters);
        let fed = conn.x.receive(self.bufs.get_mut(bid, n), n, self.now, &mut tools);
        let fed = match fed {
            Ok(fed) => fed,
            Err(close) => {
                self.bufs.give_back(bid);
                return self.end(index, close);
            }
        };
        if fed.counted() {
            self.core.on_input(&conn_token(index, generation), self.now);
        }
        if fed != Fed::Send {
            // Nothing to send, the answer is queued (sealed: the input was copied out of the
            // ring buffer), or the protocol had already ended the exchange (input a multishot
            // receive delivered after it is nobody's): the buffer goes back at once.
            self.bufs.give_back(bid);
            return self.settle(index, generation);
        }
        let data = self.bufs.get(bid, n);
        let segments = self.kit.scratch.segments();
        let whole_input = matches!(segments, [Segment::Input(r)] if r.start == 0 && r.end == n);
        // Echo straight from the ring buffer when nothing is queued ahead of it, and while at
        // most half the ring is held by sends, so slow readers cannot starve receives.
        if whole_input && conn.is_quiet() && self.held_buffers < self.bufs.count() / 2 {
            self.held_buffers += 1;
            let entry = conn.send_ring_buffer(index, &mut self.sends, bid, data);
            self.push(entry);
        } else {
            // Shared responses are queued by reference; input is copied, since the ring buffer
            // goes back to the kernel now (one allocation, only for echo output that cannot
            // be sent straight from the ring buffer).
            if let Err(e) = BodyFile::check_output(&self.kit.scratch, self.kit.resources.body.as_ref()) {
                self.bufs.give_back(bid);
                return self.close(index, closed_by_error(&e));
            }
            for segment in segments {
                match segment {
                    Segment::Input(range) => conn.queue(Bytes::copy_from_slice(&data[range.clone()])),
                    Segment::Shared(bytes) => conn.queue(bytes.clone()),
                    Segment::File(range) => conn.queue_file(range.start, range.end),
                }
            }
            self.bufs.give_back(bid);
        }
        self.settle(index, generation);
    }

    /// Send what is queued, if no send or poll is in flight: post a send of the bytes at the
    /// front, or send the body file at the front now (the lifecycle's flush).
    fn send_queued(&mut self, index: usize) {
        loop {
            let Some(conn) = self.conns.get_mut(index) else { return };
            match conn.send_queued(index, &mut self.sends) {
                NextSend::Nothing => return,
                NextSend::Post(entry) => return self.push(entry),
                NextSend::File => {
                    if !self.send_file(index) {
                        return;
                    }
                }
                NextSend::Failed(e) => return self.close(index, closed_by_error(&e)),
            }
        }
    }

    /// Send the body file range at the front of connection `index`'s queue, a turn of it
    /// ([`BodyFile::turn`]: with `sendfile`, or read and encrypted a chunk at a time under
    /// TLS), until it is all sent (then go on with the queue: true), the socket refuses more (a
    /// poll for writability is posted: false), or a turn ([`FILE_CHUNK`]) is sent (the
    /// lifecycle then has the connection come back after the others: false). io_uring has no
    /// sendfile, and its splice runs every request on an io-wq thread (REQ_F_FORCE_ASYNC), a
    /// thread hop per chunk; so the ring waits for writability and this thread moves the
    /// bytes, as the readiness engines do.
    fn send_file(&mut self, index: usize) -> bool {
        let Some(body) = self.kit.resources.body.clone() else {
            self.close(index, closed_by_error(&no_body_file()));
            return false;
        };
        let Some(conn) = self.conns.get_mut(index) else { return false };
        let fd = conn.fd.as_raw_fd();
        let Some((range, mut seal)) = conn.file_front(&mut self.kit.tls_scratch.file) else { return true };
        let owed = range.owed();
        let sealing = seal.is_some();
        let outcome = body.turn(fd, range, seal.as_mut(), FILE_CHUNK);
        conn.file_turned(owed);
        let turn = match outcome {
            Ok(turn) => turn,
            Err(e) => {
                self.close(index, closed_by_error(&e));
                return false;
            }
        };
        let written = Written {
            bytes: turn.sent,
            blocked: turn.step == FileStep::Blocked,
            yielded: turn.step == FileStep::Turn,
            sealed: if sealing { turn.file } else { 0 },
        };
        self.counters.written(&written);
        conn.x.lc.on_written(self.now, written);
        match turn.step {
            FileStep::Done => true,
            FileStep::Turn => false,
            FileStep::Blocked => {
                let entry = conn.poll_writable(index);
                self.push(entry);
                false
            }
        }
    }

    /// Give each connection whose body file turn ended its next turn.
    pub(super) fn take_file_turns(&mut self) {
        for (index, generation) in std::mem::take(&mut self.file_turns) {
            if self.conns.get(index).is_some_and(|c| c.generation == generation && !c.closed) {
                self.settle(index, generation);
            }
        }
    }

    /// The socket may take more of the body file (or has failed, which the next sendfile
    /// reports).
    pub(super) fn on_poll(&mut self, index: usize, generation: u32) {
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else { return };
        conn.poll_done();
        if conn.closed {
            return self.reclaim(index);
        }
        self.settle(index, generation);
    }

    pub(super) fn on_send(&mut self, index: usize, generation: u32, result: i32) {
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else { return };
        let Some(sent) = conn.send_done() else { return };
        let written = usize::try_from(result).unwrap_or(0);
        conn.x.lc.on_written(self.now, Written { bytes: written, blocked: written < sent.len(), ..Written::default() });
        self.counters.bytes_out(written);
        // Whatever the socket did not take goes back to the front of the queue, in order.
        if result >= 0 && written < sent.len() && !conn.closed {
            let ring_data = sent.ring_buffer().map(|(bid, len)| self.bufs.get(bid, len));
            conn.requeue_unsent(&sent, written, ring_data);
        }
        if let Some((bid, _)) = sent.ring_buffer() {
            self.held_buffers -= 1;
            self.bufs.give_back(bid);
        }
        // The box serves a later send: at most one spare per connection is kept.
        self.sends.give(sent, self.conns.len());
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.closed {
            return self.reclaim(index);
        }
        if result < 0 {
            return self.close(index, closed_by_error(&io::Error::from_raw_os_error(-result)));
        }
        self.settle(index, generation);
    }

    /// After any completion: carry out what the connection's lifecycle says, up to its wait —
    /// post a send, close, set the timer, keep or cancel the multishot receive (a multishot
    /// receive cannot be told to wait: a connection that may not read has it cancelled, and one
    /// allowed to read again gets a new one).
    pub(super) fn settle(&mut self, index: usize, generation: u32) {
        loop {
            let limits = &self.limits;
            let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation && !c.closed) else {
                return;
            };
            let wait = match conn.x.poll(self.now, &self.kit.responder, limits) {
                Action::Flush => {
                    self.send_queued(index);
                    continue;
                }
                Action::Close(reason) => {
                    let close = conn.x.close(reason);
                    return self.end(index, close);
                }
                Action::Transmit => {
                    let mut tools = self.kit.tools(self.counters);
                    match conn.x.transmit(self.now, &mut tools) {
                        Ok(Fed::Send) => {
                            for segment in self.kit.scratch.segments() {
                                match segment {
                                    Segment::Shared(bytes) => conn.queue(bytes.clone()),
                                    Segment::File(range) => conn.queue_file(range.start, range.end),
                                    // Transmitted output names no input.
                                    Segment::Input(_) => {}
                                }
                            }
                        }
                        // Sealed into the queue, or nothing to send.
                        Ok(_) => {}
                        Err(close) => return self.end(index, close),
                    }
                    continue;
                }
                Action::Wait(wait) => wait,
                // A pushed lifecycle never asks for a read.
                Action::Read { .. } => continue,
            };
            let token = conn_token(index, generation);
            self.timers.schedule(&mut conn.timer_at, wait.wake_at, token);
            let (armed, cancelling) = (conn.recv_armed, conn.recv_cancelling);
            if wait.read && !armed {
                if self.bufs.available() > 0 {
                    self.arm_recv(index);
                } else if !self.starved.contains(&(index, generation)) {
                    // The ring has no buffer: receive again when some come back.
                    self.starved.push((index, generation));
                }
            } else if !wait.read && armed && !cancelling {
                self.cancel_recv(index);
            }
            if wait.resume && !self.file_turns.contains(&(index, generation)) {
                // A body file's turn was sent: the others first, then this one next turn.
                self.file_turns.push((index, generation));
            }
            return;
        }
    }

    /// The connection's timer came due: close it if a deadline expired (the protocol's answer
    /// among the close's last bytes), or settle, which re-arms it.
    pub(super) fn on_deadline(&mut self, index: usize, generation: u32) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        let mut tools = self.kit.tools(self.counters);
        match conn.x.on_timer(self.now, &mut tools, &self.limits) {
            Some(close) => self.end(index, close),
            None => self.settle(index, generation),
        }
    }

    /// Close the connection for `reason`, with the last bytes its connection owes the client.
    pub(super) fn close(&mut self, index: usize, reason: CloseReason) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.closed {
            return;
        }
        let close = conn.x.close(reason);
        self.end(index, close);
    }

    /// Carry out `close`: its last bytes go behind the output only if none is queued or in
    /// flight (one attempt, `sockscale_sys::end_socket`, as every engine ends a socket), then
    /// count the connection closed now and end its operations; its slot is freed when the
    /// last one completes (`reclaim`).
    pub(super) fn end(&mut self, index: usize, close: Close) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.closed {
            return;
        }
        let reason = close.reason;
        let last = close.last_behind(conn.pending().is_empty());
        let sent = sockscale_sys::end_socket(conn.fd.as_raw_fd(), last, close.ending);
        self.counters.bytes_out(sent);
        conn.closed = true;
        conn.clear_queue();
        // Before anything could close the descriptor: a shed must not reach a reused one.
        self.stats.delist(conn.fd.as_raw_fd());
        let (token, was_waiting) = (conn_token(index, conn.generation), conn.x.lc.is_waiting());
        // Wakes the receive (EOF) and fails a stuck send, so their completions come soon.
        let _ = sockscale_sys::shutdown_both(conn.fd.as_raw_fd());
        let cancel = conn.recv_armed && !conn.recv_cancelling;
        self.stats.closed(self.counters, reason);
        if let Some(group) = &self.group {
            group.release();
        }
        self.resume_accepting(true);
        if cancel {
            self.cancel_recv(index);
        }
        active_places::closed(was_waiting, self.stats);
        // No set while draining (the drain ended it), so a close never opens another here.
        if let Some(next) = self.core.on_closed(&token, self.now) {
            self.start_reading(next);
        }
        self.reclaim(index);
    }

    /// Free a closed connection's slot once nothing is in flight on it.
    pub(super) fn reclaim(&mut self, index: usize) {
        if self.conns.get(index).is_some_and(|c| c.closed && c.ops == 0) {
            drop(self.conns.remove(index));
            self.sends.trim(self.conns.len());
        }
    }
}
