//! Autobahn|Testsuite with sockscale's WebSocket *client* stage as the testee: `wstest -m
//! fuzzingserver` serves the cases, and a driver here runs each on the I/O-free
//! `sockscale_ws::ClientHandshake` and `ClientSession` (the stage `load ws` drives) over a blocking
//! `TcpStream`: `/getCaseCount`, then `/runCase?case=N&agent=sockscale` for each case (every message
//! echoed as received, text as text and binary as binary; pings and closes answered by the
//! session), then `/updateReports?agent=sockscale`. Fails on any case FAILED or UNIMPLEMENTED,
//! naming it and Autobahn's reason. Every connection offers permessage-deflate (the offer `load ws
//! --deflate` makes: `client_max_window_bits`, 15-bit windows with context takeover); Autobahn
//! declines it outside cases 12 and 13, which need it. Skipped, saying why, where `wstest` is not
//! installed (`.ci/run` installs it under Python 2.7).
//!
//! Which cases, to fit CI's time: 1-11 and a sample of 12-13 (every data set and every offer and
//! answer, with small messages, and a few fragmented and larger ones), about 20 s in a debug
//! build; every case 1-13 with `SOCKSCALE_AUTOBAHN_FULL=1` (517 cases, about 16 minutes).

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sockscale_ws::frame::{parse_header, Parsed};
use sockscale_ws::{ClientHandshake, ClientSession, Config, DeflateConfig, Verdict};

/// A read that waits longer than this ends the case (Autobahn's own cases wait at most 480 s for
/// a whole case, but each of its messages follows the last echo at once).
const READ_LIMIT: Duration = Duration::from_secs(30);
/// A case (one connection) must end within this.
const CASE_LIMIT: Duration = Duration::from_secs(120);
/// After our close handshake ends, the server closes the TCP connection (RFC 6455 §7.1.1): wait
/// this long for it.
const SERVER_CLOSE_WAIT: Duration = Duration::from_secs(5);

fn cases() -> Vec<&'static str> {
    let every = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "11.*"];
    let mut cases = every.to_vec();
    if std::env::var_os("SOCKSCALE_AUTOBAHN_FULL").is_some() {
        cases.extend(["12.*", "13.*"]);
        return cases;
    }
    // 12.N, each data set (12.1 and 12.4 text, the others binary): 1000 messages of 16 octets;
    // of 8192 octets in 256-octet fragments (12.1, 12.2); of 131072 octets in 4096-octet
    // fragments (12.4). 13.N, each offer and answer (context takeover or not, 9- or 15-bit windows,
    // a list of offers): 1000 messages of 64 octets. About 7 s of the run's 20 (the whole of 12
    // and 13 takes about 15 minutes, debug build).
    cases.extend(["12.1.1", "12.2.1", "12.3.1", "12.4.1", "12.5.1", "12.1.11", "12.2.11", "12.4.17"]);
    cases.extend(["13.1.2", "13.2.2", "13.3.2", "13.4.2", "13.5.2", "13.6.2", "13.7.2"]);
    cases
}

/// wstest's fuzzing server, killed when dropped.
struct FuzzingServer {
    child: Child,
    log: PathBuf,
}

