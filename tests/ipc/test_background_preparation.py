"""Preparations below executions: the preparation pool's threads run at a lower priority, and the
interpreter's switch interval is short only while a preparation runs."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from mlts.ipc.service.background import MAX_NICE, SHORT_SWITCH_INTERVAL, Background, lower_this_thread
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
