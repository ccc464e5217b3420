"""AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D against onnxruntime pooling (NCHW)."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, OperationType
from mlts.hal.errors import HalError
from tests.driver.convkit import ort_attrs, window_args
from tests.driver.opkit import activation, call, check, nchw, nhwc, ort_node, prepare, rand

AVG, MAX, L2 = OperationType.AVERAGE_POOL_2D, OperationType.MAX_POOL_2D, OperationType.L2_POOL_2D

# (N, H, W, C, KH, KW, padding, (stride_w, stride_h), act, layout)
POOL_CASES = [
    (1, 8, 8, 3, 2, 2, "VALID", (2, 2), 0, None),
    (2, 7, 9, 4, 3, 3, "SAME", (2, 2), 1, None),
    (1, 9, 7, 2, 3, 2, (1, 0, 2, 1), (1, 2), 2, None),
    (1, 7, 7, 5, 7, 7, "VALID", (1, 1), 0, False),
    (2, 6, 5, 3, 3, 3, "SAME", (1, 1), 3, True),
    (1, 5, 6, 2, 2, 3, (0, 2, 1, 1), (2, 1), 0, True),
]


def _ref(op, x, kh, kw, padding, stride):
    attrs = ort_attrs(padding, stride, (1, 1))
    attrs.pop("dilations")
    attrs["kernel_shape"] = [kh, kw]
    if op == MAX:
        return ort_node("MaxPool", {"x": nchw(x)}, **attrs)
    if op == AVG:
        return ort_node("AveragePool", {"x": nchw(x)}, count_include_pad=0, **attrs)
    mean_sq = ort_node("AveragePool", {"x": nchw(x * x)}, count_include_pad=0, **attrs)
    return np.sqrt(mean_sq.astype(np.float64))


@pytest.mark.parametrize("op", [AVG, MAX, L2], ids=["avg", "max", "l2"])
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{i}" for i in range(len(POOL_CASES))])
def test_pool(op, case):
    n, h, w, c, kh, kw, padding, stride, act, layout = case
    x = rand(np.random.default_rng(len(str(case))), n, h, w, c, lo=-2, hi=2)
    params = window_args(padding, stride, (kw, kh), act, layout, (1, 1))
    is_nchw = layout is True
    got = call(op, nchw(x) if is_nchw else x, *params)
    ref = _ref(op, x, kh, kw, padding, stride)
    check(got, activation(act, ref if is_nchw else nhwc(ref)))


def test_average_pool_divides_by_valid_elements_only():
    # 2x2 input of ones padded SAME to 3x3 windows: every average is 1 whatever the padding.
    got = call(AVG, np.ones((1, 2, 2, 1), np.float32), 1, 1, 1, 3, 3, 0)
    check(got, np.ones((1, 2, 2, 1)))


def test_max_pool_ignores_padding():
    x = np.full((1, 2, 2, 1), -5.0, np.float32)
    got = call(MAX, x, 1, 1, 1, 1, 1, 1, 3, 3, 0)  # explicit padding 1 all round
    check(got, np.full((1, 2, 2, 1), -5.0))


@pytest.mark.parametrize(
    "params, match",
    [
        ([1, 1, 1, 2, 2], "expected 7 or 8 or 10 or 11 inputs, got 6"),
        ([5, 1, 1, 2, 2, 0], "padding scheme is 5"),
        ([1, 1, 1, 0, 2, 0], "filter width is 0"),
        ([1, 1, 1, 2, 2, 7], "fused activation is 7"),
        ([1, 1, 1, 2, 2, 0, 1], "layout has type INT32, expected BOOL"),
    ],
)
def test_pool_errors(params, match):
    with pytest.raises(HalError, match=match) as e:
        prepare(MAX, [np.zeros((1, 4, 4, 1), np.float32), *params])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
