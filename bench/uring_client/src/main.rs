//! A minimal io_uring echo load client (prototype, for measurement only).
//!
//! Closed loop, depth 1: each of N connections sends an M-byte message, waits for all M bytes
//! to come back, checks them, and sends the next, for D seconds, on one thread and one ring.
//! The bytes are the same kind of stream `sockscale load echo` sends: byte `i` of connection
//! `c` is `TABLE[(phase(c) + i) mod 64 KiB]`, so sends are slices of a static table (no copy,
//! no allocation per message) and checking is one memcmp against the same slice.
//!
//! The loop is the io_uring one: SQEs for every connection that can move are queued, then one
//! `io_uring_enter` submits them all and waits for at least one completion; all completions
//! present are then handled. Two receive strategies:
//!
//! - `--mode recv`: one Recv SQE per message into the connection's own M-byte buffer, with
//!   MSG_WAITALL (the kernel retries until all M bytes are in), armed together with the send.
//! - `--mode multishot`: one multishot Recv per connection for the whole run, with buffers
//!   picked from a provided-buffer ring, checked in place and given straight back.
//!
//! Like the epoll engine, every completed message's latency is recorded in a histogram (here
//! a fixed log-linear one), from one clock read per loop turn.
//!
//! Output: one JSON object on stdout.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use sockscale_load::pattern::{Pattern, TABLE};

const BUF_GROUP: u16 = 7;

const OP_SEND: u64 = 1;
const OP_RECV: u64 = 2;

/// Log-linear latency histogram in nanoseconds: 16 sub-buckets per power of two.
struct Hist {
    counts: Box<[u64; 64 * 16]>,
    total: u64,
}

impl Hist {
    fn new() -> Self {
        Hist { counts: Box::new([0; 64 * 16]), total: 0 }
    }

    #[inline]
    fn bucket(v: u64) -> usize {
        let v = v.max(16);
        let exp = 63 - v.leading_zeros() as usize;
        let sub = ((v >> (exp - 4)) & 15) as usize;
        exp * 16 + sub
    }

    #[inline]
    fn record(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.total += 1;
    }

    /// Upper edge of the bucket holding quantile q.
    fn quantile(&self, q: f64) -> u64 {
        let want = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                let (exp, sub) = (i / 16, (i % 16) as u64);
                return ((16 + sub + 1) << exp) >> 4;
            }
        }
        0
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Recv,
    Multishot,
}

struct Opts {
    addr: SocketAddr,
    conns: usize,
    len: usize,
    duration: Duration,
    mode: Mode,
    skip_send_cqe: bool,
    fixed_files: bool,
    bufs: u16,
    buf_size: usize,
}

fn usage() -> ! {
    eprintln!(
        "usage: uring_client ADDR [-c CONNS] [-l LEN] [-d SECS] [--mode recv|multishot] \
         [--skip-send-cqe] [--fixed-files] [--bufs N] [--buf-size BYTES]"
    );
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut args = std::env::args().skip(1);
    let mut o = Opts {
        addr: "127.0.0.1:8080".parse().unwrap(),
        conns: 10,
        len: 64,
        duration: Duration::from_secs(5),
        mode: Mode::Recv,
        skip_send_cqe: false,
        fixed_files: false,
        bufs: 4096,
        buf_size: 4096,
    };
    let mut have_addr = false;
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "-c" => o.conns = val().parse().unwrap_or_else(|_| usage()),
            "-l" => o.len = val().parse().unwrap_or_else(|_| usage()),
            "-d" => o.duration = Duration::from_secs_f64(val().parse().unwrap_or_else(|_| usage())),
            "--mode" => {
                o.mode = match val().as_str() {
                    "recv" => Mode::Recv,
                    "multishot" => Mode::Multishot,
                    _ => usage(),
                }
            }
            "--skip-send-cqe" => o.skip_send_cqe = true,
            "--fixed-files" => o.fixed_files = true,
            "--bufs" => o.bufs = val().parse().unwrap_or_else(|_| usage()),
            "--buf-size" => o.buf_size = val().parse().unwrap_or_else(|_| usage()),
            "-h" | "--help" => usage(),
            s if !have_addr && !s.starts_with('-') => {
                o.addr = s.parse().unwrap_or_else(|_| usage());
                have_addr = true;
            }
            _ => usage(),
        }
    }
    if !have_addr || o.conns == 0 || o.len == 0 || o.len > TABLE || !o.bufs.is_power_of_two() {
        usage();
    }
    o
}

