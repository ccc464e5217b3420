"""Pad (constant mode) -> PAD, or PAD_V2 when the fill value is not zero; paddings follow the operand's layout.

A quantized PAD fills with the zero point, i.e. the real value 0: other
fill values are refused on quantized tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import NodeProto

from mlts.convert.context import TO_NHWC, Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.qflow import EXACT, out_quant
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def _pad(
    ctx: Context, node: NodeProto, mode: str, pads: Sequence[int], value: float, axes: Sequence[int] | None
) -> None:
    if mode != "constant":
        raise ConversionError(f"{where(node)} has mode '{mode}'; only mode 'constant' is supported")
    x = ctx.tensor(node)
    rank = x.rank
    axes = list(range(rank)) if axes is None else [norm_axis(node, int(a), rank, "axes entry") for a in axes]
    if len(pads) != 2 * len(axes):
        raise ConversionError(
            f"{where(node)} has {len(pads)} pads for {len(axes)} axes; expected {2 * len(axes)}"
        )
    if any(p < 0 for p in pads):
        raise ConversionError(
            f"{where(node)} has pads {list(pads)}; negative pads (cropping) are not supported"
        )
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = int(pads[i]), int(pads[i + len(axes)])
    order = TO_NHWC if x.nhwc else range(rank)
    paddings = ctx.ints([[begin[a], end[a]] for a in order])
    if x.quant is not None and value != 0.0:
        raise ConversionError(
            f"{where(node)} pads a quantized tensor with the real value {value:g}; only 0 (the zero point) is supported"
        )
    quant = out_quant(ctx, node.output[0], x.quant, EXACT)
    out = ctx.new_tensor(
        node.output[0], [d + begin[i] + end[i] for i, d in enumerate(x.shape)], x.nhwc, quant
    )
    if value == 0.0:
        ctx.emit(OperationType.PAD, [x.operand, paddings], [out.operand])
    else:
        ctx.emit(OperationType.PAD_V2, [x.operand, paddings, ctx.f32(value)], [out.operand])


def _fill(ctx: Context, node: NodeProto) -> float:
    """The real fill value: an 8-bit constant pads a quantized tensor in its own encoding (QOperator)."""
    value = ctx.real_const_input(node, 2, "constant_value")
    if value is None:
        return 0.0
    v = np.asarray(value).reshape(-1)[0]
    x = ctx.tensors.get(node.input[0])
    if np.asarray(value).dtype.kind in "iu" and x is not None and x.quant is not None:
        return float(int(v) - x.quant.zero_point) * x.quant.scale
    return float(v)


@register("Pad", 2)
def pad_2(ctx: Context, node: NodeProto) -> None:
    """pads and value are attributes."""
    a = attrs(node)
    _pad(ctx, node, a.get("mode", "constant"), list(a.get("pads", [])), float(a.get("value", 0.0)), None)


@register("Pad", 11)
def pad_11(ctx: Context, node: NodeProto) -> None:
    """pads and constant_value are constant inputs."""
    pads = np.asarray(ctx.const_input(node, 1, "pads")).reshape(-1).tolist()
    _pad(ctx, node, attrs(node).get("mode", "constant"), pads, _fill(ctx, node), None)


@register("Pad", 18)
def pad_18(ctx: Context, node: NodeProto) -> None:
    """Adds an optional constant axes input naming the padded axes."""
    pads = np.asarray(ctx.const_input(node, 1, "pads")).reshape(-1).tolist()
    axes = ctx.const_input(node, 3, "axes", required=False)
    _pad(
        ctx,
        node,
        attrs(node).get("mode", "constant"),
        pads,
        _fill(ctx, node),
        None if axes is None else np.asarray(axes).reshape(-1).tolist(),
    )
