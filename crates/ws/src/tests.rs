//! The sessions tested with octets: every rule of RFC 6455 §5-7 and RFC 7692 §6-7 that the
//! stage enforces, arbitrary splits of the input, and random input.

use std::time::Instant;

use proptest::prelude::*;

use crate::deflate::{codec, DeflateParams};
use crate::frame::{self, apply_mask, FIN, RSV1, RSV2, RSV3};
use crate::session::code;
use crate::{ClientSession, Closing, Config, Kind, Message, Role, Stats, Verdict};

/// A server session with its own counters (the server's engine keeps them per thread).
#[derive(Debug)]
struct Session {
    session: crate::Session,
    stats: Stats,
}

impl Session {
    fn new(config: &Config, deflate: Option<&DeflateParams>, now: Instant) -> Session {
        Session { session: crate::Session::new(config, deflate, now), stats: Stats::default() }
    }

    fn receive(&mut self, input: &[u8], now: Instant, out: &mut Vec<u8>) -> Verdict {
        self.session.receive(input, now, &mut self.stats, out)
    }

    fn on_ping_due(&mut self, now: Instant, out: &mut Vec<u8>) -> Verdict {
        self.session.on_ping_due(now, &mut self.stats, out)
    }

    fn initiate_close(&mut self, code: u16, out: &mut Vec<u8>) -> Verdict {
        self.session.initiate_close(code, &mut self.stats, out)
    }

    fn buffered(&self) -> usize {
        self.session.buffered()
    }

    fn closing(&self) -> bool {
        self.session.closing()
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }
}

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CONT: u8 = 0x0;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// A frame as a client sends it (masked).
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_frame(first, payload, Some(KEY), &mut out);
    out
}

/// A frame as a server sends it (unmasked).
fn plain(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_frame(first, payload, None, &mut out);
    out
}

fn close_payload(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason);
    payload
}

fn server() -> Session {
    Session::new(&Config::default(), None, Instant::now())
}

fn deflate_params() -> DeflateParams {
    DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        server_max_window_bits: 15,
        client_max_window_bits: 15,
        level: 1,
    }
}

/// Feeds `input` in one call: the output and the verdict.
fn feed(session: &mut Session, input: &[u8]) -> (Vec<u8>, Verdict) {
    let mut out = Vec::new();
    let verdict = session.receive(input, Instant::now(), &mut out);
    (out, verdict)
}

/// Feeds `input` one octet at a time, stopping at the first verdict other than Continue.
fn feed_bytewise(session: &mut Session, input: &[u8]) -> (Vec<u8>, Verdict) {
    let mut out = Vec::new();
    for byte in input {
        let verdict = session.receive(std::slice::from_ref(byte), Instant::now(), &mut out);
        if verdict != Verdict::Continue {
            return (out, verdict);
        }
    }
    (out, Verdict::Continue)
}

/// Expects the connection failed with `code`: a close frame with it, last, and the verdict.
fn assert_fails(input: &[u8], code: u16) {
    for bytewise in [false, true] {
        let mut session = server();
        let (out, verdict) = if bytewise { feed_bytewise(&mut session, input) } else { feed(&mut session, input) };
        assert_eq!(verdict, Verdict::Close(Closing::Failed(code)), "bytewise {bytewise}");
        assert!(out.ends_with(&plain(FIN | CLOSE, &code.to_be_bytes())), "bytewise {bytewise}: {out:02x?}");
        assert_eq!(session.stats().closes_sent.get(code), 1);
    }
}

#[test]
fn text_and_binary_messages_are_echoed_as_messages() {
    let mut session = server();
    let mut input = masked(FIN | TEXT, b"Hello");
    input.extend(masked(FIN | BINARY, &[0, 1, 2, 255]));
    input.extend(masked(FIN | TEXT, b""));
    let (out, verdict) = feed(&mut session, &input);
    assert_eq!(verdict, Verdict::Continue);
    let mut expected = plain(FIN | TEXT, b"Hello");
    expected.extend(plain(FIN | BINARY, &[0, 1, 2, 255]));
    expected.extend(plain(FIN | TEXT, b""));
    assert_eq!(out, expected);
    let stats = session.stats();
    assert_eq!((stats.messages_received, stats.messages_sent, stats.bytes_received, stats.bytes_sent), (3, 3, 9, 9));
    assert_eq!(session.buffered(), 0);
}

