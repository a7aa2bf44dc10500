//! Steering the datagrams of a port's SO_REUSEPORT group by QUIC connection ID: a classic BPF
//! program attached to the group (SO_ATTACH_REUSEPORT_CBPF) that picks the socket whose index
//! the server wrote into the connection IDs it issued, so that a client whose address changes
//! (NAT rebinding, migration) still reaches the socket — the endpoint — that holds its
//! connection, where the kernel's hash of the 4-tuple would pick another.
//!
//! The kernel runs the program on the UDP payload (offset 0 is the QUIC packet) and takes its
//! result as an index into the group, in the order the sockets joined it; an index past the
//! group's end falls back to the hash (`net/core/sock_reuseport.c`: `run_bpf_filter` returns
//! no socket when `index >= socks`, and `reuseport_select_sock` then selects by hash). The
//! program returns:
//!
//! - a short-header packet (first bit 0): its destination connection ID's first byte (byte 1);
//! - a long-header Handshake packet: the same byte of its destination connection ID (length at
//!   byte 5, ID from byte 6), which the server chose;
//! - anything else — Initial and 0-RTT packets, whose destination ID the client chose, Retry,
//!   a packet too short to read, an empty ID: [`FALL_BACK`], the kernel's hash.
//!
//! A load past the packet's end ends a classic BPF program with 0 (socket 0), hence the length
//! check first.

use std::io;
use std::os::fd::RawFd;

/// A result no group reaches: the kernel falls back to its hash of the 4-tuple.
pub const FALL_BACK: u32 = u32::MAX;

/// SO_ATTACH_REUSEPORT_CBPF (asm-generic's value, which x86-64 and arm64 use).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Long-header packet types of QUIC version 1 (RFC 9000, 17.2): the two bits after the fixed bit.
const LONG_TYPE_MASK: u32 = 0x30;
const LONG_TYPE_HANDSHAKE: u32 = 0x20;
/// The shortest packet the program reads: a long header up to the first byte of its ID.
const MIN_LEN: u32 = 7;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// The steering program, as the kernel takes it.
pub fn quic_steering_program() -> Vec<libc::sock_filter> {
    use libc::{BPF_A, BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD};
    use libc::{BPF_LEN, BPF_RET, BPF_W};
    // A jump goes to the instruction after it plus its offset.
    vec![
        /* 0 */ stmt(BPF_LD | BPF_W | BPF_LEN, 0),
        /* 1 */ jump(BPF_JMP | BPF_JGE | BPF_K, MIN_LEN, 0, 10), // too short: 12
        /* 2 */ stmt(BPF_LD | BPF_B | BPF_ABS, 0),
        /* 3 */ jump(BPF_JMP | BPF_JSET | BPF_K, 0x80, 2, 0), // long header: 6
        /* 4 */ stmt(BPF_LD | BPF_B | BPF_ABS, 1),
        /* 5 */ stmt(BPF_RET | BPF_A, 0),
        /* 6 */ stmt(BPF_ALU | BPF_AND | BPF_K, LONG_TYPE_MASK),
        /* 7 */ jump(BPF_JMP | BPF_JEQ | BPF_K, LONG_TYPE_HANDSHAKE, 0, 4), // not Handshake: 12
        /* 8 */ stmt(BPF_LD | BPF_B | BPF_ABS, 5),
        /* 9 */ jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0), // no ID: 12
        /* 10 */ stmt(BPF_LD | BPF_B | BPF_ABS, 6),
        /* 11 */ stmt(BPF_RET | BPF_A, 0),
        /* 12 */ stmt(BPF_RET | BPF_K, FALL_BACK),
    ]
}

