//! The opening handshake (RFC 6455 §4): a server's answer to an HTTP/1.1 upgrade request, and
//! a client's request and its check of the 101. Headers come in as (name, value) pairs from
//! whatever parsed the head (httparse in the server and the load generator).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha1::{Digest, Sha1};

use crate::deflate::{self, DeflateConfig, DeflateParams};

/// The GUID of RFC 6455 §1.3, appended to the key before hashing.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` value.
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(GUID.as_bytes());
    STANDARD.encode(sha.finalize())
}

/// Whether `value` (a comma-separated token list) contains `token`, ignoring case.
fn has_token(value: &[u8], token: &str) -> bool {
    value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Whether a request asks for a WebSocket (`Upgrade: websocket`): such a request is the
/// WebSocket stage's, to accept or refuse with [`accept`].
pub fn is_upgrade<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> bool {
    headers.into_iter().any(|(name, value)| name.eq_ignore_ascii_case("upgrade") && has_token(value, "websocket"))
}

/// Why an upgrade request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a WebSocket upgrade must be a GET")]
    NotGet,
    #[error("no `Upgrade: websocket`")]
    NoUpgrade,
    #[error("`Connection` does not list `upgrade`")]
    NoConnectionUpgrade,
    #[error("no `Sec-WebSocket-Version`")]
    NoVersion,
    #[error("`Sec-WebSocket-Version` is not 13")]
    UnsupportedVersion,
    #[error("`Sec-WebSocket-Key` missing, repeated, or not 16 octets in base64")]
    BadKey,
}

impl Refusal {
    /// The status the refusal is answered with: 426 with `Sec-WebSocket-Version: 13` for
    /// another version (§4.2.2), 400 otherwise.
    pub fn status(self) -> u16 {
        match self {
            Refusal::UnsupportedVersion => 426,
            _ => 400,
        }
    }

    /// The whole response, which ends the connection.
    pub fn write_response(self, out: &mut Vec<u8>) {
        let head: &[u8] = match self {
            Refusal::UnsupportedVersion => {
                b"HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            }
            _ => b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        };
        out.extend_from_slice(head);
    }
}

/// An accepted upgrade: the 101 to send, and the permessage-deflate agreed (if any), to start
/// the [`crate::Session`] with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub deflate: Option<DeflateParams>,
    pub response: Vec<u8>,
}

/// Answers an upgrade request (method and headers of an HTTP/1.1 request; the caller refuses
/// HTTP/1.0). `deflate`: the server's permessage-deflate wishes, or `None` to decline it.
pub fn accept<'a>(
    method: &str,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
    deflate: Option<&DeflateConfig>,
) -> Result<Accepted, Refusal> {
    if method != "GET" {
        return Err(Refusal::NotGet);
    }
    let (mut upgrade, mut connection, mut version, mut key) = (false, false, None, None);
    let mut keys = 0;
    for (name, value) in headers.clone() {
        if name.eq_ignore_ascii_case("upgrade") {
            upgrade |= has_token(value, "websocket");
        } else if name.eq_ignore_ascii_case("connection") {
            connection |= has_token(value, "upgrade");
        } else if name.eq_ignore_ascii_case("sec-websocket-version") {
            version = Some(value.trim_ascii() == b"13");
        } else if name.eq_ignore_ascii_case("sec-websocket-key") {
            keys += 1;
            key = Some(value.trim_ascii());
        }
    }
    if !upgrade {
        return Err(Refusal::NoUpgrade);
    }
    if !connection {
        return Err(Refusal::NoConnectionUpgrade);
    }
    match version {
        None => return Err(Refusal::NoVersion),
        Some(false) => return Err(Refusal::UnsupportedVersion),
        Some(true) => {}
    }
    let key = match key {
        Some(key) if keys == 1 && STANDARD.decode(key).is_ok_and(|raw| raw.len() == 16) => key,
        _ => return Err(Refusal::BadKey),
    };
    // A key that decoded is base64, so ASCII.
    let key = std::str::from_utf8(key).map_err(|_| Refusal::BadKey)?;
    let agreed = deflate.and_then(|config| negotiate_deflate(headers, config));
    let mut response = Vec::with_capacity(160);
    response.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ",
    );
    response.extend_from_slice(accept_key(key).as_bytes());
    if let Some((_, value)) = &agreed {
        response.extend_from_slice(b"\r\nSec-WebSocket-Extensions: ");
        response.extend_from_slice(value.as_bytes());
    }
    response.extend_from_slice(b"\r\n\r\n");
    Ok(Accepted { deflate: agreed.map(|(params, _)| params), response })
}

