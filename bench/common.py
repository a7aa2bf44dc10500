"""Shared helpers for the benchmark scripts in bench/.

Every script measures side by side in one run: servers pinned to core 0, the load client to
core 1, server CPU taken from /proc/PID/stat, and raw results written as JSON before any
table is drawn from them.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where `cargo build` puts it: CARGO_TARGET_DIR when set (a worktree building apart), else target/.
BIN = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "release" / "sockscale"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVER_CPU = "0"
CLIENT_CPU = "1"


def ensure_debs(packages):
    """Install Debian packages that are missing (benchmarks install their own peers)."""
    missing = [p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing:
        print(f"installing {' '.join(missing)}", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def build_sockscale():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "sockscale"], cwd=ROOT, check=True)
    return str(BIN)


def model_names():
    """Every model, from the binary's own table (`sockscale models --json`), in its order."""
    out = subprocess.run([str(BIN), "models", "--json"], check=True, capture_output=True, text=True).stdout
    return [m["name"] for m in json.loads(out)]


def cpu_seconds(pid):
    """User plus system CPU time of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def children(pid):
    """The pids of a process's children (a `--procs` parent's workers); [] once it is gone."""
    try:
        return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def wait_port(port, host="127.0.0.1", timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {host}:{port}")


def start_sockscale(args, cpu=SERVER_CPU, binary=BIN):
    """Start `sockscale serve ARGS` (of `binary`) pinned to `cpu`; returns (process, port)."""
    proc = subprocess.Popen(
        ["taskset", "-c", cpu, str(binary), "serve", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, RUST_LOG="error"),
    )
    line = proc.stdout.readline()
    m = re.match(r"listening on .*:(\d+)$", line.strip())
    if not m:
        proc.kill()
        raise RuntimeError(f"sockscale did not start: {line!r}")
    return proc, int(m.group(1))


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(pid, command):
    """Run a load command pinned to the client core; returns (stdout, server CPU seconds, wall)."""
    before = cpu_seconds(pid)
    start = time.time()
    out = subprocess.run(["taskset", "-c", CLIENT_CPU, *command], capture_output=True, text=True, check=True).stdout
    wall = time.time() - start
    return out, cpu_seconds(pid) - before, wall


def parse_wrk(out):
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests": requests, "rps": rps, "socket_errors": errors, "non_2xx": int(non2xx.group(1)) if non2xx else 0}


def parse_h2load(out):
    m = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", out)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    return {"rps": float(m.group(2)), "requests": int(done.group(2)), "failed": int(done.group(3)) + int(done.group(4))}


def results_dir(name):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = ROOT / "bench-results" / f"{name}-{stamp}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine():
    def read(p):
        try:
            return Path(p).read_text().strip()
        except OSError:
            return None
    cpu = next((l.split(":", 1)[1].strip() for l in (read("/proc/cpuinfo") or "").splitlines() if l.startswith("model name")), "?")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        "somaxconn": read("/proc/sys/net/core/somaxconn"),
        "date": time.strftime("%Y-%m-%d"),
    }


def write_json(path, data):
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"raw results: {path}", file=sys.stderr)


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_client(command):
    """Run a load client pinned to the client core; returns (stdout, its CPU seconds, wall).

    CPU comes from the child's rusage (wait4), so every thread it ran is counted.
    """
    start = time.time()
    proc = subprocess.Popen(["taskset", "-c", CLIENT_CPU, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{command[0]} failed: {out[-2000:]}")
    return out, usage.ru_utime + usage.ru_stime, wall


def have(tool):
    return shutil.which(tool) is not None


NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
error_log {dir}/error.log error;
pid {dir}/nginx.pid;
events {{ worker_connections {worker_connections}; }}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 75s;
    server {{
        listen {host}:{port} backlog=4096;
        location / {{
            default_type "{content_type}";
            root {dir};
            try_files /{page} =404;
        }}
    }}
    open_file_cache max=16 inactive=600s;
    open_file_cache_valid 600s;
    tcp_nodelay on;
    {extra}
}}
"""

# Measured: for a 4 KiB body nginx spends less CPU per request copying than with sendfile.
PAGE_NGINX = "sendfile off;"


def nginx_conf(workdir, port, host="127.0.0.1", page="page.html", content_type="text/html; charset=utf-8",
               extra=PAGE_NGINX, worker_connections=20000):
    """The nginx configuration every benchmark runs: one worker, keep-alive without limit,
    `page` in `workdir` served at /, and `extra` directives (sendfile and buffers)."""
    return NGINX_CONF.format(dir=workdir, host=host, port=port, page=page, content_type=content_type, extra=extra,
                             worker_connections=worker_connections)


