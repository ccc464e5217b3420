"""The compiled fused LSTM cell (driver/ops/_lstm_native.py) against the NumPy path it replaces.

Both compute the same float32 formulas; the fused cell's sigmoid and tanh are polynomials a few
ulp from NumPy's and its products sum in another order, so results agree within 1e-6 absolute +
1e-6 relative over the few steps compared (a wrong gate, panel offset, stride or peephole is off
by orders of magnitude more). Steps large enough to be split over the kernels' two threads give the
same results as on one thread. Two executions of one prepared model running at once must each get
their own results: the cell shares nothing mutable between them.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from driver import native
from driver.executor import Plan
from driver.ops import _lstm_native
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.validate import validate_model
from tests.driver.lstmkit import F32T, Case, lstm_inputs, make_case, seq_inputs
from tests.driver.opkit import prepare

Op = OperationType
TOL = 1e-6

pytestmark = pytest.mark.skipif(not _lstm_native.available(), reason="compiled kernels not loaded")

# (name, (input_size, num_units, batch, steps), make_case options): units not a multiple of 8 too.
CASES = [
    ("plain", (5, 6, 3, 3), {}),
    ("units_13_batch_1", (7, 13, 1, 3), {}),
    ("wide", (40, 64, 2, 3), {}),
    ("peephole", (5, 11, 2, 3), dict(peephole=True)),
    ("cifg_peephole", (5, 9, 2, 3), dict(cifg=True, peephole=True)),
    ("projection", (6, 10, 2, 3), dict(proj=4, proj_bias=True, proj_clip=0.3)),
    ("cell_clip", (5, 8, 2, 3), dict(cell_clip=0.4)),
    ("act_none", (5, 8, 2, 3), dict(act=0)),
    ("act_relu", (5, 8, 2, 3), dict(act=1)),
    ("act_relu6", (5, 8, 2, 3), dict(act=3, peephole=True)),
    ("act_sigmoid", (5, 8, 2, 3), dict(act=6, proj=3)),
    ("zero_state", (4, 16, 2, 3), dict(zero_state=True)),
    # Panels go to the kernel in groups of three (24 units), the last group of one or two: groups with
    # a partial panel, a group of three and of two, of three and one, each option on both paths.
    ("units_30_pairs", (9, 30, 2, 3), {}),
    ("units_24_pair_and_one", (3, 24, 1, 3), {}),
    ("units_17_cifg", (6, 17, 2, 3), dict(cifg=True)),
    ("units_40_cifg_peephole_clip", (5, 40, 2, 3), dict(cifg=True, peephole=True, cell_clip=0.5)),
    ("units_33_peephole_projection", (7, 33, 2, 3), dict(peephole=True, proj=12, proj_clip=0.2)),
    ("units_48_relu6_clip_projection", (11, 48, 3, 3), dict(act=3, cell_clip=0.7, proj=20, proj_bias=True)),
]  # fmt: skip


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape and actual.dtype == np.float32
    err = np.abs(actual.astype(np.float64) - expected)
    bad = ~(err <= TOL + TOL * np.abs(expected))
    assert not bad.any(), f"{bad.sum()} of {bad.size} values out of tolerance; max error {err.max():.3g}"


def _numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lstm_native, "_CELL", None)


def _lstm_steps(case: Case) -> list[list[np.ndarray]]:
    h, c, outs = case.h0, case.c0, []
    for x in case.x:
        run, args = prepare(Op.LSTM, lstm_inputs(case, x, h, c), 4)
        step = run(args)
        outs.append([np.array(o) for o in step])
        _, h, c, _ = step
    return outs


def _sequence(case: Case, time_major: bool) -> list[np.ndarray]:
    run, args = prepare(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, seq_inputs(case, time_major), 3)
    return [np.array(o) for o in run(args)]


@pytest.mark.parametrize("sizes,options", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lstm_step_fused_equals_numpy(sizes, options, monkeypatch):
    case = make_case(np.random.default_rng(sum(sizes)), *sizes, **options)
    fused = _lstm_steps(case)
    _numpy_path(monkeypatch)
    plain = _lstm_steps(case)
    for t, (got, want) in enumerate(zip(fused, plain, strict=True)):
        for g, w in zip(got, want, strict=True):  # scratch (gate activations), h, c, output
            close(g, w.astype(np.float64))
        assert got[0].shape == (sizes[2], (3 if case.cifg else 4) * sizes[1]), t


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("sizes,options", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_sequence_fused_equals_numpy(sizes, options, time_major, monkeypatch):
    case = make_case(np.random.default_rng(3 + sum(sizes)), *sizes, **options)
    fused = _sequence(case, time_major)
    _numpy_path(monkeypatch)
    plain = _sequence(case, time_major)
    for got, want in zip(fused, plain, strict=True):
        close(got, want.astype(np.float64))


@pytest.mark.parametrize("gates", [3, 4])
@pytest.mark.parametrize("units", [8, 13, 3, 16, 20, 24, 40, 47, 64])
def test_panel_layout(units, gates):
    """Unit 8p + j of gate g, row kk (0 past units) sits in panel p's row kk at g * 8 + j; panels 3t,
    3t + 1, 3t + 2 are interleaved by rows ([groups][k][3][gates * 8]), the one or two panels left over
    the same way ([k][2][gates * 8] or [k][gates * 8]), each group where its first panel would be in a
    plain [panels][k][gates * 8] array."""
    rng = np.random.default_rng(units + gates)
    k = 7
    blocks = [rng.standard_normal((kb, gates * units)).astype(np.float32) for kb in (5, 2)]
    got = _lstm_native.panels(blocks, gates, units)
    rows = np.concatenate(blocks)
    count, gw = -(-units // 8), gates * 8
    assert _lstm_native.GROUP == 3
    assert got.shape == (count * k * gw,) and got.flags.c_contiguous and got.dtype == np.float32
    for p in range(count):
        first = p - p % 3
        size = min(3, count - first)
        start, row_stride = first * k * gw + (p - first) * gw, size * gw
        for g in range(gates):
            for j in range(8):
                unit = 8 * p + j
                want = rows[:, g * units + unit] if unit < units else np.zeros(k, np.float32)
                at = start + np.arange(k) * row_stride + g * 8 + j
                np.testing.assert_array_equal(got[at], want)


def test_fused_cell_is_used_only_where_it_applies(monkeypatch):
    """Constant weights without layer norm: fused; layer norm or run-time weights: the NumPy path."""
    made: list[bool] = []
    real = _lstm_native.fused_cell

    def spy(*args, **kwargs):
        cell = real(*args, **kwargs)
        made.append(cell is not None)
        return cell

    monkeypatch.setattr(_lstm_native, "fused_cell", spy)
    for options, const, expect in (
        ({}, True, True),
        (dict(layer_norm=True), True, False),
        ({}, False, False),
    ):
        case = make_case(np.random.default_rng(1), 4, 8, 1, 1, **options)
        made.clear()
        prepare(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, seq_inputs(case, True, const), 3)
        prepare(Op.LSTM, lstm_inputs(case, case.x[0], case.h0, case.c0, const), 4)
        assert made == [expect, expect], (options, const)


def test_saturated_gates_stay_finite_and_exact():
    """Pre-activations of +-1e4: the cell's exp is clamped, sigmoid and tanh give 0 or 1 exactly."""
    case = make_case(np.random.default_rng(2), 4, 12, 2, 2, peephole=True)
    case.x = case.x * np.float32(1e4)
    for outs in _lstm_steps(case):
        gates, h, c, _ = outs
        assert np.isfinite(gates).all() and np.isfinite(h).all() and np.isfinite(c).all()
        assert ((gates >= -1) & (gates <= 1)).all()


