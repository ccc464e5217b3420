"""The exact integer GEMM (driver/native/qgemm_kernels.c, AVX512-VNNI or AVX2) against an int64 NumPy reference.

Each case draws 8-bit inputs and centred weights, runs the compiled integer GEMM (the variant the
library was built with) through _fast.fc_q8 / conv_q8 or _qgemm.gemm_requant with _qgemm.QWeights, and
compares every output byte with the exact int64 sum requantized by _qconv.requantize (NumPy). Skipped
where the library has no integer GEMM (neither VNNI nor AVX2 at build time).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from driver import native
from driver.ops import _fast, _qgemm
from driver.ops._qconv import QuantConv, requantize
from driver.ops._window import EXPLICIT, Window
from mlts.hal.enums import OperandType

pytestmark = pytest.mark.skipif(not _qgemm.available(1), reason="no compiled integer GEMM")

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


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_available_on_avx2_and_vnni_hosts() -> None:
    """The library is built with -march=native: on a processor with AVX2 or AVX512-VNNI the integer GEMM
    is there, its rows are at least K bytes and the packed weights hold every (k, column) pair."""
    flags = _cpu_flags()
    if not flags & {"avx2", "avx512_vnni"} or os.environ.get("MLTS_DRIVER_QGEMM", "1") == "0":
        pytest.skip("no AVX2 on this processor, or the integer GEMM turned off")
    assert native.has_qgemm() and _qgemm.available(1) and _qgemm.available(_qgemm.MAX_K)
    assert not _qgemm.available(_qgemm.MAX_K + 1) and not _qgemm.available(0)
    for k in (1, 2, 3, 4, 5, 33, 1024, 1025, _qgemm.MAX_K):
        assert k <= _qgemm.row_stride(k) <= k + 3
        for n in (1, 7, 8, 9, 16, 17, 65):
            size = int(native.LIB.mk_qgemm_packed_bytes(k, n))
            assert k * n <= size <= (k + 3) * (n + 15) * 2


def _run(
    x: np.ndarray, lda: int, zp_x: int, centred: np.ndarray, bias: np.ndarray, q: QuantConv
) -> np.ndarray:
    """The compiled GEMM on x [m, k] laid out with row stride lda (junk bytes past k)."""
    m, k = x.shape
    n = centred.shape[1]
    signed = x.dtype == np.int8
    rows = np.random.default_rng(lda).integers(0, 256, size=(m, lda)).astype(np.uint8)
    rows[:, :k] = x.view(np.uint8)
    w = _qgemm.QWeights(centred, zp_x, signed)
    rq = _fast.requant_params(bias, q, n)
    y = np.zeros((m, n), dtype=rq.dtype)
    _qgemm.gemm_requant(rows.ctypes.data, lda, m, w, rq, y.ctypes.data)
    return y


@pytest.mark.parametrize("signed", [False, True])
def test_shapes_and_extreme_zero_points(signed: bool) -> None:
    """K odd, K = 1, K across the widening chunks (1024), n not a multiple of 8 or 16, m not a multiple
    of the register block's 6 rows nor of a task's 48, the input's and the filter's extreme zero points;
    rows longer than the kernel's stride with junk past K."""
    rng = np.random.default_rng(36 + int(signed))
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    shapes = [(1, 1, 1), (7, 1, 9), (5, 2, 8), (6, 3, 7), (13, 15, 17), (49, 16, 16), (11, 17, 65),
              (97, 31, 130), (8, 1023, 24), (3, 1024, 9), (20, 1025, 33), (4, 2049, 15), (130, 600, 110)]  # fmt: skip
    for i, (m, k, n) in enumerate(shapes):
        for zp_x in (info.min, info.max, int(rng.integers(info.min, info.max + 1))):
            zp_w = (0, 255, int(rng.integers(0, 256)))[i % 3]  # a uint8 filter: centred spans up to 255
            centred = (rng.integers(0, 256, size=(k, n)) - zp_w).astype(np.float32)
            x = rng.integers(info.min, info.max + 1, size=(m, k)).astype(dtype)
            x[0] = info.max if zp_x == info.min else info.min  # the row farthest from the zero point
            wide = i % 2 == 1
            _, _, bias = _case(rng, k, n, signed, "u8", wide)
            q = _quant(rng, n, signed, i % 4 < 2, wide)
            want = _reference(x, zp_x, centred, bias, q)
            for lda in (_qgemm.row_stride(k), _qgemm.row_stride(k) + 5):
                got = _run(x, lda, zp_x, centred, bias, q)
                np.testing.assert_array_equal(got, want, err_msg=f"m={m} k={k} n={n} zp_x={zp_x} lda={lda}")


