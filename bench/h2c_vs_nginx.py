#!/usr/bin/env python3
"""HTTP/2 requests per server CPU-second: sockscale (one thread) against nginx (one worker),
measured with h2load.

sockscale serves `--proto http` (HTTP/2 is on by default: h2c with prior knowledge on the same
port) with its generated 4096-byte body, on --models (epoll; uring too if asked); nginx 1.22
serves the same 4096 bytes from a static file, configured for h2c (`listen PORT http2;`:
HTTP/2 without TLS, which is prior knowledge: no Upgrade). Every server is pinned to core 0;
h2load runs on core 1: `h2load -t1 -c100 -m16 -D10` (100 connections, 16 streams in flight on
each). Server CPU comes from /proc/PID/stat, so the ratio says what each server spends per
request, not how fast the client is.

With --tls both serve h2 over TLS instead (ALPN h2; the same ECDSA P-256 certificate, made by
`sockscale cert`; nginx `listen PORT ssl http2;`); keep-alive, so the handshakes are 100 per run.

Every scenario runs --repeat times with the servers interleaved (nginx, sockscale epoll,
[sockscale uring,] nginx, ...), so that the machine's drift hits them alike; the table gives the
median of each server's requests/s, CPU-seconds and requests per CPU-second (with its range),
and the median and range of sockscale/nginx taken within each repetition. The goal (issue 25)
is sockscale/nginx >= 1.5x.

The client side (`sockscale load http --http2` against h2load, per client CPU-second) is
bench/h2_clients.py.

Usage: bench/h2c_vs_nginx.py [--duration SECS] [--repeat N] [--models epoll,uring] [--conns N]
                             [--streams M] [--tls]
Writes bench-results/h2c_vs_nginx-<stamp>/results.json, then prints a markdown table.
"""
import argparse
import json
import re
import socket
import statistics
import subprocess
import tempfile
from pathlib import Path

import common

GOAL = 1.5


def h2load_command(conns, streams, duration):
    """h2load over HTTP/2 (h2c by prior knowledge for http://, ALPN h2 for https://), one thread."""
    return lambda url: ["h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-D{duration}", url]


def parse_h2load(out):
    """h2load's figures, and which protocol it spoke (h2 or h2c: never HTTP/1.1 here)."""
    r = common.parse_h2load(out)
    proto = re.search(r"Application protocol: (\S+)", out)
    r["protocol"] = proto.group(1) if proto else None
    if r["protocol"] not in ("h2", "h2c"):
        raise RuntimeError(f"h2load did not speak HTTP/2 (protocol {r['protocol']!r}): {out[-2000:]}")
    # Every answer a 200 of the whole body: 2xx count and DATA bytes per request, kept with the run.
    ok = re.search(r"status codes: (\d+) 2xx", out)
    data = re.search(r"traffic: .*?\((\d+)\) data", out)
    r["status_2xx"] = int(ok.group(1)) if ok else 0
    r["data_bytes_per_request"] = round(int(data.group(1)) / r["requests"], 1) if data and r["requests"] else None
    # (h2load may count one more 2xx status than succeeded requests: a stream cut at -D's end.)
    r["failed"] += max(0, r["requests"] - r["status_2xx"])
    return r


