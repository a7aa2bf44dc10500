//! Hostile QUIC/HTTP/3 peers for the conformance suite: quinn-proto's client state machine
//! (the one `sockscale-proto` drives) over a std `UdpSocket`, with what a hostile peer needs on
//! top: it may stop sending anything at all (no ACK, no credit: `mute`), open and reset streams
//! as fast as credit comes back, write raw HTTP/3 frames on its control stream, retire every
//! connection ID it is given; and a flood of clients' first Initials, each from its own source
//! port, none of which completes its handshake ([`InitialFlood`]).
//!
//! Every wait is bounded in time; a peer that cannot connect is a panic naming why.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sockscale_h3::{encode_field_section, put_headers_frame, stream_type, varint, ResponseEvent, ResponseStream};
use sockscale_proto::quic::quinn_proto::{
    ClientConfig, Connection, ConnectionError, ConnectionHandle, DatagramEvent, Dir, EndpointConfig, Event, StreamId,
    VarInt, WriteError,
};
use sockscale_proto::quic::{quinn_proto, QuicSetup, QuicTuning};
use sockscale_tls::{ClientTls, Trust};

/// The name the test certificate ([`super::tls::TestCert`]) is for.
const SERVER_NAME: &str = "localhost";

/// A client configuration speaking `h3`, trusting the CA in `ca`; and its endpoint's.
pub fn client_config(ca: &Path) -> (ClientConfig, Arc<EndpointConfig>) {
    let tls = ClientTls::new(&Trust::CaFile(ca.to_path_buf()), vec![b"h3".to_vec()], false).expect("client TLS");
    let setup = QuicSetup::client(tls.rustls_config(vec![b"h3".to_vec()], false), QuicTuning::default())
        .expect("a QUIC client setup");
    (setup.client.clone().expect("a client configuration"), setup.endpoint.clone())
}

/// One client connection over its own connected UDP socket, driven by [`QuicPeer::pump`].
pub struct QuicPeer {
    socket: UdpSocket,
    server: SocketAddr,
    endpoint: quinn_proto::Endpoint,
    handle: ConnectionHandle,
    pub conn: Connection,
    /// Nothing of ours is sent (no ACK, no flow-control credit), though what comes is read.
    pub mute: bool,
    /// The connection's application events, in order.
    pub events: Vec<Event>,
    buf: Vec<u8>,
}

/// What came back on a request stream.
#[derive(Debug, Default)]
pub struct Answer {
    pub status: Option<u16>,
    pub body: u64,
    pub ended: bool,
    /// The server reset the stream, with this code.
    pub reset: Option<u64>,
}

impl QuicPeer {
    /// Connect to `server` and complete the handshake within 5 s.
    pub fn connect(server: SocketAddr, ca: &Path) -> QuicPeer {
        let (config, endpoint_config) = client_config(ca);
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP socket");
        socket.connect(server).expect("connect the UDP socket");
        let mut endpoint = quinn_proto::Endpoint::new(endpoint_config, None, false, None);
        let (handle, conn) = endpoint.connect(Instant::now(), config, server, SERVER_NAME).expect("a connection");
        let mut peer =
            QuicPeer { socket, server, endpoint, handle, conn, mute: false, events: Vec::new(), buf: vec![0u8; 65536] };
        let up = peer.pump(Duration::from_secs(5), |p| p.connected() || p.lost().is_some());
        assert!(up && peer.connected(), "no HTTP/3 handshake with {server}: {:?}", peer.lost());
        peer.settle();
        peer
    }

    /// Pump until nothing is due soon (the delayed acknowledgement of what came last went out),
    /// at most 200 ms: a peer left unpumped with an acknowledgement owed gives the server a
    /// long RTT sample, and with it long probe timeouts and closing periods.
    pub fn settle(&mut self) {
        self.pump(Duration::from_millis(200), |p| {
            p.conn.poll_timeout().is_none_or(|t| t > Instant::now() + Duration::from_millis(100))
        });
    }

    pub fn connected(&self) -> bool {
        self.events.iter().any(|e| matches!(e, Event::Connected))
    }

    /// Why the connection ended, once it did.
    pub fn lost(&self) -> Option<&ConnectionError> {
        self.events.iter().find_map(|e| match e {
            Event::ConnectionLost { reason } => Some(reason),
            _ => None,
        })
    }

    /// Pass the connection's events along and send its datagrams (unless mute).
    fn flush(&mut self) {
        let now = Instant::now();
        loop {
            while let Some(ev) = self.conn.poll_endpoint_events() {
                if let Some(answer) = self.endpoint.handle_event(self.handle, ev) {
                    self.conn.handle_event(answer);
                }
            }
            while let Some(ev) = self.conn.poll() {
                self.events.push(ev);
            }
            let mut out = Vec::new();
            let Some(t) = self.conn.poll_transmit(now, 1, &mut out) else { break };
            if !self.mute {
                // Loopback: a full socket buffer is a lost datagram, which QUIC recovers.
                let _ = self.socket.send(&out[..t.size]);
            }
        }
    }

