"""ABS: |x|, elementwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._unary import prepare_unary
from mlts.hal.enums import OperationType


def _abs(x: np.ndarray) -> np.ndarray:
    return np.abs(x)


@register(OperationType.ABS)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_unary("ABS", ins, outs, _abs)
