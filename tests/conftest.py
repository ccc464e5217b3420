"""Suite-wide fixtures: a private model cache, single-threaded math, and a marker on every process started."""

from __future__ import annotations

import os
import secrets

import pytest

from tests._procs import RUN_MARKER

# Every process this run starts inherits the marker, so leftover-process checks look only at
# this run's processes, never at another user's or another test run's (tests/_procs.py).
os.environ[RUN_MARKER] = f"{os.getpid()}-{secrets.token_hex(8)}"

# Both the tests' own NumPy and every driver process they start use one BLAS thread,
# so tests running beside each other don't compete for the two cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory):
    """Zoo models are built once per test session into a private cache, unless one is given.

    The configuration folder is an empty private one, so calibrated capabilities files of the
    person running the tests cannot change what drivers report.
    """
    if "MLTS_CACHE_DIR" not in os.environ:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            # Workers of one run (pytest -n N) share one cache: the zoo's builds take a lock, so a
            # model is built once, by the first worker that needs it (tests/models/test_zoo.py).
            shared = tmp_path_factory.getbasetemp().parent / "mlts-cache"
            shared.mkdir(exist_ok=True)
            os.environ["MLTS_CACHE_DIR"] = str(shared)
        else:
            os.environ["MLTS_CACHE_DIR"] = str(tmp_path_factory.mktemp("mlts-cache"))
    os.environ["MLTS_CONFIG_DIR"] = str(tmp_path_factory.mktemp("mlts-config"))
    yield
