//! The byte path of one connection on a ring: receive completions feed the protocol, output is
//! sent by one gathering `sendmsg` at a time, and the same policies as every model decide when
//! to stop reading and when to close.
//!
//! A connection has at most one send in flight: two sends on one socket could be executed out
//! of order by the kernel, and a short send needs the rest sent before anything queued after
//! it. Output produced while a send is in flight is queued; `--max-pending-send` bytes or
//! `--max-outstanding-sends` queued sends (the seed's completion-port server capped them at
//! 200) pause reading, by cancelling the multishot receive until the queue drains.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use bytes::{Buf, Bytes};
use io_uring::{cqueue, opcode, types};
use sockscale_proto::{Closing, Segment, Session, Verdict};

use super::worker::{pack, Op, UringWorker, BUFFER_GROUP};
use crate::conn::{finished_reason, Clocks};
use crate::stats::CloseReason;
use crate::sys;

const IOV_BATCH: usize = 64;

/// A send in flight: it owns what it sends until its completion.
pub(super) struct InFlight {
    msg: libc::msghdr,
    iov: [libc::iovec; IOV_BATCH],
    chunks: Vec<Bytes>,
    /// An echo sent straight from this ring buffer, given back on completion.
    ring_buffer: Option<(u16, usize)>,
    len: usize,
}

pub(super) struct UConn {
    pub(super) fd: OwnedFd,
    pub(super) session: Session,
    pub(super) generation: u32,
    queued: VecDeque<Bytes>,
    queued_len: usize,
    sending: Option<Box<InFlight>>,
    recv_armed: bool,
    recv_cancelling: bool,
    /// Operations in flight on this connection; its slot (and descriptor) lives until 0.
    pub(super) ops: u32,
    clocks: Clocks,
    pub(super) timer_at: Option<Instant>,
    closing: Option<CloseReason>,
    /// Closed as far as the policies are concerned; waiting for its operations to finish.
    pub(super) closed: bool,
    read_eof: bool,
}

impl UConn {
    fn pending(&self) -> usize {
        self.queued_len + self.sending.as_ref().map_or(0, |s| s.len)
    }
}

