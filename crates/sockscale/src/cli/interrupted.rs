//! One exit status for a run stopped by SIGINT or SIGTERM: `load` and `bench` write what they
//! measured, then exit 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), the status a
//! shell gives a command the signal killed, so `sockscale load … && next` stops at Ctrl-C and a
//! script can tell an interrupted run from a finished one (0), one that counted errors (3) or
//! one that could not run (1). `serve` is different: a signal is how it is meant to end (0).

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that stopped the run, 0 while none has.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The run was asked to stop by `signal`; the first signal is the one that counts.
pub fn record(signal: i32) {
    let _ = SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
}

/// The signal that stopped the run, if one did.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// The exit status of a run stopped by `signal`.
pub fn exit_status(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// The signal's name, for the line that says why the run ended.
pub fn name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        other => format!("signal {other}"),
    }
}

/// A run that stopped at a signal, after writing its results: what it kept and where.
#[derive(Debug)]
pub struct Stopped(pub String);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted; {}", self.0)
    }
}

impl std::error::Error for Stopped {}

#[cfg(test)]
mod tests {
    #[test]
    fn statuses_are_what_a_shell_gives_a_killed_command() {
        assert_eq!(super::exit_status(libc::SIGINT), 130);
        assert_eq!(super::exit_status(libc::SIGTERM), 143);
    }
}
