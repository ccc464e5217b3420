#!/usr/bin/env bash
# Build (install) mlts and run one MLTS mode, writing results.json, results.csv,
# report.html and summary.md (the verdict in Markdown) under results/<date-time>/ and
# printing the report's path. On a 2-core machine the full scoring run takes about
# 26 minutes, -q about 1.5 to 4; all-stress about 2 minutes (see the README).
#
# usage: scripts/build_and_run_benchmark.sh [options] [MODE] [-- extra mlts options]
#   -f, --filter-driver REGEX    only drivers whose name matches (default: all but sample-faulty)
#   -m, --models REGEX           only zoo models whose name matches (default: all; stress: two small ones)
#   -r, --include-nnapi-reference
#                                also run the runtime's own device choice ("nnapi-reference")
#       --nnapi-reference-only   run only the runtime's own device choice (and onnxruntime)
#   -b, --skip-build             use the installed environment as it is (no install step)
#   -o, --out DIR                results folder (default: results/<date-time>)
#   -q, --quick                  MLTS's short run for CI (at most 0.3 s warm-up and 1 s timed, each ended
#                                once precise; 10 LSTM sequences; stress: 1 s per test)
#   -h, --help                   this text
# MODE: scoring (default), a stress mode (inference-stress, model-loading-stress, ...,
#       see `mlts stress --help`) or all-stress (every stress mode).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "build_and_run_benchmark.sh: $*" >&2; exit 2; }

DRIVERS=""
MODELS=""
REFERENCE=""
SKIP_BUILD=0
QUICK=""
OUT="$ROOT/results/$(date +%Y%m%d-%H%M%S)"
MODE=""
while [ $# -gt 0 ]; do
    case "$1" in
        -f|--filter-driver) [ $# -ge 2 ] || die "$1 needs a regex"; DRIVERS="$2"; shift 2 ;;
        -m|--models) [ $# -ge 2 ] || die "$1 needs a regex"; MODELS="$2"; shift 2 ;;
        -r|--include-nnapi-reference) REFERENCE="--include-nnapi-reference"; shift ;;
        --nnapi-reference-only) REFERENCE="--nnapi-reference-only"; shift ;;
        -b|--skip-build) SKIP_BUILD=1; shift ;;
        -o|--out) [ $# -ge 2 ] || die "$1 needs a directory"; OUT="$2"; shift 2 ;;
        -q|--quick) QUICK="--quick"; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) usage >&2; die "unknown option $1" ;;
        *) [ -z "$MODE" ] || die "one MODE only (got $MODE and $1)"; MODE="$1"; shift ;;
    esac
done
MODE="${MODE:-scoring}"

if [ "$SKIP_BUILD" = 1 ]; then
    [ -x "$VENV/bin/mlts" ] || die "no installed mlts in $VENV; run once without -b to build it"
else
    ensure_env ""
fi

mkdir -p "$OUT"  # summary.md goes in it, and mlts checks where it writes before any work
args=(--out "$OUT" --summary "$OUT/summary.md")
[ -n "$DRIVERS" ] && args+=(--drivers "$DRIVERS")
[ -n "$MODELS" ] && args+=(--models "$MODELS")
STRESS_MODES=" $("$VENV/bin/python" -c 'from mlts.crash.suite import MODES; print(" ".join(MODES))') "
case "$MODE" in
    scoring) "$VENV/bin/mlts" benchmark "${args[@]}" $QUICK $REFERENCE "$@" || status=$? ;;
    all-stress) "$VENV/bin/mlts" stress all "${args[@]}" $QUICK "$@" || status=$? ;;
    *)
        case "$STRESS_MODES" in
            *" $MODE "*) "$VENV/bin/mlts" stress "$MODE" "${args[@]}" $QUICK "$@" || status=$? ;;
            *) die "unknown MODE '$MODE'; available: scoring, all-stress,$STRESS_MODES" ;;
        esac ;;
esac
status="${status:-0}"

REPORT="$OUT/report.html"
if [ -f "$REPORT" ]; then
    echo "mlts: report: $REPORT"
    if { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; } && command -v xdg-open >/dev/null 2>&1; then
        xdg-open "$REPORT" >/dev/null 2>&1 || true
    fi
fi
exit "$status"
