//! Page-aligned receive buffers, optionally locked in memory.
//!
//! The seeds post receives from page-aligned buffers because the kernel locks whole pages, and
//! VirtualLock them so they never page out. Here the pool is one anonymous mapping cut into
//! `buffer_size` pieces (a page multiple, so each piece starts on a page), `mlock`ed with
//! `--lock-memory`. Buffers are taken only when a socket is readable and given back when it is
//! drained (the zero-byte receive strategy), so the pool's size bounds memory no matter how
//! many connections sit idle. Untouched buffers cost address space, not RSS.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

use sockscale_sys::{self as sys, syscall};

use crate::stats::Counters;

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("cannot map {bytes} bytes for the buffer pool: {error}")]
    Map { bytes: usize, error: std::io::Error },
    #[error("--lock-memory: cannot lock {bytes} bytes of buffers ({error}); RLIMIT_MEMLOCK allows {limit}; raise it (ulimit -l) or lower --pool-buffers")]
    Lock { bytes: usize, limit: String, error: std::io::Error },
}

pub struct BufferPool {
    base: NonNull<u8>,
    buffer_size: usize,
    count: usize,
    free: Mutex<Vec<u32>>,
}

// SAFETY: the mapping is owned by the pool and lives until it drops; every buffer is handed to
// exactly one `PoolBuf` at a time (the free list is behind a mutex), so sharing the pool among
// threads never creates aliasing mutable access.
unsafe impl Send for BufferPool {}
// SAFETY: as above.
unsafe impl Sync for BufferPool {}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool").field("buffer_size", &self.buffer_size).field("count", &self.count).finish()
    }
}

impl BufferPool {
    /// Map `count` buffers of `buffer_size` bytes (a page multiple), locking them if asked.
    pub fn new(buffer_size: usize, count: usize, lock: bool) -> Result<Self, PoolError> {
        debug_assert!(buffer_size % sys::page_size() == 0);
        let bytes = buffer_size * count.max(1);
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(PoolError::Map { bytes, error: std::io::Error::last_os_error() });
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| PoolError::Map { bytes, error: std::io::Error::other("mmap returned null") })?;
        let pool = BufferPool {
            base,
            buffer_size,
            count: count.max(1),
            free: Mutex::new((0..count.max(1) as u32).rev().collect()),
        };
        if lock {
            // SAFETY: base..base+bytes is the mapping made above.
            if let Err(source) = syscall!(mlock(ptr, bytes)) {
                let limit = match sys::soft_limit(libc::RLIMIT_MEMLOCK) {
                    Ok(Some(n)) => format!("{n} bytes"),
                    Ok(None) => "unlimited bytes".into(),
                    Err(_) => "an unknown amount".into(),
                };
                return Err(PoolError::Lock { bytes, limit, error: source });
            }
        }
        Ok(pool)
    }

    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    pub fn capacity(&self) -> usize {
        self.count
    }

    /// The start of buffer `index`, for a model that lends buffers to the kernel itself (the
    /// io_uring provided-buffer ring) instead of taking them with `take`. Such a model must not
    /// also `take` from this pool.
    pub(crate) fn buffer_ptr(&self, index: usize) -> *mut u8 {
        debug_assert!(index < self.count);
        self.base.as_ptr().wrapping_add(index * self.buffer_size)
    }

    /// Take a buffer, or None when all are in use. `counters` tracks buffers in use.
    pub fn take<'a>(&'a self, counters: &'a Counters) -> Option<PoolBuf<'a>> {
        let index = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        counters.buffer_taken();
        Some(PoolBuf { pool: self, counters, index })
    }

    fn give_back(&self, index: u32) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(index);
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in new(); no PoolBuf outlives the pool because
        // each borrows it.
        let _ = syscall!(munmap(self.base.as_ptr().cast(), self.buffer_size * self.count));
    }
}

/// A buffer on loan from the pool; it goes back when dropped.
pub struct PoolBuf<'a> {
    pool: &'a BufferPool,
    counters: &'a Counters,
    index: u32,
}

impl Deref for PoolBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: index < count, so the slice lies inside the mapping, and this PoolBuf is the
        // only holder of buffer `index` until it drops.
        unsafe {
            std::slice::from_raw_parts(
                self.pool.base.as_ptr().add(self.index as usize * self.pool.buffer_size),
                self.pool.buffer_size,
            )
        }
    }
}

impl DerefMut for PoolBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self guarantees exclusive access through this PoolBuf.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.pool.base.as_ptr().add(self.index as usize * self.pool.buffer_size),
                self.pool.buffer_size,
            )
        }
    }
}

impl Drop for PoolBuf<'_> {
    fn drop(&mut self) {
        self.pool.give_back(self.index);
        self.counters.buffer_returned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_distinct_and_counted() {
        let page = sys::page_size();
        let pool = BufferPool::new(2 * page, 3, false).unwrap();
        let counters = Counters::default();
        let mut a = pool.take(&counters).unwrap();
        let b = pool.take(&counters).unwrap();
        let c = pool.take(&counters).unwrap();
        assert!(pool.take(&counters).is_none(), "exhausted pool says so");
        for buf in [&*a, &*b, &*c] {
            assert_eq!(buf.as_ptr() as usize % page, 0);
            assert_eq!(buf.len(), 2 * page);
        }
        a[0] = 7;
        assert_ne!(a.as_ptr(), b.as_ptr());
        drop(b);
        assert!(pool.take(&counters).is_some());
    }

    #[test]
    fn small_pool_locks() {
        // 64 KiB is within every default RLIMIT_MEMLOCK. The failure message is checked by
        // the CLI tests, which can drop privileges.
        let pool = BufferPool::new(sys::page_size(), 16, true).unwrap();
        assert_eq!(pool.capacity(), 16);
    }
}
