//! `--http3`: the QUIC endpoint's setup, made once when the server starts (`Resources::load`)
//! from the TLS configuration and the limits TCP uses for the same policies, and shared by
//! every socket's endpoint: the counts and the admission gauges are over all of them.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sockscale_proto::http::HttpConfig;
use sockscale_proto::quic::h3::H3Apps;
use sockscale_proto::quic::{Admission, QuicConfigError, QuicEndpoint, QuicKeys, QuicSetup, QuicTotals, QuicTuning};
use sockscale_tls::ServerTls;

use crate::config::Config;

/// Handshakes in progress at once when `--max-handshakes` is not given: QUIC needs a bound for
/// `--quic-retry auto` to mean something, and quinn-proto's buffered Initials are bounded too.
pub const DEFAULT_MAX_HANDSHAKES: usize = 1024;

/// What every `--http3` socket's endpoint is made from.
#[derive(Debug)]
pub struct Http3Service {
    /// One setup for every socket: its keys (stateless reset, Retry and NEW_TOKEN) and counts
    /// are the server's, whichever socket a datagram reaches.
    setup: Arc<QuicSetup>,
    http: Arc<HttpConfig>,
    admission: Admission,
}

impl Http3Service {
    /// `None` unless `cfg` asks for `--http3`.
    pub fn new(cfg: &Config, tls: &ServerTls, http: Arc<HttpConfig>) -> Result<Option<Self>, QuicConfigError> {
        let Some(limits) = cfg.http3_limits() else { return Ok(None) };
        let tuning = QuicTuning {
            idle_timeout: limits.idle_timeout,
            max_streams: limits.max_streams,
            segmentation_offload: cfg.udp_offload.gso,
            zero_rtt: limits.zero_rtt,
            allow_mtud: true,
            max_mtu: limits.max_mtu,
            ..QuicTuning::default()
        };
        let rustls = tls.rustls_config(vec![b"h3".to_vec()]);
        // A `--procs` worker's keys are the server's (its parent's); a lone process makes its own.
        let keys = match &cfg.quic_keys {
            Some(keys) => keys.clone(),
            None => QuicKeys::generate()?,
        };
        let setup = QuicSetup::server_with_keys(rustls, tuning, Arc::default(), &keys)?;
        let admission = Admission {
            max_connections: limits.max_conns,
            max_handshakes: limits.max_handshakes.unwrap_or(DEFAULT_MAX_HANDSHAKES),
            retry: limits.retry,
            handshake_timeout: if limits.handshake_timeout.is_zero() {
                Duration::from_secs(10)
            } else {
                limits.handshake_timeout
            },
        };
        Ok(Some(Http3Service { setup: Arc::new(setup), http, admission }))
    }

    /// What every endpoint counts, for the server's stats.
    pub fn totals(&self) -> Arc<QuicTotals> {
        self.setup.totals.clone()
    }

    /// A new endpoint for one socket; `mtud`: the socket never fragments, so path MTU discovery
    /// may probe; `steering`: the socket's index in its port's group, which steers QUIC packets
    /// by connection ID ([`crate::listener::Listen::steering_index`]).
    pub fn endpoint(&self, mtud: bool, steering: Option<u8>) -> QuicEndpoint<H3Apps> {
        let apps = H3Apps::new(self.http.clone(), self.setup.totals.clone(), Instant::now(), SystemTime::now());
        QuicEndpoint::on_socket(self.setup.clone(), self.admission, apps, mtud, steering)
    }
}