@pytest.mark.parametrize("act", [1, 3, 4], ids=["relu", "relu6", "tanh"])
def test_nan_propagates_as_in_numpy(act, monkeypatch):
    """A NaN in one batch row's input makes that row's results NaN on both paths (the compiled
    clamps keep NaN as NumPy's do); the other row stays finite and equal."""
    case = make_case(np.random.default_rng(8), 4, 10, 2, 1, act=act, cell_clip=2.0)
    case.x[0, 0, 1] = np.nan
    fused = _lstm_steps(case)[0]
    _numpy_path(monkeypatch)
    plain = _lstm_steps(case)[0]
    for got, want in zip(fused, plain, strict=True):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
        close(got[1], want[1].astype(np.float64))


def _model(case: Case) -> tuple:
    """A one-step LSTM model: input and states as model inputs, constant weights."""
    b = ModelBuilder()
    n, u = case.x.shape[2], case.h0.shape[1]
    batch = case.x.shape[1]
    x_in = b.add_input(F32T, (batch, n))
    weights = [b.add_constant(case.wx[k]) for k in "ifgo"] + [b.add_constant(case.wh[k]) for k in "ifgo"]
    peep = [b.add_omitted(F32T) for _ in range(3)]
    bias = [b.add_constant(case.b[k]) for k in "ifgo"]
    proj = [b.add_omitted(F32T), b.add_omitted(F32T)]
    h_in, c_in = b.add_input(F32T, (batch, u)), b.add_input(F32T, (batch, u))
    params = [
        b.add_scalar(4, OperandType.INT32),
        b.add_scalar(0.0, OperandType.FLOAT32),
        b.add_scalar(0.0, OperandType.FLOAT32),
    ]
    outs = [b.add_operand(F32T, (batch, 4 * u))] + [b.add_operand(F32T, (batch, u)) for _ in range(3)]
    b.add_operation(Op.LSTM, [x_in, *weights, *peep, *bias, *proj, h_in, c_in, *params], outs)
    b.mark_outputs(outs)
    model = b.build()
    validate_model(model)
    return model


