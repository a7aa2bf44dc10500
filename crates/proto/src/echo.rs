//! TCP echo: every byte received is sent back, in order.
//!
//! The answer refers to the input by range instead of copying it, so a server can write the
//! echo straight from its receive buffer.

use crate::{Output, Verdict};

/// Echo keeps no state between reads.
#[derive(Debug, Default, Clone, Copy)]
pub struct EchoSession;

impl EchoSession {
    pub fn on_input(&mut self, input: &[u8], out: &mut Output) -> Verdict {
        out.push_input(0..input.len());
        Verdict::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_every_byte_in_order() {
        let mut session = EchoSession;
        let mut out = Output::default();
        let mut echoed = Vec::new();
        for chunk in [&b"hello"[..], b"", b" ", b"world\x00\xff"] {
            out.clear();
            assert_eq!(session.on_input(chunk, &mut out), Verdict::Continue);
            echoed.extend(out.to_vec(chunk));
        }
        assert_eq!(echoed, b"hello world\x00\xff");
    }
}
