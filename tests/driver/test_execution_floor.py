"""The short paths of a repeated execution give what the general paths give, and are as strict.

A cached request's inputs are read-only views and its results land in its pools; a plan run with
a sink hands the sink its results in place; a Session reuses its layout only for arrays of the
shapes and dtypes it was made for; the priority gate counts executions of one priority; a driver
without a memory budget still counts what executions hold. References: hand-computed sums.
"""

from __future__ import annotations

import numpy as np
import pytest

from driver.budget import MemoryBudget
from driver.variants import SampleAll
from mlts.hal import qos
from mlts.hal.enums import ErrorStatus, MeasureTiming, Priority
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.session import Session
from tests.runtime.models import add_model


def _arrays(seed: int, shape: tuple[int, ...] = (2, 3)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def _request(pool: SharedMemory) -> Request:
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, 24), (2, 3)),
            RequestArgument(False, DataLocation(0, 64, 24), (2, 3)),
        ),
        (RequestArgument(False, DataLocation(0, 128, 24), ()),),
        (pool,),
    )


def test_cached_request_reads_read_only_views_and_writes_each_result() -> None:
    prepared = SampleAll().prepareModel(add_model())
    pool = SharedMemory.create(256)
    request = _request(pool)
    try:
        for seed in range(3):  # the first execution lays the request out, the others reuse it
            a, b = _arrays(seed)
            np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = a.ravel()
            np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = b.ravel()
            result = prepared.executeSynchronously(request, MeasureTiming.YES)
            out = np.frombuffer(pool.buffer, np.float32, 6, 128).reshape(2, 3).copy()
            np.testing.assert_array_equal(out, a + b)
            assert result.output_shapes[0].dimensions == (2, 3) and result.output_shapes[0].is_sufficient
            assert result.timing.time_in_driver >= result.timing.time_on_device
        io = prepared._io.get(request)
        assert io is not None
        views = io.read_inputs(prepared.buffers)
        assert [v.shape for v in views] == [(2, 3), (2, 3)]
        assert not any(v.flags.writeable for v in views)
        np.testing.assert_array_equal(views[0], a)
        del views
    finally:
        prepared.close()
        pool.close()


def test_plan_run_hands_the_sink_its_results_in_place() -> None:
    prepared = SampleAll().prepareModel(add_model())
    plan = prepared.plan
    a, b = _arrays(7)
    copied = plan.run([a, b])
    seen: list[np.ndarray] = []

    def sink(outputs: list[np.ndarray]) -> str:
        seen.append(np.array(outputs[0], copy=True))
        return "written"

    assert plan.run([a, b], checked=plan.static_fits(None), sink=sink) == "written"
    np.testing.assert_array_equal(copied[0], a + b)
    np.testing.assert_array_equal(seen[0], a + b)
    with pytest.raises(HalError, match="takes 2 inputs, 1 were given"):
        plan.run([a], checked=True)
    prepared.close()


def test_session_reuses_its_layout_only_for_arrays_it_was_made_for() -> None:
    device = SampleAll()
    with Session(device, add_model()) as session:
        a, b = _arrays(1)
        (out,), _ = session.run([a, b])
        np.testing.assert_array_equal(out, a + b)
        layout = session._layout
        c, d = _arrays(2)
        (out,), _ = session.run([c, d])
        np.testing.assert_array_equal(out, c + d)
        assert session._layout is layout  # same shapes and dtypes: the same request object
        wide = np.zeros((2, 6), np.float32)
        wide[:, ::2] = a  # a strided array of the right shape and dtype
        (out,), _ = session.run([wide[:, ::2], b])
        np.testing.assert_array_equal(out, a + b)
        with pytest.raises(HalError, match="input 1 has dtype float64"):
            session.run([a, b.astype(np.float64)])
        with pytest.raises(HalError, match="the model has 2 inputs, 1 arrays"):
            session.run([a])
        session.profile = True
        (out,), result = session.run([c, d])
        np.testing.assert_array_equal(out, c + d)
        assert result.operation_times is not None and session._layout is not layout


def test_list_inputs_are_checked_like_before() -> None:
    with Session(SampleAll(), add_model()) as session:
        a, b = _arrays(3)
        with pytest.raises(HalError, match="input 0 has dtype float64"):
            session.run([a.tolist(), b])


