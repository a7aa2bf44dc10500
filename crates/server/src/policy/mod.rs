//! The server's resource policies, with no I/O at all.
//!
//! Shaped like the protocol crate and like quinn-proto or smoltcp's sockets: the state machines
//! here are fed events (bytes arrived, output taken, EOF, a socket error, a drain, the time) and
//! answer with decisions (read or not, close and why, when to wake next, pause accepting and
//! for how long). They never touch a socket, a clock or a thread, so every rule is tested with
//! plain values.
//!
//! Every engine — the readiness loop (select, poll64, signal, epoll), the thread engines
//! (blocking, threadpool), tokio and io_uring (uring, uring64) — drives each connection's
//! [`Lifecycle`], which asks these, and carries out the actions it returns. What stays in an
//! engine is only *who waits for readiness or completion, on which thread*, and the system
//! calls that carry a decision out.
//!
//! | policy | decided by |
//! |---|---|
//! | the sequence of a connection's turn (flush, read within the budget, answer, settle), and what the engine waits for next | [`Lifecycle::poll`] |
//! | may a connection read now (`--max-pending-send`, `--max-outstanding-sends`, EOF, closing, drain) | [`ConnPolicy::may_read`] |
//! | how much to read before yielding (`--read-budget`), when a short read means drained | `ReadRound`, inside [`Lifecycle`] |
//! | what a protocol verdict means | [`ConnPolicy::on_verdict`] |
//! | what a socket error means | [`close_reason`] |
//! | when a connection is finished, and why | [`ConnPolicy::finished`] |
//! | idle, first-data, header (408), flood, send-stall and drain deadlines: when, and which one fired | [`ConnPolicy::deadline`], [`ConnPolicy::expired`] |
//! | what an acceptor does next: admit a held connection, take one, end a spent `--accept-batch`, or take none until a time (back-off on EMFILE/ENFILE/ENOBUFS/ENOMEM, abort-storm hold) | [`AcceptGate`] |
//! | admitting a connection whose threads' memory maps still fit under vm.max_map_count | [`MapBudget`] |
//! | pausing accepting in an abort storm (`--abort-storm`), and resuming below its threshold | [`AbortStorm`] |
//! | which connections read at all (`--active-set`, `--active-grace`, `--active-turn`): the first N in FIFO order, rotating on close, idleness and turns | [`ActiveSet`], [`ConnPolicy::set_waiting`] |
//! | one worker's admission (`--max-conns`; refusing with the protocol's refusal, 503 unless TLS, in good order), its active set, and its drain (the one deadline, closing what is left), and when it wakes next | [`WorkerCore`] |

mod accept;
mod active;
mod conn_policy;
mod lifecycle;
mod reasons;
mod storm;
mod threads;
mod worker;

pub use accept::{AcceptFailed, AcceptGate, AcceptNext, AcceptStep};
pub use active::{ActiveConfig, ActiveSet, Entry, Handover, Swaps};
pub use conn_policy::{after, closed_by_error, Limits, Pending};
pub use lifecycle::{Action, Delivery, Fed, Lifecycle, Wait, Written};
pub use reasons::{CloseReason, Limit};
pub use storm::{shed_choice, AbortStorm, StormConfig, StormEvent};
pub use threads::MapBudget;
pub use worker::{DrainStep, Refusal, Refused, Slots, WorkerCore};
