//! The stream state machines, fed byte values in every split.

use crate::frame::{put_data_frame_header, put_goaway, put_headers_frame};
use crate::stream::*;
use crate::{encode_field_section, varint, ErrorCode, H3Error, Settings};

/// An event as an owned value (body octets merged), for comparing splits.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Head(Vec<(Vec<u8>, Vec<u8>)>),
    Body(Vec<u8>),
    Trailers(Vec<(Vec<u8>, Vec<u8>)>),
    End,
}

fn fields_of(list: &crate::HeaderList) -> Vec<(Vec<u8>, Vec<u8>)> {
    list.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect()
}

fn push(out: &mut Vec<Ev>, ev: Ev) {
    if let (Ev::Body(new), Some(Ev::Body(old))) = (&ev, out.last_mut()) {
        old.extend_from_slice(new);
        return;
    }
    out.push(ev);
}

/// Feed `chunks` to a request stream, FIN with the last: its events, and its error if any.
fn run_request(chunks: &[&[u8]], extended_connect: bool) -> (Vec<Ev>, Result<(), H3Error>) {
    let mut s = RequestStream::new(4096, extended_connect);
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let fin = i + 1 == chunks.len();
        let mut at = 0;
        loop {
            let (n, ev) = match s.feed(&chunk[at..], fin) {
                Ok(x) => x,
                Err(e) => return (out, Err(e)),
            };
            at += n;
            match ev {
                None => {
                    assert_eq!(at, chunk.len(), "None only when all is consumed");
                    break;
                }
                Some(RequestEvent::Head(r)) => push(&mut out, Ev::Head(fields_of(&r.fields))),
                Some(RequestEvent::Body(b)) => {
                    assert!(!b.is_empty());
                    push(&mut out, Ev::Body(b.to_vec()))
                }
                Some(RequestEvent::Trailers(t)) => push(&mut out, Ev::Trailers(fields_of(&t))),
                Some(RequestEvent::End) => push(&mut out, Ev::End),
            }
        }
    }
    (out, Ok(()))
}

fn run_response(chunks: &[&[u8]], head_request: bool) -> (Vec<Ev>, Result<(), H3Error>) {
    let mut s = ResponseStream::new(4096, head_request);
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let fin = i + 1 == chunks.len();
        let mut at = 0;
        loop {
            let (n, ev) = match s.feed(&chunk[at..], fin) {
                Ok(x) => x,
                Err(e) => return (out, Err(e)),
            };
            at += n;
            match ev {
                None => break,
                Some(ResponseEvent::Head(r)) => {
                    assert_eq!(r.fields.get(b":status").map(<[u8]>::to_vec), Some(r.status.to_string().into_bytes()));
                    push(&mut out, Ev::Head(fields_of(&r.fields)))
                }
                Some(ResponseEvent::Body(b)) => push(&mut out, Ev::Body(b.to_vec())),
                Some(ResponseEvent::Trailers(t)) => push(&mut out, Ev::Trailers(fields_of(&t))),
                Some(ResponseEvent::End) => push(&mut out, Ev::End),
            }
        }
    }
    (out, Ok(()))
}

/// Every split in two, and byte by byte, gives what the whole input gives: the same events,
/// or the same error (body octets before an error depend on where the input was cut).
fn check_splits<F: Fn(&[&[u8]]) -> (Vec<Ev>, Result<(), H3Error>)>(
    input: &[u8],
    run: F,
) -> (Vec<Ev>, Result<(), H3Error>) {
    let whole = run(&[input]);
    let same = |got: (Vec<Ev>, Result<(), H3Error>), how: &str| {
        assert_eq!(got.1, whole.1, "{how}");
        if whole.1.is_ok() {
            assert_eq!(got.0, whole.0, "{how}");
        }
    };
    for cut in 0..=input.len() {
        same(run(&[&input[..cut], &input[cut..]]), &format!("cut at {cut}"));
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    if !bytes.is_empty() {
        same(run(&bytes), "byte by byte");
    }
    whole
}

fn headers(fields: &[(&str, &str)], out: &mut Vec<u8>) {
    let mut block = Vec::new();
    encode_field_section(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut block);
    put_headers_frame(&block, out);
}

fn data(body: &[u8], out: &mut Vec<u8>) {
    put_data_frame_header(body.len() as u64, out);
    out.extend_from_slice(body);
}

fn owned(fields: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    fields.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

const CURL_GET: [(&str, &str); 6] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "localhost:4433"),
    (":path", "/"),
    ("user-agent", "curl/8.11.0"),
    ("accept", "*/*"),
];

