"""DIV: a / b elementwise with NumPy broadcasting, then the fused activation (input 2)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo, Run, register
from driver.ops._binary import prepare_binary
from mlts.hal.enums import OperationType


@register(OperationType.DIV)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    return prepare_binary("DIV", ins, outs, np.divide)
