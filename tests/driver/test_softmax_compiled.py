"""The compiled float32 SOFTMAX (mk_softmax_f32) along the last axis: against a float64 reference
written from NNAPI's definition, its special values as the NumPy kernel gives them, other axes on
NumPy, and bound after a FULLY_CONNECTED (driver.bound_steps) equal to the steps one by one."""

from __future__ import annotations

import numpy as np
import pytest

from driver import native
from driver.bound_steps import Chunk
from driver.executor import Plan
from driver.ops import ArgInfo, softmax
from driver.ops._base import kernel_record
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O
from tests.driver import bindkit
from tests.driver.opkit import check

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


def _softmax64(x: np.ndarray, beta: float, axis: int = -1) -> np.ndarray:
    """exp(beta * (x - max)) / sum along `axis`, in float64."""
    x = x.astype(np.float64)
    z = np.exp(beta * (x - x.max(axis=axis, keepdims=True)))
    return z / z.sum(axis=axis, keepdims=True)


def _kernel(shape: tuple[int, ...], beta: float, axis: int | None = None):
    """SOFTMAX's kernel for a float32 input of `shape` (float16 models reach it as float32, see _adapt)."""
    f32 = int(T.TENSOR_FLOAT32)
    ins = [ArgInfo(f32, shape), ArgInfo(int(T.FLOAT32), (), value=np.float32(beta))]
    if axis is not None:
        ins.append(ArgInfo(int(T.INT32), (), value=np.int32(axis)))
    return softmax.prepare(ins, [ArgInfo(f32, shape)])


@pytest.mark.parametrize("shape", [(1, 1), (1, 15), (1, 16), (1, 17), (3, 41), (2, 1000), (2, 3, 33)])
@pytest.mark.parametrize("beta", [1.0, 0.5, 7.0])
def test_against_float64(shape, beta) -> None:
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    run = _kernel(shape, beta)
    assert kernel_record(run).binding is not None  # the compiled kernel
    (y,) = run([x])
    check(y, _softmax64(x, beta))
    # A strided input gives the contiguous input's result.
    wide = np.repeat(x, 2, axis=-1)[..., ::2]
    assert run([wide])[0].tobytes() == y.tobytes()


def test_special_values_as_numpy_gives_them() -> None:
    x = np.array(
        [
            [0.0, -np.inf, 1.0, -np.inf],  # -inf contributes exactly 0
            [1.0, np.inf, 2.0, 0.0],  # inf - inf: NaN, so the whole row
            [1.0, np.nan, 2.0, 0.0],  # NaN spreads through the max
            [3e38, -3e38, 0.0, 3e38],  # far apart: no overflow
            [-np.inf] * 4,  # -inf - -inf: NaN
            [-200.0, 0.0, -150.0, -1e-3],  # differences under exp's range: 0
        ],
        dtype=np.float32,
    )
    (y,) = _kernel(x.shape, 1.0)([x])
    assert y[0].tolist()[1::2] == [0.0, 0.0]
    check(y[0], _softmax64(x[0:1], 1.0)[0])
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isnan(y[4]).all()
    check(y[3], [0.5, 0.0, 0.0, 0.5])
    assert y[5, 0] == 0.0 and y[5, 2] == 0.0
    check(y[5], _softmax64(x[5:6], 1.0)[0])


def test_other_axes_stay_on_numpy() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    for axis in (0, 1, -2):
        check(_kernel(x.shape, 2.0, axis)([x])[0], _softmax64(x, 2.0, axis))


def test_bound_after_a_fully_connected_equals_the_steps_one_by_one() -> None:
    rng = np.random.default_rng(7)
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (1, 48))
    w_val = rng.standard_normal((41, 48)).astype(np.float32)
    b_val = rng.standard_normal(41).astype(np.float32)
    w, b = bld.add_constant(w_val), bld.add_constant(b_val)
    h = bld.add_operand(T.TENSOR_FLOAT32, (1, 41))
    bld.add_operation(O.FULLY_CONNECTED, [x, w, b, bld.add_int32(0)], [h])
    y = bld.add_operand(T.TENSOR_FLOAT32, (1, 41))
    bld.add_operation(O.SOFTMAX, [h, bld.add_float32(0.75)], [y])
    bld.mark_outputs([y])
    model = bld.build()
    bound, unbound = Plan(model), bindkit.unbound(Plan(model))
    for k in range(4):
        x_val = (rng.standard_normal((1, 48)) * (1 + k)).astype(np.float32)
        got, want = bound.run([x_val], checked=True), unbound.run([x_val], checked=True)
        assert got[0].tobytes() == want[0].tobytes()
        logits = x_val.astype(np.float64) @ w_val.T.astype(np.float64) + b_val
        check(got[0], _softmax64(logits, 0.75))
    chunks = [v for v in bound._straight.__globals__.values() if isinstance(v, Chunk)]
    assert [len(c.steps) for c in chunks] == [2] and not chunks[0].dead
