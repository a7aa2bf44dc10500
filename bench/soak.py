#!/usr/bin/env python3
"""Soak: mixed load over every model for a long time; descriptors and memory must not grow.

For each model (its share of --duration, 600 s in total by default) three servers run pinned to
core 0: TCP echo, HTTP and UDP echo (UDP is skipped for a model whose `sockscale serve` refuses
it, e.g. uring64, detected by the server exiting with an error message). Every server gets short
timeouts (--idle-timeout 5, --header-timeout 3, --send-timeout 3) so misbehaving clients are reaped
during the run, and --stats-interval 1 so its own connection gauge can be read from stdout
(reading stats lines, unlike scraping --metrics, opens no descriptor in the server).

Clients, all pinned to core 1 and aimed at 127.0.0.1 only, run side by side for the load phase:

- echo, 16 long-lived connections, 512-byte messages, depth 2, open loop, every byte verified;
- echo, 4 long-lived connections, 40,000-byte messages (more than one 16 KiB receive buffer);
- many short connections, in bounded runs one after another: `sockscale load echo -c 32 -n 320`
  and `sockscale load http --no-keepalive -c 4 -n 300` (a new connection per request);
- HTTP keep-alive (16 connections) and HTTP pipelined (4 connections, 8 deep);
- UDP echo, 4 sockets;
- misbehaving clients from Python (this file, --misbehave): connect and reset (SO_LINGER 0) with
  and without data in flight, HTTP heads half sent and left idle, connections that never send,
  connect-and-close, garbage HTTP, echo floods that never read (the server must cut them off
  after --send-timeout), UDP datagrams of odd sizes whose answers are never read.

A short warm-up runs the same mix first, so that one-time allocations (buffer pool pages, thread
stacks and malloc arenas, io_uring rings, tokio's worker state) are made before the start values
are taken. Start and end values are taken quiescent: every server's connection gauge at 0 and its
descriptor count unchanged over 3 one-second samples. During the load, fds, RSS, threads and the
gauge are sampled every --sample-interval seconds.

Verdict per server: descriptors at the end equal to the start (--fd-tolerance, default 0: in
quiescence a server holds only its listeners, epoll/uring instances, eventfds and the like, so any
difference is a leaked descriptor); RSS growth at most max(2 MiB, 10% of start): glibc keeps
freed heap and per-thread arenas, caches exited threads' stacks and trims lazily, so a quiescent
RSS moves by a few hundred KiB to ~1 MiB between two idle moments with nothing leaked, while a
leak of even a few bytes per connection over the ~10^5 connections a 10-minute soak makes
per model passes 2 MiB; threads back to the start count (±1 for a helper thread that happens to be
alive) -- per-connection or per-group threads that never exit show here; the server alive to the
end and exiting 0 on SIGTERM; no verification mismatch and no bad HTTP response in any load run.
Other load errors (resets, timeouts) and UDP loss are reported, not judged: the misbehaving
clients share the server with them.

Raw results go to bench-results/soak-<timestamp>.json first; the tables are drawn from that file.
Exit status 1 when any model fails.

Usage: bench/soak.py [--duration SECS] [--models a,b,...] [--sample-interval S]
       bench/soak.py --report bench-results/soak-<timestamp>.json   (redraw the tables)
"""
import argparse
import json
import os
import random
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import common

PROTOS = ["echo", "http", "udp"]
IDLE_TIMEOUT = 5
HEADER_TIMEOUT = 3
SEND_TIMEOUT = 3
RSS_FLOOR_KIB = 2048
RSS_FRACTION = 0.10
THREAD_TOLERANCE = 1
PRIME_CONNS = 192
QUIET_MAX_S = IDLE_TIMEOUT + HEADER_TIMEOUT + SEND_TIMEOUT + 10
SERVER_FLAGS = ["--threads", "1", "--idle-timeout", str(IDLE_TIMEOUT), "--header-timeout", str(HEADER_TIMEOUT),
                "--send-timeout", str(SEND_TIMEOUT), "--drain-timeout", "2", "--stats-interval", "1", "--max-conns", "5000"]


# --------------------------------------------------------------------------------------------
# Server process: start, watch through /proc and its stats lines, stop.

