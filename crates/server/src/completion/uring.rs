//! `--model uring`: io_uring completions, one ring per worker thread — the Linux counterpart
//! of the seeds' I/O completion port server, the best performer of their table.
//!
//! - `--threads` workers, each with its own ring (single issuer, deferred task work) and its own
//!   SO_REUSEPORT listener with a multishot accept (the AcceptEx calls kept posted: the kernel
//!   completes one accept per connection without being asked again);
//! - multishot receive with a provided-buffer ring, so an idle connection pins no buffer (the
//!   zero-byte receive of seed 001): the ring's buffers are the worker's share of the
//!   page-aligned pool (`--pool-buffers`, locked with `--lock-memory`);
//! - at most one gathering send in flight per connection, output queued behind it; more than
//!   `--max-outstanding-sends` queued sends (the seed capped them at 200) or
//!   `--max-pending-send` bytes pause receiving, and `--send-timeout` ends a client that stays
//!   there;
//! - completions reaped in batches, a ring submission per batch (GetQueuedCompletionStatusEx);
//! - echo sent straight from the receive buffer (zero-copy) while at most half the ring is held
//!   by sends; HTTP responses are shared pre-rendered bytes;
//! - `--threads 1` is the counterpart of completion routines (APC): one thread issues and
//!   completes everything.
//!
//! UDP: a multishot poll reports readiness and datagrams move in recvmmsg/sendmmsg batches, one
//! syscall per 32 datagrams, cheaper than one ring operation per datagram.
//!
//! Registered files and registered buffers were considered; see docs/BENCHMARKS.md for what
//! was measured. `--accept-batch` does not apply: a multishot accept completes per connection.
//! When io_uring is unavailable (old kernel, `kernel.io_uring_disabled`, seccomp), the model
//! refuses to start with one line saying why.

use std::sync::{mpsc, Arc};

use crate::completion::{UringSource, UringWorker, WorkerSetup};
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::model::Model;
use crate::pool::BufferPool;
use crate::udp::UdpService;

/// `--model uring`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = &ctx.cfg;
    let threads = cfg.threads;
    let io_err = |source| ServerError::Io { model: Model::Uring.name(), error: source };
    let per_worker = (cfg.pool_buffers / threads).max(1);
    let pools = (0..threads)
        .map(|_| BufferPool::new(cfg.buffer_size, per_worker, cfg.lock_memory))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sources = Vec::with_capacity(threads);
    for i in 0..threads {
        // Every worker gets its own SO_REUSEPORT socket (`--listener` applies to epoll only).
        let socket = if i == 0 { ctx.listen.shared() } else { Arc::new(ctx.listen.bind_another().map_err(io_err)?) };
        sources.push(if ctx.listen.is_udp() {
            UringSource::Udp(Box::new(UdpService::new(socket, cfg)))
        } else {
            UringSource::Listener(socket)
        });
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
    // Rings are built on their own threads (a ring belongs to the thread that issues on it);
    // each reports back once it is set up, and the model is ready when all are.
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(threads);
        for (i, (source, pool)) in sources.into_iter().zip(&pools).enumerate() {
            let ready = ready_tx.clone();
            let setup = WorkerSetup {
                cfg,
                protocol: ctx.protocol.clone(),
                resources: &ctx.resources,
                stats: &ctx.stats,
                counters: ctx.stats.shard(i),
                pool,
                shutdown: ctx.shutdown.clone(),
                source,
                entries: 1024,
                group: None,
                // Each worker owns the connections its listener hands it: each keeps a share.
                active: cfg.active_set.map(|a| a.share(i, threads)),
                udp: http3.next(),
            };
            let handle =
                std::thread::Builder::new().name(format!("sockscale-uring-{i}")).spawn_scoped(scope, move || {
                    match UringWorker::new(setup) {
                        Ok(worker) => {
                            let _ = ready.send(Ok(()));
                            worker.run()
                        }
                        Err(e) => {
                            let _ = ready.send(Err(std::io::Error::new(e.kind(), e.to_string())));
                            Err(e)
                        }
                    }
                });
            handles.push(handle.map_err(io_err)?);
        }
        drop(ready_tx);
        let mut setup_error = None;
        for _ in 0..threads {
            if let Ok(Err(e)) = ready_rx.recv() {
                setup_error.get_or_insert(e);
            }
        }
        if setup_error.is_some() {
            ctx.shutdown.force();
        } else {
            ctx.ready();
        }
        let mut result = setup_error.map_or(Ok(()), |e| Err(io_err(e)));
        for handle in handles {
            let outcome = handle.join().unwrap_or_else(|_| Err(std::io::Error::other("worker thread panicked")));
            if let Err(e) = outcome {
                ctx.shutdown.force();
                if result.is_ok() {
                    result = Err(io_err(e));
                }
            }
        }
        result
    })
}
