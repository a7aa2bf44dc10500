//! The one door to the kernel, shared by sockscale's server and its load generator.
//!
//! Every raw system call in sockscale goes through [`syscall!`], which turns the C convention
//! (-1 and errno) into `io::Result`. The thin wrappers below are the calls the hot paths make;
//! each `unsafe` block carries the reason it is sound.
//!
//! Besides the wrappers, this crate holds what both the server's readiness models and the load
//! generator's engine wait with: the readiness contract ([`Interest`], [`Event`],
//! [`RegisterError`] and the [`Selector`] trait), its epoll implementation ([`Epoll`]), the
//! eventfd [`Waker`] and the lazy timer heap ([`Timers`]), and the UDP batch mover ([`udp`]:
//! recvmmsg/sendmmsg with GSO and GRO). It knows nothing of protocols,
//! policies or models.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Call a libc function, mapping -1 to the thread's errno.
///
/// The caller is responsible for the arguments meeting the function's contract, and says why
/// in a `// SAFETY:` comment at the call site. The arguments are evaluated in order outside the
/// macro's `unsafe` block, so the only unsafe operation the macro performs is the call itself:
/// an argument that is unsafe to compute needs its own `unsafe` at the call site. Temporaries
/// made while evaluating an argument live until the call has returned, as in a plain call.
#[macro_export]
macro_rules! syscall {
    // Bind the next argument with `match`, whose scrutinee's temporaries live to the end of the
    // match (a `let` would drop them at once and could leave a dangling pointer). Each
    // expansion's `arg` is a distinct variable (macro hygiene).
    (@bind $fn:ident [$($bound:ident)*] $next:expr, $($rest:expr,)*) => {
        match $next {
            arg => $crate::syscall!(@bind $fn [$($bound)* arg] $($rest,)*),
        }
    };
    (@bind $fn:ident [$($bound:ident)*]) => {{
        // SAFETY: the call site documents why these arguments satisfy the function's contract.
        #[allow(unused_unsafe)]
        let res = unsafe { $crate::__libc::$fn($($bound),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
    ($fn:ident ( $($arg:expr),* $(,)? )) => {
        $crate::syscall!(@bind $fn [] $($arg,)*)
    };
}

/// libc for [`syscall!`]'s expansion, so that the macro names it the same way in every crate.
#[doc(hidden)]
pub use libc as __libc;

mod epoll;
pub mod reuseport;
mod selector;
mod timers;
pub mod udp;
mod waker;

pub use epoll::Epoll;
pub use selector::{Event, Interest, RegisterError, Selector};
pub use timers::Timers;
pub use waker::Waker;

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Accept one connection as a non-blocking, close-on-exec socket.
pub fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: null address and length pointers are allowed: we do not want the peer address.
    let fd = syscall!(accept4(
        listener,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    ))?;
    // SAFETY: accept4 just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One `recv` into `buf`.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes for the duration of the call.
    let n = syscall!(recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0))?;
    Ok(n as usize)
}

/// Gather-write `bufs` with `sendmsg(MSG_NOSIGNAL)`: a peer that has gone away yields EPIPE
/// instead of a SIGPIPE that would kill an embedding process that did not ignore it.
pub fn send_vectored(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    send_vectored_with(fd, bufs, false)
}

/// [`send_vectored`], with `MSG_MORE` when `more`: more output follows at once (a body the
/// kernel sends from a file after this head), so the kernel holds a short segment back for it
/// rather than sending the head in a packet of its own.
pub fn send_vectored_with(fd: RawFd, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // One buffer (a whole HTTP response, one echo) is the common case; plain send skips
    // importing a msghdr and iovec array.
    if let [only] = bufs {
        // SAFETY: only is valid for reads of only.len() bytes.
        let n = syscall!(send(fd, only.as_ptr().cast(), only.len(), flags))?;
        return Ok(n as usize);
    }
    // SAFETY: zeroed msghdr is a valid "no address, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    // SAFETY: msg points at bufs, which outlive the call and are only read by the kernel.
    let n = syscall!(sendmsg(fd, &msg, flags))?;
    Ok(n as usize)
}

/// `sendfile` of up to `count` bytes of `file` from `*offset` to the socket `fd`, advancing
/// `*offset` by what was sent. 0 with `count` > 0 means the file ends before `*offset`: it is
/// shorter than the caller thought.
pub fn sendfile(fd: RawFd, file: RawFd, offset: &mut u64, count: usize) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(*offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // The kernel sends at most this much per call (MAX_RW_COUNT) and says so by a short count.
    let count = count.min(0x7fff_f000);
    // SAFETY: off is a live off_t the kernel reads and updates; no other pointer is passed.
    let n = syscall!(sendfile(fd, file, &mut off, count))?;
    *offset = off as u64;
    Ok(n as usize)
}

/// `send` of one buffer without SIGPIPE.
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = syscall!(send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL))?;
    Ok(n as usize)
}

