"""ReduceMean -> MEAN with axes remapped for NHWC operands (axes an attribute before opset 18, an input from 18)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import NodeProto

from mlts.convert.context import TO_NHWC, Context
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.qflow import ANY, out_quant
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def _mean(
    ctx: Context, node: NodeProto, axes: Sequence[int] | None, keepdims: bool, noop_empty: bool
) -> None:
    x = ctx.tensor(node)
    if not axes and noop_empty:
        ctx.alias(node.output[0], node.input[0])
        return
    axes = (
        sorted({norm_axis(node, int(a), x.rank, "axes entry") for a in axes}) if axes else list(range(x.rank))
    )
    if x.nhwc and not keepdims:
        kept_in_nn_order = [a for a in TO_NHWC if a not in axes]
        if kept_in_nn_order != sorted(kept_in_nn_order):
            # The kept dims would come out in NHWC order, not ONNX order.
            x = ctx.in_layout(node.input[0], False)
    if keepdims:
        out_shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
    else:
        out_shape = [d for i, d in enumerate(x.shape) if i not in axes]
    quant = out_quant(ctx, node.output[0], x.quant, ANY)
    out = ctx.new_tensor(node.output[0], out_shape, x.nhwc and keepdims, quant)
    nn_axes = sorted(x.nn_axis(a) for a in axes)
    ctx.emit(OperationType.MEAN, [x.operand, ctx.ints(nn_axes), ctx.i32(int(keepdims))], [out.operand])


@register("ReduceMean", 1)
def reduce_mean_1(ctx: Context, node: NodeProto) -> None:
    """axes attribute (all axes when absent), keepdims."""
    a = attrs(node)
    _mean(ctx, node, a.get("axes"), bool(a.get("keepdims", 1)), False)


@register("ReduceMean", 18)
def reduce_mean_18(ctx: Context, node: NodeProto) -> None:
    """axes optional constant input, keepdims, noop_with_empty_axes."""
    a = attrs(node)
    axes = ctx.const_input(node, 1, "axes", required=False)
    axes_list = None if axes is None else np.asarray(axes).reshape(-1).tolist()
    _mean(ctx, node, axes_list, bool(a.get("keepdims", 1)), bool(a.get("noop_with_empty_axes", 0)))
