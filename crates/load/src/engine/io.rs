//! The byte path of one load connection: read and check what came back, then begin as many new
//! exchanges as the depth, the schedule, the rate limit and the request budget allow, and
//! write them in one `send`.

use std::io;
use std::os::fd::AsRawFd;

use sockscale_sys as sys;

use super::tls::MAX_RECORDS_AHEAD;
use super::{pacer_token, Client, End, Engine, Pacer};
use crate::client::{Failure, Reply, Stamp, StreamEnd};
use crate::config::Mode;
use crate::rate::PacedBlock;

impl Engine<'_> {
    pub(super) fn drive(&mut self, token: u64) {
        match self.receive(token) {
            Some(End::Failed) => return self.end(token, End::Failed),
            Some(End::Done) => return self.end(token, End::Done),
            None => {}
        }
        if let Err(end) = self.pump(token) {
            return self.end(token, end);
        }
        self.note_spent(token);
        self.settle(token);
    }

    /// `--per-conn`: a connection that has begun its exchanges and has none in flight is done.
    fn note_spent(&mut self, token: u64) {
        let Some(limit) = self.shared.cfg.per_conn else { return };
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(conn) = self.conns.get(index).filter(|c| c.generation == generation) else { return };
        if conn.exchanges >= limit && conn.client.outstanding() == 0 {
            self.spent.insert(conn.index);
        }
    }

    /// Read everything available. Some(end) if the connection is over.
    fn receive(&mut self, token: u64) -> Option<End> {
        let shared = self.shared;
        let now_ns = self.now_ns;
        let now = self.now;
        let result = &mut self.result;
        let rbuf = &mut self.rbuf;
        let plain = &mut self.plain;
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let conn = self.conns.get_mut(index).filter(|c| c.generation == generation)?;
        let udp = matches!(conn.client, Client::Udp(_));
        let fd = conn.socket.as_raw_fd();
        let mut eof = false;
        // TLS: the peer's close_notify (no more plaintext comes).
        let mut tls_closed = false;
        while conn.readable {
            let n = match sys::recv(fd, rbuf) {
                Ok(0) if !udp => {
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
                Err(e) if udp && e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    // ICMP port unreachable for an earlier datagram; the socket lives on.
                    result.errors.connect_refused += 1;
                    continue;
                }
                Err(e) => {
                    match e.raw_os_error() {
                        Some(libc::ECONNRESET | libc::EPIPE) => result.errors.reset += 1,
                        _ => result.errors.other += 1,
                    }
                    return Some(End::Failed);
                }
            };
            let data: &[u8] = match conn.tls.as_deref_mut() {
                None => {
                    result.bytes_received += n as u64;
                    &rbuf[..n]
                }
                Some(tls) => {
                    result.tls.counts.wire.received += n as u64;
                    plain.clear();
                    let handshaking = tls.handshaking();
                    let quiet = tls.records.is_empty();
                    match tls.session.receive(&mut rbuf[..n], now, plain, &mut tls.records) {
                        Ok(received) => {
                            if let Some(took) = received.handshake_done {
                                let negotiated = tls.session.negotiated();
                                let alpn = negotiated.as_ref().and_then(|n| n.alpn.clone());
                                result.tls.handshake_done(took, negotiated);
                                if matches!(conn.client, Client::H2(_)) && alpn.as_deref() != Some(b"h2") {
                                    // A server that chose http/1.1 (or nothing) does not speak
                                    // HTTP/2 (the probe says so before the run).
                                    result.errors.tls += 1;
                                    result.tls.failed(
                                        "no_h2",
                                        || "the server did not agree to HTTP/2 (ALPN h2)".into(),
                                        false,
                                    );
                                    return Some(End::Failed);
                                }
                            }
                            tls_closed = received.closed;
                        }
                        Err(failure) => {
                            // The fatal alert that tells the server why, when nothing is queued
                            // ahead of it: one non-blocking attempt before the close.
                            if quiet {
                                let _ = sys::send(fd, &tls.records);
                            }
                            result.errors.tls += 1;
                            result.tls.failed(failure.reason.name(), || failure.to_string(), handshaking);
                            return Some(End::Failed);
                        }
                    }
                    result.bytes_received += plain.len() as u64;
                    &plain[..]
                }
            };
            let answered = &mut conn.answered;
            let outcome = match &mut conn.client {
                Client::Echo(c) => c.on_data(&shared.pattern, data, |stamp| {
                    *answered = true;
                    result.completed += 1;
                    result.latency.record(now_ns, stamp);
                }),
                Client::Http(c) => {
                    let closing = &mut conn.closing;
                    c.on_data(data, |stamp, response| {
                        result.completed += 1;
                        result.statuses.count(response.status);
                        if shared.cfg.accept_status.accepts(response.status) {
                            *answered = true;
                        } else {
                            result.errors.http_status += 1;
                        }
                        result.latency.record(now_ns, stamp);
                        *closing |= response.close;
                    })
                }
                Client::H2(c) => {
                    let h2 = &mut result.h2;
                    let errors = &mut result.errors;
                    let (completed, statuses, latency) =
                        (&mut result.completed, &mut result.statuses, &mut result.latency);
                    let greeted = c.greeted();
                    let outcome = c.on_data(
                        data,
                        |stamp, end| match end {
                            StreamEnd::Response(response) => {
                                *completed += 1;
                                statuses.count(response.status);
                                if shared.cfg.accept_status.accepts(response.status) {
                                    *answered = true;
                                } else {
                                    errors.http_status += 1;
                                }
                                latency.record(now_ns, stamp);
                            }
                            StreamEnd::Reset(code) => {
                                errors.h2_reset += 1;
                                *h2.resets.entry(sockscale_h2::error_code_name(code).into_owned()).or_default() += 1;
                            }
                            StreamEnd::Refused => errors.h2_refused += 1,
                            StreamEnd::Malformed => errors.bad_response += 1,
                        },
                        |code| *h2.goaways.entry(sockscale_h2::error_code_name(code).into_owned()).or_default() += 1,
                    );
                    if !greeted && c.greeted() {
                        h2.connections += 1;
                        if let Some(max) = c.server_max_streams() {
                            h2.server_max_streams = Some(h2.server_max_streams.map_or(max, |m| m.min(max)));
                        }
                    }
                    conn.closing |= c.exhausted();
                    match outcome {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            let kind = match e {
                                sockscale_h2::ClientError::NotHttp2 => "not_http2".to_owned(),
                                sockscale_h2::ClientError::Protocol(violation) => {
                                    sockscale_h2::error_code_name(violation.code() as u32).into_owned()
                                }
                                sockscale_h2::ClientError::Compression(_) => "COMPRESSION_ERROR".to_owned(),
                            };
                            *h2.connection_errors.entry(kind).or_default() += 1;
                            if h2.first_error.is_none() {
                                h2.first_error = Some(e.to_string());
                            }
                            Err(Failure::BadResponse(crate::http::ResponseError::Head))
                        }
                    }
                }
                Client::Udp(c) => match c.on_datagram(&shared.pattern, data) {
                    Ok(Reply::Answer(stamp)) => {
                        *answered = true;
                        result.completed += 1;
                        result.udp.received += 1;
                        result.latency.record(now_ns, stamp);
                        Ok(())
                    }
                    Ok(Reply::Late) => {
                        result.udp.late += 1;
                        Ok(())
                    }
                    // A bad datagram spoils nothing else on a datagram socket: count, go on.
                    Err(_) => {
                        result.errors.verify_mismatch += 1;
                        Ok(())
                    }
                },
            };
            if let Err(failure) = outcome {
                match failure {
                    Failure::Mismatch | Failure::Surplus => result.errors.verify_mismatch += 1,
                    Failure::BadResponse(_) => {
                        result.errors.bad_response += 1;
                        if result.first_bad_response.is_none() {
                            result.first_bad_response = Some(crate::report::sample(data));
                        }
                    }
                }
                return Some(End::Failed);
            }
            if tls_closed {
                // Nothing more will be decrypted: the same as the end of the stream.
                eof = true;
                conn.readable = false;
                break;
            }
            // A short TCP read emptied the socket (unless a hang-up waits behind the data); a
            // datagram socket is read to EAGAIN.
            if !udp && n < rbuf.len() && !conn.hangup {
                conn.readable = false;
            }
        }
        if eof {
            if let Client::Http(c) = &mut conn.client {
                let closing = &mut conn.closing;
                let answered = &mut conn.answered;
                let finished = c.on_eof(|stamp, response| {
                    result.completed += 1;
                    result.statuses.count(response.status);
                    if shared.cfg.accept_status.accepts(response.status) {
                        *answered = true;
                    } else {
                        result.errors.http_status += 1;
                    }
                    result.latency.record(now_ns, stamp);
                    *closing |= response.close;
                });
                if finished.is_err() {
                    result.errors.bad_response += 1;
                    return Some(End::Failed);
                }
            }
            if conn.client.outstanding() == 0 && conn.closing {
                return Some(End::Done);
            }
            result.errors.closed_by_peer += 1;
            return Some(End::Failed);
        }
        if conn.closing && conn.client.outstanding() == 0 {
            return Some(End::Done);
        }
        None
    }

    /// Begin what may be begun and write what is unsent.
    fn pump(&mut self, token: u64) -> Result<(), End> {
        let shared = self.shared;
        let cfg = &shared.cfg;
        // Before the measured phase nothing is begun.
        let stopping = self.stopping() || !self.measuring;
        let per_conn = cfg.per_conn.unwrap_or(u64::MAX);
        let now_ns = self.now_ns;
        let depth = self.depth;
        let interval = self.send_interval_ns;
        let (index, generation) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(conn) = self.conns.get_mut(index).filter(|c| c.generation == generation) else { return Ok(()) };
        if !conn.connected {
            return Ok(());
        }
        let block = (conn.index / cfg.block as u64) as usize;
        let fd = conn.socket.as_raw_fd();
        loop {
            // Begin new exchanges while allowed (over TLS, once the handshake is done: its time
            // is not a request's).
            while !stopping
                && !conn.tls.as_deref().is_some_and(|t| t.handshaking())
                && !conn.closing
                && conn.client.has_room(depth)
                && !conn.queued
                && conn.exchanges < per_conn
            {
                let due_ns = match interval {
                    Some(_) if conn.late == 0 => break,
                    Some(interval) => conn.next_send_ns.unwrap_or(now_ns).saturating_sub(conn.late * interval),
                    None => now_ns,
                };
                let stamp = Stamp { due_ns, sent_ns: now_ns };
                let bytes = match &cfg.mode {
                    Mode::Echo { msg_len } | Mode::Udp { msg_len } => *msg_len,
                    Mode::Http(_) => shared.request_len,
                };
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
                            block: PacedBlock::new(rate * share, bytes, now_ns),
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
                match &mut conn.client {
                    Client::Echo(c) => c.begin(stamp),
                    Client::Http(c) => c.begin(stamp, shared.request_len, shared.head_requests),
                    Client::H2(c) => {
                        if let Some(request) = &shared.h2_request {
                            c.begin(stamp, request);
                            self.result.h2.streams += 1;
                        }
                    }
                    Client::Udp(c) => {
                        let datagram = c.next_datagram(&shared.pattern, stamp, &mut self.dgram);
                        match sys::send(conn.socket.as_raw_fd(), datagram) {
                            Ok(n) => {
                                self.result.bytes_sent += n as u64;
                                self.result.udp.sent += 1;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                // The socket buffer is full: the datagram never left.
                                c.cancel_last();
                                self.result.sent -= 1;
                                conn.exchanges -= 1;
                                shared.unclaim(1);
                                conn.writable = false;
                                break;
                            }
                            Err(_) => {
                                // e.g. ICMP-refused: counted when recv reports it.
                                self.result.udp.sent += 1;
                            }
                        }
                    }
                }
                self.result.latency.began(now_ns, due_ns);
            }
            if let Some(tls) = conn.tls.as_deref_mut() {
                // Encrypt what is unsent (unless records enough wait already), then write the
                // records in one call.
                let unsent: &[u8] = match &conn.client {
                    Client::Echo(c) if c.unsent > 0 => c.to_send(&shared.pattern),
                    Client::Http(c) if c.unsent > 0 => c.to_send(&shared.requests),
                    Client::H2(c) if c.unsent() > 0 => c.to_send(),
                    _ => &[],
                };
                let plaintext = unsent.len();
                if plaintext > 0 && tls.records.len() < MAX_RECORDS_AHEAD && !tls.handshaking() {
                    if let Err(failure) = tls.session.send(unsent, &mut tls.records) {
                        self.result.errors.tls += 1;
                        self.result.tls.failed(failure.reason.name(), || failure.to_string(), false);
                        return Err(End::Failed);
                    }
                    self.result.bytes_sent += plaintext as u64;
                    match &mut conn.client {
                        Client::Echo(c) => c.sent(plaintext),
                        Client::Http(c) => c.sent(plaintext),
                        Client::H2(c) => c.sent(plaintext),
                        Client::Udp(_) => {}
                    }
                }
                if tls.records.is_empty() || !conn.writable {
                    return Ok(());
                }
                match sys::send(fd, &tls.records) {
                    Ok(n) => {
                        self.result.tls.counts.wire.sent += n as u64;
                        tls.written(n);
                        if !tls.records.is_empty() {
                            conn.writable = false;
                            return Ok(());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        conn.writable = false;
                        return Ok(());
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.result.errors.count_send_error(&e);
                        return Err(End::Failed);
                    }
                }
                if plaintext == 0 || tls.handshaking() {
                    return Ok(());
                }
                continue;
            }
            // Write what is unsent, all in one call.
            let unsent: &[u8] = match &conn.client {
                Client::Echo(c) if c.unsent > 0 => c.to_send(&shared.pattern),
                Client::Http(c) if c.unsent > 0 => c.to_send(&shared.requests),
                Client::H2(c) if c.unsent() > 0 => c.to_send(),
                _ => return Ok(()),
            };
            if !conn.writable {
                return Ok(());
            }
            let unsent_len = unsent.len();
            let n = match sys::send(fd, unsent) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.result.errors.count_send_error(&e);
                    return Err(End::Failed);
                }
            };
            self.result.bytes_sent += n as u64;
            match &mut conn.client {
                Client::Echo(c) => c.sent(n),
                Client::Http(c) => c.sent(n),
                Client::H2(c) => c.sent(n),
                Client::Udp(_) => {}
            }
            if n < unsent_len {
                // The socket buffer is full; EPOLLOUT will say when there is room.
                conn.writable = false;
                return Ok(());
            }
        }
    }
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
