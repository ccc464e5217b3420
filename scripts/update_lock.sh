#!/usr/bin/env bash
# Re-resolve the project's dependencies (the newest versions pyproject.toml allows, with the
# test, images, fuzz, tflite, real-models and cluster extras) in a fresh temporary virtual environment and write their exact
# versions to requirements/lock.txt. Review the diff, run scripts/run_tests.sh (it re-installs
# from the new lock), and commit the lock with the code it was tested with.
#
# usage: scripts/update_lock.sh [--check]
#   --check   only report whether the lock matches the installed .venv (exit 1 if not)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="${MLTS_LOCK:-$ROOT/requirements/lock.txt}"
PYTHON_BIN="${PYTHON:-python3}"
VENV="${MLTS_VENV:-$ROOT/.venv}"

freeze() { "$1" -m pip freeze --exclude-editable --disable-pip-version-check | LC_ALL=C sort -f; }

if [ "${1:-}" = "--check" ]; then
    [ -x "$VENV/bin/python" ] || { echo "update_lock.sh: no $VENV; run scripts/run_tests.sh first" >&2; exit 2; }
    if diff <(grep -v '^#' "$LOCK" | LC_ALL=C sort -f) <(freeze "$VENV/bin/python"); then
        echo "update_lock.sh: $VENV matches $LOCK"
    else
        echo "update_lock.sh: $VENV differs from $LOCK (lines < lock, > installed)" >&2
        exit 1
    fi
    exit 0
fi
[ $# -eq 0 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PYTHON_BIN" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$TMP/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$ROOT[test,images,fuzz,tflite,real-models,cluster]"
{
    echo "# Exact versions the test suite passes with; scripts/_env.sh installs with -c this file."
    echo "# Regenerate with scripts/update_lock.sh (Python $("$TMP/venv/bin/python" -c 'import platform; print(platform.python_version())'))."
    "$TMP/venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check \
        | grep -iv '^mlts[= @]' | LC_ALL=C sort -f
} > "$LOCK.new"
mv "$LOCK.new" "$LOCK"
echo "update_lock.sh: wrote $LOCK"