pub fn shutdown_write(fd: RawFd) -> io::Result<()> {
    // SAFETY: shutdown takes no pointers; a descriptor that is not a socket is an error return.
    syscall!(shutdown(fd, libc::SHUT_WR)).map(drop)
}

/// How a socket ends once its last bytes are written: in good order (a FIN, after reading
/// what the peer already sent, so that no reset destroys the last bytes before the peer reads
/// them), or aborted (closed as it is: the kernel resets it if input is unread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Orderly,
    Abort,
}

/// Carry out the end of a non-blocking socket `fd` that its owner closes right after: one
/// attempt to send `last` (what did not fit is dropped: a peer that does not read holds
/// nothing), then, `Ending::Orderly`, a FIN and a read of what the peer has already sent (at
/// most 64 KiB, never waiting). Every engine ends a connection, and every acceptor refuses one,
/// through this, so a client sees one ending whatever the model. Returns how many of the last
/// bytes the socket took.
pub fn end_socket(fd: RawFd, last: &[u8], ending: Ending) -> usize {
    let mut sent = 0;
    if !last.is_empty() {
        // SAFETY: last is valid for reads of last.len() bytes.
        let n = syscall!(send(fd, last.as_ptr().cast(), last.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT));
        sent = n.map_or(0, |n| usize::try_from(n).unwrap_or(0));
    }
    if ending == Ending::Abort {
        return sent;
    }
    let _ = shutdown_write(fd);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        // SAFETY: sink is valid for writes of its length for the duration of the call.
        match syscall!(recv(fd, sink.as_mut_ptr().cast(), sink.len(), libc::MSG_DONTWAIT)) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    sent
}

/// A non-blocking eventfd, used to wake a thread sleeping in its selector.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = syscall!(eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?;
    // SAFETY: eventfd just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64. EAGAIN (counter saturated) still leaves it
    // readable, which is all a wake-up needs, so the result is ignored.
    let _ = syscall!(write(fd.as_raw_fd(), (&one as *const u64).cast(), 8));
}

pub fn eventfd_drain(fd: &OwnedFd) {
    let mut value: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64; EAGAIN means it was already drained.
    let _ = syscall!(read(fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8));
}

/// The soft limit of a resource, or None when unlimited.
pub fn soft_limit(resource: libc::__rlimit_resource_t) -> io::Result<Option<u64>> {
    // SAFETY: rlimit is plain old data.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: limit is a valid, writable rlimit.
    syscall!(getrlimit(resource, &mut limit))?;
    Ok((limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur))
}

/// Is this error one of "out of descriptors or memory", after which accepting must back off?
pub fn is_resource_exhaustion(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// Set an int-valued socket option.
fn set_int_option(fd: RawFd, level: libc::c_int, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a live c_int and its size.
    syscall!(setsockopt(
        fd,
        level,
        option,
        (&value as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}

/// Let the kernel choose the source port at connect time rather than at bind, so one source
/// address serves as many connections as there are distinct destinations (IP_BIND_ADDRESS_NO_PORT).
pub fn set_bind_address_no_port(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
}

/// fchmod(2): set a descriptor's permission bits. On a Unix socket not yet bound, the socket
/// file bind(2) creates takes them (less the umask), so it is never more open than asked.
pub fn fchmod(fd: RawFd, mode: u32) -> io::Result<()> {
    // SAFETY: fchmod takes no pointers; a bad descriptor is an error, not undefined behaviour.
    syscall!(fchmod(fd, mode as libc::mode_t))?;
    Ok(())
}

/// TCP_DEFER_ACCEPT on a listener: a connection is handed to accept(2) only once its first
/// bytes have arrived, or after about `seconds` (the kernel counts SYN-ACK retransmissions, so it
/// rounds the time up to its retransmission schedule).
pub fn set_defer_accept(fd: RawFd, seconds: u32) -> io::Result<()> {
    let seconds = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, seconds)
}

/// CPU time used by this process so far: (user, system).
pub fn cpu_times() -> io::Result<(std::time::Duration, std::time::Duration)> {
    // SAFETY: rusage is plain old data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: usage is a live, writable rusage.
    syscall!(getrusage(libc::RUSAGE_SELF, &mut usage))?;
    let d = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok((d(usage.ru_utime), d(usage.ru_stime)))
}

/// Give SIGINT and SIGTERM their default action again, whatever this process inherited.
///
/// A shell without job control starts a background command (`cmd &`) with SIGINT ignored, and
/// an ignored signal is dropped while it is not blocked. The commands block both and wait for
/// them (`TerminationSignals`), so a later SIGINT stops them anyway; a SIGINT before that was
/// dropped, and an interrupted run went on to the end. With the default action, an early
/// signal ends the process at once, and one after the block is handled as always.
pub fn default_termination_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: SIG_DFL for a valid signal number installs no handler code; a failure leaves
        // the disposition as it was.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
}

/// In a child between fork and exec: ask for SIGTERM when the thread that started it exits,
/// and fail if `parent` is already gone (the request would then never fire). Async-signal-safe.
pub fn terminate_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointers.
    syscall!(prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong))?;
    // SAFETY: getppid takes nothing and cannot fail.
    let now = unsafe { libc::getppid() };
    if u32::try_from(now).ok() != Some(parent) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// In a child between fork and exec: leave `fd` open across exec (clear its close-on-exec
/// flag), for the program about to run to inherit. Async-signal-safe.
pub fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer flag and no pointers; a bad descriptor is an error return.
    syscall!(fcntl(fd, libc::F_SETFD, 0)).map(drop)
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array it is given.
    syscall!(pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC))?;
    // SAFETY: pipe2 succeeded: both are open descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send `signal` to process `pid` (a child this process started).
