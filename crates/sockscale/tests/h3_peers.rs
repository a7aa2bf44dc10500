//! The HTTP/3 interop peers against each other, no sockscale involved: proves the harness of
//! tests/support/h3.rs (finders, runners, what each tool's output says) on every CI machine, so a
//! failure in the sockscale interop tests is sockscale's. Each case skips with the reason when a
//! peer is missing (ci-h3-setup.sh installs them all).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::h3::{self, ClientOpts, H3Cert, Outcome, PeerServer, Trust};

const MIB10: u64 = 10 * 1024 * 1024;

/// The value of a finder or a server start that needs a peer; skip the test when it is missing.
macro_rules! need {
    ($found:expr) => {
        match $found {
            Ok(value) => value,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        }
    };
}

fn ran(result: Result<Outcome, String>) -> Outcome {
    result.unwrap_or_else(|why| panic!("{why}"))
}

fn explain(what: &str, out: &Outcome) -> String {
    format!("{what}: {out:?}\nits output ends:\n{}", out.tail())
}

/// A file of `len` printable ASCII bytes (aioquic's client sends its body as text).
fn ascii_body(dir: &Path, len: usize) -> PathBuf {
    let mut rng = fastrand::Rng::with_seed(35);
    let body: Vec<u8> = (0..len).map(|_| rng.alphanumeric() as u8).collect();
    let path = dir.join(format!("body-{len}-{}.txt", std::process::id()));
    std::fs::write(&path, body).expect("write body");
    path
}

fn download(out: &Outcome, name: &str) -> Vec<u8> {
    let path = out.downloads.iter().find(|p| p.file_name().is_some_and(|n| n == name));
    let path = path.unwrap_or_else(|| panic!("{}", explain(&format!("no download named {name}"), out)));
    std::fs::read(path).expect("read download")
}

#[test]
fn aioquic_client_fetches_and_posts_10_mib_at_quicgo_server() {
    need!(h3::aioquic_examples());
    let cert = H3Cert::new("aioquic-quicgo");
    let server = need!(h3::start_quicgo_server(&cert));
    let opts = ClientOpts::new(Trust::Ca(cert.ca.clone()));

    let get = ran(h3::run_aioquic_client(server.port, &[&server.bytes_path(MIB10)], &opts));
    assert_eq!((get.ok, get.failed, get.bytes), (1, 0, Some(MIB10)), "{}", explain("GET 10 MiB", &get));
    assert_eq!(get.alpn.as_deref(), Some("h3"));
    let expected: Vec<u8> = b"0123456789abcdef".iter().copied().cycle().take(MIB10 as usize).collect();
    assert!(download(&get, &MIB10.to_string()) == expected, "the 10 MiB body differs from quic-go's pattern");

    let body = ascii_body(Path::new(env!("CARGO_TARGET_TMPDIR")), MIB10 as usize);
    let post = ran(h3::run_aioquic_client(
        server.port,
        &[server.echo_path().expect("quic-go echoes")],
        &ClientOpts { body_file: Some(body.clone()), ..opts },
    ));
    assert_eq!((post.ok, post.bytes), (1, Some(MIB10)), "{}", explain("POST 10 MiB", &post));
    assert!(download(&post, "echo") == std::fs::read(&body).expect("body"), "the echoed body differs");
    let _ = std::fs::remove_file(body);
}

#[test]
fn gtlsclient_runs_100_streams_under_5_percent_loss_at_quicgo_server() {
    need!(h3::gtlsclient());
    let cert = H3Cert::new("gtls-quicgo-loss");
    let server = need!(h3::start_quicgo_server(&cert));
    let opts = ClientOpts { requests: 100, loss: Some(0.05), ..ClientOpts::new(Trust::Insecure) };
    let out = ran(h3::run_gtlsclient(server.port, &[&server.bytes_path(100_000)], &opts));
    assert_eq!((out.ok, out.failed), (100, 0), "{}", explain("100 streams", &out));
    assert!(out.simulated_losses.unwrap_or(0) > 0, "{}", explain("no packet was dropped", &out));
    assert_eq!(download(&out, "100000").len(), 100_000);
}

