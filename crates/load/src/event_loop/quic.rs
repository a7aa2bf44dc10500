//! The datagram path of `load http --http3`: a connection's QUIC datagrams, polled from the
//! connection until it has none, leave in `sendmmsg` batches (equal ones as one GSO message)
//! through the same batches as `load udp`'s; what they carry is the connection's.

use std::os::fd::AsRawFd;

use sockscale_sys::udp::MAX_SEGMENTS;

use super::datagrams::Datagrams;
use super::{count, Conn, EventLoop, ThreadResult};
use crate::connection::{Close, Now, Profile};

/// Send what the connection's QUIC endpoint has to send now. A datagram the full socket buffer
/// refused is dropped, as one lost on the path: QUIC's loss recovery sends its frames again.
/// Err: the connection is over (what it said is in the close).
pub(super) fn send(
    conn: &mut Conn,
    datagrams: &mut Datagrams,
    buf: &mut Vec<u8>,
    profile: &Profile,
    now: Now,
    result: &mut ThreadResult,
) -> Result<(), Close> {
    loop {
        let on = &mut |event| count(result, now.ns, event);
        if !conn.writable {
            // The socket is full: nothing is polled (quinn-proto keeps it) until EPOLLOUT says
            // there is room; what happened is still told.
            return conn.core.after_datagrams(profile, now, on);
        }
        buf.clear();
        let Some((size, segment)) = conn.core.poll_datagrams(profile, now, MAX_SEGMENTS, buf, on)? else { break };
        let segment = segment.unwrap_or(size).max(1);
        for datagram in buf[..size].chunks(segment) {
            if datagrams.is_full() {
                flush(conn, datagrams, result)?;
                if !conn.writable {
                    break;
                }
            }
            datagrams.add(datagram, now.ns);
        }
    }
    if !datagrams.is_empty() {
        flush(conn, datagrams, result)?;
    }
    Ok(())
}

/// Send the batch; a full socket buffer makes the connection wait for EPOLLOUT. A datagram the
/// kernel refused carries the socket's pending error to the sender: an ICMP port unreachable
/// for an earlier one (which a read would otherwise have reported), so the connection ends.
fn flush(conn: &mut Conn, datagrams: &mut Datagrams, result: &mut ThreadResult) -> Result<(), Close> {
    let sent = datagrams.send(conn.socket.as_raw_fd(), |_| {});
    result.udp.send_calls += sent.calls as u64;
    result.udp.gso_datagrams += sent.gso_datagrams as u64;
    if sent.blocked > 0 {
        conn.writable = false;
    }
    if sent.dropped > sent.blocked {
        return Err(conn.core.quic_refused());
    }
    Ok(())
}

impl EventLoop<'_> {
    /// A QUIC connection goes: close it (H3_NO_ERROR) if it is still open, send the datagram
    /// that says so, and count its transport figures.
    pub(super) fn retire_quic(&mut self, conn: &mut Conn) {
        if std::mem::take(&mut conn.quic_handshaking) {
            // It goes in its handshake, or before `drive` saw it complete.
            self.shared.quic_handshaking.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            self.quic_handshakes -= 1;
        }
        let (result, now_ns) = (&mut self.result, self.now_ns);
        let on = &mut |event| count(result, now_ns, event);
        if let Some(last) = conn.core.quic_close(&self.shared.profile, self.now, on) {
            if !last.is_empty() {
                let _ = sockscale_sys::send(conn.socket.as_raw_fd(), &last);
            }
        }
    }
}