/// The permessage-deflate offers among a request's `Sec-WebSocket-Extensions` fields, answered
/// for `config` (HTTP/1.1 upgrades and HTTP/2 extended CONNECTs alike).
fn negotiate_deflate<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    config: &DeflateConfig,
) -> Option<(DeflateParams, String)> {
    let offers = headers
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("sec-websocket-extensions"))
        .filter_map(|(_, value)| std::str::from_utf8(value).ok());
    deflate::negotiate(offers, config)
}

/// An extended CONNECT accepted (RFC 8441 §5): the permessage-deflate agreed, and the
/// `sec-websocket-extensions` value of the 200 that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedH2 {
    pub deflate: Option<DeflateParams>,
    pub extensions: Option<String>,
}

/// Answers a WebSocket over HTTP/2 (RFC 8441 §5): the regular fields of an extended CONNECT
/// whose `:protocol` is `websocket` (the HTTP/2 stage checked its pseudo-fields).
/// `sec-websocket-version` must be 13 as on HTTP/1.1 (none: [`Refusal::NoVersion`], 400;
/// another: [`Refusal::UnsupportedVersion`], 426); there is no key to answer (§5: the 200
/// carries no `sec-websocket-accept`; a key sent anyway is ignored). permessage-deflate is
/// negotiated as for an upgrade.
pub fn accept_h2<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
    deflate: Option<&DeflateConfig>,
) -> Result<AcceptedH2, Refusal> {
    let mut version = None;
    for (name, value) in headers.clone() {
        if name.eq_ignore_ascii_case("sec-websocket-version") {
            version = Some(value.trim_ascii() == b"13");
        }
    }
    match version {
        None => return Err(Refusal::NoVersion),
        Some(false) => return Err(Refusal::UnsupportedVersion),
        Some(true) => {}
    }
    let agreed = deflate.and_then(|config| negotiate_deflate(headers, config));
    Ok(match agreed {
        Some((params, value)) => AcceptedH2 { deflate: Some(params), extensions: Some(value) },
        None => AcceptedH2 { deflate: None, extensions: None },
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("the server answered {0}, not 101")]
    Status(u16),
    #[error("the 101 has no `Upgrade: websocket`")]
    NoUpgrade,
    #[error("the 101's `Connection` does not list `upgrade`")]
    NoConnectionUpgrade,
    #[error("the 101's `Sec-WebSocket-Accept` is missing or wrong")]
    BadAccept,
    #[error("the 101's `Sec-WebSocket-Extensions` is not one the request offered: {0}")]
    BadExtension(String),
}

/// A client's side of the handshake: the request, and the check of its answer.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    key: String,
    deflate: Option<DeflateConfig>,
}

impl ClientHandshake {
    /// `nonce`: 16 random octets (RFC 6455 §4.1; [`ClientHandshake::random`] draws them).
    pub fn new(nonce: [u8; 16], deflate: Option<DeflateConfig>) -> Self {
        ClientHandshake { key: STANDARD.encode(nonce), deflate }
    }