#[test]
fn fragments_are_reassembled_with_control_frames_between() {
    let mut input = masked(TEXT, b"Hel");
    input.extend(masked(FIN | PING, b"p"));
    input.extend(masked(CONT, b""));
    input.extend(masked(FIN | CONT, b"lo"));
    let mut expected = plain(FIN | PONG, b"p");
    expected.extend(plain(FIN | TEXT, b"Hello"));
    for bytewise in [false, true] {
        let mut session = server();
        let (out, verdict) = if bytewise { feed_bytewise(&mut session, &input) } else { feed(&mut session, &input) };
        assert_eq!((out, verdict), (expected.clone(), Verdict::Continue), "bytewise {bytewise}");
    }
}

#[test]
fn long_lengths_are_read() {
    for len in [126usize, 65535, 65536, 200_000] {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut session = server();
        let (out, _) = feed(&mut session, &masked(FIN | BINARY, &payload));
        assert_eq!(out, plain(FIN | BINARY, &payload), "len {len}");
    }
}

#[test]
fn a_non_minimal_length_is_accepted() {
    // RFC 6455 asks senders for the fewest octets; a receiver that reads more is lenient.
    let mut input = vec![FIN | BINARY, 0x80 | 126, 0, 3];
    input.extend_from_slice(&KEY);
    let mut payload = *b"abc";
    apply_mask(&mut payload, KEY, 0);
    input.extend_from_slice(&payload);
    assert_eq!(feed(&mut server(), &input).0, plain(FIN | BINARY, b"abc"));
}

#[test]
fn unmasked_client_frames_are_1002() {
    assert_fails(&plain(FIN | TEXT, b"Hello"), code::PROTOCOL_ERROR);
}

#[test]
fn reserved_bits_and_opcodes_are_1002() {
    assert_fails(&masked(FIN | RSV2 | TEXT, b"x"), code::PROTOCOL_ERROR);
    assert_fails(&masked(FIN | RSV3 | TEXT, b"x"), code::PROTOCOL_ERROR);
    // RSV1 without permessage-deflate agreed.
    assert_fails(&masked(FIN | RSV1 | TEXT, b"x"), code::PROTOCOL_ERROR);
    for opcode in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
        assert_fails(&masked(FIN | opcode, b""), code::PROTOCOL_ERROR);
    }
}

#[test]
fn a_64_bit_length_with_the_top_bit_set_is_1002() {
    let mut input = vec![FIN | BINARY, 0x80 | 127];
    input.extend_from_slice(&(1u64 << 63).to_be_bytes());
    input.extend_from_slice(&KEY);
    assert_fails(&input, code::PROTOCOL_ERROR);
}

#[test]
fn control_frames_fragmented_or_over_125_are_1002() {
    assert_fails(&masked(PING, b"x"), code::PROTOCOL_ERROR);
    assert_fails(&masked(FIN | PING, &[0; 126]), code::PROTOCOL_ERROR);
    assert_fails(&masked(FIN | CLOSE, &[0x03; 126]), code::PROTOCOL_ERROR);
    // 125 is allowed.
    let (out, verdict) = feed(&mut server(), &masked(FIN | PING, &[7; 125]));
    assert_eq!((out, verdict), (plain(FIN | PONG, &[7; 125]), Verdict::Continue));
}

#[test]
fn continuation_rules_are_1002() {
    // A continuation with no message started.
    assert_fails(&masked(FIN | CONT, b"x"), code::PROTOCOL_ERROR);
    // A new message inside a fragmented one.
    let mut input = masked(TEXT, b"a");
    input.extend(masked(FIN | TEXT, b"b"));
    assert_fails(&input, code::PROTOCOL_ERROR);
}

