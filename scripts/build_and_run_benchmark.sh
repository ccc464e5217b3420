#!/usr/bin/env bash
# Run the mlts scoring benchmark: sets up .venv when missing, installs the project,
# runs every zoo model on every driver and on onnxruntime, and prints where the results are.
#
# usage: scripts/build_and_run_benchmark.sh [-f MODEL_REGEX] [-d DRIVER_REGEX] [-o OUT_DIR] [-- extra mlts benchmark options]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"

MODELS=".*"
DRIVERS=".*"
OUT="$ROOT/results/$(date +%Y%m%d-%H%M%S)"
usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        -f) MODELS="${2:?-f needs a regex}"; shift 2 ;;
        -d) DRIVERS="${2:?-d needs a regex}"; shift 2 ;;
        -o) OUT="${2:?-o needs a directory}"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) echo "build_and_run_benchmark.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

ensure_env ""
"$VENV/bin/mlts" benchmark --models "$MODELS" --drivers "$DRIVERS" --out "$OUT" "$@"
echo "mlts: results are in $OUT"
