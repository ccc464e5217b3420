"""Quantized MAX_POOL_2D and AVERAGE_POOL_2D against an exact int64 reference and onnxruntime.

The reference walks every output position over the in-bounds part of its
window (padding never counts): the maximum, or (sum + n // 2) // n of the
uint8 values (int8 computed on the values + 128), clamped to the activation
range. onnxruntime runs DequantizeLinear -> MaxPool / AveragePool
(count_include_pad=0) -> QuantizeLinear, whose ties go to even, so averages
may differ by one unit at exact halves.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx import helper

from driver.ops import ArgInfo
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from tests.driver.convkit import ort_attrs, same_pads, window_args
from tests.driver.qkit import S8, U8, Q, ort_model, ort_run, out, qcall, random_q, to_signed
from tests.driver.requantkit import assert_near_ort, ref_act_range

AVG, MAX = OperationType.AVERAGE_POOL_2D, OperationType.MAX_POOL_2D
F32 = np.float32

# (N, H, W, C, KH, KW, padding, (stride_w, stride_h), act, layout)
POOL_CASES = [
    (1, 8, 8, 3, 2, 2, "VALID", (2, 2), 0, None),
    (2, 7, 9, 4, 3, 3, "SAME", (2, 2), 1, None),
    (1, 9, 7, 2, 3, 2, (1, 0, 2, 1), (1, 2), 2, None),
    (1, 7, 7, 5, 7, 7, "VALID", (1, 1), 0, False),  # global pooling
    (2, 6, 5, 3, 3, 3, "SAME", (1, 1), 3, True),
    (1, 5, 6, 2, 2, 3, (0, 2, 1, 1), (2, 1), 0, True),
    (1, 4, 4, 2, 3, 3, (2, 2, 2, 2), (1, 1), 0, None),  # windows at the corners hold a single element
    (1, 6, 6, 3, 6, 6, "SAME", (3, 3), 1, None),
]
# (scale, zero point) of input and output; the activation bounds bite for RELU1/RELU6 with these.
QUANTS = [(0.05, 100), (0.02, 0), (0.1, 250)]


def explicit_pads(case):
    """(top, bottom, left, right) of a case, computed independently of the driver."""
    _, h, w, _, kh, kw, padding, (sw, sh), _, _ = case
    if padding == "VALID":
        return 0, 0, 0, 0
    if padding == "SAME":
        return (*same_pads(h, kh, sh, 1), *same_pads(w, kw, sw, 1))
    left, right, top, bottom = padding
    return top, bottom, left, right


def ref_pool(op, x, case, lo, hi):
    """The pool of NHWC `x` over the in-bounds part of each window, clamped to [lo, hi]."""
    n, h, w, c, kh, kw, _, (sw, sh), _, _ = case
    top, bottom, left, right = explicit_pads(case)
    oh, ow = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
    offset = 128 if x.dtype == np.int8 else 0
    xs = x.astype(np.int64) + offset
    y = np.empty((n, oh, ow, c), np.int64)
    for i in range(oh):
        r0, r1 = max(i * sh - top, 0), min(i * sh - top + kh, h)
        for j in range(ow):
            c0, c1 = max(j * sw - left, 0), min(j * sw - left + kw, w)
            win = xs[:, r0:r1, c0:c1, :]
            count = win.shape[1] * win.shape[2]
            y[:, i, j, :] = (
                win.max(axis=(1, 2)) if op == MAX else (win.sum(axis=(1, 2)) + count // 2) // count
            )
    return np.clip(y - offset, lo, hi).astype(x.dtype)


def run_pool(op, x, case, scale, zp, t, out_q=None):
    _, _, _, _, kh, kw, padding, stride, act, layout = case
    params = window_args(padding, stride, (kw, kh), act, layout, (1, 1))
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if layout is True else x
    (y,) = qcall(op, [Q(xin, scale, zp), *params], [out(t, *(out_q or (scale, zp)))])
    return y.transpose(0, 2, 3, 1) if layout is True else y


def ort_pool(op, x, case, scale, zp):
    _, h, w, _, kh, kw, padding, stride, _, _ = case
    attrs = ort_attrs(padding, stride, (1, 1))
    attrs.pop("dilations")
    attrs["kernel_shape"] = [kh, kw]
    if op == AVG:
        attrs["count_include_pad"] = 0
    xc = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    init = {"s": np.array(scale, F32), "z": np.array(zp, x.dtype)}
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("MaxPool" if op == MAX else "AveragePool", ["f"], ["p"], **attrs),
        helper.make_node("QuantizeLinear", ["p", "s", "z"], ["y"]),
    ]
    y = ort_run(ort_model(nodes, {"x": xc}, init, output_dtype=x.dtype), {"x": xc})
    return y.transpose(0, 2, 3, 1)


@pytest.mark.parametrize("quant", QUANTS, ids=[f"q{i}" for i in range(len(QUANTS))])
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{i}" for i in range(len(POOL_CASES))])
@pytest.mark.parametrize("op", [AVG, MAX], ids=["avg", "max"])
def test_quant_pool(op, case, quant):
    scale, zp = quant
    n, h, w, c, *_ = case
    act = case[8]
    x = random_q(np.random.default_rng(zlib.crc32(repr((case, quant)).encode())), (n, h, w, c), np.uint8)
    y = run_pool(op, x, case, scale, zp, U8)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, ref_pool(op, x, case, *ref_act_range(act, U8, scale, zp)))
    ys = run_pool(op, to_signed(x), case, scale, zp - 128, S8)
    assert ys.dtype == np.int8
    np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)
    if act == 0:
        ref = ort_pool(op, x, case, scale, zp)
        if op == MAX:
            np.testing.assert_array_equal(y, ref)
        else:
            assert_near_ort(y, ref, min_equal=0.7)


def test_average_pool_hand_computed_ties_and_valid_counts():
    # SAME 3x3 windows on a constant 2x2 input: every average is the constant whatever the padding.
    x = np.full((1, 2, 2, 1), 200, np.uint8)
    (y,) = qcall(AVG, [Q(x, 0.1, 0), 1, 1, 1, 3, 3, 0], [out(U8, 0.1, 0)])
    assert y.reshape(-1).tolist() == [200] * 4
    # Averages of two values: 1.5 -> 2 (half up); int8 follows the uint8 arithmetic on the offset values:
    # -2.5 -> -2 (NNAPI's int8 reference would give -3 at this exact tie).
    pair = np.array([[[[1], [2]]]], np.uint8)
    (y,) = qcall(AVG, [Q(pair, 1.0, 0), 2, 1, 1, 2, 1, 0], [out(U8, 1.0, 0)])
    assert y.reshape(-1).tolist() == [2]
    neg = np.array([[[[-2], [-3]]]], np.int8)
    (y,) = qcall(AVG, [Q(neg, 1.0, 0), 2, 1, 1, 2, 1, 0], [out(S8, 1.0, 0)])
    assert y.reshape(-1).tolist() == [-2]
    # RELU6 clamps to zp + round(6 / scale) = 10 + 60.
    big = np.full((1, 2, 2, 1), 250, np.uint8)
    (y,) = qcall(AVG, [Q(big, 0.1, 10), 2, 1, 1, 2, 2, 3], [out(U8, 0.1, 10)])
    assert y.reshape(-1).tolist() == [70]


def test_max_pool_padding_never_wins():
    # The lowest int8 value everywhere, explicitly padded by 1: padding (also the lowest value) cannot win
    # over a real element, and RELU lifts the result to the zero point.
    x = np.full((1, 2, 2, 1), -128, np.int8)
    (y,) = qcall(MAX, [Q(x, 0.5, -128), 1, 1, 1, 1, 1, 1, 3, 3, 0], [out(S8, 0.5, -128)])
    assert y.reshape(-1).tolist() == [-128] * 4
    (y,) = qcall(MAX, [Q(x, 0.5, -100), 1, 1, 1, 1, 1, 1, 3, 3, 1], [out(S8, 0.5, -100)])
    assert y.reshape(-1).tolist() == [-100] * 4


@pytest.mark.parametrize("op", [AVG, MAX], ids=["avg", "max"])
@pytest.mark.parametrize(
    "output, match",
    [
        (out(U8, 0.2, 3), "output 0 has scale 0.2 and zero point 3; it must equal input's \\(0.1, 3\\)"),
        (out(U8, 0.1, 4), "zero point 4"),
        (out(S8, 0.1, 3), "output 0 has type TENSOR_QUANT8_ASYMM_SIGNED, expected TENSOR_QUANT8_ASYMM"),
        (ArgInfo(int(OperandType.TENSOR_FLOAT32), ()), "output 0 has type TENSOR_FLOAT32"),
    ],
)
def test_quant_pool_bad_signatures(op, output, match):
    x = Q(np.zeros((1, 4, 4, 1), np.uint8), 0.1, 3)
    with pytest.raises(HalError, match=match) as e:
        qcall(op, [x, 1, 1, 1, 2, 2, 0], [output])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_quant_pool_rejects_bad_input_type_and_params():
    with pytest.raises(HalError, match="input has type TENSOR_INT32, expected TENSOR_FLOAT32, TENSOR_QUANT8"):
        qcall(
            MAX, [ArgInfo(int(OperandType.TENSOR_INT32), (1, 4, 4, 1)), 1, 1, 1, 2, 2, 0], [out(U8, 0.1, 0)]
        )
    with pytest.raises(HalError, match="input has zero point 300"):
        qcall(AVG, [Q(np.zeros((1, 4, 4, 1), np.uint8), 0.1, 300), 1, 1, 1, 2, 2, 0], [out(U8, 0.1, 300)])
