"""Shared by the preparation tests (driver.executor.Plan.warm, the weights kept): a model whose every
step binds (one chunk), and its float64 reference written from the operations' definitions."""

from __future__ import annotations

import numpy as np

from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from tests.driver.bindkit import _conv, _depthwise

OUT = (1, 3, 3, 8)


def _bound_model():
    """x [1,12,12,3] -> conv 3x3/2 -> depthwise -> depthwise/2 -> conv 1x1: every step bindable,
    one chunk."""
    rng = np.random.default_rng(11)
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (1, 12, 12, 3))
    c1 = _conv(bld, rng, x, 3, 8, 3, 2, 1, 3, (6, 6))
    d1 = _depthwise(bld, rng, c1, 8, 1, 1, 1, (6, 6))
    d2 = _depthwise(bld, rng, d1, 8, 1, 2, 0, (3, 3))
    y = _conv(bld, rng, d2, 8, 8, 1, 1, 2, 0, (3, 3))
    bld.mark_outputs([y])
    return bld.build()


def _reference(x: np.ndarray) -> np.ndarray:
    """The same model with float64 NumPy, from the operations' definitions (NHWC, NNAPI padding)."""
    rng = np.random.default_rng(11)

    def conv(a, cin, cout, k, stride, pad_same, act):
        w = rng.standard_normal((cout, k, k, cin)).astype(np.float32).astype(np.float64)
        b = rng.standard_normal(cout).astype(np.float32).astype(np.float64)
        return _window(a, w.transpose(1, 2, 3, 0), b, k, stride, pad_same, act, depthwise=False)

    def depthwise(a, cin, stride, act):
        w = rng.standard_normal((1, 3, 3, cin)).astype(np.float32).astype(np.float64)
        b = rng.standard_normal(cin).astype(np.float32).astype(np.float64)
        return _window(a, w[0], b, 3, stride, True, act, depthwise=True)

    a = x.astype(np.float64)
    a = conv(a, 3, 8, 3, 2, True, 3)
    a = depthwise(a, 8, 1, 1)
    a = depthwise(a, 8, 2, 0)
    return conv(a, 8, 8, 1, 1, False, 0)


def _window(a, w, b, k, stride, same, act, depthwise):
    n, h, wd, c = a.shape
    if same:
        out_h, out_w = -(-h // stride), -(-wd // stride)
        ph = max((out_h - 1) * stride + k - h, 0)
        pw = max((out_w - 1) * stride + k - wd, 0)
        a = np.pad(a, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        out_h, out_w = (h - k) // stride + 1, (wd - k) // stride + 1
    cout = c if depthwise else w.shape[3]
    y = np.zeros((n, out_h, out_w, cout))
    for i in range(out_h):
        for j in range(out_w):
            patch = a[:, i * stride : i * stride + k, j * stride : j * stride + k, :]
            if depthwise:
                y[:, i, j, :] = np.einsum("nhwc,hwc->nc", patch, w)
            else:
                y[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, w)
    y += b
    lo, hi = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}[act]
    return np.clip(y, lo, hi)
