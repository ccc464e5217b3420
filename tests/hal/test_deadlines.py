"""Deadlines: one absolute time point type and NNAPI's two checks, before the work and during it."""

from __future__ import annotations

import time

import pytest

from mlts.hal import deadlines
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.execution import launch_fenced
from mlts.hal.fence import SyncFence
from mlts.hal.types import ExecutionResult


def test_a_deadline_is_an_absolute_monotonic_time_point():
    assert deadlines.after_ms(1.5, 1_000) == 1_501_000
    assert deadlines.after_ns(7, 10) == 17
    before = time.monotonic_ns()
    made = deadlines.after_ms(20)
    assert before + 20_000_000 <= made <= time.monotonic_ns() + 20_000_000
    assert deadlines.now() >= before


def test_passed_means_the_clock_is_beyond_it():
    assert not deadlines.has_passed(None)
    assert not deadlines.has_passed(deadlines.TimePoint(100), at=100)  # NNAPI: now > deadline
    assert deadlines.has_passed(deadlines.TimePoint(100), at=101)
    assert deadlines.seconds_left(deadlines.TimePoint(3_000_000_000), at=1_000_000_000) == 2.0
    assert deadlines.seconds_left(deadlines.TimePoint(5), at=9) == 0.0


def test_before_the_work_a_passed_deadline_is_persistent():
    deadlines.check_before(None, "prepareModel")
    deadlines.check_before(deadlines.after_ms(60_000), "prepareModel")
    with pytest.raises(HalError) as e:
        deadlines.check_before(deadlines.after_ms(-1), "prepareModel")
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert e.value.message == "prepareModel: the deadline had already passed"
    # Judged at the moment the work was asked for, when that is given.
    asked = time.monotonic_ns()
    deadlines.check_before(deadlines.TimePoint(asked), "executeFenced", at=asked)


def test_during_the_work_a_passed_deadline_is_transient():
    error = deadlines.missed("before operation 3")
    assert error.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert error.message == "deadline passed before operation 3"


def test_an_in_process_fenced_execution_past_its_deadline_does_not_wait_for_its_fences():
    ran: list = []
    pending = SyncFence.create()  # never signalled: waiting for it would take the whole limit
    try:
        started = time.monotonic()
        out, callback = launch_fenced(
            lambda d: ran.append(d) or ExecutionResult(()),
            [pending],
            MeasureTiming.NO,
            deadlines.after_ms(-1),
            None,
            fence_wait_limit=30.0,
        )
        assert out.wait(10.0)
        info = callback.getExecutionInfo()
        assert info.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
        assert time.monotonic() - started < 5.0 and not ran
        out.close()
    finally:
        pending.close()
