#!/usr/bin/env python3
"""A --body file over TLS (issue 24): bytes per server CPU-second against sendfile in clear, and
the server's memory while a large sparse body downloads.

- throughput: a 64 MiB random body, `serve --model epoll --threads 1 --sendfile on` pinned to
  core 0, in clear (sendfile) and with `--tls-cert/--tls-key` (read and encrypted in chunks);
  curl on core 1 downloads it --downloads times over one keep-alive connection (after one
  warm-up download). GB of body per server CPU-second (/proc/PID/stat) and per wall second;
  the cases alternate, --repeat times; medians and ranges.
- memory: a 4 GiB sparse body over TLS, curl -k downloading it for --seconds; the server's VmRSS
  before, its peak (sampled every 100 ms) and VmHWM.

A measuring build may read the chunk size from SEAL_CHUNK_KIB (see docs/BENCHMARKS.md): the
environment is passed through.

Usage: bench/file_body_tls.py [--bin PATH] [--repeat 3] [--downloads 24] [--seconds 5]
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import common


def serve(binary, body, port, tls_dir, cpu=None):
    args = [binary, "serve", "--model", "epoll", "--threads", "1", "--proto", "http",
            "--listen", f"127.0.0.1:{port}", "--body", str(body), "--sendfile", "on"]
    if tls_dir:
        args += ["--tls-cert", str(tls_dir / "cert.pem"), "--tls-key", str(tls_dir / "key.pem")]
    if cpu is not None:
        args = ["taskset", "-c", cpu, *args]
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    server.stdout.readline()  # "listening on": taskset has exec'd the server by then
    return server


def throughput(binary, body, tls_dir, downloads, port):
    server = serve(binary, body, port, tls_dir, common.SERVER_CPU)
    url = f"{'https' if tls_dir else 'http'}://localhost:{port}/"
    curl = ["taskset", "-c", common.CLIENT_CPU, "curl", "-sk", "--http1.1"]
    subprocess.run([*curl, "-o", "/dev/null", url], check=True)
    cpu0, t0 = common.cpu_seconds(server.pid), time.time()
    subprocess.run([*curl, *sum([["-o", "/dev/null", url] for _ in range(downloads)], [])], check=True)
    cpu1, t1 = common.cpu_seconds(server.pid), time.time()
    server.terminate()
    server.wait()
    gb = downloads * body.stat().st_size / 1e9
    return gb / (cpu1 - cpu0), gb / (t1 - t0)


def memory(binary, sparse, tls_dir, seconds, port):
    server = serve(binary, sparse, port, tls_dir)
    before = common.rss_kib(server.pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], common.rss_kib(server.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    got = subprocess.run(["curl", "-sk", f"https://localhost:{port}/", "-o", "/dev/null", "--max-time", str(seconds),
                          "-w", "%{size_download}"], capture_output=True, text=True).stdout
    done.set()
    sampler.join()
    with open(f"/proc/{server.pid}/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    server.terminate()
    server.wait()
    return before, peak[0], hwm, int(got or 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None, help="a sockscale binary (default: build the release one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--downloads", type=int, default=24)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()
    common.ensure_debs(["curl"])
    binary = args.bin or common.build_sockscale()
    with tempfile.TemporaryDirectory(prefix="sockscale-tls-body-") as tmp:
        tmp = Path(tmp)
        subprocess.run([binary, "cert", "--out", str(tmp)], check=True, capture_output=True)
        body = tmp / "body64m.bin"
        body.write_bytes(os.urandom(64 << 20))
        sparse = tmp / "sparse4g.bin"
        with open(sparse, "wb") as f:
            f.truncate(4 << 30)
        cases = {"sendfile, clear": None, "TLS, read and encrypted": tmp}
        results = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, tls_dir in cases.items():
                results[name].append(throughput(binary, body, tls_dir, args.downloads, 18700))
        print("| body 64 MiB, epoll, one worker | GB per server CPU-second, median (range) | GB per second, median (range) |")
        print("|---|---|---|")
        for name, runs in results.items():
            cpu = [r[0] for r in runs]
            wall = [r[1] for r in runs]
            print(f"| {name} | {statistics.median(cpu):.2f} ({min(cpu):.2f}–{max(cpu):.2f}) "
                  f"| {statistics.median(wall):.2f} ({min(wall):.2f}–{max(wall):.2f}) |")
        before, peak, hwm, got = memory(binary, sparse, tmp, args.seconds, 18701)
        print(f"\n4 GiB sparse body over TLS, curl for {args.seconds} s ({got:,} bytes): server VmRSS {before:,} KiB "
              f"before, {peak:,} KiB at most during (VmHWM {hwm:,} KiB)")


if __name__ == "__main__":
    main()
