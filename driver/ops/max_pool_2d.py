"""MAX_POOL_2D: maximum of each window's valid elements (padding never wins), plus fused activation.

Quant8: the output shares the input's scale and zero point; the maximum of the
raw values (padding is the type's lowest value, as TFLite's initial maximum),
clamped to the activation range.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._pooling import prepare_pool
from driver.ops._window import Geometry
from mlts.hal.enums import OperationType

# Padding value: the lowest float, which is also what a window of padding alone yields.
_LOWEST = float(np.finfo(np.float32).min)


def _max(xp: np.ndarray, g: Geometry) -> np.ndarray:
    taps = g.taps(xp)
    acc = np.array(next(taps), dtype=xp.dtype)
    for view in taps:
        np.maximum(acc, view, out=acc)
    return acc


def _quant_max(x: np.ndarray, g: Geometry) -> np.ndarray:
    return _max(g.pad(x, int(np.iinfo(x.dtype).min)), g)


@register(OperationType.MAX_POOL_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_pool("MAX_POOL_2D", ins, outs, _max, _LOWEST, quant=_quant_max)
