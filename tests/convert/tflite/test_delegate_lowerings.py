"""The builtins TFLite's NNAPI delegate lowers into several NNAPI operations, and the forms it maps that
the importer once refused: SQUARED_DIFFERENCE (SUB, MUL), SPLIT_V (SLICEs), UNPACK (RESHAPE, SPLIT),
COS (SUB, SIN), MEAN into a differently quantized output (MEAN, ADD), grouped CONV_2D
(GROUPED_CONV_2D), TRANSPOSE_CONV with a fused activation. Each is checked twice: the NN operations
and operands are the delegate's (operand order, the scales it computes), and the converted model
agrees with LiteRT (TFLite's kernels) on the same inputs: exactly where TFLite and NNAPI compute the
same arithmetic, within the bound the lowering's extra rounding allows where they differ by design.
"""

from __future__ import annotations

import numpy as np
import pytest

from driver.operands import constant_value
from mlts.convert.tflite import convert_tflite
from mlts.hal.enums import OperandType, OperationType
from tests.convert.tflite._check import check, one_op, rand, run_litert, run_nn

Op = OperationType
T = OperandType


def F(shape, **kw):
    return dict(shape=shape, dtype="float32", **kw)


def S8(shape, scale=0.05, zp=0, **kw):
    return dict(shape=shape, dtype="int8", scale=scale, zero_point=zp, **kw)


def U8(shape, scale=0.05, zp=128, **kw):
    return dict(shape=shape, dtype="uint8", scale=scale, zero_point=zp, **kw)


def I32(shape, **kw):
    return dict(shape=shape, dtype="int32", **kw)


def C32(values):
    arr = np.asarray(values, dtype=np.int32)
    return dict(shape=arr.shape, dtype="int32", data=arr)


def _ops(data: bytes) -> tuple[list, object]:
    conv = convert_tflite(data)
    return conv.model.main.operations, conv.model


def _value(model, operand: int):
    return constant_value(model, model.main.operands[operand])


def _units(data: bytes, feeds) -> np.ndarray:
    """|NN - LiteRT| in quantized units over every element of the first output."""
    expected = run_litert(data, feeds)[0]
    actual = np.asarray(run_nn(data, feeds)[0]).reshape(expected.shape)
    return np.abs(actual.astype(np.int64) - expected.astype(np.int64))


# ---------------------------------------------------------------------------- exact against LiteRT

