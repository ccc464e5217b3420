"""Quantized ADD, MUL, MEAN, CONCATENATION, data movement and RELU* (QUANTIZE and DEQUANTIZE: test_qquantize.py).

Each kernel is checked against (a) onnxruntime on a DequantizeLinear -> op ->
QuantizeLinear graph (float requantization with ties to even, so within one
unit and mostly identical), (b) an exact reference written here: int64
accumulation and a scalar transcription of TFLite's QuantizeMultiplier /
MultiplyByQuantizedMultiplier / CalculateActivationRange, compared bit for
bit, plus exact rational arithmetic where the kernel promises correct
rounding, (c) hand-computed ties and saturation, (d) signed/unsigned
equivalence, (e) bad signatures.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import driver.ops.dequantize  # noqa: F401  (registers DEQUANTIZE)
import driver.ops.quantize  # noqa: F401  (registers QUANTIZE)
from driver.ops import ArgInfo
from mlts.hal.enums import OperandType, OperationType
from tests.driver.qkit import (
    S8,
    U8,
    Q,
    expect_invalid,
    max_unit_diff,
    ort_qdq,
    out,
    qcall,
    random_q,
    rng_for,
    to_signed,
)
from tests.driver.requantkit import assert_near_ort, qrange, ref_act_range, ref_mbqm, rha

Op = OperationType
T = OperandType
F32 = np.float32

# ------------------------------------------------------------ independent references


def f32(s: float) -> float:
    return float(F32(s))


def ref_qm(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: Q31 mantissa (half away from zero) and exponent."""
    if real == 0.0:
        return 0, 0
    frac, exp = math.frexp(real)
    q = rha(Fraction(frac) * 2**31)
    if q == 2**31:
        q //= 2
        exp += 1
    return (0, 0) if exp < -31 else (q, exp)


def ref_rescale(x: int, real: float, bound: int) -> int:
    """The driver's precision-preserving requantization, one integer at a time."""
    m, e = ref_qm(real)
    if m == 0:
        return 0
    limit = min(bound, int(512 / real) + 2)
    x = max(-limit, min(limit, x))
    k = 30 - limit.bit_length()
    return ref_mbqm(x << k, m, e - k)


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


# ------------------------------------------------------------ ADD and MUL


def ref_binary(op, x, y, qa, qb, qo, act, t) -> np.ndarray:
    """TFLite's ADD / MUL integer kernels, one element at a time."""
    (sa, za), (sb, zb), (so, zo) = qa, qb, qo
    lo, hi = ref_act_range(act, t, so, zo)
    if op == Op.ADD:
        tw = 2 * max(f32(sa), f32(sb))
        (m1, e1), (m2, e2) = ref_qm(f32(sa) / tw), ref_qm(f32(sb) / tw)
        mo, eo = ref_qm(tw / ((1 << 20) * f32(so)))

        def f(u: int, v: int) -> int:
            return ref_mbqm(ref_mbqm((u - za) << 20, m1, e1) + ref_mbqm((v - zb) << 20, m2, e2), mo, eo)
    else:
        m, e = ref_qm(float(F32(sa) * F32(sb)) / f32(so))

        def f(u: int, v: int) -> int:
            return ref_mbqm((u - za) * (v - zb), m, e)

    xb, yb = np.broadcast_arrays(x.astype(np.int64), y.astype(np.int64))
    vals = [clamp(f(int(u), int(v)) + zo, lo, hi) for u, v in zip(xb.flat, yb.flat, strict=True)]
    return np.array(vals, dtype=x.dtype).reshape(xb.shape)


SHAPES = [((2, 3, 4), (2, 3, 4)), ((1, 4, 4, 8), (8,)), ((3, 1), (1, 4)), ((5,), (1,)), ((2, 1, 3), (4, 1))]
# (scale a, zp a, scale b, zp b, scale out, zp out) for uint8; ADD and MUL each need multipliers below 1.
ADD_QUANTS = [(0.05, 120, 0.11, 7, 0.09, 130), (0.02, 0, 0.02, 255, 0.05, 128), (1.0, 128, 0.003, 3, 0.5, 0)]
MUL_QUANTS = [(0.05, 120, 0.11, 7, 0.09, 130), (0.02, 0, 0.5, 255, 0.1, 128), (0.1, 128, 0.1, 128, 0.04, 100)]


