//! HTTP/3 interop peers: three independent stacks, as clients and as servers, for tests that put
//! sockscale between them (and tests/h3_peers.rs, which runs them against each other).
//!
//! - ngtcp2 0.12.1 (Debian ngtcp2-client/ngtcp2-server): `gtlsclient`, `gtlsserver`; the only
//!   ones with simulated loss (`-t/-r`). gtlsclient verifies no certificate (it has no CA option).
//! - aioquic 1.7.2: the sdist's examples (http3_client.py, http3_server.py, demo app), run
//!   unchanged through tests/interop/aioquic_h3.py, which prints what their logs do not say
//!   (handshake resumed / 0-RTT accepted, statuses, key updates, the bound port).
//! - quic-go v0.65.0: tests/interop/quicgo_h3 (`server`, `client`), built offline from the module
//!   cache; its client prints one JSON line.
//!
//! `.ci/run` installs them (ci-h3-setup.sh); a finder returns Err(why, and how to install) when a
//! peer is missing, and the caller skips with that reason printed. Every run is bounded in time and
//! keeps the tool's output in a file (`Outcome::log`, `PeerServer::log`) for the failure message.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair};

pub const AIOQUIC_VERSION: &str = "1.7.2";

/// gtlsclient's `--key-update` delay: it must pass after the handshake is confirmed and after the
/// peer's own first update settles (quic-go updates after 100 packets; earlier, ngtcp2 answers
/// ERR_INVALID_STATE), and before the transfer ends: use a transfer that outlasts it (10 MiB).
pub const GTLSCLIENT_KEY_UPDATE_AFTER: &str = "100ms";

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