fn raise_nofile() {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

struct Conn {
    fd: RawFd,
    phase: u32,
    /// Stream offset of the current message's first byte.
    msg_off: u64,
    /// Bytes of the current message handed to the kernel and confirmed sent.
    sent: usize,
    /// Bytes of the current message received and checked.
    recvd: usize,
    send_inflight: bool,
    recv_inflight: bool,
    stamp_ns: u64,
    dead: bool,
}

/// A provided-buffer ring (the same layout the server's uring models use).
struct BufRing {
    entries: *mut types::BufRingEntry,
    ring_bytes: usize,
    mem: Box<[u8]>,
    buf_size: usize,
    count: u16,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring, count: u16, buf_size: usize, group: u16) -> io::Result<Self> {
        let page = 4096;
        let ring_bytes = (count as usize * std::mem::size_of::<types::BufRingEntry>()).div_ceil(page) * page;
        // SAFETY: anonymous private mapping, no hint.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut br = BufRing {
            entries: ptr.cast(),
            ring_bytes,
            mem: vec![0u8; count as usize * buf_size].into_boxed_slice(),
            buf_size,
            count,
            tail: 0,
        };
        // SAFETY: page-aligned mapping of `count` entries that outlives the ring's use of it
        // (the process exits without unregistering; Drop unmaps only after the ring is gone).
        unsafe { ring.submitter().register_buf_ring_with_flags(ptr as u64, count, group, 0)? };
        for bid in 0..count {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    #[inline]
    fn push(&mut self, bid: u16) {
        let i = (self.tail & (self.count - 1)) as usize;
        // SAFETY: i < count, inside the mapping, past the published tail.
        let e = unsafe { &mut *self.entries.add(i) };
        e.set_addr(self.mem.as_ptr() as u64 + (bid as usize * self.buf_size) as u64);
        e.set_len(self.buf_size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    #[inline]
    fn publish(&self) {
        // SAFETY: the tail is the u16 the kernel reads with acquire semantics.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *mut u16;
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }

    #[inline]
    fn get(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.buf_size;
        &self.mem[start..start + len.min(self.buf_size)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.entries.cast(), self.ring_bytes) };
    }
}

struct Client {
    ring: IoUring,
    opts: Opts,
    pattern: Pattern,
    conns: Vec<Conn>,
    /// `--mode recv`: each connection's M-byte receive buffer, all in one allocation.
    rbufs: Box<[u8]>,
    bufring: Option<BufRing>,
    hist: Hist,
    start: Instant,
    now_ns: u64,
    stopping: bool,
    completed: u64,
    bytes_sent: u64,
    bytes_received: u64,
    mismatches: u64,
    errors: u64,
    enobufs: u64,
    rearms: u64,
    loops: u64,
    enters: u64,
    cqes_seen: u64,
    cqes: Vec<(u64, i32, u32)>,
}

impl Client {
    fn fd(&self, i: usize) -> types::Fd {
        types::Fd(self.conns[i].fd)
    }

    /// Queue an SQE, submitting first if the queue is full.
    #[inline]
    fn push(&mut self, sqe: squeue::Entry) {
        // SAFETY: every buffer an SQE names (the pattern table, the receive buffers, the
        // buffer ring) lives as long as the ring.
        unsafe {
            while self.ring.submission().push(&sqe).is_err() {
                self.ring.submit().expect("submit");
                self.enters += 1;
            }
        }
    }

    #[inline]
    fn queue_send(&mut self, i: usize) {
        let c = &self.conns[i];
        let data = self.pattern.slice(c.phase, c.msg_off + c.sent as u64, self.opts.len - c.sent);
        let sqe = if self.opts.fixed_files {
            opcode::Send::new(types::Fixed(i as u32), data.as_ptr(), data.len() as u32)
        } else {
            opcode::Send::new(self.fd(i), data.as_ptr(), data.len() as u32)
        };
        let mut sqe = sqe.flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL).build().user_data(((i as u64) << 8) | OP_SEND);
        if self.opts.skip_send_cqe {
            sqe = sqe.flags(squeue::Flags::SKIP_SUCCESS);
        } else {
            self.conns[i].send_inflight = true;
        }
        self.push(sqe);
    }

    #[inline]
    fn queue_recv(&mut self, i: usize) {
        let c = &self.conns[i];
        let len = self.opts.len;
        let ud = ((i as u64) << 8) | OP_RECV;
        let sqe = match self.opts.mode {
            Mode::Recv => {
                // SAFETY: within rbufs: i * len + recvd < (i + 1) * len.
                let ptr = unsafe { self.rbufs.as_ptr().add(i * len + c.recvd) } as *mut u8;
                let n = (len - c.recvd) as u32;
                if self.opts.fixed_files {
                    opcode::Recv::new(types::Fixed(i as u32), ptr, n).flags(libc::MSG_WAITALL).build()
                } else {
                    opcode::Recv::new(self.fd(i), ptr, n).flags(libc::MSG_WAITALL).build()
                }
            }
            Mode::Multishot => {
                if self.opts.fixed_files {
                    opcode::RecvMulti::new(types::Fixed(i as u32), BUF_GROUP).build()
                } else {
                    opcode::RecvMulti::new(self.fd(i), BUF_GROUP).build()
                }
            }
        };
        self.conns[i].recv_inflight = true;
        self.push(sqe.user_data(ud));
    }

    /// Begin connection i's next message.
    #[inline]
    fn begin(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if self.stopping || c.dead {
            return;
        }
        c.sent = 0;
        c.recvd = 0;
        c.stamp_ns = self.now_ns;
        self.queue_send(i);
        if self.opts.mode == Mode::Recv {
            self.queue_recv(i);
        }
    }

    /// The current message is complete when all of it is back; the send's completion (if
    /// we asked for one) must also be in, so no SQE of the connection is left in flight.
    #[inline]
    fn maybe_next(&mut self, i: usize) {
        let len = self.opts.len;
        let c = &mut self.conns[i];
        if c.recvd == len && !c.send_inflight && (self.opts.mode == Mode::Multishot || !c.recv_inflight) {
            self.completed += 1;
            self.hist.record(self.now_ns.saturating_sub(c.stamp_ns));
            c.msg_off += len as u64;
            self.begin(i);
        }
    }

    fn on_cqe(&mut self, ud: u64, res: i32, flags: u32) {
        let i = (ud >> 8) as usize;
        let len = self.opts.len;
        match ud & 0xff {
            OP_SEND => {
                let c = &mut self.conns[i];
                c.send_inflight = false;
                if res < 0 {
                    if !c.dead {
                        self.errors += 1;
                        c.dead = true;
                    }
                    return;
                }
                c.sent += res as usize;
                self.bytes_sent += res as u64;
                if c.sent < len {
                    // Short send (MSG_WAITALL makes this rare): send the rest.
                    self.queue_send(i);
                    return;
                }
                self.maybe_next(i);
            }
            OP_RECV => match self.opts.mode {
                Mode::Recv => {
                    let c = &mut self.conns[i];
                    c.recv_inflight = false;
                    if res <= 0 {
                        if !c.dead {
                            self.errors += 1;
                            c.dead = true;
                        }
                        return;
                    }
                    let got = res as usize;
                    self.bytes_received += got as u64;
                    let from = c.recvd;
                    c.recvd += got;
                    let expected = self.pattern.slice(c.phase, c.msg_off + from as u64, got);
                    let start = i * len + from;
                    if &self.rbufs[start..start + got] != expected {
                        self.mismatches += 1;
                        c.dead = true;
                        return;
                    }
                    if c.recvd < len {
                        self.queue_recv(i);
                        return;
                    }
                    if self.opts.skip_send_cqe {
                        self.bytes_sent += len as u64;
                    }
                    self.maybe_next(i);
                }
                Mode::Multishot => {
                    let more = cqueue::more(flags);
                    if res == -libc::ENOBUFS {
                        self.enobufs += 1;
                    } else if res <= 0 {
                        let c = &mut self.conns[i];
                        c.recv_inflight = more;
                        if !c.dead {
                            self.errors += 1;
                            c.dead = true;
                        }
                        return;
                    } else {
                        let got = res as usize;
                        self.bytes_received += got as u64;
                        let bid = cqueue::buffer_select(flags).expect("multishot recv without a buffer");
                        let br = self.bufring.as_mut().unwrap();
                        let c = &mut self.conns[i];
                        let ok = c.recvd + got <= len
                            && br.get(bid, got) == self.pattern.slice(c.phase, c.msg_off + c.recvd as u64, got);
                        br.push(bid);
                        br.publish();
                        if !ok {
                            self.mismatches += 1;
                            c.dead = true;
                        } else {
                            c.recvd += got;
                            if c.recvd == len {
                                if self.opts.skip_send_cqe {
                                    self.bytes_sent += len as u64;
                                }
                                self.maybe_next(i);
                            }
                        }
                    }
                    let c = &mut self.conns[i];
                    c.recv_inflight = more;
                    if !more && !c.dead && !self.stopping {
                        self.rearms += 1;
                        self.queue_recv(i);
                    }
                }
            },
            _ => {}
        }
    }

    fn run(&mut self) -> Duration {
        self.start = Instant::now();
        let end = self.start + self.opts.duration;
        for i in 0..self.conns.len() {
            if self.opts.mode == Mode::Multishot {
                self.queue_recv(i);
            }
            self.begin(i);
        }
        let ts = types::Timespec::new().nsec(100_000_000);
        let args = types::SubmitArgs::new().timespec(&ts);
        loop {
            self.loops += 1;
            self.enters += 1;
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
                Err(e) => panic!("io_uring_enter: {e}"),
            }
            let now = Instant::now();
            self.now_ns = now.duration_since(self.start).as_nanos() as u64;
            if now >= end {
                self.stopping = true;
                return now - self.start;
            }
            let mut cqes = std::mem::take(&mut self.cqes);
            cqes.clear();
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            self.cqes_seen += cqes.len() as u64;
            for &(ud, res, flags) in &cqes {
                self.on_cqe(ud, res, flags);
            }
            self.cqes = cqes;
        }
    }
}

