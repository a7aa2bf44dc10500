#!/usr/bin/env python3
"""UDP through the datagram endpoint: echo against today's binary, and GSO/GRO on against off.

(a) echo: UDP echo of 512-byte datagrams, `--before` (today's binary) against this checkout's
    release build (the endpoint), with GSO/GRO at their default (on) and off, one thread each,
    pinned to core 0; the client is `sockscale load udp -t1 -c32 --depth 8 -l 512` of the --before binary (its own GSO/GRO
    off where it has them), on core 1, for both. Figure: datagrams answered per server CPU-second.
(b) bulk: a stream of 1,200-byte datagrams (the size QUIC sends) through this checkout's
    server with `--udp-gso on --udp-gro on` against `off off` (both `--rcvbuf 4M --sndbuf 4M`);
    the client is bench/udp_bulk.c (built here with gcc), keeping 1,024 datagrams in flight,
    sending with GSO and receiving with GRO for both servers (the same client: only the server
    changes). Figure: bytes echoed per server CPU-second.

Server CPU comes from /proc/PID/stat. Every scenario runs --repeat times with the servers
interleaved; the table gives medians, and the median and range of the ratio within each
adjacent pair. Writes bench-results/udp_endpoint-<stamp>/results.json.

    bench/udp_endpoint.py --before /work/main/target/release/sockscale --models epoll,uring
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
from pathlib import Path

import common

HERE = Path(__file__).resolve().parent


def start_reference(source, workdir):
    """The kernel-limit reference, a bare recvmmsg/sendmmsg echo in C (no GSO/GRO), built from
    `source` with gcc and pinned to the server core; returns (process, port)."""
    binary = Path(workdir) / "limit_udp"
    subprocess.run(["gcc", "-O2", "-o", str(binary), source], check=True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, str(binary), str(port), "32"],
                            stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    return proc, port


def build_client(workdir):
    path = Path(workdir) / "udp_bulk"
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(path), str(HERE / "udp_bulk.c")], check=True)
    return str(path)


def client_offload_off(load_binary):
    """The client's own GSO/GRO turned off where it has them (sockscale after issue 33's load
    side): a coalesced input would change what the server's figure measures, and an older
    client sends a datagram per call, so both servers get the same kind of input."""
    help_text = subprocess.run([load_binary, "load", "udp", "--help"], capture_output=True, text=True).stdout
    return ["--udp-gso", "off", "--udp-gro", "off"] if "--udp-gso" in help_text else []


def echo_run(proc, port, load_binary, duration):
    cmd = [load_binary, "load", "udp", f"127.0.0.1:{port}", "-t", "1", "-c", "32", "--depth", "8", "-l", "512",
           "-d", str(duration), "--json", "-", "--allow-errors", *client_offload_off(load_binary)]
    out, cpu, wall = common.measure(proc.pid, cmd)
    udp = json.loads(out)["udp"]
    return {"datagrams": udp["received"], "lost": udp["lost"], "server_cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
            "per_cpu_s": round(udp["received"] / cpu) if cpu else None}


def bulk_run(proc, port, client, duration):
    out, cpu, wall = common.measure(proc.pid, [client, str(port), str(duration), "1200", "1", "1024"])
    f = dict(zip(out.split()[::2], out.split()[1::2]))
    received = int(f["received_bytes"])
    return {"bytes": received, "datagrams": int(f["received_datagrams"]), "lost_windows": int(f["lost_windows"]),
            "server_cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
            "per_cpu_s": round(received / cpu) if cpu else None}


def interleave(servers, run, repeat, label):
    rows = []
    for rep in range(repeat):
        for name, (proc, port) in servers.items():
            r = run(proc, port)
            r.update(server=name, run=rep, scenario=label,
                     server_cpu_pct=round(100 * r["server_cpu_s"] / r["wall_s"], 1))
            rows.append(r)
            print(f"{label:6} run {rep} {name:18} {r['per_cpu_s']:>14,} per CPU-s  cpu {r['server_cpu_pct']:5.1f}%",
                  flush=True)
    return rows


def table(rows, baseline, unit):
    """A row per server: its median (range) per CPU-second, its CPU, and its ratio to `baseline`
    taken within each repetition."""
    med = statistics.median
    b = [r for r in rows if r["server"] == baseline]
    out = []
    for name in dict.fromkeys(r["server"] for r in rows):
        c = [r for r in rows if r["server"] == name]
        ratios = [y["per_cpu_s"] / x["per_cpu_s"] for x, y in zip(b, c)]
        out.append([name, f"{med(r['per_cpu_s'] for r in c):,.0f}",
                    f"{min(r['per_cpu_s'] for r in c):,}-{max(r['per_cpu_s'] for r in c):,}",
                    f"{med(r['server_cpu_pct'] for r in c)}%",
                    "1" if name == baseline else f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"])
    return common.markdown_table(["server", f"{unit}/CPU-s, median", "range", "server CPU, median",
                                  f"vs {baseline}, median (range)"], out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="today's sockscale binary (the baseline of (a))")
    ap.add_argument("--after", default=str(common.BIN), help="the endpoint's binary (default: this checkout's build)")
    ap.add_argument("--models", default="epoll,uring")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["echo", "bulk"], help="run one of the two measurements")
    ap.add_argument("--reference", help="limit_udp.c, a bare recvmmsg/sendmmsg echo: measured in (b) beside the two")
    args = ap.parse_args()
    for path in (args.before, args.after):
        if not os.access(path, os.X_OK):
            ap.error(f"{path}: not an executable sockscale binary")
    if args.after == str(common.BIN):
        common.build_sockscale()
    out_dir = common.results_dir("udp_endpoint")
    work = tempfile.TemporaryDirectory()
    client = build_client(work.name)
    results = {"machine": common.machine(), "before": args.before, "after": args.after,
               "duration_s": args.duration, "repeat": args.repeat, "loadavg_start": os.getloadavg(), "models": {}}
    tables = []
    for model in [m for m in args.models.split(",") if m]:
        one = ["--proto", "udp", "--model", model, "--threads", "1"]
        results["models"][model] = {}
        if args.only in (None, "echo"):
            servers = {}
            try:
                servers["before"] = common.start_sockscale(one, binary=args.before)
                servers["after"] = common.start_sockscale(one, binary=args.after)
                servers["after, GSO/GRO off"] = common.start_sockscale(
                    [*one, "--udp-gso", "off", "--udp-gro", "off"], binary=args.after)
                rows = interleave(servers, lambda p, port: echo_run(p, port, args.before, args.duration),
                                  args.repeat, "echo")
            finally:
                for proc, _ in servers.values():
                    common.stop(proc)
            results["models"][model]["echo"] = rows
            tables.append(f"### --model {model}: (a) echo of 512-byte datagrams, datagrams per server CPU-second\n\n"
                          + table(rows, "before", "datagrams"))
        if args.only in (None, "bulk"):
            servers = {}
            bufs = ["--rcvbuf", "4M", "--sndbuf", "4M"]
            try:
                servers["off"] = common.start_sockscale([*one, *bufs, "--udp-gso", "off", "--udp-gro", "off"],
                                                        binary=args.after)
                servers["on"] = common.start_sockscale([*one, *bufs, "--udp-gso", "on", "--udp-gro", "on"],
                                                       binary=args.after)
                if args.reference:
                    servers["limit_udp.c (no GSO/GRO)"] = start_reference(args.reference, work.name)
                rows = interleave(servers, lambda p, port: bulk_run(p, port, client, args.duration),
                                  args.repeat, "bulk")
            finally:
                for proc, _ in servers.values():
                    common.stop(proc)
            results["models"][model]["bulk"] = rows
            tables.append(f"### --model {model}: (b) bulk 1,200-byte datagrams, bytes per server CPU-second, "
                          "GSO/GRO off vs on\n\n" + table(rows, "off", "bytes"))
    results["loadavg_end"] = os.getloadavg()
    common.write_json(out_dir / "results.json", results)
    print(f"load average at start {results['loadavg_start']}, at end {results['loadavg_end']}")
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
