"""SLICE: the block of input 0 starting at begin (input 1) with size (input 2, -1 = to the end), both TENSOR_INT32.

Float32, TENSOR_INT32, or quant8 with the output sharing the input's type, scale and zero point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, expect_type, register
from driver.ops._params import int_tensor_input, int_values
from driver.ops._qelementwise import moving_signature
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "SLICE"


def _index(shape: tuple[int, ...], begin: np.ndarray, size: np.ndarray) -> tuple[slice, ...]:
    if begin.shape != (len(shape),) or size.shape != (len(shape),):
        raise invalid(
            f"{NAME}: begin {begin.tolist()} and size {size.tolist()} must each hold {len(shape)} values"
        )
    index = []
    for d, (dim, b, s) in enumerate(zip(shape, begin.tolist(), size.tolist(), strict=True)):
        end = dim if s == -1 else b + s
        if b < 0 or s < -1 or end > dim:
            raise invalid(f"{NAME}: dimension {d} of size {dim}: begin {b} and size {s} are out of range")
        index.append(slice(b, end))
    return tuple(index)


@register(OperationType.SLICE)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (3,), outs)
    if ins[0].type == OperandType.TENSOR_INT32:
        expect_type(NAME, "output 0", outs[0], OperandType.TENSOR_INT32)
    else:
        moving_signature(NAME, ins[0], outs)
    begin = int_tensor_input(NAME, "begin", ins[1])
    size = int_tensor_input(NAME, "size", ins[2])

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        return [x[_index(x.shape, int_values(begin, args[1]), int_values(size, args[2]))].copy()]

    if (
        begin is not None
        and size is not None
        and ins[0].type == OperandType.TENSOR_FLOAT32
        and _fast.enabled()
    ):
        b_c, s_c = begin, size

        def bind(
            shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
        ) -> _bind.BoundStep | None:
            """`run` as compiled block copies for a C-contiguous float32 input (driver.bound_steps)."""
            index = _index(shapes[0], b_c, s_c)
            starts = [sl.start for sl in index]
            sizes = [sl.stop - sl.start for sl in index]
            if 0 in sizes or 0 in shapes[0]:
                return None
            blocks = _bind.slice_blocks(shapes[0], starts, sizes)
            if blocks is None:
                return None
            return _bind.bind_copies(ptrs, blocks, tuple(sizes), np.dtype(np.float32))

        return Kernel(run, binding=Binding(bind))
    return run
