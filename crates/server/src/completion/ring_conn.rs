//! One connection on a ring: its state between completions, and the operations it posts.
//!
//! A connection has at most one send in flight: two sends on one socket could be executed out
//! of order by the kernel, and a short send needs the rest sent before anything queued after
//! it. Output produced while a send is in flight is queued; `--max-pending-send` bytes or
//! `--max-outstanding-sends` queued sends (the seed's completion-port server capped them at
//! 200) pause reading, by cancelling the multishot receive until the queue drains.
//!
//! Nothing here knows the worker: the methods build the submission entries and keep the
//! connection's own accounting (`ops`, `recv_armed`, the send in flight); the worker
//! (`drive.rs`) pushes the entries and carries out what the connection's lifecycle says.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use bytes::{Buf, Bytes};
use io_uring::{opcode, squeue, types};
use sockscale_proto::Session;

use super::ops::{pack, Op, BUFFER_GROUP};
use crate::body::{no_session, seal_behind, FileRange, FileScratch, Seal};
use crate::connection::{Connection, Outbox};
use crate::policy::{Delivery, Pending, Refusal};
use crate::resources::Resources;
use crate::stats::Counters;

const IOV_BATCH: usize = 64;

/// A send in flight: it owns what it sends until its completion. Boxed, so the msghdr and
/// iovecs the kernel reads stay put while the connection's slab slot may move; after its
/// completion a box goes back to the worker's [`SpareSends`] and serves the next send, so
/// sending allocates nothing once warmed up.
pub(super) struct InFlight {
    msg: libc::msghdr,
    iov: [libc::iovec; IOV_BATCH],
    chunks: Vec<Bytes>,
    /// An echo sent straight from this ring buffer, given back on completion.
    ring_buffer: Option<(u16, usize)>,
    len: usize,
    /// A body file follows: send with `MSG_MORE`, so the head goes out with it.
    more: bool,
}

impl InFlight {
    fn new() -> Box<Self> {
        Box::new(InFlight {
            // SAFETY: msghdr and iovec are plain old data; zeroed is "no name, no control,
            // empty".
            msg: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            iov: unsafe { std::mem::zeroed() },
            chunks: Vec::new(),
            ring_buffer: None,
            len: 0,
            more: false,
        })
    }

    /// The ring buffer this send holds: (buffer id, bytes).
    pub(super) fn ring_buffer(&self) -> Option<(u16, usize)> {
        self.ring_buffer
    }

    /// Bytes this send asked the socket to take.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// The worker's boxes for sends, kept after their completion (with their chunk vectors'
/// capacity) for the next sends. Kept by the worker rather than by each connection: a box is
/// over 1 KiB, which an idle connection should not pin. At most one spare per connection is
/// kept, so after warming up a worker allocates no box again while its connections stay, and
/// holds none once they are gone.
#[derive(Default)]
pub(super) struct SpareSends {
    #[allow(clippy::vec_box)] // the boxes themselves are what is reused
    boxes: Vec<Box<InFlight>>,
}

impl SpareSends {
    /// A cleared send: a spare one, or a new one if none is spare.
    fn take(&mut self) -> Box<InFlight> {
        self.boxes.pop().unwrap_or_else(InFlight::new)
    }

    /// Keep a completed send for reuse, unless `keep` are spare already. What it held (shared
    /// responses, copies) is released now either way.
    pub(super) fn give(&mut self, mut send: Box<InFlight>, keep: usize) {
        send.chunks.clear();
        send.ring_buffer = None;
        send.len = 0;
        send.more = false;
        if self.boxes.len() < keep {
            self.boxes.push(send);
        }
    }

