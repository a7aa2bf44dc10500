//! A request as the application sees it, and the checks RFC 9113 §8 makes of its fields.

use crate::hpack::HeaderList;

/// A complete request: its fields decoded and checked, its body read (and discarded: the
/// server's answer does not depend on it) and counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub stream: u32,
    /// Every field, pseudo-fields first.
    pub fields: HeaderList,
    pub body_len: u64,
}

impl Request {
    pub fn method(&self) -> &[u8] {
        self.fields.get(b":method").unwrap_or_default()
    }

    /// `:path`; empty for CONNECT.
    pub fn path(&self) -> &[u8] {
        self.fields.get(b":path").unwrap_or_default()
    }

    pub fn authority(&self) -> Option<&[u8]> {
        self.fields.get(b":authority")
    }

    /// `:protocol` of an extended CONNECT (RFC 8441): the protocol the tunnel is to carry.
    pub fn protocol(&self) -> Option<&[u8]> {
        self.fields.get(b":protocol")
    }

    pub fn is_head(&self) -> bool {
        self.method() == b"HEAD"
    }

    /// The first regular field named `name` (lower case).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields.get(name)
    }
}

/// Why a request is malformed (RFC 9113 §8.1.1): a stream error of type PROTOCOL_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("an unknown, repeated or response pseudo-field")]
    BadPseudo,
    #[error("a pseudo-field after a regular field")]
    PseudoAfterRegular,
    #[error("a required pseudo-field is missing or empty")]
    MissingPseudo,
    #[error("a field name with upper case or characters outside a token")]
    BadName,
    #[error("a field value with NUL, CR, LF or surrounding whitespace")]
    BadValue,
    #[error("a connection-specific field")]
    ConnectionSpecific,
    #[error("TE other than \"trailers\"")]
    BadTe,
    #[error("a content-length that is not one number")]
    BadContentLength,
    #[error("the body's length differs from content-length")]
    LengthMismatch,
    #[error("pseudo-fields in trailers")]
    PseudoInTrailers,
    #[error("trailers without END_STREAM")]
    TrailersWithoutEnd,
    #[error("a :protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL sent, or on a method other than CONNECT")]
    BadProtocol,
    #[error("HEADERS on a tunnel (an extended CONNECT's stream)")]
    HeadersOnTunnel,
    #[error("an http or https request with neither :authority nor host, or one of them empty")]
    MissingAuthority,
    #[error(":authority and host differ")]
    AuthorityMismatch,
}

/// What differs by version in checking a request: HTTP/2 uses [`check_request`], HTTP/3
/// (`sockscale-h3`, RFC 9114 §4.3.1, whose rules are otherwise RFC 9113 §8.3's) sets
/// `authority_required`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rules {
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL was sent, so `:protocol` may come (RFC 8441, RFC 9220).
    pub extended_connect: bool,
    /// An `http` or `https` request carries `:authority` or `host`, neither empty, the same
    /// value if both (RFC 9114 §4.3.1; RFC 9113 only says clients should send `:authority`).
    pub authority_required: bool,
}

/// What the checks learn of a request's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Head {
    pub content_length: Option<u64>,
    /// An extended CONNECT (RFC 8441 §4): `:protocol` with `:method CONNECT`.
    pub extended_connect: bool,
}

/// Check a request's fields (§8.2, §8.3). `extended_connect`: SETTINGS_ENABLE_CONNECT_PROTOCOL
/// was sent, so `:protocol` may come (RFC 8441 §4); without it, a `:protocol` is malformed
/// (RFC 8441 §5, RFC 9113 §8.1.1).
pub fn check_request(fields: &HeaderList, extended_connect: bool) -> Result<Head, Malformed> {
    check_request_with(fields, Rules { extended_connect, authority_required: false })
}