CASES = {
    "squared_difference_float_broadcast": ("SQUARED_DIFFERENCE", [F([2, 3, 4]), F([3, 4])], [F([2, 3, 4])], None, {}),
    "squared_difference_int32": ("SQUARED_DIFFERENCE", [I32([2, 5]), I32([2, 5])], [I32([2, 5])], None, {}),
    "squared_difference_scalar_constant": (
        "SQUARED_DIFFERENCE", [F([2, 5]), F([], data=np.float32(0.75))], [F([2, 5])], None, {},
    ),
    "split_v_unknown_size": (
        "SPLIT_V", [F([2, 7]), C32([2, -1, 1]), C32([1])], [F([2, 2]), F([2, 4]), F([2, 1])],
        "SplitVOptions", {"num_splits": 3},
    ),
    "split_v_int8_negative_axis": (
        "SPLIT_V", [S8([3, 4, 2]), C32([1, 2]), C32([-3])], [S8([1, 4, 2]), S8([2, 4, 2])],
        "SplitVOptions", {"num_splits": 2},
    ),
    "split_v_uint8": (
        "SPLIT_V", [U8([2, 6]), C32([3, 3]), C32([1])], [U8([2, 3]), U8([2, 3])], "SplitVOptions", {"num_splits": 2},
    ),
    "split_v_int32": (
        "SPLIT_V", [I32([4, 3]), C32([1, 3]), C32([0])], [I32([1, 3]), I32([3, 3])], "SplitVOptions", {"num_splits": 2},
    ),
    "unpack_axis0": ("UNPACK", [F([3, 2, 4])], [F([2, 4])] * 3, "UnpackOptions", {"num": 3, "axis": 0}),
    "unpack_int8_axis1": ("UNPACK", [S8([2, 3, 4])], [S8([2, 4])] * 3, "UnpackOptions", {"num": 3, "axis": 1}),
    "unpack_uint8_rank4_negative_axis": (
        "UNPACK", [U8([2, 2, 3, 2])], [U8([2, 2, 2])] * 3, "UnpackOptions", {"num": 3, "axis": -2},
    ),
    "transpose_conv_fused_relu": (
        "TRANSPOSE_CONV",
        [C32([1, 8, 8, 2]), F([2, 3, 3, 3], data=rand([2, 3, 3, 3], seed=14)), F([1, 4, 4, 3])],
        [F([1, 8, 8, 2])],
        "TransposeConvOptions",
        {"padding": 0, "stride_w": 2, "stride_h": 2, "fused_activation_function": 1},
    ),
    "grouped_conv_float": (
        "CONV_2D",
        [F([1, 5, 5, 4]), F([6, 3, 3, 2], data=rand([6, 3, 3, 2], seed=3)), F([6], data=rand([6], seed=4))],
        [F([1, 5, 5, 6])],
        "Conv2DOptions",
        {"padding": 0, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1, "dilation_h_factor": 1,
         "fused_activation_function": 3},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_matches_litert(case: str) -> None:
    builtin, inputs, outputs, options_name, options = CASES[case]
    data, feeds = one_op(builtin, inputs, outputs, options_name, **options)
    check(data, feeds, units=0)


def test_squared_difference_is_sub_then_mul_on_a_float_difference() -> None:
    data, feeds = one_op("SQUARED_DIFFERENCE", [F([2, 4]), F([2, 4])], [F([2, 4])])
    ops, model = _ops(data)
    assert [op.type for op in ops] == [Op.SUB, Op.MUL]
    sub, mul = ops
    assert _value(model, sub.inputs[2]) == 0 and list(mul.inputs[:2]) == [sub.outputs[0]] * 2
    assert model.main.operands[sub.outputs[0]].type == T.TENSOR_FLOAT32


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantized_squared_difference_difference_scale_is_the_delegates(dtype: str) -> None:
    spec = S8 if dtype == "int8" else U8
    out_zp = -128 if dtype == "int8" else 0
    data, _ = one_op("SQUARED_DIFFERENCE", [spec([8]), spec([8], 0.04)], [spec([8], 0.1, out_zp)])
    ops, model = _ops(data)
    diff = model.main.operands[ops[0].outputs[0]]
    # max_output = (top - output zero point) * output scale; diff scale = 2 sqrt(max_output) / 254, float32.
    top = 127 if dtype == "int8" else 255
    max_output = np.float32(np.float32(top - out_zp) * np.float32(0.1))
    want = np.float32(2) * np.sqrt(max_output, dtype=np.float32) / np.float32(254)
    assert np.float32(diff.scale) == want
    assert diff.zero_point == (0 if dtype == "int8" else 128)
    assert diff.type == (T.TENSOR_QUANT8_ASYMM_SIGNED if dtype == "int8" else T.TENSOR_QUANT8_ASYMM)


def test_int8_squared_difference_differs_from_tflite_within_the_lowerings_bound() -> None:
    """TFLite squares the exact difference and rounds once; the delegate's SUB first rounds the
    difference to scale s_d = 2 sqrt(M) / 254 (M = the output's largest value), an error of at most
    s_d / 2, so d^2 moves by at most s_d sqrt(M) + s_d^2 / 4 = 2M / 254 + M / 254^2, about 2.01 output
    units (M / s_out <= 255), plus the two roundings: at most 3 units. Measured on these 512 values (the
    output's range covering the squares): 176 one unit apart, 6 two units, none more."""
    inputs = [S8([8, 64], 0.05, 3), S8([8, 64], 0.04, -2)]
    data, feeds = one_op("SQUARED_DIFFERENCE", inputs, [S8([8, 64], 0.5, -128)])
    d = _units(data, feeds)
    assert d.max() <= 3
    assert np.bincount(d.ravel(), minlength=3).tolist() == [330, 176, 6]


def test_split_v_is_one_slice_per_output_with_the_resolved_sizes() -> None:
    data, _ = one_op(
        "SPLIT_V", [F([2, 7]), C32([2, -1, 1]), C32([-1])], [F([2, 2]), F([2, 4]), F([2, 1])],
        "SplitVOptions", num_splits=3,
    )  # fmt: skip
    ops, model = _ops(data)
    assert [op.type for op in ops] == [Op.SLICE] * 3
    begins = [_value(model, op.inputs[1]).tolist() for op in ops]
    sizes = [_value(model, op.inputs[2]).tolist() for op in ops]
    assert begins == [[0, 0], [0, 2], [0, 6]] and sizes == [[2, 2], [2, 4], [2, 1]]


def test_unpack_reshapes_then_splits() -> None:
    data, _ = one_op("UNPACK", [S8([3, 2, 4], 0.0)], [S8([2, 4], 0.0)] * 3, "UnpackOptions", num=3, axis=0)
    ops, model = _ops(data)
    assert [op.type for op in ops] == [Op.RESHAPE, Op.SPLIT]
    reshape, split = ops
    assert _value(model, reshape.inputs[1]).tolist() == [6, 4]
    merged = model.main.operands[reshape.outputs[0]]
    assert (
        merged.type == T.TENSOR_QUANT8_ASYMM_SIGNED and merged.scale == 1.0
    )  # scale 0 made 1, as the delegate
    assert _value(model, split.inputs[1]) == 0 and _value(model, split.inputs[2]) == 3


def test_cos_is_sin_of_half_pi_minus_x_within_one_float32_rounding() -> None:
    """cos(x) = sin(pi/2 - x): rounding pi/2 - x to float32 first moves the result by at most half an
    ulp of pi/2 - x (<= 2.4e-7 for |x| <= 2), inside CTS's fp32 rule; measured 1.2e-7."""
    data, feeds = one_op("COS", [F([4, 16])], [F([4, 16])])
    ops, model = _ops(data)
    assert [op.type for op in ops] == [Op.SUB, Op.SIN]
    half_pi = _value(model, ops[0].inputs[0])
    assert half_pi.shape == (4, 16) and np.all(half_pi == np.float32(np.pi / 2))
    expected = check(data, feeds)[0]
    actual = np.asarray(run_nn(data, feeds)[0]).reshape(expected.shape)
    assert np.abs(actual - expected).max() <= 2.4e-7


@pytest.mark.parametrize(
    "dtype, s_in, zp_in, s_out, zp_out, keep",
    [
        ("int8", 0.05, 2, 0.02, -5, True),
        ("uint8", 0.05, 120, 0.03, 100, False),
        ("int8", 0.02, 0, 0.05, 10, True),
    ],
)
def test_mean_into_a_differently_quantized_output_is_mean_then_add(
    dtype, s_in, zp_in, s_out, zp_out, keep
) -> None:
    """MEAN keeps the input's quantization; ADD of a one-element zero (scale 1, zero point 0)
    requantizes into the output's. TFLite rounds once; this rounds the mean to the input's scale first
    (an error of s_in / 2) and then again: within s_in / (2 s_out) + 1 units."""
    spec = S8 if dtype == "int8" else U8
    out_shape = [1, 1, 1, 3] if keep else [1, 3]
    data, feeds = one_op(
        "MEAN", [spec([1, 6, 6, 3], s_in, zp_in), C32([1, 2])], [spec(out_shape, s_out, zp_out)],
        "ReducerOptions", keep_dims=keep,
    )  # fmt: skip
    ops, model = _ops(data)
    assert [op.type for op in ops] == [Op.MEAN, Op.ADD]
    mean, add = ops
    tmp = model.main.operands[mean.outputs[0]]
    assert (np.float32(tmp.scale), tmp.zero_point) == (np.float32(s_in), zp_in)
    zero = model.main.operands[add.inputs[1]]
    assert (zero.scale, zero.zero_point, _value(model, add.inputs[1]).tolist()) == (1.0, 0, [0])
    assert _value(model, add.inputs[2]) == 0
    assert _units(data, feeds).max() <= np.floor(s_in / (2 * s_out) + 1)


def test_mean_with_one_quantization_stays_one_operation() -> None:
    data, _ = one_op("MEAN", [S8([1, 4, 4, 3]), C32([1, 2])], [S8([1, 3])], "ReducerOptions")
    assert [op.type for op in _ops(data)[0]] == [Op.MEAN]


def test_grouped_conv_is_grouped_conv_2d_with_the_groups_and_nhwc_layout() -> None:
    builtin, inputs, outputs, options_name, options = CASES["grouped_conv_float"]
    data, _ = one_op(builtin, inputs, outputs, options_name, **options)
    ops, model = _ops(data)
    assert [op.type for op in ops] == [Op.GROUPED_CONV_2D]
    params = [_value(model, i) for i in ops[0].inputs[3:]]
    assert params == [1, 1, 1, 2, 3, False]  # SAME, strides 1x1, 2 groups, RELU6, NHWC


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantized_grouped_conv_matches_litert(dtype: str) -> None:
    if dtype == "int8":
        w = S8(
            [6, 3, 3, 2], [0.01, 0.02, 0.005, 0.015, 0.01, 0.02], 0, data=rand([6, 3, 3, 2], "int8", seed=3)
        )
        b = dict(
            shape=[6],
            dtype="int32",
            scale=[2e-4, 4e-4, 1e-4, 3e-4, 2e-4, 4e-4],
            zero_point=0,
            data=rand([6], "int32", seed=4, lo=-300, hi=300),
        )
        x, y = S8([1, 5, 5, 4], 0.02, -3), S8([1, 5, 5, 6], 0.08, 2)
    else:
        w = U8([6, 3, 3, 2], 0.01, 120, data=rand([6, 3, 3, 2], "uint8", seed=3))
        b = dict(shape=[6], dtype="int32", scale=2e-4, data=rand([6], "int32", seed=4, lo=-300, hi=300))
        x, y = U8([1, 5, 5, 4], 0.02, 128), U8([1, 5, 5, 6], 0.08, 128)
    data, feeds = one_op(
        "CONV_2D", [x, w, b], [y], "Conv2DOptions",
        padding=0, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
    )  # fmt: skip
    check(data, feeds)


def test_transpose_conv_passes_its_fused_activation() -> None:
    builtin, inputs, outputs, options_name, options = CASES["transpose_conv_fused_relu"]
    data, _ = one_op(builtin, inputs, outputs, options_name, version=4, **options)
    ops, model = _ops(data)
    assert ops[0].type == Op.TRANSPOSE_CONV_2D and _value(model, ops[0].inputs[7]) == 1
