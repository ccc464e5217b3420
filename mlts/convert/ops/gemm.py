"""Gemm and MatMul with a constant 2-D B -> FULLY_CONNECTED (weights [units, in], bias [units]).

A following BatchNormalization, Add of a constant vector and Relu/Clip are
folded in when each is the only reader of the previous result.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, foldable_batchnorm, fuse_activation
from mlts.convert.ops.elementwise import emit_with_const
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperationType


def _bias_of_add(ctx: Context, name: str, units: int) -> tuple[NodeProto, np.ndarray] | None:
    """An Add of a constant that broadcasts as a per-unit bias, when it alone reads `name`."""
    add = ctx.sole_consumer(name, {"Add"})
    if add is None:
        return None
    other = add.input[1] if add.input[0] == name else add.input[0]
    c = ctx.const(other)
    if c is None or not np.issubdtype(c.dtype, np.floating) or c.size not in (1, units):
        return None
    if c.size == units and (c.ndim == 0 or c.shape[-1] != units or c.ndim > len(ctx.shape_of(name))):
        return None
    return add, np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (units,))


def emit_fully_connected(
    ctx: Context, node: NodeProto, weights: np.ndarray, bias: np.ndarray, extra_add: np.ndarray | None = None
) -> None:
    """FULLY_CONNECTED on input 0 flattened to 2-D over its last axis, with the folds, reshaped back."""
    units, k = weights.shape
    x_shape = ctx.shape_of(node.input[0])
    if x_shape[-1] != k:
        raise ConversionError(
            f"{where(node)}: input shape {list(x_shape)} does not match weights for {k} inputs"
        )
    out_name = node.output[0]
    out_shape = tuple(x_shape[:-1]) + (units,)
    act = FusedActivationFunc.NONE
    if extra_add is None:
        bn = foldable_batchnorm(ctx, out_name, units) if len(out_shape) == 2 else None
        if bn is not None:
            bn_node, scale, shift = bn
            weights, bias = weights * scale[:, None], bias * scale + shift
            ctx.absorb(bn_node, "bn_into_gemm")
            out_name = bn_node.output[0]
        add = _bias_of_add(ctx, out_name, units)
        if add is not None and ctx.shape_of(add[0].output[0], add[0]) == out_shape:
            add_node, extra = add
            bias = bias + extra
            ctx.absorb(add_node, "bias_into_fc")
            out_name = add_node.output[0]
        act, out_name = fuse_activation(ctx, out_name)

    rows = math.prod(x_shape[:-1])
    x = ctx.in_layout(node.input[0], False) if len(x_shape) == 2 else ctx.reshaped(node.input[0], (rows, k))
    result = ctx.temp((rows, units))
    ins = [x.operand, ctx.const_operand(weights), ctx.const_operand(bias), ctx.i32(act)]
    ctx.emit(OperationType.FULLY_CONNECTED, ins, [result.operand])
    if extra_add is not None:
        plus_c = ctx.unique(out_name + "/plus_c")
        emit_with_const(ctx, OperationType.ADD, result, extra_add, plus_c)
        result = ctx.tensors[plus_c]
    if out_shape == result.shape:
        ctx.bind(out_name, result)
    else:
        flat = ctx.unique(out_name + "/2d")
        ctx.bind(flat, result)
        ctx.reshaped(flat, out_shape, out_name)


@register("Gemm", 7)
def gemm(ctx: Context, node: NodeProto) -> None:
    """alpha*A*B' + beta*C with A at run time (transA=0), B and C constant."""
    a = attrs(node)
    if a.get("transA", 0):
        raise ConversionError(f"{where(node)} has transA=1; only transA=0 is supported")
    if ctx.is_const(node.input[0]) or len(ctx.shape_of(node.input[0])) != 2:
        raise ConversionError(f"{where(node)}: input A must be a rank-2 runtime tensor")
    b = np.asarray(ctx.const_input(node, 1, "B (weights)"), dtype=np.float64)
    if b.ndim != 2:
        raise ConversionError(f"{where(node)}: B has shape {list(b.shape)}; expected rank 2")
    weights = (b if a.get("transB", 0) else b.T) * float(a.get("alpha", 1.0))
    units = weights.shape[0]
    c = ctx.const_input(node, 2, "C (bias)", required=False)
    bias = np.zeros(units)
    extra = None
    if c is not None:
        c = np.asarray(c, dtype=np.float64) * float(a.get("beta", 1.0))
        if c.size == 1:
            bias = np.full(units, c.reshape(-1)[0])
        elif c.ndim >= 1 and c.shape[-1] == units and c.size == units:
            bias = c.reshape(-1)
        else:
            # C varies along rows: it cannot be a per-unit bias, add it after.
            extra = c.astype(np.float32)
    emit_fully_connected(ctx, node, weights, bias, extra)


@register("MatMul", 1)
def matmul(ctx: Context, node: NodeProto) -> None:
    """A (run time, rank >= 2) times constant 2-D B."""
    if ctx.is_const(node.input[0]):
        raise ConversionError(f"{where(node)}: only the second input may be constant")
    b = ctx.const(node.input[1])
    if b is None or b.ndim != 2:
        got = "computed at run time" if b is None else f"of shape {list(b.shape)}"
        raise ConversionError(f"{where(node)}: input B is {got}; only a constant 2-D B is supported")
    if len(ctx.shape_of(node.input[0])) < 2:
        raise ConversionError(f"{where(node)}: input A must have rank >= 2")
    b = np.asarray(b, dtype=np.float64)
    emit_fully_connected(ctx, node, b.T, np.zeros(b.shape[1]))
