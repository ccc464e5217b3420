"""MLTS_SERVICE_PROFILE: a service profiles each client's reader thread and each burst's listener, and
writes the statistics when the client hangs up or the burst ends."""

from __future__ import annotations

import pstats
import time
from collections.abc import Callable

import numpy as np

from mlts.runtime.remote import RemoteDevice
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


def _profiled_calls(tmp_path, monkeypatch, execute: Callable) -> None:
    """Run `execute(prepared, request)` on a fake-add service that profiles into tmp_path."""
    monkeypatch.setenv("MLTS_SERVICE_PROFILE", str(tmp_path / "svc"))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    device = RemoteDevice.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "log"))
    try:
        prepared = device.prepareModel(add_model())
        pool = _pool(a, b)
        execute(prepared, _request(pool))
        np.testing.assert_array_equal(_out(pool), a + b)
        pool.close()
    finally:
        device.close()


def _call_counts(tmp_path, pattern: str) -> dict[str, int]:
    limit = time.monotonic() + 10
    while not list(tmp_path.glob(pattern)) and time.monotonic() < limit:
        time.sleep(0.05)
    (path,) = tmp_path.glob(pattern)
    stats = pstats.Stats(str(path))
    return {name: stats.stats[(file, line, name)][1] for file, line, name in stats.stats}  # type: ignore[attr-defined]


def test_the_reader_thread_profile_shows_the_inline_execution(tmp_path, monkeypatch):
    def execute(prepared, request):
        for _ in range(3):
            prepared.executeSynchronously(request)

    _profiled_calls(tmp_path, monkeypatch, execute)
    called = _call_counts(tmp_path, "svc.*")
    # The three synchronous calls ran on the reader thread itself (inline: no worker hand-off).
    assert called.get("execute_synchronously") == 3
    assert called.get("executeSynchronously", 0) >= 3


def test_a_burst_listener_is_profiled_too(tmp_path, monkeypatch):
    def execute(prepared, request):
        with prepared.configureExecutionBurst() as burst:
            for _ in range(4):
                burst.execute(request)

    _profiled_calls(tmp_path, monkeypatch, execute)
    called = _call_counts(tmp_path, "svc.*-burst-*")
    assert called.get("executeSynchronously", 0) >= 4  # the burst's executions ran on its listener
