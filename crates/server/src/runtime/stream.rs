//! The two kinds of stream the tokio model serves, TCP and Unix, behind one type each for the
//! listener and the connection. tokio's `TcpListener` cannot accept AF_UNIX; the accept task
//! and every connection's task are the same for both, and only these `match`es tell them apart.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use ::tokio::io::{Interest, Ready};
use ::tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The accept task's listener.
pub(super) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// The bound, listening, non-blocking `socket` (a Unix one when `unix`), registered with
    /// the runtime's reactor.
    pub(super) fn new(socket: socket2::Socket, unix: bool) -> io::Result<Self> {
        let fd = OwnedFd::from(socket);
        Ok(if unix {
            Listener::Unix(UnixListener::from_std(std::os::unix::net::UnixListener::from(fd))?)
        } else {
            Listener::Tcp(TcpListener::from_std(std::net::TcpListener::from(fd))?)
        })
    }

    pub(super) async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(listener) => listener.accept().await.map(|(stream, _)| Stream::Tcp(stream)),
            Listener::Unix(listener) => listener.accept().await.map(|(stream, _)| Stream::Unix(stream)),
        }
    }
}

/// One accepted connection.
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
        }
    }
}

impl Stream {
    /// Wait for any of `interest`.
    pub(super) async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        match self {
            Stream::Tcp(stream) => stream.ready(interest).await,
            Stream::Unix(stream) => stream.ready(interest).await,
        }
    }

    /// Run `f`, a non-blocking call on the descriptor; a WouldBlock from it clears tokio's
    /// readiness for `interest`.
    pub(super) fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Stream::Tcp(stream) => stream.try_io(interest, f),
            Stream::Unix(stream) => stream.try_io(interest, f),
        }
    }
}
