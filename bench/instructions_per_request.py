#!/usr/bin/env python3
"""User-space instructions per request of sockscale binaries, counted by callgrind: a measure
that does not depend on the machine's speed or on what else runs on it (for a VM without a
PMU, where `perf stat -e instructions` says <not supported>, or a machine shared with builds).

Each binary serves `--proto http --model MODEL --threads 1` (HTTPS with --tls) under
`valgrind --tool=callgrind --instr-atstart=no`; instrumentation is switched on once the server
answers, wrk -t1 runs for --duration seconds at --conns connections (c=1 by default: one
request a turn, so the per-request path is counted without the batching that depends on the
client's speed), then switched off. Instructions are divided by wrk's requests: in total
(which carries the handshakes of the --conns connections, amortised over however many requests
the run made), and in the binary's own code (functions `sockscale_*`, which do not depend on
how many requests the run made), with the functions whose count per request differs most
between the first binary and each other.

Usage: bench/instructions_per_request.py [--tls] [--conns N] [--duration S] NAME=BINARY ...
e.g.   bench/instructions_per_request.py --tls before=/tmp/mid/target/release/sockscale after=target/release/sockscale
Writes bench-results/instructions_per_request-<stamp>/results.json (and the callgrind files).
"""
import argparse
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import common

GROUPS = [("own code (sockscale_*)", r"sockscale_"), ("rustls", r"rustls::"),
          ("libc (malloc, memcpy, memset)", r"malloc|free|unlink_chunk|alloc_perturb|mem(cpy|set|move)"),
          ("ring and the rest", r".")]


def functions(path):
    """Self instructions per function of a callgrind file."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", str(path)],
                         capture_output=True, text=True, check=True).stdout
    fns = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            name = re.sub(r"\s*\[[^\]]*\]$", "", m.group(2))
            name = name.split(":", 1)[1] if name.startswith(("/", ".")) and ":" in name else name
            fns[name] = fns.get(name, 0) + int(m.group(1).replace(",", ""))
    return fns


def measure(name, binary, args, out_dir, cert):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cg = out_dir / f"callgrind-{name}.out"
    tls = ["--tls-cert", str(cert / "cert.pem"), "--tls-key", str(cert / "key.pem")] if args.tls else []
    server = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, "valgrind", "--tool=callgrind", "--instr-atstart=no",
                               f"--callgrind-out-file={cg}", str(binary), "serve", "--listen", f"127.0.0.1:{port}",
                               "--proto", "http", "--model", args.model, "--threads", "1", *tls],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scheme = "https" if args.tls else "http"
    try:
        common.wait_port(port, timeout=60)
        time.sleep(0.5)
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        out, _, _ = common.measure(server.pid, ["wrk", "-t1", f"-c{args.conns}", f"-d{args.duration}s",
                                                f"{scheme}://127.0.0.1:{port}/"])
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True)
    finally:
        common.stop(server)
    requests = common.parse_wrk(out)["requests"]
    fns = functions(cg)
    groups = dict.fromkeys((g for g, _ in GROUPS), 0)
    for fn, ir in fns.items():
        group = next(g for g, pattern in GROUPS if re.search(pattern, fn))
        groups[group] += ir
    return {"name": name, "binary": str(binary), "requests": requests,
            "per_request": {g: round(v / requests, 1) for g, v in groups.items()},
            "total_per_request": round(sum(fns.values()) / requests, 1),
            "functions_per_request": {fn: round(ir / requests, 2) for fn, ir in fns.items() if ir / requests >= 0.5}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binaries", nargs="+", metavar="NAME=BINARY")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--model", default="epoll")
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--duration", type=int, default=5)
    args = ap.parse_args()
    common.ensure_debs(["valgrind", "wrk"])
    out_dir = common.results_dir("instructions_per_request")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        cert = Path(tmp)
        first = args.binaries[0].split("=", 1)[1]
        if args.tls:
            subprocess.run([first, "cert", "--out", str(cert)], check=True, capture_output=True)
        for item in args.binaries:
            name, binary = item.split("=", 1)
            runs.append(measure(name, binary, args, out_dir, cert))
    common.write_json(out_dir / "results.json", {"machine": common.machine(), "tls": args.tls, "model": args.model,
                                                 "conns": args.conns, "duration_s": args.duration, "runs": runs})
    header = ["binary", "requests", "total"] + [g for g, _ in GROUPS]
    print(common.markdown_table(header, [[r["name"], r["requests"], f"{r['total_per_request']:,.0f}"] +
                                         [f"{v:,.1f}" for v in r["per_request"].values()] for r in runs]))
    base = runs[0]["functions_per_request"]
    for r in runs[1:]:
        mine = r["functions_per_request"]
        own = [(mine.get(f, 0) - base.get(f, 0), f) for f in set(base) | set(mine) if f.startswith("sockscale_")]
        own.sort(key=lambda d: -abs(d[0]))
        print(f"\nown code, {r['name']} - {runs[0]['name']}, instructions per request:")
        for d, f in own[:8]:
            if abs(d) >= 1:
                print(f"  {d:+7.1f}  {f}")


if __name__ == "__main__":
    main()
