#!/usr/bin/env python3
"""Open and hold a million concurrent echo connections on this one machine, verify one echo on
every one of them, and measure what holding them costs.

The machine's limits and how the run passes them:
- 20,000 open files per process (a hard limit that cannot be raised): the server runs as
  `serve --procs P` (SO_REUSEPORT workers) and the load as `load --procs P`, each process
  holding about conns / P sockets.
- The ephemeral ports of one source address (64,512 with the range this script sets): the
  load connects from `--source 127.0.0.1-127.0.0.S`, about conns / S ports per address.
- The listen backlog: `--connect-rate` paces the handshakes so the accept queues never
  overflow (an overflow is a dropped SYN and a one-second retransmission).
- System-wide limits (fs.file-max, the port range, net.ipv4.tcp_mem, the SYN backlog,
  nf_conntrack_max where conntrack is loaded): checked first and raised as root; one clear line
  and exit 1 when one cannot be set. The old values are put back at the end.

What it runs: `load echo --connect-before-start --per-conn 1 -d HOLD`: every connection is
opened first, then each makes exactly one verified echo, then all stay open, idle, for the rest
of the hold. The run samples every second (timestamped, written raw to the results) the
server's and the load's processes (CPU, RSS), /proc/net/sockstat, /proc/meminfo and the large
slab caches, and reports:
- connections held (the load's count at the start of the measured phase and the server's
  peak), the time to establish them, and echoes verified;
- server user-space memory per connection: its processes' RSS while holding, less their RSS
  before the load, over the connections;
- kernel memory per connection (both ends, since client and server share the kernel): the
  growth of Slab in /proc/meminfo, and apart from it the socket-buffer pages that
  /proc/net/sockstat counts, with the largest slab caches by growth;
- server CPU while the connections are idle (from 5 s after the echoes began to 2 s before the
  end of the hold).

With `--proto ws` the connections are idle WebSockets instead: the servers run `serve --proto
ws`, the load `load ws ws://… --connect-before-start --idle --ping S -d HOLD`: every connection
is opened and upgraded first (RFC 6455 handshake, 101 checked), then all are held with no
message, each pinged every S seconds (S defaults to half the hold, so each one's last ping comes
after every connection was open: the pings at the end). Each answered a ping when the load's
pongs are at least the connections upgraded and no ping went unanswered (`ws_ping_timeouts`);
the run fails otherwise. Memory is reported as for echo: server user space (RSS growth) per
WebSocket, kernel slab and socket buffers per connection (both ends).

Usage: bench/c1m.py [--proto echo|ws] [--conns 1000000] [--procs 60] [--sources 40]
                    [--connect-rate 25000] [--hold 60] [--ping S] [--tcp-mem-pages 3000000]
                    [--out DIR]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

import common

PAGE = os.sysconf("SC_PAGE_SIZE")


def sysctl_path(name):
    return "/proc/sys/" + name.replace(".", "/")


def read_sysctl(name):
    try:
        return open(sysctl_path(name)).read().split()
    except OSError:
        return None


def write_sysctl(name, words):
    with open(sysctl_path(name), "w") as f:
        f.write(" ".join(str(w) for w in words))


def needed_sysctls(args):
    """(name, wanted value, is the current value enough) for every system-wide limit the run
    depends on."""
    sockets = 2 * args.conns
    want = [
        # Every socket of both ends is an open file of the system.
        ("fs.file-max", [sockets + 200_000], lambda cur: int(cur[0]) >= sockets + 200_000),
        # Ports per source address: conns / sources of them, with room to spare.
        ("net.ipv4.ip_local_port_range", [1024, 65535],
         lambda cur: int(cur[1]) - int(cur[0]) + 1 >= 1.2 * args.conns / args.sources),
        # Half-open handshakes per listener while connecting at the paced rate.
        ("net.ipv4.tcp_max_syn_backlog", [8192], lambda cur: int(cur[0]) >= 8192),
        # Pages TCP may use before it refuses memory to sockets (the pressure that stopped the
        # first try at about 750,000): min, pressure, max.
        ("net.ipv4.tcp_mem", [args.tcp_mem_pages // 2, args.tcp_mem_pages * 3 // 4, args.tcp_mem_pages],
         lambda cur: int(cur[2]) >= args.tcp_mem_pages),
    ]
    if read_sysctl("net.netfilter.nf_conntrack_max") is not None:
        want.append(("net.netfilter.nf_conntrack_max", [sockets + 100_000], lambda cur: int(cur[0]) >= sockets + 100_000))
    return want


def prepare_system(args):
    """Raise what must be raised; returns the old values to restore. Exits with one line when
    a limit cannot be set."""
    # Checked before anything is changed, so that a refusal leaves the system as it was.
    hard = subprocess.run(["bash", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
    per_proc = -(-args.conns // args.procs)
    if hard != "unlimited" and per_proc + 100 > int(hard):
        sys.exit(f"c1m: {per_proc} connections per process pass the open-files hard limit {hard}; "
                 f"use --procs {-(-args.conns // (int(hard) - 500))} or more")
    restore = []
    for name, value, enough in needed_sysctls(args):
        cur = read_sysctl(name)
        if cur is None:
            put_back(restore)
            sys.exit(f"c1m: cannot read {name}: this kernel does not have it")
        if enough(cur):
            continue
        try:
            write_sysctl(name, value)
        except OSError as e:
            put_back(restore)
            sys.exit(f"c1m: {name} is {' '.join(cur)} and cannot be set to {' '.join(map(str, value))} ({e.strerror}); "
                     f"run as root, or set it first: sysctl -w {name}='{' '.join(map(str, value))}'")
        restore.append((name, cur))
        print(f"set {name} = {' '.join(map(str, value))} (was {' '.join(cur)})", file=sys.stderr)
    return restore


def put_back(restore):
    """Write back the values `prepare_system` replaced."""
    for name, value in restore:
        try:
            write_sysctl(name, value)
        except OSError:
            print(f"c1m: could not put back {name} = {' '.join(value)}", file=sys.stderr)


def procs_cpu_rss(pids):
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            cpu += common.cpu_seconds(pid)
            rss += common.rss_kib(pid)
        except OSError:
            pass
    return cpu, rss


def sockstat():
    out = {}
    for line in open("/proc/net/sockstat"):
        key, _, rest = line.partition(":")
        words = rest.split()
        out[key] = {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}
    return out


NETSTAT_KEYS = ("ListenOverflows", "ListenDrops", "TCPTimeouts", "TCPSynRetrans", "TCPMemoryPressures", "TCPAbortOnMemory", "TCPReqQFullDrop")


def netstat():
    """TcpExt counters of /proc/net/netstat, and Tcp's RetransSegs."""
    out = {}
    lines = open("/proc/net/netstat").read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        for k, v in zip(names.split()[1:], values.split()[1:]):
            out[k] = int(v)
    return out


