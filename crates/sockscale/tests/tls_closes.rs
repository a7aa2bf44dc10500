//! Every TLS close the server makes sends close_notify first, on every model, so a client that
//! reads to the end sees the end and not a truncation: a half request at the header deadline
//! (its 408, encrypted, then close_notify), `Connection: close` with a request pipelined behind
//! it (answered once), and a malformed request (its 400). A rustls client reads each to the
//! end; rustls reports a close without close_notify as an unexpected EOF. (On the code before
//! issue 33 the 408 went by a direct send and the socket closed without close_notify.)

mod support;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use sockscale_server::{Model, Policy};
use support::tls::{over, TestCert};
use support::{skip, unavailable, ServerProc};

/// Every model that can serve TLS here (the library's list, so a new model is covered).
fn tls_models() -> Vec<&'static str> {
    Model::ALL.iter().map(|m| m.name()).filter(|m| !unavailable(m) && !skip(m, Policy::Tls)).collect()
}

/// Send `request` over TLS and read to the end: the plaintext, and how the stream ended (Ok:
/// with close_notify; Err: what rustls or the socket said instead).
fn exchange(server: &ServerProc, config: &Arc<rustls::ClientConfig>, request: &[u8]) -> (Vec<u8>, Result<(), String>) {
    let mut tls = over(server.connect(), config);
    tls.write_all(request).expect("send the request");
    tls.flush().expect("flush");
    let mut got = Vec::new();
    let ended = tls.read_to_end(&mut got).map(drop).map_err(|e| format!("{:?}: {e}", e.kind()));
    (got, ended)
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle).count()
}

#[test]
fn every_tls_close_of_every_model_ends_with_close_notify() {
    let cert = TestCert::new("closes");
    let config = cert.client(&[&rustls::version::TLS13], &[b"http/1.1"]);
    for model in tls_models() {
        let tls = cert.args();
        let mut args = vec!["--proto", "http", "--header-timeout", "1"];
        args.extend(tls.iter().map(String::as_str));
        let server = ServerProc::start(model, &args);

        let (got, ended) = exchange(&server, &config, b"GET / HT");
        let text = String::from_utf8_lossy(&got);
        assert!(got.starts_with(b"HTTP/1.1 408"), "{model}: half a request at the header deadline: {text}");
        assert_eq!(ended, Ok(()), "{model}: the 408 is followed by close_notify");

        let pipelined = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let (got, ended) = exchange(&server, &config, pipelined);
        let text = String::from_utf8_lossy(&got);
        assert!(got.starts_with(b"HTTP/1.1 200"), "{model}: Connection: close: {text}");
        assert_eq!(count(&got, b"HTTP/1.1 "), 1, "{model}: answered once: {text}");
        assert_eq!(ended, Ok(()), "{model}: Connection: close ends with close_notify");

        let (got, ended) = exchange(&server, &config, b"NOT HTTP AT ALL\r\n\r\n");
        let text = String::from_utf8_lossy(&got);
        assert!(got.starts_with(b"HTTP/1.1 400"), "{model}: a malformed request: {text}");
        assert_eq!(ended, Ok(()), "{model}: the 400 is followed by close_notify");

        let done = server.stop_within(Duration::from_secs(15));
        assert_eq!(done.counter("closed_header_timeout"), 1, "{model}: {:?}", done.stdout);
    }
}
