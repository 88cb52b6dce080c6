#!/usr/bin/env bash
# Fuzz the real binary with schemathesis against its own /openapi.json, once on
# SQLite and once on PostgreSQL. Fails on any 5xx or any response that does
# not match the spec, or when fewer than MIN_CASES requests were generated.
#
# The service can reach nothing but loopback: HTTP_PROXY, HTTPS_PROXY and
# ALL_PROXY point at a closed port on 127.0.0.1 (so a generated webhook URL
# that slipped through would be refused there), NO_PROXY keeps 127.0.0.1 direct,
# and --webhook-allow (when the binary has it) limits webhooks to loopback.
#
# Usage: tests/fuzz/run_schemathesis.sh [sqlite|postgres]...   (default: both)
# Env:   FUZZ_MAX_EXAMPLES (per operation, default 80), FUZZ_MAX_TIME (seconds
#        of the stateless pass per backend, default 120), FUZZ_STATEFUL_TIME
#        (seconds of the stateful pass per backend, default 90; 0 skips it),
#        FUZZ_MIN_CASES (requests per pass, default 1000), FUZZ_SEED,
#        BATCHGATE_TEST_PG_URL, FUZZ_VENV (default target/fuzz-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(sqlite postgres)
max_examples=${FUZZ_MAX_EXAMPLES:-80}
max_time=${FUZZ_MAX_TIME:-120}
stateful_time=${FUZZ_STATEFUL_TIME:-90}
seed=${FUZZ_SEED:-20260824}
min_cases=${FUZZ_MIN_CASES:-1000}
pg_admin=${BATCHGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}
venv=${FUZZ_VENV:-$root/target/fuzz-venv}

# Its own venv, the pinned version.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/pip" freeze 2>/dev/null | grep -qxF -f tests/fuzz/requirements.txt; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/fuzz/requirements.txt
fi

cargo build --quiet --bin batchgate
bin=$root/target/debug/batchgate

work=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A port nobody listens on: bound then closed, so connecting is refused.
closed_port=$(free_port)
export HTTP_PROXY=http://127.0.0.1:$closed_port HTTPS_PROXY=http://127.0.0.1:$closed_port
export ALL_PROXY=http://127.0.0.1:$closed_port NO_PROXY=127.0.0.1,localhost
export http_proxy=$HTTP_PROXY https_proxy=$HTTPS_PROXY all_proxy=$ALL_PROXY no_proxy=$NO_PROXY

extra_flags=()
if "$bin" serve --help | grep -q -- '--webhook-allow'; then
    extra_flags+=(--webhook-allow 127.0.0.1,localhost)
fi

# One schemathesis pass against the server on $port: fails on a finding, or
# when fewer than $min_cases requests were generated.
fuzz() {
    local backend=$1 pass=$2 phases=$3 seconds=$4 port=$5 status=0
    echo "== schemathesis on $backend, $pass (127.0.0.1:$port, phases $phases, at most $max_examples cases per operation, ${seconds}s)"
    set +e
    # One worker: schemathesis's generator is not reliably thread-safe (runtime
    # errors inside hypothesis with two), and the server has the other core.
    "$venv/bin/python" tests/fuzz/st.py --config-file tests/fuzz/schemathesis.toml run "http://127.0.0.1:$port/openapi.json" \
        --checks not_a_server_error,response_schema_conformance \
        --phases "$phases" \
        --max-examples "$max_examples" --max-time "$seconds" --seed "$seed" \
        --workers 1 --request-timeout 10 --generation-database none --generation-allow-x00 true \
        --report junit --report-junit-path "$work/$backend-$pass.xml" \
        --no-color --output-truncate true 2>&1 | tee "$work/$backend-$pass.out"
    status=${PIPESTATUS[0]}
    set -e
    local cases
    cases=$(grep -oE '[0-9]+ generated' "$work/$backend-$pass.out" | tail -n1 | cut -d' ' -f1)
    echo "== $backend, $pass: ${cases:-0} generated requests (at least $min_cases wanted)"
    if [ "${cases:-0}" -lt "$min_cases" ]; then
        echo "too few generated requests on $backend ($pass)" >&2
        status=1
    fi
    return $status
}

run_one() {
    local backend=$1 db
    case $backend in
        sqlite) db="sqlite://$work/fuzz.db" ;;
        postgres)
            local name="batchgate_fuzz_$$"
            psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
            db="${pg_admin%/*}/$name"
            ;;
        *) echo "unknown backend $backend" >&2; return 2 ;;
    esac
    local port
    port=$(free_port)
    RUST_LOG=${RUST_LOG:-warn} "$bin" serve --db "$db" --listen "127.0.0.1:$port" "${extra_flags[@]}" \
        >"$work/$backend.log" 2>&1 &
    server=$!
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
        sleep 0.1
    done
    local status=0
    fuzz "$backend" stateless "examples,coverage,fuzzing" "$max_time" "$port" || status=1
    if [ "$stateful_time" -gt 0 ]; then
        fuzz "$backend" stateful stateful "$stateful_time" "$port" || status=1
    fi
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
    if [ "$backend" = postgres ]; then psql "$pg_admin" -qc "DROP DATABASE IF EXISTS batchgate_fuzz_$$" >/dev/null; fi
    if grep -q "request failed" "$work/$backend.log"; then
        echo "server errors logged on $backend:" >&2
        grep "request failed" "$work/$backend.log" | head -20 >&2
        status=1
    fi
    if [ "$status" -ne 0 ]; then
        echo "schemathesis found failures on $backend" >&2
        return 1
    fi
}

failed=0
for b in "${backends[@]}"; do
    run_one "$b" || failed=1
done
exit $failed