#[test]
fn gtlsclient_resumes_and_sends_0rtt_to_quicgo_server() {
    need!(h3::gtlsclient());
    let cert = H3Cert::new("gtls-quicgo-resume");
    let server = need!(h3::start_quicgo_server(&cert));
    let resume = ClientOpts { resume: true, ..ClientOpts::new(Trust::Insecure) };
    let out = ran(h3::run_gtlsclient(server.port, &["/"], &resume));
    assert_eq!(out.ok, 1, "{}", explain("resumed GET", &out));
    assert_eq!(out.zero_rtt, Some(false), "--disable-early-data sends no 0-RTT");
    // gtlsclient does not say it resumed; quic-go's server does (first connection, then this one).
    let resumed = |s: &PeerServer| s.handshakes().is_some_and(|h| h.len() == 2 && h[1].resumed && !h[0].resumed);
    assert!(server.wait_for(Duration::from_secs(2), resumed), "quic-go saw: {:?}", server.handshakes());

    let early = ran(h3::run_gtlsclient(server.port, &["/"], &ClientOpts { zero_rtt: true, ..resume }));
    assert_eq!((early.ok, early.zero_rtt, early.resumed), (1, Some(true), Some(true)), "{}", explain("0-RTT", &early));
}

#[test]
fn gtlsclient_updates_keys_with_aioquic_server() {
    need!(h3::gtlsclient());
    let cert = H3Cert::new("gtls-aioquic-ku");
    let server = need!(h3::start_aioquic_server(&cert));
    let opts = ClientOpts { key_update: true, ..ClientOpts::new(Trust::Insecure) };
    let out = ran(h3::run_gtlsclient(server.port, &[&server.bytes_path(MIB10)], &opts));
    assert_eq!(out.ok, 1, "{}", explain("GET 10 MiB", &out));
    assert!(out.key_updates_initiated.unwrap_or(0) >= 1, "{}", explain("no key update started", &out));
    assert_eq!(download(&out, &MIB10.to_string()), vec![b'Z'; MIB10 as usize]);
    // aioquic follows it: a remote_update on its side.
    assert!(server.wait_for(Duration::from_secs(2), |s| s.key_updates() >= 1), "aioquic saw no key update");
}

#[test]
fn quicgo_client_resumes_with_and_without_0rtt_at_aioquic_server() {
    need!(h3::quicgo_h3());
    let cert = H3Cert::new("quicgo-aioquic");
    let server = need!(h3::start_aioquic_server(&cert));
    let resume = ClientOpts { resume: true, ..ClientOpts::new(Trust::Ca(cert.ca.clone())) };
    let out = ran(h3::run_quicgo_client(server.port, &server.bytes_path(1000), &resume));
    assert_eq!((out.ok, out.resumed, out.zero_rtt), (1, Some(true), Some(false)), "{}", explain("resume", &out));

    let early =
        ran(h3::run_quicgo_client(server.port, &server.bytes_path(1000), &ClientOpts { zero_rtt: true, ..resume }));
    assert_eq!((early.ok, early.resumed, early.zero_rtt), (1, Some(true), Some(true)), "{}", explain("0-RTT", &early));
    let last = |s: &PeerServer| s.handshakes().and_then(|h| h.last().copied());
    assert!(
        server.wait_for(Duration::from_secs(2), |s| last(s).is_some_and(|h| h.resumed && h.zero_rtt)),
        "aioquic saw: {:?}",
        server.handshakes()
    );
}

