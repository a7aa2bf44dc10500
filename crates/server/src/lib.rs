//! sockscale's server engine.
//!
//! One protocol layer (`sockscale-proto`) served by many I/O models, all sharing one set of
//! resource policies. See `ARCHITECTURE.md` for the layers and the path of a byte; the module
//! docs of `readiness` and `models` describe the model contract, and `model` holds what each model
//! can do, as data.

mod active_places;
mod admission;
mod body;
mod clock;
mod completion;
mod config;
mod connection;
mod ctx;
mod error;
mod groups;
mod http3;
mod inbox;
mod listener;
mod metrics;
mod model;
mod out;
mod policy;
mod pool;
mod readiness;
mod resources;
mod runners;
mod runtime;
mod server;
mod shutdown;
mod signals;
mod socket_turn;
mod stats;
mod storm_gate;
mod threads;
mod udp;

pub use body::{BodyError, BodyFile, SendfileMode, AUTO_MIN_FILE_BYTES};
pub use completion::unavailable as io_uring_unavailable;
pub use config::{
    check_unix_path, resolve_host, BodySource, Config, ConfigError, GroupSteering, Http3Config, Http3Limits,
    ListenAddr, ListenAddrError, ListenerMode, QuicRetry, Service, TlsFiles, UdpOffload, DEFAULT_QUIC_MAX_MTU,
    DEFAULT_UNIX_MODE, UNIX_PATH_MAX,
};
// The I/O-free connection and the policy types its calls take and return (below), so that a
// connection can be driven from outside the crate: the whole-stack pair test
// (crates/sockscale/tests/pair.rs) joins it to the load generator's client `Connection`.
pub use connection::{Close, Connection, Outbox, ThreadTools, TlsScratch};
pub use error::ServerError;
pub use listener::{BindError, Reservation, SocketFile};
pub use metrics::MetricsError;
pub use model::{Capabilities, Ceiling, Family, Limitation, Model, Policy, ThreadShape, UdpSockets, TLS_FILE_BODY};
pub use policy::CloseReason;
pub use policy::{Action, Delivery, Fed, Lifecycle, Limits, Pending, Wait, Written};
pub use policy::{ActiveConfig, StormConfig};
pub use pool::PoolError;
pub use resources::{LoadError, Resources};
pub use server::Server;
pub use shutdown::{Phase, Shutdown};
pub use signals::TerminationSignals;
pub use stats::{Snapshot, Stats};

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::sync::Arc;

    use super::*;

    /// The message and each source after it, as anyhow's `{:#}` prints an error.
    fn with_chain(e: &dyn Error) -> String {
        let mut text = e.to_string();
        let mut next = e.source();
        while let Some(source) = next {
            text = format!("{text}: {source}");
            next = source.source();
        }
        text
    }

    fn says_once(e: &dyn Error, errno: i32) {
        let os = std::io::Error::from_raw_os_error(errno).to_string();
        let text = with_chain(e);
        assert_eq!(text.matches(&os).count(), 1, "{os:?} should appear once in: {text}");
    }

    #[test]
    fn every_error_says_its_os_error_once() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = taken.local_addr().unwrap();
        let Err(metrics) = metrics::MetricsServer::start(busy, Arc::new(Stats::new(1))) else {
            panic!("--metrics bound a busy port")
        };
        says_once(&ServerError::from(metrics), libc::EADDRINUSE);
        // 192.0.2.0/24 is TEST-NET-1: no interface has it.
        let cfg = Config { listen: "192.0.2.1:8080".parse().unwrap(), ..Config::default() };
        let Err(bind) = Server::start(cfg) else { panic!("bound TEST-NET-1") };
        says_once(&bind, libc::EADDRNOTAVAIL);
        let os = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        says_once(&ServerError::Io { model: "epoll", error: os() }, libc::ENOMEM);
        says_once(&ServerError::from(PoolError::Map { bytes: 1, error: os() }), libc::ENOMEM);
        let lock = PoolError::Lock { bytes: 1, limit: "0 bytes".into(), error: os() };
        says_once(&ServerError::from(lock), libc::ENOMEM);
    }
}