    /// Drive the connection (datagrams both ways, its timers) until `done` or `limit` passed;
    /// returns whether `done` came true.
    pub fn pump(&mut self, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let end = Instant::now() + limit;
        loop {
            self.flush();
            if done(self) {
                return true;
            }
            // What `done` wrote goes out before the wait.
            self.flush();
            let now = Instant::now();
            if now >= end {
                return false;
            }
            let wake = self.conn.poll_timeout().map_or(end, |t| t.min(end));
            let wait = wake.saturating_duration_since(now).max(Duration::from_millis(1));
            self.socket.set_read_timeout(Some(wait)).expect("a read timeout");
            if let Ok(n) = self.socket.recv(&mut self.buf) {
                self.datagram(n);
                // What else is queued, without waiting.
                self.socket.set_nonblocking(true).expect("nonblocking");
                while let Ok(n) = self.socket.recv(&mut self.buf) {
                    self.datagram(n);
                }
                self.socket.set_nonblocking(false).expect("blocking");
            }
            let now = Instant::now();
            if self.conn.poll_timeout().is_some_and(|t| t <= now) {
                self.conn.handle_timeout(now);
            }
        }
    }

    fn datagram(&mut self, n: usize) {
        let mut response = Vec::new();
        let data = BytesMut::from(&self.buf[..n]);
        match self.endpoint.handle(Instant::now(), self.server, None, None, data, &mut response) {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) if ch == self.handle => self.conn.handle_event(ev),
            Some(DatagramEvent::Response(t)) if !self.mute => {
                let _ = self.socket.send(&response[..t.size]);
            }
            _ => {}
        }
    }

    /// Open a request stream (waiting up to 5 s for the credit to) and write `bytes` on it
    /// (all of them: they must fit its credit), ending it if `fin`.
    pub fn open(&mut self, bytes: &[u8], fin: bool) -> StreamId {
        let mut opened = None;
        self.pump(Duration::from_secs(5), |p| {
            opened = p.conn.streams().open(Dir::Bi);
            opened.is_some()
        });
        let id = opened.expect("credit for a request stream within 5 s");
        let mut send = self.conn.send_stream(id);
        let written = send.write(bytes).expect("write a request");
        assert_eq!(written, bytes.len(), "a request larger than its stream's credit");
        if fin {
            send.finish().expect("finish");
        }
        id
    }

    /// Open the client's control stream with `frames` after its type; returns it.
    pub fn control(&mut self, frames: &[u8]) -> StreamId {
        let id = self.conn.streams().open(Dir::Uni).expect("a uni stream");
        let mut bytes = Vec::new();
        varint::encode(stream_type::CONTROL, &mut bytes);
        bytes.extend_from_slice(frames);
        let written = self.conn.send_stream(id).write(&bytes).expect("write the control stream");
        assert_eq!(written, bytes.len(), "control frames larger than the stream's credit");
        id
    }

    /// Write `data` on stream `id` as credit comes, for at most `limit`: how much was taken, and
    /// the error that stopped it (the peer's STOP_SENDING: `Stopped(code)`), if one did.
    pub fn write_all(&mut self, id: StreamId, data: &[u8], limit: Duration) -> (usize, Option<WriteError>) {
        let mut at = 0;
        let mut failed = None;
        self.pump(limit, |p| {
            while at < data.len() {
                match p.conn.send_stream(id).write(&data[at..]) {
                    Ok(n) => at += n,
                    Err(WriteError::Blocked) => return false,
                    Err(e) => {
                        failed = Some(e);
                        return true;
                    }
                }
            }
            true
        });
        (at, failed)
    }

    /// Everything readable on `id` now, appended to `into`; whether the stream ended.
    pub fn read(&mut self, id: StreamId, into: &mut Vec<u8>) -> bool {
        let mut recv = self.conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return false };
        let mut fin = false;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(c)) => into.extend_from_slice(&c.bytes),
                Ok(None) => {
                    fin = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let _ = chunks.finalize();
        fin
    }

    /// The answer on request stream `id`, read until it ends, is reset, or `limit` passed.
    pub fn answer(&mut self, id: StreamId, head_request: bool, limit: Duration) -> Answer {
        let mut reader = ResponseStream::new(64 << 10, head_request);
        let mut answer = Answer::default();
        let mut pending = Vec::new();
        let mut fin = false;
        self.pump(limit, |p| {
            if let Ok(Some(code)) = p.conn.recv_stream(id).received_reset() {
                answer.reset = Some(code.into_inner());
                return true;
            }
            fin |= p.read(id, &mut pending);
            let mut at = 0;
            let ended = loop {
                match reader.feed(&pending[at..], fin) {
                    Ok((used, event)) => {
                        at += used;
                        match event {
                            Some(ResponseEvent::Head(r)) => answer.status = Some(r.status),
                            Some(ResponseEvent::Body(b)) => answer.body += b.len() as u64,
                            Some(ResponseEvent::Trailers(_)) => {}
                            Some(ResponseEvent::End) => break true,
                            None if at >= pending.len() => break false,
                            None => {}
                        }
                    }
                    Err(e) => panic!("the response broke HTTP/3: {e}"),
                }
            };
            pending.drain(..at);
            answer.ended = ended;
            ended || p.lost().is_some()
        });
        self.settle();
        answer
    }

    /// A request (`method` on `path`) on a new stream, ended, and its answer within 5 s.
    pub fn request(&mut self, method: &str, path: &str) -> Answer {
        let id = self.open(&request_head(method, path), true);
        self.answer(id, method == "HEAD", Duration::from_secs(5))
    }

    /// Close the connection (H3_NO_ERROR) and let the close go out.
    pub fn close(mut self) {
        self.conn.close(Instant::now(), VarInt::from_u32(0x100), Bytes::new());
        self.flush();
    }
}

