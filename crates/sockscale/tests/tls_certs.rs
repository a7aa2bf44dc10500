//! Certificates as users and their tools expect: `load --cacert` trusts a self-signed
//! certificate named in it as itself (as curl and OpenSSL do), still checking its names and
//! dates; a refused certificate is named in words, with advice only about flags not passed; and
//! `sockscale cert` makes what a private CA issues, which `openssl verify`, `openssl x509` and
//! testssl.sh take. openssl and testssl.sh are skipped, saying why, where missing.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{ServerProc, BIN};

/// A directory of this test's own, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("sockscale-tls-certs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test dir");
        Dir(dir)
    }

    fn join(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn have(tool: &str, probe: &str) -> bool {
    let ok = Command::new(tool).arg(probe).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        eprintln!("skipped: {tool} is not installed");
    }
    ok
}

/// Run `cmd` to its end within `limit` (killed past it).
fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The README's recipe: a self-signed P-256 certificate (CA:TRUE, OpenSSL's default for
/// `req -x509`) for `cn` with `san`, in `dir` as c.pem and k.pem.
fn openssl_self_signed(dir: &Dir, cn: &str, san: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
    let mut cmd = Command::new("openssl");
    cmd.args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-days", "30", "-subj", &format!("/CN={cn}"), "-addext", &format!("subjectAltName={san}")]);
    let out = run_within(cmd, Duration::from_secs(20));
    assert!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
    (cert, key)
}

fn serve(cert: &Path, key: &Path) -> ServerProc {
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    ServerProc::start("epoll", &["--proto", "http", "--tls-cert", &cert, "--tls-key", &key])
}

/// `sockscale load http URL ARGS` for a second: its exit and what it printed.
fn load(url: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["load", "http", url, "-c", "1", "-d", "1"]).args(args);
    let out = run_within(cmd, Duration::from_secs(30));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// No Rust debug form in what a user reads.
fn assert_words(text: &str) {
    for debug in ["Other(", "OtherError", "CaUsedAsEndEntity", "InvalidCertificate", "UnknownIssuer", "DnsName("] {
        assert!(!text.contains(debug), "debug output {debug:?} in: {text}");
    }
}

#[test]
fn cacert_trusts_a_self_signed_certificate_as_itself() {
    if !have("openssl", "version") {
        return;
    }
    let dir = Dir::new("self-signed");
    let (cert, key) = openssl_self_signed(&dir, "localhost", "DNS:localhost,IP:127.0.0.1");
    let server = serve(&cert, &key);
    let port = server.addr.port();
    let cacert = cert.display().to_string();
    for host in ["127.0.0.1", "localhost"] {
        let (ok, text) = load(&format!("https://{host}:{port}/"), &["--cacert", &cacert]);
        assert!(ok, "--cacert with the server's own self-signed certificate, to {host}: {text}");
    }
    // Without it, the refusal says what the certificate is and what to pass.
    let (ok, text) = load(&format!("https://127.0.0.1:{port}/"), &[]);
    assert!(!ok, "{text}");
    assert!(text.contains("self-signed") && text.contains("--cacert FILE"), "{text}");
    assert_words(&text);
}

#[test]
fn cacert_still_checks_the_name_of_a_self_signed_certificate() {
    if !have("openssl", "version") {
        return;
    }
    let dir = Dir::new("wrong-name");
    let (cert, key) = openssl_self_signed(&dir, "example.com", "DNS:example.com");
    let server = serve(&cert, &key);
    let (ok, text) =
        load(&format!("https://127.0.0.1:{}/", server.addr.port()), &["--cacert", &cert.display().to_string()]);
    assert!(!ok, "a certificate for example.com was taken for 127.0.0.1: {text}");
    assert!(text.contains("not valid for 127.0.0.1 (it names example.com)"), "{text}");
    // The user passed --cacert: the advice does not tell them to.
    assert!(!text.contains("--cacert FILE"), "{text}");
    assert_words(&text);
}

/// `sockscale cert` in `dir`, with `args`.
fn sockscale_cert(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["cert", "--out"]).arg(dir).args(args);
    run_within(cmd, Duration::from_secs(30))
}

#[test]
fn a_certificate_signed_by_another_ca_is_named_so() {
    let (ours, theirs) = (Dir::new("ca-ours"), Dir::new("ca-theirs"));
    for dir in [&ours, &theirs] {
        let made = sockscale_cert(&dir.0, &[]);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    }
    let server = serve(&theirs.join("cert.pem"), &theirs.join("key.pem"));
    let ca = ours.join("ca.pem").display().to_string();
    let (ok, text) = load(&format!("https://localhost:{}/", server.addr.port()), &["--cacert", &ca]);
    assert!(!ok, "{text}");
    assert!(text.contains(&format!("signed by a CA not in --cacert {ca}")), "{text}");
    assert!(text.contains("sockscale test CA"), "the issuer is named: {text}");
    assert_words(&text);
    // Against the system's roots, the advice names the flag not passed.
    let (ok, text) = load(&format!("https://localhost:{}/", server.addr.port()), &[]);
    assert!(!ok, "{text}");
    assert!(text.contains("not among the system's roots") && text.contains("--cacert FILE"), "{text}");
    assert_words(&text);
    // The right CA is taken.
    let ca = theirs.join("ca.pem").display().to_string();
    let (ok, text) = load(&format!("https://localhost:{}/", server.addr.port()), &["--cacert", &ca]);
    assert!(ok, "{text}");
}

