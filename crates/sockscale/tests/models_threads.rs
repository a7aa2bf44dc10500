//! What only the thread models do: `--model blocking` runs two threads per connection and
//! refuses connections it cannot start threads for; `--model threadpool` keeps a fixed number
//! of threads and refuses new connections when its queue is full.
//!
//! Every wait is bounded in count and time; nothing asserts speed.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

#[test]
fn blocking_serves_each_connection_with_two_threads() {
    let server = ServerProc::start("blocking", &["--proto", "echo"]);
    let mut held: Vec<TcpStream> = (0..50).map(|_| server.connect()).collect();
    // An answered echo means both of the connection's threads were started (the send thread
    // first).
    for (i, stream) in held.iter_mut().enumerate() {
        echo_byte(stream, i as u8);
    }
    let with = server.threads();
    assert!(with >= 100, "{with} threads for 50 connections");
    // Closing the 50 connections ends exactly their 100 threads. (Counted this way round
    // because the CLI starts its signal thread just after printing the address, so a count
    // taken at start-up may be one short.)
    drop(held);
    let exited = eventually(Duration::from_secs(5), || server.threads() <= with - 100);
    let after = server.threads();
    assert!(exited, "threads did not exit with their connections: {with} with 50 connections, {after} after");
    assert_eq!(with - after, 100, "two threads per connection: {with} with 50 connections, {after} after");
    let done = server.stop();
    assert_eq!(done.counter("accepted"), 50);
    assert_eq!(done.counter("closed_peer"), 50);
    assert_eq!(done.counter("buffers_in_use"), 0);
}

/// A `sockscale serve` whose address space is capped (RLIMIT_AS), which the support harness
/// cannot do. As root, RLIMIT_NPROC is not enforced (CAP_SYS_RESOURCE), so a threads limit
/// cannot make spawning fail; with huge stacks an address-space limit does, reliably: each
/// thread maps its whole stack at creation, and pthread_create fails with EAGAIN when that
/// mapping is refused.
struct CappedServer {
    child: Child,
    addr: SocketAddr,
    stdout: BufReader<std::process::ChildStdout>,
}

