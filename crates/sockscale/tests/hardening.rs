//! The hardening suite: hostile and broken clients, exhausted resources and shutdown under
//! load, against every model over real loopback sockets.
//!
//! Every case keeps a normal client (the canary) talking to the server while the hostile ones
//! do their worst, and fails if the canary is ever refused, stalled or answered wrongly. Cases
//! assert behaviour and bounds (a status, a close, a descriptor count, a CPU budget over a
//! window), never speed. Network faults (loss, delay, reordering) are in `faults.rs`; the EMFILE
//! back-off, idle and header timeouts for one connection, and the memory bound of a flood are
//! in `conformance.rs`.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use sockscale_server::Policy;
use support::*;

/// USER_HZ on Linux: the unit of utime and stime in /proc/PID/stat.
const TICKS_PER_SEC: u64 = 100;

/// A keep-alive HTTP client that must be answered, correctly and in time, throughout a case.
struct Canary(HttpReader);

impl Canary {
    fn new(server: &ServerProc) -> Self {
        let stream = server.connect();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Canary(HttpReader::new(stream))
    }

    fn check(&mut self, during: &str) {
        self.0.send(GET);
        let r = self.0.response(false).unwrap_or_else(|| panic!("canary closed during {during}"));
        assert_eq!((r.status, r.body.len()), (200, 4096), "canary answer during {during}");
    }
}

/// An echo client that must be answered throughout a case.
struct EchoCanary(TcpStream);

impl EchoCanary {
    fn new(server: &ServerProc) -> Self {
        let stream = server.connect();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        EchoCanary(stream)
    }

    fn check(&mut self, during: &str) {
        self.0.write_all(b"ping").unwrap_or_else(|e| panic!("canary write during {during}: {e}"));
        let mut pong = [0u8; 4];
        self.0.read_exact(&mut pong).unwrap_or_else(|e| panic!("canary read during {during}: {e}"));
        assert_eq!(&pong, b"ping", "canary echo during {during}");
    }
}

/// A client socket that resets instead of closing (SO_LINGER 0).
fn connect_resetting(server: &ServerProc) -> TcpStream {
    let stream = server.connect();
    SockRef::from(&stream).set_linger(Some(Duration::ZERO)).unwrap();
    stream
}

/// The response to `request` sent whole, with the Date header removed.
fn answer_without_date(server: &ServerProc, request: &[u8], byte_at_a_time: bool) -> (Response, Vec<u8>) {
    let mut c = HttpReader::new(server.connect());
    c.stream.set_nodelay(true).unwrap();
    if byte_at_a_time {
        for byte in request {
            c.send(std::slice::from_ref(byte));
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        c.send(request);
    }
    let mut r = c.response(false).expect("an answer");
    r.headers.retain(|(name, _)| !name.eq_ignore_ascii_case("date"));
    let body = std::mem::take(&mut r.body);
    (r, body)
}

/// Expect silence on `reader`: no further response within 300 ms.
fn assert_no_more_responses(reader: &mut HttpReader, after: &str) {
    reader.stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut extra = [0u8; 1];
    match read_some(&mut reader.stream, &mut extra) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        Ok(0) => {}
        other => panic!("after {after} expected no further response, got {other:?}"),
    }
    reader.stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
}

