//! How a connection ends, as a client sees it, is one behaviour on every model: for plain and TLS
//! connections, a half request at the header deadline, `Connection: close` with a pipelined
//! request behind it, a malformed request, a stalled ClientHello, a drain with an idle and a
//! half-sent connection, and a connection beyond `--max-conns` each give a client the same bytes
//! and the same ending (FIN, close_notify, reset) at the same deadline.
//!
//! Each case runs on every model at once (the models are the library's table, `Model::ALL`, so a
//! new model is in every case), one thread and one server a model; what each client saw is printed
//! as a table, then held against the one expected ending, and the models' bytes against each other.
//! Deadlines are short (1 s header, 2 s drain) and an ending must come neither before its deadline
//! nor more than `LATE` after it.

mod support;

use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::ClientConnection;
use sockscale_server::{Model, Policy};
use support::tls::TestCert;
use support::{read_some, HttpReader, ServerProc, GET};

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// How much later than its deadline an ending may come: timer granularity plus a loaded machine
/// (nine servers at once, on shared cores); well under the 1 s deadlines, so an ending at another
/// timer (the idle timeout, the process's exit) cannot pass for it.
const LATE: Duration = Duration::from_millis(700);
/// An ending "at once": within this of what caused it.
const AT_ONCE: Duration = Duration::from_millis(500);
/// How long after the latest allowed ending a connection is still watched before it is called
/// open, so a late ending is seen and reported with its time rather than as "open".
const WATCH_PAST: Duration = Duration::from_millis(1500);

/// How long a client waits, connected (and its handshake done), before its half request: a
/// header deadline counted from the accept or the handshake rather than from the head's first
/// byte would end it this much early.
const PAUSE_BEFORE_HEAD: Duration = Duration::from_millis(500);

const HALF_HEAD: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\n";
/// The body of the request pipelined behind a `Connection: close`: 16 KiB, more than one read of
/// some engines takes, within what a close reads of the peer's unread input (`end_socket`: 64
/// KiB), so the whole tail is in the server's receive queue when it closes.
const PIPELINED_BODY: usize = 16 * 1024;
const MALFORMED: &[u8] = b"BLAH\x01\x02 nonsense\r\n\r\n";
/// The first five bytes of a ClientHello: a handshake record header announcing 128 bytes that
/// never come.
const HELLO_RECORD_HEADER: &[u8] = &[0x16, 0x03, 0x01, 0x00, 0x80];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Plain,
    Tls,
}

/// How the connection ended, as `read` told the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `read` returned 0.
    Fin,
    /// `read` failed with ECONNRESET.
    Reset,
    /// Neither, by the end of the watch.
    Open,
}

/// What one client received, and how and when its connection ended.
#[derive(Debug, Clone)]
struct Seen {
    /// The bytes received: decrypted under TLS; as they came off the socket otherwise.
    bytes: Vec<u8>,
    /// TLS: the server's close_notify came before the end.
    close_notify: bool,
    /// TLS: what the client's session reported instead of records it could read (an alert, a
    /// corrupt record).
    tls_error: Option<String>,
    /// TLS: bytes that came after the close_notify (there should be none).
    after_close_notify: usize,
    end: End,
    /// When the end came, from the instant the case counts its deadline from.
    at: Duration,
}

