//! The HTTP/3 server stage in memory: a quinn-proto client speaking HTTP/3 with crates/h3's
//! frames to a [`QuicEndpoint`] serving [`H3Apps`], on simulated time.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use quinn_proto::{ConnectionError, Dir, StreamId, VarInt};
use sockscale_h3::{
    encode_field_section, put_data_frame_header, put_headers_frame, stream_type, varint, ErrorCode, ResponseEvent,
    ResponseStream, Settings,
};

use super::h3::H3Apps;
use super::tests::{admission, certs, client_config, setup, Certs, Pair};
use super::*;
use crate::http::{FileChunks, HttpConfig, ResponseBody};
use crate::udp::Endpoint;

type H3Pair = Pair<QuicEndpoint<H3Apps>>;

struct Client {
    pair: H3Pair,
    conn: usize,
    setup: Arc<QuicSetup>,
    _certs: Certs,
}

fn serve(http: HttpConfig) -> Client {
    serve_to(http, QuicTuning::default())
}

/// The server with `http`, and a client whose windows and limits are `client`'s.
fn serve_to(http: HttpConfig, client: QuicTuning) -> Client {
    let certs = certs();
    let setup = setup(&certs, b"h3", QuicTuning::default());
    let apps = H3Apps::new(Arc::new(http), setup.totals.clone(), Instant::now(), SystemTime::now());
    let server = QuicEndpoint::new(setup.clone(), admission(), apps);
    let mut pair = Pair::new(server);
    let conn = pair.connect(client_config(&certs, b"h3", &client));
    assert!(pair.drive_until(Duration::from_secs(5), |p| p.connected(conn)), "no handshake");
    Client { pair, conn, setup, _certs: certs }
}

fn get(path: &str) -> Vec<u8> {
    request(b"GET", path, &[])
}

/// A request's HEADERS frame, fields as given after the four pseudo-fields.
fn request(method: &[u8], path: &str, extra: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut fields: Vec<(&[u8], &[u8])> =
        vec![(b":method", method), (b":scheme", b"https"), (b":authority", b"127.0.0.1"), (b":path", path.as_bytes())];
    fields.extend_from_slice(extra);
    let mut block = Vec::new();
    encode_field_section(fields, &mut block);
    let mut frame = Vec::new();
    put_headers_frame(&block, &mut frame);
    frame
}

/// What came back on a request stream.
#[derive(Debug, Default)]
struct Answer {
    status: Option<u16>,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
    ended: bool,
    reset: Option<u64>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields.iter().find(|(n, _)| n == name.as_bytes()).map(|(_, v)| v.as_slice())
    }
}

impl Client {
    fn open(&mut self, bytes: &[u8], fin: bool) -> StreamId {
        let conn = &mut self.pair.conns[self.conn].1;
        let id = conn.streams().open(Dir::Bi).expect("a stream");
        let mut send = conn.send_stream(id);
        let mut at = 0;
        while at < bytes.len() {
            at += send.write(&bytes[at..]).expect("write");
        }
        if fin {
            send.finish().expect("finish");
        }
        id
    }

    /// Send `frames` on a new stream and collect the answer until it ends or is reset.
    fn exchange(&mut self, frames: &[u8]) -> Answer {
        let id = self.open(frames, true);
        self.answer(id, false)
    }

    fn answer(&mut self, id: StreamId, head: bool) -> Answer {
        let mut reader = ResponseStream::new(64 << 10, head);
        let mut answer = Answer::default();
        let conn = self.conn;
        self.pair.drive_until(Duration::from_secs(30), |p| {
            if let Ok(Some(code)) = p.conns[conn].1.recv_stream(id).received_reset() {
                answer.reset = Some(code.into_inner());
                return true;
            }
            let (bytes, fin) = p.read_client(conn, id);
            let mut at = 0;
            loop {
                match reader.feed(&bytes[at..], fin) {
                    Ok((used, event)) => {
                        at += used;
                        match event {
                            Some(ResponseEvent::Head(r)) => {
                                answer.status = Some(r.status);
                                answer.fields = r.fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                            }
                            Some(ResponseEvent::Body(b)) => answer.body.extend_from_slice(b),
                            Some(ResponseEvent::Trailers(_)) => {}
                            Some(ResponseEvent::End) => {
                                answer.ended = true;
                                return true;
                            }
                            None if at >= bytes.len() => return false,
                            None => {}
                        }
                    }
                    Err(e) => panic!("the response broke HTTP/3: {e}"),
                }
            }
        });
        answer
    }