pub fn http_bad_input_is_refused_and_closed(model: &str) {
    let server = ServerProc::start(model, &["--proto", "http"]);
    let mut canary = Canary::new(&server);
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(100_000));
    let big_header = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "b".repeat(64 * 1024));
    let post = |headers: &str, body: &str| format!("POST / HTTP/1.1\r\nHost: t\r\n{headers}\r\n{body}");
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("a 100 KB request line", long_line.into_bytes(), 414),
        ("a 64 KB header", big_header.into_bytes(), 431),
        ("garbage (a TLS hello)", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\xde\xad\r\n\r\n".to_vec(), 400),
        ("bare LF line ends", b"GET / HTTP/1.1\nHost: t\n\n".to_vec(), 400),
        ("a NUL in a header value", b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n".to_vec(), 400),
        ("a control character in a header", b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n".to_vec(), 400),
        ("a control character in a header name", b"GET / HTTP/1.1\r\nHost: t\r\nX\x7fA: b\r\n\r\n".to_vec(), 400),
        ("whitespace before the colon", b"GET / HTTP/1.1\r\nHost : t\r\n\r\n".to_vec(), 400),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n  folded\r\n\r\n".to_vec(), 400),
        (
            "a chunk size that is not hex",
            post("Transfer-Encoding: chunked\r\n", "zz\r\nabc\r\n0\r\n\r\n").into_bytes(),
            400,
        ),
        ("a negative chunk size", post("Transfer-Encoding: chunked\r\n", "-1\r\nabc\r\n0\r\n\r\n").into_bytes(), 400),
        (
            "an overflowing chunk size",
            post("Transfer-Encoding: chunked\r\n", "fffffffffffffffffffff\r\nabc\r\n0\r\n\r\n").into_bytes(),
            400,
        ),
        ("a chunk without its CRLF", post("Transfer-Encoding: chunked\r\n", "3\r\nabcX0\r\n\r\n").into_bytes(), 400),
        (
            "Content-Length and Transfer-Encoding",
            post("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", "").into_bytes(),
            400,
        ),
        ("differing Content-Lengths", post("Content-Length: 3\r\nContent-Length: 4\r\n", "abc").into_bytes(), 400),
        ("a negative Content-Length", post("Content-Length: -3\r\n", "").into_bytes(), 400),
        ("an overflowing Content-Length", post("Content-Length: 99999999999999999999999\r\n", "").into_bytes(), 400),
        (
            "Transfer-Encoding on HTTP/1.0",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            400,
        ),
    ];
    for (what, request, status) in &cases {
        let mut c = HttpReader::new(server.connect());
        // The server may close before reading everything; a failed write is then expected.
        let _ = c.stream.write_all(request);
        let r = c.response(false).unwrap_or_else(|| panic!("no answer to {what}"));
        assert_eq!(r.status, *status, "answer to {what}");
        assert_eq!(r.header("Connection"), Some("close"), "answer to {what}");
        assert!(c.closed(), "connection closed after {what}");
        canary.check(what);
    }
    let done = server.stop();
    assert_eq!(done.counter("closed_protocol"), cases.len() as i64);
}

pub fn no_request_is_smuggled_in_a_body(model: &str) {
    let server = ServerProc::start(model, &["--proto", "http"]);
    let inner = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";
    // A Content-Length body and a chunked body that each hold a whole request: one answer each.
    let length_body = format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{inner}", inner.len());
    let chunked_body = format!(
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{inner}\r\n0\r\n\r\n",
        inner.len()
    );
    for (what, request) in [("a Content-Length body", length_body), ("a chunked body", chunked_body)] {
        let mut c = HttpReader::new(server.connect());
        c.send(request.as_bytes());
        assert_eq!(c.response(false).expect("answer").status, 200, "{what}");
        assert_no_more_responses(&mut c, what);
        // The connection is in step: the next request gets exactly one answer.
        c.send(GET);
        assert_eq!(c.response(false).expect("next answer").status, 200, "after {what}");
        assert_no_more_responses(&mut c, what);
    }
    // The classic CL.TE and TE.CL smuggles: refused whole, nothing answered from the body.
    for (what, request) in [
        ("CL.TE", format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{inner}")),
        ("TE.CL", format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\n{inner}\r\n0\r\n\r\n")),
        ("TE with a second coding", format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{inner}")),
    ] {
        let mut c = HttpReader::new(server.connect());
        let _ = c.stream.write_all(request.as_bytes());
        assert_eq!(c.response(false).expect("answer").status, 400, "{what}");
        assert!(c.closed(), "{what}: closed after the 400, nothing parsed from the body");
    }
}

pub fn a_request_sent_a_byte_at_a_time_gets_the_same_answer(model: &str) {
    let server = ServerProc::start(model, &["--proto", "http"]);
    let requests: [&[u8]; 3] = [
        b"GET /index.html HTTP/1.1\r\nHost: t\r\nUser-Agent: hardening\r\nAccept: */*\r\n\r\n",
        b"POST /form HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello=world",
        b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n",
    ];
    for request in requests {
        let whole = answer_without_date(&server, request, false);
        let trickled = answer_without_date(&server, request, true);
        assert_eq!(whole.0.status, 200);
        assert_eq!(whole.0.headers, trickled.0.headers, "{}", String::from_utf8_lossy(request));
        assert!(whole.1 == trickled.1, "bodies differ for {}", String::from_utf8_lossy(request));
    }
}

pub fn slowloris_is_closed_at_the_header_deadline(model: &str) {
    if skip(model, Policy::HeaderTimeout) {
        return;
    }
    raise_nofile();
    let header_timeout = Duration::from_secs(3);
    // The 1,000 connects arrive in a burst; the thread pool's queue must hold them all (the
    // other models ignore --queue-depth).
    let args = ["--proto", "http", "--header-timeout", "3", "--idle-timeout", "60", "--queue-depth", "1024"];
    let server = ServerProc::start(model, &args);
    let mut canary = Canary::new(&server);
    let head = b"GET / HTTP/1.1\r\nHost: slow\r\nX-Trickle: aaaaaaaaaaaaaaaaaaaaaaaa";
    struct Loris {
        stream: TcpStream,
        first_byte: Instant,
        next_byte: Instant,
        sent: usize,
        closed_after: Option<Duration>,
    }
    let mut lorises: Vec<Loris> = (0..1000)
        .map(|_| {
            let mut stream = server.connect();
            stream.write_all(&head[..1]).unwrap();
            stream.set_nonblocking(true).unwrap();
            let first_byte = Instant::now();
            Loris { stream, first_byte, next_byte: first_byte + Duration::from_secs(2), sent: 1, closed_after: None }
        })
        .collect();
    let started = Instant::now();
    let mut sink = [0u8; 4096];
    while lorises.iter().any(|l| l.closed_after.is_none()) {
        assert!(started.elapsed() < Duration::from_secs(15), "trickling kept connections open past 15 s");
        for loris in lorises.iter_mut().filter(|l| l.closed_after.is_none()) {
            // Drain whatever came (a 408), and look for the close.
            loop {
                match read_some(&mut loris.stream, &mut sink) {
                    Ok(0) => break loris.closed_after = Some(loris.first_byte.elapsed()),
                    Ok(_) => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => break loris.closed_after = Some(loris.first_byte.elapsed()),
                }
            }
            // One more byte every 2 s: activity that must not extend the header deadline.
            if loris.closed_after.is_none() && Instant::now() >= loris.next_byte && loris.sent < head.len() {
                loris.next_byte += Duration::from_secs(2);
                if loris.stream.write_all(&head[loris.sent..loris.sent + 1]).is_ok() {
                    loris.sent += 1;
                }
            }
        }
        canary.check("the slowloris attack");
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, loris) in lorises.iter().enumerate() {
        let after = loris.closed_after.unwrap_or_default();
        assert!(after >= header_timeout - Duration::from_millis(150), "slowloris {i} closed after only {after:?}");
        assert!(after < header_timeout + Duration::from_secs(4), "slowloris {i} closed after {after:?}");
        assert!(loris.sent >= 2, "slowloris {i} was closed before it trickled a second byte");
    }
    canary.check("the end of the attack");
    drop(canary);
    let done = server.stop();
    assert_eq!(done.counter("closed_header_timeout"), 1000);
}

pub fn slow_reader_is_closed_by_the_send_timeout(model: &str) {
    if skip(model, Policy::FloodCutoff) {
        return;
    }
    let server = ServerProc::start(model, &["--proto", "http", "--send-timeout", "2"]);
    let mut canary = Canary::new(&server);
    // Answered, so accepted: the baseline counts it.
    canary.check("warm-up");
    let baseline = server.open_sockets();
    // A receive window of a few KiB, set before the handshake so the window stays tiny.
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut reader: TcpStream = socket.into();
    // 2,000 pipelined GETs ask for about 8.6 MB of answers, which the client never reads.
    let requests: Vec<u8> = GET.repeat(2000);
    reader.write_all(&requests).unwrap();
    let started = Instant::now();
    wait_for_sockets(&server, baseline + 1, Duration::from_secs(3));
    wait_for_sockets(&server, baseline, Duration::from_secs(10));
    // The send timeout runs from when answers start to queue, after `started`.
    let closed_after = started.elapsed();
    assert!(closed_after >= Duration::from_millis(1500), "slow reader closed after only {closed_after:?}");
    canary.check("the slow reader");
    drop(canary);
    let done = server.stop();
    assert_eq!(done.counter("closed_send_timeout") + done.counter("closed_flood"), 1, "{:?}", done.stdout);
}

/// Wait until the server holds `want` sockets with no connection waiting to be accepted (one
/// still queued would become a socket a moment later).
fn wait_for_sockets(server: &ServerProc, want: usize, limit: Duration) {
    let settled = eventually(limit, || server.accept_queue() == 0 && server.open_sockets() == want);
    let (now, queued) = (server.open_sockets(), server.accept_queue());
    assert!(settled, "server holds {now} sockets ({queued} queued to accept), expected {want} within {limit:?}");
}

pub fn pipelining_without_reading_is_disconnected(model: &str) {
    if skip(model, Policy::FloodCutoff) {
        return;
    }
    let (max_pending_send_kib, pool_kib) = (1024, 64 * 16);
    let args = ["--send-timeout", "2", "--max-pending-send", "1MiB", "--pool-buffers", "64", "--buffer-size", "16KiB"];
    let server = ServerProc::start(model, &[&["--proto", "http"][..], &args].concat());
    let mut canary = Canary::new(&server);
    canary.check("warm-up");
    let baseline_rss = server.rss_kib();
    let mut flooder = server.connect();
    flooder.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
    // Up to 1 GiB of requests, 1 MiB at a time; the server must stop taking them long before.
    let chunk = GET.repeat((1 << 20) / GET.len());
    let started = Instant::now();
    let mut sent = 0usize;
    let mut peak = baseline_rss;
    let mut cut_off = false;
    while sent < 1 << 30 {
        if flooder.write_all(&chunk).is_err() {
            cut_off = true;
            break;
        }
        sent += chunk.len();
        peak = peak.max(server.rss_kib());
        if sent % (16 << 20) < chunk.len() {
            canary.check("the pipelining flood");
        }
    }
    eprintln!("{model}: pipelining flood cut off after {} KiB; RSS {baseline_rss} KiB, peak {peak} KiB", sent >> 10);
    assert!(cut_off, "the server took 1 GiB of pipelined requests without disconnecting");
    assert!(started.elapsed() < Duration::from_secs(30));
    // The server stops reading once the answers queued for the flooder pass --max-pending-send.
    // One read past that point can add a read budget's worth of requests' answers, but queued
    // answers share the one body buffer, so what it holds in memory stays under the cap's wire
    // size. Twice the cap, the receive buffer pool and 1 MiB of allocator slack bound it (as in
    // the echo flood of the conformance suite).
    let bound = baseline_rss + 2 * max_pending_send_kib + pool_kib + 1024;
    assert!(peak < bound, "server RSS grew from {baseline_rss} KiB to {peak} KiB (bound {bound} KiB)");
    canary.check("after the flood");
    drop(canary);
    let done = server.stop();
    assert_eq!(done.counter("closed_send_timeout") + done.counter("closed_flood"), 1, "{:?}", done.stdout);
}

/// Threads of the connection groups of poll64 and uring64 (each holds descriptors of its own).
fn group_threads(server: &ServerProc) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", server.pid())) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("sockscale-p64-") || comm.starts_with("sockscale-u64-"))
        .count()
}

pub fn a_burst_of_reset_connections_leaks_no_descriptors(model: &str) {
    raise_nofile();
    let server = ServerProc::start(model, &["--proto", "http"]);
    let mut canary = Canary::new(&server);
    canary.check("warm-up");
    let sockets = server.open_sockets();
    // 5,000 connects in waves of 250, each reset at once; a third send half a request first
    // and a third a whole one, so resets land in every state of a connection. After each half
    // every connection's socket is gone, and the second half adds no descriptor of any kind.
    //
    // Except the descriptors of new connection groups (poll64, uring64): groups are kept once
    // started, and how many there are follows the peak of connections open at once, which
    // depends on how far the server lags behind the client: the second half may see a higher
    // peak than the first and start a group more, with its eventfd (and ring). So descriptors
    // are counted with the group threads: what the first half's new groups brought, per group,
    // is what each group started in the second half may add; anything else is a leak.
    let mut counts = vec![(server.open_fds(), group_threads(&server))];
    for half in 0..2 {
        for wave in 0..10 {
            let held: Vec<TcpStream> = (0..250)
                .map(|i| {
                    let mut c = connect_resetting(&server);
                    let _ = match i % 3 {
                        0 => Ok(()),
                        1 => c.write_all(b"GET / HTTP/1.1\r\nHo"),
                        _ => c.write_all(GET),
                    };
                    c
                })
                .collect();
            drop(held);
            if wave % 5 == 4 {
                canary.check("the reset burst");
            }
        }
        wait_for_sockets(&server, sockets, Duration::from_secs(10));
        counts.push((server.open_fds(), group_threads(&server)));
        eprintln!("after {} resets: (descriptors, group threads) {:?}", (half + 1) * 2500, counts[half + 1]);
    }
    let [(before, groups_before), (first, groups_first), (second, groups_second)] = counts[..] else {
        unreachable!("three counts")
    };
    let new_groups = groups_second - groups_first;
    let per_group = if new_groups == 0 {
        0
    } else {
        let started = groups_first - groups_before;
        assert!(started > 0, "groups were started only in the second half: {counts:?}");
        assert_eq!((first - before) % started, 0, "the first half's descriptors are not whole groups: {counts:?}");
        (first - before) / started
    };
    assert_eq!(
        second,
        first + new_groups * per_group,
        "descriptors grew between the two halves of the burst beyond what {new_groups} new groups hold: {counts:?}"
    );
    canary.check("after the reset burst");
    drop(canary);
    let done = server.stop();
    assert_eq!(done.counter("connections"), 0);
    assert_eq!(done.counter("buffers_in_use"), 0);
}

pub fn connections_that_end_before_they_are_accepted_are_closed(model: &str) {
    let server = ServerProc::start(model, &["--proto", "http", "--header-timeout", "30", "--idle-timeout", "60"]);
    let mut canary = Canary::new(&server);
    canary.check("warm-up");
    let sockets = server.open_sockets();
    // With the server stopped, the kernel completes the handshakes, and each connection's half
    // request and its reset (or FIN) are already queued when the server accepts it: the event
    // that reports the data is the only one the connection will ever raise.
    server.signal(libc::SIGSTOP);
    let ended: Vec<TcpStream> = (0..200)
        .map(|i| {
            let mut c = connect_resetting(&server);
            c.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
            if i % 2 == 0 {
                // Half of them half-close instead: FIN, not RST.
                SockRef::from(&c).set_linger(None).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
            }
            c
        })
        .collect();
    let (fins, resets): (Vec<_>, Vec<_>) = ended.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    drop(resets);
    std::thread::sleep(Duration::from_millis(100));
    server.signal(libc::SIGCONT);
    // Well before any timeout, the server has closed every one of them, the half-closed ones
    // included (a half request followed by EOF can never complete).
    wait_for_sockets(&server, sockets, Duration::from_secs(5));
    drop(fins);
    canary.check("after the early resets");
    drop(canary);
    let done = server.stop();
    assert_eq!(done.counter("closed_header_timeout") + done.counter("closed_idle"), 0, "{:?}", done.stdout);
}

pub fn saturated_at_max_conns_it_stays_quiet_and_recovers(model: &str) {
    if skip(model, Policy::MaxConns) {
        return;
    }
    let server = ServerProc::start(model, &["--proto", "echo", "--max-conns", "20"]);
    let mut held: Vec<EchoCanary> = (0..20).map(|_| EchoCanary::new(&server)).collect();
    for c in held.iter_mut() {
        c.check("admission");
    }
    // Clients keep knocking, 100 a second, for 3 s: each is accepted and closed at once.
    let window = Duration::from_secs(3);
    let before = server.cpu_ticks();
    let started = Instant::now();
    let mut knocks = 0;
    while started.elapsed() < window {
        let mut c = server.connect();
        let mut b = [0u8; 1];
        assert_eq!(read_some(&mut c, &mut b).unwrap_or(0), 0, "a client beyond --max-conns was served");
        knocks += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let used = server.cpu_ticks() - before;
    let elapsed = started.elapsed().as_secs_f64();
    // Under 5% of one core over the window.
    assert!(
        (used as f64) < 0.05 * TICKS_PER_SEC as f64 * elapsed,
        "used {used} ticks in {elapsed:.1} s while saturated"
    );
    for c in held.iter_mut() {
        c.check("the refusals");
    }
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut again = EchoCanary::new(&server);
    again.check("a slot was freed");
    drop(again);
    drop(held);
    let done = server.stop();
    assert_eq!(done.counter("refused"), knocks);
    let warnings = done.stderr.lines().filter(|l| l.contains("refusing connections")).count();
    assert!(warnings >= 1, "refusals were never logged: {}", done.stderr);
    assert!(
        warnings as f64 <= elapsed.ceil() + 1.0,
        "logged refusals {warnings} times in {elapsed:.1} s: {}",
        done.stderr
    );
}

pub fn sigterm_with_1000_clients_truncates_nothing(model: &str) {
    if skip(model, Policy::GracefulShutdown) {
        return;
    }
    raise_nofile();
    let drain = Duration::from_secs(3);
    // --queue-depth: the thread pool must admit the burst of 1,000 connects (others ignore it).
    let server = ServerProc::start(model, &["--proto", "http", "--drain-timeout", "3", "--queue-depth", "1024"]);
    // 600 connections that never send a request: they must not delay the exit.
    let silent: Vec<TcpStream> = (0..600).map(|_| server.connect()).collect();
    let signalled = std::sync::atomic::AtomicBool::new(false);
    let mut sigterm_at = Instant::now();
    let (answered, closed) = std::thread::scope(|s| {
        // 400 active keep-alive clients, 50 to a thread.
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let mut clients: Vec<Option<HttpReader>> =
                    (0..50).map(|_| Some(HttpReader::new(server.connect()))).collect();
                let signalled = &signalled;
                s.spawn(move || {
                    let (mut answered, mut closed) = (0u64, 0u64);
                    let until = Instant::now() + Duration::from_secs(20);
                    while clients.iter().any(Option::is_some) {
                        assert!(Instant::now() < until, "clients still open 20 s on");
                        for slot in clients.iter_mut() {
                            let Some(c) = slot else { continue };
                            // A write to a connection the drain already closed may fail.
                            if c.stream.write_all(GET).is_err() {
                                *slot = None;
                                closed += 1;
                                continue;
                            }
                            // HttpReader panics on a response cut short; None is a clean close.
                            match c.response(false) {
                                Some(r) => {
                                    assert_eq!((r.status, r.body.len()), (200, 4096));
                                    answered += 1;
                                    if r.header("Connection") == Some("close") {
                                        assert!(signalled.load(std::sync::atomic::Ordering::Relaxed));
                                        *slot = None;
                                        closed += 1;
                                    }
                                }
                                None => {
                                    *slot = None;
                                    closed += 1;
                                }
                            }
                        }
                    }
                    (answered, closed)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(700));
        signalled.store(true, std::sync::atomic::Ordering::Relaxed);
        sigterm_at = Instant::now();
        server.signal(libc::SIGTERM);
        workers.into_iter().map(|w| w.join().expect("client thread")).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert_eq!(closed, 400);
    assert!(answered >= 400, "only {answered} answers before the drain");
    let done = server.stop_within(drain + Duration::from_secs(2));
    let exited_after = sigterm_at.elapsed();
    assert!(done.status.success(), "exit status {:?}", done.status);
    assert!(exited_after < drain + Duration::from_millis(500), "exited {exited_after:?} after SIGTERM");
    drop(silent);
}

pub fn udp_edge_cases_keep_the_loop_running(model: &str) {
    if skip(model, Policy::Udp) {
        return;
    }
    let server = ServerProc::start(model, &["--proto", "udp"]);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.connect(server.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut datagrams = 0i64;
    // Zero bytes and the largest IPv4 datagram come back as they went.
    for size in [0usize, 1, 65_507] {
        let data = pattern(size as u64 + 1, size);
        client.send(&data).unwrap();
        datagrams += 1;
        let n = client.recv(&mut buf).unwrap();
        assert!(buf[..n] == data[..], "a {size}-byte datagram came back as {n} bytes");
    }
    // Replies to a port that has closed raise ICMP port-unreachable errors at the server.
    for _ in 0..50 {
        let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
        gone.send_to(b"to a closed port", server.addr).unwrap();
        datagrams += 1;
    }
    // A flood that overruns the server's receive queue, from sockets that never read. The
    // server is stopped meanwhile, so the queue overflows whatever the machine's speed.
    std::thread::sleep(Duration::from_millis(200));
    let flooders: Vec<UdpSocket> = (0..4).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let datagram = [0x5a; 1200];
    server.signal(libc::SIGSTOP);
    for _ in 0..5_000 {
        for f in &flooders {
            if f.send_to(&datagram, server.addr).is_ok() {
                datagrams += 1;
            }
        }
    }
    server.signal(libc::SIGCONT);
    // Still echoing; this also carries the kernel's final drop count to the server.
    std::thread::sleep(Duration::from_millis(300));
    for f in &flooders {
        f.send_to(b"last", server.addr).unwrap();
        datagrams += 1;
    }
    client.send(b"still there?").unwrap();
    datagrams += 1;
    let n = client.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"still there?");
    std::thread::sleep(Duration::from_millis(200));
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
    let (received, overflowed) = (done.counter("datagrams_in"), done.counter("datagrams_overflowed"));
    assert!(overflowed > 0, "20,000 datagrams sent to a stopped server, yet none dropped: {:?}", done.stdout);
    // On loopback a datagram either reaches the server or is dropped at its queue, counted.
    assert_eq!(received + overflowed, datagrams, "{:?}", done.stdout);
}

/// A WebSocket client that must be echoed throughout a case.
fn ws_bystander(server: &ServerProc) -> support::ws::WsClient<TcpStream> {
    let stream = server.connect();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    support::ws::WsClient::connect(stream, "/", None).expect("the bystander's 101")
}

/// A fresh WebSocket (with permessage-deflate offered if `deflate`), read timeout 10 s.
fn ws_connect(server: &ServerProc, deflate: bool) -> support::ws::WsClient<TcpStream> {
    let stream = server.connect();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let offer = deflate.then(sockscale_ws::DeflateConfig::default);
    support::ws::WsClient::connect(stream, "/", offer).expect("101")
}

/// A client frame's header announcing `len` octets, masked (the payload to follow).
fn ws_header(first: u8, len: usize) -> Vec<u8> {
    let mut header = Vec::new();
    sockscale_ws::frame::write_header(first, len, Some([1, 2, 3, 4]), &mut header);
    header
}

/// Hostile WebSocket frames, each on its own connection, each closed with its code while a
/// bystander is echoed: a 64-bit length past `--ws-max-message` (1009, nothing allocated: the
/// RSS does not jump), a fragmented control frame and one over 125 octets (1002), a
/// continuation with no start (1002), invalid UTF-8 (1007), a message of empty fragments that
/// never ends (1009 once its frames pass twice the limit), and deflate bombs (16 MiB of zeros
/// compressed to about 16 KiB, five times: 1009 each, the RSS bounded).
pub fn ws_hostile_frames_are_closed_with_their_codes(model: &str) {
    use sockscale_ws::{Closing, Kind};
    use support::ws::{frame, Ended};
    const MAX: u64 = 1 << 20;
    let server = ServerProc::start(model, &["--proto", "ws", "--ws-max-message", &MAX.to_string()]);
    let mut bystander = ws_bystander(&server);
    bystander.echo(Kind::Binary, &pattern(1, 1000));
    let key = Some([9, 8, 7, 6]);
    let mut never_ending = ws_header(0x02, 0);
    let empty = ws_header(0x00, 0);
    // The first frame's header, then empty continuations until the wire bound is crossed.
    let frames = (2 * MAX + sockscale_ws::session::FRAGMENT_SLACK) / empty.len() as u64 + 1;
    for _ in 0..frames {
        never_ending.extend_from_slice(&empty);
    }
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("a 64-bit length of 2^40", ws_header(0x82, 1 << 40), 1009),
        ("a fragmented ping", frame(0x09, b"ping", key), 1002),
        ("a ping of 126 octets", frame(0x89, &[b'p'; 126], key), 1002),
        ("a continuation with no start", frame(0x80, b"more", key), 1002),
        ("invalid UTF-8 in text", frame(0x81, b"ok \xc3\x28 then", key), 1007),
        ("a message of empty fragments that never ends", never_ending, 1009),
    ];
    let rss_before = server.rss_kib();
    for (what, input, code) in &cases {
        let mut bad = ws_connect(&server, false);
        bad.send_raw(input);
        assert_eq!(bad.ending(), Ended::Closed(Closing::Handshake { code: Some(*code) }), "{what}");
        bystander.echo(Kind::Text, what.as_bytes());
    }
    let grown = server.rss_kib().saturating_sub(rss_before);
    assert!(grown < 4096, "the server's RSS grew {grown} KiB over the hostile frames");
    // Deflate bombs: each message inflates to 16x the limit.
    for round in 0..5 {
        let mut bomb = ws_connect(&server, true);
        bomb.send(Kind::Binary, &vec![0u8; 16 << 20]);
        let ending = bomb.ending();
        assert_eq!(ending, Ended::Closed(Closing::Handshake { code: Some(1009) }), "deflate bomb {round}");
        bystander.echo(Kind::Binary, &pattern(round, 4096));
    }
    let grown = server.rss_kib().saturating_sub(rss_before);
    // A bomb is inflated up to the limit (1 MiB) and zlib's states (under 0.5 MiB) at most.
    assert!(grown < 8192, "the server's RSS grew {grown} KiB over five deflate bombs");
    bystander.close(1000);
    let done = server.stop();
    let count = |code: u16| done.counter(&format!("ws_closes_out_{code}"));
    assert_eq!((count(1002), count(1007), count(1009)), (3, 1, 2 + 5), "{:?}", done.stdout);
}

/// A ping flood from a client that never reads its pongs: closed with 1008 once past the
/// budget (100 pings in 10 s), counted, while a bystander is echoed.
pub fn ws_a_ping_flood_is_closed_with_1008(model: &str) {
    use sockscale_ws::{Closing, Kind};
    use support::ws::{frame, Ended};
    let server = ServerProc::start(model, &["--proto", "ws"]);
    let mut bystander = ws_bystander(&server);
    let mut flood = ws_connect(&server, false);
    let pings = frame(0x89, b"flood", Some([1, 1, 1, 1])).repeat(usize::from(sockscale_ws::session::PING_BUDGET) * 2);
    flood.send_raw(&pings);
    bystander.echo(Kind::Text, b"during the flood");
    // Only now does the flooder read: its pongs (within the budget), then the close.
    assert_eq!(flood.ending(), Ended::Closed(Closing::Handshake { code: Some(1008) }));
    let pongs = flood.session.stats().pongs_received;
    assert_eq!(pongs, u64::from(sockscale_ws::session::PING_BUDGET), "pongs before the close");
    bystander.echo(Kind::Text, b"after the flood");
    // Closed rather than left open: the drain would wait its whole timeout (5 s) for a client
    // that never answers its 1001.
    bystander.close(1000);
    let done = server.stop();
    assert_eq!(done.counter("ws_closes_out_1008"), 1, "{:?}", done.stdout);
    assert_eq!(done.counter("ws_pongs_out"), i64::from(sockscale_ws::session::PING_BUDGET));
}

/// A WebSocket client that sends without ever reading its echoes, with a tiny receive window:
/// closed by the send timeout (or the send cap), counted, while a bystander is echoed.
pub fn ws_a_client_that_never_reads_is_closed_by_the_send_timeout(model: &str) {
    use sockscale_ws::Kind;
    if skip(model, Policy::FloodCutoff) {
        return;
    }
    let server = ServerProc::start(model, &["--proto", "ws", "--send-timeout", "2"]);
    let mut bystander = ws_bystander(&server);
    bystander.echo(Kind::Text, b"warm-up");
    let baseline = server.open_sockets();
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut reader = support::ws::WsClient::connect(stream, "/", None).expect("101");
    // 2,000 messages of 4 KiB ask for about 8 MB of echoes, which the client never reads.
    let message = pattern(7, 4096);
    let mut out = Vec::new();
    for _ in 0..2000 {
        assert!(reader.session.send(Kind::Binary, &message, &mut out));
    }
    // The server may stop reading once its answers back up: the write then times out.
    let _ = reader.stream.write_all(&out);
    let started = Instant::now();
    wait_for_sockets(&server, baseline, Duration::from_secs(10));
    bystander.echo(Kind::Text, b"after the slow reader");
    let closed_after = started.elapsed();
    assert!(closed_after < Duration::from_secs(10), "closed after {closed_after:?}");
    // Closed rather than left open: the drain would wait its whole timeout (5 s) for a client
    // that never answers its 1001.
    bystander.close(1000);
    let done = server.stop();
    assert_eq!(done.counter("closed_send_timeout") + done.counter("closed_flood"), 1, "{:?}", done.stdout);
}

/// An upgrade request whose head is still arriving when the drain starts is refused with 503
/// (counted), not answered 101 and then closed with 1001.
pub fn ws_an_upgrade_during_a_drain_is_refused_503(model: &str) {
    let server = ServerProc::start(model, &["--proto", "ws", "--drain-timeout", "10"]);
    let mut c = HttpReader::new(server.connect());
    let mut request = Vec::new();
    sockscale_ws::ClientHandshake::new([7; 16], None).write_request("localhost", "/", &mut request);
    c.send(&request[..16]);
    // The server holds the half head (accepted), then the drain reaches it.
    std::thread::sleep(Duration::from_millis(300));
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    c.send(&request[16..]);
    assert_eq!(c.response(false).map(|r| r.status), Some(503), "an upgrade during the drain");
    let done = server.stop_within(Duration::from_secs(8));
    assert_eq!((done.counter("ws_refused_503"), done.counter("ws_upgrades")), (1, 0), "{:?}", done.stdout);
}

/// Instantiate every case for each listed model.
macro_rules! hardening {
    ($($model:ident),* $(,)?) => {$(
        mod $model {
            const MODEL: &str = stringify!($model);
            #[test] fn http_bad_input_is_refused_and_closed() { if !super::unavailable(MODEL) { super::http_bad_input_is_refused_and_closed(MODEL) } }
            #[test] fn no_request_is_smuggled_in_a_body() { if !super::unavailable(MODEL) { super::no_request_is_smuggled_in_a_body(MODEL) } }
            #[test] fn a_request_sent_a_byte_at_a_time_gets_the_same_answer() { if !super::unavailable(MODEL) { super::a_request_sent_a_byte_at_a_time_gets_the_same_answer(MODEL) } }
            #[test] fn slowloris_is_closed_at_the_header_deadline() { if !super::unavailable(MODEL) { super::slowloris_is_closed_at_the_header_deadline(MODEL) } }
            #[test] fn slow_reader_is_closed_by_the_send_timeout() { if !super::unavailable(MODEL) { super::slow_reader_is_closed_by_the_send_timeout(MODEL) } }
            #[test] fn pipelining_without_reading_is_disconnected() { if !super::unavailable(MODEL) { super::pipelining_without_reading_is_disconnected(MODEL) } }
            #[test] fn a_burst_of_reset_connections_leaks_no_descriptors() { if !super::unavailable(MODEL) { super::a_burst_of_reset_connections_leaks_no_descriptors(MODEL) } }
            #[test] fn connections_that_end_before_they_are_accepted_are_closed() { if !super::unavailable(MODEL) { super::connections_that_end_before_they_are_accepted_are_closed(MODEL) } }
            #[test] fn saturated_at_max_conns_it_stays_quiet_and_recovers() { if !super::unavailable(MODEL) { super::saturated_at_max_conns_it_stays_quiet_and_recovers(MODEL) } }
            #[test] fn sigterm_with_1000_clients_truncates_nothing() { if !super::unavailable(MODEL) { super::sigterm_with_1000_clients_truncates_nothing(MODEL) } }
            #[test] fn udp_edge_cases_keep_the_loop_running() { if !super::unavailable(MODEL) { super::udp_edge_cases_keep_the_loop_running(MODEL) } }
            #[test] fn ws_hostile_frames_are_closed_with_their_codes() { if !super::unavailable(MODEL) { super::ws_hostile_frames_are_closed_with_their_codes(MODEL) } }
            #[test] fn ws_a_ping_flood_is_closed_with_1008() { if !super::unavailable(MODEL) { super::ws_a_ping_flood_is_closed_with_1008(MODEL) } }
            #[test] fn ws_an_upgrade_during_a_drain_is_refused_503() { if !super::unavailable(MODEL) { super::ws_an_upgrade_during_a_drain_is_refused_503(MODEL) } }
            #[test] fn ws_a_client_that_never_reads_is_closed_by_the_send_timeout() { if !super::unavailable(MODEL) { super::ws_a_client_that_never_reads_is_closed_by_the_send_timeout(MODEL) } }
        }
    )*};
}

support::for_every_model!(hardening);
