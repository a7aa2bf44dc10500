#!/usr/bin/env python3
"""Hold 50,000 concurrent echo connections from one machine, and measure the load
generator's user-space memory per connection.

Past two limits of this machine: 20,000 open files per process (so the server runs as
`serve --procs 4` and the load as `load --procs 3`) and ~28,000 ephemeral ports per source
address (so connections come from `--source 127.0.0.1-127.0.0.4`). The load runs open loop at
a modest rate so every connection stays busy but idle enough to hold.

Memory per connection: the load processes' RSS while holding the connections, minus the RSS
of the same process holding one connection (its fixed buffers, pattern table, histograms),
divided by the connections each holds.

Usage: bench/hold_50k.py [--conns N] [--hold SECS]
"""
import argparse
import re
import subprocess
import time

import common


def fd_count(pid):
    import os
    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=50_000)
    ap.add_argument("--hold", type=int, default=30)
    args = ap.parse_args()
    common.build_sockscale()
    out_dir = common.results_dir("hold_50k")
    server = subprocess.Popen([str(common.BIN), "serve", "--listen", "127.0.0.1:0", "--procs", "4", "--threads", "1", "--idle-timeout", "300"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+)$", server.stdout.readline().strip()).group(1))
    try:
        # Baseline: one load process holding one connection.
        one = subprocess.Popen([str(common.BIN), "load", "echo", f"127.0.0.1:{port}", "-c", "1", "-t", "1", "-R", "10", "-d", "4"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.5)
        baseline_kib = common.rss_kib(one.pid)
        one.wait()
        load = subprocess.Popen([str(common.BIN), "load", "echo", f"127.0.0.1:{port}", "-c", str(args.conns), "--procs", "3", "-t", "1",
                                 "--source", "127.0.0.1-127.0.0.4", "-R", "5000", "-d", str(args.hold), "--json", str(out_dir / "load.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(args.hold * 0.75)
        kids = common.children(load.pid)
        per_proc = [(common.rss_kib(k), fd_count(k)) for k in kids]
        servers = [(common.rss_kib(k), fd_count(k)) for k in common.children(server.pid)]
        sockstat = open("/proc/net/sockstat").read()
        summary = load.stdout.read()
        load.wait()
    finally:
        common.stop(server)
    import json
    report = json.load(open(out_dir / "load.json"))
    held = report["connections"]["peak_open"]
    per_conn = [round((rss - baseline_kib) * 1024 / (fds - 3)) for rss, fds in per_proc]
    result = {"machine": common.machine(), "conns": args.conns, "peak_open": held, "connected": report["connections"]["connected"],
              "errors": report["errors"], "load_rss_kib_and_fds": per_proc, "baseline_rss_kib": baseline_kib,
              "client_bytes_per_conn": per_conn, "server_rss_kib_and_fds": servers, "sockstat": sockstat}
    common.write_json(out_dir / "results.json", result)
    print(summary)
    print(common.markdown_table(["connections held", "load processes (RSS KiB, fds)", "baseline RSS KiB", "client user-space bytes per connection", "server processes (RSS KiB, fds)", "errors"],
                                [[held, per_proc, baseline_kib, per_conn, servers, sum(report["errors"].values())]]))


if __name__ == "__main__":
    main()
