"""The compiled kernels and the reused per-execution buffers.

The compiled path (driver.native, used by CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED when it is
built) must give bit-identical quantized results to the NumPy path (both exact integer arithmetic;
the NumPy path is itself checked against a scalar transcription of NNAPI's arithmetic in
test_qconv.py, which also runs on the compiled path) and float results within the CTS fp32 tolerance
(only the summation order differs). A Plan's workspace is never shared by two executions in flight,
and the arrays a run returns do not change when the plan runs again.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from driver import native
from driver.executor import Plan
from driver.ops import _fast
from driver.ops._workspace import ALIGN, Workspace, WorkspacePool, activate, deactivate, output, scratch
from mlts.convert import convert
from mlts.hal.enums import OperationType
from tests.driver import cachekit
from tests.driver.opkit import Const, call, check, rand
from tests.driver.qconvkit import (
    CONV_CASES,
    DW_CASES,
    FC_CASES,
    bias_q,
    conv_setup,
    dw_setup,
    f32,
    fc_setup,
    nchw,
    params,
    random_bias,
    ref_activation_range,
    ref_conv_acc,
    ref_dw_acc,
    ref_requant,
    scales_for,
)
from tests.driver.qkit import S8, U8, Q, out, qcall, random_q
from tests.driver.threadkit import run_concurrently

CONV, DW, FC = OperationType.CONV_2D, OperationType.DEPTHWISE_CONV_2D, OperationType.FULLY_CONNECTED

needs_native = pytest.mark.skipif(not native.available(), reason=f"compiled kernels: {native.WHY_NOT}")


@pytest.fixture
def rng(request) -> np.random.Generator:
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def both_paths(monkeypatch, run) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """`run()` with the compiled kernels, then with the NumPy kernels (prepared anew)."""
    fast = run()
    monkeypatch.setattr(_fast, "enabled", lambda: False)
    slow = run()
    return fast, slow


# ------------------------------------------------------------ quantized: bit for bit


@needs_native
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}-{c[-1]}" for i, c in enumerate(CONV_CASES)])
def test_quant_conv_compiled_equals_numpy(monkeypatch, rng, case):
    n, h, w, cin, cout, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = conv_setup(rng, case)
    xin = nchw(x) if is_nchw else x
    args = [Q(xin, sx, zx), fq, bq, *params(padding, stride, (), act, is_nchw, dilation)]
    fast, slow = both_paths(monkeypatch, lambda: qcall(CONV, args, [out(xt, sy, zy)]))
    np.testing.assert_array_equal(fast[0], slow[0])
    assert fast[0].dtype == slow[0].dtype


@needs_native
@pytest.mark.parametrize("case", DW_CASES, ids=[f"dw{i}-{c[-1]}" for i, c in enumerate(DW_CASES)])
def test_quant_depthwise_compiled_equals_numpy(monkeypatch, rng, case):
    n, h, w, cin, mult, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = dw_setup(rng, case)
    xin = nchw(x) if is_nchw else x
    args = [Q(xin, sx, zx), fq, bq, *params(padding, stride, (mult,), act, is_nchw, dilation)]
    fast, slow = both_paths(monkeypatch, lambda: qcall(DW, args, [out(xt, sy, zy)]))
    np.testing.assert_array_equal(fast[0], slow[0])


@needs_native
@pytest.mark.parametrize(
    "kind, zx, zw", [("u8", 0, 255), ("u8", 255, 0), ("s8", -128, 127), ("s8", 127, -128)]
)
def test_quant_depthwise_extreme_zero_points_on_one_and_two_threads(monkeypatch, rng, kind, zx, zw):
    """Zero points at the ends of their range (products up to 255 * 255 in size, padding that reads the
    extreme byte) on a layer large enough for the kernels' pool to split its rows: one thread and two
    give the int64 NNAPI transcription's bytes, and so does the NumPy path."""
    dtype, xt = (np.uint8, U8) if kind == "u8" else (np.int8, S8)
    x = random_q(rng, (1, 40, 41, 40), dtype)
    wq = random_q(rng, (1, 3, 3, 40), dtype)
    b = random_bias(rng, 40, 9)
    acc = ref_dw_acc(x, zx, wq, zw, b, "SAME", (1, 1), (1, 1), 1)
    sws = [f32(0.01)]
    sx, sy, zy = scales_for(rng, xt, acc, sws, 0)
    args = [Q(x, sx, zx), Q(wq, sws[0], zw, const=True), bias_q(b, sx, sws, False)]
    args += params("SAME", (1, 1), (1,), 0, False, (1, 1))
    lo, hi = ref_activation_range(0, xt, sy, zy)
    expected = ref_requant(acc, [sx * sws[0] / sy], zy, lo, hi)
    before = native.threads()
    try:
        for threads in (1, 2):
            native.set_threads(threads)
            (got,) = qcall(DW, args, [out(xt, sy, zy)])
            np.testing.assert_array_equal(got, expected)
    finally:
        native.set_threads(before)
    monkeypatch.setattr(_fast, "enabled", lambda: False)
    (slow,) = qcall(DW, args, [out(xt, sy, zy)])
    np.testing.assert_array_equal(slow, expected)