#[test]
fn quicgo_client_fetches_posts_and_runs_100_streams_at_gtlsserver() {
    need!(h3::quicgo_h3());
    let cert = H3Cert::new("quicgo-gtls");
    let server = need!(h3::start_gtlsserver(&cert, None));
    let opts = ClientOpts::new(Trust::Ca(cert.ca.clone()));

    let get = ran(h3::run_quicgo_client(server.port, &server.bytes_path(MIB10), &opts));
    assert_eq!((get.ok, get.bytes, get.alpn.as_deref()), (1, Some(MIB10), Some("h3")), "{}", explain("GET", &get));
    // quic-go updates its keys after 100 packets by itself; ngtcp2 follows.
    assert!(get.key_updates_initiated.unwrap_or(0) >= 1, "{}", explain("no key update", &get));
    assert!(server.wait_for(Duration::from_secs(2), |s| s.key_updates() >= 1), "gtlsserver saw no key update");

    let streams = ClientOpts { requests: 100, concurrent: 100, ..opts.clone() };
    let many = ran(h3::run_quicgo_client(server.port, &server.bytes_path(1000), &streams));
    assert_eq!((many.ok, many.bytes), (100, Some(100_000)), "{}", explain("100 streams", &many));
    assert_eq!(many.bodies.len(), 1, "gtlsserver's /1000 is one body");

    // gtlsserver has no echo: it reads the body and answers the path.
    let body = ascii_body(Path::new(env!("CARGO_TARGET_TMPDIR")), MIB10 as usize);
    let post = ran(h3::run_quicgo_client(server.port, "/1000", &ClientOpts { body_file: Some(body.clone()), ..opts }));
    assert_eq!((post.ok, post.bytes), (1, Some(1000)), "{}", explain("POST 10 MiB", &post));
    let _ = std::fs::remove_file(body);
}

#[test]
fn aioquic_client_resumes_with_0rtt_and_updates_keys_at_gtlsserver() {
    need!(h3::aioquic_examples());
    let cert = H3Cert::new("aioquic-gtls");
    let server = need!(h3::start_gtlsserver(&cert, None));
    let opts = ClientOpts { zero_rtt: true, ..ClientOpts::new(Trust::Ca(cert.ca.clone())) };
    let out = ran(h3::run_aioquic_client(server.port, &["/1000"], &opts));
    assert_eq!((out.ok, out.bytes), (1, Some(1000)), "{}", explain("GET", &out));
    assert_eq!((out.resumed, out.zero_rtt), (Some(true), Some(true)), "{}", explain("0-RTT", &out));

    // aioquic asks for the update at its first response event and applies it once the handshake
    // is confirmed: a transfer long enough to carry it.
    let opts = ClientOpts { key_update: true, ..ClientOpts::new(Trust::Ca(cert.ca.clone())) };
    let out = ran(h3::run_aioquic_client(server.port, &[&server.bytes_path(MIB10)], &opts));
    assert_eq!((out.ok, out.bytes), (1, Some(MIB10)), "{}", explain("GET 10 MiB", &out));
    assert!(out.key_updates_initiated.unwrap_or(0) >= 1, "{}", explain("no key update", &out));
    assert!(server.wait_for(Duration::from_secs(2), |s| s.key_updates() >= 1), "gtlsserver saw no key update");
}

/// The harness can fail: a client that trusts another CA gets no response.
#[test]
fn quicgo_client_refuses_a_server_of_another_ca() {
    need!(h3::quicgo_h3());
    let cert = H3Cert::new("wrong-ca-server");
    let other = H3Cert::new("wrong-ca-client");
    let server = need!(h3::start_quicgo_server(&cert));
    let out = ran(h3::run_quicgo_client(server.port, "/", &ClientOpts::new(Trust::Ca(other.ca.clone()))));
    assert_eq!((out.ok, out.failed), (0, 1), "{}", explain("wrong CA", &out));
    assert!(out.errors.iter().any(|e| e.contains("certificate")), "{:?}", out.errors);
    assert_ne!(out.exit, Some(0));
}
