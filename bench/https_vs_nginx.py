#!/usr/bin/env python3
"""HTTPS requests per server CPU-second: sockscale (epoll, 1 thread, rustls) against nginx
(1 worker, OpenSSL), the same ECDSA P-256 certificate, the same 4096-byte body.

Both servers are pinned to core 0; wrk -t1 runs on core 1: keep-alive at c=100, and a new TLS
connection per request (`Connection: close`, a full handshake each unless the client resumes)
at c=50. Server CPU comes from /proc/PID/stat, so the ratio says what each server spends per
request, not how fast the client is. Every scenario is repeated --repeat times with the two
servers interleaved; the table gives medians, and the median and range of the ratio taken
within each adjacent pair.

wrk resumes TLS sessions when it reconnects; --no-resumption turns resumption off on both
servers, so that every connection is a full handshake.

Usage: bench/https_vs_nginx.py [--duration SECS] [--repeat N] [--model M] [--no-resumption]
Writes bench-results/https_vs_nginx-<stamp>/results.json and prints a markdown table.
"""
import argparse
import socket
import ssl
import subprocess
import tempfile
from pathlib import Path

import common


def make_certificate(directory):
    """A self-signed ECDSA P-256 certificate for localhost (made here, never kept)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-nodes", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return cert, key


def fetch_body_tls(port):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw) as s:
        version = s.version()
        s.sendall(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ssl.SSLEOFError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert b" 200 " in head.split(b"\r\n")[0] and len(body) == 4096, head
    return body, version


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="epoll")
    ap.add_argument("--no-resumption", action="store_true",
                    help="both servers refuse resumption (no session cache, no tickets): every handshake is full")
    args = ap.parse_args()
    common.ensure_debs(["nginx", "wrk", "openssl"])
    common.build_sockscale()
    out_dir = common.results_dir("https_vs_nginx")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cert, key = make_certificate(tmp)
        no_resume = ["--tls-session-cache", "0", "--tls-tickets", "off"] if args.no_resumption else []
        sock, sock_port = common.start_sockscale(["--proto", "http", "--model", args.model, "--threads", "1",
                                                  "--tls-cert", str(cert), "--tls-key", str(key), *no_resume])
        body, version = fetch_body_tls(sock_port)
        (tmp / "page.html").write_bytes(body)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            nginx_port = s.getsockname()[1]
        resumption = ("ssl_session_cache off; ssl_session_tickets off; " if args.no_resumption
                      else "ssl_session_cache shared:SSL:10m; ssl_session_tickets on; ")
        tls = (f"ssl_certificate {cert}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3; "
               f"ssl_ecdh_curve X25519; {resumption}" + common.PAGE_NGINX)
        conf = common.nginx_conf(tmp, nginx_port, extra=tls).replace(
            f"listen 127.0.0.1:{nginx_port} backlog=4096;", f"listen 127.0.0.1:{nginx_port} ssl backlog=4096;")
        (tmp / "nginx.conf").write_text(conf)
        nginx = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, "nginx", "-c", str(tmp / "nginx.conf"),
                                  "-p", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        common.wait_port(nginx_port)
        servers = {"nginx": (nginx, nginx_port), "sockscale": (sock, sock_port)}
        try:
            nginx_body, nginx_version = fetch_body_tls(nginx_port)
            assert nginx_body == body, "nginx must serve the same body"
            scenarios = []
            for label, conns, extra in [("wrk https keep-alive", 100, ()),
                                        ("wrk https, a connection per request", 50, ("-H", "Connection: close"))]:
                command = (lambda c, e: lambda url: ["wrk", "-t1", f"-c{c}", f"-d{args.duration}s", *e,
                                                     url.replace("http://", "https://")])(conns, extra)
                scenarios.append((label, conns, command, common.parse_wrk))
            rows = common.compare(servers, scenarios, args.repeat)
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
        # sockscale's final stats line: how many handshakes were full and how many resumed.
        final = sock.stdout.read() if sock.stdout else ""
        counted = dict(kv.split("=", 1) for kv in final.split() if "=" in kv and kv.startswith("tls_"))
    errors = [r for r in rows if r["socket_errors"] or r["non_2xx"]]
    common.write_json(out_dir / "results.json",
                      {"machine": common.machine(), "duration_s": args.duration, "repeat": args.repeat,
                       "model": args.model, "resumption": not args.no_resumption, "tls_versions": {"sockscale": version, "nginx": nginx_version},
                       "sockscale_tls_counters": counted, "rows": rows, "runs_with_errors": len(errors)})
    print(f"TLS agreed with Python's client: sockscale {version}, nginx {nginx_version}")
    print("sockscale's handshakes: " + ", ".join(f"{k}={v}" for k, v in counted.items()))
    print(common.ratio_table(rows, "nginx", "sockscale"))
    if errors:
        print(f"\n{len(errors)} runs had socket errors or non-2xx answers: see results.json")


if __name__ == "__main__":
    main()
