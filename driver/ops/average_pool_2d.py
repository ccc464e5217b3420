"""AVERAGE_POOL_2D: mean of each window over its valid (non-padding) elements, plus fused activation."""

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


@register(OperationType.AVERAGE_POOL_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_pool("AVERAGE_POOL_2D", ins, outs, _average, 0.0)
