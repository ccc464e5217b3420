"""Preemption and deadlines inside a bound run (driver.bound_steps with mk_run_calls_watched): the
compiled loop stops between calls when the watched priority word outranks the execution or its
deadline has passed, the checkpoint is called with the next call's operation, and the rest runs with
the same results bit for bit."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

import driver.bound_steps as bound_steps
from driver import native
from driver.executor import Plan
from mlts.hal import qos
from mlts.hal.enums import ErrorStatus, Priority
from mlts.hal.errors import HalError
from tests.driver.bindkit import _inputs, _model

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


@pytest.fixture(autouse=True)
def _release_the_lock(monkeypatch) -> None:
    # The test model is small: its runs would keep the interpreter lock, unwatched (a few µs each).
    monkeypatch.setattr(bound_steps, "HOLD_BELOW_MACS", 0)


def _calls_per_chunk(plan: Plan) -> list[int]:
    ws = plan.workspaces.free[0]
    return [prog.count for prog in ws.bound.values()]


def test_a_raised_word_stops_the_compiled_loop_before_every_call(monkeypatch) -> None:
    x = _inputs(1)[0]
    want = Plan(_model()).run([x], checked=True)
    plan = Plan(_model())
    plan.run([x], checked=True)  # binds
    word = ctypes.c_int64(qos.NOTHING_RUNNING)
    seen: list[int] = []

    def check(index: int) -> None:
        seen.append(index)
        word.value = Priority.HIGH  # outranked again: the loop stops before the next call too

    monkeypatch.setattr(
        bound_steps, "_watch", lambda c: (ctypes.addressof(word), 0, -1) if c is check else None
    )
    got = plan.run([x], check, checked=True)
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
    counts = _calls_per_chunk(plan)
    assert len(counts) == 2
    # Chunk 1: ops 0-3; ops 4 (ADD, RELU) and 5 run one by one with their own checkpoints; chunk 2: ops 5-8.
    bound_checks = sum(counts)  # one before each chunk, one before every further call
    assert len(seen) == bound_checks + 1  # + the unbound ADD's checkpoint
    assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == 8
    # An equal or lower word never stops it: the checkpoint runs once per chunk, as it would unwatched.
    word.value = 0
    seen.clear()

    def quiet(index: int) -> None:
        seen.append(index)

    monkeypatch.setattr(
        bound_steps, "_watch", lambda c: (ctypes.addressof(word), 0, -1) if c is quiet else None
    )
    plan.run([x], quiet, checked=True)
    assert seen == [0, 4, 5]


def test_a_passed_deadline_stops_the_compiled_loop_and_the_checkpoint_raises(monkeypatch) -> None:
    x = _inputs(1)[0]
    plan = Plan(_model())
    plan.run([x], checked=True)
    deadline = time.monotonic_ns() + 50_000_000
    calls: list[int] = []

    def check(index: int) -> None:
        calls.append(index)
        if len(calls) > 1:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before operation {index}")

    monkeypatch.setattr(bound_steps, "_watch", lambda c: (0, 0, deadline) if c is check else None)
    time.sleep(0.06)  # the deadline passes before the run: only the compiled loop looks at the clock now
    with pytest.raises(HalError) as info:
        plan.run([x], check, checked=True)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert calls == [0, 0]  # before the chunk, then where the loop stopped: before call 1 (op 0's GEMM)


def test_a_low_execution_waits_for_the_high_one_and_resumes_bound() -> None:
    x = _inputs(1)[0]
    want = Plan(_model()).run([x], checked=True)
    plan = Plan(_model())
    plan.run([x], checked=True)
    gate = qos.PriorityGate()
    high = gate.enter(Priority.HIGH, client=2)
    low = gate.enter(Priority.LOW, client=1)
    assert qos.watch(low) == (low.word_address, 0, -1)
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(plan.run([x], low, checked=True)))
    thread.start()
    end = time.monotonic() + 10
    while gate.pauses == 0 and time.monotonic() < end:
        time.sleep(0.001)
    assert gate.pauses == 1 and not out  # paused at its checkpoint, another client's HIGH runs
    gate.leave(high)
    thread.join(10)
    gate.leave(low)
    for g, w in zip(out[0], want, strict=True):  # type: ignore[call-overload]
        assert g.tobytes() == w.tobytes()
