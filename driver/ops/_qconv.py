"""Quantized GEMM arithmetic shared by CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (NNAPI 1.3).

For every output element and output channel c, NNAPI's CPU reference computes

    acc = bias[c] + sum_k (x_k - zp_x) * (w_kc - zp_w)                      (int32)
    y   = clamp(zp_y + MultiplyByQuantizedMultiplier(acc, m_c, e_c), act_lo, act_hi)

where (m_c, e_c) = QuantizeMultiplier(double(s_x) * double(s_w[c]) / double(s_y)) from the float32
scales, s_w[c] being the per-tensor filter scale or the per-channel one (zp_w = 0 then), and
[act_lo, act_hi] the fused activation's range on the output type (`_quant.activation_range`).

Exactness of the float64 sum: both factors are centred first, so |x - zp_x| <= 255 and
|w - zp_w| <= 255 and every product is an integer of magnitude <= 65025. Any partial sum a BLAS
or einsum kernel forms (any order, with or without FMA) is an integer bounded by K * 65025 for K
accumulated terms, and the int32 bias adds less than 2^31; float64 represents every integer below
2^53 exactly, so the float64 result is the exact integer sum whenever

    K * 65025 + 2^31 < 2^53,   i.e. K < 1.385e11,

which `check_exact` enforces at prepare. float32 BLAS is about twice as fast and is used where a
sharper, data-dependent bound holds: with constant weights, every partial sum is at most
max_c sum_k |w_kc - zp_w| * max|x - zp_x| in magnitude, and when that is below 2^24 every partial
sum is an integer float32 holds exactly (`accumulation_dtype`). Trained and calibrated filters
meet it in most layers (a 3x3 depthwise filter always does: 9 * 65025 < 2^24). The int32 bias is
added afterwards, in int64. The sum is the mathematically exact one: where the
reference's int32 accumulator would overflow (K > ~33000 with extreme values: undefined behaviour
in C++) we keep the exact value instead of a wrapped one.

Signed (int8) and unsigned (uint8) operands give bit-identical accumulators (only differences
from the zero points enter the sum) and identical multipliers; the activation range and the
saturation bounds move by 128 with the zero point, so the outputs agree up to the 128 offset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from driver.ops._base import ArgInfo, expect_type, packed
from driver.ops._quant import (
    QUANT8_RANGE,
    activation_range,
    check_quant8,
    check_same_type,
    multiply_by_quantized_multiplier,
    quantize_multipliers,
    saturate,
    type_label,
)
from driver.ops._window import Geometry
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid

F64 = np.float64
F32 = np.float32
F32_EXACT_LIMIT = 2**24  # float32 holds every integer below this exactly
PER_CHANNEL = OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL
MAX_PRODUCT = 255 * 255  # the largest |(x - zp_x) * (w - zp_w)| of two 8-bit values
EXACT_LIMIT = 2**53  # float64 holds every integer below this exactly
BIAS_LIMIT = 2**31  # |int32 bias| is below this


@dataclass(frozen=True, slots=True)
class QuantConv:
    """The integer constants of one quantized convolution or fully-connected operation."""

    input_zp: int
    filter_zp: int  # 0 for a per-channel filter
    multiplier: np.ndarray  # Q31 mantissas, int64: shape () per-tensor or [Cout] per-channel
    shift: np.ndarray  # their power-of-two exponents, same shape
    output_zp: int
    lo: int  # fused-activation range, in output units
    hi: int
    output_type: int


def check_exact(name: str, k: int) -> None:
    """Reject sums of `k` terms whose float64 accumulation might not be exact (see the module docstring)."""
    if k * MAX_PRODUCT + BIAS_LIMIT >= EXACT_LIMIT:
        raise invalid(
            f"{name}: {k} products per output exceed the exact float64 accumulation bound "
            f"(K * 65025 + 2^31 < 2^53, K < {(EXACT_LIMIT - BIAS_LIMIT) // MAX_PRODUCT})"
        )


def _f32(value: float) -> float:
    """A scale as NNAPI stores it (float32), widened to float64 for the multiplier arithmetic."""
    return float(np.float32(value))


def _positive_scale(name: str, what: str, arg: ArgInfo) -> float:
    scale = _f32(arg.scale)
    if not scale > 0:
        raise invalid(f"{name}: {what} scale is {arg.scale}, expected a finite value > 0")
    return scale


def _check_filter_type(
    name: str, what: str, inp: ArgInfo, filt: ArgInfo, per_channel_dim: int | None
) -> None:
    allowed = [inp.type] + ([PER_CHANNEL] if per_channel_dim is not None else [])
    if filt.type not in allowed:
        want = " or ".join(type_label(t) for t in allowed)
        raise invalid(
            f"{name}: {what} has type {type_label(filt.type)}, expected {want} for a {type_label(inp.type)} input"
        )


def _per_channel_scales(name: str, filt: ArgInfo, bias: ArgInfo, channel_dim: int, cout: int) -> np.ndarray:
    """The checked per-channel filter scales as float64 (from float32)."""
    cq = filt.channel_quant
    if cq is None:
        raise invalid(f"{name}: per-channel filter has no channel quantization parameters")
    if cq.channel_dim != channel_dim:
        raise invalid(f"{name}: per-channel filter has channelDim {cq.channel_dim}, expected {channel_dim}")
    scales = np.asarray(cq.scales, dtype=np.float32).astype(F64)
    if scales.shape != (cout,):
        raise invalid(f"{name}: per-channel filter has {scales.size} scales, expected {cout}")
    if not np.all(scales > 0):
        raise invalid(f"{name}: per-channel filter scales must all be > 0, got {list(cq.scales)}")
    if filt.zero_point != 0:
        raise invalid(f"{name}: per-channel filter has zero point {filt.zero_point}, expected 0")
    if bias.scale != 0:
        raise invalid(
            f"{name}: bias scale is {bias.scale}; with a per-channel filter it must be 0 "
            "(each channel's bias scale is input scale * filter scale[c])"
        )
    return scales


def _check_bias_scale(name: str, what: str, bias: ArgInfo, product: float) -> None:
    """NNAPI's GetQuantizedConvolutionMultipler check: |s_x*s_w - s_b| <= 1e-6 * min(s_x*s_w, s_b)."""
    s_b = _f32(bias.scale)
    if not abs(product - s_b) <= 1e-6 * min(product, s_b):
        raise invalid(
            f"{name}: bias scale {bias.scale} must equal input scale * {what} scale = {product!r} "
            "(within a relative 1e-6)"
        )


