//! The I/O models as names and data: what each one is and what it can do, written once.
//!
//! [`CAPABILITIES`] is the one table of what distinguishes the models: the seeds' counterpart,
//! the shape of the threads, how readiness or completion is delivered, which policies a model
//! cannot honour and its known limits. Everything that describes or chooses among models reads
//! it: [`Model::fixed_threads`] (config validation), [`Model::serves_udp`] (the server, bench),
//! [`Model::limitation`] (the conformance suite), `sockscale serve --help` and
//! `sockscale models`.
//!
//! This module is plain data: it imports nothing from the crate, so the configuration can name a
//! [`Model`] without depending on the engines. Running a model is `models`' business
//! ([`Model::run`] and [`Model::unavailable`] are defined there).

use std::fmt;
use std::str::FromStr;

/// Every model, in the order of the seeds' comparison (then the modern additions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    Blocking,
    Threadpool,
    Select,
    Poll64,
    Signal,
    Epoll,
    Uring,
    Uring64,
    Tokio,
}

/// The policies of the core engine, as the conformance suite checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Close connections idle for `--idle-timeout`.
    IdleTimeout,
    /// Close connections silent since they were accepted for `--first-data-timeout`, and hand
    /// over connections only with their first data (`--defer-accept`).
    FirstData,
    /// Close HTTP connections whose head is not complete within `--header-timeout`.
    HeaderTimeout,
    /// Refuse connections beyond `--max-conns`.
    MaxConns,
    /// Stop reading from, then disconnect, a client that does not read (`--max-pending-send`,
    /// `--send-timeout`).
    FloodCutoff,
    /// Drain on SIGTERM within `--drain-timeout`.
    GracefulShutdown,
    /// Serve `--proto udp`.
    Udp,
    /// Back off, without spinning, when accept runs out of descriptors.
    AcceptBackoff,
    /// Send `--body FILE` from the page cache with sendfile (`--sendfile`).
    FileBody,
    /// Pause accepting in an abort storm (`--abort-storm`).
    AbortStorm,
    /// Close the newest connections as an abort storm begins (`--abort-storm-shed`).
    StormShed,
    /// Read from only the first N connections, in FIFO order (`--active-set`).
    ActiveSet,
    /// Serve TLS (`--tls-cert`, `--tls-key`) through the TLS stage.
    Tls,
    /// Serve HTTP/2 on `--proto http`'s port (`--http2`): h2c with prior knowledge, h2 over
    /// TLS by ALPN, through the HTTP/2 stage in the shared lifecycle.
    Http2,
    /// Serve HTTP/3 over QUIC (`--http3`) on UDP at the TCP port's number, beside the TCP
    /// listener: each UDP socket read by one thread only, so that one connection's datagrams
    /// all reach the one endpoint that holds its state.
    Http3,
}

/// Which shared engine a model runs on: the family decides how a connection's lifecycle is
/// carried out; the model only who waits on which thread. The source layout follows it (a
/// directory per family, the model's file beside its family's engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// A selector reports readiness; the event loop (`readiness/`) reads and writes.
    Readiness,
    /// The kernel completes posted operations (`completion/`, io_uring).
    Completion,
    /// Threads block on one connection each, or take turns from a queue (`threads/`).
    Threads,
    /// An async runtime's reactor and tasks (`runtime/`, tokio).
    Runtime,
}

impl Family {
    /// A short identifier, for machines and tables.
    pub fn name(self) -> &'static str {
        match self {
            Family::Readiness => "readiness",
            Family::Completion => "completion",
            Family::Threads => "threads",
            Family::Runtime => "runtime",
        }
    }
}

/// How a model's threads are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadShape {
    /// `--threads` fixes the number of worker threads.
    Fixed,
    /// One thread serves every connection, whatever `--threads` says.
    One,
    /// A thread per group of connections: threads grow with connections.
    GrowsWithConnections,
    /// Threads per connection.
    PerConnection,
}

/// How many UDP sockets a model serves (`--proto udp`'s, or `--http3`'s beside its listener):
/// what a `serve --procs` parent binds for each worker, so that the port's SO_REUSEPORT group
/// holds every worker's sockets in a known order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpSockets {
    /// The model serves no UDP.
    None,
    /// One socket, read by one thread.
    One,
    /// One socket per `--threads` thread.
    PerThread,
}