def _binary_inputs(op, shapes, quants, act, t):
    rng = rng_for(op, shapes, quants, act)
    a, b = random_q(rng, shapes[0], np.uint8), random_q(rng, shapes[1], np.uint8)
    sa, za, sb, zb, so, zo = quants
    if t == S8:
        a, b, za, zb, zo = to_signed(a), to_signed(b), za - 128, zb - 128, zo - 128
    return a, b, (sa, za), (sb, zb), (so, zo)


def _call_binary(op, a, b, qa, qb, qo, act, t):
    (y,) = qcall(op, [Q(a, *qa), Q(b, *qb), act], [out(t, *qo)])
    return y


@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
@pytest.mark.parametrize("op", [Op.ADD, Op.MUL], ids=["add", "mul"])
def test_add_mul_match_exact_reference_and_signed_twin(op, shapes, act):
    quants_list = ADD_QUANTS if op == Op.ADD else MUL_QUANTS
    for quants in quants_list:
        a, b, qa, qb, qo = _binary_inputs(op, shapes, quants, act, U8)
        y = _call_binary(op, a, b, qa, qb, qo, act, U8)
        assert y.dtype == np.uint8 and y.shape == np.broadcast_shapes(*shapes)
        np.testing.assert_array_equal(y, ref_binary(op, a, b, qa, qb, qo, act, U8))
        sa, sb, sqa, sqb, sqo = _binary_inputs(op, shapes, quants, act, S8)
        ys = _call_binary(op, sa, sb, sqa, sqb, sqo, act, S8)
        assert ys.dtype == np.int8
        np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)


