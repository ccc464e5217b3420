"""AVERAGE_POOL_2D: mean of each window over its valid (non-padding) elements, plus fused activation.

Quant8: the output shares the input's scale and zero point. Over the n valid
elements of a window, the average is (sum + n // 2) // n of the uint8 values
(TFLite's uint8 reference: round half up), then clamped to the activation
range. Signed input is computed on the values + 128, then shifted back, so
int8 results equal the uint8 ones up to the offset, bit for bit. NNAPI's int8
reference instead rounds ties away from zero on the signed sum: at an exact
tie with a negative sum (e.g. the average -2.5) it gives one unit less (-3,
where this kernel gives -2).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._pooling import prepare_pool, window_sum
from driver.ops._window import Geometry
from mlts.hal.enums import OperationType


def _average(xp: np.ndarray, g: Geometry) -> np.ndarray:
    acc = window_sum(xp, g)
    acc /= g.valid_counts()
    return acc


def _quant_average(x: np.ndarray, g: Geometry) -> np.ndarray:
    offset = 128 if x.dtype == np.int8 else 0
    acc = window_sum(g.pad(x.astype(np.int32) + offset, 0), g, dtype=np.int32)
    n = g.valid_counts().astype(np.int32)
    return (acc + n // 2) // n - offset


@register(OperationType.AVERAGE_POOL_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_pool("AVERAGE_POOL_2D", ins, outs, _average, 0.0, quant=_quant_average)