def quant_signature(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    cout: int,
    activation: int,
    per_channel_dim: int | None,
    filter_what: str = "filter",
) -> QuantConv:
    """Check the types, scales and zero points of input 0 (input), 1 (filter), 2 (bias) and the output.

    `per_channel_dim` is the channelDim a TENSOR_QUANT8_SYMM_PER_CHANNEL filter must have, or
    None where per-channel filters are not allowed; `filter_what` names input 1 in messages.
    """
    inp, filt, bias, out = ins[0], ins[1], ins[2], outs[0]
    check_quant8(name, "input", inp)
    _check_filter_type(name, filter_what, inp, filt, per_channel_dim)
    expect_type(name, "bias", bias, OperandType.TENSOR_INT32)
    if bias.zero_point != 0:
        raise invalid(f"{name}: bias has zero point {bias.zero_point}, expected 0")
    check_same_type(name, "output", out, inp)
    s_x = _positive_scale(name, "input", inp)
    s_y = _positive_scale(name, "output", out)
    if filt.type == PER_CHANNEL:
        assert per_channel_dim is not None  # guaranteed by _check_filter_type
        products = s_x * _per_channel_scales(name, filt, bias, per_channel_dim, cout)
    else:
        product = s_x * _positive_scale(name, filter_what, filt)
        _check_bias_scale(name, filter_what, bias, product)
        products = np.asarray(product, dtype=F64)
    mult, shift = quantize_multipliers(products / s_y)
    lo, hi = activation_range(activation, out.type, out.scale, out.zero_point)
    zp_w = 0 if filt.type == PER_CHANNEL else filt.zero_point
    return QuantConv(inp.zero_point, zp_w, mult, shift, out.zero_point, lo, hi, out.type)


