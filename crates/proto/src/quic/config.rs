//! A QUIC server's configuration, made once and shared by every socket's endpoint: quinn-proto's
//! endpoint and server configurations with the limits the server's flags set (quinn-proto's
//! defaults are a client's or a single big server's: an unbounded connection receive window,
//! 100 MiB of buffered Initials), and the counts every endpoint adds to.

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::rustls;
use quinn_proto::{
    ClientConfig, ConnectionId, ConnectionIdGenerator, EndpointConfig, IdleTimeout, InvalidCid, MtuDiscoveryConfig,
    RandomConnectionIdGenerator, ServerConfig, TransportConfig, VarInt,
};

use super::resumption;
use super::totals::QuicTotals;

/// When a new connection is sent a stateless Retry first (`--quic-retry`): the client proves
/// its address by echoing a token, at the cost of one round trip, before any handshake state
/// is kept for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryMode {
    /// Only under load: while at least half the handshake budget is in use.
    #[default]
    Auto,
    /// Every new connection whose address is not yet validated: one round trip more, no
    /// unvalidated address ever costs a handshake.
    On,
    /// Never: the 3x anti-amplification limit alone bounds what an unvalidated address gets.
    Off,
}

impl RetryMode {
    pub fn name(self) -> &'static str {
        match self {
            RetryMode::Auto => "auto",
            RetryMode::On => "on",
            RetryMode::Off => "off",
        }
    }
}

impl std::str::FromStr for RetryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(RetryMode::Auto),
            "on" => Ok(RetryMode::On),
            "off" => Ok(RetryMode::Off),
            other => Err(format!("'{other}' is not a Retry mode (expected auto, on or off)")),
        }
    }
}

/// The transport's limits and sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicTuning {
    /// A connection with nothing received for this long is closed silently (both sides
    /// advertise it; the smaller wins).
    pub idle_timeout: Duration,
    /// Request streams a client may have open at once (HTTP/3: its bidirectional streams).
    pub max_streams: u32,
    /// Unidirectional streams a peer may open: HTTP/3's control stream, QPACK's two, and room
    /// for a peer's grease streams.
    pub max_uni_streams: u32,
    /// Bytes a peer may send ahead on one stream.
    pub stream_window: u32,
    /// Bytes a peer may send ahead over the whole connection.
    pub connection_window: u32,
    /// Bytes of stream data this side keeps unacknowledged per connection.
    pub send_window: u64,
    /// Datagrams of one path MTU sent in one GSO message, when the socket can (`--udp-gso`).
    pub segmentation_offload: bool,
    /// Path MTU discovery (the socket must not fragment: IP_PMTUDISC_PROBE), up to
    /// `max_mtu`; off, packets stay at `initial_mtu`.
    pub allow_mtud: bool,
    pub initial_mtu: u16,
    pub max_mtu: u16,
    /// Accept 0-RTT (early) data from resuming clients: requests that an attacker can replay.
    pub zero_rtt: bool,
    /// Initials (and their 0-RTT) buffered for connections not yet accepted, in bytes.
    pub incoming_buffer: u64,
}

impl Default for QuicTuning {
    fn default() -> Self {
        QuicTuning {
            idle_timeout: Duration::from_secs(30),
            max_streams: 128,
            max_uni_streams: 8,
            stream_window: 1 << 20,
            connection_window: 8 << 20,
            send_window: 2 << 20,
            segmentation_offload: true,
            allow_mtud: false,
            initial_mtu: 1200,
            max_mtu: 1452,
            zero_rtt: false,
            incoming_buffer: 1 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QuicConfigError {
    #[error("QUIC needs TLS 1.3 with TLS_AES_128_GCM_SHA256 in the certificate's configuration: {0}")]
    Crypto(String),
    #[error("QUIC configuration: {0}")]
    Transport(String),
}

/// The server's QUIC secrets: the stateless-reset key (a reset must be recognised by the
/// client whichever endpoint sends it) and the key of Retry and NEW_TOKEN tokens (a token one
/// endpoint issued must be accepted by the endpoint the client's next packet reaches). One
/// setup's endpoints share them; a `serve --procs` server gives every process the same ones.
#[derive(Clone, PartialEq, Eq)]
pub struct QuicKeys {
    reset: [u8; QuicKeys::KEY_LEN],
    token: [u8; QuicKeys::KEY_LEN],
}

impl std::fmt::Debug for QuicKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuicKeys(..)")
    }
}

impl QuicKeys {
    const KEY_LEN: usize = 64;
    /// The length of [`QuicKeys::to_bytes`].
    pub const LEN: usize = 2 * Self::KEY_LEN;

