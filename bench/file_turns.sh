#!/usr/bin/env bash
# One long download against the worker's other connections (docs/BENCHMARKS.md, "File bodies").
#
# A server with one worker thread (core 0) serves a 1 GiB body file, read into the page cache
# first, to curl, which downloads it again and again for 5 s (core 1). Meanwhile a second client
# on core 1, at SCHED_FIFO priority so that curl cannot delay it, sends a HEAD on one keep-alive
# connection to the same worker every 10 ms for 4 s and times each answer. Prints, per model and
# repetition, the HEAD latency and how many downloads completed. Every loop is bounded in time.
#
# Usage: bench/file_turns.sh [--bin PATH] [--reps N] [MODEL...]     (root for chrt; default: all
# nine models, 3 repetitions, target/release/sockscale)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release/sockscale
REPS=3
MODELS=()
while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) MODELS+=("$1"); shift ;;
  esac
done
[ ${#MODELS[@]} -gt 0 ] || MODELS=(blocking threadpool select poll64 signal epoll uring uring64 tokio)
for tool in curl python3 chrt taskset; do
  command -v $tool > /dev/null || { echo "bench/file_turns.sh: needs $tool" >&2; exit 1; }
done
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -q -p sockscale)
BODY=$(mktemp /tmp/sockscale-turns-XXXXXX)
trap 'rm -f "$BODY"; kill $(jobs -p) 2> /dev/null || true' EXIT
head -c 1G /dev/urandom > "$BODY"
cat "$BODY" > /dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

one() {
  local model=$1
  taskset -c 0 "$BIN" serve --proto http --model "$model" --threads 1 --listen 127.0.0.1:$PORT --body "$BODY" > /dev/null 2>&1 &
  local srv=$!
  for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$PORT) 2> /dev/null && break; sleep 0.1; done
  ( end=$((SECONDS + 5)); n=0
    while [ $SECONDS -lt $end ]; do taskset -c 1 curl -s -o /dev/null --max-time 5 http://127.0.0.1:$PORT/ || true; n=$((n + 1)); done
    echo "downloads=$n" > "$BODY.downloads" ) &
  local dl=$!
  sleep 0.3
  local heads
  heads=$(taskset -c 1 chrt -f 10 python3 - "$PORT" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(10)
lat = []
end = time.time() + 4
while time.time() < end:
    t = time.perf_counter()
    s.sendall(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            sys.exit("the server closed the HEAD connection")
        buf += d
    lat.append((time.perf_counter() - t) * 1000)
    time.sleep(0.01)
lat.sort()
print(f"heads={len(lat)} p50_ms={lat[len(lat) // 2]:.2f} p99_ms={lat[int(len(lat) * 0.99)]:.2f} max_ms={lat[-1]:.2f}")
PY
)
  wait $dl
  kill -INT $srv; wait $srv 2> /dev/null || true
  echo "$model $heads $(cat "$BODY.downloads")"
  rm -f "$BODY.downloads"
}

for rep in $(seq "$REPS"); do
  for model in "${MODELS[@]}"; do
    echo -n "rep=$rep "
    one "$model"
  done
done
