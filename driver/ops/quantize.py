"""QUANTIZE: TENSOR_FLOAT32 (or TENSOR_FLOAT16) to TENSOR_QUANT8_ASYMM or _SIGNED by the output's scale and zero point.

As NNAPI's reference: q = zp + std::round(x / scale), the division in float32
(a float16 input is widened first, as C++ promotes it), rounding half away
from zero, then clamped to the type's range; +-inf saturate and NaN gives the
type's maximum (std::min(255.0f, NaN) returns 255.0f). onnxruntime's
QuantizeLinear rounds half to even, so the two differ only at exact ties.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, expect_type, register
from driver.ops._qelementwise import check_quant_params
from driver.ops._quant import QUANT8_DTYPE, QUANT8_RANGE, check_quant8
from mlts.hal.enums import OperandType, OperationType

NAME = "QUANTIZE"


def round_half_away(q: np.ndarray) -> np.ndarray:
    """std::round of float32 values, exact in float64 (q + 0.5 is representable there)."""
    q64 = q.astype(np.float64)
    return np.copysign(np.floor(np.abs(q64) + 0.5), q64)


@register(OperationType.QUANTIZE)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (1,), outs)
    expect_type(NAME, "input", ins[0], OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16)
    out = outs[0]
    check_quant8(NAME, "output 0", out)
    check_quant_params(NAME, "output 0", out)
    scale = np.float32(out.scale)
    lo, hi = QUANT8_RANGE[out.type]
    dtype = QUANT8_DTYPE[out.type]

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = np.asarray(args[0]).astype(np.float32, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.clip(round_half_away(x / scale) + out.zero_point, lo, hi)
        y[np.isnan(y)] = hi
        return [y.astype(dtype)]

    return run
