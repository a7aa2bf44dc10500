//! What one connection of the load generator is doing, without the socket.
//!
//! Each kind of client tracks what it has sent, checks what comes back, and reports completed
//! exchanges with the time they were stamped (sent, or scheduled to be sent in open loop), so
//! the event loop can record latency. The event loop owns the socket and decides when to begin more.

use std::collections::VecDeque;

use slab::Slab;

use crate::http::{Response, ResponseError, ResponseParser};
use crate::pattern::{Pattern, TABLE};

/// When an exchange was due and when it began, in ns of the run. In closed loop both are when
/// it began; in open loop (`-R`) `due_ns` is its place in the schedule, and latency counted from
/// it is corrected for coordinated omission, while latency from `sent_ns` is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    pub due_ns: u64,
    pub sent_ns: u64,
}

impl Stamp {
    /// An exchange begun at `ns`, when it was due.
    pub fn at(ns: u64) -> Stamp {
        Stamp { due_ns: ns, sent_ns: ns }
    }
}

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Echoed bytes differ from what was sent (corrupted, lost, reordered, or foreign).
    Mismatch,
    /// More bytes came back than were sent.
    Surplus,
    BadResponse(ResponseError),
}

/// Echo: messages of `msg_len` bytes from the connection's pattern, verified on return.
#[derive(Debug)]
pub struct EchoClient {
    phase: u32,
    /// Bytes of begun messages not yet handed to the socket.
    pub unsent: u64,
    sent: u64,
    received: u64,
    msg_len: u64,
    completed: u64,
    stamps: VecDeque<Stamp>,
}

impl EchoClient {
    pub fn new(index: u64, msg_len: usize) -> Self {
        EchoClient {
            phase: Pattern::phase(index),
            unsent: 0,
            sent: 0,
            received: 0,
            msg_len: msg_len as u64,
            completed: 0,
            stamps: VecDeque::new(),
        }
    }

    pub fn outstanding(&self) -> usize {
        self.stamps.len()
    }

    /// The oldest exchange in flight.
    pub fn oldest(&self) -> Option<Stamp> {
        self.stamps.front().copied()
    }

    pub fn begin(&mut self, stamp: Stamp) {
        self.stamps.push_back(stamp);
        self.unsent += self.msg_len;
    }

    /// The next bytes to write (at most 64 KiB at a time).
    pub fn to_send<'p>(&self, pattern: &'p Pattern) -> &'p [u8] {
        pattern.slice(self.phase, self.sent, self.unsent.min(TABLE as u64) as usize)
    }

    pub fn sent(&mut self, n: usize) {
        self.sent += n as u64;
        self.unsent -= n as u64;
    }

    /// The oldest message in flight is partly echoed.
    pub fn answering(&self) -> bool {
        self.received > self.completed * self.msg_len
    }

    /// Messages in flight not yet handed whole to the socket.
    pub fn unsent_messages(&self) -> usize {
        self.unsent.div_ceil(self.msg_len.max(1)) as usize
    }

    /// Verify echoed bytes; `done` gets the stamp of each completed message.
    pub fn on_data(&mut self, pattern: &Pattern, data: &[u8], mut done: impl FnMut(Stamp)) -> Result<(), Failure> {
        if self.received + data.len() as u64 > self.sent {
            return Err(Failure::Surplus);
        }
        if pattern.verify(self.phase, self.received, data).is_some() {
            return Err(Failure::Mismatch);
        }
        self.received += data.len() as u64;
        while self.received >= (self.completed + 1) * self.msg_len {
            self.completed += 1;
            if let Some(stamp) = self.stamps.pop_front() {
                done(stamp);
            }
        }
        Ok(())
    }
}

/// HTTP: requests written from one pre-rendered buffer, responses parsed as they come.
#[derive(Debug, Default)]
pub struct HttpClient {
    /// Bytes of begun requests not yet handed to the socket.
    pub unsent: usize,
    parser: ResponseParser,
    stamps: VecDeque<Stamp>,
}

