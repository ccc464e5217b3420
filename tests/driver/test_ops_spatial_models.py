"""Whole models with the spatial, normalisation and grouped/transposed conv operations: validated,
planned by the executor, run, re-planned from the packed arrays a compilation cache keeps."""

from __future__ import annotations

import numpy as np

from driver.executor import Plan, run_model
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.types import SymmPerChannelQuantParams
from mlts.hal.validate import validate_model
from tests.driver.spatialkit import FP16_TOL, spec_depth_to_space, spec_l2, spec_transpose_acc

T = OperandType
Op = OperationType


def _same_from_cache(model, inputs):
    plan = Plan(model)
    cast = [np.ascontiguousarray(a) for a in inputs]
    first = [np.array(o) for o in plan.run(cast)]
    again = Plan(model, packed=dict(plan.packed))
    for a, b in zip(first, again.run(cast), strict=True):
        np.testing.assert_array_equal(a, b)
    return first


def test_float16_model_space_to_depth_transpose_conv_l2():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 4, 4, 2)).astype(np.float16)
    f = rng.uniform(-1, 1, (3, 2, 2, 8)).astype(np.float16)
    bias = rng.uniform(-1, 1, 3).astype(np.float16)
    b = ModelBuilder()
    xi = b.add_input(T.TENSOR_FLOAT16, x.shape)
    s2d = b.add_operand(T.TENSOR_FLOAT16, (1, 2, 2, 8))
    b.add_operation(Op.SPACE_TO_DEPTH, [xi, b.add_scalar(2, T.INT32)], [s2d])  # layout left out: NHWC
    tc = b.add_operand(T.TENSOR_FLOAT16, (1, 4, 4, 3))
    params = [b.add_scalar(v, T.INT32) for v in (0, 0, 0, 0, 2, 2, 0)] + [b.add_scalar(False, T.BOOL)]
    b.add_operation(Op.TRANSPOSE_CONV_2D, [s2d, b.add_constant(f), b.add_constant(bias), *params], [tc])
    y = b.add_operand(T.TENSOR_FLOAT16, (1, 4, 4, 3))
    b.add_operation(Op.L2_NORMALIZATION, [tc, b.add_scalar(-1, T.INT32)], [y])
    b.mark_outputs([y])
    model = b.build()
    validate_model(model)
    (out,) = _same_from_cache(model, [x])
    assert out.dtype == np.float16 and out.shape == (1, 4, 4, 3)
    s = x.astype(np.float64).reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4, 5).reshape(1, 2, 2, 8)
    assert np.array_equal(spec_depth_to_space(s, 2), x)
    expected = spec_l2(spec_transpose_acc(s, f, (0, 0, 0, 0), (2, 2)) + bias.astype(np.float64), -1)
    err = np.abs(out.astype(np.float64) - expected)
    assert np.all(err <= FP16_TOL + FP16_TOL * np.abs(expected))


def test_quant_model_grouped_conv_resize_shuffle_runs_and_caches():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 5, 5, 4)).astype(np.uint8)
    w = rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8)
    scales = (0.01, 0.02, 0.015, 0.03)
    b = ModelBuilder()
    xi = b.add_input(T.TENSOR_QUANT8_ASYMM, x.shape, 0.05, 120)
    wi = b.add_constant(
        w, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, extra_params=SymmPerChannelQuantParams(scales, 0)
    )
    bi = b.add_constant(rng.integers(-500, 500, 4).astype(np.int32))
    conv = b.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 5, 5, 4), 0.5, 128)
    params = [b.add_scalar(v, T.INT32) for v in (1, 1, 1, 2, 0)] + [b.add_scalar(False, T.BOOL)]
    b.add_operation(Op.GROUPED_CONV_2D, [xi, wi, bi, *params], [conv])
    big = b.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 10, 10, 4), 0.5, 128)
    rp = [b.add_scalar(2.0, T.FLOAT32), b.add_scalar(2.0, T.FLOAT32), b.add_scalar(False, T.BOOL)]
    b.add_operation(Op.RESIZE_NEAREST_NEIGHBOR, [conv, *rp], [big])
    y = b.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 10, 10, 4), 0.5, 128)
    b.add_operation(Op.CHANNEL_SHUFFLE, [big, b.add_scalar(2, T.INT32), b.add_scalar(-1, T.INT32)], [y])
    b.mark_outputs([y, conv])
    model = b.build()
    validate_model(model)
    out, c = _same_from_cache(model, [x])
    assert out.dtype == np.uint8 and out.shape == (1, 10, 10, 4)
    np.testing.assert_array_equal(out, np.repeat(np.repeat(c, 2, axis=1), 2, axis=2)[..., [0, 2, 1, 3]])
    np.testing.assert_array_equal(run_model(model, [x])[0], out)
