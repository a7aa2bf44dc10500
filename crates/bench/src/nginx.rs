//! nginx as an extra row of the HTTP and HTTPS sweeps, when it is installed: one worker process,
//! the same 4096-byte page, keep-alive without a request limit, pinned like the sockscale
//! servers; for HTTPS, OpenSSL with the run's certificate.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Harness, Scheme};
use crate::results::HttpPoint;

/// The reason nginx has no row, when it is not installed.
pub const NOT_INSTALLED: &str = "skipped: nginx is not installed (apt-get install nginx)";

/// One sweep against nginx: plain HTTP, or HTTPS with the run's certificate (OpenSSL). A fresh
/// nginx for each.
pub fn sweep(h: &Harness<'_>, scheme: Scheme<'_>, progress: impl FnMut()) -> Result<Vec<HttpPoint>, String> {
    let nginx = find().ok_or(NOT_INSTALLED)?;
    run(h, &nginx, scheme, progress)
}

/// Whether nginx is installed where the sweep looks for it.
pub fn installed() -> bool {
    find().is_some()
}

fn find() -> Option<String> {
    ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(str::to_owned)
}

fn run(h: &Harness<'_>, nginx: &str, scheme: Scheme<'_>, progress: impl FnMut()) -> Result<Vec<HttpPoint>, String> {
    let name = match scheme {
        Scheme::Http => "nginx",
        Scheme::Https { .. } => "nginx-https",
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
    let listen = match scheme {
        Scheme::Http => format!("127.0.0.1:{port}"),
        Scheme::Https { .. } => format!("127.0.0.1:{port} ssl"),
    };
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\nworker_rlimit_nofile 20000;\nerror_log {dir}/error.log error;\npid {dir}/nginx.pid;\n\
         events {{ worker_connections 19000; }}\n\
         http {{ access_log off; keepalive_requests 1000000000; keepalive_timeout 75s; sendfile off; tcp_nodelay on;\n\
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
    let pid = child.id();
    h.children.add(pid);
    let points = serve_sweep(h, &mut child, port, &dir, scheme, progress);
    let _ = child.kill();
    let _ = child.wait();
    h.children.remove(pid);
    points
}

/// Wait for nginx to listen on `port`, then run the sweep against it.
fn serve_sweep(
    h: &Harness<'_>,
    child: &mut std::process::Child,
    port: u16,
    dir: &std::path::Path,
    scheme: Scheme<'_>,
    progress: impl FnMut(),
) -> Result<Vec<HttpPoint>, String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            let (log, stderr) = (read("error.log"), read("stderr.log"));
            let said = log.lines().chain(stderr.lines()).last().unwrap_or("no log");
            return Err(format!("nginx did not start: {said}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    h.http_sweep(port, Some(child.id()), scheme, progress)
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
