"""Quantized CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED against an exact int64 reference and onnxruntime.

The exact reference is written here independently of the driver: int64 accumulation of
(x - zp_x)(w - zp_w) over explicitly padded input, then a scalar transcription of TFLite's
QuantizeMultiplier / MultiplyByQuantizedMultiplier / CalculateActivationRange per element; the
kernels must match it bit for bit. onnxruntime (QLinearConv, QLinearMatMul, a QDQ MatMul graph)
requantizes in float with ties to even, so it may differ by one unit near ties; its agreement is a
separate test per case, run only where a probe finds its products of that type pairing exact on the
running CPU (uint8 x int8 saturates at 16 bits without VNNI) and skipped with the reason elsewhere.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx import helper

from driver.ops._qconv import MAX_PRODUCT, accumulation_dtype, check_exact
from mlts.bench.ort_exactness import pairing_is_exact
from mlts.hal.enums import ErrorStatus, OperationType
from mlts.hal.errors import HalError
from tests.driver.convkit import ort_attrs
from tests.driver.qconvkit import (
    CONV,
    CONV_CASES,
    DW,
    DW_CASES,
    F32,
    FC,
    FC_CASES,
    check_vs_ort,
    conv_ops,
    conv_setup,
    dw_setup,
    fc_setup,
    nchw,
    nhwc,
    one_by_one,
    ort_fc_qdq,
    ort_qconv,
    params,
    ref_activation_range,
    ref_requant,
    run_conv_case,
    run_dw_case,
    signed_twin,
)
from tests.driver.qkit import (
    PAIRING_OF_KIND,
    PC,
    S8,
    U8,
    Q,
    ort_model,
    ort_run,
    out,
    qcall,
    require_exact_ort,
    to_signed,
)

# ------------------------------------------------------------ independent exact reference


# ------------------------------------------------------------ operands


@pytest.fixture
def rng(request) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


# ------------------------------------------------------------ CONV_2D

# (N, H, W, Cin, Cout, KH, KW, padding, (stride_w, stride_h), act, nchw, (dilation_w, dilation_h), kind)


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}-{c[-1]}" for i, c in enumerate(CONV_CASES)])
def test_conv_2d(rng, case):
    got, (x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy), (lo, hi) = run_conv_case(rng, case)
    exact = ref_requant(acc, [sx * s / sy for s in sws], zy, lo, hi)
    np.testing.assert_array_equal(got, exact)
    assert len(np.unique(got)) > min(20, got.size // 3), "test data should spread over the output range"


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}-{c[-1]}" for i, c in enumerate(CONV_CASES)])
def test_conv_2d_vs_onnxruntime(rng, case):
    n, h, w, cin, cout, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    require_exact_ort(*PAIRING_OF_KIND[kind])
    got, (x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy), (lo, hi) = run_conv_case(rng, case)
    per_channel = kind.startswith("pc")
    y = ort_qconv(
        nchw(x), sx, zx, nchw(fq.value), sws, zw, bq.value, sy, zy, 1,
        ort_attrs(padding, stride, dilation, (h, w), (kh, kw)), per_channel,
    )  # fmt: skip
    check_vs_ort(got, np.clip(nhwc(y), lo, hi))


def test_conv_runtime_filter_and_bias_match_constants(rng):
    case = CONV_CASES[2]
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = conv_setup(rng, case)
    p = params(case[7], case[8], (), case[9], False, case[11])
    (const,) = qcall(CONV, [Q(x, sx, zx), fq, bq, *p], [out(xt, sy, zy)])
    f_rt = Q(fq.value, fq.scale, 0, const=False, channel_scales=fq.channel_scales, channel_dim=0)
    (rt,) = qcall(CONV, [Q(x, sx, zx), f_rt, Q(bq.value, 0.0), *p], [out(xt, sy, zy)])
    np.testing.assert_array_equal(rt, const)


def test_conv_saturates_at_small_output_scale(rng):
    case = CONV_CASES[0]
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = conv_setup(rng, case, spread=2000.0)
    (got,) = qcall(
        CONV, [Q(x, sx, zx), fq, bq, *params("SAME", (1, 1), (), 0, False, (1, 1))], [out(xt, sy, zy)]
    )
    assert (got == 0).any() and (got == 255).any()
    np.testing.assert_array_equal(got, ref_requant(acc, [sx * sws[0] / sy], zy, 0, 255))


# ------------------------------------------------------------ DEPTHWISE_CONV_2D

# (N, H, W, Cin, M, KH, KW, padding, (stride_w, stride_h), act, nchw, (dilation_w, dilation_h), kind)


@pytest.mark.parametrize("case", DW_CASES, ids=[f"dw{i}-{c[-1]}" for i, c in enumerate(DW_CASES)])
def test_depthwise_conv_2d(rng, case):
    got, (x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy), (lo, hi) = run_dw_case(rng, case)
    exact = ref_requant(acc, [sx * s / sy for s in sws], zy, lo, hi)
    np.testing.assert_array_equal(got, exact)


@pytest.mark.parametrize("case", DW_CASES, ids=[f"dw{i}-{c[-1]}" for i, c in enumerate(DW_CASES)])
def test_depthwise_conv_2d_vs_onnxruntime(rng, case):
    n, h, w, cin, mult, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    require_exact_ort(*PAIRING_OF_KIND[kind])
    got, (x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy), (lo, hi) = run_dw_case(rng, case)
    w_oihw = fq.value[0].transpose(2, 0, 1)[:, None].copy()  # [Cout, 1, KH, KW], group = Cin
    y = ort_qconv(
        nchw(x), sx, zx, w_oihw, sws, zw, bq.value, sy, zy, cin,
        ort_attrs(padding, stride, dilation, (h, w), (kh, kw)), kind.startswith("pc"),
    )  # fmt: skip
    check_vs_ort(got, np.clip(nhwc(y), lo, hi))


def test_depthwise_runtime_filter_and_bias_match_constants(rng):
    case = DW_CASES[1]
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = dw_setup(rng, case)
    p = params("VALID", (2, 2), (2,), 1, False, (1, 1))
    (const,) = qcall(DW, [Q(x, sx, zx), fq, bq, *p], [out(xt, sy, zy)])
    (rt,) = qcall(DW, [Q(x, sx, zx), Q(fq.value, fq.scale, zw), Q(bq.value, bq.scale), *p], [out(xt, sy, zy)])
    np.testing.assert_array_equal(rt, const)


# ------------------------------------------------------------ FULLY_CONNECTED

# (input shape, input_size, units, act, kind)


@pytest.mark.parametrize("case", FC_CASES, ids=[f"fc{i}-{c[-1]}" for i, c in enumerate(FC_CASES)])
def test_fully_connected(rng, case):
    shape, size, units, act, kind = case
    x, xt, zx, sx, wq, zw, sws, bq, acc, sy, zy = fc_setup(rng, case)
    (got,) = qcall(FC, [Q(x, sx, zx), wq, bq, act], [out(xt, sy, zy)])
    assert got.dtype == (np.uint8 if xt == U8 else np.int8)
    assert got.shape == (x.size // size, units)
    lo, hi = ref_activation_range(act, xt, sy, zy)
    np.testing.assert_array_equal(got, ref_requant(acc, [sx * sws[0] / sy], zy, lo, hi))
    exact, reason = pairing_is_exact(*PAIRING_OF_KIND[kind])
    if not exact:
        pytest.skip(f"exact reference checked; onnxruntime agreement not checked: {reason}")
    y = ort_fc_qdq(x.reshape(-1, size), sx, zx, wq.value, sws[0], zw, bq.value, bq.scale, sy, zy)
    check_vs_ort(got, np.clip(y, lo, hi))


def test_fully_connected_vs_qlinearmatmul_without_bias(rng):
    x, xt, zx, sx, wq, zw, sws, bq, acc, sy, zy = fc_setup(rng, FC_CASES[0])
    require_exact_ort("uint8", "uint8")
    zero = Q(np.zeros(5, np.int32), bq.scale, 0, const=True)
    (got,) = qcall(FC, [Q(x, sx, zx), wq, zero, 0], [out(xt, sy, zy)])
    inits = {
        "xs": np.array(sx, F32), "xz": np.array(zx, np.uint8), "w": np.ascontiguousarray(wq.value.T),
        "ws": np.array(sws[0], F32), "wz": np.array(zw, np.uint8), "ys": np.array(sy, F32),
        "yz": np.array(zy, np.uint8),
    }  # fmt: skip
    node = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    check_vs_ort(got, ort_run(ort_model([node], {"x": x}, inits), {"x": x}))
    (rt,) = qcall(
        FC, [Q(x, sx, zx), Q(wq.value, wq.scale, zw), Q(zero.value, zero.scale), 0], [out(xt, sy, zy)]
    )
    np.testing.assert_array_equal(rt, got)


# ------------------------------------------------------------ signed / unsigned equivalence


@pytest.mark.parametrize("op, kind", [(CONV, "u8"), (CONV, "pcu8"), (DW, "u8"), (DW, "pcu8"), (FC, "u8")])
@pytest.mark.parametrize("act", [0, 1, 2, 3])
def test_signed_matches_unsigned_up_to_offset(rng, op, kind, act):
    if op == CONV:
        case = (1, 7, 6, 3, 4, 3, 3, "SAME", (2, 1), act, False, (1, 1), kind)
        x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = conv_setup(rng, case)
        p = params("SAME", (2, 1), (), act, False, (1, 1))
    elif op == DW:
        case = (1, 7, 6, 3, 2, 3, 3, (1, 0, 1, 1), (1, 1), act, False, (1, 1), kind)
        x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = dw_setup(rng, case)
        p = params((1, 0, 1, 1), (1, 1), (2,), act, False, (1, 1))
    else:
        x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = fc_setup(rng, ((3, 16), 16, 5, act, kind))
        p = [act]
    xq = Q(x, sx, zx)
    (u,) = qcall(op, [xq, fq, bq, *p], [out(U8, sy, zy)])
    (s,) = qcall(op, [signed_twin(xq), signed_twin(fq), bq, *p], [out(S8, sy, zy - 128)])
    assert u.dtype == np.uint8 and s.dtype == np.int8
    np.testing.assert_array_equal(s, to_signed(u))


# ------------------------------------------------------------ hand-computed rounding and saturation


def test_rounding_ties_follow_the_fixed_point_reference():
    # M = 0.5: the high multiply rounds ties toward +inf: 1.5 -> 2, -1.5 -> -1.
    assert one_by_one(3, 0.5, 1.0, 1.0) == 2
    assert one_by_one(-3, 0.5, 1.0, 1.0) == -1
    # M = 0.25 rounds twice: 5 * 0.25 = 1.25 -> 2 (not 1); -1.25 -> -1.
    assert one_by_one(5, 0.5, 0.5, 1.0) == 2
    assert one_by_one(-5, 0.5, 0.5, 1.0) == -1
    # M = 4 (exponent > 0): a left shift, exact.
    assert one_by_one(7, 1.0, 1.0, 0.25) == 28
    # The bias is in accumulator units: (3 + 9) * 0.5 = 6.
    assert one_by_one(3, 0.5, 1.0, 1.0, bias=9) == 6


def test_saturation_and_activation_clamps():
    assert one_by_one(100, 1.0, 1.0, 0.25) == 255 - 128  # 400 saturates at 255
    assert one_by_one(-100, 1.0, 1.0, 0.25) == -128  # -400 saturates at 0
    # RELU6 with output scale 0.1, zero point 10: range [10, 70] -> real [0, 6].
    assert one_by_one(100, 0.5, 1.0, 0.1, act=3, zy=10) == 60
    assert one_by_one(-100, 0.5, 1.0, 0.1, act=3, zy=10) == 0
    assert one_by_one(5, 0.5, 1.0, 0.1, act=3, zy=10) == 25
    # RELU1: [-1, 1] -> [0, 20] around zero point 10.
    assert one_by_one(100, 0.5, 1.0, 0.1, act=2, zy=10) == 10
    assert one_by_one(-100, 0.5, 1.0, 0.1, act=2, zy=10) == -10


def test_padding_uses_the_input_zero_point():
    # All-zero-point input: every window (padded or not) sums to 0; output = bias * M + zp.
    x = Q(np.full((1, 3, 3, 1), 77, np.uint8), 0.5, 77)
    f = Q(np.full((1, 3, 3, 1), 200, np.uint8), 0.25, 3, const=True)
    b = Q(np.array([40], np.int32), 0.125, 0, const=True)
    (y,) = qcall(CONV, [x, f, b, 1, 1, 1, 0], [out(U8, 1.0, 100)])
    np.testing.assert_array_equal(y, np.full((1, 3, 3, 1), 105, np.uint8))  # 100 + 40 * 0.125


# ------------------------------------------------------------ exactness bound


def test_exactness_bound():
    limit = (2**53 - 2**31) // MAX_PRODUCT
    assert limit > 1.3e11
    check_exact("CONV_2D", limit - 1)
    with pytest.raises(HalError, match="exact float64") as e:
        check_exact("CONV_2D", limit + 1)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


# ------------------------------------------------------------ rejected signatures


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ft": S8}, "filter has type TENSOR_QUANT8_ASYMM_SIGNED, expected TENSOR_QUANT8_ASYMM or"),
        ({"xt": S8, "ft": U8}, "filter has type TENSOR_QUANT8_ASYMM, expected TENSOR_QUANT8_ASYMM_SIGNED"),
        ({"out_type": S8}, "output has type TENSOR_QUANT8_ASYMM_SIGNED, expected TENSOR_QUANT8_ASYMM"),
        ({"bias_scale": 0.2}, r"bias scale 0.2 must equal input scale \* filter scale = 0.125"),
        ({"bias_scale": 0.125 * (1 + 3e-6)}, "bias scale"),
        ({"bias_zp": 3}, "bias has zero point 3"),
        ({"ft": PC, "pc_dim": 3}, "channelDim 3, expected 0"),
        ({"ft": PC, "pc_bias_scale": 0.125}, "with a per-channel filter it must be 0"),
    ],
)
def test_conv_rejects_bad_signatures(kwargs, match):
    ins, outs = conv_ops(**kwargs)
    with pytest.raises(HalError, match=match) as e:
        qcall(CONV, ins, outs)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_bias_scale_within_nnapi_tolerance_is_accepted():
    ins, outs = conv_ops(bias_scale=0.125 * (1 + 5e-7))
    (y,) = qcall(CONV, ins, outs)
    assert y.dtype == np.uint8


def test_other_bad_signatures():
    x = Q(np.zeros((1, 4, 4, 3), np.uint8), 0.25, 0)
    pc_dw = Q(np.zeros((1, 3, 3, 3), np.int8), 0.0, 0, True, (0.5, 0.5, 0.5), 0)
    b0 = Q(np.zeros(3, np.int32), 0.0, 0, const=True)
    cases = [
        (DW, [x, pc_dw, b0, 1, 1, 1, 1, 0], "channelDim 0, expected 3"),
        (FC, [Q(np.zeros((2, 3), np.uint8), 0.25, 0), Q(np.zeros((3, 3), np.int8), 0.0, 0, True, (0.5,) * 3, 0), b0, 0],
         "weights has type TENSOR_QUANT8_SYMM_PER_CHANNEL, expected TENSOR_QUANT8_ASYMM for"),
        (FC, [Q(np.zeros((2, 3), np.uint8), 0.25, 0), Q(np.zeros((3, 3), np.uint8), 0.5, 0, True),
              np.zeros(3, np.float32), 0], "bias has type TENSOR_FLOAT32, expected TENSOR_INT32"),
        (CONV, [x, Q(np.zeros((2, 1, 1, 3), np.int8), 0.0, 0, True, (0.5, 0.5, 0.5), 0),
                Q(np.zeros(2, np.int32), 0.0, 0, True), 1, 1, 1, 0], "3 scales, expected 2"),
        (CONV, [x, Q(np.zeros((3, 1, 1, 3), np.int8), 0.0, 2, True, (0.5, 0.5, 0.5), 0), b0, 1, 1, 1, 0],
         "zero point 2, expected 0"),
        (CONV, [x, Q(np.zeros((3, 1, 1, 3), np.uint8), 1.0, 0, True),
                Q(np.zeros(3, np.int32), 0.25, 0, True), 1, 1, 1, 0], "too large"),
    ]  # fmt: skip
    for op, ins, match in cases:
        outs = [out(U8, 1.0 if "too large" not in match else 1e-12, 0)]
        with pytest.raises(HalError, match=match) as e:
            qcall(op, ins, outs)
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT, match


@pytest.mark.parametrize(("cin", "dtype"), [(258, np.float32), (259, np.float64)])
def test_float32_accumulation_only_where_every_partial_sum_is_exact(cin, dtype):
    """258 * 255 * 255 < 2^24 <= 259 * 255 * 255: the kernel switches to float64 exactly at the bound,
    and the worst-case sum (every input and weight at 255, zero points 0) is exact either way."""
    w = np.full((cin, 1), 255.0)
    assert accumulation_dtype(w, 0, 255) is dtype
    assert accumulation_dtype(None, 0, 255) is np.float64
    x = Q(np.full((1, 1, 1, cin), 255, np.uint8), 0.5, 0)
    filt = Q(np.full((2, 1, 1, cin), 255, np.uint8), 0.25, 0, const=True)
    bias = Q(np.array([0, -(1 << 20)], np.int32), 0.125, 0, const=True)
    acc = np.array([cin * 255 * 255, cin * 255 * 255 - (1 << 20)], dtype=np.int64)
    sy = 0.125 * 2.0**17  # keeps the result inside [0, 255]
    (got,) = qcall(OperationType.CONV_2D, [x, filt, bias, 0, 0, 0, 0, 1, 1, 0], [out(U8, sy, 0)])
    want = ref_requant(acc.reshape(1, 2), [0.125 / sy], 0, 0, 255)
    assert got.reshape(-1).tolist() == want.reshape(-1).tolist()