impl Seen {
    /// The statuses of the complete HTTP responses in `bytes`, and how many bytes follow them.
    fn statuses(&self) -> (Vec<u16>, usize) {
        let mut statuses = Vec::new();
        let mut rest = &self.bytes[..];
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut headers);
            let Ok(httparse::Status::Complete(head)) = parsed.parse(rest) else { return (statuses, rest.len()) };
            let length: usize = parsed
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0);
            if rest.len() < head + length {
                return (statuses, rest.len());
            }
            statuses.push(parsed.code.unwrap_or(0));
            rest = &rest[head + length..];
        }
    }

    /// The bytes with what may differ between two runs (the Date header's value) blanked, to
    /// compare one model's bytes with another's.
    fn normalized(&self) -> String {
        String::from_utf8_lossy(&self.bytes)
            .split("\r\n")
            .map(|line| match line.split_once(':') {
                Some((name, _)) if name.eq_ignore_ascii_case("date") => "Date: -",
                _ => line,
            })
            .collect::<Vec<_>>()
            .join("\r\n")
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (statuses, rest) = self.statuses();
        match (statuses.as_slice(), rest) {
            ([], 0) => write!(f, "no bytes")?,
            ([], n) if self.bytes.first() == Some(&0x15) => {
                write!(f, "{n} B in clear, an alert record {:02x?}", &self.bytes[..n.min(7)])?
            }
            (s, 0) => write!(f, "{s:?}")?,
            (s, n) => write!(f, "{s:?} + {n} B")?,
        }
        if self.close_notify {
            write!(f, ", close_notify")?;
        }
        if let Some(e) = &self.tls_error {
            write!(f, ", TLS error: {e}")?;
        }
        if self.after_close_notify > 0 {
            write!(f, ", {} B after close_notify", self.after_close_notify)?;
        }
        write!(f, ", {:?} at {:.2} s", self.end, self.at.as_secs_f64())
    }
}

/// What every model must give a client.
struct Expected {
    /// The statuses of the responses received, in order; None: whatever it is, the same on
    /// every model.
    statuses: Option<&'static [u16]>,
    /// Under TLS, a close_notify before the end.
    close_notify: bool,
    end: End,
    /// The end comes within this window of the case's reference instant.
    at: (Duration, Duration),
}

impl Expected {
    fn at_once(statuses: &'static [u16]) -> Expected {
        Expected { statuses: Some(statuses), close_notify: true, end: End::Fin, at: (Duration::ZERO, AT_ONCE) }
    }

    fn at_deadline(statuses: Option<&'static [u16]>, deadline: Duration) -> Expected {
        Expected { statuses, close_notify: true, end: End::Fin, at: (deadline, deadline + LATE) }
    }

    /// Where `seen` differs from this, over `wire`.
    fn differences(&self, wire: Wire, seen: &Seen) -> Vec<String> {
        let mut out = Vec::new();
        let (statuses, rest) = seen.statuses();
        if let Some(want) = self.statuses {
            if statuses != want || rest != 0 {
                out.push(format!("bytes: expected responses {want:?} and nothing more"));
            }
        }
        let close_notify = self.close_notify && wire == Wire::Tls;
        if seen.close_notify != close_notify {
            out.push(format!("close_notify: expected {}", if close_notify { "one" } else { "none" }));
        }
        if seen.tls_error.is_some() || seen.after_close_notify > 0 {
            out.push("TLS: expected no error and nothing after close_notify".to_owned());
        }
        if seen.end != self.end {
            out.push(format!("ending: expected {:?}", self.end));
        }
        let (early, late) = self.at;
        // The deadline is counted by the server from an instant a little after the client's.
        let early = early.saturating_sub(Duration::from_millis(50));
        if seen.end != End::Open && !(early..=late).contains(&seen.at) {
            out.push(format!("time: expected between {:.2} s and {:.2} s", early.as_secs_f64(), late.as_secs_f64()));
        }
        out
    }
}

/// A GET with `Connection: close`, and in the same write a POST with a `PIPELINED_BODY` body.
fn close_then_pipelined() -> Vec<u8> {
    let mut bytes = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec();
    bytes.extend_from_slice(
        format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {PIPELINED_BODY}\r\n\r\n").as_bytes(),
    );
    bytes.resize(bytes.len() + PIPELINED_BODY, b'p');
    bytes
}

/// A client of one server: a TCP socket, and over TLS its session (the handshake done).
struct Client {
    sock: TcpStream,
    tls: Option<ClientConnection>,
}

impl Client {
    fn connect(server: &ServerProc, wire: Wire, config: &Arc<rustls::ClientConfig>) -> Client {
        let sock = server.connect();
        let mut client = Client { sock, tls: None };
        if wire == Wire::Tls {
            let mut conn = hello(config);
            while conn.is_handshaking() {
                conn.complete_io(&mut client.sock).expect("TLS handshake");
            }
            client.tls = Some(conn);
        }
        client
    }