/// A policy a model cannot honour, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limitation {
    pub policy: Policy,
    pub why: &'static str,
}

/// What one model is and can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub model: Model,
    /// The `--model` value.
    pub name: &'static str,
    /// The model of the seeds' Winsock comparison this one stands for, if any.
    pub seed: Option<&'static str>,
    pub family: Family,
    pub threads: ThreadShape,
    /// How many UDP sockets it serves ([`Model::udp_sockets`]).
    pub udp_sockets: UdpSockets,
    /// Which threads exist, in one line.
    pub thread_detail: &'static str,
    /// Who waits for readiness or completion, and in what, in one line.
    pub waits: &'static str,
    /// The policies this model cannot honour (the conformance suite skips them with the reason).
    pub cannot: &'static [Limitation],
    /// Known limits, one line each.
    pub limits: &'static [&'static str],
    /// The most connections one server process of this model can hold whatever the machine,
    /// when the model itself sets one (capacity plans refuse targets beyond it).
    pub ceiling: Option<Ceiling>,
}

/// A hard limit of a model on the connections one process can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling {
    /// Descriptors one process can watch (connections also share them with the listener and the
    /// standard streams, so a few less are connections).
    pub descriptors: u64,
    /// What sets it, as a user would look it up.
    pub set_by: &'static str,
}

/// What every model does with a `--body` file under TLS, said once for all of them (`sockscale
/// models`, the log at start): the bytes go through the TLS stage in the thread's buffers, so
/// the file is not sent with sendfile. The sizes are `body::SEAL_CHUNK` and `body::FILE_CHUNK`.
pub const TLS_FILE_BODY: &str = "under TLS a `--body` file is read and encrypted in 64 KiB chunks, at most 2 MiB a turn, in the thread's buffers (memory stays flat in the body's size); sendfile is off, since it would send the page cache in clear, and kernel TLS (kTLS), which would encrypt behind it, is not supported: this machine's kernel offers no `tls` ULP to build and test it on";

