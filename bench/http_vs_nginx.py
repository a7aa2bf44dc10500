#!/usr/bin/env python3
"""HTTP requests per server CPU-second: sockscale (epoll, 1 thread) against nginx (1 worker).

Both serve the same 4096-byte body with keep-alive, pinned to core 0; wrk -t1 (and h2load
--h1 -m16 for pipelining) runs on core 1. Server CPU comes from /proc/PID/stat, so the ratio
does not depend on how fast the client is, only on what each server spends per request.

This machine is shared and noisy (the same run repeated varies by +-15%), so every scenario
is repeated --repeat times with the two servers interleaved (nginx, sockscale, nginx, ...),
and the table reports medians: of each server's requests per CPU-second, and of the ratio
taken within each adjacent pair of runs.

Usage: bench/http_vs_nginx.py [--duration SECS] [--repeat N]
Writes bench-results/http_vs_nginx-<stamp>/results.json and prints a markdown table.
"""
import argparse
import tempfile
from pathlib import Path

import common

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    common.ensure_debs(["nginx", "wrk", "nghttp2-client"])
    common.build_sockscale()
    out_dir = common.results_dir("http_vs_nginx")
    sock, sock_port = common.start_sockscale(["--proto", "http", "--model", "epoll", "--threads", "1"])
    body = common.fetch_body(sock_port)
    with tempfile.TemporaryDirectory() as tmp:
        nginx, nginx_port = common.start_nginx(Path(tmp), body)
        servers = {"nginx": (nginx, nginx_port), "sockscale": (sock, sock_port)}
        assert common.fetch_body(nginx_port) == body, "nginx must serve the same body"
        try:
            scenarios = [common.wrk_scenario(c, args.duration) for c in (10, 100, 1000)]
            scenarios.append(common.h2load_scenario(100, args.duration))
            rows = common.compare(servers, scenarios, args.repeat)
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
    common.write_json(out_dir / "results.json",
                      {"machine": common.machine(), "duration_s": args.duration, "repeat": args.repeat, "rows": rows})
    print(common.ratio_table(rows, "nginx", "sockscale"))


if __name__ == "__main__":
    main()
