"""BatchNormalization not folded into a Conv/Gemm -> MUL and ADD with per-channel constants."""

from __future__ import annotations

from onnx import NodeProto

from mlts.convert.context import Context
from mlts.convert.ops._common import batchnorm_scale_shift
from mlts.convert.ops.elementwise import emit_with_const
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def _standalone(ctx: Context, node: NodeProto) -> None:
    scale, shift = batchnorm_scale_shift(ctx, node)
    x = ctx.tensor(node)
    # Channel is ONNX axis 1: last NN axis of an NHWC operand, else followed by broadcast 1s.
    shape = (-1,) if x.nhwc or x.rank <= 2 else (-1,) + (1,) * (x.rank - 2)
    mid = ctx.unique(node.output[0] + "/scaled")
    emit_with_const(ctx, OperationType.MUL, x, scale.reshape(shape), mid)
    emit_with_const(ctx, OperationType.ADD, ctx.tensors[mid], shift.reshape(shape), node.output[0])
    ctx.counts["bn_standalone"] += 1


@register("BatchNormalization", 7)
def batch_norm_7(ctx: Context, node: NodeProto) -> None:
    """spatial attribute (only 1 is supported)."""
    _standalone(ctx, node)


@register("BatchNormalization", 9)
def batch_norm_9(ctx: Context, node: NodeProto) -> None:
    """spatial removed: statistics are always per channel."""
    _standalone(ctx, node)


@register("BatchNormalization", 14)
def batch_norm_14(ctx: Context, node: NodeProto) -> None:
    """training_mode attribute (only 0, inference, is supported)."""
    _standalone(ctx, node)


@register("BatchNormalization", 15)
def batch_norm_15(ctx: Context, node: NodeProto) -> None:
    """Type constraints widened for scale/bias versus mean/var; same semantics."""
    _standalone(ctx, node)