@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_task_splits_match(threads: int) -> None:
    """On several threads a job of few rows is cut into tasks of fewer rows (the 7x7 and 14x14 layers'
    49 and 196 rows, a 7-row and a 1-row job, one to three column groups, work around the split
    threshold): every byte as the int64 reference, whichever thread ran which rows."""
    rng = np.random.default_rng(360 + threads)
    shapes = [(49, 160, 160), (49, 960, 17), (196, 64, 64), (196, 96, 130), (7, 600, 200), (1, 2000, 300),
              (13, 600, 110), (100, 96, 64), (53, 33, 300)]  # fmt: skip
    before = native.threads()
    native.set_threads(threads)
    try:
        for i, (m, k, n) in enumerate(shapes):
            signed = i % 2 == 1
            dtype = np.int8 if signed else np.uint8
            info = np.iinfo(dtype)
            zp_x, centred, bias = _case(rng, k, n, signed, ("u8", "s8", "pc")[i % 3], False)
            q = _quant(rng, n, signed, i % 3 == 2, False)
            x = rng.integers(info.min, info.max + 1, size=(m, k)).astype(dtype)
            want = _reference(x, zp_x, centred, bias, q)
            for _ in range(3):
                got = _run(x, _qgemm.row_stride(k), zp_x, centred, bias, q)
                np.testing.assert_array_equal(got, want, err_msg=f"m={m} k={k} n={n} threads={threads}")
    finally:
        native.set_threads(before)


@pytest.mark.parametrize("signed", [False, True])
def test_largest_k_sums_are_exact(signed: bool) -> None:
    """K = MAX_K with every product at its largest magnitude: the sums reach ±K * 255 * 255, just below
    2^31, and must come out exact (the requantization then shows any wrap)."""
    k, n, m = _qgemm.MAX_K, 11, 7
    assert k * 255 * 255 < 2**31 <= (k + 1) * 255 * 255
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7 + int(signed))
    zp_x = info.min
    x = np.full((m, k), info.max, dtype=dtype)  # x - zp_x = 255 everywhere
    x[1] = info.min  # 0
    x[2:] = rng.integers(info.min, info.max + 1, size=(m - 2, k))
    for zp_w in (0, 255):  # a uint8 filter: every centred weight 255 - 0, or 0 - 255, in column 0
        centred = (rng.integers(0, 256, size=(k, n)) - zp_w).astype(np.float32)
        centred[:, 0] = 255 - 2 * zp_w
        acc = (x.astype(np.int64) - zp_x) @ centred.astype(np.int64)
        assert acc[0, 0] == (k if zp_w == 0 else -k) * 255 * 255
        for wide in (False, True):
            bias = np.zeros(n, dtype=np.int64) if not wide else rng.integers(-(2**31), 2**31, size=n)
            shift = np.int64(-24 if not wide else -20)
            q = QuantConv(0, 0, np.int64(2**30 + 12345), shift, 3, -128, 127, S8)
            want = requantize(acc, bias, q)
            if not wide:  # the extreme sum is not clamped: a wrapped sum would show
                assert -128 < want[0, 0] < 127
            got = _run(x, _qgemm.row_stride(k), zp_x, centred, bias, q)
            np.testing.assert_array_equal(got, want, err_msg=f"zp_w={zp_w} wide={wide}")


