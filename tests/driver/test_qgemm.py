"""The exact integer GEMM (driver/native/qgemm_kernels.c, AVX512-VNNI) against an int64 NumPy reference.

Each case draws 8-bit inputs and centred weights, runs the compiled integer GEMM through _fast.fc_q8 /
conv_q8 with _qgemm.QWeights, and compares every output byte with the exact int64 sum requantized by
_qconv.requantize (NumPy). Skipped where the library has no VNNI build.
"""

from __future__ import annotations

import numpy as np
import pytest

from driver.ops import _fast, _qgemm
from driver.ops._qconv import QuantConv, requantize
from driver.ops._window import EXPLICIT, Window
from mlts.hal.enums import OperandType

pytestmark = pytest.mark.skipif(not _qgemm.available(1), reason="no compiled VNNI integer GEMM")

U8, S8 = OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED


def _quant(rng: np.random.Generator, cout: int, signed: bool, per_channel: bool, wide: bool) -> QuantConv:
    shape = (cout,) if per_channel else ()
    mult = rng.integers(2**30, 2**31 - 1, size=shape, dtype=np.int64)
    # wide: left shifts and right shifts as large as the multiplier arithmetic allows (the int64 form)
    shift = rng.integers(-3, 3, size=shape) if wide else rng.integers(-20, -6, size=shape)
    out_type = S8 if signed else U8
    lo, hi = (-128, 127) if signed else (0, 255)
    zp = int(rng.integers(lo, hi + 1))
    return QuantConv(0, 0, mult, shift.astype(np.int64), zp, lo + 3, hi - 5, out_type)


def _case(rng: np.random.Generator, k: int, n: int, signed: bool, kind: str, wide: bool):
    """Input zero point, centred weights [k, n] (integers as float32) and the int64 bias."""
    lo, hi = (-128, 127) if signed else (0, 255)
    zp_x = int(rng.integers(lo, hi + 1))
    if kind == "u8":  # uint8 filter with a zero point: centred values span up to 255
        zp_w = int(rng.integers(0, 256))
        centred = rng.integers(0, 256, size=(k, n)) - zp_w
    elif kind == "s8":
        zp_w = int(rng.integers(-128, 128))
        centred = rng.integers(-128, 128, size=(k, n)) - zp_w
    else:  # per-channel: symmetric int8, zero point 0
        centred = rng.integers(-127, 128, size=(k, n))
    bound = 2**31 - 1 - k * 65025 if not wide else 2**31 - 1
    bias = rng.integers(-min(bound, 2**20), min(bound, 2**20) + 1, size=n).astype(np.int64)
    if wide:
        bias[0] = 2**31 - 1
        bias[-1] = -(2**31)
    return zp_x, centred.astype(np.float32), bias


def _reference(x: np.ndarray, zp_x: int, centred: np.ndarray, bias: np.ndarray, q: QuantConv) -> np.ndarray:
    acc = (x.astype(np.int64) - zp_x) @ centred.astype(np.int64)
    return requantize(acc, bias, q)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("kind", ["u8", "s8", "pc"])
@pytest.mark.parametrize("wide", [False, True])
def test_fc_matches_int64_reference(signed: bool, kind: str, wide: bool) -> None:
    rng = np.random.default_rng([int(signed), len(kind), int(wide)])
    for rows, k, n in [(1, 1, 1), (1, 7, 17), (5, 13, 16), (7, 64, 70), (13, 259, 33), (50, 1001, 65)]:
        zp_x, centred, bias = _case(rng, k, n, signed, kind, wide)
        q = _quant(rng, n, signed, kind == "pc", wide)
        dtype = np.int8 if signed else np.uint8
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, size=(rows, k)).astype(dtype)
        w = _qgemm.QWeights(centred, zp_x, signed)
        got = _fast.fc_q8(x, zp_x, w, _fast.requant_params(bias, q, n))
        want = _reference(x, zp_x, centred, bias, q)
        np.testing.assert_array_equal(got, want, err_msg=f"rows={rows} k={k} n={n}")


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize(
    "kh,kw,stride,pad",
    [(1, 1, 1, (0, 0, 0, 0)), (3, 3, 1, (1, 1, 1, 1)), (3, 3, 2, (0, 1, 0, 1)), (1, 1, 2, (0, 0, 0, 0))],
)
def test_conv_matches_int64_reference(signed: bool, kh: int, kw: int, stride: int, pad) -> None:
    rng = np.random.default_rng([int(signed), kh, stride])
    n_img, h, w_in, c, cout = 2, 9, 7, 5, 19
    zp_x, centred, bias = _case(rng, kh * kw * c, cout, signed, "u8", False)
    q = _quant(rng, cout, signed, False, False)
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, size=(n_img, h, w_in, c)).astype(dtype)
    pt, pb, pl, pr = pad
    window = Window(EXPLICIT, (pl, pr, pt, pb), stride, stride)
    gc = _fast.GeometryCache("CONV_2D", window, kh, kw)
    g, _ = gc.get(x.shape)
    got = _fast.conv_q8(
        x, zp_x, gc, _qgemm.QWeights(centred, zp_x, signed), _fast.requant_params(bias, q, cout), cout
    )
    xp = np.full((n_img, h + pt + pb, w_in + pl + pr, c), zp_x, dtype=np.int64)
    xp[:, pt : pt + h, pl : pl + w_in] = x
    cols = np.empty((n_img, g.out_h, g.out_w, kh, kw, c), dtype=np.int64)
    for ky in range(kh):
        for kx in range(kw):
            cols[:, :, :, ky, kx] = xp[
                :, ky : ky + stride * g.out_h : stride, kx : kx + stride * g.out_w : stride
            ]
    want = _reference(cols.reshape(-1, kh * kw * c), zp_x, centred, bias, q)
    np.testing.assert_array_equal(got.reshape(-1, cout), want)
