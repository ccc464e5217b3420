"""Calls into the compiled kernels (driver.native) for convolution, depthwise and fully-connected ops.

Each helper is used only when `driver.native.LIB` is loaded; the callers keep their NumPy path
for when it is not (and the tests compare both). Constant arrays (weights, bias, requantization
tables) are made C-contiguous with the dtype the C signature names once, at prepare, and their
addresses kept (`Const`); per call only the input's and the workspace buffers' addresses are
looked up, most of them cached (`_workspace.address`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from driver import native
from driver.ops import _qgemm
from driver.ops._quant import QUANT8_DTYPE
from driver.ops._window import Geometry, Window, geometry
from driver.ops._workspace import address, output, scratch
from mlts.hal.enums import FusedActivationFunc, OperandType

# The loaded library (None without one: then no helper here is called).
LIB: Any = native.LIB

F32 = np.float32
I64 = np.int64
INF = float("inf")

# Fused activation -> the float clamp bounds it stands for.
ACT_BOUNDS: dict[int, tuple[float, float]] = {
    FusedActivationFunc.NONE: (-INF, INF),
    FusedActivationFunc.RELU: (0.0, INF),
    FusedActivationFunc.RELU1: (-1.0, 1.0),
    FusedActivationFunc.RELU6: (0.0, 6.0),
}


def enabled() -> bool:
    return native.LIB is not None


def float32_only(ins, outs) -> bool:
    """The compiled float kernels read and write float32 only: input, weights, bias and output."""
    f32 = OperandType.TENSOR_FLOAT32
    return all(a.type == f32 for a in (*ins[:3], *outs[:1]))


def quant_weights(packed: np.ndarray, k: int, zp_x: int, input_type: int) -> Const | _qgemm.QWeights:
    """Constant centred quantized weights [K, N] for conv_q8 / fc_q8: for the integer GEMM when it can
    run them, else packed float32 (`packed` must then be float32-exact, see quant_fast)."""
    if _qgemm.available(k):
        return _qgemm.QWeights(packed, zp_x, input_type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED)
    return GemmWeights(packed)


def quant_fast(packed: np.ndarray | None, dtype: type, k: int) -> bool:
    """The compiled quantized path applies: constant weights, and either the integer GEMM or float32-exact sums."""
    return enabled() and packed is not None and (dtype is np.float32 or _qgemm.available(k))


class Const:
    """A constant array in the layout and dtype a compiled kernel reads, and its address."""

    __slots__ = ("array", "ptr")

    def __init__(self, value: np.ndarray, dtype: type) -> None:
        self.array: np.ndarray = np.ascontiguousarray(value, dtype=dtype)
        self.ptr = self.array.ctypes.data


PANEL = 16  # columns per panel of packed GEMM weights (kernels.c)


_UNPACK_LOCK = threading.Lock()


class GemmWeights(Const):
    """Constant GEMM weights [K, N] packed in panels of PANEL columns (mk_pack_b_f32): the compiled
    GEMM streams each panel in memory order and splits the work over its threads with no per-call
    packing.

    The panels are the only copy kept: the plain [K, N] matrix (`array`, at `ptr`), which only the
    GEMM's loop for fewer than four rows and the NumPy fallbacks read, is made again from the panels
    the first time one of them asks (the same floats: packing copies them) and kept from then on.
    `k` and `n` give its shape without making it.
    """

    __slots__ = ("panels", "panels_ptr", "k", "n", "_kn", "_kn_ptr")

    def __init__(self, value: np.ndarray, dtype: type = F32) -> None:
        kn: np.ndarray = np.ascontiguousarray(value, dtype=dtype)
        self.k, self.n = kn.shape
        self.panels: np.ndarray = np.empty((-(-self.n // PANEL), self.k, PANEL), dtype=F32)
        self.panels_ptr = self.panels.ctypes.data
        self._kn: np.ndarray | None = kn
        self._kn_ptr = kn.ctypes.data
        if self.panels.size:
            LIB.mk_pack_b_f32(self._kn_ptr, self.k, self.n, self.panels_ptr)
            self._kn, self._kn_ptr = None, 0  # made again from the panels when asked for

    @property
    def array(self) -> np.ndarray:  # type: ignore[override]
        kn = self._kn
        return kn if kn is not None else self._unpack()

    @property
    def ptr(self) -> int:  # type: ignore[override]
        return self._kn_ptr if self._kn is not None else self._unpack().ctypes.data

    def _unpack(self) -> np.ndarray:
        """The [K, N] matrix from the panels, made once: a matrix once handed out is never replaced
        (a concurrent run may be reading it at its address)."""
        with _UNPACK_LOCK:
            if self._kn is None:
                kn = np.ascontiguousarray(self.panels.transpose(1, 0, 2).reshape(self.k, -1)[:, : self.n])
                self._kn_ptr = kn.ctypes.data
                self._kn = kn
            return self._kn


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, a_ptr: int, b_ptr: int, out_ptr: int) -> None:
    """out = a @ b for C-contiguous float32 matrices whose addresses the caller knows: the kernels'
    sgemm over their threads when there is one (see native._adopt_blas), else np.matmul."""
    if HAS_GEMM:
        m, k = a.shape
        if LIB.mk_gemm_f32(a_ptr, b_ptr, out_ptr, m, b.shape[1], k) == 0:
            return
    np.matmul(a, b, out=out)


def gemm_bias_act(
    a: np.ndarray,
    b: np.ndarray,
    out: np.ndarray,
    a_ptr: int,
    b_ptr: int,
    out_ptr: int,
    bias_ptr: int,
    act: int,
    panels_ptr: int = 0,
) -> None:
    """out = clamp(a @ b + bias, activation bounds): the bias and activation fused into the compiled
    GEMM's stores (the same floats as a separate pass), else np.matmul and the compiled pass.
    `panels_ptr`, when not 0, is b packed by mk_pack_b_f32 (GemmWeights), which the GEMM reads instead."""
    lo, hi = ACT_BOUNDS[act]
    m, k = a.shape
    if panels_ptr and m >= 4:  # fewer rows: the GEMM's loop that streams b once (float sums as before)
        LIB.mk_gemm_packed_bias_act_f32(a_ptr, panels_ptr, out_ptr, m, b.shape[1], k, bias_ptr, lo, hi)
        return
    if HAS_GEMM:
        if LIB.mk_gemm_bias_act_f32(a_ptr, b_ptr, out_ptr, m, b.shape[1], k, bias_ptr, lo, hi) == 0:
            return
    np.matmul(a, b, out=out)
    LIB.mk_bias_act_f32(out_ptr, a.shape[0], b.shape[1], bias_ptr, lo, hi)


HAS_GEMM = native.has_gemm()


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b into a new array; float32 matrices go through the compiled GEMM (whose loop for fewer
    than four rows, an LSTM step's or a fully connected layer's, is several times BLAS's speed)."""
    if (
        LIB is None
        or a.dtype != F32
        or b.dtype != F32
        or a.ndim != 2
        or b.ndim != 2
        or a.shape[1] != b.shape[0]
        or not b.flags.c_contiguous
    ):
        return a @ b
    a = np.ascontiguousarray(a)
    out = np.empty((a.shape[0], b.shape[1]), dtype=F32)
    if a.size and out.size:
        gemm(a, b, out, a.ctypes.data, b.ctypes.data, out.ctypes.data)
    else:
        out[...] = 0
    return out