    /// New random keys, from the system's random source.
    pub fn generate() -> Result<Self, QuicConfigError> {
        let mut bytes = [0u8; Self::LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| QuicConfigError::Transport("the system's random source failed".into()))?;
        Self::from_bytes(&bytes)
    }

    /// The keys as bytes, to hand to another process of the same server.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..Self::KEY_LEN].copy_from_slice(&self.reset);
        out[Self::KEY_LEN..].copy_from_slice(&self.token);
        out
    }

    /// The keys [`QuicKeys::to_bytes`] gave; anything but [`QuicKeys::LEN`] bytes is refused.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, QuicConfigError> {
        if bytes.len() != Self::LEN {
            return Err(QuicConfigError::Transport(format!("QUIC keys are {} bytes, not {}", Self::LEN, bytes.len())));
        }
        let (reset, token) = bytes.split_at(Self::KEY_LEN);
        let mut keys = QuicKeys { reset: [0; Self::KEY_LEN], token: [0; Self::KEY_LEN] };
        keys.reset.copy_from_slice(reset);
        keys.token.copy_from_slice(token);
        Ok(keys)
    }

    /// The key of the server's connection IDs' check bytes ([`ServerCids`]), derived from the
    /// reset key: every endpoint of the server, in every process, knows its IDs.
    fn cid_key(&self) -> u64 {
        let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.reset), b"sockscale cid");
        let mut key = [0u8; 8];
        key.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_le_bytes(key)
    }

    fn reset_key(&self) -> Arc<dyn quinn_proto::crypto::HmacKey> {
        Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.reset))
    }

    /// As quinn-proto's `ServerConfig::with_crypto` makes its random one.
    fn token_key(&self) -> Arc<dyn quinn_proto::crypto::HandshakeTokenKey> {
        Arc::new(ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(&self.token))
    }
}

/// The connection IDs a server's endpoints issue: 8 bytes (quinn-proto's default length) — the
/// first is the index of the endpoint's socket in the port's SO_REUSEPORT group when the group
/// steers by it (`sockscale_sys::reuseport`), random otherwise; five random; two a keyed hash of
/// the six before, so that an endpoint tells the server's IDs from garbage at once (and drops
/// the garbage) and any endpoint of the server, in any process, answers a packet for a
/// connection it does not hold with a stateless reset rather than silence.
///
/// The index byte is the same in every ID a socket issues, so an observer learns which socket
/// a connection is on (as QUIC load balancers' routable IDs do), and 40 random bits rather
/// than 64 tell the IDs apart: quinn-proto draws again on a collision.
#[derive(Debug, Clone, Copy)]
pub struct ServerCids {
    key: u64,
    socket: Option<u8>,
}

impl ServerCids {
    const LEN: usize = 8;
    const CHECKED: usize = 6;

    fn check(&self, head: &[u8]) -> [u8; 2] {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys, keyed here by `key`: the same in every process of one build.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.key.hash(&mut h);
        head.hash(&mut h);
        let [a, b, ..] = h.finish().to_le_bytes();
        [a, b]
    }

    /// The index of the socket in the first byte, if any.
    pub fn socket(&self) -> Option<u8> {
        self.socket
    }
}

