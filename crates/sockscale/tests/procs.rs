//! Several processes as one: `serve --procs` and `load --procs`, and `--source`.

mod support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

fn children(pid: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// `sockscale serve ARGS` on a free port, one thread a worker unless ARGS say otherwise, once
/// it says where it listens: the process, the rest of its output, and the address.
fn serve_procs(args: &[&str]) -> (Child, std::io::Lines<BufReader<ChildStdout>>, std::net::SocketAddr) {
    let threads: &[&str] = if args.contains(&"--threads") { &[] } else { &["--threads", "1"] };
    let mut parent = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(threads)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(parent.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.strip_prefix("listening on ").expect("listening line").parse().unwrap();
    (parent, lines, addr)
}

#[test]
fn serve_procs_restarts_dead_workers_and_forwards_sigterm() {
    let (mut parent, lines, addr) = serve_procs(&["--procs", "3"]);
    let workers = children(parent.id());
    assert_eq!(workers.len(), 3, "three workers");
    // Every worker shares the port: many connections all get served.
    for i in 0..30u8 {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(&[i]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i);
    }
    // A worker that dies is replaced.
    sockscale_sys::signal_process(workers[0], libc::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let replaced = loop {
        let now = children(parent.id());
        if now.len() == 3 && !now.contains(&workers[0]) {
            break now;
        }
        assert!(Instant::now() < deadline, "worker not restarted: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // SIGTERM to the parent reaches every worker; all exit, the parent with status 0.
    sockscale_sys::signal_process(parent.id(), libc::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = parent.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "parent did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    for pid in replaced {
        assert!(!alive(pid), "worker {pid} still running");
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let last = rest.last().cloned().unwrap_or_default();
    assert!(last.starts_with("final accepted="), "{rest:?}");
}

/// A supervisor killed outright (SIGKILL, the OOM killer) cannot forward anything: its workers
/// are told by the kernel and exit, instead of holding the port as orphans.
#[test]
fn workers_exit_when_their_supervisor_is_killed() {
    let (mut parent, _lines, addr) = serve_procs(&["--procs", "2", "--drain-timeout", "1"]);
    let workers = children(parent.id());
    assert_eq!(workers.len(), 2, "two workers");
    sockscale_sys::signal_process(parent.id(), libc::SIGKILL).unwrap();
    parent.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers.iter().any(|&w| alive(w)) {
        assert!(Instant::now() < deadline, "workers {workers:?} outlived their supervisor");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(std::net::TcpStream::connect(addr).is_err(), "the port is still served");
}

#[test]
fn serve_procs_reports_a_busy_port() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN).args(["serve", "--listen", &addr, "--procs", "2"]).output().unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!("error: cannot listen on {addr}: address already in use")
    );
}

/// `serve --http3 --procs 2` on a port whose UDP side someone else holds: refused in one line
/// before any worker starts, as by a single server.
#[test]
fn serve_procs_http3_reports_a_busy_udp_port() {
    let squatter = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let cert = tls::TestCert::new("procs-h3-busy");
    let out = Command::new(BIN)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--proto", "http", "--http3", "--procs", "2"])
        .args(cert.args())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!("error: cannot serve HTTP/3 on UDP 127.0.0.1:{port}: address already in use")
    );
}

#[test]
fn load_procs_merge_into_one_report() {
    let server = ServerProc::start("epoll", &["--proto", "http"]);
    let json = std::env::temp_dir().join(format!("sockscale-procs-{}.json", std::process::id()));
    let out = Command::new(BIN)
        .args([
            "load",
            "http",
            &format!("http://{}/", server.addr),
            "-c",
            "6",
            "-n",
            "300",
            "-t",
            "1",
            "--procs",
            "3",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(r["procs"], 3);
    assert_eq!(r["requests"]["completed"], 300, "-n is split exactly across processes");
    assert_eq!(r["connections"]["connected"], 6);
    assert_eq!(r["latency"]["count"], 300);
}

#[test]
fn source_addresses_are_used() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::thread::spawn(move || {
        let mut peers = HashSet::new();
        // The probe and 8 connections.
        for _ in 0..9 {
            let (mut s, peer) = listener.accept().unwrap();
            peers.insert(peer.ip());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = read_some(&mut s, &mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
        peers
    });
    let out = Command::new(BIN)
        .args(["load", "echo", &addr.to_string(), "-c", "8", "-n", "16", "-t", "1", "--source", "127.0.0.2-127.0.0.4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let peers = seen.join().unwrap();
    for ip in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        assert!(peers.contains(&ip.parse::<IpAddr>().unwrap()), "no connection from {ip}: {peers:?}");
    }
}

/// `serve --procs 2 --listen unix:PATH`: the parent binds the socket and both workers serve the
/// listener they inherit (no SO_REUSEPORT for AF_UNIX); `load --procs 2 --unix-socket` runs
/// through it with no error; the parent removes the file once every worker is gone.
#[test]
fn serve_procs_share_one_unix_socket() {
    let dir = std::env::temp_dir().join(format!("sockscale-procs-uds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let listen = format!("unix:{}", path.display());
    let mut parent = Command::new(BIN)
        .args(["serve", "--proto", "http", "--threads", "1", "--procs", "2", "--listen", &listen])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(parent.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), format!("listening on {listen}"));
    assert_eq!(children(parent.id()).len(), 2, "two workers");
    let out = Command::new(BIN)
        .args(["load", "http", "http://localhost/", "--unix-socket", path.to_str().unwrap()])
        .args(["-c", "20", "-n", "2000", "--procs", "2", "-t", "1"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stop_parent(&mut parent);
    let finals: Vec<String> = lines.map_while(Result::ok).filter(|l| l.starts_with("final ")).collect();
    assert_eq!(finals.len(), 1, "{finals:?}");
    let accepted: i64 = finals[0]
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("accepted="))
        .and_then(|v| v.parse().ok())
        .expect("accepted");
    // The load's 20 connections and its probe, between the two workers.
    assert!(accepted >= 21, "{}", finals[0]);
    assert!(!path.exists(), "the parent left the socket file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Datagrams from `flows` sockets of their own (each a 4-tuple of its own, so the kernel's
/// SO_REUSEPORT hash spreads them over the whole group) to `addr`: the flows that got their
/// echo back, each asked up to three times (loopback may drop a datagram under load; a flow
/// that lands on a socket nobody serves is never answered).
fn udp_flows_answered(addr: std::net::SocketAddr, flows: usize) -> Vec<usize> {
    let sockets: Vec<std::net::UdpSocket> = (0..flows)
        .map(|_| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            s
        })
        .collect();
    let mut answered = Vec::new();
    for (i, s) in sockets.iter().enumerate() {
        let msg = format!("flow {i}");
        let mut buf = [0u8; 64];
        for _ in 0..3 {
            s.send_to(msg.as_bytes(), addr).unwrap();
            match s.recv_from(&mut buf) {
                Ok((n, _)) if &buf[..n] == msg.as_bytes() => {
                    answered.push(i);
                    break;
                }
                _ => {}
            }
        }
    }
    answered
}

/// SIGTERM the `--procs` parent and wait for it to exit (bounded).
fn stop_parent(parent: &mut Child) {
    sockscale_sys::signal_process(parent.id(), libc::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while parent.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "parent did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The parent's one `final` line (the workers' counters summed), once it has exited.
fn final_line(lines: std::io::Lines<BufReader<ChildStdout>>) -> String {
    let finals: Vec<String> = lines.map_while(Result::ok).filter(|l| l.starts_with("final ")).collect();
    assert_eq!(finals.len(), 1, "{finals:?}");
    finals.into_iter().next().unwrap_or_default()
}

/// Counter `name` of a `final` line.
fn counter_in(line: &str, name: &str) -> i64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

/// `serve --proto udp --procs 2`: every socket in the port's SO_REUSEPORT group is served, so
/// every flow is answered — the parent's reservation of the port used to be a bound UDP
/// socket of the group too, which took its share of the flows and answered none (37 of 60
/// flows answered). Worker 0, killed, is replaced and serves its place in the group again.
#[test]
fn serve_procs_udp_answers_every_flow() {
    const FLOWS: usize = 64;
    let (mut parent, lines, addr) = serve_procs(&["--proto", "udp", "--procs", "2", "--threads", "2"]);
    let workers = children(parent.id());
    assert_eq!(workers.len(), 2, "two workers");
    let answered = udp_flows_answered(addr, FLOWS);
    assert_eq!(answered.len(), FLOWS, "flows answered: {answered:?}");

    sockscale_sys::signal_process(workers[0], libc::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = children(parent.id());
        if now.len() == 2 && !now.contains(&workers[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "worker not restarted: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The new worker is serving once every flow is answered again (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answered = udp_flows_answered(addr, FLOWS);
        if answered.len() == FLOWS {
            break;
        }
        assert!(Instant::now() < deadline, "after a restart, flows answered: {} of {FLOWS}", answered.len());
    }
    stop_parent(&mut parent);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.last().is_some_and(|l| l.starts_with("final ")), "{rest:?}");
}

/// Every model that serves UDP serves every socket its parent bound for it under `--procs`: the
/// parent binds as many as the model's capability row says (`Model::udp_sockets`), and a model
/// whose engine served fewer would leave flows hashed to the others unanswered.
#[test]
fn serve_procs_udp_answers_every_flow_on_every_udp_model() {
    const FLOWS: usize = 48;
    for model in sockscale_server::Model::ALL.into_iter().filter(|m| m.serves_udp()) {
        let name = model.name();
        if unavailable(name) {
            continue;
        }
        let (mut parent, _lines, addr) =
            serve_procs(&["--proto", "udp", "--procs", "2", "--threads", "3", "--model", name]);
        let answered = udp_flows_answered(addr, FLOWS);
        assert_eq!(answered.len(), FLOWS, "{name}: flows answered: {answered:?}");
        stop_parent(&mut parent);
    }
}

/// `serve --http3 --procs 2`: `load http --http3` over many connections (spread over both
/// processes' UDP sockets by the kernel's hash) has every request answered, with `--quic-retry
/// on` (each process's Retry and its tokens from the keys the parent gave every worker), and
/// the parent's `final` line sums both workers' counts.
#[test]
fn serve_procs_http3_answers_every_request() {
    let cert = tls::TestCert::new("procs-h3");
    let tls = cert.args();
    let mut args = vec!["--proto", "http", "--http3", "--quic-retry", "on", "--procs", "2"];
    args.extend(tls.iter().map(String::as_str));
    let (mut parent, lines, addr) = serve_procs(&args);
    assert_eq!(children(parent.id()).len(), 2, "two workers");
    // Neither the keys nor anything like them on a worker's command line.
    for pid in children(parent.id()) {
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(cmdline.contains("--quic-keys-fd"), "{cmdline:?}");
    }
    let out = Command::new(BIN)
        .args(["load", "http", "--http3", "-c", "24", "-n", "480", "--sni", "localhost", "--cacert"])
        .arg(&cert.ca_file)
        .arg(format!("https://127.0.0.1:{}/", addr.port()))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stop_parent(&mut parent);
    let finals = [final_line(lines)];
    let counter = |name: &str| counter_in(&finals[0], name);
    assert_eq!(counter("h3_requests"), 480, "{}", finals[0]);
    // The load's 24 connections and its probe. Each new address is sent a Retry first, unless
    // its client came back with a NEW_TOKEN token from an earlier connection (quinn's client
    // keeps some), which the other process takes too: the same token key.
    let (handshakes, retries) = (counter("quic_handshakes"), counter("quic_retries"));
    assert_eq!(handshakes, 25, "{}", finals[0]);
    assert!(retries >= 1 && retries <= handshakes, "{}", finals[0]);
}

/// `serve --http3 --procs 2 --threads 3` (epoll: a UDP socket per thread, six in the port's
/// group): a client whose address changes mid-connection keeps its connection, whichever
/// process's socket the kernel's hash picks for its new address (5 times in 6). The parent binds
/// all six in order and steers the group by connection ID; each worker's IDs carry its
/// sockets' indices. Without that, the other process answers with a stateless reset. ngtcp2's
/// client moves after the handshake, then sends its request, as a migration or as a NAT
/// rebinding; three times, then again three times after worker 1 was killed and restarted
/// (given the same sockets, at the same indices: the group keeps its order).
#[test]
fn serve_procs_http3_keeps_a_migrating_client() {
    let client = match support::h3::gtlsclient() {
        Ok(client) => client,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let cert = tls::TestCert::new("procs-h3-migrate");
    let tls = cert.args();
    let mut args = vec!["--proto", "http", "--http3", "--model", "epoll", "--threads", "3", "--procs", "2"];
    args.extend(tls.iter().map(String::as_str));
    let (mut parent, lines, addr) = serve_procs(&args);
    let parent_pid = parent.id();
    let moved_and_answered = |runs: [bool; 3], when: &str| {
        for (run, rebinding) in runs.into_iter().enumerate() {
            if let Err(why) = support::h3::request_after_moving(&client, addr.port(), rebinding) {
                // Its workers follow it (the supervisor-killed case above).
                let _ = sockscale_sys::signal_process(parent_pid, libc::SIGKILL);
                panic!("{when}, run {run} (NAT rebinding: {rebinding}): {why}");
            }
        }
    };
    moved_and_answered([false, true, false], "at first");
    // The UDP part of a worker's command line: its inherited sockets and their first index.
    let udp_args = |pid: u32| -> Option<String> {
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&str> = cmdline.split('\0').collect();
        args.contains(&"1/2").then(|| {
            let at = |flag: &str| args.iter().position(|a| *a == flag).map(|i| args[i + 1]);
            format!("{:?} {:?}", at("--udp-fd"), at("--udp-steering"))
        })
    };
    let workers = children(parent.id());
    let (victim, before) = workers.iter().find_map(|&pid| Some((pid, udp_args(pid)?))).expect("worker 1");
    assert!(before.contains("Some(\"3\")"), "worker 1's sockets start at index 3: {before}");
    sockscale_sys::signal_process(victim, libc::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let now = children(parent.id());
        if let Some(after) = now.iter().filter(|&&pid| pid != victim).find_map(|&pid| udp_args(pid)) {
            break after;
        }
        assert!(Instant::now() < deadline, "worker 1 not restarted: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(after, before, "the restarted worker 1 serves the same sockets at the same indices");
    moved_and_answered([true, false, true], "after worker 1's restart");
    stop_parent(&mut parent);
    let finals = [final_line(lines)];
    let counter = |name: &str| counter_in(&finals[0], name);
    // The killed worker's counts died with it: at least the three requests after the restart.
    assert!((3..=6).contains(&counter("h3_requests")), "{}", finals[0]);
    assert_eq!(counter("quic_steering_refused"), 0, "{}", finals[0]);
}