def test_refuses_what_it_cannot_sum_exactly() -> None:
    """K past MAX_K, K < 1 and rows shorter than the kernel's stride are refused (-2), nothing written."""
    lib = native.LIB
    k, n, m = 5, 3, 2
    w = _qgemm.QWeights(np.ones((k, n), dtype=np.float32), 0, False)
    rq = _fast.requant_params(
        np.zeros(n, dtype=np.int64), _quant(np.random.default_rng(1), n, False, False, False), n
    )
    a = np.zeros((m, _qgemm.MAX_K + 8), dtype=np.uint8)
    y = np.full((m, n), 77, dtype=np.uint8)

    def call(lda: int, kk: int) -> int:
        return lib.mk_qgemm_requant(
            a.ctypes.data, lda, 0, w.panels_ptr, w.colc_ptr, 0, m, n, kk, rq.bias.ptr, rq.mult.ptr, rq.left.ptr,
            rq.right.ptr, rq.zp, rq.lo, rq.hi, 0, y.ctypes.data,
        )  # fmt: skip

    assert call(_qgemm.row_stride(_qgemm.MAX_K + 1), _qgemm.MAX_K + 1) == -2
    assert call(8, 0) == -2
    assert call(_qgemm.row_stride(k) - 1, k) == -2
    assert (y == 77).all()
    assert call(_qgemm.row_stride(k), k) == 0
    assert not (y == 77).all()


