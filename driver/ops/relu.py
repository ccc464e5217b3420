"""RELU: max(x, 0), elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._activation import relu
from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _relu(x: np.ndarray) -> np.ndarray:
    return relu(x)


@register(OperationType.RELU)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("RELU", ins, outs, _relu)
