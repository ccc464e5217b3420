"""LOGISTIC: 1 / (1 + exp(-x)), elementwise.

8-bit (TENSOR_QUANT8_ASYMM, _SIGNED): NNAPI's uint8 kernel (TFLite's Logistic on gemmlowp fixed
point). The output scale must be 1/256 and the zero point 0 (-128 signed). The centred input
c = x - zp is scaled to Q4.27; c <= -radius gives 0, c >= radius gives 255, the rest
gemmlowp::logistic then RoundingDivideByPOT(raw, 23) with 256 mapped to 255 (see
`saturating_table`). Signed inputs use the unsigned computation on x + 128 and subtract 128.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops import _bind
from driver.ops._base import ArgInfo, Run, register
from driver.ops._fixedpoint import logistic
from driver.ops._quant import is_quant8, rounding_divide_by_pot
from driver.ops._softmax_common import Q4_INTEGER_BITS, Table, prepare_lookup, saturating_table
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType

NAME = "LOGISTIC"


# exp(-x) is kept finite (at most ~3.4e38) by clamping -x here; for x below -88.72 the result is then
# about 3e-39 instead of exactly 0, and no overflow has to be silenced. This is the kernel without the
# compiled kernels; with them float32 runs mk_logistic_f32 (kernels.c: its exp clamps at 88.3, giving
# about 4.6e-39 there).
LOG_FLOAT32_MAX = np.float32(88.72283)


def _logistic(x: np.ndarray) -> np.ndarray:
    z = np.negative(x, dtype=np.float32)
    np.minimum(z, LOG_FLOAT32_MAX, out=z)
    np.exp(z, out=z)
    z += 1
    return np.reciprocal(z, out=z)


def _q4_to_u8(q4: np.ndarray) -> np.ndarray:
    """F0 logistic rounded to 8 fractional bits; 256 (1.0) saturates to 255."""
    return np.minimum(rounding_divide_by_pot(logistic(q4, Q4_INTEGER_BITS), 31 - 8), 255)


def logistic_table(input_scale: float, zero_point: int) -> Table:
    """NNAPI's uint8 LOGISTIC of every input 0..255."""
    return saturating_table(NAME, input_scale, zero_point, _q4_to_u8)


@register(OperationType.LOGISTIC)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    if ins and is_quant8(ins[0].type):
        return prepare_lookup(NAME, ins, outs, 1 / 256, 0, logistic_table)
    return prepare_unary(
        NAME, ins, outs, _logistic, quiet=True, compiled=("mk_logistic_f32", _bind.CALL_LOGISTIC_F32)
    )
