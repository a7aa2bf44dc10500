//! sockscale's server engine.
//!
//! One protocol layer (`sockscale-proto`) served by many I/O models, all sharing one set of
//! resource policies. See `ARCHITECTURE.md` for the layers and the path of a byte; the module
//! docs of `evloop` and `models` describe the model contract, and `model` holds what each model
//! can do, as data.

mod admission;
mod blocking_conn;
mod config;
mod conn;
mod ctx;
mod evloop;
mod groups;
mod listener;
mod metrics;
mod model;
mod models;
mod policy;
mod pool;
mod server;
mod shutdown;
mod signals;
mod stats;
mod udp;
mod uring;

pub use config::{Config, ConfigError, ListenerMode, Service};
pub use listener::{BindError, Reservation};
pub use metrics::MetricsError;
pub use model::{Capabilities, Ceiling, Limitation, Model, Policy, ThreadShape};
pub use pool::PoolError;
pub use server::Server;
pub use shutdown::{Phase, Shutdown};
pub use signals::TerminationSignals;
pub use stats::{CloseReason, Snapshot, Stats};
pub use uring::unavailable as io_uring_unavailable;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Bind(#[from] listener::BindError),
    #[error(transparent)]
    Pool(#[from] pool::PoolError),
    #[error(transparent)]
    Metrics(#[from] metrics::MetricsError),
    #[error("the {model} model does not serve UDP")]
    NoUdp { model: &'static str },
    #[error("{model} model: {source}")]
    Io { model: &'static str, source: std::io::Error },
    #[error("the {model} model is unavailable here: {reason}")]
    Unavailable { model: &'static str, reason: String },
    #[error("the {model} model stopped before it was ready")]
    NotReady { model: &'static str },
    #[error("the {model} model panicked")]
    Panicked { model: &'static str },
}