# (batch, height, width, channels, stride, padding): few output rows, so that on several threads the
# 8-bit kernel splits each row's channels in parts of a multiple of 16 (a last part of 8 + 3 channels).
FEW_ROWS = [(1, 7, 7, 480, 1, "SAME"), (1, 14, 14, 203, 2, "SAME"), (2, 3, 9, 72, 1, "VALID"),
            (1, 1, 5, 40, 1, "SAME"), (1, 7, 7, 32, 1, "SAME"), (1, 4, 4, 24, 1, "SAME")]  # fmt: skip


@needs_native
@pytest.mark.parametrize("case", FEW_ROWS, ids=[f"{c[0]}x{c[1]}x{c[2]}x{c[3]}s{c[4]}" for c in FEW_ROWS])
def test_quant_depthwise_few_rows_split_by_channels(rng, case):
    """Layers of few output rows on one, two and three threads (rows' channels split into tasks on
    more than one): the int64 NNAPI transcription's bytes, u8 and s8."""
    n, h, w, c, stride, padding = case
    for dtype, xt, zx, zw in ((np.uint8, U8, 131, 120), (np.int8, S8, -7, 3)):
        x = random_q(rng, (n, h, w, c), dtype)
        wq = random_q(rng, (1, 3, 3, c), dtype)
        b = random_bias(rng, c, 9)
        acc = ref_dw_acc(x, zx, wq, zw, b, padding, (stride, stride), (1, 1), 1)
        sws = [f32(0.01)]
        sx, sy, zy = scales_for(rng, xt, acc, sws, 0)
        args = [Q(x, sx, zx), Q(wq, sws[0], zw, const=True), bias_q(b, sx, sws, False)]
        args += params(padding, (stride, stride), (1,), 0, False, (1, 1))
        lo, hi = ref_activation_range(0, xt, sy, zy)
        expected = ref_requant(acc, [sx * sws[0] / sy], zy, lo, hi)
        before = native.threads()
        try:
            for threads in (1, 2, 3):
                native.set_threads(threads)
                (got,) = qcall(DW, args, [out(xt, sy, zy)])
                np.testing.assert_array_equal(got, expected, err_msg=f"{dtype.__name__} threads={threads}")
        finally:
            native.set_threads(before)


@needs_native
@pytest.mark.parametrize("case", FC_CASES, ids=[f"fc{i}-{c[-1]}" for i, c in enumerate(FC_CASES)])
def test_quant_fully_connected_compiled_equals_numpy(monkeypatch, rng, case):
    x, xt, zx, sx, wq, zw, sws, bq, acc, sy, zy = fc_setup(rng, case)
    args = [Q(x, sx, zx), wq, bq, case[3]]
    fast, slow = both_paths(monkeypatch, lambda: qcall(FC, args, [out(xt, sy, zy)]))
    np.testing.assert_array_equal(fast[0], slow[0])


