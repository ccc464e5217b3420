"""TANH: hyperbolic tangent, elementwise.

8-bit (TENSOR_QUANT8_ASYMM, _SIGNED): NNAPI's uint8 kernel (TFLite's Tanh on gemmlowp fixed
point). The output scale must be 1/128 and the zero point 128 (0 signed). The centred input
c = x - zp is scaled to Q4.27; c <= -radius gives 0, c >= radius gives 255, the rest
gemmlowp::tanh then RoundingDivideByPOT(raw, 24) + 128 with 256 mapped to 255 (see
`saturating_table`). Signed inputs use the unsigned computation on x + 128 and subtract 128.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops import _bind
from driver.ops._base import ArgInfo, Run, register
from driver.ops._fixedpoint import tanh
from driver.ops._quant import is_quant8, rounding_divide_by_pot
from driver.ops._softmax_common import Q4_INTEGER_BITS, Table, prepare_lookup, saturating_table
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType

NAME = "TANH"


def _tanh(x: np.ndarray) -> np.ndarray:
    """Without the compiled kernels; with them float32 runs mk_tanh_f32 (kernels.c)."""
    return np.tanh(x)


def _q4_to_u8(q4: np.ndarray) -> np.ndarray:
    """F0 tanh rounded to 7 fractional bits plus the zero point 128; 256 (1.0) saturates to 255."""
    return np.minimum(rounding_divide_by_pot(tanh(q4, Q4_INTEGER_BITS), 31 - 7) + 128, 255)


def tanh_table(input_scale: float, zero_point: int) -> Table:
    """NNAPI's uint8 TANH of every input 0..255."""
    return saturating_table(NAME, input_scale, zero_point, _q4_to_u8)


@register(OperationType.TANH)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    if ins and is_quant8(ins[0].type):
        return prepare_lookup(NAME, ins, outs, 1 / 128, 128, tanh_table)
    return prepare_unary(
        NAME, ins, outs, _tanh, quiet=True, compiled=("mk_tanh_f32", _bind.CALL_TANH_F32)
    )  # tanh never overflows
