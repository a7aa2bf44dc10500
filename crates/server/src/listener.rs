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
//!
//! A Unix socket (`unix:PATH`) is a file: [`Listen::bind`] creates it with the asked mode,
//! replaces a stale one (a socket file nothing listens on, left by a server that was killed) and
//! refuses a live one, and [`SocketFile`] removes it when the server is done, if it is still
//! ours. SO_REUSEPORT does not exist for AF_UNIX, so [`Listen::bind_another`] hands out
//! duplicates of the one listener; TCP's options (SO_REUSEADDR, TCP_NODELAY,
//! TCP_DEFER_ACCEPT) are not set on it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::{check_unix_path, Config, GroupSteering, ListenAddr, ListenerMode};

// The OS error is part of the message, so it is not also returned as `source()`: an error
// printed with its chain (anyhow's `{:#}`) would show it twice.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot listen on {addr}: address already in use")]
    InUse { addr: ListenAddr },
    #[error("cannot listen on {addr}: address already in use (a server is listening on that socket file)")]
    Listening { addr: ListenAddr },
    #[error("cannot listen on {addr}: {} exists and is not a socket but {kind}; remove it or choose another path", path.display())]
    NotASocket { addr: ListenAddr, path: PathBuf, kind: &'static str },
    #[error("cannot listen on {addr}: {reason}")]
    BadPath { addr: ListenAddr, reason: String },
    #[error("cannot listen on {addr}: {error}{hint}")]
    Other { addr: ListenAddr, error: io::Error, hint: &'static str },
    #[error("cannot serve HTTP/3 on UDP {addr}: address already in use")]
    Http3InUse { addr: SocketAddr },
    #[error("cannot serve HTTP/3 on UDP {addr}: {error}")]
    Http3Other { addr: SocketAddr, error: io::Error },
}

impl BindError {
    fn new(addr: impl Into<ListenAddr>, source: io::Error) -> Self {
        let addr = addr.into();
        let hint = match (addr.is_unix(), source.raw_os_error()) {
            (true, Some(libc::EACCES | libc::EPERM)) => {
                " (a socket file needs write and search permission on its directory)"
            }
            (true, Some(libc::ENOENT)) => " (its directory does not exist)",
            (true, Some(libc::ENOTDIR)) => " (a part of the path is not a directory)",
            _ => "",
        };
        if source.kind() == io::ErrorKind::AddrInUse {
            BindError::InUse { addr }
        } else {
            BindError::Other { addr, error: source, hint }
        }
    }
}

/// The socket file of a Unix listener. Dropped (the server is done, after its drain), it removes
/// the file if the file is still the one this server created: same device and inode. Shared by
/// the listener and the [`Server`](crate::Server), so it goes when the last of them does.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!("cannot remove the socket file {}: {e}", self.path.display());
                }
            }
            // Gone, or replaced by someone else's file: not ours to remove.
            _ => {}
        }
    }
}

/// What stands at a Unix socket's path before it is bound, named for an error.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    let ty = meta.file_type();
    if ty.is_dir() {
        "a directory"
    } else if ty.is_symlink() {
        "a symbolic link"
    } else if ty.is_fifo() {
        "a FIFO"
    } else if ty.is_block_device() || ty.is_char_device() {
        "a device"
    } else {
        "a regular file"
    }
}

/// The bound port, and how to bind more sockets to it.
#[derive(Debug)]
pub struct Listen {
    first: Option<Arc<Socket>>,
    addr: ListenAddr,
    /// A Unix listener's socket file, removed when the last holder drops it.
    file: Option<Arc<SocketFile>>,
    udp: bool,
    reuseport: bool,
    backlog: u32,
    nodelay: bool,
    sndbuf: Option<usize>,
    rcvbuf: Option<usize>,
    /// TCP_DEFER_ACCEPT, whole seconds (rounded up).
    defer_accept: Option<u32>,
    /// With `--http3`: the UDP socket at the TCP port's number, and how to bind more.
    http3: Option<Box<Listen>>,
    /// `--http3`'s UDP side, when the port's SO_REUSEPORT group steers QUIC packets by
    /// connection ID (`sockscale_sys::reuseport`): the group's sockets in the order they
    /// joined it, which is the index the kernel's program picks them by — each as the
    /// descriptor its model serves and a duplicate held here, so that no socket leaves the
    /// group before the server ends (a socket that leaves moves the group's last one into its
    /// place: a worker done draining would send another's connections astray).
    steering: Option<Mutex<Vec<(RawFd, Socket)>>>,
    /// The group index of the first socket: 0, or a `--procs` worker's first inherited
    /// socket's ([`GroupSteering::From`]).
    steering_base: u8,
    /// The kernel refused the steering program: the port is served by its hash alone.
    steering_refused: bool,
    /// A `--procs` worker's UDP sockets after its first, inherited from the parent in the
    /// group's order: [`Listen::bind_another`] hands them out, in that order, before binding any.
    inherited: Mutex<std::collections::VecDeque<Socket>>,
    /// Whether the sockets were inherited (a `--procs` worker): the group's order is the
    /// parent's, and a socket bound here would join it at an index the worker does not know.
    inherits: bool,
}

