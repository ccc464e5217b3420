"""IF and WHILE in the sample driver's executor, against float64 NumPy loops written from the NNAPI spec."""

from __future__ import annotations

import time

import numpy as np
import pytest

from driver.executor import Plan, run_model
from driver.variants import SampleAll, SampleFloatFast
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from tests.driver import cfkit

FP32 = {"atol": 1e-5, "rtol": 5 * 2**-23}


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_the_chosen_branch(cond: bool) -> None:
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    (out,) = run_model(cfkit.if_model(), [np.array([cond]), a, b])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(out, a64 + b64 if cond else a64 * b64, **FP32)


def reference_while(x, i, limit, step):
    """while sum(x) < limit: x = 2x + step; i += 1 (float64)."""
    x, i = x.astype(np.float64), float(i[0])
    while x.sum() < limit[0]:
        x = x + x + step
        i += 1
    return x, i


@pytest.mark.parametrize(
    "x, limit",
    [
        ([1.0, 0.0, 0.5], 100.0),  # several iterations
        ([5.0, 5.0, 5.0], 1.0),  # none: the condition is false at once
        ([0.01, 0.02, 0.03], 1e6),  # many: the count depends on the data
    ],
)
def test_while_matches_a_numpy_loop(x, limit) -> None:
    step = np.array([0.1, 0.2, 0.3], np.float32)
    args = [np.array(x, np.float32), np.array([0], np.float32), np.array([limit], np.float32), step]
    out_x, out_i = run_model(cfkit.while_model(), args)
    want_x, want_i = reference_while(*args)
    assert out_i.tolist() == [want_i]
    np.testing.assert_allclose(out_x, want_x, rtol=1e-5)


def test_while_carried_value_may_change_shape() -> None:
    x = np.array([1.0, 2.0], np.float32)
    for n in (0, 1, 3):
        (out,) = run_model(cfkit.growing_model(), [x, np.array([0], np.float32), np.array([n], np.float32)])
        np.testing.assert_array_equal(out, np.tile(x, 2**n))


def test_operands_pass_by_value() -> None:
    # The plan's outer input stays what the caller gave, however often the body rewrote the loop value.
    x = np.array([1.0, 0.0, 0.5], np.float32)
    x.flags.writeable = False
    step = np.array([0.1, 0.2, 0.3], np.float32)
    run_model(cfkit.while_model(), [x, np.array([0], np.float32), np.array([100], np.float32), step])
    assert x.tolist() == [1.0, 0.0, 0.5]


def test_endless_loop_ends_at_its_loop_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(HalError, match="loop timeout of 0.05 s exceeded") as info:
        run_model(cfkit.endless_model(), [np.array([1.0], np.float32)], loop_timeout_ns=50_000_000)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert "operation 0 (WHILE)" in info.value.message
    assert time.monotonic() - start < 10  # stopped, not hung (generous: a loaded 2-core machine)


def test_checkpoint_runs_inside_subgraphs() -> None:
    """A deadline passing inside a loop body ends the execution with MISSED_DEADLINE_TRANSIENT."""
    plan = Plan(cfkit.endless_model())
    seen = []

    def checkpoint(index: int) -> None:
        seen.append(index)
        if len(seen) > 50:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before operation {index}")

    with pytest.raises(HalError) as info:
        plan.run([np.array([1.0], np.float32)], checkpoint)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert info.value.message.startswith("operation 0 (WHILE): deadline passed")
    assert len(seen) == 51


def _execute(model, arrays, out_bytes, **kw):
    device = SampleAll()
    prepared = device.prepareModel(model)
    req, buf, offsets = cfkit.request(arrays, out_bytes)
    result = prepared.executeSynchronously(req, MeasureTiming.YES, **kw)
    return result, buf, offsets


def test_device_runs_while_and_reports_dynamic_shape() -> None:
    x = np.array([1.0, 2.0], np.float32)
    args = [x, np.array([0], np.float32), np.array([2], np.float32)]
    result, buf, offsets = _execute(cfkit.growing_model(), args, [64])
    assert result.output_shapes[0].dimensions == (8,)
    assert result.output_shapes[0].is_sufficient
    got = np.frombuffer(bytes(buf[offsets[0] : offsets[0] + 32]), np.float32)
    np.testing.assert_array_equal(got, np.tile(x, 4))
    # Too small an output: OUTPUT_INSUFFICIENT_SIZE with the real shape.
    with pytest.raises(HalError) as info:
        _execute(cfkit.growing_model(), args, [16])
    assert info.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert info.value.output_shapes[0].dimensions == (8,)


def test_device_loop_timeout_from_the_execute_call() -> None:
    with pytest.raises(HalError) as info:
        _execute(cfkit.endless_model(), [np.array([1.0], np.float32)], [4], loop_timeout_duration=20_000_000)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    with pytest.raises(HalError) as info:
        _execute(cfkit.endless_model(), [np.array([1.0], np.float32)], [4], loop_timeout_duration=16 * 10**9)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "at most 15 s" in info.value.message


def test_supported_operations_follow_the_variant() -> None:
    assert SampleAll().getSupportedOperations(cfkit.if_model()) == (True,)
    # IF's first input is TENSOR_BOOL8: a float-only variant leaves control flow to another device.
    assert SampleFloatFast().getSupportedOperations(cfkit.if_model()) == (False,)


def test_control_flow_model_round_trips_the_compilation_cache(tmp_path) -> None:
    from tests.driver import cachekit

    device = SampleAll()
    m, d = cachekit.save(device, cfkit.while_model(), tmp_path)
    prepared = cachekit.load(device, m, d)
    step = np.array([0.1, 0.2, 0.3], np.float32)
    args = [np.array([1, 0, 0.5], np.float32), np.array([0], np.float32), np.array([100], np.float32), step]
    out_x, out_i = cachekit.run(prepared, args)
    want_x, want_i = reference_while(*args)
    assert out_i.tolist() == [want_i]
    np.testing.assert_allclose(out_x, want_x, rtol=1e-5)


def test_static_subgraph_runs_unchecked_with_the_same_results(monkeypatch) -> None:
    """A referenced subgraph whose inputs arrive with their declared shapes skips the per-step size
    checks (all sizes are known at prepare); the results equal the checked path's bit for bit."""
    step = np.array([0.1, 0.2, 0.3], np.float32)
    args = [
        np.array([0.01, 0.02, 0.03], np.float32),
        np.array([0], np.float32),
        np.array([1e4], np.float32),
        step,
    ]
    plan = Plan(cfkit.while_model())
    subplans = list(plan_subplans(plan))
    assert subplans and all(p._static_inputs is not None for p in subplans)
    checked_steps: list[str] = []
    original = Plan._check_step

    def spy(self, step, *rest):
        if self is not plan:  # the main graph holds the WHILE itself: always checked
            checked_steps.append(step.label)
        return original(self, step, *rest)

    monkeypatch.setattr(Plan, "_check_step", spy)
    fast = plan.run(args)
    assert checked_steps == []
    for p in subplans:
        p._static_inputs = None
    slow = plan.run(args)
    assert checked_steps  # the checked path ran this time
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


def plan_subplans(plan: Plan):
    """The plans of the subgraphs a plan's WHILE/IF steps reference (through their closures)."""
    seen: dict[int, Plan] = {}
    for st in plan.steps:
        if st.control is None:
            continue
        for cell in st.control.__closure__ or ():
            if isinstance(cell.cell_contents, Plan):
                seen[id(cell.cell_contents)] = cell.cell_contents
    return seen.values()
