"""Helpers shared by the op handlers: attributes, axes, padding, fused activations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, helper

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.qflow import qdq_activation
from mlts.hal.enums import FusedActivationFunc

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def attrs(node: NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def norm_axis(node: NodeProto, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank) mapped to [0, rank)."""
    if not -rank <= axis < rank:
        raise ConversionError(
            f"{where(node)}: {what} {axis} is out of range for rank {rank}; valid: [{-rank}, {rank})"
        )
    return axis % rank


def require_rank(node: NodeProto, shape: Sequence[int], rank: int, what: str = "input") -> None:
    if len(shape) != rank:
        raise ConversionError(
            f"{where(node)}: {what} has rank {len(shape)} (shape {list(shape)}); only rank {rank} is supported"
        )


def spatial_padding(
    node: NodeProto,
    a: dict[str, Any],
    in_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) padding from ONNX `auto_pad`/`pads`."""
    auto_pad = a.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise ConversionError(f"{where(node)} has auto_pad '{auto_pad}'; valid: {', '.join(AUTO_PADS)}")
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad == "NOTSET":
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4 or any(p < 0 for p in pads):
            raise ConversionError(
                f"{where(node)} has pads {pads}; expected 4 non-negative values [top, left, bottom, right]"
            )
        return (pads[0], pads[1], pads[2], pads[3])
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations, strict=True):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        # SAME_UPPER puts the odd pixel at the end, SAME_LOWER at the beginning.
        b = small if auto_pad == "SAME_UPPER" else total - small
        begin.append(b)
        end.append(total - b)
    return (begin[0], begin[1], end[0], end[1])


def ints_attr(node: NodeProto, a: dict[str, Any], key: str, default: Sequence[int], count: int) -> list[int]:
    values = list(a.get(key, default))
    if len(values) != count or any(v < 1 for v in values):
        raise ConversionError(f"{where(node)} has {key} {values}; expected {count} positive values")
    return values


# ------------------------------------------------------------ Clip bounds and activations


def clip_bounds_attrs(node: NodeProto) -> tuple[float | None, float | None]:
    """Clip before opset 11: min/max attributes; None = unbounded."""
    a = attrs(node)
    lo, hi = a.get("min"), a.get("max")
    # The opset 6 defaults are -FLT_MAX/+FLT_MAX, i.e. unbounded.
    lo = None if lo is None or lo <= -3.4e38 else float(lo)
    hi = None if hi is None or hi >= 3.4e38 else float(hi)
    return lo, hi


def clip_bounds_inputs(ctx: Context, node: NodeProto) -> tuple[float | None, float | None]:
    """Clip from opset 11: optional constant min/max inputs; None = unbounded."""
    lo = ctx.real_const_input(node, 1, "min")
    hi = ctx.real_const_input(node, 2, "max")
    return (
        None if lo is None else float(np.asarray(lo).reshape(-1)[0]),
        None if hi is None else float(np.asarray(hi).reshape(-1)[0]),
    )


def clip_bounds(ctx: Context, node: NodeProto) -> tuple[float | None, float | None]:
    """Clip's (min, max) under the model's opset."""
    return clip_bounds_attrs(node) if ctx.opset < 11 else clip_bounds_inputs(ctx, node)


def activation_for_bounds(bounds: tuple[float | None, float | None]) -> FusedActivationFunc | None:
    """RELU/RELU1/RELU6 when a clamp to `bounds` is one of them, else None."""
    table: dict[tuple[float | None, float | None], FusedActivationFunc] = {
        (0.0, None): FusedActivationFunc.RELU,
        (0.0, 6.0): FusedActivationFunc.RELU6,
        (-1.0, 1.0): FusedActivationFunc.RELU1,
    }
    return table.get(bounds)


def activation_code(ctx: Context, node: NodeProto) -> FusedActivationFunc | None:
    """The fused activation equal to this Relu/Clip node, or None."""
    if node.op_type == "Relu":
        return FusedActivationFunc.RELU
    if node.op_type == "Clip":
        try:
            return activation_for_bounds(clip_bounds(ctx, node))
        except ConversionError:
            return None
    return None


def fuse_activation(ctx: Context, name: str, quantized: bool = False) -> tuple[FusedActivationFunc, str]:
    """Absorb a Relu/Clip that is the only reader of `name`: (activation, name of the result).

    For a quantized op the Relu/Clip may also follow a QuantizeLinear ->
    DequantizeLinear pair whose parameters its own output repeats: clamping
    then requantizing with the same parameters is the fused clamp.
    """
    node = ctx.sole_consumer(name, {"Relu", "Clip"})
    pair: tuple[NodeProto, ...] = ()
    if node is None and quantized:
        chain = qdq_activation(ctx, name)
        if chain is not None:
            pair, node = chain[:2], chain[2]
    if node is None or (not pair and node.input[0] != name):
        return FusedActivationFunc.NONE, name
    code = activation_code(ctx, node)
    if code is None:
        return FusedActivationFunc.NONE, name
    for qdq in pair:
        ctx.absorb(qdq, "fused_qdq")
    ctx.absorb(node, "fused_activation")
    return code, node.output[0]


# ------------------------------------------------------------ BatchNormalization


def batchnorm_scale_shift(ctx: Context, node: NodeProto) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (scale, shift) in float64 so that BN(x) = x*scale + shift."""
    a = attrs(node)
    if a.get("spatial", 1) != 1:
        raise ConversionError(
            f"{where(node)} has spatial=0; only spatial=1 (per-channel statistics) is supported"
        )
    if a.get("training_mode", 0) != 0:
        raise ConversionError(
            f"{where(node)} has training_mode=1; only inference (training_mode=0) is supported"
        )
    for extra in node.output[1:]:
        if extra and (ctx.consumers.get(extra) or extra in ctx.graph_outputs):
            raise ConversionError(
                f"{where(node)}: output '{extra}' (running statistics) is used; only the normalised output is supported"
            )
    eps = float(a.get("epsilon", 1e-5))
    gamma, beta, mean, var = (
        np.asarray(ctx.const_input(node, i, what), dtype=np.float64).reshape(-1)
        for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var"))
    )
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def foldable_batchnorm(
    ctx: Context, name: str, channels: int
) -> tuple[NodeProto, np.ndarray, np.ndarray] | None:
    """A BatchNormalization that alone reads `name` and has constant parameters, with its (scale, shift)."""
    bn = ctx.sole_consumer(name, {"BatchNormalization"})
    if bn is None or bn.input[0] != name:
        return None
    try:
        scale, shift = batchnorm_scale_shift(ctx, bn)
    except ConversionError:
        return None
    if scale.shape != (channels,) or shift.shape != (channels,):
        return None
    return bn, scale, shift


BN_NOT_EXACT = (
    "folding BatchNormalization into quantized weights is not exact; fold it before quantizing "
    "(onnxruntime's quant_pre_process does)"
)


def refuse_batchnorm(ctx: Context, node: NodeProto, name: str) -> None:
    """ConversionError when a BatchNormalization alone reads the output `name` of quantized `node`."""
    bn = ctx.sole_consumer(name, {"BatchNormalization"})
    if bn is not None:
        raise ConversionError(f"{where(bn)} follows the quantized {where(node)}: {BN_NOT_EXACT}")