fn main() -> io::Result<()> {
    let opts = parse();
    raise_nofile();
    let c = opts.conns as u32;
    let sq = (2 * c).next_power_of_two().clamp(64, 32768);
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .setup_defer_taskrun()
        .setup_cqsize(sq * 4)
        .build(sq)?;

    let mut sockets = Vec::with_capacity(opts.conns);
    let connect_start = Instant::now();
    for _ in 0..opts.conns {
        let s = TcpStream::connect(opts.addr)?;
        s.set_nodelay(true)?;
        sockets.push(s);
    }
    let connect_s = connect_start.elapsed().as_secs_f64();
    if opts.fixed_files {
        let fds: Vec<RawFd> = sockets.iter().map(|s| s.as_raw_fd()).collect();
        ring.submitter().register_files(&fds)?;
    }
    let bufring = match opts.mode {
        Mode::Multishot => Some(BufRing::new(&ring, opts.bufs, opts.buf_size, BUF_GROUP)?),
        Mode::Recv => None,
    };
    let conns = sockets
        .iter()
        .enumerate()
        .map(|(i, s)| Conn {
            fd: s.as_raw_fd(),
            phase: Pattern::phase(i as u64),
            msg_off: 0,
            sent: 0,
            recvd: 0,
            send_inflight: false,
            recv_inflight: false,
            stamp_ns: 0,
            dead: false,
        })
        .collect();
    let rbufs = vec![0u8; if opts.mode == Mode::Recv { opts.conns * opts.len } else { 0 }].into_boxed_slice();
    let mut client = Client {
        ring,
        pattern: Pattern::new(0x5eed_5ca1e),
        conns,
        rbufs,
        bufring,
        hist: Hist::new(),
        start: Instant::now(),
        now_ns: 0,
        stopping: false,
        completed: 0,
        bytes_sent: 0,
        bytes_received: 0,
        mismatches: 0,
        errors: 0,
        enobufs: 0,
        rearms: 0,
        loops: 0,
        enters: 0,
        cqes_seen: 0,
        cqes: Vec::with_capacity(sq as usize * 4),
        opts,
    };
    let elapsed = client.run();
    let secs = elapsed.as_secs_f64();
    let o = &client.opts;
    let dead = client.conns.iter().filter(|c| c.dead).count();
    println!(
        "{{\"engine\":\"io_uring\",\"mode\":\"{}\",\"skip_send_cqe\":{},\"fixed_files\":{},\"connections\":{},\
         \"length\":{},\"connect_s\":{:.4},\"elapsed_s\":{:.4},\"messages\":{},\"bytes\":{},\"bytes_sent\":{},\
         \"bytes_received\":{},\"msgs_per_s\":{:.1},\"mismatches\":{},\"errors\":{},\"dead_connections\":{},\
         \"enobufs\":{},\"multishot_rearms\":{},\"loops\":{},\"io_uring_enters\":{},\"cqes\":{},\
         \"latency_p50_us\":{:.1},\"latency_p99_us\":{:.1}}}",
        if o.mode == Mode::Recv { "recv" } else { "multishot" },
        o.skip_send_cqe,
        o.fixed_files,
        o.conns,
        o.len,
        connect_s,
        secs,
        client.completed,
        client.completed * o.len as u64,
        client.bytes_sent,
        client.bytes_received,
        client.completed as f64 / secs,
        client.mismatches,
        client.errors,
        dead,
        client.enobufs,
        client.rearms,
        client.loops,
        client.enters,
        client.cqes_seen,
        client.hist.quantile(0.5) as f64 / 1e3,
        client.hist.quantile(0.99) as f64 / 1e3,
    );
    // Exit without tearing down: sockets close with the process, as a load tool's would.
    std::process::exit(if client.mismatches > 0 { 1 } else { 0 })
}
