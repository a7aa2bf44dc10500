#!/usr/bin/env python3
"""Paced load: messages per client CPU-second, paced (-r) against flood, at the same connections.

sockscale serve --model epoll on core 0; sockscale load echo on core 1, 512-byte messages,
depth 1. Paced: the seed's rate-limited client, blocks of 1,000 connections at 200,000 B/s
each (-r 200000), so ~390 messages a second per block while most connections wait. Flood: the
same client and connections without -r. Goal (issue 13): paced at least half the flood figure.

Client CPU is the load's own rusage (os.wait4 on the client, which counts the --procs children
it reaped). Opening and closing thousands of connections costs more CPU than a paced run's
few messages, and that is not what is compared: each configuration runs twice, for D and 3D
seconds, and the steady-state figure is (completed_long - completed_short) / (cpu_long -
cpu_short). The whole-run figure of the long run (connects included) is shown beside it.

100,000 connections: one process cannot hold more than 20,000 descriptors here (the hard
open-files limit), and connect() stays cheap only while a source address holds under half of
the ~28,000 ephemeral ports (see crates/load/src/limits.rs), so the client runs with --procs 7
--source 127.0.0.1-127.0.0.9 (12,000 a source at most) and the server with --procs 7. The
script checks the hard limit and says why it skips a count it cannot run.

The reference: bench/reference/paced_echo_client.c (built with gcc here) is the least a paced
client can cost on this kernel: one epoll, a 10 ms timerfd tick, no verification, no
histogram. It runs the same paced and flood configurations against the same server, so the
goal can be held against what the kernel allows; it is one process, so it runs only up to
15,000 connections.

Usage: bench/paced_load.py [--conns 1000,10000,100000] [--duration SECS]
"""
import argparse
import json
import os
import time
import pathlib
import resource
import statistics
import subprocess
import tempfile

import common

PROCS_LIMIT = 15_000  # connections per process above which --procs is used
PER_SOURCE = 12_000  # connections per source address, under half the ephemeral ports


def load(port, conns, duration, paced):
    procs = -(-conns // PROCS_LIMIT)
    args = [str(common.BIN), "load", "echo", f"127.0.0.1:{port}", "-c", str(conns), "-l", "512", "-d", str(duration)]
    if paced:
        args += ["-r", "200000", "--block", "1000"]
    sources = -(-conns // PER_SOURCE)
    if procs > 1:
        args += ["--procs", str(procs)]
    if sources > 1:
        args += ["--source", f"127.0.0.1-127.0.0.{sources}"]
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        _, cpu, wall = common.run_client([*args, "--json", f.name])
        r = json.load(open(f.name))
    return {"completed": r["requests"]["completed"], "errors": sum(r["errors"].values()),
            "peak_open": r["connections"]["peak_open"], "cpu_s": cpu, "wall_s": wall, "command": " ".join(args[1:])}


REFERENCE = pathlib.Path(__file__).parent / "reference" / "paced_echo_client.c"


def build_reference(directory):
    exe = pathlib.Path(directory) / "paced_echo_client"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(REFERENCE)], check=True)
    return exe


def reference(exe, port, conns, duration, paced):
    rate = conns * 200_000 / 1000 / 512 if paced else 0
    args = [str(exe), str(port), str(conns), str(duration), "512", f"{rate:.3f}"]
    out, cpu, wall = common.run_client(args)
    completed = int(out.split("messages")[-1].split()[0])
    return {"completed": completed, "errors": 0, "cpu_s": cpu, "wall_s": wall, "command": " ".join(args[1:])}


WINDOW = (5.0, 6.0)  # steady-state window: from 5 s into a run, for 6 s