def gemm_weights_bias_act(
    a: np.ndarray, w: Const, out: np.ndarray, a_ptr: int, out_ptr: int, bias_ptr: int, act: int
) -> None:
    """`gemm_bias_act` of a by the constant weights w: their packed panels for 4 rows or more (the
    plain matrix of a GemmWeights is then never made), else the plain [K, N] matrix."""
    if isinstance(w, GemmWeights) and w.panels_ptr and a.shape[0] >= 4:
        lo, hi = ACT_BOUNDS[act]
        LIB.mk_gemm_packed_bias_act_f32(
            a_ptr, w.panels_ptr, out_ptr, a.shape[0], w.n, a.shape[1], bias_ptr, lo, hi
        )
        return
    gemm_bias_act(a, w.array, out, a_ptr, w.ptr, out_ptr, bias_ptr, act)


def _units(w: Const) -> int:
    """The columns (N) of constant GEMM weights [K, N]."""
    return w.n if isinstance(w, GemmWeights) else w.array.shape[1]


def _check(status: int) -> None:
    if status != 0:
        raise MemoryError("compiled kernel could not allocate its requantization tables")


def _x(x: np.ndarray) -> tuple[np.ndarray, int]:
    """A C-contiguous input and its address."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return x, address(x)


class GeometryCache:
    """The geometry of one operation for the last input shape seen, with its int32 form for C.

    Shared by concurrent runs of a plan: the entry is replaced as a whole, never updated in place.
    """

    __slots__ = ("name", "window", "k_h", "k_w", "entry")

    def __init__(self, name: str, window: Window, k_h: int, k_w: int) -> None:
        self.name, self.window, self.k_h, self.k_w = name, window, k_h, k_w
        self.entry: tuple[tuple[int, ...], Geometry, np.ndarray, int] | None = None

    def get(self, shape: tuple[int, ...]) -> tuple[Geometry, int]:
        entry = self.entry
        if entry is None or entry[0] != shape:
            n, h, w, c = shape
            g = geometry(self.name, self.window, h, w, self.k_h, self.k_w)
            arr = np.array(
                [n, h, w, c, g.k_h, g.k_w, g.stride_h, g.stride_w, g.dilation_h, g.dilation_w,
                 g.pad_top, g.pad_left, g.out_h, g.out_w],
                dtype=np.int32,
            )  # fmt: skip
            entry = (shape, g, arr, arr.ctypes.data)
            self.entry = entry
        return entry[1], entry[3]


@dataclass(frozen=True, slots=True)
class Requant:
    """Per-output-channel requantization constants, each [Cout] int64 and C-contiguous."""

    bias: Const
    mult: Const
    left: Const
    right: Const
    zp: int
    lo: int
    hi: int
    signed: int
    dtype: type


def requant_params(bias: np.ndarray, q, cout: int) -> Requant:
    """`q` (a _qconv.QuantConv) and an int64 bias broadcast to [Cout] arrays for the C kernels."""

    def per_channel(v) -> Const:
        return Const(np.broadcast_to(np.asarray(v, dtype=I64), (cout,)), I64)

    shift = np.broadcast_to(np.asarray(q.shift, dtype=I64), (cout,))
    return Requant(
        per_channel(bias), per_channel(q.multiplier), per_channel(np.maximum(shift, 0)),
        per_channel(np.maximum(-shift, 0)), int(q.output_zp), int(q.lo), int(q.hi),
        int(q.output_type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED), QUANT8_DTYPE[q.output_type],
    )  # fmt: skip


def gemm_requant(
    cols: np.ndarray, w: Const, acc: np.ndarray, cp: int, ap: int, rq: Requant, y_ptr: int
) -> None:
    """acc = cols @ w (exact float32 integers), requantized into y block by block as the compiled GEMM
    finishes each (no second pass over acc); without BLAS, np.matmul and the separate pass."""
    rows, cout = acc.shape
    if isinstance(w, GemmWeights):
        status = LIB.mk_gemm_packed_requant_f32(
            cp, w.panels_ptr, ap, rows, cout, cols.shape[1], rq.bias.ptr, rq.mult.ptr, rq.left.ptr,
            rq.right.ptr, rq.zp, rq.lo, rq.hi, rq.signed, y_ptr,
        )  # fmt: skip
        _check(status)
        return
    if HAS_GEMM:
        status = LIB.mk_gemm_requant_f32(
            cp, w.ptr, ap, rows, cout, cols.shape[1], rq.bias.ptr, rq.mult.ptr, rq.left.ptr,
            rq.right.ptr, rq.zp, rq.lo, rq.hi, rq.signed, y_ptr,
        )  # fmt: skip
        if status == 0:
            return
        if status == -1:
            _check(status)  # out of memory; -2 (no compiled GEMM for this shape) falls back below
    np.matmul(cols, w.array, out=acc)
    _requant(ap, rows, cout, rq, y_ptr)


def _gemm_requant_q8(
    x: np.ndarray, xp: int, zp_x: int, w: Const, acc: np.ndarray, rq: Requant, y_ptr: int
) -> None:
    """acc = (x - zp_x) @ w for 8-bit x read as [rows, K] (contiguous), requantized into y: on packed
    weights the GEMM centres x task by task; else a centring pass, then gemm_requant."""
    rows, cout = acc.shape
    k = w.k if isinstance(w, GemmWeights) else w.array.shape[0]
    signed = int(x.dtype == np.int8)
    if isinstance(w, GemmWeights):
        status = LIB.mk_gemm_packed_requant_q8(
            xp, signed, zp_x, w.panels_ptr, address(acc), rows, cout, k, rq.bias.ptr, rq.mult.ptr,
            rq.left.ptr, rq.right.ptr, rq.zp, rq.lo, rq.hi, rq.signed, y_ptr,
        )  # fmt: skip
        _check(status)
        return
    cols = scratch("cols", (rows, k), F32)
    cp = address(cols)
    LIB.mk_center_q8(xp, signed, zp_x, rows * k, cp)
    gemm_requant(cols, w, acc, cp, address(acc), rq, y_ptr)


def _requant(acc_ptr: int, rows: int, cout: int, rq: Requant, y_ptr: int) -> None:
    status = LIB.mk_requant_f32(
        acc_ptr, rows, cout, rq.bias.ptr, rq.mult.ptr, rq.left.ptr, rq.right.ptr,
        rq.zp, rq.lo, rq.hi, rq.signed, y_ptr,
    )  # fmt: skip
    _check(status)


def _qgemm_rows(x2: np.ndarray, xp: int, w: _qgemm.QWeights, rq: Requant, y_ptr: int) -> None:
    """The integer GEMM on contiguous 8-bit rows x2 [rows, K]; rows whose length is not a multiple of
    4 are first copied into rows that are (the kernel reads K rounded up to 4 bytes per row)."""
    rows, k = x2.shape
    lda = _qgemm.row_stride(k)
    if lda != k:
        padded = scratch("qrows", (rows, lda), np.uint8)
        padded[:, :k] = x2.view(np.uint8)
        x2, xp = padded, address(padded)
    _qgemm.gemm_requant(xp, lda, rows, w, rq, y_ptr)


def conv_f32(x: np.ndarray, gc: GeometryCache, w: Const, bias: Const, act: int, out_c: int) -> np.ndarray:
    """Float convolution (NHWC): compiled patches unless 1x1 stride 1, the GEMM into the step's
    output, then bias and activation in one compiled pass. w is [KH*KW*C, Cout]."""
    x, xp = _x(x)
    g, gp = gc.get(x.shape)
    n, c = x.shape[0], x.shape[3]
    rows = n * g.out_h * g.out_w
    if g.k_h == g.k_w == g.stride_h == g.stride_w == 1 and not g.padded:
        cols, cp = x.reshape(rows, c), xp
    else:
        cols = scratch("cols", (rows, g.k_h * g.k_w * c), F32)
        cp = address(cols)
        LIB.mk_im2col_f32(xp, gp, cp)
    y = output((n, g.out_h, g.out_w, out_c), F32)
    gemm_weights_bias_act(cols, w, y.reshape(rows, out_c), cp, address(y), bias.ptr, act)
    return y


def conv_q8(
    x: np.ndarray, zp_x: int, gc: GeometryCache, w: Const | _qgemm.QWeights, rq: Requant, out_c: int
) -> np.ndarray:
    """Quantized convolution (NHWC): the centred patch matrix in float32 (compiled), the exact float32
    GEMM (w holds w - zp_w, proven exact by _qconv.accumulation_dtype), the compiled requantization;
    with w a _qgemm.QWeights, the byte patch matrix and the integer GEMM instead."""
    x, xp = _x(x)
    g, gp = gc.get(x.shape)
    n, c = x.shape[0], x.shape[3]
    rows = n * g.out_h * g.out_w
    k = g.k_h * g.k_w * c
    signed = int(x.dtype == np.int8)
    y = output((n, g.out_h, g.out_w, out_c), rq.dtype)
    pointwise = g.k_h == g.k_w == g.stride_h == g.stride_w == 1 and not g.padded
    if isinstance(w, _qgemm.QWeights):  # the exact integer GEMM (VNNI or AVX2) on the raw bytes
        if pointwise:
            _qgemm_rows(x.reshape(rows, c), xp, w, rq, address(y))
            return y
        lda = _qgemm.row_stride(k)
        qcols = scratch("qcols", (rows, lda), np.uint8)
        qp = address(qcols)
        _qgemm.im2col(xp, gp, zp_x, lda, qp)
        _qgemm.gemm_requant(qp, lda, rows, w, rq, address(y))
        return y
    acc = scratch("acc", (rows, out_c), F32)
    if pointwise == g.k_w == g.stride_h == g.stride_w == 1 and not g.padded:
        _gemm_requant_q8(x, xp, zp_x, w, acc, rq, address(y))
        return y
    cols = scratch("cols", (rows, k), F32)
    cp = address(cols)
    LIB.mk_im2col_q8(xp, signed, zp_x, gp, cp)
    gemm_requant(cols, w, acc, cp, address(acc), rq, address(y))
    return y


def fc_f32(x2: np.ndarray, w: Const, bias: Const, act: int) -> np.ndarray:
    """x2 [batch, size] @ w [size, units] + bias, then the activation."""
    rows, units = x2.shape[0], _units(w)
    x2, xp = _x(x2)
    y = output((rows, units), F32)
    gemm_weights_bias_act(x2, w, y, xp, address(y), bias.ptr, act)
    return y


def fc_q8(x2: np.ndarray, zp_x: int, w: Const | _qgemm.QWeights, rq: Requant) -> np.ndarray:
    """Quantized fully connected: centred input, exact float32 GEMM, compiled requantization (or the
    integer GEMM for w a _qgemm.QWeights)."""
    x2, xp = _x(x2)
    rows, size = x2.shape
    if isinstance(w, _qgemm.QWeights):  # the exact integer GEMM (VNNI or AVX2) on the raw bytes
        y = output((rows, w.n), rq.dtype)
        _qgemm_rows(x2, xp, w, rq, address(y))
        return y
    units = _units(w)
    acc = scratch("acc", (rows, units), F32)
    y = output((rows, units), rq.dtype)
    _gemm_requant_q8(x2, xp, zp_x, w, acc, rq, address(y))
    return y


def depthwise_f32(x: np.ndarray, gc: GeometryCache, mult: int, w: Const, bias: Const, act: int) -> np.ndarray:
    """Float depthwise convolution of NHWC `x`, bias and activation fused: [N,OH,OW,C*M]."""
    x, xp = _x(x)
    g, gp = gc.get(x.shape)
    lo, hi = ACT_BOUNDS[act]
    y = output((x.shape[0], g.out_h, g.out_w, x.shape[3] * mult), F32)
    LIB.mk_depthwise_f32(xp, gp, mult, w.ptr, bias.ptr, lo, hi, address(y))
    return y


class DepthwiseQ8Weights(Const):
    """A quantized depthwise filter's weights in the compiled kernel's packed form (mk_depthwise_q8_pack):
    `centred` [KH, KW, Cout] is the filter minus its zero point (integers in [-255, 255], any dtype)."""

    __slots__ = ()

    def __init__(self, centred: np.ndarray) -> None:
        w = np.ascontiguousarray(centred, dtype=np.int16).reshape(-1, centred.shape[-1])
        taps, cout = w.shape
        packed = np.empty(LIB.mk_depthwise_q8_packed_size(taps, cout), dtype=np.int16)
        LIB.mk_depthwise_q8_pack(w.ctypes.data, taps, cout, packed.ctypes.data)
        super().__init__(packed, np.int16)


def depthwise_q8(
    x: np.ndarray, zp_x: int, gc: GeometryCache, mult: int, w: DepthwiseQ8Weights, rq: Requant
) -> np.ndarray:
    """Quantized depthwise convolution of 8-bit NHWC `x` (exact int32 sums), requantized."""
    x, xp = _x(x)
    g, gp = gc.get(x.shape)
    y = output((x.shape[0], g.out_h, g.out_w, x.shape[3] * mult), rq.dtype)
    status = LIB.mk_depthwise_q8(
        xp, int(x.dtype == np.int8), zp_x, gp, mult, w.ptr, rq.bias.ptr, rq.mult.ptr, rq.left.ptr,
        rq.right.ptr, rq.zp, rq.lo, rq.hi, address(y),
    )  # fmt: skip
    _check(status)
    return y
