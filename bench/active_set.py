#!/usr/bin/env python3
"""The seeds' high-throughput strategy, measured: 10,000 echo connections sending as fast as
their echoes return, served with and without --active-set (reads posted for only N connections
at a time, in FIFO order, rotating by idleness and turns).

Each configuration runs a fresh `sockscale serve --proto echo --model MODEL --threads 1` on core
0 and `sockscale load echo -c CONNS -t 1` on core 1 for the same duration. Reported per run:
- messages answered per second, and per server CPU-second;
- latency of the answered messages (p50, p99, p99.9, max), from the load generator's HDR
  histogram: a message sent by a waiting connection is answered late, and the tail says how late;
- how many connections held a place during the run: the set's size plus its rotations, up to
  the connection count (the queue is FIFO, so no connection gets a second place before every
  one has had its first). A connection that never held one has no answered message, so its
  wait is not in the latency figures;
- the server's peak RSS (sampled every 0.25 s) and peak `waiting=` gauge, and its
  `active_rotations` (places given by idleness or a turn's end).

The configurations are interleaved over --reps repetitions; the table gives the median with the
range.

Usage: bench/active_set.py [--conns 10000] [--duration 10] [--models epoll,uring] [--reps 3]
Writes bench-results/active_set-<stamp>/results.json and prints a markdown table.
"""
import argparse
import json
import os
import statistics
import threading
import time

import common

CONFIGS = {
    "plain": [],
    "--active-set 100 --active-turn 0.1": ["--active-set", "100", "--active-turn", "0.1"],
    "--active-set 1000 --active-turn 0.1": ["--active-set", "1000", "--active-turn", "0.1"],
}


class Server(common.StatsServer):
    """The server, with its peak `waiting=` gauge and its peak RSS (sampled every 0.25 s)."""

    def __init__(self, model, extra):
        self.peak_waiting = 0
        self.peak_rss = 0
        self.sampling = True
        super().__init__(model, ["--max-conns", "20000", *extra], on_stats=self._peak)
        threading.Thread(target=self._sample, daemon=True).start()

    def _peak(self, fields):
        self.peak_waiting = max(self.peak_waiting, int(fields.get("waiting", 0)))

    def _sample(self):
        while self.sampling:
            try:
                self.peak_rss = max(self.peak_rss, common.rss_kib(self.proc.pid))
            except OSError:
                return
            time.sleep(0.25)

    def stop(self):
        self.sampling = False
        return super().stop()


def run_one(model, name, extra, conns, duration):
    server = Server(model, extra)
    try:
        report_path = f"/tmp/active_set_load_{os.getpid()}.json"
        cmd = [str(common.BIN), "load", "echo", f"127.0.0.1:{server.port}", "-c", str(conns), "-t", "1", "-l", "64",
               "-d", str(duration), "--timeout", "30", "--allow-errors", "--json", report_path]
        _, cpu, wall = common.measure(server.proc.pid, cmd)
        with open(report_path) as f:
            load = json.load(f)
        os.unlink(report_path)
        rotations = int(server.last.get("active_rotations", 0))
        answered = load["requests"]["completed"]
        lat = load["latency"]
        return {
            "model": model, "config": name, "connections": load["connections"]["connected"],
            "answered": answered, "answered_per_s": load["rates"]["requests_per_s"],
            "server_cpu_s": round(cpu, 3), "per_server_cpu_s": round(answered / cpu) if cpu > 0 else None,
            "p50_us": lat["p50_us"], "p99_us": lat["p99_us"], "p999_us": lat["p999_us"], "max_us": lat["max_us"],
            "reply_timeouts": load["errors"]["reply_timeout"], "errors": sum(load["errors"].values()),
            "server_peak_rss_kib": server.peak_rss, "peak_waiting": server.peak_waiting, "rotations": rotations,
            "wall_s": round(wall, 2),
        }
    finally:
        server.stop()


def med(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    if not values:
        return "—"
    m = statistics.median(values)
    return f"{m:,.0f} ({min(values):,.0f}–{max(values):,.0f})" if len(values) > 1 else f"{m:,.0f}"


def ms(rows, key):
    values = [r[key] / 1000 for r in rows]
    m = statistics.median(values)
    return f"{m:,.1f} ({min(values):,.1f}–{max(values):,.1f})" if len(values) > 1 else f"{m:,.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--models", default="epoll,uring")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--from", dest="source", help="draw the table from this results.json instead of measuring")
    args = ap.parse_args()
    if args.source:
        with open(args.source) as f:
            raw = json.load(f)
        print(table(raw["runs"]))
        return
    common.build_sockscale()
    out_dir = common.results_dir("active_set")
    runs = []
    for rep in range(args.reps):
        for model in args.models.split(","):
            for name, extra in CONFIGS.items():
                row = run_one(model, name, extra, args.conns, args.duration)
                row["rep"] = rep
                runs.append(row)
                print(f"rep {rep} {model:6} {name:40} {row['answered_per_s']:>10,.0f}/s  "
                      f"{row['per_server_cpu_s'] or 0:>10,}/CPU-s  p50 {row['p50_us'] / 1000:.1f} ms  "
                      f"p99.9 {row['p999_us'] / 1000:.1f} ms  max {row['max_us'] / 1000:.1f} ms  "
                      f"timeouts {row['reply_timeouts']}  rss {row['server_peak_rss_kib']:,} KiB  "
                      f"waiting {row['peak_waiting']}  rotations {row['rotations']}", flush=True)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "conns": args.conns,
                                                  "duration_s": args.duration, "runs": runs})
    print(table(runs))


def set_size(config):
    words = config.split()
    return int(words[words.index("--active-set") + 1]) if "--active-set" in words else None


def table(runs):
    """The markdown table, drawn from the raw runs alone."""
    for r in runs:
        size = set_size(r["config"])
        r["held_a_place"] = r["connections"] if size is None else min(r["connections"], size + r["rotations"])
    header = ["model", "server", "answered/s", "per server CPU-s", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
              "connections that held a place", "server peak RSS KiB", "peak waiting", "rotations"]
    rows_out = []
    for model in dict.fromkeys(r["model"] for r in runs):
        for name in dict.fromkeys(r["config"] for r in runs):
            rows = [r for r in runs if r["model"] == model and r["config"] == name]
            rows_out.append([model, name, med(rows, "answered_per_s"), med(rows, "per_server_cpu_s"),
                             ms(rows, "p50_us"), ms(rows, "p99_us"), ms(rows, "p999_us"), ms(rows, "max_us"),
                             med(rows, "held_a_place"), med(rows, "server_peak_rss_kib"), med(rows, "peak_waiting"),
                             med(rows, "rotations")])
    return common.markdown_table(header, rows_out)


if __name__ == "__main__":
    main()