/// An expired certificate and one not valid yet, served by `openssl s_server` (sockscale serve
/// refuses to start with either): the refusal gives the date.
#[test]
fn an_expired_or_not_yet_valid_certificate_is_named_with_its_date() {
    if !have("openssl", "version") {
        return;
    }
    let expired = served_for_a_while((2020, 1, 1), (2021, 3, 4), "expired");
    assert!(expired.contains("the server's certificate expired on Mar  4 00:00:00 2021"), "{expired}");
    let early = served_for_a_while((2999, 5, 6), (3000, 1, 1), "early");
    assert!(early.contains("the server's certificate is not valid before May  6 00:00:00 2999"), "{early}");
}

/// What `load --cacert` says of a self-signed certificate for localhost valid from `begins` to
/// `ends` (year, month, day), which it trusts as itself and `openssl s_server` serves.
fn served_for_a_while(begins: (i32, u8, u8), ends: (i32, u8, u8), name: &str) -> String {
    let dir = Dir::new(name);
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params.not_before = rcgen::date_time_ymd(begins.0, begins.1, begins.2);
    params.not_after = rcgen::date_time_ymd(ends.0, ends.1, ends.2);
    let cert = params.self_signed(&key).expect("cert");
    std::fs::write(dir.join("c.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("k.pem"), key.serialize_pem()).expect("write");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    let mut server = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &port.to_string(), "-cert"])
        .arg(dir.join("c.pem"))
        .arg("-key")
        .arg(dir.join("k.pem"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let listening =
        support::eventually(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let ca = dir.join("c.pem").display().to_string();
    let (ok, text) = load(&format!("https://localhost:{port}/"), &["--cacert", &ca]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(listening, "openssl s_server did not listen");
    assert!(!ok, "{text}");
    assert_words(&text);
    text
}

fn openssl(args: &[&str]) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args(args);
    let out = run_within(cmd, Duration::from_secs(20));
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn sockscale_cert_makes_what_a_private_ca_issues() {
    let dir = Dir::new("made");
    let made = sockscale_cert(&dir.0, &["--san", "example.test", "--days", "30"]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let bad = sockscale_cert(&dir.join("bad"), &["--days", "0"]);
    let said = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    if !have("openssl", "version") {
        return;
    }
    let (ca, cert) = (dir.join("ca.pem").display().to_string(), dir.join("cert.pem").display().to_string());
    assert!(openssl(&["verify", "-CAfile", &ca, &cert]).contains(": OK"));
    let leaf = openssl(&["x509", "-in", &cert, "-noout", "-text"]);
    for want in [
        "CA:FALSE",
        "Digital Signature",
        "TLS Web Server Authentication",
        "X509v3 Authority Key Identifier",
        "X509v3 Subject Key Identifier",
        "DNS:example.test, DNS:localhost, IP Address:127.0.0.1",
        "Subject: CN = example.test",
    ] {
        assert!(leaf.contains(want), "{want:?} not in the leaf:\n{leaf}");
    }
    let ca_text = openssl(&["x509", "-in", &ca, "-noout", "-text"]);
    for want in ["CA:TRUE, pathlen:0", "Certificate Sign, CRL Sign", "X509v3 Subject Key Identifier"] {
        assert!(ca_text.contains(want), "{want:?} not in the CA:\n{ca_text}");
    }
    // Valid from an hour ago for 30 days, and the CA for ten years.
    let leaf_days = validity_seconds(&cert);
    assert_eq!(leaf_days, 30 * 86_400 + 3_600, "the leaf's validity");
    assert_eq!(validity_seconds(&ca), 3_650 * 86_400 + 3_600, "the CA's validity");
    assert!(openssl(&["x509", "-in", &cert, "-noout", "-checkend", "0"]).contains("will not expire"));
}

/// notAfter - notBefore of the certificate in `pem`, in seconds (`openssl x509 -dates`).
fn validity_seconds(pem: &str) -> i64 {
    let dates = openssl(&["x509", "-in", pem, "-noout", "-startdate", "-enddate", "-dateopt", "iso_8601"]);
    let at = |key: &str| -> i64 {
        let line = dates.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("{key} in {dates}"));
        let out = run_within(
            {
                let mut cmd = Command::new("date");
                cmd.args(["-u", "-d", line.trim(), "+%s"]);
                cmd
            },
            Duration::from_secs(5),
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("a date: {line}"))
    };
    at("notAfter=") - at("notBefore=")
}

/// testssl.sh's certificate checks against a server using `sockscale cert`'s certificate: no
/// "way too long" validity, the key usages a server certificate has, a chain to the CA.
#[test]
fn testssl_finds_the_certificate_sound() {
    let testssl = ["testssl", "testssl.sh"].into_iter().find(|t| Command::new(t).arg("--version").output().is_ok());
    let Some(testssl) = testssl else {
        eprintln!("skipped: testssl.sh is not installed (apt-get install testssl.sh)");
        return;
    };
    let dir = Dir::new("testssl");
    let made = sockscale_cert(&dir.0, &[]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let server = serve(&dir.join("cert.pem"), &dir.join("key.pem"));
    let mut cmd = Command::new(testssl);
    cmd.args(["--quiet", "--color", "0", "--add-ca"])
        .arg(dir.join("ca.pem"))
        .args(["-S", &format!("127.0.0.1:{}", server.addr.port())]);
    let out = run_within(cmd, Duration::from_secs(240));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| text.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_default().to_owned();
    assert!(line("Certificate Validity").contains("89 >= 60 days"), "{text}");
    assert!(!text.contains("too long") && !text.contains("expire"), "{text}");
    assert!(line("Server key usage").contains("Digital Signature"), "{text}");
    assert!(line("Server extended key usage").contains("TLS Web Server Authentication"), "{text}");
    assert!(line("Chain of trust").contains("Ok"), "{text}");
}
