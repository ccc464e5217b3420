# Shared by the scripts: create the project's virtual environment when missing and
# (re)install the project when pyproject.toml or the lock file changed. Sourced, not run.
# Every install is constrained (-c) by requirements/lock.txt, the exact versions the suite
# passes with; scripts/update_lock.sh regenerates it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MLTS_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
LOCK="${MLTS_LOCK:-$ROOT/requirements/lock.txt}"

ensure_env() {
    local extras="$1"   # "" or "[test]"
    if ! command -v "$PYTHON_BIN" >/dev/null 2>&1; then
        echo "mlts: $PYTHON_BIN not found; install Python 3.11 or newer (or set PYTHON=...)" >&2
        exit 1
    fi
    if ! "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
        echo "mlts: $PYTHON_BIN is $("$PYTHON_BIN" -V 2>&1); Python 3.11 or newer is needed" >&2
        exit 1
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "mlts: creating virtual environment in $VENV" >&2
        "$PYTHON_BIN" -m venv "$VENV"
    fi
    if [ ! -f "$LOCK" ]; then
        echo "mlts: lock file $LOCK is missing; restore it or run scripts/update_lock.sh" >&2
        exit 1
    fi
    local stamp="$VENV/.mlts-installed$extras"
    local want
    # The compiled driver kernels are built at install time: a changed source or header means a new install.
    want="$(cat "$ROOT/pyproject.toml" "$LOCK" "$ROOT/setup.py" "$ROOT"/driver/native/*.c "$ROOT"/driver/native/*.h | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "mlts: installing the project and its dependencies (pinned by $LOCK) into $VENV" >&2
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$LOCK" -e "$ROOT$extras"
        echo "$want" > "$stamp"
    fi
}