/// A fresh directory of this test binary's for one run, under the target directory. The first
/// call removes what earlier runs left (their downloads are up to tens of MiB).
fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    static PRUNED: OnceLock<()> = OnceLock::new();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("h3-peers");
    let pid = std::process::id();
    PRUNED.get_or_init(|| {
        let ours = format!("-{pid}-");
        for entry in std::fs::read_dir(&root).into_iter().flatten().filter_map(Result::ok) {
            if !entry.file_name().to_string_lossy().contains(&ours) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("{name}-{pid}-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `name` on PATH (not pyenv's shims for anything but python3), else the first of `fallbacks`.
fn find_program(name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .chain(fallbacks.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// ngtcp2's HTTP/3 client (GnuTLS build).
pub fn gtlsclient() -> Result<PathBuf, String> {
    find_program("gtlsclient", &["/usr/bin/gtlsclient"])
        .ok_or_else(|| "gtlsclient not found (install: apt-get install ngtcp2-client)".to_owned())
}

/// ngtcp2's HTTP/3 server (GnuTLS build); Debian puts it in /usr/sbin.
pub fn gtlsserver() -> Result<PathBuf, String> {
    find_program("gtlsserver", &["/usr/sbin/gtlsserver"])
        .ok_or_else(|| "gtlsserver not found (install: apt-get install ngtcp2-server)".to_owned())
}

pub fn python3() -> Result<PathBuf, String> {
    find_program("python3", &[]).ok_or_else(|| "no python3 on PATH".to_owned())
}

/// The aioquic sdist's examples/ (http3_client.py, http3_server.py, demo.py):
/// `SOCKSCALE_AIOQUIC_EXAMPLES`, else where ci-h3-setup.sh unpacks them,
/// `${XDG_CACHE_HOME:-$HOME/.cache}/sockscale/aioquic-1.7.2/examples`; and a python3 with
/// aioquic 1.7.2 and the examples' modules.
pub fn aioquic_examples() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(find_aioquic_examples).clone()
}

fn find_aioquic_examples() -> Result<PathBuf, String> {
    let install = format!(
        "install: pip install aioquic=={AIOQUIC_VERSION} dnslib httpx jinja2 starlette wsproto, and unpack the sdist's \
         examples/ (ci-h3-setup.sh)"
    );
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    let candidates: Vec<PathBuf> = std::env::var_os("SOCKSCALE_AIOQUIC_EXAMPLES")
        .map(PathBuf::from)
        .into_iter()
        .chain(cache.map(|c| c.join(format!("sockscale/aioquic-{AIOQUIC_VERSION}/examples"))))
        .collect();
    let dir = candidates
        .into_iter()
        .find(|d| d.join("http3_client.py").is_file() && d.join("http3_server.py").is_file())
        .ok_or_else(|| format!("aioquic's examples not found ({install})"))?;
    let python = python3()?;
    let out = Command::new(&python)
        .args(["-c", "import aioquic, starlette, jinja2, wsproto; print(aioquic.__version__)"])
        .output()
        .map_err(|e| format!("run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("python3 cannot import aioquic and the examples' modules ({install})"));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if version != AIOQUIC_VERSION {
        return Err(format!("python3 has aioquic {version}, the examples are {AIOQUIC_VERSION} ({install})"));
    }
    Ok(dir)
}

/// tests/interop/quicgo_h3, built once per test binary with `go build` offline (GOPROXY=off): the
/// module comes from the module cache (`go mod download` in ci-h3-setup.sh), checked against the
/// committed go.sum.
pub fn quicgo_h3() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build_quicgo_h3).clone()
}

fn build_quicgo_h3() -> Result<PathBuf, String> {
    let go = find_program("go", &["/usr/local/go/bin/go"]).ok_or("no go on PATH or in /usr/local/go/bin")?;
    let binary = scratch("quicgo-build").join("quicgo_h3");
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(interop_dir().join("quicgo_h3"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .output()
        .map_err(|e| format!("run {}: {e}", go.display()))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
        return Err(format!(
            "go cannot build quicgo_h3 offline ({last}); install: cd crates/sockscale/tests/interop/quicgo_h3 && go mod download"
        ));
    }
    Ok(binary)
}

/// A CA and a leaf certificate for `localhost`, `127.0.0.1` (an IP SAN) and `::1`, as
/// `sockscale cert` makes: every peer's client that verifies (aioquic `--ca-certs`, quic-go
/// `-cacert`) checks the IP SAN of `https://127.0.0.1:PORT/`.
pub struct H3Cert {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    dir: PathBuf,
}

impl H3Cert {
    pub fn new(name: &str) -> H3Cert {
        let dir = scratch(&format!("cert-{name}"));
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name = DistinguishedName::new();
        ca_params.distinguished_name.push(DnType::CommonName, "sockscale h3 test CA");
        let ca_key = KeyPair::generate().expect("CA key");
        let ca = ca_params.self_signed(&ca_key).expect("CA");
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("key");
        let names = ["localhost", "127.0.0.1", "::1"].map(str::to_owned).to_vec();
        let leaf = CertificateParams::new(names).expect("params").signed_by(&key, &issuer).expect("leaf");
        let cert = H3Cert { cert: dir.join("cert.pem"), key: dir.join("key.pem"), ca: dir.join("ca.pem"), dir };
        std::fs::write(&cert.cert, leaf.pem()).expect("write cert");
        std::fs::write(&cert.key, key.serialize_pem()).expect("write key");
        std::fs::write(&cert.ca, ca.pem()).expect("write CA");
        cert
    }
}

impl H3Cert {
    /// The base64 SHA-256 of the leaf's public key (its SubjectPublicKeyInfo), as Chromium's
    /// `--ignore-certificate-errors-spki-list` takes it: a certificate trusted by its key.
    pub fn spki_sha256_base64(&self) -> String {
        use base64::Engine as _;
        let pem = std::fs::read_to_string(&self.key).expect("read key");
        let key = KeyPair::from_pem(&pem).expect("parse key");
        let digest = ring::digest::digest(&ring::digest::SHA256, &rcgen::PublicKeyData::subject_public_key_info(&key));
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    }
}

impl Drop for H3Cert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How a client checks the server's certificate.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Verify against this CA (PEM) and the URL's host (127.0.0.1: an IP SAN).
    Ca(PathBuf),
    /// Verify nothing.
    Insecure,
}

/// What a client run asks for. Paths are URL paths on `https://127.0.0.1:PORT`.
#[derive(Clone, Debug)]
pub struct ClientOpts {
    pub trust: Trust,
    /// Requests in all, on one connection; the paths are cycled to this many. gtlsclient and
    /// aioquic open them all at once; quic-go keeps `concurrent` in flight.
    pub requests: usize,
    pub concurrent: usize,
    /// POST this file as each request's body (aioquic: ASCII only).
    pub body_file: Option<PathBuf>,
    /// Run once to get a session ticket, then measure a second connection that resumes it.
    pub resume: bool,
    /// With `resume`: send the requests as 0-RTT (GET only).
    pub zero_rtt: bool,
    /// Ask the client to update its keys (gtlsclient after GTLSCLIENT_KEY_UPDATE_AFTER, aioquic at
    /// its first response event; quic-go updates by itself after 100 packets, so it ignores this).
    pub key_update: bool,
    /// Drop this fraction of datagrams each way (gtlsclient `-t/-r` only).
    pub loss: Option<f64>,
    pub timeout: Duration,
}

impl ClientOpts {
    pub fn new(trust: Trust) -> ClientOpts {
        ClientOpts {
            trust,
            requests: 1,
            concurrent: 1,
            body_file: None,
            resume: false,
            zero_rtt: false,
            key_update: false,
            loss: None,
            timeout: Duration::from_secs(20),
        }
    }
}

/// What a client run showed. `None`: this client does not say.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Requests answered with 200 and a complete body.
    pub ok: usize,
    pub failed: usize,
    /// The status of each response, in the order they were printed.
    pub statuses: Vec<u16>,
    /// Response body bytes in all.
    pub bytes: Option<u64>,
    /// The measured connection resumed a TLS session.
    pub resumed: Option<bool>,
    /// The server accepted 0-RTT on the measured connection.
    pub zero_rtt: Option<bool>,
    /// 1-RTT key updates the client went through (either side's), and those it started itself.
    pub key_updates: Option<u64>,
    pub key_updates_initiated: Option<u64>,
    /// Datagrams the client dropped on purpose (`loss`), both ways.
    pub simulated_losses: Option<u64>,
    pub alpn: Option<String>,
    /// Response bodies the client wrote, by file name (the last of a name wins).
    pub downloads: Vec<PathBuf>,
    /// quic-go: each distinct response body (sha256 hex, length, how many).
    pub bodies: Vec<(String, u64, u64)>,
    pub errors: Vec<String>,
    pub exit: Option<i32>,
    /// The tool's own output, kept.
    pub log: PathBuf,
}

impl Outcome {
    /// The last lines of the tool's output, for a failure message.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// Run `cmd` with stdout and stderr into `log`, killing it after `timeout`.
fn run_bounded(mut cmd: Command, log: &Path, timeout: Duration) -> Result<(ExitStatus, String), String> {
    let file = std::fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("dup {}: {e}", log.display()))?;
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child =
        cmd.stdin(Stdio::null()).stdout(file).stderr(err).spawn().map_err(|e| format!("run {program}: {e}"))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait {program}: {e}"))? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            return Err(format!(
                "{program} did not finish within {timeout:?}; its last lines: {:?} (all: {})",
                tail,
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read(log).map_err(|e| format!("read {}: {e}", log.display()))?;
    Ok((status, String::from_utf8_lossy(&text).into_owned()))
}

fn urls(port: u16, paths: &[&str], requests: usize) -> Vec<String> {
    paths.iter().cycle().take(requests.max(paths.len())).map(|p| format!("https://127.0.0.1:{port}{p}")).collect()
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// gtlsclient against 127.0.0.1:`port`, one connection, `paths` cycled to `opts.requests` streams.
/// Read from its log: `http: stream 0xN [:status: S]`, `HTTP stream N closed with error code 256`
/// (H3_NO_ERROR: the response was whole), `Negotiated ALPN is h3`, `** Simulated … packet loss **`,
/// `Initiate key update` (an `ngtcp2_conn_initiate_key_update: ERR_…` after it: refused),
/// `cry key update confirmed` (either side's update), a sent `type=0RTT` packet and no
/// `Early data was rejected by server` (0-RTT accepted). It does not say whether it resumed
/// (`resumed` is Some(true) only when 0-RTT was accepted, which needs resumption): read the
/// server's side. Bodies go to `downloads` (--download), not counted in `bytes`.
pub fn run_gtlsclient(port: u16, paths: &[&str], opts: &ClientOpts) -> Result<Outcome, String> {
    let client = gtlsclient()?;
    if matches!(opts.trust, Trust::Ca(_)) {
        return Err("gtlsclient verifies no certificate: it has no CA option (use Trust::Insecure)".into());
    }
    let dir = scratch("gtlsclient");
    let download = dir.join("download");
    std::fs::create_dir_all(&download).map_err(|e| format!("create {}: {e}", download.display()))?;
    let session = dir.join("session.pem");
    let transport_params = dir.join("tp.pem");
    let command = |measured: bool| {
        let mut cmd = Command::new(&client);
        cmd.args(["--no-quic-dump", "--no-http-dump", "--exit-on-all-streams-close", "--handshake-timeout=5s"]);
        cmd.arg(format!("--timeout={}s", opts.timeout.as_secs().max(1)));
        if opts.resume || opts.zero_rtt {
            cmd.arg(format!("--session-file={}", session.display()));
            cmd.arg(format!("--tp-file={}", transport_params.display()));
            if !opts.zero_rtt {
                cmd.arg("--disable-early-data");
            }
        }
        if measured {
            cmd.arg(format!("--download={}", download.display()));
            if let Some(loss) = opts.loss {
                cmd.args(["-t", &loss.to_string(), "-r", &loss.to_string()]);
            }
            if opts.requests > paths.len() {
                cmd.args(["-n", &opts.requests.to_string()]);
            }
            if let Some(body) = &opts.body_file {
                cmd.args(["-m", "POST", "-d"]).arg(body);
            }
            if opts.key_update {
                cmd.arg(format!("--key-update={GTLSCLIENT_KEY_UPDATE_AFTER}"));
            }
            cmd.args(["127.0.0.1", &port.to_string()]).args(urls(port, paths, paths.len()));
        } else {
            cmd.args(["127.0.0.1", &port.to_string()]).args(urls(port, &paths[..1], 1));
        }
        cmd
    };
    if opts.resume || opts.zero_rtt {
        let (_, text) = run_bounded(command(false), &dir.join("first.log"), opts.timeout)?;
        if !session.is_file() || !transport_params.is_file() {
            return Err(format!(
                "gtlsclient's first connection wrote no session/transport parameters file: {}",
                last_lines(&text)
            ));
        }
    }
    let log = dir.join("client.log");
    let (status, text) = run_bounded(command(true), &log, opts.timeout)?;
    let mut out = Outcome { exit: status.code(), log, downloads: files_in(&download), ..Outcome::default() };
    let mut streams: std::collections::BTreeMap<u64, (Option<u16>, bool)> = Default::default();
    let (mut initiated, mut refused, mut confirmed, mut losses) = (0, 0, 0, 0);
    let (mut sent_0rtt, mut rejected) = (false, false);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("http: stream 0x") {
            if let Some((id, status)) = rest.split_once(" [:status: ") {
                let id = u64::from_str_radix(id, 16).unwrap_or(u64::MAX);
                let status = status.trim_end_matches(']').parse().unwrap_or(0);
                out.statuses.push(status);
                streams.entry(id).or_default().0 = Some(status);
            }
        } else if let Some(rest) = line.strip_prefix("HTTP stream ") {
            if let Some((id, code)) = rest.split_once(" closed with error code ") {
                if let Ok(id) = id.parse::<u64>() {
                    let whole = code.trim() == "256";
                    streams.entry(id).or_default().1 = whole;
                    if !whole {
                        out.errors.push(line.to_owned());
                    }
                }
            }
        } else if let Some(alpn) = line.strip_prefix("Negotiated ALPN is ") {
            out.alpn = Some(alpn.trim().to_owned());
        } else if line.starts_with("** Simulated") {
            losses += 1;
        } else if line == "Initiate key update" {
            initiated += 1;
        } else if line.starts_with("ngtcp2_conn_initiate_key_update: ") {
            refused += 1;
        } else if line.ends_with(" cry key update confirmed") {
            confirmed += 1;
        } else if line.contains(" type=0RTT ") && line.contains(" pkt tx ") {
            sent_0rtt = true;
        } else if line.starts_with("Early data was rejected") {
            rejected = true;
        } else if line.contains(": ERR_") {
            out.errors.push(line.to_owned());
        }
    }
    out.ok = streams.values().filter(|(status, whole)| *status == Some(200) && *whole).count();
    out.failed = opts.requests.max(paths.len()).saturating_sub(out.ok);
    out.key_updates = Some(confirmed);
    out.key_updates_initiated = Some(initiated - refused.min(initiated));
    out.simulated_losses = Some(losses);
    let accepted = sent_0rtt && !rejected;
    out.zero_rtt = Some(accepted);
    out.resumed = accepted.then_some(true);
    Ok(out)
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// aioquic's http3_client.py (through aioquic_h3.py) against 127.0.0.1:`port`: `paths` cycled to
/// `opts.requests` URLs, fetched concurrently on one connection. Read from its log: `aioquic:
/// handshake alpn=… resumed=… early_data_accepted=…`, `aioquic: status S stream N`, `aioquic:
/// key_updated trigger=local_update|remote_update`, and the example's own `Response received for
/// M P : N bytes`. Bodies go to `downloads` (--output-dir, by the path's last segment).
pub fn run_aioquic_client(port: u16, paths: &[&str], opts: &ClientOpts) -> Result<Outcome, String> {
    let examples = aioquic_examples()?;
    let python = python3()?;
    if opts.loss.is_some() {
        return Err("aioquic's client cannot drop packets (no loss option)".into());
    }
    let dir = scratch("aioquic-client");
    let download = dir.join("download");
    std::fs::create_dir_all(&download).map_err(|e| format!("create {}: {e}", download.display()))?;
    let ticket = dir.join("ticket.pickle");
    let command = |measured: bool| {
        let mut cmd = Command::new(&python);
        cmd.arg(interop_dir().join("aioquic_h3.py")).arg(&examples).arg("client");
        match &opts.trust {
            Trust::Ca(ca) => cmd.arg("--ca-certs").arg(ca),
            Trust::Insecure => cmd.arg("--insecure"),
        };
        if opts.resume || opts.zero_rtt {
            cmd.arg("-s").arg(&ticket);
        }
        if measured {
            cmd.arg("--output-dir").arg(&download);
            if opts.zero_rtt {
                cmd.arg("--zero-rtt");
            }
            if opts.key_update {
                cmd.arg("--key-update");
            }
            if let Some(body) = &opts.body_file {
                cmd.arg("--data-file").arg(body);
            }
            cmd.args(urls(port, paths, opts.requests));
        } else {
            cmd.args(urls(port, &paths[..1], 1));
        }
        cmd
    };
    if opts.resume || opts.zero_rtt {
        let (_, text) = run_bounded(command(false), &dir.join("first.log"), opts.timeout)?;
        if !ticket.is_file() {
            return Err(format!("aioquic's first connection got no session ticket: {}", last_lines(&text)));
        }
    }
    let log = dir.join("client.log");
    let (status, text) = run_bounded(command(true), &log, opts.timeout)?;
    let mut out = Outcome { exit: status.code(), log, downloads: files_in(&download), ..Outcome::default() };
    let (mut responses, mut bytes, mut updates, mut initiated) = (0usize, 0u64, 0u64, 0u64);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("aioquic: handshake ") {
            for field in rest.split_whitespace() {
                match field.split_once('=') {
                    Some(("alpn", v)) => out.alpn = Some(v.to_owned()),
                    Some(("resumed", v)) => out.resumed = Some(v == "True"),
                    Some(("early_data_accepted", v)) => out.zero_rtt = Some(v == "True"),
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("aioquic: status ") {
            out.statuses.push(rest.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0));
        } else if let Some(rest) = line.strip_prefix("aioquic: key_updated trigger=") {
            updates += 1;
            if rest.trim() == "local_update" {
                initiated += 1;
            }
        } else if let Some((_, rest)) = line.split_once(" INFO client Response received for ") {
            responses += 1;
            let n = rest.split(" : ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok());
            bytes += n.unwrap_or(0);
        } else if line.starts_with("Traceback") || line.contains("Error") {
            out.errors.push(line.trim().to_owned());
        }
    }
    if !status.success() {
        out.errors.push(format!("exit {status}: {}", last_lines(&text)));
    }
    let ok_statuses = out.statuses.iter().filter(|s| **s == 200).count();
    out.ok = if status.success() { responses.min(ok_statuses) } else { 0 };
    out.failed = opts.requests.max(paths.len()).saturating_sub(out.ok);
    out.bytes = Some(bytes);
    out.key_updates = Some(updates);
    out.key_updates_initiated = Some(initiated);
    Ok(out)
}

/// quic-go's client (tests/interop/quicgo_h3 client) against https://127.0.0.1:`port``path`:
/// `opts.requests` requests, `opts.concurrent` at a time, on one connection. Its JSON line says
/// everything: statuses, bytes, sha256 of each distinct body, resumed (tls DidResume), 0-RTT
/// (quic ConnectionState.Used0RTT), ALPN, and the key updates from quic-go's qlog events.
pub fn run_quicgo_client(port: u16, path: &str, opts: &ClientOpts) -> Result<Outcome, String> {
    let binary = quicgo_h3()?;
    if opts.loss.is_some() {
        return Err("quic-go's client cannot drop packets (no loss option)".into());
    }
    let dir = scratch("quicgo-client");
    let mut cmd = Command::new(&binary);
    cmd.arg("client");
    match &opts.trust {
        Trust::Ca(ca) => cmd.arg("-cacert").arg(ca),
        Trust::Insecure => cmd.arg("-insecure"),
    };
    cmd.args(["-n", &opts.requests.to_string(), "-c", &opts.concurrent.to_string()]);
    cmd.arg(format!("-timeout={}ms", opts.timeout.as_millis()));
    if let Some(body) = &opts.body_file {
        cmd.arg("-body-file").arg(body);
    }
    if opts.zero_rtt {
        cmd.arg("-0rtt");
    } else if opts.resume {
        cmd.arg("-resume");
    }
    cmd.arg(format!("https://127.0.0.1:{port}{path}"));
    let log = dir.join("client.log");
    let (status, text) = run_bounded(cmd, &log, opts.timeout + Duration::from_secs(5))?;
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("quicgo_h3 client printed no JSON: {}", last_lines(&text)))?;
    let json: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("quicgo_h3 client's JSON: {e}: {line}"))?;
    let num = |k: &str| json[k].as_u64();
    let mut out = Outcome {
        ok: num("requests_ok").unwrap_or(0) as usize,
        failed: num("requests_failed").unwrap_or(0) as usize,
        statuses: json["statuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_u64())
            .map(|s| s as u16)
            .collect(),
        bytes: num("bytes_received"),
        resumed: json["resumed"].as_bool(),
        zero_rtt: json["used_0rtt"].as_bool(),
        key_updates: Some(num("key_updates_local").unwrap_or(0) + num("key_updates_remote").unwrap_or(0)),
        key_updates_initiated: num("key_updates_local"),
        simulated_losses: None,
        alpn: json["alpn"].as_str().map(str::to_owned),
        downloads: Vec::new(),
        bodies: json["bodies"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                (
                    b["sha256"].as_str().unwrap_or("").to_owned(),
                    b["bytes"].as_u64().unwrap_or(0),
                    b["count"].as_u64().unwrap_or(0),
                )
            })
            .collect(),
        errors: json["errors"].as_array().into_iter().flatten().filter_map(|e| e.as_str()).map(str::to_owned).collect(),
        exit: status.code(),
        log,
    };
    if !status.success() && out.errors.is_empty() {
        out.errors.push(format!("exit {status}"));
    }
    Ok(out)
}

/// Which peer a `PeerServer` is: its routes differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    QuicGo,
    Aioquic,
    Ngtcp2,
}

/// A peer's HTTP/3 server on 127.0.0.1 (an OS-chosen port), killed on drop. Its output is kept in
/// `log`.
pub struct PeerServer {
    pub peer: Peer,
    pub port: u16,
    pub log: PathBuf,
    child: Child,
    dir: PathBuf,
}

/// One handshake as the server saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerHandshake {
    pub resumed: bool,
    /// quic-go: 0-RTT accepted (Used0RTT, also when the client offered it but sent none);
    /// aioquic: early data accepted.
    pub zero_rtt: bool,
}

impl PeerServer {
    /// The path of an N-byte response: quic-go `/bytes/N`, aioquic `/N` ("Z"s, at most 50 MB),
    /// gtlsserver `/N` (generated, at most --max-dyn-length, 20M by default).
    pub fn bytes_path(&self, n: u64) -> String {
        match self.peer {
            Peer::QuicGo => format!("/bytes/{n}"),
            Peer::Aioquic | Peer::Ngtcp2 => format!("/{n}"),
        }
    }

    /// The path that echoes a POST body: quic-go and aioquic `/echo`; gtlsserver has none (it
    /// reads and drops a request body, answering the path as for a GET).
    pub fn echo_path(&self) -> Option<&'static str> {
        match self.peer {
            Peer::QuicGo | Peer::Aioquic => Some("/echo"),
            Peer::Ngtcp2 => None,
        }
    }

    /// `https://127.0.0.1:PORT` and `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The handshakes the server reported so far (None: gtlsserver, which does not say).
    /// quic-go: `handshake from ADDR: alpn=h3 resumed=B used_0rtt=B`;
    /// aioquic: `aioquic: handshake alpn=h3 resumed=B early_data_accepted=B`.
    pub fn handshakes(&self) -> Option<Vec<ServerHandshake>> {
        let text = self.log_text();
        let flag =
            |line: &str, key: &str| line.split_whitespace().any(|f| f.eq_ignore_ascii_case(&format!("{key}=true")));
        match self.peer {
            Peer::QuicGo => Some(
                text.lines()
                    .filter(|l| l.starts_with("handshake from "))
                    .map(|l| ServerHandshake { resumed: flag(l, "resumed"), zero_rtt: flag(l, "used_0rtt") })
                    .collect(),
            ),
            Peer::Aioquic => Some(
                text.lines()
                    .filter(|l| l.starts_with("aioquic: handshake "))
                    .map(|l| ServerHandshake { resumed: flag(l, "resumed"), zero_rtt: flag(l, "early_data_accepted") })
                    .collect(),
            ),
            Peer::Ngtcp2 => None,
        }
    }

    /// 1-RTT key updates the server went through so far, either side's. quic-go counts a
    /// connection's when it closes (`connection N closed: key_updates_local=A key_updates_remote=B`);
    /// aioquic: `aioquic: key_updated`; gtlsserver: `cry key update confirmed`.
    pub fn key_updates(&self) -> u64 {
        let text = self.log_text();
        match self.peer {
            Peer::QuicGo => text
                .lines()
                .filter(|l| l.starts_with("connection "))
                .flat_map(|l| l.split_whitespace())
                .filter_map(|f| f.strip_prefix("key_updates_local=").or_else(|| f.strip_prefix("key_updates_remote=")))
                .filter_map(|n| n.parse::<u64>().ok())
                .sum(),
            Peer::Aioquic => text.lines().filter(|l| l.starts_with("aioquic: key_updated")).count() as u64,
            Peer::Ngtcp2 => text.lines().filter(|l| l.ends_with(" cry key update confirmed")).count() as u64,
        }
    }

    /// Wait (up to `limit`) until `pred` holds of the server's log; the result of the last check.
    pub fn wait_for(&self, limit: Duration, pred: impl Fn(&PeerServer) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if pred(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.dir.join("htdocs"));
    }
}

/// Spawn `cmd` with stderr into `log` and stdout piped; the port is the first stdout line that
/// `port_of` parses, within 10 s.
fn start_announcing(
    peer: Peer,
    mut cmd: Command,
    dir: PathBuf,
    port_of: fn(&str) -> Option<u16>,
) -> Result<PeerServer, String> {
    let log = dir.join("server.log");
    let file = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("start {peer:?} server: {e}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(port) = port_of(&line) {
                let _ = tx.send(port);
            }
        }
    });
    let mut server = PeerServer { peer, port: 0, log, child, dir };
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(port) => {
            server.port = port;
            Ok(server)
        }
        Err(_) => Err(format!("the {peer:?} server announced no port within 10 s: {}", last_lines(&server.log_text()))),
    }
}

