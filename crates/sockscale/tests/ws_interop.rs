//! Interop: three independent WebSocket stacks as clients of `serve --proto ws`, on every model —
//! Python `websockets`, Go `github.com/coder/websocket` and Node `ws`. Each runs its client in
//! tests/interop/ (ws_client.py, go/ws_client.go, node/ws_client.mjs) against a plain server and a
//! TLS one (the test CA): text and binary messages of 0, 125, 126, 65536 and 1 MiB bytes, echoed
//! byte for byte, with and without permessage-deflate; a ping answered; a close with 1000 echoed.
//! The case fails on the client's non-zero exit, with its line. A stack that is not installed is
//! skipped, saying why (`.ci/run` installs all three); nothing is fetched from the network here:
//! Go builds offline from its module cache, npm installs offline from its cache.

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
        static NODE: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
        match self {
            Stack::PythonWebsockets => {
                let python = PYTHON.get_or_init(python_with_websockets).clone()?;
                let mut cmd = Command::new(python);
                cmd.arg(interop_dir().join("ws_client.py"));
                Ok(cmd)
            }
            Stack::GoCoderWebsocket => Ok(Command::new(GO.get_or_init(build_go_client).clone()?)),
            Stack::NodeWs => {
                let (node, script) = NODE.get_or_init(node_with_ws).clone()?;
                let mut cmd = Command::new(node);
                cmd.arg(script);
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

/// `go build` of tests/interop/go offline (GOPROXY=off): the module comes from the module cache,
/// filled by `go mod download` in `.ci/run`, and is checked against the committed go.sum.
fn build_go_client() -> Result<PathBuf, String> {
    let go = find_program("go", &["/usr/local/go/bin/go"]).ok_or("no go on PATH or in /usr/local/go/bin")?;
    let binary = scratch("go").join("ws_client");
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(interop_dir().join("go"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .output()
        .map_err(|e| format!("run {}: {e}", go.display()))?;
    if !out.status.success() {
        return Err(format!(
            "go cannot build the client offline ({}); install: cd crates/sockscale/tests/interop/go && go mod download",
            one_line(&out, false)
        ));
    }
    Ok(binary)
}

/// node, and ws_client.mjs where `ws` resolves: tests/interop/node if `npm ci` ran there, else a
/// copy in the scratch directory with `npm ci --offline` (from npm's cache).
fn node_with_ws() -> Result<(PathBuf, PathBuf), String> {
    let node = find_program("node", &[]).ok_or("no node on PATH")?;
    let source = interop_dir().join("node");
    if source.join("node_modules/ws/package.json").is_file() {
        return Ok((node, source.join("ws_client.mjs")));
    }
    let npm = find_program("npm", &[]).ok_or("no npm on PATH, and ws not installed in tests/interop/node")?;
    let dir = scratch("node");
    for file in ["package.json", "package-lock.json", "ws_client.mjs"] {
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
    Ok((node, dir.join("ws_client.mjs")))
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