impl CappedServer {
    fn start(args: &[&str], address_space: Option<u64>) -> CappedServer {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--threads", "2"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(limit) = address_space {
            // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
            unsafe {
                cmd.pre_exec(move || {
                    let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                    if libc::setrlimit(libc::RLIMIT_AS, &rl) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().expect("spawn sockscale");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        let _ = stdout.read_line(&mut first);
        let Some(addr) = first.trim().strip_prefix("listening on ").and_then(|a| a.parse().ok()) else {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("server did not start: {first:?} {}", String::from_utf8_lossy(&out.stderr));
        };
        CappedServer { child, addr, stdout }
    }

    fn vm_size_kib(&self) -> u64 {
        proc_status_kib(self.child.id() as i32, "VmSize:")
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// SIGTERM, wait (bounded) and return the final line and stderr.
    fn stop(mut self) -> (String, String) {
        use std::io::Read;
        // SAFETY: kill has no memory arguments; the pid is our live child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().expect("wait").is_none() {
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("server did not exit within 15 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        let last = rest.lines().find(|l| l.starts_with("final ")).unwrap_or_default().to_owned();
        (last, stderr)
    }
}

impl Drop for CappedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn final_counter(line: &str, name: &str) -> i64 {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no counter {name} in {line:?}"))
}

#[test]
fn blocking_refuses_when_threads_cannot_be_created_and_keeps_serving() {
    const GIB: u64 = 1 << 30;
    let args = ["--model", "blocking", "--proto", "http", "--stack-size", "1GiB"];
    // The server's own address space before any connection, measured on an uncapped run.
    let probe = CappedServer::start(&args, None);
    let base = probe.vm_size_kib() * 1024;
    assert!(base > 0, "cannot read VmSize: of the server");
    drop(probe);
    // Room for one connection's two 1 GiB stacks (plus the malloc arenas their threads may
    // create), not for a third stack.
    let server = CappedServer::start(&args, Some(base + 5 * GIB / 2));

    let mut first = HttpReader::new(server.connect());
    first.send(GET);
    assert_eq!(first.response(false).expect("the first connection is served").status, 200);

    // Its threads hold the address space: the next connection's threads cannot be created.
    let mut second = HttpReader::new(server.connect());
    let _ = second.stream.write_all(GET);
    if let Some(r) = second.response(false) {
        assert_eq!(r.status, 503, "a connection without threads is refused");
    }
    assert!(second.closed(), "the refused connection is closed");

    // The first connection is unaffected.
    first.send(GET);
    assert_eq!(first.response(false).expect("still served").status, 200);

    // Once it closes and its stacks are unmapped, new connections are served again.
    drop(first);
    let mut refused_while_waiting = 0;
    let served = eventually(Duration::from_secs(10), || {
        let mut c = HttpReader::new(server.connect());
        let _ = c.stream.write_all(GET);
        match c.response(false) {
            Some(r) if r.status == 200 => true,
            _ => {
                refused_while_waiting += 1;
                false
            }
        }
    });
    assert!(served, "no connection served after the first one closed");
    let (last, stderr) = server.stop();
    assert_eq!(final_counter(&last, "accepted"), 2, "{last}");
    assert_eq!(final_counter(&last, "refused"), 1 + refused_while_waiting, "{last}");
    assert_eq!(final_counter(&last, "connections"), 0, "{last}");
    let logged = stderr.lines().filter(|l| l.contains("cannot start a thread for a connection")).count();
    assert!(logged >= 1, "the refusal was not logged: {stderr}");
    assert!(logged <= 2 + 10, "refusals are logged at most once a second: {stderr}");
}

#[test]
fn threadpool_keeps_a_fixed_number_of_threads() {
    let server = ServerProc::start("threadpool", &["--proto", "echo"]);
    let base = server.threads();
    assert!(base > 0, "cannot read Threads: of the server");
    let mut held: Vec<TcpStream> = (0..100).map(|_| server.connect()).collect();
    for round in 0..3u8 {
        for stream in held.iter_mut() {
            echo_byte(stream, round);
        }
    }
    // The CLI starts its signal thread just after printing the address, so the count taken at
    // start-up may be one short; threads per connection would add a hundred.
    let with = server.threads();
    assert!(with <= base + 1, "{base} threads at start, {with} with 100 connections");
    drop(held);
    let done = server.stop();
    assert_eq!(done.counter("accepted"), 100);
    assert_eq!(done.counter("refused"), 0);
}

#[test]
fn threadpool_refuses_new_connections_when_its_queue_is_full() {
    // The harness runs two workers, so the queue holds 256 (--queue-depth 128 each). A small
    // send buffer, so a client that does not read stalls a worker in its blocking send within
    // a few responses.
    let server = ServerProc::start("threadpool", &["--proto", "http", "--sndbuf", "64KiB", "--send-timeout", "5"]);
    // Two clients send 2000 pipelined requests each and never read the 8 MiB of answers: each
    // blocks one worker in its send until the send timeout.
    let burst: Vec<u8> = GET.iter().copied().cycle().take(GET.len() * 2000).collect();
    let stuck: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(&burst).expect("burst");
            s
        })
        .collect();
    // The bursts are in the server's receive buffers at once; give the workers a moment to take
    // them and fill the sockets (the outcome below does not depend on how long this is).
    std::thread::sleep(Duration::from_millis(500));

    // With both workers stuck, new connections wait in the queue until it is full.
    let mut clients: Vec<HttpReader> = (0..300)
        .map(|_| {
            let mut c = HttpReader::new(server.connect());
            c.send(GET);
            c
        })
        .collect();
    let (mut served, mut refused) = (0, 0);
    for c in clients.iter_mut() {
        match c.response(false) {
            Some(r) if r.status == 200 => served += 1,
            Some(r) => {
                assert_eq!(r.status, 503, "refused with 503");
                assert!(c.closed(), "a refused connection is closed");
                refused += 1;
            }
            None => panic!("closed without an answer"),
        }
    }
    assert_eq!(served + refused, 300);
    assert!(refused >= 1, "nothing was refused with both workers stuck");
    assert!(served >= 256, "only {served} of 300 admitted: the queue holds 256");

    // The queued connections were served once the stuck clients were cut off; so are new ones.
    let mut after = HttpReader::new(server.connect());
    after.send(GET);
    assert_eq!(after.response(false).expect("served after").status, 200);
    // Both stuck clients are cut off at their send timeout, about together, but one worker is
    // enough to serve everything above: wait for the server to have closed both (a hang-up
    // seen on each socket, its unread answers still queued) before closing them from this end,
    // or a slow machine counts the second as closed by its peer.
    let hung_up = |s: &TcpStream| {
        let mut pollfd = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(s), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: one live pollfd for an open socket; a zero timeout only asks.
        let n = unsafe { libc::poll(&mut pollfd, 1, 0) };
        n == 1 && pollfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    };
    assert!(eventually(Duration::from_secs(20), || stuck.iter().all(hung_up)), "both stuck clients cut off");
    drop(stuck);
    drop(clients);
    drop(after);
    let done = server.stop();
    assert_eq!(done.counter("refused"), refused);
    assert_eq!(done.counter("accepted"), 2 + served + 1);
    assert_eq!(done.counter("closed_send_timeout") + done.counter("closed_flood"), 2);
    assert!(done.stderr.contains("the queue is full"), "the refusal was not logged: {}", done.stderr);
}