/// quic-go's server: GET / ("hello"), GET /bytes/N, POST /echo; 0-RTT allowed.
pub fn start_quicgo_server(cert: &H3Cert) -> Result<PeerServer, String> {
    let binary = quicgo_h3()?;
    let mut cmd = Command::new(binary);
    cmd.args(["server", "-addr", "127.0.0.1:0", "-cert"]).arg(&cert.cert).arg("-key").arg(&cert.key);
    start_announcing(Peer::QuicGo, cmd, scratch("quicgo-server"), |line| line.trim().parse().ok())
}

/// aioquic's http3_server.py with its demo app: GET /N ("Z"*N), POST /echo; session tickets and
/// 0-RTT on (the example's in-memory ticket store).
pub fn start_aioquic_server(cert: &H3Cert) -> Result<PeerServer, String> {
    let examples = aioquic_examples()?;
    let mut cmd = Command::new(python3()?);
    cmd.arg(interop_dir().join("aioquic_h3.py"))
        .arg(&examples)
        .args(["server", "--host", "127.0.0.1", "--port", "0", "-c"])
        .arg(&cert.cert)
        .arg("-k")
        .arg(&cert.key)
        .current_dir(&examples);
    start_announcing(Peer::Aioquic, cmd, scratch("aioquic-server"), |line| {
        line.strip_prefix("aioquic: listening ")?.split_whitespace().nth(1)?.parse().ok()
    })
}

