"""RELU1: x clamped to [-1, 1], elementwise.

Quant8: the output shares the input's scale and zero point; the values are clamped to
the quantized bounds of the activation (`activation_range`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._activation import relu1
from driver.ops._base import ArgInfo, Run, register
from driver.ops._qelementwise import prepare_clamp, quantized_input
from driver.ops._unary import prepare_unary
from mlts.hal.enums import FusedActivationFunc, OperationType


def _relu1(x: np.ndarray) -> np.ndarray:
    return relu1(x)


@register(OperationType.RELU1)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    if quantized_input("RELU1", ins):
        return prepare_clamp("RELU1", ins, outs, FusedActivationFunc.RELU1)
    return prepare_unary("RELU1", ins, outs, _relu1)
