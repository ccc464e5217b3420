"""Sync fences: signalled once, seen alike by every waiter, errors told apart, only eventfds accepted."""

from __future__ import annotations

import os
import threading
import time

import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.execution import ExecutionCallback, launch_fenced
from mlts.hal.fence import FenceState, SyncFence, is_eventfd, wait_fds
from mlts.hal.types import ExecutionResult, Timing


def test_states_and_waiting():
    fence = SyncFence.create()
    assert fence.state() == FenceState.ACTIVE
    assert fence.wait(0) is False and fence.wait(0.05) is False
    threading.Timer(0.05, fence.signal).start()
    assert fence.wait(60)  # returns at the signal; the bound only ends a broken wait
    for _ in range(3):  # peeking never consumes the signal
        assert fence.state() == FenceState.SIGNALED
        assert fence.wait(0)
    fence.signal(ok=False)  # a fence is signalled once: the second signal is ignored
    assert fence.state() == FenceState.SIGNALED
    fence.close()
    fence.close()
    with pytest.raises(HalError):
        fence.state()


def test_error_fence_and_a_second_holder():
    fence = SyncFence.create()
    other = SyncFence.from_fd(os.dup(fence.fd))
    fence.signal(ok=False)
    assert other.wait(1) and other.state() == FenceState.ERROR
    assert fence.state() == FenceState.ERROR
    fence.close()
    other.close()


def test_only_eventfds_are_fences():
    r, w = os.pipe()
    assert not is_eventfd(r)
    with pytest.raises(HalError) as info:
        SyncFence.from_fd(r, "wait_for[0]")
    assert (
        info.value.status == ErrorStatus.INVALID_ARGUMENT
        and "wait_for[0] is not a sync fence" in info.value.message
    )
    with pytest.raises(OSError):
        os.fstat(r)  # the rejected fd was closed
    os.close(w)


def test_wait_fds_all_of_them():
    a, b = SyncFence.create(), SyncFence.create()
    a.signal()
    assert wait_fds([a.fd, b.fd], 0.02) is False
    b.signal()
    assert wait_fds([a.fd, b.fd], 1)
    a.close()
    b.close()


def test_callback_completes_once():
    cb = ExecutionCallback()
    seen = []
    cb.on_done(seen.append)
    assert not cb.done()
    with pytest.raises(HalError) as info:
        cb.result(0.01)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    cb.notify(error=HalError(ErrorStatus.GENERAL_FAILURE, "boom"))
    cb.notify(ExecutionResult(()))
    assert seen == [cb]
    with pytest.raises(HalError, match="boom"):
        cb.result()


def test_generic_fenced_launch_waits_then_signals():
    gate = SyncFence.create()
    ran = []

    def run(deadline):
        ran.append(deadline)
        return ExecutionResult((), Timing(5, 9))

    out, cb = launch_fenced(run, [gate], MeasureTiming.YES, None, 10**9)
    time.sleep(0.05)
    assert not ran and out.state() == FenceState.ACTIVE
    gate.signal()
    assert out.wait(5) and out.state() == FenceState.SIGNALED
    info = cb.getExecutionInfo()
    assert info.status == ErrorStatus.NONE and info.timing_fenced.time_on_device == 5
    assert ran[0] is not None  # timeout_after_fence became a deadline
    never = SyncFence.create()
    out2, cb2 = launch_fenced(run, [never], MeasureTiming.NO, time.monotonic_ns() + 50_000_000, None)
    assert out2.wait(5) and out2.state() == FenceState.ERROR
    assert cb2.getExecutionInfo().status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    for f in (gate, out, never, out2):
        f.close()