/// gtlsserver on 127.0.0.1, port chosen by the OS (it prints none: read from /proc), an empty
/// document root (so only its generated `/N` answers), dropping `loss` of datagrams each way.
pub fn start_gtlsserver(cert: &H3Cert, loss: Option<f64>) -> Result<PeerServer, String> {
    let binary = gtlsserver()?;
    let dir = scratch("gtlsserver");
    let htdocs = dir.join("htdocs");
    std::fs::create_dir_all(&htdocs).map_err(|e| format!("create {}: {e}", htdocs.display()))?;
    let log = dir.join("server.log");
    let file = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("dup {}: {e}", log.display()))?;
    let mut cmd = Command::new(binary);
    cmd.args(["--no-quic-dump", "--no-http-dump"]).arg(format!("--htdocs={}", htdocs.display()));
    if let Some(loss) = loss {
        cmd.args(["-t", &loss.to_string(), "-r", &loss.to_string()]);
    }
    cmd.args(["127.0.0.1", "0"]).arg(&cert.key).arg(&cert.cert);
    let child =
        cmd.stdin(Stdio::null()).stdout(file).stderr(err).spawn().map_err(|e| format!("start gtlsserver: {e}"))?;
    let pid = child.id();
    let mut server = PeerServer { peer: Peer::Ngtcp2, port: 0, log, child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(port) = udp_port_of(pid) {
            server.port = port;
            return Ok(server);
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!("gtlsserver exited ({status}): {}", last_lines(&server.log_text())));
        }
        if Instant::now() >= deadline {
            return Err(format!("gtlsserver bound no UDP port within 10 s: {}", last_lines(&server.log_text())));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The local port of a UDP socket that process `pid` holds: its socket inodes (/proc/PID/fd)
/// looked up in /proc/net/udp and udp6.
pub fn udp_port_of(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    ["/proc/net/udp", "/proc/net/udp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        text.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, inode) = (fields.get(1)?, fields.get(9)?);
            if !inodes.iter().any(|i| i == inode) {
                return None;
            }
            u16::from_str_radix(local.rsplit(':').next()?, 16).ok().filter(|p| *p != 0)
        })
    })
}

