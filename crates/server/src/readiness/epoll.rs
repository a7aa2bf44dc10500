//! `--model epoll`: readiness, edge-triggered, one epoll instance per worker thread.
//!
//! This is the core engine of sockscale, the Linux counterpart of nothing in the seeds'
//! table because Windows had no such call: each of `--threads` workers owns an epoll instance,
//! a slice of the buffer pool and its own listener, and runs the shared event loop (`readiness`)
//! with non-blocking sockets registered once for EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET.
//!
//! Listeners: `--listener reuseport` (the default) gives every worker its own SO_REUSEPORT
//! socket; `--listener exclusive` puts one shared socket in every epoll with EPOLLEXCLUSIVE.
//! Measured side by side (`bench/listener_modes.py`, docs/BENCHMARKS.md): with a new connection
//! per request, reuseport served 1.09x the requests per CPU-second; with keep-alive, exclusive
//! did 1.11x better, but only because it piled connections onto one thread (CPU 248 vs 118
//! ticks between the two workers), which batches well while both share one pinned core and
//! caps throughput when they have a core each. reuseport spreads connections evenly (188 vs
//! 184), so it is the default.

use std::io;
use std::sync::Arc;

use sockscale_sys::Epoll;

use crate::config::ListenerMode;
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::model::Model;
use crate::pool::BufferPool;
use crate::readiness::{Source, Worker, WorkerParts};
use crate::udp::UdpService;

/// `--model epoll`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = &ctx.cfg;
    let threads = cfg.threads;
    let per_worker = (cfg.pool_buffers / threads).max(1);
    let pools = (0..threads)
        .map(|_| BufferPool::new(cfg.buffer_size, per_worker, cfg.lock_memory))
        .collect::<Result<Vec<_>, _>>()?;
    let io_err = |source| ServerError::Io { model: Model::Epoll.name(), error: source };

    let mut sources = Vec::with_capacity(threads);
    for i in 0..threads {
        let socket = if i == 0 || cfg.listener_mode == ListenerMode::Exclusive && !ctx.listen.is_udp() {
            ctx.listen.shared()
        } else {
            Arc::new(ctx.listen.bind_another().map_err(io_err)?)
        };
        sources.push(Source::own(socket, ctx.listen.is_udp(), cfg.listener_mode == ListenerMode::Exclusive, cfg));
    }
    // `--http3`: every worker serves a UDP socket of its own beside its listener (SO_REUSEPORT:
    // the kernel keeps each QUIC connection on one socket, so on one worker's endpoint).
    let mut http3 = Vec::with_capacity(threads);
    if let Some(udp) = ctx.listen.http3() {
        for i in 0..threads {
            let socket = if i == 0 { udp.shared() } else { Arc::new(udp.bind_another().map_err(io_err)?) };
            http3.push(Box::new(UdpService::http3(socket, &ctx)));
        }
    }
    let mut http3 = http3.into_iter();

    let mut workers = Vec::with_capacity(threads);
    for (i, (source, pool)) in sources.into_iter().zip(&pools).enumerate() {
        let parts = WorkerParts {
            cfg,
            protocol: ctx.protocol.clone(),
            resources: &ctx.resources,
            stats: &ctx.stats,
            counters: ctx.stats.shard(i),
            pool,
            shutdown: ctx.shutdown.clone(),
            source,
            udp: http3.next(),
            // Each worker owns the connections its listener hands it: each keeps a share.
            active: cfg.active_set.map(|a| a.share(i, threads)),
        };
        workers.push(Worker::new(Epoll::new().map_err(io_err)?, parts).map_err(io_err)?);
    }
    ctx.ready();

    std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(i, worker)| {
                std::thread::Builder::new()
                    .name(format!("sockscale-epoll-{i}"))
                    .spawn_scoped(scope, move || worker.run())
            })
            .collect();
        let mut result = Ok(());
        for handle in handles {
            let outcome = match handle {
                Ok(handle) => handle.join().unwrap_or_else(|_| Err(io::Error::other("worker thread panicked"))),
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                // One worker failing stops the others, so the server exits instead of limping.
                ctx.shutdown.force();
                result = Err(io_err(e));
            }
        }
        result
    })
}