#[test]
fn a_message_past_max_message_is_1009_before_its_payload_arrives() {
    let config = Config { max_message: 1000 };
    // Just the header of a frame announcing 1001 octets: refused at once.
    let mut header = Vec::new();
    frame::write_header(FIN | BINARY, 1001, Some(KEY), &mut header);
    let mut session = Session::new(&config, None, Instant::now());
    let (out, verdict) = feed(&mut session, &header);
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::TOO_BIG)));
    assert_eq!(out, plain(FIN | CLOSE, &code::TOO_BIG.to_be_bytes()));
    assert_eq!(session.buffered(), 0);
    // A 64-bit length of 2^62: the same, nothing allocated.
    let mut huge = vec![FIN | BINARY, 0x80 | 127];
    huge.extend_from_slice(&(1u64 << 62).to_be_bytes());
    huge.extend_from_slice(&KEY);
    let mut session = server();
    assert_eq!(feed(&mut session, &huge).1, Verdict::Close(Closing::Failed(code::TOO_BIG)));
    // Fragments adding up past the limit: refused at the frame that crosses it.
    let mut session = Session::new(&config, None, Instant::now());
    let (_, verdict) = feed(&mut session, &masked(BINARY, &[1; 600]));
    assert_eq!(verdict, Verdict::Continue);
    assert!(session.buffered() <= 1000);
    let (_, verdict) = feed(&mut session, &masked(FIN | CONT, &[1; 401]));
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::TOO_BIG)));
    // Exactly the limit is accepted.
    let mut session = Session::new(&config, None, Instant::now());
    let (out, verdict) = feed(&mut session, &masked(FIN | BINARY, &[9; 1000]));
    assert_eq!((out, verdict), (plain(FIN | BINARY, &[9; 1000]), Verdict::Continue));
}

#[test]
fn invalid_utf8_is_1007_at_the_first_bad_octet() {
    assert_fails(&masked(FIN | TEXT, b"ok \xff"), code::INVALID_PAYLOAD);
    // A surrogate, an overlong form and a code point past U+10FFFF.
    for bad in [&b"\xed\xa0\x80"[..], b"\xc0\xaf", b"\xf4\x90\x80\x80"] {
        assert_fails(&masked(FIN | TEXT, bad), code::INVALID_PAYLOAD);
    }
    // In the first fragment of a message that never ends: failed before the rest arrives.
    let mut session = server();
    let (_, verdict) = feed(&mut session, &masked(TEXT, b"abc\xce\xba\xff"));
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::INVALID_PAYLOAD)));
    // In the middle of a frame whose end has not arrived.
    let frame = masked(FIN | TEXT, b"abc\xffdefghij");
    let mut session = server();
    let (_, verdict) = feed(&mut session, &frame[..frame.len() - 4]);
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::INVALID_PAYLOAD)));
}

#[test]
fn a_utf8_sequence_split_across_fragments_is_fine_but_not_at_the_end() {
    // "κόσμε" with its first character's two octets in two fragments.
    let text = "κόσμε".as_bytes();
    let mut input = masked(TEXT, &text[..1]);
    input.extend(masked(FIN | CONT, &text[1..]));
    assert_eq!(feed(&mut server(), &input).0, plain(FIN | TEXT, text));
    // A message that ends inside a sequence.
    assert_fails(&masked(FIN | TEXT, &text[..3]), code::INVALID_PAYLOAD);
    let mut input = masked(TEXT, b"ok");
    input.extend(masked(FIN | CONT, &text[..1]));
    assert_fails(&input, code::INVALID_PAYLOAD);
}

#[test]
fn ping_is_answered_and_pong_ignored() {
    let mut session = server();
    let mut input = masked(FIN | PING, b"are you there");
    input.extend(masked(FIN | PONG, b"unsolicited"));
    let (out, verdict) = feed(&mut session, &input);
    assert_eq!((out, verdict), (plain(FIN | PONG, b"are you there"), Verdict::Continue));
    let stats = session.stats();
    assert_eq!((stats.pings_received, stats.pongs_sent, stats.pongs_received), (1, 1, 1));
}

#[test]
fn a_ping_flood_is_1008_and_pings_within_the_budget_are_answered() {
    use crate::session::{PING_BUDGET, PING_WINDOW};
    let mut session = server();
    let start = Instant::now();
    let ping = masked(FIN | PING, b"p");
    // The budget, spread over many windows, is answered in full each time.
    for window in 0..3u32 {
        let at = start + PING_WINDOW * window;
        for _ in 0..PING_BUDGET {
            let mut out = Vec::new();
            assert_eq!(session.receive(&ping, at, &mut out), Verdict::Continue, "window {window}");
            assert_eq!(out, plain(FIN | PONG, b"p"));
        }
    }
    // One more in the same window: a flood, closed with 1008 and no pong.
    let mut out = Vec::new();
    let verdict = session.receive(&ping, start + PING_WINDOW * 2, &mut out);
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::POLICY_VIOLATION)));
    assert_eq!(out, plain(FIN | CLOSE, &code::POLICY_VIOLATION.to_be_bytes()));
    assert_eq!(session.stats().closes_sent.get(1008), 1);
    // In one input too.
    let flood = ping.repeat(usize::from(PING_BUDGET) + 1);
    assert_fails(&flood, code::POLICY_VIOLATION);
}

