"""Binding the compiled kernels' calls (driver.bound_steps): what `driver.ops._fast`'s helpers call
for inputs of fixed shapes at fixed addresses, as a list of calls `mk_run_calls` runs (kernels.c).

Each `bind_*` mirrors one helper of `_fast` branch for branch and returns its calls (or None where
the helper would do more than make compiled calls that cannot fail, or whose failure is not what
`BoundStep.fail` describes); the outputs are the current workspace's buffers, as the helpers' are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from driver.native.layout import (  # noqa: F401  (CALL_INTS: driver.bound_steps's row width)
    CALL_ADD_F32,
    CALL_COPY,
    CALL_COPY_2D,
    CALL_DEPTHWISE_F32,
    CALL_DEPTHWISE_Q8,
    CALL_GEMM_FEWROWS_BIAS_ACT_F32,
    CALL_GEMM_PACKED_BIAS_ACT_F32,
    CALL_IM2COL_F32,
    CALL_INTS,
    CALL_LOGISTIC_F32,
    CALL_MEAN_Q8,
    CALL_PAIR_TABLE_Q8,
    CALL_QGEMM_REQUANT,
    CALL_QIM2COL,
    CALL_SOFTMAX_F32,
    CALL_SOFTMAX_Q8,
    CALL_TANH_F32,
)
from driver.ops import _qgemm
from driver.ops._fast import ACT_BOUNDS, F32, HAS_GEMM, Const, GemmWeights, GeometryCache, Requant
from driver.ops._workspace import address, output

# A call's kind and int arguments follow the kind's structure in driver.native.layout (mlts_kernels.h's
# mk_call_t): CALL_INTS int64 words, kind first, and CALL_FLOATS floats.
#: The most 2-D block copies one bound SLICE makes (more: it runs unbound).
MAX_BLOCK_COPIES = 64

# A call: (kind, its int arguments (addresses and sizes), its float arguments).
Call = tuple[int, tuple[int, ...], tuple[float, ...]]


@dataclass(slots=True)
class BoundStep:
    """The compiled calls one run of a kernel makes for inputs of fixed shapes at fixed addresses:
    the same functions with the same arguments, every address looked up once. `outs` are the step's
    outputs in the operation's order (buffers of the current workspace, each written by the calls);
    `keep` holds what the addresses point into; `macs` is the work (multiply-adds; elements for a
    sum); `fail`, for kernels that return a status, the exception a call's non-zero status stands
    for (what the step's Python raises for it)."""

    calls: list[Call]
    outs: tuple[np.ndarray, ...]
    keep: tuple[Any, ...]
    macs: int
    fail: Callable[[int], Exception] | None = None

    @property
    def out(self) -> np.ndarray:
        """The first output (a one-output step's only one)."""
        return self.outs[0]


class Scratch:
    """The temporary of a run of bound steps, shared by them (they run one after another): its
    address is a placeholder until every step is bound and its size known."""

    PLACEHOLDER = -(2**40)

    def __init__(self) -> None:
        self.floats = 0

    def ptr(self, floats: int) -> int:
        self.floats = max(self.floats, floats)
        return self.PLACEHOLDER


def bind_conv_f32(
    shape: tuple[int, ...],
    xp: int,
    gc: GeometryCache,
    w: Const,
    bias: Const,
    act: int,
    out_c: int,
    scratch: Scratch,
) -> BoundStep | None:
    """`conv_f32`'s calls for a C-contiguous float32 input of `shape` at `xp`, when it makes compiled
    calls only, with a GEMM that cannot fail: packed weights and at least 4 rows, or the compiled
    GEMM's loop for fewer rows (at least 8 columns); else None."""
    g, gp = gc.get(shape)
    entry = gc.entry
    n, c = shape[0], shape[3]
    rows = n * g.out_h * g.out_w
    if not isinstance(w, GemmWeights):
        return None
    if w.panels_ptr and rows >= 4:
        kind, wp = CALL_GEMM_PACKED_BIAS_ACT_F32, w.panels_ptr
    elif rows < 4 and out_c >= 8 and HAS_GEMM:
        kind, wp = CALL_GEMM_FEWROWS_BIAS_ACT_F32, w.ptr
    else:
        return None
    lo, hi = ACT_BOUNDS[act]
    calls: list[Call] = []
    if g.k_h == g.k_w == g.stride_h == g.stride_w == 1 and not g.padded:
        cp, k = xp, c
    else:
        k = g.k_h * g.k_w * c
        cp = scratch.ptr(rows * k)
        calls.append((CALL_IM2COL_F32, (xp, gp, cp), ()))
    y = output((n, g.out_h, g.out_w, out_c), F32)
    calls.append((kind, (cp, wp, address(y), rows, out_c, k, bias.ptr), (lo, hi)))
    return BoundStep(calls, (y,), (entry, w, bias), rows * k * out_c)


def bind_depthwise_f32(
    shape: tuple[int, ...], xp: int, gc: GeometryCache, mult: int, w: Const, bias: Const, act: int
) -> BoundStep:
    """`depthwise_f32`'s call for a C-contiguous float32 input of `shape` at `xp`."""
    g, gp = gc.get(shape)
    entry = gc.entry
    lo, hi = ACT_BOUNDS[act]
    y = output((shape[0], g.out_h, g.out_w, shape[3] * mult), F32)
    call = (CALL_DEPTHWISE_F32, (xp, gp, mult, w.ptr, bias.ptr, address(y)), (lo, hi))
    return BoundStep([call], (y,), (entry, w, bias), y.size * g.k_h * g.k_w)


def bind_add_f32(shape: tuple[int, ...], ap: int, bp: int) -> BoundStep:
    """np.add of two C-contiguous float32 arrays of `shape` at `ap` and `bp` into the step's output."""
    y = output(shape, F32)
    return BoundStep([(CALL_ADD_F32, (ap, bp, address(y), y.size), ())], (y,), (), y.size)


def bind_copy(xp: int, shape: tuple[int, ...], dtype: np.dtype | type) -> BoundStep:
    """A copy of the C-contiguous array of `dtype` at `xp` into the step's output of `shape` (as many
    elements)."""
    y = output(shape, dtype)
    return BoundStep([(CALL_COPY, (xp, address(y), y.nbytes), ())], (y,), (), y.size)


def bind_fc_f32(
    shape: tuple[int, ...], xp: int, size: int, w: Const, bias: Const, act: int
) -> BoundStep | None:
    """`fc_f32`'s call for a C-contiguous float32 input of `shape` (read as [rows, size]) at `xp`, with
    a GEMM that cannot fail: packed weights and at least 4 rows, or the compiled GEMM's loop for
    fewer rows (at least 8 units); else None."""
    count = int(np.prod(shape, dtype=np.int64))
    if len(shape) < 2 or size <= 0 or count % size or not isinstance(w, GemmWeights):
        return None
    rows, units = count // size, w.n
    if w.panels_ptr and rows >= 4:
        kind, wp = CALL_GEMM_PACKED_BIAS_ACT_F32, w.panels_ptr
    elif 0 < rows < 4 and units >= 8 and HAS_GEMM:
        kind, wp = CALL_GEMM_FEWROWS_BIAS_ACT_F32, w.ptr
    else:
        return None
    lo, hi = ACT_BOUNDS[act]
    y = output((rows, units), F32)
    call = (kind, (xp, wp, address(y), rows, units, size, bias.ptr), (lo, hi))
    return BoundStep([call], (y,), (w, bias), rows * size * units)


def bind_unary_f32(kind: int, xp: int, shape: tuple[int, ...]) -> BoundStep:
    """An elementwise compiled call (CALL_TANH_F32, CALL_LOGISTIC_F32) on the float32 C-contiguous
    array of `shape` at `xp` into the step's output."""
    y = output(shape, F32)
    return BoundStep([(kind, (xp, address(y), y.size), ())], (y,), (), y.size)


def bind_softmax_f32(xp: int, shape: tuple[int, ...], beta: float) -> BoundStep:
    """SOFTMAX along the last axis of the float32 C-contiguous array of `shape` at `xp` (no zero size)."""
    y = output(shape, F32)
    cols = shape[-1]
    return BoundStep([(CALL_SOFTMAX_F32, (xp, address(y), y.size // cols, cols), (beta,))], (y,), (), y.size)


def bind_softmax_q8(
    xp: int, shape: tuple[int, ...], dtype: np.dtype, exp_f0: np.ndarray, exp_accum: np.ndarray
) -> BoundStep:
    """8-bit SOFTMAX along the last axis of the C-contiguous array of `shape` and `dtype` (uint8 or
    int8) at `xp` (no zero size), with softmax.exp_tables' int64 tables."""
    y = output(shape, dtype)
    cols = shape[-1]
    signed = int(np.dtype(dtype) == np.int8)
    args = (xp, address(y), y.size // cols, cols, address(exp_f0), address(exp_accum), signed)
    return BoundStep([(CALL_SOFTMAX_Q8, args, ())], (y,), (exp_f0, exp_accum), y.size)


def bind_mean_q8(
    xp: int,
    view: tuple[int, int, int],
    out_shape: tuple[int, ...],
    dtype: np.dtype,
    table: np.ndarray,
    base: int,
) -> BoundStep:
    """8-bit MEAN over the middle axis of the C-contiguous [outer, n, inner] `view` of the array at
    `xp` (input and output of `dtype`, uint8 or int8): each raw sum s looked up as table[s - base]
    (mean.py's table of outputs, as bytes), into an output of `out_shape`."""
    outer, n, inner = view
    y = output(out_shape, dtype)
    signed = int(np.dtype(dtype) == np.int8)
    args = (xp, signed, outer, n, inner, address(table), base, address(y))
    return BoundStep([(CALL_MEAN_Q8, args, ())], (y,), (table,), outer * n * inner)


def bind_pair_table_q8(
    shape: tuple[int, ...], ap: int, bp: int, table: np.ndarray, dtype: np.dtype
) -> BoundStep:
    """An 8-bit binary operation tabulated over every pair of bytes (`table`: 65536 bytes, entry
    a * 256 + b) on two C-contiguous arrays of `shape` and `dtype` (uint8 or int8) at `ap` and `bp`."""
    y = output(shape, dtype)
    args = (ap, bp, address(table), address(y), y.size)
    return BoundStep([(CALL_PAIR_TABLE_Q8, args, ())], (y,), (table,), y.size)


# A block copy: (source offset, destination offset, rows, row length, source stride, destination
# stride), all in elements.
Block = tuple[int, int, int, int, int, int]


def slice_blocks(shape: tuple[int, ...], begin: Sequence[int], size: Sequence[int]) -> list[Block] | None:
    """The block copies that gather the slice [begin, begin + size) of a C-contiguous array of `shape`
    into a C-contiguous output (every size resolved, in range and non-zero); None when more than
    MAX_BLOCK_COPIES are needed."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    # The innermost run: dimension j (partly taken) and every full dimension after it.
    j = len(shape) - 1
    while j > 0 and begin[j] == 0 and size[j] == shape[j]:
        j -= 1
    run = size[j] * strides[j] if shape else 1
    offset = begin[j] * strides[j] if shape else 0
    # The outer dimensions, those of one index dropped and each full one merged into the one before.
    outer: list[list[int]] = []  # [count, stride]
    for d in range(j):
        offset += begin[d] * strides[d]
        if size[d] == 1:
            continue
        if outer and size[d] == shape[d] and outer[-1][1] == shape[d] * strides[d]:
            outer[-1] = [outer[-1][0] * size[d], strides[d]]
        else:
            outer.append([size[d], strides[d]])
    rows, stride = outer.pop() if outer else (1, run)
    starts = [offset]
    for count, step in outer:
        starts = [s + i * step for s in starts for i in range(count)]
        if len(starts) > MAX_BLOCK_COPIES:
            return None
    return [(s, k * rows * run, rows, run, stride, run) for k, s in enumerate(starts)]


def concat_blocks(shapes: Sequence[tuple[int, ...]], axis: int) -> list[Block]:
    """Per input (C-contiguous, of `shapes`, equal except along `axis`), the block copy that places it
    in the C-contiguous concatenation along `axis`."""
    rows = int(np.prod(shapes[0][:axis], dtype=np.int64))
    runs = [int(np.prod(s[axis:], dtype=np.int64)) for s in shapes]
    total = sum(runs)
    blocks, at = [], 0
    for run in runs:
        blocks.append((0, at, rows, run, run, total))
        at += run
    return blocks


#: Block copies read at most this many bytes past the start of their source (driver.bound_steps).
MAX_SOURCE_OFFSET = 1 << 32


def bind_copies(
    xps: Sequence[int], blocks: Sequence[Block], shape: tuple[int, ...], dtype: np.dtype
) -> BoundStep | None:
    """The block copies (one per entry of `blocks`, reading the array at xps[i] or xps[0]) into the
    step's output of `shape` and `dtype`; empty blocks are left out. None for a block that starts
    MAX_SOURCE_OFFSET bytes or more into its source."""
    y = output(shape, dtype)
    yp, item = address(y), dtype.itemsize
    calls: list[Call] = []
    for i, (src, dst, rows, run, s_stride, d_stride) in enumerate(blocks):
        if src * item >= MAX_SOURCE_OFFSET:
            return None
        if rows and run:
            xp = xps[i] if len(xps) > 1 else xps[0]
            args = (xp + src * item, yp + dst * item, rows, run * item, s_stride * item, d_stride * item)
            calls.append((CALL_COPY_2D, args, ()))
    return BoundStep(calls, (y,), (), y.size)


def _no_tables(status: int) -> Exception:
    return MemoryError("compiled kernel could not allocate its requantization tables")


def bind_conv_q8(
    shape: tuple[int, ...],
    xp: int,
    zp_x: int,
    gc: GeometryCache,
    w: Const | _qgemm.QWeights,
    rq: Requant,
    out_c: int,
    scratch: Scratch,
) -> BoundStep | None:
    """`conv_q8`'s calls for a C-contiguous 8-bit input of `shape` at `xp` on the integer GEMM
    (`w` a _qgemm.QWeights) without a copy of its rows; else None."""
    if not isinstance(w, _qgemm.QWeights):
        return None
    g, gp = gc.get(shape)
    entry = gc.entry
    n, c = shape[0], shape[3]
    rows = n * g.out_h * g.out_w
    k = g.k_h * g.k_w * c
    y = output((n, g.out_h, g.out_w, out_c), rq.dtype)
    calls: list[Call] = []
    if g.k_h == g.k_w == g.stride_h == g.stride_w == 1 and not g.padded:
        lda = _qgemm.row_stride(c)
        if lda != c:
            return None  # `_qgemm_rows` copies the rows first
        ap = xp
    else:
        lda = _qgemm.row_stride(k)
        ap = scratch.ptr(-(-rows * lda // 4))
        calls.append((CALL_QIM2COL, (xp, gp, zp_x & 0xFF, lda, ap), ()))
    gemm = (
        ap, lda, w.signed, w.panels_ptr, w.colc_ptr, w.zw, rows, w.n, w.k, rq.bias.ptr, rq.mult.ptr,
        rq.left.ptr, rq.right.ptr, rq.zp, rq.lo, rq.hi, rq.signed, address(y),
    )  # fmt: skip
    calls.append((CALL_QGEMM_REQUANT, gemm, ()))

    def fail(status: int) -> Exception:
        return _no_tables(status) if status == -1 else RuntimeError(f"integer GEMM refused K={w.k}")

    return BoundStep(calls, (y,), (entry, w, rq), rows * k * out_c, fail)


def bind_depthwise_q8(
    shape: tuple[int, ...],
    xp: int,
    signed: int,
    zp_x: int,
    gc: GeometryCache,
    mult: int,
    w: Const,
    rq: Requant,
) -> BoundStep:
    """`depthwise_q8`'s call for a C-contiguous 8-bit input of `shape` at `xp` (`signed`: int8)."""
    g, gp = gc.get(shape)
    entry = gc.entry
    y = output((shape[0], g.out_h, g.out_w, shape[3] * mult), rq.dtype)
    args = (
        xp, signed, zp_x, gp, mult, w.ptr, rq.bias.ptr, rq.mult.ptr, rq.left.ptr, rq.right.ptr, rq.zp, rq.lo,
        rq.hi, address(y),
    )  # fmt: skip
    return BoundStep(
        [(CALL_DEPTHWISE_Q8, args, ())], (y,), (entry, w, rq), y.size * g.k_h * g.k_w, _no_tables
    )