@pytest.mark.parametrize("t", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("op", [Op.ADD, Op.MUL], ids=["add", "mul"])
def test_add_mul_byte_pairs_on_one_and_two_threads(op, t):
    """Every second byte (and 255) against every byte, 33024 elements in one call (the compiled lookup's
    three chunks), on one and two kernel threads; a strided view of the same inputs (NumPy's lookup)
    gives the same."""
    from driver import native

    quants = (ADD_QUANTS if op == Op.ADD else MUL_QUANTS)[0]
    sa, za, sb, zb, so, zo = quants
    firsts = np.append(np.arange(0, 256, 2), 255).astype(np.uint8)
    a = np.repeat(firsts, 256).reshape(-1, 256)
    b = np.tile(np.arange(256, dtype=np.uint8), len(firsts)).reshape(-1, 256)
    if t == S8:
        a, b, za, zb, zo = to_signed(a), to_signed(b), za - 128, zb - 128, zo - 128
    qa, qb, qo = (sa, za), (sb, zb), (so, zo)
    want = ref_binary(op, a, b, qa, qb, qo, 1, t)
    before = native.threads()
    try:
        for threads in (1, 2):
            native.set_threads(threads)
            np.testing.assert_array_equal(_call_binary(op, a, b, qa, qb, qo, 1, t), want)
        wide_a, wide_b = np.repeat(a, 2, axis=1), np.repeat(b, 2, axis=1)
        strided = _call_binary(op, wide_a[:, ::2], wide_b[:, ::2], qa, qb, qo, 1, t)
        np.testing.assert_array_equal(strided, want)
    finally:
        native.set_threads(before)


@pytest.mark.parametrize("t", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("op", [Op.ADD, Op.MUL], ids=["add", "mul"])
def test_add_mul_near_onnxruntime(op, t):
    for shapes in SHAPES:
        for quants in ADD_QUANTS if op == Op.ADD else MUL_QUANTS:
            a, b, qa, qb, qo = _binary_inputs(op, shapes, quants, 0, t)
            got = _call_binary(op, a, b, qa, qb, qo, 0, t)
            ref = ort_qdq("Add" if op == Op.ADD else "Mul", [(a, *qa), (b, *qb)], qo)
            assert_near_ort(got, ref)


def test_add_hand_computed():
    x = np.array([0, 7, 100, 255], np.uint8)
    # Adding the zero point of an input quantized like the output returns x exactly.
    (y,) = qcall(Op.ADD, [Q(x, 0.1, 9), Q(np.full(4, 3, np.uint8), 0.1, 3), 0], [out(U8, 0.1, 9)])
    assert y.tolist() == x.tolist()
    # Saturation: 2 * (255 - 0) * 0.1 = 51 = 510 units of 0.1 -> 255; RELU1 caps at zp + 10.
    big = np.full(2, 255, np.uint8)
    (y,) = qcall(Op.ADD, [Q(big, 0.1, 0), Q(big, 0.1, 0), 0], [out(U8, 0.1, 0)])
    assert y.tolist() == [255, 255]
    (y,) = qcall(Op.ADD, [Q(big, 0.1, 0), Q(big, 0.1, 0), 2], [out(U8, 0.1, 100)])
    assert y.tolist() == [110, 110]
    # 0.5 + 0.25 = 0.75 is 1.5 units of the output scale 0.5: the final shift rounds the tie away from zero.
    one = np.array([1], np.uint8)
    (y,) = qcall(Op.ADD, [Q(one, 0.5, 0), Q(one, 0.25, 0), 0], [out(U8, 0.5, 0)])
    assert y.tolist() == [2]


def test_mul_hand_computed_ties():
    # Multiplier 0.5 exactly: the high multiply rounds ties toward +inf, as gemmlowp does.
    x = np.array([131, 125, 128], np.uint8)  # x - 128 = 3, -3, 0
    one = np.array([1], np.uint8)
    (y,) = qcall(Op.MUL, [Q(x, 0.5, 128), Q(one, 1.0, 0), 0], [out(U8, 1.0, 50)])
    assert y.tolist() == [52, 49, 50]  # 1.5 -> 2, -1.5 -> -1
    # Saturation both ways.
    big = np.array([255, 0], np.uint8)
    (y,) = qcall(Op.MUL, [Q(big, 0.5, 128), Q(np.array([255], np.uint8), 0.5, 0), 0], [out(U8, 0.3, 128)])
    assert y.tolist() == [255, 0]


@pytest.mark.parametrize(
    "op, inputs, outs, match",
    [
        (Op.ADD, [Q(np.zeros(3, np.uint8), 0.1, 0), Q(np.zeros(3, np.int8), 0.1, 0), 0], [out(U8, 0.1, 0)],
         "input 1 has type TENSOR_QUANT8_ASYMM_SIGNED, expected TENSOR_QUANT8_ASYMM"),
        (Op.ADD, [Q(np.zeros(3, np.uint8), 0.1, 0), Q(np.zeros(3, np.uint8), 0.1, 0), 0],
         [ArgInfo(int(T.TENSOR_FLOAT32), (3,))], "output 0 has type TENSOR_FLOAT32"),
        (Op.ADD, [Q(np.zeros(3, np.uint8), 0.1, 0), Q(np.zeros(3, np.uint8), 0.1, 0), 0], [out(U8, 1e-8, 0)],
         "multiplier .* is not in \\(0, 1\\)"),
        (Op.MUL, [Q(np.zeros(3, np.uint8), 0.5, 0), Q(np.zeros(3, np.uint8), 0.5, 0), 0], [out(U8, 0.25, 0)],
         "multiplier 1 .* is not in \\(0, 1\\)"),
        (Op.MUL, [Q(np.zeros(3, np.uint8), 0.0, 0), Q(np.zeros(3, np.uint8), 0.5, 0), 0], [out(U8, 0.25, 0)],
         "input 0 has scale 0.0"),
        (Op.ADD, [Q(np.zeros(3, np.int8), 0.1, 200), Q(np.zeros(3, np.int8), 0.1, 0), 0], [out(S8, 0.1, 0)],
         "input 0 has zero point 200"),
        (Op.ADD, [Q(np.zeros(3, np.uint8), 0.1, 0), Q(np.zeros(3, np.uint8), 0.1, 0), 5], [out(U8, 0.1, 0)],
         "fused activation is 5"),
        (Op.ADD, [Q(np.zeros(3, np.uint8), 0.1, 0), Q(np.zeros(2, np.uint8), 0.1, 0), 0], [out(U8, 0.1, 0)],
         "do not broadcast"),
    ],
)  # fmt: skip
def test_add_mul_bad_signatures(op, inputs, outs, match):
    expect_invalid(op, inputs, outs, match)


# ------------------------------------------------------------ MEAN


def ref_mean(x, zp_in, s_in, zp_out, s_out, axes, keep, t) -> np.ndarray:
    n = max(math.prod(x.shape[a] for a in axes), 1)
    acc = np.sum(x.astype(np.int64) - zp_in, axis=axes, keepdims=keep)
    lo, hi = qrange(t)
    real = f32(s_in) / (f32(s_out) * n)
    vals = [clamp(ref_rescale(int(v), real, 255 * n) + zp_out, lo, hi) for v in acc.flat]
    y = np.array(vals, dtype=x.dtype).reshape(acc.shape)
    return y.reshape(1) if y.ndim == 0 else y


def exact_mean(x, zp_in, s_in, zp_out, s_out, axes, keep, t) -> np.ndarray:
    """round(mean of the real values / s_out) + zp_out in exact rational arithmetic."""
    n = max(math.prod(x.shape[a] for a in axes), 1)
    acc = np.sum(x.astype(np.int64) - zp_in, axis=axes, keepdims=keep)
    lo, hi = qrange(t)
    ratio = Fraction(f32(s_in)) / (Fraction(f32(s_out)) * n)
    y = np.array([clamp(rha(int(v) * ratio) + zp_out, lo, hi) for v in acc.flat], x.dtype)
    return y.reshape(acc.shape) if acc.ndim else y.reshape(1)


MEAN_CASES = [
    ((2, 5, 6, 3), [1, 2], True),
    ((2, 5, 6, 3), [1, 2], False),
    ((4, 7), [-1], False),
    ((3, 4, 5), [0, 2, 0], True),
    ((2, 3, 4), [0, 1, 2], False),
    ((6, 9), [], False),
]
MEAN_QUANTS = [(0.1, 128, 0.1, 128), (0.02, 3, 0.05, 200), (0.5, 250, 0.01, 0)]


@pytest.mark.parametrize("quant", MEAN_QUANTS, ids=["same", "coarser", "finer"])
@pytest.mark.parametrize("case", MEAN_CASES, ids=[f"mean{i}" for i in range(len(MEAN_CASES))])
def test_mean(case, quant):
    shape, axes, keep = case
    s_in, zp_in, s_out, zp_out = quant
    x = random_q(rng_for(case, quant), shape, np.uint8)
    ax = tuple(sorted({a % len(shape) for a in axes}))
    (y,) = qcall(Op.MEAN, [Q(x, s_in, zp_in), np.array(axes, np.int32), int(keep)], [out(U8, s_out, zp_out)])
    want = ref_mean(x, zp_in, s_in, zp_out, s_out, ax, keep, U8)
    np.testing.assert_array_equal(y, want)
    exact = exact_mean(x, zp_in, s_in, zp_out, s_out, ax, keep, U8)
    assert max_unit_diff(y, exact) <= 1 and np.mean(y == exact) >= 0.99
    (ys,) = qcall(
        Op.MEAN,
        [Q(to_signed(x), s_in, zp_in - 128), np.array(axes, np.int32), int(keep)],
        [out(S8, s_out, zp_out - 128)],
    )
    np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)
    if axes:
        ref = ort_qdq(
            "ReduceMean",
            [(x, s_in, zp_in)],
            (s_out, zp_out),
            {"axes": np.array(axes, np.int64)},
            keepdims=int(keep),
        )
        assert_near_ort(y, ref.reshape(y.shape), min_equal=0.8)


@pytest.mark.parametrize(
    ("shape", "axes"), [((1, 7, 7, 40), [1, 2]), ((2, 300, 3), [1]), ((1, 4200), [1]), ((3, 2, 130), [0, 2])]
)
def test_mean_large_counts(shape, axes):
    # 49 elements sum in 16 bits, 300 and 390 in 32 bits, 4200 without a table.
    x = random_q(np.random.default_rng(len(shape) + shape[-1]), shape, np.uint8)
    x.reshape(-1)[:200] = 255  # long runs of the extremes
    x.reshape(-1)[-200:] = 0
    ax = tuple(axes)
    for s_in, zp_in, s_out, zp_out in MEAN_QUANTS:
        (y,) = qcall(Op.MEAN, [Q(x, s_in, zp_in), np.array(axes, np.int32), 1], [out(U8, s_out, zp_out)])
        np.testing.assert_array_equal(y, ref_mean(x, zp_in, s_in, zp_out, s_out, ax, True, U8))
        (ys,) = qcall(
            Op.MEAN,
            [Q(to_signed(x), s_in, zp_in - 128), np.array(axes, np.int32), 1],
            [out(S8, s_out, zp_out - 128)],
        )
        np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)


