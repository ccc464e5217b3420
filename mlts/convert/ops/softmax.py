"""Softmax -> SOFTMAX (beta 1): opset < 13 normalises the flattened dims from `axis` on, opset 13+ one axis."""

from __future__ import annotations

import math

from onnx import NodeProto

from mlts.convert.context import Context, Tensor
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.registry import register
from mlts.hal.enums import OperandType, OperationType


def _emit(ctx: Context, x: int, nn_axis: int, out: int) -> None:
    ctx.emit(OperationType.SOFTMAX, [x, ctx.f32(1.0), ctx.i32(nn_axis)], [out])


def _nn_reshape(ctx: Context, operand: int, dims: tuple[int, ...]) -> int:
    out = ctx.builder.add_operand(OperandType.TENSOR_FLOAT32, dims)
    ctx.emit(OperationType.RESHAPE, [operand, ctx.ints(dims)], [out])
    return out


@register("Softmax", 1)
def softmax_1(ctx: Context, node: NodeProto) -> None:
    """Coerce to 2-D [prod(:axis), prod(axis:)], softmax each row, restore the shape."""
    x = ctx.tensor(node)
    axis = norm_axis(node, attrs(node).get("axis", 1), x.rank)
    if axis == x.rank - 1:
        out = ctx.new_tensor(node.output[0], x.shape, x.nhwc)
        _emit(ctx, x.operand, x.nn_axis(axis), out.operand)
        return
    if not (x.nhwc and axis <= 1):
        # Each row must hold the trailing ONNX dims; an NHWC operand keeps them together only for axis 0 or 1.
        x = ctx.in_layout(node.input[0], False)
    rows = math.prod(x.shape[:axis])
    flat = _nn_reshape(ctx, x.operand, (rows, math.prod(x.shape) // rows))
    soft = ctx.builder.add_operand(OperandType.TENSOR_FLOAT32, ctx.builder.dims_of(flat))
    _emit(ctx, flat, 1, soft)
    out = ctx.new_tensor(node.output[0], x.shape, x.nhwc)
    ctx.emit(OperationType.RESHAPE, [soft, ctx.ints(out.nn_shape)], [out.operand])


@register("Softmax", 13)
def softmax_13(ctx: Context, node: NodeProto) -> None:
    """Along one axis (default -1), remapped for NHWC operands."""
    x: Tensor = ctx.tensor(node)
    axis = norm_axis(node, attrs(node).get("axis", -1), x.rank)
    out = ctx.new_tensor(node.output[0], x.shape, x.nhwc)
    _emit(ctx, x.operand, x.nn_axis(axis), out.operand)
