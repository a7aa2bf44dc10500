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
import pathlib
import resource
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


def steady(short, long):
    cpu = long["cpu_s"] - short["cpu_s"]
    msgs = long["completed"] - short["completed"]
    return msgs / cpu if cpu > 0 else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conns", default="1000,10000,100000")
    p.add_argument("--duration", type=int, default=5, help="the short run; the long one is 3x")
    a = p.parse_args()
    common.build_sockscale()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    out = common.results_dir("paced-load")
    results = {"machine": common.machine(), "duration_s": a.duration, "rows": []}
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
        try:
            row = {"conns": conns}
            for mode, paced in (("paced", True), ("flood", False)):
                short = load(port, conns, a.duration, paced)
                long = load(port, conns, 3 * a.duration, paced)
                row[mode] = {"short": short, "long": long, "steady_per_cpu_s": steady(short, long),
                             "whole_run_per_cpu_s": long["completed"] / long["cpu_s"] if long["cpu_s"] else float("nan")}
                if ref_exe and conns <= PROCS_LIMIT:
                    rs = reference(ref_exe, port, conns, a.duration, paced)
                    rl = reference(ref_exe, port, conns, 3 * a.duration, paced)
                    row[f"reference_{mode}"] = {"short": rs, "long": rl, "steady_per_cpu_s": steady(rs, rl)}
        except Exception as e:  # a count this machine cannot run is reported, not fatal
            row["failed"] = str(e)[-500:]
            print(f"{conns}: {row['failed']}")
        finally:
            common.stop(server)
        results["rows"].append(row)
        if "failed" in row:
            continue
        pa, fl = row["paced"], row["flood"]
        rp, rf = row.get("reference_paced"), row.get("reference_flood")
        ref_cells = ([f"{rp['steady_per_cpu_s']:,.0f}", f"{rf['steady_per_cpu_s']:,.0f}",
                      f"{rp['steady_per_cpu_s'] / rf['steady_per_cpu_s']:.2f}"] if rp and rf else ["not run"] * 3)
        long_s = 3 * a.duration
        rows.append([f"{conns:,}", f"{pa['long']['completed'] / long_s:,.0f}", f"{100 * pa['long']['cpu_s'] / pa['long']['wall_s']:.1f}%",
                     f"{pa['steady_per_cpu_s']:,.0f}", f"{pa['whole_run_per_cpu_s']:,.0f}",
                     f"{fl['steady_per_cpu_s']:,.0f}", f"{fl['whole_run_per_cpu_s']:,.0f}",
                     f"{pa['steady_per_cpu_s'] / fl['steady_per_cpu_s']:.2f}",
                     *ref_cells,
                     pa["long"]["errors"] + fl["long"]["errors"]])
        print(rows[-1], flush=True)
    common.write_json(out / "paced_load.json", results)
    print(common.markdown_table(
        ["connections", "paced msg/s", "paced client CPU", "paced msg/CPU-s (steady)", "paced msg/CPU-s (whole run)",
         "flood msg/CPU-s (steady)", "flood msg/CPU-s (whole run)", "paced/flood (steady)",
         "reference paced msg/CPU-s", "reference flood msg/CPU-s", "reference paced/flood", "errors"], rows))


if __name__ == "__main__":
    main()
