//! What the server hands a model to serve with: [`ModelCtx`].
//!
//! Its own module, below both the model files and the helpers they share (`threads`), so
//! that neither has to import the module that picks a model's file (`runners.rs`).

use std::sync::mpsc::Sender;
use std::sync::Arc;

use sockscale_proto::Protocol;

use crate::body::BodyFile;
use crate::config::{Config, Service};
use crate::listener::Listen;
use crate::shutdown::Shutdown;
use crate::stats::Stats;

/// Everything a model needs to serve.
pub struct ModelCtx {
    pub cfg: Arc<Config>,
    pub listen: Listen,
    pub protocol: Protocol,
    pub stats: Arc<Stats>,
    pub shutdown: Shutdown,
    ready: Sender<()>,
}

impl ModelCtx {
    pub(crate) fn new(
        cfg: Arc<Config>,
        listen: Listen,
        stats: Arc<Stats>,
        shutdown: Shutdown,
        ready: Sender<()>,
    ) -> Self {
        let protocol = match &cfg.service {
            Service::Http(http) => Protocol::Http(BodyFile::serve_http(http, cfg.body_file.as_ref())),
            Service::Echo | Service::UdpEcho => Protocol::Echo,
        };
        ModelCtx { cfg, listen, protocol, stats, shutdown, ready }
    }

    /// Tell the server the model is serving; `Server::start` returns when this is called.
    pub fn ready(&self) {
        let _ = self.ready.send(());
    }
}