/// The models' capabilities, one row per model, in the order of the [`Model`] enum (a test
/// checks it): [`Model::ALL`] is read from it.
pub const CAPABILITIES: &[Capabilities] = &[
    Capabilities {
        model: Model::Blocking,
        name: "blocking",
        seed: Some("the blocking server"),
        family: Family::Threads,
        threads: ThreadShape::PerConnection,
        udp_sockets: UdpSockets::PerThread,
        thread_detail: "an acceptor, then a receive thread and a send thread per connection (`--stack-size`, default 64 KiB)",
        waits: "each thread waits in poll(2) on its socket, then makes blocking-style calls",
        cannot: &[
            Limitation {
                policy: Policy::ActiveSet,
                why: "a connection waiting for its place would still hold its two threads and their stacks: an active set would bound no memory and no operation",
            },
        ],
        limits: &[
            "two threads per connection, so the thread limits (RLIMIT_NPROC, kernel.threads-max, kernel.pid_max, the cgroup's pids.max) and 8 memory maps per connection (vm.max_map_count: about 8,000 connections a process at the default 65,530): past them, connections are refused and counted (`limit_threads`, `limit_memory_maps`)",
            "every wake-up is a context switch: more CPU per byte than the readiness models",
            "`--threads` applies to UDP only",
        ],
        ceiling: None,
    },
    Capabilities {
        model: Model::Threadpool,
        name: "threadpool",
        seed: Some("seed 003's multithreaded server"),
        family: Family::Threads,
        threads: ThreadShape::Fixed,
        udp_sockets: UdpSockets::PerThread,
        thread_detail: "an accept thread, a poller, `--threads` workers",
        waits: "a bounded ready queue; workers serve one round (read, answer, blocking send) per turn; a poller (epoll) watches idle connections and their timeouts",
        cannot: &[
            Limitation {
                policy: Policy::ActiveSet,
                why: "its `--threads` workers already bound the connections served at once, fed from one FIFO ready queue: the pool is its active set",
            },
        ],
        limits: &[
            "new connections are refused when the queue holds `--queue-depth` (128) × `--threads`",
            "a slow reader ties up a worker for up to `--send-timeout`",
            "every round crosses two threads (queue, poller): a context switch or two per request more than the readiness models",
        ],
        ceiling: None,
    },
    Capabilities {
        model: Model::Select,
        name: "select",
        seed: Some("the non-blocking select server"),
        family: Family::Readiness,
        threads: ThreadShape::One,
        udp_sockets: UdpSockets::One,
        thread_detail: "one, the model's own, whatever `--threads` says",
        waits: "select(2) over the whole descriptor range, level-triggered",
        cannot: &[],
        limits: &["about 1,020 connections (FD_SETSIZE 1024); beyond, connections are refused with a log line"],
        ceiling: Some(Ceiling { descriptors: libc::FD_SETSIZE as u64, set_by: "FD_SETSIZE" }),
    },
    Capabilities {
        model: Model::Poll64,
        name: "poll64",
        seed: Some("WSAEventSelect, 64 events per thread"),
        family: Family::Readiness,
        threads: ThreadShape::GrowsWithConnections,
        udp_sockets: UdpSockets::One,
        thread_detail: "an acceptor plus one thread per group of 64 connections",
        waits: "poll(2) per group, level-triggered; the acceptor hands connections over through an eventfd inbox",
        cannot: &[
            Limitation {
                policy: Policy::ActiveSet,
                why: "each group of 64 runs its own loop: an active set per group would bound nothing, and one across groups needs the acceptor to hand out places (not built)",
            },
        ],
        limits: &["threads grow with connections (782 at 50,000)"],
        ceiling: None,
    },
    Capabilities {
        model: Model::Signal,
        name: "signal",
        seed: Some("WSAAsyncSelect"),
        family: Family::Readiness,
        threads: ThreadShape::One,
        udp_sockets: UdpSockets::One,
        thread_detail: "one, `sockscale-signal`, whatever `--threads` says",
        waits: "queued real-time signals (F_SETSIG, O_ASYNC) read through a signalfd; on queue overflow (SIGIO) a full poll(2) scan",
        cannot: &[Limitation {
            policy: Policy::StormShed,
            why: "a shutdown made by another thread raises no signal on the socket, so the model would not see a shed connection end until its idle timeout",
        }],
        limits: &[
            "a signal per segment costs more than an epoll wake-up under bulk traffic",
            "a signal queue overflow costs a poll(2) scan of every descriptor",
        ],
        ceiling: None,
    },
    Capabilities {
        model: Model::Epoll,
        name: "epoll",
        seed: None,
        family: Family::Readiness,
        threads: ThreadShape::Fixed,
        udp_sockets: UdpSockets::PerThread,
        thread_detail: "`--threads` workers (default: CPUs)",
        waits: "edge-triggered epoll, one instance and one SO_REUSEPORT listener per thread (`--listener exclusive`: one listener with EPOLLEXCLUSIVE)",
        cannot: &[],
        limits: &[],
        ceiling: None,
    },
    Capabilities {
        model: Model::Uring,
        name: "uring",
        seed: Some("I/O completion ports"),
        family: Family::Completion,
        threads: ThreadShape::Fixed,
        udp_sockets: UdpSockets::PerThread,
        thread_detail: "`--threads` workers, a ring each",
        waits: "io_uring: multishot accept, multishot receive from a provided-buffer ring (no buffer per idle connection), one gathering send in flight per connection, completions reaped in batches; `--threads 1` is the completion-routine (APC) counterpart",
        cannot: &[],
        limits: &[
            "needs Linux 6.0 and io_uring allowed (`kernel.io_uring_disabled`, seccomp), and it says why when it is not",
            "`--accept-batch` does not apply",
        ],
        ceiling: None,
    },
    Capabilities {
        model: Model::Uring64,
        name: "uring64",
        seed: Some("overlapped I/O with events, 64 per thread"),
        family: Family::Completion,
        threads: ThreadShape::GrowsWithConnections,
        udp_sockets: UdpSockets::None,
        thread_detail: "an acceptor plus one ring and thread per group of 64 connections",
        waits: "io_uring per group, fed by the acceptor through an eventfd inbox",
        cannot: &[
            Limitation {
                policy: Policy::ActiveSet,
                why: "each group of 64 runs its own ring: an active set per group would bound nothing, and one across groups needs the acceptor to hand out places (not built)",
            },
            Limitation {
                policy: Policy::Udp,
                why: "a UDP socket is one descriptor: there are no connections to put in groups of 64",
            },
            Limitation {
                policy: Policy::Http3,
                why: "HTTP/3 runs on UDP, which this model does not serve: QUIC's connections live in one endpoint per UDP socket, not in groups of 64 descriptors",
            },
        ],
        limits: &[
            "threads grow with connections",
            "needs Linux 6.0 and io_uring allowed, as uring",
        ],
        ceiling: None,
    },
    Capabilities {
        model: Model::Tokio,
        name: "tokio",
        seed: Some("boost::asio (seed 003)"),
        family: Family::Runtime,
        threads: ThreadShape::Fixed,
        udp_sockets: UdpSockets::PerThread,
        thread_detail: "`--threads` tokio workers",
        waits: "tokio's epoll reactor; one task per connection, readiness then a non-blocking read into a pool buffer",
        cannot: &[],
        limits: &[
            "about 1.8 KiB of user memory per idle connection (task and readiness record), against ~0.3 KiB for epoll",
            "`--listener` does not apply to TCP: one accept task on one shared listener",
            "a write the socket refuses costs one extra sendmsg(2) (EAGAIN) before tokio waits for writability",
        ],
        ceiling: None,
    },
];

