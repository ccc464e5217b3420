"""EXPAND_DIMS: insert a size-1 dimension at axis (input 1, INT32 in [-(rank+1), rank])."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._params import float_outputs, float_tensor, int_param, known_rank, normalize_axis
from mlts.hal.enums import OperationType

NAME = "EXPAND_DIMS"


@register(OperationType.EXPAND_DIMS)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (2,), outs)
    float_tensor(NAME, "input", ins[0])
    float_outputs(NAME, outs)
    axis = int_param(NAME, "axis", ins, 1)
    rank = known_rank(ins[0])
    if rank is not None:
        normalize_axis(NAME, "axis", axis, rank + 1)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        return [np.expand_dims(x, normalize_axis(NAME, "axis", axis, x.ndim + 1)).copy()]

    return run