const POST: [(&str, &str); 5] =
    [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/up"), ("content-length", "11")];

fn unknown_frame(out: &mut Vec<u8>) {
    varint::encode(0x1f * 5 + 0x21, out);
    varint::encode(3, out);
    out.extend_from_slice(b"xyz");
}

#[test]
fn a_request_with_body_and_trailers_in_every_split() {
    let mut input = Vec::new();
    unknown_frame(&mut input);
    headers(&POST, &mut input);
    data(b"hello ", &mut input);
    unknown_frame(&mut input);
    data(b"", &mut input);
    data(b"world", &mut input);
    headers(&[("x-checksum", "1")], &mut input);
    unknown_frame(&mut input);
    let want = vec![
        Ev::Head(owned(&POST)),
        Ev::Body(b"hello world".to_vec()),
        Ev::Trailers(owned(&[("x-checksum", "1")])),
        Ev::End,
    ];
    assert_eq!(check_splits(&input, |c| run_request(c, false)), (want, Ok(())));
    let mut get = Vec::new();
    headers(&CURL_GET, &mut get);
    assert_eq!(check_splits(&get, |c| run_request(c, false)), (vec![Ev::Head(owned(&CURL_GET)), Ev::End], Ok(())));
}

fn request_error(input: &[u8]) -> H3Error {
    let (_, verdict) = check_splits(input, |c| run_request(c, false));
    verdict.expect_err("an error")
}

#[test]
fn frame_order_errors_are_connection_errors() {
    let mut data_first = Vec::new();
    data(b"x", &mut data_first);
    headers(&CURL_GET, &mut data_first);
    let e = request_error(&data_first);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_FRAME_UNEXPECTED, true));

    let mut after_trailers = Vec::new();
    headers(&CURL_GET, &mut after_trailers);
    headers(&[("x-t", "1")], &mut after_trailers);
    data(b"x", &mut after_trailers);
    let e = request_error(&after_trailers);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_FRAME_UNEXPECTED, true));

    let mut settings = Vec::new();
    headers(&CURL_GET, &mut settings);
    Settings::default().encode_frame(&mut settings);
    assert_eq!(request_error(&settings).code(), ErrorCode::H3_FRAME_UNEXPECTED);

    let mut goaway = Vec::new();
    headers(&CURL_GET, &mut goaway);
    put_goaway(4, &mut goaway);
    assert_eq!(request_error(&goaway).code(), ErrorCode::H3_FRAME_UNEXPECTED);

    let mut promise = Vec::new();
    headers(&CURL_GET, &mut promise);
    promise.extend_from_slice(&[0x05, 0x03, 0x00, 0x00, 0x00]);
    assert_eq!(request_error(&promise).code(), ErrorCode::H3_FRAME_UNEXPECTED);

    let mut cut = Vec::new();
    headers(&POST, &mut cut);
    data(b"hello world", &mut cut);
    cut.pop();
    let e = request_error(&cut);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_FRAME_ERROR, true), "FIN inside a frame");
}

