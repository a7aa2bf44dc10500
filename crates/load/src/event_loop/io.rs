//! The byte path of one load connection: read what came and hand it to the connection, then
//! begin as many new exchanges as the connection, the schedule, the rate limit and the request
//! budget allow, and write what the connection has to send in one `send` (a datagram socket:
//! the turn's datagrams in one batch, `datagrams.rs`).

use std::io;
use std::os::fd::AsRawFd;

use sockscale_sys as sys;

use super::datagrams::{Datagrams, Read};
use super::{count, pacer_token, Conn, End, EventLoop, Pacer, Shared, ThreadResult};
use crate::client::Stamp;
use crate::connection::{Close, Now, Profile};
use crate::rate::PacedBlock;

/// How a connection's turn ended it.
enum Over {
    /// The socket failed (counted already).
    Failed,
    /// The connection closed as it said.
    Close(Close),
}

impl EventLoop<'_> {
    pub(super) fn drive(&mut self, token: u64) {
        let over = match self.receive(token) {
            Some(over) => Err(over),
            None => self.pump(token),
        };
        let (shared, now_ns) = (self.shared, self.now_ns);
        if let Some(conn) = self.conn_mut(token).filter(|c| c.quic_handshaking && !c.core.greeting()) {
            // A QUIC handshake completed: the target takes connections.
            conn.quic_handshaking = false;
            shared.quic_handshaking.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            self.quic_handshakes -= 1;
            shared.last_connect_ns.fetch_max(now_ns, std::sync::atomic::Ordering::Relaxed);
        }
        match over {
            Err(Over::Failed) => return self.end(token, End::Failed),
            Err(Over::Close(close)) => return self.close(token, close),
            Ok(()) => {}
        }
        self.note_spent(token);
        self.settle(token);
    }

    /// `--per-conn`: a connection that has begun its exchanges and has none in flight is done.
    fn note_spent(&mut self, token: u64) {
        let Some(limit) = self.shared.cfg.per_conn else { return };
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(conn) = self.conns.get(index).filter(|c| c.generation == generation) else { return };
        if conn.exchanges >= limit && conn.core.outstanding() == 0 {
            self.spent.insert(conn.index);
        }
    }

    /// Read everything available and hand it to the connection. Some(over) if it is over.
    fn receive(&mut self, token: u64) -> Option<Over> {
        let profile = &self.shared.profile;
        let now = self.clock();
        let result = &mut self.result;
        let rbuf = &mut self.rbuf;
        let plain = &mut self.plain;
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let conn = self.conns.get_mut(index).filter(|c| c.generation == generation)?;
        if conn.core.is_datagram() {
            return receive_datagrams(conn, &mut self.datagrams, rbuf, profile, now, result);
        }
        let fd = conn.socket.as_raw_fd();
        let mut eof = false;
        while conn.readable {
            let n = match sys::recv(fd, rbuf) {
                Ok(0) => {
                    eof = true;
                    conn.readable = false;
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    conn.readable = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    match e.raw_os_error() {
                        Some(libc::ECONNRESET | libc::EPIPE) => result.errors.reset += 1,
                        _ => result.errors.other += 1,
                    }
                    return Some(Over::Failed);
                }
            };
            let on = &mut |event| count(result, now.ns, event);
            match conn.core.receive(profile, now, &mut rbuf[..n], plain, on) {
                Err(close) => return Some(Over::Close(close)),
                Ok(true) => {
                    // TLS close_notify: nothing more will come, the same as the end of the stream.
                    eof = true;
                    conn.readable = false;
                    break;
                }
                Ok(false) => {}
            }
            // A short read emptied the socket (unless a hang-up waits behind the data).
            if n < rbuf.len() && !conn.hangup {
                conn.readable = false;
            }
        }
        if eof {
            let close = conn.core.receive_eof(profile, &mut |event| count(result, now.ns, event));
            return Some(Over::Close(close));
        }
        conn.core.poll_close().map(Over::Close)
    }

    /// Begin what may be begun and write what the connection has to send.
    fn pump(&mut self, token: u64) -> Result<(), Over> {
        let shared = self.shared;
        let cfg = &shared.cfg;
        let profile = &shared.profile;
        // Before the measured phase nothing is begun.
        let stopping = self.stopping() || !self.measuring;
        let per_conn = cfg.per_conn.unwrap_or(u64::MAX);
        let now_ns = self.now_ns;
        let depth = self.depth;
        let interval = self.send_interval_ns;
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else { return Ok(()) };
        if !conn.core.is_connected() {
            return Ok(());
        }
        let block = (conn.index / cfg.block as u64) as usize;
        let fd = conn.socket.as_raw_fd();
        loop {
            // Begin new exchanges while the connection and the pacing allow.
            while !stopping && conn.core.may_begin(depth) && !conn.queued && conn.exchanges < per_conn {
                let due_ns = match interval {
                    Some(_) if conn.late == 0 => break,
                    Some(interval) => conn.next_send_ns.unwrap_or(now_ns).saturating_sub(conn.late * interval),
                    None => now_ns,
                };
                let stamp = Stamp { due_ns, sent_ns: now_ns };
                if let Some(rate) = cfg.block_byte_rate {
                    if conn.granted {
                        // Paid for by the block's deadline, which drove this connection.
                        conn.granted = false;
                    } else {
                        if self.pacers.len() <= block {
                            self.pacers.resize_with(block + 1, || None);
                        }
                        let share = block_share(cfg, self.thread, self.threads, self.mine, block);
                        let pacer = self.pacers[block].get_or_insert_with(|| Pacer {
                            block: PacedBlock::new(rate * share, profile.exchange_len(), now_ns),
                            timer_at: None,
                        });
                        if !pacer.block.ask(token, now_ns) {
                            // Wait in line without a timer of its own: the block's one
                            // deadline drives this connection when its send is paid for.
                            conn.queued = true;
                            if let Some(ns) = pacer.block.next_grant_ns(now_ns) {
                                let at = shared.start + std::time::Duration::from_nanos(ns);
                                self.timers.schedule(&mut pacer.timer_at, at, pacer_token(block));
                            }
                            break;
                        }
                    }
                }
                if conn.prepaid > 0 {
                    conn.prepaid -= 1;
                    self.prepaid_pending -= 1;
                } else if !shared.claim() {
                    break;
                }
                if interval.is_some() {
                    conn.late -= 1;
                }
                self.result.sent += 1;
                conn.exchanges += 1;
                let result = &mut self.result;
                let on = &mut |event| count(result, now_ns, event);
                if let Some(datagram) = conn.core.begin(profile, stamp, &mut self.dgram, on) {
                    // It leaves with the turn's others (its slip is recorded then).
                    self.datagrams.add(datagram, due_ns);
                    if self.datagrams.is_full()
                        && !send_datagrams(conn, &mut self.datagrams, &mut self.result, shared, now_ns)
                    {
                        break;
                    }
                    continue;
                }
                self.result.latency.began(now_ns, due_ns);
            }
            if !self.datagrams.is_empty() {
                send_datagrams(conn, &mut self.datagrams, &mut self.result, shared, now_ns);
            }
            if conn.core.is_quic() {
                let now = crate::connection::Now { at: self.now, ns: now_ns };
                return super::quic::send(conn, &mut self.datagrams, &mut self.dgram, profile, now, &mut self.result)
                    .map_err(Over::Close);
            }
            // Write what the connection has to send, all in one call.
            let result = &mut self.result;
            let bytes =
                conn.core.poll_transmit(profile, &mut |event| count(result, now_ns, event)).map_err(Over::Close)?;
            if bytes.is_empty() || !conn.writable {
                return Ok(());
            }
            let len = bytes.len();
            let n = match sys::send(fd, bytes) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.result.errors.count_send_error(&e);
                    return Err(Over::Failed);
                }
            };
            conn.core.sent(n, &mut |event| count(result, now_ns, event));
            if n < len {
                // The socket buffer is full; EPOLLOUT will say when there is room.
                conn.writable = false;
                return Ok(());
            }
        }
    }
}