#[test]
fn a_message_of_empty_fragments_that_never_ends_is_1009() {
    use crate::session::FRAGMENT_SLACK;
    let max_message = 1000;
    let mut session = Session::new(&Config { max_message }, None, Instant::now());
    let mut input = masked(BINARY, b"");
    let empty = masked(CONT, b"");
    // Each empty continuation is 6 octets on the wire; the message may take 2 * max + slack.
    let frames = (2 * max_message as u64 + FRAGMENT_SLACK) / empty.len() as u64 + 1;
    for _ in 0..frames {
        input.extend_from_slice(&empty);
    }
    let (out, verdict) = feed(&mut session, &input);
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::TOO_BIG)));
    assert!(out.ends_with(&plain(FIN | CLOSE, &code::TOO_BIG.to_be_bytes())));
    // A message in many small fragments within the bound is fine.
    let mut session = Session::new(&Config { max_message }, None, Instant::now());
    let mut input = masked(BINARY, b"a");
    for _ in 0..998 {
        input.extend(masked(CONT, b"b"));
    }
    input.extend(masked(FIN | CONT, b"c"));
    let (out, verdict) = feed(&mut session, &input);
    assert_eq!(verdict, Verdict::Continue);
    assert_eq!(out.len(), 4 + 1000);
}

#[test]
fn the_close_handshake_echoes_the_code() {
    for (payload, code) in
        [(close_payload(1000, b"bye"), Some(1000)), (close_payload(4999, b""), Some(4999)), (vec![], None)]
    {
        let mut session = server();
        let mut input = masked(FIN | CLOSE, &payload);
        // Anything after the close is not read.
        input.extend(masked(FIN | TEXT, b"late"));
        let (out, verdict) = feed(&mut session, &input);
        let echoed = code.map(|c: u16| c.to_be_bytes().to_vec()).unwrap_or_default();
        assert_eq!(out, plain(FIN | CLOSE, &echoed));
        assert_eq!(verdict, Verdict::Close(Closing::Handshake { code }));
        assert_eq!(session.stats().closes_received.total(), 1);
        assert_eq!(feed(&mut session, b"more").1, verdict, "the verdict stays");
    }
}

#[test]
fn close_codes_are_checked() {
    for valid in [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999] {
        let (_, verdict) = feed(&mut server(), &masked(FIN | CLOSE, &close_payload(valid, b"")));
        assert_eq!(verdict, Verdict::Close(Closing::Handshake { code: Some(valid) }), "{valid}");
    }
    for invalid in [0, 999, 1004, 1005, 1006, 1012, 1015, 1016, 1100, 2000, 2999, 5000, 65535] {
        assert_fails(&masked(FIN | CLOSE, &close_payload(invalid, b"")), code::PROTOCOL_ERROR);
    }
    assert_fails(&masked(FIN | CLOSE, &[0x03]), code::PROTOCOL_ERROR);
    assert_fails(&masked(FIN | CLOSE, &close_payload(1000, b"\xff")), code::INVALID_PAYLOAD);
}

#[test]
fn initiate_close_waits_for_the_peer_and_echoes_nothing_meanwhile() {
    let mut session = server();
    let mut out = Vec::new();
    assert_eq!(session.initiate_close(code::GOING_AWAY, &mut out), Verdict::Continue);
    assert_eq!(out, plain(FIN | CLOSE, &1001u16.to_be_bytes()));
    assert!(session.closing());
    let mut input = masked(FIN | TEXT, b"still here");
    input.extend(masked(FIN | PING, b""));
    let (out, verdict) = feed(&mut session, &input);
    assert_eq!((out, verdict), (vec![], Verdict::Continue));
    let (out, verdict) = feed(&mut session, &masked(FIN | CLOSE, &close_payload(1001, b"")));
    assert_eq!((out, verdict), (vec![], Verdict::Close(Closing::Handshake { code: Some(1001) })));
    assert_eq!(session.stats().closes_sent.get(1001), 1);
}