pub fn signal_process(pid: u32, signal: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill takes no pointers; an invalid pid or signal is an error return.
    syscall!(kill(pid, signal)).map(drop)
}

/// Wait in ppoll(2) until an entry of `fds` has events or `timeout` passes (None: forever);
/// returns how many entries have events. ppoll rather than poll for its nanosecond timeout:
/// poll's milliseconds would wake early and spin on sub-millisecond timers.
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> io::Result<usize> {
    let spec = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let spec_ptr = spec.as_ref().map_or(std::ptr::null(), |s| s as *const libc::timespec);
    // SAFETY: fds is a live, writable array of fds.len() pollfds for the duration of the call;
    // spec_ptr is null (wait forever) or points at a live timespec; a null sigmask leaves the
    // thread's mask unchanged.
    let n = syscall!(ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, spec_ptr, std::ptr::null()))?;
    Ok(n as usize)
}

/// shutdown(2) of the receiving direction: wakes a thread blocked in poll or recv on `fd` (it
/// reads the end of the stream) while the socket can still send, so its owner can end it in good
/// order (a TLS close_notify, a FIN).
pub fn shutdown_read(fd: RawFd) -> io::Result<()> {
    // SAFETY: shutdown takes no pointers; a descriptor that is not a socket is an error return.
    syscall!(shutdown(fd, libc::SHUT_RD)).map(drop)
}

/// shutdown(2) both directions: wakes every thread blocked in poll, recv or send on `fd`
/// (they see a hang-up), while the descriptor itself stays open for its owner to close.
pub fn shutdown_both(fd: RawFd) -> io::Result<()> {
    // SAFETY: shutdown takes no pointers; a descriptor that is not a socket is an error return.
    syscall!(shutdown(fd, libc::SHUT_RDWR)).map(drop)
}

/// Bytes the kernel has received on socket `fd` and nobody has read yet (FIONREAD).
pub fn unread_bytes(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at a live local.
    syscall!(ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Clock ticks per second, the unit of CPU times in /proc/PID/stat.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory arguments.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// Restrict the calling thread (and the threads and processes it creates from now on) to
/// `cpus`. Meant for a child process between fork and exec, so all its threads inherit it.
pub fn pin_to_cpus(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain old data; CPU_ZERO/CPU_SET only write inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu < libc::CPU_SETSIZE as usize {
            // SAFETY: cpu is below CPU_SETSIZE, so the bit is inside `set`.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
    }
    // SAFETY: set is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    syscall!(sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)).map(drop)
}

/// Send `signal` to every process in process group `group`.
pub fn signal_process_group(group: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill takes no pointers; an invalid group or signal is an error return.
    syscall!(kill(-group, signal)).map(drop)
}

#[cfg(test)]
mod tests {
    #[test]
    fn syscall_maps_minus_one_to_errno() {
        // SAFETY: close takes no pointers; -1 is never a descriptor, so nothing is closed.
        let err = syscall!(close(-1)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }
}
