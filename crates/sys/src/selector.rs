//! The readiness contract: how a thread waits until sockets are ready.
//!
//! One [`Selector`] implementation per mechanism (select, poll, real-time signals, epoll), the
//! way mio gives every OS the same selector methods in its own file. The server's readiness
//! models and the load generator's engine are written against this trait; [`Epoll`] is the
//! implementation both use by default.
//!
//! [`Epoll`]: crate::Epoll

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// The readiness selectors' view of what a connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interest {
    pub read: bool,
    pub write: bool,
}

impl Interest {
    pub const NONE: Interest = Interest { read: false, write: false };
    pub const READ: Interest = Interest { read: true, write: false };
    pub const BOTH: Interest = Interest { read: true, write: true };
}

/// One readiness report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
    /// Hang-up or error: reading will say which.
    pub closed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The selector cannot watch this descriptor (select's FD_SETSIZE, a full group of 64).
    #[error("{0}")]
    Full(String),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// How a thread waits for readiness: one implementation per mechanism.
pub trait Selector {
    /// Edge-triggered selectors report a readiness change once; level-triggered ones report it
    /// for as long as it lasts.
    fn edge_triggered(&self) -> bool;
    /// Start watching `fd`. `exclusive` asks, where the mechanism has it, that only one of the
    /// threads watching a shared listener be woken per connection.
    fn register(&mut self, fd: RawFd, token: u64, interest: Interest, exclusive: bool) -> Result<(), RegisterError>;
    /// Change what `fd` is watched for. Edge-triggered selectors watch everything always and
    /// are never asked.
    fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()>;
    fn deregister(&mut self, fd: RawFd) -> io::Result<()>;
    /// Wait up to `timeout` (None: forever) and append what is ready to `events`.
    fn select(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()>;
}
