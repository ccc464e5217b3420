"""gemmlowp's fixed-point math (fixedpoint.h), vectorised over NumPy int64 arrays holding int32 values.

A gemmlowp `FixedPoint<int32, I>` with I integer bits is kept here as its raw
int32 value r, meaning r / 2^(31 - I); every function takes and returns raw
values, with the integer bits passed explicitly. The transcription is exact:
additions, subtractions and negations wrap like two's-complement int32 (the
C++ leaves overflow undefined; the values these kernels produce never
overflow), products are SaturatingRoundingDoublingHighMul (ties toward +inf,
-1 * -1 saturating to the maximum), power-of-two scaling is a saturating left
shift or RoundingDivideByPOT (ties away from zero). The rounding primitives
come from `_quant`.

The last section holds the input-scaling helpers NNAPI's 8-bit SOFTMAX,
LOGISTIC and TANH share (QuantizeMultiplierGreaterThanOne, CalculateInputRadius).
"""

from __future__ import annotations

import math

import numpy as np

from driver.ops._quant import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from mlts.hal.errors import invalid

I64 = np.int64
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

# Raw constants of fixedpoint.h (int32 raws, so RescaleConstantInitializer leaves them unchanged).
EXP_MINUS_ONE_EIGHTH = 1895147668  # F0: exp(-1/8)
ONE_THIRD = 715827883  # F0: 1/3
FORTY_EIGHT_OVER_17 = 1515870810  # F2: 48/17
MINUS_32_OVER_17 = -1010580540  # F2: -32/17
# (exponent k, F0 raw of exp(-2^k)): the barrel shifter of exp_on_negative_values.
EXP_BARREL = (
    (-2, 1672461947),
    (-1, 1302514674),
    (0, 790015084),
    (1, 290630308),
    (2, 39332535),
    (3, 720401),
    (4, 242),
)


