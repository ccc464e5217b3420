"""Element-wise activations: Relu, Clip, Sigmoid, Tanh, HardSwish, Elu (layout preserving).

On quantized tensors: Relu keeps the input's parameters; Clip to [0, 6] or
[-1, 1] becomes RELU6/RELU1 with an output quantized like the input (the
clamp bounds are then quantized exactly as NNAPI does); Sigmoid becomes
LOGISTIC with NNAPI's fixed output quantization. Other clips are refused.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import activation_for_bounds, attrs, clip_bounds_attrs, clip_bounds_inputs
from mlts.convert.ops.elementwise import emit_with_const
from mlts.convert.qflow import EXACT, SAME, out_quant, probability_quant
from mlts.convert.quant import QParams
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperationType

_ACT_OPS = {
    FusedActivationFunc.RELU: OperationType.RELU,
    FusedActivationFunc.RELU1: OperationType.RELU1,
    FusedActivationFunc.RELU6: OperationType.RELU6,
}


def unary(
    ctx: Context, node: NodeProto, op: OperationType, *params: int, quant: QParams | None = None
) -> None:
    x = ctx.tensor(node)
    out = ctx.new_tensor(node.output[0], x.shape, x.nhwc, quant)
    ctx.emit(op, [x.operand, *params], [out.operand])


@register("Relu", 6)
def relu(ctx: Context, node: NodeProto) -> None:
    """RELU."""
    unary(ctx, node, OperationType.RELU, quant=out_quant(ctx, node.output[0], ctx.tensor(node).quant, EXACT))


@register("Sigmoid", 6)
def sigmoid(ctx: Context, node: NodeProto) -> None:
    """LOGISTIC."""
    quant = probability_quant(ctx, node.output[0], ctx.tensor(node).quant, "LOGISTIC")
    unary(ctx, node, OperationType.LOGISTIC, quant=quant)


@register("Tanh", 6)
def tanh(ctx: Context, node: NodeProto) -> None:
    """TANH."""
    unary(ctx, node, OperationType.TANH)


@register("HardSwish", 14)
def hard_swish(ctx: Context, node: NodeProto) -> None:
    """HARD_SWISH: x * relu6(x + 3) / 6, as in ONNX."""
    unary(ctx, node, OperationType.HARD_SWISH)


@register("Elu", 6)
def elu(ctx: Context, node: NodeProto) -> None:
    """ELU with alpha."""
    unary(ctx, node, OperationType.ELU, ctx.f32(float(attrs(node).get("alpha", 1.0))))


def _clip(ctx: Context, node: NodeProto, bounds: tuple[float | None, float | None]) -> None:
    code = activation_for_bounds(bounds)
    x = ctx.tensor(node)
    if code is not None:
        # Clipping at 0 stays on the input's grid; a clip at 1 or 6 must be requantized like the input.
        rule = EXACT if code == FusedActivationFunc.RELU else SAME
        unary(ctx, node, _ACT_OPS[code], quant=out_quant(ctx, node.output[0], x.quant, rule))
        return
    lo, hi = bounds
    if x.quant is not None and (lo is not None or hi is not None):
        raise ConversionError(
            f"{where(node)} clips a quantized tensor to [{lo}, {hi}]; only [0, inf), [0, 6] and [-1, 1] "
            f"(RELU, RELU6, RELU1) are supported on quantized tensors"
        )
    if lo is None and hi is None:
        ctx.alias(node.output[0], node.input[0])
        ctx.counts["dropped_identity"] += 1
        return
    if lo is not None and hi is not None:
        mid = ctx.unique(node.output[0] + "/max")
        emit_with_const(ctx, OperationType.MAXIMUM, x, np.array([lo], np.float32), mid)
        emit_with_const(
            ctx, OperationType.MINIMUM, ctx.tensors[mid], np.array([hi], np.float32), node.output[0]
        )
    elif lo is not None:
        emit_with_const(ctx, OperationType.MAXIMUM, x, np.array([lo], np.float32), node.output[0])
    else:
        emit_with_const(ctx, OperationType.MINIMUM, x, np.array([hi], np.float32), node.output[0])


@register("Clip", 6)
def clip_6(ctx: Context, node: NodeProto) -> None:
    """min/max are attributes; RELU/RELU1/RELU6 when they match, else MAXIMUM/MINIMUM."""
    _clip(ctx, node, clip_bounds_attrs(node))


@register("Clip", 11)
def clip_11(ctx: Context, node: NodeProto) -> None:
    """min/max are optional constant inputs; RELU/RELU1/RELU6 when they match, else MAXIMUM/MINIMUM."""
    _clip(ctx, node, clip_bounds_inputs(ctx, node))
