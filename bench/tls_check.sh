#!/usr/bin/env bash
# A third-party look at `sockscale serve --tls-cert/--tls-key`: testssl.sh (Debian's package)
# against the server on loopback, with a fresh self-signed ECDSA P-256 certificate. Prints
# testssl's protocols, ciphers, server defaults and vulnerability checks.
#
# Usage: bench/tls_check.sh [MODEL]     (default: epoll)
set -euo pipefail
model=${1:-epoll}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v testssl >/dev/null || apt-get install -y -qq testssl.sh >/dev/null
cargo build --release -q -p sockscale --manifest-path "$root/Cargo.toml"
dir=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$dir"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -keyout "$dir/key.pem" -out "$dir/cert.pem" \
    -days 30 -nodes -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
"$root/target/release/sockscale" serve --proto http --model "$model" --listen 127.0.0.1:0 \
    --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem" >"$dir/serve.out" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q "listening on" "$dir/serve.out" && break; sleep 0.1; done
address=$(sed -n 's/^listening on //p' "$dir/serve.out" | head -1)
timeout 600 testssl --quiet --color 0 --warnings off -p -s -f -S -U "$address" | grep -v '^\s*$'