/// A request's HEADERS frame: the four pseudo-fields.
pub fn request_head(method: &str, path: &str) -> Vec<u8> {
    let fields: [(&[u8], &[u8]); 4] = [
        (b":method", method.as_bytes()),
        (b":scheme", b"https"),
        (b":authority", SERVER_NAME.as_bytes()),
        (b":path", path.as_bytes()),
    ];
    let mut block = Vec::new();
    encode_field_section(fields, &mut block);
    let mut frame = Vec::new();
    put_headers_frame(&block, &mut frame);
    frame
}

/// One flooder: its socket, its connection (fed what the server sends, never sending again).
struct Flooder {
    socket: UdpSocket,
    handle: ConnectionHandle,
    conn: Connection,
    /// Its first datagram (the Initial with the ClientHello), sent again as a trickle.
    first: Vec<u8>,
    sent_at: Instant,
    trickled_at: Instant,
    retried: bool,
    answered: bool,
    /// Its acknowledgement of the server's Initial went out.
    acked: bool,
    lost: Option<(Instant, ConnectionError)>,
}

/// What became of a flood's Initials.
#[derive(Debug, Default)]
pub struct FloodOutcome {
    pub sent: usize,
    /// Answered with a Retry (no state kept for them).
    pub retried: usize,
    /// Answered with a handshake (state kept: admitted).
    pub admitted: usize,
    /// Of the admitted, how long after its Initial each was closed by the server, and how.
    pub closed_after: Vec<(Duration, String)>,
}

/// `n` clients' first Initials, each from its own UDP socket (source port). What the server
/// sends them is read: a Retry is counted and not answered (the token never comes back); a
/// handshake is fed to its connection, whose acknowledgement of the server's Initial is sent
/// and nothing after it (its Handshake packets, with its Finished, are cut off), but for its
/// first Initial again every 50 ms: a handshake kept alive by a trickle, which only the
/// server's handshake deadline ends. The acknowledgement gives the server an RTT sample
/// (without one its closing period is three 1 s probe timeouts); the server's close is seen.
pub struct InitialFlood {
    server: SocketAddr,
    endpoint: quinn_proto::Endpoint,
    flooders: Vec<Flooder>,
}

impl InitialFlood {
    pub fn send(server: SocketAddr, ca: &Path, n: usize) -> InitialFlood {
        let (config, endpoint_config) = client_config(ca);
        let mut endpoint = quinn_proto::Endpoint::new(endpoint_config, None, false, None);
        // Every Initial made first, then all sent at once: what the server answers is read
        // while it is fresh (its RTT sample is the time to the acknowledgement).
        let mut initials = Vec::with_capacity(n);
        for _ in 0..n {
            let (handle, mut conn) =
                endpoint.connect(Instant::now(), config.clone(), server, SERVER_NAME).expect("a connection");
            let mut first = Vec::new();
            let t = conn.poll_transmit(Instant::now(), 1, &mut first).expect("an Initial");
            first.truncate(t.size);
            initials.push((handle, conn, first));
        }
        let mut flooders = Vec::with_capacity(n);
        for (handle, conn, first) in initials {
            let socket = flooder_socket();
            socket.set_nonblocking(true).expect("nonblocking");
            // Before the send: the server may take it before this thread runs again.
            let sent_at = Instant::now();
            socket.send_to(&first, server).expect("send an Initial");
            flooders.push(Flooder {
                socket,
                handle,
                conn,
                first,
                sent_at,
                trickled_at: sent_at,
                retried: false,
                answered: false,
                acked: false,
                lost: None,
            });
        }
        InitialFlood { server, endpoint, flooders }
    }

