#!/usr/bin/env python3
"""permessage-deflate with and without context takeover: messages per server CPU-second.

`sockscale serve --proto ws -m epoll -t 1` on core 0 (with and without `--ws-deflate-takeover off`),
`sockscale load ws -c 100 -s 512 --text --deflate -t 1 -d 3` on core 1; three interleaved pairs;
server CPU from /proc/PID/stat. Uses the release binary (build it first:
`cargo build --release -p sockscale`).
"""
import subprocess, json, time, os, re, statistics, tempfile, socket
BIN=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "sockscale")
def cpu(pid):
    f=open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()
    return (int(f[11])+int(f[12]))/os.sysconf("SC_CLK_TCK")
def run(extra):
    s=socket.socket(); s.bind(("127.0.0.1",0)); port=s.getsockname()[1]; s.close()
    srv=subprocess.Popen(["taskset","-c","0",BIN,"serve","--proto","ws","-m","epoll","-t","1","--listen",f"127.0.0.1:{port}",*extra],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    b=cpu(srv.pid)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(["taskset","-c","1",BIN,"load","ws",f"ws://127.0.0.1:{port}/","-c","100","-s","512","--text","--deflate","-t","1","-d","3","--json",f.name],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL,check=True)
        r=json.load(open(f.name))
    c=cpu(srv.pid)-b
    srv.terminate(); srv.wait()
    errs=sum(v for v in r["errors"].values() if isinstance(v,int))
    return r["requests"]["completed"]/c, r["ws"]["deflate_agreed"], errs
res={"on":[], "off":[]}
for i in range(3):
    for name,extra in [("on",[]),("off",["--ws-deflate-takeover","off"])]:
        m,agreed,errs=run(extra); res[name].append(m); print(name, round(m), agreed, errs, flush=True)
for k,v in res.items(): print(k, "median", round(statistics.median(v)), "range", round(min(v)), round(max(v)))
print("ratio off/on per rep", [round(b/a,3) for a,b in zip(res["on"],res["off"])])
