//! Binding the server's port.
//!
//! The first socket is bound before any model starts, so that a busy port or a bad address is
//! reported at once, and so `--listen 127.0.0.1:0` has a real port to print. Models that want
//! one listener per thread (or per process) bind more sockets to the same address with
//! SO_REUSEPORT through [`Listen::bind_another`].
//!
//! SO_REUSEPORT would also let us share a port with an unrelated process of the same user, and
//! then "address in use" would never be reported. So before binding, a probe socket without
//! SO_REUSEPORT is bound to the address: if that fails with EADDRINUSE, the port is taken. The
//! probe has SO_REUSEADDR (TCP), so connections of an earlier run in TIME_WAIT do not count.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::{Config, ListenerMode};

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot listen on {addr}: address already in use")]
    InUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {error}")]
    Other { addr: SocketAddr, error: io::Error },
}

impl BindError {
    fn new(addr: SocketAddr, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::AddrInUse {
            BindError::InUse { addr }
        } else {
            BindError::Other { addr, error: source }
        }
    }
}

/// The bound port, and how to bind more sockets to it.
#[derive(Debug)]
pub struct Listen {
    first: Option<Arc<Socket>>,
    addr: SocketAddr,
    udp: bool,
    reuseport: bool,
    backlog: u32,
    nodelay: bool,
    sndbuf: Option<usize>,
    rcvbuf: Option<usize>,
    /// TCP_DEFER_ACCEPT, whole seconds (rounded up).
    defer_accept: Option<u32>,
}

