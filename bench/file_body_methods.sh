#!/usr/bin/env bash
# Each way of sending a file body, in the minimal C server bench/reference/file_body_methods.c:
# GB per server CPU-second (docs/BENCHMARKS.md, "File bodies"). The server runs on core 0 and
# wrk -t1 -c10 keep-alive on core 1; server CPU from /proc/PID/stat. Methods are interleaved,
# REPS times; prints each run, then the median (min-max) per method.
#
# Usage: bench/file_body_methods.sh [--size BYTES] [--reps N] [--duration S] [METHOD...]
#   METHOD: mem, sendfile[:CHUNK], pread[:CHUNK], mmap, splice[:CHUNK], zerocopy[:CHUNK],
#   each optionally with @SNDBUF (e.g. sendfile:2097152@4194304). Default: a list of them all.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=1048576 REPS=3 DURATION=4
METHODS=()
while [ $# -gt 0 ]; do
  case $1 in
    --size) SIZE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) METHODS+=("$1"); shift ;;
  esac
done
[ ${#METHODS[@]} -gt 0 ] || METHODS=(mem sendfile:2097152 sendfile:65536 sendfile:2097152@4194304 zerocopy:2097152 zerocopy:65536 splice:1048576 mmap pread:1048576)
for tool in gcc wrk taskset; do command -v $tool > /dev/null || { echo "bench/file_body_methods.sh: needs $tool" >&2; exit 1; }; done
WORK=$(mktemp -d /tmp/sockscale-fbm-XXXXXX)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$WORK"' EXIT
gcc -O2 -pthread -o "$WORK/server" "$ROOT/bench/reference/file_body_methods.c"
head -c "$SIZE" /dev/urandom > "$WORK/body"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for rep in $(seq "$REPS"); do
  for spec in "${METHODS[@]}"; do
    method=${spec%%@*}; sndbuf=0; [ "$spec" != "$method" ] && sndbuf=${spec#*@}
    mode=${method%%:*}; chunk=1048576; [ "$method" != "$mode" ] && chunk=${method#*:}
    SNDBUF=$sndbuf taskset -c 0 "$WORK/server" "$PORT" "$WORK/body" "$mode" "$chunk" 2> "$WORK/server.err" &
    srv=$!
    for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$PORT) 2> /dev/null && break; sleep 0.1; done
    before=$(ticks $srv)
    out=$(taskset -c 1 wrk -t1 -c10 -d"${DURATION}s" "http://127.0.0.1:$PORT/")
    after=$(ticks $srv)
    kill -TERM $srv 2> /dev/null || { echo "the server for $spec died: $(cat "$WORK/server.err")" >&2; exit 1; }; wait $srv 2> /dev/null || true
    read -r gbps <<< "$(python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
scale = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
print(float(m.group(1)) * scale[m.group(2)] / 1e9)
PY
)"
    cpu=$(python3 -c "print(($after - $before) / $(getconf CLK_TCK) / $DURATION)")
    per=$(python3 -c "print(f'{$gbps / $cpu:.2f}' if $cpu > 0 else 'nan')")
    note=$(grep -o 'zerocopy sends completed.*' "$WORK/server.err" || true)
    echo "rep=$rep method=$spec GB/s=$(printf %.2f "$gbps") server_cpu=$(printf %.0f%% "$(python3 -c "print($cpu * 100)")") GB_per_cpu_s=$per ${note}"
  done
done | tee "$WORK/runs"
echo
python3 - "$WORK/runs" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.search(r"method=(\S+) .* GB_per_cpu_s=([\d.]+)", line)
    if m:
        runs.setdefault(m.group(1), []).append(float(m.group(2)))
print("| method | GB per server CPU-s, median (min-max) |")
print("|---|---|")
for method, xs in runs.items():
    print(f"| {method} | {statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f}) |")
PY
