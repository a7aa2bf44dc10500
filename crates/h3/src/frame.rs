//! HTTP/3 frames (RFC 9114 §7): writers, and one streaming decoder for every stream kind.

use crate::error::{ErrorCode, H3Error};
use crate::settings::Settings;
use crate::varint;

pub const DATA: u64 = 0x00;
pub const HEADERS: u64 = 0x01;
pub const CANCEL_PUSH: u64 = 0x03;
pub const SETTINGS: u64 = crate::settings::FRAME_TYPE;
pub const PUSH_PROMISE: u64 = 0x05;
pub const GOAWAY: u64 = 0x07;
pub const MAX_PUSH_ID: u64 = 0x0d;

/// Append a HEADERS frame carrying the encoded field section `block`.
pub fn put_headers_frame(block: &[u8], out: &mut Vec<u8>) {
    varint::encode(HEADERS, out);
    varint::encode(block.len() as u64, out);
    out.extend_from_slice(block);
}

/// Append a DATA frame's type and length; its `len` payload octets follow.
pub fn put_data_frame_header(len: u64, out: &mut Vec<u8>) {
    varint::encode(DATA, out);
    varint::encode(len, out);
}

/// Append a GOAWAY frame: a server sends the first client bidi stream id it will not serve, a
/// client a push id.
pub fn put_goaway(id: u64, out: &mut Vec<u8>) {
    varint::encode(GOAWAY, out);
    varint::encode(varint::len(id) as u64, out);
    varint::encode(id, out);
}

/// Append the type that opens a unidirectional stream (RFC 9114 §6.2).
pub fn encode_uni_stream_type(ty: u64, out: &mut Vec<u8>) {
    varint::encode(ty, out);
}