impl FuzzingServer {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for FuzzingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port no one listens on now (the OS's pick, released for wstest, which takes no port 0).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    listener.local_addr().expect("its address").port()
}

fn start_fuzzing_server(wstest: &Path, dir: &Path, port: u16) -> FuzzingServer {
    let spec = serde_json::json!({
        "url": format!("ws://127.0.0.1:{port}"),
        "outdir": dir.join("reports/clients"),
        "cases": cases(),
        "exclude-cases": [],
        "exclude-agent-cases": {},
    });
    let spec_file = dir.join("fuzzingserver.json");
    std::fs::write(&spec_file, spec.to_string()).expect("write the spec");
    let log = dir.join("wstest.log");
    let log_file = std::fs::File::create(&log).expect("wstest's log");
    let child = Command::new(wstest)
        .args(["-m", "fuzzingserver", "-s"])
        .arg(&spec_file)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("the log"))
        .stderr(log_file)
        .spawn()
        .expect("run wstest");
    let mut server = FuzzingServer { child, log };
    let began = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("wstest -m fuzzingserver ended ({status}) before listening:\n{}", server.log());
        }
        assert!(began.elapsed() < Duration::from_secs(60), "wstest did not listen within 60 s:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// Cuts the input at frame ends, so that a message is echoed before what follows it is read: a
/// close or a protocol error after it in the same read would otherwise close the session first.
#[derive(Default)]
struct FrameCutter {
    /// A header cut across reads.
    header: Vec<u8>,
    /// Octets of the current frame's payload still to come.
    payload_left: u64,
}

impl FrameCutter {
    /// How many octets at the start of `input` to feed the session next: up to the end of the
    /// current frame.
    fn next_piece(&mut self, input: &[u8]) -> usize {
        if self.payload_left > 0 {
            let take = input.len().min(usize::try_from(self.payload_left).unwrap_or(usize::MAX));
            self.payload_left -= take as u64;
            return take;
        }
        let had = self.header.len();
        let mut joined = std::mem::take(&mut self.header);
        joined.extend_from_slice(&input[..input.len().min(sockscale_ws::frame::MAX_HEADER)]);
        match parse_header(&joined) {
            Parsed::Header(header, len) => {
                let from_input = len - had;
                let payload = (input.len() - from_input).min(usize::try_from(header.len).unwrap_or(usize::MAX));
                self.payload_left = header.len - payload as u64;
                from_input + payload
            }
            Parsed::Partial => {
                self.header = joined;
                input.len()
            }
            // The session fails the connection on it; what follows does not matter.
            Parsed::BadLength => input.len(),
        }
    }
}

/// One connection to `path`: upgraded with a permessage-deflate offer, then every message echoed
/// (`echo`) or collected, until it ends: the session's close, or the server's (Autobahn judges
/// how it ended).
fn connection(port: u16, path: &str, echo: bool) -> Result<Vec<sockscale_ws::Message>, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(READ_LIMIT)).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut rng = fastrand::Rng::new();
    let handshake = ClientHandshake::random(&mut rng, Some(DeflateConfig::default()));
    let mut out = Vec::new();
    handshake.write_request(&format!("127.0.0.1:{port}"), path, &mut out);
    stream.write_all(&out).map_err(|e| format!("send the upgrade: {e}"))?;

    let mut buf = vec![0u8; 256 << 10];
    let mut head = Vec::new();
    let end = loop {
        let n = stream.read(&mut buf).map_err(|e| format!("read the 101: {e}"))?;
        if n == 0 {
            return Err(format!("the server closed before the 101 ({} octets)", head.len()));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 64 << 10 {
            return Err("a response head over 64 KiB".to_owned());
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let status = match response.parse(&head[..end]) {
        Ok(httparse::Status::Complete(_)) => response.code.unwrap_or(0),
        _ => return Err(format!("a bad response head: {:?}", String::from_utf8_lossy(&head[..end]))),
    };
    let agreed = handshake
        .verify(status, response.headers.iter().map(|h| (h.name, h.value)))
        .map_err(|e| format!("the 101: {e}"))?;

    let began = Instant::now();
    let mut session = ClientSession::new(&Config::default(), agreed.as_ref(), rng, began);
    let mut cutter = FrameCutter::default();
    let mut collected = Vec::new();
    let mut input = head[end..].to_vec();
    loop {
        let mut rest = input.as_slice();
        while !rest.is_empty() {
            let piece = cutter.next_piece(rest);
            out.clear();
            let verdict = session.receive(&rest[..piece], Instant::now(), &mut out);
            rest = &rest[piece..];
            while let Some(message) = session.poll_message() {
                if echo {
                    session.send(message.kind, &message.data, &mut out);
                } else {
                    collected.push(message);
                }
            }
            if !out.is_empty() {
                stream.write_all(&out).map_err(|e| format!("send: {e}"))?;
            }
            if let Verdict::Close(_) = verdict {
                await_server_close(&mut stream, &mut buf);
                return Ok(collected);
            }
        }
        if began.elapsed() > CASE_LIMIT {
            return Err(format!("the connection did not end within {CASE_LIMIT:?}"));
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(collected),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(collected),
            Err(e) => return Err(format!("read: {e}")),
        };
        input.clear();
        input.extend_from_slice(&buf[..n]);
    }
}

/// The close handshake is over (or we failed the connection): the server closes the TCP
/// connection first (RFC 6455 §7.1.1); read until it does, within a bound, then close ours.
fn await_server_close(stream: &mut TcpStream, buf: &mut [u8]) {
    let _ = stream.set_read_timeout(Some(SERVER_CLOSE_WAIT));
    let began = Instant::now();
    while began.elapsed() < SERVER_CLOSE_WAIT && matches!(stream.read(buf), Ok(n) if n > 0) {}
    let _ = stream.shutdown(Shutdown::Both);
}

#[test]
fn autobahn_fuzzingserver_passes_with_the_client_stage() {
    let wstest = match support::ws::wstest() {
        Ok(path) => path,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("sockscale-autobahn-client-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("report dir");
    let port = free_port();
    let server = start_fuzzing_server(&wstest, &dir, port);
    let began = Instant::now();

    let messages =
        connection(port, "/getCaseCount", false).unwrap_or_else(|e| panic!("/getCaseCount: {e}\n{}", server.log()));
    let count: usize = messages
        .first()
        .and_then(|m| std::str::from_utf8(&m.data).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| panic!("/getCaseCount answered {messages:?}"));
    assert!(count > 0, "no case to run");
    for case in 1..=count {
        let path = format!("/runCase?case={case}&agent=sockscale");
        if let Err(e) = connection(port, &path, true) {
            panic!("case {case} of {count}: {e}\n{}", server.log());
        }
    }
    connection(port, "/updateReports?agent=sockscale", false)
        .unwrap_or_else(|e| panic!("/updateReports: {e}\n{}", server.log()));
    let ran_for = began.elapsed();

    let reports = dir.join("reports/clients");
    let index = std::fs::read(reports.join("index.json"))
        .unwrap_or_else(|e| panic!("Autobahn's index.json: {e}\n{}", server.log()));
    let index: serde_json::Value = serde_json::from_slice(&index).expect("JSON");
    let results = index["sockscale"].as_object().expect("the agent's results");
    let mut counts = std::collections::BTreeMap::new();
    let mut bad = Vec::new();
    for (case, result) in results {
        let behavior = result["behavior"].as_str().unwrap_or("?").to_owned();
        if !matches!(behavior.as_str(), "OK" | "NON-STRICT" | "INFORMATIONAL") {
            let detail = result["reportfile"]
                .as_str()
                .and_then(|f| std::fs::read(reports.join(f)).ok())
                .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r).ok())
                .map(|r| r["result"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            bad.push(format!("{case} {behavior}: {detail}"));
        }
        *counts.entry(behavior).or_insert(0) += 1;
    }
    eprintln!("autobahn with the client stage: {count} cases in {ran_for:.1?}: {counts:?}");
    assert_eq!(results.len(), count, "every case has a result");
    assert!(bad.is_empty(), "autobahn with the client stage: {counts:?}\n{}", bad.join("\n"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_frame_cutter_ends_pieces_at_frame_ends_however_the_input_is_split() {
    use sockscale_ws::frame::write_frame;
    // Frames with 7-, 16- and 64-bit lengths, one masked, an empty one, and a close.
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for (first, len, mask) in
        [(0x81, 5, None), (0x02, 300, Some([1, 2, 3, 4])), (0x80, 0, None), (0x82, 70_000, None), (0x88, 2, None)]
    {
        write_frame(first, &vec![b'x'; len], mask, &mut stream);
        ends.push(stream.len());
    }
    for split in [1, 2, 3, 7, 13, 14, 100, 4096, stream.len()] {
        let mut cutter = FrameCutter::default();
        let mut at = 0;
        let mut cuts = Vec::new();
        for chunk in stream.chunks(split) {
            let mut rest = chunk;
            while !rest.is_empty() {
                let piece = cutter.next_piece(rest);
                assert!(piece > 0 && piece <= rest.len(), "split {split}: a piece of {piece} of {}", rest.len());
                at += piece;
                rest = &rest[piece..];
                cuts.push(at);
            }
        }
        // Every frame end is a cut, and no piece crosses one.
        for end in &ends {
            assert!(cuts.contains(end), "split {split}: no cut at the frame end {end}");
        }
        let mut from = 0;
        for &cut in &cuts {
            assert!(
                !ends.iter().any(|&end| from < end && end < cut),
                "split {split}: {from}..{cut} crosses a frame end"
            );
            from = cut;
        }
    }
}
