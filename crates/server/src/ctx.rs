//! What the server hands a model to serve with: [`ModelCtx`].
//!
//! Its own module, below both the model files and the helpers they share (`threads`), so
//! that neither has to import the module that picks a model's file (`runners.rs`).

use std::sync::mpsc::Sender;
use std::sync::Arc;

use sockscale_proto::Protocol;

use crate::config::Config;
use crate::listener::Listen;
use crate::resources::Resources;
use crate::shutdown::Shutdown;
use crate::stats::Stats;

/// Everything a model needs to serve.
pub struct ModelCtx {
    pub cfg: Arc<Config>,
    /// What the server loaded from the files `cfg` names: the body file, the TLS configuration.
    pub resources: Arc<Resources>,
    pub listen: Listen,
    pub protocol: Protocol,
    pub stats: Arc<Stats>,
    pub shutdown: Shutdown,
    ready: Sender<()>,
}

impl ModelCtx {
    pub(crate) fn new(
        cfg: Arc<Config>,
        resources: Arc<Resources>,
        listen: Listen,
        stats: Arc<Stats>,
        shutdown: Shutdown,
        ready: Sender<()>,
    ) -> Self {
        let protocol = resources.protocol(&cfg.service);
        ModelCtx { cfg, resources, listen, protocol, stats, shutdown, ready }
    }

    /// Tell the server the model is serving; `Server::start` returns when this is called.
    pub fn ready(&self) {
        let _ = self.ready.send(());
    }
}
