"""L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION.

Float32 and float16 against float64 NumPy written from the NNAPI specification and onnxruntime
(LpNormalization, LRN with alpha scaled by the window size, InstanceNormalization); quantized
L2_NORMALIZATION bit for bit against a scalar transcription of NNAPI's reference (TFLite's
GetInvSqrtQuantizedMultiplierExp, gemmlowp fixed point) written here in plain Python integers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from tests.driver.opkit import ort_node
from tests.driver.spatialkit import (
    F16T,
    F32T,
    S8,
    U8,
    as_type,
    call,
    check_exact,
    check_float,
    fp16_scalar,
    nchw_to_nhwc,
    nhwc_to_nchw,
    omitted,
    out,
    prepare,
    spec_l2,
    tensor,
    unset,
)

L2 = OperationType.L2_NORMALIZATION
LRN = OperationType.LOCAL_RESPONSE_NORMALIZATION
INORM = OperationType.INSTANCE_NORMALIZATION
FLOATS = [F32T, F16T]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def fscalar(v, t):
    return fp16_scalar(v) if t == F16T else float(v)


# ------------------------------------------------------------ scalar gemmlowp / TFLite integer steps


def srdhm(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul on int32 values."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return _trunc_div(ab + nudge, 1 << 31)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def rdbpot(x: int, e: int) -> int:
    """RoundingDivideByPOT: x / 2^e, ties away from zero."""
    mask = (1 << e) - 1
    rem = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > threshold else 0)


def sat_shift(x: int, e: int) -> int:
    """SaturatingRoundingMultiplyByPOT<e> on an int32 raw."""
    if e <= 0:
        return rdbpot(x, -e)
    return max(INT32_MIN, min(INT32_MAX, x * (1 << e)))


def ref_inv_sqrt(value: int) -> tuple[int, int]:
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1)."""
    if value <= 1:
        return INT32_MAX, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    clz = 32 - value.bit_length()
    left_pairs = (clz - 1) // 2 - 1
    shift -= left_pairs
    value <<= 2 * left_pairs
    fixed_input = value >> 1  # F3
    half_input = sat_shift(fixed_input, -1)
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28  # F3 one
    for _ in range(5):
        x3 = sat_shift(srdhm(srdhm(x, x), x), 6)  # F9 -> F3
        x = sat_shift(srdhm(half_three, x) - srdhm(half_input, x3), 3)  # F6 -> F3
    x = srdhm(x, 1518500250)
    if shift < 0:
        x <<= -shift
        shift = 0
    return x, -shift