def start_nginx(workdir, body):
    """nginx with one worker process serving `body` at /, pinned to the server core."""
    (workdir / "page.html").write_bytes(body)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(workdir, port))
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, "nginx", "-c", str(conf), "-p", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def fetch_body(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert b" 200 " in head.split(b"\r\n")[0] and len(body) == 4096, head
    return body


def wrk_scenario(conns, duration, extra=()):
    """A wrk -t1 run at `conns` connections; `extra` adds arguments such as a header."""
    label = "wrk" + (" " + " ".join(extra) if extra else "")
    return label, conns, lambda url: ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", *extra, url], parse_wrk


def h2load_scenario(conns, duration, depth=16):
    return (f"h2load -m{depth}", conns,
            lambda url: ["h2load", "--h1", "-t1", f"-c{conns}", f"-m{depth}", f"-D{duration}", url], parse_h2load)


def compare(servers, scenarios, repeat):
    """Run every scenario `repeat` times against every server, interleaving the servers so
    that the machine's drift hits them alike. `servers` maps a name to (process, port).
    Returns one row per run."""
    rows = []
    for label, conns, command, parse in scenarios:
        for run in range(repeat):
            for name, (proc, port) in servers.items():
                out, cpu, wall = measure(proc.pid, command(f"http://127.0.0.1:{port}/"))
                r = parse(out)
                r.update(server=name, tool=label, connections=conns, run=run, server_cpu_s=round(cpu, 3),
                         wall_s=round(wall, 2), server_cpu_pct=round(100 * cpu / wall, 1),
                         req_per_cpu_s=round(r["requests"] / cpu) if cpu else None)
                rows.append(r)
                print(f"{label:12} c={conns:5} run {run} {name:12} {r['rps']:>11.0f} req/s  "
                      f"cpu {r['server_cpu_pct']:5.1f}%  {r['req_per_cpu_s']} req/cpu-s", flush=True)
    return rows


def ratio_table(rows, baseline, contender):
    """Medians per scenario of each server's figures, and of contender/baseline within each pair."""
    import statistics
    med = statistics.median
    table = []
    for label, conns in dict.fromkeys((r["tool"], r["connections"]) for r in rows):
        runs = [r for r in rows if r["tool"] == label and r["connections"] == conns]
        b = [r for r in runs if r["server"] == baseline]
        c = [r for r in runs if r["server"] == contender]
        ratios = [y["req_per_cpu_s"] / x["req_per_cpu_s"] for x, y in zip(b, c)]
        table.append([label, conns,
                      f"{med(r['rps'] for r in b):.0f}", f"{med(r['server_cpu_pct'] for r in b)}%",
                      f"{med(r['req_per_cpu_s'] for r in b):.0f}",
                      f"{med(r['rps'] for r in c):.0f}", f"{med(r['server_cpu_pct'] for r in c)}%",
                      f"{med(r['req_per_cpu_s'] for r in c):.0f}",
                      f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"])
    header = ["client", "conns", f"{baseline} req/s", f"{baseline} CPU", f"{baseline} req/CPU-s",
              f"{contender} req/s", f"{contender} CPU", f"{contender} req/CPU-s", "ratio, median (range)"]
    return markdown_table(header, table)


class StatsServer:
    """`sockscale serve --proto echo --model MODEL --threads 1 --stats-interval INTERVAL EXTRA`
    pinned to the server core, with its latest stats line kept in `last` (key -> text).
    `on_stats(fields)` is called for every stats line, for a script that wants more than the
    latest (a peak)."""

    def __init__(self, model, extra, interval=0.25, on_stats=None):
        self.proc = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, str(BIN), "serve", "--listen", "127.0.0.1:0", "--proto", "echo",
             "--model", model, "--threads", "1", "--stats-interval", str(interval), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, RUST_LOG="error"))
        line = self.proc.stdout.readline()
        m = re.match(r"listening on .*:(\d+)$", line.strip())
        if not m:
            self.proc.kill()
            raise RuntimeError(f"sockscale did not start: {line!r}")
        self.port = int(m.group(1))
        self.last = {}
        self.on_stats = on_stats
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("stats ") or line.startswith("final "):
                self.last = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
                if self.on_stats:
                    self.on_stats(self.last)

    def counter(self, name):
        return int(self.last.get(name, 0))

    def stop(self):
        """Stop it; returns its final counters."""
        stop(self.proc)
        self.reader.join(timeout=2)
        return {k: int(v) for k, v in self.last.items() if v.isdigit()}
