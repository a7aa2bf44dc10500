//! What a completion is about: every operation's user data packs its kind, the connection slot
//! it belongs to and that slot's generation, so a completion that arrives after its
//! connection's slot was reused is recognised and ignored.

/// The buffer group of every worker's provided-buffer ring.
pub(super) const BUFFER_GROUP: u16 = 0;

/// What an operation's user data says it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    Recv = 1,
    Send = 2,
    Cancel = 3,
    Accept = 4,
    Wake = 5,
    Inbox = 6,
    Udp = 7,
    /// A poll for writability before the next `sendfile` of a body file.
    Poll = 8,
}

/// The slot index worker-level operations (accept, wake-up, inbox, UDP, their cancels) carry.
pub(super) const WORKER_SLOT: usize = usize::MAX >> 32;

/// User data: the operation in the top byte, 24 bits of generation, 32 bits of slot index.
pub(super) fn pack(op: Op, index: usize, generation: u32) -> u64 {
    ((op as u64) << 56) | ((u64::from(generation) & 0xff_ffff) << 32) | (index as u64 & 0xffff_ffff)
}

/// The inverse of [`pack`]; None for an operation this worker never posts.
pub(super) fn unpack(data: u64) -> (Option<Op>, usize, u32) {
    let op = match (data >> 56) as u8 {
        1 => Some(Op::Recv),
        2 => Some(Op::Send),
        3 => Some(Op::Cancel),
        4 => Some(Op::Accept),
        5 => Some(Op::Wake),
        6 => Some(Op::Inbox),
        7 => Some(Op::Udp),
        8 => Some(Op::Poll),
        _ => None,
    };
    (op, (data & 0xffff_ffff) as usize, ((data >> 32) & 0xff_ffff) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips() {
        for op in [Op::Recv, Op::Send, Op::Cancel, Op::Accept, Op::Wake, Op::Inbox, Op::Udp, Op::Poll] {
            for (index, generation) in [(0, 0), (7, 3), (WORKER_SLOT, 0), (0xffff_fffe, 0xff_ffff)] {
                assert_eq!(unpack(pack(op, index, generation)), (Some(op), index, generation));
            }
        }
        assert_eq!(unpack(0).0, None);
    }
}
