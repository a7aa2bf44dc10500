#!/usr/bin/env python3
"""HTTPS load generators compared: requests per client CPU-second against one nginx.

nginx (one worker, OpenSSL, ECDSA P-256 certificate from `sockscale cert`, X25519, TLS 1.2 and
1.3, sessions resumable) on core 0 serves the same 4096-byte page; each client runs on core 1
with one thread: sockscale load (rustls), wrk (OpenSSL), h2load --h1 (OpenSSL).

- keep-alive, c=100: the record layer (one request encrypted, one 4 KiB answer decrypted);
- a new connection per request, c=50: a handshake per request. wrk resumes the session it
  kept (`-H 'Connection: close'`); sockscale load resumes too (`--no-keepalive`, its default
  `--tls-resume on`); h2load cannot reconnect per request, so it is not in this group.

Client CPU is the client's own rusage (os.wait4). Runs are interleaved and repeated; the
table gives medians and the median and range of the per-repetition ratio to sockscale load.

Usage: bench/https_clients.py [--duration SECS] [--repeat N]
Writes bench-results/https_clients-<stamp>/results.json and prints markdown tables.
"""
import argparse
import json
import socket
import subprocess
import tempfile
from pathlib import Path

import common
import load_clients


def sockscale_https(url, ca, conns, duration, extra=()):
    def run():
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            out, cpu, wall = common.run_client([str(common.BIN), "load", "http", url, "--cacert", str(ca), "-c", str(conns),
                                                "-t", "1", "-d", str(duration), *extra, "--json", f.name])
            r = json.load(open(f.name))
        errors = sum(r["errors"].values())
        hs = r["tls"]["handshakes"]
        print(f"    sockscale handshakes: {hs['full']} full, {hs['resumed']} resumed, {hs['failed']} failed; "
              f"negotiated {[(n['version'], n['suite']) for n in r['tls']['negotiated']]}", flush=True)
        return r["requests"]["completed"], errors, cpu, wall
    return run


def wrk(url, conns, duration, extra=()):
    def run():
        out, cpu, wall = common.run_client(["wrk", "-t1", f"-c{conns}", f"-d{duration}s", *extra, url])
        r = common.parse_wrk(out)
        return r["requests"], r["socket_errors"] + r["non_2xx"], cpu, wall
    return run


def h2load(url, conns, duration):
    def run():
        out, cpu, wall = common.run_client(["h2load", "--h1", "-t1", f"-c{conns}", "-m1", f"-D{duration}", url])
        r = common.parse_h2load(out)
        return r["requests"], r["failed"], cpu, wall
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    common.ensure_debs(["nginx", "wrk", "nghttp2-client"])
    common.build_sockscale()
    out_dir = common.results_dir("https_clients")
    d = args.duration
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run([str(common.BIN), "cert", "--out", str(tmp / "certs")], check=True, capture_output=True)
        cert, key, ca = tmp / "certs" / "cert.pem", tmp / "certs" / "key.pem", tmp / "certs" / "ca.pem"
        sock, sock_port = common.start_sockscale(["--proto", "http", "--threads", "1"])
        body = common.fetch_body(sock_port)
        common.stop(sock)
        (tmp / "page.html").write_bytes(body)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tls = (f"ssl_certificate {cert}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3; "
               "ssl_ecdh_curve X25519; ssl_session_cache shared:SSL:10m; ssl_session_tickets on; " + common.PAGE_NGINX)
        conf = common.nginx_conf(tmp, port, extra=tls).replace(
            f"listen 127.0.0.1:{port} backlog=4096;", f"listen 127.0.0.1:{port} ssl backlog=4096;")
        (tmp / "nginx.conf").write_text(conf)
        nginx = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, "nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        common.wait_port(port)
        url = f"https://localhost:{port}/"
        tables, rows = [], []
        try:
            keep = load_clients.compare("https keep-alive c=100", {
                "sockscale load": sockscale_https(url, ca, 100, d), "wrk": wrk(url, 100, d), "h2load --h1": h2load(url, 100, d),
            }, args.repeat)
            rows += keep
            tables.append(("HTTPS, 100 keep-alive connections, against nginx (OpenSSL)", load_clients.table(keep, "sockscale load")))
            close = load_clients.compare("https conn per request c=50", {
                "sockscale load --no-keepalive": sockscale_https(url, ca, 50, d, ("--no-keepalive",)),
                "wrk -H 'Connection: close'": wrk(url, 50, d, ("-H", "Connection: close")),
            }, args.repeat)
            rows += close
            tables.append(("HTTPS, a new connection per request (resumed), 50 at a time, against nginx",
                           load_clients.table(close, "sockscale load --no-keepalive")))
        finally:
            common.stop(nginx)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "duration_s": d, "repeat": args.repeat, "rows": rows})
    for title, text in tables:
        print(f"\n{title}\n\n{text}")


if __name__ == "__main__":
    main()
