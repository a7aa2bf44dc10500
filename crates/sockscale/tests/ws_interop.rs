//! Interop: three independent WebSocket stacks — Python `websockets`, Go
//! `github.com/coder/websocket` and Node `ws` — both ways.
//!
//! As clients of `serve --proto ws`, on every model: each runs its client in tests/interop/
//! (ws_client.py, go/ws_client.go, node/ws_client.mjs) against a plain server and a TLS one (the
//! test CA): text and binary messages of 0, 125, 126, 65536 and 1 MiB bytes, echoed byte for byte,
//! with and without permessage-deflate; a ping answered; a close with 1000 echoed. The case fails
//! on the client's non-zero exit, with its line.
//!
//! As servers of `load ws` (module `load_ws_against`): each stack's echo server (ws_server.py,
//! go/server/ws_server.go, node/ws_server.mjs), plain and TLS, and `load ws` with `--pipeline 4`
//! sending text and binary messages of the same sizes, with and without `--deflate`; the JSON report
//! must show every message echoed and verified, a close 1000 each way on every connection and no
//! error.
//!
//! A stack that is not installed is skipped, saying why (`.ci/run` installs all three); nothing is
//! fetched from the network here: Go builds offline from its module cache, npm installs offline
//! from its cache.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sockscale_server::Policy;
use support::{tls::TestCert, ServerProc};

/// Each client run must finish within this (it takes about a second).
const CLIENT_LIMIT: Duration = Duration::from_secs(60);

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