impl HttpClient {
    pub fn outstanding(&self) -> usize {
        self.stamps.len()
    }

    pub fn oldest(&self) -> Option<Stamp> {
        self.stamps.front().copied()
    }

    pub fn begin(&mut self, stamp: Stamp, request_len: usize, head: bool) {
        self.stamps.push_back(stamp);
        self.parser.expect(head);
        self.unsent += request_len;
    }

    /// The next bytes to write, from `requests` (the request repeated as often as the
    /// pipeline is deep, so every run of unsent requests is one contiguous tail of it).
    pub fn to_send<'r>(&self, requests: &'r [u8]) -> &'r [u8] {
        &requests[requests.len() - self.unsent..]
    }

    pub fn sent(&mut self, n: usize) {
        self.unsent -= n;
    }

    /// The oldest response in flight has begun (part of its head or body came).
    pub fn answering(&self) -> bool {
        self.parser.answering()
    }

    /// Requests in flight not yet handed whole to the socket, of `request_len` bytes each.
    pub fn unsent_requests(&self, request_len: usize) -> usize {
        self.unsent.div_ceil(request_len.max(1))
    }

    /// Parse response bytes; `done` gets the stamp and the response for each one completed.
    pub fn on_data(&mut self, data: &[u8], mut done: impl FnMut(Stamp, Response)) -> Result<(), Failure> {
        let stamps = &mut self.stamps;
        self.parser
            .feed(data, |r| {
                if let Some(stamp) = stamps.pop_front() {
                    done(stamp, r);
                }
            })
            .map_err(Failure::BadResponse)
    }

    /// The server closed; completes a response that runs to the close.
    pub fn on_eof(&mut self, mut done: impl FnMut(Stamp, Response)) -> Result<(), Failure> {
        let stamps = &mut self.stamps;
        self.parser
            .eof(|r| {
                if let Some(stamp) = stamps.pop_front() {
                    done(stamp, r);
                }
            })
            .map_err(Failure::BadResponse)
    }
}

/// HTTP/2: one stream a request, through the I/O-free client side of `sockscale-h2`; each
/// stream's tag is its stamp. The frames to write (HEADERS, request bodies, acknowledgements,
/// WINDOW_UPDATEs) wait in `out` until the socket takes them.
#[derive(Debug)]
pub struct H2Client {
    conn: sockscale_h2::ClientConnection,
    /// The stamps of the open streams; a stream's tag is its key here.
    stamps: Slab<Stamp>,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    written: usize,
}

/// How an HTTP/2 stream ended, as the event loop counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    Response(Response),
    /// RST_STREAM received, with its code.
    Reset(u32),
    /// Above a GOAWAY's last stream identifier: not processed.
    Refused,
    /// The response broke the protocol on its stream.
    Malformed,
}

impl H2Client {
    /// A connection whose preface and SETTINGS wait to be written.
    pub fn new(settings: sockscale_h2::ClientSettings) -> Self {
        let mut out = Vec::new();
        let conn = sockscale_h2::ClientConnection::new(settings, &mut out);
        H2Client { conn, stamps: Slab::new(), out, written: 0 }
    }

    pub fn outstanding(&self) -> usize {
        self.conn.open_streams()
    }

    pub fn oldest(&self) -> Option<Stamp> {
        self.conn.oldest().and_then(|tag| self.stamps.get(tag as usize).copied())
    }

    /// One more stream may open (the server's limit, a GOAWAY and the identifiers allowing).
    pub fn can_begin(&self) -> bool {
        self.conn.can_open()
    }

    /// No stream will open again: once the open ones end, the connection is done.
    pub fn exhausted(&self) -> bool {
        self.conn.exhausted()
    }

    pub fn greeted(&self) -> bool {
        self.conn.greeted()
    }

    pub fn server_max_streams(&self) -> Option<u32> {
        self.conn.peer_max_streams()
    }