impl Listen {
    /// Bind the first socket for `cfg`.
    pub fn bind(cfg: &Config) -> Result<Listen, BindError> {
        let udp = cfg.service.is_udp();
        let reuseport = udp || cfg.listener_mode == ListenerMode::ReusePort || cfg.shared_port;
        let mut listen = Listen {
            first: None,
            addr: cfg.listen,
            udp,
            reuseport,
            backlog: cfg.backlog,
            nodelay: cfg.nodelay,
            sndbuf: cfg.sndbuf,
            rcvbuf: cfg.rcvbuf,
            defer_accept: cfg
                .defer_accept
                .map(|d| u32::try_from(d.as_millis().div_ceil(1000)).unwrap_or(u32::MAX).max(1)),
        };
        if reuseport && cfg.listen.port() != 0 && !cfg.shared_port {
            listen.probe().map_err(|e| BindError::new(cfg.listen, e))?;
        }
        let socket = listen.open(cfg.listen).map_err(|e| BindError::new(cfg.listen, e))?;
        listen.addr = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| BindError::new(cfg.listen, io::Error::other("bound socket has no address")))?;
        listen.first = Some(Arc::new(socket));
        Ok(listen)
    }

    /// The address actually bound, with the real port.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn is_udp(&self) -> bool {
        self.udp
    }

    /// The first socket. Every caller gets the same socket; models that share one listener
    /// among threads use this.
    pub fn shared(&self) -> Arc<Socket> {
        match &self.first {
            Some(socket) => socket.clone(),
            None => unreachable!("Listen::bind always sets the first socket"),
        }
    }

    /// Another socket bound to the same address with SO_REUSEPORT, for a model that wants one
    /// listener per thread.
    pub fn bind_another(&self) -> io::Result<Socket> {
        if !self.reuseport {
            return Err(io::Error::other("this listener was bound without SO_REUSEPORT"));
        }
        self.open(self.addr)
    }

    fn open(&self, addr: SocketAddr) -> io::Result<Socket> {
        let (ty, protocol) = if self.udp { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
        let socket = Socket::new(Domain::for_address(addr), ty.nonblocking().cloexec(), Some(protocol))?;
        if !self.udp {
            socket.set_reuse_address(true)?;
        }
        if self.reuseport {
            socket.set_reuse_port(true)?;
        }
        // Accepted sockets inherit these from the listener, which saves a setsockopt per
        // connection (tests check the inheritance on a live connection).
        if !self.udp {
            socket.set_tcp_nodelay(self.nodelay)?;
        }
        if let Some(size) = self.sndbuf {
            socket.set_send_buffer_size(size)?;
        }
        if let Some(size) = self.rcvbuf {
            socket.set_recv_buffer_size(size)?;
        }
        socket.bind(&SockAddr::from(addr))?;
        if !self.udp {
            if let Some(seconds) = self.defer_accept {
                sockscale_sys::set_defer_accept(std::os::fd::AsRawFd::as_raw_fd(&socket), seconds)?;
            }
            socket.listen(i32::try_from(self.backlog).unwrap_or(i32::MAX))?;
        }
        Ok(socket)
    }

    fn probe(&self) -> io::Result<()> {
        let (ty, protocol) = if self.udp { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
        let probe = Socket::new(Domain::for_address(self.addr), ty.cloexec(), Some(protocol))?;
        if !self.udp {
            probe.set_reuse_address(true)?;
        }
        probe.bind(&SockAddr::from(self.addr))
    }
}

/// The port of a `serve --procs` server, held by the parent: a bound, non-listening
/// SO_REUSEPORT socket. Creating it fails if the port is taken (checked without SO_REUSEPORT,
/// as for a single server); with port 0 it picks the port every worker then binds. Holding it
/// keeps the port ours while a dead worker is replaced.
pub struct Reservation {
    _socket: Socket,
    addr: SocketAddr,
}

impl Reservation {
    pub fn new(addr: SocketAddr, udp: bool) -> Result<Reservation, BindError> {
        let (ty, protocol) = if udp { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
        let open = |reuseport: bool| -> io::Result<Socket> {
            let socket = Socket::new(Domain::for_address(addr), ty.cloexec(), Some(protocol))?;
            if !udp {
                socket.set_reuse_address(true)?;
            }
            socket.set_reuse_port(reuseport)?;
            socket.bind(&SockAddr::from(addr))?;
            Ok(socket)
        };
        if addr.port() != 0 {
            open(false).map_err(|e| BindError::new(addr, e))?;
        }
        let socket = open(true).map_err(|e| BindError::new(addr, e))?;
        let bound = socket.local_addr().ok().and_then(|a| a.as_socket()).unwrap_or(addr);
        Ok(Reservation { _socket: socket, addr: bound })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_port_is_reported_even_with_reuseport() {
        let cfg = Config { listen: "127.0.0.1:0".parse().unwrap(), ..Config::default() };
        let first = Listen::bind(&cfg).unwrap();
        let again = Config { listen: first.local_addr(), ..cfg.clone() };
        let err = Listen::bind(&again).unwrap_err();
        assert!(matches!(err, BindError::InUse { .. }), "{err}");
        assert_eq!(err.to_string(), format!("cannot listen on {}: address already in use", first.local_addr()));
        // Our own extra listeners still bind.
        first.bind_another().unwrap();
    }
}

#[cfg(test)]
mod inheritance {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The server sets TCP_NODELAY and buffer sizes once, on the listener; this checks that
    /// Linux hands them to every accepted socket, as the listener's comment claims.
    #[test]
    fn accepted_sockets_inherit_listener_options() {
        for nodelay in [true, false] {
            let cfg = Config {
                listen: "127.0.0.1:0".parse().unwrap(),
                nodelay,
                sndbuf: Some(96 << 10),
                rcvbuf: Some(80 << 10),
                ..Config::default()
            };
            let listen = Listen::bind(&cfg).unwrap();
            let _client = std::net::TcpStream::connect(listen.local_addr()).unwrap();
            let listener = listen.shared();
            let fd = loop {
                match sockscale_sys::accept(listener.as_raw_fd()) {
                    Ok(fd) => break fd,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            };
            let accepted = socket2::SockRef::from(&fd);
            assert_eq!(accepted.tcp_nodelay().unwrap(), nodelay);
            // The kernel doubles the requested sizes for its bookkeeping.
            assert_eq!(accepted.send_buffer_size().unwrap(), 2 * (96 << 10));
            assert_eq!(accepted.recv_buffer_size().unwrap(), 2 * (80 << 10));
        }
    }
}