def test_gate_keeps_the_top_priority_while_one_of_two_equal_executions_runs() -> None:
    gate = qos.PriorityGate()
    low = gate.enter(Priority.LOW, client=1)
    first = gate.enter(Priority.MEDIUM, client=1)
    second = gate.enter(Priority.MEDIUM, client=1)
    gate.leave(first)
    with pytest.raises(HalError) as info:
        gate.wait_turn(low, 0, 4)  # still outranked: waits, and its deadline has passed
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    gate.leave(second)
    gate.wait_turn(low, 0, 5)  # nothing outranks it now
    gate.leave(low)
    assert gate.running_count() == 0 and gate.pauses == 1


def test_a_driver_without_a_budget_still_counts_what_executions_hold() -> None:
    budget = MemoryBudget(None)
    assert budget.reserve(1 << 40, "a huge working set") == 1 << 40
    assert budget.used == 1 << 40
    budget.release(1 << 40)
    assert budget.used == 0
    assert budget.ledger == [] and MemoryBudget(1 << 20).ledger is None  # a limit: reserve and release


def test_each_running_execution_is_counted_in_the_ledger_and_leaves_it() -> None:
    device = SampleAll()
    prepared = device.prepareModel(add_model())
    held = device.budget.used  # the model's constants
    work = 3 * 24  # x, y and the sum: three (2, 3) float32 tensors
    seen: list[tuple[int, list[int]]] = []
    plan = prepared.plan
    run_into = plan.run_into

    def counting(*args, **kw):
        seen.append((device.budget.used, list(device.budget.ledger)))
        return run_into(*args, **kw)

    plan.run_into = counting
    pool = SharedMemory.create(256)
    try:
        a, b = _arrays(5)
        np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = a.ravel()
        np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = b.ravel()
        for _ in range(2):
            prepared.executeSynchronously(_request(pool))
        assert seen == [(held + work, [work])] * 2
        assert device.budget.used == held and device.budget.ledger == []
        bad = Request((), (), (pool,))
        with pytest.raises(HalError):  # refused before it holds anything
            prepared.executeSynchronously(bad)
        assert device.budget.used == held and device.budget.ledger == []
    finally:
        prepared.close()
        pool.close()


# ------------------------------------------------------------ the straight-line run of a static plan


def _split_add_model():
    """x (2, 6) -> SPLIT into a, b (2, 3) -> s = a + b -> m = s * b; outputs a and m. Hand-computed below."""
    from mlts.hal.builder import ModelBuilder
    from mlts.hal.enums import OperandType as T
    from mlts.hal.enums import OperationType as O

    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (2, 6))
    a, b = (bld.add_operand(T.TENSOR_FLOAT32, (2, 3)) for _ in range(2))
    bld.add_operation(O.SPLIT, [x, bld.add_scalar(1, T.INT32), bld.add_scalar(2, T.INT32)], [a, b])
    s = bld.add_operand(T.TENSOR_FLOAT32, (2, 3))
    bld.add_operation(O.ADD, [a, b, bld.add_scalar(0, T.INT32)], [s])
    m = bld.add_operand(T.TENSOR_FLOAT32, (2, 3))
    bld.add_operation(O.MUL, [s, b, bld.add_scalar(0, T.INT32)], [m])
    bld.mark_outputs([a, m])
    return bld.build()


def _loop_only(plan) -> None:
    plan._straight, plan._straight_tried = None, True


def test_straight_line_run_gives_the_loops_results() -> None:
    from driver.executor import Plan

    x = np.arange(12, dtype=np.float32).reshape(2, 6) - 5.5
    a, b = x[:, :3], x[:, 3:]
    fast, slow = Plan(_split_add_model()), Plan(_split_add_model())
    _loop_only(slow)
    for plan in (fast, slow):
        for _ in range(2):  # the first run compiles, the second reuses
            out_a, out_m = plan.run([x], checked=True)
            np.testing.assert_array_equal(out_a, a)
            np.testing.assert_array_equal(out_m, (a + b) * b)
    assert fast._straight is not None and slow._straight is None