#[test]
fn a_ping_unanswered_by_the_next_closes_the_connection() {
    let now = Instant::now();
    let mut session = server();
    let mut out = Vec::new();
    assert_eq!(session.on_ping_due(now, &mut out), Verdict::Continue);
    assert_eq!(out, plain(FIN | PING, &1u64.to_be_bytes()));
    // Answered: the next ping goes out.
    feed(&mut session, &masked(FIN | PONG, &1u64.to_be_bytes()));
    out.clear();
    assert_eq!(session.on_ping_due(now, &mut out), Verdict::Continue);
    assert_eq!(out, plain(FIN | PING, &2u64.to_be_bytes()));
    // A pong with another payload does not answer it.
    feed(&mut session, &masked(FIN | PONG, b"other"));
    out.clear();
    assert_eq!(session.on_ping_due(now, &mut out), Verdict::Close(Closing::PingTimeout));
    assert_eq!(out, plain(FIN | CLOSE, &1001u16.to_be_bytes()));
    assert_eq!((session.stats().pings_sent, session.stats().ping_timeouts), (2, 1));
}

#[test]
fn compressed_messages_are_inflated_echoed_compressed_and_counted() {
    let params = deflate_params();
    let mut session = Session::new(&Config::default(), Some(&params), Instant::now());
    let (mut client_compress, mut client_inflate) = codec(&params, Role::Client);
    let mut input = Vec::new();
    for text in ["Hello", "Hello", "a longer message, a longer message, a longer message"] {
        let mut compressed = Vec::new();
        assert!(client_compress.compress(text.as_bytes(), &mut compressed));
        input.extend(masked(FIN | RSV1 | TEXT, &compressed));
    }
    // An uncompressed message is allowed too.
    input.extend(masked(FIN | BINARY, b"plain"));
    let (out, verdict) = feed_bytewise(&mut session, &input);
    assert_eq!(verdict, Verdict::Continue);
    let mut client = ClientSession::new(&Config::default(), Some(&params), fastrand::Rng::with_seed(1), Instant::now());
    let mut sink = Vec::new();
    assert_eq!(client.receive(&out, Instant::now(), &mut sink), Verdict::Continue);
    let texts: Vec<Message> = std::iter::from_fn(|| client.poll_message()).collect();
    assert_eq!(texts.len(), 4);
    assert_eq!(texts[0], Message { kind: Kind::Text, data: b"Hello".to_vec() });
    assert_eq!(texts[2].data, b"a longer message, a longer message, a longer message");
    assert_eq!(texts[3], Message { kind: Kind::Binary, data: b"plain".to_vec() });
    // Every echo was compressed (RSV1 set on its frame).
    assert_eq!(out[0] & RSV1, RSV1);
    let _ = &mut client_inflate;
    assert_eq!(session.stats().bytes_received, 5 + 5 + 52 + 5);
}

#[test]
fn rfc_7692_hello_frames_are_read() {
    // §7.2.3.1 (one frame) and §7.2.3.2 (two fragments), masked as a client sends them.
    let mut session = Session::new(&Config::default(), Some(&deflate_params()), Instant::now());
    let mut input = masked(FIN | RSV1 | TEXT, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]);
    input.extend(masked(RSV1 | TEXT, &[0xf2, 0x48, 0xcd]));
    input.extend(masked(FIN | CONT, &[0xc9, 0xc9, 0x07, 0x00]));
    let mut client =
        ClientSession::new(&Config::default(), Some(&deflate_params()), fastrand::Rng::with_seed(1), Instant::now());
    let (out, verdict) = feed(&mut session, &input);
    assert_eq!(verdict, Verdict::Continue);
    client.receive(&out, Instant::now(), &mut Vec::new());
    assert_eq!(client.poll_message().map(|m| m.data), Some(b"Hello".to_vec()));
    assert_eq!(client.poll_message().map(|m| m.data), Some(b"Hello".to_vec()));
}

#[test]
fn rsv1_on_a_continuation_or_control_frame_is_1002_even_with_deflate() {
    let params = deflate_params();
    for input in [
        {
            let mut input = masked(RSV1 | TEXT, &[0xf2, 0x48, 0xcd]);
            input.extend(masked(FIN | RSV1 | CONT, &[0xc9, 0xc9, 0x07, 0x00]));
            input
        },
        masked(FIN | RSV1 | PING, b""),
    ] {
        let mut session = Session::new(&Config::default(), Some(&params), Instant::now());
        assert_eq!(feed(&mut session, &input).1, Verdict::Close(Closing::Failed(code::PROTOCOL_ERROR)));
    }
}