/// Check a request's fields under `rules`.
pub fn check_request_with(fields: &HeaderList, rules: Rules) -> Result<Head, Malformed> {
    let extended_connect = rules.extended_connect;
    let mut seen = [false; 5]; // method, scheme, path, authority, protocol
    let mut regular = false;
    let mut head = Head::default();
    let mut connect = false;
    for (name, value) in fields.iter() {
        if let Some(pseudo) = name.strip_prefix(b":") {
            if regular {
                return Err(Malformed::PseudoAfterRegular);
            }
            let slot = match pseudo {
                b"method" => 0,
                b"scheme" => 1,
                b"path" => 2,
                b"authority" => 3,
                b"protocol" if extended_connect => 4,
                b"protocol" => return Err(Malformed::BadProtocol),
                _ => return Err(Malformed::BadPseudo),
            };
            if seen[slot] {
                return Err(Malformed::BadPseudo);
            }
            seen[slot] = true;
            if slot == 0 && value == b"CONNECT" {
                connect = true;
            }
            if (slot == 2 || slot == 4) && value.is_empty() {
                return Err(Malformed::MissingPseudo);
            }
            check_value(value)?;
            continue;
        }
        regular = true;
        check_regular(name, value)?;
        if name == b"content-length" {
            let n = parse_length(value).ok_or(Malformed::BadContentLength)?;
            if head.content_length.is_some_and(|m| m != n) {
                return Err(Malformed::BadContentLength);
            }
            head.content_length = Some(n);
        }
    }
    if seen[4] && !connect {
        return Err(Malformed::BadProtocol);
    }
    // An extended CONNECT names its target as a request does, with its authority (RFC 8441 §4);
    // a plain CONNECT only the authority (RFC 9113 §8.5).
    let complete = if seen[4] {
        seen[0] && seen[1] && seen[2] && seen[3]
    } else if connect {
        seen[0] && seen[3] && !seen[1] && !seen[2]
    } else {
        seen[0] && seen[1] && seen[2]
    };
    if !complete {
        return Err(Malformed::MissingPseudo);
    }
    if rules.authority_required {
        check_authority(fields)?;
    }
    head.extended_connect = seen[4];
    Ok(head)
}

/// RFC 9114 §4.3.1: with a scheme that has an authority (http, https; CONNECT always names
/// one), `:authority` or `host`, not empty, equal if both.
fn check_authority(fields: &HeaderList) -> Result<(), Malformed> {
    let scheme = fields.get(b":scheme");
    let needs = fields.get(b":method") == Some(b"CONNECT") || matches!(scheme, Some(b"http" | b"https"));
    let authority = fields.get(b":authority");
    let host = fields.get(b"host");
    if authority.is_some_and(<[u8]>::is_empty) || host.is_some_and(<[u8]>::is_empty) {
        return Err(Malformed::MissingAuthority);
    }
    match (authority, host) {
        (None, None) if needs => Err(Malformed::MissingAuthority),
        (Some(a), Some(h)) if a != h => Err(Malformed::AuthorityMismatch),
        _ => Ok(()),
    }
}

/// Check trailers: regular fields only.
pub fn check_trailers(fields: &HeaderList) -> Result<(), Malformed> {
    for (name, value) in fields.iter() {
        if name.starts_with(b":") {
            return Err(Malformed::PseudoInTrailers);
        }
        check_regular(name, value)?;
    }
    Ok(())
}

/// Check one regular field (§8.2): its name a lower-case token, not connection-specific, TE
/// only "trailers", its value without NUL, CR, LF or surrounding whitespace.
pub fn check_regular(name: &[u8], value: &[u8]) -> Result<(), Malformed> {
    if name.is_empty() || !name.iter().all(|&b| is_token_lower(b)) {
        return Err(Malformed::BadName);
    }
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            return Err(Malformed::ConnectionSpecific)
        }
        b"te" if value != b"trailers" => return Err(Malformed::BadTe),
        _ => {}
    }
    check_value(value)
}

fn check_value(value: &[u8]) -> Result<(), Malformed> {
    if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(Malformed::BadValue);
    }
    let space = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    if space(value.first()) || space(value.last()) {
        return Err(Malformed::BadValue);
    }
    Ok(())
}