impl Listen {
    /// Bind the first socket for `cfg`.
    pub fn bind(cfg: &Config) -> Result<Listen, BindError> {
        let udp = cfg.service.is_udp();
        let reuseport = udp || cfg.listener_mode == ListenerMode::ReusePort || cfg.shared_port;
        let mut listen = Listen {
            first: None,
            addr: cfg.listen.clone(),
            file: None,
            udp,
            reuseport,
            backlog: cfg.backlog,
            nodelay: cfg.nodelay,
            sndbuf: cfg.sndbuf,
            rcvbuf: cfg.rcvbuf,
            defer_accept: cfg
                .defer_accept
                .map(|d| u32::try_from(d.as_millis().div_ceil(1000)).unwrap_or(u32::MAX).max(1)),
            http3: None,
            steering: None,
            steering_base: 0,
            steering_refused: false,
            inherited: Mutex::default(),
            inherits: false,
        };
        let addr = match &cfg.listen {
            ListenAddr::Inet(addr) => *addr,
            ListenAddr::Unix(path) => {
                if let Some(fd) = cfg.listener_fd {
                    // A `--procs` worker: the parent bound the socket and keeps its file.
                    let socket = adopt_unix(fd).map_err(|e| BindError::new(cfg.listen.clone(), e))?;
                    listen.first = Some(Arc::new(socket));
                    return Ok(listen);
                }
                let (socket, file) = open_unix(path, cfg.unix_mode, cfg.backlog)?;
                listen.first = Some(Arc::new(socket));
                listen.file = Some(Arc::new(file));
                return Ok(listen);
            }
        };
        if reuseport && addr.port() != 0 && !cfg.shared_port {
            listen.probe(addr).map_err(|e| BindError::new(addr, e))?;
        }
        let socket = match cfg.udp_fds.as_slice() {
            // A `--procs` worker's UDP sockets, which its parent bound.
            [first, rest @ ..] if udp => listen.adopt_all(*first, rest, addr),
            _ => listen.open(addr),
        };
        let socket = socket.map_err(|e| BindError::new(addr, e))?;
        let bound = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| BindError::new(addr, io::Error::other("bound socket has no address")))?;
        listen.addr = ListenAddr::Inet(bound);
        listen.first = Some(Arc::new(socket));
        if cfg.http3.is_some() {
            let mut http3 = Listen::bind_http3(bound, cfg.shared_port, &cfg.udp_fds)?;
            http3.steer(cfg);
            listen.http3 = Some(Box::new(http3));
        }
        Ok(listen)
    }

    /// The UDP socket of `--http3` at `addr`, the TCP listener's address with its real port
    /// (so `--listen :0` serves both at one number). Always SO_REUSEPORT: each worker that
    /// serves it binds its own ([`Listen::bind_another`]), and the kernel's hash of the
    /// 4-tuple keeps one QUIC connection's datagrams on one socket, read by one thread. The
    /// port is probed first, as for TCP, so a busy one is refused rather than shared. A
    /// `--procs` worker serves the sockets its parent bound (`inherited`) instead.
    fn bind_http3(addr: SocketAddr, shared_port: bool, inherited: &[RawFd]) -> Result<Listen, BindError> {
        let fail = |error: io::Error| {
            if error.kind() == io::ErrorKind::AddrInUse {
                BindError::Http3InUse { addr }
            } else {
                BindError::Http3Other { addr, error }
            }
        };
        let mut udp = Listen {
            first: None,
            addr: ListenAddr::Inet(addr),
            file: None,
            udp: true,
            reuseport: true,
            backlog: 0,
            nodelay: false,
            sndbuf: None,
            rcvbuf: None,
            defer_accept: None,
            http3: None,
            steering: None,
            steering_base: 0,
            steering_refused: false,
            inherited: Mutex::default(),
            inherits: false,
        };
        if !shared_port {
            udp.probe(addr).map_err(fail)?;
        }
        let first = match inherited {
            [first, rest @ ..] => udp.adopt_all(*first, rest, addr),
            [] => udp.open(addr),
        };
        udp.first = Some(Arc::new(first.map_err(fail)?));
        Ok(udp)
    }

    /// Steer the QUIC packets of this (UDP) port's group by connection ID, if it can be done
    /// right: the order the sockets joined the group in must be known — a lone server binds
    /// them all itself; a `serve --procs` parent binds every worker's, attaches the program
    /// and tells each worker where its sockets stand (`Config::udp_steering`) — and an index
    /// must fit the IDs' first byte. A kernel that refuses the program is said in one line and
    /// counted ([`Listen::steering_refused`]); the port is then served by the kernel's hash
    /// alone.
    fn steer(&mut self, cfg: &Config) {
        if cfg.shared_port {
            match cfg.udp_steering {
                Some(GroupSteering::From(base)) if self.inherits => {
                    self.steering_base = base;
                    self.steering = Some(Mutex::new(Vec::new()));
                }
                // The parent said why, once.
                Some(GroupSteering::Refused) => self.steering_refused = true,
                _ => {}
            }
            return;
        }
        if cfg.threads > usize::from(u8::MAX) {
            return;
        }
        if attach_steering(&self.shared()) {
            // The first socket is held by this listener already.
            self.steering = Some(Mutex::new(Vec::new()));
        } else {
            self.steering_refused = true;
        }
    }

    /// Whether the kernel refused to steer this port's QUIC packets by connection ID.
    pub fn steering_refused(&self) -> bool {
        self.steering_refused
    }

    /// The index of `socket` in this port's SO_REUSEPORT group, for the connection IDs its
    /// endpoint issues, if the group steers by connection ID.
    pub fn steering_index(&self, socket: &Socket) -> Option<u8> {
        let members = self.steering.as_ref()?.lock().unwrap_or_else(|e| e.into_inner());
        let fd = socket.as_raw_fd();
        let index = if fd == self.shared().as_raw_fd() {
            0
        } else {
            1 + members.iter().position(|(member, _)| *member == fd)?
        };
        u8::try_from(usize::from(self.steering_base) + index).ok()
    }

    /// With `--http3`, the UDP side: [`Listen::shared`] is its first socket, bound at start,
    /// and [`Listen::bind_another`] gives a worker a socket of its own at the same address.
    pub fn http3(&self) -> Option<&Listen> {
        self.http3.as_deref()
    }

    /// The address actually bound, with the real port, or the Unix socket's path.
    pub fn local_addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// A Unix listener's socket file, which is removed when the last holder drops it.
    pub fn socket_file(&self) -> Option<Arc<SocketFile>> {
        self.file.clone()
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
    /// listener per thread. A Unix socket has no SO_REUSEPORT: the model gets a duplicate of
    /// the one listener (one accept queue; every thread waiting on it is woken for a new
    /// connection, and those that lose the accept find EAGAIN).
    pub fn bind_another(&self) -> io::Result<Socket> {
        match &self.addr {
            ListenAddr::Unix(_) => self.shared().try_clone(),
            ListenAddr::Inet(_) if !self.reuseport => {
                Err(io::Error::other("this listener was bound without SO_REUSEPORT"))
            }
            ListenAddr::Inet(addr) => {
                let inherited = self.inherited.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let socket = match inherited {
                    Some(socket) => socket,
                    None if self.inherits && self.steering.is_some() => {
                        return Err(io::Error::other(
                            "this --procs worker's model serves more UDP sockets than its parent bound for it",
                        ))
                    }
                    None => self.open(*addr)?,
                };
                if let Some(members) = &self.steering {
                    // Bound now, so it joined the group last: its index is the next.
                    let held = socket.try_clone()?;
                    members.lock().unwrap_or_else(|e| e.into_inner()).push((socket.as_raw_fd(), held));
                }
                Ok(socket)
            }
        }
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

    /// A `--procs` worker's UDP sockets, inherited as `first` and `rest` (the group's order),
    /// bound at `addr` by its parent: the first returned, the rest kept for
    /// [`Listen::bind_another`]. All are checked now, so a bad one fails the start.
    fn adopt_all(&mut self, first: RawFd, rest: &[RawFd], addr: SocketAddr) -> io::Result<Socket> {
        let first = self.adopt(first, addr)?;
        let rest = rest.iter().map(|&fd| self.adopt(fd, addr)).collect::<io::Result<_>>()?;
        self.inherited = Mutex::new(rest);
        self.inherits = true;
        Ok(first)
    }

    /// The UDP socket inherited as `fd`, bound at `addr` by a `--procs` parent, with the
    /// options [`Listen::open`] gives a socket it binds.
    fn adopt(&self, fd: RawFd, addr: SocketAddr) -> io::Result<Socket> {
        let socket = adopt_udp(fd, addr)?;
        if let Some(size) = self.sndbuf {
            socket.set_send_buffer_size(size)?;
        }
        if let Some(size) = self.rcvbuf {
            socket.set_recv_buffer_size(size)?;
        }
        Ok(socket)
    }

    fn probe(&self, addr: SocketAddr) -> io::Result<()> {
        let (ty, protocol) = if self.udp { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
        let probe = Socket::new(Domain::for_address(addr), ty.cloexec(), Some(protocol))?;
        if !self.udp {
            probe.set_reuse_address(true)?;
        }
        probe.bind(&SockAddr::from(addr))
    }
}

/// Attach the program that steers QUIC packets by connection ID to the SO_REUSEPORT group of
/// `socket`. A kernel that refuses it is said in one line, and false returned.
fn attach_steering(socket: &Socket) -> bool {
    match sockscale_sys::reuseport::attach_quic_steering(socket.as_raw_fd()) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                "HTTP/3: the kernel refused the BPF program that steers QUIC packets by connection ID ({e}); \
                 a client whose address changes may reach another socket and lose its connection"
            );
            false
        }
    }
}

