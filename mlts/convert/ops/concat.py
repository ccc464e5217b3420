"""Concat -> CONCATENATION, in NHWC with a remapped axis when a rank-4 input already is NHWC.

Quantized inputs of one 8-bit type may have different parameters (NNAPI
1.3 requantizes each); the output takes the QuantizeLinear's parameters, or
the inputs' common ones when there is none.
"""

from __future__ import annotations

from onnx import NodeProto

from mlts.convert.context import NHWC_AXIS, Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.ops.elementwise import pick_nhwc
from mlts.convert.qflow import ANY, EXACT, out_quant
from mlts.convert.quant import QParams
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


@register("Concat", 4)
def concat(ctx: Context, node: NodeProto) -> None:
    """CONCATENATION of runtime and constant inputs along one axis."""
    emit_concat(ctx, node, [n for n in node.input if n])


def emit_concat(ctx: Context, node: NodeProto, names: list[str], declared: QParams | None = None) -> None:
    """CONCATENATION of `names` along the `axis` attribute; `declared` gives the output parameters (QOperator)."""
    out_shape = ctx.shape_of(node.output[0], node)
    axis = norm_axis(node, attrs(node).get("axis", 0), len(out_shape))
    nhwc = pick_nhwc(ctx, names, len(out_shape))
    inputs = [ctx.in_layout(n, nhwc) for n in names]
    quants = [t.quant for t in inputs]
    quant = concat_quant(ctx, node, quants) if declared is None else declared
    if declared is not None and any(q is None or q.type != declared.type for q in quants):
        raise ConversionError(f"{where(node)}: every input must be quantized as {declared.type.name}")
    out = ctx.new_tensor(node.output[0], out_shape, nhwc, quant)
    operands = [t.operand for t in inputs]
    ctx.emit(
        OperationType.CONCATENATION, [*operands, ctx.i32(NHWC_AXIS[axis] if nhwc else axis)], [out.operand]
    )


def concat_quant(ctx: Context, node: NodeProto, quants: list[QParams | None]) -> QParams | None:
    """Output QParams: None for float inputs; all inputs must be quantized with one 8-bit type."""
    if all(q is None for q in quants):
        return None
    if any(q is None for q in quants) or len({q.type for q in quants if q is not None}) != 1:
        got = ", ".join("float32" if q is None else q.type.name for q in quants)
        raise ConversionError(
            f"{where(node)}: inputs are {got}; a quantized Concat needs every input quantized with one 8-bit "
            f"type (constants through DequantizeLinear)"
        )
    first = quants[0]
    if all(q == first for q in quants):
        # Unquantized output: the values stay on the common grid. Quantized: CONCATENATION requantizes.
        return out_quant(ctx, node.output[0], first, EXACT if ctx.quant_of(node.output[0]) is None else ANY)
    return out_quant(ctx, node.output[0], first, ANY)
