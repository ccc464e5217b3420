"""8-bit SOFTMAX, LOGISTIC and TANH: bit-exact against a scalar transcription of NNAPI's uint8 kernels
(TFLite on gemmlowp fixed point), within one unit of onnxruntime QDQ graphs and of float64 math."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from driver import native
from driver.ops import ArgInfo
from driver.ops import _fixedpoint as fp
from mlts.hal.enums import ErrorStatus, OperandType
from mlts.hal.enums import OperationType as Op
from mlts.hal.errors import HalError
from tests.driver.qkit import S8, U8, Q, max_unit_diff, ort_model, ort_run, out, qcall, random_q, to_signed

RNG = np.random.default_rng(20240607)
MIN32, MAX32 = -(1 << 31), (1 << 31) - 1

# ------------------------------------------------------------ scalar reference (Python ints)
# A line-by-line transcription of gemmlowp fixedpoint.h and of NNAPI's softmaxQuant8Impl /
# TFLite's uint8 Logistic and Tanh, written independently of driver/ops/_fixedpoint.py.


def w32(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def srdhm(a: int, b: int) -> int:
    if a == b == MIN32:
        return MAX32
    ab = a * b
    return c_div(ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30)), 1 << 31)


def rdbp(x: int, e: int) -> int:
    mask = (1 << e) - 1
    return (x >> e) + (1 if (x & mask) > (mask >> 1) + (1 if x < 0 else 0) else 0)


def srmbp(x: int, e: int) -> int:
    if e < 0:
        return rdbp(x, -e)
    thr = (1 << (31 - e)) - 1
    return MAX32 if x > thr else MIN32 if x < -thr else x * (1 << e)


def half_sum(a: int, b: int) -> int:
    s = a + b
    return c_div(s + (1 if s >= 0 else -1), 2)


def exp_quarter(a: int) -> int:
    c_exp, c_third = 1895147668, 715827883
    x = w32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    t = srmbp(w32(srdhm(w32(srmbp(x4, -2) + x3), c_third) + x2), -1)
    return w32(c_exp + srdhm(c_exp, w32(x + t)))


def exp_neg(a: int, ib: int) -> int:
    fb = 31 - ib
    quarter = 1 << (fb - 2)
    amq = w32((a & (quarter - 1)) - quarter)
    r = exp_quarter(srmbp(amq, ib))
    rem = w32(amq - a)
    table = {-2: 1672461947, -1: 1302514674, 0: 790015084, 1: 290630308, 2: 39332535, 3: 720401, 4: 242}
    for k in range(-2, 5):
        if ib > k and rem & (1 << (fb + k)):
            r = srdhm(r, table[k])
    if ib > 5 and a < -(1 << (36 - ib)):
        r = 0
    return MAX32 if a == 0 else r


def newton(a: int) -> int:
    d = half_sum(a, MAX32)
    x = w32(1515870810 + srdhm(d, -1010580540))
    for _ in range(3):
        x = w32(x + srmbp(srdhm(x, w32((1 << 29) - srdhm(d, x))), 2))
    return x


def one_over_one_plus(a: int) -> int:
    return srmbp(newton(a), 1)


def ref_logistic(a: int, ib: int) -> int:
    if a == 0:
        return 1 << 30
    y = one_over_one_plus(exp_neg(-abs(a), ib))
    return y if a > 0 else w32(MAX32 - y)


def ref_tanh(a: int, ib: int) -> int:
    if a == 0:
        return 0
    t = srmbp(w32(newton(exp_neg(-abs(a), ib + 1)) - (1 << 29)), 2)
    return -t if a < 0 else t


def ref_qm_greater_than_one(real: float) -> tuple[int, int]:
    assert real > 1
    q, shift = math.frexp(real)
    q_fixed = math.floor(q * (1 << 31) + 0.5)  # std::round of a positive value
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    return q_fixed, shift


def ref_radius(ib: int, shift: int) -> int:
    return math.floor(1.0 * ((1 << ib) - 1) * (1 << (31 - ib)) / (1 << shift))


def ref_softmax_u8(x: np.ndarray, scale: float, beta: float) -> np.ndarray:
    """NNAPI's uint8 softmax along the last axis, one element at a time."""
    real = min(float(np.float32(beta)) * float(np.float32(scale)) * (1 << 26), (1 << 31) - 1.0)
    mult, shift = ref_qm_greater_than_one(real)
    diff_min = -ref_radius(5, shift)
    rows = x.reshape(-1, x.shape[-1]).astype(int)
    y = np.zeros(rows.shape, np.uint8)
    for r, row in enumerate(rows.tolist()):
        top = max(row)
        exps = [
            exp_neg(srdhm(d * (1 << shift), mult), 5) if d >= diff_min else None
            for d in (v - top for v in row)
        ]
        total = 0
        for e in exps:
            if e is not None:
                total = w32(total + srmbp(e, -12))
        headroom = 32 - total.bit_length()
        bits_over = 12 - headroom
        inv = one_over_one_plus(w32((total << headroom) - (1 << 31)))
        for i, e in enumerate(exps):
            if e is not None:
                y[r, i] = min(max(rdbp(srdhm(inv, e), bits_over + 23), 0), 255)
    return y.reshape(x.shape)


