#!/usr/bin/env python3
"""User-space memory per idle TLS connection: sockscale (rustls, the TLS stage) against nginx
(OpenSSL), side by side.

Each server is pinned to core 0 and serves HTTPS with the same ECDSA P-256 certificate. The
client (this script, on core 1) opens N TLS connections, completes the handshake and one GET on
each (so every connection has been served, then is idle), and holds them; the server's RSS
growth divided by N is the figure. The order of the servers alternates between repetitions.

Usage: bench/idle_memory_tls.py [--conns N] [--repeat R]
"""
import argparse
import os
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

import common
from https_vs_nginx import make_certificate

GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


def hold(port, conns):
    """Open `conns` TLS connections, one GET each, and return them (held open)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    held = []
    for _ in range(conns):
        raw = socket.create_connection(("127.0.0.1", port))
        s = context.wrap_socket(raw, server_hostname="localhost")
        s.sendall(GET)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + 4096:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("closed before the answer")
            data += chunk
        held.append(s)
    return held


def measure(name, proc, port, conns):
    time.sleep(0.3)
    before = common.rss_kib(proc.pid)
    held = hold(port, conns)
    time.sleep(1.0)
    after = common.rss_kib(proc.pid)
    for s in held:
        s.close()
    per_conn = (after - before) * 1024 / conns
    print(f"{name:10} {conns} idle TLS connections: RSS {before} -> {after} KiB, {per_conn:.0f} bytes each", flush=True)
    return {"server": name, "conns": conns, "rss_before_kib": before, "rss_after_kib": after,
            "bytes_per_conn": round(per_conn)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    common.ensure_debs(["nginx", "openssl"])
    common.build_sockscale()
    os.sched_setaffinity(0, {int(common.CLIENT_CPU)})
    out_dir = common.results_dir("idle_memory_tls")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cert, key = make_certificate(tmp)
        (tmp / "page.html").write_bytes(bytes(4096))
        for run in range(args.repeat):
            order = ["sockscale", "nginx"] if run % 2 == 0 else ["nginx", "sockscale"]
            for name in order:
                if name == "sockscale":
                    proc, port = common.start_sockscale(["--proto", "http", "--model", "epoll", "--threads", "1",
                                                         "--tls-cert", str(cert), "--tls-key", str(key),
                                                         "--max-conns", str(args.conns + 100)])
                else:
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", 0))
                        port = s.getsockname()[1]
                    tls = (f"ssl_certificate {cert}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3; "
                           f"ssl_ecdh_curve X25519; ssl_session_cache shared:SSL:10m; " + common.PAGE_NGINX)
                    conf = common.nginx_conf(tmp, port, extra=tls).replace(
                        f"listen 127.0.0.1:{port} backlog=4096;", f"listen 127.0.0.1:{port} ssl backlog=4096;")
                    (tmp / "nginx.conf").write_text(conf)
                    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, "nginx", "-c", str(tmp / "nginx.conf"),
                                             "-p", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    common.wait_port(port)
                try:
                    row = measure(name, proc, port, args.conns)
                    row["run"] = run
                    rows.append(row)
                finally:
                    common.stop(proc)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "conns": args.conns, "rows": rows})
    import statistics
    med = {n: statistics.median(r["bytes_per_conn"] for r in rows if r["server"] == n) for n in ("sockscale", "nginx")}
    spread = {n: (min(r["bytes_per_conn"] for r in rows if r["server"] == n),
                  max(r["bytes_per_conn"] for r in rows if r["server"] == n)) for n in med}
    print(common.markdown_table(["server", "bytes per idle TLS connection, median (range)"],
                                [[n, f"{med[n]:.0f} ({spread[n][0]}-{spread[n][1]})"] for n in med]))
    print(f"sockscale / nginx: {med['sockscale'] / med['nginx']:.2f}")


if __name__ == "__main__":
    main()
