"""Integer requantization as NNAPI's CPU kernels define it, vectorised over NumPy int64 arrays.

A real multiplier M > 0 is stored as a Q31 fixed-point mantissa `m` in
[2^30, 2^31) and a power-of-two exponent `e` (M = m / 2^31 * 2^e). Scaling an
int32 accumulator `x` by M is

    rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x << max(e, 0), m), max(-e, 0))

which rounds twice to nearest: the high multiply (gemmlowp's
SaturatingRoundingDoublingHighMul) rounds ties up (toward +inf), the shift
(RoundingDivideByPOT) rounds ties away from zero, as NNAPI's
MultiplyByQuantizedMultiplier does. Rounding twice can land one unit from the
exactly rounded product (5 * 0.25 gives 2). Every function here works on int64
arrays, so the int32 intermediate values of the reference never overflow.

Activation ranges follow CalculateActivationRange: the bounds 0, 6, -1 and 1
are quantized with the output's scale (float32 division, std::round) and
intersected with the type's range.
"""

from __future__ import annotations

import math

import numpy as np

from mlts.hal.enums import FusedActivationFunc, OperandType
from mlts.hal.errors import invalid

I64 = np.int64

# The 8-bit asymmetric types and the range and dtype of each.
QUANT8_RANGE: dict[int, tuple[int, int]] = {
    OperandType.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
}
QUANT8_DTYPE: dict[int, type] = {
    OperandType.TENSOR_QUANT8_ASYMM: np.uint8,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
}
QUANT8_TYPES = frozenset(QUANT8_RANGE)


