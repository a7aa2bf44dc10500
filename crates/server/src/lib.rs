//! sockscale's server engine.
//!
//! One protocol layer (`sockscale-proto`) served by many I/O models, all sharing one set of
//! resource policies. See `ARCHITECTURE.md` for the layers and the path of a byte; the module
//! docs of `evloop` and `models` describe the model contract, and `model` holds what each model
//! can do, as data.

pub mod blocking_conn;
pub mod config;
pub mod conn;
pub mod ctx;
pub mod evloop;
pub mod groups;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod models;
pub mod pool;
pub mod server;
pub mod shutdown;
pub mod signals;
pub mod stats;
pub mod sys;
pub mod timers;
pub mod udp;
pub mod uring;

pub use config::{Config, ConfigError, ListenerMode, Service};
pub use model::{Capabilities, Limitation, Model, Policy, ThreadShape};
pub use server::Server;
pub use shutdown::{Phase, Shutdown};
pub use stats::{CloseReason, Snapshot, Stats};

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
