"""SOFTMAX: exp(beta * (x - max)) / sum along axis (input 2, default -1); input 1 is beta.

8-bit (TENSOR_QUANT8_ASYMM, _SIGNED): NNAPI's uint8 kernel (TFLite's Softmax on gemmlowp fixed
point). The output scale must be 1/256 and the zero point 0 (-128 signed). Per row, d = x - max
lies in [-255, 0]; entries with d >= diff_min = -CalculateInputRadius(5, left_shift) contribute
exp_on_negative_values of d scaled to Q5.26 by beta * input_scale * 2^26 (at most 2^31 - 1,
QuantizeMultiplierGreaterThanOne); the sum is kept in Q12.19; GetReciprocal gives 2^n / sum;
the output is RoundingDivideByPOT(reciprocal * exp, n + 23) clamped to [0, 255], and 0 for the
entries below diff_min. The exponentials of the 256 possible d are a table built at prepare.
Signed inputs give the unsigned result minus 128 (d does not depend on the offset), as NNAPI's
int8 path does.

Where the C++ reference is undefined this kernel takes the exact value: a row sum of 512 or more
(e.g. 512 equal maxima) makes the final shift exceed 31, which we still round correctly; a sum
of 4096 or more overflows the int32 accumulator, which we saturate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._fixedpoint import (
    INT32_MAX,
    calculate_input_radius,
    exp_on_negative_values,
    mul,
    quantize_multiplier_greater_than_one,
    reciprocal,
    rescale,
    scale_input,
)
from driver.ops._params import float_outputs, float_tensor, normalize_axis
from driver.ops._quant import QUANT8_DTYPE, is_quant8, rounding_divide_by_pot
from driver.ops._softmax_common import check_fixed_output, parse_beta_axis, shifted_logits
from mlts.hal.enums import OperandType, OperationType

NAME = "SOFTMAX"
SCALED_DIFF_BITS = 5  # d is scaled to Q5.26
ACCUMULATION_BITS = 12  # the sum of exponentials is Q12.19


@register(OperationType.SOFTMAX)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (2, 3), outs)
    if is_quant8(ins[0].type):
        return prepare_quant8(ins, outs)
    float_tensor(NAME, "input", ins[0])
    float_outputs(NAME, outs)
    beta, axis = parse_beta_axis(NAME, ins)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        z, ax = shifted_logits(NAME, args[0], beta, axis)
        np.exp(z, out=z)
        z /= np.add.reduce(z, axis=ax, keepdims=True)  # z.sum without its Python layers
        return [z]

    return run


def exp_tables(beta: float, input_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """For d = -255 .. 0: exp(beta * input_scale * d) as F0 raws and as Q12.19 raws (0 below diff_min)."""
    real = min(beta * input_scale * float(1 << (31 - SCALED_DIFF_BITS)), float((1 << 31) - 1))
    multiplier, shift = quantize_multiplier_greater_than_one(NAME, "beta * input scale * 2^26", real)
    diff_min = -calculate_input_radius(SCALED_DIFF_BITS, shift)
    d = np.arange(-255, 1, dtype=np.int64)
    used = d >= diff_min
    scaled = scale_input(np.where(used, d, 0), multiplier, shift)
    exp_f0 = np.where(used, exp_on_negative_values(scaled, SCALED_DIFF_BITS), 0)
    return exp_f0, rescale(exp_f0, 0, ACCUMULATION_BITS)


def prepare_quant8(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    check_fixed_output(NAME, ins[0], outs[0], 1 / 256, 0)
    beta, axis = parse_beta_axis(NAME, ins)
    exp_f0, exp_accum = exp_tables(float(beta), float(np.float32(ins[0].scale)))
    dtype = QUANT8_DTYPE[ins[0].type]
    offset = 128 if ins[0].type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED else 0

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = np.asarray(args[0])
        ax = normalize_axis(NAME, "axis", axis, x.ndim)
        if x.size == 0:
            return [np.empty(x.shape, dtype)]
        index = x.astype(np.int16)
        index -= index.max(axis=ax, keepdims=True)
        index += 255  # d + 255: the table row of each entry
        total = np.minimum(exp_accum[index].sum(axis=ax, keepdims=True), INT32_MAX)
        inv, bits_over_unit = reciprocal(total, ACCUMULATION_BITS)
        y = rounding_divide_by_pot(mul(inv, exp_f0[index]), bits_over_unit + 31 - 8)
        return [(np.clip(y, 0, 255) - offset).astype(dtype)]

    return run