    /// Read what the server sends the flooders until `done` holds of what became of them, or
    /// `limit` passed.
    pub fn watch(&mut self, limit: Duration, done: impl Fn(&FloodOutcome) -> bool) -> FloodOutcome {
        let start = Instant::now();
        let mut buf = vec![0u8; 65536];
        loop {
            for f in self.flooders.iter_mut() {
                while let Ok(n) = f.socket.recv(&mut buf) {
                    // A long header (0x80) of type Retry (0x30 in QUIC v1).
                    if n > 0 && buf[0] & 0xb0 == 0xb0 {
                        f.retried = true;
                        continue;
                    }
                    f.answered = true;
                    let mut response = Vec::new();
                    let now = Instant::now();
                    let data = BytesMut::from(&buf[..n]);
                    if let Some(DatagramEvent::ConnectionEvent(ch, ev)) =
                        self.endpoint.handle(now, self.server, None, None, data, &mut response)
                    {
                        if ch == f.handle {
                            f.conn.handle_event(ev);
                        }
                    }
                    while let Some(ev) = f.conn.poll_endpoint_events() {
                        if let Some(answer) = self.endpoint.handle_event(f.handle, ev) {
                            f.conn.handle_event(answer);
                        }
                    }
                    while let Some(ev) = f.conn.poll() {
                        if let Event::ConnectionLost { reason } = ev {
                            f.lost.get_or_insert((now, reason));
                        }
                    }
                }
            }
            for f in self.flooders.iter_mut().filter(|f| f.answered && !f.acked) {
                let mut out = Vec::new();
                let Some(t) = f.conn.poll_transmit(Instant::now(), 1, &mut out) else { continue };
                if let Some(len) = initial_packet_len(&out[..t.size]) {
                    // Zeros after it: a client's Initial travels in a datagram of 1200 bytes
                    // or more; the receiver drops what does not parse as a packet.
                    let mut ack = out[..len].to_vec();
                    ack.resize(len.max(1200), 0);
                    let _ = f.socket.send_to(&ack, self.server);
                    f.acked = true;
                }
            }
            // The admitted ones keep their handshakes alive with a trickle: their first
            // Initial again every 50 ms (which also lets the server send them 3 times as much,
            // its close among it: quinn-proto counts only a datagram's first packet).
            for f in self.flooders.iter_mut().filter(|f| f.acked && f.lost.is_none()) {
                if f.trickled_at.elapsed() >= TRICKLE {
                    let _ = f.socket.send_to(&f.first, self.server);
                    f.trickled_at = Instant::now();
                }
            }
            let outcome = self.outcome();
            if done(&outcome) || start.elapsed() >= limit {
                return outcome;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn outcome(&self) -> FloodOutcome {
        FloodOutcome {
            sent: self.flooders.len(),
            retried: self.flooders.iter().filter(|f| f.retried).count(),
            admitted: self.flooders.iter().filter(|f| f.answered).count(),
            closed_after: self
                .flooders
                .iter()
                .filter_map(|f| f.lost.as_ref().map(|(at, why)| (at.duration_since(f.sent_at), why.to_string())))
                .collect(),
        }
    }
}

/// How often an admitted flooder sends its first Initial again.
const TRICKLE: Duration = Duration::from_millis(50);

/// The length of the Initial packet at the start of `datagram` (RFC 9000 §17.2.2), if it starts
/// with one: the long header's fixed fields, the connection IDs, the token and the length.
fn initial_packet_len(datagram: &[u8]) -> Option<usize> {
    // Long header, type Initial (the fixed bit may be greased, RFC 9287; the low four bits are
    // protected).
    if datagram.first()? & 0xb0 != 0x80 {
        return None;
    }
    let mut at = 5;
    at += 1 + usize::from(*datagram.get(at)?);
    at += 1 + usize::from(*datagram.get(at)?);
    let (token, used) = varint::decode(datagram.get(at..)?)?;
    at += used + usize::try_from(token).ok()?;
    let (len, used) = varint::decode(datagram.get(at..)?)?;
    at += used + usize::try_from(len).ok()?;
    (at <= datagram.len()).then_some(at)
}

/// A flooder's UDP socket, on 127.0.0.2 where the system has it (the whole of 127.0.0.0/8 is
/// loopback on Linux): hundreds of them bound on 127.0.0.1 would take ports that servers started
/// meanwhile by other tests want for their UDP socket at their TCP port's number.
fn flooder_socket() -> UdpSocket {
    UdpSocket::bind("127.0.0.2:0").or_else(|_| UdpSocket::bind("127.0.0.1:0")).expect("a UDP socket")
}
