"""FULLY_CONNECTED: input flattened to [batch, input_size] times weights[units, input_size]^T, plus bias and activation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._activation import apply_activation, parse_activation
from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._conv_common import bias_vector, constant_or_none
from driver.ops._params import as_f32, float_outputs, float_tensor
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "FULLY_CONNECTED"


def pack_weights(w: np.ndarray) -> np.ndarray:
    """[units, input_size] to contiguous [input_size, units]."""
    return as_f32(np.asarray(w).T)


@register(OperationType.FULLY_CONNECTED)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (4,), outs)
    for i, what in enumerate(("input", "weights", "bias")):
        float_tensor(NAME, what, ins[i])
    float_outputs(NAME, outs)
    if 0 < len(ins[0].shape) < 2:
        raise invalid(
            f"{NAME}: input has rank {len(ins[0].shape)} (shape {ins[0].shape}), expected rank >= 2"
        )
    wshape = ins[1].value.shape if ins[1].value is not None else ins[1].shape
    if len(wshape) != 2 or 0 in wshape:
        raise invalid(f"{NAME}: weights shape is {tuple(wshape)}, expected a fully known [units, input_size]")
    units, size = (int(d) for d in wshape)
    bshape = ins[2].value.shape if ins[2].value is not None else ins[2].shape
    if tuple(bshape) not in ((units,), (0,), ()):
        raise invalid(f"{NAME}: bias shape is {tuple(bshape)}, expected ({units},)")
    act = parse_activation(NAME, ins, 3)
    packed = constant_or_none(ins[1], pack_weights)
    bias = constant_or_none(ins[2], bias_vector)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        if x.ndim < 2 or x.size % size:
            raise invalid(f"{NAME}: input shape {x.shape} cannot be flattened to [batch, {size}]")
        w = packed if packed is not None else pack_weights(args[1])
        y = x.reshape(-1, size) @ w
        y += bias if bias is not None else bias_vector(args[2])
        return [apply_activation(act, y)]

    return run
