#!/usr/bin/env python3
"""Load generators compared: requests per client CPU-second.

HTTP: nginx (one worker) on core 0 serves the same 4096-byte page; each client runs on core 1
at 100 keep-alive connections: sockscale load, wrk, h2load (HTTP/1.1), ab -k. Then a new
connection per request: ab without -k against sockscale load --no-keepalive.
Echo: sockscale serve --model epoll --threads 1 on core 0; sockscale load echo against
rust_echo_bench (https://github.com/haraldh/rust_echo_bench, built outside this repository
and passed with --echo-bench; skipped with a note when absent), 50 connections, 512 bytes.

Client CPU is the client's own rusage (os.wait4), so a client that is the bottleneck shows
as such. Runs are interleaved and repeated; tables show medians.

Usage: bench/load_clients.py [--duration SECS] [--repeat N] [--echo-bench PATH]
"""
import argparse
import json
import re
import statistics
import tempfile
from pathlib import Path

import common


def sockscale_http(url, duration, extra=()):
    def run():
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            out, cpu, wall = common.run_client([str(common.BIN), "load", "http", url, "-c", "100", "-t", "1", *duration_args(duration), *extra, "--json", f.name])
            r = json.load(open(f.name))
        return r["requests"]["completed"], r["errors"]["bad_response"] + r["errors"]["reset"] + r["errors"]["closed_by_peer"], cpu, wall
    return run


def duration_args(duration):
    return ["-d", str(duration)] if isinstance(duration, int) else ["-n", str(duration[1])]


def wrk(url, duration):
    def run():
        out, cpu, wall = common.run_client(["wrk", "-t1", "-c100", f"-d{duration}s", url])
        r = common.parse_wrk(out)
        return r["requests"], r["socket_errors"] + r["non_2xx"], cpu, wall
    return run


def h2load(url, duration):
    def run():
        out, cpu, wall = common.run_client(["h2load", "--h1", "-t1", "-c100", "-m1", f"-D{duration}", url])
        r = common.parse_h2load(out)
        return r["requests"], r["failed"], cpu, wall
    return run


def ab(url, duration=None, count=None, keepalive=True):
    def run():
        limit = ["-t", str(duration), "-n", "100000000"] if duration else ["-n", str(count)]
        out, cpu, wall = common.run_client(["ab", *(["-k"] if keepalive else []), "-q", "-c", "100", *limit, url])
        done = int(re.search(r"Complete requests:\s+(\d+)", out).group(1))
        failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
        return done, failed, cpu, wall
    return run


def sockscale_echo(addr, duration):
    def run():
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            out, cpu, wall = common.run_client([str(common.BIN), "load", "echo", addr, "-c", "50", "-l", "512", "-t", "1", "-d", str(duration), "--json", f.name])
            r = json.load(open(f.name))
        return r["requests"]["completed"], r["errors"]["verify_mismatch"], cpu, wall
    return run


def echo_bench(path, addr, duration):
    def run():
        out, cpu, wall = common.run_client([path, "-a", addr, "-c", "50", "-l", "512", "-t", str(duration)])
        return int(re.search(r"Responses: (\d+)", out).group(1)), out.count("error"), cpu, wall
    return run


def compare(title, clients, repeat):
    rows = []
    for run in range(repeat):
        for name, fn in clients.items():
            done, errors, cpu, wall = fn()
            row = {"group": title, "client": name, "run": run, "requests": done, "errors": errors, "client_cpu_s": round(cpu, 3),
                   "wall_s": round(wall, 2), "rps": round(done / wall), "req_per_cpu_s": round(done / cpu) if cpu else None}
            rows.append(row)
            print(f"{title:22} run {run} {name:24} {row['rps']:>9} req/s  cpu {cpu:6.2f}s  {row['req_per_cpu_s']} req/cpu-s  errors {errors}", flush=True)
    return rows


def table(rows, baseline):
    med = statistics.median
    names = list(dict.fromkeys(r["client"] for r in rows))
    out = []
    for name in names:
        mine = [r for r in rows if r["client"] == name]
        ref = [r for r in rows if r["client"] == baseline]
        ratios = [m["req_per_cpu_s"] / b["req_per_cpu_s"] for m, b in zip(ref, mine)]
        out.append([name, f"{med(r['rps'] for r in mine):.0f}", f"{med(r['client_cpu_s'] for r in mine):.2f}",
                    f"{med(r['req_per_cpu_s'] for r in mine):.0f}", sum(r["errors"] for r in mine),
                    f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"])
    return common.markdown_table(["client", "req/s", "client CPU s", "req per client CPU-s", "errors", f"{baseline} vs this, median (range)"], out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--echo-bench", help="path to a built rust_echo_bench (echo_bench) binary")
    args = ap.parse_args()
    common.ensure_debs(["nginx", "wrk", "nghttp2-client", "apache2-utils"])
    common.build_sockscale()
    out_dir = common.results_dir("load_clients")
    d = args.duration
    rows = []
    tables = []
    sock, sock_port = common.start_sockscale(["--proto", "http", "--threads", "1"])
    body = common.fetch_body(sock_port)
    common.stop(sock)
    with tempfile.TemporaryDirectory() as tmp:
        nginx, port = common.start_nginx(Path(tmp), body)
        url = f"http://127.0.0.1:{port}/"
        try:
            keep = compare("http keep-alive c=100", {
                "sockscale load": sockscale_http(url, d), "wrk": wrk(url, d), "h2load --h1": h2load(url, d), "ab -k": ab(url, duration=d),
            }, args.repeat)
            rows += keep
            tables.append(("HTTP, 100 keep-alive connections, against nginx", table(keep, "sockscale load")))
            n = 20000
            close = compare("http new conn per req", {
                "sockscale load --no-keepalive": sockscale_http(url, ("n", n), ("--no-keepalive",)), "ab (no -k)": ab(url, count=n, keepalive=False),
            }, args.repeat)
            rows += close
            tables.append((f"HTTP, a new connection per request ({n} requests, 100 at a time), against nginx", table(close, "sockscale load --no-keepalive")))
        finally:
            common.stop(nginx)
    echo, echo_port = common.start_sockscale(["--proto", "echo", "--threads", "1"])
    addr = f"127.0.0.1:{echo_port}"
    try:
        clients = {"sockscale load echo": sockscale_echo(addr, d)}
        note = ""
        if args.echo_bench and Path(args.echo_bench).exists():
            clients["rust_echo_bench"] = echo_bench(args.echo_bench, addr, d)
        else:
            note = "rust_echo_bench skipped: pass --echo-bench PATH to a build of it"
            print(note)
        echo_rows = compare("echo c=50 512B", clients, args.repeat)
        rows += echo_rows
        tables.append(("Echo, 50 connections, 512-byte messages, against sockscale serve" + (f" ({note})" if note else ""), table(echo_rows, "sockscale load echo")))
    finally:
        common.stop(echo)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "duration_s": d, "repeat": args.repeat, "rows": rows})
    for title, t in tables:
        print(f"\n{title}\n\n{t}")


if __name__ == "__main__":
    main()
