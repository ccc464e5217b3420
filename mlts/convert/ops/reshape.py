"""Reshape, Flatten, Squeeze, Unsqueeze -> RESHAPE (ONNX element order; NHWC is undone first when it differs)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.registry import register


def reshape_target(
    node: NodeProto, in_shape: Sequence[int], spec: Sequence[int], allowzero: bool
) -> tuple[int, ...]:
    """The output shape of Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ConversionError(
                    f"{where(node)}: shape {list(spec)} copies dim {i}, but the input has rank {len(in_shape)}"
                )
            d = in_shape[i]
        out.append(int(d))
    total = math.prod(in_shape)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise ConversionError(
            f"{where(node)}: shape {list(spec)} is invalid; at most one -1 and no other negative values"
        )
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ConversionError(f"{where(node)}: cannot reshape {list(in_shape)} to {list(spec)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ConversionError(f"{where(node)}: cannot reshape {list(in_shape)} ({total} elements) to {out}")
    return tuple(out)


def _reshape(ctx: Context, node: NodeProto, allowzero: bool) -> None:
    spec = np.asarray(ctx.const_input(node, 1, "shape")).reshape(-1).tolist()
    ctx.reshaped(
        node.input[0], reshape_target(node, ctx.shape_of(node.input[0]), spec, allowzero), node.output[0]
    )


@register("Reshape", 5)
def reshape_5(ctx: Context, node: NodeProto) -> None:
    """Shape as a constant input; 0 copies the input dimension."""
    _reshape(ctx, node, allowzero=False)


@register("Reshape", 14)
def reshape_14(ctx: Context, node: NodeProto) -> None:
    """Adds allowzero: 0 is a literal zero-size dimension (refused: empty tensors are unsupported)."""
    _reshape(ctx, node, allowzero=bool(attrs(node).get("allowzero", 0)))


@register("Flatten", 1)
def flatten(ctx: Context, node: NodeProto) -> None:
    """To 2-D [prod(dims before axis), prod(dims from axis)]."""
    shape = ctx.shape_of(node.input[0])
    axis = attrs(node).get("axis", 1)
    axis = len(shape) if axis == len(shape) else norm_axis(node, axis, len(shape))
    ctx.reshaped(node.input[0], (math.prod(shape[:axis]), math.prod(shape[axis:])), node.output[0])


def _squeeze(ctx: Context, node: NodeProto, axes: Sequence[int] | None) -> None:
    shape = ctx.shape_of(node.input[0])
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {norm_axis(node, int(a), len(shape), "axes entry") for a in axes}
        bad = [a for a in drop if shape[a] != 1]
        if bad:
            raise ConversionError(
                f"{where(node)}: axes {sorted(bad)} of shape {list(shape)} are not 1 and cannot be squeezed"
            )
    ctx.reshaped(node.input[0], tuple(d for i, d in enumerate(shape) if i not in drop), node.output[0])


def _unsqueeze(ctx: Context, node: NodeProto, axes: Sequence[int]) -> None:
    shape = list(ctx.shape_of(node.input[0]))
    rank = len(shape) + len(axes)
    where_one = sorted(norm_axis(node, int(a), rank, "axes entry") for a in axes)
    if len(set(where_one)) != len(where_one):
        raise ConversionError(f"{where(node)}: axes {list(axes)} repeat an axis")
    for a in where_one:
        shape.insert(a, 1)
    ctx.reshaped(node.input[0], shape, node.output[0])


@register("Squeeze", 1)
def squeeze_1(ctx: Context, node: NodeProto) -> None:
    """axes is an attribute (all 1-dims when absent)."""
    axes = attrs(node).get("axes")
    _squeeze(ctx, node, None if axes is None else list(axes))


@register("Squeeze", 13)
def squeeze_13(ctx: Context, node: NodeProto) -> None:
    """axes is an optional constant input."""
    axes = ctx.const_input(node, 1, "axes", required=False)
    _squeeze(ctx, node, None if axes is None else np.asarray(axes).reshape(-1).tolist())


@register("Unsqueeze", 1)
def unsqueeze_1(ctx: Context, node: NodeProto) -> None:
    """axes is an attribute."""
    _unsqueeze(ctx, node, list(attrs(node).get("axes", [])))


@register("Unsqueeze", 13)
def unsqueeze_13(ctx: Context, node: NodeProto) -> None:
    """axes is a constant input."""
    _unsqueeze(ctx, node, np.asarray(ctx.const_input(node, 1, "axes")).reshape(-1).tolist())