impl UringWorker<'_> {
    /// Take in an accepted connection. `counted`: the max-conns slot was taken by whoever
    /// accepted it.
    pub(super) fn admit(&mut self, fd: OwnedFd, counted: bool) {
        if !counted && !self.stats.try_open(self.cfg.max_conns) {
            return self.refuse(fd, "--max-conns reached");
        }
        let generation = self.next_generation();
        let session = self.engine.new_session();
        let entry = self.conns.vacant_entry();
        let index = entry.key();
        entry.insert(UConn {
            fd,
            session,
            generation,
            queued: VecDeque::new(),
            queued_len: 0,
            sending: None,
            recv_armed: false,
            recv_cancelling: false,
            ops: 0,
            clocks: Clocks::new(self.now),
            timer_at: None,
            closing: None,
            closed: false,
            read_eof: false,
        });
        self.counters.accepted();
        self.settle(index, generation, false);
    }

    fn arm_recv(&mut self, index: usize) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        let entry = opcode::RecvMulti::new(types::Fd(conn.fd.as_raw_fd()), BUFFER_GROUP).build().user_data(pack(
            Op::Recv,
            index,
            conn.generation,
        ));
        conn.recv_armed = true;
        conn.ops += 1;
        self.push(entry);
    }

    fn cancel_recv(&mut self, index: usize) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        if !conn.recv_armed || conn.recv_cancelling {
            return;
        }
        conn.recv_cancelling = true;
        conn.ops += 1;
        let target = pack(Op::Recv, index, conn.generation);
        let entry = opcode::AsyncCancel::new(target).build().user_data(pack(Op::Cancel, index, conn.generation));
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
            conn.recv_armed = false;
            conn.recv_cancelling = false;
            conn.ops -= 1;
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
                libc::ECONNRESET | libc::EPIPE => return self.close(index, CloseReason::Peer),
                errno => {
                    tracing::debug!(error = %io::Error::from_raw_os_error(errno), "receive failed");
                    return self.close(index, CloseReason::Error);
                }
            }
            return self.settle(index, generation, false);
        }
        let Some(bid) = buffer.filter(|_| result > 0) else {
            conn.read_eof = true;
            return self.settle(index, generation, false);
        };
        let n = result as usize;
        conn.clocks.touch(self.now);
        self.counters.bytes_in(n);
        if conn.closing.is_some() {
            // The protocol has ended the exchange; a multishot receive may still deliver what
            // the client sent after it, which nobody will read.
            self.bufs.give_back(bid);
            return self.settle(index, generation, false);
        }
        let data = self.bufs.get(bid, n);
        self.scratch.clear();
        let verdict = self.engine.on_input(&mut conn.session, data, self.now, &mut self.scratch);
        if let Verdict::Close(closing) = verdict {
            conn.closing = Some(match closing {
                Closing::Done => CloseReason::Done,
                Closing::BadRequest => CloseReason::Protocol,
                Closing::HeaderTimeout => CloseReason::HeaderTimeout,
            });
        }
        let segments = self.scratch.segments();
        let whole_input = matches!(segments, [Segment::Input(r)] if r.start == 0 && r.end == n);
        // Echo straight from the ring buffer when nothing is queued ahead of it, and while at
        // most half the ring is held by sends, so slow readers cannot starve receives.
        if whole_input && conn.sending.is_none() && conn.queued.is_empty() && self.held_buffers < self.bufs.count() / 2
        {
            self.held_buffers += 1;
            self.start_send(index, Vec::new(), Some((bid, n)));
        } else {
            let mut copies = Vec::with_capacity(segments.len());
            for segment in segments {
                copies.push(match segment {
                    Segment::Input(range) => Bytes::copy_from_slice(&data[range.clone()]),
                    Segment::Shared(bytes) => bytes.clone(),
                });
            }
            self.bufs.give_back(bid);
            let Some(conn) = self.conns.get_mut(index) else { return };
            for chunk in copies {
                conn.queued_len += chunk.len();
                conn.queued.push_back(chunk);
            }
            self.send_queued(index);
        }
        self.settle(index, generation, false);
    }

    /// Send what is queued, if no send is in flight.
    fn send_queued(&mut self, index: usize) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.sending.is_some() || conn.queued.is_empty() || conn.closed {
            return;
        }
        let take = conn.queued.len().min(IOV_BATCH);
        let chunks: Vec<Bytes> = conn.queued.drain(..take).collect();
        conn.queued_len -= chunks.iter().map(Bytes::len).sum::<usize>();
        self.start_send(index, chunks, None);
    }

    fn start_send(&mut self, index: usize, chunks: Vec<Bytes>, ring_buffer: Option<(u16, usize)>) {
        let held = ring_buffer.map(|(bid, len)| self.bufs.get(bid, len).as_ptr_range());
        let Some(conn) = self.conns.get_mut(index) else { return };
        // SAFETY: msghdr and iovec are plain old data; zeroed is "no name, no control, empty".
        let mut send: Box<InFlight> = Box::new(InFlight {
            msg: unsafe { std::mem::zeroed() },
            iov: unsafe { std::mem::zeroed() },
            chunks,
            ring_buffer,
            len: 0,
        });
        let mut count = 0;
        if let Some(range) = held {
            send.iov[0] = libc::iovec {
                iov_base: range.start as *mut libc::c_void,
                iov_len: range.end as usize - range.start as usize,
            };
            count = 1;
        }
        for (slot, chunk) in send.iov.iter_mut().zip(&send.chunks) {
            *slot = libc::iovec { iov_base: chunk.as_ptr() as *mut libc::c_void, iov_len: chunk.len() };
            count += 1;
        }
        send.len = send.iov[..count].iter().map(|v| v.iov_len).sum();
        send.msg.msg_iov = send.iov.as_mut_ptr();
        send.msg.msg_iovlen = count as _;
        let fd = types::Fd(conn.fd.as_raw_fd());
        // One buffer (an echo, one response) goes as a plain send, which skips importing a
        // msghdr and iovec array; several are gathered with sendmsg.
        let entry = if count == 1 {
            opcode::Send::new(fd, send.iov[0].iov_base as *const u8, send.len as u32).flags(libc::MSG_NOSIGNAL).build()
        } else {
            opcode::SendMsg::new(fd, &send.msg).flags(libc::MSG_NOSIGNAL as u32).build()
        }
        .user_data(pack(Op::Send, index, conn.generation));
        conn.sending = Some(send);
        conn.ops += 1;
        self.push(entry);
    }

    pub(super) fn on_send(&mut self, index: usize, generation: u32, result: i32) {
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else { return };
        conn.ops -= 1;
        let Some(sent) = conn.sending.take() else { return };
        let written = usize::try_from(result).unwrap_or(0);
        if result > 0 {
            conn.clocks.touch(self.now);
            self.counters.bytes_out(written);
        }
        // Whatever the socket did not take goes back to the front of the queue, in order.
        if result >= 0 && written < sent.len && !conn.closed {
            let mut skip = written;
            let mut rest: Vec<Bytes> = Vec::new();
            if let Some((bid, len)) = sent.ring_buffer {
                let data = self.bufs.get(bid, len);
                if skip < data.len() {
                    rest.push(Bytes::copy_from_slice(&data[skip..]));
                }
                skip = skip.saturating_sub(len);
            }
            for mut chunk in sent.chunks.iter().cloned() {
                if skip >= chunk.len() {
                    skip -= chunk.len();
                    continue;
                }
                chunk.advance(skip);
                skip = 0;
                rest.push(chunk);
            }
            for chunk in rest.into_iter().rev() {
                conn.queued_len += chunk.len();
                conn.queued.push_front(chunk);
            }
        }
        if let Some((bid, _)) = sent.ring_buffer {
            self.held_buffers -= 1;
            self.bufs.give_back(bid);
        }
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.closed {
            return self.reclaim(index);
        }
        if result < 0 {
            let reason = match -result {
                libc::EPIPE | libc::ECONNRESET => CloseReason::Peer,
                _ => CloseReason::Error,
            };
            return self.close(index, reason);
        }
        self.send_queued(index);
        self.settle(index, generation, written > 0);
    }

    /// After any event: close if finished, update the policy clocks and the timer, and start
    /// or stop receiving as the policies allow.
    pub(super) fn settle(&mut self, index: usize, generation: u32, progressed: bool) {
        let draining = self.is_draining();
        let (max_pending, max_sends) = (self.cfg.max_pending_send, self.cfg.max_outstanding_sends);
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation && !c.closed) else { return };
        let pending = conn.pending();
        if pending == 0 {
            let between_requests = conn.session.is_between_requests();
            let finished = finished_reason(conn.closing, conn.read_eof, draining, between_requests);
            if let Some(reason) = finished {
                return self.close(index, reason);
            }
        }
        let flooded = pending > max_pending || conn.queued.len() > max_sends;
        conn.clocks.account(self.now, pending, flooded, progressed);
        let want_recv =
            !(conn.read_eof || conn.closing.is_some() || flooded || draining && conn.session.is_between_requests());
        let protocol = self.engine.deadline(&conn.session);
        let deadline = conn.clocks.deadline(self.cfg.idle_timeout, self.cfg.send_timeout, protocol);
        let token = (u64::from(generation) << 32) | index as u64;
        self.timers.schedule(&mut conn.timer_at, deadline, token);
        let (armed, cancelling) = (conn.recv_armed, conn.recv_cancelling);
        if want_recv && !armed {
            if self.bufs.available() > 0 {
                self.arm_recv(index);
            } else if !self.starved.contains(&(index, generation)) {
                self.starved.push((index, generation));
            }
        } else if !want_recv && armed && !cancelling {
            self.cancel_recv(index);
        }
    }

    pub(super) fn on_deadline(&mut self, index: usize, generation: u32) {
        let now = self.now;
        let send = self.cfg.send_timeout;
        let idle = self.cfg.idle_timeout;
        let Some(conn) = self.conns.get_mut(index) else { return };
        let protocol_due = self.engine.deadline(&conn.session).is_some_and(|at| at <= now);
        let reason = conn.clocks.expired(now, idle, send, protocol_due);
        if reason == Some(CloseReason::HeaderTimeout) {
            self.scratch.clear();
            self.engine.on_timeout(&mut conn.session, now, &mut self.scratch);
            // One attempt to tell the client why, outside the ring: the connection closes now.
            if let Some(Segment::Shared(bytes)) = self.scratch.segments().first() {
                if let Ok(n) = sys::send(conn.fd.as_raw_fd(), bytes) {
                    self.counters.bytes_out(n);
                }
            }
        }
        match reason {
            Some(reason) => self.close(index, reason),
            None => self.settle(index, generation, false),
        }
    }

    /// Count the connection closed now, and end its operations; its slot is freed when the
    /// last one completes (`reclaim`).
    pub(super) fn close(&mut self, index: usize, reason: CloseReason) {
        let Some(conn) = self.conns.get_mut(index) else { return };
        if conn.closed {
            return;
        }
        conn.closed = true;
        conn.queued.clear();
        conn.queued_len = 0;
        // Wakes the receive (EOF) and fails a stuck send, so their completions come soon.
        let _ = sys::syscall!(shutdown(conn.fd.as_raw_fd(), libc::SHUT_RDWR));
        let cancel = conn.recv_armed && !conn.recv_cancelling;
        self.stats.close();
        self.counters.closed(reason);
        if let Some(group) = &self.group {
            group.release();
        }
        self.resume_accepting();
        if cancel {
            self.cancel_recv(index);
        }
        self.reclaim(index);
    }

    /// Free a closed connection's slot once nothing is in flight on it.
    pub(super) fn reclaim(&mut self, index: usize) {
        if self.conns.get(index).is_some_and(|c| c.closed && c.ops == 0) {
            drop(self.conns.remove(index));
        }
    }
}
