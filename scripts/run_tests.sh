#!/usr/bin/env bash
# Run the whole mlts test suite: sets up .venv when missing, installs the project with
# its test extras (and those whose tests would otherwise skip: coverage-guided fuzzing,
# the Dask cluster, the real trained models), then runs pytest, in parallel over the CPUs when
# given no arguments (extra arguments go to pytest as they are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
ensure_env "[test,fuzz,cluster,real-models]"
cd "$ROOT"
if [ "$#" -eq 0 ]; then
    # The whole suite runs in one worker process per CPU (pytest-xdist; MLTS_TEST_WORKERS=N for N,
    # 0 for none), tests handed out as workers come free. With arguments, pytest gets them as given.
    set -- -n "${MLTS_TEST_WORKERS:-auto}" --dist worksteal
fi
exec "$VENV/bin/python" -m pytest "$@"
