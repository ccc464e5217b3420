"""FLOOR: the largest integer <= x, elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _floor(x: np.ndarray) -> np.ndarray:
    return np.floor(x)


@register(OperationType.FLOOR)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("FLOOR", ins, outs, _floor)