def test_straight_line_run_reports_errors_as_the_loop_does() -> None:
    from driver.executor import Plan

    x = np.ones((2, 6), np.float32)
    messages = []
    for straight in (True, False):
        plan = Plan(_split_add_model())
        if not straight:
            _loop_only(plan)
        plan.run([x], checked=True)
        step = plan.steps[1]  # ADD: kernels replaced after the first run take effect
        got = []
        for kernel in (
            lambda args: (_ for _ in ()).throw(HalError(ErrorStatus.INVALID_ARGUMENT, "bad")),
            lambda args: (_ for _ in ()).throw(ValueError("broken")),
            lambda args: [np.zeros((2, 3), np.float64)],
            lambda args: [np.zeros((2, 3), np.float32)] * 2,
        ):
            step.run = step.direct = kernel
            with pytest.raises(HalError) as info:
                plan.run([x], checked=True)
            got.append((info.value.status, info.value.message))

        def late(index: int) -> None:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before operation {index}")

        with pytest.raises(HalError) as info:
            plan.run([x], late, checked=True)
        got.append((info.value.status, info.value.message))
        messages.append(got)
    assert messages[0] == messages[1]
    statuses = [s for s, _ in messages[0]]
    assert statuses == [ErrorStatus.INVALID_ARGUMENT] + [ErrorStatus.GENERAL_FAILURE] * 3 + [
        ErrorStatus.MISSED_DEADLINE_TRANSIENT
    ]
    assert messages[0][0][1] == "operation 1 (ADD): bad"
    assert (
        "operation 1 (ADD) failed on inputs (float32[2, 3], float32[2, 3], 0): ValueError"
        in messages[0][1][1]
    )
    assert "is float64, expected float32" in messages[0][2][1]
    assert "kernel returned 2 outputs, expected 1" in messages[0][3][1]
    assert messages[0][4][1] == "deadline passed before operation 0"


def test_a_changed_request_is_validated_again_and_an_invalid_one_refused() -> None:
    """The layout of a request seen before is reused by identity only: a new request object differing
    from a cached one (an input region past its pool, fewer inputs) is checked again and refused, one
    whose output region is too small is refused at every execution, and the cached one still runs."""
    prepared = SampleAll().prepareModel(add_model())
    pool = SharedMemory.create(256)
    good = _request(pool)
    try:
        a, b = _arrays(4)
        np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = a.ravel()
        np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = b.ravel()
        for _ in range(2):
            prepared.executeSynchronously(good, MeasureTiming.NO)
        assert prepared._io.get(good) is not None
        past_pool = Request(
            (good.inputs[0], RequestArgument(False, DataLocation(0, 240, 24), (2, 3))), good.outputs, (pool,)
        )
        small_output = Request(good.inputs, (RequestArgument(False, DataLocation(0, 128, 20), ()),), (pool,))
        one_input = Request(good.inputs[:1], good.outputs, (pool,))
        for bad in (past_pool, one_input):
            for _ in range(2):
                with pytest.raises(HalError) as info:
                    prepared.executeSynchronously(bad, MeasureTiming.NO)
                assert info.value.status == ErrorStatus.INVALID_ARGUMENT
            assert prepared._io.get(bad) is None
        # A valid request whose output is too small is laid out (and kept), and refused at every execution.
        for _ in range(2):
            with pytest.raises(HalError) as info:
                prepared.executeSynchronously(small_output, MeasureTiming.NO)
            assert info.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
            assert not info.value.output_shapes[0].is_sufficient
        np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
        result = prepared.executeSynchronously(good, MeasureTiming.YES)
        np.testing.assert_array_equal(np.frombuffer(pool.buffer, np.float32, 6, 128).reshape(2, 3), a + b)
        assert result.timing.time_in_driver >= result.timing.time_on_device
    finally:
        prepared.close()
        pool.close()


def test_float_add_is_ieee_whatever_the_callers_error_state() -> None:
    """ADD overflows to inf and inf - inf gives nan without a warning or an error, even when the caller
    turned every floating-point error into an exception; the caller's error state is left as it was."""
    import warnings

    prepared = SampleAll().prepareModel(add_model())
    big = np.full((2, 3), np.finfo(np.float32).max, np.float32)
    inf = np.full((2, 3), np.inf, np.float32)
    try:
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            (over,) = prepared.plan.run([big, big])
            (nan,) = prepared.plan.run([inf, -inf])
            assert np.geterr() == {"divide": "raise", "over": "raise", "under": "raise", "invalid": "raise"}
        assert np.isposinf(over).all() and np.isnan(nan).all()
    finally:
        prepared.close()


def test_run_into_takes_the_straight_line_function_only_with_every_input() -> None:
    """`run_into` gives the plan's results to the sink by the straight-line function, falls back to the
    loop for an input without a value, and refuses a wrong input count as `run` does."""
    prepared = SampleAll().prepareModel(add_model())
    plan = prepared.plan
    a, b = _arrays(9)
    try:
        got = plan.run_into([a, b], None, lambda outs: np.array(outs[0], copy=True))
        np.testing.assert_array_equal(got, a + b)
        assert plan._straight is not None
        with pytest.raises(HalError, match="takes 2 inputs, 1 were given"):
            plan.run_into([a], None, lambda outs: outs)
        with pytest.raises(HalError):
            plan.run_into([a, None], None, lambda outs: outs)
        assert len(plan.workspaces) >= 1  # every workspace came back, failed runs' included
    finally:
        prepared.close()