impl ConnectionIdGenerator for ServerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let random = RandomConnectionIdGenerator::new(Self::LEN).generate_cid();
        let mut bytes = [0u8; Self::LEN];
        bytes.copy_from_slice(&random);
        if let Some(index) = self.socket {
            bytes[0] = index;
        }
        let check = self.check(&bytes[..Self::CHECKED]);
        bytes[Self::CHECKED..].copy_from_slice(&check);
        ConnectionId::new(&bytes)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        if cid.len() == Self::LEN && cid[Self::CHECKED..] == self.check(&cid[..Self::CHECKED]) {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        Self::LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// What every endpoint of one server shares.
pub struct QuicSetup {
    pub endpoint: Arc<EndpointConfig>,
    /// A server's: new connections are accepted.
    pub server: Option<Arc<ServerConfig>>,
    /// A client's: connections are opened ([`super::QuicEndpoint::connect`]).
    pub client: Option<ClientConfig>,
    pub tuning: QuicTuning,
    pub totals: Arc<QuicTotals>,
    /// A server's connection-ID key ([`ServerCids`]).
    cid_key: Option<u64>,
}

impl std::fmt::Debug for QuicSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicSetup").field("tuning", &self.tuning).finish_non_exhaustive()
    }
}

impl QuicSetup {
    /// A server's setup from its TLS configuration (certificate, key, ALPN `h3`, session
    /// tickets), whose early-data size is set here: QUIC allows only 0 or `u32::MAX`.
    /// The endpoints made from it count in `totals` (shared with another setup's, if given).
    /// Its keys are new random ones.
    pub fn server(
        tls: rustls::ServerConfig,
        tuning: QuicTuning,
        totals: Arc<QuicTotals>,
    ) -> Result<Self, QuicConfigError> {
        Self::server_with_keys(tls, tuning, totals, &QuicKeys::generate()?)
    }

    /// As [`QuicSetup::server`], with the given keys (those of the server's other processes).
    pub fn server_with_keys(
        mut tls: rustls::ServerConfig,
        tuning: QuicTuning,
        totals: Arc<QuicTotals>,
        keys: &QuicKeys,
    ) -> Result<Self, QuicConfigError> {
        tls.max_early_data_size = if tuning.zero_rtt { u32::MAX } else { 0 };
        if tuning.zero_rtt {
            // rustls accepts early data only on a stateful resumption (a session kept here,
            // taken once, so one ticket cannot start two 0-RTT connections): stateless tickets
            // off, the session cache on.
            tls.ticketer = Arc::new(NoTickets);
            if !tls.session_storage.can_cache() {
                tls.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
            }
            tls.send_tls13_tickets = tls.send_tls13_tickets.max(2);
        }
        let crypto = QuicServerConfig::try_from(tls).map_err(|e| QuicConfigError::Crypto(e.to_string()))?;
        let mut server = ServerConfig::new(resumption::server_config(crypto), keys.token_key());
        server.transport_config(Arc::new(transport(&tuning)?));
        server.max_incoming(4096);
        server.incoming_buffer_size(64 << 10);
        server.incoming_buffer_size_total(tuning.incoming_buffer);
        let mut endpoint = EndpointConfig::new(keys.reset_key());
        endpoint
            .max_udp_payload_size(tuning.max_mtu.max(1200) - 28)
            .map_err(|e| QuicConfigError::Transport(e.to_string()))?;
        let cid_key = keys.cid_key();
        endpoint.cid_generator(move || Box::new(ServerCids { key: cid_key, socket: None }));
        Ok(QuicSetup {
            endpoint: Arc::new(endpoint),
            server: Some(Arc::new(server)),
            client: None,
            tuning,
            totals,
            cid_key: Some(cid_key),
        })
    }