    /// Keep at most `keep` spare.
    pub(super) fn trim(&mut self, keep: usize) {
        self.boxes.truncate(keep);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.boxes.len()
    }
}

/// Output queued behind the send in flight.
#[derive(Debug)]
enum Queued {
    Bytes(Bytes),
    /// A range of the body file, sent by the worker (`drive.rs`): with `sendfile`, or read and
    /// encrypted a chunk at a time when the connection speaks TLS.
    File(FileRange),
    /// TLS plaintext behind a file range, encrypted when it reaches the front.
    Clear(Bytes),
}

/// What a connection's queue asks for next.
pub(super) enum NextSend {
    /// Nothing: a send or a writability poll is in flight, nothing is queued, or it closed.
    Nothing,
    /// Post this send.
    Post(squeue::Entry),
    /// Send the body file range at the front of the queue now.
    File,
    /// Output could not be sealed for TLS: close.
    Failed(std::io::Error),
}

/// A connection's output on the ring: queued behind the one send in flight, and that send.
#[derive(Default)]
pub(super) struct SendQueue {
    queued: VecDeque<Queued>,
    /// Bytes queued in memory.
    queued_len: usize,
    /// Bytes of the body file queued (with a sealed chunk's records held), and the ranges they
    /// are in.
    queued_file: u64,
    queued_file_ranges: usize,
    /// A poll for writability is in flight: the socket refused the body file.
    polling: bool,
    sending: Option<Box<InFlight>>,
}

impl Outbox for SendQueue {
    /// Output not yet taken by the socket: bytes queued or in flight, and sends queued behind
    /// the one in flight (`--max-outstanding-sends`).
    fn pending(&self) -> Pending {
        Pending {
            bytes: self.queued_len + self.sending.as_ref().map_or(0, |s| s.len),
            // A body file range is sent with sendfile, not as a ring send.
            sends: self.queued.len() - self.queued_file_ranges,
            file_bytes: self.queued_file,
        }
    }

    fn push_records(&mut self, records: Bytes) {
        self.queued_len += records.len();
        self.queued.push_back(Queued::Bytes(records));
    }

    fn push_sealed_file(&mut self, _body: &std::sync::Arc<crate::body::BodyFile>, range: std::ops::Range<u64>) {
        self.push_file(range.start, range.end);
    }

    fn push_clear(&mut self, plain: Bytes) {
        self.queued_len += plain.len();
        self.queued.push_back(Queued::Clear(plain));
    }
}

impl SendQueue {
    /// Queue bytes `at..end` of the body file behind what is queued.
    fn push_file(&mut self, at: u64, end: u64) {
        if at < end {
            self.queued_file += end - at;
            self.queued_file_ranges += 1;
            self.queued.push_back(Queued::File(FileRange::new(at, end)));
        }
    }
}

pub(super) struct UConn {
    pub(super) fd: OwnedFd,
    /// The connection (lifecycle, TLS, timers), with input pushed by the multishot receive, and
    /// its output on the ring.
    pub(super) x: Connection<SendQueue>,
    pub(super) generation: u32,
    pub(super) recv_armed: bool,
    pub(super) recv_cancelling: bool,
    /// Operations in flight on this connection; its slot (and descriptor) lives until 0.
    pub(super) ops: u32,
    pub(super) timer_at: Option<Instant>,
    /// Closed as far as the policies are concerned; waiting for its operations to finish.
    pub(super) closed: bool,
}

impl Connection<SendQueue> {
    /// A connection accepted at `now`, its input pushed by the multishot receive and its
    /// output on the ring, in TLS when the server speaks it; or the refusal to carry out
    /// instead (see [`Connection::open`]).
    pub(super) fn pushed(
        session: Session,
        now: Instant,
        resources: &Resources,
        counters: &Counters,
    ) -> Result<Self, Refusal<'static>> {
        Connection::open(session, now, Delivery::Pushed, SendQueue::default(), resources.tls.as_ref(), counters)
    }
}

impl UConn {
    /// Connection `x` (see [`Connection::pushed`]) on socket `fd`.
    pub(super) fn new(fd: OwnedFd, x: Connection<SendQueue>, generation: u32) -> Self {
        UConn { fd, x, generation, recv_armed: false, recv_cancelling: false, ops: 0, timer_at: None, closed: false }
    }

    /// Output not yet taken by the socket: bytes queued or in flight, and sends queued behind
    /// the one in flight (`--max-outstanding-sends`).
    pub(super) fn pending(&self) -> Pending {
        self.x.pending()
    }

    /// Nothing is in flight or queued: output can go straight out.
    pub(super) fn is_quiet(&self) -> bool {
        self.x.out.sending.is_none() && !self.x.out.polling && self.x.out.queued.is_empty()
    }

    /// The multishot receive, counted in flight from now on.
    pub(super) fn arm_recv(&mut self, index: usize) -> squeue::Entry {
        self.recv_armed = true;
        self.ops += 1;
        opcode::RecvMulti::new(types::Fd(self.fd.as_raw_fd()), BUFFER_GROUP).build().user_data(pack(
            Op::Recv,
            index,
            self.generation,
        ))
    }