#[test]
fn a_deflate_bomb_is_1009_and_never_holds_more_than_the_limit() {
    let params = deflate_params();
    let (mut compress, _) = codec(&DeflateParams { level: 9, ..params }, Role::Client);
    let mut bomb = Vec::new();
    assert!(compress.compress(&vec![0u8; 4 << 20], &mut bomb));
    assert!(bomb.len() < 8 << 10, "4 MiB of zeros compress to {} octets", bomb.len());
    let max_message = 256 << 10;
    let mut session = Session::new(&Config { max_message }, Some(&params), Instant::now());
    let frame = masked(FIN | RSV1 | BINARY, &bomb);
    let mut out = Vec::new();
    let mut verdict = Verdict::Continue;
    let mut most = 0;
    for piece in frame.chunks(64) {
        verdict = session.receive(piece, Instant::now(), &mut out);
        most = most.max(session.buffered());
        if verdict != Verdict::Continue {
            break;
        }
    }
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::TOO_BIG)));
    assert!(most <= max_message + 1, "held {most}");
    assert_eq!(out, plain(FIN | CLOSE, &code::TOO_BIG.to_be_bytes()));
}

#[test]
fn corrupt_deflate_is_1007() {
    let mut session = Session::new(&Config::default(), Some(&deflate_params()), Instant::now());
    assert_eq!(
        feed(&mut session, &masked(FIN | RSV1 | BINARY, &[0xff; 16])).1,
        Verdict::Close(Closing::Failed(code::INVALID_PAYLOAD))
    );
}

#[test]
fn the_client_masks_what_it_sends_and_refuses_masked_frames() {
    let mut client = ClientSession::new(&Config::default(), None, fastrand::Rng::with_seed(7), Instant::now());
    let mut out = Vec::new();
    assert!(client.send(Kind::Text, b"Hello", &mut out));
    assert_eq!(out[1] & 0x80, 0x80, "masked");
    // The server reads it and echoes it; the client gets it back.
    let (echo, _) = feed(&mut server(), &out);
    out.clear();
    assert_eq!(client.receive(&echo, Instant::now(), &mut out), Verdict::Continue);
    assert_eq!(client.poll_message(), Some(Message { kind: Kind::Text, data: b"Hello".to_vec() }));
    // A masked frame from the server is 1002; the client's close is masked.
    let verdict = client.receive(&masked(FIN | TEXT, b"x"), Instant::now(), &mut out);
    assert_eq!(verdict, Verdict::Close(Closing::Failed(code::PROTOCOL_ERROR)));
    let Some(frame::Parsed::Header(header, used)) = Some(frame::parse_header(&out)) else { unreachable!() };
    let mut payload = out[used..].to_vec();
    apply_mask(&mut payload, header.mask.expect("a client's close is masked"), 0);
    assert_eq!((header.opcode, payload), (CLOSE, 1002u16.to_be_bytes().to_vec()));
    assert!(!client.send(Kind::Text, b"too late", &mut Vec::new()));
}

#[test]
fn the_client_answers_a_server_close() {
    let mut client = ClientSession::new(&Config::default(), None, fastrand::Rng::with_seed(7), Instant::now());
    let mut out = Vec::new();
    let verdict = client.receive(&plain(FIN | CLOSE, &close_payload(1001, b"drain")), Instant::now(), &mut out);
    assert_eq!(verdict, Verdict::Close(Closing::Handshake { code: Some(1001) }));
    let (echo, _) = feed(&mut server(), &out);
    assert_eq!(echo, plain(FIN | CLOSE, &1001u16.to_be_bytes()), "the client's answer is a masked close 1001");
}

/// A message as a client sends it: fragments (sizes from `cuts`) with pings between.
fn client_frames(kind: u8, payload: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut frames = Vec::new();
    let mut rest = payload;
    let mut first = true;
    for &cut in cuts {
        let cut = cut.min(rest.len());
        let opcode = if first { kind } else { CONT };
        frames.extend(masked(opcode, &rest[..cut]));
        frames.extend(masked(FIN | PING, b"p"));
        rest = &rest[cut..];
        first = false;
    }
    frames.extend(masked(FIN | if first { kind } else { CONT }, rest));
    frames
}

