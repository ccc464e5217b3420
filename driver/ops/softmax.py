"""SOFTMAX: exp(beta * (x - max)) / sum along axis (input 2, default -1); input 1 is beta."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._params import float_outputs, float_tensor
from driver.ops._softmax_common import parse_beta_axis, shifted_logits
from mlts.hal.enums import OperationType

NAME = "SOFTMAX"


@register(OperationType.SOFTMAX)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (2, 3), outs)
    float_tensor(NAME, "input", ins[0])
    float_outputs(NAME, outs)
    beta, axis = parse_beta_axis(NAME, ins)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        z, ax = shifted_logits(NAME, args[0], beta, axis)
        np.exp(z, out=z)
        z /= z.sum(axis=ax, keepdims=True)
        return [z]

    return run
