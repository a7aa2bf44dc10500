//! A provided-buffer ring: receive buffers lent to the kernel, picked per completion.
//!
//! This is how the io_uring models keep the seeds' zero-byte-receive property: a multishot
//! receive names a buffer *group*, not a buffer, and the kernel takes a buffer from the ring
//! only when data arrives. An idle connection pins nothing; the ring's size bounds receive
//! memory for the whole worker. The buffers are the worker's page-aligned pool (locked with
//! `--lock-memory`); the ring itself is one page-aligned mapping of 16-byte entries whose tail
//! the application advances with a release store.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::Submitter;
use sockscale_sys::{self as sys, syscall};

use crate::pool::BufferPool;

pub struct BufRing<'a> {
    pool: &'a BufferPool,
    entries: NonNull<BufRingEntry>,
    ring_bytes: usize,
    count: u16,
    tail: u16,
    /// Buffers handed to us by completions and not yet given back.
    lent: usize,
}

impl<'a> BufRing<'a> {
    /// Lend the largest power of two of `pool`'s buffers (at most 32,768) to the kernel as
    /// buffer group `group`.
    pub fn new(submitter: &Submitter<'_>, pool: &'a BufferPool, group: u16) -> io::Result<Self> {
        let usable = pool.capacity().min(1 << 15);
        if usable == 0 {
            return Err(io::Error::other("the buffer pool is empty"));
        }
        let count = 1u16 << (usize::BITS - 1 - usable.leading_zeros());
        let page = sys::page_size();
        let ring_bytes = (usize::from(count) * std::mem::size_of::<BufRingEntry>()).div_ceil(page) * page;
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let entries = NonNull::new(ptr.cast::<BufRingEntry>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let mut ring = BufRing { pool, entries, ring_bytes, count, tail: 0, lent: 0 };
        // SAFETY: the mapping is page-aligned, holds `count` entries, and lives until this
        // BufRing drops, which happens only after the ring that uses it has no operation left
        // in flight (the worker drains them before dropping).
        unsafe { submitter.register_buf_ring_with_flags(ptr as u64, count, group, 0)? };
        for bid in 0..count {
            ring.push(bid);
        }
        ring.publish();
        Ok(ring)
    }

    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Buffers currently in the kernel's hands.
    pub fn available(&self) -> usize {
        self.count() - self.lent
    }

    /// A completion delivered buffer `bid`: it is ours until `give_back`.
    pub fn taken(&mut self) {
        self.lent += 1;
    }

    /// The first `len` bytes of buffer `bid`.
    /// As [`BufRing::get`], writable: the buffer is this thread's until given back (the TLS
    /// stage decrypts in place).
    pub fn get_mut(&mut self, bid: u16, len: usize) -> &mut [u8] {
        let len = len.min(self.pool.buffer_size());
        let ptr = self.pool.buffer_ptr(usize::from(bid) % self.pool.capacity());
        // SAFETY: as for `get`; and `&mut self` makes this the only reference into the ring's
        // buffers for its lifetime, while the kernel leaves a delivered buffer alone until it
        // is given back.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        let len = len.min(self.pool.buffer_size());
        let ptr = self.pool.buffer_ptr(usize::from(bid) % self.pool.capacity());
        // SAFETY: bid < count <= the pool's capacity, so the buffer lies inside the pool's
        // mapping; the kernel wrote `len` bytes into it and will not touch it again until the
        // buffer is given back to the ring.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// Return buffer `bid` to the kernel.
    pub fn give_back(&mut self, bid: u16) {
        self.lent = self.lent.saturating_sub(1);
        self.push(bid);
        self.publish();
    }

    fn push(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: index < count, inside the mapping; the kernel only reads entries between its
        // head and our published tail, and this slot is past the published tail.
        let entry = unsafe { &mut *self.entries.as_ptr().add(index) };
        entry.set_addr(self.pool.buffer_ptr(usize::from(bid)) as u64);
        entry.set_len(u32::try_from(self.pool.buffer_size()).unwrap_or(u32::MAX));
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail lives in the first entry of the mapping (the io_uring_buf_ring
        // layout); it is a u16 the kernel reads with acquire semantics, so it is written with
        // a release store through an atomic view of the same location.
        unsafe {
            let tail = BufRingEntry::tail(self.entries.as_ptr()) as *mut u16;
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing<'_> {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`; see its SAFETY note on lifetime.
        let _ = syscall!(munmap(self.entries.as_ptr().cast(), self.ring_bytes));
    }
}
