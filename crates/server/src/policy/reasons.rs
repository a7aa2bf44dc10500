//! The policy's words: why a connection closed, and which limit kept one out. Every layer
//! counts and reports in these terms (stats, metrics, the engines), so they live with the policy
//! that decides them, below everything that uses them.

use serde::Serialize;

/// Why the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The peer closed it (FIN), or it went away while we wrote (EPIPE).
    Peer,
    /// It was aborted: reset by the peer (ECONNRESET), aborted (ECONNABORTED), or timed out by
    /// TCP's retransmissions (ETIMEDOUT). Counted apart from orderly closes because a storm of
    /// these is what the seeds' admission control watches for.
    Aborted,
    /// No traffic for the idle timeout.
    Idle,
    /// Nothing received for `--first-data-timeout` after it was accepted (the seeds' sweep of
    /// accepted connections that never sent their first data).
    FirstData,
    /// An HTTP request head did not complete within the header timeout.
    HeaderTimeout,
    /// Output waiting for the client stayed over `--max-pending-send` for the send timeout.
    Flood,
    /// The client's socket took none of its pending output for the send timeout.
    SendTimeout,
    /// The client sent a request the protocol rejected (answered with a 4xx first).
    Protocol,
    /// The exchange ended normally (`Connection: close`, HTTP/1.0).
    Done,
    /// The server was shutting down.
    Shutdown,
    /// A socket error.
    Error,
    /// An HTTP/2 peer went over one of the stage's budgets (rapid reset, a CONTINUATION,
    /// SETTINGS, PING or empty-frame flood) and got GOAWAY(ENHANCE_YOUR_CALM); the kinds are
    /// counted apart (`h2_limit_*`).
    Hostile,
}

impl CloseReason {
    pub const ALL: [CloseReason; 12] = [
        CloseReason::Peer,
        CloseReason::Aborted,
        CloseReason::Idle,
        CloseReason::FirstData,
        CloseReason::HeaderTimeout,
        CloseReason::Flood,
        CloseReason::SendTimeout,
        CloseReason::Protocol,
        CloseReason::Done,
        CloseReason::Shutdown,
        CloseReason::Error,
        CloseReason::Hostile,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CloseReason::Peer => "peer",
            CloseReason::Aborted => "aborted",
            CloseReason::Idle => "idle",
            CloseReason::FirstData => "first_data",
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::Flood => "flood",
            CloseReason::SendTimeout => "send_timeout",
            CloseReason::Protocol => "protocol",
            CloseReason::Done => "done",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Error => "error",
            CloseReason::Hostile => "hostile",
        }
    }
}

/// A limit that kept the server from taking a connection in: the process's, the machine's,
/// the model's own, or the server's configuration. Counted so that a run that stops short can
/// say which one stopped it, not only that connections failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// accept(2) failed with EMFILE: the process's open-files limit (RLIMIT_NOFILE).
    OpenFiles,
    /// accept(2) failed with ENFILE: the system's open-files limit (fs.file-max).
    SystemFiles,
    /// accept(2) failed with ENOBUFS or ENOMEM, or a thread had no memory for its stack.
    Memory,
    /// A thread could not be started (EAGAIN: RLIMIT_NPROC, kernel.threads-max,
    /// kernel.pid_max or the cgroup's pids.max).
    Threads,
    /// Another thread would take the process past its memory maps (vm.max_map_count): each
    /// thread maps its stack and its signal stack, each with a guard page.
    MemoryMaps,
    /// The model cannot watch another descriptor (select's FD_SETSIZE).
    Ceiling,
    /// `--max-conns` connections were open.
    MaxConns,
    /// The model's queue of connections waiting for a worker was full.
    Queue,
    /// `--max-handshakes` TLS handshakes were in progress.
    Handshakes,
}

impl Limit {
    pub const ALL: [Limit; 9] = [
        Limit::OpenFiles,
        Limit::SystemFiles,
        Limit::Memory,
        Limit::Threads,
        Limit::MemoryMaps,
        Limit::Ceiling,
        Limit::MaxConns,
        Limit::Queue,
        Limit::Handshakes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Limit::OpenFiles => "open_files",
            Limit::SystemFiles => "system_files",
            Limit::Memory => "memory",
            Limit::Threads => "threads",
            Limit::MemoryMaps => "memory_maps",
            Limit::Ceiling => "ceiling",
            Limit::MaxConns => "max_conns",
            Limit::Queue => "queue",
            Limit::Handshakes => "handshakes",
        }
    }

    /// The limit an accept(2) or thread-start error means, if it means one.
    pub fn of_error(err: &std::io::Error) -> Option<Limit> {
        match err.raw_os_error()? {
            libc::EMFILE => Some(Limit::OpenFiles),
            libc::ENFILE => Some(Limit::SystemFiles),
            libc::ENOBUFS | libc::ENOMEM => Some(Limit::Memory),
            _ => None,
        }
    }
}