@needs_native
@pytest.mark.parametrize("channels", [5, 16, 40])  # remainder only; one vector block; blocks + remainder
@pytest.mark.parametrize("extreme", ["bias", "left_shift"])
def test_requantization_outside_the_32_bit_form(monkeypatch, rng, channels, extreme):
    """Totals beyond int32 (a bias near 2^31) and multipliers > 1 (a left shift) take the int64 form;
    both must still equal the scalar NNAPI transcription and the NumPy path."""
    case = (1, 6, 5, 4, channels, 3, 3, "SAME", (1, 1), 0, False, (1, 1), "u8")
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = conv_setup(rng, case)
    if extreme == "bias":
        b = np.full(channels, 2**31 - 1000, dtype=np.int64)
        b[::2] = -(2**31) + 1000
        bq = Q(b.astype(np.int32), bq.scale, 0, const=True)
        acc = ref_conv_acc(x, zx, fq.value, zw, b, "SAME", (1, 1), (1, 1))
    else:
        sy = f32(sx * sws[0] / 3.0)  # multiplier about 3: exponent 2, a left shift
    args = [Q(x, sx, zx), fq, bq, *params("SAME", (1, 1), (), 0, False, (1, 1))]
    fast, slow = both_paths(monkeypatch, lambda: qcall(CONV, args, [out(xt, sy, zy)]))
    np.testing.assert_array_equal(fast[0], slow[0])
    lo, hi = ref_activation_range(0, xt, sy, zy)
    np.testing.assert_array_equal(fast[0], ref_requant(acc, [sx * sws[0] / sy], zy, lo, hi))


@needs_native
@pytest.mark.parametrize("channels", [5, 16, 40])  # single channels; one group of 16; 16 + 16 + 8
@pytest.mark.parametrize("extreme", ["bias", "left_shift"])
def test_depthwise_requantization_outside_the_32_bit_form(monkeypatch, rng, channels, extreme):
    """The depthwise kernel's int64 requantization (a bias near 2^31, or a multiplier above 1) on rows wide
    enough for its blocks of four pixels: the scalar NNAPI transcription's bytes, as the NumPy path's."""
    case = (1, 5, 11, channels, 1, 3, 3, "SAME", (1, 1), 0, False, (1, 1), "u8")
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = dw_setup(rng, case)
    if extreme == "bias":
        b = np.full(channels, 2**31 - 1000, dtype=np.int64)
        b[::2] = -(2**31) + 1000
        bq = Q(b.astype(np.int32), bq.scale, 0, const=True)
        acc = ref_dw_acc(x, zx, fq.value, zw, b, "SAME", (1, 1), (1, 1), 1)
    else:
        sy = f32(sx * sws[0] / 3.0)  # multiplier about 3: exponent 2, a left shift
    args = [Q(x, sx, zx), fq, bq, *params("SAME", (1, 1), (1,), 0, False, (1, 1))]
    fast, slow = both_paths(monkeypatch, lambda: qcall(DW, args, [out(xt, sy, zy)]))
    np.testing.assert_array_equal(fast[0], slow[0])
    lo, hi = ref_activation_range(0, xt, sy, zy)
    np.testing.assert_array_equal(fast[0], ref_requant(acc, [sx * sws[0] / sy], zy, lo, hi))


# ------------------------------------------------------------ float: within tolerance


@needs_native
@pytest.mark.parametrize(
    "shape, k, stride, pad, mult, act",
    [
        ((1, 9, 9, 3), 3, 2, 1, 1, 3),  # the first layer of a MobileNet
        ((2, 6, 7, 24), 3, 1, 1, 1, 1),  # vector blocks of 16 and 8
        ((1, 5, 5, 19), 3, 1, 0, 1, 0),  # a remainder channel
        ((1, 6, 6, 4), 3, 2, 1, 3, 2),  # depth multiplier 3
        ((1, 8, 8, 16), 1, 1, 0, 1, 0),  # pointwise
        ((1, 13, 14, 8), 3, 1, 1, 1, 3),  # depthwise windows inside the input: four pixels, then one
        ((2, 10, 15, 27), 3, 2, 1, 1, 1),  # ... with blocks of 16, 8 and remainder channels
        ((1, 12, 13, 11), 5, 1, 2, 1, 3),  # 5x5 windows inside the input (taps counted at run time)
    ],
)
def test_float_conv_and_depthwise_compiled_close_to_numpy(monkeypatch, rng, shape, k, stride, pad, mult, act):
    c = shape[3]
    x = rand(rng, *shape, lo=-2, hi=2)
    fw, fb = rand(rng, 7, k, k, c), rand(rng, 7)
    dw, db = rand(rng, 1, k, k, c * mult), rand(rng, c * mult)
    p = [pad, pad, pad, pad, stride, stride]

    def run():
        return [
            call(CONV, x, Const(fw), Const(fb), *p, act),
            call(DW, x, Const(dw), Const(db), *p, mult, act),
            call(
                FC,
                x.reshape(shape[0], -1),
                Const(rand(np.random.default_rng(1), 5, x[0].size)),
                Const(fb[:5]),
                act,
            ),
        ]

    fast, slow = both_paths(monkeypatch, run)
    for f, s in zip(fast, slow, strict=True):
        check(f, s)


