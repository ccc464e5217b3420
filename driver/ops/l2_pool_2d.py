"""L2_POOL_2D: sqrt of the mean of squares of each window's valid elements, plus fused activation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._pooling import prepare_pool, window_sum
from driver.ops._window import Geometry
from mlts.hal.enums import OperationType


def _l2(xp: np.ndarray, g: Geometry) -> np.ndarray:
    acc = window_sum(xp, g, square=True)
    acc /= g.valid_counts()
    return np.sqrt(acc, out=acc)


@register(OperationType.L2_POOL_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_pool("L2_POOL_2D", ins, outs, _l2, 0.0)
