"""What the 2-D pooling operations share: signature, parameters, layout; each op supplies its reduction.

A pool that passes `quant` also takes quant8 input; its output must share the
input's type, scale and zero point (NNAPI's rule for MAX_POOL_2D and
AVERAGE_POOL_2D), and the quantized reduction's result is clamped to the fused
activation's range (`activation_range`) and saturated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops._activation import apply_activation
from driver.ops._base import ArgInfo, Run, expect_count
from driver.ops._params import float_outputs, float_tensor
from driver.ops._qelementwise import moving_signature
from driver.ops._quant import activation_range, saturate
from driver.ops._window import Geometry, Window, from_nhwc, geometry, parse_window_params, to_nhwc
from mlts.hal.errors import invalid

# Reduce the padded NHWC input over each window: (padded input, geometry) -> fresh [N,OH,OW,C] array.
Reduction = Callable[[np.ndarray, Geometry], np.ndarray]
# Reduce the unpadded NHWC quant8 input over each window: (input, geometry) -> integer [N,OH,OW,C].
QuantReduction = Callable[[np.ndarray, Geometry], np.ndarray]


def prepare_pool(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    reduce: Reduction,
    fill: float,
    quant: QuantReduction | None = None,
) -> Run:
    """A pooling kernel: explicit (10, 11 inputs) or implicit (7, 8) padding, padded with `fill`."""
    expect_count(name, ins, (7, 8, 10, 11), outs)
    if quant is not None:
        quantized = moving_signature(name, ins[0], outs)
    else:
        float_tensor(name, "input", ins[0])
        float_outputs(name, outs)
        quantized = False
    if len(ins[0].shape) not in (0, 4):
        raise invalid(f"{name}: input has rank {len(ins[0].shape)} (shape {ins[0].shape}), expected 4")
    p = parse_window_params(
        name, ins, 1, len(ins) >= 10, extras=("filter width", "filter height"), dilation=False
    )
    (kw, kh), window, act, nchw = p.extras, p.window, p.activation, p.nchw
    if quantized:
        assert quant is not None
        return _quant_run(name, ins[0], quant, window, kh, kw, act, nchw)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, name)
        g = geometry(name, window, x.shape[1], x.shape[2], kh, kw)
        y = reduce(g.pad(x, fill), g)
        apply_activation(act, y)
        return [from_nhwc(y, nchw)]

    return run


def _quant_run(
    name: str, x_info: ArgInfo, quant: QuantReduction, window: Window, kh: int, kw: int, act: int, nchw: bool
) -> Run:
    lo, hi = activation_range(act, x_info.type, x_info.scale, x_info.zero_point)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, name)
        g = geometry(name, window, x.shape[1], x.shape[2], kh, kw)
        return [from_nhwc(saturate(quant(x, g), lo, hi, x_info.type), nchw)]

    return run


def window_sum(xp: np.ndarray, g: Geometry, square: bool = False, dtype: type = np.float32) -> np.ndarray:
    """Sum (of squares when `square`) of each window of zero-padded `xp`, as a fresh `dtype` array."""
    acc: np.ndarray | None = None
    tmp: np.ndarray | None = None
    for view in g.taps(xp):
        if acc is None:
            acc = np.square(view) if square else np.array(view, dtype=dtype)
            tmp = np.empty_like(acc) if square else None
        elif square:
            np.square(view, out=tmp)
            acc += tmp
        else:
            acc += view
    assert acc is not None
    return acc
