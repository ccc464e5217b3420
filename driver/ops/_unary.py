"""What the elementwise float32 and float16 (see `_adapt`) operations share: one input tensor, one output of the same shape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, expect_type
from driver.ops._params import float_outputs, float_tensor
from driver.ops._workspace import address, output
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
    compiled: tuple[str, int] | None = None,
) -> Run:
    """A kernel applying `fn` to input 0; inputs after the first are parameters the caller already parsed.

    With `int32`, a TENSOR_INT32 input (and output) is accepted too and `fn` computes on int32 arrays.
    With `quiet`, `fn` raises no floating-point warning for any input (infinities and NaN included),
    so it runs without the cost of silencing them.
    With `compiled` (the compiled kernels' function for float32 arrays, of arguments input, output
    and element count, and its `_bind` call kind), float32 input runs that function instead of `fn`
    when the kernels are loaded, bound (driver.bound_steps) or not; `fn` must then never warn.
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
    if compiled is not None and _fast.enabled():
        return _compiled(compiled, fn)

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


def _compiled(compiled: tuple[str, int], fn: Elementwise) -> Run:
    """The float32 kernel calling the compiled function `compiled` names into the step's output
    (`fn` for other inputs: there are none but in direct calls of the kernel), and its `bind`."""
    call = getattr(_fast.LIB, compiled[0])
    kind = compiled[1]
    f32 = np.float32

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        if type(x) is not np.ndarray or x.dtype != f32:
            return [np.asarray(fn(np.asarray(x)), dtype=f32)]
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        y = output(x.shape, f32)
        call(address(x), address(y), x.size)
        return [y]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep:
        """`run`'s compiled call for a C-contiguous float32 input (driver.bound_steps)."""
        return _bind.bind_unary_f32(kind, ptrs[0], shapes[0])

    return Kernel(run, binding=Binding(bind))
