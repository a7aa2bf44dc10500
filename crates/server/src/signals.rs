//! Turning SIGINT and SIGTERM into a graceful shutdown, without a signal handler.
//!
//! [`TerminationSignals::block`] blocks both signals in the calling thread before any other
//! thread exists, so every thread inherits the mask and none is interrupted; one thread then
//! takes them synchronously with `sigwait`. The first signal starts a drain, the second forces
//! it, as with nginx's quit and terminate.

use std::io;

use sockscale_sys::syscall;

use crate::shutdown::Shutdown;

pub struct TerminationSignals {
    set: libc::sigset_t,
}

impl TerminationSignals {
    /// Block SIGINT and SIGTERM in this thread (and every thread it creates from now on).
    pub fn block() -> io::Result<Self> {
        // SAFETY: sigset_t is plain old data and sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: set is a live sigset_t.
        syscall!(sigemptyset(&mut set))?;
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: set is initialised; the signal numbers are valid.
            syscall!(sigaddset(&mut set, signal))?;
        }
        // SAFETY: set is initialised; a null old-set pointer is allowed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(TerminationSignals { set })
    }

    /// Wait for the next SIGINT or SIGTERM; returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        let mut signal = 0;
        // SAFETY: set is initialised and signal is a live int.
        let rc = unsafe { libc::sigwait(&self.set, &mut signal) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(signal)
    }

    /// Spawn a thread that drains `shutdown` on the first signal and forces it on the second.
    pub fn forward_to(self, shutdown: Shutdown) -> io::Result<()> {
        std::thread::Builder::new().name("sockscale-signals".into()).spawn(move || {
            let mut seen = 0;
            while let Ok(signal) = self.wait() {
                seen += 1;
                // Act first, then say so: the log line goes to a stderr that may be a closed
                // pipe, and nothing about writing it may stand between a signal and the stop.
                if seen == 1 {
                    shutdown.shutdown();
                    tracing::info!(signal, "draining connections; send the signal again to close them at once");
                } else {
                    shutdown.force();
                }
            }
        })?;
        Ok(())
    }
}