@needs_native
@pytest.mark.parametrize("rows, k, n", [(64, 64, 32), (16, 256, 48), (5, 40, 19), (3, 64, 64), (1, 96, 77)])
def test_small_gemm_compiled_close_to_numpy(monkeypatch, rng, rows, k, n):
    """Pointwise convolutions small enough for the register-blocked GEMM loop (any K) and beside it."""
    x = rand(rng, 1, rows, 1, k, lo=-2, hi=2)
    fw, fb = rand(rng, n, 1, 1, k), rand(rng, n)

    def run():
        return [call(CONV, x, Const(fw), Const(fb), 0, 0, 0, 0, 1, 1, 0)]

    fast, slow = both_paths(monkeypatch, run)
    check(fast[0], slow[0])
    ref = x.reshape(rows, k).astype(np.float64) @ fw.reshape(n, k).T.astype(np.float64) + fb
    np.testing.assert_allclose(fast[0].reshape(rows, n), ref, rtol=1e-4, atol=1e-4)


@needs_native
@pytest.mark.skipif(not native.has_gemm(), reason="the kernels found no BLAS sgemm")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "m, k, n",
    [
        (100, 24, 40),
        (64, 128, 64),
        (61, 100, 40),  # blocks of six rows: 16, 16 and 8 columns, then a lone row
        (196, 576, 96),  # ... in column chunks
        (2, 300, 90),
        (700, 200, 120),
        (3000, 40, 24),
        (9, 700, 1500),  # BLAS
    ],
)
def test_gemm_with_fused_bias_and_activation_is_bitwise_the_separate_pass(rng, threads, m, k, n):
    """Each GEMM path (register-blocked, few rows, BLAS in cache-sized chunks, over threads) gives the
    same bits as the GEMM followed by the separate bias-and-clamp pass."""
    a, b = rand(rng, m, k, lo=-2, hi=2), rand(rng, k, n)
    bias = rand(rng, n)
    before = native.threads()
    native.set_threads(threads)
    try:
        for lo, hi in _fast.ACT_BOUNDS.values():
            fused, plain = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
            assert (
                native.LIB.mk_gemm_bias_act_f32(
                    a.ctypes.data, b.ctypes.data, fused.ctypes.data, m, n, k, bias.ctypes.data, lo, hi
                )
                == 0
            )
            assert native.LIB.mk_gemm_f32(a.ctypes.data, b.ctypes.data, plain.ctypes.data, m, n, k) == 0
            native.LIB.mk_bias_act_f32(plain.ctypes.data, m, n, bias.ctypes.data, lo, hi)
            np.testing.assert_array_equal(fused, plain)
            ref = np.clip(a.astype(np.float64) @ b + bias, lo, hi)
            np.testing.assert_allclose(fused, ref, rtol=1e-4, atol=1e-3)
    finally:
        native.set_threads(before)


# ------------------------------------------------------------ workspaces


def test_workspace_pool_never_hands_one_workspace_to_two_runs():
    pool = WorkspacePool()
    a, b = pool.acquire(), pool.acquire()
    assert a is not b
    pool.release(a)
    assert pool.acquire() is a
    assert pool.created == 2


