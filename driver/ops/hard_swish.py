"""HARD_SWISH: x * min(max(x + 3, 0), 6) / 6, elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6) / np.float32(6)


@register(OperationType.HARD_SWISH)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("HARD_SWISH", ins, outs, _hard_swish)
