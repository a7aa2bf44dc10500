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

pub mod blocking;
pub mod epoll;
pub mod poll64;
pub mod select;
pub mod signal;
pub mod threadpool;
pub mod tokio;
pub mod uring;
pub mod uring64;

use std::str::FromStr;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use sockscale_proto::Protocol;

use crate::config::{Config, Service};
use crate::listener::Listen;
use crate::shutdown::Shutdown;
use crate::stats::Stats;
use crate::ServerError;

/// Every model, in the order of the seeds' comparison (then the modern additions).
///
/// Each model's file exports the same five items, so this enum only dispatches:
/// `FIXED_THREADS` (does `--threads` fix the worker count?), `SERVES_UDP`,
/// `limitation(Policy)` (why it cannot honour a policy, if it cannot), `unavailable()` (why it
/// cannot run on this machine, if it cannot) and `run(ModelCtx)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// Two threads per connection on blocking sockets (the seeds' blocking server).
    Blocking,
    /// One accept thread, a bounded queue and a fixed pool of workers (seed 003).
    Threadpool,
    /// One thread waiting in select(2) (the seeds' non-blocking select server).
    Select,
    /// Groups of 64 connections, a thread per group waiting in poll(2) (WSAEventSelect).
    Poll64,
    /// Readiness as queued real-time signals read through signalfd (WSAAsyncSelect).
    Signal,
    /// Readiness, edge-triggered, one epoll instance per worker thread (the core engine).
    Epoll,
    /// io_uring completions, one ring per worker thread (I/O completion ports).
    Uring,
    /// A ring and a thread per group of 64 connections (overlapped I/O with events).
    Uring64,
    /// The tokio multi-threaded runtime (boost::asio in seed 003).
    Tokio,
}

macro_rules! dispatch {
    ($self:expr, $($item:tt)+) => {
        match $self {
            Model::Blocking => blocking::$($item)+,
            Model::Threadpool => threadpool::$($item)+,
            Model::Select => select::$($item)+,
            Model::Poll64 => poll64::$($item)+,
            Model::Signal => signal::$($item)+,
            Model::Epoll => epoll::$($item)+,
            Model::Uring => uring::$($item)+,
            Model::Uring64 => uring64::$($item)+,
            Model::Tokio => tokio::$($item)+,
        }
    };
}

impl Model {
    pub const ALL: [Model; 9] = [
        Model::Blocking,
        Model::Threadpool,
        Model::Select,
        Model::Poll64,
        Model::Signal,
        Model::Epoll,
        Model::Uring,
        Model::Uring64,
        Model::Tokio,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Model::Blocking => "blocking",
            Model::Threadpool => "threadpool",
            Model::Select => "select",
            Model::Poll64 => "poll64",
            Model::Signal => "signal",
            Model::Epoll => "epoll",
            Model::Uring => "uring",
            Model::Uring64 => "uring64",
            Model::Tokio => "tokio",
        }
    }

    /// Whether `--threads` fixes the number of worker threads (as opposed to threads growing
    /// with connections, or a single thread).
    pub fn fixed_threads(self) -> bool {
        dispatch!(self, FIXED_THREADS)
    }

    /// Whether the model can serve UDP.
    pub fn serves_udp(self) -> bool {
        dispatch!(self, SERVES_UDP)
    }

    /// Why this model cannot honour `policy`, or None when it can. The conformance suite skips
    /// a case with this reason; each model's module docs say the same.
    pub fn limitation(self, policy: Policy) -> Option<&'static str> {
        dispatch!(self, limitation(policy))
    }

    /// Why this model cannot run on this machine (io_uring disabled, say), or None.
    pub fn unavailable(self) -> Option<String> {
        dispatch!(self, unavailable())
    }

    pub fn run(self, ctx: ModelCtx) -> Result<(), ServerError> {
        if let Some(reason) = self.unavailable() {
            return Err(ServerError::Unavailable { model: self.name(), reason });
        }
        dispatch!(self, run(ctx))
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
