#!/usr/bin/env python3
"""epoll listener modes: one SO_REUSEPORT socket per thread, or one socket with EPOLLEXCLUSIVE.

Two sockscale servers with --threads 2, one per mode, both pinned to core 0; wrk -t1 on core 1,
once with keep-alive (100 connections) and once with a new connection per request
(`Connection: close`), which is where the listener matters. Interleaved, repeated, medians.

Usage: bench/listener_modes.py [--duration SECS] [--repeat N]
"""
import argparse

import common


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    common.ensure_debs(["wrk"])
    common.build_sockscale()
    out_dir = common.results_dir("listener_modes")
    servers = {}
    for mode in ("exclusive", "reuseport"):
        servers[mode] = common.start_sockscale(["--proto", "http", "--threads", "2", "--listener", mode])
    try:
        scenarios = [common.wrk_scenario(100, args.duration),
                     common.wrk_scenario(100, args.duration, ("-H", "Connection: close"))]
        rows = common.compare(servers, scenarios, args.repeat)
    finally:
        for proc, _ in servers.values():
            common.stop(proc)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "repeat": args.repeat, "rows": rows})
    print(common.ratio_table(rows, "exclusive", "reuseport"))


if __name__ == "__main__":
    main()
