//! Whether a QUIC handshake resumed a TLS session. quinn-proto's rustls session does not say
//! (rustls's `handshake_kind` is behind it), so each session is wrapped and its ServerHello read
//! as it passes: the one a client receives, the one a server sends. A `pre_shared_key`
//! extension in it means the server accepted one of the client's PSKs, which in QUIC is always a
//! resumption (RFC 9001 §4.5; QUIC has no external PSKs). A HelloRetryRequest (a ServerHello with
//! its special random) is skipped: the next ServerHello decides.
//!
//! The wrapped session's `handshake_data` is a [`Handshake`]: the ALPN and server name rustls
//! agreed, and whether the handshake resumed. Everything else is the inner session's.

use std::any::Any;
use std::sync::Arc;

use quinn_proto::crypto::rustls::{HandshakeData, QuicClientConfig, QuicServerConfig};
use quinn_proto::crypto::{self, ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey, Session};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectError, ConnectionId, Side, TransportError};

/// A handshake's outcome, from [`quinn_proto::Connection::crypto_session`]'s `handshake_data`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handshake {
    /// The ALPN protocol agreed.
    pub protocol: Option<Vec<u8>>,
    /// The server name the client sent (SNI), as the server read it.
    pub server_name: Option<String>,
    /// The server accepted a PSK: the session was resumed. False until the ServerHello passed.
    pub resumed: bool,
}

impl Handshake {
    /// Read from a connection's session (None before the handshake data is ready, or for a
    /// session not made by [`client_config`] / [`server_config`]).
    pub fn of(conn: &quinn_proto::Connection) -> Option<Handshake> {
        conn.crypto_session().handshake_data().and_then(|d| d.downcast::<Handshake>().ok()).map(|h| *h)
    }
}

/// A client's crypto configuration whose sessions say whether they resumed.
pub fn client_config(inner: QuicClientConfig) -> Arc<dyn crypto::ClientConfig> {
    Arc::new(Client(Arc::new(inner)))
}

/// A server's crypto configuration whose sessions say whether they resumed.
pub fn server_config(inner: QuicServerConfig) -> Arc<dyn crypto::ServerConfig> {
    Arc::new(Server(Arc::new(inner)))
}

struct Client(Arc<QuicClientConfig>);

impl crypto::ClientConfig for Client {
    fn start_session(
        self: Arc<Self>,
        version: u32,
        server_name: &str,
        params: &TransportParameters,
    ) -> Result<Box<dyn Session>, ConnectError> {
        let inner = self.0.clone().start_session(version, server_name, params)?;
        Ok(Box::new(Observed { inner, hello: ServerHelloScan::default(), side: Side::Client }))
    }
}

struct Server(Arc<QuicServerConfig>);

impl crypto::ServerConfig for Server {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, quinn_proto::crypto::UnsupportedVersion> {
        self.0.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.0.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(self: Arc<Self>, version: u32, params: &TransportParameters) -> Box<dyn Session> {
        let inner = self.0.clone().start_session(version, params);
        Box::new(Observed { inner, hello: ServerHelloScan::default(), side: Side::Server })
    }
}

/// A session, and the ServerHello read on its way through.
struct Observed {
    inner: Box<dyn Session>,
    hello: ServerHelloScan,
    side: Side,
}

impl Session for Observed {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        let data = self.inner.handshake_data()?.downcast::<HandshakeData>().ok()?;
        Some(Box::new(Handshake {
            protocol: data.protocol,
            server_name: data.server_name,
            resumed: self.hello.resumed == Some(true),
        }))
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        self.inner.early_crypto()
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        // A client's first handshake bytes are the server's Initial CRYPTO data: the ServerHello.
        if self.side.is_client() {
            self.hello.feed(buf);
        }
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        let start = buf.len();
        let keys = self.inner.write_handshake(buf);
        // A server's first handshake bytes out are its Initial CRYPTO data: the ServerHello.
        if self.side.is_server() {
            self.hello.feed(&buf[start..]);
        }
        keys
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.inner.next_1rtt_keys()
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}

/// TLS 1.3's HelloRetryRequest is a ServerHello with this random (RFC 8446 §4.1.3).
const HELLO_RETRY_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91, 0xC2, 0xA2, 0x11,
    0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];
const SERVER_HELLO: u8 = 2;
const PRE_SHARED_KEY: u16 = 41;
/// More than any ServerHello (a key share of the largest group is ~1.2 KiB with ML-KEM): past
/// it, the bytes are not a ServerHello and nothing is concluded.
const MAX_HELLO: usize = 4096;

/// Reads handshake messages until a ServerHello that is not a HelloRetryRequest.
#[derive(Debug, Default)]
struct ServerHelloScan {
    pending: Vec<u8>,
    /// None until a ServerHello was read (or the bytes were found not to be one: false).
    resumed: Option<bool>,
}

