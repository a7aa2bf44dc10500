#!/usr/bin/env python3
"""Issue 34's WebSocket goals, measured in one run: messages per server CPU-second and per
client CPU-second, 512-byte messages, 100 connections, one message in flight per connection.

Server goal: `sockscale serve --proto ws -m epoll -t 1` against its own TCP echo
(`serve --proto echo -m epoll -t 1`) driven the same way (`load ws` against the first, `load
echo` against the second: both do one read and one write per message, so framing and masking
are the only extra work), and against two third-party echo servers on one core: Go
github.com/coder/websocket (GOMAXPROCS=1) and Node `ws`, both driven by `load ws` (the interop
peers, crates/sockscale/tests/interop/go/server and node/ws_server.mjs; they agree to
permessage-deflate only when offered, and `load ws` does not offer it).
Goals: ws >= 0.8x echo, and >= 2x the better of Go and Node.

Load goal: `load ws` against `load echo` (the same two pairings as above, read on the client
side), and against closed-loop WebSocket clients written on the same two libraries
(bench/ws_peers/: each connection sends one binary message, waits for its echo, checks it byte
for byte), all against the same `sockscale serve --proto ws`. Goals: `load ws` >= 0.9x `load
echo`, and >= 2x the better of the Go and Node clients.

The kernel's limit for the same exchange, as a reference: ../shared/reference/limit_server.c
(a minimal single-thread epoll echo: one read and one write per readiness, nothing else), built
with gcc when that file is beside the project, driven by `load echo` like sockscale's TCP echo.
A goal above it cannot be met by any server, and the table says how far above.

Every server runs on core 0 (server CPU from /proc/PID/stat, all its threads), every client on
core 1 with one thread (client CPU from its rusage). The pairings are interleaved and repeated;
ratios are taken within each repetition, and the tables give their median and range.
Compression is off everywhere (no permessage-deflate offered or accepted).

Usage: bench/ws_goals.py [--duration SECS] [--repeat N] [--conns C] [--size BYTES] [--pipeline N]
`--pipeline N` (default 1) puts N messages in flight per connection, in every client (`load ws
--pipeline N`, `load echo --depth N`, the Go and Node clients' PIPELINE argument).
Writes bench-results/ws_goals-<stamp>/results.json and prints markdown tables.
"""
import argparse
import json
import os
import re
import socket
import statistics
import sys
import subprocess
import tempfile
from pathlib import Path

import common

PEERS = common.ROOT / "bench" / "ws_peers"
LIMIT_SOURCE = common.ROOT.parent / "shared" / "reference" / "limit_server.c"
LIMIT = "kernel limit (C echo)"
INTEROP = common.ROOT / "crates" / "sockscale" / "tests" / "interop"


def npm_ci(directory):
    if not (directory / "node_modules" / "ws" / "package.json").is_file():
        done = subprocess.run(["npm", "ci", "--prefer-offline", "--no-audit", "--no-fund"], cwd=directory,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            sys.exit(f"ws_goals: npm ci in {directory} failed: {last}")


def build_peers(out_dir):
    """The Go programs built from the module cache, Node's `ws` installed from npm's cache: the
    interop echo servers (tests/interop) and the load clients (bench/ws_peers)."""
    env = dict(os.environ, GOFLAGS="-mod=mod")
    go_server, go_load = out_dir / "go_ws_server", out_dir / "go_ws_load"
    subprocess.run(["go", "build", "-o", str(go_server), "./server"], cwd=INTEROP / "go", check=True, env=env)
    subprocess.run(["go", "build", "-o", str(go_load), "."], cwd=PEERS / "go", check=True, env=env)
    npm_ci(INTEROP / "node")
    npm_ci(PEERS / "node")
    return go_server, go_load, INTEROP / "node" / "ws_server.mjs", PEERS / "node" / "ws_load.mjs"


def build_limit(out_dir):
    """The reference limit server, or None (said once) when its source or gcc is missing."""
    if not LIMIT_SOURCE.is_file() or not common.have("gcc"):
        print(f"no kernel-limit reference: {LIMIT_SOURCE} or gcc missing", flush=True)
        return None
    exe = out_dir / "limit_server"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(LIMIT_SOURCE)], check=True)
    return exe


def start_limit(exe):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, str(exe), "echo", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    common.wait_port(port)
    return proc, port


