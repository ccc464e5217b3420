"""LOGISTIC: 1 / (1 + exp(-x)), elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _logistic(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(1 + np.exp(-x))


@register(OperationType.LOGISTIC)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("LOGISTIC", ins, outs, _logistic)