/// A token character (RFC 9110 §5.6.2), upper case excluded.
fn is_token_lower(b: u8) -> bool {
    matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// A content-length value: one decimal number.
pub fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(fields: &[(&str, &str)]) -> HeaderList {
        let mut block = Vec::new();
        for (n, v) in fields {
            crate::hpack::test_encode::literal(&mut block, n.as_bytes(), v.as_bytes());
        }
        let mut list = HeaderList::with_limit(1 << 16);
        crate::hpack::Decoder::new(4096).decode(&block, &mut list).expect("decodes");
        list
    }

    const GET: [(&str, &str); 3] = [(":method", "GET"), (":scheme", "https"), (":path", "/")];

    #[test]
    fn a_plain_get_passes_and_content_length_is_read() {
        assert_eq!(check_request(&list(&GET), false), Ok(Head::default()));
        let mut f = GET.to_vec();
        f.push(("content-length", "12"));
        assert_eq!(check_request(&list(&f), false), Ok(Head { content_length: Some(12), ..Head::default() }));
        assert_eq!(
            check_request(&list(&[(":method", "CONNECT"), (":authority", "a:443")]), false),
            Ok(Head::default())
        );
    }

    #[test]
    fn malformed_requests_are_named() {
        let cases: &[(&[(&str, &str)], Malformed)] = &[
            (&[(":method", "GET"), (":path", "/")], Malformed::MissingPseudo),
            (&[(":method", "GET"), (":scheme", "http"), (":path", "")], Malformed::MissingPseudo),
            (&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":status", "200")], Malformed::BadPseudo),
            (&[(":method", "GET"), (":method", "GET"), (":scheme", "http"), (":path", "/")], Malformed::BadPseudo),
            (&[(":method", "GET"), ("x", "1"), (":scheme", "http"), (":path", "/")], Malformed::PseudoAfterRegular),
            (&[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("X-Up", "1")], Malformed::BadName),
            (
                &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("connection", "close")],
                Malformed::ConnectionSpecific,
            ),
            (&[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("te", "gzip")], Malformed::BadTe),
            (&[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("a", "x\r\ny")], Malformed::BadValue),
            (
                &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("content-length", "1x")],
                Malformed::BadContentLength,
            ),
        ];
        for (fields, want) in cases {
            assert_eq!(check_request(&list(fields), false), Err(*want), "{fields:?}");
        }
        assert_eq!(check_trailers(&list(&[("x-sum", "1")])), Ok(()));
    }

    const WS: [(&str, &str); 5] =
        [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/"), (":authority", "a")];

    /// RFC 8441 §4: `:protocol` only with the setting sent, only on CONNECT, and then with
    /// `:scheme`, `:path` and `:authority`.
    #[test]
    fn extended_connect_is_checked() {
        let ok = Head { extended_connect: true, ..Head::default() };
        assert_eq!(check_request(&list(&WS), true), Ok(ok));
        assert_eq!(check_request(&list(&WS), false), Err(Malformed::BadProtocol), "the setting was not sent");
        let mut get = WS;
        get[0].1 = "GET";
        assert_eq!(check_request(&list(&get), true), Err(Malformed::BadProtocol));
        for missing in 2..5 {
            let mut f = WS.to_vec();
            f.remove(missing);
            assert_eq!(check_request(&list(&f), true), Err(Malformed::MissingPseudo), "{f:?}");
        }
        let mut empty = WS;
        empty[1].1 = "";
        assert_eq!(check_request(&list(&empty), true), Err(Malformed::MissingPseudo));
        let mut twice = WS.to_vec();
        twice.insert(2, (":protocol", "websocket"));
        assert_eq!(check_request(&list(&twice), true), Err(Malformed::BadPseudo));
        // A plain CONNECT is as before, the setting sent or not.
        let plain = [(":method", "CONNECT"), (":authority", "a:443")];
        assert_eq!(check_request(&list(&plain), true), Ok(Head::default()));
        assert_eq!(check_trailers(&list(&[(":path", "/")])), Err(Malformed::PseudoInTrailers));
    }

    /// RFC 9114 §4.3.1: HTTP/3 requires `:authority` or `host` for http and https.
    #[test]
    fn authority_rules_for_http3() {
        let h3 = Rules { extended_connect: false, authority_required: true };
        assert_eq!(check_request(&list(&GET), false), Ok(Head::default()), "HTTP/2 does not require it");
        assert_eq!(check_request_with(&list(&GET), h3), Err(Malformed::MissingAuthority));
        let mut f = GET.to_vec();
        f.push((":authority", "a"));
        assert_eq!(check_request_with(&list(&f), h3), Ok(Head::default()));
        f.push(("host", "a"));
        assert_eq!(check_request_with(&list(&f), h3), Ok(Head::default()));
        f.pop();
        f.push(("host", "b"));
        assert_eq!(check_request_with(&list(&f), h3), Err(Malformed::AuthorityMismatch));
        let mut host_only = GET.to_vec();
        host_only.push(("host", "a"));
        assert_eq!(check_request_with(&list(&host_only), h3), Ok(Head::default()));
        host_only[3].1 = "";
        assert_eq!(check_request_with(&list(&host_only), h3), Err(Malformed::MissingAuthority));
        let other = [(":method", "GET"), (":scheme", "urn"), (":path", "x")];
        assert_eq!(check_request_with(&list(&other), h3), Ok(Head::default()));
    }
}
