//! UDP echo: each datagram is answered with an identical datagram to its sender.
//!
//! There is no per-peer state; the reply is the datagram itself, so a server can send it from
//! the buffer it was received into.

/// The reply to one datagram.
pub fn reply(datagram: &[u8]) -> &[u8] {
    datagram
}

#[cfg(test)]
mod tests {
    #[test]
    fn reply_is_the_datagram() {
        for d in [&b""[..], b"x", &[0u8; 1472][..]] {
            assert_eq!(super::reply(d), d);
        }
    }
}
