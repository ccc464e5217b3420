"""Split -> SPLIT (equal parts) or one SLICE per used output; Slice -> SLICE (unit steps) or STRIDED_SLICE.

Both only select elements: an NHWC operand is cut along the NN axis holding
the ONNX axis and stays NHWC, and an 8-bit quantized input keeps its
parameters (a QuantizeLinear on an output must repeat them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import NodeProto

from mlts.convert.context import TO_NHWC, Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.qflow import EXACT, out_quant
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def _nn_order(x: Tensor, values: Sequence[int]) -> list[int]:
    """Per-axis values given in ONNX axis order, rearranged into the operand's (NHWC) axis order."""
    return [values[a] for a in TO_NHWC] if x.nhwc else list(values)


def _used(ctx: Context, name: str) -> bool:
    """Output `name` is read by a converted node or returned by the graph."""
    return bool(name) and (name in ctx.graph_outputs or bool(ctx.consumers.get(name)))


def _output(ctx: Context, x: Tensor, name: str, shape: Sequence[int]) -> Tensor:
    """The tensor for output `name` (a temporary when nothing reads it), in x's layout and quantization."""
    if _used(ctx, name):
        return ctx.new_tensor(name, shape, x.nhwc, out_quant(ctx, name, x.quant, EXACT))
    return ctx.temp(shape, x.nhwc, x.quant)


# ------------------------------------------------------------ Split


def _check_sizes(node: NodeProto, sizes: Sequence[int], dim: int, axis: int) -> list[int]:
    sizes = [int(v) for v in sizes]
    if len(sizes) != len(node.output):
        raise ConversionError(
            f"{where(node)}: split {sizes} has {len(sizes)} entries for {len(node.output)} outputs"
        )
    if any(v < 1 for v in sizes) or sum(sizes) != dim:
        raise ConversionError(
            f"{where(node)}: split {sizes} does not cut axis {axis} of size {dim} into non-empty parts "
            f"(sizes must be >= 1 and sum to {dim})"
        )
    return sizes


