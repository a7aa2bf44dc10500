#!/usr/bin/env python3
"""Issue 35's HTTP/3 goals, measured in one run, interleaved and repeated.

Server: HTTP/3 requests per server CPU-second, c=100 connections with 16 streams each
(`load http --http3 -c 100 --pipeline 16`), the 4096-byte page:
  - sockscale (`serve --proto http --http3 -m epoll -t 1`) against Caddy (v2.11.9, HTTP/3 on by
    default, GOMAXPROCS=1, the same page from `respond`), the same client for both: goal >= 2x;
  - sockscale's HTTP/3 against its own HTTP/2 over TLS on the same model and the same shape
    (`load http --http2 -c 100 --pipeline 16` to https://): goal >= 0.4x; and the same with
    `--quic-max-mtu 8952` on both ends, as a second line (loopback's MTU is 65,536: TCP sends
    64 KiB segments there, QUIC 1,452-byte packets unless path MTU discovery may probe further).
Shown beside them: the same HTTP/3 run with the client's GRO off (`load --http3 --udp-gro off`),
whose GSO messages the kernel then cuts into datagrams on the server's CPU.
Load: requests per client CPU-second, `sockscale load http --http3` against oha built with its
HTTP/3 feature (`cargo install oha --features http3`; `oha --http-version 3 -c 100 -p 16`),
both against the same `sockscale serve` (HTTP/3): goal >= 1.0x.
GSO/GRO: a 1 MiB body over HTTP/3 (`--body`, c=4, one stream each), bytes per server
CPU-second with the server's `--udp-gso on --udp-gro on` against `off off`: goal >= 2x.

Every server runs on core 0 (server CPU from /proc/PID/stat, all threads), every client on core
1 (client CPU from its rusage). Ratios are taken within each repetition; the tables give their
median and range. A peer that is missing (Caddy, oha) leaves its goal unmeasured, said so.

Usage: bench/h3_goals.py [--duration SECS] [--repeat N] [--caddy PATH] [--oha PATH]
Writes bench-results/h3_goals-<stamp>/results.json and prints markdown tables.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

PAGE_LEN = 4096


def free_port():
    """A port free on TCP and UDP both (Caddy binds both)."""
    for _ in range(50):
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no port free on both TCP and UDP")


def make_cert(out_dir):
    d = out_dir / "cert"
    subprocess.run([str(common.BIN), "cert", "--out", str(d)], check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem", d / "ca.pem"


def start_caddy(caddy, out_dir, cert, key, page):
    port = free_port()
    conf = out_dir / "Caddyfile"
    conf.write_text(f"""{{
\tadmin off
\tauto_https disable_redirects
\tservers {{
\t\tprotocols h1 h2 h3
\t}}
}}
https://127.0.0.1:{port} {{
\ttls {cert} {key}
\theader Content-Type "text/html; charset=utf-8"
\trespond `{page}` 200
}}
""")
    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, caddy, "run", "--config", str(conf), "--adapter",
                             "caddyfile"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, GOMAXPROCS="1", HOME=str(out_dir)))
    common.wait_port(port)
    time.sleep(0.5)  # its UDP listener comes up beside the TCP one
    return proc, port


def sockscale_load(url, ca, args, extra):
    """`sockscale load http` on one thread; returns (requests, errors, bytes, client CPU s, wall s)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        command = [str(common.BIN), "load", "http", url, "--cacert", str(ca), "-t", "1", "-d", str(args.duration),
                   "--json", f.name, "--allow-errors", *extra]
        _, cpu, wall = common.run_client(command)
        r = json.load(open(f.name))
    errors = sum(v for v in r["errors"].values() if isinstance(v, int))
    return r["requests"]["completed"], errors, r["bytes"]["received"], cpu, wall


