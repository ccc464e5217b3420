"""Vectorised float64 MaxPool and AveragePool for the golden reference run, from the operators' spec.

`onnx.reference` pools one output element at a time in Python (about 6 s for one 5x5 MaxPool on a
640x640 detector's coarsest map). These gather every window at once: the input is laid into a
buffer covering every window (padding is -inf for MaxPool, 0 for AveragePool) and reduced over a
strided view of its windows. AveragePool divides by the number of window positions inside the input
(count_include_pad=0) or inside the explicitly padded input (count_include_pad=1), as onnxruntime
does. Any number of spatial axes; MaxPool's optional Indices output goes to onnx.reference's kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_max_pool import MaxPool as _ReferenceMaxPool


def _attr(value, default):
    return default if value is None else value


def pool_geometry(
    size: int, kernel: int, stride: int, dilation: int, pads: tuple[int, int], auto_pad: str, ceil_mode: bool
) -> tuple[int, int, int]:
    """(output size, head pad, tail pad) of one spatial axis, as ONNX's pooling operators define them."""
    effective = (kernel - 1) * dilation + 1
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = -(-size // stride)
        total = max(0, (out - 1) * stride + effective - size)
        head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        return out, head, total - head
    if auto_pad == "VALID":
        return max(0, (size - effective) // stride + 1), 0, 0
    head, tail = pads
    span = size + head + tail - effective
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + head:  # the last window must start inside the input or head pad
            out -= 1
    else:
        out = span // stride + 1
    return max(0, out), head, tail


def _windows(padded: np.ndarray, effective: Sequence[int], strides, dilations) -> np.ndarray:
    """A view [..., *out, *kernel] of every pooling window of the spatial axes 2.. of `padded`."""
    spatial = tuple(range(2, padded.ndim))
    view = sliding_window_view(padded, tuple(effective), axis=spatial)
    outs = tuple(slice(None, None, s) for s in strides)
    ks = tuple(slice(None, None, d) for d in dilations)
    return view[(slice(None), slice(None), *outs, *ks)]


def pool(
    x: np.ndarray,
    kind: str,
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> np.ndarray:
    """ONNX MaxPool (`kind` "max") or AveragePool ("avg") of x [N, C, *spatial]."""
    rank = x.ndim - 2
    strides = list(strides or [1] * rank)
    dilations = list(dilations or [1] * rank)
    pads = list(pads or [0] * (2 * rank))
    geometry = [
        pool_geometry(x.shape[2 + i], kernel[i], strides[i], dilations[i], (pads[i], pads[rank + i]),
                      auto_pad, ceil_mode)
        for i in range(rank)
    ]  # fmt: skip
    outs = [g[0] for g in geometry]
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    # The buffer covers every window: from -head to (out - 1) * stride + effective on each axis.
    extent = [
        max(1, (o - 1) * s + e) if o > 0 else e for o, s, e in zip(outs, strides, effective, strict=True)
    ]
    fill = -np.inf if kind == "max" else 0.0
    buf = np.full(x.shape[:2] + tuple(extent), fill, dtype=np.float64)
    src, dst = [], []
    for i, (_, head, _) in enumerate(geometry):
        n = min(x.shape[2 + i], extent[i] - head)
        src.append(slice(0, max(0, n)))
        dst.append(slice(head, head + max(0, n)))
    buf[(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *src)]
    win = _windows(buf, effective, strides, dilations)
    axes = tuple(range(2 + rank, 2 + 2 * rank))
    if kind == "max":
        out = win.max(axis=axes)
    else:
        total = win.sum(axis=axes)
        counts = np.ones((1,) * 2)
        for i, (_, head, tail) in enumerate(geometry):
            inside = np.zeros(extent[i])
            upto = x.shape[2 + i] + (tail if count_include_pad else 0)
            start = 0 if count_include_pad else head
            inside[start : head + upto] = 1.0
            per_axis = sliding_window_view(inside, effective[i])[:: strides[i], :: dilations[i]].sum(axis=-1)
            counts = counts[..., None] * per_axis[: outs[i]]
        out = total / np.maximum(counts, 1.0)
    return out[(slice(None), slice(None), *(slice(0, o) for o in outs))]


class MaxPool(_ReferenceMaxPool):
    """onnx.reference's MaxPool with a vectorised path for its one-output form."""

    def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None, pads=None,  # type: ignore[override]
             storage_order=None, strides=None):  # fmt: skip
        if len(self.onnx_node.output) > 1 or x.ndim < 3:
            return super()._run(x, auto_pad, ceil_mode, dilations, kernel_shape, pads, storage_order, strides)
        y = pool(x, "max", kernel_shape, strides, dilations, pads, _attr(auto_pad, "NOTSET"), bool(ceil_mode))
        return (y.astype(x.dtype, copy=False),)


class AveragePool(OpRun):
    """ONNX AveragePool (opsets 1-22: dilations from 19), vectorised."""

    def _run(self, x, auto_pad=None, ceil_mode=None, count_include_pad=None, dilations=None,  # type: ignore[override]
             kernel_shape=None, pads=None, strides=None):  # fmt: skip
        y = pool(
            x, "avg", kernel_shape, strides, dilations, pads, _attr(auto_pad, "NOTSET"), bool(ceil_mode),
            bool(count_include_pad),
        )  # fmt: skip
        return (y.astype(x.dtype, copy=False),)


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX LRN over the channels of x [N, C, ...]: x / (bias + alpha / size * sum of squares) ** beta.

    The sum runs over channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2), clipped to 0..C-1.
    """
    c = x.shape[1]
    lo, hi = math.floor((size - 1) / 2), math.ceil((size - 1) / 2)
    sq = np.square(x.astype(np.float64, copy=False))
    cum = np.concatenate([np.zeros_like(sq[:, :1]), np.cumsum(sq, axis=1)], axis=1)
    idx = np.arange(c)
    start, end = np.clip(idx - lo, 0, c), np.clip(idx + hi + 1, 0, c)
    window = cum[:, end] - cum[:, start]
    return x / (bias + (alpha / size) * window) ** beta


class LRN(OpRun):
    """ONNX LRN (onnx.reference's kernel sums squares for channel 0 only when the batch is 1)."""

    def _run(self, x, alpha=None, beta=None, bias=None, size=None):  # type: ignore[override]
        y = lrn(x, int(size), _attr(alpha, 1e-4), _attr(beta, 0.75), _attr(bias, 1.0))
        return (y.astype(x.dtype, copy=False),)
