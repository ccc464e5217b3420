"""MLTS_SERVICE_PROFILE: a service profiles each client's reader thread and writes the statistics at hang-up."""

from __future__ import annotations

import pstats
import time

import numpy as np

from mlts.runtime.remote import RemoteDevice
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


def test_the_reader_thread_profile_shows_the_inline_execution(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_SERVICE_PROFILE", str(tmp_path / "svc"))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    device = RemoteDevice.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "log"))
    try:
        prepared = device.prepareModel(add_model())
        pool = _pool(a, b)
        for _ in range(3):
            prepared.executeSynchronously(_request(pool))
        np.testing.assert_array_equal(_out(pool), a + b)
        pool.close()
    finally:
        device.close()
    limit = time.monotonic() + 10
    while not list(tmp_path.glob("svc.*")) and time.monotonic() < limit:
        time.sleep(0.05)
    (path,) = tmp_path.glob("svc.*")
    stats = pstats.Stats(str(path))
    called = {name: stats.stats[(file, line, name)][1] for file, line, name in stats.stats}  # type: ignore[attr-defined]
    # The three synchronous calls ran on the reader thread itself (inline: no worker hand-off).
    assert called.get("execute_synchronously") == 3
    assert called.get("executeSynchronously", 0) >= 3


def test_a_burst_listener_is_profiled_too(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_SERVICE_PROFILE", str(tmp_path / "svc"))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    device = RemoteDevice.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "log"))
    try:
        prepared = device.prepareModel(add_model())
        pool = _pool(a, b)
        with prepared.configureExecutionBurst() as burst:
            for _ in range(4):
                burst.execute(_request(pool))
        np.testing.assert_array_equal(_out(pool), a + b)
        pool.close()
    finally:
        device.close()
    limit = time.monotonic() + 10
    while len(list(tmp_path.glob("svc.*-burst-*"))) < 1 and time.monotonic() < limit:
        time.sleep(0.05)
    (path,) = tmp_path.glob("svc.*-burst-*")
    stats = pstats.Stats(str(path))
    called = {name: stats.stats[(file, line, name)][1] for file, line, name in stats.stats}  # type: ignore[attr-defined]
    assert called.get("executeSynchronously", 0) >= 4  # the burst's executions ran on its listener