impl Model {
    /// Every model, in the table's order.
    pub const ALL: [Model; CAPABILITIES.len()] = {
        let mut all = [Model::Blocking; CAPABILITIES.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = CAPABILITIES[i].model;
            i += 1;
        }
        all
    };

    /// The family of shared engine it runs on.
    pub fn family(self) -> Family {
        self.capabilities().family
    }

    /// This model's row of [`CAPABILITIES`].
    pub fn capabilities(self) -> &'static Capabilities {
        &CAPABILITIES[self as usize]
    }

    /// The `--model` value.
    pub fn name(self) -> &'static str {
        self.capabilities().name
    }

    /// Whether `--threads` fixes the number of worker threads (as opposed to threads growing
    /// with connections, or a single thread).
    pub fn fixed_threads(self) -> bool {
        self.capabilities().threads == ThreadShape::Fixed
    }

    /// Why this model cannot honour `policy`, or None when it can. The conformance suite skips
    /// a case with this reason.
    pub fn limitation(self, policy: Policy) -> Option<&'static str> {
        self.capabilities().cannot.iter().find(|l| l.policy == policy).map(|l| l.why)
    }

    /// Whether the model serves HTTP/2: whether it honours [`Policy::Http2`] (every model
    /// does: the stage runs in the lifecycle they all drive).
    pub fn serves_http2(self) -> bool {
        self.limitation(Policy::Http2).is_none()
    }

    /// How many UDP sockets the model serves with `threads` threads (`--proto udp`'s, or
    /// `--http3`'s): each model binds this many, and a `serve --procs` parent binds this many
    /// per worker.
    pub fn udp_sockets(self, threads: usize) -> usize {
        match self.capabilities().udp_sockets {
            UdpSockets::None => 0,
            UdpSockets::One => 1,
            UdpSockets::PerThread => threads.max(1),
        }
    }

    /// Whether the model can serve UDP: whether it honours [`Policy::Udp`].
    pub fn serves_udp(self) -> bool {
        self.limitation(Policy::Udp).is_none()
    }

    /// Whether the model serves `--http3`: whether it honours [`Policy::Http3`].
    pub fn serves_http3(self) -> bool {
        self.limitation(Policy::Http3).is_none()
    }
}

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Model::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<_> = Model::ALL.iter().map(|m| m.name()).collect();
            format!("unknown model '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Policy {
    pub const ALL: [Policy; 15] = [
        Policy::IdleTimeout,
        Policy::FirstData,
        Policy::HeaderTimeout,
        Policy::MaxConns,
        Policy::FloodCutoff,
        Policy::GracefulShutdown,
        Policy::Udp,
        Policy::AcceptBackoff,
        Policy::FileBody,
        Policy::AbortStorm,
        Policy::StormShed,
        Policy::ActiveSet,
        Policy::Tls,
        Policy::Http2,
        Policy::Http3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::IdleTimeout => "idle-timeout",
            Policy::FirstData => "first-data",
            Policy::HeaderTimeout => "header-timeout",
            Policy::MaxConns => "max-conns",
            Policy::FloodCutoff => "flood-cutoff",
            Policy::GracefulShutdown => "graceful-shutdown",
            Policy::Udp => "udp",
            Policy::AcceptBackoff => "accept-backoff",
            Policy::FileBody => "sendfile",
            Policy::AbortStorm => "abort-storm",
            Policy::StormShed => "abort-storm-shed",
            Policy::ActiveSet => "active-set",
            Policy::Tls => "tls",
            Policy::Http2 => "http2",
            Policy::Http3 => "http3",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ThreadShape {
    /// A short identifier, for machines.
    pub fn name(self) -> &'static str {
        match self {
            ThreadShape::Fixed => "fixed",
            ThreadShape::One => "one",
            ThreadShape::GrowsWithConnections => "grows-with-connections",
            ThreadShape::PerConnection => "per-connection",
        }
    }
}

impl fmt::Display for ThreadShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThreadShape::Fixed => "fixed by --threads",
            ThreadShape::One => "one",
            ThreadShape::GrowsWithConnections => "grows with connections",
            ThreadShape::PerConnection => "per connection",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_order_of_the_enum() {
        for (i, model) in Model::ALL.into_iter().enumerate() {
            assert_eq!(model as usize, i, "{model}: the row's place is the enum's order");
            assert_eq!(model.capabilities().model, model);
        }
    }

    #[test]
    fn families_are_as_the_layout_says() {
        let of = |f: Family| Model::ALL.into_iter().filter(|m| m.family() == f).collect::<Vec<_>>();
        assert_eq!(of(Family::Readiness), [Model::Select, Model::Poll64, Model::Signal, Model::Epoll]);
        assert_eq!(of(Family::Completion), [Model::Uring, Model::Uring64]);
        assert_eq!(of(Family::Threads), [Model::Blocking, Model::Threadpool]);
        assert_eq!(of(Family::Runtime), [Model::Tokio]);
    }

    #[test]
    fn names_are_unique_and_parse_back() {
        for model in Model::ALL {
            assert_eq!(model.name().parse::<Model>(), Ok(model));
            assert_eq!(model.to_string(), model.name());
        }
        let err = "carrier-pigeon".parse::<Model>().unwrap_err();
        assert!(!err.contains('\n'), "{err}");
        for model in Model::ALL {
            assert!(err.contains(model.name()), "{err}");
        }
    }

    #[test]
    fn a_policy_is_declared_at_most_once_per_model() {
        for model in Model::ALL {
            let cannot = model.capabilities().cannot;
            for policy in Policy::ALL {
                assert!(cannot.iter().filter(|l| l.policy == policy).count() <= 1, "{model} {policy}");
            }
        }
    }

    #[test]
    fn what_the_engines_rely_on() {
        // The thread-count validation and the server's UDP check read these.
        let fixed: Vec<_> = Model::ALL.into_iter().filter(|m| m.fixed_threads()).collect();
        assert_eq!(fixed, [Model::Threadpool, Model::Epoll, Model::Uring, Model::Tokio]);
        let no_udp: Vec<_> = Model::ALL.into_iter().filter(|m| !m.serves_udp()).collect();
        let no_sockets: Vec<_> = Model::ALL.into_iter().filter(|m| m.udp_sockets(4) == 0).collect();
        assert_eq!(no_sockets, no_udp);
        assert_eq!(no_udp, [Model::Uring64]);
        assert!(Model::Uring64.limitation(Policy::Udp).is_some());
        // HTTP/3 is served on every model that serves UDP, and only there.
        for model in Model::ALL {
            assert_eq!(model.serves_http3(), model.serves_udp(), "{model}");
        }
        // Capacity plans refuse targets past a model's own ceiling; only select has one.
        let ceilings: Vec<_> =
            Model::ALL.into_iter().filter_map(|m| m.capabilities().ceiling.map(|c| (m, c.descriptors))).collect();
        assert_eq!(ceilings, [(Model::Select, 1024)]);
    }
}