/// Read a datagram socket's answers until it is empty (a batch short of full emptied it: a
/// datagram that comes later raises a new edge) and hand each to the connection.
fn receive_datagrams(
    conn: &mut Conn,
    datagrams: &mut Datagrams,
    buf: &mut [u8],
    profile: &Profile,
    now: Now,
    result: &mut ThreadResult,
) -> Option<Over> {
    let fd = conn.socket.as_raw_fd();
    while conn.readable {
        match datagrams.read(fd, buf) {
            Read::One(n) => {
                conn.core.receive_datagram(profile, now, 0, &buf[..n], &mut |event| count(result, now.ns, event))
            }
            Read::Buffers { count: buffers, more } => {
                for i in 0..buffers {
                    let Some(received) = datagrams.received.get(i) else { continue };
                    let coalesced = received.count();
                    if coalesced > 1 {
                        result.udp.gro_datagrams += coalesced as u64;
                    }
                    for datagram in received.datagrams() {
                        conn.core.receive_datagram(profile, now, received.ecn, datagram, &mut |event| {
                            count(result, now.ns, event)
                        });
                    }
                }
                conn.readable &= more;
            }
            Read::Empty => conn.readable = false,
            Read::Interrupted => {}
            // ICMP port unreachable for an earlier datagram; the socket lives on (QUIC: the
            // connection ends, as a reset ends a TCP connection).
            Read::Refused if conn.core.is_quic() => return Some(Over::Close(conn.core.quic_refused())),
            Read::Refused => result.errors.connect_refused += 1,
            Read::Failed(e) => {
                match e.raw_os_error() {
                    Some(libc::ECONNRESET | libc::EPIPE) => result.errors.reset += 1,
                    _ => result.errors.other += 1,
                }
                return Some(Over::Failed);
            }
        }
    }
    // QUIC: act on what came (responses, the handshake) before new requests begin.
    let on = &mut |event| count(result, now.ns, event);
    conn.core.after_datagrams(profile, now, on).err().map(Over::Close)
}

