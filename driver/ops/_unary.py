"""What the elementwise float32 and float16 (see `_adapt`) operations share: one input tensor, one output of the same shape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, expect_type
from driver.ops._params import float_outputs, float_tensor
from mlts.hal.enums import OperandType

# x -> a fresh float32 array of x's shape.
Elementwise = Callable[[np.ndarray], np.ndarray]


def prepare_unary(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    fn: Elementwise,
    n_in: int = 1,
    int32: bool = False,
    quiet: bool = False,
) -> Run:
    """A kernel applying `fn` to input 0; inputs after the first are parameters the caller already parsed.

    With `int32`, a TENSOR_INT32 input (and output) is accepted too and `fn` computes on int32 arrays.
    With `quiet`, `fn` raises no floating-point warning for any input (infinities and NaN included),
    so it runs without the cost of silencing them.
    """
    expect_count(name, ins, (n_in,), outs)
    if int32 and ins[0].type == OperandType.TENSOR_INT32:
        expect_type(name, "output 0", outs[0], OperandType.TENSOR_INT32)

        def run_int(args: Sequence[Any]) -> list[np.ndarray]:
            with np.errstate(over="ignore"):
                return [np.asarray(fn(np.asarray(args[0], dtype=np.int32)), dtype=np.int32)]

        return run_int
    float_tensor(name, "input", ins[0])
    float_outputs(name, outs)

    if quiet:

        def run_quiet(args: Sequence[Any]) -> list[np.ndarray]:
            return [np.asarray(fn(np.asarray(args[0])), dtype=np.float32)]

        return run_quiet

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        # Overflow to inf and nan for out-of-domain inputs are the IEEE answers; silence the warnings.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            y = fn(np.asarray(args[0]))
        return [np.asarray(y, dtype=np.float32)]

    return run