    /// A cancel of the multishot receive, unless none is armed or one is already cancelling.
    pub(super) fn cancel_recv(&mut self, index: usize) -> Option<squeue::Entry> {
        if !self.recv_armed || self.recv_cancelling {
            return None;
        }
        self.recv_cancelling = true;
        self.ops += 1;
        let target = pack(Op::Recv, index, self.generation);
        Some(opcode::AsyncCancel::new(target).build().user_data(pack(Op::Cancel, index, self.generation)))
    }

    /// The multishot receive has ended (a completion without MORE).
    pub(super) fn recv_ended(&mut self) {
        self.recv_armed = false;
        self.recv_cancelling = false;
        self.ops -= 1;
    }

    /// Queue output behind what is queued.
    pub(super) fn queue(&mut self, chunk: Bytes) {
        self.x.out.push_records(chunk);
    }

    /// Queue bytes `at..end` of the body file behind what is queued.
    pub(super) fn queue_file(&mut self, at: u64, end: u64) {
        self.x.out.push_file(at, end);
    }

    /// The file range at the front of the queue, with what to seal it with if the connection
    /// speaks TLS (its session and the thread's `scratch`).
    pub(super) fn file_front<'a>(
        &'a mut self,
        scratch: &'a mut FileScratch,
    ) -> Option<(&'a mut FileRange, Option<Seal<'a>>)> {
        let (out, seal) = self.x.out_and_seal(scratch);
        match out.queued.front_mut() {
            Some(Queued::File(range)) => Some((range, seal)),
            _ => None,
        }
    }

    /// The file range at the front went through a turn, owing `owed` bytes before it: count
    /// what it sent, and drop it when it is all sent.
    pub(super) fn file_turned(&mut self, owed: u64) {
        if let Some(Queued::File(range)) = self.x.out.queued.front() {
            let now = range.owed();
            self.x.out.queued_file = self.x.out.queued_file - owed + now;
            if now == 0 {
                self.x.out.queued.pop_front();
                self.x.out.queued_file_ranges -= 1;
            }
        }
    }

    /// A poll for writability, posted when the socket refused the body file.
    pub(super) fn poll_writable(&mut self, index: usize) -> squeue::Entry {
        self.x.out.polling = true;
        self.ops += 1;
        opcode::PollAdd::new(types::Fd(self.fd.as_raw_fd()), libc::POLLOUT as u32).build().user_data(pack(
            Op::Poll,
            index,
            self.generation,
        ))
    }

    /// The writability poll has completed.
    pub(super) fn poll_done(&mut self) {
        self.x.out.polling = false;
        self.ops -= 1;
    }

    /// Forget queued output (the connection is closing).
    pub(super) fn clear_queue(&mut self) {
        self.x.out.queued.clear();
        self.x.out.queued_len = 0;
        self.x.out.queued_file = 0;
        self.x.out.queued_file_ranges = 0;
    }

    /// What to do with the queue: a send of the bytes at its front (up to `IOV_BATCH` chunks,
    /// up to a file chunk, with `MSG_MORE` before one), the file chunk at its front, or
    /// nothing while a send or poll is in flight, nothing is queued or the connection closed.
    pub(super) fn send_queued(&mut self, index: usize, spares: &mut SpareSends) -> NextSend {
        if self.x.out.sending.is_some() || self.x.out.polling || self.closed {
            return NextSend::Nothing;
        }
        let (out, session) = self.x.out_and_session();
        match out.queued.front_mut() {
            None => return NextSend::Nothing,
            Some(Queued::File(_)) => return NextSend::File,
            Some(Queued::Clear(plain)) => {
                // Its turn to be sealed: the file range ahead of it has been.
                let sealed = match session {
                    Some(session) => seal_behind(session, plain),
                    None => Err(no_session()),
                };
                match sealed {
                    Ok(records) => {
                        out.queued_len = out.queued_len - plain.len() + records.len();
                        out.queued[0] = Queued::Bytes(records);
                    }
                    Err(e) => return NextSend::Failed(e),
                }
            }
            Some(Queued::Bytes(_)) => {}
        }
        let mut send = spares.take();
        while send.chunks.len() < IOV_BATCH {
            match self.x.out.queued.front() {
                Some(Queued::Bytes(_)) => {
                    if let Some(Queued::Bytes(chunk)) = self.x.out.queued.pop_front() {
                        self.x.out.queued_len -= chunk.len();
                        send.chunks.push(chunk);
                    }
                }
                Some(Queued::File(_) | Queued::Clear(_)) => {
                    send.more = true;
                    break;
                }
                None => break,
            }
        }
        NextSend::Post(self.start_send(index, send, None))
    }

    /// A send of ring buffer `bid`, whose first bytes are `data` (an echo sent as received).
    pub(super) fn send_ring_buffer(
        &mut self,
        index: usize,
        spares: &mut SpareSends,
        bid: u16,
        data: &[u8],
    ) -> squeue::Entry {
        let send = spares.take();
        self.start_send(index, send, Some((bid, data)))
    }

    /// Post `send` with its chunks, after the ring buffer's data if there is one.
    fn start_send(
        &mut self,
        index: usize,
        mut send: Box<InFlight>,
        ring_buffer: Option<(u16, &[u8])>,
    ) -> squeue::Entry {
        send.ring_buffer = ring_buffer.map(|(bid, data)| (bid, data.len()));
        let mut count = 0;
        if let Some((_, data)) = ring_buffer {
            send.iov[0] = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
            count = 1;
        }
        let InFlight { iov, chunks, .. } = &mut *send;
        for (slot, chunk) in iov[count..].iter_mut().zip(chunks.iter()) {
            *slot = libc::iovec { iov_base: chunk.as_ptr() as *mut libc::c_void, iov_len: chunk.len() };
            count += 1;
        }
        send.len = send.iov[..count].iter().map(|v| v.iov_len).sum();
        send.msg.msg_iov = send.iov.as_mut_ptr();
        send.msg.msg_iovlen = count as _;
        let fd = types::Fd(self.fd.as_raw_fd());
        let flags = libc::MSG_NOSIGNAL | if send.more { libc::MSG_MORE } else { 0 };
        // One buffer (an echo, one response) goes as a plain send, which skips importing a
        // msghdr and iovec array; several are gathered with sendmsg.
        let entry = if count == 1 {
            opcode::Send::new(fd, send.iov[0].iov_base as *const u8, send.len as u32).flags(flags).build()
        } else {
            opcode::SendMsg::new(fd, &send.msg).flags(flags as u32).build()
        }
        .user_data(pack(Op::Send, index, self.generation));
        self.x.out.sending = Some(send);
        self.ops += 1;
        entry
    }

    /// The send in flight has completed: it is no longer counted, and is handed back.
    pub(super) fn send_done(&mut self) -> Option<Box<InFlight>> {
        self.ops -= 1;
        self.x.out.sending.take()
    }

    /// The queued output, flattened (tests).
    #[cfg(test)]
    pub(super) fn queued_bytes(&self) -> Vec<u8> {
        self.x
            .out
            .queued
            .iter()
            .flat_map(|c| match c {
                Queued::Bytes(b) => b.to_vec(),
                Queued::File(range) => format!("<file {}..{}>", range.at, range.end).into_bytes(),
                Queued::Clear(plain) => plain.to_vec(),
            })
            .collect()
    }

    /// Put back at the front of the queue, in order, whatever of `sent` the socket did not take
    /// (`written` bytes it did); `ring_data` is the ring buffer it held, if any, whose unsent
    /// rest is copied (the buffer goes back to the kernel).
    pub(super) fn requeue_unsent(&mut self, sent: &InFlight, written: usize, ring_data: Option<&[u8]>) {
        // Walked backwards, each piece pushed to the front: the queue ends up in order, with
        // no list of the rest built on the way.
        let ring_len = ring_data.map_or(0, <[u8]>::len);
        let mut end = ring_len + sent.chunks.iter().map(Bytes::len).sum::<usize>();
        for chunk in sent.chunks.iter().rev() {
            let start = end - chunk.len();
            if end > written {
                let mut rest = chunk.clone();
                rest.advance(written.saturating_sub(start));
                self.x.out.queued_len += rest.len();
                self.x.out.queued.push_front(Queued::Bytes(rest));
            }
            end = start;
        }
        if let Some(data) = ring_data {
            if written < data.len() {
                let rest = Bytes::copy_from_slice(&data[written..]);
                self.x.out.queued_len += rest.len();
                self.x.out.queued.push_front(Queued::Bytes(rest));
            }
        }
    }
}
