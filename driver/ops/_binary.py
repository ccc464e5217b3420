"""What ADD, SUB, MUL, DIV, MAXIMUM and MINIMUM share: a broadcasting float32 ufunc, then the fused activation if the op has one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._activation import apply_activation, parse_activation
from driver.ops._base import ArgInfo, Run, expect_count
from driver.ops._params import float_outputs, float_tensor
from mlts.hal.errors import invalid


def _broadcast(name: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        raise invalid(
            f"{name}: input shapes {a} and {b} do not broadcast (each dimension must match or be 1)"
        ) from None


def prepare_binary(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    ufunc: np.ufunc,
    *,
    fused_activation: bool = True,
) -> Run:
    """A kernel computing `ufunc(a, b)` with NumPy broadcasting, then the activation of input 2 (when the op has one)."""
    expect_count(name, ins, (3,) if fused_activation else (2,), outs)
    float_tensor(name, "input 0", ins[0])
    float_tensor(name, "input 1", ins[1])
    float_outputs(name, outs)
    act = parse_activation(name, ins, 2) if fused_activation else 0
    sa, sb = ins[0].shape, ins[1].shape
    if sa and sb and 0 not in sa and 0 not in sb:
        _broadcast(name, sa, sb)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        a, b = args[0], args[1]
        out = np.empty(_broadcast(name, a.shape, b.shape), dtype=np.float32)
        # Division by zero gives inf/nan as in IEEE float; no warning spam.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ufunc(a, b, out=out)
        return [apply_activation(act, out)]

    return run
