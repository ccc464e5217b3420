"""A client that never reads its replies holds no worker: other clients' executions go on at their pace.

The flooder (tests/runtime/flooder.py, its own process) sends synchronous executions without ever
reading, and connects again each time the service drops it. The victim's synchronous executions,
measured before, during and after, keep their latency: the median under attack stays within twice
the median without it (medians of hundreds of calls, so a busy machine's noise does not decide), and
no call waits anywhere near the frame timeout (what a worker blocked on the flooder's socket costs).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request

ATTACK_S = 5.0
FRAME_TIMEOUT_S = 3.0


@pytest.fixture
def service(tmp_path):
    svc = SharedService.start(
        fake_spec("AddDevice"),
        name="fake-add",
        log_path=str(tmp_path / "svc.log"),
        service_args=["--frame-timeout", str(FRAME_TIMEOUT_S)],
    )
    yield svc
    assert svc.stop() == 0


def _latencies(prepared, request, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        prepared.executeSynchronously(request)
        out.append(time.perf_counter() - t0)
    return out


def test_a_non_reading_flooder_does_not_slow_another_client(service):
    with service.connect() as victim:
        prepared = victim.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        request = _request(pool)
        _latencies(prepared, request, 50)  # warm up
        before = _latencies(prepared, request, 200)
        flooder = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.flooder", service.path, str(ATTACK_S + 0.5)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(0.5)  # the flood has filled its socket and the service's queue for it
            attacked: list[float] = []
            end = time.monotonic() + ATTACK_S
            while time.monotonic() < end:
                attacked += _latencies(prepared, request, 20)
            out, _ = flooder.communicate(timeout=30)
        finally:
            if flooder.poll() is None:
                flooder.kill()
                flooder.wait()
        after = _latencies(prepared, request, 200)
        np.testing.assert_array_equal(_out(pool), 2 * x)
        pool.close()
    unattacked = statistics.median(before + after)
    under_attack = statistics.median(attacked)
    assert under_attack <= 2 * unattacked, (
        f"median {under_attack * 1e6:.0f} µs under attack, {unattacked * 1e6:.0f} µs without "
        f"({len(attacked)} calls under attack)"
    )
    # A worker that waited for the flooder would stall the victim for the whole frame timeout.
    assert max(attacked) < FRAME_TIMEOUT_S / 2, f"a call took {max(attacked):.2f} s under attack"
    assert int(out) >= 2  # the flooder was dropped (and came back) at least once
    assert service.alive()
    with open(service.log_path) as f:
        log = f.read()
    assert f"took no data for {FRAME_TIMEOUT_S:g} s" in log
    assert "Traceback" not in log
