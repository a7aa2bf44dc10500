//! Test harness: a `sockscale serve` process on 127.0.0.1:0, and small blocking clients.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sockscale");

/// Skip (returning true) when `model` cannot run on this machine, saying why.
pub mod browser;
pub mod h2;
pub mod h3;
pub mod quic_hostile;
pub mod tls;
pub mod ws;

pub fn unavailable(model: &str) -> bool {
    let parsed = sockscale_server::Model::from_str(model).expect("a model the library knows");
    match parsed.unavailable() {
        Some(reason) => {
            eprintln!("skipped: the {model} model is unavailable here: {reason}");
            true
        }
        None => false,
    }
}

/// Skip (returning true) when `model` declares it cannot honour `policy`.
pub fn skip(model: &str, policy: sockscale_server::Policy) -> bool {
    let parsed = sockscale_server::Model::from_str(model).expect("a model the library knows");
    match parsed.limitation(policy) {
        Some(reason) => {
            eprintln!("skipped: {model} cannot honour {policy:?}: {reason}");
            true
        }
        None => false,
    }
}

/// Instantiate a suite's cases for every model of the library's table: `for_every_model!(suite)`
/// invokes `suite!(blocking, threadpool, …)`, the suite's macro making one module of `#[test]`s a
/// model, and adds `every_model_of_the_table_is_in_the_suite`. A macro needs its models when it
/// compiles, so this is the one place the suites write their names; that test fails when they
/// differ from the table (`Model::ALL` and `sockscale models --json`), so a new model cannot
/// skip a suite: it is added here, once, for all of them.
#[allow(unused_macros)] // Unused in the test binaries that are not suites.
macro_rules! for_every_model {
    ($suite:ident) => {
        $crate::support::for_every_model!(@models $suite: blocking, threadpool, select, poll64, signal, epoll, uring, uring64, tokio);
    };
    (@models $suite:ident: $($model:ident),*) => {
        $suite!($($model),*);

        #[test]
        fn every_model_of_the_table_is_in_the_suite() {
            $crate::support::assert_models_are_the_table(stringify!($suite), &[$(stringify!($model)),*]);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use for_every_model;

/// Fail unless `listed`, the models a suite instantiates its cases for, are the table's, in its
/// order: the library's `Model::ALL` and what `sockscale models --json` prints.
pub fn assert_models_are_the_table(suite: &str, listed: &[&str]) {
    let library: Vec<&str> = sockscale_server::Model::ALL.iter().map(|m| m.name()).collect();
    let out = Command::new(BIN).args(["models", "--json"]).output().expect("run sockscale models --json");
    assert!(out.status.success(), "sockscale models --json: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("models --json prints JSON");
    let printed: Vec<&str> =
        json.as_array().expect("an array of models").iter().map(|m| m["name"].as_str().expect("a name")).collect();
    assert_eq!(library, printed, "Model::ALL and `sockscale models --json` differ");
    assert_eq!(
        listed,
        library.as_slice(),
        "the {suite} suite's models are not the table's: the list is `for_every_model!` in tests/support/mod.rs"
    );
}

/// Raise this process's open-files soft limit to the hard limit, for tests that hold
/// thousands of client sockets.
pub fn raise_nofile() {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the rlimit we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

/// A running server process; killed if the test ends without stopping it.
pub struct ServerProc {
    child: Option<Child>,
    /// The TCP or UDP address served (0.0.0.0:0 for a Unix socket: see `unix`).
    pub addr: SocketAddr,
    /// The socket file of a server listening on `unix:PATH`.
    pub unix: Option<std::path::PathBuf>,
    stdout: Receiver<String>,
    /// Lines `wait_for_line` has taken from `stdout` already, in order.
    seen: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// What a stopped server printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: String,
    pub took: Duration,
}

impl Finished {
    /// The counters of the `final` line.
    pub fn counters(&self) -> HashMap<String, i64> {
        let line = self
            .stdout
            .iter()
            .find(|l| l.starts_with("final "))
            .unwrap_or_else(|| panic!("no final line in {:?}\n{}", self.stdout, self.stderr));
        line["final ".len()..]
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.parse().unwrap_or_else(|_| panic!("bad counter {kv}", kv = k))))
            .collect()
    }

    pub fn counter(&self, name: &str) -> i64 {
        *self.counters().get(name).unwrap_or_else(|| panic!("no counter {name}"))
    }
}

impl ServerProc {
    /// `sockscale serve --model MODEL --listen 127.0.0.1:0 ARGS...`
    pub fn start(model: &str, args: &[&str]) -> ServerProc {
        Self::start_limited(model, args, None)
    }

    /// As `start`, listening on `listen` (`unix:PATH`, say).
    pub fn start_at(model: &str, listen: &str, args: &[&str]) -> ServerProc {
        Self::start_on(model, listen, args, None)
    }

    /// As `start`, with the server's open-files limit lowered to `nofile`.
    pub fn start_limited(model: &str, args: &[&str], nofile: Option<u64>) -> ServerProc {
        Self::start_on(model, "127.0.0.1:0", args, nofile)
    }

    fn start_on(model: &str, listen: &str, args: &[&str], nofile: Option<u64>) -> ServerProc {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--model", model, "--listen", listen]);
        // Two workers unless the case chooses.
        if !args.contains(&"--threads") {
            cmd.args(["--threads", "2"]);
        }
        cmd.args(args).env("RUST_LOG", "warn");
        if let Some(limit) = nofile {
            // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
            unsafe {
                cmd.pre_exec(move || {
                    let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        Self::spawn(cmd)
    }

    /// Run `cmd`, a `sockscale serve` (or a wrapper that execs one in place, such as `ip netns
    /// exec`), with piped output, and wait for its `listening on` line.
    pub fn spawn(mut cmd: Command) -> ServerProc {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let first = rx.recv_timeout(Duration::from_secs(10));
        let (addr, unix) = match first {
            Ok(line) if line.starts_with("listening on unix:") => {
                (SocketAddr::from(([0, 0, 0, 0], 0)), Some(line["listening on unix:".len()..].into()))
            }
            Ok(line) if line.starts_with("listening on ") => {
                (line["listening on ".len()..].parse().expect("address"), None)
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not start: {other:?}; stderr: {}", stderr.join().unwrap_or_default());
            }
        };
        ServerProc { child: Some(child), addr, unix, stdout: rx, seen: Vec::new(), stderr }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory arguments; the pid is our live child.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Resident set size in KiB.
    pub fn rss_kib(&self) -> u64 {
        proc_status_kib(self.pid(), "VmRSS:")
    }

    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count())
    }

    /// Connections waiting in the accept queues of the listeners on the server's port, from the
    /// rx_queue column of /proc/net/tcp's LISTEN rows.
    pub fn accept_queue(&self) -> usize {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        let port = format!(":{:04X}", self.addr.port());
        table
            .lines()
            .skip(1)
            .filter_map(|row| {
                let fields: Vec<&str> = row.split_whitespace().collect();
                let listening =
                    fields.get(1).is_some_and(|local| local.ends_with(&port)) && fields.get(3) == Some(&"0A");
                let queues = fields.get(4).filter(|_| listening)?;
                usize::from_str_radix(queues.split_once(':')?.1, 16).ok()
            })
            .sum()
    }

    /// The TCP ports the server listens on (its service, and `--metrics` if on), from the
    /// LISTEN rows of /proc/net/tcp whose sockets are among its descriptors.
    pub fn listening_ports(&self) -> Vec<u16> {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) else { return Vec::new() };
        let inodes: Vec<String> = dir
            .filter_map(Result::ok)
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter_map(|t| t.to_string_lossy().strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
            .collect();
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        let mut ports: Vec<u16> = table
            .lines()
            .skip(1)
            .filter_map(|row| {
                let f: Vec<&str> = row.split_whitespace().collect();
                let listening = f.get(3) == Some(&"0A") && f.get(9).is_some_and(|i| inodes.iter().any(|x| x == i));
                let port = f.get(1).filter(|_| listening)?.rsplit_once(':')?.1;
                u16::from_str_radix(port, 16).ok()
            })
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// The address of the server's `--metrics 127.0.0.1:0` endpoint: the port it listens on
    /// besides its service's, once it is up (within 5 s).
    pub fn metrics_addr(&self) -> SocketAddr {
        let mut found = None;
        let up = eventually(Duration::from_secs(5), || {
            found = self.listening_ports().into_iter().find(|&p| p != self.addr.port());
            found.is_some()
        });
        assert!(up, "no metrics listener besides port {}", self.addr.port());
        SocketAddr::from(([127, 0, 0, 1], found.expect("a port")))
    }

    /// Open descriptors that are sockets (listeners and connections), from /proc/PID/fd.
    pub fn open_sockets(&self) -> usize {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) else { return 0 };
        dir.filter_map(Result::ok)
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:")))
            .count()
    }

    /// User plus system CPU time, in clock ticks, from /proc/PID/stat.
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + fields.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    }

    pub fn threads(&self) -> u64 {
        proc_status_kib(self.pid(), "Threads:")
    }

    /// Still running: not exited, not a zombie.
    pub fn alive(&mut self) -> Result<(), String> {
        let pid = self.pid();
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            return Err(format!("exited: {status:?}"));
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| format!("/proc/{pid}: {e}"))?;
        let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).unwrap_or("?");
        if state == "Z" || state == "X" {
            return Err(format!("state {state}"));
        }
        Ok(())
    }

    /// SIGTERM, then wait up to `limit` for exit.
    pub fn stop_within(mut self, limit: Duration) -> Finished {
        let started = Instant::now();
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().expect("child");
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not exit within {limit:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = started.elapsed();
        let stdout = self.seen.drain(..).chain(self.stdout.iter()).collect();
        let stderr = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new)).join().unwrap_or_default();
        Finished { status, stdout, stderr, took }
    }

    /// Stop with SIGKILL, for tests that only need the process gone; returns its stderr.
    pub fn kill(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        std::mem::replace(&mut self.stderr, std::thread::spawn(String::new)).join().unwrap_or_default()
    }

    /// Wait up to `limit` for a line of stdout that satisfies `wanted`; whether one came. The
    /// lines read meanwhile stay in what `stop` returns.
    pub fn wait_for_line(&mut self, limit: Duration, wanted: impl Fn(&str) -> bool) -> bool {
        let until = Instant::now() + limit;
        if self.seen.iter().any(|l| wanted(l)) {
            return true;
        }
        while let Ok(line) = self.stdout.recv_timeout(until.saturating_duration_since(Instant::now())) {
            let found = wanted(&line);
            self.seen.push(line);
            if found {
                return true;
            }
        }
        false
    }

    pub fn stop(self) -> Finished {
        self.stop_within(Duration::from_secs(15))
    }

    /// A client of a server on `unix:PATH`.
    pub fn connect_unix(&self) -> std::os::unix::net::UnixStream {
        let path = self.unix.as_ref().expect("a server on a Unix socket");
        let s = std::os::unix::net::UnixStream::connect(path).expect("connect to the Unix socket");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn proc_status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Deterministic pseudo-random bytes (xorshift64*), different per seed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// One parsed HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Reads responses off a stream, keeping bytes that belong to the next one.
/// An HTTP/1.1 client over a stream: a TCP socket, or a TLS session over one.
pub struct HttpReader<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl<S: Read + Write> HttpReader<S> {
    pub fn new(stream: S) -> Self {
        HttpReader { stream, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    /// Read one response; `head_only` for the answer to HEAD. None if the server closed first.
    pub fn response(&mut self, head_only: bool) -> Option<Response> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(head_len)) = parsed.parse(&self.buf) {
                let status = parsed.code.expect("status");
                let headers: Vec<(String, String)> = parsed
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let length: usize = if head_only || status == 100 {
                    0
                } else {
                    headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                        .map(|(_, v)| v.trim().parse().expect("content-length"))
                        .unwrap_or(0)
                };
                while self.buf.len() < head_len + length {
                    if !self.fill() {
                        panic!("connection closed inside a response body");
                    }
                }
                let body = self.buf[head_len..head_len + length].to_vec();
                self.buf.drain(..head_len + length);
                return Some(Response { status, headers, body });
            }
            if !self.fill() {
                assert!(
                    self.buf.is_empty(),
                    "connection closed inside a response head: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
        }
    }

    /// True once the server has closed: reads return EOF or a reset, with no bytes.
    pub fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match read_some(&mut self.stream, &mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
            ),
        }
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16384];
        match read_some(&mut self.stream, &mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            // A TLS client sees a close without close_notify as UnexpectedEof.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof) => {
                false
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }
}

/// One `read`, retried when a signal interrupts it. The test process itself probes io_uring
/// (`Model::unavailable`), and ring teardown can deliver task work that wakes a blocking read
/// with EINTR; that is not the timeout or close a test is waiting for.
pub fn read_some(stream: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// One GET of `/metrics` at `addr`, which answers and closes: the whole response ("" if the
/// endpoint is not up yet).
pub fn scrape(addr: std::net::SocketAddr) -> String {
    let Ok(mut stream) = TcpStream::connect(addr) else { return String::new() };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

/// Wait up to 5 s for the metrics at `addr` to show each `(series, value)`, the series as
/// printed (`h2_limit_hits_total{limit="ping_flood"}`, without the `sockscale_` prefix);
/// Err: the last scrape.
pub fn metrics_show(addr: std::net::SocketAddr, want: &[(&str, u64)]) -> Result<(), String> {
    let mut last = String::new();
    let lines: Vec<String> = want.iter().map(|(series, v)| format!("\nsockscale_{series} {v}\n")).collect();
    if eventually(Duration::from_secs(5), || {
        last = scrape(addr);
        lines.iter().all(|l| last.contains(l.as_str()))
    }) {
        Ok(())
    } else {
        Err(format!("wanted {lines:?} in:\n{last}"))
    }
}

/// Poll `done` every 20 ms until it holds or `limit` passes; whether it held.
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Set SO_RCVBUF (the kernel doubles it, and stops growing it).
pub fn set_rcvbuf(stream: &TcpStream, bytes: libc::c_int) {
    // SAFETY: a valid descriptor, and a pointer to a c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
}

/// Close with SO_LINGER 0, so the kernel sends RST instead of FIN.
pub fn reset(stream: TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid descriptor, and a pointer to a linger of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&stream),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    drop(stream);
}

/// Ok if nothing arrives on `stream` within `wait`: the server is not serving it (an echo
/// client that sent a byte waits in the backlog); else what the read returned.
pub fn unanswered(stream: &mut TcpStream, wait: Duration) -> Result<(), String> {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 1];
    match read_some(stream, &mut byte) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// Send one byte on an echo connection and check it comes back.
pub fn echo_byte(stream: &mut TcpStream, byte: u8) {
    stream.write_all(&[byte]).expect("echo write");
    let mut back = [0u8; 1];
    stream.read_exact(&mut back).expect("echo read");
    assert_eq!(back[0], byte);
}

pub const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";
pub const HEAD: &[u8] = b"HEAD / HTTP/1.1\r\nHost: test\r\n\r\n";

/// A client stream that can be split into a reader and a writer: TCP or Unix.
pub trait Duplex: Read + Write + Send + Sized {
    fn try_clone(&self) -> std::io::Result<Self>;
}

impl Duplex for TcpStream {
    fn try_clone(&self) -> std::io::Result<Self> {
        TcpStream::try_clone(self)
    }
}

impl Duplex for std::os::unix::net::UnixStream {
    fn try_clone(&self) -> std::io::Result<Self> {
        std::os::unix::net::UnixStream::try_clone(self)
    }
}

/// Echo `data` on `stream`, writing from a second thread so neither side can stall the other.
pub fn echo_roundtrip<S: Duplex>(stream: S, data: &[u8]) -> Vec<u8> {
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = stream;
    std::thread::scope(|s| {
        s.spawn(|| {
            for chunk in data.chunks(64 * 1024) {
                writer.write_all(chunk).expect("echo write");
            }
        });
        let mut got = vec![0u8; data.len()];
        reader.read_exact(&mut got).expect("echo read");
        got
    })
}
