#!/usr/bin/env python3
"""User-space memory per idle connection: hold N idle connections, divide the RSS growth by N.

The server runs pinned to core 0; the client (bench/hold_idle.py) opens the connections from
core 1, proves the server accepted them all with one round trip on the last, and holds them.
Kernel socket memory is reported too (TCP pages from /proc/net/sockstat), for comparison.

With --proto ws the server runs `--proto ws` and each connection is upgraded to a WebSocket
before it idles (kernel slab from /proc/meminfo is reported too).

Usage: bench/idle_memory.py [--conns N] [--proto echo|http|ws ...] [--binary PATH]
"""
import argparse
import subprocess
import sys
import time

import common


def tcp_mem_pages():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                parts = line.split()
                return int(parts[parts.index("mem") + 1])
    return 0


def slab_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=10_000)
    ap.add_argument("--proto", action="append", choices=["echo", "http", "ws"],
                    help="the protocols to measure (default: echo and http)")
    ap.add_argument("--binary", help="a sockscale binary to measure instead of building the release one")
    args = ap.parse_args()
    if args.binary is None:
        common.build_sockscale()
    binary = args.binary or common.BIN
    out_dir = common.results_dir("idle_memory")
    rows = []
    for proto in args.proto or ["echo", "http"]:
        proc, port = common.start_sockscale(["--proto", proto, "--threads", "1"], binary=binary)
        try:
            time.sleep(0.2)
            rss0, mem0, slab0 = common.rss_kib(proc.pid), tcp_mem_pages(), slab_kib()
            holder = subprocess.Popen(["taskset", "-c", common.CLIENT_CPU, sys.executable, str(common.ROOT / "bench" / "hold_idle.py"),
                                       "127.0.0.1", str(port), str(args.conns), "60",
                                       "ws" if proto == "ws" else "tcp"], stdout=subprocess.PIPE, text=True)
            line = holder.stdout.readline().strip()
            assert line == f"held {args.conns}", line
            time.sleep(0.5)
            rss1, mem1, slab1 = common.rss_kib(proc.pid), tcp_mem_pages(), slab_kib()
            holder.kill()
            holder.wait()
        finally:
            common.stop(proc)
        row = {"proto": proto, "conns": args.conns, "rss_before_kib": rss0, "rss_after_kib": rss1,
               "bytes_per_conn": round((rss1 - rss0) * 1024 / args.conns),
               "kernel_tcp_pages_delta": mem1 - mem0,
               "kernel_slab_bytes_per_conn": round((slab1 - slab0) * 1024 / args.conns)}
        rows.append(row)
        print(row, flush=True)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "rows": rows})
    print(common.markdown_table(["proto", "idle connections", "RSS before (KiB)", "RSS after (KiB)", "user-space bytes per connection"],
                                [[r["proto"], r["conns"], r["rss_before_kib"], r["rss_after_kib"], r["bytes_per_conn"]] for r in rows]))


if __name__ == "__main__":
    main()