/// Send the datagrams a connection began this turn. False if the socket's buffer was full:
/// what it stopped is taken back (not sent, not counted) until the socket is writable again.
fn send_datagrams(
    conn: &mut Conn,
    datagrams: &mut Datagrams,
    result: &mut ThreadResult,
    shared: &Shared,
    now_ns: u64,
) -> bool {
    let latency = &mut result.latency;
    let sent = datagrams.send(conn.socket.as_raw_fd(), |due_ns| latency.began(now_ns, due_ns));
    result.udp.send_calls += sent.calls as u64;
    result.udp.gso_datagrams += sent.gso_datagrams as u64;
    result.bytes_sent += sent.bytes as u64;
    // A datagram the kernel refused (an ICMP error for an earlier one, counted when the
    // receive reports it) is in flight as far as the run goes: unanswered, it is lost.
    result.udp.sent += (sent.datagrams + sent.dropped - sent.blocked) as u64;
    if sent.blocked == 0 {
        return true;
    }
    conn.core.cancel_datagrams(sent.blocked);
    result.sent -= sent.blocked as u64;
    conn.exchanges -= sent.blocked as u64;
    shared.unclaim(sent.blocked);
    conn.writable = false;
    false
}

/// The fraction of block `block`'s connections that belong to this thread, so the threads'
/// buckets add up to the block's `-r`.
fn block_share(cfg: &crate::config::LoadConfig, thread: usize, threads: usize, mine: u64, block: usize) -> f64 {
    let b = cfg.block as u64;
    let lo = block as u64 * b;
    let hi = (lo + b).min(cfg.total_conns);
    let block_len = hi.saturating_sub(lo).max(1);
    // This thread's connections are first + thread + k * threads, for k < mine.
    let base = cfg.first_conn + thread as u64;
    let k_at = |x: u64| if x <= base { 0 } else { (x - base).div_ceil(threads as u64).min(mine) };
    let count = k_at(hi).saturating_sub(k_at(lo));
    count as f64 / block_len as f64
}