    /// A handshake with a nonce from `rng`.
    pub fn random(rng: &mut fastrand::Rng, deflate: Option<DeflateConfig>) -> Self {
        let mut nonce = [0u8; 16];
        rng.fill(&mut nonce);
        Self::new(nonce, deflate)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Appends the upgrade request for `path` on `host` (`host[:port]` as the Host header
    /// carries it).
    pub fn write_request(&self, host: &str, path: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(
            b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ",
        );
        out.extend_from_slice(self.key.as_bytes());
        if let Some(config) = &self.deflate {
            out.extend_from_slice(b"\r\nSec-WebSocket-Extensions: ");
            out.extend_from_slice(deflate::offer_value(config).as_bytes());
        }
        out.extend_from_slice(b"\r\n\r\n");
    }

    /// Checks the server's response (status and headers): the permessage-deflate agreed, if any.
    pub fn verify<'a>(
        &self,
        status: u16,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Option<DeflateParams>, HandshakeError> {
        if status != 101 {
            return Err(HandshakeError::Status(status));
        }
        let (mut upgrade, mut connection, mut accepted) = (false, false, false);
        let mut extensions: Vec<&[u8]> = Vec::new();
        let expected = accept_key(&self.key);
        let mut accepts = 0;
        for (name, value) in headers {
            if name.eq_ignore_ascii_case("upgrade") {
                upgrade |= has_token(value, "websocket");
            } else if name.eq_ignore_ascii_case("connection") {
                connection |= has_token(value, "upgrade");
            } else if name.eq_ignore_ascii_case("sec-websocket-accept") {
                accepts += 1;
                accepted = value.trim_ascii() == expected.as_bytes();
            } else if name.eq_ignore_ascii_case("sec-websocket-extensions") {
                extensions.push(value);
            }
        }
        if !upgrade {
            return Err(HandshakeError::NoUpgrade);
        }
        if !connection {
            return Err(HandshakeError::NoConnectionUpgrade);
        }
        if !accepted || accepts != 1 {
            return Err(HandshakeError::BadAccept);
        }
        let mut agreed = None;
        for value in extensions {
            let text = String::from_utf8_lossy(value);
            for (name, params) in deflate::extensions(&text) {
                let bad = || HandshakeError::BadExtension(text.trim().to_string());
                // One extension was offered, once: anything else, or it twice, is refused.
                let config = self.deflate.as_ref().filter(|_| name.eq_ignore_ascii_case(deflate::EXTENSION));
                let Some(config) = config.filter(|_| agreed.is_none()) else { return Err(bad()) };
                agreed = Some(deflate::accept_response(params, config).ok_or_else(bad)?);
            }
        }
        Ok(agreed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Headers<'a> = Vec<(&'a str, &'a [u8])>;

    fn request<'a>() -> Headers<'a> {
        vec![
            ("Host", b"server.example.com"),
            ("Upgrade", b"websocket"),
            ("Connection", b"keep-alive, Upgrade"),
            ("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", b"13"),
        ]
    }

    #[test]
    fn rfc_6455_accept_example() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn a_valid_request_gets_the_101() {
        let headers = request();
        let accepted = accept("GET", headers.iter().copied(), None).unwrap();
        assert_eq!(
            String::from_utf8(accepted.response).unwrap(),
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
        );
        assert_eq!(accepted.deflate, None);
        assert!(is_upgrade(headers.iter().copied()));
    }

    #[test]
    fn bad_requests_are_refused_with_their_status() {
        let cases: [(&str, &str, Option<&[u8]>, Refusal); 8] = [
            ("POST", "", None, Refusal::NotGet),
            ("GET", "Upgrade", Some(b"h2c"), Refusal::NoUpgrade),
            ("GET", "Connection", Some(b"keep-alive"), Refusal::NoConnectionUpgrade),
            ("GET", "Sec-WebSocket-Version", None, Refusal::NoVersion),
            ("GET", "Sec-WebSocket-Version", Some(b"8"), Refusal::UnsupportedVersion),
            ("GET", "Sec-WebSocket-Key", None, Refusal::BadKey),
            ("GET", "Sec-WebSocket-Key", Some(b"c2hvcnQ="), Refusal::BadKey),
            ("GET", "Sec-WebSocket-Key", Some(b"not base64 at all!!!!!!="), Refusal::BadKey),
        ];
        for (method, name, value, expected) in cases {
            let mut headers: Headers = request().into_iter().filter(|(n, _)| *n != name).collect();
            if let Some(value) = value {
                headers.push((name, value));
            }
            assert_eq!(accept(method, headers.iter().copied(), None), Err(expected), "{method} {name}");
        }
        let mut twice = request();
        twice.push(("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert_eq!(accept("GET", twice.iter().copied(), None), Err(Refusal::BadKey));
        assert_eq!(Refusal::UnsupportedVersion.status(), 426);
        assert_eq!(Refusal::BadKey.status(), 400);
        let mut out = Vec::new();
        Refusal::UnsupportedVersion.write_response(&mut out);
        assert!(out.starts_with(b"HTTP/1.1 426 ") && out.windows(25).any(|w| w == b"Sec-WebSocket-Version: 13"));
    }

    #[test]
    fn deflate_is_agreed_only_when_the_server_wants_it() {
        let mut headers = request();
        headers.push(("Sec-WebSocket-Extensions", b"permessage-deflate; client_max_window_bits"));
        let declined = accept("GET", headers.iter().copied(), None).unwrap();
        assert_eq!(declined.deflate, None);
        let config = DeflateConfig { client_max_window_bits: 12, ..DeflateConfig::default() };
        let accepted = accept("GET", headers.iter().copied(), Some(&config)).unwrap();
        assert_eq!(accepted.deflate.unwrap().client_max_window_bits, 12);
        let text = String::from_utf8(accepted.response).unwrap();
        assert!(
            text.contains("\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=12\r\n"),
            "{text}"
        );
    }

    /// RFC 8441 §5: version 13 required (400 without, 426 for another), no key needed, and
    /// deflate agreed as on HTTP/1.1.
    #[test]
    fn websocket_over_http2_needs_version_13_and_no_key() {
        let v13: [(&str, &[u8]); 1] = [("sec-websocket-version", b"13")];
        assert_eq!(accept_h2(v13, None), Ok(AcceptedH2 { deflate: None, extensions: None }));
        assert_eq!(accept_h2([("sec-websocket-version", &b"8"[..])], None), Err(Refusal::UnsupportedVersion));
        assert_eq!(accept_h2([("origin", &b"x"[..])], None), Err(Refusal::NoVersion));
        let offer: [(&str, &[u8]); 2] = [
            ("sec-websocket-version", b"13"),
            ("sec-websocket-extensions", b"permessage-deflate; client_max_window_bits"),
        ];
        let config = DeflateConfig { client_max_window_bits: 12, ..DeflateConfig::default() };
        let agreed = accept_h2(offer, Some(&config)).unwrap();
        assert_eq!(agreed.deflate.unwrap().client_max_window_bits, 12);
        assert_eq!(agreed.extensions.as_deref(), Some("permessage-deflate; client_max_window_bits=12"));
        assert_eq!(accept_h2(offer, None).unwrap().deflate, None, "declined");
    }

    /// The server's 101 for a client's request, through both sides' functions.
    fn round_trip(
        client: Option<DeflateConfig>,
        server: Option<DeflateConfig>,
    ) -> (Option<DeflateParams>, Option<DeflateParams>) {
        let handshake = ClientHandshake::new(*b"the sample nonce", client);
        let mut request = Vec::new();
        handshake.write_request("localhost:80", "/chat", &mut request);
        let text = String::from_utf8(request).unwrap();
        assert!(text.starts_with("GET /chat HTTP/1.1\r\nHost: localhost:80\r\n"));
        let headers: Vec<(&str, &[u8])> = text
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(": "))
            .map(|(name, value)| (name, value.as_bytes()))
            .collect();
        let accepted = accept("GET", headers.iter().copied(), server.as_ref()).unwrap();
        let response = String::from_utf8(accepted.response).unwrap();
        let headers: Vec<(&str, &[u8])> = response
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(": "))
            .map(|(name, value)| (name, value.as_bytes()))
            .collect();
        (handshake.verify(101, headers.iter().copied()).unwrap(), accepted.deflate)
    }

    #[test]
    fn client_and_server_agree() {
        assert_eq!(round_trip(None, Some(DeflateConfig::default())), (None, None));
        assert_eq!(round_trip(Some(DeflateConfig::default()), None), (None, None));
        let client =
            DeflateConfig { server_max_window_bits: 10, client_no_context_takeover: true, ..DeflateConfig::default() };
        let server = DeflateConfig { client_max_window_bits: 11, ..DeflateConfig::default() };
        let (client_side, server_side) = round_trip(Some(client), Some(server));
        let (client_side, server_side) = (client_side.unwrap(), server_side.unwrap());
        assert_eq!(client_side.server_max_window_bits, 10);
        assert_eq!(client_side.client_max_window_bits, 11);
        assert_eq!(server_side.server_max_window_bits, 10);
        assert_eq!(server_side.client_max_window_bits, 11);
        assert!(client_side.client_no_context_takeover && server_side.client_no_context_takeover);
    }

    #[test]
    fn the_client_refuses_a_bad_101() {
        let handshake = ClientHandshake::new(*b"the sample nonce", None);
        let good = accept_key(handshake.key());
        let base: Headers =
            vec![("Upgrade", b"websocket"), ("Connection", b"Upgrade"), ("Sec-WebSocket-Accept", good.as_bytes())];
        assert_eq!(handshake.verify(101, base.iter().copied()), Ok(None));
        assert_eq!(handshake.verify(200, base.iter().copied()), Err(HandshakeError::Status(200)));
        let wrong: Headers = vec![
            ("Upgrade", b"websocket"),
            ("Connection", b"Upgrade"),
            ("Sec-WebSocket-Accept", b"AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
        ];
        assert_eq!(handshake.verify(101, wrong.iter().copied()), Err(HandshakeError::BadAccept));
        let no_upgrade: Headers = base.iter().copied().filter(|(n, _)| *n != "Upgrade").collect();
        assert_eq!(handshake.verify(101, no_upgrade.iter().copied()), Err(HandshakeError::NoUpgrade));
        let no_connection: Headers = base.iter().copied().filter(|(n, _)| *n != "Connection").collect();
        assert_eq!(handshake.verify(101, no_connection.iter().copied()), Err(HandshakeError::NoConnectionUpgrade));
        let mut unoffered = base.clone();
        unoffered.push(("Sec-WebSocket-Extensions", b"permessage-deflate"));
        assert!(matches!(handshake.verify(101, unoffered.iter().copied()), Err(HandshakeError::BadExtension(_))));
        let offering = ClientHandshake::new(*b"the sample nonce", Some(DeflateConfig::default()));
        let mut twice = base.clone();
        twice.push(("Sec-WebSocket-Extensions", b"permessage-deflate, permessage-deflate"));
        assert!(matches!(offering.verify(101, twice.iter().copied()), Err(HandshakeError::BadExtension(_))));
    }
}
