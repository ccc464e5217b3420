"""RESHAPE: the input's elements in a new shape (input 1, a 1-D TENSOR_INT32 that may hold one -1).

Float32, or quant8 with the output sharing the input's type, scale and zero point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._params import int_tensor_input, int_values
from driver.ops._qelementwise import moving_signature
from driver.ops._workspace import output
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "RESHAPE"
#: The input types whose RESHAPE binds (one byte copy; driver.bound_steps), with their dtypes.
BOUND_TYPES: dict[int, type] = {
    OperandType.TENSOR_FLOAT32: np.float32,
    OperandType.TENSOR_QUANT8_ASYMM: np.uint8,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
}


def target_shape(shape: np.ndarray, size: int) -> tuple[int, ...]:
    """`shape` with its -1 resolved so that it holds `size` elements."""
    dims = [int(d) for d in shape.reshape(-1)]
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in dims):
        raise invalid(f"{NAME}: shape {dims} must hold non-negative sizes and at most one -1")
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if unknown:
        if known == 0 or size % known:
            raise invalid(f"{NAME}: cannot infer the -1 of shape {dims} for {size} elements")
        dims[unknown[0]] = size // known
    elif known != size:
        raise invalid(f"{NAME}: shape {dims} holds {known} elements, the input has {size}")
    return tuple(dims)


@register(OperationType.RESHAPE)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (2,), outs)
    moving_signature(NAME, ins[0], outs)
    shape = int_tensor_input(NAME, "shape", ins[1])
    if shape is not None and shape.ndim != 1:
        raise invalid(f"{NAME}: shape tensor has rank {shape.ndim}, expected 1")

    by_size: dict[int, tuple[int, ...]] = {}  # a constant shape, resolved once per input size

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        dims = by_size.get(x.size) if shape is not None else None
        if dims is None:
            dims = target_shape(int_values(shape, args[1]), x.size)
            if shape is not None and len(by_size) < 8:
                by_size[x.size] = dims
        # A copy (in the step's reused buffer), so the output never aliases an input buffer.
        y = output(dims, x.dtype)
        np.copyto(y, x.reshape(dims))
        return [y]

    copied = BOUND_TYPES.get(ins[0].type)
    if shape is not None and copied is not None and _fast.enabled():

        def bind(
            shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
        ) -> _bind.BoundStep:
            """`run` as one compiled copy for a C-contiguous float32 or 8-bit input (driver.bound_steps)."""
            size = int(np.prod(shapes[0], dtype=np.int64))
            return _bind.bind_copy(ptrs[0], target_shape(shape, size), copied)

        return Kernel(run, binding=Binding(bind))
    return run