/// Bind and listen on a Unix stream socket at `path`, its file created with `mode`.
fn open_unix(path: &Path, mode: u32, backlog: u32) -> Result<(Socket, SocketFile), BindError> {
    let addr = ListenAddr::Unix(path.to_owned());
    let fail = |e: io::Error| BindError::new(addr.clone(), e);
    check_unix_path(path).map_err(|reason| BindError::BadPath { addr: addr.clone(), reason })?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match listening(path) {
            Ok(true) => return Err(BindError::Listening { addr }),
            Ok(false) => {
                std::fs::remove_file(path).map_err(fail)?;
                tracing::warn!(
                    "replaced the stale socket file {}: nothing was listening on it (a server that \
                     was killed leaves its socket file behind)",
                    path.display()
                );
            }
            Err(e) => return Err(fail(e)),
        },
        Ok(meta) => return Err(BindError::NotASocket { addr, path: path.to_owned(), kind: file_kind(&meta) }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None).map_err(fail)?;
    // The file bind creates takes the socket's mode less the umask: never more open than
    // asked, even before the chmod below sets it exactly.
    sockscale_sys::fchmod(socket.as_raw_fd(), mode).map_err(fail)?;
    socket.bind(&SockAddr::unix(path).map_err(fail)?).map_err(fail)?;
    let meta = std::fs::symlink_metadata(path).map_err(fail)?;
    // From here on the file is ours, and removed again if listening fails.
    let file = SocketFile { path: path.to_owned(), dev: meta.dev(), ino: meta.ino() };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(fail)?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX)).map_err(fail)?;
    Ok((socket, file))
}

