"""Bursts under a Session (retries of its first attempt) and the listener's release of freed slots."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.retry import NO_RETRY, RetryPolicy
from mlts.runtime.session import Session
from tests.runtime.models import add_model
from tests.runtime.servicekit import _request, release_while_waiting

SAMPLE = "driver.variants:SampleAll"


def _budgeted_device():
    """An in-process sample driver with a memory budget (its executions fail TRANSIENT while it is full)."""
    from driver.variants import SampleAll

    return SampleAll(max_memory_mb="1")


def test_burst_session_retries_a_transient_first_attempt(monkeypatch):
    """The first attempt fails TRANSIENT (the driver's budget is held elsewhere): it is counted and retried by
    the session's policy, exactly as on the other paths, and the run then succeeds."""
    device = _budgeted_device()
    session = Session(
        device, add_model(), mode="burst", retry=RetryPolicy(max_retries=8, first_s=0.02, cap_s=0.1)
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    free = device.budget.limit - device.budget.used
    device.budget.reserve(free, "another client")
    waits = release_while_waiting(monkeypatch, lambda: device.budget.release(free))
    outputs, _ = session.run([x, x])
    np.testing.assert_array_equal(outputs[0], 2 * x)
    assert session.retry_stats.retries == len(waits) == 1
    assert set(session.retry_stats.errors) == {"RESOURCE_EXHAUSTED_TRANSIENT"}
    session.close()


def test_burst_session_without_retries_raises_the_first_error_once():
    device = _budgeted_device()
    session = Session(device, add_model(), mode="burst", retry=NO_RETRY)
    x = np.ones((2, 3), np.float32)
    session.run([x, x])
    free = device.budget.limit - device.budget.used
    device.budget.reserve(free, "another client")
    with pytest.raises(HalError) as caught:
        session.run([x, x])
    assert caught.value.status.name == "RESOURCE_EXHAUSTED_TRANSIENT"
    assert session.retry_stats.retries == 0
    assert dict(session.retry_stats.errors) == {"RESOURCE_EXHAUSTED_TRANSIENT": 1}
    device.budget.release(free)
    outputs, _ = session.run([x, x])  # the same burst goes on
    np.testing.assert_array_equal(outputs[0], 2 * x)
    session.close()


def _mapped(pid: int, name: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any(f"memfd:{name}" in line for line in f)


def test_listener_unmaps_a_freed_slot_while_the_burst_is_idle(tmp_path):
    """The listener releases a freed slot's mapping itself: promptly, even when no execution follows."""
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "driver.log"))
    try:
        pid = device.process.pid
        prepared = device.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        name = f"mlts-test-freed-{time.monotonic_ns()}"
        pool = SharedMemory.create(4096, name)
        np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = x.ravel()
        np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = x.ravel()
        with prepared.configureExecutionBurst(polling_us=0) as burst:
            burst.execute(_request(pool))
            np.testing.assert_array_equal(np.frombuffer(pool.buffer, np.float32, 6, 128), 2 * x.ravel())
            assert _mapped(pid, name)
            burst.freeMemory(pool)
            limit = time.monotonic() + 5
            while _mapped(pid, name) and time.monotonic() < limit:
                time.sleep(0.01)
            assert not _mapped(pid, name)
            # The burst goes on: the memory is asked for again under a new slot.
            burst.execute(_request(pool))
            assert burst.memories_sent == 2
        pool.close()
        prepared.close()
    finally:
        device.close()
