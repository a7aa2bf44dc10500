#!/usr/bin/env python3
"""File bodies: bytes per server CPU-second and server memory, sockscale against nginx.

Every server serves the same file (64 KiB, 1 MiB and 64 MiB) over HTTP keep-alive, one
worker pinned to core 0; wrk -t1 -c10 runs on core 1. Servers:

- sockscale --sendfile off   the body read into memory at start, head and body in one send
- sockscale --sendfile on    the body sent from the file with sendfile (head with MSG_MORE)
- sockscale --sendfile auto  the default: from the file from --sendfile-min up
- nginx sendfile on          with tcp_nopush (head and body in one packet), as usually advised
- nginx sendfile off         nginx's default output_buffers (2 x 32 KiB): pread, then writev
- nginx sendfile off 1m      output_buffers 1 1m: one pread and one write per MiB

Server CPU comes from /proc/PID/stat and bytes from wrk's own count, so the ratio does not
depend on the client's speed, only on what each server spends per byte. Memory is the peak
VmRSS of the server process, sampled every 100 ms during the run. The servers take turns
(every server once, then again, --repeat times), and the table reports medians and ranges.

With --veth the servers run in a network namespace of their own, behind a veth pair
(10.77.0.2, as root), and wrk reaches them through it: the path of a real NIC's driver, where
loopback's shortcuts do not apply.

Usage: bench/file_body.py [--duration SECS] [--repeat N] [--sizes 64KiB,1MiB,64MiB] [--model epoll] [--veth]
Writes bench-results/file_body-<stamp>/results.json and prints a markdown table.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import common

NGINX_VARIANTS = {
    "nginx sendfile on": "sendfile on; tcp_nopush on;",
    "nginx sendfile off": "sendfile off;",
    "nginx sendfile off 1m": "sendfile off; output_buffers 1 1m;",
}

SOCKSCALE_VARIANTS = {
    "sockscale --sendfile off": ["--sendfile", "off"],
    "sockscale --sendfile on": ["--sendfile", "on"],
    "sockscale --sendfile auto": [],
}

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text):
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", text)
    if not m:
        raise SystemExit(f"--sizes: '{text}' is not a size such as 64KiB or 1MiB")
    return int(m.group(1)) * UNITS.get(m.group(2), 1)


NETNS = "ssfilebody"
VETH_HOST, VETH_SERVER = "10.77.0.1", "10.77.0.2"
NEXT_PORT = [18080]


def veth_up():
    """A namespace for the servers, joined to this one by a veth pair."""
    veth_down()
    for cmd in (["ip", "netns", "add", NETNS],
                ["ip", "link", "add", "ssfb0", "type", "veth", "peer", "name", "ssfb1"],
                ["ip", "link", "set", "ssfb1", "netns", NETNS],
                ["ip", "addr", "add", f"{VETH_HOST}/24", "dev", "ssfb0"],
                ["ip", "link", "set", "ssfb0", "up"],
                ["ip", "netns", "exec", NETNS, "ip", "addr", "add", f"{VETH_SERVER}/24", "dev", "ssfb1"],
                ["ip", "netns", "exec", NETNS, "ip", "link", "set", "ssfb1", "up"],
                ["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"]):
        subprocess.run(cmd, check=True)


def veth_down():
    subprocess.run(["ip", "link", "del", "ssfb0"], capture_output=True)
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)


def server_prefix(veth):
    """Run a server pinned to the server core, in the namespace with --veth."""
    netns = ["ip", "netns", "exec", NETNS] if veth else []
    return [*netns, "taskset", "-c", common.SERVER_CPU]


def free_port():
    NEXT_PORT[0] += 1
    return NEXT_PORT[0]


def start_sockscale(args, host, veth):
    port = free_port()
    proc = subprocess.Popen([*server_prefix(veth), str(common.BIN), "serve", "--listen", f"{host}:{port}", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, RUST_LOG="error"))
    common.wait_port(port, host)
    return proc, port


def start_nginx(workdir, extra, host, veth):
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(common.nginx_conf(workdir, port, host=host, page="body.bin",
                                      content_type="application/octet-stream", extra=extra,
                                      worker_connections=1024))
    proc = subprocess.Popen([*server_prefix(veth), "nginx", "-c", str(conf), "-p", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    common.wait_port(port, host)
    return proc, port


def fetch_length(host, port):
    import socket
    with socket.create_connection((host, port)) as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        head = b""
        while chunk := s.recv(4096):
            head += chunk
    m = re.search(rb"Content-Length: (\d+)", head, re.I)
    assert b" 200 " in head.split(b"\r\n")[0] and m, head
    return int(m.group(1))


def parse_wrk_bytes(out):
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    m = re.search(r"requests in [\d.]+\w+, ([\d.]+)(B|KB|MB|GB|TB) read", out)
    scale = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[m.group(2)]
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    return requests, float(m.group(1)) * scale, errors


def run_one(pid, host, port, duration, conns):
    peak = [common.rss_kib(pid)]
    done = threading.Event()

    def sample():
        while not done.wait(0.1):
            try:
                peak[0] = max(peak[0], common.rss_kib(pid))
            except OSError:
                return

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        out, cpu, wall = common.measure(pid, ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", f"http://{host}:{port}/"])
    finally:
        done.set()
        sampler.join()
    requests, read, errors = parse_wrk_bytes(out)
    return {"requests": requests, "bytes": read, "socket_errors": errors, "server_cpu_s": round(cpu, 3),
            "wall_s": round(wall, 2), "server_cpu_pct": round(100 * cpu / wall, 1),
            "bytes_per_cpu_s": read / cpu if cpu else None, "peak_rss_kib": peak[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--sizes", default="64KiB,1MiB,64MiB")
    ap.add_argument("--model", default="epoll")
    ap.add_argument("--veth", action="store_true", help="servers behind a veth pair in a namespace (root)")
    args = ap.parse_args()
    host = VETH_SERVER if args.veth else "127.0.0.1"
    if args.veth:
        veth_up()
    sizes = [(s, parse_size(s)) for s in args.sizes.split(",")]
    common.ensure_debs(["nginx", "wrk"])
    common.build_sockscale()
    out_dir = common.results_dir("file_body-veth" if args.veth else "file_body")
    rows = []
    for label, size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            body = workdir / "body.bin"
            # Random bytes, written once and read before the runs: every server reads the
            # same file from the page cache.
            with open(body, "wb") as f:
                left = size
                while left:
                    chunk = min(left, 1 << 20)
                    f.write(os.urandom(chunk))
                    left -= chunk
            body.read_bytes()
            servers = {}
            for name, extra in SOCKSCALE_VARIANTS.items():
                servers[name] = start_sockscale(
                    ["--proto", "http", "--model", args.model, "--threads", "1", "--body", str(body), *extra], host, args.veth)
            for name, extra in NGINX_VARIANTS.items():
                root = workdir / name.replace(" ", "-")
                root.mkdir()
                (root / "body.bin").symlink_to(body)
                servers[name] = start_nginx(root, extra, host, args.veth)
            try:
                for name, (proc, port) in servers.items():
                    assert fetch_length(host, port) == size, f"{name} must serve the {size}-byte file"
                for run in range(args.repeat):
                    for name, (proc, port) in servers.items():
                        r = run_one(proc.pid, host, port, args.duration, args.conns)
                        r.update(size=label, size_bytes=size, server=name, run=run)
                        rows.append(r)
                        print(f"{label:>6} run {run} {name:26} {r['bytes'] / r['wall_s'] / 1e9:6.2f} GB/s  "
                              f"cpu {r['server_cpu_pct']:5.1f}%  {r['bytes_per_cpu_s'] / 1e9:6.2f} GB/CPU-s  "
                              f"rss {r['peak_rss_kib']} KiB", flush=True)
            finally:
                for proc, _ in servers.values():
                    common.stop(proc)
    if args.veth:
        veth_down()
    common.write_json(out_dir / "results.json",
                      {"machine": common.machine(), "duration_s": args.duration, "repeat": args.repeat,
                       "conns": args.conns, "model": args.model, "veth": args.veth, "rows": rows})
    print(table(rows))


def table(rows):
    med = statistics.median
    lines = []
    for size in dict.fromkeys(r["size"] for r in rows):
        at = [r for r in rows if r["size"] == size]
        best_nginx = max(med(r["bytes_per_cpu_s"] for r in at if r["server"] == n) for n in NGINX_VARIANTS)
        for name in dict.fromkeys(r["server"] for r in at):
            runs = [r for r in at if r["server"] == name]
            per_cpu = [r["bytes_per_cpu_s"] / 1e9 for r in runs]
            lines.append([size, name, f"{med(r['bytes'] / r['wall_s'] for r in runs) / 1e9:.2f}",
                          f"{med(r['server_cpu_pct'] for r in runs):.1f}%",
                          f"{med(per_cpu):.2f} ({min(per_cpu):.2f}-{max(per_cpu):.2f})",
                          f"{med(per_cpu) * 1e9 / best_nginx:.2f}x",
                          f"{max(r['peak_rss_kib'] for r in runs):,}",
                          sum(r["socket_errors"] for r in runs)])
    header = ["body", "server", "GB/s", "server CPU", "GB per server CPU-s, median (range)",
              "vs best nginx", "peak RSS (KiB)", "wrk errors"]
    return common.markdown_table(header, lines)


if __name__ == "__main__":
    main()
