"""Parsing of operation parameters: typed scalars, constant int tensors, optional trailing inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, const_scalar, expect_type
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid

F32 = np.float32


def is_absent(ins: Sequence[ArgInfo], index: int) -> bool:
    """An optional input that is missing from the list or marked NO_VALUE."""
    return index >= len(ins) or ins[index].omitted


def int_param(name: str, what: str, ins: Sequence[ArgInfo], index: int, *, minimum: int | None = None) -> int:
    """A constant INT32 scalar, at least `minimum` when given."""
    expect_type(name, what, ins[index], OperandType.INT32)
    value = int(const_scalar(name, what, ins[index]))
    if minimum is not None and value < minimum:
        raise invalid(f"{name}: {what} is {value}, expected a value >= {minimum}")
    return value


def float_param(name: str, what: str, ins: Sequence[ArgInfo], index: int) -> float:
    """A constant FLOAT32 scalar."""
    expect_type(name, what, ins[index], OperandType.FLOAT32)
    return float(const_scalar(name, what, ins[index]))


def bool_param(name: str, what: str, ins: Sequence[ArgInfo], index: int) -> bool:
    """A constant BOOL scalar."""
    expect_type(name, what, ins[index], OperandType.BOOL)
    return bool(const_scalar(name, what, ins[index]))


def optional_int(
    name: str, what: str, ins: Sequence[ArgInfo], index: int, default: int, *, minimum: int | None = None
) -> int:
    """An optional INT32 scalar; `default` when absent or omitted."""
    return default if is_absent(ins, index) else int_param(name, what, ins, index, minimum=minimum)


def optional_bool(name: str, what: str, ins: Sequence[ArgInfo], index: int, default: bool = False) -> bool:
    """An optional BOOL scalar; `default` when absent or omitted."""
    return default if is_absent(ins, index) else bool_param(name, what, ins, index)


def float_tensor(name: str, what: str, arg: ArgInfo) -> None:
    """Check that `arg` is a TENSOR_FLOAT32 (TENSOR_FLOAT16 operands arrive as TENSOR_FLOAT32, see `_adapt`)."""
    expect_type(name, what, arg, OperandType.TENSOR_FLOAT32)


def float_outputs(name: str, outs: Sequence[ArgInfo]) -> None:
    """Check that every output is a TENSOR_FLOAT32."""
    for i, out in enumerate(outs):
        expect_type(name, f"output {i}", out, OperandType.TENSOR_FLOAT32)


def known_rank(arg: ArgInfo) -> int | None:
    """The rank of a tensor operand, or None when its rank is unknown (empty shape)."""
    return len(arg.shape) if arg.shape else None


def normalize_axis(name: str, what: str, axis: int, rank: int) -> int:
    """`axis` in [-rank, rank) mapped to [0, rank)."""
    if not -rank <= axis < rank:
        raise invalid(f"{name}: {what} {axis} is out of range for rank {rank}, expected [{-rank}, {rank})")
    return axis % rank


def as_f32(value: Any) -> np.ndarray:
    """A float32 C-contiguous copy-if-needed of `value`."""
    return np.ascontiguousarray(value, dtype=F32)


def int_tensor_input(name: str, what: str, arg: ArgInfo) -> np.ndarray | None:
    """A TENSOR_INT32 input: its value (int64) when constant, None when it arrives at run time."""
    expect_type(name, what, arg, OperandType.TENSOR_INT32)
    return None if arg.value is None else np.asarray(arg.value, dtype=np.int64)


def int_values(constant: np.ndarray | None, runtime: Any) -> np.ndarray:
    """The prepare-time constant if there was one, else the run-time argument, as int64."""
    return constant if constant is not None else np.asarray(runtime, dtype=np.int64)
