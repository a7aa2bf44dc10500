#!/usr/bin/env python3
"""Connections that connect and never send: what they cost the server, with and without
--first-data-timeout and --defer-accept (the seeds' AcceptEx with first data, and its sweep of
accepted connections that never sent anything).

For each configuration a fresh `sockscale serve --proto echo --model MODEL --threads 1` runs on
core 0 with a stats line every 0.5 s. This script opens N connections to it that send nothing,
then samples, at 1 s and at 4 s:
- the server's connection gauge (connections it holds);
- its open descriptors (/proc/PID/fd);
- its RSS;
- closed_first_data;
- one ordinary client's echo round trip, which must be served throughout.
At the end every silent connection is closed.

Usage: bench/silent_connections.py [--conns N] [--model epoll]
Writes bench-results/silent_connections-<stamp>/results.json and prints a markdown table.
"""
import argparse
import os
import selectors
import socket
import time

import common

CONFIGS = {
    "plain": [],
    "--first-data-timeout 2": ["--first-data-timeout", "2"],
    "--defer-accept 10": ["--defer-accept", "10"],
}


class Server(common.StatsServer):
    def __init__(self, model, extra):
        super().__init__(model, extra, interval=0.5)

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


def echo_rtt(port):
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"ping")
        got = b""
        while len(got) < 4:
            chunk = s.recv(4 - len(got))
            if not chunk:
                raise RuntimeError("the ordinary client was not served")
            got += chunk
    return (time.perf_counter() - start) * 1e3


def open_silent(port, n):
    """N connections that complete their handshake and send nothing."""
    socks = []
    sel = selectors.DefaultSelector()
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE)
        socks.append(s)
    pending = n
    deadline = time.time() + 10
    while pending and time.time() < deadline:
        for key, _ in sel.select(timeout=0.5):
            sel.unregister(key.fileobj)
            pending -= 1
    sel.close()
    return socks, n - pending


def sample(server, port):
    return {"held": server.counter("connections"), "fds": server.fds(), "rss_kib": common.rss_kib(server.proc.pid),
            "closed_first_data": server.counter("closed_first_data"), "echo_ms": round(echo_rtt(port), 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--model", default="epoll")
    args = ap.parse_args()
    common.build_sockscale()
    out_dir = common.results_dir("silent_connections")
    rows = []
    for name, extra in CONFIGS.items():
        server = Server(args.model, extra)
        try:
            time.sleep(0.6)
            idle = sample(server, server.port)
            socks, connected = open_silent(server.port, args.conns)
            t0 = time.time()
            time.sleep(max(0.0, 1.0 - (time.time() - t0)))
            at1 = sample(server, server.port)
            time.sleep(3.0)
            at4 = sample(server, server.port)
            for s in socks:
                s.close()
            row = {"config": name, "model": args.model, "silent": connected, "before": idle, "at_1s": at1, "at_4s": at4}
            rows.append(row)
            print(f"{name:24} silent {connected}: held {at1['held']}/{at4['held']}, fds {at1['fds']}/{at4['fds']}, "
                  f"rss {at1['rss_kib']}/{at4['rss_kib']} KiB, closed_first_data {at4['closed_first_data']}, "
                  f"echo {at1['echo_ms']}/{at4['echo_ms']} ms", flush=True)
        finally:
            server.stop()
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "conns": args.conns, "rows": rows})
    header = ["server", "silent connections", "held at 1 s / 4 s", "server descriptors at 1 s / 4 s",
              "server RSS at 1 s / 4 s (KiB)", "closed_first_data", "an ordinary echo at 1 s / 4 s (ms)"]
    table = [[r["config"], r["silent"], f"{r['at_1s']['held']:,} / {r['at_4s']['held']:,}",
              f"{r['at_1s']['fds']:,} / {r['at_4s']['fds']:,}",
              f"{r['at_1s']['rss_kib']:,} / {r['at_4s']['rss_kib']:,}", r["at_4s"]["closed_first_data"],
              f"{r['at_1s']['echo_ms']} / {r['at_4s']['echo_ms']}"] for r in rows]
    print(common.markdown_table(header, table))


if __name__ == "__main__":
    main()
