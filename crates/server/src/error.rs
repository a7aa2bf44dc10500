//! What can stop the server from starting or serving: one line each.

use crate::config::ConfigError;
use crate::listener::BindError;
use crate::metrics::MetricsError;
use crate::pool::PoolError;
use crate::resources::LoadError;

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("the {model} model does not serve UDP")]
    NoUdp { model: &'static str },
    #[error("{model} model: {error}")]
    Io { model: &'static str, error: std::io::Error },
    #[error("the {model} model is unavailable here: {reason}")]
    Unavailable { model: &'static str, reason: String },
    #[error("the {model} model stopped before it was ready")]
    NotReady { model: &'static str },
    #[error("the {model} model panicked")]
    Panicked { model: &'static str },
}
