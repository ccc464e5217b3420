"""Separate deadlines for preparation and execution, and a preparation abandoned at its deadline."""

from __future__ import annotations

import time

import numpy as np
import pytest

import driver.device as sample_device
from driver.variants import SampleAll
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperationType
from mlts.hal.enums import OperandType as T
from mlts.hal.errors import HalError
from mlts.hal.interface import Device, PreparedModel
from mlts.runtime.compile_cache import CompilationCache
from mlts.runtime.retry import RetryPolicy
from mlts.runtime.session import Session
from tests.runtime.models import add_model

F = np.float32
NO_RETRY = RetryPolicy(max_retries=0)


def _chain(n: int):
    """x -> ADD(x, 1) n times: n operations to prepare."""
    b = ModelBuilder()
    y = b.add_input(T.TENSOR_FLOAT32, (2, 2))
    one = b.add_constant(np.ones((2, 2), F))
    for _ in range(n):
        out = b.add_operand(T.TENSOR_FLOAT32, (2, 2))
        b.add_operation(OperationType.ADD, [y, one, b.add_int32(0)], [out])
        y = out
    b.mark_outputs(y)
    return b.build()


class _Recording(Device):
    """Wraps a device; records the deadline of every preparation and execution."""

    name = "recording"

    def __init__(self, inner: Device) -> None:
        self.inner = inner
        self.prepare_deadlines: list = []
        self.execute_deadlines: list = []

    def getCapabilities(self):
        return self.inner.getCapabilities()

    def getSupportedOperations(self, model):
        return self.inner.getSupportedOperations(model)

    def prepareModel(self, model, preference=1, priority=1, deadline=None, *rest):
        self.prepare_deadlines.append(deadline)
        prepared = self.inner.prepareModel(model, preference, priority, deadline, *rest)
        return _RecordingPrepared(prepared, self.execute_deadlines)


class _RecordingPrepared(PreparedModel):
    def __init__(self, inner: PreparedModel, seen: list) -> None:
        self.inner, self.seen = inner, seen

    def executeSynchronously(self, request, measure=0, deadline=None, loop_timeout_duration=None):
        self.seen.append(deadline)
        return self.inner.executeSynchronously(request, measure, deadline, loop_timeout_duration)

    def close(self) -> None:
        self.inner.close()


def test_an_execution_deadline_is_not_a_preparation_deadline():
    device = _Recording(SampleAll())
    x = np.ones((2, 3), F)
    # 0.2 ms is far too short for a compilation: it is the executions' deadline only.
    with Session(device, add_model(), deadline_ms=0.2, retry=NO_RETRY) as session:
        assert device.prepare_deadlines == [None]
        for _ in range(3):
            try:
                session.run([x, x])
            except HalError as e:  # a slow moment may miss 0.2 ms: then it says so
                assert e.status in (
                    ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                    ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                )
    assert len(device.execute_deadlines) == 3 and None not in device.execute_deadlines


def test_the_preparation_deadline_goes_with_preparations_only():
    device = _Recording(SampleAll())
    before = time.monotonic_ns()
    with Session(device, add_model(), prepare_deadline_ms=60_000) as session:
        (deadline,) = device.prepare_deadlines
        assert before + 59_000_000_000 < deadline <= time.monotonic_ns() + 60_000_000_000
        outs, _ = session.run([np.ones((2, 3), F), np.ones((2, 3), F)])
    np.testing.assert_array_equal(outs[0], np.full((2, 3), 2, F))
    assert device.execute_deadlines == [None]


def test_the_preparation_deadline_reaches_the_compilation_cache(tmp_path):
    device = SampleAll()
    cache = CompilationCache(tmp_path)
    # Already passed: the fresh compile refuses (and writes nothing).
    with pytest.raises(HalError) as e:
        cache.prepare(device, add_model(), deadline=time.monotonic_ns() - 1)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    with Session(device, add_model(), cache=cache, prepare_deadline_ms=60_000) as session:
        assert session.cache_outcome == "miss"
    with Session(device, add_model(), cache=cache, prepare_deadline_ms=60_000) as session:
        assert session.cache_outcome == "hit"
    # Cached now: the preparation from the cache refuses, and no fresh compile is tried after it.
    with pytest.raises(HalError) as e:
        cache.prepare(device, add_model(), deadline=time.monotonic_ns() - 1)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert e.value.message.startswith("prepareModelFromCache")


@pytest.mark.parametrize("fresh", [True, False], ids=["prepareModel", "prepareModelFromCache"])
def test_a_preparation_still_running_at_its_deadline_is_abandoned(monkeypatch, tmp_path, fresh):
    device = SampleAll(max_memory_mb="64")
    model = _chain(40)
    deadline = time.monotonic_ns() + 60_000_000_000  # far ahead on the real clock (checked on arrival)
    clock = {"now": deadline - 5_500_000}  # the driver's clock: 5.5 ms before it

    def ticking() -> int:  # every look at the clock is 1 ms later
        clock["now"] += 1_000_000
        return clock["now"]

    cache = CompilationCache(tmp_path)
    if not fresh:
        cache.prepare(device, model)[0].close()  # written: the next preparation reads the cache
    used = device.budget.used
    monkeypatch.setattr(sample_device, "_now_ns", ticking)
    with pytest.raises(HalError) as e:
        cache.prepare(device, model, deadline=deadline)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    # Abandoned at the sixth look at the clock (the fifth operation): far from the fortieth.
    what = "prepareModel" if fresh else "prepareModelFromCache"
    assert e.value.message == f"{what}: the deadline passed during preparation; abandoned before operation 5"
    assert device.budget.used == used  # the model's constants are given back
    monkeypatch.setattr(sample_device, "_now_ns", time.monotonic_ns)
    prepared, _ = cache.prepare(device, model, deadline=time.monotonic_ns() + 60_000_000_000)
    prepared.close()


def test_a_session_retries_an_abandoned_preparation_with_a_fresh_deadline(monkeypatch):
    device = SampleAll()
    looks = {"n": 0}
    real = time.monotonic_ns

    def late_once() -> int:  # the first preparation's first check finds the deadline passed
        looks["n"] += 1
        return real() + (10**12 if looks["n"] == 1 else 0)

    monkeypatch.setattr(sample_device, "_now_ns", late_once)
    with Session(device, _chain(3), prepare_deadline_ms=60_000) as session:
        assert session.retry_stats.retries == 1
        assert session.retry_stats.errors == {"MISSED_DEADLINE_TRANSIENT": 1}
        outs, _ = session.run([np.zeros((2, 2), F)])
    np.testing.assert_array_equal(outs[0], np.full((2, 2), 3, F))