    /// A client's setup from its TLS configuration (trust, ALPN `h3`, a resumption store,
    /// early data if 0-RTT is wanted).
    pub fn client(tls: rustls::ClientConfig, tuning: QuicTuning) -> Result<Self, QuicConfigError> {
        let crypto = QuicClientConfig::try_from(tls).map_err(|e| QuicConfigError::Crypto(e.to_string()))?;
        let mut client = ClientConfig::new(resumption::client_config(crypto));
        client.transport_config(Arc::new(transport(&tuning)?));
        let mut endpoint = EndpointConfig::default();
        endpoint
            .max_udp_payload_size(tuning.max_mtu.max(1200) - 28)
            .map_err(|e| QuicConfigError::Transport(e.to_string()))?;
        Ok(QuicSetup {
            endpoint: Arc::new(endpoint),
            server: None,
            client: Some(client),
            tuning,
            totals: Arc::default(),
            cid_key: None,
        })
    }

    /// The endpoint configuration for a server's socket at `index` in its port's SO_REUSEPORT
    /// group, when the group steers by connection ID: the IDs it issues carry the index. A
    /// client's setup, or no index: the shared configuration.
    pub fn endpoint_for_socket(&self, index: Option<u8>) -> Arc<EndpointConfig> {
        let (Some(key), Some(index)) = (self.cid_key, index) else { return self.endpoint.clone() };
        let mut endpoint = (*self.endpoint).clone();
        endpoint.cid_generator(move || Box::new(ServerCids { key, socket: Some(index) }));
        Arc::new(endpoint)
    }
}

