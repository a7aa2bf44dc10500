#!/usr/bin/env bash
# Fuzz sockscale's byte parsers with cargo-fuzz (libFuzzer), each for a bounded time.
#
# Targets (fuzz/fuzz_targets/): http_request, the server's HTTP request state machine
# (sockscale-proto), and load_response, the load generator's response parser (sockscale-load).
# Each runs for FUZZ_SECONDS seconds (default 60), one after the other, never in parallel, on the
# committed corpus fuzz/corpus/<target>/ plus the named hand-written seeds in fuzz/seeds/<target>/.
# Those two stay read-only: inputs that find new coverage go to fuzz/new-corpus/<target>/
# (git-ignored). With --merge, they are then folded into fuzz/corpus/<target>/ and that corpus is
# minimised with `cargo fuzz cmin`; commit the result. A crashing input is written to
# fuzz/artifacts/<target>/; reproduce it with `cargo +nightly fuzz run <target> <file>`.
#
# Installs what it needs when missing: a nightly toolchain (rustup) and cargo-fuzz (crates.io).
# Prints one line per target (executions, crashes) and exits non-zero if any target crashed or
# failed to run.
#
# Usage: bench/fuzz.sh [--merge] [SECONDS] [TARGET...]
# Environment:
#   FUZZ_SECONDS   seconds per target (default 60; a SECONDS argument wins)
#   FUZZ_MAX_LEN   libFuzzer -max_len for every target (default: 16384 for http_request, 8192
#                  for load_response; payloads can also be run-length coded, see fuzz/src/lib.rs)
#   FUZZ_RSS_MB    libFuzzer -rss_limit_mb (default 1024)
#   FUZZ_JOBS      cargo build jobs (default 1; the machine is shared)
#   FUZZ_ARGS      extra libFuzzer arguments, e.g. "-seed=1 -dict=..."
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
ALL_TARGETS=(http_request load_response)

merge=0
seconds="${FUZZ_SECONDS:-60}"
targets=()
for arg in "$@"; do
    case "$arg" in
        --merge) merge=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        '' | *[!0-9]*) targets+=("$arg") ;;
        *) seconds="$arg" ;;
    esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
    [[ -f "$FUZZ/fuzz_targets/$t.rs" ]] || { echo "fuzz.sh: no fuzz target '$t' (have: ${ALL_TARGETS[*]})" >&2; exit 2; }
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "fuzz.sh: bad duration '$seconds'" >&2; exit 2; }

# --- tools -------------------------------------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
command -v rustup >/dev/null || { echo "fuzz.sh: rustup is needed to install a nightly toolchain" >&2; exit 2; }
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: installing the nightly toolchain" >&2
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

cd "$FUZZ"
export CARGO_BUILD_JOBS="${FUZZ_JOBS:-1}"
if [[ ${#targets[@]} -eq 1 ]]; then
    cargo +nightly fuzz build "${targets[0]}" >&2
else
    cargo +nightly fuzz build >&2
fi

max_len_for() {
    if [[ -n "${FUZZ_MAX_LEN:-}" ]]; then echo "$FUZZ_MAX_LEN"; return; fi
    case "$1" in
        http_request) echo 16384 ;;
        *) echo 8192 ;;
    esac
}

# --- fuzz --------------------------------------------------------------------------------
failed=0
summary=()
for t in "${targets[@]}"; do
    max_len="$(max_len_for "$t")"
    mkdir -p "new-corpus/$t" "corpus/$t" "seeds/$t" "artifacts/$t"
    log="$(mktemp "${TMPDIR:-/tmp}/fuzz-$t.XXXXXX.log")"
    artifacts_before="$(find "artifacts/$t" -type f | wc -l)"
    echo "fuzz.sh: $t for ${seconds}s (log: $log)" >&2
    status=0
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of words on purpose
    cargo +nightly fuzz run "$t" "new-corpus/$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb="${FUZZ_RSS_MB:-1024}" -max_len="$max_len" \
        -timeout=30 -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1 || status=$?
    crashes=$(( $(find "artifacts/$t" -type f | wc -l) - artifacts_before ))
    # libFuzzer's final stats: "stat::number_of_executed_units: N".
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    [[ -n "$execs" ]] || execs="$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')"
    new_units="$(find "new-corpus/$t" -type f | wc -l)"
    if [[ "$status" -ne 0 || "$crashes" -gt 0 ]]; then
        failed=1
        [[ "$crashes" -gt 0 ]] || crashes="? (exit $status)"
        echo "---- $t: last lines of $log" >&2
        tail -n 40 "$log" >&2
    fi
    summary+=("$(printf '%-14s %6ss  executions: %-12s crashes: %-3s new corpus units: %s' \
        "$t" "$seconds" "${execs:-?}" "$crashes" "$new_units")")

    if [[ "$merge" -eq 1 && "$status" -eq 0 ]]; then
        # Fold the new units into the committed corpus, then keep only what adds an edge: with
        # hit counters and comparison operands counted as features too, libFuzzer would keep
        # thousands of files for a few percent more "features".
        find "new-corpus/$t" -type f -exec cp -t "corpus/$t" {} +
        cargo +nightly fuzz cmin "$t" "corpus/$t" -- -use_counters=0 -use_cmp=0 -max_len="$max_len" \
            -rss_limit_mb="${FUZZ_RSS_MB:-1024}" >>"$log" 2>&1
        find "new-corpus/$t" -type f -delete
        echo "fuzz.sh: corpus/$t now $(find "corpus/$t" -type f | wc -l) files, $(du -sh "corpus/$t" | cut -f1)" >&2
    fi
done

printf '%s\n' "${summary[@]}"
exit "$failed"