proptest! {
    /// Messages fragmented any way, fed in pieces cut anywhere, come back as the same messages
    /// (with a pong per ping, in order), and the client reads the echo cut anywhere too.
    #[test]
    fn frames_round_trip_through_any_split(
        messages in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 0..300), prop::collection::vec(0usize..100, 0..4)), 1..6),
        splits in prop::collection::vec(1usize..40, 1..20),
        deflate in any::<bool>(),
    ) {
        let params = deflate_params();
        let params = deflate.then_some(&params);
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for (text, payload, cuts) in &messages {
            let (kind, payload) = if *text {
                (TEXT, String::from_utf8_lossy(payload).into_owned().into_bytes())
            } else {
                (BINARY, payload.clone())
            };
            input.extend(client_frames(kind, &payload, cuts));
            expected.push(Message { kind: if *text { Kind::Text } else { Kind::Binary }, data: payload });
        }
        let mut session = Session::new(&Config::default(), params, Instant::now());
        let mut out = Vec::new();
        let mut rest = &input[..];
        let mut i = 0;
        while !rest.is_empty() {
            let take = splits[i % splits.len()].min(rest.len());
            prop_assert_eq!(session.receive(&rest[..take], Instant::now(), &mut out), Verdict::Continue);
            rest = &rest[take..];
            i += 1;
        }
        prop_assert_eq!(session.buffered(), 0);
        let mut client = ClientSession::new(&Config::default(), params, fastrand::Rng::with_seed(3), Instant::now());
        let mut rest = &out[..];
        let mut sink = Vec::new();
        while !rest.is_empty() {
            let take = splits[i % splits.len()].min(rest.len());
            prop_assert_eq!(client.receive(&rest[..take], Instant::now(), &mut sink), Verdict::Continue);
            rest = &rest[take..];
            i += 1;
        }
        let received: Vec<Message> = std::iter::from_fn(|| client.poll_message()).collect();
        prop_assert_eq!(received, expected);
        let pings: usize = messages.iter().map(|(_, _, cuts)| cuts.len()).sum();
        prop_assert_eq!(client.stats().pongs_received, pings as u64);
    }

    /// Random octets, fed whole and in pieces, never panic, and a verdict once given stays.
    #[test]
    fn random_input_never_panics(
        input in prop::collection::vec(any::<u8>(), 0..2000),
        splits in prop::collection::vec(1usize..64, 1..8),
        deflate in any::<bool>(),
        client in any::<bool>(),
    ) {
        let params = deflate_params();
        let params = deflate.then_some(&params);
        let config = Config { max_message: 4096 };
        let mut server = Session::new(&config, params, Instant::now());
        let mut peer = ClientSession::new(&config, params, fastrand::Rng::with_seed(5), Instant::now());
        let mut out = Vec::new();
        let mut rest = &input[..];
        let mut i = 0;
        let mut ended = None;
        while !rest.is_empty() {
            let take = splits[i % splits.len()].min(rest.len());
            let verdict = if client {
                peer.receive(&rest[..take], Instant::now(), &mut out)
            } else {
                server.receive(&rest[..take], Instant::now(), &mut out)
            };
            if let Some(ended) = ended {
                prop_assert_eq!(verdict, ended);
            } else if verdict != Verdict::Continue {
                ended = Some(verdict);
            }
            rest = &rest[take..];
            i += 1;
        }
        prop_assert!(server.buffered() <= 4097);
    }

    /// Masked random frames (a real client's framing of random payloads and opcodes) never
    /// panic either: the parser gets past the header into every rule.
    #[test]
    fn random_frames_never_panic(
        frames in prop::collection::vec((any::<u8>(), prop::collection::vec(any::<u8>(), 0..200)), 1..10),
        deflate in any::<bool>(),
    ) {
        let params = deflate_params();
        let mut session = Session::new(&Config { max_message: 1024 }, deflate.then_some(&params), Instant::now());
        let mut input = Vec::new();
        for (first, payload) in &frames {
            input.extend(masked(*first, payload));
        }
        let (_, _) = feed_bytewise(&mut session, &input);
        prop_assert!(session.buffered() <= 1025);
    }
}