/// Stateless tickets off (what 0-RTT needs of rustls).
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The transport parameters and sizes both sides of sockscale use.
pub fn transport(t: &QuicTuning) -> Result<TransportConfig, QuicConfigError> {
    let mut c = TransportConfig::default();
    let idle = IdleTimeout::try_from(t.idle_timeout).map_err(|e| QuicConfigError::Transport(e.to_string()))?;
    c.max_idle_timeout(Some(idle))
        .max_concurrent_bidi_streams(VarInt::from_u32(t.max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(t.max_uni_streams))
        .stream_receive_window(VarInt::from_u32(t.stream_window))
        .receive_window(VarInt::from_u32(t.connection_window))
        .send_window(t.send_window)
        .enable_segmentation_offload(t.segmentation_offload)
        .initial_mtu(t.initial_mtu)
        .min_mtu(t.initial_mtu.min(1200));
    if t.allow_mtud {
        let mut mtud = MtuDiscoveryConfig::default();
        mtud.upper_bound(t.max_mtu);
        c.mtu_discovery_config(Some(mtud));
    } else {
        c.mtu_discovery_config(None);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use quinn_proto::{DatagramEvent, Endpoint};
    use std::net::SocketAddr;
    use std::time::{Instant, SystemTime};

    #[test]
    fn keys_go_through_bytes_and_show_nothing() {
        let keys = QuicKeys::generate().unwrap();
        assert_eq!(QuicKeys::from_bytes(&keys.to_bytes()).unwrap(), keys);
        assert_ne!(QuicKeys::generate().unwrap(), keys);
        assert!(QuicKeys::from_bytes(&keys.to_bytes()[1..]).is_err());
        assert_eq!(format!("{keys:?}"), "QuicKeys(..)");
    }

    /// Every ID a socket's generator issues starts with its index, and the check bytes are the
    /// server's: another generator with the same key takes them, one with another key (another
    /// server) and garbage do not.
    #[test]
    fn connection_ids_carry_the_socket_index_and_the_servers_check() {
        let keys = QuicKeys::generate().unwrap();
        let mut socket = ServerCids { key: keys.cid_key(), socket: Some(3) };
        let other_socket = ServerCids { key: keys.cid_key(), socket: None };
        let other_server = ServerCids { key: QuicKeys::generate().unwrap().cid_key(), socket: Some(3) };
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..64 {
            let cid = socket.generate_cid();
            assert_eq!((cid.len(), cid[0]), (8, 3));
            firsts.insert(cid[1]);
            assert!(socket.validate(&cid).is_ok() && other_socket.validate(&cid).is_ok());
            assert!(other_server.validate(&cid).is_err());
        }
        assert!(firsts.len() > 8, "the rest is random");
        assert!(socket.validate(&ConnectionId::new(&[3, 0, 0, 0, 0, 0, 0, 0])).is_err());
        assert!(socket.validate(&ConnectionId::new(&[3, 1, 2])).is_err());
    }

    fn server(certs: &crate::quic::tests::Certs, keys: &QuicKeys) -> (Endpoint, Arc<QuicSetup>) {
        let tls = sockscale_tls::ServerTls::from_pem_files(
            &certs.files.cert,
            &certs.files.key,
            SystemTime::now(),
            &sockscale_tls::ServerOptions::default(),
        )
        .unwrap();
        let setup = QuicSetup::server_with_keys(
            tls.rustls_config(vec![b"h3".to_vec()]),
            QuicTuning::default(),
            Arc::default(),
            keys,
        )
        .unwrap();
        let setup = Arc::new(setup);
        (Endpoint::new(setup.endpoint_for_socket(None), setup.server.clone(), false, None), setup)
    }

    /// A Retry sent by one process of a `--procs` server (endpoint A), answered by the client
    /// at another (endpoint B, its own setup): B takes A's token when both have the server's
    /// keys, and not when each made its own.
    #[test]
    fn a_retry_token_from_one_setup_is_taken_by_another_with_the_same_keys() {
        let certs = crate::quic::tests::certs();
        let client_config = crate::quic::tests::client_config(&certs, b"h3", &QuicTuning::default());
        let (server_addr, client_addr): (SocketAddr, SocketAddr) =
            ("127.0.0.1:4433".parse().unwrap(), "127.0.0.1:50000".parse().unwrap());
        for shared in [true, false] {
            let keys = QuicKeys::generate().unwrap();
            let (mut a, _) = server(&certs, &keys);
            let (mut b, _) = server(&certs, &if shared { keys.clone() } else { QuicKeys::generate().unwrap() });
            let now = Instant::now();
            let mut client = Endpoint::new(Arc::default(), None, false, None);
            let (_, mut conn) = client.connect(now, client_config.clone(), server_addr, "127.0.0.1").unwrap();
            let mut buf = Vec::new();
            let initial = conn.poll_transmit(now, 1, &mut buf).expect("the client's Initial");
            let datagram = BytesMut::from(&buf[..initial.size]);
            let Some(DatagramEvent::NewConnection(incoming)) =
                a.handle(now, client_addr, None, None, datagram, &mut buf)
            else {
                panic!("A: no new connection")
            };
            let mut out = Vec::new();
            let retry = a.retry(incoming, &mut out).expect("A sends a Retry");
            let datagram = BytesMut::from(&out[..retry.size]);
            match client.handle(now, server_addr, None, None, datagram, &mut buf) {
                Some(DatagramEvent::ConnectionEvent(_, event)) => conn.handle_event(event),
                _ => panic!("the client took no Retry"),
            }
            buf.clear();
            let again = conn.poll_transmit(now, 1, &mut buf).expect("the client's Initial with the token");
            let datagram = BytesMut::from(&buf[..again.size]);
            let mut out = Vec::new();
            match b.handle(now, client_addr, None, None, datagram, &mut out) {
                // A token B cannot read leaves the address unvalidated (B would Retry again).
                Some(DatagramEvent::NewConnection(incoming)) => {
                    assert_eq!(incoming.remote_address_validated(), shared, "B's keys shared: {shared}");
                    b.ignore(incoming);
                }
                Some(DatagramEvent::Response(_)) => assert!(!shared, "B refused a token made with its own keys"),
                _ => panic!("B: no answer (shared keys: {shared})"),
            }
        }
    }
}
