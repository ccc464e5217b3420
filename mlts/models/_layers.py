"""Layer records of the generated networks and the float32 NumPy forward used to calibrate them.

The forward mirrors ONNX semantics (NCHW weights [Cout, Cin/group, KH, KW],
pads [top, left, bottom, right]) but runs on NHWC activations, where a 1x1
convolution is one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class ConvBN:
    """Convolution without bias, BatchNormalization, and ReLU6 unless `relu6` is False."""

    name: str
    cin: int
    cout: int
    kernel: int
    stride: int
    group: int
    pads: tuple[int, int, int, int]
    relu6: bool = True

    @property
    def fan_in(self) -> int:
        """Inputs feeding one output value: the He-normal fan-in."""
        return self.cin // self.group * self.kernel * self.kernel


@dataclass(frozen=True, slots=True)
class Block:
    """A chain of ConvBN layers, with an identity shortcut Add when `residual`."""

    name: str
    layers: tuple[ConvBN, ...]
    residual: bool = False


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int, int, int]:
    """TensorFlow "SAME" padding of a square input as explicit ONNX pads (extra pixel at the end)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return (total // 2, total // 2, total - total // 2, total - total // 2)


def conv2d_nhwc(x: np.ndarray, weight: np.ndarray, layer: ConvBN) -> np.ndarray:
    """Convolution of NHWC float32 `x` with ONNX-layout `weight`; groups of 1 or depthwise."""
    n, h, w, cin = x.shape
    k, s = layer.kernel, layer.stride
    top, left, bottom, right = layer.pads
    oh = (h + top + bottom - k) // s + 1
    ow = (w + left + right - k) // s + 1
    if k == 1 and s == 1 and layer.group == 1 and not any(layer.pads):
        out = x.reshape(-1, cin) @ np.ascontiguousarray(weight[:, :, 0, 0].T)
        return out.reshape(n, oh, ow, layer.cout)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    taps = [
        xp[:, i : i + s * (oh - 1) + 1 : s, j : j + s * (ow - 1) + 1 : s, :]
        for i in range(k)
        for j in range(k)
    ]
    if layer.group == cin == layer.cout:
        out = np.zeros((n, oh, ow, cin), dtype=np.float32)
        for t, tap in enumerate(taps):
            out += tap * weight[:, 0, t // k, t % k]
        return out
    if layer.group != 1:
        raise ValueError(f"layer {layer.name}: group {layer.group} is not supported; use 1 or depthwise")
    # im2col with (kh, kw, cin) ordering, matching weight.transpose(2, 3, 1, 0).
    cols = np.stack(taps, axis=3).reshape(n * oh * ow, k * k * cin)
    kernel = weight.transpose(2, 3, 1, 0).reshape(k * k * cin, layer.cout)
    return (cols @ kernel).reshape(n, oh, ow, layer.cout)