def _equal_sizes(node: NodeProto, parts: int, dim: int, axis: int) -> list[int]:
    """No split given: `parts` equal parts, which must divide the axis."""
    if dim % parts:
        raise ConversionError(
            f"{where(node)}: axis {axis} of size {dim} cannot be split into {parts} equal parts"
        )
    return [dim // parts] * parts


def _chunks(node: NodeProto, parts: int, dim: int, axis: int) -> list[int]:
    """num_outputs (opset 18): parts of ceil(dim / parts), the last one smaller when uneven."""
    chunk = -(-dim // parts)
    sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
    if sizes[-1] < 1:
        raise ConversionError(
            f"{where(node)}: num_outputs {parts} leaves an empty last part of axis {axis} (size {dim})"
        )
    return sizes


def emit_split(ctx: Context, node: NodeProto, axis: int, sizes: list[int]) -> None:
    """One SPLIT when the parts are equal, else one SLICE per used output."""
    x = ctx.tensor(node)
    shapes = [tuple(v if a == axis else d for a, d in enumerate(x.shape)) for v in sizes]
    if len(set(sizes)) == 1:
        outs = [_output(ctx, x, name, shape) for name, shape in zip(node.output, shapes, strict=True)]
        ins = [x.operand, ctx.i32(x.nn_axis(axis)), ctx.i32(len(sizes))]
        ctx.emit(OperationType.SPLIT, ins, [t.operand for t in outs])
        return
    start = 0
    for name, shape, size in zip(node.output, shapes, sizes, strict=True):
        if _used(ctx, name):
            begin = [start if a == axis else 0 for a in range(x.rank)]
            out = _output(ctx, x, name, shape)
            ins = [x.operand, ctx.ints(_nn_order(x, begin)), ctx.ints(_nn_order(x, shape))]
            ctx.emit(OperationType.SLICE, ins, [out.operand])
        start += size


def _split(ctx: Context, node: NodeProto, split: Sequence[int] | None, num_outputs: int | None) -> None:
    shape = ctx.shape_of(node.input[0])
    axis = norm_axis(node, int(attrs(node).get("axis", 0)), len(shape))
    dim = shape[axis]
    if split is not None:
        sizes = _check_sizes(node, split, dim, axis)
    elif num_outputs is not None:
        if num_outputs != len(node.output):
            raise ConversionError(
                f"{where(node)} has num_outputs {num_outputs} but {len(node.output)} outputs"
            )
        sizes = _chunks(node, num_outputs, dim, axis)
    else:
        sizes = _equal_sizes(node, len(node.output), dim, axis)
    emit_split(ctx, node, axis, sizes)


@register("Split", 2)
def split_2(ctx: Context, node: NodeProto) -> None:
    """Sizes from the optional `split` attribute; equal parts without it."""
    split = attrs(node).get("split")
    _split(ctx, node, None if split is None else list(split), None)


def _split_input(ctx: Context, node: NodeProto) -> list[int] | None:
    split = ctx.const_input(node, 1, "split", required=False)
    return None if split is None else np.asarray(split).reshape(-1).tolist()


@register("Split", 13)
def split_13(ctx: Context, node: NodeProto) -> None:
    """Sizes from the optional constant `split` input."""
    _split(ctx, node, _split_input(ctx, node), None)


@register("Split", 18)
def split_18(ctx: Context, node: NodeProto) -> None:
    """Sizes from the `split` input or the num_outputs attribute (the last part smaller when uneven)."""
    split = _split_input(ctx, node)
    num_outputs = attrs(node).get("num_outputs")
    if split is not None and num_outputs is not None:
        raise ConversionError(f"{where(node)} has both a split input and num_outputs; give only one")
    _split(ctx, node, split, None if num_outputs is None else int(num_outputs))


# ------------------------------------------------------------ Slice


def _bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """ONNX's clamped (start, end) and the result length along one axis.

    Negative indexes count from the end; step > 0 clamps both to [0, dim],
    step < 0 clamps start to [0, dim-1] and end to [-1, dim-1] (-1: through index 0).
    """
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return start, end, max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, end, max(0, -(-(start - end) // -step))


def _slice_axes(
    node: NodeProto, rank: int, count: int, axes: Sequence[int] | None, steps: Sequence[int] | None
) -> tuple[list[int], list[int]]:
    """Normalised axes (default 0..count-1) and steps (default 1), checked."""
    axes_n = (
        list(range(count)) if axes is None else [norm_axis(node, int(a), rank, "axes entry") for a in axes]
    )
    steps_n = [1] * count if steps is None else [int(s) for s in steps]
    if len(axes_n) != count or len(steps_n) != count:
        raise ConversionError(
            f"{where(node)}: starts, ends, axes and steps must have the same length; got {count} starts, "
            f"{len(axes_n)} axes, {len(steps_n)} steps"
        )
    if len(set(axes_n)) != count:
        raise ConversionError(f"{where(node)}: axes {list(axes or [])} repeat an axis")
    if 0 in steps_n:
        raise ConversionError(f"{where(node)}: steps {steps_n} hold a 0; steps must be non-zero")
    return axes_n, steps_n


def _slice(
    ctx: Context,
    node: NodeProto,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None,
    steps: Sequence[int] | None,
) -> None:
    x = ctx.tensor(node)
    if len(ends) != len(starts):
        raise ConversionError(f"{where(node)}: {len(starts)} starts but {len(ends)} ends")
    axes_n, steps_n = _slice_axes(node, x.rank, len(starts), axes, steps)
    begin, end, stride = [0] * x.rank, list(x.shape), [1] * x.rank
    shape, end_mask = list(x.shape), 0
    for a, s, e, step in zip(axes_n, starts, ends, steps_n, strict=True):
        begin[a], end[a], shape[a] = _bounds(x.shape[a], int(s), int(e), step)
        stride[a] = step
        if shape[a] == 0:
            raise ConversionError(
                f"{where(node)}: axis {a} of size {x.shape[a]} sliced from {s} to {e} by {step} is empty; "
                f"empty tensors are not supported"
            )
    out = _output(ctx, x, node.output[0], shape)
    if all(v == 1 for v in stride):
        ins = [x.operand, ctx.ints(_nn_order(x, begin)), ctx.ints(_nn_order(x, shape))]
        ctx.emit(OperationType.SLICE, ins, [out.operand])
        return
    nn_end = _nn_order(x, end)
    for i, v in enumerate(nn_end):
        if v < 0:
            end_mask |= 1 << i  # -1 means "through index 0": STRIDED_SLICE reads a negative end from the back
    masks = [ctx.i32(0), ctx.i32(end_mask), ctx.i32(0)]
    ins = [x.operand, ctx.ints(_nn_order(x, begin)), ctx.ints(nn_end), ctx.ints(_nn_order(x, stride))]
    ctx.emit(OperationType.STRIDED_SLICE, [*ins, *masks], [out.operand])


def _ints(ctx: Context, node: NodeProto, index: int, what: str, required: bool) -> list[int] | None:
    arr = ctx.const_input(node, index, what, required)
    return None if arr is None else [int(v) for v in np.asarray(arr).reshape(-1)]


@register("Slice", 1)
def slice_1(ctx: Context, node: NodeProto) -> None:
    """starts, ends and the optional axes are attributes."""
    a = attrs(node)
    if "starts" not in a or "ends" not in a:
        raise ConversionError(f"{where(node)} needs the starts and ends attributes")
    axes = a.get("axes")
    _slice(ctx, node, list(a["starts"]), list(a["ends"]), None if axes is None else list(axes), None)


@register("Slice", 10)
def slice_10(ctx: Context, node: NodeProto) -> None:
    """starts, ends and the optional axes and steps are constant inputs."""
    starts = _ints(ctx, node, 1, "starts", True)
    ends = _ints(ctx, node, 2, "ends", True)
    assert starts is not None and ends is not None
    _slice(ctx, node, starts, ends, _ints(ctx, node, 3, "axes", False), _ints(ctx, node, 4, "steps", False))