@pytest.fixture
def two_threads():
    """The kernels' thread count 2 (the fused cell then splits large steps over the kernels' pool)."""
    before = native.threads()
    native.set_threads(2)
    yield
    native.set_threads(before)


# batch 2 x (256 + 256) inputs x 256 units x 4 gates: the size the cell is split from.
LARGE = (256, 256, 2, 3)


@pytest.mark.parametrize(
    "sizes,options",
    [(LARGE, {}), ((700, 256, 2, 3), dict(cifg=True, peephole=True, proj=100))],
    ids=["plain", "cifg_proj"],
)
def test_steps_split_over_two_threads_equal_one_thread_and_numpy(sizes, options, two_threads, monkeypatch):
    case = make_case(np.random.default_rng(12), *sizes, **options)
    split_steps, split_seq = _lstm_steps(case), _sequence(case, False)
    native.set_threads(1)
    one_steps, one_seq = _lstm_steps(case), _sequence(case, False)
    for got, want in zip(split_steps, one_steps, strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)  # every unit is computed the same way on either thread
    for g, w in zip(split_seq, one_seq, strict=True):
        np.testing.assert_array_equal(g, w)
    native.set_threads(2)
    _numpy_path(monkeypatch)
    for got, want in zip(split_steps, _lstm_steps(case), strict=True):
        for g, w in zip(got, want, strict=True):
            close(g, w.astype(np.float64))
    for g, w in zip(split_seq, _sequence(case, False), strict=True):
        close(g, w.astype(np.float64))


def _offered_steps(case: Case) -> tuple[int, dict[str, int]]:
    """Runs one LSTM step of `case` once; how many steps its cell offered to the kernels' pool, and
    the pool's counters around that step."""
    cells: list[_lstm_native.FusedCell] = []
    real = _lstm_native.fused_cell

    def keep(*args, **kwargs):
        cell = real(*args, **kwargs)
        cells.append(cell)
        return cell

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_lstm_native, "fused_cell", keep)
        run, args = prepare(Op.LSTM, lstm_inputs(case, case.x[0], case.h0, case.c0), 4)
    before = native.pool_stats()
    run(args)
    after = native.pool_stats()
    return cells[0]._const.offered, {k: after[k] - before[k] for k in before}