    fn send(&mut self, bytes: &[u8]) {
        match &mut self.tls {
            None => self.sock.write_all(bytes).expect("write"),
            Some(conn) => {
                // The session buffers a bounded amount of plaintext: write it out as it goes.
                let mut rest = bytes;
                while !rest.is_empty() {
                    let n = conn.writer().write(rest).expect("write to the TLS session");
                    rest = &rest[n..];
                    while conn.wants_write() {
                        conn.write_tls(&mut self.sock).expect("write TLS records");
                    }
                }
            }
        }
    }

    /// Send a GET and read its response, which must be a 200: the connection is then an idle
    /// keep-alive one.
    fn exchange(&mut self) {
        self.send(GET);
        let status = match &mut self.tls {
            None => HttpReader::new(&mut self.sock).response(false),
            Some(conn) => HttpReader::new(rustls::Stream::new(conn, &mut self.sock)).response(false),
        };
        assert_eq!(status.map(|r| r.status), Some(200), "a served request");
    }

    /// Read until the connection ends or `until` passes; what came, and how and when (from
    /// `since`) it ended.
    fn watch(mut self, since: Instant, until: Instant) -> Seen {
        let mut seen = Seen {
            bytes: Vec::new(),
            close_notify: false,
            tls_error: None,
            after_close_notify: 0,
            end: End::Open,
            at: Duration::ZERO,
        };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                seen.end = End::Open;
                break;
            }
            self.sock.set_read_timeout(Some(left)).expect("read timeout");
            let n = match read_some(&mut self.sock, &mut buf) {
                Ok(0) => {
                    seen.end = End::Fin;
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    seen.end = End::Reset;
                    break;
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
                Err(e) => panic!("read: {e}"),
            };
            match &mut self.tls {
                None => seen.bytes.extend_from_slice(&buf[..n]),
                Some(_) if seen.close_notify || seen.tls_error.is_some() => seen.after_close_notify += n,
                Some(conn) => take_records(conn, &buf[..n], &mut seen),
            }
        }
        seen.at = since.elapsed();
        seen
    }
}

/// Feed `records` to the session; the plaintext, a close_notify or an error go into `seen`.
fn take_records(conn: &mut ClientConnection, mut records: &[u8], seen: &mut Seen) {
    while !records.is_empty() {
        if let Err(e) = conn.read_tls(&mut records) {
            seen.tls_error = Some(e.to_string());
            return;
        }
        match conn.process_new_packets() {
            Ok(state) => {
                let mut plain = vec![0u8; state.plaintext_bytes_to_read()];
                conn.reader().read_exact(&mut plain).expect("the plaintext rustls holds");
                seen.bytes.extend_from_slice(&plain);
                if state.peer_has_closed() {
                    seen.close_notify = true;
                    // What follows a close_notify is no longer the session's.
                    seen.after_close_notify += records.len();
                    return;
                }
            }
            Err(e) => {
                seen.tls_error = Some(e.to_string());
                return;
            }
        }
    }
}

/// A client session for `localhost` that has its ClientHello ready to write.
fn hello(config: &Arc<rustls::ClientConfig>) -> ClientConnection {
    ClientConnection::new(config.clone(), ServerName::try_from("localhost").expect("name")).expect("client session")
}

/// The server of a case: `serve --model MODEL` with `args`, and the certificate's over TLS.
fn serve(model: &str, wire: Wire, cert: &TestCert, args: &[&str]) -> ServerProc {
    let mut argv = args.to_vec();
    let tls = cert.args();
    if wire == Wire::Tls {
        argv.extend(tls.iter().map(String::as_str));
    }
    ServerProc::start(model, &argv)
}