    pub fn begin(&mut self, stamp: Stamp, request: &sockscale_h2::ClientRequest) {
        let tag = self.stamps.insert(stamp) as u64;
        self.conn.open(request, tag, &mut self.out);
    }

    pub fn unsent(&self) -> usize {
        self.out.len() - self.written
    }

    pub fn to_send(&self) -> &[u8] {
        &self.out[self.written..]
    }

    /// `n` bytes were written; an emptied buffer is reused, or given back when it grew large.
    pub fn sent(&mut self, n: usize) {
        self.written += n;
        if self.written == self.out.len() {
            self.written = 0;
            if self.out.capacity() > 64 << 10 {
                self.out = Vec::new();
            } else {
                self.out.clear();
            }
        }
    }

    /// Feed received bytes; `done` gets each ended stream's stamp and how it ended, `goaway`
    /// each GOAWAY's code.
    pub fn on_data(
        &mut self,
        data: &[u8],
        mut done: impl FnMut(Stamp, StreamEnd),
        mut goaway: impl FnMut(u32),
    ) -> Result<(), sockscale_h2::ClientError> {
        use sockscale_h2::ClientEvent as E;
        let stamps = &mut self.stamps;
        let mut end = |tag: u64, how: StreamEnd| {
            if let Some(stamp) = stamps.try_remove(tag as usize) {
                done(stamp, how);
            }
        };
        self.conn.receive(data, &mut self.out, &mut |event| match event {
            E::Response { tag, status, body_len } => {
                end(tag, StreamEnd::Response(Response { status, close: false, body_len }))
            }
            E::Reset { tag, code } => end(tag, StreamEnd::Reset(code)),
            E::Refused { tag } => end(tag, StreamEnd::Refused),
            E::Malformed { tag } => end(tag, StreamEnd::Malformed),
            E::GoAway { code, .. } => goaway(code),
            // No tunnel is opened here.
            E::TunnelEnd { .. } => {}
        })
    }
}

/// UDP: datagrams carrying a sequence number and pattern bytes; each reply must be identical.
#[derive(Debug)]
pub struct UdpClient {
    phase: u32,
    len: usize,
    next_seq: u64,
    /// (sequence, stamp) of datagrams sent and not yet answered, oldest first.
    outstanding: VecDeque<(u64, Stamp)>,
    /// The highest sequence counted lost, to tell late answers from strays.
    lost_below: u64,
}

/// What a received datagram was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The answer to a datagram sent with this stamp.
    Answer(Stamp),
    /// An answer to a datagram already counted lost.
    Late,
}

impl UdpClient {
    /// Datagrams are at least 8 bytes: the sequence number.
    pub const MIN_LEN: usize = 8;

