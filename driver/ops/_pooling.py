"""What the 2-D pooling operations share: signature, parameters, layout; each op supplies its reduction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops._activation import apply_activation
from driver.ops._base import ArgInfo, Run, expect_count
from driver.ops._params import float_outputs, float_tensor
from driver.ops._window import Geometry, from_nhwc, geometry, parse_window_params, to_nhwc
from mlts.hal.errors import invalid

# Reduce the padded NHWC input over each window: (padded input, geometry) -> fresh [N,OH,OW,C] array.
Reduction = Callable[[np.ndarray, Geometry], np.ndarray]


def prepare_pool(
    name: str, ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], reduce: Reduction, fill: float
) -> Run:
    """A pooling kernel: explicit (10, 11 inputs) or implicit (7, 8) padding, padded with `fill`."""
    expect_count(name, ins, (7, 8, 10, 11), outs)
    float_tensor(name, "input", ins[0])
    float_outputs(name, outs)
    if len(ins[0].shape) not in (0, 4):
        raise invalid(f"{name}: input has rank {len(ins[0].shape)} (shape {ins[0].shape}), expected 4")
    p = parse_window_params(
        name, ins, 1, len(ins) >= 10, extras=("filter width", "filter height"), dilation=False
    )
    (kw, kh), window, act, nchw = p.extras, p.window, p.activation, p.nchw

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, name)
        g = geometry(name, window, x.shape[1], x.shape[2], kh, kw)
        y = reduce(g.pad(x, fill), g)
        apply_activation(act, y)
        return [from_nhwc(y, nchw)]

    return run


def window_sum(xp: np.ndarray, g: Geometry, square: bool = False) -> np.ndarray:
    """Sum (of squares when `square`) of each window of zero-padded `xp`, as a fresh float32 array."""
    acc: np.ndarray | None = None
    tmp: np.ndarray | None = None
    for view in g.taps(xp):
        if acc is None:
            acc = np.square(view) if square else np.array(view, dtype=np.float32)
            tmp = np.empty_like(acc) if square else None
        elif square:
            np.square(view, out=tmp)
            acc += tmp
        else:
            acc += view
    assert acc is not None
    return acc