/// A frame (or, for DATA, part of one) as the decoder yields it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Octets of a DATA frame's payload, a slice of the input (never copied). Every DATA frame
    /// yields at least one, empty when the frame is, or when its header ended the input.
    Data(&'a [u8]),
    /// A HEADERS frame's whole encoded field section.
    Headers(&'a [u8]),
    Settings(Settings),
    GoAway(u64),
    MaxPushId(u64),
    CancelPush(u64),
    PushPromise {
        push_id: u64,
        block: &'a [u8],
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between frames, or inside a frame's type and length (`hdr_len` octets of it kept).
    Header,
    Data {
        left: u64,
    },
    /// A frame read whole before it is yielded (HEADERS, SETTINGS, ...), into `buf`.
    Buffer {
        ty: u64,
        len: usize,
    },
    /// An unknown or reserved frame (§9), skipped without keeping it.
    Skip {
        left: u64,
    },
}

/// What a step of [`FrameDecoder::decode`] found, before it is turned into a [`Frame`].
enum Ready {
    Data(usize),
    Input { ty: u64, start: usize },
    Buffered(u64),
}

/// The streaming frame decoder of one stream: fed the stream's octets in chunks of any size, it
/// yields frames. DATA payload is yielded as slices of the input; HEADERS, PUSH_PROMISE and
/// SETTINGS are yielded whole, from the input when the whole frame is in it, else from a
/// buffer of at most `max_payload` octets (a larger one is refused: H3_EXCESSIVE_LOAD, a stream
/// error for HEADERS and PUSH_PROMISE, a connection error for SETTINGS); unknown and reserved
/// frame types are skipped as they arrive, whatever their length; HTTP/2's types 0x02, 0x06,
/// 0x08 and 0x09 are H3_FRAME_UNEXPECTED (§7.2.8); a GOAWAY, MAX_PUSH_ID or CANCEL_PUSH that is
/// not exactly one varint is H3_FRAME_ERROR. Which frame may come on which stream is the
/// stream's rule, not this decoder's.
#[derive(Debug)]
pub struct FrameDecoder {
    state: State,
    hdr: [u8; 16],
    hdr_len: usize,
    buf: Vec<u8>,
    max_payload: usize,
    first_type: Option<u64>,
}

impl FrameDecoder {
    pub fn new(max_payload: usize) -> Self {
        FrameDecoder { state: State::Header, hdr: [0; 16], hdr_len: 0, buf: Vec::new(), max_payload, first_type: None }
    }

    /// True between frames: a stream may end here (a FIN elsewhere is H3_FRAME_ERROR).
    pub fn is_between_frames(&self) -> bool {
        self.state == State::Header && self.hdr_len == 0
    }

    /// The type of the first frame whose header was read, skipped ones included (a control
    /// stream's first frame must be SETTINGS).
    pub fn first_type(&self) -> Option<u64> {
        self.first_type
    }

    /// The octets held between calls (a frame read in part).
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.hdr_len
    }

    /// Decode from `input`: (octets consumed, the next frame). `None` means every octet was
    /// consumed and more are needed; otherwise call again with the rest. A [`Frame::Data`]'s
    /// slice is always the last octets consumed, `input[consumed - len..consumed]`.
    pub fn decode<'a>(&'a mut self, input: &'a [u8]) -> Result<(usize, Option<Frame<'a>>), H3Error> {
        if self.state == State::Header && !self.buf.is_empty() {
            // The last frame buffered was yielded: give large buffers back.
            if self.buf.capacity() > 4096 {
                self.buf = Vec::new();
            } else {
                self.buf.clear();
            }
        }
        let mut at = 0;
        let ready = loop {
            match self.state {
                State::Header => {
                    let Some((ty, len)) = self.read_header(input, &mut at) else {
                        return Ok((at, None));
                    };
                    self.first_type.get_or_insert(ty);
                    self.begin(ty, len)?;
                    if let State::Buffer { ty, len } = self.state {
                        if input.len() - at >= len {
                            // The whole payload is here: no copy.
                            self.state = State::Header;
                            at += len;
                            break Ready::Input { ty, start: at - len };
                        }
                    }
                    if let State::Data { left } = self.state {
                        let n = take(left, input.len() - at);
                        at += n;
                        self.state =
                            if left == n as u64 { State::Header } else { State::Data { left: left - n as u64 } };
                        break Ready::Data(n);
                    }
                }
                State::Data { left } => {
                    if at == input.len() {
                        return Ok((at, None));
                    }
                    let n = take(left, input.len() - at);
                    at += n;
                    self.state = if left == n as u64 { State::Header } else { State::Data { left: left - n as u64 } };
                    break Ready::Data(n);
                }
                State::Skip { left } => {
                    let n = take(left, input.len() - at);
                    at += n;
                    if left == n as u64 {
                        self.state = State::Header;
                    } else {
                        self.state = State::Skip { left: left - n as u64 };
                        return Ok((at, None));
                    }
                }
                State::Buffer { ty, len } => {
                    let n = (len - self.buf.len()).min(input.len() - at);
                    self.buf.extend_from_slice(&input[at..at + n]);
                    at += n;
                    if self.buf.len() < len {
                        return Ok((at, None));
                    }
                    self.state = State::Header;
                    break Ready::Buffered(ty);
                }
            }
        };
        let frame = match ready {
            Ready::Data(n) => Frame::Data(&input[at - n..at]),
            Ready::Input { ty, start } => parse(ty, &input[start..at])?,
            Ready::Buffered(ty) => parse(ty, &self.buf)?,
        };
        Ok((at, Some(frame)))
    }

    /// Read a frame's type and length, from `input` directly when they are whole in it, else
    /// through `hdr`.
    fn read_header(&mut self, input: &[u8], at: &mut usize) -> Option<(u64, u64)> {
        if self.hdr_len == 0 {
            let rest = &input[*at..];
            if let Some((ty, n)) = varint::decode(rest) {
                if let Some((len, m)) = varint::decode(&rest[n..]) {
                    *at += n + m;
                    return Some((ty, len));
                }
            }
        }
        while *at < input.len() {
            self.hdr[self.hdr_len] = input[*at];
            self.hdr_len += 1;
            *at += 1;
            let kept = &self.hdr[..self.hdr_len];
            if let Some((ty, n)) = varint::decode(kept) {
                if let Some((len, m)) = varint::decode(&kept[n..]) {
                    debug_assert_eq!(n + m, self.hdr_len);
                    self.hdr_len = 0;
                    return Some((ty, len));
                }
            }
        }
        None
    }

    /// Enter the state a frame of type `ty` and length `len` needs.
    fn begin(&mut self, ty: u64, len: u64) -> Result<(), H3Error> {
        self.state = match ty {
            DATA => State::Data { left: len },
            GOAWAY | MAX_PUSH_ID | CANCEL_PUSH if !(1..=8).contains(&len) => {
                return Err(H3Error::frame("a GOAWAY, MAX_PUSH_ID or CANCEL_PUSH that is not one varint"))
            }
            HEADERS | PUSH_PROMISE if len > self.max_payload as u64 => {
                return Err(H3Error::Stream(ErrorCode::H3_EXCESSIVE_LOAD, "a header section over the limit"))
            }
            SETTINGS if len > self.max_payload as u64 => {
                return Err(H3Error::Connection(ErrorCode::H3_EXCESSIVE_LOAD, "a SETTINGS frame over the limit"))
            }
            HEADERS | PUSH_PROMISE | SETTINGS | GOAWAY | MAX_PUSH_ID | CANCEL_PUSH => {
                State::Buffer { ty, len: len as usize }
            }
            0x02 | 0x06 | 0x08 | 0x09 => return Err(H3Error::unexpected("an HTTP/2 frame type")),
            _ if len == 0 => State::Header,
            _ => State::Skip { left: len },
        };
        Ok(())
    }
}

