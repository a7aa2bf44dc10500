//! What sets the select, poll64 and signal models apart, checked against the `sockscale serve`
//! process: select's FD_SETSIZE refusal, poll64's threads growing with connections, and the
//! signal model's fallback when the real-time signal queue overflows. Bounds, never speed.

mod support;

use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::Duration;

use support::*;

/// Past FD_SETSIZE, select cannot watch a connection's descriptor: the server closes that
/// connection, counts it as refused, logs why, and keeps serving everyone admitted.
#[test]
fn select_refuses_connections_beyond_fd_setsize_and_keeps_serving() {
    const CLIENTS: usize = 1100;
    const FD_SETSIZE: usize = 1024;
    let server = ServerProc::start("select", &["--proto", "echo"]);
    let mut clients: Vec<TcpStream> = (0..CLIENTS).map(|_| server.connect()).collect();
    // The server accepts in order; the last client's descriptor is far past 1023.
    let mut last = clients.pop().expect("clients");
    last.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut byte = [0u8; 1];
    match read_some(&mut last, &mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("a connection beyond FD_SETSIZE was not closed: {other:?}"),
    }
    let mut refused_seen = 1;
    let mut admitted = Vec::new();
    for (i, client) in clients.iter_mut().enumerate() {
        client.set_nonblocking(true).unwrap();
        match read_some(client, &mut byte) {
            Ok(0) => refused_seen += 1,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => refused_seen += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => admitted.push(i),
            other => panic!("client {i}: unexpected {other:?}"),
        }
    }
    assert!(refused_seen >= CLIENTS - FD_SETSIZE, "only {refused_seen} of {CLIENTS} refused");
    assert!(admitted.len() > FD_SETSIZE - 16, "only {} admitted", admitted.len());
    // Admitted clients, the first and the last among them, are still served.
    for &i in [admitted[0], admitted[admitted.len() / 2], admitted[admitted.len() - 1]].iter() {
        clients[i].set_nonblocking(false).unwrap();
        echo_byte(&mut clients[i], i as u8);
    }
    drop(clients);
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(done.counter("refused"), refused_seen as i64);
    assert_eq!(done.counter("accepted"), admitted.len() as i64);
    assert_eq!(done.counter("connections"), 0);
    let logged = done.stderr.lines().filter(|l| l.contains("FD_SETSIZE")).count();
    assert!(logged >= 1, "the refusal was never logged: {}", done.stderr);
    let bound = 2 + done.took.as_secs() as usize + 20;
    assert!(logged <= bound, "logged {logged} times: not rate-limited");
}

/// poll64 starts a thread per 64 connections, and reuses groups emptied by closes rather than
/// starting more.
#[test]
fn poll64_threads_grow_with_connections_and_empty_groups_are_reused() {
    const CLIENTS: usize = 200;
    let groups = CLIENTS.div_ceil(64) as u64;
    let server = ServerProc::start("poll64", &["--proto", "echo"]);
    let idle_threads = server.threads();
    let idle_fds = server.open_fds();
    let mut clients: Vec<TcpStream> = (0..CLIENTS).map(|_| server.connect()).collect();
    // Every connection is served, the last ones by the newest group.
    for (i, c) in clients.iter_mut().enumerate().rev().take(3) {
        echo_byte(c, i as u8);
    }
    let grown = server.threads();
    assert!(grown >= idle_threads + groups, "{idle_threads} threads idle, {grown} at {CLIENTS} connections");

    drop(clients);
    // Each group keeps two eventfds; every connection's descriptor is closed.
    let settled = eventually(Duration::from_secs(10), || server.open_fds() <= idle_fds + 2 * grown as usize);
    assert!(settled, "descriptors not closed: {} open", server.open_fds());
    let mut again: Vec<TcpStream> = (0..CLIENTS).map(|_| server.connect()).collect();
    for (i, c) in again.iter_mut().enumerate().rev().take(3) {
        echo_byte(c, i as u8);
    }
    assert_eq!(server.threads(), grown, "empty groups were not reused");
    drop(again);
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(done.counter("accepted"), 2 * CLIENTS as i64);
    assert_eq!(done.counter("connections"), 0);
}

/// With the server's RLIMIT_SIGPENDING lowered, the real-time signal queue overflows under echo
/// traffic; the SIGIO fallback (a poll scan) must lose no readiness.
#[test]
fn signal_model_survives_signal_queue_overflow() {
    const CLIENTS: u64 = 20;
    let server = ServerProc::start("signal", &["--proto", "echo"]);
    let limit = libc::rlimit { rlim_cur: 2, rlim_max: 2 };
    // SAFETY: prlimit reads one live rlimit and writes nothing (null old limit); the pid is our
    // live child.
    let rc = unsafe { libc::prlimit(server.pid(), libc::RLIMIT_SIGPENDING, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    std::thread::scope(|s| {
        for i in 0..CLIENTS {
            let stream = server.connect();
            s.spawn(move || {
                let data = pattern(i + 1, 256 << 10);
                assert!(echo_roundtrip(stream, &data) == data, "connection {i}: echo differs");
            });
        }
    });
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(done.counter("accepted"), CLIENTS as i64);
    assert_eq!(done.counter("bytes_out"), (CLIENTS << 18) as i64);
    assert!(done.stderr.contains("signal queue overflowed"), "the fallback never ran: {}", done.stderr);
}
