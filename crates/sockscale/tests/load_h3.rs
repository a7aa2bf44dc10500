//! `sockscale load http --http3` against a real HTTP/3 server: aioquic 1.7.2's example server
//! (`http3_server.py`, `GET /<size>` answers `size` bytes), when python3 has aioquic and its
//! sdist's examples are unpacked (`.ci/run`); skipped with the reason printed otherwise. And
//! the runs that must end at once with one line and exit 1: nothing listening on the UDP port,
//! nothing answering on it, a certificate not trusted, a server that offers another ALPN. Every
//! wait is bounded.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AIOQUIC_VERSION: &str = "1.7.2";

/// A certificate for 127.0.0.1 made by `sockscale cert`, in its own directory.
struct Cert {
    dir: PathBuf,
}

impl Cert {
    fn new(name: &str) -> Cert {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("load-h3-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(env!("CARGO_BIN_EXE_sockscale")).arg("cert").arg("--out").arg(&dir).output().unwrap();
        assert!(out.status.success(), "sockscale cert: {}", String::from_utf8_lossy(&out.stderr));
        Cert { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

impl Drop for Cert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// aioquic's examples directory, or why it cannot be used.
fn aioquic_examples() -> Result<PathBuf, String> {
    let install = format!(
        "install: pip install aioquic=={AIOQUIC_VERSION} dnslib httpx jinja2 starlette wsproto, and unpack the sdist's examples/"
    );
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    let dir = std::env::var_os("SOCKSCALE_AIOQUIC_EXAMPLES")
        .map(PathBuf::from)
        .into_iter()
        .chain(cache.map(|c| c.join(format!("sockscale/aioquic-{AIOQUIC_VERSION}/examples"))))
        .find(|d| d.join("http3_server.py").is_file())
        .ok_or_else(|| format!("aioquic's examples not found ({install})"))?;
    let out = Command::new("python3")
        .args(["-c", "import aioquic, starlette, jinja2, wsproto; print(aioquic.__version__)"])
        .output()
        .map_err(|e| format!("no python3: {e}"))?;
    if !out.status.success() {
        return Err(format!("python3 cannot import aioquic and the examples' modules ({install})"));
    }
    Ok(dir)
}

/// A child process killed when dropped.
struct Peer {
    child: Child,
    port: u16,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP port the OS says is free now.
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether something holds UDP `port` on 127.0.0.1.
fn udp_port_taken(port: u16) -> bool {
    UdpSocket::bind(("127.0.0.1", port)).is_err()
}

/// aioquic's example HTTP/3 server on a free port, once it has bound it.
fn aioquic_server(examples: &Path, cert: &Cert) -> Peer {
    let port = free_udp_port();
    let child = Command::new("python3")
        .arg("http3_server.py")
        .args(["-c", &cert.path("cert.pem"), "-k", &cert.path("key.pem"), "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .current_dir(examples)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start http3_server.py");
    let peer = Peer { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !udp_port_taken(port) {
        assert!(Instant::now() < deadline, "http3_server.py did not bind UDP port {port} in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    peer
}

/// An aioquic QUIC server that offers only ALPN `hq-interop`: it refuses a client that offers
/// only `h3` (TLS alert 120).
fn other_alpn_server(cert: &Cert) -> Peer {
    let script = r#"
import asyncio, sys
from aioquic.asyncio import serve
from aioquic.quic.configuration import QuicConfiguration
async def main():
    c = QuicConfiguration(is_client=False, alpn_protocols=["hq-interop"])
    c.load_cert_chain(sys.argv[1], sys.argv[2])
    server = await serve("127.0.0.1", 0, configuration=c)
    print(server._transport.get_extra_info("sockname")[1], flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"#;
    let mut child = Command::new("python3")
        .args(["-c", script, &cert.path("cert.pem"), &cert.path("key.pem")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the ALPN server");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("the ALPN server's port within 20 s");
    let port = line.trim().parse().unwrap_or_else(|_| panic!("not a port: {line:?}"));
    Peer { child, port }
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", self.stdout, self.stderr))
    }
}

/// `sockscale load http --http3 ARGS`, killed after `limit`.
fn load(args: &[&str], limit: Duration) -> Run {
    let began = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sockscale"))
        .args(["load", "http", "--http3"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sockscale");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sockscale load {args:?} ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = began.elapsed();
    Run { code: status.code(), stdout: out.join().unwrap(), stderr: err.join().unwrap(), took }
}

macro_rules! need_aioquic {
    () => {
        match aioquic_examples() {
            Ok(dir) => dir,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        }
    };
}

#[test]
fn a_closed_loop_run_counts_every_request_and_the_quic_figures() {
    let examples = need_aioquic!();
    let cert = Cert::new("closed");
    let server = aioquic_server(&examples, &cert);
    let url = format!("https://127.0.0.1:{}/1000", server.port);
    let run =
        load(&["--cacert", &cert.path("ca.pem"), "-c", "2", "-n", "300", "--json", "-", &url], Duration::from_secs(60));
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let r = run.json();
    assert_eq!(r["requests"]["completed"], 300, "{}", run.stderr);
    assert_eq!(r["statuses"]["codes"]["200"], 300, "{}", run.stderr);
    let quic = &r["quic"];
    assert_eq!(quic["version"], 1);
    assert_eq!(quic["handshakes"], 2);
    assert_eq!(quic["alpn"]["h3"], 2);
    assert_eq!(quic["streams"], 300);
    assert_eq!(quic["rtt"]["count"], 2, "one RTT a connection");
    assert_eq!(quic["handshake_latency"]["count"], 2);
    assert!(quic["packets_sent"].as_u64().unwrap() > 0);
    assert!(r["bytes"]["received"].as_u64().unwrap() >= 300 * 1000, "{}", r["bytes"]);
    assert!(r.get("tls").is_none(), "HTTP/3's handshakes are in the QUIC block");
    assert!(run.stderr.contains("quic         version 1, ALPN h3 (2 connections)"), "{}", run.stderr);
}

#[test]
fn pipeline_16_keeps_16_streams_in_flight_on_each_connection() {
    let examples = need_aioquic!();
    let cert = Cert::new("pipeline");
    let server = aioquic_server(&examples, &cert);
    let url = format!("https://127.0.0.1:{}/100", server.port);
    let run = load(
        &["--cacert", &cert.path("ca.pem"), "-c", "2", "--pipeline", "16", "-n", "640", "--json", "-", &url],
        Duration::from_secs(60),
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let r = run.json();
    assert_eq!(r["requests"]["completed"], 640, "{}", run.stderr);
    assert_eq!(r["quic"]["streams"], 640);
    assert_eq!(r["errors"]["quic"], 0);
    assert_eq!(r["options"]["pipeline"], 16);
}

#[test]
fn an_open_loop_run_keeps_its_rate_and_reports_both_latencies() {
    let examples = need_aioquic!();
    let cert = Cert::new("open");
    let server = aioquic_server(&examples, &cert);
    let url = format!("https://127.0.0.1:{}/10", server.port);
    let run = load(
        &["--cacert", &cert.path("ca.pem"), "-c", "4", "-R", "200", "-d", "2", "--json", "-", &url],
        Duration::from_secs(60),
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let r = run.json();
    let completed = r["requests"]["completed"].as_u64().unwrap();
    assert!((340..=420).contains(&completed), "200/s for 2 s: {completed}\n{}", run.stderr);
    assert!(r["latency_uncorrected"]["count"].as_u64().unwrap() > 0, "open loop times each send too");
    assert!(r["schedule_slip"]["count"].as_u64().unwrap() > 0);
}

/// One line on standard error, exit 1, within the connect timeout (and a margin for the
/// process's start).
fn assert_fails_fast(run: &Run, timeout: Duration, words: &str) {
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
    assert!(lines[0].contains(words), "{:?} should say {words:?}", lines[0]);
    assert!(run.took < timeout + Duration::from_secs(2), "took {:?}", run.took);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

#[test]
fn nothing_listening_on_the_udp_port_ends_the_run_in_one_line() {
    let port = free_udp_port();
    let url = format!("https://127.0.0.1:{port}/");
    let run = load(&["--insecure", "-c", "2", "-n", "10", "--connect-timeout", "2", &url], Duration::from_secs(20));
    assert_fails_fast(&run, Duration::from_secs(2), "nothing listens on UDP port");
}

#[test]
fn a_port_that_never_answers_ends_the_run_at_the_connect_timeout() {
    // Bound, so no ICMP port unreachable comes back: only the timeout can say.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let url = format!("https://127.0.0.1:{}/", silent.local_addr().unwrap().port());
    let run = load(&["--insecure", "-c", "2", "-n", "10", "--connect-timeout", "1", &url], Duration::from_secs(20));
    assert_fails_fast(&run, Duration::from_secs(1), "no QUIC handshake within 1.0 s");
    assert!(run.took >= Duration::from_secs(1), "waited the connect timeout: {:?}", run.took);
}

#[test]
fn an_untrusted_certificate_ends_the_run_in_one_line() {
    let examples = need_aioquic!();
    let cert = Cert::new("untrusted");
    let server = aioquic_server(&examples, &cert);
    let url = format!("https://127.0.0.1:{}/", server.port);
    // No --cacert: the system's roots do not know the test CA.
    let run = load(&["-c", "2", "-n", "10", "--connect-timeout", "3", &url], Duration::from_secs(20));
    assert_fails_fast(&run, Duration::from_secs(3), "--cacert");
    assert!(run.stderr.contains("TLS handshake with"), "{}", run.stderr);
    // Trusted, the same server serves.
    let run = load(&["--cacert", &cert.path("ca.pem"), "-c", "1", "-n", "5", &url], Duration::from_secs(30));
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

#[test]
fn a_server_that_offers_another_alpn_ends_the_run_in_one_line() {
    if let Err(why) = aioquic_examples() {
        eprintln!("skipped: {why}");
        return;
    }
    let cert = Cert::new("alpn");
    let server = other_alpn_server(&cert);
    let url = format!("https://127.0.0.1:{}/", server.port);
    let run = load(
        &["--cacert", &cert.path("ca.pem"), "-c", "2", "-n", "10", "--connect-timeout", "3", &url],
        Duration::from_secs(20),
    );
    assert_fails_fast(&run, Duration::from_secs(3), "refused ALPN h3");
    assert!(run.stderr.contains("120"), "{}", run.stderr);
}

#[test]
fn http3_needs_an_https_url() {
    let run = load(&["-n", "1", "http://127.0.0.1:1/"], Duration::from_secs(10));
    assert!(matches!(run.code, Some(c) if c != 0), "{}", run.stderr);
    assert!(run.stderr.contains("https://"), "{}", run.stderr);
}

#[test]
fn a_server_that_goes_away_mid_run_ends_it_within_the_connect_timeout() {
    let examples = need_aioquic!();
    let cert = Cert::new("away");
    let mut server = aioquic_server(&examples, &cert);
    let url = format!("https://127.0.0.1:{}/10", server.port);
    let ca = cert.path("ca.pem");
    let json = cert.path("report.json");
    let run = std::thread::scope(|s| {
        let run = s.spawn(|| {
            let args = [
                "--cacert",
                &ca,
                "-c",
                "2",
                "-n",
                "100000000",
                "--connect-timeout",
                "2",
                "--timeout",
                "2",
                "--json",
                &json,
                &url,
            ];
            load(&args, Duration::from_secs(30))
        });
        std::thread::sleep(Duration::from_millis(1500));
        let _ = server.child.kill();
        let killed = Instant::now();
        let run = run.join().unwrap();
        (run, killed.elapsed())
    });
    let (run, after_kill) = run;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("ended early"), "{}", run.stderr);
    // A connection with a datagram in flight learns from the ICMP port unreachable at once; one
    // whose request the server acknowledged before it went sends nothing more and waits for
    // its reply timeout (QUIC has no FIN or reset from a dead process). The run gives up once
    // none has connected for the connect timeout.
    let report = std::fs::read_to_string(&json).unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(&report).unwrap_or_default();
    assert!(
        after_kill < Duration::from_secs(6),
        "ended {after_kill:?} after the server went: {}\nerrors {}\nquic failures {}",
        run.stderr,
        report["errors"],
        report["quic"]["failures"]
    );
}

#[test]
fn with_0rtt_resumed_connections_send_their_request_early() {
    let examples = need_aioquic!();
    let cert = Cert::new("0rtt");
    let server = aioquic_server(&examples, &cert);
    let url = format!("https://127.0.0.1:{}/10", server.port);
    let ca = cert.path("ca.pem");
    // One request a connection: every connection after the first can resume a session.
    let base = ["--cacert", &ca, "-c", "1", "-n", "20", "--no-keepalive", "--json", "-"];
    let run = load(&[&base[..], &["--0rtt", &url]].concat(), Duration::from_secs(60));
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let r = run.json();
    assert_eq!(r["requests"]["completed"], 20, "{}", run.stderr);
    let quic = &r["quic"];
    assert_eq!(quic["handshakes"], 20, "a connection a request");
    let sent = quic["zero_rtt_sent"].as_u64().unwrap();
    assert!(sent >= 5, "resumed connections sent 0-RTT: {}", run.stderr);
    assert_eq!(quic["early_requests"], sent, "one request each");
    assert!(quic["zero_rtt_accepted"].as_u64().unwrap() > 0, "{}", run.stderr);
    // Without --0rtt nothing goes early.
    let run = load(&[&base[..], &[url.as_str()]].concat(), Duration::from_secs(60));
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.json()["quic"]["zero_rtt_sent"], 0);
}