/// A scratch directory of this test binary's, under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ws-interop").join(name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The first of `names` on PATH, else the first of `fallbacks` that exists.
fn find_program(name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .chain(fallbacks.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// One line of a tool's failure: the first (npm) or last (go, python) non-empty line it wrote.
fn one_line(out: &std::process::Output, first: bool) -> String {
    let text = if out.stderr.is_empty() { &out.stdout } else { &out.stderr };
    let text = String::from_utf8_lossy(text);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = if first { lines.next() } else { lines.next_back() };
    line.unwrap_or("").to_owned()
}

#[derive(Clone, Copy, Debug)]
enum Stack {
    PythonWebsockets,
    GoCoderWebsocket,
    NodeWs,
}

impl Stack {
    /// The command that runs this stack's client (the URLs and CA follow), or why it cannot.
    /// Prepared once per test binary: Go's build and npm's install are not repeated per model.
    fn client(self) -> Result<Command, String> {
        static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static GO: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        match self {
            Stack::PythonWebsockets => {
                let python = PYTHON.get_or_init(python_with_websockets).clone()?;
                let mut cmd = Command::new(python);
                cmd.arg(interop_dir().join("ws_client.py"));
                Ok(cmd)
            }
            Stack::GoCoderWebsocket => Ok(Command::new(GO.get_or_init(|| build_go(".", "ws_client")).clone()?)),
            Stack::NodeWs => {
                let (node, dir) = node_with_ws()?;
                let mut cmd = Command::new(node);
                cmd.arg(dir.join("ws_client.mjs"));
                Ok(cmd)
            }
        }
    }

    /// The command that runs this stack's echo server (its address and, for TLS, the certificate
    /// and key follow), or why it cannot.
    fn server(self) -> Result<Command, String> {
        static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static GO: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        match self {
            Stack::PythonWebsockets => {
                let python = PYTHON.get_or_init(python_with_websockets).clone()?;
                let mut cmd = Command::new(python);
                cmd.arg(interop_dir().join("ws_server.py"));
                Ok(cmd)
            }
            Stack::GoCoderWebsocket => Ok(Command::new(GO.get_or_init(|| build_go("./server", "ws_server")).clone()?)),
            Stack::NodeWs => {
                let (node, dir) = node_with_ws()?;
                let mut cmd = Command::new(node);
                cmd.arg(dir.join("ws_server.mjs"));
                Ok(cmd)
            }
        }
    }
}

fn python_with_websockets() -> Result<PathBuf, String> {
    let python = find_program("python3", &[]).ok_or("no python3 on PATH")?;
    // The asyncio client of ws_client.py is websockets 13 and later.
    let out = Command::new(&python)
        .args(["-c", "import websockets.asyncio.client"])
        .output()
        .map_err(|e| format!("run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "python3 lacks websockets >= 13 ({}); install: pip install websockets",
            one_line(&out, false)
        ));
    }
    Ok(python)
}

/// `go build` of `package` (`.`, the client; `./server`) of tests/interop/go offline (GOPROXY=off):
/// the module comes from the module cache, filled by `go mod download` in `.ci/run`, and is checked
/// against the committed go.sum.
fn build_go(package: &str, name: &str) -> Result<PathBuf, String> {
    let go = find_program("go", &["/usr/local/go/bin/go"]).ok_or("no go on PATH or in /usr/local/go/bin")?;
    let binary = scratch("go").join(name);
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&binary)
        .arg(package)
        .current_dir(interop_dir().join("go"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .output()
        .map_err(|e| format!("run {}: {e}", go.display()))?;
    if !out.status.success() {
        return Err(format!(
            "go cannot build {name} offline ({}); install: cd crates/sockscale/tests/interop/go && go mod download",
            one_line(&out, false)
        ));
    }
    Ok(binary)
}

/// node, and a directory of ws_client.mjs and ws_server.mjs where `ws` resolves: tests/interop/node
/// if `npm ci` ran there, else a copy in the scratch directory with `npm ci --offline` (from npm's
/// cache).
/// Prepared once per test binary, for the clients and the servers alike (a second `npm ci` would
/// remove the node_modules a running one reads).
fn node_with_ws() -> Result<(PathBuf, PathBuf), String> {
    static NODE: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    NODE.get_or_init(install_node_ws).clone()
}

fn install_node_ws() -> Result<(PathBuf, PathBuf), String> {
    let node = find_program("node", &[]).ok_or("no node on PATH")?;
    let source = interop_dir().join("node");
    if source.join("node_modules/ws/package.json").is_file() {
        return Ok((node, source));
    }
    let npm = find_program("npm", &[]).ok_or("no npm on PATH, and ws not installed in tests/interop/node")?;
    let dir = scratch("node");
    for file in ["package.json", "package-lock.json", "ws_client.mjs", "ws_server.mjs"] {
        std::fs::copy(source.join(file), dir.join(file)).map_err(|e| format!("copy {file}: {e}"))?;
    }
    let out = Command::new(&npm)
        .args(["ci", "--offline", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("run {}: {e}", npm.display()))?;
    if !out.status.success() {
        return Err(format!(
            "npm cannot install ws offline ({}); install: npm ci --prefix crates/sockscale/tests/interop/node",
            one_line(&out, true)
        ));
    }
    Ok((node, dir))
}

/// Run `stack`'s client against `model` serving ws:// and, where the model honours TLS, wss://.
fn interop(model: &str, stack: Stack) {
    let mut client = match stack.client() {
        Ok(cmd) => cmd,
        Err(why) => {
            eprintln!("skipped: {stack:?}: {why}");
            return;
        }
    };
    let cert = TestCert::new(&format!("interop-{model}-{stack:?}"));
    let plain = ServerProc::start(model, &["--proto", "ws"]);
    let mut urls = vec![format!("ws://{}/", plain.addr)];
    let mut tls_server = None;
    if !support::skip(model, Policy::Tls) {
        let args = cert.args();
        let mut argv = vec!["--proto", "ws"];
        argv.extend(args.iter().map(String::as_str));
        let server = ServerProc::start(model, &argv);
        urls.push(format!("wss://{}/", server.addr));
        tls_server = Some(server);
    }
    let started = Instant::now();
    let mut child = client
        .arg(&cert.ca_file)
        .args(&urls)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the {stack:?} client: {e}"));
    let finished = support::eventually(CLIENT_LIMIT, || matches!(child.try_wait(), Ok(Some(_))));
    if !finished {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("the client's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stack:?} against {model} in {:.1?}:\n{stdout}{stderr}", started.elapsed());
    assert!(finished, "{stack:?} against {model}: the client did not finish within {CLIENT_LIMIT:?}");
    assert!(out.status.success(), "{stack:?} against {model}: {}\n{stdout}{stderr}", out.status);
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(": ok")).count(),
        2 * urls.len(),
        "{stack:?} against {model}: one ok line for each URL with and without deflate\n{stdout}"
    );
    drop(plain.stop_within(Duration::from_secs(10)));
    if let Some(server) = tls_server {
        drop(server.stop_within(Duration::from_secs(10)));
    }
}

macro_rules! interop {
    ($($model:ident),* $(,)?) => {
    $(
        mod $model {
            use super::Stack;
            const MODEL: &str = stringify!($model);
            #[test] fn python_websockets() { if !super::support::unavailable(MODEL) { super::interop(MODEL, Stack::PythonWebsockets) } }
            #[test] fn go_coder_websocket() { if !super::support::unavailable(MODEL) { super::interop(MODEL, Stack::GoCoderWebsocket) } }
            #[test] fn node_ws() { if !super::support::unavailable(MODEL) { super::interop(MODEL, Stack::NodeWs) } }
        }
    )*};
}

support::for_every_model!(interop);

/// The sizes `load ws` sends to each stack's server: empty, the largest 7-bit length, the smallest
/// 16-bit one, 64 KiB (a 64-bit length) and 1 MiB.
const LOAD_SIZES: [usize; 5] = [0, 125, 126, 65536, 1 << 20];

/// A stack's echo server, running; killed when dropped. Its stderr goes to a file, read on failure.
struct PeerServer {
    child: std::process::Child,
    port: u16,
    stderr: PathBuf,
}

impl PeerServer {
    /// Start `cmd` on 127.0.0.1:0 (with `cert`: TLS) and read the bound address it prints.
    fn start(mut cmd: Command, stack: Stack, cert: Option<&TestCert>) -> PeerServer {
        let stderr =
            scratch("servers").join(format!("{stack:?}-{}.stderr", if cert.is_some() { "tls" } else { "plain" }));
        cmd.arg("127.0.0.1:0");
        if let Some(cert) = cert {
            cmd.arg(&cert.cert).arg(&cert.key);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("the server's stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the {stack:?} server: {e}"));
        let stdout = child.stdout.take().expect("the server's stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(SERVER_READY_LIMIT).unwrap_or_default();
        let port = line.trim().rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok());
        let mut server = PeerServer { child, port: 0, stderr };
        match port {
            Some(port) if port != 0 => server.port = port,
            _ => panic!(
                "the {stack:?} server printed no address within {SERVER_READY_LIMIT:?} (it printed {line:?}): {}",
                server.stderr_text()
            ),
        }
        server
    }

    fn stderr_text(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server must print its address within this (Go's, Node's and Python's start in well under a second).
const SERVER_READY_LIMIT: Duration = Duration::from_secs(30);

/// A number in `report` at the dotted `path`.
fn report_u64(report: &serde_json::Value, path: &str) -> u64 {
    path.split('.').fold(report, |v, k| &v[k]).as_u64().unwrap_or_else(|| panic!("no {path} in the report: {report}"))
}

/// The sum of the report's error counters, and those that are not zero.
fn report_errors(report: &serde_json::Value) -> (u64, Vec<String>) {
    let Some(errors) = report["errors"].as_object() else { panic!("no errors block in the report: {report}") };
    let nonzero: Vec<String> =
        errors.iter().filter(|(_, v)| v.as_u64().is_some_and(|n| n > 0)).map(|(k, v)| format!("{k} {v}")).collect();
    (errors.values().filter_map(serde_json::Value::as_u64).sum(), nonzero)
}

/// `sockscale load ws` against `stack`'s echo server, plain and TLS: every size, text and binary,
/// with and without `--deflate`, 4 messages in flight on each of 2 connections.
fn load_ws_against(stack: Stack) {
    if let Err(why) = stack.server() {
        eprintln!("skipped: {stack:?}: {why}");
        return;
    }
    let server = || stack.server().expect("prepared above");
    let cert = TestCert::new(&format!("load-ws-against-{stack:?}"));
    let plain = PeerServer::start(server(), stack, None);
    let tls = PeerServer::start(server(), stack, Some(&cert));
    let ca = cert.ca_file.display().to_string();
    let started = Instant::now();
    let (connections, messages) = (2u64, 8u64);
    let mut runs = 0;
    for (url, tls_args) in [
        (format!("ws://127.0.0.1:{}/", plain.port), vec![]),
        (format!("wss://localhost:{}/echo", tls.port), vec!["--cacert", ca.as_str()]),
    ] {
        for deflate in [false, true] {
            for kind in ["--binary", "--text"] {
                for size in LOAD_SIZES {
                    let size_arg = size.to_string();
                    let (c, n) = (connections.to_string(), messages.to_string());
                    let mut args = vec![url.as_str(), "-c", &c, "-n", &n, "--pipeline", "4", "-s", &size_arg, kind];
                    args.extend(["-t", "1", "--timeout", "10"]);
                    args.extend(tls_args.iter().copied());
                    if deflate {
                        args.push("--deflate");
                    }
                    let what = format!("{stack:?} server, load ws {}", args.join(" "));
                    let report = load_ws_report(&args, &what);
                    let check = |path: &str, want: u64| {
                        assert_eq!(report_u64(&report, path), want, "{what}: {path}\n{}", report["ws"]);
                    };
                    check("ws.upgrades", connections);
                    check("ws.deflate_agreed", if deflate { connections } else { 0 });
                    check("requests.completed", messages);
                    check("ws.messages_sent", messages);
                    check("ws.messages_received", messages);
                    check("ws.bytes_received", messages * size as u64);
                    check("errors.verify_mismatch", 0);
                    check("ws.closes_sent.1000", connections);
                    check("ws.closes_received.1000", connections);
                    let (errors, which) = report_errors(&report);
                    assert_eq!(errors, 0, "{what}: errors {which:?}");
                    runs += 1;
                }
            }
        }
    }
    eprintln!("{stack:?} server: {runs} load ws runs in {:.1?}", started.elapsed());
    drop((plain, tls));
}

/// Run `sockscale load ws ARGS --json FILE`, which must exit 0; its report.
fn load_ws_report(args: &[&str], what: &str) -> serde_json::Value {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let json = scratch("reports").join(format!(
        "{}-{}.json",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sockscale"))
        .args(["load", "ws"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sockscale load ws");
    let finished = support::eventually(CLIENT_LIMIT, || matches!(child.try_wait(), Ok(Some(_))));
    if !finished {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("load ws's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(finished, "{what}: did not finish within {CLIENT_LIMIT:?}\n{stdout}{stderr}");
    assert!(out.status.success(), "{what}: {}\n{stdout}{stderr}", out.status);
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{what}: the report {}: {e}", json.display()));
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: the report is not JSON: {e}"))
}

mod load_ws_against {
    use super::Stack;
    #[test]
    fn python_websockets_server() {
        super::load_ws_against(Stack::PythonWebsockets)
    }
    #[test]
    fn go_coder_websocket_server() {
        super::load_ws_against(Stack::GoCoderWebsocket)
    }
    #[test]
    fn node_ws_server() {
        super::load_ws_against(Stack::NodeWs)
    }
}