def ref_mbqm(x: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    return rdbpot(srdhm(x * (1 << left), m), right)


def ref_l2_quant(x: np.ndarray, axis: int, zp: int, t) -> np.ndarray:
    xm = np.moveaxis(x.astype(np.int64), axis, -1)
    y = np.empty(xm.shape, np.int64)
    last = axis == x.ndim - 1
    for idx in np.ndindex(xm.shape[:-1]):
        d = [int(v) - zp for v in xm[idx]]
        m, s = ref_inv_sqrt(sum(v * v for v in d))
        for k, v in enumerate(d):
            if t == S8 and last:
                r = ref_mbqm(v, m, s + 7)
            else:
                r = rdbpot(srdhm(128 * v, m), -s) + (128 if t == U8 else 0)
            y[idx + (k,)] = min(max(r, -128 if t == S8 else 0), 127 if t == S8 else 255)
    return np.moveaxis(y, -1, axis).astype(np.uint8 if t == U8 else np.int8)


# ------------------------------------------------------------ L2_NORMALIZATION


L2_CASES = [
    ((7,), None),
    ((3, 5), -1),
    ((3, 5), 0),
    ((2, 3, 4), 1),
    ((2, 2, 3, 4), -1),
    ((2, 2, 3, 4), -3),
    ((2, 2, 3, 4), 0),
]


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize(("shape", "axis"), L2_CASES)
def test_l2_float_against_spec(t, shape, axis):
    rng = np.random.default_rng(len(shape))
    x = as_type(rng.uniform(-3, 3, shape), t)
    ins = [tensor(x, t)] + ([] if axis is None else [axis])
    check_float(call(L2, ins), spec_l2(x, -1 if axis is None else axis), t)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_l2_float_against_onnxruntime(axis):
    x = np.random.default_rng(2).uniform(-2, 2, (3, 4, 5)).astype(np.float32)
    ref = ort_node("LpNormalization", {"x": x}, axis=axis, p=2)
    check_float(call(L2, [tensor(x), axis]), ref, F32T)


def test_l2_zero_vector_is_zero_and_axis_omitted_or_unset():
    x = np.zeros((2, 3), np.float32)
    x[1] = [3, 0, 4]
    expected = [[0, 0, 0], [0.6, 0, 0.8]]
    check_float(call(L2, [tensor(x), omitted(OperandType.INT32)]), expected, F32T)
    check_float(call(L2, [tensor(x), unset(OperandType.INT32)]), expected, F32T)
    run, args = prepare(L2, [tensor(x), unset(OperandType.INT32)])
    args[1] = 0
    check_float(run(args)[0], spec_l2(x, 0), F32T)


QL2 = {U8: (1 / 128, 128), S8: (1 / 128, 0)}


@pytest.mark.parametrize("t", [U8, S8])
@pytest.mark.parametrize(("shape", "axis"), L2_CASES)
@pytest.mark.parametrize("zp", [0, 100, -7])
def test_l2_quant_bit_exact(t, shape, axis, zp):
    if t == U8 and zp < 0:
        zp = 255
    rng = np.random.default_rng(abs(zp) + len(shape))
    info = np.iinfo(np.uint8 if t == U8 else np.int8)
    x = rng.integers(info.min, info.max + 1, size=shape).astype(info.dtype)
    x.reshape(-1)[0] = zp  # a zero element
    ins = [tensor(x, t, 0.05, zp)] + ([] if axis is None else [axis])
    y = call(L2, ins, out(t, *QL2[t]))
    a = -1 if axis is None else axis
    check_exact(y, ref_l2_quant(x, a % x.ndim, zp, t))
    real = (y.astype(np.float64) - QL2[t][1]) / 128
    assert np.abs(real - spec_l2(x.astype(np.float64) - zp, a)).max() <= 1.5 / 128


@pytest.mark.parametrize("t", [U8, S8])
def test_l2_quant_edge_sums(t):
    """All-zero slices (sum 0), sum 1, and sums of 2^29 and more (the reference's shift loop)."""
    zp, far = (0, 255) if t == U8 else (127, -128)  # |far - zp| = 255
    x = np.full((4, 8300), zp, np.int64)
    x[1, 0] = zp + 1
    x[2, :] = far  # sum = 8300 * 255^2 > 2^29
    x[3, :5] = far
    x = x.astype(np.uint8 if t == U8 else np.int8)
    y = call(L2, [tensor(x, t, 1.0, zp)], out(t, *QL2[t]))
    check_exact(y, ref_l2_quant(x, 1, zp, t))
    assert np.all(y[0] == QL2[t][1])


def test_inv_sqrt_reference_agrees_with_kernel_helper():
    from driver.ops.l2_normalization import inv_sqrt_multiplier_exp

    values = np.array([0, 1, 2, 3, 4, 100, 65025, 2**28, 2**29, 2**29 + 7, 2**31 - 1], np.int64)
    m, s = inv_sqrt_multiplier_exp(values)
    assert [(int(a), int(b)) for a, b in zip(m, s, strict=True)] == [ref_inv_sqrt(int(v)) for v in values]
    for v, mm, ss in zip(values[2:], m[2:], s[2:], strict=True):  # multiplier/2^31 * 2^shift ~ 1/sqrt(v)
        assert math.isclose(mm / 2**31 * 2.0**ss, 1 / math.sqrt(v), rel_tol=1e-5)


# ------------------------------------------------------------ LOCAL_RESPONSE_NORMALIZATION


def spec_lrn(x, axis, radius, bias, alpha, beta):
    x = np.moveaxis(x.astype(np.float64), axis, -1)
    n = x.shape[-1]
    y = np.empty_like(x)
    for d in range(n):
        lo, hi = max(0, d - radius), min(n, d + radius + 1)
        s = (x[..., lo:hi] ** 2).sum(axis=-1) if hi > lo else 0.0
        y[..., d] = x[..., d] / (bias + alpha * s) ** beta
    return np.moveaxis(y, -1, axis)


LRN_CASES = [
    ((2, 2, 3, 6), None, 2, 1.0, 0.5, 0.75),
    ((2, 2, 3, 6), -1, 0, 2.0, 1.0, 0.5),
    ((2, 5, 3, 2), 1, 1, 1.5, 0.2, 1.0),
    ((3, 4), 0, 5, 0.5, 0.1, 0.3),
    ((9,), -1, 3, 1.0, 0.001, 0.75),
    ((2, 3, 4), -2, -1, 2.0, 1.0, 0.5),
]


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize(("shape", "axis", "radius", "bias", "alpha", "beta"), LRN_CASES)
def test_lrn_against_spec(t, shape, axis, radius, bias, alpha, beta):
    rng = np.random.default_rng(radius + 5)
    x = as_type(rng.uniform(-2, 2, shape), t)
    ins = [tensor(x, t), radius, fscalar(bias, t), fscalar(alpha, t), fscalar(beta, t)]
    if axis is not None:
        ins.append(axis)
    f = (lambda v: float(np.float16(v))) if t == F16T else float
    check_float(
        call(LRN, ins), spec_lrn(x, -1 if axis is None else axis, radius, f(bias), f(alpha), f(beta)), t
    )


@pytest.mark.parametrize("radius", [0, 1, 2])
def test_lrn_against_onnxruntime(radius):
    """ONNX LRN works on NCHW channels and divides alpha by the window size 2r+1."""
    x = np.random.default_rng(radius).uniform(-2, 2, (2, 7, 3, 3)).astype(np.float32)
    size = 2 * radius + 1
    ref = ort_node("LRN", {"x": x}, size=size, alpha=0.3 * size, beta=0.75, bias=1.5)
    check_float(call(LRN, [tensor(x), radius, 1.5, 0.3, 0.75, 1]), ref, F32T)


# ------------------------------------------------------------ INSTANCE_NORMALIZATION


def spec_instance_norm(x, gamma, beta, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    return (x - mean) * gamma / np.sqrt(var + eps) + beta


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize(
    ("shape", "gamma", "beta", "eps"), [((2, 3, 4, 5), 1.0, 0.0, 1e-4), ((1, 1, 6, 2), 0.5, -1.5, 0.01)]
)
def test_instance_norm_against_spec(t, nchw, shape, gamma, beta, eps):
    rng = np.random.default_rng(shape[3])
    x = as_type(rng.uniform(-3, 3, shape), t)
    xin = nhwc_to_nchw(x) if nchw else x
    y = call(INORM, [tensor(xin, t), fscalar(gamma, t), fscalar(beta, t), fscalar(eps, t), nchw])
    y = nchw_to_nhwc(y) if nchw else y
    f = (lambda v: float(np.float16(v))) if t == F16T else float
    check_float(y, spec_instance_norm(x, f(gamma), f(beta), f(eps)), t)


def test_instance_norm_against_onnxruntime():
    x = np.random.default_rng(4).uniform(-2, 2, (2, 3, 4, 5)).astype(np.float32)
    c = x.shape[1]
    ref = ort_node(
        "InstanceNormalization",
        {"x": x, "s": np.full(c, 0.7, np.float32), "b": np.full(c, 0.2, np.float32)},
        epsilon=1e-3,
    )
    check_float(call(INORM, [tensor(x), 0.7, 0.2, 1e-3, True]), ref, F32T)


# ------------------------------------------------------------ signature errors

XF = np.ones((1, 2, 2, 4), np.float32)


@pytest.mark.parametrize(
    ("op", "ins", "output", "words"),
    [
        (L2, [tensor(XF), 4], None, "axis"),
        (L2, [tensor(np.ones((1, 1, 1, 1, 2), np.float32))], None, "rank"),
        (L2, [tensor(XF.astype(np.uint8), U8, 0.1, 0)], out(U8, 1 / 128, 0), "zero point 128"),
        (L2, [tensor(XF.astype(np.int8), S8, 0.1, 0)], out(S8, 1 / 256, 0), "1/128"),
        (L2, [tensor(XF.astype(np.int32), OperandType.TENSOR_INT32)], None, "type"),
        (LRN, [tensor(XF), 1, 1.0, 1.0], None, "inputs"),
        (LRN, [tensor(XF), 1, 1.0, 1.0, 0.5, -5], None, "axis"),
        (LRN, [tensor(XF, F16T), 1, 1.0, 1.0, 0.5], None, "FLOAT16"),
        (LRN, [tensor(XF.astype(np.uint8), U8, 0.1, 0), 1, 1.0, 1.0, 0.5], None, "type"),
        (INORM, [tensor(XF), 1.0, 0.0, 1e-3], None, "inputs"),
        (INORM, [tensor(XF[0]), 1.0, 0.0, 1e-3, False], None, "rank"),
        (INORM, [tensor(XF), 1, 0.0, 1e-3, False], None, "gamma"),
        (INORM, [tensor(XF), 1.0, 0.0, 1e-3, 0], None, "layout"),
    ],
)
def test_invalid_operations_are_refused(op, ins, output, words):
    with pytest.raises(HalError) as e:
        run, args = prepare(op, ins, output)
        run(args)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message and words in e.value.message


def test_l2_signed_equals_unsigned_minus_128_except_int8_last_axis():
    """NNAPI's reference runs a different int8 kernel along the last axis: at most one unit apart there."""
    x = np.random.default_rng(9).integers(0, 256, (300, 7)).astype(np.uint8)
    xs = (x.astype(np.int16) - 128).astype(np.int8)
    for axis in (0, 1):
        u = call(L2, [tensor(x, U8, 0.1, 130), axis], out(U8, 1 / 128, 128)).astype(int) - 128
        s = call(L2, [tensor(xs, S8, 0.1, 2), axis], out(S8, 1 / 128, 0)).astype(int)
        diff = np.abs(u - s)
        assert diff.max() <= (1 if axis == 1 else 0)
    assert diff.any()  # the last-axis kernels do differ somewhere