def meminfo():
    out = {}
    for line in open("/proc/meminfo"):
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])
    return out


def slab_caches():
    """Bytes held by each slab cache (active objects times object size)."""
    out = {}
    try:
        lines = open("/proc/slabinfo").read().splitlines()[2:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        out[f[0]] = int(f[1]) * int(f[3])
    return out


def sample(server_pid, load_pid):
    server = common.children(server_pid)
    load = common.children(load_pid)
    s_cpu, s_rss = procs_cpu_rss(server)
    l_cpu, l_rss = procs_cpu_rss(load)
    return {
        "t": time.time(),
        "server_procs": len(server), "server_cpu_s": s_cpu, "server_rss_kib": s_rss,
        "load_procs": len(load), "load_cpu_s": l_cpu, "load_rss_kib": l_rss,
        "sockstat": sockstat(), "meminfo": {k: v for k, v in meminfo().items() if k in ("MemAvailable", "Slab", "SUnreclaim", "SReclaimable")},
        "conntrack": int((read_sysctl("net.netfilter.nf_conntrack_count") or ["0"])[0]),
        # The caches that hold 16 MiB or more: what the held sockets are made of.
        "slab": {k: v for k, v in slab_caches().items() if v >= 16 << 20},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=1_000_000)
    ap.add_argument("--procs", type=int, default=60, help="server and load processes each")
    ap.add_argument("--sources", type=int, default=40, help="source addresses 127.0.0.1-127.0.0.N")
    ap.add_argument("--connect-rate", type=int, default=25_000)
    ap.add_argument("--hold", type=int, default=60, help="seconds the measured phase holds them (the echoes take part of it)")
    ap.add_argument("--tcp-mem-pages", type=int, default=3_000_000)
    ap.add_argument("--proto", choices=("echo", "ws"), default="echo",
                    help="echo connections, or idle WebSockets each pinged (see above)")
    ap.add_argument("--ping", type=float, default=None,
                    help="ws: seconds between the pings of each WebSocket [default: half the hold]")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.ping is None:
        args.ping = args.hold / 2
    if args.proto == "ws" and not 0 < args.ping < args.hold:
        sys.exit(f"c1m: --ping {args.ping} must be above 0 and below --hold {args.hold}: each WebSocket's last ping "
                 "must come after every connection was open")
    if os.geteuid() != 0:
        sys.exit("c1m: run as root: the system-wide limits (fs.file-max, net.ipv4.tcp_mem, the port range) must be raised")
    common.build_sockscale()
    out_dir = common.results_dir("c1m") if args.out is None else __import__("pathlib").Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    restore = prepare_system(args)
    before = {"sockstat": sockstat(), "meminfo": meminfo(), "slab": slab_caches(), "netstat": netstat()}
    env = dict(os.environ, RUST_LOG="error")
    server = subprocess.Popen(
        [str(common.BIN), "serve", "--model", "epoll", "--proto", args.proto, "--listen", "127.0.0.1:0", "--procs", str(args.procs),
         "--threads", "1", "--idle-timeout", "3600", "--backlog", "4096"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    timeline = []
    try:
        line = server.stdout.readline()
        m = re.match(r"listening on .*:(\d+)$", line.strip())
        if not m:
            sys.exit(f"c1m: the server did not start: {line.strip() or server.stderr.read().strip()}")
        port = int(m.group(1))
        time.sleep(1)
        server_idle = procs_cpu_rss(common.children(server.pid))
        load_json = out_dir / "load.json"
        common_args = ["-c", str(args.conns), "--procs", str(args.procs), "-t", "1",
                       "--source", f"127.0.0.1-127.0.0.{args.sources}", "--connect-rate", str(args.connect_rate),
                       "--connect-timeout", "60", "--timeout", "60", "--connect-before-start", "-d", str(args.hold),
                       "--json", str(load_json)]
        if args.proto == "ws":
            # Every connection closes at the end, all at once: a million closes take the servers
            # tens of seconds on 2 cores, so the end waits up to a minute for them.
            load_cmd = [str(common.BIN), "load", "ws", f"ws://127.0.0.1:{port}/", *common_args, "--idle", "--ping", str(args.ping),
                        "--close-timeout", "60"]
        else:
            load_cmd = [str(common.BIN), "load", "echo", f"127.0.0.1:{port}", *common_args, "-l", "16", "--per-conn", "1"]
        print("$ " + " ".join(load_cmd[1:]), file=sys.stderr)
        began = time.time()
        load = subprocess.Popen(load_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        outputs = {}

        def drain(name, stream):
            outputs[name] = stream.read()
        readers = [threading.Thread(target=drain, args=(n, s)) for n, s in (("stdout", load.stdout), ("stderr", load.stderr))]
        for r in readers:
            r.start()
        # Bounded: connecting at the paced rate, the hold, and a margin.
        deadline = began + args.conns / args.connect_rate * 3 + args.hold + 300
        while load.poll() is None:
            if time.time() > deadline:
                load.terminate()
                print("c1m: the load did not finish in time; stopped it", file=sys.stderr)
                break
            timeline.append(sample(server.pid, load.pid))
            s = timeline[-1]
            print(f"\r[{s['t'] - began:6.1f}s] TCP in use {s['sockstat']['TCP']['inuse']:>8}  mem pages {s['sockstat']['TCP']['mem']:>8}  "
                  f"server RSS {s['server_rss_kib'] // 1024:>6} MiB  load RSS {s['load_rss_kib'] // 1024:>6} MiB", end="", file=sys.stderr)
            time.sleep(1)
        load.wait()
        for r in readers:
            r.join()
        print(file=sys.stderr)
    finally:
        common.stop(server)
        put_back(restore)
    after_netstat = netstat()
    final = server.stdout.read() + server.stderr.read()
    if not load_json.exists():
        sys.exit(f"c1m: the load wrote no report: {outputs.get('stderr', '').strip()}")
    report = json.load(open(load_json))
    window = report["window"]
    ws = report.get("ws") or {}
    # The idle part of the hold: from 2 s after the last echo came back (a million echoes begun
    # at once take many seconds) to 2 s before the end (the closes at the end are not idle).
    # Idle WebSockets send no message: the whole hold is idle but for the pings.
    echoes_done = window["started_unix_s"] + (0 if args.proto == "ws" else report["latency"]["max_us"] / 1e6)
    idle = [s for s in timeline if echoes_done + 2 <= s["t"] <= window["ended_unix_s"] - 2]
    if len(idle) < 5:
        print(f"c1m: only {len(idle)} samples after the echoes: give a longer --hold for the idle figures", file=sys.stderr)
    held_samples = idle or timeline[-1:]
    peak = max(held_samples, key=lambda s: s["sockstat"]["TCP"]["inuse"])
    held = report["pre_start"]["open"]
    result = {
        "machine": common.machine(), "command": " ".join(load_cmd[1:]), "args": vars(args),
        "connections_wanted": args.conns,
        "connections_held": held,
        # The server's own count, its processes' `final` counters summed (the probe connection
        # of each load process included).
        "server_accepted": sum(int(v) for v in re.findall(r"\baccepted=(\d+)", final)),
        "server_final": final.strip().splitlines()[-1:] if final.strip() else [],
        "proto": args.proto,
        "echoes_verified": report["requests"]["completed"] if args.proto == "echo" else None,
        # ws: the upgrades, and the pings and pongs of the whole hold.
        "ws_upgrades": ws.get("upgrades"),
        "ws_pings_sent": ws.get("pings_sent"),
        "ws_pongs_received": ws.get("pongs_received"),
        "ws_ping_timeouts": ws.get("ping_timeouts"),
        "ws_ping_interval_s": args.ping if args.proto == "ws" else None,
        "errors": {k: v for k, v in report["errors"].items() if v},
        "establish_s": report["pre_start"]["connect_s"],
        "connect_latency_us": {k: report["connect_latency"].get(k) for k in ("p50_us", "p99_us", "max_us")},
        "connect_retries": report["connections"]["retries"],
        "server_user_bytes_per_conn": (peak["server_rss_kib"] - server_idle[1]) * 1024 / max(held, 1),
        "load_user_bytes_per_conn": peak["load_rss_kib"] * 1024 / max(held, 1),
        "kernel_slab_bytes_per_conn": (peak["meminfo"]["Slab"] - before["meminfo"]["Slab"]) * 1024 / max(held, 1),
        "kernel_tcp_buffer_bytes_per_conn": (peak["sockstat"]["TCP"]["mem"] - before["sockstat"]["TCP"]["mem"]) * PAGE / max(held, 1),
        "mem_available_drop_bytes_per_conn": (before["meminfo"]["MemAvailable"] - peak["meminfo"]["MemAvailable"]) * 1024 / max(held, 1),
        "sockstat_at_hold": peak["sockstat"],
        "echo_phase_s": echoes_done - window["started_unix_s"],
        "tcp_buffer_pages_peak": max(s["sockstat"]["TCP"]["mem"] for s in timeline),
        # Dropped SYNs and handshakes show here: a listen queue that overflowed, a SYN retransmitted.
        "netstat_delta": {k: after_netstat.get(k, 0) - before["netstat"].get(k, 0) for k in NETSTAT_KEYS},
        "idle_server_cpu_pct": (100 * (idle[-1]["server_cpu_s"] - idle[0]["server_cpu_s"]) / (idle[-1]["t"] - idle[0]["t"])
                                if len(idle) >= 2 else None),
        "idle_load_cpu_pct": (100 * (idle[-1]["load_cpu_s"] - idle[0]["load_cpu_s"]) / (idle[-1]["t"] - idle[0]["t"])
                              if len(idle) >= 2 else None),
        "idle_seconds_sampled": (idle[-1]["t"] - idle[0]["t"]) if len(idle) >= 2 else 0,
        "load_summary": outputs.get("stdout", ""),
        "timeline": timeline,
    }
    # Per connection (both ends), the slab caches that grew most while the connections were held.
    result["slab_bytes_per_conn_by_cache"] = dict(sorted(
        ((k, round((v - before["slab"].get(k, 0)) / max(held, 1))) for k, v in peak["slab"].items()),
        key=lambda kv: -kv[1])[:10])
    if args.proto == "ws":
        upgrades, pongs = result["ws_upgrades"] or 0, result["ws_pongs_received"] or 0
        result["every_websocket_answered_a_ping"] = upgrades >= held > 0 and pongs >= upgrades and not result["ws_ping_timeouts"]
    common.write_json(out_dir / "results.json", result)
    if args.proto == "ws":
        verified = f"{pongs:,} pongs / {upgrades:,} upgrades" + ("" if result["every_websocket_answered_a_ping"] else " (NOT every one)")
    else:
        verified = f"{result['echoes_verified']:,}"
    print(outputs.get("stdout", ""))
    rows = [[f"{args.conns:,}", f"{held:,}", verified, sum(result["errors"].values()),
             f"{result['establish_s']:.1f} s", f"{result['server_user_bytes_per_conn']:.0f} B", f"{result['load_user_bytes_per_conn']:.0f} B",
             f"{result['kernel_slab_bytes_per_conn']:.0f} B", f"{result['kernel_tcp_buffer_bytes_per_conn']:.0f} B",
             f"{result['mem_available_drop_bytes_per_conn']:.0f} B",
             "n/a" if result["idle_server_cpu_pct"] is None else f"{result['idle_server_cpu_pct']:.1f}%"]]
    print(common.markdown_table(["asked", "held", "echoes verified" if args.proto == "echo" else "pings answered", "errors", "time to establish", "server user-space / conn",
                                 "load user-space / conn", "kernel slab / conn (both ends)", "TCP buffer pages / conn",
                                 "MemAvailable drop / conn",
                                 "server CPU idle" if args.proto == "echo" else f"server CPU, idle but pinged every {args.ping:g} s"], rows))
    print(f"raw results: {out_dir / 'results.json'}", file=sys.stderr)
    if held < args.conns:
        sys.exit(1)
    if args.proto == "echo" and result["echoes_verified"] < args.conns:
        sys.exit(1)
    if args.proto == "ws" and not result["every_websocket_answered_a_ping"]:
        print(f"c1m: not every WebSocket answered a ping: {verified}, {result['ws_ping_timeouts']} unanswered", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
