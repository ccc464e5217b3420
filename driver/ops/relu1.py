"""RELU1: x clamped to [-1, 1], elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._activation import relu1
from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _relu1(x: np.ndarray) -> np.ndarray:
    return relu1(x)


@register(OperationType.RELU1)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("RELU1", ins, outs, _relu1)