#[test]
fn malformed_requests_are_stream_errors() {
    let mut short = Vec::new();
    headers(&POST, &mut short);
    data(b"hello", &mut short);
    let e = request_error(&short);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_MESSAGE_ERROR, false), "{e}");

    let mut long = Vec::new();
    headers(&POST, &mut long);
    data(b"hello world!", &mut long);
    assert_eq!(request_error(&long), H3Error::Stream(ErrorCode::H3_MESSAGE_ERROR, "more body than content-length"));

    let cases: &[&[(&str, &str)]] = &[
        &[(":method", "GET"), (":scheme", "https"), (":path", "/")],
        &[(":method", "GET"), (":scheme", "https"), (":authority", "a"), ("host", "b"), (":path", "/")],
        &[(":method", "GET"), (":authority", "a"), (":path", "/")],
        &[(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/"), ("Upper", "x")],
        &[(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/"), ("connection", "close")],
        &[(":method", "CONNECT"), (":authority", "a:443"), (":path", "/")],
        &[
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":authority", "a"),
            (":path", "/"),
        ],
        &[(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/"), (":status", "200")],
    ];
    for fields in cases {
        let mut input = Vec::new();
        headers(fields, &mut input);
        let e = request_error(&input);
        assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_MESSAGE_ERROR, false), "{fields:?}: {e}");
    }

    let mut trailers = Vec::new();
    headers(&CURL_GET, &mut trailers);
    headers(&[(":path", "/")], &mut trailers);
    assert_eq!(request_error(&trailers).code(), ErrorCode::H3_MESSAGE_ERROR);

    let e = request_error(&[]);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_REQUEST_INCOMPLETE, false));
}

#[test]
fn connect_and_extended_connect() {
    let connect = [(":method", "CONNECT"), (":authority", "a:443")];
    let mut input = Vec::new();
    headers(&connect, &mut input);
    data(b"tunnel", &mut input);
    let want = vec![Ev::Head(owned(&connect)), Ev::Body(b"tunnel".to_vec()), Ev::End];
    assert_eq!(run_request(&[&input], false), (want, Ok(())));

    let ws = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/chat"),
    ];
    let mut input = Vec::new();
    headers(&ws, &mut input);
    assert_eq!(run_request(&[&input], true), (vec![Ev::Head(owned(&ws)), Ev::End], Ok(())));
    let mut s = RequestStream::new(4096, true);
    let Ok((_, Some(RequestEvent::Head(r)))) = s.feed(&input, false) else { panic!("a head") };
    assert!(r.extended_connect);
    assert_eq!(
        (r.method(), r.protocol(), r.path(), r.authority()),
        (&b"CONNECT"[..], Some(&b"websocket"[..]), &b"/chat"[..], Some(&b"a"[..]))
    );
}

#[test]
fn qpack_errors_and_size_limits() {
    // A dynamic reference: QPACK_DECOMPRESSION_FAILED on the connection.
    let mut input = Vec::new();
    put_headers_frame(&[0x02, 0x00, 0x80], &mut input);
    let e = request_error(&input);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::QPACK_DECOMPRESSION_FAILED, true));

    // A section over the limit (4096): H3_EXCESSIVE_LOAD on the stream, decoded or not.
    let big = "v".repeat(4000);
    let mut input = Vec::new();
    headers(&[(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/"), ("x", &big)], &mut input);
    let e = request_error(&input);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_EXCESSIVE_LOAD, false));
    let huge = "v".repeat(5000);
    let mut input = Vec::new();
    headers(&[("x", &huge)], &mut input);
    let e = request_error(&input);
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_EXCESSIVE_LOAD, false));
}

#[test]
fn responses_skip_interim_and_check_status() {
    let mut input = Vec::new();
    headers(&[(":status", "103"), ("link", "</a.css>")], &mut input);
    headers(&[(":status", "200"), ("content-length", "4")], &mut input);
    data(b"body", &mut input);
    let want =
        vec![Ev::Head(owned(&[(":status", "200"), ("content-length", "4")])), Ev::Body(b"body".to_vec()), Ev::End];
    assert_eq!(check_splits(&input, |c| run_response(c, false)), (want, Ok(())));

    let mut head = Vec::new();
    headers(&[(":status", "200"), ("content-length", "4")], &mut head);
    assert_eq!(run_response(&[&head], true).1, Ok(()), "a HEAD response has no body");
    assert_eq!(run_response(&[&head], false).1.map_err(|e| e.code()), Err(ErrorCode::H3_MESSAGE_ERROR));

    for bad in [
        &[(":status", "600")][..],
        &[(":status", "20")],
        &[(":status", "101")],
        &[("x", "1")],
        &[(":status", "200"), (":path", "/")],
    ] {
        let mut input = Vec::new();
        headers(bad, &mut input);
        let e = run_response(&[&input], false).1.expect_err("malformed");
        assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_MESSAGE_ERROR, false), "{bad:?}");
    }
    let mut promise = Vec::new();
    promise.extend_from_slice(&[0x05, 0x03, 0x00, 0x00, 0x00]);
    assert_eq!(run_response(&[&promise], false).1.map_err(|e| e.code()), Err(ErrorCode::H3_ID_ERROR));
}

