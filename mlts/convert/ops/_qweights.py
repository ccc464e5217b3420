"""Quantized filters and biases of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED from ONNX quantized constants.

NNAPI's combinations, by input type:
- TENSOR_QUANT8_ASYMM input: a uint8 per-tensor filter (TENSOR_QUANT8_ASYMM,
  any zero point) or an int8 per-channel filter (TENSOR_QUANT8_SYMM_PER_CHANNEL,
  zero point 0); an int8 per-tensor filter with zero point 0 is the
  per-channel form with its one scale repeated (the same real values);
- TENSOR_QUANT8_ASYMM_SIGNED input: an int8 per-tensor filter
  (TENSOR_QUANT8_ASYMM_SIGNED) or an int8 per-channel filter.
The bias is TENSOR_INT32 with zero point 0 and scale input_scale *
filter_scale (per-tensor filters), or scale 0 with per-channel filters (then
channel c has the implicit scale input_scale * filter_scale[c]). ONNX biases
are int32 DequantizeLinear constants; their scale must already be that
product (relative difference at most 1e-6), since rescaling is not exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.quant import QUANT8_TYPES, QConst, QParams
from mlts.hal.enums import OperandType
from mlts.hal.types import SymmPerChannelQuantParams

BIAS_SCALE_RTOL = 1e-6


@dataclass(frozen=True, slots=True)
class Filter:
    """A filter operand and the real scale of each output channel."""

    operand: int
    scales: np.ndarray
    per_channel: bool


def _per_channel(ctx: Context, values: np.ndarray, scales: np.ndarray, channel_dim: int) -> int:
    params = SymmPerChannelQuantParams(tuple(float(s) for s in scales), channel_dim)
    return ctx.builder.add_constant(
        values.astype(np.int8), OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL, extra_params=params
    )


def filter_operand(
    ctx: Context,
    node: NodeProto,
    xq: QParams,
    w: QConst,
    out_axis: int,
    perm: Sequence[int],
    channel_dim: int,
    per_channel_shape: Sequence[int] | None = None,
) -> Filter:
    """The NN filter: `w` (ONNX layout, output channels on `out_axis`) transposed by `perm`.

    `channel_dim` is where the output channels land in the NN layout (0 for
    CONV_2D, 3 for DEPTHWISE_CONV_2D); a per-channel result is reshaped to
    `per_channel_shape` when given (FULLY_CONNECTED weights as a 1x1 CONV_2D filter).
    """
    values = w.values
    if values.dtype not in QUANT8_TYPES:
        raise ConversionError(
            f"{where(node)}: weight '{w.name}' has dtype {values.dtype}; expected uint8 or int8"
        )
    cout = values.shape[out_axis]
    nn = np.ascontiguousarray(values.transpose(perm))
    pc_nn = nn if per_channel_shape is None else nn.reshape(per_channel_shape)
    if w.axis is None:
        wq = w.per_tensor()
        assert wq is not None
        if wq.type == xq.type:
            operand = ctx.builder.add_constant(nn, wq.type, wq.scale, wq.zero_point)
            return Filter(operand, np.full(cout, wq.scale), False)
        if values.dtype == np.int8 and wq.zero_point == 0:
            scales = np.full(cout, wq.scale)
            return Filter(_per_channel(ctx, pc_nn, scales, channel_dim), scales, True)
        raise ConversionError(
            f"{where(node)}: weight '{w.name}' is {values.dtype} (zero point {wq.zero_point}) but input "
            f"'{node.input[0]}' is {xq.type.name}; NNAPI needs weights of the input's type, or int8 with "
            f"zero point 0"
        )
    if w.axis != out_axis:
        raise ConversionError(
            f"{where(node)}: weight '{w.name}' is quantized along axis {w.axis}; per-channel weights must be "
            f"quantized along the output channels (axis {out_axis})"
        )
    if values.dtype != np.int8 or np.any(w.zero_point != 0):
        bad = np.flatnonzero(w.zero_point != 0)
        got = (
            f"zero point {int(w.zero_point[bad[0]])} at channel {int(bad[0])}"
            if bad.size
            else str(values.dtype)
        )
        raise ConversionError(
            f"{where(node)}: per-channel weight '{w.name}' has {got}; NNAPI per-channel weights are int8 "
            f"with zero point 0 (TENSOR_QUANT8_SYMM_PER_CHANNEL)"
        )
    scales = np.asarray(w.scale, dtype=np.float64)
    return Filter(_per_channel(ctx, pc_nn, scales, channel_dim), scales, True)


def bias_operand(ctx: Context, node: NodeProto, xq: QParams, filt: Filter, b: QConst | None) -> int:
    """The TENSOR_INT32 bias (zeros when absent) after checking the ONNX bias scale is input * weight scale."""
    cout = filt.scales.size
    expected = xq.scale * filt.scales
    if b is None:
        values = np.zeros(cout, np.int32)
    else:
        values = _bias_values(node, b, cout)
        scale = np.broadcast_to(np.asarray(b.scale, np.float64).reshape(-1), (cout,))
        err = np.abs(scale - expected) / expected
        worst = int(np.argmax(err))
        if err[worst] > BIAS_SCALE_RTOL:
            raise ConversionError(
                f"{where(node)}: bias '{b.name}' has scale {scale[worst]:.9g} (channel {worst}) but input scale "
                f"* weight scale is {expected[worst]:.9g}; NNAPI needs the bias scale to be that product"
            )
    if filt.per_channel:
        return ctx.builder.add_constant(values, OperandType.TENSOR_INT32)
    bias_scale = float(np.float32(xq.scale) * np.float32(filt.scales[0]))
    return ctx.builder.add_constant(values, OperandType.TENSOR_INT32, bias_scale, 0)


def _bias_values(node: NodeProto, b: QConst, cout: int) -> np.ndarray:
    if b.values.dtype != np.int32:
        raise ConversionError(
            f"{where(node)}: bias '{b.name}' is {b.values.dtype}; a quantized bias must be int32 "
            f"(scale input scale * weight scale, zero point 0)"
        )
    if np.any(b.zero_point != 0):
        raise ConversionError(f"{where(node)}: bias '{b.name}' has a nonzero zero point; it must be 0")
    values = b.values.reshape(-1)
    if values.size == 1:
        values = np.full(cout, values[0], np.int32)
    if values.size != cout:
        raise ConversionError(
            f"{where(node)}: bias '{b.name}' has {b.values.size} values (shape {list(b.values.shape)}); "
            f"expected {cout}"
        )
    return values.astype(np.int32)