/// What one case saw on one model: a label for each client watched, and what it saw.
type Sightings = Vec<(&'static str, Seen)>;

/// Run `case` on every model the table lists that can run here and honours `policies`, all at
/// once; print what each client saw; fail, naming each model and what differs, where a client
/// saw other than `expected` (looked up by label), or other bytes than another model's client.
fn on_every_model(
    name: &str,
    wire: Wire,
    policies: &[Policy],
    case: fn(&str, Wire, &TestCert, &Arc<rustls::ClientConfig>) -> Sightings,
    expected: &[(&'static str, Expected)],
) {
    let models: Vec<&'static str> = Model::ALL
        .iter()
        .map(|m| m.name())
        .filter(|m| !support::unavailable(m))
        .filter(|m| !policies.iter().any(|&p| support::skip(m, p)))
        .filter(|m| wire == Wire::Plain || !support::skip(m, Policy::Tls))
        .collect();
    let cert = TestCert::new(&format!("endings-{name}-{wire:?}"));
    let config = cert.client(&[&rustls::version::TLS13], &[b"http/1.1"]);
    let seen: Vec<(&str, std::thread::Result<Sightings>)> = std::thread::scope(|s| {
        let runs: Vec<_> = models
            .iter()
            .map(|&model| {
                let (cert, config) = (&cert, &config);
                (model, s.spawn(move || case(model, wire, cert, config)))
            })
            .collect();
        runs.into_iter().map(|(model, run)| (model, run.join())).collect()
    });
    let mut table = format!("{name} ({wire:?}):\n");
    let mut failures = Vec::new();
    let mut first_bytes: Vec<(&str, &str, String)> = Vec::new();
    for (model, result) in &seen {
        let sightings = match result {
            Ok(s) => s,
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                table.push_str(&format!("  {model:<10} the case could not run: {why}\n"));
                failures.push(format!("{model}: the case could not run: {why}"));
                continue;
            }
        };
        for (label, s) in sightings {
            let diffs =
                expected.iter().find(|(l, _)| l == label).map(|(_, e)| e.differences(wire, s)).unwrap_or_default();
            let mark = if diffs.is_empty() { "  " } else { "✗ " };
            table.push_str(&format!("{mark}{model:<10} {label:<12} {s}\n"));
            if !diffs.is_empty() {
                failures.push(format!("{model} {label}: {s}: {}", diffs.join("; ")));
            }
            match first_bytes.iter().find(|(l, _, _)| l == label) {
                None => first_bytes.push((label, model, s.normalized())),
                Some((_, first, bytes)) if *bytes != s.normalized() => {
                    let mine = s.normalized();
                    let shown: String = mine.chars().take(300).collect();
                    failures.push(format!("{model} {label}: other bytes than {first}'s ({} B): {shown:?}", mine.len()))
                }
                Some(_) => {}
            }
        }
    }
    if failures.is_empty() {
        eprintln!("{table}");
    }
    assert!(
        failures.is_empty(),
        "{name} ({wire:?}) is not one behaviour on every model:\n{}\n{table}",
        failures.join("\n")
    );
}

/// A half request at the header deadline: a 408, then (TLS) close_notify, then a FIN, at the
/// deadline counted from the request's first byte (not from the accept or the handshake: the
/// client pauses before it sends).
fn half_request(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    let server = serve(model, wire, cert, &["--proto", "http", "--header-timeout", "1", "--idle-timeout", "30"]);
    let mut client = Client::connect(&server, wire, config);
    std::thread::sleep(PAUSE_BEFORE_HEAD);
    let since = Instant::now();
    client.send(HALF_HEAD);
    vec![("half head", client.watch(since, since + HEADER_TIMEOUT + LATE + WATCH_PAST))]
}

/// `Connection: close` with a second request behind it in the same write: one response, then
/// (TLS) close_notify, then a FIN, not a reset (the server reads what is unread before it closes).
fn close_with_pipelined(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    let server = serve(model, wire, cert, &["--proto", "http"]);
    let mut client = Client::connect(&server, wire, config);
    let since = Instant::now();
    client.send(&close_then_pipelined());
    vec![("close+1", client.watch(since, since + AT_ONCE + WATCH_PAST))]
}

/// A malformed request: a 400, then (TLS) close_notify, then a FIN, at once.
fn malformed(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    let server = serve(model, wire, cert, &["--proto", "http"]);
    let mut client = Client::connect(&server, wire, config);
    let since = Instant::now();
    client.send(MALFORMED);
    vec![("malformed", client.watch(since, since + AT_ONCE + WATCH_PAST))]
}

/// A ClientHello that stalls (nothing sent; a record header and no more): closed at the header
/// deadline, counted from the connect, with a FIN and no bytes (there is no key to encrypt a 408
/// with, and no whole record for rustls to owe an alert for).
fn stalled_hello(model: &str, wire: Wire, cert: &TestCert, _: &Arc<rustls::ClientConfig>) -> Sightings {
    let server = serve(model, wire, cert, &["--proto", "http", "--header-timeout", "1", "--idle-timeout", "30"]);
    let silent = server.connect();
    let since = Instant::now();
    let mut partial = server.connect();
    partial.write_all(HELLO_RECORD_HEADER).expect("a record header");
    let until = since + HEADER_TIMEOUT + LATE + WATCH_PAST;
    let watch = |sock| Client { sock, tls: None }.watch(since, until);
    std::thread::scope(|s| {
        let silent = s.spawn(|| watch(silent));
        let partial = watch(partial);
        vec![("nothing", silent.join().expect("watch")), ("record head", partial)]
    })
}

/// The drain (SIGTERM, `--drain-timeout 2`): an idle keep-alive connection is closed at once
/// (TLS: close_notify first); a half-sent request is given until the drain deadline, then closed
/// the same way.
fn drain(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    let server = serve(model, wire, cert, &["--proto", "http", "--drain-timeout", "2", "--header-timeout", "30"]);
    let mut idle = Client::connect(&server, wire, config);
    idle.exchange();
    let mut half = Client::connect(&server, wire, config);
    half.send(HALF_HEAD);
    // Both are the server's before the drain begins.
    std::thread::sleep(Duration::from_millis(200));
    server.signal(libc::SIGTERM);
    let since = Instant::now();
    let until = since + DRAIN_TIMEOUT + LATE + WATCH_PAST;
    let seen = std::thread::scope(|s| {
        let idle = s.spawn(move || idle.watch(since, until));
        let half = half.watch(since, until);
        vec![("idle", idle.join().expect("watch")), ("half-sent", half)]
    });
    drop(server);
    seen
}

/// A connection beyond `--max-conns 1`: plain HTTP gets a 503, then a FIN; TLS gets a FIN with no
/// bytes (its ClientHello read, so no reset); echo gets a FIN (its bytes read). The client's first
/// bytes are sent before the server accepts (it is stopped meanwhile), so that they are there to
/// be read when it refuses: the refusal must read them, or the kernel answers them with a reset.
fn beyond_max_conns(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    beyond_max_conns_of(model, wire, "http", cert, config)
}

fn echo_beyond_max_conns(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    beyond_max_conns_of(model, wire, "echo", cert, config)
}

fn beyond_max_conns_of(
    model: &str,
    wire: Wire,
    proto: &str,
    cert: &TestCert,
    config: &Arc<rustls::ClientConfig>,
) -> Sightings {
    let server = serve(model, wire, cert, &["--proto", proto, "--max-conns", "1"]);
    let mut held = Client::connect(&server, wire, config);
    if proto == "http" {
        held.exchange();
    } else {
        support::echo_byte(&mut held.sock, 1);
    }
    server.signal(libc::SIGSTOP);
    let mut refused = Client { sock: server.connect(), tls: None };
    match (wire, proto) {
        (Wire::Plain, "http") => refused.send(GET),
        (Wire::Plain, _) => refused.send(b"x"),
        (Wire::Tls, _) => {
            let mut conn = hello(config);
            conn.write_tls(&mut refused.sock).expect("the ClientHello");
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    server.signal(libc::SIGCONT);
    let since = Instant::now();
    let seen = refused.watch(since, since + AT_ONCE + WATCH_PAST);
    drop(held);
    vec![("refused", seen)]
}

/// The body of the large response a slow reader gets: far more than the kernel holds between
/// the server and the client (the server's `--sndbuf 16384`, the client's small SO_RCVBUF), and
/// under `--max-pending-send` (1 MiB), so the server keeps the rest queued without stopping.
const LARGE_BODY: usize = 512 * 1024;
/// How long the slow reader reads nothing once its request is sent: the close happens meanwhile,
/// with most of the response still queued in the server.
const READ_DELAY: Duration = Duration::from_millis(1500);

/// How a connection with a large response queued is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// The request says `Connection: close`.
    ConnectionClose,
    /// A half request pipelined behind it meets the header deadline: a 408 behind the response.
    HeaderDeadline,
    /// The server drains (SIGTERM) while the response is queued.
    Drain,
}

/// A slow reader with a large response queued when the server closes its connection (as
/// `closing` says): it reads nothing for `READ_DELAY`, then all of it. Whatever the close, the
/// whole response comes, then the close's last bytes (a 408; close_notify under TLS), then a
/// FIN: a close's last bytes are never dropped because output is still queued.
fn slow_reader(
    model: &str,
    wire: Wire,
    cert: &TestCert,
    config: &Arc<rustls::ClientConfig>,
    closing: Closing,
    sendfile: &str,
) -> Sightings {
    let dir =
        std::env::temp_dir().join(format!("sockscale-endings-{}-{model}-{closing:?}-{wire:?}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let body = dir.join("body.bin");
    std::fs::write(&body, "0123456789abcdef".repeat(LARGE_BODY / 16)).expect("the body file");
    let body_arg = body.to_string_lossy().into_owned();
    let args = [
        "--proto",
        "http",
        "--body",
        &body_arg,
        "--sendfile",
        sendfile,
        "--sndbuf",
        "16384",
        "--send-timeout",
        "10",
        "--header-timeout",
        "1",
        "--idle-timeout",
        "30",
        "--drain-timeout",
        "5",
    ];
    let server = serve(model, wire, cert, &args);
    let mut client = Client::connect(&server, wire, config);
    support::set_rcvbuf(&client.sock, 64 * 1024);
    let since = match closing {
        Closing::ConnectionClose => {
            client.send(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            Instant::now()
        }
        Closing::HeaderDeadline => {
            let mut both = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n".to_vec();
            both.extend_from_slice(HALF_HEAD);
            client.send(&both);
            Instant::now()
        }
        Closing::Drain => {
            client.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
            // The response is queued before the drain begins.
            std::thread::sleep(Duration::from_millis(200));
            server.signal(libc::SIGTERM);
            Instant::now()
        }
    };
    std::thread::sleep(READ_DELAY.saturating_sub(since.elapsed()));
    let seen = client.watch(since, since + READ_DELAY + LATE + WATCH_PAST);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    vec![("slow reader", seen)]
}

fn slow_reader_connection_close(
    model: &str,
    wire: Wire,
    cert: &TestCert,
    config: &Arc<rustls::ClientConfig>,
) -> Sightings {
    slow_reader(model, wire, cert, config, Closing::ConnectionClose, "off")
}

fn slow_reader_header_deadline(
    model: &str,
    wire: Wire,
    cert: &TestCert,
    config: &Arc<rustls::ClientConfig>,
) -> Sightings {
    slow_reader(model, wire, cert, config, Closing::HeaderDeadline, "off")
}

/// The same with the body sent from the file (`--sendfile on`; under TLS read and encrypted a
/// chunk at a time as the socket takes it): the 408 queued behind a file range not yet sealed
/// is sealed in its turn, after it.
fn slow_reader_header_deadline_file(
    model: &str,
    wire: Wire,
    cert: &TestCert,
    config: &Arc<rustls::ClientConfig>,
) -> Sightings {
    slow_reader(model, wire, cert, config, Closing::HeaderDeadline, "on")
}

fn slow_reader_drain(model: &str, wire: Wire, cert: &TestCert, config: &Arc<rustls::ClientConfig>) -> Sightings {
    slow_reader(model, wire, cert, config, Closing::Drain, "off")
}

/// What a slow reader must see: the responses whole, then (TLS) close_notify and a FIN, once it
/// has read them (after `READ_DELAY`).
fn read_whole(statuses: &'static [u16]) -> Expected {
    Expected { statuses: Some(statuses), close_notify: true, end: End::Fin, at: (READ_DELAY, READ_DELAY + LATE) }
}

macro_rules! cases {
    ($($name:ident: $case:ident, $wire:ident, [$($policy:ident),*], {$($label:literal => $expected:expr),* $(,)?};)*) => {$(
        #[test]
        fn $name() {
            on_every_model(stringify!($name), Wire::$wire, &[$(Policy::$policy),*], $case, &[$(($label, $expected)),*]);
        }
    )*};
}

cases! {
    half_request_at_the_header_deadline: half_request, Plain, [HeaderTimeout],
        {"half head" => Expected::at_deadline(Some(&[408]), HEADER_TIMEOUT)};
    tls_half_request_at_the_header_deadline: half_request, Tls, [HeaderTimeout],
        {"half head" => Expected::at_deadline(Some(&[408]), HEADER_TIMEOUT)};
    connection_close_with_a_pipelined_request_behind_it: close_with_pipelined, Plain, [],
        {"close+1" => Expected::at_once(&[200])};
    tls_connection_close_with_a_pipelined_request_behind_it: close_with_pipelined, Tls, [],
        {"close+1" => Expected::at_once(&[200])};
    a_malformed_request: malformed, Plain, [],
        {"malformed" => Expected::at_once(&[400])};
    tls_a_malformed_request: malformed, Tls, [],
        {"malformed" => Expected::at_once(&[400])};
    tls_a_stalled_client_hello: stalled_hello, Tls, [HeaderTimeout],
        {
            "nothing" => Expected { close_notify: false, ..Expected::at_deadline(Some(&[]), HEADER_TIMEOUT) },
            "record head" => Expected { close_notify: false, ..Expected::at_deadline(Some(&[]), HEADER_TIMEOUT) },
        };
    the_drain_with_an_idle_and_a_half_sent_connection: drain, Plain, [GracefulShutdown],
        {"idle" => Expected::at_once(&[]), "half-sent" => Expected::at_deadline(None, DRAIN_TIMEOUT)};
    tls_the_drain_with_an_idle_and_a_half_sent_connection: drain, Tls, [GracefulShutdown],
        {"idle" => Expected::at_once(&[]), "half-sent" => Expected::at_deadline(None, DRAIN_TIMEOUT)};
    a_connection_beyond_max_conns: beyond_max_conns, Plain, [MaxConns],
        {"refused" => Expected::at_once(&[503])};
    tls_a_connection_beyond_max_conns: beyond_max_conns, Tls, [MaxConns],
        {"refused" => Expected { close_notify: false, ..Expected::at_once(&[]) }};
    echo_a_connection_beyond_max_conns: echo_beyond_max_conns, Plain, [MaxConns],
        {"refused" => Expected::at_once(&[])};
    tls_connection_close_behind_a_large_response_to_a_slow_reader: slow_reader_connection_close, Tls, [],
        {"slow reader" => read_whole(&[200])};
    the_header_deadline_behind_a_large_response_to_a_slow_reader: slow_reader_header_deadline, Plain, [HeaderTimeout],
        {"slow reader" => read_whole(&[200, 408])};
    tls_the_header_deadline_behind_a_large_response_to_a_slow_reader: slow_reader_header_deadline, Tls, [HeaderTimeout],
        {"slow reader" => read_whole(&[200, 408])};
    tls_the_header_deadline_behind_a_large_file_to_a_slow_reader: slow_reader_header_deadline_file, Tls, [HeaderTimeout],
        {"slow reader" => read_whole(&[200, 408])};
    tls_the_drain_of_a_large_response_to_a_slow_reader: slow_reader_drain, Tls, [GracefulShutdown],
        {"slow reader" => read_whole(&[200])};
}