def check_server(url, tls):
    """One request with h2load -n1: HTTP/2, a 200 and a 4096-byte body (h2load counts the
    body's bytes in `traffic: ... data`)."""
    out = subprocess.run(["h2load", "-n1", "-c1", url], capture_output=True, text=True, check=True).stdout
    proto = re.search(r"Application protocol: (\S+)", out)
    done = re.search(r"requests: 1 total, 1 started, 1 done, 1 succeeded", out)
    status = re.search(r"status codes: 1 2xx", out)
    data = re.search(r"traffic: .*?\((\d+)\) data", out)
    if not (proto and proto.group(1) in ("h2", "h2c") and done and status and data and data.group(1) == "4096"):
        raise RuntimeError(f"{url}: expected one 200 of 4096 bytes over HTTP/2: {out[-2000:]}")
    return proto.group(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx_h2(workdir, body, tls):
    """nginx (one worker, the benchmarks' configuration) serving `body` over HTTP/2: h2c on
    `listen ... http2`, or h2 over TLS on `listen ... ssl http2`."""
    (workdir / "page.html").write_bytes(body)
    port = free_port()
    extra = common.PAGE_NGINX
    if tls:
        extra += (f" ssl_certificate {tls[0]}; ssl_certificate_key {tls[1]}; ssl_protocols TLSv1.2 TLSv1.3;"
                  " ssl_ecdh_curve X25519; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;")
    # The HTTP/2 limits nginx would otherwise apply: 128 streams a connection (as sockscale's
    # --max-streams); keepalive_requests (set without limit by the common configuration) also
    # bounds the requests of an HTTP/2 connection since 1.19.7.
    extra += " http2_max_concurrent_streams 128;"
    conf = common.nginx_conf(workdir, port, extra=extra)
    listen = f"listen 127.0.0.1:{port} backlog=4096;"
    assert listen in conf
    conf = conf.replace(listen, f"listen 127.0.0.1:{port} {'ssl ' if tls else ''}http2 backlog=4096;")
    (workdir / "nginx.conf").write_text(conf)
    proc = subprocess.Popen(["taskset", "-c", common.SERVER_CPU, "nginx", "-c", str(workdir / "nginx.conf"),
                             "-p", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    common.wait_port(port)
    return proc, port


def summary(rows, servers, baseline="nginx"):
    """Per scenario and server: medians (and the range of requests per CPU-second), and the
    contender/baseline ratio of requests per CPU-second within each repetition."""
    med = statistics.median
    table = []
    for label, conns in dict.fromkeys((r["tool"], r["connections"]) for r in rows):
        runs = [r for r in rows if r["tool"] == label and r["connections"] == conns]
        base = [r for r in runs if r["server"] == baseline]
        for name in servers:
            mine = [r for r in runs if r["server"] == name]
            per_cpu = [r["req_per_cpu_s"] for r in mine]
            entry = {"scenario": label, "connections": conns, "server": name,
                     "rps": med(r["rps"] for r in mine), "server_cpu_s": med(r["server_cpu_s"] for r in mine),
                     "server_cpu_pct": med(r["server_cpu_pct"] for r in mine),
                     "req_per_cpu_s": med(per_cpu), "req_per_cpu_s_range": [min(per_cpu), max(per_cpu)]}
            if name != baseline:
                ratios = [m["req_per_cpu_s"] / b["req_per_cpu_s"] for b, m in zip(base, mine)]
                entry.update(ratio=med(ratios), ratio_range=[min(ratios), max(ratios)],
                             goal_met=med(ratios) >= GOAL)
            table.append(entry)
    return table


def markdown(table, baseline="nginx"):
    rows = []
    for e in table:
        ratio = "1.00x" if e["server"] == baseline else \
            f"**{e['ratio']:.2f}x** ({e['ratio_range'][0]:.2f}–{e['ratio_range'][1]:.2f})"
        lo, hi = e["req_per_cpu_s_range"]
        rows.append([e["scenario"], e["server"], f"{e['rps']:,.0f}", f"{e['server_cpu_s']:.2f}",
                     f"{e['server_cpu_pct']:.0f}%", f"{e['req_per_cpu_s']:,.0f} ({lo:,}–{hi:,})", ratio])
    header = ["scenario", "server", "req/s", "server CPU s", "server CPU", "req per server CPU-s, median (range)",
              f"/ {baseline}, median (range)"]
    return common.markdown_table(header, rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", default="epoll", help="sockscale models, comma-separated (e.g. epoll,uring)")
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--streams", type=int, default=16, help="h2load -m: streams in flight per connection")
    ap.add_argument("--tls", action="store_true", help="h2 over TLS (ALPN) instead of h2c")
    args = ap.parse_args()
    common.ensure_debs(["nginx", "nghttp2-client"])
    common.build_sockscale()
    out_dir = common.results_dir("h2c_vs_nginx" + ("-tls" if args.tls else ""))
    scheme = "https" if args.tls else "http"
    models = [m for m in args.models.split(",") if m]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tls_args, tls = [], None
        if args.tls:
            subprocess.run([str(common.BIN), "cert", "--out", str(tmp / "cert")], check=True, capture_output=True)
            tls = (tmp / "cert" / "cert.pem", tmp / "cert" / "key.pem")
            tls_args = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
        servers = {}
        try:
            for model in models:
                servers[f"sockscale {model}"] = common.start_sockscale(
                    ["--proto", "http", "--model", model, "--threads", "1", "--http2", "on", *tls_args])
            # The same 4096 bytes: sockscale's generated page, fetched over HTTP/1.1 (cleartext,
            # a server of its own, so that --tls needs no client certificate handling here).
            plain, plain_port = common.start_sockscale(["--proto", "http", "--model", "epoll", "--threads", "1"])
            try:
                body = common.fetch_body(plain_port)
            finally:
                common.stop(plain)
            servers = {"nginx": start_nginx_h2(tmp, body, tls), **servers}
            protocols = {name: check_server(f"{scheme}://127.0.0.1:{port}/", args.tls)
                         for name, (_, port) in servers.items()}
            command = h2load_command(args.conns, args.streams, args.duration)
            label = f"h2load {'h2 (TLS)' if args.tls else 'h2c'} -m{args.streams}"
            scenario = (label, args.conns, lambda url: command(url.replace("http://", f"{scheme}://")), parse_h2load)
            rows = common.compare(servers, [scenario], args.repeat)
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
    table = summary(rows, list(servers))
    failed = [r for r in rows if r.get("failed")]
    common.write_json(out_dir / "results.json",
                      {"machine": common.machine(), "duration_s": args.duration, "repeat": args.repeat,
                       "connections": args.conns, "streams": args.streams, "tls": args.tls, "models": models,
                       "protocols": protocols, "nginx": subprocess.run(["nginx", "-v"], capture_output=True,
                                                                       text=True).stderr.strip(),
                       "rows": rows, "summary": table, "runs_with_failures": len(failed)})
    print(f"protocols h2load spoke: {', '.join(f'{k} {v}' for k, v in protocols.items())}")
    print(markdown(table))
    for e in table:
        if "ratio" in e:
            print(f"{e['server']}: {e['ratio']:.2f}x nginx per server CPU-second, goal {GOAL}x "
                  f"{'met' if e['goal_met'] else 'NOT met'}")
    if failed:
        print(f"\n{len(failed)} runs had failed or errored requests: see results.json")


if __name__ == "__main__":
    main()
