"""The compiled float32 kernels at the edges of their fast paths, against float64 NumPy references.

The references are written from NNAPI's definitions of CONV_2D and DEPTHWISE_CONV_2D (NHWC input,
explicit padding left/right/top/bottom, strides, zeros outside the input; filter [out, kh, kw, in] for
CONV_2D, [1, kh, kw, in * multiplier] for DEPTHWISE_CONV_2D; then the bias and the fused activation),
independently of the driver. The shapes reach every branch of the kernels: the patch-matrix copies of
1, 2, 3, 5, 8 and 9-channel window rows (scalar, half-vector, overlapping-vector and whole-vector),
windows inside the input and in the padding (asymmetric, wider than the window), output columns of
5, 8, 16, 21 and 40 (the packed GEMM's half, full and partial panels), rows not a multiple of the
GEMM's block of six, depthwise channel counts off the vector widths and spatial sizes down to 1 x 1
(every pixel a border pixel), each activation.
"""

from __future__ import annotations

import numpy as np
import pytest

from driver import native
from driver.ops import _fast
from mlts.hal.enums import OperationType
from tests.driver.opkit import Const, activation, call, check, rand

CONV, DW = OperationType.CONV_2D, OperationType.DEPTHWISE_CONV_2D

pytestmark = pytest.mark.skipif(not native.available(), reason=f"compiled kernels: {native.WHY_NOT}")


@pytest.fixture
def rng(request) -> np.random.Generator:
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.fixture(autouse=True)
def _compiled():
    assert _fast.enabled(), "the compiled float kernels are off"


def _windows(x: np.ndarray, kh: int, kw: int, pads, strides) -> np.ndarray:
    """[N, OH, OW, KH, KW, C] of x zero-padded (pads: left, right, top, bottom; strides: w, h)."""
    pl, pr, pt, pb = pads
    sw, sh = strides
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    n, hp, wp, c = xp.shape
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    out = np.empty((n, oh, ow, kh, kw, c))
    for ky in range(kh):
        for kx in range(kw):
            out[:, :, :, ky, kx, :] = xp[
                :, ky : ky + sh * (oh - 1) + 1 : sh, kx : kx + sw * (ow - 1) + 1 : sw, :
            ]
    return out


def ref_conv(x, w, b, pads, strides, act) -> np.ndarray:
    win = _windows(x, w.shape[1], w.shape[2], pads, strides)
    return activation(act, np.einsum("nhwyxc,oyxc->nhwo", win, w.astype(np.float64)) + b)


def ref_depthwise(x, w, b, pads, strides, mult, act) -> np.ndarray:
    win = _windows(x, w.shape[1], w.shape[2], pads, strides)
    win = np.repeat(win, mult, axis=-1)  # output channel c * mult + j reads input channel c
    return activation(act, np.einsum("nhwyxc,yxc->nhwc", win, w[0].astype(np.float64)) + b)


@pytest.mark.parametrize(
    "shape, k, out_c, pads, strides, act",
    [
        ((1, 17, 16, 3), 3, 8, (0, 1, 0, 1), (2, 2), 3),  # a MobileNet's first layer: 9-float rows, 8 columns
        ((1, 16, 17, 3), 3, 16, (1, 1, 1, 1), (2, 2), 1),  # padding on every side, one full panel
        ((2, 9, 11, 1), 3, 5, (1, 1, 1, 1), (1, 1), 0),  # 3-float rows (scalar), two images
        ((1, 10, 9, 2), 3, 21, (2, 0, 0, 2), (1, 2), 2),  # 6-float rows (two overlapping halves)
        ((1, 12, 12, 5), 3, 24, (1, 2, 2, 1), (3, 1), 3),  # 15-float rows, a partial panel
        ((1, 7, 8, 8), 3, 40, (1, 1, 1, 1), (1, 1), 0),  # 24-float rows: whole vectors only
        ((1, 11, 13, 3), 5, 8, (2, 2, 1, 3), (2, 2), 1),  # 5 x 5 windows, 15-float rows
        ((1, 4, 4, 3), 3, 7, (3, 3, 3, 3), (1, 1), 0),  # padding wider than the window: all-zero patches
    ],
)
def test_conv_patch_matrix_and_packed_gemm_match_float64(rng, shape, k, out_c, pads, strides, act):
    x = rand(rng, *shape)
    w, b = rand(rng, out_c, k, k, shape[3]), rand(rng, out_c)
    y = call(CONV, x, Const(w), Const(b), *pads, *strides, act)
    check(y, ref_conv(x, w, b, pads, strides, act))


@pytest.mark.parametrize("rows", [1, 5, 6, 7, 13, 61])
@pytest.mark.parametrize("k, n", [(1, 8), (3, 16), (8, 5), (17, 24), (32, 40)])
def test_pointwise_gemm_rows_columns_and_epilogue_match_float64(rng, rows, k, n):
    """1 x 1 convolutions: the packed GEMM's row blocks (6, 5..1 rows) and panels (8, 16, partial)."""
    x = rand(rng, 1, rows, 1, k, lo=-2, hi=2)
    w, b = rand(rng, n, 1, 1, k), rand(rng, n)
    for act in (0, 1, 2, 3):
        y = call(CONV, x, Const(w), Const(b), 0, 0, 0, 0, 1, 1, act)
        check(y, ref_conv(x, w, b, (0, 0, 0, 0), (1, 1), act))


@pytest.mark.parametrize(
    "shape, pads, strides",
    [
        ((1, 1, 1, 24), (1, 1, 1, 1), (1, 1)),  # one pixel: only the centre tap
        ((1, 2, 2, 40), (1, 1, 1, 1), (1, 1)),  # every pixel a border pixel; 16 + 16 + 8 channels
        ((1, 4, 4, 13), (1, 1, 1, 1), (1, 1)),  # 8 + 5 channels
        ((1, 4, 4, 256), (1, 1, 1, 1), (1, 1)),  # a small MobileNet's last depthwise layer
        ((1, 8, 8, 128), (0, 1, 0, 1), (2, 2)),  # stride 2, TensorFlow's SAME padding
        ((1, 8, 8, 8), (1, 1, 1, 1), (1, 1)),  # four pixels at a time inside, eight channels
        ((2, 5, 7, 3), (2, 0, 1, 2), (1, 2)),  # remainder channels only, asymmetric padding
        ((1, 6, 9, 12), (3, 3, 3, 3), (2, 1)),  # windows wholly in the padding
        ((1, 9, 10, 17), (0, 0, 0, 0), (1, 1)),  # no padding: 16 + 1 channels
    ],
)
@pytest.mark.parametrize("act", [0, 1, 2, 3])
def test_depthwise_border_and_inside_pixels_match_float64(rng, shape, pads, strides, act):
    c = shape[3]
    x = rand(rng, *shape, lo=-3, hi=3)
    w, b = rand(rng, 1, 3, 3, c), rand(rng, c)
    y = call(DW, x, Const(w), Const(b), *pads, *strides, 1, act)
    check(y, ref_depthwise(x, w, b, pads, strides, 1, act))


@pytest.mark.parametrize("c, mult, k", [(3, 2, 3), (5, 1, 5), (9, 1, 2)])
def test_depthwise_other_windows_and_multipliers_match_float64(rng, c, mult, k):
    x = rand(rng, 1, 7, 6, c)
    w, b = rand(rng, 1, k, k, c * mult), rand(rng, c * mult)
    pads, strides = (1, 2, 2, 1), (1, 2)
    y = call(DW, x, Const(w), Const(b), *pads, *strides, mult, 3)
    check(y, ref_depthwise(x, w, b, pads, strides, mult, 3))
