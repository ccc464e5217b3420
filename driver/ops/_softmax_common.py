"""What SOFTMAX and LOG_SOFTMAX share: the beta and axis parameters and the max-shifted logits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops._base import ArgInfo
from driver.ops._params import float_param, known_rank, normalize_axis, optional_int
from mlts.hal.errors import invalid


def parse_beta_axis(name: str, ins: Sequence[ArgInfo]) -> tuple[np.float32, int]:
    """beta (input 1, > 0) and axis (input 2, default -1), the axis checked against a known rank."""
    beta = float_param(name, "beta", ins, 1)
    if not beta > 0:
        raise invalid(f"{name}: beta is {beta}, expected a positive value")
    axis = optional_int(name, "axis", ins, 2, -1)
    rank = known_rank(ins[0])
    if rank is not None:
        normalize_axis(name, "axis", axis, rank)
    return np.float32(beta), axis


def shifted_logits(name: str, x: np.ndarray, beta: np.float32, axis: int) -> tuple[np.ndarray, int]:
    """beta * (x - max(x)) along `axis` (so exp never overflows) and the normalised axis."""
    ax = normalize_axis(name, "axis", axis, x.ndim)
    z = x - x.max(axis=ax, keepdims=True)
    z *= beta
    return z, ax
