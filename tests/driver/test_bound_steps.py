"""Runs of compiled-only operations bound once per workspace (driver.bound_steps): the same results,
bit for bit, as the same operations called one by one, alone and from two threads at once; the
operations still run one by one whenever binding does not apply."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from driver import native
from driver.bound_steps import Chunk
from driver.executor import Plan
from driver.native import layout
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from tests.driver import bindkit
from tests.driver.bindkit import _inputs, _model
from tests.driver.threadkit import run_concurrently

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


def _chunks(plan: Plan) -> list[Chunk]:
    plan.run(_inputs(1), checked=True)  # compiles the straight-line function
    assert plan._straight is not None
    return [v for v in plan._straight.__globals__.values() if isinstance(v, Chunk)]


def test_bound_runs_equal_the_steps_called_one_by_one() -> None:
    bound, unbound = Plan(_model()), bindkit.unbound(Plan(_model()))
    chunks = _chunks(bound)
    assert [len(c.steps) for c in chunks] == [4, 4]
    for x in _inputs(3):
        for _ in range(2):  # binds, then runs bound
            got, want = bound.run([x], checked=True), unbound.run([x], checked=True)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and g.shape == w.shape
                assert g.tobytes() == w.tobytes()
    assert not any(c.dead for c in chunks)
    assert all(len(ws.bound) == 2 for ws in bound.workspaces.free)


def test_checkpoints_come_before_each_piece_of_a_bound_run(monkeypatch) -> None:
    import driver.bound_steps as bound_steps

    plan = Plan(_model())
    x = _inputs(1)[0]
    want = plan.run([x], checked=True)
    for limit, indexes in ((1 << 24, [0, 4, 5]), (1, [0, 1, 2, 3, 4, 5, 6, 7, 8])):
        monkeypatch.setattr(bound_steps, "MAX_PIECE_MACS", limit)
        fresh = Plan(_model())
        seen: list[int] = []
        for _ in range(2):
            seen.clear()
            got = fresh.run([x], seen.append, checked=True)
            for g, w in zip(got, want, strict=True):
                assert g.tobytes() == w.tobytes()
        assert seen == indexes

    def late(index: int) -> None:
        raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before operation {index}")

    with pytest.raises(HalError) as info:
        plan.run([x], late, checked=True)
    assert info.value.message == "deadline passed before operation 0"


def test_two_threads_running_one_plan_get_the_lone_results() -> None:
    plan = Plan(_model())
    inputs = _inputs(2)
    reference = bindkit.unbound(Plan(_model()))
    expected = [[r.tobytes() for r in reference.run([x], checked=True)] for x in inputs]
    start = threading.Barrier(2)
    errors: list[str] = []

    def worker(k: int) -> None:
        start.wait()
        for i in range(60):
            got = plan.run([inputs[k]], checked=True)
            if [r.tobytes() for r in got] != expected[k]:
                errors.append(f"thread {k}, run {i}: result differs from a lone run")
                return

    run_concurrently(worker)
    assert errors == []


def test_steps_run_one_by_one_when_binding_does_not_apply() -> None:
    plan = Plan(_model())
    chunks = _chunks(plan)
    x = _inputs(1)[0]
    want = [r.copy() for r in plan.run([x], checked=True)]
    # An input that is not C-contiguous float32 of the bound shape: the steps run as before.
    wide = np.zeros((1, 12, 24, 3), np.float32)
    wide[:, :, ::2] = x
    got = plan.run([wide[:, :, ::2]], checked=True)
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
    # A kernel replaced after binding takes effect, with the step's error wording.
    step = chunks[0].steps[1]

    def broken(args):
        raise ValueError("broken")

    step.run = step.direct = broken
    with pytest.raises(HalError) as info:
        plan.run([x], checked=True)
    assert info.value.message.startswith(
        "operation 1 (DEPTHWISE_CONV_2D) failed on inputs (float32[1, 6, 6, 8]"
    )


def test_bind_turned_off_runs_every_step_one_by_one() -> None:
    x = _inputs(1)[0]
    bound = Plan(_model())
    want = bound.run([x], checked=True)
    assert _chunks(bound)
    plan = Plan(_model(), bind=False)
    got = plan.run([x], checked=True)
    assert not _chunks(plan)
    assert all(not ws.bound for ws in plan.workspaces.free)
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()


def test_little_work_keeps_the_interpreter_lock(monkeypatch) -> None:
    import driver.bound_steps as bound_steps

    x = _inputs(1)[0]
    results = []
    for hold_below, lib in ((1 << 16, native.LIB_HELD), (0, native.LIB)):
        monkeypatch.setattr(bound_steps, "HOLD_BELOW_MACS", hold_below)
        plan = Plan(_model())
        for _ in range(2):
            got = plan.run([x], checked=True)
        programs = [p for ws in plan.workspaces.free for p in ws.bound.values()]
        assert len(programs) == 2 and all(p.run is lib.mk_run_calls for p in programs)  # type: ignore[attr-defined,union-attr]
        results.append([g.tobytes() for g in got])
    assert results[0] == results[1]


def test_without_the_compiled_kernels_nothing_binds(monkeypatch) -> None:
    x = _inputs(1)[0]
    want = Plan(_model()).run([x], checked=True)
    monkeypatch.setattr(native, "LIB", None)  # what a missing or stale build leaves
    plan = Plan(_model())
    assert _chunks(plan) == []
    got = plan.run([x], checked=True)  # the NumPy kernels
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)  # summation orders differ


def test_two_threads_executing_one_prepared_model_get_the_sequential_results() -> None:
    """Through the driver's prepared model (executeSynchronously): each thread's own request, bit for
    bit what the same requests give one after another."""
    from driver.variants import SampleAll
    from tests.driver import cfkit

    model = _model()
    prepared = SampleAll().prepareModel(model)
    sub = model.main
    out_bytes = [int(np.prod(sub.operands[i].dimensions)) * 4 for i in sub.output_indexes]
    inputs = _inputs(2)

    def execute(x: np.ndarray) -> list[bytes]:
        req, buf, offsets = cfkit.request([x], out_bytes)
        prepared.executeSynchronously(req)
        return [bytes(buf[off : off + n]) for off, n in zip(offsets, out_bytes, strict=True)]

    expected = [execute(x) for x in inputs]
    assert expected[0] != expected[1]
    start = threading.Barrier(2)
    errors: list[str] = []

    def worker(k: int) -> None:
        start.wait()
        for i in range(40):
            if execute(inputs[k]) != expected[k]:
                errors.append(f"thread {k}, execution {i}: results differ from the sequential ones")
                return

    run_concurrently(worker)
    assert errors == []
    assert all(len(ws.bound) == 2 for ws in prepared.plan.workspaces.free)  # the chunks ran bound


@pytest.mark.parametrize("name", ["quant", "quant_pc"])
def test_quantized_convolutions_bound_equal_the_steps_called_one_by_one(name) -> None:
    from driver.ops import _qgemm
    from tests.driver import cachekit

    model = cachekit.model(name)
    bound, unbound = Plan(model), bindkit.unbound(Plan(model))
    for seed in (0, 1):
        xs = cachekit.inputs(model, seed)
        for _ in range(2):
            got, want = bound.run(xs, checked=True), unbound.run(xs, checked=True)
            assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    chunks = [v for v in bound._straight.__globals__.values() if isinstance(v, Chunk)]
    if _qgemm.available(8):  # the integer GEMM binds; the float32 GEMM of quantized inputs does not
        # The convolutions, the 8-bit ADD (a compiled lookup in its table of byte pairs), the 8-bit MEAN
        # and RESHAPE (quant_pc: with the 1x1 CONV_2D between): one chunk.
        assert [len(c.steps) for c in chunks] == {"quant": [5], "quant_pc": [6]}[name]
        assert not any(c.dead for c in chunks)


def test_a_failed_bound_call_is_reported_as_its_step_reports_it() -> None:
    from driver.ops import _bind, _qgemm
    from tests.driver import cachekit

    if not _qgemm.available(8):
        pytest.skip("no integer GEMM on this machine")
    model = cachekit.model("quant")
    xs = cachekit.inputs(model)
    plan = Plan(model)
    plan.run(xs, checked=True)
    (ws,) = plan.workspaces.free
    prog, row = next(
        (p, r) for p in ws.bound.values() for r in range(p.count) if p.ints[r, 0] == _bind.CALL_QGEMM_REQUANT
    )
    k_word = layout.CallQgemmRequant.k.offset // 8  # the call's K (mk_call_qgemm_requant_t)
    prog.ints[row, k_word] = 1 << 40  # K beyond what the integer GEMM takes: it refuses (status -2)
    with pytest.raises(HalError) as info:
        plan.run(xs, checked=True)
    step = prog.owners[row][0]
    assert info.value.status == ErrorStatus.GENERAL_FAILURE
    assert info.value.message.startswith(f"{step.label} failed on inputs (uint8[")
    assert info.value.message.endswith(
        "RuntimeError: integer GEMM refused K=" + str(prog.owners[row][1].keep[1].k)
    )
    prog.ints[row, 0] = 99  # a call the library does not know
    with pytest.raises(HalError) as info:
        plan.run(xs, checked=True)
    assert info.value.message == f"{step.label}: bound compiled call {row} was refused"


def test_external_values_addresses_are_numpys() -> None:
    """A chunk reads the data address of each value from outside it (a new view of a request's pool
    at every execution) from the array object; it must be what NumPy says, for any array it may see."""
    import driver.bound_steps as bound_steps

    pool = memoryview(bytearray(4096))
    owned = np.arange(24, dtype=np.float32).reshape(4, 6)
    arrays = [
        owned,
        owned[2:],
        np.ndarray((1, 256), np.float32, pool.toreadonly(), 1024),
        np.ndarray((3,), np.int32, pool, 12),
        np.frombuffer(bytes(64), np.uint8, 16, 8),
        np.empty(0, np.float32),
    ]
    for a in arrays:
        assert bound_steps._data_address(a) == a.ctypes.data