class Server:
    def __init__(self, model, proto, log_dir):
        self.model, self.proto = model, proto
        self.stats = {}
        self.stats_time = 0.0
        self.final = None
        self.lines = 0
        self.peak_connections = 0  # the largest gauge seen in the stats lines (1 s apart)
        self.log_path = log_dir / f"{model}-{proto}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["taskset", "-c", common.SERVER_CPU, str(common.BIN), "serve", "--listen", "127.0.0.1:0",
             "--model", model, "--proto", proto, *SERVER_FLAGS],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=dict(os.environ, RUST_LOG="warn"))
        line = self.proc.stdout.readline()
        m = re.match(r"listening on .*:(\d+)$", line.strip())
        if not m:
            self.proc.wait(timeout=10)
            self.log.close()
            message = (self.log_path.read_text().strip() or line.strip())[-500:]
            raise ServerRefused(f"exit {self.proc.returncode}: {message}")
        self.port = int(m.group(1))
        self.pid = self.proc.pid
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = line.split()
            if parts and parts[0] in ("stats", "final"):
                values = {k: int(v) for k, v in (p.split("=", 1) for p in parts[1:] if "=" in p) if v.isdigit()}
                if parts[0] == "final":
                    self.final = values
                else:
                    self.stats, self.stats_time = values, time.time()
                    self.peak_connections = max(self.peak_connections, values.get("connections", 0))
                self.lines += 1

    def alive(self):
        return self.proc.poll() is None

    def sample(self):
        """fds, RSS, threads of the server process and its latest connection gauge."""
        pid = self.pid
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {"t": round(time.time(), 2), "fds": fds, "rss_kib": int(fields["VmRSS"].split()[0]),
                "threads": int(fields["Threads"]), "connections": self.stats.get("connections"),
                "buffers_in_use": self.stats.get("buffers_in_use")}

    def stop(self):
        rc = None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                rc = "killed after 15 s"
        else:
            rc = self.proc.returncode
        self.reader.join(timeout=5)
        self.log.close()
        return rc


class ServerRefused(Exception):
    pass


def wait_quiescent(servers, max_wait, min_wait=3.0):
    """Wait until every TCP server's gauge is 0 (from a stats line newer than the wait) and every
    server's fd count is unchanged over 3 one-second samples; returns (samples, quiet, waited)."""
    start = time.time()
    time.sleep(min_wait - 2)
    history = []
    while True:
        time.sleep(1)
        now = {s.proto: s.sample() for s in servers}
        history.append(now)
        fresh = all(s.proto == "udp" or (s.stats_time > start and s.stats.get("connections") == 0) for s in servers)
        stable = len(history) >= 3 and all(
            h[p] is not None and h[p]["fds"] == now[p]["fds"] for h in history[-3:] for p in now)
        if fresh and stable:
            return now, True, round(time.time() - start, 1)
        if time.time() - start > max_wait:
            return now, False, round(time.time() - start, 1)


# --------------------------------------------------------------------------------------------
# Load: sockscale load processes and the misbehaving clients, all on the client core.

def load_cmd(kind, target, seconds, *extra, json_path):
    # --allow-errors: the soak counts errors from the JSON; exit 3 would only hide them.
    return ["taskset", "-c", common.CLIENT_CPU, str(common.BIN), "load", kind, target, "-t", "1", "--allow-errors", *extra,
            *(["-d", str(seconds)] if seconds else []), "--json", str(json_path)]