def test_workspace_buffers_are_per_step_and_reused():
    ws = Workspace()
    token = activate(ws)
    try:
        ws.step = 3
        y3 = output((2, 4), np.float32)
        again = output((2, 4), np.float32)
        ws.step = 4
        y4 = output((2, 4), np.float32)
        s = scratch("cols", (3, 3), np.float32)
    finally:
        deactivate(token)
    assert again is y3 and not np.shares_memory(y3, y4)
    assert ws.owns(y3[1:]) and ws.owns(s) and not ws.owns(np.zeros(3))
    assert ws.address(y3) == y3.ctypes.data
    # Outside a run: fresh arrays.
    assert output((2,), np.float32) is not output((2,), np.float32)


def test_workspace_buffers_start_on_a_cache_line_and_grow_without_leaking_roots():
    ws = Workspace()
    token = activate(ws)
    try:
        for step, shape in enumerate([(1, 56, 56, 144), (3,), (7, 5), (1, 112, 112, 96)]):
            ws.step = step
            y = output(shape, np.float32)
            assert y.ctypes.data % ALIGN == 0 and y.flags.c_contiguous and ws.owns(y) and ws.owns(y[..., 1:])
        ws.step = 1
        small = output((3,), np.float32)
        bigger = output((4000,), np.float32)  # the step's buffer grows: the old one is no root any more
    finally:
        deactivate(token)
    assert bigger.ctypes.data % ALIGN == 0 and ws.owns(bigger) and not ws.owns(small)
    assert len(ws.roots) == 4


def _plan_and_inputs(rng, name: str):
    model = convert(cachekit.onnx_model(name)).model
    plan = Plan(model)
    sub = model.main
    dtype = {"float": np.float32}.get(name, np.uint8)
    shape = sub.operands[sub.input_indexes[0]].dimensions
    if dtype == np.float32:
        xs = [rand(rng, *shape) for _ in range(2)]
    else:
        xs = [rng.integers(0, 256, shape).astype(np.uint8) for _ in range(2)]
    return plan, xs


@pytest.mark.parametrize("name", ["float", "quant"])
def test_results_do_not_change_when_the_plan_runs_again(rng, name):
    plan, (a, b) = _plan_and_inputs(rng, name)
    ra = plan.run([a])
    kept = [r.copy() for r in ra]
    rb = plan.run([b])
    for r, k in zip(ra, kept, strict=True):
        np.testing.assert_array_equal(r, k)
    assert not all(np.array_equal(x, y) for x, y in zip(ra, rb, strict=True))


@pytest.mark.parametrize("name", ["float", "quant"])
def test_concurrent_runs_of_one_plan_get_their_own_buffers(rng, name):
    """Two threads run one Plan on different inputs at the same time: each always gets its own
    input's result, bit for bit as a lone run gives it."""
    plan, inputs = _plan_and_inputs(rng, name)
    expected = [[r.copy() for r in plan.run([x])] for x in inputs]
    start = threading.Barrier(2)
    errors: list[str] = []

    def worker(k: int) -> None:
        start.wait()
        for i in range(40):
            got = plan.run([inputs[k]])
            for g, e in zip(got, expected[k], strict=True):
                if not np.array_equal(g, e):
                    errors.append(f"thread {k}, run {i}: result differs from a lone run")
                    return

    run_concurrently(worker)
    assert errors == []
    assert plan.workspaces.created >= 1


def test_concurrent_runs_hold_distinct_workspaces(monkeypatch, rng):
    """While one run is inside a kernel, a second run of the same plan gets a different workspace."""
    plan, (a, b) = _plan_and_inputs(rng, "float")
    seen: list[int] = []
    inside, release = threading.Event(), threading.Event()
    step = plan.steps[0]
    inner = step.run

    def slow_first_step(args):
        from driver.ops._workspace import current

        seen.append(id(current()))
        if len(seen) == 1:
            inside.set()
            release.wait(timeout=30)
        return inner(args)

    monkeypatch.setattr(step, "run", slow_first_step)
    monkeypatch.setattr(step, "direct", slow_first_step)  # what a run with every input given calls
    t = threading.Thread(target=plan.run, args=([a],))
    t.start()
    assert inside.wait(timeout=30)
    plan.run([b])
    release.set()
    t.join(timeout=30)
    assert len(seen) == 2 and seen[0] != seen[1]
    assert plan.workspaces.created == 2


