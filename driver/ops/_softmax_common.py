"""What SOFTMAX and LOG_SOFTMAX share (beta, axis, max-shifted logits), and what the 8-bit SOFTMAX,
LOGISTIC and TANH share: an output quantization fixed by NNAPI and, for the elementwise two, a
256-entry lookup table built at prepare."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count
from driver.ops._fixedpoint import calculate_input_radius, quantize_multiplier_greater_than_one, scale_input
from driver.ops._params import float_param, known_rank, normalize_axis, optional_int
from driver.ops._quant import check_quant8, check_same_type
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid


def parse_beta_axis(name: str, ins: Sequence[ArgInfo]) -> tuple[np.float32, int]:
    """beta (input 1, > 0) and axis (input 2, default -1), the axis checked against a known rank."""
    beta = float_param(name, "beta", ins, 1)
    if not beta > 0:
        raise invalid(f"{name}: beta is {beta}, expected a positive value")
    axis = optional_int(name, "axis", ins, 2, -1)
    rank = known_rank(ins[0])
    if rank is not None:
        normalize_axis(name, "axis", axis, rank)
    return np.float32(beta), axis


def shifted_logits(name: str, x: np.ndarray, beta: np.float32, axis: int) -> tuple[np.ndarray, int]:
    """beta * (x - max(x)) along `axis` (so exp never overflows) and the normalised axis."""
    ax = axis if 0 <= axis < x.ndim else normalize_axis(name, "axis", axis, x.ndim)
    z = x - np.maximum.reduce(x, axis=ax, keepdims=True)  # x.max without its Python layers
    if beta != 1:  # multiplying by 1 changes nothing
        z *= beta
    return z, ax


# ------------------------------------------------------------ 8-bit kernels with a fixed output quantization


def unsigned_zero_point(arg: ArgInfo) -> int:
    """The zero point of `arg` as NNAPI's uint8 kernels see it (signed operands are offset by 128)."""
    return arg.zero_point + (128 if arg.type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED else 0)


def check_fixed_output(name: str, inp: ArgInfo, out: ArgInfo, scale: float, zero_point_u8: int) -> None:
    """Input 0 is 8-bit quantized; the output has its type, scale `scale` and zero point
    `zero_point_u8` (uint8) or `zero_point_u8 - 128` (int8). NNAPI compares the scale as float32."""
    check_quant8(name, "input 0", inp)
    check_same_type(name, "output 0", out, inp)
    zero_point = zero_point_u8 - (128 if out.type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED else 0)
    if np.float32(out.scale) != np.float32(scale) or out.zero_point != zero_point:
        raise invalid(
            f"{name}: output 0 has scale {out.scale} and zero point {out.zero_point}, "
            f"expected scale {scale} and zero point {zero_point}"
        )


# The results of an unsigned kernel for the inputs 0..255 (int64 values in [0, 255]).
Table = np.ndarray
Q4_INTEGER_BITS = 4  # LOGISTIC and TANH read their input as Q4.27


def prepare_lookup(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    out_scale: float,
    out_zero_point_u8: int,
    make_table: Callable[[float, int], Table],
) -> Run:
    """An elementwise 8-bit kernel whose 256 possible results are computed once, at prepare.

    `make_table(input_scale, input_zero_point_u8)` runs NNAPI's uint8 kernel on
    every input value. A signed input x reads the entry of x + 128, minus 128:
    NNAPI's int8 result for these operations, bit for bit.
    """
    expect_count(name, ins, (1,), outs)
    check_fixed_output(name, ins[0], outs[0], out_scale, out_zero_point_u8)
    table = make_table(float(np.float32(ins[0].scale)), unsigned_zero_point(ins[0]))
    if ins[0].type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED:
        # Indexed by the int8's byte b: x + 128 == b ^ 0x80.
        by_byte = (table[np.arange(256) ^ 0x80] - 128).astype(np.int8)
    else:
        by_byte = table.astype(np.uint8)
    dtype = by_byte.dtype

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        return [by_byte[np.asarray(args[0], dtype=dtype).view(np.uint8)]]

    return run


def saturating_table(
    name: str, input_scale: float, zero_point: int, fn: Callable[[np.ndarray], Table]
) -> Table:
    """TFLite's uint8 LOGISTIC / TANH for every input 0..255 (input zero point `zero_point`).

    The centred input c = x - zp is scaled to Q4.27 by input_scale * 2^27
    (QuantizeMultiplierGreaterThanOne, MultiplyByQuantizedMultiplierGreaterThanOne);
    c <= -radius gives 0, c >= radius gives 255 (radius = CalculateInputRadius(4, left_shift)),
    and `fn` maps the Q4.27 raws of the others to their uint8 results.
    """
    real = input_scale * float(1 << (31 - Q4_INTEGER_BITS))
    multiplier, shift = quantize_multiplier_greater_than_one(name, "input scale * 2^27", real)
    radius = calculate_input_radius(Q4_INTEGER_BITS, shift)
    centred = np.arange(256, dtype=np.int64) - zero_point
    inside = np.abs(centred) < radius
    y = fn(scale_input(np.where(inside, centred, 0), multiplier, shift))
    return np.where(centred <= -radius, 0, np.where(centred >= radius, 255, y))