def as_raw(x: np.ndarray | int) -> np.ndarray:
    """`x` as an int64 array (raw int32 values)."""
    return np.asarray(x, dtype=I64)


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement int32 wrap of int64 values (what int32 + and - do on real hardware)."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def add(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """FixedPoint a + b: raw int32 addition (same integer bits on both sides)."""
    return wrap32(as_raw(a) + as_raw(b))


def sub(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """FixedPoint a - b: raw int32 subtraction."""
    return wrap32(as_raw(a) - as_raw(b))


def neg(a: np.ndarray | int) -> np.ndarray:
    """FixedPoint -a: raw int32 negation."""
    return wrap32(-as_raw(a))


def mul(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """FixedPoint a * b (integer bits add up): SaturatingRoundingDoublingHighMul of the raws."""
    a, b = as_raw(a), as_raw(b)
    both_min = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(both_min, I64(INT32_MAX), saturating_rounding_doubling_high_mul(a, b))


def one(integer_bits: int) -> int:
    """The raw of 1.0 (the largest raw when there are no integer bits, since 1.0 is not representable)."""
    return INT32_MAX if integer_bits == 0 else 1 << (31 - integer_bits)


def saturating_rounding_multiply_by_pot(x: np.ndarray | int, exponent: int) -> np.ndarray:
    """x * 2^exponent: a left shift saturating to int32 for exponent > 0, RoundingDivideByPOT for < 0."""
    x = as_raw(x)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    shifted = np.where(x > threshold, I64(INT32_MAX), x << exponent)
    return np.where(x < -threshold, I64(INT32_MIN), shifted)


def rescale(x: np.ndarray | int, src_bits: int, dst_bits: int) -> np.ndarray:
    """Rescale<dst_bits>: the same real value with dst_bits integer bits (saturating, rounding)."""
    return saturating_rounding_multiply_by_pot(x, src_bits - dst_bits)


def rounding_half_sum(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """(a + b) / 2 rounded half away from zero: (sum + sign(sum)) / 2 with C++ truncating division."""
    s = as_raw(a) + as_raw(b)
    v = s + np.where(s >= 0, I64(1), I64(-1))
    return np.where(v >= 0, v >> 1, -((-v) >> 1))


# ------------------------------------------------------------ exp, 1/(1+x), logistic, tanh


def exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    """exp(a) for F0 a in [-1/4, 0): a 4th-order Taylor expansion around -1/8, in F0."""
    x = add(a, 1 << 28)  # x = a + 1/8
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2)
    poly = saturating_rounding_multiply_by_pot(add(mul(add(x4_over_4, x3), ONE_THIRD), x2), -1)
    return add(EXP_MINUS_ONE_EIGHTH, mul(EXP_MINUS_ONE_EIGHTH, add(x, poly)))


def exp_on_negative_values(a: np.ndarray | int, integer_bits: int) -> np.ndarray:
    """exp(a) in F0 for a <= 0 with `integer_bits` integer bits.

    a = q - r with q in [-1/4, 0) (a mod 1/4, shifted) and r a non-negative
    multiple of 1/4: exp(q) by Taylor, then one multiplication by exp(-2^k) for
    every bit k of r (k = -2 .. 4, those the format can hold). Below -32 the
    result is 0 (formats with more than 5 integer bits); exp(0) is the F0 maximum.
    """
    a = as_raw(a)
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod_quarter_minus_quarter = sub(a & (quarter - 1), quarter)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_quarter, integer_bits, 0)
    )
    remainder = sub(a_mod_quarter_minus_quarter, a)
    for k, multiplier in EXP_BARREL:
        if integer_bits > k:
            bit_set = (remainder & (1 << (frac + k))) != 0
            result = np.where(bit_set, mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), I64(0), result)
    return np.where(a == 0, I64(INT32_MAX), result)


def _newton_reciprocal_of_half_denominator(half_denominator: np.ndarray) -> np.ndarray:
    """F2 x ~ 1 / half_denominator: start 48/17 - 32/17 * d, then three Newton-Raphson steps."""
    x = add(FORTY_EIGHT_OVER_17, mul(half_denominator, MINUS_32_OVER_17))
    for _ in range(3):
        one_minus_dx = sub(one(2), mul(half_denominator, x))
        x = add(x, rescale(mul(x, one_minus_dx), 4, 2))
    return x


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray | int) -> np.ndarray:
    """1 / (1 + a) in F0 for F0 a in [0, 1): Newton-Raphson on (1 + a) / 2, then halved (F2 -> F1 -> F0)."""
    x = _newton_reciprocal_of_half_denominator(rounding_half_sum(a, INT32_MAX))
    return rescale(x, 1, 0)  # ExactMulByPot<-1> reinterprets the F2 raw as F1


def one_minus_x_over_one_plus_x_for_x_in_0_1(a: np.ndarray | int) -> np.ndarray:
    """(1 - a) / (1 + a) in F0 for F0 a in [0, 1): 2 / (1 + a) - 1 from the same Newton-Raphson."""
    x = _newton_reciprocal_of_half_denominator(rounding_half_sum(a, INT32_MAX))
    return rescale(sub(x, one(2)), 2, 0)


def logistic(a: np.ndarray | int, integer_bits: int) -> np.ndarray:
    """1 / (1 + exp(-a)) in F0: computed on |a|, mirrored as 1 - y for a < 0; exactly 1/2 at 0."""
    a = as_raw(a)
    positive = a > 0
    abs_a = np.where(positive, a, neg(a))
    y = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(neg(abs_a), integer_bits))
    y = np.where(positive, y, sub(INT32_MAX, y))
    return np.where(a == 0, I64(1 << 30), y)


def tanh(a: np.ndarray | int, integer_bits: int) -> np.ndarray:
    """tanh(a) in F0: (1 - exp(-2|a|)) / (1 + exp(-2|a|)) with the sign of a; exactly 0 at 0."""
    a = as_raw(a)
    negative = a < 0
    n = np.where(negative, a, neg(a))  # -|a|
    # ExactMulByPot<1>: the raw of -|a| read with one more integer bit is -2|a|.
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    return np.where(a == 0, I64(0), np.where(negative, neg(t), t))


def reciprocal(x: np.ndarray, integer_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's GetReciprocal for positive raws x with `integer_bits`: (F0 raw of 2^n / x, n).

    x is shifted left until its top bit is set (headroom_plus_one = count of
    leading zeros of x as uint32); n = integer_bits - headroom_plus_one, and the
    shifted value 1 + s with s in [0, 1) goes through one_over_one_plus_x.
    """
    x = as_raw(x)
    _, bit_length = np.frexp(x.astype(np.float64))  # exact: x < 2^31 converts to float64 exactly
    headroom_plus_one = 32 - bit_length.astype(I64)
    shifted_minus_one = (x << headroom_plus_one) - (1 << 31)
    return one_over_one_plus_x_for_x_in_0_1(shifted_minus_one), integer_bits - headroom_plus_one


# ------------------------------------------------------------ input scaling of the 8-bit kernels


def quantize_multiplier_greater_than_one(name: str, what: str, real: float) -> tuple[int, int]:
    """(multiplier, left_shift) with real == multiplier / 2^31 * 2^left_shift; NNAPI requires real > 1.

    The mantissa is rounded as `quantize_multiplier` rounds it; shifts above 30
    (multipliers of 2^30 and more) are allowed, unlike for requantization.
    """
    if not real > 1.0 or not math.isfinite(real):
        raise invalid(f"{name}: {what} is {real!r}, expected a finite number > 1")
    # `quantize_multiplier` stops at exponent 30; scale big multipliers down by an exact power of two first.
    extra = max(0, math.frexp(real)[1] - 29)
    multiplier, shift = quantize_multiplier(math.ldexp(real, -extra))
    return multiplier, shift + extra


def calculate_input_radius(integer_bits: int, left_shift: int) -> int:
    """floor((2^integer_bits - 1) * 2^(31 - integer_bits) / 2^left_shift): the largest safe |input|."""
    return math.floor(math.ldexp(((1 << integer_bits) - 1) << (31 - integer_bits), -left_shift))


def scale_input(x: np.ndarray, multiplier: int, left_shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplierGreaterThanOne: SRDHM(x * 2^left_shift, multiplier).

    Callers keep |x| within the input radius, so x * 2^left_shift fits int32.
    """
    return multiply_by_quantized_multiplier(as_raw(x), multiplier, left_shift)