def oha_load(oha, url, args):
    out, cpu, wall = common.run_client([oha, "--http-version", "3", "-c", str(args.conns), "-p", str(args.streams),
                                        "-z", f"{args.duration}s", "--insecure", "--no-tui", "--output-format", "json",
                                        url])
    r = json.loads(out[out.index("{"):])
    codes = r.get("statusCodeDistribution", {})
    ok = int(codes.get("200", 0))
    errors = sum(int(v) for v in r.get("errorDistribution", {}).values()) + sum(int(v) for k, v in codes.items()
                                                                                 if k != "200")
    return ok, errors, 0, cpu, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--caddy", default=os.environ.get("SOCKSCALE_CADDY") or shutil.which("caddy"))
    ap.add_argument("--oha", default=os.environ.get("SOCKSCALE_OHA") or shutil.which("oha"))
    args = ap.parse_args()
    common.build_sockscale()
    out_dir = common.results_dir("h3_goals")
    cert, key, ca = make_cert(out_dir)
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    body = out_dir / "body-1mib.bin"
    body.write_bytes(os.urandom(1 << 20))
    shape = ["-c", str(args.conns), "--pipeline", str(args.streams)]
    big = ["-c", "4", "--pipeline", "1"]

    def sockscale_server(extra=()):
        return lambda: common.start_sockscale(["--proto", "http", "-m", "epoll", "-t", "1", "--http3", *tls, *extra])

    # Caddy answers with the same page sockscale serves (fetched from sockscale once).
    proc, port = sockscale_server()()
    try:
        page = subprocess.run(["curl", "-sk", f"https://127.0.0.1:{port}/"], capture_output=True, check=True).stdout
    finally:
        common.stop(proc)
    assert len(page) == PAGE_LEN, len(page)
    servers = {"sockscale": sockscale_server(),
               "sockscale 1 MiB, GSO+GRO on": sockscale_server(["--body", str(body)]),
               "sockscale 1 MiB, GSO+GRO off": sockscale_server(["--body", str(body), "--udp-gso", "off",
                                                                  "--udp-gro", "off"]),
               # Loopback's MTU is 65,536: TCP's segments are 64 KiB there, QUIC's 1,452 bytes
               # unless path MTU discovery may probe further (both ends' --quic-max-mtu).
               "sockscale, --quic-max-mtu 8952": sockscale_server(["--quic-max-mtu", "8952"])}
    if args.caddy:
        servers["Caddy"] = lambda: start_caddy(args.caddy, out_dir, cert, key, page.decode())
    else:
        print("no Caddy (--caddy PATH or SOCKSCALE_CADDY): the Caddy goal is not measured", flush=True)
    h3 = lambda url, a: sockscale_load(url, ca, a, ["--http3", *shape])  # noqa: E731
    h2 = lambda url, a: sockscale_load(url, ca, a, ["--http2", *shape])  # noqa: E731
    h3_big = lambda url, a: sockscale_load(url, ca, a, ["--http3", *big])  # noqa: E731
    h3_jumbo = lambda url, a: sockscale_load(url, ca, a, ["--http3", "--quic-max-mtu", "8952", *shape])  # noqa: E731
    # The client's GRO on loopback decides whether the kernel cuts the server's GSO messages on
    # the server's CPU (a socket without UDP_GRO gets them cut): shown, not a goal.
    h3_no_gro = lambda url, a: sockscale_load(url, ca, a, ["--http3", "--udp-gro", "off", *shape])  # noqa: E731
    clients = {"load --http3": h3, "load --http2 (TLS)": h2, "load --http3, 1 MiB": h3_big,
               "load --http3 --quic-max-mtu 8952": h3_jumbo, "load --http3 --udp-gro off": h3_no_gro}
    if args.oha:
        clients["oha --http-version 3"] = lambda url, a: oha_load(args.oha, url, a)
    else:
        print("no oha with HTTP/3 (--oha PATH or SOCKSCALE_OHA): the load goal is not measured", flush=True)
    pairs = [("sockscale", "load --http3"), ("sockscale", "load --http2 (TLS)"), ("sockscale", "load --http3 --udp-gro off"),
             ("sockscale, --quic-max-mtu 8952", "load --http3 --quic-max-mtu 8952"),
             ("sockscale 1 MiB, GSO+GRO on", "load --http3, 1 MiB"), ("sockscale 1 MiB, GSO+GRO off", "load --http3, 1 MiB")]
    if args.caddy:
        pairs.insert(1, ("Caddy", "load --http3"))
    if args.oha:
        pairs.append(("sockscale", "oha --http-version 3"))
    rows = []
    for run in range(args.repeat):
        for server, client in pairs:
            proc, port = servers[server]()
            try:
                url = f"https://127.0.0.1:{port}/"
                before = common.cpu_seconds(proc.pid)
                requests, errors, nbytes, client_cpu, wall = clients[client](url, args)
                server_cpu = common.cpu_seconds(proc.pid) - before
            finally:
                common.stop(proc)
            row = {"run": run, "server": server, "client": client, "requests": requests, "errors": errors,
                   "bytes": nbytes, "wall_s": round(wall, 2), "server_cpu_s": round(server_cpu, 3),
                   "client_cpu_s": round(client_cpu, 3), "req_per_s": round(requests / wall),
                   "req_per_server_cpu_s": round(requests / server_cpu) if server_cpu else None,
                   "req_per_client_cpu_s": round(requests / client_cpu) if client_cpu else None,
                   "bytes_per_server_cpu_s": round(nbytes / server_cpu) if server_cpu else None}
            rows.append(row)
            print(f"run {run} {server:30} <- {client:22} {row['req_per_s']:>8} req/s  server {server_cpu:5.2f} CPU-s "
                  f"{row['req_per_server_cpu_s']}/CPU-s  client {client_cpu:5.2f} CPU-s "
                  f"{row['req_per_client_cpu_s']}/CPU-s  errors {errors}", flush=True)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "args": vars(args), "rows": rows})
    print_tables(rows, args)


