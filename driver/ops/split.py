"""SPLIT: input 0 cut into num_splits (input 2) equal parts along axis (input 1, negative counts from the end).

Types: TENSOR_FLOAT32, TENSOR_INT32, TENSOR_QUANT8_ASYMM, TENSOR_QUANT8_ASYMM_SIGNED; every output has
the input's type (and scale and zero point when quantized). num_splits must be > 0, equal the number
of outputs and divide the axis dimension. Each output is a fresh contiguous copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, expect_type, register
from driver.ops._params import int_param, known_rank, normalize_axis
from driver.ops._qelementwise import check_quant_params
from driver.ops._quant import check_same_quant, check_same_type, is_quant8
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "SPLIT"
TYPES = (
    OperandType.TENSOR_FLOAT32,
    OperandType.TENSOR_INT32,
    OperandType.TENSOR_QUANT8_ASYMM,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
)


def _check_types(ins0: ArgInfo, outs: Sequence[ArgInfo]) -> None:
    """Every output has the input's type; quantized ones also its scale and zero point."""
    expect_type(NAME, "input 0", ins0, *TYPES)
    quant = is_quant8(ins0.type)
    if quant:
        check_quant_params(NAME, "input 0", ins0)
    for i, out in enumerate(outs):
        if quant:
            check_same_quant(NAME, f"output {i}", out, ins0, "input 0")
        else:
            check_same_type(NAME, f"output {i}", out, ins0)


def _check_divisible(dim: int, splits: int) -> None:
    if dim % splits:
        raise invalid(f"{NAME}: axis dimension {dim} is not divisible by num_splits {splits}")


@register(OperationType.SPLIT)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (3,), outs, len(outs))
    splits = int_param(NAME, "num_splits", ins, 2, minimum=1)
    if len(outs) != splits:
        raise invalid(f"{NAME}: num_splits is {splits} but the operation has {len(outs)} outputs")
    _check_types(ins[0], outs)
    axis = int_param(NAME, "axis", ins, 1)
    rank = known_rank(ins[0])
    if rank is not None:
        dim = ins[0].shape[normalize_axis(NAME, "axis", axis, rank)]
        if dim:
            _check_divisible(dim, splits)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        ax = normalize_axis(NAME, "axis", axis, x.ndim)
        _check_divisible(x.shape[ax], splits)
        return [part.copy() for part in np.split(x, splits, axis=ax)]

    return run
