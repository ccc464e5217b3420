"""The LSTM op bound into a run of compiled calls (driver.bound_steps; its four outputs from one
bound step): the same floats, bit for bit, as the op called on its own, states carried from run to
run; within 1e-5 of a float64 transcription of NNAPI's LSTM; several steps of a plan run as one
chunk, a step with a projection (NumPy's) as before; two threads running one plan get the results
each gets alone."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from driver.bound_steps import Chunk
from driver.executor import Plan
from driver.ops import _lstm_native
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.validate import validate_model
from tests.driver import bindkit
from tests.driver.lstmkit import F32T, GATES, Case, lstm_inputs, make_case, reference
from tests.driver.opkit import prepare

pytestmark = pytest.mark.skipif(not _lstm_native.available(), reason="compiled kernels not loaded")

Op = OperationType
ATOL = RTOL = 1e-5


def _lstm(b: ModelBuilder, case: Case, x: int, batch: int) -> list[int]:
    """One LSTM operation of `case` on operand x; its state inputs are model inputs; its outputs."""
    u, m = case.c0.shape[1], case.h0.shape[1]

    def tensor(v: np.ndarray | None) -> int:
        return b.add_omitted(F32T) if v is None else b.add_constant(v)

    weights = [tensor(case.wx.get(k)) for k in GATES] + [tensor(case.wh.get(k)) for k in GATES]
    peep = [tensor(case.peep.get(k)) for k in ("i", "f", "o")]
    bias = [tensor(case.b.get(k)) for k in GATES]
    proj = [tensor(case.proj), tensor(case.proj_b)]
    h_in, c_in = b.add_input(F32T, (batch, m)), b.add_input(F32T, (batch, u))
    params = [
        b.add_scalar(case.act, OperandType.INT32),
        b.add_scalar(case.cell_clip, OperandType.FLOAT32),
        b.add_scalar(case.proj_clip, OperandType.FLOAT32),
    ]
    gates = 3 if case.cifg else 4
    outs = [b.add_operand(F32T, (batch, gates * u)), b.add_operand(F32T, (batch, m))]
    outs += [b.add_operand(F32T, (batch, u)), b.add_operand(F32T, (batch, m))]
    b.add_operation(Op.LSTM, [x, *weights, *peep, *bias, *proj, h_in, c_in, *params], outs)
    return outs


def _model(first: Case, second: Case) -> object:
    """x -> LSTM(first) -> LSTM(second) on the first's output state -> TANH of the second's output;
    inputs x, h1, c1, h2, c2; outputs every LSTM output and the TANH."""
    b = ModelBuilder()
    batch, n = first.x.shape[1], first.x.shape[2]
    x = b.add_input(F32T, (batch, n))
    one = _lstm(b, first, x, batch)
    two = _lstm(b, second, one[1], batch)
    t = b.add_operand(F32T, (batch, second.h0.shape[1]))
    b.add_operation(Op.TANH, [two[3]], [t])
    b.mark_outputs([*one, *two, t])
    model = b.build()
    validate_model(model)
    return model


def _cases(seed: int, n: int, u1: int, u2: int, batch: int, steps: int, **options) -> tuple[Case, Case]:
    rng = np.random.default_rng(seed)
    first = make_case(rng, n, u1, batch, steps, **options)
    second = make_case(rng, first.h0.shape[1], u2, batch, steps, **options)
    return first, second


def _steps(plan: Plan, first: Case, second: Case) -> list[list[np.ndarray]]:
    """The plan's outputs per step, the LSTMs' states carried from each step to the next."""
    h1, c1, h2, c2 = first.h0, first.c0, second.h0, second.c0
    results = []
    for x in first.x:
        got = [np.array(o) for o in plan.run([x, h1, c1, h2, c2], checked=True)]
        results.append(got)
        h1, c1, h2, c2 = got[1], got[2], got[5], got[6]
    return results


def _chunks(plan: Plan) -> list[Chunk]:
    assert plan._straight is not None
    return [v for v in plan._straight.__globals__.values() if isinstance(v, Chunk)]


CASES = [
    ("plain", (5, 16, 13, 2, 4), {}),
    ("batch_1_units_9", (7, 9, 24, 1, 3), {}),
    ("peephole", (6, 11, 8, 2, 3), dict(peephole=True)),
    ("cifg_peephole_clip", (5, 12, 10, 3, 3), dict(cifg=True, peephole=True, cell_clip=0.5)),
    ("relu6", (4, 8, 8, 2, 3), dict(act=3)),
    ("zoo_size", (334, 256, 256, 1, 2), dict(peephole=True)),
]  # fmt: skip


@pytest.mark.parametrize("sizes,options", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bound_lstms_equal_the_op_called_alone_and_float64(sizes, options) -> None:
    first, second = _cases(sum(sizes), *sizes, **options)
    bound, alone = Plan(_model(first, second)), bindkit.unbound(Plan(_model(first, second)))
    got, want = _steps(bound, first, second), _steps(alone, first, second)
    assert [len(c.steps) for c in _chunks(bound)] == [3] and not _chunks(bound)[0].dead
    for g_step, w_step in zip(got, want, strict=True):
        for g, w in zip(g_step, w_step, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes()
    # The first LSTM against the float64 transcription (its input is the model's own x).
    y_ref, _, c_ref = reference(first)
    for t, step in enumerate(got):
        for actual in (step[1], step[3]):  # output_state_out and output: h'
            _close(actual, y_ref[t])
    _close(got[-1][2], c_ref)


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    err = np.abs(actual.astype(np.float64) - expected)
    bad = ~(err <= ATOL + RTOL * np.abs(expected))
    assert not bad.any(), f"{bad.sum()} of {bad.size} values out of tolerance; max error {err.max():.3g}"


def test_a_projection_runs_its_lstm_outside_the_chunk() -> None:
    first, second = _cases(5, 6, 10, 8, 2, 3, proj=4, proj_bias=True, proj_clip=0.3)
    bound, alone = Plan(_model(first, second)), bindkit.unbound(Plan(_model(first, second)))
    got, want = _steps(bound, first, second), _steps(alone, first, second)
    assert _chunks(bound) == []  # each LSTM steps alone; a lone TANH makes no chunk
    for g_step, w_step in zip(got, want, strict=True):
        for g, w in zip(g_step, w_step, strict=True):
            assert g.tobytes() == w.tobytes()


def test_two_threads_running_one_plan_with_bound_lstms_get_the_lone_results() -> None:
    first, second = _cases(11, 24, 40, 32, 2, 2)
    plan = Plan(_model(first, second))
    rng = np.random.default_rng(8)
    feeds = [
        [
            rng.uniform(-2, 2, size=a.shape).astype(np.float32)
            for a in (first.x[0], first.h0, first.c0, second.h0, second.c0)
        ]
        for _ in range(2)
    ]
    expected = [[o.tobytes() for o in bindkit.unbound(Plan(_model(first, second))).run(f)] for f in feeds]
    start = threading.Barrier(2)
    failures: list[str] = []

    def worker(k: int) -> None:
        start.wait()
        for i in range(100):
            got = plan.run(feeds[k])
            if [o.tobytes() for o in got] != expected[k]:
                failures.append(f"thread {k}, run {i}")
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert all(not c.dead for c in _chunks(plan))


def test_the_lstm_binds_with_the_cells_arguments_of_its_own_run(monkeypatch) -> None:
    """The bound step is the cell's call with `FusedCell.step`'s arguments and a copy of h'; with the
    fused cell turned off (NumPy's path) nothing binds and the results stay within 1e-6."""
    first, second = _cases(3, 5, 8, 8, 2, 2)
    bound = _steps(Plan(_model(first, second)), first, second)
    monkeypatch.setattr(_lstm_native, "_CELL", None)
    plan = Plan(_model(first, second))
    plain = _steps(plan, first, second)
    assert _chunks(plan) == []
    for g_step, w_step in zip(bound, plain, strict=True):
        for g, w in zip(g_step, w_step, strict=True):
            assert not (np.abs(g - w) > 1e-6 + 1e-6 * np.abs(w)).any()


def test_the_lstm_offers_a_binding_only_without_a_projection() -> None:
    plain, _ = _cases(2, 5, 8, 8, 1, 1)
    projected, _ = _cases(2, 5, 8, 8, 1, 1, proj=3)
    for case, binds in ((plain, True), (projected, False)):
        run, _args = prepare(Op.LSTM, lstm_inputs(case, case.x[0], case.h0, case.c0), 4)
        assert (getattr(run, "binding", None) is not None) == binds


def test_the_lstm_call_read_through_its_structure_is_what_the_binder_wrote() -> None:
    from driver.native import layout

    first, second = _cases(4, 6, 16, 8, 2, 1)
    plan = Plan(_model(first, second))
    _steps(plan, first, second)
    (prog,) = [p for ws in plan.workspaces.free for p in ws.bound.values() if hasattr(p, "owners")]
    cells = [row for row in range(prog.count) if prog.ints[row, 0] == layout.CALL_LSTM_CELL_F32]
    assert len(cells) == 2
    for row, case in zip(cells, (first, second), strict=True):
        call = layout.Call.from_buffer(prog.ints[row]).lstm_cell_f32
        step, bound = prog.owners[row]
        gates, h_new, c_new, h_out = bound.outs
        assert len(bound.calls[0][1]) == len(layout.CallLstmCellF32._fields_) - 1
        cst = layout.LstmConst.from_address(call.cst)
        assert (cst.units, cst.k1, cst.k2, cst.gates) == (
            16 if case is first else 8,
            case.x.shape[2],
            case.h0.shape[1],
            4,
        )
        assert (call.batch, call.lda1, call.lda2, call.add, call.ldadd) == (2, cst.k1, cst.k2, None, 0)
        assert (call.gates_out, call.h_out, call.c_out) == (
            gates.ctypes.data,
            h_new.ctypes.data,
            c_new.ctypes.data,
        )
        copy = layout.Call.from_buffer(prog.ints[row + 1]).copy
        assert prog.ints[row + 1, 0] == layout.CALL_COPY
        assert (copy.src, copy.dst, copy.bytes) == (h_new.ctypes.data, h_out.ctypes.data, h_out.nbytes)
        assert prog.owners[row + 1][0] is step
