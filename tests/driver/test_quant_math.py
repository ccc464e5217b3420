"""Fixed-point requantization against a scalar transcription of the C++ reference and hand-computed cases."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from driver.ops._quant import (
    activation_range,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_multipliers,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from mlts.hal.enums import FusedActivationFunc as A
from mlts.hal.enums import OperandType as T
from mlts.hal.errors import HalError
from tests.driver.requantkit import ref_mbqm, ref_rdbp, ref_srdhm


def test_hand_computed_cases():
    # M = 0.5: mantissa 2^30, exponent 0. The high multiply rounds ties up: 1.5 -> 2, -1.5 -> -1.
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert int(multiply_by_quantized_multiplier(3, 1 << 30, 0)) == 2
    assert int(multiply_by_quantized_multiplier(-3, 1 << 30, 0)) == -1
    # M = 0.25 = 0.5 * 2^-1: 5 * 0.25 = 1.25 is rounded twice (2.5 -> 3, then 1.5 -> 2), as in the reference.
    assert quantize_multiplier(0.25) == (1 << 30, -1)
    assert int(multiply_by_quantized_multiplier(5, 1 << 30, -1)) == 2
    # -1.25: the high multiply gives -2 (-2.5 rounded up), the shift -1 (-1 exactly).
    assert int(multiply_by_quantized_multiplier(-5, 1 << 30, -1)) == -1
    # M = 3 = 0.75 * 2^2: a left shift, then an exact product.
    m, e = quantize_multiplier(3.0)
    assert (m, e) == (3 << 29, 2)
    assert int(multiply_by_quantized_multiplier(7, m, e)) == 21


def test_mantissa_rounding_up_to_one_is_halved():
    m, e = quantize_multiplier(1.0 - 2.0**-40)
    assert (m, e) == (1 << 30, 1)


def test_tiny_multiplier_is_zero_and_bad_ones_are_rejected():
    assert quantize_multiplier(2.0**-40) == (0, 0)
    assert quantize_multiplier(0.0) == (0, 0)
    for bad in (-1.0, float("nan"), float("inf"), 2.0**40):
        with pytest.raises(HalError):
            quantize_multiplier(bad)


def test_matches_scalar_reference_on_random_values():
    rng = np.random.default_rng(7)
    xs = rng.integers(-(1 << 24), 1 << 24, size=400)
    xs[:6] = [0, 1, -1, (1 << 24) - 1, -(1 << 24), 12345]
    for real in (0.0003, 0.0071, 0.123, 0.5, 0.99999, 1.7, 13.0):
        m, e = quantize_multiplier(real)
        got = multiply_by_quantized_multiplier(xs, m, e)
        want = [ref_mbqm(int(x), m, e) for x in xs]
        assert got.tolist() == want
        # Within one unit of the exact product (the reference rounds twice).
        exact = [Fraction(int(x)) * Fraction(m, 1 << 31) * Fraction(2) ** e for x in xs]
        assert max(abs(g - f) for g, f in zip(got.tolist(), exact, strict=True)) <= 1


def test_per_channel_arrays_broadcast():
    reals = np.array([0.01, 0.2, 1.5])
    mants, exps = quantize_multipliers(reals)
    x = np.arange(-6, 6).reshape(4, 3) * 1000
    got = multiply_by_quantized_multiplier(x, mants, exps)
    for c in range(3):
        want = [ref_mbqm(int(v), int(mants[c]), int(exps[c])) for v in x[:, c]]
        assert got[:, c].tolist() == want


def test_primitives_match_reference_including_ties():
    for a in (-(1 << 31), -7, -1, 0, 1, 7, (1 << 31) - 1):
        for b in (0, 1, 1 << 30, (1 << 31) - 1):
            assert int(saturating_rounding_doubling_high_mul(a, b)) == ref_srdhm(a, b)
    for x in range(-20, 21):
        for e in range(0, 5):
            assert int(rounding_divide_by_pot(x, e)) == ref_rdbp(x, e)
            if e:
                exact = x / 2**e
                assert int(rounding_divide_by_pot(x, e)) == int(
                    math.copysign(math.floor(abs(exact) + 0.5), exact)
                )


def test_activation_ranges():
    assert activation_range(A.NONE, T.TENSOR_QUANT8_ASYMM, 0.1, 10) == (0, 255)
    assert activation_range(A.RELU, T.TENSOR_QUANT8_ASYMM, 0.1, 10) == (10, 255)
    assert activation_range(A.RELU6, T.TENSOR_QUANT8_ASYMM, 0.1, 10) == (10, 70)
    assert activation_range(A.RELU1, T.TENSOR_QUANT8_ASYMM_SIGNED, 0.1, -5) == (-15, 5)
    # Bounds outside the type's range are cut to it.
    assert activation_range(A.RELU6, T.TENSOR_QUANT8_ASYMM_SIGNED, 0.01, 0) == (0, 127)
    assert activation_range(A.RELU, T.TENSOR_QUANT8_ASYMM, 0.1, -20 + 20) == (0, 255)


def test_fast_form_equals_the_two_step_reference_on_wide_values():
    rng = np.random.default_rng(11)
    x = rng.integers(-(1 << 31), 1 << 31, size=(2000, 8))
    x[:20] = rng.integers(-300, 300, size=(20, 8))
    mants, exps = quantize_multipliers(np.array([1e-5, 0.001, 0.25, 0.5, 0.75, 0.999, 1.0, 3.0]))
    two_step = rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(x << np.maximum(exps, 0), mants), np.maximum(-exps, 0)
    )
    assert np.array_equal(multiply_by_quantized_multiplier(x, mants, exps), two_step)
    for c in range(8):
        m, e = int(mants[c]), int(exps[c])
        assert np.array_equal(multiply_by_quantized_multiplier(x[:, c], m, e), two_step[:, c])
    # Exact negative ties after the high multiply: -0.5 and -1.5 round away from zero.
    assert int(multiply_by_quantized_multiplier(-2, 1 << 30, -1)) == -1
    assert int(multiply_by_quantized_multiplier(-4, 1 << 30, -2)) == -1
    small = np.arange(-600, 600)
    for real in (0.5, 0.25, 0.125, 0.0625, 0.3):
        m, e = quantize_multiplier(real)
        want = [ref_mbqm(int(v), m, e) for v in small]
        assert multiply_by_quantized_multiplier(small, m, e).tolist() == want
        assert multiply_by_quantized_multiplier(small, np.array([m]), np.array([e])).tolist() == want