def start_listening(command, env=None):
    """Start an interop server pinned to the server core; it prints its bound HOST:PORT first."""
    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, *command], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, **(env or {})))
    line = proc.stdout.readline()
    m = re.match(r"127\.0\.0\.1:(\d+)$", line.strip())
    if not m:
        proc.kill()
        raise RuntimeError(f"{command[0]} did not start: {line!r}")
    common.wait_port(int(m.group(1)))
    return proc, int(m.group(1))


def sockscale_load(kind, target, args):
    """`sockscale load ws|echo` on one thread; returns (messages, errors, client CPU s, wall s)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        if kind == "ws":
            command = ["load", "ws", target, "-c", str(args.conns), "-s", str(args.size), "--pipeline", str(args.pipeline)]
        else:
            command = ["load", "echo", target, "-c", str(args.conns), "-l", str(args.size), "--depth", str(args.pipeline)]
        _, cpu, wall = common.run_client([str(common.BIN), *command, "-t", "1", "-d", str(args.duration), "--json", f.name])
        r = json.load(open(f.name))
    errors = sum(v for v in r["errors"].values() if isinstance(v, int))
    return r["requests"]["completed"], errors, cpu, wall


def peer_load(command, env=None):
    """A bench/ws_peers client: prints {"messages", "errors", "seconds"}; GOMAXPROCS=1 for Go."""
    def run(url, args):
        full = ["env", *(f"{k}={v}" for k, v in (env or {}).items()), *command, url, str(args.conns), str(args.size),
                str(args.duration), str(args.pipeline)]
        out, cpu, wall = common.run_client(full)
        r = json.loads(out.strip().splitlines()[-1])
        return r["messages"], r["errors"], cpu, wall
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--pipeline", type=int, default=1)
    args = ap.parse_args()
    common.build_sockscale()
    out_dir = common.results_dir("ws_goals")
    go_server, go_load, node_server, node_load = build_peers(out_dir)
    limit = build_limit(out_dir)

    servers = {
        "sockscale ws": lambda: common.start_sockscale(["--proto", "ws", "-m", "epoll", "-t", "1"]),
        "sockscale echo": lambda: common.start_sockscale(["--proto", "echo", "-m", "epoll", "-t", "1"]),
        "Go coder/websocket": lambda: start_listening([str(go_server), "127.0.0.1:0"], {"GOMAXPROCS": "1"}),
        "Node ws": lambda: start_listening(["node", str(node_server), "127.0.0.1:0"]),
    }
    ws_load = lambda url, a: sockscale_load("ws", url, a)  # noqa: E731
    echo_load = lambda url, a: sockscale_load("echo", url.removeprefix("ws://").rstrip("/"), a)  # noqa: E731
    clients = {
        "sockscale load ws": ws_load,
        "sockscale load echo": echo_load,
        "Go coder/websocket client": peer_load([str(go_load)], {"GOMAXPROCS": "1"}),
        "Node ws client": peer_load(["node", str(node_load)]),
    }
    # (server, client): the server goal reads the first four, the load goal the first two and the last two.
    pairs = [
        ("sockscale ws", "sockscale load ws"),
        ("sockscale echo", "sockscale load echo"),
        ("Go coder/websocket", "sockscale load ws"),
        ("Node ws", "sockscale load ws"),
        ("sockscale ws", "Go coder/websocket client"),
        ("sockscale ws", "Node ws client"),
    ]
    if limit:
        servers[LIMIT] = lambda: start_limit(limit)
        pairs.insert(2, (LIMIT, "sockscale load echo"))
    rows = []
    for run in range(args.repeat):
        for server, client in pairs:
            proc, port = servers[server]()
            try:
                before = common.cpu_seconds(proc.pid)
                messages, errors, client_cpu, wall = clients[client](f"ws://127.0.0.1:{port}/", args)
                server_cpu = common.cpu_seconds(proc.pid) - before
            finally:
                common.stop(proc)
            row = {"run": run, "server": server, "client": client, "messages": messages, "errors": errors,
                   "wall_s": round(wall, 2), "server_cpu_s": round(server_cpu, 3), "client_cpu_s": round(client_cpu, 3),
                   "msg_per_s": round(messages / wall), "msg_per_server_cpu_s": round(messages / server_cpu) if server_cpu else None,
                   "msg_per_client_cpu_s": round(messages / client_cpu) if client_cpu else None}
            rows.append(row)
            print(f"run {run} {server:20} <- {client:26} {row['msg_per_s']:>8} msg/s  server {server_cpu:5.2f} CPU-s "
                  f"{row['msg_per_server_cpu_s']:>8}/CPU-s  client {client_cpu:5.2f} CPU-s {row['msg_per_client_cpu_s']:>8}/CPU-s"
                  f"  errors {errors}", flush=True)
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "args": vars(args), "rows": rows,
                                                 "limit_source": str(LIMIT_SOURCE) if limit else None})
    print_tables(rows, args)


def per_run(rows, server, client, key):
    return [r[key] for r in sorted((r for r in rows if r["server"] == server and r["client"] == client), key=lambda r: r["run"])]


def spread(values, fmt="{:.0f}"):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def ratio_line(name, mine, others, goal=None):
    """Per-repetition ratio of `mine` to the best of `others` in that repetition; without a
    goal, a reference line (what the same ratio is for plain TCP echo)."""
    ratios = [m / max(o) for m, *o in zip(mine, *others)]
    med = statistics.median(ratios)
    if goal is None:
        return [name, f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})", "(reference)", ""]
    return [name, f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})", f">= {goal}x", "met" if med >= goal else "missed"]


def print_tables(rows, args):
    shape = f"{args.size} B, c={args.conns}, pipeline {args.pipeline}, {args.duration} s, {args.repeat} repetitions"
    server_pairs = [("sockscale ws", "sockscale load ws"), ("sockscale echo", "sockscale load echo"),
                    ("Go coder/websocket", "sockscale load ws"), ("Node ws", "sockscale load ws")]
    limited = any(r["server"] == LIMIT for r in rows)
    if limited:
        server_pairs.insert(2, (LIMIT, "sockscale load echo"))
    client_pairs = [("sockscale ws", "sockscale load ws"), ("sockscale echo", "sockscale load echo"),
                    ("sockscale ws", "Go coder/websocket client"), ("sockscale ws", "Node ws client")]
    table = []
    for server, client in server_pairs:
        table.append([server, client, spread(per_run(rows, server, client, "msg_per_s")),
                      spread(per_run(rows, server, client, "server_cpu_s"), "{:.2f}"),
                      spread(per_run(rows, server, client, "msg_per_server_cpu_s")),
                      sum(per_run(rows, server, client, "errors"))])
    print(f"\nServer: messages per server CPU-second ({shape}), median (range)\n")
    print(common.markdown_table(["server (core 0)", "client (core 1)", "msg/s", "server CPU s", "msg per server CPU-s", "errors"], table))
    key = "msg_per_server_cpu_s"
    ws = per_run(rows, "sockscale ws", "sockscale load ws", key)
    echo = per_run(rows, "sockscale echo", "sockscale load echo", key)
    third = [per_run(rows, "Go coder/websocket", "sockscale load ws", key), per_run(rows, "Node ws", "sockscale load ws", key)]
    goals = [ratio_line("ws / TCP echo", ws, [echo], 0.8),
             ratio_line("ws / best of Go, Node", ws, third, 2),
             ratio_line("TCP echo / best of Go, Node", echo, third)]
    if limited:
        limit = per_run(rows, LIMIT, "sockscale load echo", key)
        best2 = [2 * max(o) for o in zip(*third)]
        goals += [ratio_line("ws / kernel limit", ws, [limit]),
                  ratio_line("the 2x goal (2 x best of Go, Node) / kernel limit", best2, [limit])]
    table = []
    for server, client in client_pairs:
        table.append([client, server, spread(per_run(rows, server, client, "msg_per_s")),
                      spread(per_run(rows, server, client, "client_cpu_s"), "{:.2f}"),
                      spread(per_run(rows, server, client, "msg_per_client_cpu_s")),
                      sum(per_run(rows, server, client, "errors"))])
    print(f"\nLoad: messages per client CPU-second ({shape}), median (range)\n")
    print(common.markdown_table(["client (core 1)", "server (core 0)", "msg/s", "client CPU s", "msg per client CPU-s", "errors"], table))
    key = "msg_per_client_cpu_s"
    ws = per_run(rows, "sockscale ws", "sockscale load ws", key)
    echo = per_run(rows, "sockscale echo", "sockscale load echo", key)
    third = [per_run(rows, "sockscale ws", "Go coder/websocket client", key), per_run(rows, "sockscale ws", "Node ws client", key)]
    goals += [ratio_line("load ws / load echo", ws, [echo], 0.9),
              ratio_line("load ws / best of Go, Node clients", ws, third, 2),
              ratio_line("load echo / best of Go, Node clients", echo, third)]
    print("\nGoals: ratio per repetition, median (range)\n")
    print(common.markdown_table(["ratio", "measured", "goal", "verdict"], goals))


if __name__ == "__main__":
    main()