def test_mean_hand_computed_and_nnapi_truncation():
    x = np.array([[1, 2], [5, 5], [0, 255]], np.uint8)
    (y,) = qcall(Op.MEAN, [Q(x, 1.0, 0), np.array([1], np.int32), 0], [out(U8, 1.0, 0)])
    # 1.5 -> 2 (ties away from zero), 5, 127.5 -> 128. NNAPI's CPU reference truncates: 1, 5, 127.
    assert y.tolist() == [2, 5, 128]
    assert (y.astype(int) - x.astype(int).sum(axis=1) // 2).tolist() == [1, 0, 1]
    s = np.array([[-1, -2]], np.int8)
    (y,) = qcall(Op.MEAN, [Q(s, 1.0, 0), np.array([1], np.int32), 1], [out(S8, 1.0, 0)])
    assert y.tolist() == [[-2]]  # -1.5 -> -2
    (y,) = qcall(Op.MEAN, [Q(np.array([[-1, 0], [1, 0]], np.int8), 1.0, 0), np.array([1], np.int32), 0],
                 [out(S8, 1.0, 0)])  # fmt: skip
    assert y.tolist() == [-1, 1]  # -0.5 -> -1 and 0.5 -> 1: exact ties go away from zero both ways
    # A mean of 40 * 0.5 = 20.0 on output scale 0.01 saturates.
    (y,) = qcall(
        Op.MEAN, [Q(np.full((4,), 40, np.uint8), 0.5, 0), np.array([0], np.int32), 0], [out(U8, 0.01, 0)]
    )
    assert y.tolist() == [255]


def test_mean_small_sums_are_rounded_once():
    # Sums 5 and 9 over 4 elements: 1.25 and 2.25. The plain fixed-point multiply by 0.25 rounds twice
    # (2.5 -> 3 -> 1.5 -> 2 and 4.5 -> 5 -> 2.5 -> 3); the prescaled one rounds once.
    x = np.array([[2, 1, 1, 1], [3, 2, 2, 2]], np.uint8)
    (y,) = qcall(Op.MEAN, [Q(x, 1.0, 0), np.array([1], np.int32), 0], [out(U8, 1.0, 0)])
    assert y.tolist() == [1, 2]
    m, e = ref_qm(0.25)
    assert [ref_mbqm(5, m, e), ref_mbqm(9, m, e)] == [2, 3]


def test_mean_rejects_float_output():
    x = Q(np.zeros((2, 3), np.uint8), 0.1, 0)
    expect_invalid(Op.MEAN, [x, np.array([1], np.int32), 0], [ArgInfo(int(T.TENSOR_FLOAT32), ())],
                   "output 0 has type TENSOR_FLOAT32, expected TENSOR_QUANT8_ASYMM")  # fmt: skip
    expect_invalid(
        Op.MEAN, [x, np.array([1], np.int32), 0], [out(S8, 0.1, 0)], "expected TENSOR_QUANT8_ASYMM"
    )


# ------------------------------------------------------------ CONCATENATION


def nnapi_float_rescale(v: np.ndarray, s_in: float, zp_in: int, s_out: float, zp_out: int, t) -> np.ndarray:
    """TFLite's ConcatenationWithScaling: std::round(x * scale + bias) in float32."""
    scale = F32(s_in) * (F32(1) / F32(s_out))
    bias = F32(-zp_in) * scale
    r = v.astype(F32) * scale + bias
    q = np.copysign(np.floor(np.abs(r.astype(np.float64)) + 0.5), r) + zp_out
    return np.clip(q, *qrange(t)).astype(v.dtype)


def exact_requant(v: np.ndarray, s_in: float, zp_in: int, s_out: float, zp_out: int, t) -> np.ndarray:
    ratio = Fraction(f32(s_in)) / Fraction(f32(s_out))
    lo, hi = qrange(t)
    return np.array([clamp(rha((int(u) - zp_in) * ratio) + zp_out, lo, hi) for u in v.flat], v.dtype).reshape(
        v.shape
    )


CONCAT_QUANTS = [
    [(0.1, 128), (0.1, 128), (0.1, 128)],
    [(0.1, 128), (0.05, 10), (0.3, 250)],
    [(0.007, 0), (1.0, 128), (0.02, 77)],
]


@pytest.mark.parametrize("axis", [0, 2, -1])
@pytest.mark.parametrize("quants", CONCAT_QUANTS, ids=["same", "mixed", "wide"])
def test_concatenation(quants, axis):
    rng = rng_for(quants, axis)
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(d + i if k == axis % 3 else d for k, d in enumerate(s)) for i, s in enumerate(shapes)]
    xs = [random_q(rng, s, np.uint8) for s in shapes]
    qin, qo = quants, (0.1, 128)
    (y,) = qcall(Op.CONCATENATION, [*(Q(x, *q) for x, q in zip(xs, qin, strict=True)), axis], [out(U8, *qo)])
    parts_exact = [exact_requant(x, *q, *qo, U8) for x, q in zip(xs, qin, strict=True)]
    parts_nnapi = [nnapi_float_rescale(x, *q, *qo, U8) for x, q in zip(xs, qin, strict=True)]
    np.testing.assert_array_equal(y, np.concatenate(parts_exact, axis=axis))  # no near-ties in these scales
    assert max_unit_diff(y, np.concatenate(parts_nnapi, axis=axis)) <= 1
    if quants[0] == quants[1] == quants[2] == qo:
        np.testing.assert_array_equal(y, np.concatenate(xs, axis=axis))
    ref = ort_qdq("Concat", [(x, *q) for x, q in zip(xs, qin, strict=True)], qo, axis=axis)
    assert_near_ort(y, ref)
    (ys,) = qcall(
        Op.CONCATENATION,
        [*(Q(to_signed(x), s, z - 128) for x, (s, z) in zip(xs, qin, strict=True)), axis],
        [out(S8, qo[0], qo[1] - 128)],
    )
    np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)


