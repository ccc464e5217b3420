"""Bit-exact references of the sample driver's requantization arithmetic, and the closeness check against onnxruntime."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

import driver.ops.dequantize  # noqa: F401  (registers DEQUANTIZE)  # noqa: F401  (registers DEQUANTIZE)
import driver.ops.quantize  # noqa: F401  (registers QUANTIZE)  # noqa: F401  (registers QUANTIZE)
from mlts.hal.enums import OperandType
from tests.driver.qkit import (
    U8,
    max_unit_diff,
)

F32 = np.float32


def ref_mbqm(x: int, m: int, e: int) -> int:
    return ref_rdbp(ref_srdhm(x * (1 << max(e, 0)), m), max(-e, 0))


def ref_act_range(code: int, t: OperandType, scale: float, zp: int) -> tuple[int, int]:
    """CalculateActivationRange: the bounds quantized with float32 division and std::round."""
    qmin, qmax = qrange(t)

    def q(v: float) -> int:
        return zp + rha(float(F32(v) / F32(scale)))

    lo, hi = {0: (qmin, qmax), 1: (q(0), qmax), 2: (q(-1), q(1)), 3: (q(0), q(6))}[code]
    return max(qmin, lo), min(qmax, hi)


def assert_near_ort(got: np.ndarray, ref: np.ndarray, min_equal: float = 0.9) -> None:
    """Within one unit of onnxruntime everywhere, identical almost everywhere."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, got.dtype, ref.shape, ref.dtype)
    assert max_unit_diff(got, ref) <= 1
    assert np.mean(got == ref) >= min_equal, f"only {np.mean(got == ref):.3f} identical"


def ref_srdhm(a: int, b: int) -> int:
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def ref_rdbp(x: int, e: int) -> int:
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def rha(v: Fraction | float) -> int:
    """Round half away from zero, exactly."""
    f = Fraction(v)
    n = math.floor(abs(f) + Fraction(1, 2))
    return n if f >= 0 else -n


def qrange(t: OperandType) -> tuple[int, int]:
    return (0, 255) if t == U8 else (-128, 127)


def c_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q