def tree_ticks(pid):
    """utime + stime of `pid` and its children (a --procs run), from /proc."""
    total = 0
    pids = [pid]
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                pids.append(int(entry.name))
    for p in pids:
        try:
            fields = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def windowed(command):
    """CPU seconds a paced client spends in the steady window (no connecting, no closing)."""
    start, length = WINDOW
    proc = subprocess.Popen(["taskset", "-c", common.CLIENT_CPU, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(start)
    a = tree_ticks(proc.pid)
    time.sleep(length)
    b = tree_ticks(proc.pid)
    proc.wait()
    return (b - a) / os.sysconf("SC_CLK_TCK")


def steady(short, long):
    cpu = long["cpu_s"] - short["cpu_s"]
    msgs = long["completed"] - short["completed"]
    return msgs / cpu if cpu > 0 else float("nan")


def spread(values):
    """Median and (min–max) of steady figures, as text."""
    v = sorted(values)
    return f"{statistics.median(v):,.0f} ({v[0]:,.0f}–{v[-1]:,.0f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conns", default="1000,10000,100000")
    p.add_argument("--duration", type=int, default=5, help="the short run; the long one is 3x")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions of every configuration")
    p.add_argument("--window", action="store_true", help="also measure paced CPU in a steady window (t = 5-11 s)")
    a = p.parse_args()
    common.build_sockscale()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    out = common.results_dir("paced-load")
    results = {"machine": common.machine(), "duration_s": a.duration, "reps": a.reps, "rows": []}
    rows = []
    scratch = tempfile.TemporaryDirectory()
    ref_exe = build_reference(scratch.name) if common.have("gcc") else None
    for conns in [int(c) for c in a.conns.split(",")]:
        procs = -(-conns // PROCS_LIMIT)
        if conns // procs + 100 > hard:
            why = f"{conns} connections need {procs} processes of {conns // procs} descriptors; the hard open-files limit is {hard}"
            print(f"skipping {conns}: {why}")
            results["rows"].append({"conns": conns, "skipped": why})
            continue
        server_args = ["--model", "epoll"] + (["--procs", str(procs)] if procs > 1 else [])
        server, port = common.start_sockscale(server_args)
        configs = [("paced", True, False), ("flood", False, False)]
        if ref_exe and conns <= PROCS_LIMIT:
            configs[1:1] = [("reference_paced", True, True)]
            configs.append(("reference_flood", False, True))
        row = {"conns": conns, **{name: [] for name, _, _ in configs}}
        try:
            # Interleaved: every configuration once per repetition, so a slow minute of this
            # shared machine falls on all of them.
            for _ in range(a.reps):
                for name, paced, ref in configs:
                    run = (lambda d: reference(ref_exe, port, conns, d, paced)) if ref else (lambda d: load(port, conns, d, paced))
                    short, long = run(a.duration), run(3 * a.duration)
                    row[name].append({"short": short, "long": long, "steady_per_cpu_s": steady(short, long),
                                      "whole_run_per_cpu_s": long["completed"] / long["cpu_s"] if long["cpu_s"] else float("nan")})
            # The steady window: a paced client's CPU from 5 s to 11 s into a 13 s run, when every
            # connection is open and none is closing; its messages there are the paced rate.
            if a.window and conns <= PROCS_LIMIT:
                rate = conns * 200_000 / 1000 / 512
                row["window"] = {"rate_per_s": rate, "seconds": WINDOW[1], "sockscale_cpu_s": [], "reference_cpu_s": []}
                for _ in range(a.reps):
                    sock = [str(common.BIN), "load", "echo", f"127.0.0.1:{port}", "-c", str(conns), "-l", "512", "-d", "13",
                            "-r", "200000", "--block", "1000"]
                    row["window"]["sockscale_cpu_s"].append(windowed(sock))
                    if ref_exe:
                        row["window"]["reference_cpu_s"].append(windowed([str(ref_exe), str(port), str(conns), "13", "512", f"{rate:.3f}"]))
        except Exception as e:  # a count this machine cannot run is reported, not fatal
            row["failed"] = str(e)[-500:]
            print(f"{conns}: {row['failed']}")
        finally:
            common.stop(server)
        results["rows"].append(row)
        if "failed" in row:
            continue
        fig = {name: [r["steady_per_cpu_s"] for r in runs] for name, runs in row.items() if isinstance(runs, list)}
        med = {name: statistics.median(v) for name, v in fig.items()}
        ref_cells = ([spread(fig["reference_paced"]), spread(fig["reference_flood"]),
                      f"{med['reference_paced'] / med['reference_flood']:.2f}"] if "reference_paced" in fig else ["not run"] * 3)
        long_s = 3 * a.duration
        last = row["paced"][-1]["long"]
        errors = sum(r["long"]["errors"] + r["short"]["errors"] for name in ("paced", "flood") for r in row[name])
        rows.append([f"{conns:,}", f"{last['completed'] / long_s:,.0f}", f"{100 * last['cpu_s'] / last['wall_s']:.1f}%",
                     spread(fig["paced"]), spread(fig["flood"]), f"{med['paced'] / med['flood']:.2f}",
                     *ref_cells, errors])
        print(rows[-1], flush=True)
    common.write_json(out / "paced_load.json", results)
    windows = [r for r in results["rows"] if "window" in r]
    if windows:
        table = []
        for r in windows:
            w = r["window"]
            msgs = w["rate_per_s"] * w["seconds"]
            flood = statistics.median(x["steady_per_cpu_s"] for x in r["flood"])
            sock = [msgs / c for c in w["sockscale_cpu_s"] if c > 0]
            ref = [msgs / c for c in w["reference_cpu_s"] if c > 0]
            table.append([f"{r['conns']:,}", f"{msgs:,.0f}", spread(sock), f"{statistics.median(sock) / flood:.2f}",
                          spread(ref) if ref else "not run", f"{statistics.median(ref) / flood:.2f}" if ref else "not run"])
        print(common.markdown_table(["connections", "messages in the window", "sockscale paced msg/CPU-s (window)",
                                     "÷ sockscale flood", "reference paced msg/CPU-s (window)", "÷ sockscale flood"], table))
    print(common.markdown_table(
        ["connections", "paced msg/s", "paced client CPU", "paced msg/CPU-s", "flood msg/CPU-s", "paced/flood",
         "reference paced msg/CPU-s", "reference flood msg/CPU-s", "reference paced/flood", "errors"], rows))
    print(f"msg/CPU-s: steady state, median of {a.reps} interleaved repetitions (min–max); ratios of the medians")


if __name__ == "__main__":
    main()
