"""MEAN: arithmetic mean of input 0 over the axes of input 1 (TENSOR_INT32); input 2 is keep_dims (INT32, > 0 keeps).

Quant8: the output has the input's type, any scale and zero point. Over the n
reduced elements, acc = sum(x - zp_in) exactly (int64), then
round(acc * s_in / (s_out * n)) by the precision-preserving `rescale`, plus
zp_out, saturated. NNAPI 1.3's CPU reference (TFLite's reference Mean<T, int32>)
instead truncates sum(x) / n on the raw values and requires the output to keep
the input's scale and zero point; with equal quantization the two differ by at
most one unit (this kernel rounds to nearest, the reference rounds toward zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._qelementwise import f32, quant8_output, rescale
from driver.ops._quant import QUANT8_RANGE, saturate
from driver.ops._reduce import QuantReducer, prepare_reduce
from mlts.hal.enums import OperandType, OperationType


def _quant_mean(name: str, x_info: ArgInfo, out: ArgInfo) -> QuantReducer:
    quant8_output(name, "output 0", out, x_info)
    lo, hi = QUANT8_RANGE[out.type]
    s_in, s_out = f32(x_info.scale), f32(out.scale)
    zp_in, zp_out = x_info.zero_point, out.zero_point

    def mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        n = max(math.prod(x.shape[a] for a in axes), 1)
        acc = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64) - n * zp_in
        y = rescale(acc, s_in / (s_out * n), 255 * n) + zp_out
        return saturate(y, lo, hi, out.type)

    return mean


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """np.mean's float arithmetic (its sum, then one division by the count) without its Python layers."""
    total = np.add.reduce(x, axis=axis, keepdims=keepdims)  # type: ignore[call-overload]
    return np.true_divide(total, math.prod(x.shape[a] for a in axis))


@register(OperationType.MEAN)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_reduce("MEAN", ins, outs, _mean, OperandType.INT32, quant=_quant_mean)