def test_concatenation_requant_table_is_exact_on_every_byte():
    v = np.arange(256, dtype=np.uint8).reshape(1, 256)
    for s_in, zp_in, s_out, zp_out in [
        (0.3, 5, 0.7, 100),
        (0.5, 128, 1.0, 128),
        (2.0, 0, 0.003, 0),
        (1e-4, 9, 1.0, 3),
    ]:
        (y,) = qcall(Op.CONCATENATION, [Q(v, s_in, zp_in), Q(v, s_out, zp_out), 0], [out(U8, s_out, zp_out)])
        np.testing.assert_array_equal(y[0], exact_requant(v[0], s_in, zp_in, s_out, zp_out, U8))
        np.testing.assert_array_equal(y[1], v[0])
    # 0.5 * (x - 128) at odd x is an exact tie: away from zero (129 -> 0.5 -> 1, 127 -> -0.5 -> -1).
    (y,) = qcall(Op.CONCATENATION, [Q(np.array([129, 127], np.uint8), 0.5, 128), 0], [out(U8, 1.0, 128)])
    assert y.tolist() == [129, 127]


def test_concatenation_bad_signatures():
    a, b = Q(np.zeros((2, 2), np.uint8), 0.1, 0), Q(np.zeros((2, 2), np.int8), 0.1, 0)
    expect_invalid(
        Op.CONCATENATION, [a, b, 0], [out(U8, 0.1, 0)], "input 1 has type TENSOR_QUANT8_ASYMM_SIGNED"
    )
    expect_invalid(Op.CONCATENATION, [a, a, 0], [ArgInfo(int(T.TENSOR_FLOAT32), ())], "output 0 has type")
    expect_invalid(
        Op.CONCATENATION, [a, np.zeros((2, 2), np.float32), 0], [out(U8, 0.1, 0)], "input 1 has type"
    )


