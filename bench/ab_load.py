#!/usr/bin/env python3
"""Requests per client CPU-second of two sockscale binaries as the load generator, side by side:
did a change to the load engine keep its speed on the plaintext path?

nginx (one worker) on core 0 serves a 4096-byte page; `sockscale load http` of each binary
(--before, --after; default: this checkout's release build as "after") runs with one thread on
core 1: keep-alive at c=100, and pipelined (--pipeline 16) at c=100. Client CPU is the client's
own rusage. Every scenario runs --repeat times with the binaries interleaved; the table gives
medians and the median and range of the after/before ratio within each repetition.

    git worktree add /tmp/before 25b4147 && (cd /tmp/before && cargo build --release -p sockscale)
    bench/ab_load.py --before /tmp/before/target/release/sockscale

Writes bench-results/ab_load-<stamp>/results.json and prints a markdown table.
"""
import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import common


def client(binary, url, extra):
    def run():
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            _, cpu, wall = common.run_client([binary, "load", "http", url, "-c", "100", "-t", "1", *extra, "--json", f.name])
            r = json.load(open(f.name))
        return r["requests"]["completed"], sum(r["errors"].values()), cpu, wall
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the baseline sockscale binary")
    ap.add_argument("--after", default=str(common.BIN), help="the changed binary (default: this checkout's release build)")
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for path in (args.before, args.after):
        if not os.access(path, os.X_OK):
            ap.error(f"{path}: not an executable sockscale binary")
    common.ensure_debs(["nginx"])
    if args.after == str(common.BIN):
        common.build_sockscale()
    out_dir = common.results_dir("ab_load")
    sock, port = common.start_sockscale(["--proto", "http", "--threads", "1"], binary=args.after)
    body = common.fetch_body(port)
    common.stop(sock)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        nginx, port = common.start_nginx(Path(tmp), body)
        url = f"http://127.0.0.1:{port}/"
        try:
            for scenario, extra in (("keep-alive c=100", ["-d", str(args.duration)]),
                                    ("pipelined x16 c=100", ["-d", str(args.duration), "--pipeline", "16"])):
                for rep in range(args.repeat):
                    for name, binary in (("before", args.before), ("after", args.after)):
                        done, errors, cpu, wall = client(binary, url, extra)()
                        row = {"scenario": scenario, "binary": name, "run": rep, "requests": done, "errors": errors,
                               "client_cpu_s": round(cpu, 3), "req_per_cpu_s": round(done / cpu) if cpu else None}
                        rows.append(row)
                        print(f"{scenario:20} run {rep} {name:6} {done / wall:>9.0f} req/s  {row['req_per_cpu_s']} req/client-CPU-s  errors {errors}", flush=True)
        finally:
            common.stop(nginx)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "before": args.before, "after": args.after,
                                                 "duration_s": args.duration, "repeat": args.repeat, "rows": rows})
    out = []
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        before = [r for r in rows if r["scenario"] == scenario and r["binary"] == "before"]
        after = [r for r in rows if r["scenario"] == scenario and r["binary"] == "after"]
        ratios = [a["req_per_cpu_s"] / b["req_per_cpu_s"] for a, b in zip(after, before)]
        med = statistics.median
        out.append([scenario, f"{med(r['req_per_cpu_s'] for r in before):.0f}", f"{med(r['req_per_cpu_s'] for r in after):.0f}",
                    f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})", sum(r["errors"] for r in before + after)])
    print(common.markdown_table(["scenario", "before req/client-CPU-s", "after req/client-CPU-s", "after / before, median (range)", "errors"], out))


if __name__ == "__main__":
    main()