def is_quant8(operand_type: int) -> bool:
    """TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_ASYMM_SIGNED."""
    return operand_type in QUANT8_RANGE


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(mantissa, exponent) with real == mantissa / 2^31 * 2^exponent, mantissa in [2^30, 2^31).

    TFLite's QuantizeMultiplier: frexp, then the mantissa rounded half away
    from zero to Q31; a mantissa that rounds up to 2^31 is halved. Multipliers
    too small to represent (exponent < -31) become 0.
    """
    if not math.isfinite(real) or real < 0:
        raise invalid(f"requantization multiplier {real!r} is not a finite number >= 0")
    if real == 0.0:
        return 0, 0
    mant, exp = math.frexp(real)
    q = math.floor(mant * (1 << 31) + 0.5)
    if q == 1 << 31:
        q //= 2
        exp += 1
    if exp < -31:
        return 0, 0
    if exp > 30:
        raise invalid(f"requantization multiplier {real!r} is too large (exponent {exp} > 30)")
    return int(q), int(exp)


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """round(a * b / 2^31) with ties toward +inf, as int64 (gemmlowp's SRDHM).

    `b` is a non-negative Q31 multiplier, so the one saturating case of the
    reference (a == b == INT32_MIN) cannot occur.
    """
    ab = np.asarray(a, dtype=I64) * np.asarray(b, dtype=I64)
    nudge = np.where(ab >= 0, I64(1 << 30), I64(1 - (1 << 30)))
    v = ab + nudge
    # Division by 2^31 truncating toward zero, as C++ integer division does.
    return np.where(v >= 0, v >> 31, -((-v) >> 31))


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """x / 2^exponent rounded to nearest, ties away from zero (gemmlowp's RoundingDivideByPOT)."""
    x = np.asarray(x, dtype=I64)
    e = np.asarray(exponent, dtype=I64)
    mask = (I64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(
    x: np.ndarray, multiplier: np.ndarray | int, exponent: np.ndarray | int
) -> np.ndarray:
    """x * real multiplier in NNAPI's fixed-point form; `multiplier`/`exponent` may be per-channel arrays.

    Bit-identical to rounding_divide_by_pot(srdhm(x << left, m), right), in
    fewer in-place int64 passes using two identities: srdhm(a, m) equals
    floor((a*m + 2^30) / 2^31) for either sign (the reference's negative nudge
    1 - 2^30 with truncating division comes to the same floor), and the
    rounding shift by r > 0 equals floor((y + 2^(r-1) - [y < 0]) / 2^r).
    """
    e = np.asarray(exponent, dtype=I64)
    if e.ndim == 0:
        left, right = max(int(e), 0), max(-int(e), 0)
        y = np.array(x, dtype=I64, copy=True)
        if left:
            y <<= left
        y *= I64(multiplier)
        y += I64(1 << 30)
        y >>= 31
        if right:
            negative = y < 0
            y += I64((1 << right) >> 1)
            y -= negative
            y >>= right
        return y
    lefts = np.maximum(e, 0)
    rights = np.maximum(-e, 0)
    y = np.left_shift(np.asarray(x, dtype=I64), lefts)
    y *= np.asarray(multiplier, dtype=I64)
    y += I64(1 << 30)
    y >>= 31
    negative = (y < 0) & (rights > 0)
    y += (I64(1) << rights) >> 1
    y -= negative
    y >>= rights
    return y


def quantize_multipliers(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`quantize_multiplier` for each element: (mantissas, exponents) as int64 arrays."""
    pairs = [quantize_multiplier(float(r)) for r in np.asarray(reals, dtype=np.float64).reshape(-1)]
    shape = np.shape(reals)
    mants = np.array([p[0] for p in pairs], dtype=I64).reshape(shape)
    exps = np.array([p[1] for p in pairs], dtype=I64).reshape(shape)
    return mants, exps


def _quantize_bound(value: float, scale: float, zero_point: int) -> int:
    q = float(np.float32(value) / np.float32(scale))
    return zero_point + int(math.copysign(math.floor(abs(q) + 0.5), q))


def activation_range(code: int, operand_type: int, scale: float, zero_point: int) -> tuple[int, int]:
    """[lo, hi] of the fused activation `code` on an output of this quantized type (CalculateActivationRange)."""
    qmin, qmax = QUANT8_RANGE[operand_type]
    if code == FusedActivationFunc.NONE:
        return qmin, qmax
    if code == FusedActivationFunc.RELU:
        return max(qmin, _quantize_bound(0.0, scale, zero_point)), qmax
    if code == FusedActivationFunc.RELU6:
        lo = max(qmin, _quantize_bound(0.0, scale, zero_point))
        return lo, min(qmax, _quantize_bound(6.0, scale, zero_point))
    if code == FusedActivationFunc.RELU1:
        lo = max(qmin, _quantize_bound(-1.0, scale, zero_point))
        return lo, min(qmax, _quantize_bound(1.0, scale, zero_point))
    raise invalid(f"fused activation {code} is not one of NONE, RELU, RELU1, RELU6")


def saturate(x: np.ndarray, lo: int, hi: int, operand_type: int) -> np.ndarray:
    """Clamp int64 values to [lo, hi] and store them in the type's 8-bit dtype."""
    return np.clip(x, lo, hi).astype(QUANT8_DTYPE[operand_type])


# ------------------------------------------------------------ signature helpers for quantized kernels


def type_label(code: int) -> str:
    try:
        return OperandType(code).name
    except ValueError:
        return f"type {code}"


def check_quant8(name: str, what: str, arg) -> None:
    """`arg` (an ArgInfo) must be TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_ASYMM_SIGNED."""
    if arg.type not in QUANT8_RANGE:
        raise invalid(
            f"{name}: {what} has type {type_label(arg.type)}, expected TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_ASYMM_SIGNED"
        )


def check_same_type(name: str, what: str, arg, like) -> None:
    """`arg` must have the operand type of `like` (e.g. an output of an input's type)."""
    if arg.type != like.type:
        raise invalid(f"{name}: {what} has type {type_label(arg.type)}, expected {type_label(like.type)}")


def check_same_quant(name: str, what: str, arg, like, like_what: str = "input 0") -> None:
    """`arg` must share type, scale and zero point with `like` (NNAPI's rule for data-movement ops)."""
    check_same_type(name, what, arg, like)
    if arg.scale != like.scale or arg.zero_point != like.zero_point:
        raise invalid(
            f"{name}: {what} has scale {arg.scale} and zero point {arg.zero_point}; "
            f"it must equal {like_what}'s ({like.scale}, {like.zero_point})"
        )
