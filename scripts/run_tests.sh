#!/usr/bin/env bash
# Run the whole mlts test suite: sets up .venv when missing, installs the project with
# its test extras (and those whose tests would otherwise skip: coverage-guided fuzzing,
# the Dask cluster, the real trained models), then runs pytest (extra arguments go to pytest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
ensure_env "[test,fuzz,cluster,real-models]"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
