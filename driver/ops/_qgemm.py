"""The exact 8-bit GEMM of driver/native/qgemm_kernels.c for quantized CONV_2D and FULLY_CONNECTED.

Used when the compiled kernels are loaded, were built for a processor with AVX512-VNNI (vpdpbusd) or
AVX2 (16-bit products by vpmaddwd), the weights are constant and K <= 33025 (every centred sum then
fits int32, see the C file); otherwise the callers keep the float32 path of `_fast`. The weights are
stored at prepare as signed bytes w' with a zero point zw such that w' - zw equals the centred
weights w - zp_w exactly (zw = 0 when the centred weights fit int8, as per-channel and most signed
filters do, unless centring them brings them within 7 bits), packed by the C side in the layout of
the variant it was compiled with and, with AVX2, of the weights (int16 pairs for vpmaddwd, or byte
quads for vpmaddubsw where no pair of k can saturate its 16-bit sums: `layout`); its size and the
input rows' stride come from mk_qgemm_packed_bytes and mk_qgemm_row_stride, nothing here assumes
them; the input's zero point enters through per-column constants computed here in exact integers.
Results are bit-identical to the float path's (both compute the exact integer sum and requantize
it the same way). MLTS_DRIVER_QGEMM=0 in the driver's environment turns the integer GEMM off (to
compare the two paths); MLTS_DRIVER_NATIVE=0 turns it off with every compiled kernel. The functions
come from `driver.native`, which loads and checks the one library.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from driver import native
from driver.native.layout import QGEMM_MAX_K


def _lib() -> Any:
    """The compiled kernels when they hold the integer GEMM and it is not turned off, else None."""
    if os.environ.get("MLTS_DRIVER_QGEMM", "1") == "0" or not native.has_qgemm():
        return None
    return native.LIB


_LIB: Any = _lib()
MAX_K: int = QGEMM_MAX_K if _LIB is not None else 0


#: mk_qgemm_pack's layouts: VNNI's one; with AVX2 int16 pairs (vpmaddwd) or byte quads (vpmaddubsw).
VNNI, PAIRS, QUADS = 0, 1, 2


def available(k: int) -> bool:
    """The integer GEMM can run sums of k products."""
    return _LIB is not None and 1 <= k <= MAX_K


def row_stride(k: int) -> int:
    """The bytes per input row the kernel reads for sums of k products (the C side's
    mk_qgemm_row_stride: k rounded up to a multiple of 4 for VNNI, k for AVX2); only while available(k)."""
    return int(_LIB.mk_qgemm_row_stride(k))


def _wrap32(v: np.ndarray) -> np.ndarray:
    """int64 values modulo 2^32 as int32 (the C side sums modulo 2^32)."""
    return ((v + 2**31) % 2**32 - 2**31).astype(np.int32)


class QWeights:
    """Constant centred weights [K, N] (w - zp_w, integers) as packed s8 w' with zero point zw, and the
    column terms of an input with zero point `input_zp` (raw; `input_signed`: int8 input)."""

    __slots__ = ("k", "n", "zw", "panels", "panels_ptr", "colc", "colc_ptr", "signed", "layout")

    def __init__(self, centred: np.ndarray, input_zp: int, input_signed: bool) -> None:
        c = np.asarray(centred)
        k, n = c.shape
        ci = c.astype(np.int64)
        if not np.array_equal(ci, c):
            raise ValueError("centred weights must be integers")
        lo, hi = (int(ci.min()), int(ci.max())) if ci.size else (0, 0)
        if hi - lo > 255:
            raise ValueError("centred weights span more than 8 bits")
        # zw = 0 keeps w' = centred (no row sums) where it fits int8; otherwise, or where centring brings
        # every w' within 7 bits (so that the AVX2 kernel's byte quads apply, see mk_qgemm_pack), zw
        # centres the span: w' in [-128, 127] for any span <= 255
        zc = -((lo + hi + 1) // 2)
        fits = lo >= -128 and hi <= 127
        zw = 0 if fits and (max(-lo, hi) <= 64 or max(-(lo + zc), hi + zc) > 64) else zc
        w8 = np.ascontiguousarray(ci + zw, dtype=np.int8)  # w' = centred + zw in [-128, 127]
        self.k, self.n, self.zw, self.signed = k, n, zw, int(input_signed)
        self.panels: np.ndarray = np.zeros(int(_LIB.mk_qgemm_packed_bytes(k, n)), dtype=np.int8)
        self.panels_ptr = self.panels.ctypes.data
        # the packed layout the C side chose (LAYOUTS); with AVX2, QUADS when every pair of k of every
        # column of w' has |w'_k| + |w'_k+1| <= 128 (7-bit filters always do)
        self.layout: int = int(_LIB.mk_qgemm_pack(w8.ctypes.data, k, n, self.panels_ptr))
        zx = input_zp + (128 if input_signed else 0)
        colsum = (ci + zw).sum(axis=0)
        self.colc: np.ndarray = _wrap32(-zx * colsum + k * zx * zw)
        self.colc_ptr = self.colc.ctypes.data


def gemm_requant(a_ptr: int, lda: int, rows: int, w: QWeights, rq: Any, y_ptr: int) -> None:
    """y = requantize((a - zp_x) @ centred + bias) for 8-bit a [rows, lda] (the first K bytes of each
    row; lda >= row_stride(K)), `rq` a _fast.Requant."""
    status = _LIB.mk_qgemm_requant(
        a_ptr, lda, w.signed, w.panels_ptr, w.colc_ptr, w.zw, rows, w.n, w.k, rq.bias.ptr, rq.mult.ptr,
        rq.left.ptr, rq.right.ptr, rq.zp, rq.lo, rq.hi, rq.signed, y_ptr,
    )  # fmt: skip
    if status == -1:
        raise MemoryError("compiled kernel could not allocate its requantization tables")
    if status != 0:
        raise RuntimeError(f"integer GEMM refused K={w.k}")


def im2col(x_ptr: int, geom_ptr: int, pad: int, lda: int, cols_ptr: int) -> None:
    """The byte patch matrix of 8-bit x (`pad`, the input's raw zero point, in the padding)."""
    _LIB.mk_qim2col(x_ptr, geom_ptr, pad & 0xFF, lda, cols_ptr)
