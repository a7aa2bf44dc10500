//! Waking a thread that sleeps in its selector, from any thread.

use std::os::fd::OwnedFd;

/// An eventfd a worker watches in its selector; `wake` makes it readable.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub fn new() -> std::io::Result<Self> {
        Ok(Waker { fd: crate::eventfd()? })
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    pub fn wake(&self) {
        crate::eventfd_signal(&self.fd);
    }

    /// Reset after waking, so a level-triggered selector stops reporting it.
    pub fn reset(&self) {
        crate::eventfd_drain(&self.fd);
    }
}
