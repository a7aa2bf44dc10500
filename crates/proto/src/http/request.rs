//! Parsing one request head with `httparse` and deciding its framing.
//!
//! Only what the fixed-response server needs survives parsing: whether to send a body, how to
//! keep the connection, and how long the request body is. Everything a request smuggler could
//! play with (Content-Length against Transfer-Encoding, differing lengths, Transfer-Encoding on
//! HTTP/1.0, bare LF line ends) is rejected here with a 400.

use std::mem::MaybeUninit;

use super::Status;

pub use crate::MAX_HEADERS;

/// How the request body, if any, is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// What the server keeps of a parsed request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    /// HEAD: answer with the headers only.
    pub head_only: bool,
    pub http10: bool,
    pub keep_alive: bool,
    pub framing: Framing,
    pub expect_continue: bool,
    /// `Upgrade: websocket`: the WebSocket stage's to accept or refuse, if the server serves it.
    pub upgrade: bool,
}

/// The outcome of trying to parse a head from the bytes seen so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete head of `len` bytes.
    Complete(RequestHead, usize),
    /// More bytes are needed.
    Partial,
    /// Answer with this status and close.
    Reject(Status),
}

/// Parse the head at the start of `data`. Heads longer than `max_head` bytes are rejected even
/// when complete: 414 when the request line alone is too long, else 431.
pub fn parse(data: &[u8], max_head: usize) -> Parsed {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(data, &mut headers) {
        Ok(httparse::Status::Complete(len)) => {
            if len > max_head {
                return Parsed::Reject(too_large(data, max_head));
            }
            if has_bare_lf(&data[..len]) {
                return Parsed::Reject(Status::BadRequest);
            }
            match analyse(&req) {
                Ok(head) => Parsed::Complete(head, len),
                Err(status) => Parsed::Reject(status),
            }
        }
        Ok(httparse::Status::Partial) if data.len() > max_head => Parsed::Reject(too_large(data, max_head)),
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => Parsed::Reject(Status::HeaderFieldsTooLarge),
        Err(_) => Parsed::Reject(status_for_malformed(data, max_head)),
    }
}

/// 414 if the request line does not end within the limit, else 431.
pub fn too_large(data: &[u8], max_head: usize) -> Status {
    let window = &data[..data.len().min(max_head)];
    if memchr::memchr(b'\n', window).is_none() {
        Status::UriTooLong
    } else {
        Status::HeaderFieldsTooLarge
    }
}

/// httparse stops at the first bad byte; a head that is already past the limit when that
/// happens is still reported as too long (414 for the request line, else 431), so a huge line
/// gets 414 whatever it contains past the limit. Whether it is past the limit is judged by where
/// the bad byte is, not by how much had arrived: a session fed the head in pieces would have
/// rejected it as too long before the bad byte arrived.
fn status_for_malformed(data: &[u8], max_head: usize) -> Status {
    if data.len() > max_head && !is_malformed(&data[..max_head]) {
        too_large(data, max_head)
    } else {
        Status::BadRequest
    }
}

/// httparse finds an error within `data`.
fn is_malformed(data: &[u8]) -> bool {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    httparse::Request::new(&mut []).parse_with_uninit_headers(data, &mut headers).is_err()
}

/// httparse accepts a bare `\n` as a line end; RFC 9112 lets a server reject it, and a proxy
/// in front of us might read such a head differently, so we do.
fn has_bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