    pub fn new(index: u64, len: usize) -> Self {
        UdpClient {
            phase: Pattern::phase(index),
            len: len.max(Self::MIN_LEN),
            next_seq: 0,
            outstanding: VecDeque::new(),
            lost_below: 0,
        }
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    pub fn oldest(&self) -> Option<Stamp> {
        self.outstanding.front().map(|&(_, stamp)| stamp)
    }

    /// Fill `buf` with the next datagram and record it as sent with `stamp`.
    pub fn next_datagram<'b>(&mut self, pattern: &Pattern, stamp: Stamp, buf: &'b mut Vec<u8>) -> &'b [u8] {
        let seq = self.next_seq;
        self.next_seq += 1;
        buf.clear();
        buf.extend_from_slice(&seq.to_le_bytes());
        let mut filled = 8;
        while filled < self.len {
            let part = pattern.slice(self.phase, seq.wrapping_mul(8191) + filled as u64, self.len - filled);
            buf.extend_from_slice(part);
            filled += part.len();
        }
        self.outstanding.push_back((seq, stamp));
        &buf[..]
    }

    /// Take back the datagram just built: the socket would not send it.
    pub fn cancel_last(&mut self) {
        if self.outstanding.pop_back().is_some() {
            self.next_seq -= 1;
        }
    }

    pub fn on_datagram(&mut self, pattern: &Pattern, data: &[u8]) -> Result<Reply, Failure> {
        if data.len() != self.len {
            return Err(Failure::Mismatch);
        }
        let seq = u64::from_le_bytes(data[..8].try_into().map_err(|_| Failure::Mismatch)?);
        if pattern.verify(self.phase, seq.wrapping_mul(8191) + 8, &data[8..]).is_some() {
            return Err(Failure::Mismatch);
        }
        match self.outstanding.iter().position(|&(s, _)| s == seq) {
            Some(i) => Ok(Reply::Answer(self.outstanding.remove(i).map_or_else(Stamp::default, |(_, stamp)| stamp))),
            None if seq < self.lost_below => Ok(Reply::Late),
            None => Err(Failure::Surplus),
        }
    }

    /// Count as lost every datagram sent before `cutoff_ns`; returns how many.
    pub fn expire(&mut self, cutoff_ns: u64) -> u64 {
        let mut lost = 0;
        while let Some(&(seq, stamp)) = self.outstanding.front() {
            if stamp.sent_ns >= cutoff_ns {
                break;
            }
            self.outstanding.pop_front();
            self.lost_below = self.lost_below.max(seq + 1);
            lost += 1;
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_completes_messages_across_splits_and_catches_mismatch() {
        let pattern = Pattern::default();
        let mut c = EchoClient::new(7, 100);
        c.begin(Stamp::at(10));
        c.begin(Stamp::at(20));
        let bytes = c.to_send(&pattern).to_vec();
        assert_eq!(bytes.len(), 200);
        c.sent(200);
        let mut done = Vec::new();
        c.on_data(&pattern, &bytes[..150], |s| done.push(s.due_ns)).unwrap();
        assert_eq!(done, vec![10]);
        c.on_data(&pattern, &bytes[150..], |s| done.push(s.due_ns)).unwrap();
        assert_eq!(done, vec![10, 20]);
        assert_eq!(c.on_data(&pattern, b"x", |_| {}), Err(Failure::Surplus));

        let mut c = EchoClient::new(7, 100);
        c.begin(Stamp::at(0));
        let mut bytes = c.to_send(&pattern).to_vec();
        c.sent(100);
        bytes[50] ^= 0xff;
        assert_eq!(c.on_data(&pattern, &bytes, |_| {}), Err(Failure::Mismatch));
    }

    #[test]
    fn http_pipelined_requests_pop_stamps_in_order() {
        let requests = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(3);
        let one = requests.len() / 3;
        let mut c = HttpClient::default();
        for stamp in [1, 2, 3] {
            c.begin(Stamp::at(stamp), one, false);
        }
        assert_eq!(c.to_send(&requests).len(), requests.len());
        c.sent(one + 5);
        assert_eq!(c.to_send(&requests), &requests[one + 5..]);
        let mut got = Vec::new();
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".repeat(3);
        c.on_data(&reply, |stamp, r| got.push((stamp.due_ns, r.status))).unwrap();
        assert_eq!(got, vec![(1, 200), (2, 200), (3, 200)]);
        assert_eq!(c.outstanding(), 0);
    }

    #[test]
    fn udp_matches_replies_counts_loss_and_late() {
        let pattern = Pattern::default();
        let mut c = UdpClient::new(3, 64);
        let mut buf = Vec::new();
        let first = c.next_datagram(&pattern, Stamp::at(100), &mut buf).to_vec();
        let second = c.next_datagram(&pattern, Stamp::at(200), &mut buf).to_vec();
        assert_eq!(first.len(), 64);
        assert_eq!(c.on_datagram(&pattern, &second), Ok(Reply::Answer(Stamp::at(200))));
        assert_eq!(c.expire(150), 1, "the first one timed out");
        assert_eq!(c.on_datagram(&pattern, &first), Ok(Reply::Late));
        let mut bad = first.clone();
        bad[40] ^= 1;
        assert_eq!(c.on_datagram(&pattern, &bad), Err(Failure::Mismatch));
    }
}
