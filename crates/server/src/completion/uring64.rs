//! `--model uring64`: a ring and a thread per group of 64 connections — the counterpart of the
//! seeds' overlapped I/O with event notification, where each thread could wait on at most 64
//! events, so threads grew with connections (792 at 49,000 in Table 6-3).
//!
//! The model's own thread is the shared group acceptor (`groups`, as in `poll64`): it accepts,
//! applies `--max-conns`, `--accept-batch` and the EMFILE back-off, and hands each connection
//! to the first group with room, starting `sockscale-u64-N` when all are full. A group is the
//! same io_uring worker as `--model uring` (`uring`): multishot receive from its own
//! provided-buffer ring, one gathering send in flight per connection, the same policies — fed
//! by the acceptor through an inbox instead of accepting itself.
//!
//! Each group owns a ring (its memory is the kernel's, charged to the memory cgroup) and
//! `min(--pool-buffers, 16)` receive buffers, a small ring for 64 connections; untouched buffers
//! cost address space, not RSS. Empty groups stay, as in poll64. The thread-per-group cost the
//! seed measured is the point of this model: compare its CPU and threads with `uring`'s.
//!
//! When io_uring is unavailable the model refuses to start with one line saying why.

use crate::completion::{UringSource, UringWorker, WorkerSetup};
use crate::ctx::ModelCtx;
use crate::error::ServerError;
use crate::groups::{GroupAcceptor, NewGroup};
use crate::model::Model;
use crate::pool::BufferPool;

/// Connections per group, as WSAWaitForMultipleEvents' MAXIMUM_WAIT_OBJECTS.
pub const GROUP_SIZE: usize = 64;
/// Receive buffers per group at most.
const GROUP_BUFFERS: usize = 16;

/// `--model uring64`: serve until a shutdown has drained (see the module docs).
pub fn run(ctx: ModelCtx) -> Result<(), ServerError> {
    let cfg = &ctx.cfg;
    let io_err = |source| ServerError::Io { model: Model::Uring64.name(), error: source };
    if ctx.listen.is_udp() {
        return Err(ServerError::NoUdp { model: Model::Uring64.name() });
    }
    let acceptor = GroupAcceptor::new(cfg, &ctx.stats, &ctx.shutdown, &ctx.protocol, ctx.listen.shared(), GROUP_SIZE)
        .map_err(io_err)?;
    ctx.ready();
    let (stats, shutdown, protocol, resources) = (&*ctx.stats, &ctx.shutdown, &ctx.protocol, &ctx.resources);
    let buffers = cfg.pool_buffers.clamp(1, GROUP_BUFFERS);
    std::thread::scope(|scope| {
        acceptor.run(scope, |scope, group: NewGroup| {
            let pool = BufferPool::new(cfg.buffer_size, buffers, cfg.lock_memory).map_err(std::io::Error::other)?;
            let shutdown = shutdown.clone();
            let protocol = protocol.clone();
            let (index, inbox, load) = (group.index, group.inbox, group.load);
            // The ring is built on the group's own thread (a single-issuer ring belongs to the
            // thread that made it), but the acceptor waits for it: a group that cannot get its
            // ring, say for EMFILE while the acceptor has taken every descriptor, refuses the
            // connection that needed it instead of stopping the server.
            let (built_tx, built_rx) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
            let thread =
                std::thread::Builder::new().name(format!("sockscale-u64-{index}")).spawn_scoped(scope, move || {
                    let setup = WorkerSetup {
                        cfg,
                        protocol,
                        resources,
                        stats,
                        counters: stats.shard(index),
                        pool: &pool,
                        shutdown: shutdown.clone(),
                        source: UringSource::Inbox(inbox),
                        entries: 256,
                        group: Some(load),
                        // Refused by the model's capability data: a set per group of 64 would be none.
                        active: None,
                        // No UDP on this model (its capability data says why).
                        udp: None,
                    };
                    let worker = match UringWorker::new(setup) {
                        Ok(worker) => worker,
                        Err(e) => {
                            let _ = built_tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    let _ = built_tx.send(Ok(()));
                    let outcome = worker.run();
                    if outcome.is_err() {
                        // One group failing stops the server, as one epoll worker failing does.
                        shutdown.force();
                    }
                    outcome
                })?;
            match built_rx.recv() {
                Ok(Ok(())) => Ok(thread),
                Ok(Err(e)) => {
                    let _ = thread.join();
                    Err(e)
                }
                Err(_) => {
                    let _ = thread.join();
                    Err(std::io::Error::other("connection group thread panicked while building its ring"))
                }
            }
        })
    })
    .map_err(io_err)
}