/// Attach [`quic_steering_program`] to the SO_REUSEPORT group of the bound UDP socket `fd`:
/// it steers every socket of the group, those bound before and after. Refused if the kernel
/// lacks classic BPF for reuseport groups (before 4.5) or the socket is in no group.
pub fn attach_quic_steering(fd: RawFd) -> io::Result<()> {
    let program = quic_steering_program();
    let len = u16::try_from(program.len()).map_err(|_| io::Error::other("BPF program too long"))?;
    let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
    // SAFETY: `fprog` points at `program`, alive until the call returns (the kernel copies the
    // instructions), and its size is passed with it.
    crate::syscall!(setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_ATTACH_REUSEPORT_CBPF,
        std::ptr::from_ref(&fprog).cast::<libc::c_void>(),
        std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
    ))
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::{AsRawFd, FromRawFd};

    /// Classic BPF as the kernel runs it, for the instructions the program uses: a load past
    /// the packet's end ends it with 0.
    fn run(program: &[libc::sock_filter], packet: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let ins = program[pc];
            let code = u32::from(ins.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_LEN => a = packet.len() as u32,
                c if c == libc::BPF_LD | libc::BPF_B | libc::BPF_ABS => match packet.get(ins.k as usize) {
                    Some(&b) => a = u32::from(b),
                    None => return 0,
                },
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= ins.k,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        libc::BPF_JGE => a >= ins.k,
                        libc::BPF_JEQ => a == ins.k,
                        libc::BPF_JSET => a & ins.k != 0,
                        other => panic!("jump {other:#x} not modelled"),
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                c if c == libc::BPF_RET | libc::BPF_A => return a,
                c if c == libc::BPF_RET | libc::BPF_K => return ins.k,
                other => panic!("instruction {other:#x} not modelled"),
            }
        }
    }

    /// A QUIC v1 long header of `kind` (0 Initial, 1 0-RTT, 2 Handshake, 3 Retry) with
    /// destination ID `dcid`, padded.
    fn long(kind: u8, dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc0 | (kind << 4), 0, 0, 0, 1, dcid.len() as u8];
        p.extend_from_slice(dcid);
        p.extend_from_slice(&[0; 20]);
        p
    }

    #[test]
    fn the_program_reads_the_server_chosen_connection_id_and_leaves_the_rest_to_the_hash() {
        let program = quic_steering_program();
        // Short header: the first byte of the destination ID.
        assert_eq!(run(&program, &[0x40, 3, 9, 9, 9, 9, 9, 9, 9, 9]), 3);
        assert_eq!(run(&program, &[0x5f, 200, 1, 2, 3, 4, 5, 6, 7]), 200);
        // Handshake: the server's ID.
        assert_eq!(run(&program, &long(2, &[5, 1, 2, 3, 4, 5, 6, 7])), 5);
        // Initial, 0-RTT, Retry: the client's ID, the hash decides.
        for kind in [0, 1, 3] {
            assert_eq!(run(&program, &long(kind, &[1, 2, 3, 4, 5, 6, 7, 8])), FALL_BACK, "type {kind}");
        }
        // No ID, nothing to read, too short to read.
        assert_eq!(run(&program, &long(2, &[])), FALL_BACK);
        assert_eq!(run(&program, &[]), FALL_BACK);
        assert_eq!(run(&program, &[0x40, 1, 2, 3, 4, 5]), FALL_BACK);
    }

    /// On the kernel: three sockets in a group, each gets the short-header packets that name
    /// its index, and a packet naming no socket of the group still reaches one (the hash).
    #[test]
    fn the_kernel_steers_a_reuseport_group_by_the_first_byte() {
        let bind = |port: u16| -> UdpSocket {
            let fd = crate::syscall!(socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)).unwrap();
            // SAFETY: socket() just returned this descriptor, owned by nothing else.
            let socket = unsafe { UdpSocket::from_raw_fd(fd) };
            let one: libc::c_int = 1;
            // SAFETY: the option's value is the c_int `one`, its size passed with it.
            crate::syscall!(setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                std::ptr::from_ref(&one).cast::<libc::c_void>(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ))
            .unwrap();
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: `addr` is a sockaddr_in, its size passed with it.
            crate::syscall!(bind(
                fd,
                std::ptr::from_ref(&addr).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ))
            .unwrap();
            socket
        };
        let first = bind(0);
        let port = first.local_addr().unwrap().port();
        let group = [first, bind(port), bind(port)];
        attach_quic_steering(group[0].as_raw_fd()).expect("attach");
        for s in &group {
            s.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        }
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        for round in 0..3u8 {
            for index in 0..3u8 {
                client.send_to(&[0x40, index, round, 0, 0, 0, 0, 0, 0, 0], ("127.0.0.1", port)).unwrap();
                let mut buf = [0u8; 16];
                let (n, _) = group[usize::from(index)].recv_from(&mut buf).expect("steered to its socket");
                assert_eq!(&buf[..3], &[0x40, index, round][..], "{n}");
            }
        }
        // An Initial (hash): some socket of the group receives it.
        client.send_to(&long(0, &[9; 8]), ("127.0.0.1", port)).unwrap();
        for s in &group {
            s.set_nonblocking(true).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut buf = [0u8; 64];
        while !group.iter().any(|s| s.recv_from(&mut buf).is_ok()) {
            assert!(std::time::Instant::now() < deadline, "the Initial reached no socket");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