def test_steps_go_to_the_pool_by_its_fixed_rule(two_threads):
    """No step is timed or compared: on two threads a step from 2**20 multiply-adds is handed to the
    pool (which wakes a sleeping worker for it), one from the pool's split size (2**17) only to
    workers already spinning (none after `native.rest()`: it runs on the caller), a smaller one never;
    on one thread none is offered."""
    import time

    offered, stats = _offered_steps(make_case(np.random.default_rng(13), *LARGE))
    assert offered == 1
    assert stats["jobs"] == 1 or native.pool_backoffs() > 0  # a stalled worker turns splitting off a while
    # 2 x (128 + 128) x 128 x 4 = 2**18 multiply-adds: split only over spinning workers.
    medium = make_case(np.random.default_rng(14), 128, 128, 2, 1)
    native.rest()
    time.sleep(0.01)  # every idle worker is asleep now (rest: no spin window)
    offered, stats = _offered_steps(medium)
    assert offered == 1 and stats["jobs"] == 0 and stats["wakes"] == 0
    assert stats["kept"] == 1 or native.pool_backoffs() > 0  # (in a back-off nothing is offered)
    small = make_case(np.random.default_rng(13), 8, 16, 1, 1)
    offered, stats = _offered_steps(small)
    assert offered == 0 and stats["kept"] == 0
    native.set_threads(1)
    offered, stats = _offered_steps(make_case(np.random.default_rng(13), *LARGE))
    assert offered == 0 and stats["jobs"] == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,u", [(24, 40), (256, 256)], ids=["small", "split"])
def test_steps_in_a_plan_equal_numpy_and_outlive_the_next_run(n, u, threads, monkeypatch):
    """The LSTM op in a plan (its outputs in the run's workspace), states carried over three runs:
    equal to the NumPy path, and the arrays a run returned keep their values after later runs."""
    case = make_case(np.random.default_rng(6), n, u, 2, 3)
    before = native.threads()
    native.set_threads(threads)
    try:
        results = _plan_steps(Plan(_model(case)), case)
        kept = [[np.array(o) for o in r] for r in results]
    finally:
        native.set_threads(before)
    for got, copy in zip(results, kept, strict=True):
        for g, c in zip(got, copy, strict=True):
            np.testing.assert_array_equal(g, c)
    _numpy_path(monkeypatch)
    for got, want in zip(results, _plan_steps(Plan(_model(case)), case), strict=True):
        for g, w in zip(got, want, strict=True):
            close(g, w.astype(np.float64))


def _plan_steps(plan: Plan, case: Case) -> list[list[np.ndarray]]:
    h, c, outs = case.h0, case.c0, []
    for x in case.x:
        got = plan.run([x, h, c])
        outs.append(got)
        _, h, c, _ = got
    return outs


@pytest.mark.parametrize("n,u", [(24, 40), (256, 256)], ids=["alone", "split"])
def test_concurrent_executions_of_one_prepared_model_share_no_buffer(n, u, two_threads):
    case = make_case(np.random.default_rng(4), n, u, 2, 1)
    plan = Plan(_model(case))
    rng = np.random.default_rng(9)
    feeds = [
        [rng.uniform(-2, 2, size=shape).astype(np.float32) for shape in ((2, n), (2, u), (2, u))]
        for _ in range(2)
    ]
    expected = [plan.run(f) for f in feeds]
    failures: list[str] = []

    def worker(k: int) -> None:
        for i in range(200):
            got = plan.run(feeds[k])
            for g, e in zip(got, expected[k], strict=True):
                if not np.array_equal(g, e):
                    failures.append(f"execution {k}, call {i}")
                    return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert plan.workspaces.created >= 1