fn analyse(req: &httparse::Request<'_, '_>) -> Result<RequestHead, Status> {
    let http10 = match req.version {
        Some(0) => true,
        Some(1) => false,
        _ => return Err(Status::BadRequest),
    };
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut hosts = 0usize;
    let mut upgrade = false;

    for header in req.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let value = parse_content_length(header.value).ok_or(Status::BadRequest)?;
            if content_length.is_some_and(|seen| seen != value) {
                return Err(Status::BadRequest);
            }
            content_length = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if http10 {
                return Err(Status::BadRequest);
            }
            // A chunked coding must come last, once; anything after it leaves the body
            // unframed (RFC 9112 6.3), so it is a 400 rather than a guess.
            for coding in tokens(header.value) {
                if chunked {
                    return Err(Status::BadRequest);
                }
                chunked = coding.eq_ignore_ascii_case(b"chunked");
            }
            transfer_encoding = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in tokens(header.value) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = trim(header.value).eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("upgrade") {
            upgrade |= tokens(header.value).any(|t| t.eq_ignore_ascii_case(b"websocket"));
        }
    }

    if transfer_encoding && (content_length.is_some() || !chunked) {
        return Err(Status::BadRequest);
    }
    // RFC 9112 3.2: a 1.1 request without exactly one Host is a 400.
    if hosts > 1 || (!http10 && hosts == 0) {
        return Err(Status::BadRequest);
    }
    let framing = match (chunked, content_length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) if n > 0 => Framing::Length(n),
        _ => Framing::None,
    };
    Ok(RequestHead {
        head_only: req.method == Some("HEAD"),
        http10,
        keep_alive: if http10 { keep_alive_token && !close } else { !close },
        framing,
        expect_continue: expect_continue && !http10 && framing != Framing::None,
        upgrade,
    })
}

/// Content-Length is 1*DIGIT; a list of identical values ("5, 5") is allowed by RFC 9110 8.6.
/// Signs, spaces inside numbers, empty values and values past u64 are all invalid.
fn parse_content_length(value: &[u8]) -> Option<u64> {
    let mut result = None;
    for part in value.split(|&b| b == b',') {
        let digits = trim(part);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits.iter().try_fold(0u64, |acc, &d| acc.checked_mul(10)?.checked_add(u64::from(d - b'0')))?;
        if result.is_some_and(|seen| seen != n) {
            return None;
        }
        result = Some(n);
    }
    result
}

fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim).filter(|t| !t.is_empty())
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |i| i + 1);
    &bytes[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &[u8]) -> Parsed {
        parse(raw, 8192)
    }

    #[test]
    fn content_length_values() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b" 42 "), Some(42));
        assert_eq!(parse_content_length(b"7, 7"), Some(7));
        assert_eq!(parse_content_length(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b""[..], b"-1", b"+1", b"1 2", b"0x10", b"7, 8", b"18446744073709551616", b","] {
            assert_eq!(parse_content_length(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |raw: &[u8]| match head(raw) {
            Parsed::Complete(h, _) => h.keep_alive,
            other => panic!("{other:?}"),
        };
        assert!(ka(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, CLOSE\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(ka(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    #[test]
    fn framing_rules() {
        let framing = |raw: &[u8]| match head(raw) {
            Parsed::Complete(h, _) => Ok(h.framing),
            Parsed::Reject(s) => Err(s),
            Parsed::Partial => panic!("partial"),
        };
        assert_eq!(framing(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"), Ok(Framing::None));
        assert_eq!(
            framing(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            framing(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Ok(Framing::Chunked)
        );
        for bad in [
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        ] {
            assert_eq!(framing(bad), Err(Status::BadRequest), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn malformed_heads_are_400() {
        for bad in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
            b"GET / HTTP/1.1\nHost: a\n\n",
            b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n  folded\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(head(bad), Parsed::Reject(Status::BadRequest), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn size_limits() {
        let long_line = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(9000));
        assert_eq!(head(long_line.as_bytes()), Parsed::Reject(Status::UriTooLong));
        assert_eq!(head(&long_line.as_bytes()[..8500]), Parsed::Reject(Status::UriTooLong));
        let big_header = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(9000));
        assert_eq!(head(big_header.as_bytes()), Parsed::Reject(Status::HeaderFieldsTooLarge));
        assert_eq!(head(&big_header.as_bytes()[..8500]), Parsed::Reject(Status::HeaderFieldsTooLarge));
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("X{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert_eq!(head(many.as_bytes()), Parsed::Reject(Status::HeaderFieldsTooLarge));
    }
}
