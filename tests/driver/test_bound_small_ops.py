"""The small float32 operations that bind (driver.bound_steps): FULLY_CONNECTED, TANH, LOGISTIC,
SLICE and CONCATENATION bound equal the same operations called one by one, bit for bit; the block
copies of SLICE and CONCATENATION against NumPy's indexing; the compiled TANH and LOGISTIC against
float64 references, bound or not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from driver import native
from driver.bound_steps import Chunk
from driver.executor import Plan
from driver.ops import ArgInfo, _bind, logistic, tanh
from driver.ops._base import kernel_record
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O
from tests.driver import bindkit
from tests.driver.opkit import check

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


def _fc(bld, rng, x, size, units, act, rows):
    w = bld.add_constant(rng.standard_normal((units, size)).astype(np.float32))
    b = bld.add_constant(rng.standard_normal(units).astype(np.float32))
    y = bld.add_operand(T.TENSOR_FLOAT32, (rows, units))
    bld.add_operation(O.FULLY_CONNECTED, [x, w, b, bld.add_int32(act)], [y])
    return y


def _slice(bld, x, begin, size, out):
    y = bld.add_operand(T.TENSOR_FLOAT32, out)
    bld.add_operation(O.SLICE, [x, bld.add_int32_tensor(begin), bld.add_int32_tensor(size)], [y])
    return y


def _unary(bld, op, x, shape):
    y = bld.add_operand(T.TENSOR_FLOAT32, shape)
    bld.add_operation(op, [x], [y])
    return y


def _concat(bld, xs, axis, out):
    y = bld.add_operand(T.TENSOR_FLOAT32, out)
    bld.add_operation(O.CONCATENATION, [*xs, bld.add_int32(axis)], [y])
    return y


def _model(rows: int):
    """x [rows, 2, 6] -> FC(12 -> 16, RELU1) -> TANH -> FC(16 -> 24) -> RESHAPE [rows, 4, 6] ->
    five SLICEs -> LOGISTIC of two -> CONCATENATION along axes 2, 1 and 0: one chunk of 14 steps."""
    rng = np.random.default_rng(5)
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (rows, 2, 6))
    h = _unary(bld, O.TANH, _fc(bld, rng, x, 12, 16, 2, rows), (rows, 16))
    f = _fc(bld, rng, h, 16, 24, 0, rows)
    r = bld.add_operand(T.TENSOR_FLOAT32, (rows, 4, 6))
    bld.add_operation(O.RESHAPE, [f, bld.add_int32_tensor([rows, 4, -1])], [r])
    a = _slice(bld, r, [0, 1, 2], [rows, 3, 4], (rows, 3, 4))  # rows of a block
    b = _slice(bld, r, [0, 0, 0], [-1, 3, 6], (rows, 3, 6))  # whole rows: one block per batch row
    c = _slice(bld, r, [rows - 1, 0, 0], [1, -1, -1], (1, 4, 6))  # one contiguous block
    d = _slice(bld, r, [0, 1, 0], [rows, 1, 6], (rows, 1, 6))
    e = _slice(bld, r, [0, 1, 5], [-1, 3, 1], (rows, 3, 1))  # one column
    la = _unary(bld, O.LOGISTIC, a, (rows, 3, 4))
    ld = _unary(bld, O.LOGISTIC, d, (rows, 1, 6))
    last = _concat(bld, [la, b, a, e], 2, (rows, 3, 15))
    mid = _concat(bld, [b, ld, b], 1, (rows, 7, 6))
    first = _concat(bld, [c, c, r], 0, (rows + 2, 4, 6))
    bld.mark_outputs([h, last, mid, first])
    return bld.build()


@pytest.mark.parametrize("rows", [1, 5], ids=["few_rows", "packed"])
def test_small_ops_bound_equal_the_steps_called_one_by_one(rows) -> None:
    model = _model(rows)
    bound, unbound = Plan(model), bindkit.unbound(Plan(model))
    rng = np.random.default_rng(rows)
    for k in range(3):
        x = (rng.standard_normal((rows, 2, 6)) * (1 + 10 * k)).astype(np.float32)
        for _ in range(2):  # binds, then runs bound
            got, want = bound.run([x], checked=True), unbound.run([x], checked=True)
            assert [g.shape for g in got] == [w.shape for w in want]
            assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    chunks = [v for v in bound._straight.__globals__.values() if isinstance(v, Chunk)]
    assert [len(c.steps) for c in chunks] == [14] and not chunks[0].dead
    assert all(len(ws.bound) == 1 for ws in bound.workspaces.free)
    # Against NumPy: the slices and concatenations of the (bound) RESHAPE output.
    r = got[3][2:]
    np.testing.assert_array_equal(got[2][:, :3], r[:, 0:3, :])
    np.testing.assert_array_equal(got[2][:, 4:], r[:, 0:3, :])
    np.testing.assert_array_equal(got[1][:, :, 4:10], r[:, 0:3, :])
    np.testing.assert_array_equal(got[1][:, :, 10:14], r[:, 1:4, 2:6])
    np.testing.assert_array_equal(got[1][:, :, 14:], r[:, 1:4, 5:6])
    np.testing.assert_array_equal(got[3][0], r[rows - 1])
    np.testing.assert_array_equal(got[3][1], r[rows - 1])
    check(got[2][:, 3], 1 / (1 + np.exp(-r[:, 1].astype(np.float64))))


def _apply(blocks, srcs, out_size):
    """The block copies done by NumPy on flat arrays (element offsets and strides)."""
    out = np.full(out_size, np.nan)
    for k, (src, dst, rows, run, s_stride, d_stride) in enumerate(blocks):
        flat = srcs[k] if len(srcs) > 1 else srcs[0]
        for i in range(rows):
            out[dst + i * d_stride : dst + i * d_stride + run] = flat[
                src + i * s_stride : src + i * s_stride + run
            ]
    return out


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 1, 3, 4)])
def test_slice_blocks_gather_numpys_slice(shape) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    ranges = [[(b, s) for b in range(d) for s in range(1, d - b + 1)] for d in shape]
    cases = list(itertools.product(*ranges))
    for case in cases[:: max(1, len(cases) // 400)]:
        begin, size = [b for b, _ in case], [s for _, s in case]
        want = x[tuple(slice(b, b + s) for b, s in case)].ravel()
        blocks = _bind.slice_blocks(shape, begin, size)
        assert blocks is not None and len(blocks) <= _bind.MAX_BLOCK_COPIES
        np.testing.assert_array_equal(_apply(blocks, [x.ravel()], want.size), want, err_msg=str(case))


def test_slice_blocks_decline_too_many_copies() -> None:
    shape = (70, 3, 4)
    assert _bind.slice_blocks(shape, [0, 0, 0], [70, 2, 4]) is not None  # 70 rows of one block
    assert _bind.slice_blocks(shape, [0, 0, 1], [70, 2, 2]) is None  # 70 blocks of two rows


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_concat_blocks_place_numpys_concatenation(axis) -> None:
    rng = np.random.default_rng(axis)
    base = [2, 3, 4, 5]
    xs = []
    for extra in (1, 3, 2):
        shape = list(base)
        shape[axis] = extra
        xs.append(rng.standard_normal(shape))
    want = np.concatenate(xs, axis=axis).ravel()
    blocks = _bind.concat_blocks([x.shape for x in xs], axis)
    np.testing.assert_array_equal(_apply(blocks, [x.ravel() for x in xs], want.size), want)


SPECIAL = np.array(
    [0.0, -0.0, 1e-30, -1e-30, 1e-7, -3e-4, 0.3, -0.62, 0.7, 1.0, -2.5, 9.0, -9.1, 20.0, -40.0, 88.0,
     -88.8, 89.0, -90.0, 200.0, -200.0, 3e38, -3e38, np.inf, -np.inf, np.nan],
    dtype=np.float32,
)  # fmt: skip


def _kernel(op, x):
    """The operation's own kernel for a float32 input like `x` (not the driver's adapters around it)."""
    f32 = ArgInfo(int(T.TENSOR_FLOAT32), x.shape)
    return (tanh if op == O.TANH else logistic).prepare([f32], [f32])


def _tanh64(x):
    return np.tanh(x.astype(np.float64))


def _logistic64(x):
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("op, ref", [(O.TANH, _tanh64), (O.LOGISTIC, _logistic64)], ids=["tanh", "logistic"])
def test_compiled_unary_against_float64(op, ref) -> None:
    rng = np.random.default_rng(11)
    x = np.concatenate([SPECIAL, rng.uniform(-12, 12, 4000).astype(np.float32)])
    run = _kernel(op, x)
    assert kernel_record(run).binding is not None  # the compiled kernel
    (y,) = run([x])
    check(y, ref(x))
    assert np.isnan(y[25]) and np.isnan(y).sum() == 1
    if op == O.TANH:
        assert np.signbit(y[1]) and not np.signbit(y[0])  # -0.0 stays -0.0
        assert y[23] == 1.0 and y[24] == -1.0
    else:
        assert y[23] == 1.0 and y[24] < 1e-38 and y[2] == 0.5
    # A strided input gives the contiguous input's result; bound, the same call gives the same bits.
    wide = np.repeat(x, 2)[::2]
    assert run([wide])[0].tobytes() == y.tobytes()
    out = np.empty_like(x)
    bound = kernel_record(run).binding.bind([x.shape], [x.ctypes.data], _bind.Scratch())
    ((kind, args, _),) = bound.calls
    getattr(native.LIB, "mk_tanh_f32" if op == O.TANH else "mk_logistic_f32")(
        x.ctypes.data, out.ctypes.data, x.size
    )
    assert kind == (_bind.CALL_TANH_F32 if op == O.TANH else _bind.CALL_LOGISTIC_F32) and args[2] == x.size
    assert out.tobytes() == y.tobytes()


def test_without_the_compiled_kernels_tanh_and_logistic_use_numpy(monkeypatch) -> None:
    x = np.concatenate([SPECIAL, np.linspace(-10, 10, 101, dtype=np.float32)])
    monkeypatch.setattr(native, "LIB", None)
    for op, ref in ((O.TANH, _tanh64), (O.LOGISTIC, _logistic64)):
        run = _kernel(op, x)
        assert kernel_record(run).binding is None
        check(run([x])[0], ref(x))


def test_a_slice_of_a_chunk_input_reads_it_at_its_offset() -> None:
    """SLICE and CONCATENATION reading the model's input (from outside the chunk) at an offset: the
    address written into the calls at each run is the new input's plus that offset."""
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (3, 8))
    s = _slice(bld, x, [1, 2], [2, 5], (2, 5))
    t = _unary(bld, O.TANH, s, (2, 5))
    y = _concat(bld, [t, s, t], 0, (6, 5))
    z = _concat(bld, [x, x], 1, (3, 16))
    bld.mark_outputs([y, z])
    model = bld.build()
    bound, unbound = Plan(model), bindkit.unbound(Plan(model))
    rng = np.random.default_rng(2)
    for _ in range(4):
        x_val = rng.standard_normal((3, 8)).astype(np.float32)  # a new array each run
        got, want = bound.run([x_val], checked=True), unbound.run([x_val], checked=True)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
        np.testing.assert_array_equal(got[0][2:4], x_val[1:3, 2:7])
        np.testing.assert_array_equal(got[1], np.concatenate([x_val, x_val], axis=1))
    chunks = [v for v in bound._straight.__globals__.values() if isinstance(v, Chunk)]
    assert [len(c.steps) for c in chunks] == [4] and not chunks[0].dead
    (prog,) = bound.workspaces.free[0].bound.values()
    assert sorted(offset for _, _, offset in prog.patches[0]) == [
        0,
        0,
        4 * (8 + 2),
    ]  # z: two copies; s: row 1, column 2
