# --- HTTP/3 interop peers: paste into .ci/run before the tests (needs `cd` at the repository root).
# tests/h3_peers.rs and the HTTP/3 interop tests run three independent stacks through
# tests/support/h3.rs: ngtcp2 0.12.1 (Debian ngtcp2-client/ngtcp2-server: gtlsclient, gtlsserver),
# aioquic 1.7.2 with its sdist's examples (http3_client.py, http3_server.py, demo app), and quic-go
# v0.65.0 (tests/interop/quicgo_h3). Without one a test skips with the reason. Versions are pinned;
# a download that fails stops CI here, with the reason. Quiet and idempotent: skips what is present.
h3_log=$(mktemp)
h3_fail() { # Print the failed step's output, then stop.
    cat "$h3_log" >&2
    echo "== HTTP/3 interop peers: $*" >&2
    exit 1
}

if ! command -v gtlsclient >/dev/null 2>&1 || ! { command -v gtlsserver >/dev/null 2>&1 || [ -x /usr/sbin/gtlsserver ]; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing ngtcp2-client and ngtcp2-server (gtlsclient, gtlsserver) for the HTTP/3 interop tests"
        apt-get update -qq >"$h3_log" 2>&1 || h3_fail "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ngtcp2-client ngtcp2-server >"$h3_log" 2>&1 ||
            h3_fail "apt-get install ngtcp2-client ngtcp2-server failed"
    fi
fi

h3_aioquic=1.7.2
h3_aioquic_sdist_sha256=4def7cb0a692dc12c995cc397a93f41b78cc30b7bf078769c3a3bb1ba9dcf362
if command -v python3 >/dev/null 2>&1; then
    if ! python3 -c "import aioquic, sys; sys.exit(aioquic.__version__ != '$h3_aioquic')" >/dev/null 2>&1 ||
        ! python3 -c "import dnslib, httpx, jinja2, starlette, wsproto" >/dev/null 2>&1; then
        echo "== installing aioquic $h3_aioquic and its examples' modules (Python) for the HTTP/3 interop tests"
        h3_pkgs="aioquic==$h3_aioquic dnslib==0.9.26 httpx==0.28.1 jinja2==3.1.6 starlette==1.10.0 wsproto==1.3.2"
        python3 -m pip install -q $h3_pkgs >"$h3_log" 2>&1 ||
            python3 -m pip install -q --break-system-packages $h3_pkgs >"$h3_log" 2>&1 ||
            h3_fail "pip install $h3_pkgs failed"
    fi
    # The examples are only in the sdist: unpack its examples/ into the cache, checked by its sha256.
    h3_examples="${XDG_CACHE_HOME:-$HOME/.cache}/sockscale/aioquic-$h3_aioquic/examples"
    if [ ! -f "$h3_examples/http3_client.py" ] || [ ! -f "$h3_examples/http3_server.py" ]; then
        echo "== fetching the aioquic $h3_aioquic sdist's examples for the HTTP/3 interop tests"
        h3_tmp=$(mktemp -d)
        python3 -m pip download -q --no-deps --no-binary :all: "aioquic==$h3_aioquic" -d "$h3_tmp" >"$h3_log" 2>&1 ||
            h3_fail "pip download aioquic==$h3_aioquic (sdist) failed"
        echo "$h3_aioquic_sdist_sha256  $h3_tmp/aioquic-$h3_aioquic.tar.gz" | sha256sum -c --quiet >"$h3_log" 2>&1 ||
            h3_fail "the aioquic $h3_aioquic sdist has another sha256 than $h3_aioquic_sdist_sha256"
        mkdir -p "$(dirname "$h3_examples")"
        tar -xzf "$h3_tmp/aioquic-$h3_aioquic.tar.gz" -C "$(dirname "$(dirname "$h3_examples")")" \
            "aioquic-$h3_aioquic/examples" >"$h3_log" 2>&1 || h3_fail "unpacking the aioquic sdist's examples failed"
        rm -rf "$h3_tmp"
    fi
    export SOCKSCALE_AIOQUIC_EXAMPLES="$h3_examples"
fi

h3_go=$(command -v go || true)
if [ -z "$h3_go" ] && [ -x /usr/local/go/bin/go ]; then h3_go=/usr/local/go/bin/go; fi
if [ -n "$h3_go" ]; then
    # The module (checked against go.sum), then a build to fill Go's build cache: the tests build
    # it offline, which takes seconds once quic-go is compiled (47-57 s cold on two busy cores here).
    (cd crates/sockscale/tests/interop/quicgo_h3 && "$h3_go" mod download && "$h3_go" build -o /dev/null .) \
        >"$h3_log" 2>&1 || h3_fail "fetching or building quic-go v0.65.0 (tests/interop/quicgo_h3) failed"
fi
rm -f "$h3_log"
# --- end of the HTTP/3 interop peers