/// Feed a control stream: its events, and the error if any.
fn run_control(side: Side, chunks: &[&[u8]], fin: bool) -> (Vec<ControlEvent>, Result<(), H3Error>) {
    let mut s = ControlStream::new(side, 1024);
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut at = 0;
        loop {
            match s.feed(&chunk[at..], fin && i + 1 == chunks.len()) {
                Err(e) => return (out, Err(e)),
                Ok((n, ev)) => {
                    at += n;
                    match ev {
                        Some(ev) => out.push(ev),
                        None => break,
                    }
                }
            }
        }
    }
    (out, Ok(()))
}

#[test]
fn the_control_stream_in_every_split() {
    let settings =
        Settings { max_field_section_size: Some(8192), enable_connect_protocol: true, ..Settings::default() };
    let mut input = Vec::new();
    settings.encode_frame(&mut input);
    unknown_frame(&mut input);
    input.extend_from_slice(&[0x0d, 0x01, 0x05]);
    put_goaway(8, &mut input);
    put_goaway(8, &mut input);
    put_goaway(4, &mut input);
    let want = vec![
        ControlEvent::Settings(settings),
        ControlEvent::MaxPushId(5),
        ControlEvent::GoAway(8),
        ControlEvent::GoAway(8),
        ControlEvent::GoAway(4),
    ];
    let whole = run_control(Side::Server, &[&input], false);
    assert_eq!(whole, (want, Ok(())));
    for cut in 0..=input.len() {
        assert_eq!(run_control(Side::Server, &[&input[..cut], &input[cut..]], false), whole, "cut at {cut}");
    }
    let e = run_control(Side::Server, &[&input], true).1.expect_err("FIN");
    assert_eq!((e.code(), e.is_connection()), (ErrorCode::H3_CLOSED_CRITICAL_STREAM, true));
}

#[test]
fn control_stream_errors() {
    let code = |side, input: &[u8]| run_control(side, &[input], false).1.map_err(|e| (e.code(), e.is_connection()));
    let mut settings = Vec::new();
    Settings::default().encode_frame(&mut settings);

    let mut goaway_first = Vec::new();
    put_goaway(0, &mut goaway_first);
    assert_eq!(code(Side::Server, &goaway_first), Err((ErrorCode::H3_MISSING_SETTINGS, true)));
    let mut unknown_first = Vec::new();
    unknown_frame(&mut unknown_first);
    unknown_first.extend_from_slice(&settings);
    assert_eq!(code(Side::Server, &unknown_first), Err((ErrorCode::H3_MISSING_SETTINGS, true)));

    let twice = [settings.clone(), settings.clone()].concat();
    assert_eq!(code(Side::Server, &twice), Err((ErrorCode::H3_FRAME_UNEXPECTED, true)));
    for frame in [&[0x00u8, 0x00][..], &[0x01, 0x00], &[0x05, 0x01, 0x00]] {
        let input = [settings.clone(), frame.to_vec()].concat();
        assert_eq!(code(Side::Server, &input), Err((ErrorCode::H3_FRAME_UNEXPECTED, true)), "{frame:?}");
    }
    let mut rising = settings.clone();
    put_goaway(4, &mut rising);
    put_goaway(8, &mut rising);
    assert_eq!(code(Side::Client, &rising), Err((ErrorCode::H3_ID_ERROR, true)));
    let mut not_bidi = settings.clone();
    put_goaway(2, &mut not_bidi);
    assert_eq!(code(Side::Client, &not_bidi), Err((ErrorCode::H3_ID_ERROR, true)));
    assert_eq!(code(Side::Server, &not_bidi), Ok(()), "a client's GOAWAY carries a push id");
    let falling = [settings.clone(), vec![0x0d, 0x01, 0x05, 0x0d, 0x01, 0x04]].concat();
    assert_eq!(code(Side::Server, &falling), Err((ErrorCode::H3_ID_ERROR, true)));
    let from_server = [settings.clone(), vec![0x0d, 0x01, 0x05]].concat();
    assert_eq!(code(Side::Client, &from_server), Err((ErrorCode::H3_FRAME_UNEXPECTED, true)));
    let cancel = [settings.clone(), vec![0x03, 0x01, 0x00]].concat();
    assert_eq!(code(Side::Server, &cancel), Err((ErrorCode::H3_ID_ERROR, true)));
    let h2_setting = [vec![0x04, 0x02, 0x02, 0x00]].concat();
    assert_eq!(code(Side::Server, &h2_setting), Err((ErrorCode::H3_SETTINGS_ERROR, true)));
    let big = [vec![0x04, 0x44, 0x01], vec![0; 0x401]].concat();
    assert_eq!(code(Side::Server, &big), Err((ErrorCode::H3_EXCESSIVE_LOAD, true)), "critical: the connection");
}