def per_run(rows, server, client, key):
    return [r[key] for r in sorted((r for r in rows if r["server"] == server and r["client"] == client),
                                   key=lambda r: r["run"])]


def spread(values, fmt="{:.0f}"):
    if not values or any(v is None for v in values):
        return "-"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def ratio_line(name, mine, other, goal):
    if not mine or not other:
        return [name, "not measured", f">= {goal}x", "-"]
    ratios = [m / o for m, o in zip(mine, other)]
    med = statistics.median(ratios)
    return [name, f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})", f">= {goal}x", "met" if med >= goal else "missed"]


def print_tables(rows, args):
    table = []
    seen = []
    for r in rows:
        if (r["server"], r["client"]) not in seen:
            seen.append((r["server"], r["client"]))
    for server, client in seen:
        table.append([server, client, spread(per_run(rows, server, client, "req_per_s")),
                      spread(per_run(rows, server, client, "req_per_server_cpu_s")),
                      spread(per_run(rows, server, client, "req_per_client_cpu_s")),
                      spread([b / 1e6 for b in per_run(rows, server, client, "bytes_per_server_cpu_s") if b],
                             "{:.0f}"),
                      sum(per_run(rows, server, client, "errors"))])
    print(f"\nc={args.conns} x {args.streams} streams (the 1 MiB rows: c=4 x 1), {args.duration} s, "
          f"{args.repeat} repetitions; median (range)\n")
    print(common.markdown_table(["server (core 0)", "client (core 1)", "req/s", "req per server CPU-s",
                                 "req per client CPU-s", "MB per server CPU-s", "errors"], table))
    key = "req_per_server_cpu_s"
    mine = per_run(rows, "sockscale", "load --http3", key)
    goals = [ratio_line("sockscale HTTP/3 / Caddy HTTP/3 (server CPU)", mine,
                        per_run(rows, "Caddy", "load --http3", key), 2),
             ratio_line("sockscale HTTP/3 / its HTTP/2 over TLS (server CPU)", mine,
                        per_run(rows, "sockscale", "load --http2 (TLS)", key), 0.4),
             ratio_line("the same with --quic-max-mtu 8952 on both ends (loopback's room)",
                        per_run(rows, "sockscale, --quic-max-mtu 8952", "load --http3 --quic-max-mtu 8952", key),
                        per_run(rows, "sockscale", "load --http2 (TLS)", key), 0.4),
             ratio_line("load --http3 / oha HTTP/3 (client CPU)", per_run(rows, "sockscale", "load --http3", "req_per_client_cpu_s"),
                        per_run(rows, "sockscale", "oha --http-version 3", "req_per_client_cpu_s"), 1.0),
             ratio_line("1 MiB over HTTP/3: GSO+GRO on / off (bytes per server CPU-s)",
                        per_run(rows, "sockscale 1 MiB, GSO+GRO on", "load --http3, 1 MiB", "bytes_per_server_cpu_s"),
                        per_run(rows, "sockscale 1 MiB, GSO+GRO off", "load --http3, 1 MiB", "bytes_per_server_cpu_s"), 2)]
    print("\nGoals: ratio per repetition, median (range)\n")
    print(common.markdown_table(["ratio", "measured", "goal", "verdict"], goals))


if __name__ == "__main__":
    sys.exit(main())
