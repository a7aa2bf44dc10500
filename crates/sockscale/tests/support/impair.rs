//! A user-space netem, for kernels built without the netem qdisc.
//!
//! Two TUN devices stand in for a veth pair: one stays in the root namespace, the other is
//! moved into the test's namespace (its descriptor keeps working there). A forwarder thread
//! reads every IP packet either end sends and hands it to the other end as netem would with
//! `delay 50ms 10ms loss 2% reorder 25% 50%`, in each direction on its own: 2% are dropped; of
//! the rest, those whose draw (correlated 50% with the previous one, as netem's `reorder` is)
//! falls in the lowest 25% go through at once (as in netem, the correlation makes that about
//! 7%), and the others after a delay drawn uniformly from 40 to 60 ms, so both the
//! undelayed packets and the jitter reorder them. A TUN device without IFF_VNET_HDR gets no
//! offload bursts: each packet is at most one MTU (1500 bytes), like a segment on the wire.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What netem would be asked for.
#[derive(Clone, Copy, Debug)]
pub struct Netem {
    pub delay: Duration,
    pub jitter: Duration,
    /// Probabilities, out of 2^32.
    pub loss: u32,
    pub reorder: u32,
    pub reorder_correlation: u32,
}

/// `delay 50ms 10ms loss 2% reorder 25% 50%`.
pub const FAULTS: Netem = Netem {
    delay: Duration::from_millis(50),
    jitter: Duration::from_millis(10),
    loss: (0x1_0000_0000u64 * 2 / 100) as u32,
    reorder: (0x1_0000_0000u64 / 4) as u32,
    reorder_correlation: (0x1_0000_0000u64 / 2) as u32,
};

/// What the forwarder did, over both directions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub forwarded: u64,
    pub dropped: u64,
    pub undelayed: u64,
}

/// Open `/dev/net/tun` and attach it to a new TUN device `name` (IP packets, no header).
pub fn open_tun(name: &str) -> Result<File, String> {
    const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let tun = std::fs::OpenOptions::new().read(true).write(true).open("/dev/net/tun");
    let tun = tun.map_err(|e| format!("cannot open /dev/net/tun: {e}"))?;
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: (libc::IFF_TUN | libc::IFF_NO_PI) as _, _pad: [0; 22] };
    if name.len() >= libc::IFNAMSIZ {
        return Err(format!("interface name {name:?} is too long"));
    }
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: a valid descriptor, and a pointer to an ifreq-sized, ifreq-laid-out struct.
    if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } < 0 {
        return Err(format!("TUNSETIFF {name}: {}", std::io::Error::last_os_error()));
    }
    set_nonblocking(&tun)?;
    Ok(tun)
}

fn set_nonblocking(fd: &impl AsRawFd) -> Result<(), String> {
    // SAFETY: fcntl on a valid descriptor, with no pointers.
    let rc = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK)
    };
    if rc < 0 {
        return Err(format!("O_NONBLOCK: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 32) as u32
    }
}

/// One direction's impairment: its own generator and reorder correlation, like one netem qdisc.
struct Direction {
    rng: Rng,
    last_reorder: u32,
}

impl Direction {
    /// When the packet goes out, or None if it is lost.
    fn decide(&mut self, netem: &Netem, now: Instant) -> Option<Instant> {
        if self.rng.next() < netem.loss {
            return None;
        }
        // netem's get_crandom: a uniform draw mixed with the previous one.
        let rho = u64::from(netem.reorder_correlation);
        let draw = (u64::from(self.rng.next()) * ((1 << 32) - rho) + u64::from(self.last_reorder) * rho) >> 32;
        self.last_reorder = draw as u32;
        if (draw as u32) < netem.reorder {
            return Some(now);
        }
        let jitter = netem.jitter.as_nanos() as u64;
        let spread = u64::from(self.rng.next()) % (2 * jitter + 1);
        Some(now + netem.delay + Duration::from_nanos(spread) - netem.jitter)
    }
}

/// The forwarder between two TUN devices; stops (and closes both) when dropped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    /// Drop every packet, both ways (a cable pulled), while set.
    blackout: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<Stats>>,
}

impl Forwarder {
    pub fn start(a: File, b: File, netem: Netem, seed: u64) -> Result<Forwarder, String> {
        // SAFETY: eventfd takes no pointers; the result is checked before it is owned.
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(wake) });
        let stop = Arc::new(AtomicBool::new(false));
        let blackout = Arc::new(AtomicBool::new(false));
        let (stop2, blackout2, wake2) = (stop.clone(), blackout.clone(), wake.clone());
        let thread = std::thread::Builder::new()
            .name("netem".into())
            .spawn(move || forward([a, b], netem, seed, &stop2, &blackout2, &wake2))
            .map_err(|e| format!("cannot start the forwarder: {e}"))?;
        Ok(Forwarder { stop, blackout, wake, thread: Some(thread) })
    }

    /// Drop every packet from now on (`on`), as `loss 100%` would, or go back to the netem
    /// asked for.
    pub fn blackout(&self, on: bool) {
        self.blackout.store(on, Ordering::SeqCst);
    }

    /// Stop forwarding and close both devices (which removes them); what was done.
    pub fn finish(&mut self) -> Stats {
        self.stop.store(true, Ordering::SeqCst);
        let one = 1u64;
        // SAFETY: a valid eventfd, and a pointer to the 8 bytes passed.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        self.thread.take().map(|t| t.join().unwrap_or_default()).unwrap_or_default()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Packets waiting: (due, arrival order, the index of the device to write to, the packet).
type Queue = BinaryHeap<Reverse<(Instant, u64, usize, Vec<u8>)>>;

fn forward(
    mut tuns: [File; 2],
    netem: Netem,
    seed: u64,
    stop: &AtomicBool,
    blackout: &AtomicBool,
    wake: &OwnedFd,
) -> Stats {
    let mut dirs = [0, 1].map(|i| Direction { rng: Rng(seed ^ ((i + 1) * 0x5851_F42D_4C95_7F2D)), last_reorder: 0 });
    let mut queue = Queue::new();
    let mut stats = Stats::default();
    let mut seq = 0u64;
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        while queue.peek().is_some_and(|Reverse(p)| p.0 <= now) {
            let Some(Reverse((_, _, to, packet))) = queue.pop() else { break };
            // A write the device refuses is a lost packet, as on a wire.
            let _ = tuns[to].write(&packet);
        }
        let timeout = queue.peek().map_or(1000, |Reverse(p)| p.0.saturating_duration_since(now).as_millis() as i32 + 1);
        let mut fds = [tuns[0].as_raw_fd(), tuns[1].as_raw_fd(), wake.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: a pointer to an array of as many pollfds as passed.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) } < 0 {
            continue; // EINTR
        }
        if fds[..2].iter().any(|p| p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0) {
            break; // A device was removed under us.
        }
        for from in 0..2 {
            if fds[from].revents == 0 {
                continue;
            }
            while let Ok(n) = tuns[from].read(&mut buf) {
                if n == 0 {
                    break;
                }
                let now = Instant::now();
                if blackout.load(Ordering::Relaxed) {
                    stats.dropped += 1;
                    continue;
                }
                match dirs[from].decide(&netem, now) {
                    None => stats.dropped += 1,
                    Some(due) if due <= now => {
                        stats.undelayed += 1;
                        stats.forwarded += 1;
                        let _ = tuns[1 - from].write(&buf[..n]);
                    }
                    Some(due) => {
                        stats.forwarded += 1;
                        seq += 1;
                        queue.push(Reverse((due, seq, 1 - from, buf[..n].to_vec())));
                    }
                }
            }
        }
    }
    stats
}
