"""What MEAN and the REDUCE_* operations share: axes (input 1), keep_dims (input 2), NNAPI's [1] for a full reduction.

An op that passes `quant` also takes quant8 input: the factory sees the input
and output operands at prepare time and returns the reduction of the 8-bit
values into the output's type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, expect_type
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
from driver.ops._qelementwise import tensor_kind
from driver.ops._quant import check_same_quant
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid

Reducer = Callable[..., np.ndarray]  # numpy-style reducer: fn(x, axis=tuple, keepdims=bool)
# (8-bit input, axes, keep_dims) -> output of the output operand's dtype.
QuantReducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]
# (op name, input operand, output operand) -> QuantReducer; raises INVALID_ARGUMENT for a bad signature.
QuantReducerFactory = Callable[[str, ArgInfo, ArgInfo], QuantReducer]


def _axes(name: str, values: np.ndarray, rank: int) -> tuple[int, ...]:
    if values.ndim > 1:
        raise invalid(f"{name}: axes tensor has rank {values.ndim}, expected 1")
    # Repeated axes are allowed and reduce once.
    return tuple(sorted({normalize_axis(name, "axis", int(a), rank) for a in values.reshape(-1)}))


def prepare_reduce(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    fn: Reducer,
    keep_type: OperandType,
    quant: QuantReducerFactory | None = None,
    *,
    boolean: bool = False,
) -> Run:
    """A kernel reducing input 0 with `fn` over the axes of input 1; keep_dims is INT32 (> 0) or BOOL.

    With `boolean`, input and output are TENSOR_BOOL8 (REDUCE_ALL, REDUCE_ANY)."""
    expect_count(name, ins, (3,), outs)
    qfn: QuantReducer | None = None
    if boolean:
        expect_type(name, "input", ins[0], OperandType.TENSOR_BOOL8)
        expect_type(name, "output 0", outs[0], OperandType.TENSOR_BOOL8)
    elif quant is not None and tensor_kind(name, "input", ins[0]):
        qfn = quant(name, ins[0], outs[0])
    else:
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

    by_rank: dict[int, tuple[int, ...]] = {}  # constant axes, normalised once per input rank

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        ax = by_rank.get(x.ndim) if axes is not None else None
        if ax is None:
            ax = _axes(name, int_values(axes, args[1]), x.ndim)
            if axes is not None:
                by_rank[x.ndim] = ax
        if qfn is not None:
            y = qfn(x, ax, keep)
        elif boolean:
            # TENSOR_BOOL8: any non-zero byte is true.
            y = np.asarray(fn(x.view(np.uint8) != 0, axis=ax, keepdims=keep), dtype=np.bool_)
        else:
            y = np.asarray(fn(x, axis=ax, keepdims=keep), dtype=np.float32)
        # NNAPI: reducing every dimension without keep_dims yields shape [1], not a scalar.
        return [y.reshape(1) if y.ndim == 0 else y]

    return run


def raw_quant(fn: Reducer) -> QuantReducerFactory:
    """The quant8 form of REDUCE_MAX / REDUCE_MIN: the output shares the input's type, scale and zero
    point, so the reduction picks among the raw 8-bit values."""

    def factory(name: str, x: ArgInfo, out: ArgInfo) -> QuantReducer:
        check_same_quant(name, "output 0", out, x, "input")
        return lambda v, axes, keep: np.asarray(fn(v, axis=axes, keepdims=keep), dtype=v.dtype)

    return factory
