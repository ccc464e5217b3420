"""The sample driver's idle watchdog: kept workspaces and request layouts released after an idle period."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from driver.idle import IdleWatchdog
from driver.variants import SampleAll
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from tests.runtime.models import add_model

F = np.float32


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _request(pool: SharedMemory) -> Request:
    arg = lambda offset, dims: RequestArgument(False, DataLocation(0, offset, 24), dims)  # noqa: E731
    return Request((arg(0, (2, 3)), arg(64, (2, 3))), (arg(128, ()),), (pool,))


def _pool() -> SharedMemory:
    pool = SharedMemory.create(256)
    np.frombuffer(pool.buffer, F, 6, 0)[:] = np.arange(6, dtype=F)
    np.frombuffer(pool.buffer, F, 6, 64)[:] = 1
    return pool


def _out(pool: SharedMemory) -> np.ndarray:
    return np.frombuffer(pool.buffer, F, 6, 128).copy()


def test_watchdog_releases_once_per_idle_stretch_on_a_fake_clock():
    clock = FakeClock()
    dog = IdleWatchdog(2.0, clock, thread=False)
    released: list[str] = []

    class Thing:
        pass

    a, b = Thing(), Thing()
    dog.watch(a, lambda: released.append("a"))
    dog.watch(b, lambda: released.append("b"))
    clock.now += 1.5
    dog.touch(b)  # b used at 1001.5
    assert dog.sweep() == 0
    clock.now += 0.5  # a idle 2.0 s, b 0.5 s
    assert dog.sweep() == 1 and released == ["a"]
    assert dog.sweep() == 0  # once per idle stretch
    clock.now += 1.5  # b idle 2.0 s
    assert dog.sweep() == 1 and released == ["a", "b"]
    dog.touch(a)  # a used again: a new stretch
    assert dog.sweep(clock.now + 1.999) == 0
    assert dog.sweep(clock.now + 2.0) == 1 and released == ["a", "b", "a"]
    # Watched weakly: a collected object is forgotten.
    del b
    gc.collect()
    assert len(dog) == 1
    dog.unwatch(a)
    assert len(dog) == 0 and dog.released == 3


def test_a_failing_release_costs_nothing_else():
    clock = FakeClock()
    dog = IdleWatchdog(1.0, clock, thread=False)

    class Thing:
        pass

    bad, good = Thing(), Thing()
    done: list[int] = []
    dog.watch(bad, lambda: 1 / 0)
    dog.watch(good, lambda: done.append(1))
    clock.now += 1
    assert dog.sweep() == 1 and done == [1]


@pytest.mark.parametrize("value", ["-1", "x", "1e12"])
def test_bad_idle_option_is_one_line(value):
    with pytest.raises(ValueError, match=f"option idle_release_ms must be a number of ms.*got '{value}'"):
        SampleAll(idle_release_ms=value)


def test_idle_prepared_models_give_back_what_they_keep_and_run_again():
    device = SampleAll(idle_release_ms="50")
    assert device.idle is not None
    device.idle.close()  # this test drives the watchdog itself, on a fake clock
    clock = FakeClock()
    device.idle.clock = clock
    busy = device.prepareModel(add_model())
    idle = device.prepareModel(add_model())
    pool_a, pool_b = _pool(), _pool()
    req_a, req_b = _request(pool_a), _request(pool_b)
    for _ in range(2):
        busy.executeSynchronously(req_a)
        idle.executeSynchronously(req_b)
    expected = np.arange(6, dtype=F) + 1
    np.testing.assert_array_equal(_out(pool_b), expected)
    assert len(idle.plan.workspaces) == 1 and len(idle._io) == 1
    clock.now += 0.04
    busy.executeSynchronously(req_a)  # busy stays in use
    clock.now += 0.02  # idle: 60 ms without an execution, busy: 20 ms
    assert device.idle.sweep() == 1
    assert len(idle.plan.workspaces) == 0 and len(idle._io) == 0  # let go
    assert len(busy.plan.workspaces) == 1 and len(busy._io) == 1  # kept
    # The layout no longer keeps the request's pool: the driver holds no reference to it.
    del req_b
    gc.collect()
    np.frombuffer(pool_b.buffer, F, 6, 128)[:] = 0
    idle.executeSynchronously(_request(pool_b))  # made again, same result
    np.testing.assert_array_equal(_out(pool_b), expected)
    assert len(idle.plan.workspaces) == 1
    idle.close()
    assert len(device.idle) == 1  # a released model is not watched any more
    busy.close()
    device.close()
    pool_a.close()
    pool_b.close()


def test_the_watchdog_thread_releases_on_its_own():
    device = SampleAll(idle_release_ms="20")
    prepared = device.prepareModel(add_model())
    pool = _pool()
    prepared.executeSynchronously(_request(pool))
    give_up = time.monotonic() + 30  # the thread looks every 10 ms; a loaded machine may delay it
    while len(prepared._io) and time.monotonic() < give_up:
        time.sleep(0.01)
    assert len(prepared._io) == 0 and device.idle.released >= 1
    device.close()
    prepared.close()
    pool.close()
