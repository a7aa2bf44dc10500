//! `serve --http3` against three independent HTTP/3 clients, on every model that serves UDP:
//! quic-go's (`tests/interop/quicgo_h3`), ngtcp2's `gtlsclient` and aioquic's example client
//! (installed by `.ci/run`; a missing one skips with the reason printed). Seen from a client,
//! every model behaves the same: the handshake and requests, 100 concurrent streams, a resumed
//! connection, a 10 MiB body each way, a key update, and a transfer under 5% loss each way.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use sockscale_server::Policy;
use support::h3::{
    aioquic_examples, gtlsclient, quicgo_h3, run_aioquic_client, run_gtlsclient, run_quicgo_client, ClientOpts, H3Cert,
    Outcome, Trust,
};
use support::ServerProc;

const TEN_MIB: usize = 10 << 20;

fn serve(model: &str, cert: &H3Cert, extra: &[&str]) -> ServerProc {
    let (c, k) = (cert.cert.to_string_lossy().into_owned(), cert.key.to_string_lossy().into_owned());
    let mut args = vec!["--proto", "http", "--tls-cert", &c, "--tls-key", &k, "--http3"];
    args.extend_from_slice(extra);
    ServerProc::start(model, &args)
}

/// A peer client's outcome, or None (the case skipped, the reason printed) if the tool is not
/// installed; any other failure to run it fails the test.
fn ran(what: &str, found: Result<PathBuf, String>, run: impl FnOnce() -> Result<Outcome, String>) -> Option<Outcome> {
    if let Err(why) = found {
        eprintln!("skipped {what}: {why}");
        return None;
    }
    Some(run().unwrap_or_else(|e| panic!("{what}: {e}")))
}

fn skip(model: &str) -> bool {
    support::unavailable(model) || support::skip(model, Policy::Http3)
}

/// Handshakes, 100 concurrent streams and a resumed connection, with each of the three clients.
fn three_clients(model: &str) {
    if skip(model) {
        return;
    }
    let cert = H3Cert::new(&format!("interop-{model}"));
    let server = serve(model, &cert, &[]);
    let port = server.addr.port();
    let ca = Trust::Ca(cert.ca.clone());

    let mut quicgo = ClientOpts::new(ca.clone());
    quicgo.requests = 100;
    quicgo.concurrent = 100;
    if let Some(o) = ran("quic-go", quicgo_h3(), || run_quicgo_client(port, "/", &quicgo)) {
        assert_eq!((o.ok, o.failed), (100, 0), "{model}: quic-go: {:?}\n{}", o.errors, o.tail());
        assert_eq!(o.bytes, Some(100 * 4096), "{model}");
        assert_eq!(o.alpn.as_deref(), Some("h3"), "{model}");
        let mut again = ClientOpts::new(ca.clone());
        again.resume = true;
        let o = ran("quic-go resume", quicgo_h3(), || run_quicgo_client(port, "/", &again)).expect("quic-go ran once");
        assert_eq!(o.resumed, Some(true), "{model}: the second connection did not resume\n{}", o.tail());
    }

    let mut gtls = ClientOpts::new(Trust::Insecure);
    gtls.requests = 100;
    if let Some(o) = ran("gtlsclient", gtlsclient(), || run_gtlsclient(port, &["/"], &gtls)) {
        assert_eq!((o.ok, o.failed), (100, 0), "{model}: gtlsclient\n{}", o.tail());
    }

    let mut aio = ClientOpts::new(ca);
    aio.requests = 100;
    if let Some(o) = ran("aioquic", aioquic_examples(), || run_aioquic_client(port, &["/"], &aio)) {
        assert_eq!((o.ok, o.failed), (100, 0), "{model}: aioquic: {:?}\n{}", o.errors, o.tail());
        assert!(o.statuses.iter().all(|&s| s == 200), "{model}: {:?}", o.statuses);
    }

    let done = server.stop_within(Duration::from_secs(15));
    assert!(done.counter("h3_requests") >= 100, "{model}: {}", done.counter("h3_requests"));
    assert_eq!(done.counter("h3_connection_errors"), 0, "{model}");
    assert_eq!(done.counter("h3_stream_errors"), 0, "{model}");
    assert_eq!(done.counter("quic_failed_tls") + done.counter("quic_failed_protocol"), 0, "{model}");
}

