#!/usr/bin/env python3
"""HTTP/1.1 keep-alive requests per server CPU-second over a Unix domain socket against loopback
TCP (issue 25).

One `sockscale serve --proto http --model epoll --threads 1` per transport, both pinned to core
0: one on unix:PATH, one on 127.0.0.1. `sockscale load http` (keep-alive, c=100, one thread,
pinned to core 1) drives one at a time, with `--unix-socket PATH` for the Unix one (wrk and
h2load cannot connect to a Unix socket). Server CPU comes from /proc/PID/stat, requests from
the load's JSON report. The two run --repeat times, interleaved and in alternating order (tcp
unix, unix tcp, ...); the table gives the median and range of each, and of the unix/tcp ratio
within each pair. The load average before and after is recorded: the machine may be shared.

Writes bench-results/unix_vs_tcp-<stamp>/results.json and prints a markdown table.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import common


def start_unix(path, model, threads):
    """`sockscale serve` on unix:PATH, pinned to the server core."""
    proc = subprocess.Popen(
        ["taskset", "-c", common.SERVER_CPU, str(common.BIN), "serve", "--proto", "http", "--model", model,
         "--threads", str(threads), "--listen", f"unix:{path}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, RUST_LOG="error"),
    )
    line = proc.stdout.readline().strip()
    if line != f"listening on unix:{path}":
        proc.kill()
        raise RuntimeError(f"sockscale did not start on unix:{path}: {line!r}")
    return proc


def run_load(pid, target_args, conns, duration):
    """One load run against the server `pid`; returns its figures."""
    command = [str(common.BIN), "load", "http", *target_args, "-c", str(conns), "-d", str(duration), "-t", "1",
               "--json", "-"]
    out, server_cpu, wall = common.measure(pid, command)
    report = json.loads(out)
    completed = report["requests"]["completed"]
    errors = sum(v for v in report["errors"].values() if isinstance(v, int))
    client_cpu = report["cpu"]["user_s"] + report["cpu"]["system_s"]
    return {
        "completed": completed,
        "duration_s": report["duration_s"],
        "rps": completed / report["duration_s"],
        "server_cpu_s": server_cpu,
        "per_server_cpu_s": completed / server_cpu if server_cpu > 0 else None,
        "client_cpu_s": client_cpu,
        "per_client_cpu_s": completed / client_cpu if client_cpu > 0 else None,
        "latency_p50_us": report["latency"].get("p50_us"),
        "latency_p99_us": report["latency"].get("p99_us"),
        "errors": errors,
        "wall_s": wall,
    }


def spread(values):
    values = [v for v in values if v is not None]
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="epoll")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-build", action="store_true", help="use the release binary as it is")
    args = ap.parse_args()
    if not args.no_build:
        common.build_sockscale()
    out_dir = common.results_dir("unix_vs_tcp")
    results = {"machine": common.machine(), "model": args.model, "threads": args.threads,
               "connections": args.connections, "duration_s": args.duration, "repeat": args.repeat,
               "loadavg_before": os.getloadavg(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="sockscale-uds-") as tmp:
        path = os.path.join(tmp, "http.sock")
        serve = ["--proto", "http", "--model", args.model, "--threads", str(args.threads)]
        tcp, port = common.start_sockscale(serve)
        unix = start_unix(path, args.model, args.threads)
        targets = {
            "tcp": (tcp.pid, [f"http://127.0.0.1:{port}/"]),
            "unix": (unix.pid, ["http://localhost/", "--unix-socket", path]),
        }
        try:
            for rep in range(args.repeat):
                order = ["tcp", "unix"] if rep % 2 == 0 else ["unix", "tcp"]
                for name in order:
                    pid, target = targets[name]
                    run = run_load(pid, target, args.connections, args.duration)
                    run.update(transport=name, repetition=rep, loadavg=os.getloadavg())
                    results["runs"].append(run)
                    print(f"[{rep + 1}/{args.repeat}] {name}: {run['rps']:.0f} req/s, "
                          f"{run['per_server_cpu_s']:.0f} per server CPU-s, errors {run['errors']}",
                          file=os.sys.stderr)
        finally:
            common.stop(tcp)
            common.stop(unix)
    results["loadavg_after"] = os.getloadavg()
    common.write_json(out_dir / "results.json", results)

    by = {name: [r for r in results["runs"] if r["transport"] == name] for name in ("tcp", "unix")}
    rows = []
    for name, label in (("tcp", "loopback TCP (127.0.0.1)"), ("unix", "Unix socket")):
        runs = by[name]
        cells = [label]
        for key, fmt in (("per_server_cpu_s", "{:,.0f}"), ("rps", "{:,.0f}"), ("server_cpu_s", "{:.2f}"),
                         ("per_client_cpu_s", "{:,.0f}"), ("latency_p50_us", "{:,.0f}")):
            med, lo, hi = spread([r[key] for r in runs])
            cells.append(f"{fmt.format(med)} ({fmt.format(lo)}–{fmt.format(hi)})")
        cells.append(str(sum(r["errors"] for r in runs)))
        rows.append(cells)
    ratios = [u["per_server_cpu_s"] / t["per_server_cpu_s"] for t, u in zip(by["tcp"], by["unix"])]
    rps_ratios = [u["rps"] / t["rps"] for t, u in zip(by["tcp"], by["unix"])]
    med, lo, hi = spread(ratios)
    rmed, rlo, rhi = spread(rps_ratios)
    print(common.markdown_table(
        ["transport", "requests per server CPU-second", "requests/s", "server CPU s", "requests per client CPU-second",
         "latency p50 (us)", "errors"], rows))
    print(f"\nunix/tcp, within each pair: per server CPU-second {med:.2f} ({lo:.2f}–{hi:.2f}), "
          f"requests/s {rmed:.2f} ({rlo:.2f}–{rhi:.2f})")
    print(f"load average: {results['loadavg_before'][0]:.2f} before, {results['loadavg_after'][0]:.2f} after "
          f"({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