@pytest.mark.parametrize("name", ["float", "quant"])
def test_op_times_records_every_operation_and_changes_no_result(rng, name):
    plan, (a, _) = _plan_and_inputs(rng, name)
    plain = plan.run([a])
    times: list[tuple[int, int]] = []
    timed = plan.run([a], op_times=times)
    for p, t in zip(plain, timed, strict=True):
        np.testing.assert_array_equal(p, t)
    assert [i for i, _ in times] == list(range(len(plan.steps)))
    assert all(isinstance(ns, int) and ns >= 0 for _, ns in times)


def test_steps_call_kernels_directly_unless_an_input_may_lack_a_value(rng):
    """Only a step reading a model input keeps the wrapper that handles inputs left without a value."""
    plan, _ = _plan_and_inputs(rng, "float")
    inputs = set(plan.input_indexes)
    reading = [step for step in plan.steps if inputs & set(step.inputs)]
    assert reading and all(step.run is not step.direct for step in reading)
    assert all(step.run is step.direct for step in plan.steps if step not in reading)


@needs_native
@pytest.mark.skipif(not native.has_gemm(), reason="the kernels found no BLAS sgemm")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("signed", [0, 1])
@pytest.mark.parametrize(
    "m, k, n", [(100, 24, 40), (61, 200, 40), (196, 250, 96), (2, 250, 90), (40, 250, 1000)]
)
def test_gemm_with_fused_requantization_is_bitwise_the_separate_pass(rng, threads, signed, m, k, n):
    """The requantizing epilogue, block by block on every GEMM path, gives the separate pass's bytes:
    per-channel multipliers and shifts (left and right), and biases inside and outside the 32-bit form."""
    a = rng.integers(-255, 256, (m, k)).astype(np.float32)
    b = rng.integers(-255, 256, (k, n)).astype(np.float32)
    bias = rng.integers(-(2**20), 2**20, n).astype(np.int64)
    bias[0] = 2**31 - 1000  # outside the 32-bit form: every row takes the int64 one
    mult = rng.integers(2**30, 2**31, n).astype(np.int64)
    shift = rng.integers(-12, 2, n)
    left, right = np.maximum(shift, 0).astype(np.int64), np.maximum(-shift, 0).astype(np.int64)
    zp, lo, hi = (3, -128, 127) if signed else (130, 0, 255)
    dtype = np.int8 if signed else np.uint8
    before = native.threads()
    native.set_threads(threads)
    try:
        for b_ in (bias, np.where(np.arange(n) == 0, 5, bias)):  # and all within the 32-bit form
            fused, plain = np.empty((m, n), dtype), np.empty((m, n), dtype)
            acc1, acc2 = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
            params = (
                b_.ctypes.data,
                mult.ctypes.data,
                left.ctypes.data,
                right.ctypes.data,
                zp,
                lo,
                hi,
                signed,
            )
            status = native.LIB.mk_gemm_requant_f32(
                a.ctypes.data, b.ctypes.data, acc1.ctypes.data, m, n, k, *params, fused.ctypes.data
            )
            assert status == 0
            assert native.LIB.mk_gemm_f32(a.ctypes.data, b.ctypes.data, acc2.ctypes.data, m, n, k) == 0
            assert native.LIB.mk_requant_f32(acc2.ctypes.data, m, n, *params, plain.ctypes.data) == 0
            np.testing.assert_array_equal(fused, plain)
            np.testing.assert_array_equal(acc1, a.astype(np.float64) @ b)
    finally:
        native.set_threads(before)


def test_a_build_is_current_only_for_its_sources_and_headers(tmp_path):
    from driver import native

    source = tmp_path / "k.c"
    source.write_text("int f(void) { return 1; }\n")
    header = tmp_path / "shared.h"
    header.write_text("#define A 1\n")
    built = native.source_digest(tmp_path)
    assert native.built_from(tmp_path, built)
    header.write_text("#define A 2\n")  # a changed header makes the build stale, as a changed source does
    assert not native.built_from(tmp_path, built)
    assert native.built_from(tmp_path / "not-shipped", "anything")  # an install without sources
    # The library in use was built from the sources and headers beside it now.
    assert native.available() and native.built_from(native.HERE, native.LIB.mk_source_hash().decode())
