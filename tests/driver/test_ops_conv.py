"""CONV_2D and DEPTHWISE_CONV_2D against onnxruntime Conv (NCHW), all padding forms, layouts and activations."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from tests.driver.convkit import ort_attrs, window_args
from tests.driver.opkit import Const, activation, call, check, nchw, nhwc, ort_node, prepare, rand

CONV, DW = OperationType.CONV_2D, OperationType.DEPTHWISE_CONV_2D


# (N, H, W, Cin, Cout, KH, KW, padding, (stride_w, stride_h), act, layout, (dilation_w, dilation_h))
CONV_CASES = [
    (1, 8, 8, 3, 4, 3, 3, "SAME", (1, 1), 0, None, (1, 1)),
    (2, 7, 9, 2, 3, 3, 3, "VALID", (2, 2), 1, None, (1, 1)),
    (1, 9, 7, 3, 5, 3, 2, (1, 2, 0, 1), (2, 1), 2, None, (1, 1)),
    (1, 10, 10, 2, 3, 3, 3, "SAME", (1, 1), 3, True, (2, 2)),
    (2, 6, 6, 4, 8, 1, 1, "VALID", (1, 1), 1, False, (1, 1)),
    (1, 7, 7, 4, 6, 1, 1, "SAME", (2, 2), 0, "omit", (1, 1)),
    (1, 5, 5, 3, 2, 5, 5, (2, 2, 2, 2), (1, 1), 0, True, (1, 1)),
    (1, 8, 6, 3, 4, 3, 3, (1, 1, 2, 2), (2, 2), 1, False, (1, 2)),
    (1, 5, 6, 3, 4, 1, 1, (1, 0, 0, 1), (1, 1), 0, None, (1, 1)),
    (2, 9, 9, 8, 16, 3, 3, "SAME", (2, 2), 3, True, (1, 1)),
    (1, 6, 5, 2, 3, 2, 3, "SAME", (1, 2), 0, None, (1, 1)),
]


@pytest.mark.parametrize("const_filter", [True, False])
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv_2d(case, const_filter):
    n, h, w, cin, cout, kh, kw, padding, stride, act, layout, dilation = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    x, f, b = rand(rng, n, h, w, cin), rand(rng, cout, kh, kw, cin), rand(rng, cout)
    is_nchw = layout is True
    filt = Const(f) if const_filter else f
    got = call(
        CONV,
        nchw(x) if is_nchw else x,
        filt,
        Const(b),
        *window_args(padding, stride, (), act, layout, dilation),
    )
    ref = ort_node(
        "Conv",
        {"x": nchw(x), "w": f.transpose(0, 3, 1, 2).copy(), "b": b},
        **ort_attrs(padding, stride, dilation, (h, w), (kh, kw)),
    )
    expected = activation(act, ref if is_nchw else nhwc(ref))
    check(got, expected)


# (N, H, W, Cin, M, KH, KW, padding, (stride_w, stride_h), act, layout, (dilation_w, dilation_h))
DW_CASES = [
    (1, 8, 8, 3, 1, 3, 3, "SAME", (1, 1), 0, None, (1, 1)),
    (2, 9, 7, 4, 2, 3, 3, "VALID", (2, 2), 1, None, (1, 1)),
    (1, 7, 9, 2, 2, 3, 2, (0, 2, 1, 0), (1, 2), 2, None, (1, 1)),
    (1, 10, 10, 3, 1, 3, 3, "SAME", (1, 1), 3, True, (2, 2)),
    (2, 6, 6, 5, 2, 3, 3, "SAME", (2, 2), 3, False, (2, 1)),
    (1, 5, 5, 4, 1, 1, 1, "VALID", (1, 1), 0, "omit", (1, 1)),
    (1, 6, 6, 2, 3, 5, 5, (2, 2, 2, 2), (1, 1), 0, True, (1, 1)),
    (1, 12, 12, 16, 1, 3, 3, "SAME", (2, 2), 3, None, (1, 1)),
]


@pytest.mark.parametrize("const_filter", [True, False])
@pytest.mark.parametrize("case", DW_CASES, ids=[f"dw{i}" for i in range(len(DW_CASES))])
def test_depthwise_conv_2d(case, const_filter):
    n, h, w, cin, mult, kh, kw, padding, stride, act, layout, dilation = case
    cout = cin * mult
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    x, f, b = rand(rng, n, h, w, cin), rand(rng, 1, kh, kw, cout), rand(rng, cout)
    is_nchw = layout is True
    filt = Const(f) if const_filter else f
    params = window_args(padding, stride, (mult,), act, layout, dilation)
    got = call(DW, nchw(x) if is_nchw else x, filt, Const(b), *params)
    w_oihw = f[0].transpose(2, 0, 1)[:, None].copy()  # [Cout, 1, KH, KW], group = Cin
    ref = ort_node(
        "Conv",
        {"x": nchw(x), "w": w_oihw, "b": b},
        group=cin,
        **ort_attrs(padding, stride, dilation, (h, w), (kh, kw)),
    )
    expected = activation(act, ref if is_nchw else nhwc(ref))
    check(got, expected)


def test_conv_hand_computed():
    # 3x3 input of ones, 2x2 filter of ones, VALID: every output sums 4 ones, plus bias 0.5.
    x = np.ones((1, 3, 3, 1), np.float32)
    got = call(
        CONV, x, Const(np.ones((1, 2, 2, 1), np.float32)), Const(np.array([0.5], np.float32)), 2, 1, 1, 0
    )
    check(got, np.full((1, 2, 2, 1), 4.5))


def test_implicit_same_geometry():
    # TFLite SAME: out = ceil(7 / 2) = 4; total padding = (4 - 1) * 2 + 3 - 7 = 2 -> 1 before, 1 after.
    x = np.ones((1, 7, 7, 1), np.float32)
    f = Const(np.ones((1, 3, 3, 1), np.float32))
    got = call(CONV, x, f, Const(np.zeros(1, np.float32)), 1, 2, 2, 0)
    assert got.shape == (1, 4, 4, 1)
    check(got[0, :, :, 0], [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]])


def _conv_inputs():
    x = np.zeros((1, 4, 4, 2), np.float32)
    return [x, Const(np.zeros((3, 3, 3, 2), np.float32)), Const(np.zeros(3, np.float32))]


@pytest.mark.parametrize(
    "op, params, match",
    [
        (CONV, [1, 1, 1], "inputs"),  # 6 inputs
        (CONV, [1, 1, 1, 0, False, 1], "got 9"),
        (CONV, [1, 1, 1, 0, 1], "8 inputs for the explicit-padding form"),
        (CONV, [3, 1, 1, 0], "padding scheme is 3"),
        (CONV, [0, 1, 1, 0], "padding scheme is 0"),
        (CONV, [1, 1, 1, 4], "fused activation is 4"),
        (CONV, [1, 0, 1, 0], "stride width is 0"),
        (CONV, [-1, 0, 0, 0, 1, 1, 0], "padding left is -1"),
        (CONV, [1, 1, 1, 0, False, 0, 1], "dilation width is 0"),
        (CONV, [1, 1, 1.0, 0], "stride height has type FLOAT32"),
        (CONV, [0, 0, 0, 0, 1, 1, 0, 1], "layout has type INT32"),
        (DW, [1, 1, 1, 0], "inputs"),
        (DW, [1, 1, 1, 2, 0], "not a multiple of depth multiplier 2"),
        (DW, [1, 1, 1, 3, 0], "expected 1 = 3 / depth multiplier 3"),
    ],
)
def test_window_param_errors(op, params, match):
    x, f, b = _conv_inputs()
    if op == DW:
        f = Const(np.zeros((1, 3, 3, 3), np.float32))
    with pytest.raises(HalError, match=match) as e:
        prepare(op, [x, f, b, *params])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_conv_rejects_a_quantized_input_with_a_float_filter_and_channel_mismatch():
    from driver.ops import ArgInfo

    q = ArgInfo(int(OperandType.TENSOR_QUANT8_ASYMM), (1, 4, 4, 2), scale=0.5)
    _, f, b = _conv_inputs()
    with pytest.raises(HalError, match="TENSOR_QUANT8_ASYMM") as e:
        prepare(CONV, [q, f, b, 1, 1, 1, 0])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(HalError, match="3 channels, filter expects 2"):
        run, args = prepare(CONV, [np.zeros((1, 4, 4, 3), np.float32), f, b, 1, 1, 1, 0])
    run, args = prepare(CONV, [np.zeros((1, 2, 2, 2), np.float32), f, b, 2, 1, 1, 0])
    with pytest.raises(HalError, match="smaller than the effective filter size 3"):
        run(args)
