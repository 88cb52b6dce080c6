#!/usr/bin/env bash
# Tests of the Python package and its Airflow provider, against the real
# batchgate binary and a real Airflow (the versions pinned in
# requirements-airflow.txt).
#
#   clients/python/run_tests.sh [pytest arguments…]
#
# The virtualenv lives in $BATCHGATE_PY_VENV (default
# ${TMPDIR:-/tmp}/batchgate-py-venv) and is reused while it was built by the
# same Python from the same requirements; the package itself is reinstalled
# from this tree on every run. The binary is $BATCHGATE_BIN if set, else it is
# built with `cargo build --bin batchgate` (a no-op when up to date).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${BATCHGATE_PY_VENV:-${TMPDIR:-/tmp}/batchgate-py-venv}"
REQUIREMENTS="$HERE/requirements-airflow.txt"

# One run at a time per virtualenv: another run could reinstall the package mid-test.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

want="$("$PYTHON" -c 'import sys; print(sys.version)' | sha256sum | cut -c1-16)-$(sha256sum "$REQUIREMENTS" | cut -c1-16)"
if [ "$(cat "$VENV/.batchgate-stamp" 2>/dev/null)" != "$want" ]; then
    echo "== virtualenv $VENV (new: Python or requirements changed)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -r "$REQUIREMENTS"
    echo "$want" > "$VENV/.batchgate-stamp"
else
    echo "== virtualenv $VENV (reused)"
fi
echo "== pip install $HERE"
"$VENV/bin/python" -m pip install --quiet --no-deps --force-reinstall "$HERE"

if [ -n "${BATCHGATE_BIN:-}" ]; then
    echo "== batchgate binary: $BATCHGATE_BIN"
else
    echo "== cargo build --bin batchgate"
    (cd "$REPO" && cargo build --quiet --bin batchgate)
    export BATCHGATE_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/batchgate"
fi
[ -x "$BATCHGATE_BIN" ] || { echo "no batchgate binary at $BATCHGATE_BIN" >&2; exit 1; }

echo "== pytest"
cd "$HERE"
status=0
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
