"""The service keeps a higher-priority execution's ticket a moment after its answer (mlts.ipc.service.linger).

Unit: tickets handed over are left no earlier than the linger, all at once when the service stops,
and not taken when lingering is off. Service: after a HIGH execution that preempted a running LOW
one, lower-priority work stays outranked for the linger past the answer (a LOW ticket on the
driver's own gate is the probe), and not at all when nothing lower is in the pool.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus, Priority
from mlts.hal.errors import HalError
from mlts.ipc.service.host import ServiceHost
from mlts.ipc.service.linger import Linger
from mlts.runtime.remote import RemoteDevice
from tests.driver import cfkit
from tests.runtime.servicekit import LONG_ARGS, shared_request


def _until(condition, what: str, limit_s: float = 10.0) -> None:
    limit = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < limit, f"timed out waiting until {what}"
        time.sleep(0.001)


def test_kept_tickets_are_left_no_earlier_than_the_linger():
    linger = Linger(0.05)
    left: list[float] = []
    held = [lambda: left.append(time.monotonic())]
    start = time.monotonic()
    assert linger.keep(held) and held == []  # the block that held them leaves nothing now
    _until(lambda: left, "the ticket is left")
    assert left[0] - start >= 0.05
    assert linger.kept == 1
    linger.stop()


def test_stopping_leaves_every_kept_ticket_at_once():
    linger = Linger(1.0)
    left: list[int] = []
    for n in range(3):
        assert linger.keep([lambda n=n: left.append(n)])
    linger.stop()
    assert sorted(left) == [0, 1, 2]
    held = [lambda: left.append(9)]
    assert not linger.keep(held) and held  # stopped: the caller leaves them itself


def test_no_linger_takes_nothing():
    linger = Linger(0)
    held = [lambda: None]
    assert not linger.keep(held) and len(held) == 1 and not linger.keep([])
    with pytest.raises(ValueError, match="between 0 and 1 s"):
        Linger(2)


@pytest.fixture
def host_of():
    made: list[tuple[ServiceHost, threading.Thread]] = []

    def start(linger_s: float) -> tuple[ServiceHost, str]:
        device = SampleAll()
        # One worker: the HIGH execution runs on an extra thread beside the paused LOW one.
        host = ServiceHost(device, workers=1, shared=True, priority_linger=linger_s)
        folder = tempfile.mkdtemp(prefix="mlts-linger-")
        os.chmod(folder, 0o700)
        path = os.path.join(folder, "driver.sock")
        thread = threading.Thread(target=host.listen, args=(path,), daemon=True)
        thread.start()
        _until(lambda: os.path.exists(path), "the service listens")
        made.append((host, thread))
        return host, path

    yield start
    for host, thread in made:
        host.close()
        thread.join(5)


def _high_after_low(host: ServiceHost, path: str, linger_s: float) -> tuple[float, float]:
    """Run a HIGH execution while a LOW one (an endless loop) runs; how long after the HIGH call began
    a LOW ticket on the driver's gate stayed outranked, and how long the call took."""
    gate = host.device.gate
    dev = RemoteDevice.connect(path)
    try:
        low = dev.prepareModel(cfkit.endless_model(), priority=Priority.LOW)
        high = dev.prepareModel(cfkit.while_model(), priority=Priority.HIGH)
        low_req, low_pool = shared_request([np.array([1.0], np.float32)], [4])
        high_req, high_pool = shared_request(LONG_ARGS, [12, 4])
        execution = low.execute(low_req, loop_timeout_duration=4_000_000_000)
        _until(lambda: host.exec_pool.status()["busy"] == 1, "the LOW execution runs")
        probe = gate.enter(Priority.LOW)
        try:
            started = time.monotonic()
            high.executeSynchronously(high_req)
            answered = time.monotonic() - started
            _until(lambda: not probe.outranked(), "lower-priority work resumes", 5 + linger_s)
            resumed = time.monotonic() - started
        finally:
            gate.leave(probe)
        with pytest.raises(HalError) as e:
            execution.result()
        assert e.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT  # the loop's own timeout
        low_pool.close()
        high_pool.close()
        return resumed, answered
    finally:
        dev.close()


def test_lower_priority_work_stays_paused_for_the_linger_after_a_high_answer(host_of):
    host, path = host_of(1.0)
    resumed, answered = _high_after_low(host, path, 1.0)
    # The linger starts when the answer is sent, after the call began (the HIGH model takes ~40 ms).
    assert resumed >= 1.0, (resumed, answered)
    assert host.linger.kept >= 1


def test_without_lower_priority_work_nothing_lingers(host_of):
    host, path = host_of(0.4)
    dev = RemoteDevice.connect(path)
    try:
        high = dev.prepareModel(cfkit.while_model(), priority=Priority.HIGH)
        req, pool = shared_request(LONG_ARGS, [12, 4])
        for _ in range(3):
            high.executeSynchronously(req)
        assert host.linger.kept == 0
        pool.close()
    finally:
        dev.close()
