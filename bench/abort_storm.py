#!/usr/bin/env python3
"""Admission control under an abort storm (seed 004), measured on loopback: what --abort-storm
and --abort-storm-shed do to the clients a server keeps, to the storm, and to new clients.

For each configuration a fresh `sockscale serve --proto echo --model MODEL --threads 1` runs on
core 0 with a stats line every 0.25 s. On core 1:
- `sockscale load echo -c KEPT -R RATE` runs for the whole measurement (open loop: latency from
  the scheduled send time), the clients the server should keep serving;
- at 2 s, STORM connections are opened, each echoes one byte, and all are reset at once
  (SO_LINGER 0): the server sees that many aborts within a second;
- 0.3 s later, LATE new connections each send a byte; the time until each is answered is the
  wait a new client sees (accepting paused until the established count falls below the resume
  threshold, 150 here, below the 200 kept: the late clients wait until the load ends and its
  connections close; with --abort-storm-shed the newest 50 kept clients are closed at once, and
  accepting resumes at the next close).

Reported per run: the kept clients' answered messages, errors (a shed client's connection is
closed by the server: counted by the load generator as closed or reset) and p99/max latency;
storm_pauses, storm_resumes, storm_shed and closed_aborted from the server; the late clients'
median and longest wait.

On loopback nothing is congested: shedding cannot make the others faster here, it only shows what
it costs (the connections closed). The lossy-link case, where aborts come from a congested path,
is the fault test `abort_storm_under_loss` (tests/faults.rs).

Usage: bench/abort_storm.py [--model epoll] [--kept 200] [--storm 300] [--late 20] [--reps 3]
Writes bench-results/abort_storm-<stamp>/results.json and prints a markdown table.
"""
import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import threading
import time

import common

CONFIGS = {
    "off": [],
    "--abort-storm 100 --abort-storm-resume 150": ["--abort-storm", "100", "--abort-storm-resume", "150"],
    "the same, --abort-storm-shed": ["--abort-storm", "100", "--abort-storm-resume", "150", "--abort-storm-shed"],
}
DURATION = 6.0


def storm(port, n):
    """N connections that each echo a byte, then are all reset at once."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"s")
        s.recv(1)
        socks.append(s)
    linger = struct.pack("ii", 1, 0)
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        s.close()


def late_client(port, waits):
    start = time.time()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.settimeout(DURATION + 5)
            s.sendall(b"l")
            waits.append(time.time() - start if s.recv(1) == b"l" else None)
    except OSError:
        waits.append(None)


def run_one(model, name, extra, kept, storm_n, late_n, rate):
    server = common.StatsServer(model, extra)
    report = f"/tmp/abort_storm_load_{os.getpid()}.json"
    try:
        load = subprocess.Popen(
            ["taskset", "-c", common.CLIENT_CPU, str(common.BIN), "load", "echo", f"127.0.0.1:{server.port}", "-c",
             str(kept), "-t", "1", "-l", "64", "-R", str(rate), "-d", str(DURATION), "--allow-errors", "--json", report],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        storm(server.port, storm_n)
        time.sleep(0.3)
        waits = []
        lates = [threading.Thread(target=late_client, args=(server.port, waits)) for _ in range(late_n)]
        for t in lates:
            t.start()
        load.wait(timeout=DURATION + 30)
        for t in lates:
            t.join(timeout=DURATION + 10)
        with open(report) as f:
            r = json.load(f)
        os.unlink(report)
    finally:
        final = server.stop()
    served = [w for w in waits if w is not None]
    return {
        "model": model, "config": name, "kept": kept, "storm": storm_n,
        "kept_answered": r["requests"]["completed"], "kept_errors": sum(r["errors"].values()),
        "kept_closed": r["errors"]["closed_by_peer"] + r["errors"]["reset"],
        "kept_p99_us": r["latency"]["p99_us"], "kept_max_us": r["latency"]["max_us"],
        "storm_pauses": final.get("storm_pauses", 0), "storm_resumes": final.get("storm_resumes", 0),
        "storm_shed": final.get("storm_shed", 0), "closed_aborted": final.get("closed_aborted", 0),
        "late_served": len(served), "late_unserved": late_n - len(served),
        "late_wait_median_s": round(statistics.median(served), 3) if served else None,
        "late_wait_max_s": round(max(served), 3) if served else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="epoll")
    ap.add_argument("--kept", type=int, default=200)
    ap.add_argument("--storm", type=int, default=300)
    ap.add_argument("--late", type=int, default=20)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    common.build_sockscale()
    out_dir = common.results_dir("abort_storm")
    runs = []
    for rep in range(args.reps):
        for name, extra in CONFIGS.items():
            row = run_one(args.model, name, extra, args.kept, args.storm, args.late, args.rate)
            row["rep"] = rep
            runs.append(row)
            print(f"rep {rep} {name:40} kept answered {row['kept_answered']:,} errors {row['kept_errors']} "
                  f"p99 {row['kept_p99_us'] / 1000:.2f} ms; aborted {row['closed_aborted']} pauses {row['storm_pauses']} "
                  f"resumes {row['storm_resumes']} shed {row['storm_shed']}; late served {row['late_served']} "
                  f"wait median {row['late_wait_median_s']} s max {row['late_wait_max_s']} s", flush=True)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "args": vars(args), "runs": runs})

    def med(rows, key, fmt="{:,.0f}"):
        values = [r[key] for r in rows if r[key] is not None]
        if not values:
            return "—"
        m = statistics.median(values)
        return fmt.format(m) + (f" ({fmt.format(min(values))}–{fmt.format(max(values))})" if min(values) != max(values) else "")

    header = ["server", "kept: answered", "kept: closed by the server", "kept: p99 ms", "closed_aborted",
              "pauses / resumes", "storm_shed", "late clients served", "late: median wait s", "late: longest wait s"]
    table = []
    for name in CONFIGS:
        rows = [r for r in runs if r["config"] == name]
        table.append([name, med(rows, "kept_answered"), med(rows, "kept_closed"),
                      med([dict(r, p=r["kept_p99_us"] / 1000) for r in rows], "p", "{:.2f}"),
                      med(rows, "closed_aborted"), f"{med(rows, 'storm_pauses')} / {med(rows, 'storm_resumes')}",
                      med(rows, "storm_shed"), f"{med(rows, 'late_served')} of {args.late}",
                      med(rows, "late_wait_median_s", "{:.2f}"), med(rows, "late_wait_max_s", "{:.2f}")])
    print(common.markdown_table(header, table))


if __name__ == "__main__":
    main()
