#!/usr/bin/env python3
"""Load-client engines compared: sockscale load's epoll engine against an io_uring prototype.

One `sockscale serve --model epoll --threads 1 --proto echo` on core 0. On core 1, one thread
each: `sockscale load echo` (epoll) and bench/uring_client (io_uring; built here), same
workload: closed loop, depth 1, 64-byte messages, every byte checked, C connections, D seconds.
Engines alternate within each round (the order rotates from round to round), so the machine's
drift hits them alike; the per-round ratio uring/epoll is the figure to trust.

Client CPU is the client process's own rusage (os.wait4: user + system, all threads), so it
includes connecting and start-up for both engines alike. On loopback the sending core also runs
the receive path of what it sends (softirq); whether that is charged to the process depends on
the kernel's IRQ time accounting, so the whole client core's busy share (/proc/stat) and its
softirq part are recorded too. Server CPU% is from /proc/PID/stat
over the client's run, for context. Raw results go to bench-results/load-engines-<stamp>.json.

uring variants (--variants):
  recv       one Recv (MSG_WAITALL) + one Send SQE per message into a per-connection buffer
  multishot  one multishot Recv per connection with a provided-buffer ring + one Send SQE
  tuned      multishot, plus sends without success CQEs and registered (fixed) files

Usage: bench/load_engines.py [-d SECS] [-r ROUNDS] [-c 10,100,1000] [--variants recv,multishot]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import common

URING_DIR = common.ROOT / "bench" / "uring_client"
URING_BIN = URING_DIR / "target" / "release" / "uring_client"
VARIANTS = {
    "recv": ["--mode", "recv"],
    "multishot": ["--mode", "multishot"],
    "tuned": ["--mode", "multishot", "--skip-send-cqe", "--fixed-files"],
}
LENGTH = 64


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def core_times(core):
    """(busy, softirq, total) jiffies of one core from /proc/stat."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{core} "):
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + v[4]
                return sum(v[:8]) - idle, v[6], sum(v[:8])
    raise RuntimeError(f"no cpu{core} in /proc/stat")


def run_client(command):
    """Run a client pinned to the client core; returns (stdout, stderr, CPU seconds, wall)."""
    start = time.time()
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen(["taskset", "-c", common.CLIENT_CPU, *command], stdout=subprocess.PIPE, stderr=errf, text=True)
        out = proc.stdout.read()
        # Reap it ourselves: wait4 gives the child's own rusage.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - start
        errf.seek(0)
        err = errf.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({proc.returncode}): {out[-2000:]} {err[-2000:]}")
    return out, err, usage.ru_utime, usage.ru_stime, wall


def epoll_run(addr, conns, duration):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [str(common.BIN), "load", "echo", addr, "-c", str(conns), "-l", str(LENGTH), "--depth", "1",
               "-t", "1", "-d", str(duration), "--json", f.name]
        _, _, user, system, wall = run_client(cmd)
        r = json.load(open(f.name))
    errors = sum(v for k, v in r["errors"].items())
    return {"messages": r["requests"]["completed"], "elapsed_s": r["duration_s"], "mismatches": r["errors"]["verify_mismatch"],
            "errors": errors, "client_user_s": user, "client_sys_s": system, "wall_s": wall,
            "self_reported_cpu_s": r["cpu"]["user_s"] + r["cpu"]["system_s"], "report": r}


def uring_run(variant):
    def run(addr, conns, duration):
        cmd = [str(URING_BIN), addr, "-c", str(conns), "-l", str(LENGTH), "-d", str(duration), *VARIANTS[variant]]
        out, _, user, system, wall = run_client(cmd)
        r = json.loads(out.strip().splitlines()[-1])
        return {"messages": r["messages"], "elapsed_s": r["elapsed_s"], "mismatches": r["mismatches"],
                "errors": r["errors"] + r["dead_connections"], "client_user_s": user, "client_sys_s": system,
                "wall_s": wall, "report": r}
    return run


