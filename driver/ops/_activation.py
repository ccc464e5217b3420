"""The fused activation (NONE, RELU, RELU1, RELU6) carried by arithmetic, convolution and pooling ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from driver.ops._base import ArgInfo
from driver.ops._params import int_param
from mlts.hal.enums import FusedActivationFunc, codes
from mlts.hal.errors import invalid


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(x, 0.0, out=out)


def relu1(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Clamp to [-1, 1]."""
    return np.clip(x, -1.0, 1.0, out=out)


def relu6(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Clamp to [0, 6]."""
    return np.clip(x, 0.0, 6.0, out=out)


_FUNCS: dict[int, Callable[..., np.ndarray]] = {
    FusedActivationFunc.RELU: relu,
    FusedActivationFunc.RELU1: relu1,
    FusedActivationFunc.RELU6: relu6,
}


def parse_activation(name: str, ins: Sequence[ArgInfo], index: int) -> int:
    """The constant fused-activation code at input `index`, checked against FusedActivationFunc."""
    code = int_param(name, "fused activation", ins, index)
    if code not in codes(FusedActivationFunc):
        valid = ", ".join(f"{a.value} ({a.name})" for a in FusedActivationFunc)
        raise invalid(f"{name}: fused activation is {code}, expected one of {valid}")
    return code


def apply_activation(code: int, x: np.ndarray) -> np.ndarray:
    """Apply activation `code` to `x` in place (x must be a fresh, writable array) and return it."""
    fn = _FUNCS.get(code)
    return x if fn is None else fn(x, out=x)