    /// Open the client's control stream with `frames` after its type.
    fn control(&mut self, frames: &[u8]) -> StreamId {
        let conn = &mut self.pair.conns[self.conn].1;
        let id = conn.streams().open(Dir::Uni).expect("a uni stream");
        let mut bytes = Vec::new();
        varint::encode(stream_type::CONTROL, &mut bytes);
        bytes.extend_from_slice(frames);
        conn.send_stream(id).write(&bytes).expect("write");
        id
    }

    fn settings() -> Vec<u8> {
        let mut out = Vec::new();
        Settings::default().encode_frame(&mut out);
        out
    }

    /// The connection's close code, once it closed.
    fn closed_with(&mut self) -> Option<u64> {
        let conn = self.conn;
        self.pair.drive_until(Duration::from_secs(5), |p| p.lost(conn).is_some());
        match self.pair.lost(conn)? {
            ConnectionError::ApplicationClosed(close) => Some(close.error_code.into_inner()),
            other => panic!("closed otherwise: {other:?}"),
        }
    }
}

#[test]
fn a_get_is_answered_with_the_configured_page() {
    let http = HttpConfig::default();
    let body = match &http.body {
        ResponseBody::Bytes(b) => b.clone(),
        ResponseBody::File { .. } => unreachable!(),
    };
    let mut c = serve(http);
    c.control(&Client::settings());
    let answer = c.exchange(&get("/"));
    assert_eq!(answer.status, Some(200));
    assert!(answer.ended);
    assert_eq!(answer.body, body.to_vec());
    assert_eq!(answer.field("content-length"), Some(body.len().to_string().as_bytes()));
    assert_eq!(answer.field("server"), Some(&b"sockscale"[..]));
    assert!(answer.field("date").is_some_and(|d| d.ends_with(b" GMT")));
    assert_eq!(c.setup.totals.snapshot().requests, 1);
}

#[test]
fn the_server_opens_its_control_stream_with_settings_at_once() {
    let mut c = serve(HttpConfig::default());
    let conn = c.conn;
    // Without any request: the client only waits.
    let mut got = Vec::new();
    let seen = c.pair.drive_until(Duration::from_secs(2), |p| {
        while let Some(id) = p.conns[conn].1.streams().accept(Dir::Uni) {
            let (bytes, _) = p.read_client(conn, id);
            got = bytes;
        }
        !got.is_empty()
    });
    assert!(seen, "no control stream from the server");
    let (ty, used) = varint::decode(&got).expect("a stream type");
    assert_eq!(ty, stream_type::CONTROL);
    let mut control = sockscale_h3::ControlStream::new(sockscale_h3::Side::Client, 4096);
    let (_, event) = control.feed(&got[used..], false).expect("valid frames");
    let Some(sockscale_h3::ControlEvent::Settings(settings)) = event else { panic!("not SETTINGS first: {event:?}") };
    assert_eq!((settings.qpack_max_table_capacity, settings.qpack_blocked_streams), (0, 0));
    assert_eq!(settings.max_field_section_size, Some(8192));
}

#[test]
fn a_head_gets_the_head_only_and_a_post_body_is_read() {
    let mut c = serve(HttpConfig::default());
    let id = c.open(&request(b"HEAD", "/", &[]), true);
    let answer = c.answer(id, true);
    assert_eq!(answer.status, Some(200));
    assert!(answer.body.is_empty() && answer.ended);
    assert_eq!(answer.field("content-length"), Some(&b"4096"[..]));
    let mut post = request(b"POST", "/upload", &[]);
    let body = vec![7u8; 300_000];
    put_data_frame_header(body.len() as u64, &mut post);
    post.extend_from_slice(&body);
    let answer = c.exchange(&post);
    assert_eq!((answer.status, answer.body.len()), (Some(200), 4096));
}

#[test]
fn a_hundred_concurrent_requests_on_one_connection_are_all_answered() {
    let mut c = serve(HttpConfig::default());
    let ids: Vec<StreamId> = (0..100).map(|i| c.open(&get(&format!("/{i}")), true)).collect();
    for id in ids {
        let answer = c.answer(id, false);
        assert_eq!((answer.status, answer.body.len(), answer.ended), (Some(200), 4096, true), "stream {id}");
    }
    assert_eq!(c.setup.totals.snapshot().requests, 100);
}

