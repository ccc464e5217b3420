"""Sliding-window geometry shared by convolution and pooling: padding arithmetic, parameters, layout."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import as_strided

from driver.ops._activation import parse_activation
from driver.ops._base import ArgInfo
from driver.ops._params import int_param, optional_bool, optional_int
from mlts.hal.enums import PaddingScheme, codes
from mlts.hal.errors import invalid

EXPLICIT = 0  # the `scheme` of a window whose four paddings are given explicitly
_SIDES = ("left", "right", "top", "bottom")


@dataclass(frozen=True, slots=True)
class Window:
    """How a window slides: padding (implicit scheme or explicit left/right/top/bottom), strides, dilations."""

    scheme: int
    pads: tuple[int, int, int, int]  # left, right, top, bottom; used only when scheme == EXPLICIT
    stride_w: int
    stride_h: int
    dilation_w: int = 1
    dilation_h: int = 1


@dataclass(frozen=True, slots=True)
class Geometry:
    """Where a k_h x k_w window lands on an in_h x in_w input: output size and the padding to add."""

    in_h: int
    in_w: int
    k_h: int
    k_w: int
    out_h: int
    out_w: int
    pad_top: int
    pad_bottom: int
    pad_left: int
    pad_right: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int

    @property
    def padded(self) -> bool:
        return any((self.pad_top, self.pad_bottom, self.pad_left, self.pad_right))

    def pad(self, x: np.ndarray, fill: float = 0.0) -> np.ndarray:
        """`x` [N,H,W,C] surrounded by the padding, filled with `fill` (x itself when there is none)."""
        if not self.padded:
            return x
        n, h, w, c = x.shape
        t, left = self.pad_top, self.pad_left
        out = np.empty((n, h + t + self.pad_bottom, w + left + self.pad_right, c), dtype=x.dtype)
        # Fill only the border: the interior is overwritten by the copy.
        out[:, :t] = fill
        out[:, t + h :] = fill
        out[:, t : t + h, :left] = fill
        out[:, t : t + h, left + w :] = fill
        out[:, t : t + h, left : left + w] = x
        return out

    def taps(self, xp: np.ndarray) -> Iterator[np.ndarray]:
        """For each filter tap (row-major over KH, KW), the [N,OH,OW,C] view of padded `xp` it multiplies."""
        span_h = (self.out_h - 1) * self.stride_h + 1
        span_w = (self.out_w - 1) * self.stride_w + 1
        for i in range(self.k_h):
            h0 = i * self.dilation_h
            for j in range(self.k_w):
                w0 = j * self.dilation_w
                yield xp[:, h0 : h0 + span_h : self.stride_h, w0 : w0 + span_w : self.stride_w, :]

    def patches(self, xp: np.ndarray) -> np.ndarray:
        """Padded `xp` [N,H,W,C] as a read-only strided view [N,OH,OW,KH,KW,C] of every window (no copy)."""
        n, _, _, c = xp.shape
        sn, sh, sw, sc = xp.strides
        return as_strided(
            xp,
            shape=(n, self.out_h, self.out_w, self.k_h, self.k_w, c),
            strides=(
                sn,
                sh * self.stride_h,
                sw * self.stride_w,
                sh * self.dilation_h,
                sw * self.dilation_w,
                sc,
            ),
            writeable=False,
        )

    def im2col(self, xp: np.ndarray) -> np.ndarray:
        """Padded `xp` [N,H,W,C] unfolded to a contiguous [N*OH*OW, KH*KW*C] patch matrix."""
        n, _, _, c = xp.shape
        cols = np.ascontiguousarray(self.patches(xp))
        return cols.reshape(n * self.out_h * self.out_w, self.k_h * self.k_w * c)

    def valid_counts(self) -> np.ndarray:
        """[OH, OW, 1] float32: how many input (non-padding) elements each window covers."""
        rows = _valid_along(self.out_h, self.stride_h, self.pad_top, self.k_h, self.dilation_h, self.in_h)
        cols = _valid_along(self.out_w, self.stride_w, self.pad_left, self.k_w, self.dilation_w, self.in_w)
        return np.maximum(np.outer(rows, cols), 1).astype(np.float32)[:, :, None]


def _valid_along(out: int, stride: int, pad: int, k: int, dilation: int, size: int) -> np.ndarray:
    start = np.arange(out) * stride - pad
    taps = start[:, None] + np.arange(k)[None, :] * dilation
    return ((taps >= 0) & (taps < size)).sum(axis=1)


def _axis(
    name: str, axis: str, scheme: int, size: int, k: int, stride: int, dilation: int, before: int, after: int
) -> tuple[int, int, int]:
    """(output size, pad before, pad after) along one spatial axis."""
    eff = (k - 1) * dilation + 1
    if scheme == PaddingScheme.SAME:
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        before, after = total // 2, total - total // 2
    elif scheme == PaddingScheme.VALID:
        out = (size - eff + stride) // stride
        before = after = 0
    else:
        out = (size + before + after - eff) // stride + 1
    if out <= 0:
        raise invalid(
            f"{name}: {axis} of {size} with padding {before}+{after} is smaller than the "
            f"effective filter size {eff}; the output would be empty"
        )
    return out, before, after


@lru_cache(maxsize=512)
def geometry(name: str, window: Window, in_h: int, in_w: int, k_h: int, k_w: int) -> Geometry:
    """The geometry of `window` with a k_h x k_w filter on an in_h x in_w input (cached per shape)."""
    left, right, top, bottom = window.pads
    oh, pt, pb = _axis(
        name, "height", window.scheme, in_h, k_h, window.stride_h, window.dilation_h, top, bottom
    )
    ow, pl, pr = _axis(
        name, "width", window.scheme, in_w, k_w, window.stride_w, window.dilation_w, left, right
    )
    return Geometry(
        in_h, in_w, k_h, k_w, oh, ow, pt, pb, pl, pr,
        window.stride_h, window.stride_w, window.dilation_h, window.dilation_w,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class WindowParams:
    """Everything a conv or pool operation says besides its tensors."""

    window: Window
    extras: tuple[int, ...]  # depth multiplier, or filter width and height
    activation: int
    nchw: bool


def parse_window_params(
    name: str,
    ins: Sequence[ArgInfo],
    at: int,
    explicit: bool,
    extras: Sequence[str] = (),
    dilation: bool = True,
) -> WindowParams:
    """Parse the parameters starting at input `at`: padding, strides, `extras`, activation, layout, dilations."""
    if explicit:
        pads = tuple(
            int_param(name, f"padding {side}", ins, at + i, minimum=0) for i, side in enumerate(_SIDES)
        )
        scheme, i = EXPLICIT, at + 4
    else:
        scheme = int_param(name, "padding scheme", ins, at)
        if scheme not in codes(PaddingScheme):
            raise invalid(f"{name}: padding scheme is {scheme}, expected 1 (SAME) or 2 (VALID)")
        pads, i = (0, 0, 0, 0), at + 1
    stride_w = int_param(name, "stride width", ins, i, minimum=1)
    stride_h = int_param(name, "stride height", ins, i + 1, minimum=1)
    i += 2
    values = tuple(int_param(name, what, ins, i + k, minimum=1) for k, what in enumerate(extras))
    i += len(extras)
    act = parse_activation(name, ins, i)
    nchw = optional_bool(name, "layout", ins, i + 1)
    dw = optional_int(name, "dilation width", ins, i + 2, 1, minimum=1) if dilation else 1
    dh = optional_int(name, "dilation height", ins, i + 3, 1, minimum=1) if dilation else 1
    window = Window(scheme, pads, stride_w, stride_h, dw, dh)  # type: ignore[arg-type]
    return WindowParams(window, values, act, nchw)


def to_nhwc(x: np.ndarray, nchw: bool, name: str) -> np.ndarray:
    """A rank-4 input as an NHWC view."""
    if x.ndim != 4:
        raise invalid(f"{name}: input has rank {x.ndim} (shape {x.shape}), expected 4")
    return x.transpose(0, 2, 3, 1) if nchw else x


def from_nhwc(y: np.ndarray, nchw: bool) -> np.ndarray:
    """An NHWC result back in the operation's layout, contiguous."""
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)) if nchw else y


def channel_dim(arg: ArgInfo, nchw: bool) -> int:
    """The known channel count of a rank-4 operand, or 0 when unknown."""
    if len(arg.shape) != 4:
        return 0
    return arg.shape[1] if nchw else arg.shape[3]
