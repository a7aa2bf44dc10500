//! Every policy of the server, as one plain struct with the defaults the CLI documents.
//!
//! The policies come from the seeds: accept watermarks (`accept_batch`, `backlog`), zero-byte
//! receives (buffers taken only when readable), page-aligned locked buffers, capped sends with
//! a flood cut-off, idle and stale-connection timeouts, refusing when busy (`max_conns`), and
//! backing off when descriptors or memory run out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sockscale_proto::http::{HttpConfig, ResponseBody};
use sockscale_sys as sys;

use sockscale_tls::ServerTls;

use crate::body::BodyFile;
use crate::model::{Model, Policy};
use crate::policy::{ActiveConfig, Limits, StormConfig};

/// What the server speaks.
#[derive(Debug, Clone)]
pub enum Service {
    Echo,
    Http(Arc<HttpConfig>),
    UdpEcho,
}

impl Service {
    pub fn is_udp(&self) -> bool {
        matches!(self, Service::UdpEcho)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Service::Echo => "echo",
            Service::Http(_) => "http",
            Service::UdpEcho => "udp",
        }
    }
}

/// How the threads of a multi-threaded model share the listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerMode {
    /// One SO_REUSEPORT listener per thread; the kernel spreads connections by hash.
    ReusePort,
    /// One listener in every thread's epoll with EPOLLEXCLUSIVE, so one waiter wakes per
    /// connection.
    Exclusive,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub service: Service,
    pub model: Model,
    /// Worker threads, for the models that have a fixed number.
    pub threads: usize,
    pub listener_mode: ListenerMode,
    /// Bytes read from one connection before yielding to the others.
    pub read_budget: usize,
    /// Connections beyond this are accepted and closed at once (HTTP gets a 503 first).
    pub max_conns: usize,
    pub backlog: u32,
    /// Accepts per wake-up of the listener: the analogue of the AcceptEx watermarks.
    pub accept_batch: usize,
    pub idle_timeout: Duration,
    /// Close a connection that has sent nothing this long after it was accepted.
    pub first_data_timeout: Option<Duration>,
    /// TCP_DEFER_ACCEPT on the listener: a connection reaches the server only with its first
    /// bytes, or after this long.
    pub defer_accept: Option<Duration>,
    /// Output waiting for a client beyond this stops the server reading from it.
    pub max_pending_send: usize,
    /// A client over `max_pending_send`, or whose socket has taken none of its output, for this
    /// long is disconnected.
    pub send_timeout: Duration,
    /// Size of each receive buffer; a multiple of the page size.
    pub buffer_size: usize,
    /// Receive buffers in the process, shared out among the workers.
    pub pool_buffers: usize,
    /// mlock the buffer pool.
    pub lock_memory: bool,
    pub sndbuf: Option<usize>,
    pub rcvbuf: Option<usize>,
    pub nodelay: bool,
    /// How long a draining server waits for in-flight responses before closing the rest.
    pub drain_timeout: Duration,
    /// Serve Prometheus metrics here.
    pub metrics: Option<SocketAddr>,
    /// Stack size of threads in the thread-per-connection models.
    pub stack_size: usize,
    /// Sends in flight per connection, for the completion models.
    pub max_outstanding_sends: usize,
    /// Thread pool: connections that may wait for a worker, per worker, before new ones are
    /// refused.
    pub queue_depth: usize,
    /// The port is shared with sibling server processes (`serve --procs`): bind with
    /// SO_REUSEPORT and skip the busy-port probe, which the parent process has done.
    pub shared_port: bool,
    /// The open body file an HTTP service whose body is `ResponseBody::File` sends from
    /// (`BodyFile::load`).
    pub body_file: Option<Arc<BodyFile>>,
    /// `--abort-storm RATE` and `--abort-storm-resume N`: pause accepting while connections
    /// are aborted faster than RATE a second, until fewer than N are established.
    pub abort_storm: Option<StormConfig>,
    /// `--active-set N`, `--active-grace`, `--active-turn`: read from only N connections at a
    /// time, in FIFO order (the seeds' high-throughput strategy).
    pub active_set: Option<ActiveConfig>,
    /// `--tls-cert`, `--tls-key`: serve TLS with this certificate (read and checked before
    /// anything listens).
    pub tls: Option<ServerTls>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            service: Service::Echo,
            model: Model::Epoll,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            listener_mode: ListenerMode::ReusePort,
            read_budget: 64 << 10,
            max_conns: 100_000,
            backlog: 4096,
            accept_batch: 64,
            idle_timeout: Duration::from_secs(60),
            first_data_timeout: None,
            defer_accept: None,
            max_pending_send: 1 << 20,
            send_timeout: Duration::from_secs(10),
            buffer_size: 16 << 10,
            pool_buffers: 256,
            lock_memory: false,
            sndbuf: None,
            rcvbuf: None,
            nodelay: true,
            drain_timeout: Duration::from_secs(5),
            metrics: None,
            stack_size: 64 << 10,
            max_outstanding_sends: 200,
            queue_depth: 128,
            shared_port: false,
            body_file: None,
            tls: None,
            abort_storm: None,
            active_set: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("--buffer-size {size} is not a positive multiple of the page size ({page} bytes)")]
    BufferSize { size: usize, page: usize },
    #[error("--{flag} must be at least 1")]
    Zero { flag: &'static str },
    #[error("--{flag} must be longer than zero")]
    ZeroDuration { flag: &'static str },
    #[error("--pool-buffers {buffers} is fewer than one per worker thread ({threads})")]
    PoolTooSmall { buffers: usize, threads: usize },
    #[error("--{flag} applies to TCP connections, and --proto udp has none")]
    NotForUdp { flag: &'static str },
    #[error("the HTTP body is {body} bytes from a file, and the open body file has {file:?}")]
    BodyFile { body: u64, file: Option<u64> },
    #[error("--{flag} is not available with --model {model}: {why}")]
    ModelCannot { flag: &'static str, model: &'static str, why: &'static str },
}

impl Config {
    /// The per-connection limits, copied once per worker.
    pub fn limits(&self) -> Limits {
        Limits {
            idle_timeout: self.idle_timeout,
            send_timeout: self.send_timeout,
            max_pending_send: self.max_pending_send,
            max_outstanding_sends: self.max_outstanding_sends,
            read_budget: self.read_budget,
            first_data_timeout: self.first_data_timeout,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let page = sys::page_size();
        if self.buffer_size == 0 || self.buffer_size % page != 0 {
            return Err(ConfigError::BufferSize { size: self.buffer_size, page });
        }
        for (flag, value) in [
            ("threads", self.threads),
            ("read-budget", self.read_budget),
            ("max-conns", self.max_conns),
            ("backlog", self.backlog as usize),
            ("accept-batch", self.accept_batch),
            ("max-pending-send", self.max_pending_send),
            ("pool-buffers", self.pool_buffers),
            ("max-outstanding-sends", self.max_outstanding_sends),
            ("queue-depth", self.queue_depth),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { flag });
            }
        }
        for (flag, value) in [("stack-size", Some(self.stack_size)), ("sndbuf", self.sndbuf), ("rcvbuf", self.rcvbuf)] {
            if value == Some(0) {
                return Err(ConfigError::Zero { flag });
            }
        }
        for (flag, value) in [("idle-timeout", self.idle_timeout), ("send-timeout", self.send_timeout)] {
            if value.is_zero() {
                return Err(ConfigError::ZeroDuration { flag });
            }
        }
        if let Some(storm) = self.abort_storm {
            if storm.rate == 0 {
                return Err(ConfigError::Zero { flag: "abort-storm" });
            }
            if storm.resume_below == Some(0) {
                return Err(ConfigError::Zero { flag: "abort-storm-resume" });
            }
            if self.service.is_udp() {
                return Err(ConfigError::NotForUdp { flag: "abort-storm" });
            }
        }
        if let Some(active) = self.active_set {
            if active.size == 0 {
                return Err(ConfigError::Zero { flag: "active-set" });
            }
            for (flag, value) in [("active-grace", active.grace), ("active-turn", active.turn)] {
                if value.is_zero() {
                    return Err(ConfigError::ZeroDuration { flag });
                }
            }
            if self.service.is_udp() {
                return Err(ConfigError::NotForUdp { flag: "active-set" });
            }
        }
        if self.tls.is_some() && self.service.is_udp() {
            return Err(ConfigError::NotForUdp { flag: "tls-cert" });
        }
        for (flag, policy, asked) in [
            ("tls-cert", Policy::Tls, self.tls.is_some()),
            ("active-set", Policy::ActiveSet, self.active_set.is_some()),
            ("abort-storm-shed", Policy::StormShed, self.abort_storm.is_some_and(|s| s.shed)),
        ] {
            if let Some(why) = self.model.limitation(policy).filter(|_| asked) {
                return Err(ConfigError::ModelCannot { flag, model: self.model.name(), why });
            }
        }
        for (flag, value) in [("first-data-timeout", self.first_data_timeout), ("defer-accept", self.defer_accept)] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(ConfigError::ZeroDuration { flag });
            }
            if value.is_some() && self.service.is_udp() {
                return Err(ConfigError::NotForUdp { flag });
            }
        }
        if let Service::Http(http) = &self.service {
            if http.header_timeout.is_zero() {
                return Err(ConfigError::ZeroDuration { flag: "header-timeout" });
            }
            if http.max_header_bytes == 0 {
                return Err(ConfigError::Zero { flag: "max-header-bytes" });
            }
            if let ResponseBody::File { len } = http.body {
                let file = self.body_file.as_ref().map(|f| f.len());
                if file != Some(len) {
                    return Err(ConfigError::BodyFile { body: len, file });
                }
            }
        }
        if self.model.fixed_threads() && self.pool_buffers < self.threads {
            return Err(ConfigError::PoolTooSmall { buffers: self.pool_buffers, threads: self.threads });
        }
        Ok(())
    }
}
