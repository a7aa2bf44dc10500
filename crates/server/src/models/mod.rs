//! The I/O models, one file each, behind one contract.
//!
//! A model is a function `run(ModelCtx) -> Result<(), ServerError>`: it receives the bound
//! port, the configuration, the protocol, the counters and the shutdown signal; it calls
//! [`ModelCtx::ready`] once it is serving; and it returns when a shutdown has drained. What a
//! model decides is only *who waits for readiness or completion, on which thread*: the path of
//! a byte and every policy come from the shared code (the readiness event loop in `evloop`,
//! the buffer pool, the protocol crate).
//!
//! [`Model`] names the models; its `match` in [`Model::run`] is the only place that picks a
//! file.

pub mod epoll;

use std::str::FromStr;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use sockscale_proto::Protocol;

use crate::config::{Config, Service};
use crate::listener::Listen;
use crate::shutdown::Shutdown;
use crate::stats::Stats;
use crate::ServerError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// Readiness, edge-triggered, one epoll instance per worker thread.
    Epoll,
}

impl Model {
    pub const ALL: [Model; 1] = [Model::Epoll];

    pub fn name(self) -> &'static str {
        match self {
            Model::Epoll => "epoll",
        }
    }

    /// Whether `--threads` fixes the number of worker threads (as opposed to threads growing
    /// with connections).
    pub fn fixed_threads(self) -> bool {
        match self {
            Model::Epoll => true,
        }
    }

    /// Whether the model can serve UDP.
    pub fn serves_udp(self) -> bool {
        match self {
            Model::Epoll => true,
        }
    }

    /// Why this model cannot honour `policy`, or None when it can. The conformance suite skips
    /// a case with this reason; each model's module docs say the same.
    pub fn limitation(self, policy: Policy) -> Option<&'static str> {
        match (self, policy) {
            (Model::Epoll, _) => None,
        }
    }

    pub fn run(self, ctx: ModelCtx) -> Result<(), ServerError> {
        match self {
            Model::Epoll => epoll::run(ctx),
        }
    }
}

/// The policies of the core engine, as the conformance suite checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Close connections idle for `--idle-timeout`.
    IdleTimeout,
    /// Close HTTP connections whose head is not complete within `--header-timeout`.
    HeaderTimeout,
    /// Refuse connections beyond `--max-conns`.
    MaxConns,
    /// Stop reading from, then disconnect, a client that does not read (`--max-pending-send`,
    /// `--send-timeout`).
    FloodCutoff,
    /// Drain on SIGTERM within `--drain-timeout`.
    GracefulShutdown,
    /// Serve `--proto udp`.
    Udp,
    /// Back off, without spinning, when accept runs out of descriptors.
    AcceptBackoff,
}

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Model::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<_> = Model::ALL.iter().map(|m| m.name()).collect();
            format!("unknown model '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
            Service::Http(http) => Protocol::Http(http.clone()),
            Service::Echo | Service::UdpEcho => Protocol::Echo,
        };
        ModelCtx { cfg, listen, protocol, stats, shutdown, ready }
    }

    /// Tell the server the model is serving; `Server::start` returns when this is called.
    pub fn ready(&self) {
        let _ = self.ready.send(());
    }
}
