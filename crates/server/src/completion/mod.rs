//! The completion engine shared by the io_uring models (`uring`, `uring64`).
//!
//! Where the readiness models ask "which sockets are ready?" and then make the calls, a
//! completion model posts operations and is told when they are done — the I/O completion port
//! of the seeds. Each worker thread owns one ring, set up for a single issuer with deferred task
//! work, so completions are processed only when the worker asks for them, in batches (the
//! GetQueuedCompletionStatusEx batching of seed 003).
//!
//! Operations own their memory until they complete, as in monoio: a receive names a
//! provided-buffer group and the kernel picks the buffer (`bufring`), a send owns the `Bytes`
//! it gathers (or the ring buffer an echo is sent straight from). The policies are the same as
//! every other model's, and implemented the same way: the protocol crate, the lazy timer heap,
//! the flood and stall clocks, the drain.
//!
//! - `worker`: the ring, the loop that submits and reaps, worker-level operations (accept,
//!   wake-up, inbox, UDP), the drain and teardown, and `push`, which never drops an entry;
//! - `drive`: the worker's side of a connection — its completions, and the policy decisions
//!   `settle`, `on_deadline`, `close` (as `readiness/drive.rs` for the readiness models);
//! - `conn`: a connection's own state and the entries it posts (it knows nothing of the worker);
//! - `ops`: what an operation's user data encodes; `bufring`: the provided-buffer ring.

mod bufring;
mod drive;
mod ops;
mod ring_conn;
#[cfg(test)]
mod tests;
pub mod uring;
pub mod uring64;
mod worker;

use std::io;

pub use worker::{UringSource, UringWorker, WorkerSetup};

/// Why io_uring cannot run here, or None. Checks what the models need: the ring itself (which
/// `kernel.io_uring_disabled`, seccomp or an old kernel can forbid), provided-buffer rings
/// (5.19) and multishot receive (6.0).
pub fn unavailable() -> Option<String> {
    probe().err()
}

fn probe() -> Result<(), String> {
    let ring = io_uring::IoUring::new(8).map_err(|e| {
        let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
        match (e.raw_os_error(), sysctl.as_deref().map(str::trim)) {
            (_, Some("2")) => format!("io_uring_setup failed ({e}): kernel.io_uring_disabled is 2"),
            (Some(libc::EPERM), Some("1")) => {
                format!("io_uring_setup failed ({e}): kernel.io_uring_disabled is 1 and this process is not in io_uring_group")
            }
            (Some(libc::ENOSYS), _) => format!("io_uring_setup failed ({e}): the kernel has no io_uring or a seccomp filter forbids it"),
            _ => format!("io_uring_setup failed: {e}"),
        }
    })?;
    let (major, minor) = kernel_version().unwrap_or((0, 0));
    if (major, minor) < (6, 0) {
        return Err(format!("kernel {major}.{minor} is older than 6.0, which multishot receive needs"));
    }
    let pool = crate::pool::BufferPool::new(sockscale_sys::page_size(), 1, false).map_err(|e| e.to_string())?;
    let probe_ring = bufring::BufRing::new(&ring.submitter(), &pool, 0)
        .map_err(|e| format!("cannot register a provided-buffer ring: {e}"))?;
    drop(ring);
    drop(probe_ring);
    Ok(())
}

fn kernel_version() -> io::Result<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Ok((major, minor))
}
