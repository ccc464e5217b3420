"""MEAN: arithmetic mean of input 0 over the axes of input 1 (TENSOR_INT32); input 2 is keep_dims (INT32, > 0 keeps).

Quant8: the output has the input's type, any scale and zero point. Over the n
reduced elements, acc = sum(x - zp_in) exactly (int64), then
round(acc * s_in / (s_out * n)) by the precision-preserving `rescale`, plus
zp_out, saturated. NNAPI 1.3's CPU reference (TFLite's reference Mean<T, int32>)
instead truncates sum(x) / n on the raw values and requires the output to keep
the input's scale and zero point; with equal quantization the two differ by at
most one unit (this kernel rounds to nearest, the reference rounds toward zero).

For up to 4096 reduced elements the output of every possible raw sum is a table
built on first use per count; the raw bytes are then summed in the narrowest
integer type that holds the sum exactly (uint16 for up to 257 uint8 values) and
looked up, which gives the same bytes as the int64 arithmetic above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, register
from driver.ops._qelementwise import f32, quant8_output, rescale
from driver.ops._quant import QUANT8_DTYPE, QUANT8_RANGE, saturate
from driver.ops._reduce import QuantReducer, prepare_reduce
from mlts.hal.enums import OperandType, OperationType

# Up to this many reduced elements (a 1 MiB table), the outputs of every possible sum are a table.
TABLE_MAX_COUNT = 4096
MAX_TABLES = 4  # counts whose tables are kept (one per input shape seen)


def _quant_mean(name: str, x_info: ArgInfo, out: ArgInfo) -> QuantReducer:
    quant8_output(name, "output 0", out, x_info)
    lo, hi = QUANT8_RANGE[out.type]
    s_in, s_out = f32(x_info.scale), f32(out.scale)
    zp_in, zp_out = x_info.zero_point, out.zero_point
    x_lo, x_hi = QUANT8_RANGE[x_info.type]

    def from_sums(acc: np.ndarray, n: int) -> np.ndarray:
        """The output for sums `acc` (int64) of n centred inputs."""
        y = rescale(acc, s_in / (s_out * n), 255 * n) + zp_out
        return saturate(y, lo, hi, out.type)

    tables: dict[int, np.ndarray] = {}  # n -> the output for every raw sum n * x_lo .. n * x_hi

    def table_for(n: int) -> np.ndarray:
        table = tables.get(n)
        if table is None:
            table = from_sums(np.arange(n * x_lo, n * x_hi + 1, dtype=np.int64) - n * zp_in, n)
            if len(tables) < MAX_TABLES:
                tables[n] = table
        return table

    def mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        """The kernel's quantized reduction (driver.ops._reduce.QuantReducer)."""
        n = max(math.prod(x.shape[a] for a in axes), 1)
        if n > TABLE_MAX_COUNT:
            acc = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64) - n * zp_in
            return from_sums(acc, n)
        # The smallest accumulator that holds every sum exactly: uint16 / int16 for n <= 257 / 255.
        if x_lo == 0:
            acc_type: type = np.uint16 if n * x_hi <= 0xFFFF else np.int32
        else:
            acc_type = np.int16 if n * -x_lo <= 0x7FFF else np.int32
        raw = np.add.reduce(x, axis=axes, dtype=acc_type, keepdims=keep)  # type: ignore[call-overload]
        if x_lo:
            raw = raw.astype(np.intp)
            raw -= n * x_lo
        return table_for(n)[raw]

    # What the bound call (_bind_quant) reads: the same tables, and where a table's sums start.
    mean.table_for = table_for  # type: ignore[attr-defined]
    mean.lowest = x_lo  # type: ignore[attr-defined]
    return mean


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """np.mean's float arithmetic (its sum, then one division by the count) without its Python layers."""
    total = np.add.reduce(x, axis=axis, keepdims=keepdims)  # type: ignore[call-overload]
    return np.true_divide(total, math.prod(x.shape[a] for a in axis))


def _bind_quant(run: Run, reducer: QuantReducer, ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    """With constant axes and keep_dims, the 8-bit `run` with a compiled call for driver.bound_steps:
    mk_mean_q8 sums each run of reduced values that are consecutive axes of a C-contiguous input and
    looks the sum up in the same table as `reducer` (up to TABLE_MAX_COUNT values), so the same bytes."""
    axes_value, keep_value = ins[1].value, ins[2].value
    if not _fast.enabled() or axes_value is None or keep_value is None:
        return run
    axes_list = [int(a) for a in np.asarray(axes_value).reshape(-1)]
    keep = int(np.asarray(keep_value).reshape(-1)[0]) > 0
    dtype = np.dtype(QUANT8_DTYPE[outs[0].type])
    table_for, lowest = reducer.table_for, reducer.lowest  # type: ignore[attr-defined]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        shape = shapes[0]
        rank = len(shape)
        if not rank or 0 in shape or not axes_list or any(not -rank <= a < rank for a in axes_list):
            return None  # `run` raises or handles it
        axes = sorted({a % rank for a in axes_list})
        first, last = axes[0], axes[-1]
        if axes != list(range(first, last + 1)):
            return None
        n = math.prod(shape[first : last + 1])
        if n > TABLE_MAX_COUNT:
            return None
        if keep:
            out_shape = tuple(1 if d in axes else shape[d] for d in range(rank))
        else:
            out_shape = tuple(shape[d] for d in range(rank) if d not in axes) or (1,)
        view = (math.prod(shape[:first]), n, math.prod(shape[last + 1 :]))
        table = np.ascontiguousarray(table_for(n)).view(np.uint8)
        return _bind.bind_mean_q8(ptrs[0], view, out_shape, dtype, table, n * lowest)

    return Kernel(run, binding=Binding(bind))


@register(OperationType.MEAN)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    made: list[QuantReducer] = []

    def quant(name: str, x_info: ArgInfo, out: ArgInfo) -> QuantReducer:
        reducer = _quant_mean(name, x_info, out)
        made.append(reducer)
        return reducer

    run = prepare_reduce("MEAN", ins, outs, _mean, OperandType.INT32, quant=quant)
    if made:
        return _bind_quant(run, made[0], ins, outs)
    return run
