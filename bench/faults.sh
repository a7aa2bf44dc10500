#!/usr/bin/env bash
# Run the fault-injection tests (crates/sockscale/tests/faults.rs) with their output.
#
# Every I/O model is served inside a network namespace of its own, behind a veth pair whose
# two ends are impaired with `tc qdisc ... netem delay 50ms 10ms loss 2% reorder 25% 50%`; the
# clients run in the root namespace. Checked per model: echo through `sockscale load` with every
# byte verified; 200 KiB HTTP responses byte-exact over keep-alive; clients resetting (RST) in
# the middle of a response harm no other client; no SIGPIPE kills the server, which exits with
# success on SIGTERM. Traffic only goes to the tests' own namespaces; they are removed when each
# test ends, even when it fails.
#
# Needs: root (network namespaces, veth, tc) and iproute2 (`ip`, `tc`). Without them each test
# prints "skipped: <why>" and passes. When `ip` is missing and apt-get exists, this script
# installs iproute2 first. On a kernel without the netem qdisc (CONFIG_NET_SCH_NETEM unset) the
# test emulates netem in user space: two TUN devices replace the veth pair and a forwarder thread
# applies the same delay, jitter, loss and reordering to every packet between them (no TUN,
# /dev/net/tun missing: the tests skip). Either way each test checks that the delay is real
# (echo round trips) and that segments were really retransmitted.
#
# Usage: bench/faults.sh [TEST-FILTER...]     e.g. bench/faults.sh epoll uring
# Environment:
#   SOCKSCALE_FAULTS_EMULATE=0   on a kernel without netem, skip instead of emulating
#   RUST_TEST_THREADS            tests (models) run at once (default: the number of CPUs)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ "$(id -u)" != 0 ]]; then
    echo "faults.sh: needs root (network namespaces, veth pairs and tc qdiscs); the tests will only skip" >&2
fi

if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
        echo "faults.sh: iproute2 (ip, tc) is missing; installing it with apt-get" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2
    else
        echo "faults.sh: needs iproute2 (ip, tc); install it (e.g. apt-get install -y iproute2)" >&2
    fi
fi

cd "$ROOT"
exec cargo test -p sockscale --test faults -- --nocapture "$@"