def _bounded_pairs(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """Centred int8 weights [k, n] whose pairs (k, k + 1), k even, keep |w_k| + |w_k+1| <= 128, with the
    extremes the bound allows: (-128, 0), (0, -128), (64, -64), (127, 1), (-127, -1), and 7-bit values."""
    w = rng.integers(-64, 65, size=(k, n))
    extremes = [(-128, 0), (0, -128), (64, -64), (-64, 64), (127, 1), (-127, -1), (1, 127), (128 - 9, -9)]
    for i, (a, b) in enumerate(extremes):
        kk = 2 * (i % ((k + 1) // 2))
        c = i % n
        w[kk, c] = a
        if kk + 1 < k:
            w[kk + 1, c] = b
        elif abs(a) > 127 or a == 128 - 9:
            w[kk, c] = -128  # an odd last k pairs with the padding's zero
    return w


def test_quads_layout_chosen_only_when_exact() -> None:
    """With AVX2 (no VNNI) the byte quads' layout (vpmaddubsw) is chosen exactly when every pair of k of
    every column has |w'_k| + |w'_k+1| <= 128: 7-bit filters, the pair bound's extremes; one pair past
    it (|-128| + 1, 65 + 64), anywhere, keeps the int16 pairs' layout. A lone odd last k pairs with 0."""
    layouts = {_qgemm.QWeights(np.zeros((4, 3), dtype=np.float32), 0, False).layout}
    if layouts == {_qgemm.VNNI}:
        pytest.skip("the VNNI variant has one layout")
    rng = np.random.default_rng(128)
    for k, n in [(1, 1), (2, 3), (5, 9), (27, 32), (64, 17)]:
        w = _bounded_pairs(rng, k, n)
        assert _qgemm.QWeights(w.astype(np.float32), 0, False).layout == _qgemm.QUADS, (k, n)
        for a, b in [(-128, 1), (65, 64), (-65, -64), (127, 2)]:
            bad = w.copy()
            kk, c = 2 * int(rng.integers(0, k // 2)) if k > 1 else 0, int(rng.integers(0, n))
            bad[kk, c] = a
            if kk + 1 < k:
                bad[kk + 1, c] = b
            want = _qgemm.PAIRS if kk + 1 < k or abs(a) > 128 else _qgemm.QUADS
            assert _qgemm.QWeights(bad.astype(np.float32), 0, False).layout == want, (k, n, a, b)
    # a uint8 filter's centred values that do not fit int8 are centred by zw = -ceil((min + max) / 2): the
    # bound applies to w' = centred + zw; so are those that fit int8 when that brings them within 7 bits.
    # (128, 0) -> (64, -64) and (-120, 8) -> (-64, 64): quads; (-120, 10) stays (zw 0, 130 > 128),
    # (255, 0) -> (127, -128) and (-129, 0) -> (-65, 64), one past the bound: pairs
    cases = [((128, 0), -64, _qgemm.QUADS), ((-120, 8), 56, _qgemm.QUADS), ((-120, 10), 0, _qgemm.PAIRS),
             ((255, 0), -128, _qgemm.PAIRS),
             ((-129, 0), 64, _qgemm.PAIRS)]  # fmt: skip
    for pair, zw, want in cases:
        qw = _qgemm.QWeights(np.array(pair, dtype=np.float32).reshape(2, 1), 0, False)
        assert (qw.zw, qw.layout) == (zw, want), pair


@pytest.mark.parametrize("signed", [False, True])
def test_quads_layout_matches_int64_reference(signed: bool) -> None:
    """The byte quads' path (vpmaddubsw) bit-exact against the int64 reference: pairs at the bound's
    extremes against inputs at both ends of their range (the largest 16-bit sums: 255 * 128), K of every
    remainder modulo 4 (the last quad read byte by byte), n off the panel and register block sizes, m off
    the block of 4 rows and a task's 48, extreme and random zero points, per-channel multipliers that
    differ widely, the int64 requantization form, junk past K, 1 to 3 threads."""
    rng = np.random.default_rng(4 + int(signed))
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    shapes = [(1, 1, 1), (5, 2, 8), (3, 3, 17), (4, 4, 16), (7, 5, 9), (49, 27, 32), (50, 32, 64),
              (13, 259, 33), (97, 130, 65), (6, 1025, 24), (196, 64, 130)]  # fmt: skip
    before = native.threads()
    try:
        for i, (m, k, n) in enumerate(shapes):
            native.set_threads(1 + i % 3)
            centred = _bounded_pairs(rng, k, n)
            for zp_x in (info.min, info.max, int(rng.integers(info.min, info.max + 1))):
                x = rng.integers(info.min, info.max + 1, size=(m, k)).astype(dtype)
                x[0] = info.max if zp_x == info.min else info.min  # the row farthest from the zero point
                x[-1, ::2] = info.max  # as read: 255 against the pairs' extremes
                x[-1, 1::2] = info.min
                wide = i % 3 == 1
                _, _, bias = _case(rng, k, n, signed, "pc", wide)
                q = _quant(rng, n, signed, True, wide)
                q = QuantConv(0, 0, q.multiplier, q.shift + rng.integers(-6, 7, size=n) * (not wide),
                              q.output_zp, q.lo, q.hi, q.output_type)  # fmt: skip
                w = _qgemm.QWeights(centred.astype(np.float32), zp_x, signed)
                assert w.layout in (_qgemm.VNNI, _qgemm.QUADS)
                want = _reference(x, zp_x, centred.astype(np.float32), bias, q)
                for lda in (_qgemm.row_stride(k), _qgemm.row_stride(k) + 3):
                    got = _run(x, lda, zp_x, centred.astype(np.float32), bias, q)
                    np.testing.assert_array_equal(
                        got, want, err_msg=f"m={m} k={k} n={n} zp_x={zp_x} lda={lda}"
                    )
    finally:
        native.set_threads(before)


@pytest.mark.parametrize("signed", [False, True])
def test_quads_layout_with_a_filter_zero_point(signed: bool) -> None:
    """A uint8 filter whose centred values span at most 129 but do not fit int8 (zw != 0: the row term
    zw * rowsum, summed over the rows' bytes as read) on the quads' path, as the int64 reference."""
    rng = np.random.default_rng(12 + int(signed))
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    for m, k, n in [(5, 3, 7), (50, 40, 20), (9, 301, 70)]:
        centred = rng.integers(70, 129, size=(k, n))  # zw = -99: w' in [-29, 29]
        centred[0, 0], centred[-1, -1] = 128, 70
        zp_x = int(rng.integers(info.min, info.max + 1))
        w = _qgemm.QWeights(centred.astype(np.float32), zp_x, signed)
        assert w.zw == -99 and w.layout in (_qgemm.VNNI, _qgemm.QUADS)
        x = rng.integers(info.min, info.max + 1, size=(m, k)).astype(dtype)
        _, _, bias = _case(rng, k, n, signed, "u8", False)
        q = _quant(rng, n, signed, False, False)
        want = _reference(x, zp_x, centred.astype(np.float32), bias, q)
        got = _run(x, _qgemm.row_stride(k) + 1, zp_x, centred.astype(np.float32), bias, q)
        np.testing.assert_array_equal(got, want, err_msg=f"m={m} k={k} n={n}")