# ------------------------------------------------------------ data movement, PAD, RELU*

X = (np.arange(24, dtype=np.uint8) * 10 + 5).reshape(2, 3, 4)
PADS = np.array([[1, 0], [0, 2], [1, 1]], np.int32)
I32 = np.int32
# (name, op, input, parameters, expected output from (input, zero point))
MOVES = [
    ("reshape", Op.RESHAPE, X, [np.array([4, -1], I32)], lambda x, zp: x.reshape(4, -1)),
    ("squeeze", Op.SQUEEZE, X.reshape(2, 1, 3, 4), [np.array([1], I32)], lambda x, zp: x[:, 0]),
    ("transpose", Op.TRANSPOSE, X, [np.array([2, 0, 1], I32)], lambda x, zp: x.transpose(2, 0, 1)),
    ("expand_dims", Op.EXPAND_DIMS, X, [1], lambda x, zp: x[:, None]),
    (
        "slice",
        Op.SLICE,
        X,
        [np.array([0, 1, 1], I32), np.array([2, -1, 2], I32)],
        lambda x, zp: x[:, 1:, 1:3],
    ),
    (
        "strided_slice",
        Op.STRIDED_SLICE,
        X,
        [np.array([0, 2, 0], I32), np.array([1, 0, 4], I32), np.array([1, -1, 2], I32), 0, 0, 1],
        lambda x, zp: x[0, 2:0:-1, 0:4:2],
    ),
    ("pad", Op.PAD, X, [PADS], lambda x, zp: np.pad(x, PADS, constant_values=zp)),
    ("pad_v2", Op.PAD_V2, X, [PADS, 200], lambda x, zp: np.pad(x, PADS, constant_values=200)),
]


