"""Preparations below executions: the preparation pool's threads run at a lower priority, the
interpreter's switch interval is short only while a preparation runs, and a preparation gives way
to running executions."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from mlts.ipc.service.background import (
    MAX_NICE,
    SHORT_SWITCH_INTERVAL,
    Background,
    GiveWay,
    lower_this_thread,
)
from mlts.ipc.service.scheduler import WorkerPool

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def _run(pool: WorkerPool, work) -> None:
    done = threading.Event()

    def wrapped() -> None:
        try:
            work()
        finally:
            done.set()

    pool.submit(wrapped)
    assert done.wait(10)


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux_only
def test_background_workers_run_below_the_threads_that_made_them_and_executions_do_not():
    base = _own_nice()
    seen: dict[str, int] = {}
    background = WorkerPool("prepare", 1, Background(nice=7))
    foreground = WorkerPool("execute", 1)
    try:
        _run(background, lambda: seen.__setitem__("prepare", _own_nice()))
        _run(foreground, lambda: seen.__setitem__("execute", _own_nice()))
    finally:
        background.stop(2)
        foreground.stop(2)
    assert seen == {"prepare": min(MAX_NICE, base + 7), "execute": base}
    assert _own_nice() == base  # the calling thread is untouched


def test_the_switch_interval_is_short_only_while_background_work_runs():
    before = sys.getswitchinterval()
    seen: list[float] = []
    pool = WorkerPool("prepare", 2, Background(nice=0, switch_interval_s=0.0003))
    inside, release = threading.Barrier(3), threading.Event()

    def work() -> None:
        seen.append(sys.getswitchinterval())
        inside.wait(10)
        release.wait(10)
        seen.append(sys.getswitchinterval())

    try:
        pool.submit(work)
        pool.submit(work)
        inside.wait(10)  # both works are running
        assert SHORT_SWITCH_INTERVAL.active()
        assert sys.getswitchinterval() == pytest.approx(0.0003)
        release.set()
    finally:
        pool.stop(5)
    assert seen == [pytest.approx(0.0003)] * 4
    assert sys.getswitchinterval() == before and not SHORT_SWITCH_INTERVAL.active()


def test_a_failing_background_work_restores_the_interval_and_keeps_the_worker():
    before = sys.getswitchinterval()
    pool = WorkerPool("prepare", 1, Background(nice=0))

    def boom() -> None:
        raise RuntimeError("driver bug")

    try:
        pool.submit(boom)
        _run(pool, lambda: None)  # the same worker serves the next work
    finally:
        pool.stop(2)
    assert sys.getswitchinterval() == before


@pytest.mark.parametrize("nice", [-1, MAX_NICE + 1])
def test_bad_nice_steps_are_refused(nice):
    with pytest.raises(ValueError, match="nice steps"):
        Background(nice=nice)


def test_lowering_by_nothing_changes_nothing():
    assert lower_this_thread(0) is None


def _step(trail: list[str], name: str) -> None:
    trail.append(name)


def test_a_preparation_waits_while_an_execution_runs_and_goes_on_when_it_ends():
    executions = WorkerPool("execute", 1)
    give_way = GiveWay(executions, max_wait_s=30.0)
    trail: list[str] = []
    entered = threading.Lock()  # released by a C call: no Python function called inside yet
    entered.acquire()

    def preparation() -> None:
        with give_way.held():
            entered.release()
            _step(trail, "compiled")

    try:
        assert executions.try_inline()  # an execution runs
        t = threading.Thread(target=preparation)
        t.start()
        assert entered.acquire(timeout=10)
        # The preparation is held at its next function call for as long as the execution runs.
        t.join(0.3)
        assert t.is_alive() and trail == []
        executions.end_inline()
        t.join(10)
        assert not t.is_alive() and trail == ["compiled"]
        assert give_way.waits == 1 and give_way.waited_s >= 0.3
    finally:
        executions.stop(2)


def test_executions_back_to_back_slow_a_preparation_but_never_stop_it():
    executions = WorkerPool("execute", 1)
    give_way = GiveWay(executions, max_wait_s=0.01, run_s=60.0)
    trail: list[str] = []
    try:
        assert executions.try_inline()  # runs throughout
        with give_way.held():
            for n in range(5):
                _step(trail, str(n))
        # One bounded wait, then the preparation runs its at-least time without waiting again.
        assert trail == ["0", "1", "2", "3", "4"] and give_way.waits == 1
        assert give_way.waited_s >= 0.01
    finally:
        executions.end_inline()
        executions.stop(2)


def test_a_service_with_no_recent_execution_prepares_without_the_check():
    executions = WorkerPool("execute", 1)
    give_way = GiveWay(executions)
    try:
        with give_way.held():
            assert sys.gettrace() is None  # nothing ran: no check at each call
        assert executions.try_inline()
        executions.end_inline()  # an execution just ended
        with give_way.held():
            assert sys.gettrace() is not None
        assert sys.gettrace() is None  # taken off afterwards
    finally:
        executions.stop(2)


def test_a_traced_thread_keeps_its_tracer():
    executions = WorkerPool("execute", 1)
    give_way = GiveWay(executions)

    def tracer(frame, event, arg):
        return None

    try:
        assert executions.try_inline()
        sys.settrace(tracer)
        try:
            with give_way.held():
                assert sys.gettrace() is tracer
        finally:
            sys.settrace(None)
    finally:
        executions.end_inline()
        executions.stop(2)


def test_waiting_for_a_quiet_pool():
    executions = WorkerPool("execute", 1)
    try:
        assert executions.wait_quiet(0.0)
        assert executions.try_inline() and executions.active == 1
        start = time.monotonic()
        assert not executions.wait_quiet(0.05) and time.monotonic() - start >= 0.05
        threading.Timer(0.05, executions.end_inline).start()
        assert executions.wait_quiet(10) and executions.active == 0
    finally:
        executions.stop(2)


@pytest.mark.parametrize(
    ("wait", "run", "gap"), [(0.0, 1.0, 0.0), (1.0, 0.0, 0.0), (-1.0, 1.0, 0.0), (1.0, 1.0, -1.0)]
)
def test_bad_give_way_times_are_refused(wait, run, gap):
    with pytest.raises(ValueError, match="give-way times"):
        GiveWay(WorkerPool("execute", 1), max_wait_s=wait, run_s=run, idle_gap_s=gap)


def test_a_preparation_also_waits_out_the_gap_after_the_last_execution():
    # Between a client's calls nothing runs for a moment: a preparation does not take that moment.
    executions = WorkerPool("execute", 1)
    give_way = GiveWay(executions, max_wait_s=30.0, idle_gap_s=0.3)
    trail: list[str] = []
    try:
        assert executions.try_inline()
        executions.end_inline()  # an execution just ended
        start = time.monotonic()
        with give_way.held():
            _step(trail, "compiled")
        assert trail == ["compiled"] and time.monotonic() - start >= 0.25
        assert give_way.waits == 1
    finally:
        executions.stop(2)


def test_the_driver_s_preparations_are_counted_while_they_run_and_in_all():
    executions = WorkerPool("execute", 1)
    give_way = GiveWay(executions)
    seen = []
    try:
        with give_way.in_the_driver():
            seen.append(give_way.describe())
        with pytest.raises(RuntimeError), give_way.in_the_driver():
            raise RuntimeError("driver bug")
        seen.append(give_way.describe())
    finally:
        executions.stop(2)
    assert (seen[0]["compiling"], seen[0]["compilations_started"]) == (1, 1)
    assert (seen[1]["compiling"], seen[1]["compilations_started"]) == (0, 2)