/// A body file in memory: byte `i` is `i % 251`.
#[derive(Debug)]
struct Pattern;

impl FileChunks for Pattern {
    fn read_chunk(&self, at: u64, max: usize) -> std::io::Result<Bytes> {
        Ok((0..max as u64).map(|i| ((at + i) % 251) as u8).collect::<Vec<u8>>().into())
    }
}

#[test]
fn a_ten_mib_file_body_is_sent_whole_a_chunk_at_a_time_through_small_windows() {
    let len = 10u64 << 20;
    let http =
        HttpConfig { body: ResponseBody::File { len }, file_chunks: Some(Arc::new(Pattern)), ..HttpConfig::default() };
    // A client granting 300 KB a connection at a time, less than a stream's 1 MiB: the response
    // is written, blocked by the connection's window and woken by its credit many times. (With
    // a write that stopped at a partial chunk and did not go on to `Blocked`, quinn-proto never
    // woke the stream: aioquic's 10 MiB download stalled so; this fails then.)
    let small = QuicTuning { stream_window: 1 << 20, connection_window: 300_000, ..QuicTuning::default() };
    let mut c = serve_to(http, small);
    let answer = c.exchange(&get("/big"));
    assert_eq!(answer.status, Some(200));
    assert!(answer.ended);
    assert_eq!(answer.body.len() as u64, len);
    assert!(answer.body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "the bytes differ");
}

#[test]
fn a_malformed_request_resets_its_stream_and_the_connection_goes_on() {
    let mut c = serve(HttpConfig::default());
    // No :path.
    let mut block = Vec::new();
    encode_field_section([(&b":method"[..], &b"GET"[..]), (b":scheme", b"https"), (b":authority", b"x")], &mut block);
    let mut frame = Vec::new();
    put_headers_frame(&block, &mut frame);
    let answer = c.exchange(&frame);
    assert_eq!(answer.reset, Some(ErrorCode::H3_MESSAGE_ERROR.code()));
    assert_eq!(c.exchange(&get("/")).status, Some(200));
    let counts = c.setup.totals.snapshot();
    assert_eq!((counts.stream_errors, counts.requests), (1, 1));
}

#[test]
fn data_before_headers_closes_the_connection_with_frame_unexpected() {
    let mut c = serve(HttpConfig::default());
    let mut frames = Vec::new();
    put_data_frame_header(3, &mut frames);
    frames.extend_from_slice(b"abc");
    c.open(&frames, true);
    assert_eq!(c.closed_with(), Some(ErrorCode::H3_FRAME_UNEXPECTED.code()));
    assert_eq!(c.setup.totals.snapshot().connection_errors, 1);
}

#[test]
fn a_second_control_stream_and_a_control_stream_without_settings_are_connection_errors() {
    let mut c = serve(HttpConfig::default());
    c.control(&Client::settings());
    c.control(&Client::settings());
    assert_eq!(c.closed_with(), Some(ErrorCode::H3_STREAM_CREATION_ERROR.code()));

    let mut c = serve(HttpConfig::default());
    let mut goaway = Vec::new();
    sockscale_h3::put_goaway(0, &mut goaway);
    c.control(&goaway);
    assert_eq!(c.closed_with(), Some(ErrorCode::H3_MISSING_SETTINGS.code()));
}

#[test]
fn a_request_body_over_the_limit_gets_413_and_a_stop_sending() {
    let http = HttpConfig { max_body_bytes: 1000, ..HttpConfig::default() };
    let mut c = serve(http);
    let mut post = request(b"POST", "/", &[]);
    put_data_frame_header(5000, &mut post);
    post.extend_from_slice(&[1u8; 5000]);
    let id = c.open(&post, false);
    let answer = c.answer(id, false);
    assert_eq!(answer.status, Some(413));
    assert!(answer.ended);
    let conn = c.conn;
    let stopped = c.pair.drive_until(Duration::from_secs(2), |p| {
        matches!(p.conns[conn].1.send_stream(id).stopped(), Ok(Some(code)) if code == VarInt::from_u64(0x100).expect("code"))
    });
    assert!(stopped, "no STOP_SENDING(H3_NO_ERROR)");
    assert_eq!(c.setup.totals.snapshot().bodies_too_large, 1);
}

