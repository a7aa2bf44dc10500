#!/usr/bin/env python3
"""HTTP requests per server CPU-second of two sockscale binaries, side by side: did a change
keep the speed?

The two binaries (--before, --after; default: the release build of this checkout as "after")
serve the same fixed response on the same model with one thread, pinned to core 0; wrk -t1
(keep-alive, c=100), h2load --h1 -m16 (pipelined, c=100) and wrk -t1 with a new connection per
request (`Connection: close`, c=50) run on core 1. Server CPU comes
from /proc/PID/stat. Every scenario runs --repeat times with the binaries interleaved (before,
after, before, ...); the table gives medians, and the median and range of the after/before
ratio taken within each adjacent pair.

With --tls both serve HTTPS (a certificate from `sockscale cert`, ECDSA P-256) and the
scenarios are wrk over https, keep-alive at c=100 and a new connection per request
(`Connection: close`) at c=50.

Build the "before" binary from a worktree of the old commit, e.g.
    git worktree add /tmp/before 7e5cab0 && (cd /tmp/before && cargo build --release -p sockscale)
    bench/ab_binaries.py --before /tmp/before/target/release/sockscale --models epoll,uring

Writes bench-results/ab_binaries-<stamp>/results.json and prints a markdown table per model.
"""
import argparse
import os
import subprocess
import tempfile

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the baseline sockscale binary")
    ap.add_argument("--after", default=str(common.BIN), help="the changed binary (default: this checkout's release build)")
    ap.add_argument("--models", default="epoll,uring")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tls", action="store_true", help="serve HTTPS and measure wrk over https")
    args = ap.parse_args()
    for path in (args.before, args.after):
        if not os.access(path, os.X_OK):
            ap.error(f"{path}: not an executable sockscale binary")
    common.ensure_debs(["wrk", "nghttp2-client"])
    if args.after == str(common.BIN):
        common.build_sockscale()
    out_dir = common.results_dir("ab_binaries")
    results = {"machine": common.machine(), "before": args.before, "after": args.after,
               "duration_s": args.duration, "repeat": args.repeat, "models": {}}
    tables = []
    certs = tempfile.TemporaryDirectory()
    tls = []
    if args.tls:
        subprocess.run([args.after, "cert", "--out", certs.name], check=True, capture_output=True)
        tls = ["--tls-cert", f"{certs.name}/cert.pem", "--tls-key", f"{certs.name}/key.pem"]
    for model in [m for m in args.models.split(",") if m]:
        serve = ["--proto", "http", "--model", model, "--threads", "1", *tls]
        servers = {}
        try:
            for name, binary in (("before", args.before), ("after", args.after)):
                servers[name] = common.start_sockscale(serve, binary=binary)
            if args.tls:
                https = lambda conns, extra: lambda url: ["wrk", "-t1", f"-c{conns}", f"-d{args.duration}s", *extra,
                                                         url.replace("http://", "https://")]
                scenarios = [("wrk https", 100, https(100, ()), common.parse_wrk),
                             ("wrk https Connection: close", 50, https(50, ("-H", "Connection: close")), common.parse_wrk)]
            else:
                bodies = {name: common.fetch_body(port) for name, (_, port) in servers.items()}
                assert bodies["before"] == bodies["after"], "both binaries must serve the same response"
                # The third scenario opens a connection per request: admission, the worker core and
                # the close path run once a request, so a cost there shows.
                scenarios = [common.wrk_scenario(100, args.duration), common.h2load_scenario(100, args.duration),
                             common.wrk_scenario(50, args.duration, ("-H", "Connection: close"))]
            rows = common.compare(servers, scenarios, args.repeat)
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
        failed = [r for r in rows if r.get("socket_errors") or r.get("non_2xx") or r.get("failed")]
        results["models"][model] = {"rows": rows, "runs_with_errors": len(failed)}
        table = common.ratio_table(rows, "before", "after")
        note = f"\n{len(failed)} runs had errors: see results.json" if failed else ""
        tables.append(f"### --model {model}\n\n{table}{note}")
    common.write_json(out_dir / "results.json", results)
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