# ------------------------------------------------------------ run-time pieces


def input_bound(input_type: int, zero_point: int) -> int:
    """The largest |x - zero_point| an input of this 8-bit type can have."""
    qmin, qmax = QUANT8_RANGE[input_type]
    return max(zero_point - qmin, qmax - zero_point)


def accumulation_dtype(
    centred_weights: np.ndarray | None, k_axes: int | tuple[int, ...], x_bound: int
) -> type:
    """float32 when every partial sum provably stays below 2^24 (see the module docstring), else float64.

    `centred_weights` holds w - zp_w (None when the weights arrive at run time: float64);
    `k_axes` are its axes summed into one output.
    """
    if centred_weights is None or centred_weights.size == 0:
        return F64
    worst = float(np.abs(centred_weights).sum(axis=k_axes).max())
    return F32 if worst * x_bound < F32_EXACT_LIMIT else F64


def packed_weights(
    weights: ArgInfo,
    pack: Callable[[np.ndarray], np.ndarray],
    k_axes: int | tuple[int, ...],
    inp: ArgInfo,
    shape: tuple[int, ...],
) -> tuple[np.ndarray | None, type]:
    """Constant weights packed once as w - zp_w (None for run-time weights) and the accumulation dtype.

    `pack` turns the weight tensor into the float64 layout `shape` the kernel multiplies; `k_axes` are
    the packed axes summed into one output; the packed weights are returned in the chosen dtype, which
    travels with them through the compilation cache (packed array "weights").
    """
    if weights.value is None:
        return None, F64
    value = np.asarray(weights.value)
    bound = input_bound(inp.type, inp.zero_point)

    def compute() -> np.ndarray:
        centred = pack(value)
        return centred.astype(accumulation_dtype(centred, k_axes, bound))

    result = packed("weights", compute, shape=shape, dtypes=(F32, F64))
    return result, result.dtype.type


def centered(x: np.ndarray, zero_point: int, dtype: type = F64) -> np.ndarray:
    """`x - zero_point` as a new C-contiguous float array (one pass; also linearises strided views)."""
    out: np.ndarray = np.empty(x.shape, dtype=dtype)
    np.subtract(x, zero_point, out=out, dtype=dtype)
    return out


def centered_padded(x: np.ndarray, zero_point: int, g: Geometry, dtype: type = F64) -> np.ndarray:
    """`x - zero_point` [N,H,W,C] as floats surrounded by `g`'s padding of 0.

    Padding with 0 after centring is padding with the input zero point (real value 0).
    """
    if not g.padded:
        return centered(x, zero_point, dtype)
    n, h, w, c = x.shape
    t, left = g.pad_top, g.pad_left
    out = np.empty((n, h + t + g.pad_bottom, w + left + g.pad_right, c), dtype=dtype)
    out[:, :t] = 0.0
    out[:, t + h :] = 0.0
    out[:, t : t + h, :left] = 0.0
    out[:, t : t + h, left + w :] = 0.0
    np.subtract(x, zero_point, out=out[:, t : t + h, left : left + w], dtype=dtype)
    return out


def bias_i64(value: np.ndarray) -> np.ndarray:
    """An int32 bias as an int64 vector."""
    return np.asarray(value, dtype=np.int64).reshape(-1)


def requantize(acc: np.ndarray, bias: np.ndarray, q: QuantConv) -> np.ndarray:
    """Exact float accumulators, channels last, plus the int64 bias, to the 8-bit output.

    zp_y + MultiplyByQuantizedMultiplier(acc + bias, m_c, e_c), clamped to [lo, hi], in the output dtype.
    """
    total = acc.astype(np.int64)
    total += bias
    y = multiply_by_quantized_multiplier(total, q.multiplier, q.shift)
    y += q.output_zp
    return saturate(y, q.lo, q.hi, q.output_type)