#[test]
fn uni_stream_types_in_any_split() {
    let cases = [
        (0x00, UniStreamKind::Control),
        (0x01, UniStreamKind::Push),
        (0x02, UniStreamKind::QpackEncoder),
        (0x03, UniStreamKind::QpackDecoder),
        (0x21, UniStreamKind::Unknown(0x21)),
        (0x1f * 1000 + 0x21, UniStreamKind::Unknown(0x1f * 1000 + 0x21)),
    ];
    for (ty, kind) in cases {
        let mut input = Vec::new();
        crate::encode_uni_stream_type(ty, &mut input);
        input.push(0x04);
        assert_eq!(UniStreamKind::parse(&input), Some((kind, input.len() - 1)));
        assert_eq!(UniStreamKind::parse(&input[..input.len() - 2]), None);
        let mut reader = UniStreamType::default();
        for (i, b) in input.iter().enumerate() {
            let (used, got) = reader.feed(std::slice::from_ref(b));
            assert_eq!(used, 1);
            if i + 2 == input.len() {
                assert_eq!(got, Some(kind));
                break;
            }
            assert_eq!(got, None);
        }
        let mut whole = UniStreamType::default();
        assert_eq!(whole.feed(&input), (input.len() - 1, Some(kind)));
        assert_eq!(whole.feed(&[0xc0; 8]), (0, Some(kind)), "nothing more is read as the type");
    }
}

#[test]
fn arbitrary_streams_never_panic_and_splits_agree() {
    use proptest::prelude::*;
    let mut valid = Vec::new();
    headers(&POST, &mut valid);
    data(b"hello world", &mut valid);
    proptest!(|(bytes in proptest::collection::vec(any::<u8>(), 0..160), cut in 0usize..160, mutate in 0usize..200)| {
        let mut input = if mutate < 100 { bytes.clone() } else { valid.clone() };
        if mutate >= 100 && !bytes.is_empty() {
            let i = (mutate - 100) % input.len();
            input[i] = bytes[0];
        }
        let cut = cut.min(input.len());
        // The same verdict, and when there is no error the same events, however it is cut.
        let (whole, split) = (run_request(&[&input], false), run_request(&[&input[..cut], &input[cut..]], false));
        prop_assert_eq!(&whole.1, &split.1);
        if whole.1.is_ok() {
            prop_assert_eq!(whole.0, split.0);
        }
        let (whole, split) = (run_response(&[&input], false), run_response(&[&input[..cut], &input[cut..]], false));
        prop_assert_eq!(&whole.1, &split.1);
        if whole.1.is_ok() {
            prop_assert_eq!(whole.0, split.0);
        }
        let whole = run_control(Side::Server, &[&input], false);
        prop_assert_eq!(run_control(Side::Server, &[&input[..cut], &input[cut..]], false), whole);
    });
}
