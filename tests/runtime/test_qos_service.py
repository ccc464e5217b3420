"""Quality of service through a shared sample-driver service: preemption, deadlines on every path, retries."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming, Priority
from mlts.hal.errors import HalError
from mlts.runtime.execution import execute
from mlts.runtime.retry import NO_RETRY, RetryPolicy, RetryStats, call_with_retries, error_class
from mlts.runtime.shared import SharedService
from tests.driver import cfkit
from tests.runtime.servicekit import LONG_ARGS, release_while_waiting
from tests.runtime.servicekit import shared_request as _shared_request


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("qos") / "svc.log"
    svc = SharedService.start("driver.variants:SampleAll", name="sample-all", log_path=str(log))
    yield svc
    assert svc.stop() == 0
    assert not os.path.exists(svc.path)


def test_high_completes_before_a_running_low_of_the_same_client(service):
    dev = service.connect()
    try:
        low = dev.prepareModel(cfkit.endless_model(), priority=Priority.LOW)
        high = dev.prepareModel(cfkit.while_model(), priority=Priority.HIGH)
        low_req, low_pool = _shared_request([np.array([1.0], np.float32)], [4])
        high_req, high_pool = _shared_request(LONG_ARGS, [12, 4])
        done: dict[str, float] = {}
        errors: list[HalError] = []

        def run_low() -> None:
            try:
                low.execute(low_req, loop_timeout_duration=1_000_000_000).result()
            except HalError as e:
                errors.append(e)
            done["low"] = time.monotonic()

        thread = threading.Thread(target=run_low)
        thread.start()
        # HIGH is sent once the service runs the LOW execution (one busy worker), not after a guess.
        limit = time.monotonic() + 30
        while dev.service_status()["execute_pool"]["busy"] == 0:
            assert time.monotonic() < limit and thread.is_alive(), "the LOW execution never started"
            time.sleep(0.001)
        high.executeSynchronously(high_req, MeasureTiming.NO)
        done["high"] = time.monotonic()
        thread.join(30)
        assert done["high"] < done["low"]
        # The runaway LOW loop ended at its loop timeout, not by hanging the service.
        assert [e.status for e in errors] == [ErrorStatus.MISSED_DEADLINE_TRANSIENT]
        low_pool.close()
        high_pool.close()
    finally:
        dev.close()


@pytest.mark.parametrize("mode", ["sync", "async", "fenced"])
def test_deadlines_on_every_execution_path(service, mode):
    dev = service.connect()
    try:
        prepared = dev.prepareModel(cfkit.endless_model())
        req, pool = _shared_request([np.array([1.0], np.float32)], [4])
        with pytest.raises(HalError) as info:
            execute(prepared, req, MeasureTiming.NO, mode, deadline=time.monotonic_ns() - 1)
        assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
        with pytest.raises(HalError) as info:
            execute(prepared, req, MeasureTiming.NO, mode, deadline=time.monotonic_ns() + 50_000_000)
        assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        pool.close()
    finally:
        dev.close()


def test_timeout_after_fence_ends_a_fenced_execution(service):
    dev = service.connect()
    try:
        prepared = dev.prepareModel(cfkit.endless_model())
        req, pool = _shared_request([np.array([1.0], np.float32)], [4])
        fence, callback = prepared.executeFenced(req, (), timeout_after_fence=50_000_000)
        try:
            assert fence.wait(10)
        finally:
            fence.close()
        info = callback.getExecutionInfo()
        assert info.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        pool.close()
    finally:
        dev.close()


def test_prepare_deadlines(service):
    dev = service.connect()
    try:
        with pytest.raises(HalError) as info:
            dev.prepareModel(cfkit.if_model(), deadline=time.monotonic_ns() - 1)
        assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    finally:
        dev.close()


# ------------------------------------------------------------ retries


def test_transient_errors_are_retried_with_bounded_backoff():
    stats = RetryStats()
    waits: list[float] = []
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise HalError(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, "busy")
        return "ok"

    policy = RetryPolicy(max_retries=5, first_s=0.01, cap_s=0.015)
    assert call_with_retries(flaky, policy, stats, sleep=waits.append) == "ok"
    assert waits == [0.01, 0.015]
    assert stats.to_dict() == {
        "retries": 2,
        "errors": {"RESOURCE_EXHAUSTED_TRANSIENT": 2},
        "error_classes": {"transient": 2},
    }


def test_retries_stop_at_the_bound():
    stats = RetryStats()
    waits: list[float] = []

    def always() -> None:
        raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "late")

    with pytest.raises(HalError):
        call_with_retries(always, RetryPolicy(max_retries=2), stats, sleep=waits.append)
    assert len(waits) == 2 and stats.retries == 2 and stats.errors["MISSED_DEADLINE_TRANSIENT"] == 3


@pytest.mark.parametrize(
    "status",
    [
        ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
        ErrorStatus.MISSED_DEADLINE_PERSISTENT,
        ErrorStatus.INVALID_ARGUMENT,
    ],
)
def test_persistent_errors_are_not_retried(status):
    stats = RetryStats()
    waits: list[float] = []

    def fail() -> None:
        raise HalError(status, "no")

    with pytest.raises(HalError):
        call_with_retries(fail, RetryPolicy(), stats, sleep=waits.append)
    assert waits == [] and stats.retries == 0
    assert error_class(status) == ("other" if status == ErrorStatus.INVALID_ARGUMENT else "persistent")


def test_no_retry_policy():
    with pytest.raises(HalError):
        call_with_retries(
            lambda: (_ for _ in ()).throw(HalError(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, "x")), NO_RETRY
        )


def test_session_retries_a_transient_prepare(tmp_path, monkeypatch):
    """A budget others hold: the session's prepare is retried and counted, then succeeds once freed (the
    other client lets go while the session waits to retry)."""
    from driver.variants import SampleAll
    from mlts.runtime.session import Session

    device = SampleAll(max_memory_mb="0.001")
    device.budget.reserve(device.budget.limit, "another client")
    waits = release_while_waiting(monkeypatch, lambda: device.budget.release(device.budget.limit))
    session = Session(device, cfkit.if_model(), retry=RetryPolicy(max_retries=8, first_s=0.02, cap_s=0.1))
    assert session.retry_stats.retries == len(waits) == 1
    assert set(session.retry_stats.errors) == {"RESOURCE_EXHAUSTED_TRANSIENT"}
    outs, _ = session.run([np.array([True]), np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])
    np.testing.assert_array_equal(outs[0], np.full((2, 3), 2.0, np.float32))
    session.close()
