//! Starting and stopping a server: the embeddable entry point.
//!
//! ```no_run
//! use sockscale_server::{Config, Server};
//! let server = Server::start(Config { listen: "127.0.0.1:0".parse().unwrap(), ..Config::default() })?;
//! println!("listening on {}", server.local_addr());
//! server.shutdown_handle().shutdown();
//! let totals = server.wait()?;
//! # Ok::<(), sockscale_server::ServerError>(())
//! ```

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::{Config, ListenAddr};
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::listener::{Listen, SocketFile};
use crate::metrics::MetricsServer;
use crate::resources::Resources;
use crate::shutdown::Shutdown;
use crate::stats::{Snapshot, Stats};

pub struct Server {
    addr: ListenAddr,
    /// A Unix listener's socket file: removed once the model is done and this is dropped.
    _file: Option<Arc<SocketFile>>,
    shutdown: Shutdown,
    stats: Arc<Stats>,
    model: JoinHandle<Result<(), ServerError>>,
    metrics: Option<MetricsServer>,
}

impl Server {
    /// Validate `cfg`, load the files it names, bind the port, start the model and return once
    /// it is serving.
    pub fn start(mut cfg: Config) -> Result<Server, ServerError> {
        cfg.validate()?;
        if cfg.service.is_udp() && !cfg.model.serves_udp() {
            return Err(ServerError::NoUdp { model: cfg.model.name() });
        }
        // The files the configuration names, read before anything listens.
        let resources = Arc::new(Resources::load(&cfg)?);
        if resources.tls.is_some() && resources.body.is_some() {
            tracing::info!("{}", crate::model::TLS_FILE_BODY.replace('`', ""));
        }
        let listen = Listen::bind(&cfg)?;
        if let (Some(udp), Some(http3)) = (listen.http3(), &resources.http3) {
            if udp.steering_refused() {
                http3.totals().steering_refused();
            }
        }
        let addr = listen.local_addr().clone();
        // `--http3`: HTTP/1.1 and HTTP/2 advertise it at the port bound (the real one with
        // `--listen :0`), in the response every thread prepares.
        if let (Some(udp), crate::config::Service::Http(http)) = (listen.http3(), &mut cfg.service) {
            if let Some(port) = udp.local_addr().inet().map(|a| a.port()) {
                let alt_svc = Some(sockscale_proto::http::alt_svc_h3(port));
                *http = Arc::new(sockscale_proto::http::HttpConfig { alt_svc, ..(**http).clone() });
            }
        }
        let file = listen.socket_file();
        let h2 = match &cfg.service {
            crate::config::Service::Http(http) if http.http2.is_some() => Some(http.h2_totals.clone()),
            _ => None,
        };
        let ws = match &cfg.service {
            crate::config::Service::Http(http) => http.websocket.as_ref().map(|ws| ws.totals.clone()),
            _ => None,
        };
        let stats = Arc::new(
            Stats::with_storm(cfg.threads.clamp(1, 64), cfg.abort_storm)
                .with_h2(h2)
                .with_ws(ws)
                .with_quic(resources.http3.as_ref().map(|h3| h3.totals())),
        );
        let metrics = cfg.metrics.map(|at| MetricsServer::start(at, stats.clone())).transpose()?;
        let shutdown = Shutdown::with_drain_timeout(cfg.drain_timeout);
        let (ready_tx, ready_rx) = mpsc::channel();
        let ctx = ModelCtx::new(Arc::new(cfg.clone()), resources, listen, stats.clone(), shutdown.clone(), ready_tx);
        let model = cfg.model;
        let thread = std::thread::Builder::new()
            .name("sockscale-model".into())
            .spawn(move || model.run(ctx))
            .map_err(|source| ServerError::Io { model: model.name(), error: source })?;
        if ready_rx.recv().is_err() {
            // The model returned without becoming ready: its error says why.
            return Err(match thread.join() {
                Ok(Err(e)) => e,
                Ok(Ok(())) => ServerError::NotReady { model: model.name() },
                Err(_) => ServerError::Panicked { model: model.name() },
            });
        }
        Ok(Server { addr, _file: file, shutdown, stats, model: thread, metrics })
    }

    /// The address served, with the real port, or the Unix socket's path (`unix:PATH`);
    /// [`ListenAddr::inet`] gives the IP address and port.
    pub fn local_addr(&self) -> &ListenAddr {
        &self.addr
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    pub fn shutdown_handle(&self) -> Shutdown {
        self.shutdown.clone()
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Wait for the model to finish (after a shutdown) and return the final counters.
    pub fn wait(self) -> Result<Snapshot, ServerError> {
        let name = "model";
        let outcome = self.model.join().unwrap_or(Err(ServerError::Panicked { model: name }));
        drop(self.metrics);
        outcome.map(|()| self.stats.snapshot())
    }
}
