"""RELU6: x clamped to [0, 6], elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._activation import relu6
from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _relu6(x: np.ndarray) -> np.ndarray:
    return relu6(x)


@register(OperationType.RELU6)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("RELU6", ins, outs, _relu6)
