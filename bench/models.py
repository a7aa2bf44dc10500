#!/usr/bin/env python3
"""Every I/O model side by side: messages (requests) per server CPU-second.

Each server is pinned to core 0 and `sockscale load` (one thread) to core 1. Workloads: echo
512 B at 50, 1,000 and 10,000 connections; HTTP 4 KiB keep-alive at 100 connections. Every
sockscale model runs with --threads 1. Two peers run the echo workloads beside them:

- a plain tokio echo server, written at run time outside this repository from tokio's own
  examples/echo.rs (accept, spawn, read into a 1 KiB buffer, write_all) and built in /tmp;
- frevib/io_uring-echo-server (https://github.com/frevib/io_uring-echo-server), which the
  script cannot download here: build it yourself with liburing-dev, binding 127.0.0.1, and pass
  --frevib PATH; it is skipped with a note otherwise.

Runs are interleaved and repeated; tables give medians and the range of per-pair ratios.

Usage: bench/models.py [--duration SECS] [--repeat N] [--frevib PATH] [--models a,b,...]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import common


TOKIO_ECHO = r'''
// tokio's examples/echo.rs, as published, with the address taken from argv[1].
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use std::env;
use std::error::Error;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let addr = env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let listener = TcpListener::bind(&addr).await?;
    println!("Listening on: {}", addr);
    loop {
        let (mut socket, _) = listener.accept().await?;
        tokio::spawn(async move {
            let mut buf = vec![0; 1024];
            loop {
                let n = socket.read(&mut buf).await.expect("failed to read data from socket");
                if n == 0 {
                    return;
                }
                socket.write_all(&buf[0..n]).await.expect("failed to write data to socket");
            }
        });
    }
}
'''


def build_tokio_echo():
    root = Path(tempfile.gettempdir()) / "sockscale-tokio-echo"
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "Cargo.toml").write_text('[package]\nname = "tokio-echo"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                     '[dependencies]\ntokio = { version = "1", features = ["full"] }\n\n[profile.release]\ncodegen-units = 4\n')
    (root / "src" / "main.rs").write_text(TOKIO_ECHO)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
    return str(root / "target" / "release" / "tokio-echo")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_peer(command, port):
    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    common.wait_port(port)
    return proc, port


def start_servers(proto, models, peers):
    servers = {}
    for m in models:
        servers[m] = common.start_sockscale(["--proto", proto, "--model", m, "--threads", "1", "--max-conns", "200000",
                                             "--idle-timeout", "600"])
    if proto == "echo":
        for name, build in peers.items():
            port = free_port()
            servers[name] = start_peer(build(port), port)
    return servers


def run_load(pid, args):
    # --allow-errors: errors are measured and reported from the JSON (select past FD_SETSIZE
    # has thousands), not a reason to stop; load still exits 1 when it could not run at all.
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        before = common.cpu_seconds(pid)
        start = time.time()
        subprocess.run(["taskset", "-c", common.CLIENT_CPU, str(common.BIN), "load", *args, "-t", "1", "--allow-errors", "--json", f.name],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.time() - start
        cpu = common.cpu_seconds(pid) - before
        r = json.load(open(f.name))
    return r, cpu, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--frevib", help="path to a built io_uring_echo_server")
    ap.add_argument("--models", default="", help="comma-separated (default: every model of `sockscale models --json`)")
    args = ap.parse_args()
    common.build_sockscale()
    models = [m for m in args.models.split(",") if m] or common.model_names()
    peers = {"tokio-echo-example": (lambda exe: lambda port: [exe, f"127.0.0.1:{port}"])(build_tokio_echo())}
    notes = []
    if args.frevib and os.path.exists(args.frevib):
        peers["frevib-io_uring"] = lambda port: [args.frevib, str(port)]
    else:
        notes.append("frevib/io_uring-echo-server skipped: pass --frevib PATH to a build of it")
    out_dir = common.results_dir("models")
    rows = []
    workloads = [("echo", c) for c in (50, 1000, 10000)] + [("http", 100)]
    for proto in ("echo", "http"):
        servers = start_servers(proto, models, peers)
        try:
            for w_proto, conns in [w for w in workloads if w[0] == proto]:
                for run in range(args.repeat):
                    for name, (proc, port) in servers.items():
                        d = args.duration + (2 if conns >= 10000 else 0)
                        if proto == "echo":
                            load_args = ["echo", f"127.0.0.1:{port}", "-c", str(conns), "-l", "512", "-d", str(d)]
                        else:
                            load_args = ["http", f"http://127.0.0.1:{port}/", "-c", str(conns), "-d", str(d)]
                        try:
                            r, cpu, wall = run_load(proc.pid, load_args)
                        except subprocess.CalledProcessError as e:
                            print(f"{proto} c={conns} {name}: load failed ({e})", flush=True)
                            continue
                        done = r["requests"]["completed"]
                        errors = sum(r["errors"].values())
                        row = {"workload": f"{proto} c={conns}", "server": name, "run": run, "completed": done,
                               "connected": r["connections"]["connected"], "errors": errors,
                               "rate": round(done / r["duration_s"]), "server_cpu_s": round(cpu, 3),
                               "server_cpu_pct": round(100 * cpu / r["duration_s"], 1),
                               "per_cpu_s": round(done / cpu) if cpu > 0 else None,
                               "client_cpu_pct": round(r["rates"]["cpu_percent"], 1)}
                        rows.append(row)
                        print(f"{row['workload']:13} run {run} {name:20} {row['rate']:>9}/s  server cpu {row['server_cpu_pct']:5.1f}%  "
                              f"{row['per_cpu_s']} per cpu-s  connected {row['connected']}  errors {errors}", flush=True)
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "duration_s": args.duration, "repeat": args.repeat,
                                                 "notes": notes, "rows": rows})
    med = statistics.median
    for workload in dict.fromkeys(r["workload"] for r in rows):
        runs = [r for r in rows if r["workload"] == workload]
        names = list(dict.fromkeys(r["server"] for r in runs))
        base = [r for r in runs if r["server"] == "epoll"]
        table = []
        for name in names:
            mine = [r for r in runs if r["server"] == name]
            per = [r["per_cpu_s"] for r in mine if r["per_cpu_s"]]
            ratios = [m["per_cpu_s"] / b["per_cpu_s"] for m, b in zip(mine, base) if m["per_cpu_s"] and b["per_cpu_s"]]
            table.append([name, f"{med(r['rate'] for r in mine):.0f}", f"{med(r['server_cpu_pct'] for r in mine)}%",
                          f"{med(per):.0f}" if per else "-", f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-",
                          f"{med(r['connected'] for r in mine):.0f}", sum(r["errors"] for r in mine), f"{med(r['client_cpu_pct'] for r in mine)}%"])
        print(f"\n{workload}\n")
        print(common.markdown_table(["server", "per s", "server CPU", "per server CPU-s", "vs epoll, median (range)", "connected", "errors", "client CPU"], table))
    for n in notes:
        print(f"\nnote: {n}")


if __name__ == "__main__":
    main()
