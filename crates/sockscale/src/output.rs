//! Writing to stdout and stderr without panicking.
//!
//! `println!` panics when stdout is a closed pipe (`sockscale load ... | head`); a command
//! line tool should just stop writing. These macros write, flush, and ignore the error.

/// Like `println!`, ignoring a closed stdout.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, $($arg)*);
        let _ = out.flush();
    }};
}

/// Like `eprint!`, ignoring a closed stderr; flushed, for progress lines.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, $($arg)*);
        let _ = err.flush();
    }};
}

pub(crate) use {note, say};