/// A file of `len` bytes of a pattern beside the certificate (removed with it).
fn body_file(cert: &H3Cert, len: usize) -> PathBuf {
    let path = cert.cert.with_file_name("body.bin");
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(&support::pattern(7, len)).expect("write");
    path
}

fn sha256_hex(path: &std::path::Path) -> String {
    let out = std::process::Command::new("sha256sum").arg(path).output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_owned()
}

/// A 10 MiB response (`--body`) with a key update on the way (quic-go updates by itself after
/// 100 packets; aioquic asked to), a 10 MiB request body, and a 10 MiB response under 5% loss
/// each way (gtlsclient drops them).
fn big_bodies_key_update_and_loss(model: &str) {
    if skip(model) {
        return;
    }
    let cert = H3Cert::new(&format!("bodies-{model}"));
    let body = body_file(&cert, TEN_MIB);
    let body_arg = body.to_string_lossy().into_owned();
    let server = serve(model, &cert, &["--body", &body_arg, "--max-body-bytes", "20971520"]);
    let port = server.addr.port();
    let want = sha256_hex(&body);

    if let Some(o) =
        ran("quic-go", quicgo_h3(), || run_quicgo_client(port, "/", &ClientOpts::new(Trust::Ca(cert.ca.clone()))))
    {
        assert_eq!(o.ok, 1, "{model}: {:?}\n{}", o.errors, o.tail());
        assert_eq!(o.bodies.first().map(|b| b.0.as_str()), Some(want.as_str()), "{model}: the body differs");
        assert!(o.key_updates.unwrap_or(0) >= 1, "{model}: no key update in 10 MiB\n{}", o.tail());
        // The same client sends 10 MiB; the response is the 10 MiB body again.
        let mut up = ClientOpts::new(Trust::Ca(cert.ca.clone()));
        up.body_file = Some(body.clone());
        let o = ran("quic-go POST", quicgo_h3(), || run_quicgo_client(port, "/upload", &up)).expect("quic-go ran once");
        assert_eq!((o.ok, o.failed), (1, 0), "{model}: POST 10 MiB: {:?}\n{}", o.errors, o.tail());
    }

    let mut aio = ClientOpts::new(Trust::Ca(cert.ca.clone()));
    aio.key_update = true;
    if let Some(o) = ran("aioquic", aioquic_examples(), || run_aioquic_client(port, &["/"], &aio)) {
        assert_eq!(o.ok, 1, "{model}: aioquic\n{}", o.tail());
        assert_eq!(o.bytes, Some(TEN_MIB as u64), "{model}");
        assert!(o.key_updates.unwrap_or(0) >= 1, "{model}: aioquic did not update its keys\n{}", o.tail());
    }

    let mut lossy = ClientOpts::new(Trust::Insecure);
    lossy.loss = Some(0.05);
    lossy.timeout = Duration::from_secs(60);
    if let Some(o) = ran("gtlsclient under loss", gtlsclient(), || run_gtlsclient(port, &["/"], &lossy)) {
        assert_eq!((o.ok, o.failed), (1, 0), "{model}: under 5% loss\n{}", o.tail());
        assert!(o.simulated_losses.unwrap_or(0) > 0, "{model}: nothing was dropped\n{}", o.tail());
        let file = o.downloads.last().expect("the body was written");
        assert_eq!(sha256_hex(file), want, "{model}: the body under loss differs");
    }

    let done = server.stop_within(Duration::from_secs(15));
    assert_eq!(done.counter("h3_connection_errors"), 0, "{model}");
    if done.counter("quic_packets_sent") > 0 {
        assert!(done.counter("quic_packets_lost") > 0, "{model}: 5% loss and no packet counted lost");
    }
}

