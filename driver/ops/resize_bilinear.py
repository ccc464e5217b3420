"""RESIZE_BILINEAR: bilinear resize of H and W to an output size (INT32 width, height) or by scales
(FLOAT32), with optional layout, align_corners and half_pixel_centers (TensorFlow Lite's rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._params import float_outputs, float_param, float_tensor, int_param, optional_bool
from driver.ops._window import from_nhwc, to_nhwc
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "RESIZE_BILINEAR"


def _coords(
    in_size: int, out_size: int, align: bool, half: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output position: lower and upper source index and the weight of the upper one."""
    if align and out_size > 1:
        scale = (in_size - 1) / (out_size - 1)
    else:
        scale = in_size / out_size
    dst = np.arange(out_size, dtype=np.float64)
    src = (dst + 0.5) * scale - 0.5 if half else dst * scale
    lo = np.maximum(np.floor(src), 0).astype(np.intp)
    hi = np.minimum(np.ceil(src), in_size - 1).astype(np.intp)
    # TFLite weighs against the clamped lower index, which keeps edge outputs equal to edge inputs.
    return lo, hi, (src - lo).astype(np.float32)


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    return a * (1 - t) + b * t


@register(OperationType.RESIZE_BILINEAR)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (3, 4, 5, 6), outs)
    float_tensor(NAME, "input", ins[0])
    float_outputs(NAME, outs)
    by_scale = ins[1].type == OperandType.FLOAT32
    if by_scale:
        sizes: tuple[float, float] = (
            float_param(NAME, "width scale", ins, 1),
            float_param(NAME, "height scale", ins, 2),
        )
    else:
        sizes = (
            int_param(NAME, "output width", ins, 1, minimum=1),
            int_param(NAME, "output height", ins, 2, minimum=1),
        )
    if min(sizes) <= 0:
        raise invalid(f"{NAME}: output size or scale {sizes} must be positive")
    nchw = optional_bool(NAME, "layout", ins, 3)
    align = optional_bool(NAME, "align_corners", ins, 4)
    half = optional_bool(NAME, "half_pixel_centers", ins, 5)
    if align and half:
        raise invalid(f"{NAME}: align_corners and half_pixel_centers cannot both be true")

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, NAME)
        _, h, w, _ = x.shape
        ow, oh = (int(w * sizes[0]), int(h * sizes[1])) if by_scale else (int(sizes[0]), int(sizes[1]))
        if oh <= 0 or ow <= 0:
            raise invalid(f"{NAME}: output size {oh}x{ow} is empty for input {h}x{w}")
        y0, y1, fy = _coords(h, oh, align, half)
        x0, x1, fx = _coords(w, ow, align, half)
        rows = _lerp(x[:, y0], x[:, y1], fy[None, :, None, None])
        out = _lerp(rows[:, :, x0], rows[:, :, x1], fx[None, None, :, None])
        return [from_nhwc(out.astype(np.float32, copy=False), nchw)]

    return run
