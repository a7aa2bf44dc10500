//! nginx as an extra row of the HTTP, HTTPS and HTTP/2 sweeps, when it is installed: one worker
//! process, the same 4096-byte page, keep-alive without a request limit, pinned like the
//! sockscale servers; for HTTPS, OpenSSL with the run's certificate. A fresh nginx for every
//! point, as every model gets a fresh server.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Harness, Scheme};

/// The reason nginx has no row, when it is not installed.
pub const NOT_INSTALLED: &str = "skipped: nginx is not installed (apt-get install nginx)";

/// Whether nginx is installed where the bench looks for it.
pub fn installed() -> bool {
    find().is_some()
}

fn find() -> Option<String> {
    ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(str::to_owned)
}

/// A running nginx: one worker, pinned to the server cores, in its own process group.
pub struct Nginx {
    child: std::process::Child,
    pub port: u16,
}

impl Nginx {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Start a fresh nginx speaking `scheme` (HTTP/2 too when `http2`: h2c with prior knowledge on
/// a plain port, ALPN h2 over TLS) and wait until it listens.
pub fn start(h: &Harness<'_>, scheme: Scheme<'_>, http2: bool) -> Result<Nginx, String> {
    let nginx = find().ok_or(NOT_INSTALLED)?;
    let name = match (scheme, http2) {
        (Scheme::Http, false) => "nginx",
        (Scheme::Https { .. }, false) => "nginx-https",
        (Scheme::Http, true) => "nginx-h2c",
        (Scheme::Https { .. }, true) => "nginx-h2",
    };
    // Absolute: nginx reads a relative -c path as relative to its -p prefix, so with the
    // default relative output directory it would look for its configuration in the wrong place.
    let dir = std::path::absolute(h.scratch.join(name)).map_err(|e| format!("scratch directory: {e}"))?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let stderr = std::fs::File::create(dir.join("stderr.log")).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("page.html"), sockscale_proto_page()).map_err(|e| e.to_string())?;
    let port = free_port().ok_or("no free port for nginx")?;
    let tls = match scheme {
        Scheme::Http => String::new(),
        Scheme::Https { .. } => {
            let files = h.certificate.as_ref().map_err(|e| format!("no certificate for HTTPS: {e}"))?;
            let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
            tls_directives(&absolute(&files.cert), &absolute(&files.key))
        }
    };
    // nginx 1.22's syntax, which later versions still take: `http2` on the listen line.
    let listen = format!(
        "127.0.0.1:{port}{}{}",
        if matches!(scheme, Scheme::Https { .. }) { " ssl" } else { "" },
        if http2 { " http2" } else { "" }
    );
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\nworker_rlimit_nofile 20000;\nerror_log {dir}/error.log error;\npid {dir}/nginx.pid;\n\
         events {{ worker_connections 19000; }}\n\
         http {{ access_log off; keepalive_requests 1000000000; keepalive_timeout 75s; sendfile off; tcp_nodelay on;\n\
         http2_max_concurrent_streams 128; http2_max_requests 1000000000;\n\
         open_file_cache max=16 inactive=600s; open_file_cache_valid 600s;\n\
         server {{ listen {listen} backlog=4096; {tls}location / {{ default_type \"text/html; charset=utf-8\"; root {dir}; try_files /page.html =404; }} }} }}\n",
        dir = dir.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(nginx);
    cmd.args(["-c", &dir.join("nginx.conf").display().to_string(), "-p", &dir.display().to_string()])
        // Its own process group, registered with the bench's children: a Ctrl-C of the bench
        // kills it with the rest, and reaches only the bench.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // What nginx says before its error_log is open (a bad configuration, say).
        .stderr(stderr);
    let cpus = h.server_cpus.clone();
    // SAFETY: runs between fork and exec; sched_setaffinity is async-signal-safe and nothing
    // is allocated.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || sockscale_sys::pin_to_cpus(&cpus));
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start nginx: {e}"))?;
    h.children.add(child.id());
    // A Ctrl-C before the registration did not reach it (the flag was set before the kill).
    if h.interrupted() {
        let _ = child.kill();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            let (log, stderr) = (read("error.log"), read("stderr.log"));
            let said = log.lines().chain(stderr.lines()).last().unwrap_or("no log").to_owned();
            stop(h, Nginx { child, port });
            return Err(format!("nginx did not start: {said}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Nginx { child, port })
}

/// Kill nginx and reap it.
pub fn stop(h: &Harness<'_>, mut nginx: Nginx) {
    let pid = nginx.child.id();
    let _ = nginx.child.kill();
    let _ = nginx.child.wait();
    h.children.remove(pid);
}

/// nginx's TLS as sockscale serves it by default: the same ECDSA P-256 certificate, TLS 1.2
/// and 1.3, the key exchanges rustls offers (X25519 first), and both kinds of resumption on
/// (a session cache and tickets; the bench's client resumes none, so they cost nothing here).
pub fn tls_directives(cert: &std::path::Path, key: &std::path::Path) -> String {
    format!(
        "ssl_certificate {}; ssl_certificate_key {}; ssl_protocols TLSv1.2 TLSv1.3; ssl_ecdh_curve X25519:prime256v1:secp384r1; ssl_session_cache shared:SSL:10m; ssl_session_tickets on; ",
        cert.display(),
        key.display()
    )
}

fn sockscale_proto_page() -> Vec<u8> {
    sockscale_proto::http::generated_page(sockscale_proto::http::DEFAULT_BODY_LEN).to_vec()
}

fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok().map(|a| a.port())
}
