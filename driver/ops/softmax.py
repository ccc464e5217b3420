"""SOFTMAX: exp(beta * (x - max)) / sum along axis (input 2, default -1); input 1 is beta.

8-bit (TENSOR_QUANT8_ASYMM, _SIGNED): NNAPI's uint8 kernel (TFLite's Softmax on gemmlowp fixed
point). The output scale must be 1/256 and the zero point 0 (-128 signed). Per row, d = x - max
lies in [-255, 0]; entries with d >= diff_min = -CalculateInputRadius(5, left_shift) contribute
exp_on_negative_values of d scaled to Q5.26 by beta * input_scale * 2^26 (at most 2^31 - 1,
QuantizeMultiplierGreaterThanOne); the sum is kept in Q12.19; GetReciprocal gives 2^n / sum;
the output is RoundingDivideByPOT(reciprocal * exp, n + 23) clamped to [0, 255], and 0 for the
entries below diff_min. The exponentials of the 256 possible d are a table built at prepare.
Signed inputs give the unsigned result minus 128 (d does not depend on the offset), as NNAPI's
int8 path does.

Where the C++ reference is undefined this kernel takes the exact value: a row sum of 512 or more
(e.g. 512 equal maxima) makes the final shift exceed 31, which we still round correctly; a sum
of 4096 or more overflows the int32 accumulator, which we saturate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._fixedpoint import (
    FORTY_EIGHT_OVER_17,
    INT32_MAX,
    INT32_MIN,
    MINUS_32_OVER_17,
    calculate_input_radius,
    exp_on_negative_values,
    quantize_multiplier_greater_than_one,
    reciprocal,
    rescale,
    scale_input,
)
from driver.ops._params import float_outputs, float_tensor, normalize_axis
from driver.ops._quant import QUANT8_DTYPE, is_quant8
from driver.ops._softmax_common import check_fixed_output, parse_beta_axis, shifted_logits
from driver.ops._workspace import address, output
from mlts.hal.enums import OperandType, OperationType

NAME = "SOFTMAX"
SCALED_DIFF_BITS = 5  # d is scaled to Q5.26
ACCUMULATION_BITS = 12  # the sum of exponentials is Q12.19
TABLE_MIN_LENGTH = 128  # rows at least this long compute their 256 possible outputs, then look them up
SCALAR_ROWS = 32  # up to this many rows, each row's reciprocal is computed in Python integers


@register(OperationType.SOFTMAX)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (2, 3), outs)
    if is_quant8(ins[0].type):
        return prepare_quant8(ins, outs)
    float_tensor(NAME, "input", ins[0])
    float_outputs(NAME, outs)
    beta, axis = parse_beta_axis(NAME, ins)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        z, ax = shifted_logits(NAME, args[0], beta, axis)
        np.exp(z, out=z)
        z /= np.add.reduce(z, axis=ax, keepdims=True)  # z.sum without its Python layers
        return [z]

    if not _fast.enabled() or ins[0].type != OperandType.TENSOR_FLOAT32:
        return run
    numpy_run = run
    softmax = _fast.LIB.mk_softmax_f32
    f32 = np.float32

    def run_compiled(args: Sequence[Any]) -> list[np.ndarray]:
        """Along the last axis of a non-empty float32 input: the compiled kernel (mk_softmax_f32) into
        the step's output; anything else as NumPy."""
        x = args[0]
        if type(x) is not np.ndarray or x.dtype != f32 or not x.size or axis not in (-1, x.ndim - 1):
            return numpy_run(args)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        y = output(x.shape, f32)
        cols = x.shape[-1]
        softmax(address(x), address(y), x.size // cols, cols, beta)
        return [y]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run_compiled`'s call (driver.bound_steps), for the shapes it makes it for."""
        shape = shapes[0]
        if not shape or 0 in shape or axis not in (-1, len(shape) - 1):
            return None
        return _bind.bind_softmax_f32(ptrs[0], shape, float(beta))

    return Kernel(run_compiled, binding=Binding(bind))


def exp_tables(beta: float, input_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """For d = -255 .. 0: exp(beta * input_scale * d) as F0 raws and as Q12.19 raws (0 below diff_min)."""
    real = min(beta * input_scale * float(1 << (31 - SCALED_DIFF_BITS)), float((1 << 31) - 1))
    multiplier, shift = quantize_multiplier_greater_than_one(NAME, "beta * input scale * 2^26", real)
    diff_min = -calculate_input_radius(SCALED_DIFF_BITS, shift)
    d = np.arange(-255, 1, dtype=np.int64)
    used = d >= diff_min
    scaled = scale_input(np.where(used, d, 0), multiplier, shift)
    exp_f0 = np.where(used, exp_on_negative_values(scaled, SCALED_DIFF_BITS), 0)
    return exp_f0, rescale(exp_f0, 0, ACCUMULATION_BITS)


def _wrap32(v: int) -> int:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _srdhm(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul of two int32 values."""
    if a == b == INT32_MIN:
        return INT32_MAX
    v = a * b + ((1 << 30) if a * b >= 0 else 1 - (1 << 30))
    return v >> 31 if v >= 0 else -((-v) >> 31)


def _times_four(v: int) -> int:
    """SaturatingRoundingMultiplyByPOT<2> (Rescale from 4 to 2 integer bits)."""
    limit = (1 << 29) - 1
    return INT32_MAX if v > limit else INT32_MIN if v < -limit else v << 2


def reciprocal_of(total: int) -> tuple[int, int]:
    """`_fixedpoint.reciprocal(total, 12)` for one positive int32 row sum, in Python integers.

    GetReciprocal: the sum shifted to a top bit of 1, (1 + s) / 2 by RoundingHalfSum, 48/17 - 32/17 d
    and three Newton-Raphson steps in F2, halved to F0 (saturating doubling to F1 is exact here).
    Far fewer steps than the array version for the few rows a model's SOFTMAX has.
    """
    headroom_plus_one = 32 - total.bit_length()
    a = (total << headroom_plus_one) - (1 << 31)
    s = a + INT32_MAX
    v = s + 1 if s >= 0 else s - 1
    half_denominator = v >> 1 if v >= 0 else -((-v) >> 1)
    x = _wrap32(FORTY_EIGHT_OVER_17 + _srdhm(half_denominator, MINUS_32_OVER_17))
    for _ in range(3):
        one_minus_dx = _wrap32((1 << 29) - _srdhm(half_denominator, x))
        x = _wrap32(x + _times_four(_srdhm(x, one_minus_dx)))
    limit = (1 << 30) - 1
    inv = INT32_MAX if x > limit else INT32_MIN if x < -limit else x << 1
    return inv, ACCUMULATION_BITS - headroom_plus_one


def row_reciprocals(total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GetReciprocal of every row sum (int64, saturated to int32): F0 raws of 2^n / sum and n."""
    if total.size > SCALAR_ROWS:
        return reciprocal(total, ACCUMULATION_BITS)
    pairs = [reciprocal_of(int(t)) for t in total.reshape(-1).tolist()]
    inv = np.array([p[0] for p in pairs], dtype=np.int64).reshape(total.shape)
    bits = np.array([p[1] for p in pairs], dtype=np.int64).reshape(total.shape)
    return inv, bits


def scaled_exps(inv: np.ndarray, bits_over_unit: np.ndarray, exps: np.ndarray) -> np.ndarray:
    """RoundingDivideByPOT(SRDHM(inv, exp), bits_over_unit + 23) for raws inv > 0 and exp >= 0 (int64).

    Both operands are non-negative, so SRDHM is (inv * exp + 2^30) >> 31 (the product stays below
    2^62) and the rounding shift by e >= 23 is (y + 2^(e-1)) >> e.
    """
    shift = bits_over_unit + (31 - 8)
    y = inv * exps
    y += 1 << 30
    y >>= 31
    y += np.left_shift(1, shift - 1)
    y >>= shift
    return y


def prepare_quant8(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    check_fixed_output(NAME, ins[0], outs[0], 1 / 256, 0)
    beta, axis = parse_beta_axis(NAME, ins)
    exp_f0, exp_accum = exp_tables(float(beta), float(np.float32(ins[0].scale)))
    dtype = QUANT8_DTYPE[ins[0].type]
    offset = 128 if ins[0].type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED else 0

    def finish(y: np.ndarray) -> np.ndarray:
        np.minimum(y, 255, out=y)  # y >= 0 already
        if offset:
            y -= offset
        return y.astype(dtype)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = np.asarray(args[0])
        ax = normalize_axis(NAME, "axis", axis, x.ndim)
        if x.size == 0:
            return [np.empty(x.shape, dtype)]
        n = x.shape[ax]
        if n < TABLE_MIN_LENGTH:
            index = x.astype(np.int16)
            index -= index.max(axis=ax, keepdims=True)
            index += 255  # d + 255: the table row of each entry
            total = np.minimum(exp_accum[index].sum(axis=ax, keepdims=True), INT32_MAX)
            inv, bits_over_unit = row_reciprocals(total)
            return [finish(scaled_exps(inv, bits_over_unit, exp_f0[index]))]
        # Long rows: count each row's table entries, compute the 256 possible outputs per row (the
        # arithmetic above on the table instead of on every element) and look the entries up.
        last = ax == x.ndim - 1
        moved = x if last else np.moveaxis(x, ax, -1)
        index = moved.reshape(-1, n).astype(np.int16)
        rows = index.shape[0]
        index -= index.max(axis=1, keepdims=True)
        index += 255
        flat = index.reshape(-1).astype(np.intp)
        if rows > 1:
            flat += np.repeat(np.arange(0, 256 * rows, 256, dtype=np.intp), n)
        counts = np.bincount(flat, minlength=256 * rows).reshape(rows, 256)
        total = np.minimum(counts @ exp_accum, INT32_MAX)  # the exact int64 row sums, saturated
        inv, bits_over_unit = row_reciprocals(total)
        table = finish(scaled_exps(inv[:, None], bits_over_unit[:, None], exp_f0))
        y = table.reshape(-1)[flat].reshape(moved.shape)
        return [y if last else np.ascontiguousarray(np.moveaxis(y, -1, ax))]

    if not _fast.enabled():
        return run
    numpy_run = run
    softmax = _fast.LIB.mk_softmax_q8
    f0 = np.ascontiguousarray(exp_f0, dtype=np.int64)
    accum = np.ascontiguousarray(exp_accum, dtype=np.int64)
    f0_ptr, accum_ptr = f0.ctypes.data, accum.ctypes.data
    signed = int(offset != 0)

    def run_compiled(args: Sequence[Any]) -> list[np.ndarray]:
        """Along the last axis of a non-empty C-contiguous input of the operand's type: the compiled
        kernel (mk_softmax_q8, the same arithmetic) into the step's output; anything else as NumPy."""
        x = args[0]
        if (
            type(x) is not np.ndarray
            or x.dtype != dtype
            or not x.size
            or axis not in (-1, x.ndim - 1)
            or not x.flags.c_contiguous
        ):
            return numpy_run(args)
        y = output(x.shape, dtype)
        cols = x.shape[-1]
        softmax(address(x), address(y), x.size // cols, cols, f0_ptr, accum_ptr, signed)
        return [y]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run_compiled`'s call (driver.bound_steps), for the shapes it makes it for."""
        shape = shapes[0]
        if not shape or 0 in shape or axis not in (-1, len(shape) - 1):
            return None
        return _bind.bind_softmax_q8(ptrs[0], shape, np.dtype(dtype), f0, accum)

    return Kernel(run_compiled, binding=Binding(bind))
