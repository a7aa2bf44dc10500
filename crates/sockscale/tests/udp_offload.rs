//! `serve --proto udp` through the datagram endpoint, with UDP GSO and GRO on and off, on every
//! model that serves UDP (the list is the binary's own, `sockscale models --json`).
//!
//! The client sends a burst of ten 1,200-byte datagrams in one GSO message: a server with GRO
//! receives them in one coalesced buffer, and with GSO answers them in one message; the client
//! (without GRO) receives ten datagrams either way. The counters must show both used when on
//! and neither when off, and every reply must be its datagram.

mod support;

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

use support::*;

const UDP_SEGMENT: libc::c_int = 103;
const BURST: usize = 10;
const SEGMENT: usize = 1200;

/// Send `data` on the connected socket as datagrams of `segment` bytes, in one GSO message.
fn send_gso(socket: &UdpSocket, data: &[u8], segment: u16) -> std::io::Result<()> {
    let mut control = [0u64; 4];
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain old data; zeroed is "no name, no control".
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
    // SAFETY: the control buffer (32 bytes) holds one cmsghdr with its u16; the message points
    // at live buffers for the call.
    let n = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(2) as _;
        libc::CMSG_DATA(cmsg).cast::<u16>().write_unaligned(segment);
        libc::sendmsg(socket.as_raw_fd(), &msg, 0)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The models the binary serves UDP on, and can run here.
fn udp_models() -> Vec<String> {
    let out = std::process::Command::new(BIN).args(["models", "--json"]).output().expect("run sockscale models");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("models --json");
    let models: Vec<String> = json
        .as_array()
        .expect("an array")
        .iter()
        .filter(|m| m["udp"] == true)
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect();
    assert!(models.len() >= 2, "few UDP models: {models:?}");
    models.into_iter().filter(|m| !unavailable(m)).collect()
}

/// Echo a GSO burst and single datagrams through `model` with `--udp-gso`/`--udp-gro` set to
/// `offload`; the final counters.
fn echo(model: &str, offload: &str) -> Finished {
    let server = ServerProc::start(
        model,
        &["--proto", "udp", "--udp-gso", offload, "--udp-gro", offload, "--metrics", "127.0.0.1:0"],
    );
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    socket.connect(server.addr).unwrap();
    let mut buf = vec![0u8; 65536];
    let burst = pattern(7, BURST * SEGMENT);
    send_gso(&socket, &burst, SEGMENT as u16).expect("the client's kernel sends UDP GSO");
    for (i, expected) in burst.chunks(SEGMENT).enumerate() {
        let n = socket.recv(&mut buf).unwrap_or_else(|e| panic!("{model}, offload {offload}: reply {i}: {e}"));
        assert_eq!(&buf[..n], expected, "{model}, offload {offload}: reply {i} of the burst");
    }
    for (i, size) in [0usize, 1, 512, 1472, 9000, 65507].into_iter().enumerate() {
        let data = pattern(i as u64 + 100, size);
        socket.send(&data).unwrap();
        let n = socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &data[..], "{model}, offload {offload}: datagram of {size} bytes");
    }
    if offload == "on" {
        let shown = metrics_show(
            server.metrics_addr(),
            &[("udp_gro_datagrams_total", BURST as u64), ("udp_gso_datagrams_total", BURST as u64)],
        );
        shown.unwrap_or_else(|e| panic!("{model}: {e}"));
    }
    server.stop()
}

#[test]
fn udp_echo_with_gso_and_gro_on_and_off_on_every_model() {
    for model in udp_models() {
        let on = echo(&model, "on");
        let c = |name: &str| on.counter(name);
        assert_eq!((c("datagrams_in"), c("datagrams_out"), c("datagrams_dropped")), (16, 16, 0), "{model}, on");
        // The burst arrived in one coalesced buffer and went back in one GSO message.
        assert_eq!((c("udp_gro_buffers"), c("udp_gro_datagrams")), (1, BURST as i64), "{model}, on");
        assert_eq!((c("udp_gso_sends"), c("udp_gso_datagrams")), (1, BURST as i64), "{model}, on");

        let off = echo(&model, "off");
        let c = |name: &str| off.counter(name);
        assert_eq!((c("datagrams_in"), c("datagrams_out"), c("datagrams_dropped")), (16, 16, 0), "{model}, off");
        for name in ["udp_gro_buffers", "udp_gro_datagrams", "udp_gso_sends", "udp_gso_datagrams"] {
            assert_eq!(c(name), 0, "{model}, off: {name}");
        }
    }
}

/// The offload flags asked of a server without datagrams are refused in one line, not ignored.
#[test]
fn the_offload_flags_are_refused_for_tcp_in_one_line() {
    for (flag, proto) in [("--udp-gso", "echo"), ("--udp-gro", "http")] {
        let mut child = std::process::Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--proto", proto, flag, "off"])
            .env("RUST_LOG", "off")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run sockscale serve");
        // A server that wrongly starts is killed after 10 s, and fails below.
        let exited = eventually(Duration::from_secs(10), || child.try_wait().expect("wait").is_some());
        if !exited {
            let _ = child.kill();
        }
        let out = child.wait_with_output().expect("its output");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(exited, "{flag} with {proto}: the server started");
        assert!(!out.status.success(), "{flag} with {proto}: {err}");
        assert_eq!(
            err.trim(),
            format!("error: {flag} applies to --proto udp and --http3, and --proto {proto} has no datagrams")
        );
    }
}

/// `load udp` sends the datagrams a socket begins in one turn in one GSO message and reads the
/// answers coalesced (the server, with its offloads on, answers a burst in one GSO message);
/// with `--udp-gso off --udp-gro off`, neither, and the same answers come.
#[test]
fn load_udp_sends_with_gso_and_receives_with_gro_and_neither_when_off() {
    let server = ServerProc::start("epoll", &["--proto", "udp"]);
    let addr = server.addr.to_string();
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["load", "udp", &addr, "-c", "2", "-t", "1", "-n", "4000", "--depth", "8", "--json", "-"];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(BIN).args(&args).output().expect("run sockscale load");
        assert!(out.status.success(), "load {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the report");
        report["udp"].clone()
    };
    let n = |udp: &serde_json::Value, name: &str| udp[name].as_u64().unwrap_or_else(|| panic!("udp.{name}: {udp}"));
    let on = run(&[]);
    assert_eq!((n(&on, "sent"), n(&on, "received"), n(&on, "lost")), (4000, 4000, 0), "on: {on}");
    assert!(n(&on, "gso_datagrams") > 0, "no GSO message: {on}");
    assert!(n(&on, "gro_datagrams") > 0, "no coalesced answers: {on}");
    assert!(n(&on, "send_calls") * 2 <= n(&on, "sent"), "one datagram per send call: {on}");
    let off = run(&["--udp-gso", "off", "--udp-gro", "off"]);
    assert_eq!((n(&off, "sent"), n(&off, "received"), n(&off, "lost")), (4000, 4000, 0), "off: {off}");
    assert_eq!((n(&off, "gso_datagrams"), n(&off, "gro_datagrams")), (0, 0), "off: {off}");
    server.stop();
}
