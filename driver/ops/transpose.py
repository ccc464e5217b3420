"""TRANSPOSE: dimensions permuted by input 1 (TENSOR_INT32), or reversed when it is omitted.

Two inputs, as NNAPI requires; input 1 may be omitted (NO_VALUE, or a model input left without a value).
Float32, or quant8 with the output sharing the input's type, scale and zero point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._params import int_tensor_input, int_values, is_absent
from driver.ops._qelementwise import moving_signature
from driver.ops._workspace import output
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "TRANSPOSE"


def _perm(values: np.ndarray, rank: int) -> tuple[int, ...]:
    perm = tuple(int(p) for p in values.reshape(-1))
    if sorted(perm) != list(range(rank)):
        raise invalid(f"{NAME}: perm {list(perm)} is not a permutation of 0..{rank - 1}")
    return perm


@register(OperationType.TRANSPOSE)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (2,), outs)
    moving_signature(NAME, ins[0], outs)
    reverse = is_absent(ins, 1)
    perm = None if reverse else int_tensor_input(NAME, "perm", ins[1])
    if perm is not None and ins[0].shape:
        _perm(perm, len(ins[0].shape))

    by_rank: dict[int, tuple[int, ...]] = {}  # a constant perm, checked once per input rank

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        axes = by_rank.get(x.ndim)
        if axes is None:
            axes = tuple(range(x.ndim))[::-1] if reverse else _perm(int_values(perm, args[1]), x.ndim)
            if reverse or perm is not None:
                by_rank[x.ndim] = axes
        return [permuted(x, axes)]

    return run


def permuted(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous copy of `x` with its dimensions permuted (in the step's reused output buffer).

    When the new last dimension is short and was not last before (NCHW to NHWC of an image), NumPy's
    element-by-element copy is slow: one strided copy per index of that dimension is several times faster.
    """
    xt = x.transpose(axes)
    y = output(xt.shape, x.dtype)
    last = xt.shape[-1] if xt.ndim else 0
    if 1 < last <= SHORT_LAST and axes[-1] != x.ndim - 1 and xt.size >= 16 * last:
        for j in range(last):
            y[..., j] = xt[..., j]
    else:
        np.copyto(y, xt)
    return y


#: The longest last dimension copied index by index.
SHORT_LAST = 8
