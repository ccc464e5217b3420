"""FULLY_CONNECTED: input flattened to [batch, input_size] times weights[units, input_size]^T, plus bias and activation.

Quantized (NNAPI 1.3): input, weights and output all TENSOR_QUANT8_ASYMM or all
TENSOR_QUANT8_ASYMM_SIGNED (weights with any zero point; no per-channel weights), bias
TENSOR_INT32 with scale input_scale * weights_scale. The centred input and weights are multiplied
in float32 or float64, whichever is proven exact for input_size terms (see `_qconv`), then requantized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._activation import apply_activation, parse_activation
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._conv_common import bias_vector, constant_or_none, packed_constant
from driver.ops._params import as_f32, float_outputs, float_tensor
from driver.ops._qconv import (
    bias_i64,
    centered,
    check_exact,
    packed_weights,
    quant_signature,
    requantize,
)
from driver.ops._quant import is_quant8
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "FULLY_CONNECTED"


def pack_weights(w: np.ndarray) -> np.ndarray:
    """[units, input_size] to contiguous [input_size, units]."""
    return as_f32(np.asarray(w).T)


def pack_qweights(w: np.ndarray, zero_point: int) -> np.ndarray:
    """[units, input_size] quantized to the contiguous float64 [input_size, units] matrix of w - zero_point."""
    return np.ascontiguousarray(centered(np.asarray(w), zero_point).T)


def _shapes(ins: Sequence[ArgInfo]) -> tuple[int, int]:
    """Check the input rank and the weights and bias shapes; (units, input_size)."""
    if 0 < len(ins[0].shape) < 2:
        raise invalid(
            f"{NAME}: input has rank {len(ins[0].shape)} (shape {ins[0].shape}), expected rank >= 2"
        )
    wshape = ins[1].value.shape if ins[1].value is not None else ins[1].shape
    if len(wshape) != 2 or 0 in wshape:
        raise invalid(f"{NAME}: weights shape is {tuple(wshape)}, expected a fully known [units, input_size]")
    units, size = (int(d) for d in wshape)
    bshape = ins[2].value.shape if ins[2].value is not None else ins[2].shape
    if tuple(bshape) not in ((units,), (0,), ()):
        raise invalid(f"{NAME}: bias shape is {tuple(bshape)}, expected ({units},)")
    return units, size


def _flat(x: np.ndarray, size: int) -> np.ndarray:
    """The input as [batch, input_size]."""
    if x.ndim < 2 or x.size % size:
        raise invalid(f"{NAME}: input shape {x.shape} cannot be flattened to [batch, {size}]")
    return x.reshape(-1, size)


@register(OperationType.FULLY_CONNECTED)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (4,), outs)
    if is_quant8(ins[0].type):
        return _prepare_quant(ins, outs)
    for i, what in enumerate(("input", "weights", "bias")):
        float_tensor(NAME, what, ins[i])
    float_outputs(NAME, outs)
    units, size = _shapes(ins)
    act = parse_activation(NAME, ins, 3)
    packed = packed_constant("weights", ins[1], pack_weights, (size, units))
    bias = constant_or_none(ins[2], bias_vector)
    fast = _fast.enabled() and _fast.float32_only(ins, outs)
    if fast:
        w_c = None if packed is None else _fast.GemmWeights(packed)
        b_c = None if bias is None else _fast.Const(bias, np.float32)
        packed = None  # the kernels read w_c (its panels); the plan's record keeps the matrix while preparing

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        if fast:
            wc = w_c if w_c is not None else _fast.GemmWeights(pack_weights(args[1]))
            bc = b_c if b_c is not None else _fast.Const(bias_vector(args[2]), np.float32)
            return [_fast.fc_f32(_flat(args[0], size), wc, bc, act)]
        w = packed if packed is not None else pack_weights(args[1])
        y = _flat(args[0], size) @ w
        y += bias if bias is not None else bias_vector(args[2])
        return [apply_activation(act, y)]

    if fast and w_c is not None and b_c is not None:
        weights, bias_c = w_c, b_c

        def bind(
            shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
        ) -> _bind.BoundStep | None:
            """`run`'s compiled GEMM for a C-contiguous float32 input (driver.bound_steps)."""
            return _bind.bind_fc_f32(shapes[0], ptrs[0], size, weights, bias_c, act)

        return Kernel(run, binding=Binding(bind))
    return run


def _prepare_quant(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    units, size = _shapes(ins)
    q = quant_signature(NAME, ins, outs, units, parse_activation(NAME, ins, 3), None, "weights")
    check_exact(NAME, size)
    zp_x, zp_w = q.input_zp, q.filter_zp
    packed, dtype = packed_weights(ins[1], lambda w: pack_qweights(w, zp_w), 0, ins[0], (size, units))
    bias = constant_or_none(ins[2], bias_i64)
    fast = _fast.quant_fast(packed, dtype, size)
    if fast:
        assert packed is not None  # part of `fast`
        w_c = _fast.quant_weights(packed, size, zp_x, ins[0].type)
        rq = None if bias is None else _fast.requant_params(bias, q, units)
        packed = None  # the kernels read w_c (its panels); the plan's record keeps the matrix while preparing

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        if fast:
            params = rq if rq is not None else _fast.requant_params(bias_i64(args[2]), q, units)
            return [_fast.fc_q8(_flat(args[0], size), zp_x, w_c, params)]
        w = packed if packed is not None else pack_qweights(args[1], zp_w)
        acc = centered(_flat(args[0], size), zp_x, dtype) @ w  # exact (see _qconv)
        b = bias if bias is not None else bias_i64(args[2])
        return [requantize(acc, b, q)]

    return run
