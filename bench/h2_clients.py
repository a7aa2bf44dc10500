#!/usr/bin/env python3
"""HTTP/2 load generators compared: requests per client CPU-second against one nginx.

nginx (one worker) on core 0 serves the same 4096-byte page over HTTP/2: h2c with prior
knowledge (`listen ... http2`), and h2 over TLS by ALPN (OpenSSL, ECDSA P-256 certificate from
`sockscale cert`). Each client runs on core 1 with one thread and the same shape, h2load's
`-c 100 -m 16`: sockscale `load http --http2 --pipeline 16 -c 100`, and h2load.

Client CPU is the client's own rusage (os.wait4). Runs are interleaved and repeated; the
table gives medians and the median and range of the per-repetition ratio to sockscale load.

Usage: bench/h2_clients.py [--duration SECS] [--repeat N] [--conns C] [--streams M]
Writes bench-results/h2_clients-<stamp>/results.json and prints markdown tables.
"""
import argparse
import json
import socket
import subprocess
import tempfile
from pathlib import Path

import common
import load_clients


def sockscale_h2(url, conns, streams, duration, extra=()):
    def run():
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            out, cpu, wall = common.run_client([str(common.BIN), "load", "http", "--http2", url, "-c", str(conns),
                                                "--pipeline", str(streams), "-t", "1", "-d", str(duration), *extra,
                                                "--json", f.name, "--allow-errors"])
            r = json.load(open(f.name))
        errors = sum(r["errors"].values())
        h2 = r["h2"]
        print(f"    sockscale {h2['protocol']}: {h2['connections']} connections, {h2['streams']} streams, "
              f"server's limit {h2.get('server_max_streams')}, goaways {h2['goaways']}, resets {h2['resets']}", flush=True)
        return r["requests"]["completed"], errors, cpu, wall
    return run


def h2load(url, conns, streams, duration):
    def run():
        out, cpu, wall = common.run_client(["h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-D{duration}", url])
        r = common.parse_h2load(out)
        return r["requests"], r["failed"], cpu, wall
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--streams", type=int, default=16)
    args = ap.parse_args()
    common.ensure_debs(["nginx", "nghttp2-client"])
    common.build_sockscale()
    out_dir = common.results_dir("h2_clients")
    d, c, m = args.duration, args.conns, args.streams
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run([str(common.BIN), "cert", "--out", str(tmp / "certs")], check=True, capture_output=True)
        cert, key, ca = tmp / "certs" / "cert.pem", tmp / "certs" / "key.pem", tmp / "certs" / "ca.pem"
        sock, sock_port = common.start_sockscale(["--proto", "http", "--threads", "1"])
        body = common.fetch_body(sock_port)
        common.stop(sock)
        (tmp / "page.html").write_bytes(body)
        ports = []
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        h2c_port, tls_port = ports
        tls = (f"ssl_certificate {cert}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3; "
               "ssl_ecdh_curve X25519; ssl_session_cache shared:SSL:10m; ssl_session_tickets on; "
               # One connection carries every stream of the run: nginx's default of 1,000
               # requests a connection would close it with GOAWAY mid-run.
               "http2_max_requests 100000000; http2_max_concurrent_streams 128; " + common.PAGE_NGINX)
        conf = common.nginx_conf(tmp, h2c_port, extra=tls).replace(
            f"listen 127.0.0.1:{h2c_port} backlog=4096;",
            f"listen 127.0.0.1:{h2c_port} http2 backlog=4096; listen 127.0.0.1:{tls_port} ssl http2 backlog=4096;")
        (tmp / "nginx.conf").write_text(conf)
        nginx = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, "nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        common.wait_port(h2c_port)
        common.wait_port(tls_port)
        h2c_url, tls_url = f"http://127.0.0.1:{h2c_port}/", f"https://localhost:{tls_port}/"
        tables, rows = [], []
        try:
            group = f"h2c c={c} m={m}"
            h2c = load_clients.compare(group, {
                "sockscale load --http2": sockscale_h2(h2c_url, c, m, d),
                "h2load": h2load(h2c_url, c, m, d),
            }, args.repeat)
            rows += h2c
            tables.append((f"HTTP/2 in clear (h2c, prior knowledge), {c} connections x {m} streams, against nginx",
                           load_clients.table(h2c, "sockscale load --http2")))
            group = f"h2 TLS c={c} m={m}"
            h2 = load_clients.compare(group, {
                "sockscale load --http2": sockscale_h2(tls_url, c, m, d, ("--cacert", str(ca))),
                "h2load": h2load(tls_url, c, m, d),
            }, args.repeat)
            rows += h2
            tables.append((f"HTTP/2 over TLS (ALPN h2), {c} connections x {m} streams, against nginx",
                           load_clients.table(h2, "sockscale load --http2")))
        finally:
            common.stop(nginx)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "duration_s": d, "repeat": args.repeat,
                                                 "conns": c, "streams": m, "rows": rows})
    for title, text in tables:
        print(f"\n{title}\n\n{text}")


if __name__ == "__main__":
    main()
