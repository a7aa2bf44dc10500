#!/usr/bin/env python3
"""The self-test of open-loop latency: a local server is paused (SIGSTOP) for a known time
during a constant-rate run, and the measured percentiles are set beside the analytic ones.

Requests scheduled during a pause of P seconds in a run of D seconds at a constant rate are a
fraction f = P/D of all; each waits until the pause ends, uniformly from P down to 0, and the
others wait about nothing. So the corrected percentile q above 1 - f is P * (q - (1 - f)) / f.
The uncorrected latency (from each actual send, as a closed-loop tool times it) sees only the
requests in flight when the pause began.

Usage: bench/pause_selftest.py [--rate R] [--conns C] [--duration D] [--pause P] [--at T] [--procs N]
Writes bench-results/pause_selftest-<stamp>/results.json and prints a markdown table.
"""
import argparse
import json
import os
import signal
import subprocess
import tempfile
import time

import common


def analytic(q, pause, duration):
    f = pause / duration
    return max(0.0, pause * (q - (1 - f)) / f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--pause", type=float, default=3)
    ap.add_argument("--at", type=float, default=3, help="seconds after the load starts")
    ap.add_argument("--procs", type=int, default=1)
    args = ap.parse_args()
    common.build_sockscale()
    out_dir = common.results_dir("pause_selftest")
    server, port = common.start_sockscale(["--proto", "http", "--threads", "1"])
    try:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            load = subprocess.Popen([str(common.BIN), "load", "http", f"http://127.0.0.1:{port}/", "-c", str(args.conns),
                                     "-R", str(args.rate), "-d", str(args.duration), "--procs", str(args.procs),
                                     "--json", f.name], stdout=subprocess.DEVNULL)
            time.sleep(args.at)
            stopped = time.monotonic()
            os.kill(server.pid, signal.SIGSTOP)
            time.sleep(args.pause)
            os.kill(server.pid, signal.SIGCONT)
            pause = time.monotonic() - stopped
            load.wait()
            r = json.load(open(f.name))
    finally:
        common.stop(server)
    d = r["duration_s"]
    rows = []
    for q, key in [(0.90, "p90_us"), (0.99, "p99_us"), (0.999, "p999_us")]:
        want = analytic(q, pause, d)
        got = r["latency"][key] / 1e6
        unc = r["latency_uncorrected"][key] / 1e6
        rows.append({"percentile": q, "analytic_s": round(want, 4), "corrected_s": round(got, 4),
                     "error_pct": round(100 * (got - want) / want, 2) if want else None, "uncorrected_s": round(unc, 4)})
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "args": vars(args), "pause_s": pause,
                                                 "duration_s": d, "rows": rows, "schedule_slip": r["schedule_slip"]})
    print(f"\npause {pause:.3f} s of a {d:.3f} s run at {args.rate}/s over {args.conns} connections, {args.procs} process(es)\n")
    print(common.markdown_table(["percentile", "analytic", "corrected (measured)", "error", "uncorrected (measured)"],
                                [[f"p{100 * x['percentile']:g}", f"{x['analytic_s']:.3f} s", f"{x['corrected_s']:.3f} s",
                                  f"{x['error_pct']:+.2f}%", f"{x['uncorrected_s'] * 1000:.2f} ms"] for x in rows]))


if __name__ == "__main__":
    main()