impl ServerHelloScan {
    fn feed(&mut self, bytes: &[u8]) {
        if self.resumed.is_some() || bytes.is_empty() {
            return;
        }
        self.pending.extend_from_slice(bytes);
        while self.resumed.is_none() {
            let Some(&[kind, a, b, c]) = self.pending.get(..4) else { return };
            let len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
            if kind != SERVER_HELLO || len > MAX_HELLO {
                self.conclude(false);
                return;
            }
            let Some(body) = self.pending.get(4..4 + len) else { return };
            match server_hello(body) {
                Some(Hello::Retry) => {
                    self.pending.drain(..4 + len);
                }
                Some(Hello::Final { psk }) => self.conclude(psk),
                None => self.conclude(false),
            }
        }
    }

    fn conclude(&mut self, resumed: bool) {
        self.resumed = Some(resumed);
        self.pending = Vec::new();
    }
}

enum Hello {
    Retry,
    Final { psk: bool },
}

/// A ServerHello's body (RFC 8446 §4.1.3); None if it does not parse as one.
fn server_hello(body: &[u8]) -> Option<Hello> {
    let mut at = 2; // legacy_version
    let random = body.get(at..at + 32)?;
    if random == HELLO_RETRY_RANDOM {
        return Some(Hello::Retry);
    }
    at += 32;
    let session_id = usize::from(*body.get(at)?);
    at += 1 + session_id + 2 + 1; // legacy_session_id_echo, cipher_suite, legacy_compression_method
    let extensions_len = usize::from(u16::from_be_bytes(body.get(at..at + 2)?.try_into().ok()?));
    at += 2;
    let mut extensions = body.get(at..at + extensions_len)?;
    while !extensions.is_empty() {
        let kind = u16::from_be_bytes(extensions.get(..2)?.try_into().ok()?);
        let len = usize::from(u16::from_be_bytes(extensions.get(2..4)?.try_into().ok()?));
        if kind == PRE_SHARED_KEY {
            return Some(Hello::Final { psk: true });
        }
        extensions = extensions.get(4 + len..)?;
    }
    Some(Hello::Final { psk: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ServerHello handshake message with these extensions (type, data).
    fn hello(random: [u8; 32], extensions: &[(u16, &[u8])]) -> Vec<u8> {
        let mut ext = Vec::new();
        for (kind, data) in extensions {
            ext.extend_from_slice(&kind.to_be_bytes());
            ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
            ext.extend_from_slice(data);
        }
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&random);
        body.push(32);
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0x13, 0x01, 0x00]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut msg = vec![SERVER_HELLO];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    fn scan(chunks: &[&[u8]]) -> Option<bool> {
        let mut s = ServerHelloScan::default();
        for c in chunks {
            s.feed(c);
        }
        s.resumed
    }

    #[test]
    fn a_server_hello_with_a_pre_shared_key_is_a_resumption_however_it_is_split() {
        let key_share: &[u8] = &[0, 0x1d, 0, 32, 1, 2, 3];
        let resumed = hello([1; 32], &[(43, &[3, 4]), (51, key_share), (PRE_SHARED_KEY, &[0, 0])]);
        let full = hello([1; 32], &[(43, &[3, 4]), (51, key_share)]);
        assert_eq!(scan(&[&resumed]), Some(true));
        assert_eq!(scan(&[&full]), Some(false));
        for cut in 1..resumed.len() {
            assert_eq!(scan(&[&resumed[..cut], &resumed[cut..]]), Some(true), "cut at {cut}");
        }
        assert_eq!(scan(&[&resumed[..10]]), None, "not yet known");
    }

    #[test]
    fn a_hello_retry_request_is_skipped_for_the_server_hello_after_it() {
        let retry = hello(HELLO_RETRY_RANDOM, &[(43, &[3, 4]), (51, &[0, 0x1d])]);
        let resumed = hello([9; 32], &[(PRE_SHARED_KEY, &[0, 0])]);
        assert_eq!(scan(&[&retry]), None);
        assert_eq!(scan(&[&retry, &resumed]), Some(true));
    }

    #[test]
    fn bytes_that_are_no_server_hello_conclude_nothing_resumed() {
        assert_eq!(scan(&[&[8, 0, 0, 2, 0, 0]]), Some(false), "EncryptedExtensions first");
        assert_eq!(scan(&[&[SERVER_HELLO, 0xff, 0xff, 0xff]]), Some(false), "too long");
        let mut truncated = hello([1; 32], &[(PRE_SHARED_KEY, &[0, 0])]);
        truncated[3] -= 3; // the length cuts into the extension
        assert_eq!(scan(&[&truncated]), Some(false));
    }
}