/// One request by ngtcp2's `client` (from [`gtlsclient`]) to `https://127.0.0.1:PORT/` that
/// moves to a new local port after the handshake and only then sends its request: as a
/// migration (it validates the new path), or with `rebinding` as a NAT rebinding (it does not;
/// the server does). Ok if the request was answered after the move; else why, with the end of
/// the client's log. Bounded by the client's own timeouts (3 s idle, 5 s handshake).
pub fn request_after_moving(client: &Path, port: u16, rebinding: bool) -> Result<(), String> {
    let mut cmd = Command::new(client);
    cmd.args(["--change-local-addr=200ms", "--delay-stream=600ms", "--exit-on-all-streams-close"]);
    cmd.args(["--timeout=3s", "--handshake-timeout=5s", "--no-quic-dump"]);
    if rebinding {
        cmd.arg("--nat-rebinding");
    }
    let port = port.to_string();
    let url = format!("https://127.0.0.1:{port}/");
    let out = cmd.args(["127.0.0.1", &port, &url]).output().map_err(|e| format!("cannot run gtlsclient: {e}"))?;
    // gtlsclient logs both its move and the response on stderr, in order.
    let text = String::from_utf8_lossy(&out.stderr);
    let moved = text.find("Local address is now").ok_or_else(|| format!("the client did not move: {text}"))?;
    let tail = || text.lines().rev().take(15).collect::<Vec<_>>().join("\n");
    let answered =
        text.find(":status: 200").ok_or_else(|| format!("no answer after the client's port changed: {}", tail()))?;
    if answered < moved {
        return Err(format!("answered before the client moved: {text}"));
    }
    Ok(())
}
