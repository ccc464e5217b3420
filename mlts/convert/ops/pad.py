"""Pad (constant mode) -> PAD, or PAD_V2 when the fill value is not zero; paddings follow the operand's layout."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import NodeProto

from mlts.convert.context import TO_NHWC, Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
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
    out = ctx.new_tensor(node.output[0], [d + begin[i] + end[i] for i, d in enumerate(x.shape)], x.nhwc)
    if value == 0.0:
        ctx.emit(OperationType.PAD, [x.operand, paddings], [out.operand])
    else:
        ctx.emit(OperationType.PAD_V2, [x.operand, paddings, ctx.f32(value)], [out.operand])


@register("Pad", 2)
def pad_2(ctx: Context, node: NodeProto) -> None:
    """pads and value are attributes."""
    a = attrs(node)
    _pad(ctx, node, a.get("mode", "constant"), list(a.get("pads", [])), float(a.get("value", 0.0)), None)


@register("Pad", 11)
def pad_11(ctx: Context, node: NodeProto) -> None:
    """pads and constant_value are constant inputs."""
    pads = np.asarray(ctx.const_input(node, 1, "pads")).reshape(-1).tolist()
    value = ctx.const_input(node, 2, "constant_value", required=False)
    fill = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0])
    _pad(ctx, node, attrs(node).get("mode", "constant"), pads, fill, None)


@register("Pad", 18)
def pad_18(ctx: Context, node: NodeProto) -> None:
    """Adds an optional constant axes input naming the padded axes."""
    pads = np.asarray(ctx.const_input(node, 1, "pads")).reshape(-1).tolist()
    value = ctx.const_input(node, 2, "constant_value", required=False)
    axes = ctx.const_input(node, 3, "axes", required=False)
    fill = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0])
    _pad(
        ctx,
        node,
        attrs(node).get("mode", "constant"),
        pads,
        fill,
        None if axes is None else np.asarray(axes).reshape(-1).tolist(),
    )
