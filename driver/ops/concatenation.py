"""CONCATENATION: inputs 0..n-1 joined along axis (input n, INT32, negative counts from the end)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._params import float_outputs, float_tensor, int_param, known_rank, normalize_axis
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "CONCATENATION"


@register(OperationType.CONCATENATION)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    if len(ins) < 2:
        raise invalid(f"{NAME}: expected at least 2 inputs (tensors, then the axis), got {len(ins)}")
    expect_count(NAME, ins, (len(ins),), outs)
    n = len(ins) - 1
    for i in range(n):
        float_tensor(NAME, f"input {i}", ins[i])
    float_outputs(NAME, outs)
    axis = int_param(NAME, "axis", ins, n)
    ranks = {r for r in (known_rank(a) for a in ins[:n]) if r is not None}
    if len(ranks) > 1:
        raise invalid(f"{NAME}: inputs have ranks {sorted(ranks)}, expected one rank")
    for r in ranks:
        normalize_axis(NAME, "axis", axis, r)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        xs = args[:n]
        ax = normalize_axis(NAME, "axis", axis, xs[0].ndim)
        ref = xs[0].shape
        for i, x in enumerate(xs):
            if x.ndim != len(ref) or any(
                a != b for d, (a, b) in enumerate(zip(x.shape, ref, strict=True)) if d != ax
            ):
                raise invalid(f"{NAME}: input {i} has shape {x.shape}, expected {ref} except along axis {ax}")
        return [np.concatenate(xs, axis=ax)]

    return run