fn take(left: u64, available: usize) -> usize {
    usize::try_from(left).map_or(available, |left| left.min(available))
}

/// One varint that fills `payload` exactly.
fn single_varint(payload: &[u8]) -> Result<u64, H3Error> {
    match varint::decode(payload) {
        Some((v, n)) if n == payload.len() => Ok(v),
        _ => Err(H3Error::frame("a frame's id is not exactly one varint")),
    }
}

fn parse(ty: u64, payload: &[u8]) -> Result<Frame<'_>, H3Error> {
    Ok(match ty {
        HEADERS => Frame::Headers(payload),
        SETTINGS => Frame::Settings(Settings::decode_payload(payload)?),
        GOAWAY => Frame::GoAway(single_varint(payload)?),
        MAX_PUSH_ID => Frame::MaxPushId(single_varint(payload)?),
        CANCEL_PUSH => Frame::CancelPush(single_varint(payload)?),
        PUSH_PROMISE => {
            let (push_id, n) = varint::decode(payload).ok_or(H3Error::frame("a PUSH_PROMISE without its push id"))?;
            Frame::PushPromise { push_id, block: &payload[n..] }
        }
        // `begin` buffers only the types above.
        _ => return Err(H3Error::Connection(ErrorCode::H3_INTERNAL_ERROR, "a frame type buffered by mistake")),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A frame as an owned value, for comparing what different splits yield.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Owned {
        Data(Vec<u8>),
        Headers(Vec<u8>),
        Settings(Settings),
        GoAway(u64),
        MaxPushId(u64),
        CancelPush(u64),
        PushPromise(u64, Vec<u8>),
    }

    /// Feed `chunks` in turn: every frame (adjacent DATA parts of one frame merged), or the error.
    pub(crate) fn decode_chunks(max: usize, chunks: &[&[u8]]) -> (Vec<Owned>, Result<(), H3Error>) {
        let mut d = FrameDecoder::new(max);
        let mut out = Vec::new();
        let mut data_open = false;
        for chunk in chunks {
            let mut at = 0;
            loop {
                let (n, frame) = match d.decode(&chunk[at..]) {
                    Ok(x) => x,
                    Err(e) => return (out, Err(e)),
                };
                let Some(frame) = frame else {
                    assert_eq!(at + n, chunk.len(), "None only when all is consumed");
                    break;
                };
                assert!(n > 0 || chunk.is_empty() || matches!(frame, Frame::Data(_)), "progress");
                if let Frame::Data(s) = &frame {
                    assert_eq!(*s, &chunk[at + n - s.len()..at + n], "DATA is the input's last octets");
                }
                at += n;
                match frame {
                    Frame::Data(s) => match out.last_mut() {
                        Some(Owned::Data(v)) if data_open => v.extend_from_slice(s),
                        _ => out.push(Owned::Data(s.to_vec())),
                    },
                    Frame::Headers(b) => out.push(Owned::Headers(b.to_vec())),
                    Frame::Settings(s) => out.push(Owned::Settings(s)),
                    Frame::GoAway(i) => out.push(Owned::GoAway(i)),
                    Frame::MaxPushId(i) => out.push(Owned::MaxPushId(i)),
                    Frame::CancelPush(i) => out.push(Owned::CancelPush(i)),
                    Frame::PushPromise { push_id, block } => out.push(Owned::PushPromise(push_id, block.to_vec())),
                }
                data_open = matches!(d.state, State::Data { .. });
                if at == chunk.len() {
                    break;
                }
            }
        }
        (out, Ok(()))
    }

    fn frame(ty: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint::encode(ty, &mut out);
        varint::encode(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn sample() -> Vec<u8> {
        let mut s = Vec::new();
        Settings { max_field_section_size: Some(100), ..Settings::default() }.encode_frame(&mut s);
        s.extend(frame(0x21, b"reserved"));
        put_headers_frame(b"\0\0\xd1", &mut s);
        put_data_frame_header(5, &mut s);
        s.extend_from_slice(b"hello");
        put_data_frame_header(0, &mut s);
        s.extend(frame(0x1f * 3 + 0x21, &[]));
        put_goaway(1 << 20, &mut s);
        s.extend(frame(MAX_PUSH_ID, &[7]));
        s.extend(frame(CANCEL_PUSH, &[0x40, 9]));
        s.extend(frame(PUSH_PROMISE, &[3, 0, 0, 0xd1]));
        s
    }

    fn sample_frames() -> Vec<Owned> {
        vec![
            Owned::Settings(Settings { max_field_section_size: Some(100), ..Settings::default() }),
            Owned::Headers(b"\0\0\xd1".to_vec()),
            Owned::Data(b"hello".to_vec()),
            Owned::Data(vec![]),
            Owned::GoAway(1 << 20),
            Owned::MaxPushId(7),
            Owned::CancelPush(9),
            Owned::PushPromise(3, vec![0, 0, 0xd1]),
        ]
    }

    #[test]
    fn every_split_yields_the_same_frames() {
        let s = sample();
        assert_eq!(decode_chunks(64, &[&s]), (sample_frames(), Ok(())));
        for cut in 0..=s.len() {
            assert_eq!(decode_chunks(64, &[&s[..cut], &s[cut..]]), (sample_frames(), Ok(())), "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(decode_chunks(64, &bytes), (sample_frames(), Ok(())));
        assert!(FrameDecoder::new(64).is_between_frames());
    }

    /// A 1 MiB body comes out as slices of the input, and a 1 GB unknown frame costs nothing.
    #[test]
    fn data_is_not_copied_and_unknown_frames_are_skipped_without_memory() {
        let mut d = FrameDecoder::new(64);
        let mut head = Vec::new();
        put_data_frame_header(1 << 20, &mut head);
        let body = vec![7u8; 1 << 20];
        assert_eq!(d.decode(&head).expect("header").0, head.len());
        let mut seen = 0;
        for chunk in body.chunks(1200) {
            let (n, frame) = d.decode(chunk).expect("data");
            let Some(Frame::Data(s)) = frame else { panic!("data expected") };
            assert_eq!(n, chunk.len());
            assert_eq!(s.as_ptr(), chunk.as_ptr(), "the slice is the input's");
            seen += s.len();
        }
        assert_eq!(seen, 1 << 20);
        assert_eq!(d.buffered(), 0);
        let mut unknown = Vec::new();
        varint::encode(0x2a, &mut unknown);
        varint::encode(1 << 30, &mut unknown);
        assert_eq!(d.decode(&unknown).expect("header"), (unknown.len(), None));
        let zeros = vec![0u8; 1 << 16];
        for _ in 0..(1 << 14) {
            assert_eq!(d.decode(&zeros).expect("skipped"), (zeros.len(), None));
        }
        assert_eq!(d.buffered(), 0);
        assert!(d.is_between_frames());
        assert_eq!(d.first_type(), Some(DATA));
    }

    #[test]
    fn malformed_frames_are_errors() {
        let code = |bytes: &[u8]| decode_chunks(64, &[bytes]).1.map_err(|e| (e.code(), e.is_connection()));
        for h2 in [0x02, 0x06, 0x08, 0x09] {
            assert_eq!(code(&frame(h2, &[])), Err((ErrorCode::H3_FRAME_UNEXPECTED, true)), "{h2}");
        }
        assert_eq!(code(&frame(GOAWAY, &[4, 0])), Err((ErrorCode::H3_FRAME_ERROR, true)), "trailing octets");
        assert_eq!(code(&frame(GOAWAY, &[])), Err((ErrorCode::H3_FRAME_ERROR, true)));
        assert_eq!(code(&frame(MAX_PUSH_ID, &[0x40])), Err((ErrorCode::H3_FRAME_ERROR, true)), "cut varint");
        assert_eq!(code(&frame(CANCEL_PUSH, &[0; 9])), Err((ErrorCode::H3_FRAME_ERROR, true)));
        assert_eq!(code(&frame(PUSH_PROMISE, &[])), Err((ErrorCode::H3_FRAME_ERROR, true)));
        assert_eq!(code(&frame(HEADERS, &[0; 65])), Err((ErrorCode::H3_EXCESSIVE_LOAD, false)));
        assert_eq!(code(&frame(SETTINGS, &[0; 66])), Err((ErrorCode::H3_EXCESSIVE_LOAD, true)));
        assert_eq!(code(&frame(HEADERS, &[0; 64])), Ok(()));
    }

    #[test]
    fn arbitrary_input_never_panics() {
        use proptest::prelude::*;
        proptest!(|(bytes in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..200)| {
            let cut = cut.min(bytes.len());
            let whole = decode_chunks(32, &[&bytes]);
            let split = decode_chunks(32, &[&bytes[..cut], &bytes[cut..]]);
            // The same frames and the same verdict, however the input is cut.
            prop_assert_eq!(whole.1, split.1);
            if whole.1.is_ok() {
                prop_assert_eq!(whole.0, split.0);
            }
        });
    }
}
