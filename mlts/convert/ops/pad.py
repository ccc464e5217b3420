"""Pad -> PAD (PAD_V2 when the fill value is not zero) for mode constant; GATHER along each padded
axis for modes reflect, edge and wrap. Paddings follow the operand's layout.

A quantized PAD fills with the zero point, i.e. the real value 0: other
fill values are refused on quantized tensors.

reflect, edge and wrap only copy elements: output index j of a padded axis of size n (begin pad b)
reads input index r(j - b), with r(i) = -i for i < 0 and 2(n-1) - i for i >= n (reflect, which
needs b, e <= n - 1 as in onnxruntime), clamp(i, 0, n-1) (edge), i mod n (wrap). A GATHER with those
constant indices per padded axis gives exactly ONNX's values, for every tensor type GATHER takes.
Negative pads crop: they are a SLICE first (mode constant only).
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
from mlts.hal.enums import OperandType, OperationType

MODES = ("constant", "reflect", "edge", "wrap")


def source_index(mode: str, i: np.ndarray, n: int) -> np.ndarray:
    """The input index that padded position `i` (relative to the input's first element) reads."""
    if mode == "reflect":
        i = np.abs(i)
        return np.where(i >= n, 2 * (n - 1) - i, i)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    return np.mod(i, n)  # wrap


def _gather_pad(ctx: Context, node: NodeProto, mode: str, begin: list[int], end: list[int]) -> None:
    """Modes reflect/edge/wrap: one GATHER with constant indices per padded axis."""
    x = ctx.tensor(node)
    if x.elem not in (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16, OperandType.TENSOR_INT32) and (
        x.quant is None
    ):
        raise ConversionError(f"{where(node)}: input is {x.elem.name}; GATHER takes float, int32 and quant8")
    if x.elem == OperandType.TENSOR_INT32 and x.nhwc:
        x = ctx.in_layout(node.input[0], False)
    for a, n in enumerate(x.shape):
        if mode == "reflect" and (begin[a] > n - 1 or end[a] > n - 1):
            raise ConversionError(
                f"{where(node)}: mode 'reflect' pads axis {a} of size {n} by {begin[a]} and {end[a]}; "
                f"reflection needs pads of at most {n - 1} (the size less one)"
            )
    axes = [a for a in range(x.rank) if begin[a] or end[a]]
    quant = out_quant(ctx, node.output[0], x.quant, EXACT)
    cur = x
    for k, a in enumerate(axes):
        n = cur.shape[a]
        idx = source_index(mode, np.arange(-begin[a], n + end[a]), n).astype(np.int32)
        shape = list(cur.shape)
        shape[a] = len(idx)
        last = k == len(axes) - 1
        out = (
            ctx.new_tensor(node.output[0], shape, cur.nhwc, quant, None if quant else cur.elem)
            if last
            else ctx.temp(shape, cur.nhwc, cur.quant, None if cur.quant else cur.elem)
        )
        ctx.emit(
            OperationType.GATHER,
            [cur.operand, ctx.i32(cur.nn_axis(a)), ctx.builder.add_constant(idx, OperandType.TENSOR_INT32)],
            [out.operand],
        )
        cur = out
    if not axes:
        ctx.alias(node.output[0], node.input[0])


def _crop(ctx: Context, node: NodeProto, begin: list[int], end: list[int]) -> str:
    """Input 0 with the negative pads cropped off (a SLICE); the name of the result."""
    x = ctx.tensor(node)
    cut_b = [max(-b, 0) for b in begin]
    cut_e = [max(-e, 0) for e in end]
    sizes = [d - cb - ce for d, cb, ce in zip(x.shape, cut_b, cut_e, strict=True)]
    if any(s <= 0 for s in sizes):
        raise ConversionError(
            f"{where(node)}: pads {begin + end} crop input shape {list(x.shape)} to nothing"
        )
    order = TO_NHWC if x.nhwc else range(x.rank)
    name = ctx.unique(node.output[0] + "/cropped")
    out = ctx.new_tensor(name, sizes, x.nhwc, x.quant, None if x.quant else x.elem)
    ctx.emit(
        OperationType.SLICE,
        [x.operand, ctx.ints([cut_b[a] for a in order]), ctx.ints([sizes[a] for a in order])],
        [out.operand],
    )
    return name


def _pad(
    ctx: Context,
    node: NodeProto,
    mode: str,
    pads: Sequence[int],
    value: float | int,
    axes: Sequence[int] | None,
) -> None:
    """`value`: the fill as a float, or (an int) the operand of a scalar model input holding it."""
    if mode not in MODES:
        raise ConversionError(f"{where(node)} has mode '{mode}'; ONNX modes are {', '.join(MODES)}")
    x = ctx.tensor(node)
    rank = x.rank
    axes = list(range(rank)) if axes is None else [norm_axis(node, int(a), rank, "axes entry") for a in axes]
    if len(pads) != 2 * len(axes):
        raise ConversionError(
            f"{where(node)} has {len(pads)} pads for {len(axes)} axes; expected {2 * len(axes)}"
        )
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = int(pads[i]), int(pads[i + len(axes)])
    if mode != "constant":
        if any(p < 0 for p in pads):
            raise ConversionError(
                f"{where(node)} has pads {list(pads)}; negative pads (cropping) are converted for mode "
                f"'constant' only"
            )
        _gather_pad(ctx, node, mode, begin, end)
        return
    if any(p < 0 for p in pads):
        cropped = _crop(ctx, node, begin, end)
        begin, end = [max(b, 0) for b in begin], [max(e, 0) for e in end]
        if not any(begin) and not any(end):
            ctx.alias(node.output[0], cropped)
            return
        x = ctx.tensors[cropped]
    order = TO_NHWC if x.nhwc else range(rank)
    paddings = ctx.ints([[begin[a], end[a]] for a in order])
    runtime = isinstance(value, int)
    if runtime and (x.quant is not None or x.elem != OperandType.TENSOR_FLOAT32):
        raise ConversionError(
            f"{where(node)}: the fill value is a graph input; PAD_V2 takes it at run time for float32 tensors "
            f"only (fix it with --input-value)"
        )
    if x.quant is not None and value != 0.0:
        raise ConversionError(
            f"{where(node)} pads a quantized tensor with the real value {value:g}; only 0 (the zero point) is supported"
        )
    quant = out_quant(ctx, node.output[0], x.quant, EXACT)
    out = ctx.new_tensor(
        node.output[0], [d + begin[i] + end[i] for i, d in enumerate(x.shape)], x.nhwc, quant
    )
    if runtime:
        ctx.emit(OperationType.PAD_V2, [x.operand, paddings, int(value)], [out.operand])
    elif value == 0.0:
        ctx.emit(OperationType.PAD, [x.operand, paddings], [out.operand])
    else:
        ctx.emit(OperationType.PAD_V2, [x.operand, paddings, ctx.f32(value)], [out.operand])


def _fill(ctx: Context, node: NodeProto) -> float | int:
    """The real fill value: an 8-bit constant pads a quantized tensor in its own encoding (QOperator).

    A rank-0 graph input held as a scalar model input gives its operand (an int) instead.
    """
    name = ctx.input(node, 2)
    if name is not None and name in ctx.scalar_inputs:
        return ctx.scalar_inputs[name]
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
