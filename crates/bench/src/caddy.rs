//! Caddy as the peer server of the HTTP/3 sweep, when it is found: a Go HTTP/3 server
//! (quic-go), serving the same 4096-byte page over HTTPS with the run's certificate, HTTP/1.1,
//! HTTP/2 and HTTP/3 on (`protocols h1 h2 h3`), pinned to the server cores like the sockscale
//! servers (Go sizes GOMAXPROCS to the cores it may run on). A fresh Caddy for every point, as
//! every model gets a fresh server.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::Harness;

/// The environment variable naming the Caddy binary, before `caddy` on PATH.
pub const ENV: &str = "SOCKSCALE_CADDY";

/// The reason Caddy has no row, when it is not found.
pub const NOT_FOUND: &str = "skipped: caddy was not found (set SOCKSCALE_CADDY to its binary, or put caddy on PATH: go install github.com/caddyserver/caddy/v2/cmd/caddy@latest)";

/// Where Caddy is: `$SOCKSCALE_CADDY` when set (and a file), else `caddy` on PATH.
pub fn find() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("caddy")).find(|p| p.is_file())
}

/// A running Caddy, in its own process group.
pub struct Caddy {
    child: std::process::Child,
    pub port: u16,
}

impl Caddy {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The Caddyfile: the admin endpoint and automatic HTTPS off (no ACME, no redirect listener),
/// no access log, the three protocols on one site at `127.0.0.1:port` with the run's
/// certificate, every path answered with `page` (as nginx's `try_files`).
pub fn caddyfile(port: u16, cert: &Path, key: &Path, root: &Path) -> String {
    format!(
        "{{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n\tlog default {{\n\t\toutput discard\n\t}}\n}}\n\
         https://127.0.0.1:{port} {{\n\tbind 127.0.0.1\n\ttls {cert} {key}\n\troot * {root}\n\trewrite * /page.html\n\tfile_server\n}}\n",
        cert = cert.display(),
        key = key.display(),
        root = root.display()
    )
}

/// Start a fresh Caddy and wait until it listens on TCP and on UDP (HTTP/3) at its port.
pub fn start(h: &Harness<'_>) -> Result<Caddy, String> {
    let caddy = find().ok_or(NOT_FOUND)?;
    let dir = std::path::absolute(h.scratch.join("caddy")).map_err(|e| format!("scratch directory: {e}"))?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let output = std::fs::File::create(dir.join("output.log")).map_err(|e| e.to_string())?;
    let page = sockscale_proto::http::generated_page(sockscale_proto::http::DEFAULT_BODY_LEN).to_vec();
    std::fs::write(dir.join("page.html"), page).map_err(|e| e.to_string())?;
    let files = h.certificate.as_ref().map_err(|e| format!("no certificate for HTTPS: {e}"))?;
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let port = free_port().ok_or("no free port for caddy")?;
    let conf = dir.join("Caddyfile");
    std::fs::write(&conf, caddyfile(port, &absolute(&files.cert), &absolute(&files.key), &dir))
        .map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&caddy);
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&conf)
        // Its own process group, registered with the bench's children: a Ctrl-C of the bench
        // kills it with the rest, and reaches only the bench.
        .process_group(0)
        // Caddy keeps state (certificates, locks) under its data and config directories: in
        // the scratch directory, not the user's.
        .env("HOME", &dir)
        .env("XDG_DATA_HOME", &dir)
        .env("XDG_CONFIG_HOME", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(output);
    let cpus = h.server_cpus.clone();
    // SAFETY: runs between fork and exec; sched_setaffinity is async-signal-safe and nothing
    // is allocated.
    unsafe {
        cmd.pre_exec(move || sockscale_sys::pin_to_cpus(&cpus));
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start caddy ({}): {e}", caddy.display()))?;
    h.children.add(child.id());
    if h.interrupted() {
        let _ = child.kill();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(tcp_listening(port) && udp_bound(port)) {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let log = std::fs::read_to_string(dir.join("output.log")).unwrap_or_default();
            let said = log.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no output").to_owned();
            stop(h, Caddy { child, port });
            return Err(format!("caddy did not start: {said}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Caddy { child, port })
}

/// Kill Caddy and reap it.
pub fn stop(h: &Harness<'_>, mut caddy: Caddy) {
    let pid = caddy.child.id();
    let _ = caddy.child.kill();
    let _ = caddy.child.wait();
    h.children.remove(pid);
}

fn tcp_listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Whether something holds UDP `port` on 127.0.0.1: binding it here fails.
pub(crate) fn udp_bound(port: u16) -> bool {
    std::net::UdpSocket::bind(("127.0.0.1", port)).is_err()
}

fn free_port() -> Option<u16> {
    // Free on TCP and on UDP: Caddy takes both.
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        if !udp_bound(port) {
            return Some(port);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_caddyfile_serves_the_page_over_three_protocols_with_the_runs_certificate() {
        let c = super::caddyfile(4433, "/r/cert.pem".as_ref(), "/r/key.pem".as_ref(), "/r/caddy".as_ref());
        for line in [
            "admin off",
            "auto_https off",
            "protocols h1 h2 h3",
            "https://127.0.0.1:4433 {",
            "tls /r/cert.pem /r/key.pem",
            "root * /r/caddy",
            "rewrite * /page.html",
        ] {
            assert!(c.lines().any(|l| l.trim() == line), "no {line:?} in\n{c}");
        }
    }
}