/// Whether something listens on the Unix socket file `path`: a connect() that is refused says
/// nothing does (a stale file). Non-blocking, so a live server whose queue is full (EAGAIN) is
/// found live at once rather than waited for.
fn listening(path: &Path) -> io::Result<bool> {
    let probe = Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)?;
    match probe.connect(&SockAddr::unix(path)?) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(false),
        Err(e) => Err(e),
    }
}

/// The listening Unix socket a `serve --procs` parent bound, inherited by this worker as `fd`
/// (`Config::listener_fd`): checked to be one before it is used.
fn adopt_unix(fd: RawFd) -> io::Result<Socket> {
    let not_ours = || io::Error::other(format!("descriptor {fd} is not an inherited listening Unix socket"));
    // Checked before it is owned: only a socket is taken over.
    let meta = std::fs::metadata(format!("/proc/self/fd/{fd}")).map_err(|_| not_ours())?;
    if !meta.file_type().is_socket() {
        return Err(not_ours());
    }
    // SAFETY: a `--procs` parent leaves this descriptor open across exec for this worker to
    // serve (the hidden `--listen-fd`); nothing else in the process owns it, and from here the
    // Socket alone closes it.
    let socket = unsafe { <Socket as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if socket.domain()? != Domain::UNIX || !socket.is_listener()? {
        return Err(not_ours());
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// The port of a `serve --procs` server, held by the parent. Creating it fails if the port is
/// taken (checked without SO_REUSEPORT, as for a single server); with port 0 it picks the port
/// every worker then binds. Holding it keeps the port ours while a dead worker is replaced.
///
/// TCP: a bound, non-listening SO_REUSEPORT socket, which takes no connections. UDP (`--proto
/// udp`, and `--http3`'s side): a bound UDP socket has no such idle state — in the port's
/// SO_REUSEPORT group it takes its share of the flows — so the parent binds every socket the
/// workers serve, in order: `per_worker` for each (what its model serves,
/// `Model::udp_sockets`), and worker K serves sockets [K × per_worker, K × per_worker +
/// per_worker), inherited (`Config::udp_fds`) and binds none: every socket of the group is
/// served, the group's order is known, and worker K's sockets keep their places in the group
/// and the datagrams queued on them while worker K is replaced. With `--http3` the parent
/// attaches the program that steers QUIC packets by connection ID to the group, once, and
/// tells each worker its sockets' first index (`Config::udp_steering`), if every index fits
/// the IDs' first byte.
///
/// On a Unix socket (`Reservation::unix`) the parent binds and listens, and every worker
/// inherits the one listener (`Config::listener_fd`): SO_REUSEPORT does not exist for AF_UNIX.
/// The parent then keeps the socket file, and removes it when it is done.
pub struct Reservation {
    /// The TCP socket or the Unix listener; none for `--proto udp`.
    socket: Option<Socket>,
    addr: ListenAddr,
    file: Option<SocketFile>,
    /// The bound UDP sockets, `per_worker` for each worker, in the order they joined the
    /// port's group.
    udp: Vec<Socket>,
    per_worker: usize,
    /// How `--http3`'s group is steered, if at all.
    steering: Option<GroupSteering>,
}

impl Reservation {
    /// The port at `addr` for `workers` processes: UDP if `udp`, else TCP, and with `http3`
    /// UDP beside TCP at the same number; `per_worker` UDP sockets for each worker.
    pub fn new(
        addr: SocketAddr,
        udp: bool,
        http3: bool,
        workers: usize,
        per_worker: usize,
    ) -> Result<Reservation, BindError> {
        let per_worker = per_worker.max(1);
        let open = |udp: bool, addr: SocketAddr, reuseport: bool| -> io::Result<Socket> {
            let (ty, protocol) = if udp { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
            let socket = Socket::new(Domain::for_address(addr), ty.cloexec(), Some(protocol))?;
            if !udp {
                socket.set_reuse_address(true)?;
            }
            socket.set_reuse_port(reuseport)?;
            socket.bind(&SockAddr::from(addr))?;
            Ok(socket)
        };
        let bound = |socket: &Socket| socket.local_addr().ok().and_then(|a| a.as_socket());
        // The UDP sockets at `addr`, the first of which picks the port if it is 0.
        let open_udp = |addr: SocketAddr| -> io::Result<Vec<Socket>> {
            if addr.port() != 0 {
                open(true, addr, false)?;
            }
            let total = workers.max(1) * per_worker;
            let mut sockets: Vec<Socket> = Vec::with_capacity(total);
            for _ in 0..total {
                let at = sockets.first().and_then(bound).unwrap_or(addr);
                sockets.push(open(true, at, true)?);
            }
            Ok(sockets)
        };
        if udp {
            let sockets = open_udp(addr).map_err(|e| BindError::new(addr, e))?;
            let addr = sockets.first().and_then(bound).unwrap_or(addr);
            return Ok(Reservation {
                socket: None,
                addr: ListenAddr::Inet(addr),
                file: None,
                udp: sockets,
                per_worker,
                steering: None,
            });
        }
        if addr.port() != 0 {
            open(false, addr, false).map_err(|e| BindError::new(addr, e))?;
        }
        let socket = open(false, addr, true).map_err(|e| BindError::new(addr, e))?;
        let addr = bound(&socket).unwrap_or(addr);
        let udp = if http3 {
            open_udp(addr).map_err(|error| {
                if error.kind() == io::ErrorKind::AddrInUse {
                    BindError::Http3InUse { addr }
                } else {
                    BindError::Http3Other { addr, error }
                }
            })?
        } else {
            Vec::new()
        };
        // Every index must fit the connection IDs' first byte, as in one process.
        let steering = match udp.first() {
            Some(first) if udp.len() <= usize::from(u8::MAX) => {
                Some(if attach_steering(first) { GroupSteering::From(0) } else { GroupSteering::Refused })
            }
            _ => None,
        };
        Ok(Reservation { socket: Some(socket), addr: ListenAddr::Inet(addr), file: None, udp, per_worker, steering })
    }

    /// Bind and listen on the Unix socket `path` (its file made with `mode`), leaving the
    /// listener open across exec for the workers to inherit.
    pub fn unix(path: &Path, mode: u32, backlog: u32) -> Result<Reservation, BindError> {
        let (socket, file) = open_unix(path, mode, backlog)?;
        socket.set_cloexec(false).map_err(|e| BindError::new(ListenAddr::Unix(path.to_owned()), e))?;
        Ok(Reservation {
            socket: Some(socket),
            addr: ListenAddr::Unix(path.to_owned()),
            file: Some(file),
            udp: Vec::new(),
            per_worker: 1,
            steering: None,
        })
    }

    pub fn local_addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// The listener every worker inherits, for a Unix socket (`--listen-fd`).
    pub fn inherited_fd(&self) -> Option<RawFd> {
        self.file.as_ref().and(self.socket.as_ref()).map(AsRawFd::as_raw_fd)
    }

    /// The UDP sockets worker `k` serves (`--udp-fd`), in the group's order; none if the port
    /// has no UDP. The descriptors are close-on-exec: the parent leaves them open for worker
    /// `k` alone.
    pub fn udp_fds(&self, k: usize) -> Vec<RawFd> {
        self.udp.iter().skip(k * self.per_worker).take(self.per_worker).map(AsRawFd::as_raw_fd).collect()
    }

    /// How `--http3`'s group steers worker `k`'s sockets (`--udp-steering`): from which index,
    /// or refused by the kernel; None when it is not steered.
    pub fn steering(&self, k: usize) -> Option<GroupSteering> {
        match self.steering? {
            GroupSteering::From(_) => u8::try_from(k * self.per_worker).ok().map(GroupSteering::From),
            GroupSteering::Refused => Some(GroupSteering::Refused),
        }
    }
}

/// The UDP socket a `serve --procs` parent bound at `addr` for this worker, inherited as `fd`
/// (`Config::udp_fds`): checked to be one before it is used.
fn adopt_udp(fd: RawFd, addr: SocketAddr) -> io::Result<Socket> {
    let not_ours = || io::Error::other(format!("descriptor {fd} is not an inherited UDP socket bound to {addr}"));
    // Checked before it is owned: only a socket is taken over.
    let meta = std::fs::metadata(format!("/proc/self/fd/{fd}")).map_err(|_| not_ours())?;
    if !meta.file_type().is_socket() {
        return Err(not_ours());
    }
    // SAFETY: a `--procs` parent leaves this descriptor open across exec for this worker to
    // serve (the hidden `--udp-fd`); nothing else in the process owns it, and from here the
    // Socket alone closes it.
    let socket = unsafe { <Socket as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if socket.r#type()? != Type::DGRAM || socket.local_addr()?.as_socket() != Some(addr) {
        return Err(not_ours());
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_port_is_reported_even_with_reuseport() {
        let cfg = Config { listen: "127.0.0.1:0".parse().unwrap(), ..Config::default() };
        let first = Listen::bind(&cfg).unwrap();
        let again = Config { listen: first.local_addr().clone(), ..cfg.clone() };
        let err = Listen::bind(&again).unwrap_err();
        assert!(matches!(err, BindError::InUse { .. }), "{err}");
        assert_eq!(err.to_string(), format!("cannot listen on {}: address already in use", first.local_addr()));
        // Our own extra listeners still bind.
        first.bind_another().unwrap();
    }

    /// `--http3`'s sockets are steered by connection ID and know their index in the group (the
    /// order they were bound in); a `--procs` worker's are not, unless its parent says where
    /// they stand in a steered group (`Config::udp_steering`), nor is `--proto udp`.
    #[test]
    fn http3_sockets_know_their_index_in_a_steered_group() {
        let cfg = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            http3: Some(crate::config::Http3Config::default()),
            ..Config::default()
        };
        let listen = Listen::bind(&cfg).unwrap();
        let udp = listen.http3().unwrap();
        assert!(!udp.steering_refused());
        let (second, third) = (udp.bind_another().unwrap(), udp.bind_another().unwrap());
        assert_eq!(udp.steering_index(&udp.shared()), Some(0));
        assert_eq!(udp.steering_index(&third), Some(2));
        assert_eq!(udp.steering_index(&second), Some(1));
        let stranger = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        assert_eq!(udp.steering_index(&stranger), None);

        let worker = Config { shared_port: true, ..cfg.clone() };
        let listen = Listen::bind(&worker).unwrap();
        let udp = listen.http3().unwrap();
        assert_eq!(udp.steering_index(&udp.shared()), None);
        let echo = Listen::bind(&Config { service: crate::config::Service::UdpEcho, http3: None, ..cfg }).unwrap();
        assert_eq!(echo.steering_index(&echo.shared()), None);
    }

    /// `serve --procs`: the parent binds every worker's UDP sockets in order and steers the
    /// group; worker 1 of 2 with three sockets each serves its inherited three, at indices
    /// 3-5, binds none, and is refused a fourth (it would join the group at an unknown index).
    #[test]
    fn a_procs_worker_serves_its_inherited_sockets_at_their_indices() {
        use std::os::fd::IntoRawFd;
        let reservation = Reservation::new("127.0.0.1:0".parse().unwrap(), false, true, 2, 3).unwrap();
        assert_eq!(reservation.udp.len(), 6);
        assert_eq!(reservation.steering(0), Some(GroupSteering::From(0)));
        assert_eq!(reservation.steering(1), Some(GroupSteering::From(3)));
        assert_eq!(reservation.udp_fds(1), reservation.udp[3..].iter().map(AsRawFd::as_raw_fd).collect::<Vec<_>>());
        // What the worker inherits: its own descriptors of the parent's sockets.
        let fds: Vec<RawFd> = reservation.udp[3..].iter().map(|s| s.try_clone().unwrap().into_raw_fd()).collect();
        let cfg = Config {
            listen: reservation.local_addr().clone(),
            http3: Some(crate::config::Http3Config::default()),
            shared_port: true,
            udp_fds: fds.clone(),
            udp_steering: reservation.steering(1),
            ..Config::default()
        };
        let listen = Listen::bind(&cfg).unwrap();
        let udp = listen.http3().unwrap();
        assert!(!udp.steering_refused());
        assert_eq!(udp.shared().as_raw_fd(), fds[0]);
        let (second, third) = (udp.bind_another().unwrap(), udp.bind_another().unwrap());
        assert_eq!((second.as_raw_fd(), third.as_raw_fd()), (fds[1], fds[2]));
        assert_eq!(udp.steering_index(&udp.shared()), Some(3));
        assert_eq!(udp.steering_index(&second), Some(4));
        assert_eq!(udp.steering_index(&third), Some(5));
        assert!(udp.bind_another().is_err());

        // Past 255 sockets the group is not steered, as in one process.
        let big = Reservation::new("127.0.0.1:0".parse().unwrap(), false, true, 2, 128).unwrap();
        assert_eq!(big.steering(0), None);
    }

    /// `--http3`: UDP at the TCP listener's real port, more sockets for the workers, and a
    /// busy UDP port refused with one line naming it.
    #[test]
    fn http3_binds_udp_at_the_tcp_port_and_refuses_a_busy_one() {
        let cfg = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            http3: Some(crate::config::Http3Config::default()),
            ..Config::default()
        };
        let listen = Listen::bind(&cfg).unwrap();
        let tcp = listen.local_addr().inet().unwrap();
        let udp = listen.http3().expect("the UDP side");
        assert!(udp.is_udp());
        assert_eq!(udp.local_addr(), listen.local_addr());
        let bound = udp.shared().local_addr().unwrap().as_socket().unwrap();
        assert_eq!(bound, tcp);
        assert_eq!(udp.shared().r#type().unwrap(), Type::DGRAM);
        let another = udp.bind_another().unwrap();
        assert_eq!(another.local_addr().unwrap().as_socket(), Some(tcp));
        assert!(Listen::bind(&Config { http3: None, ..cfg.clone() }).unwrap().http3().is_none());

        // Someone else holds the UDP port: the TCP port is free, the UDP one is not.
        drop((another, listen));
        let squatter = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = squatter.local_addr().unwrap().port();
        let busy = Config { listen: format!("127.0.0.1:{port}").parse().unwrap(), ..cfg };
        let err = Listen::bind(&busy).unwrap_err();
        assert_eq!(err.to_string(), format!("cannot serve HTTP/3 on UDP 127.0.0.1:{port}: address already in use"));
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
            let _client = std::net::TcpStream::connect(listen.local_addr().inet().unwrap()).unwrap();
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

#[cfg(test)]
mod unix {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sockscale-listen-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn unix_cfg(path: &Path, mode: u32) -> Config {
        Config { listen: ListenAddr::Unix(path.to_owned()), unix_mode: mode, ..Config::default() }
    }

    /// The file gets the asked mode, serves, is removed when the listener goes, and a second
    /// listener is a duplicate of the first (no SO_REUSEPORT for AF_UNIX).
    #[test]
    fn the_socket_file_has_the_mode_and_is_removed_at_the_end() {
        let dir = dir("mode");
        let path = dir.join("s.sock");
        for mode in [0o600, 0o666] {
            let listen = Listen::bind(&unix_cfg(&path, mode)).unwrap();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert!(meta.file_type().is_socket());
            assert_eq!(meta.permissions().mode() & 0o7777, mode, "{mode:o}");
            assert_eq!(listen.local_addr().to_string(), format!("unix:{}", path.display()));
            let another = listen.bind_another().unwrap();
            assert_ne!(another.as_raw_fd(), listen.shared().as_raw_fd());
            std::os::unix::net::UnixStream::connect(&path).unwrap();
            drop(another);
            drop(listen);
            assert!(!path.exists(), "the socket file outlived its listener");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_file_is_replaced_a_live_one_refused_and_others_named() {
        let dir = dir("stale");
        let path = dir.join("s.sock");
        // A socket file nothing listens on, as a killed server leaves it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let listen = Listen::bind(&unix_cfg(&path, 0o660)).unwrap();
        let err = Listen::bind(&unix_cfg(&path, 0o660)).unwrap_err();
        assert!(matches!(err, BindError::Listening { .. }), "{err}");
        // A live server that accepts nothing and whose queue is full is found live at once.
        let full = dir.join("full.sock");
        let backlog = Config { backlog: 1, ..unix_cfg(&full, 0o660) };
        let _held = Listen::bind(&backlog).unwrap();
        let _queued: Vec<_> = (0..4).filter_map(|_| listening(&full).ok()).collect();
        assert!(matches!(Listen::bind(&backlog), Err(BindError::Listening { .. })));
        assert!(matches!(err, BindError::Listening { .. }), "{err}");
        assert!(err.to_string().contains("already in use"), "{err}");
        // A file that replaced ours is not removed.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"not a socket").unwrap();
        drop(listen);
        assert!(path.exists(), "removed a file that was not ours");
        let err = Listen::bind(&unix_cfg(&path, 0o660)).unwrap_err().to_string();
        assert!(err.contains("is not a socket but a regular file"), "{err}");
        let err = Listen::bind(&unix_cfg(&dir.join("missing/s.sock"), 0o660)).unwrap_err().to_string();
        assert!(err.contains("its directory does not exist"), "{err}");
        let long = dir.join("l".repeat(120));
        let err = Listen::bind(&unix_cfg(&long, 0o660)).unwrap_err().to_string();
        assert!(err.contains("at most 107"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
