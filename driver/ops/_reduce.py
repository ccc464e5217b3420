"""What MEAN and the REDUCE_* operations share: axes (input 1), keep_dims (input 2), NNAPI's [1] for a full reduction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count
from driver.ops._params import (
    bool_param,
    float_outputs,
    float_tensor,
    int_param,
    int_tensor_input,
    int_values,
    known_rank,
    normalize_axis,
)
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid

Reducer = Callable[..., np.ndarray]  # numpy-style reducer: fn(x, axis=tuple, keepdims=bool)


def _axes(name: str, values: np.ndarray, rank: int) -> tuple[int, ...]:
    if values.ndim > 1:
        raise invalid(f"{name}: axes tensor has rank {values.ndim}, expected 1")
    # Repeated axes are allowed and reduce once.
    return tuple(sorted({normalize_axis(name, "axis", int(a), rank) for a in values.reshape(-1)}))


def prepare_reduce(
    name: str, ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], fn: Reducer, keep_type: OperandType
) -> Run:
    """A kernel reducing input 0 with `fn` over the axes of input 1; keep_dims is INT32 (> 0) or BOOL."""
    expect_count(name, ins, (3,), outs)
    float_tensor(name, "input", ins[0])
    float_outputs(name, outs)
    axes = int_tensor_input(name, "axes", ins[1])
    rank = known_rank(ins[0])
    if axes is not None and rank is not None:
        _axes(name, axes, rank)
    if keep_type == OperandType.BOOL:
        keep = bool_param(name, "keep_dims", ins, 2)
    else:
        keep = int_param(name, "keep_dims", ins, 2) > 0

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        ax = _axes(name, int_values(axes, args[1]), x.ndim)
        y = np.asarray(fn(x, axis=ax, keepdims=keep), dtype=np.float32)
        # NNAPI: reducing every dimension without keep_dims yields shape [1], not a scalar.
        return [y.reshape(1) if y.ndim == 0 else y]

    return run
