"""Concat -> CONCATENATION, in NHWC with a remapped axis when a rank-4 input already is NHWC."""

from __future__ import annotations

from onnx import NodeProto

from mlts.convert.context import NHWC_AXIS, Context
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.ops.elementwise import pick_nhwc
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


@register("Concat", 4)
def concat(ctx: Context, node: NodeProto) -> None:
    """CONCATENATION of runtime and constant inputs along one axis."""
    names = [n for n in node.input if n]
    out_shape = ctx.shape_of(node.output[0], node)
    axis = norm_axis(node, attrs(node).get("axis", 0), len(out_shape))
    nhwc = pick_nhwc(ctx, names, len(out_shape))
    operands = [ctx.in_layout(n, nhwc).operand for n in names]
    out = ctx.new_tensor(node.output[0], out_shape, nhwc)
    ctx.emit(
        OperationType.CONCATENATION, [*operands, ctx.i32(NHWC_AXIS[axis] if nhwc else axis)], [out.operand]
    )