#[test]
fn a_drain_sends_goaway_answers_the_request_in_flight_and_closes_with_no_error() {
    let mut c = serve(HttpConfig::default());
    // A request whose end has not come yet: the drain waits for it.
    let id = c.open(&get("/"), false);
    c.pair.drive_until(Duration::from_millis(50), |_| false);
    let now = c.pair.now;
    c.pair.server.begin_drain(now);
    c.pair.drive_until(Duration::from_millis(50), |_| false);
    assert!(c.pair.lost(c.conn).is_none(), "closed before its request was answered");
    c.pair.conns[c.conn].1.send_stream(id).finish().expect("finish");
    let answer = c.answer(id, false);
    assert_eq!(answer.status, Some(200));
    assert_eq!(c.closed_with(), Some(ErrorCode::H3_NO_ERROR.code()));
    assert!(c.pair.drive_until(Duration::from_secs(5), |p| p.server.drained()));
}

#[test]
fn a_rapid_reset_flood_is_held_to_the_stream_limit_and_costs_nothing_lasting() {
    let mut c = serve(HttpConfig::default());
    let conn = c.conn;
    let half = &get("/")[..3];
    // As many request streams as allowed at once (the server's limit, 128), each reset after
    // part of its head; then again each time credit comes back.
    let mut total = 0;
    for round in 0..40 {
        let mut opened = 0;
        while let Some(id) = c.pair.conns[conn].1.streams().open(Dir::Bi) {
            c.pair.conns[conn].1.send_stream(id).write(half).expect("write");
            let _ = c.pair.conns[conn].1.send_stream(id).reset(0x10cu32.into());
            opened += 1;
        }
        if round == 0 {
            assert_eq!(opened, 128);
        }
        total += opened;
        c.pair.drive_until(Duration::from_millis(50), |_| false);
    }
    assert!(total > 1000, "credit came back for only {total} streams");
    // Nothing of them is held, and a request is still answered.
    let answer = c.exchange(&get("/"));
    assert_eq!(answer.status, Some(200));
    let counts = c.setup.totals.snapshot();
    assert!(counts.streams_reset >= total as u64 - 128, "{counts:?} of {total}");
}

#[test]
fn unknown_frames_on_the_control_stream_cost_no_memory_and_are_skipped() {
    let mut c = serve(HttpConfig::default());
    let mut frames = Client::settings();
    // A reserved frame type (0x21) announcing 1 GiB, sent in part: skipped as it comes.
    varint::encode(0x21, &mut frames);
    varint::encode(1 << 30, &mut frames);
    frames.extend_from_slice(&vec![0u8; 200_000]);
    c.control(&frames);
    let answer = c.exchange(&get("/"));
    assert_eq!(answer.status, Some(200));
    assert!(c.pair.lost(c.conn).is_none());
}

#[test]
fn a_client_goaway_closes_the_connection_once_its_requests_are_answered() {
    let mut c = serve(HttpConfig::default());
    let id = c.open(&get("/"), false);
    let mut frames = Client::settings();
    sockscale_h3::put_goaway(0, &mut frames);
    c.control(&frames);
    c.pair.drive_until(Duration::from_millis(50), |_| false);
    assert!(c.pair.lost(c.conn).is_none(), "closed before its request was answered");
    c.pair.conns[c.conn].1.send_stream(id).finish().expect("finish");
    assert_eq!(c.answer(id, false).status, Some(200));
    assert_eq!(c.closed_with(), Some(ErrorCode::H3_NO_ERROR.code()));
}

#[test]
fn a_peer_that_never_acknowledges_holds_a_bounded_flight_until_the_idle_timeout() {
    let len = 100u64 << 20;
    let http =
        HttpConfig { body: ResponseBody::File { len }, file_chunks: Some(Arc::new(Pattern)), ..HttpConfig::default() };
    let mut c = serve(http);
    c.open(&get("/huge"), true);
    c.pair.drive_until(Duration::from_millis(20), |_| false);
    // From now on nothing of the client's reaches the server: no ACK, no credit.
    c.pair.mute_client = true;
    let (start, sent_before) = (c.pair.now, c.pair.server_datagrams);
    assert!(c.pair.drive_until(Duration::from_secs(60), |p| p.server.open_connections() == 0), "never let go");
    let (took, sent) = (c.pair.now - start, c.pair.server_datagrams - sent_before);
    // The congestion window stops new data at once; probes back off; the idle timeout (30 s
    // since the client was last heard) ends it.
    assert!(took <= Duration::from_secs(31), "held {took:?}");
    assert!(sent < 200, "{sent} datagrams to a peer that never acknowledged");
}