def table(rows, engines):
    med = statistics.median

    def fmt(values, spec):
        return f"{med(values):{spec}} ({min(values):{spec}}–{max(values):{spec}})"

    out = []
    for conns in dict.fromkeys(r["connections"] for r in rows):
        base = {r["round"]: r for r in rows if r["connections"] == conns and r["engine"] == "epoll"}
        for engine in engines:
            mine = [r for r in rows if r["connections"] == conns and r["engine"] == engine]
            ratios = [r["msgs_per_client_cpu_s"] / base[r["round"]]["msgs_per_client_cpu_s"] for r in mine]
            rate_ratios = [r["msgs_per_s"] / base[r["round"]]["msgs_per_s"] for r in mine]
            out.append([conns, engine, fmt([r["msgs_per_s"] for r in mine], ".0f"),
                        fmt([r["client_cpu_pct"] for r in mine], ".0f") + " %",
                        fmt([r["msgs_per_client_cpu_s"] for r in mine], ".0f"),
                        fmt([r["server_cpu_pct"] for r in mine], ".0f") + " %",
                        fmt([r["client_core_busy_pct"] for r in mine], ".0f") + " %",
                        "—" if engine == "epoll" else fmt(rate_ratios, ".2f"),
                        "—" if engine == "epoll" else fmt(ratios, ".2f"),
                        sum(r["mismatches"] + r["errors"] for r in mine)])
    header = ["conns", "client engine", "msgs/s", "client CPU", "msgs per client CPU-s", "server CPU",
              "client core busy", "msgs/s ÷ epoll", "msgs/CPU-s ÷ epoll", "mismatches+errors"]
    return common.markdown_table(header, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-d", "--duration", type=int, default=5)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-c", "--connections", default="10,100,1000")
    ap.add_argument("--variants", default="recv,multishot,tuned", help=f"uring variants, of {','.join(VARIANTS)}")
    args = ap.parse_args()
    conns_list = [int(c) for c in args.connections.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v}")
    nofile = raise_nofile()
    if max(conns_list) + 64 > nofile[0]:
        sys.exit(f"open-file limit {nofile} too low for {max(conns_list)} connections")

    common.build_sockscale()
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=URING_DIR, check=True)

    engines = {"epoll": epoll_run, **{f"uring-{v}": uring_run(v) for v in variants}}
    server, port = common.start_sockscale(["--model", "epoll", "--threads", "1", "--proto", "echo"])
    addr = f"127.0.0.1:{port}"
    common.wait_port(port)
    rows = []
    try:
        for conns in conns_list:
            for rnd in range(args.rounds):
                names = list(engines)
                names = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in names:
                    before = common.cpu_seconds(server.pid)
                    core_before = core_times(common.CLIENT_CPU)
                    r = engines[name](addr, conns, args.duration)
                    server_cpu = common.cpu_seconds(server.pid) - before
                    busy, softirq, total = (b - a for a, b in zip(core_before, core_times(common.CLIENT_CPU)))
                    # The whole client core, softirq included: on loopback the sender's core also
                    # runs the receive path of what it sends, in softirq.
                    r.update(client_core_busy_pct=round(100 * busy / total, 1) if total else None,
                             client_core_softirq_pct=round(100 * softirq / total, 1) if total else None)
                    cpu = r["client_user_s"] + r["client_sys_s"]
                    r.update(engine=name, connections=conns, round=rnd, client_cpu_s=round(cpu, 3),
                             client_cpu_pct=round(100 * cpu / r["wall_s"], 1),
                             msgs_per_s=round(r["messages"] / r["elapsed_s"]),
                             msgs_per_client_cpu_s=round(r["messages"] / cpu) if cpu else None,
                             server_cpu_s=round(server_cpu, 3), server_cpu_pct=round(100 * server_cpu / r["wall_s"], 1))
                    rows.append(r)
                    print(f"c={conns:5} round {rnd} {name:16} {r['msgs_per_s']:>8} msg/s  client cpu {r['client_cpu_pct']:5.1f}% "
                          f"(usr {r['client_user_s']:.2f} sys {r['client_sys_s']:.2f})  {r['msgs_per_client_cpu_s']} msg/cpu-s  "
                          f"server {r['server_cpu_pct']:5.1f}%  core1 busy {r['client_core_busy_pct']}% (softirq {r['client_core_softirq_pct']}%)  mismatches {r['mismatches']} errors {r['errors']}",
                          file=sys.stderr, flush=True)
    finally:
        common.stop(server)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = common.ROOT / "bench-results" / f"load-engines-{stamp}.json"
    path.parent.mkdir(exist_ok=True)
    common.write_json(path, {"machine": common.machine(), "server": "sockscale serve --model epoll --threads 1 --proto echo (core 0)",
                             "client_core": common.CLIENT_CPU, "length": LENGTH, "depth": 1, "duration_s": args.duration,
                             "rounds": args.rounds, "variants": {v: VARIANTS[v] for v in variants}, "runs": rows})
    print(f"\nEcho, closed loop, depth 1, {LENGTH}-byte messages verified, one client thread on core 1, {args.duration} s runs, "
          f"{args.rounds} rounds; median (min–max); ratios are per round against that round's epoll run.\n")
    print(table(rows, list(engines)))


if __name__ == "__main__":
    main()