def start_loads(ports, seconds, tmp, tag):
    """Long-running load processes for one phase; returns [(name, Popen, json_path)]."""
    echo, http, udp = (f"127.0.0.1:{ports['echo']}", f"http://127.0.0.1:{ports['http']}/",
                       f"127.0.0.1:{ports['udp']}" if "udp" in ports else None)
    specs = [
        ("echo-long", "echo", echo, ["-c", "16", "-l", "512", "--depth", "2", "-R", "2000"]),
        ("echo-big", "echo", echo, ["-c", "4", "-l", "40000", "-R", "100"]),
        ("http-keepalive", "http", http, ["-c", "16", "-R", "1500"]),
        ("http-pipelined", "http", http, ["-c", "4", "--pipeline", "8", "-R", "1000"]),
    ]
    if udp:
        specs.append(("udp", "udp", udp, ["-c", "4", "-l", "512", "--depth", "2", "-R", "2000"]))
    runs = []
    for name, kind, target, extra in specs:
        path = tmp / f"{tag}-{name}.json"
        proc = subprocess.Popen(load_cmd(kind, target, seconds, *extra, json_path=path),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        runs.append((name, proc, path))
    return runs


def short_conn_loop(ports, deadline, tmp, tag, results, stop_event, max_runs=5000):
    """Many short connections, in bounded runs until the deadline: 32 echo connections x 10 messages,
    then 300 HTTP requests on a new connection each (4 at a time), in turn. (Bounded runs rather
    than one `load http --no-keepalive -R`: that combination ignores -R and runs closed loop.)"""
    runs = [("echo-short", ["echo", f"127.0.0.1:{ports['echo']}", "-c", "32", "-n", "320", "-l", "256"]),
            ("http-close", ["http", f"http://127.0.0.1:{ports['http']}/", "-c", "4", "-n", "300", "--no-keepalive"])]
    for i in range(max_runs):
        if time.time() > deadline - 2 or stop_event.is_set():
            break
        name, (kind, target, *extra) = runs[i % len(runs)]
        path = tmp / f"{tag}-{name}-{i}.json"
        proc = subprocess.run(load_cmd(kind, target, None, *extra, "--timeout", "5", json_path=path),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)
        results.append(collect(name, proc.returncode, proc.stderr, path))
        time.sleep(0.1)


def collect(name, rc, stderr, path):
    r = {"name": name, "rc": rc}
    try:
        data = json.loads(Path(path).read_text())
        Path(path).unlink()
    except (OSError, ValueError):
        r["failure"] = (stderr or "").strip()[-400:] or "no report"
        return r
    r.update({"completed": data["requests"]["completed"], "sent": data["requests"]["sent"],
              "connected": data["connections"]["connected"], "errors": data["errors"],
              "udp_lost": data["udp"]["lost"] if data.get("udp") else 0, "duration_s": round(data["duration_s"], 2)})
    if data.get("statuses"):
        r["statuses"] = data["statuses"]
    if rc != 0:
        r["failure"] = (stderr or "").strip()[-400:]
    return r


def prime(ports):
    """Hold PRIME_CONNS connections (each answered once) on the echo and HTTP servers at once, then
    close them: the groups-of-64 models (poll64, uring64) keep a group's thread and descriptors
    (2 and 3 fds) after its connections close -- bounded by the peak, not a leak -- and the
    blocking model keeps thread stacks and malloc arenas, so the start values must already include
    the most the load can make them use. The load holds fewer than 100 connections per server."""
    proc = subprocess.run(["taskset", "-c", common.CLIENT_CPU, sys.executable, str(Path(__file__).resolve()), "--prime",
                           "--echo-port", str(ports["echo"]), "--http-port", str(ports["http"])],
                          capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() or proc.stderr.strip()[-300:]


def run_phase(ports, seconds, tmp, tag, servers=None, sample_interval=None, samples=None):
    """Run the whole mix for `seconds`; sample the servers meanwhile; returns the load results."""
    deadline = time.time() + seconds
    runs = start_loads(ports, seconds, tmp, tag)
    misbehave = subprocess.Popen(
        ["taskset", "-c", common.CLIENT_CPU, sys.executable, str(Path(__file__).resolve()), "--misbehave",
         "--echo-port", str(ports["echo"]), "--http-port", str(ports["http"]),
         "--udp-port", str(ports.get("udp", 0)), "--duration", str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    short_results = []
    stop_event = threading.Event()
    shorts = threading.Thread(target=short_conn_loop, args=(ports, deadline, tmp, tag, short_results, stop_event), daemon=True)
    shorts.start()
    next_sample = time.time() + (sample_interval or 1e9)
    while time.time() < deadline:
        time.sleep(0.2)
        if servers and time.time() >= next_sample:
            next_sample += sample_interval
            for s in servers:
                v = s.sample()
                if v:
                    samples[s.proto].append(v)
    results = []
    for name, proc, path in runs:
        try:
            _, err = proc.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        results.append(collect(name, proc.returncode, err, path))
    try:
        out, err = misbehave.communicate(timeout=60)
        mis = json.loads(out) if misbehave.returncode == 0 else {"failure": err[-400:]}
    except (subprocess.TimeoutExpired, ValueError) as e:
        misbehave.kill()
        misbehave.communicate()
        mis = {"failure": repr(e)}
    stop_event.set()
    shorts.join(timeout=90)
    return results + short_results, mis


def summarize_loads(results):
    total = {"runs": len(results), "failed_runs": [], "completed": 0, "connected": 0, "udp_lost": 0, "errors": {}}
    per_name = {}
    for r in results:
        if r.get("failure") is not None:
            total["failed_runs"].append({"name": r["name"], "rc": r["rc"], "failure": r["failure"]})
        if "completed" not in r:
            continue
        total["completed"] += r["completed"]
        total["connected"] += r["connected"]
        total["udp_lost"] += r["udp_lost"]
        for k, v in r["errors"].items():
            total["errors"][k] = total["errors"].get(k, 0) + v
        p = per_name.setdefault(r["name"], {"runs": 0, "completed": 0, "connected": 0, "errors": 0, "udp_lost": 0})
        p["runs"] += 1
        p["completed"] += r["completed"]
        p["connected"] += r["connected"]
        p["errors"] += sum(r["errors"].values())
        p["udp_lost"] += r["udp_lost"]
    total["by_client"] = per_name
    return total


# --------------------------------------------------------------------------------------------
# One model.

def judge(start, end, max_threads_start):
    reasons = []
    if start is None or end is None:
        return ["no sample (server gone)"]
    if end["fds"] - start["fds"] > ARGS.fd_tolerance or end["fds"] < start["fds"] - ARGS.fd_tolerance:
        reasons.append(f"fds {start['fds']}->{end['fds']}")
    bound = max(RSS_FLOOR_KIB, RSS_FRACTION * start["rss_kib"])
    if end["rss_kib"] - start["rss_kib"] > bound:
        reasons.append(f"RSS +{end['rss_kib'] - start['rss_kib']} KiB > {bound:.0f} KiB")
    if end["threads"] > max_threads_start + THREAD_TOLERANCE:
        reasons.append(f"threads {start['threads']}->{end['threads']}")
    return reasons


def soak_model(model, share, tmp, log_dir):
    t0 = time.time()
    rec = {"model": model, "share_s": round(share, 1), "servers": {}, "skipped": {}, "failures": []}
    servers = []
    try:
        for proto in PROTOS:
            try:
                servers.append(Server(model, proto, log_dir))
            except ServerRefused as e:
                if proto == "udp":
                    rec["skipped"][proto] = str(e)
                    print(f"[{model}] udp skipped: {e}", flush=True)
                else:
                    rec["failures"].append(f"{proto} server did not start: {e}")
                    return rec
        ports = {s.proto: s.port for s in servers}
        warm = min(8.0, max(3.0, share * 0.12))
        load_s = max(10.0, share - warm - 15)
        print(f"[{model}] warm-up {warm:.0f} s, then load {load_s:.0f} s", flush=True)
        warm_results, warm_mis = run_phase(ports, warm, tmp, f"{model}-warm")
        primed = prime(ports)
        rec["warmup"] = {"seconds": warm, "loads": summarize_loads(warm_results), "misbehave": warm_mis, "prime": primed}
        start, quiet, waited = wait_quiescent(servers, QUIET_MAX_S)
        rec["start_quiescent"], rec["start_wait_s"] = quiet, waited
        for s in servers:
            s.peak_connections = 0
        samples = {s.proto: [] for s in servers}
        results, mis = run_phase(ports, load_s, tmp, f"{model}-load", servers, ARGS.sample_interval, samples)
        loads = summarize_loads(results)
        rec["load"] = {"seconds": round(load_s, 1), "loads": loads, "misbehave": mis}
        end, quiet, waited = wait_quiescent(servers, QUIET_MAX_S)
        rec["end_quiescent"], rec["end_wait_s"] = quiet, waited
        for s in servers:
            st, en = start[s.proto], end[s.proto]
            reasons = judge(st, en, st["threads"] if st else 0)
            if not s.alive():
                reasons.append(f"server exited during the run ({s.proc.returncode})")
            rss = [x["rss_kib"] for x in samples[s.proto]] + [v["rss_kib"] for v in (st, en) if v]
            rec["servers"][s.proto] = {"start": st, "end": en, "samples": samples[s.proto], "max_rss_kib": max(rss) if rss else None,
                                       "max_fds": max([x["fds"] for x in samples[s.proto]] + [0]),
                                       "max_threads": max([x["threads"] for x in samples[s.proto]] + [0]),
                                       "peak_connections": s.peak_connections, "stats_end": dict(s.stats), "reasons": reasons}
            if s.proto != "udp" and s.peak_connections >= PRIME_CONNS:
                rec.setdefault("notes", []).append(
                    f"{s.proto}: {s.peak_connections} connections at once, not fewer than the {PRIME_CONNS} primed")
        if not rec["end_quiescent"]:
            rec["failures"].append(f"not quiescent {QUIET_MAX_S} s after the load stopped")
        if loads["errors"].get("verify_mismatch", 0):
            rec["failures"].append(f"{loads['errors']['verify_mismatch']} verification mismatches")
        if loads["errors"].get("bad_response", 0):
            rec["failures"].append(f"{loads['errors']['bad_response']} bad HTTP responses")
        if loads["failed_runs"]:
            rec["failures"].append(f"{len(loads['failed_runs'])} load runs failed: {loads['failed_runs'][0]['failure'][:200]}")
        if mis.get("failure"):
            rec["failures"].append(f"misbehaving clients failed: {mis['failure'][:200]}")
    finally:
        for s in servers:
            rc = s.stop()
            if s.proto in rec["servers"]:
                rec["servers"][s.proto]["exit"] = rc
                rec["servers"][s.proto]["final"] = s.final
                if rc != 0:
                    rec["servers"][s.proto]["reasons"].append(f"exit {rc} on SIGTERM")
    for proto, srv in rec["servers"].items():
        rec["failures"] += [f"{proto}: {r}" for r in srv["reasons"]]
    rec["pass"] = not rec["failures"]
    rec["wall_s"] = round(time.time() - t0, 1)
    print(f"[{model}] {'PASS' if rec['pass'] else 'FAIL ' + '; '.join(rec['failures'])} ({rec['wall_s']} s)", flush=True)
    return rec


# --------------------------------------------------------------------------------------------
# Tables from the JSON.

def mib(kib):
    return f"{kib / 1024:.1f}"


def tables(data):
    rows, detail = [], []
    for rec in data["models"]:
        srv = rec["servers"]
        ok = [p for p in srv.values() if p["start"] and p["end"]]
        if not ok:
            rows.append([rec["model"], "-", "-", "-", "-", "-", "-", "FAIL: " + "; ".join(rec["failures"])])
            continue
        fd0, fd1 = sum(p["start"]["fds"] for p in ok), sum(p["end"]["fds"] for p in ok)
        r0, r1 = sum(p["start"]["rss_kib"] for p in ok), sum(p["end"]["rss_kib"] for p in ok)
        loads = rec["load"]["loads"]
        errors = sum(loads["errors"].values())
        mis = rec["load"]["misbehave"]
        verdict = "pass" if rec["pass"] else "FAIL: " + "; ".join(rec["failures"])
        # The servers are sampled together, so the i-th samples add up to the model's RSS at one moment.
        peak = max([r0, r1] + [sum(x["rss_kib"] for x in at) for at in zip(*(p["samples"] for p in ok))])
        rows.append([rec["model"], f"{fd0}→{fd1}", f"{mib(r0)}→{mib(r1)} MiB", f"{mib(peak)} MiB",
                     f"{loads['completed']:,}", loads["errors"].get("verify_mismatch", 0),
                     f"{errors:,} / {loads['udp_lost']:,}" + (f" (+{len(loads['failed_runs'])} failed runs)" if loads["failed_runs"] else ""),
                     verdict])
        for proto, p in srv.items():
            if not (p["start"] and p["end"]):
                continue
            detail.append([rec["model"], proto, f"{p['start']['fds']}→{p['end']['fds']} (max {p['max_fds']})",
                           f"{p['start']['rss_kib']:,}→{p['end']['rss_kib']:,} (max {p['max_rss_kib']:,})",
                           f"{p['start']['threads']}→{p['end']['threads']} (max {p['max_threads']})",
                           f"{(p.get('final') or {}).get('accepted', '-'):,}" if isinstance((p.get('final') or {}).get('accepted'), int) else "-",
                           "pass" if not p["reasons"] else "; ".join(p["reasons"])])
        for proto, why in rec.get("skipped", {}).items():
            detail.append([rec["model"], proto, "-", "-", "-", "-", f"skipped: {why.split(': ', 1)[-1]}"])
    out = ["Per model (fds and RSS summed over the model's servers; start and end quiescent, after warm-up)\n",
           common.markdown_table(["model", "fd start→end", "RSS start→end", "max RSS", "exchanges", "mismatches",
                                  "load errors / UDP lost", "verdict"], rows),
           "\nPer server\n",
           common.markdown_table(["model", "proto", "fds start→end", "RSS KiB start→end", "threads start→end", "accepted", "verdict"], detail)]
    notes = [f"- {rec['model']}: {n}" for rec in data["models"] for n in rec.get("notes", [])]
    notes += [f"- {rec['model']}: misbehaving sockets the server had not closed after 30 s: {rec['load']['misbehave']['held_past_30s']}"
              for rec in data["models"] if rec.get("load") and rec["load"]["misbehave"].get("held_past_30s")]
    if notes:
        out += ["\nNotes\n", *notes]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Misbehaving clients (run as a separate process on the client core).

def misbehave(args):
    """Bounded in count (--max-actions) and time (--duration); prints a JSON summary."""
    host = "127.0.0.1"
    deadline = time.time() + args.duration
    hold_limit = 30.0  # a held socket the server has not closed by then is closed by us and counted
    max_held = 40
    sel = selectors.DefaultSelector()
    held = {}  # sock -> (kind, opened)
    counts = {}
    errors = {}
    reaped, unreaped = {}, {}
    rnd = random.Random(6)
    junk = bytes(rnd.getrandbits(8) for _ in range(65536))
    udp_sock = None
    if args.udp_port:
        udp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def bump(d, k):
        d[k] = d.get(k, 0) + 1

    def connect(port, rcvbuf=None):
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(2)
        s.connect((host, port))
        return s

    def rst(s):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    def hold(s, kind):
        s.setblocking(False)
        held[s] = (kind, time.time())
        sel.register(s, selectors.EVENT_READ)

    def drop(s):
        sel.unregister(s)
        del held[s]
        s.close()

    def rst_echo_idle():
        s = connect(args.echo_port)
        s.sendall(junk[:rnd.randrange(1, 4000)])
        rst(s)

    def rst_echo_flight():
        s = connect(args.echo_port, rcvbuf=4096)
        s.sendall(junk[:60000])  # the echo of it cannot all fit in our receive buffer
        time.sleep(0.005)
        rst(s)

    def rst_http_midresponse():
        s = connect(args.http_port, rcvbuf=4096)
        s.sendall(b"GET / HTTP/1.1\r\nHost: soak\r\n\r\n" * 8)
        s.recv(100)
        rst(s)

    def rst_http_midhead():
        s = connect(args.http_port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: so")
        rst(s)

    def half_head():
        s = connect(args.http_port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: soak\r\nX-Half: " + b"a" * rnd.randrange(0, 2000))
        hold(s, "half_head")

    def silent_echo():
        hold(connect(args.echo_port), "silent_echo")

    def silent_http():
        hold(connect(args.http_port), "silent_http")

    def connect_close():
        connect(rnd.choice([args.echo_port, args.http_port])).close()

    def garbage_http():
        s = connect(args.http_port)
        s.sendall(rnd.choice([b"\x00\x01\x02 garbage\r\n\r\n", b"GET / HTTP/1.1\nHost: x\n\n",
                              b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
                              b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n"]))
        s.settimeout(5)
        while s.recv(65536):  # the server answers 400/414/431 and closes
            pass
        s.close()

    def flood_noread():
        if sum(1 for k, _ in held.values() if k == "flood") >= 2:
            return connect_close()
        s = connect(args.echo_port, rcvbuf=4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        s.setblocking(False)
        held[s] = ("flood", time.time())  # not in the selector: pushed and checked every turn
        return None

    def push(s):
        """Send until the socket takes no more; False once the server has closed the connection."""
        try:
            for _ in range(16):
                s.send(junk)
        except BlockingIOError:
            pass
        except OSError:
            return False
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] == 1  # TCP_ESTABLISHED

    def udp_junk():
        if udp_sock:
            for _ in range(rnd.randrange(1, 20)):
                udp_sock.sendto(junk[:rnd.choice([0, 1, 7, 8, 512, 1472, 9000, 65507])], (host, args.udp_port))

    actions = [rst_echo_idle, rst_echo_flight, rst_http_midresponse, rst_http_midhead, half_head, silent_echo,
               silent_http, connect_close, garbage_http, flood_noread, udp_junk]
    done = 0
    while time.time() < deadline and done < args.max_actions:
        act = actions[done % len(actions)]
        if act in (half_head, silent_echo, silent_http) and len(held) >= max_held:
            act = connect_close
        try:
            act()
            bump(counts, act.__name__)
        except OSError as e:
            bump(errors, f"{act.__name__}: {type(e).__name__}")
        done += 1
        # Watch held sockets: the server should close them (idle, header, send timeouts).
        for key, _ in sel.select(timeout=0.02):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                bump(reaped, held[s][0])
                drop(s)
        now = time.time()
        for s, (kind, opened) in list(held.items()):
            if kind == "flood" and not push(s):
                bump(reaped, kind)
                del held[s]
                s.close()
                continue
            if now - opened > hold_limit:
                bump(unreaped, kind)
                if kind == "flood":
                    del held[s]
                    s.close()
                else:
                    drop(s)
        time.sleep(0.03)
    for s, (kind, _) in list(held.items()):
        bump(counts, "closed_by_us_at_end")
        if kind != "flood":
            sel.unregister(s)
        s.close()
    if udp_sock:
        udp_sock.close()
    print(json.dumps({"actions": counts, "errors": errors, "reaped_by_server": reaped, "held_past_30s": unreaped}))


def prime_clients(args):
    held = []
    for port, request, answer in ((args.echo_port, b"x", 1), (args.http_port, b"GET / HTTP/1.1\r\nHost: soak\r\n\r\n", 1)):
        for _ in range(PRIME_CONNS):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            held.append(s)
            s.sendall(request)
            s.recv(65536)  # the echo, or the first part of the response: the server has this connection
    time.sleep(1)
    for s in held:
        s.close()
    print(f"held {len(held)}")


# --------------------------------------------------------------------------------------------

def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=600, help="total seconds over all models (default 600)")
    ap.add_argument("--models", default="", help="comma-separated (default: every model of `sockscale models --json`)")
    ap.add_argument("--sample-interval", type=float, default=5)
    ap.add_argument("--fd-tolerance", type=int, default=0)
    ap.add_argument("--report", help="redraw the tables from a soak JSON file and exit")
    ap.add_argument("--misbehave", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--echo-port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--udp-port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--max-actions", type=int, default=100_000, help=argparse.SUPPRESS)
    ap.add_argument("--prime", action="store_true", help=argparse.SUPPRESS)
    ARGS = args = ap.parse_args()
    if args.prime:
        return prime_clients(args)
    if args.misbehave:
        return misbehave(args)
    if args.report:
        data = json.loads(Path(args.report).read_text())
        print(tables(data))
        return 0 if all(m["pass"] for m in data["models"]) else 1
    common.build_sockscale()
    known = common.model_names()
    models = [m for m in args.models.split(",") if m] or known
    unknown = [m for m in models if m not in known]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = common.ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    out_path = out_dir / f"soak-{stamp}.json"
    log_dir = out_dir / f"soak-{stamp}-logs"
    log_dir.mkdir()
    share = args.duration / len(models)
    data = {"machine": common.machine(), "command": " ".join(sys.argv), "duration_s": args.duration, "share_s": round(share, 1),
            "server_flags": SERVER_FLAGS, "sample_interval_s": args.sample_interval,
            "bounds": {"fd_tolerance": args.fd_tolerance, "rss_kib": f"max({RSS_FLOOR_KIB}, {RSS_FRACTION:.0%} of start)",
                       "threads": f"end <= start + {THREAD_TOLERANCE}"},
            "logs": str(log_dir), "models": []}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        for model in models:
            data["models"].append(soak_model(model, share, Path(tmp), log_dir))
            data["wall_s"] = round(time.time() - t0, 1)
            common.write_json(out_path, data)  # rewritten after each model, so an interrupted run keeps what it measured
    print()
    print(tables(data))
    print(f"\nraw results: {out_path}\nserver logs: {log_dir}")
    return 0 if all(m["pass"] for m in data["models"]) else 1


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
