"""CONCATENATION: inputs 0..n-1 joined along axis (input n, INT32, negative counts from the end).

Inputs have one rank, at most 4, and equal sizes except along the axis.

Quant8: every input has the output's 8-bit type; scales and zero points may
differ (HAL 1.2+). An input quantized like the output is copied; any other is
requantized per byte: round((x - zp_in) * s_in / s_out) by the
precision-preserving `rescale`, plus zp_out, saturated. NNAPI's reference
(TFLite's ConcatenationWithScaling) computes std::round(x * scale + bias) in
float32 instead; the two can differ by one unit where that float sum lands
near a half.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._params import float_outputs, float_tensor, int_param, known_rank, normalize_axis
from driver.ops._qelementwise import as_bytes, byte_values, f32, quant8_output, rescale, tensor_kind
from driver.ops._quant import QUANT8_RANGE, check_quant8, saturate
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "CONCATENATION"
MAX_RANK = 4  # NNAPI supports tensors of rank up to 4 here
MAX_CHECKED = 16  # input shape combinations remembered as valid

# Per input: None to copy it, else the 256-entry table from its bytes to output values.
Tables = list[np.ndarray | None]


def _requant_table(arg: ArgInfo, out: ArgInfo) -> np.ndarray | None:
    """None when `arg` is quantized like `out`, else out value per input byte."""
    if (f32(arg.scale), arg.zero_point) == (f32(out.scale), out.zero_point):
        return None
    y = rescale(byte_values(arg.type) - arg.zero_point, f32(arg.scale) / f32(out.scale), 255)
    return saturate(y + out.zero_point, *QUANT8_RANGE[out.type], out.type)


def _quant_tables(ins: Sequence[ArgInfo], out: ArgInfo) -> Tables:
    check_quant8(NAME, "input 0", ins[0])
    for i, arg in enumerate(ins):
        quant8_output(NAME, f"input {i}", arg, ins[0])
    quant8_output(NAME, "output 0", out, ins[0])
    return [_requant_table(arg, out) for arg in ins]


def _check_rank(rank: int) -> None:
    if rank > MAX_RANK:
        raise invalid(f"{NAME}: inputs have rank {rank}, expected rank 1 to {MAX_RANK}")


def _check_shapes(shapes: Sequence[tuple[int, ...]], ax: int) -> None:
    ref = shapes[0]
    for i, shape in enumerate(shapes):
        if len(shape) != len(ref) or any(
            a != b for d, (a, b) in enumerate(zip(shape, ref, strict=True)) if d != ax
        ):
            raise invalid(f"{NAME}: input {i} has shape {shape}, expected {ref} except along axis {ax}")


@register(OperationType.CONCATENATION)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    if len(ins) < 2:
        raise invalid(f"{NAME}: expected at least 2 inputs (tensors, then the axis), got {len(ins)}")
    expect_count(NAME, ins, (len(ins),), outs)
    n = len(ins) - 1
    tables: Tables | None = None
    if tensor_kind(NAME, "input 0", ins[0]):
        tables = _quant_tables(ins[:n], outs[0])
    else:
        for i in range(n):
            float_tensor(NAME, f"input {i}", ins[i])
        float_outputs(NAME, outs)
    axis = int_param(NAME, "axis", ins, n)
    ranks = {r for r in (known_rank(a) for a in ins[:n]) if r is not None}
    if len(ranks) > 1:
        raise invalid(f"{NAME}: inputs have ranks {sorted(ranks)}, expected one rank")
    for r in ranks:
        _check_rank(r)
        normalize_axis(NAME, "axis", axis, r)

    checked: dict[tuple[tuple[int, ...], ...], int] = {}  # input shapes already checked -> their axis

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        xs = args[:n]
        shapes = tuple([x.shape for x in xs])
        ax = checked.get(shapes)
        if ax is None:
            _check_rank(xs[0].ndim)
            ax = normalize_axis(NAME, "axis", axis, xs[0].ndim)
            _check_shapes(shapes, ax)
            if len(checked) < MAX_CHECKED:
                checked[shapes] = ax
        if tables is not None:
            xs = [x if t is None else t[as_bytes(x)] for x, t in zip(xs, tables, strict=True)]
        return [np.concatenate(xs, axis=ax)]

    if tables is None and all(a.type == OperandType.TENSOR_FLOAT32 for a in ins[:n]) and _fast.enabled():

        def bind(
            shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
        ) -> _bind.BoundStep | None:
            """`run` as one compiled block copy per C-contiguous float32 input (driver.bound_steps)."""
            _check_rank(len(shapes[0]))
            ax = normalize_axis(NAME, "axis", axis, len(shapes[0]))
            _check_shapes(shapes, ax)
            out = (*shapes[0][:ax], sum(s[ax] for s in shapes), *shapes[0][ax + 1 :])
            if 0 in out:
                return None
            return _bind.bind_copies(ptrs, _bind.concat_blocks(shapes, ax), out, np.dtype(np.float32))

        return Kernel(run, binding=Binding(bind, tuple(range(n))))
    return run