def ref_table_u8(fn, scale: float, zp: int, out_shift: int, out_zp: int) -> np.ndarray:
    """TFLite's uint8 Logistic (fn=ref_logistic, shift 23, zp 0) or Tanh (ref_tanh, 24, 128), per input."""
    mult, shift = ref_qm_greater_than_one(float(np.float32(scale)) * (1 << 27))
    radius = ref_radius(4, shift)
    y = []
    for v in range(256):
        c = v - zp
        if c <= -radius:
            y.append(0)
        elif c >= radius:
            y.append(255)
        else:
            y.append(min(rdbp(fn(srdhm(c * (1 << shift), mult), 4), out_shift) + out_zp, 255))
    return np.array(y, np.uint8)


# ------------------------------------------------------------ helpers


def softmax(x: np.ndarray, scale: float, beta: float = 1.0, axis: int | None = None, zp: int = 0):
    ozp = 0 if x.dtype == np.uint8 else -128
    extra = [] if axis is None else [axis]
    return qcall(Op.SOFTMAX, [Q(x, scale, zp), beta, *extra], [out(Q(x, 1).type, 1 / 256, ozp)])[0]


def logistic(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return qcall(
        Op.LOGISTIC, [Q(x, scale, zp)], [out(Q(x, 1).type, 1 / 256, 0 if x.dtype == np.uint8 else -128)]
    )[0]


def tanh(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return qcall(Op.TANH, [Q(x, scale, zp)], [out(Q(x, 1).type, 1 / 128, 128 if x.dtype == np.uint8 else 0)])[
        0
    ]


def float_softmax(x: np.ndarray, scale: float, beta: float, axis: int = -1) -> np.ndarray:
    z = beta * scale * (x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def rounded(p: np.ndarray, units: float, offset: int = 0) -> np.ndarray:
    """The exactly rounded uint8 code of real values p with `units` codes per 1.0."""
    return np.clip(np.floor(p * units + 0.5) + offset, 0, 255)


def ort_qdq(
    op: str, x: np.ndarray, scale: float, zp: int, out_scale: float, out_zp: int, **attrs
) -> np.ndarray:
    """onnxruntime: DequantizeLinear -> op -> QuantizeLinear."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
        helper.make_node(op, ["xf"], ["yf"], **attrs),
        helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"]),
    ]
    inits = {
        "xs": np.float32(scale),
        "xz": np.array(zp, x.dtype),
        "ys": np.float32(out_scale),
        "yz": np.array(out_zp, x.dtype),
    }
    return ort_run(ort_model(nodes, {"x": x}, inits, output_dtype=x.dtype), {"x": x})


# ------------------------------------------------------------ SOFTMAX


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("scale", [0.01, 0.05, 0.2, 1.0])
def test_softmax_bit_exact_vs_scalar_reference(scale, beta):
    x = random_q(RNG, (6, 9), np.uint8)
    x[0] = 200  # an all-equal row
    x[1, :3] = [255, 0, 254]  # a wide range: entries far below the maximum
    assert np.array_equal(softmax(x, scale, beta), ref_softmax_u8(x, scale, beta))


@pytest.mark.parametrize(
    ("shape", "axis", "scale", "beta"),
    [
        ((1, 1001), -1, 0.1, 1.0),
        ((3, 300), -1, 0.02, 2.0),
        ((2, 260, 3), 1, 0.3, 1.0),
        ((40, 200), -1, 0.05, 1.0),
    ],
)
def test_softmax_long_rows_bit_exact_vs_scalar_reference(shape, axis, scale, beta):
    # Rows of 128 or more entries take the per-row output table; 40 rows use the array reciprocal.
    x = random_q(RNG, shape, np.uint8)
    got = softmax(x, scale, beta, axis)
    ref = np.moveaxis(ref_softmax_u8(np.moveaxis(x, axis, -1), scale, beta), -1, axis)
    assert np.array_equal(got, ref)
    assert np.array_equal(softmax(to_signed(x), scale, beta, axis, zp=-128), ref.astype(np.int16) - 128)


def test_softmax_scalar_reciprocal_matches_arrays_and_reference():
    from driver.ops.softmax import reciprocal_of

    totals = [1 << 19, (1 << 19) + 1, 1 << 20, 3 << 19, (1 << 31) - 1, (1 << 30) - 1, 1 << 30]
    totals += RNG.integers(1 << 19, 1 << 31, 300).tolist()
    inv, bits = fp.reciprocal(np.array(totals, np.int64), 12)
    for t, i, b in zip(totals, inv.tolist(), bits.tolist(), strict=True):
        headroom = 32 - t.bit_length()
        assert (
            reciprocal_of(t) == (i, b) == (one_over_one_plus(w32((t << headroom) - (1 << 31))), 12 - headroom)
        )


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("scale", [0.01, 0.03, 0.1, 0.3, 1.0])
def test_softmax_within_one_unit_of_float64(scale, beta):
    wide = random_q(RNG, (30, 12), np.uint8)
    narrow = (RNG.integers(0, 24, (30, 4)) + 100).astype(np.uint8)
    for x in (wide, narrow):
        got = softmax(x, scale, beta)
        assert got.dtype == np.uint8 and got.shape == x.shape
        assert max_unit_diff(got, rounded(float_softmax(x, scale, beta), 256).astype(np.uint8)) <= 1


def test_softmax_entries_below_diff_min_are_zero():
    # beta * scale = 1: multiplier 2^26 -> left shift 27, diff_min = -floor(31 * 2^26 / 2^27) = -15.
    x = np.array([[255, 241, 240, 239, 0], [100, 85, 84, 20, 100]], np.uint8)
    y = softmax(x, 1.0)
    assert y[0, 3] == 0 and y[0, 4] == 0 and y[1, 3] == 0
    # d = -15 (kept) and d = -16 (dropped) both round to 0 here; the maximum keeps the rest.
    assert y[0, 0] == 255 and y[1, 0] == y[1, 4] == 128
    assert np.array_equal(y, ref_softmax_u8(x, 1.0, 1.0))


@pytest.mark.parametrize(
    ("n", "expected"), [(1, 255), (2, 128), (3, 85), (4, 64), (5, 51), (10, 26), (256, 1)]
)
def test_softmax_all_equal_rows(n, expected):
    # The sum is n * 2^19 (Q12.19 of n), so 256 / n rounds as the reciprocal's fixed point does.
    x = np.full((2, n), 77, np.uint8)
    assert np.all(softmax(x, 0.1) == expected)
    assert np.all(softmax(to_signed(x), 0.1) == expected - 128)


def test_softmax_hand_values():
    # [0, 0, 1] with scale*beta = ln 2: exps 1/2, 1/2, 1 -> 64, 64, 128 in units of 1/256.
    x = np.array([[0, 0, 1]], np.uint8)
    assert softmax(x, math.log(2.0)).tolist() == [[64, 64, 128]]
    # Very large rows saturate the accumulator instead of wrapping; every entry is then ~0.
    assert not softmax(np.full((1, 5000), 3, np.uint8), 0.1).any()


@pytest.mark.parametrize(
    ("shape", "axis"), [((2, 3, 4, 5), -1), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), 0), ((7, 6), 0)]
)
def test_softmax_axis(shape, axis):
    x = random_q(RNG, shape, np.uint8)
    got = softmax(x, 0.07, 1.0, axis)
    ref = np.moveaxis(ref_softmax_u8(np.moveaxis(x, axis, -1), 0.07, 1.0), -1, axis)
    assert np.array_equal(got, ref)
    if axis in (-1, len(shape) - 1):
        assert np.array_equal(softmax(x, 0.07), got)  # axis -1 is the default


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_softmax_vs_onnxruntime(dtype):
    total = differ = 0
    for scale, beta in [(0.02, 1.0), (0.1, 1.0), (0.5, 1.0), (0.1, 2.0), (0.1, 0.5)]:
        x = random_q(RNG, (40, 10), dtype)
        x[::2] = np.clip(x[::2] // 8, -16, 16)  # narrow rows give large probabilities
        ozp = 0 if dtype == np.uint8 else -128
        got = softmax(x, scale, beta)
        # beta folds into the input scale of the float graph.
        ref = ort_qdq("Softmax", x, scale * beta, 0, 1 / 256, ozp, axis=-1)
        assert max_unit_diff(got, ref) <= 1
        total += got.size
        differ += int(np.count_nonzero(got != ref))
    assert differ <= total // 100


def test_softmax_signed_equals_unsigned_minus_128():
    x = random_q(RNG, (3, 4, 17), np.uint8)
    for scale, beta, axis in [(0.05, 1.0, -1), (0.3, 2.0, 1), (1.0, 0.5, 0)]:
        u = softmax(x, scale, beta, axis, zp=7)
        s = softmax(to_signed(x), scale, beta, axis, zp=7 - 128)
        assert s.dtype == np.int8
        assert np.array_equal(s.astype(np.int16), u.astype(np.int16) - 128)


@pytest.mark.skipif(not native.available(), reason="compiled kernels not built")
@pytest.mark.parametrize(
    ("shape", "scale", "beta"),
    [
        ((1, 1001), 0.1, 1.0),
        ((5, 1), 0.3, 1.0),
        ((7, 33), 0.02, 2.0),
        ((2, 3, 300), 1.0, 0.5),
        ((40, 64), 0.05, 1.0),
    ],
)
def test_compiled_softmax_equals_numpy_and_the_scalar_reference(monkeypatch, shape, scale, beta):
    # mk_softmax_q8 (the last axis, any row count) against the NumPy kernel (rows short and long,
    # reciprocals scalar or in arrays) and the scalar transcription, for both 8-bit types.
    from driver.ops import _fast

    x = random_q(RNG, shape, np.uint8)
    rows = x.reshape(-1, shape[-1])
    rows[0] = 9  # an all-equal row
    rows[-1, 0], rows[-1, -1] = 255, 0  # an entry far below the row's maximum
    ref = ref_softmax_u8(x, scale, beta).reshape(shape)
    compiled = [softmax(x, scale, beta), softmax(to_signed(x), scale, beta, zp=-128)]
    monkeypatch.setattr(_fast, "enabled", lambda: False)
    numpy_path = [softmax(x, scale, beta), softmax(to_signed(x), scale, beta, zp=-128)]
    assert compiled[0].dtype == np.uint8 and compiled[1].dtype == np.int8
    assert np.array_equal(compiled[0], ref) and np.array_equal(numpy_path[0], ref)
    assert np.array_equal(compiled[1].astype(np.int16), ref.astype(np.int16) - 128)
    assert np.array_equal(numpy_path[1], compiled[1])


@pytest.mark.skipif(not native.available(), reason="compiled kernels not built")
def test_compiled_softmax_saturated_sums_and_strided_inputs():
    # Rows whose Q12.19 sum passes 2^31 saturate as in NumPy (every entry then rounds to 0 or 1);
    # a non-contiguous input and another axis take the NumPy kernel and give the same values.
    x = np.full((2, 5000), 3, np.uint8)
    x[1, ::7] = 4
    got = softmax(x, 0.1)
    assert np.array_equal(got, ref_softmax_u8(x, 0.1, 1.0))
    wide = random_q(RNG, (6, 80), np.int8)
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    assert np.array_equal(softmax(strided, 0.2, 1.0, zp=-128), softmax(np.ascontiguousarray(strided), 0.2))


# ------------------------------------------------------------ LOGISTIC and TANH


@pytest.mark.parametrize(
    ("scale", "zp"), [(0.005, 0), (0.02, 128), (0.0625, 100), (0.1, 200), (1.0, 128), (20.0, 3)]
)
def test_logistic_and_tanh_bit_exact_vs_scalar_reference(scale, zp):
    x = np.arange(256, dtype=np.uint8).reshape(16, 16)
    assert np.array_equal(logistic(x, scale, zp).ravel(), ref_table_u8(ref_logistic, scale, zp, 23, 0))
    assert np.array_equal(tanh(x, scale, zp).ravel(), ref_table_u8(ref_tanh, scale, zp, 24, 128))


@pytest.mark.parametrize("scale", [0.01, 0.02, 0.05, 0.1, 0.3, 1.0])
def test_logistic_and_tanh_within_one_unit_of_float64(scale):
    x = np.arange(256, dtype=np.uint8)
    real = scale * (x.astype(np.float64) - 120)
    sig = rounded(1 / (1 + np.exp(-real)), 256).astype(np.uint8)
    th = rounded(np.tanh(real), 128, 128).astype(np.uint8)
    assert max_unit_diff(logistic(x, scale, 120), sig) <= 1
    assert max_unit_diff(tanh(x, scale, 120), th) <= 1


def test_logistic_and_tanh_hand_values():
    x = np.array([0, 100, 255], np.uint8)
    # At the zero point: logistic 1/2 -> 128, tanh 0 -> 128 (zero point 128).
    assert logistic(x, 0.1, 100)[1] == 128 and tanh(x, 0.1, 100)[1] == 128
    # Far from it both saturate (the input radius of scale 1 is floor(15 * 2^27 / 2^28) = 7).
    assert logistic(x, 1.0, 100)[[0, 2]].tolist() == [0, 255]
    assert tanh(x, 1.0, 100)[[0, 2]].tolist() == [0, 255]
    # logistic(2) = 0.8808 -> 225.5 -> 225 or 226; the fixed point gives 225.
    assert logistic(np.array([20], np.uint8), 0.1, 0)[0] == 225
    # tanh(1) = 0.76159 * 128 = 97.48 -> 128 + 97.
    assert tanh(np.array([110], np.uint8), 0.1, 100)[0] == 225


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_logistic_and_tanh_vs_onnxruntime(dtype):
    x = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, dtype=np.int32).astype(dtype)
    off = 0 if dtype == np.uint8 else -128
    differ = 0
    for scale, zp in [(0.02, 128 + off), (0.05, 100 + off), (0.25, 60 + off)]:
        got = logistic(x, scale, zp)
        ref = ort_qdq("Sigmoid", x, scale, zp, 1 / 256, off)
        assert max_unit_diff(got, ref) <= 1
        differ += int(np.count_nonzero(got != ref))
        got = tanh(x, scale, zp)
        ref = ort_qdq("Tanh", x, scale, zp, 1 / 128, 128 + off)
        assert max_unit_diff(got, ref) <= 1
        differ += int(np.count_nonzero(got != ref))
    assert differ <= 6 * 256 // 20


def test_logistic_and_tanh_signed_equals_unsigned_minus_128():
    x = random_q(RNG, (4, 5, 6), np.uint8)
    for scale, zp in [(0.03, 140), (0.5, 10)]:
        s = to_signed(x)
        for fn in (logistic, tanh):
            unsigned = fn(x, scale, zp).astype(np.int16)
            assert np.array_equal(fn(s, scale, zp - 128).astype(np.int16), unsigned - 128)
    # A strided (non-contiguous) signed input reads the same table entries.
    s = to_signed(x)[:, ::2, 1::3]
    assert np.array_equal(logistic(s, 0.03, 12), logistic(np.ascontiguousarray(s), 0.03, 12))


# ------------------------------------------------------------ fixed-point primitives


def test_fixedpoint_functions_match_scalar_reference_and_math():
    raws = np.concatenate([RNG.integers(MIN32, 0, 300), [0, -1, MIN32, -(1 << 26), -(1 << 27)]])
    for ib in (0, 1, 4, 5, 6, 12):
        got = fp.exp_on_negative_values(raws, ib)
        assert got.tolist() == [exp_neg(int(a), ib) for a in raws]
        real = np.exp(raws / 2.0 ** (31 - ib)) * 2.0**31
        assert np.all(np.abs(got - np.minimum(real, MAX32)) <= 2.0**31 * 1e-6)
    signed = RNG.integers(MIN32 // 2, MAX32 // 2, 300)
    assert fp.logistic(signed, 4).tolist() == [ref_logistic(int(a), 4) for a in signed]
    assert fp.tanh(signed, 3).tolist() == [ref_tanh(int(a), 3) for a in signed]
    unit = RNG.integers(0, MAX32, 300)
    assert fp.one_over_one_plus_x_for_x_in_0_1(unit).tolist() == [one_over_one_plus(int(a)) for a in unit]
    assert np.all(
        np.abs(fp.one_over_one_plus_x_for_x_in_0_1(unit) / 2.0**31 - 1 / (1 + unit / 2.0**31)) < 1e-8
    )
    assert int(fp.mul(MIN32, MIN32)) == MAX32  # the one saturating product
    assert fp.saturating_rounding_multiply_by_pot(np.array([1 << 29, -(1 << 29) - 1, 5]), 2).tolist() == [
        MAX32,
        MIN32,
        20,
    ]


def test_input_scaling_helpers():
    assert fp.quantize_multiplier_greater_than_one("T", "m", 1.5) == (3 << 29, 1)
    assert fp.quantize_multiplier_greater_than_one("T", "m", 2.0**30) == (1 << 30, 31)
    assert fp.quantize_multiplier_greater_than_one("T", "m", 2.0**31 - 1) == ref_qm_greater_than_one(
        2.0**31 - 1
    )
    assert fp.calculate_input_radius(5, 27) == 15 and fp.calculate_input_radius(4, 31) == 0
    for real in (1.0, 0.5, float("nan")):
        with pytest.raises(HalError):
            fp.quantize_multiplier_greater_than_one("T", "m", real)


# ------------------------------------------------------------ bad signatures


def _reject(op, inputs, outs, match):
    with pytest.raises(HalError, match=match) as e:
        qcall(op, inputs, outs)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("op", "inputs", "outs", "match"),
    [
        (
            Op.SOFTMAX,
            [Q(np.zeros((2, 3), np.uint8), 0.1), 1.0],
            [out(U8, 1 / 128, 0)],
            "SOFTMAX: output 0 has scale",
        ),
        (Op.SOFTMAX, [Q(np.zeros((2, 3), np.uint8), 0.1), 1.0], [out(U8, 1 / 256, 128)], "zero point 0"),
        (Op.SOFTMAX, [Q(np.zeros((2, 3), np.int8), 0.1), 1.0], [out(S8, 1 / 256, 0)], "zero point -128"),
        (
            Op.SOFTMAX,
            [Q(np.zeros((2, 3), np.uint8), 0.1), 1.0],
            [out(S8, 1 / 256, -128)],
            "output 0 has type",
        ),
        (Op.SOFTMAX, [Q(np.zeros((2, 3), np.uint8), 0.1), 0.0], [out(U8, 1 / 256, 0)], "beta is 0.0"),
        (
            Op.SOFTMAX,
            [Q(np.zeros((2, 3), np.uint8), 0.1), 1.0, 2],
            [out(U8, 1 / 256, 0)],
            "axis 2 is out of range",
        ),
        (
            Op.SOFTMAX,
            [Q(np.zeros((2, 3), np.uint8), 1e-9), 1.0],
            [out(U8, 1 / 256, 0)],
            "beta \\* input scale",
        ),
        (Op.LOGISTIC, [Q(np.zeros(3, np.uint8), 0.1)], [out(U8, 1 / 128, 0)], "LOGISTIC: output 0 has scale"),
        (Op.LOGISTIC, [Q(np.zeros(3, np.int8), 0.1)], [out(S8, 1 / 256, 0)], "zero point -128"),
        (Op.LOGISTIC, [Q(np.zeros(3, np.uint8), 1e-9)], [out(U8, 1 / 256, 0)], "input scale \\* 2\\^27"),
        (
            Op.LOGISTIC,
            [Q(np.zeros(3, np.uint8), 0.1)],
            [ArgInfo(int(OperandType.TENSOR_FLOAT32), ())],
            "type",
        ),
        (Op.TANH, [Q(np.zeros(3, np.uint8), 0.1)], [out(U8, 1 / 128, 0)], "TANH: output 0 has scale"),
        (Op.TANH, [Q(np.zeros(3, np.int8), 0.1)], [out(S8, 1 / 128, -128)], "zero point 0"),
        (Op.TANH, [Q(np.zeros(3, np.uint8), 0.1), 1], [out(U8, 1 / 128, 128)], "expected 1 inputs"),
    ],
)
def test_bad_signatures_are_invalid(op, inputs, outs, match):
    _reject(op, inputs, outs, match)