@pytest.mark.parametrize("name, op, x, params, fn", MOVES, ids=[m[0] for m in MOVES])
def test_data_movement_keeps_values_and_quantization(name, op, x, params, fn):
    (y,) = qcall(op, [Q(x, 0.25, 17), *params], [out(U8, 0.25, 17)])
    want = fn(x, 17)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, want)
    sparams = list(params)
    if op == Op.PAD_V2:
        sparams[1] -= 128  # the pad value is in quantized units
    (ys,) = qcall(op, [Q(to_signed(x), 0.25, 17 - 128), *sparams], [out(S8, 0.25, 17 - 128)])
    assert ys.dtype == np.int8
    np.testing.assert_array_equal(ys.astype(np.int16) + 128, want)
    expect_invalid(op, [Q(x, 0.25, 17), *params], [out(U8, 0.5, 17)], "output 0 has scale 0.5")
    expect_invalid(op, [Q(x, 0.25, 17), *params], [out(U8, 0.25, 16)], "zero point 16")
    expect_invalid(op, [Q(x, 0.25, 17), *params], [ArgInfo(int(T.TENSOR_FLOAT32), ())], "output 0 has type")


def test_pad_v2_quantized_pad_value_rules():
    x = Q(X, 0.25, 17)
    expect_invalid(
        Op.PAD_V2, [x, PADS, 1.5], [out(U8, 0.25, 17)], "pad value has type FLOAT32, expected INT32"
    )
    expect_invalid(Op.PAD_V2, [x, PADS, 256], [out(U8, 0.25, 17)], "pad value is 256, expected \\[0, 255\\]")
    s = Q(to_signed(X), 0.25, 0)
    expect_invalid(Op.PAD_V2, [s, PADS, 128], [out(S8, 0.25, 0)], "expected \\[-128, 127\\]")
    (y,) = qcall(Op.PAD_V2, [s, PADS, -128], [out(S8, 0.25, 0)])
    assert y[0, 0, 0] == -128 and y.dtype == np.int8


RELUS = [(Op.RELU, 1, "Relu", {}), (Op.RELU1, 2, "Clip", (-1.0, 1.0)), (Op.RELU6, 3, "Clip", (0.0, 6.0))]


@pytest.mark.parametrize("op, code, onnx_op, clip", RELUS, ids=["relu", "relu1", "relu6"])
@pytest.mark.parametrize("scale, zp", [(0.05, 100), (0.1, 0), (0.01, 255), (0.003, 128)])
def test_relus(op, code, onnx_op, clip, scale, zp):
    x = np.arange(256, dtype=np.uint8)
    (y,) = qcall(op, [Q(x, scale, zp)], [out(U8, scale, zp)])
    lo, hi = ref_act_range(code, U8, scale, zp)
    np.testing.assert_array_equal(y, np.clip(x, lo, hi).astype(np.uint8))
    (ys,) = qcall(op, [Q(to_signed(x), scale, zp - 128)], [out(S8, scale, zp - 128)])
    np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)
    consts = {"lo": np.array(clip[0], F32), "hi": np.array(clip[1], F32)} if clip else None
    ref = ort_qdq(onnx_op, [(x, scale, zp)], (scale, zp), consts)
    assert_near_ort(y, ref, min_equal=0.99)


def test_relu_bad_signatures():
    x = Q(X, 0.25, 17)
    expect_invalid(Op.RELU6, [x], [out(U8, 0.5, 17)], "RELU6: output 0 has scale 0.5")
    expect_invalid(Op.RELU, [x], [out(S8, 0.25, 17)], "output 0 has type TENSOR_QUANT8_ASYMM_SIGNED")
    expect_invalid(Op.RELU1, [ArgInfo(int(T.TENSOR_INT32), (3,))], [out(U8, 0.25, 17)],
                   "input has type TENSOR_INT32, expected TENSOR_FLOAT32, TENSOR_QUANT8_ASYMM")  # fmt: skip