/// 0-RTT is refused unless `--quic-0rtt`: aioquic resumes with early data, which the server
/// rejects (the request goes again in 1-RTT) and, with the flag, accepts and counts.
fn zero_rtt_only_with_the_flag(model: &str) {
    if skip(model) {
        return;
    }
    let cert = H3Cert::new(&format!("0rtt-{model}"));
    for (flag, accepted) in [(None, false), (Some("--quic-0rtt"), true)] {
        let server = serve(model, &cert, flag.as_slice());
        let mut opts = ClientOpts::new(Trust::Ca(cert.ca.clone()));
        opts.resume = true;
        opts.zero_rtt = true;
        let Some(o) =
            ran("aioquic 0-RTT", aioquic_examples(), || run_aioquic_client(server.addr.port(), &["/"], &opts))
        else {
            return;
        };
        assert_eq!((o.ok, o.failed), (1, 0), "{model} {flag:?}: {}", o.tail());
        assert_eq!(o.resumed, Some(true), "{model} {flag:?}: not resumed\n{}", o.tail());
        assert_eq!(o.zero_rtt, Some(accepted), "{model} {flag:?}: 0-RTT accepted?\n{}", o.tail());
        let done = server.stop_within(Duration::from_secs(15));
        assert_eq!(done.counter("quic_0rtt"), i64::from(accepted), "{model} {flag:?}");
        // The first connection got the ticket, the second resumed with it: exactly one.
        assert_eq!(done.counter("quic_resumed"), 1, "{model} {flag:?}");
    }
}

/// Chromium, a fourth QUIC stack (Chrome's own), loads a page over HTTP/3: QUIC forced for the
/// origin (`--origin-to-force-quic-on`), the certificate trusted by its key's hash. The page
/// comes back whole, and the server saw it asked over HTTP/3 and nothing over TCP.
#[test]
fn chromium_loads_a_page_over_http3() {
    let browser = match support::browser::chromium() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let cert = H3Cert::new("chromium");
    let page = std::env::temp_dir().join(format!("sockscale-h3-chromium-{}.html", std::process::id()));
    let marker = "served over HTTP/3 by sockscale";
    std::fs::write(&page, format!("<!doctype html><html><body><p id=\"m\">{marker}</p></body></html>")).expect("page");
    let body = page.to_string_lossy().into_owned();
    let server = serve("epoll", &cert, &["--body", &body]);
    let origin = format!("127.0.0.1:{}", server.addr.port());
    let profile = std::env::temp_dir().join(format!("sockscale-h3-chromium-profile-{}", std::process::id()));
    let out = std::process::Command::new(&browser)
        .args(["--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run", "--enable-quic"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--origin-to-force-quic-on={origin}"))
        .arg(format!("--ignore-certificate-errors-spki-list={}", cert.spki_sha256_base64()))
        .args(["--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("https://{origin}/"))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    let _ = std::fs::remove_file(&page);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains(marker), "chromium did not get the page: {dom}\n{}", String::from_utf8_lossy(&out.stderr));
    let done = server.stop_within(Duration::from_secs(15));
    assert!(done.counter("h3_requests") >= 1, "{:?}", done.stdout);
    assert!(done.counter("quic_handshakes") >= 1, "{:?}", done.stdout);
    assert_eq!(done.counter("accepted"), 0, "no TCP connection: {:?}", done.stdout);
}

macro_rules! h3_interop {
    ($($model:ident),* $(,)?) => {
    $(
        mod $model {
            const MODEL: &str = stringify!($model);
            #[test] fn three_clients() { super::three_clients(MODEL) }
            #[test] fn big_bodies_key_update_and_loss() { super::big_bodies_key_update_and_loss(MODEL) }
            #[test] fn zero_rtt_only_with_the_flag() { super::zero_rtt_only_with_the_flag(MODEL) }
        }
    )*};
}

support::for_every_model!(h3_interop);
