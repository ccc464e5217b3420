"""Every mapped TFLite builtin and option, one hand-built operator each, against LiteRT (TFLite's kernels)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.convert.tflite._check import check, one_op, rand


def F(shape, **kw):
    return dict(shape=shape, dtype="float32", **kw)


def U8(shape, scale=0.05, zp=128, **kw):
    return dict(shape=shape, dtype="uint8", scale=scale, zero_point=zp, **kw)


def S8(shape, scale=0.05, zp=0, **kw):
    return dict(shape=shape, dtype="int8", scale=scale, zero_point=zp, **kw)


def I32(shape, **kw):
    return dict(shape=shape, dtype="int32", **kw)


def B(shape, **kw):
    return dict(shape=shape, dtype="bool", **kw)


def C32(values):
    arr = np.asarray(values, dtype=np.int32)
    return dict(shape=arr.shape, dtype="int32", data=arr)


W = rand([4, 3, 3, 3], seed=7) * 0.5
BIAS = rand([4], seed=8)
X4 = [1, 6, 6, 3]

CASES = {
    # ---------------------------------------------------------------- element-wise
    "add": ("ADD", [F([1, 2, 3, 4]), F([1, 2, 3, 4])], [F([1, 2, 3, 4])], "AddOptions", {}),
    "add_broadcast_relu": (
        "ADD",
        [F([1, 2, 3, 4]), F([4])],
        [F([1, 2, 3, 4])],
        "AddOptions",
        {"fused_activation_function": 1},
    ),
    "add_relu_n1_to_1": (
        "ADD",
        [F([2, 5]), F([2, 5])],
        [F([2, 5])],
        "AddOptions",
        {"fused_activation_function": 2},
    ),
    "add_relu6_scalar_const": (
        "ADD",
        [F([2, 5]), F([], data=np.float32(1.5))],
        [F([2, 5])],
        "AddOptions",
        {"fused_activation_function": 3},
    ),
    "add_uint8": (
        "ADD",
        [U8([1, 4, 4, 2]), U8([1, 4, 4, 2], 0.03, 120)],
        [U8([1, 4, 4, 2], 0.08, 128)],
        "AddOptions",
        {},
    ),
    "add_int8_relu": (
        "ADD",
        [S8([2, 8]), S8([2, 8], 0.02, 5)],
        [S8([2, 8], 0.06, -10)],
        "AddOptions",
        {"fused_activation_function": 1},
    ),
    "add_int32": ("ADD", [I32([3, 4]), I32([3, 4])], [I32([3, 4])], "AddOptions", {}),
    "sub": ("SUB", [F([2, 3, 4]), F([3, 4])], [F([2, 3, 4])], "SubOptions", {"fused_activation_function": 3}),
    "sub_int8": ("SUB", [S8([2, 8]), S8([2, 8], 0.04, 3)], [S8([2, 8], 0.08, 0)], "SubOptions", {}),
    "sub_int32": ("SUB", [I32([6]), I32([6])], [I32([6])], "SubOptions", {}),
    "mul": (
        "MUL",
        [F([2, 3, 4]), F([2, 3, 4])],
        [F([2, 3, 4])],
        "MulOptions",
        {"fused_activation_function": 1},
    ),
    "mul_uint8": ("MUL", [U8([2, 8]), U8([2, 8], 0.04, 100)], [U8([2, 8], 0.1, 128)], "MulOptions", {}),
    "mul_int32": ("MUL", [I32([5]), I32([5])], [I32([5])], "MulOptions", {}),
    "div": (
        "DIV",
        [F([2, 6]), F([2, 6], data=rand([2, 6], seed=3, lo=0.5, hi=3))],
        [F([2, 6])],
        "DivOptions",
        {},
    ),
    "maximum": ("MAXIMUM", [F([2, 6]), F([2, 6])], [F([2, 6])], None, {}),
    "minimum_int8": ("MINIMUM", [S8([2, 6]), S8([2, 6])], [S8([2, 6])], None, {}),
    "maximum_int32_scalar": (
        "MAXIMUM",
        [I32([7]), dict(shape=[], dtype="int32", data=np.int32(3))],
        [I32([7])],
        None,
        {},
    ),
    "pow": (
        "POW",
        [F([2, 5], feed=rand([2, 5], lo=0.2, hi=3)), F([2, 5], data=rand([2, 5], seed=4, lo=-2, hi=2))],
        [F([2, 5])],
        None,
        {},
    ),
    "less": ("LESS", [F([2, 5]), F([2, 5])], [B([2, 5])], None, {}),
    "greater_equal_int32": ("GREATER_EQUAL", [I32([8]), I32([8])], [B([8])], None, {}),
    "equal_int8": (
        "EQUAL",
        [S8([8], feed=rand([8], "int8") // 64), S8([8], feed=rand([8], "int8", seed=9) // 64)],
        [B([8])],
        None,
        {},
    ),
    "not_equal_bool": ("NOT_EQUAL", [B([8]), B([8])], [B([8])], None, {}),
    "greater_uint8": ("GREATER", [U8([6]), U8([6])], [B([6])], None, {}),
    "less_equal": ("LESS_EQUAL", [F([6]), F([6])], [B([6])], None, {}),
    "logical_and": ("LOGICAL_AND", [B([6]), B([6])], [B([6])], None, {}),
    "logical_or": ("LOGICAL_OR", [B([6]), B([6])], [B([6])], None, {}),
    "logical_not": ("LOGICAL_NOT", [B([6])], [B([6])], None, {}),
    "select": ("SELECT", [B([2, 4]), F([2, 4]), F([2, 4])], [F([2, 4])], None, {}),
    "prelu": ("PRELU", [F([1, 3, 3, 4]), F([4], data=rand([4], seed=5))], [F([1, 3, 3, 4])], None, {}),
    "prelu_int8": (
        "PRELU",
        [S8([1, 3, 3, 4]), S8([4], 0.01, 0, data=np.array([10, -20, 30, 5]))],
        [S8([1, 3, 3, 4], 0.05, 0)],
        None,
        {},
    ),
    "leaky_relu": ("LEAKY_RELU", [F([3, 5])], [F([3, 5])], "LeakyReluOptions", {"alpha": 0.2}),
    "leaky_relu_uint8": (
        "LEAKY_RELU",
        [U8([3, 5])],
        [U8([3, 5], 0.05, 128)],
        "LeakyReluOptions",
        {"alpha": 0.3},
    ),
    "leaky_relu_int8": (
        "LEAKY_RELU",
        [S8([3, 5])],
        [S8([3, 5], 0.04, 0)],
        "LeakyReluOptions",
        {"alpha": 0.1},
    ),
    # ---------------------------------------------------------------- activations
    "relu": ("RELU", [F([2, 7])], [F([2, 7])], None, {}),
    "relu6_uint8": ("RELU6", [U8([2, 7])], [U8([2, 7])], None, {}),
    "relu_n1_to_1": ("RELU_N1_TO_1", [F([2, 7])], [F([2, 7])], None, {}),
    "logistic": ("LOGISTIC", [F([2, 7])], [F([2, 7])], None, {}),
    "logistic_uint8": ("LOGISTIC", [U8([2, 7])], [U8([2, 7], 1 / 256, 0)], None, {}),
    "logistic_int8": ("LOGISTIC", [S8([2, 7])], [S8([2, 7], 1 / 256, -128)], None, {}),
    "tanh": ("TANH", [F([2, 7])], [F([2, 7])], None, {}),
    "tanh_uint8": ("TANH", [U8([2, 7])], [U8([2, 7], 1 / 128, 128)], None, {}),
    "tanh_int8": ("TANH", [S8([2, 7])], [S8([2, 7], 1 / 128, 0)], None, {}),
    "hard_swish": ("HARD_SWISH", [F([2, 9], feed=rand([2, 9], lo=-5, hi=5))], [F([2, 9])], None, {}),
    "hard_swish_int8": ("HARD_SWISH", [S8([2, 9], 0.04, 0)], [S8([2, 9], 0.03, -40)], None, {}),
    "elu": ("ELU", [F([2, 7])], [F([2, 7])], None, {}),
    "softmax": ("SOFTMAX", [F([2, 10])], [F([2, 10])], "SoftmaxOptions", {"beta": 1.0}),
    "softmax_beta_rank4": ("SOFTMAX", [F([1, 2, 2, 5])], [F([1, 2, 2, 5])], "SoftmaxOptions", {"beta": 0.5}),
    "softmax_uint8": ("SOFTMAX", [U8([1, 10])], [U8([1, 10], 1 / 256, 0)], "SoftmaxOptions", {"beta": 1.0}),
    "softmax_int8": (
        "SOFTMAX",
        [S8([1, 10], 0.1)],
        [S8([1, 10], 1 / 256, -128)],
        "SoftmaxOptions",
        {"beta": 1.0},
    ),
    "log_softmax": ("LOG_SOFTMAX", [F([3, 6])], [F([3, 6])], None, {}),
    "l2_normalization": ("L2_NORMALIZATION", [F([1, 2, 2, 6])], [F([1, 2, 2, 6])], "L2NormOptions", {}),
    "local_response_normalization": (
        "LOCAL_RESPONSE_NORMALIZATION",
        [F([1, 3, 3, 8])],
        [F([1, 3, 3, 8])],
        "LocalResponseNormalizationOptions",
        {"radius": 2, "bias": 1.0, "alpha": 0.5, "beta": 0.75},
    ),
    # ---------------------------------------------------------------- unary
    "abs": ("ABS", [F([9])], [F([9])], None, {}),
    "exp": ("EXP", [F([9])], [F([9])], None, {}),
    "log": ("LOG", [F([9], feed=rand([9], lo=0.1, hi=5))], [F([9])], None, {}),
    "rsqrt": ("RSQRT", [F([9], feed=rand([9], lo=0.1, hi=5))], [F([9])], None, {}),
    "sqrt": ("SQRT", [F([9], feed=rand([9], lo=0.0, hi=5))], [F([9])], None, {}),
    "sin": ("SIN", [F([9])], [F([9])], None, {}),
    "neg": ("NEG", [F([9])], [F([9])], None, {}),
    "neg_int32": ("NEG", [I32([9])], [I32([9])], None, {}),
    "floor": ("FLOOR", [F([9])], [F([9])], None, {}),
    "cast_float_int32": ("CAST", [F([9], feed=rand([9], lo=-50, hi=50))], [I32([9])], None, {}),
    "cast_int32_float": ("CAST", [I32([9])], [F([9])], None, {}),
    # ---------------------------------------------------------------- convolution
    "conv_same_relu6": (
        "CONV_2D",
        [F(X4), F([4, 3, 3, 3], data=W), F([4], data=BIAS)],
        [F([1, 6, 6, 4])],
        "Conv2DOptions",
        {
            "padding": 0,
            "stride_w": 1,
            "stride_h": 1,
            "fused_activation_function": 3,
            "dilation_w_factor": 1,
            "dilation_h_factor": 1,
        },
    ),
    "conv_valid_stride2": (
        "CONV_2D",
        [F([1, 7, 7, 3]), F([4, 3, 3, 3], data=W), F([4], data=BIAS)],
        [F([1, 3, 3, 4])],
        "Conv2DOptions",
        {"padding": 1, "stride_w": 2, "stride_h": 2, "dilation_w_factor": 1, "dilation_h_factor": 1},
    ),
    "conv_dilated": (
        "CONV_2D",
        [F([1, 8, 8, 3]), F([4, 3, 3, 3], data=W), F([4], data=BIAS)],
        [F([1, 8, 8, 4])],
        "Conv2DOptions",
        {"padding": 0, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 2, "dilation_h_factor": 2},
    ),
    "conv_uint8": (
        "CONV_2D",
        [
            U8(X4, 0.02, 128),
            U8([4, 3, 3, 3], 0.01, 120, data=rand([4, 3, 3, 3], "uint8", seed=3)),
            dict(shape=[4], dtype="int32", scale=0.0002, data=rand([4], "int32", seed=4, lo=-500, hi=500)),
        ],
        [U8([1, 6, 6, 4], 0.05, 128)],
        "Conv2DOptions",
        {
            "padding": 0,
            "stride_w": 1,
            "stride_h": 1,
            "dilation_w_factor": 1,
            "dilation_h_factor": 1,
            "fused_activation_function": 1,
        },
    ),
    "conv_int8_per_channel": (
        "CONV_2D",
        [
            S8(X4, 0.02, -5),
            S8([4, 3, 3, 3], [0.01, 0.02, 0.005, 0.015], 0, data=rand([4, 3, 3, 3], "int8", seed=3), axis=0),
            dict(
                shape=[4],
                dtype="int32",
                scale=[0.0002, 0.0004, 0.0001, 0.0003],
                zero_point=0,
                data=rand([4], "int32", seed=4, lo=-500, hi=500),
            ),
        ],
        [S8([1, 6, 6, 4], 0.1, 3)],
        "Conv2DOptions",
        {"padding": 0, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1, "dilation_h_factor": 1},
    ),
    "depthwise_multiplier2": (
        "DEPTHWISE_CONV_2D",
        [F([1, 5, 5, 2]), F([1, 3, 3, 4], data=rand([1, 3, 3, 4], seed=11)), F([4], data=BIAS)],
        [F([1, 5, 5, 4])],
        "DepthwiseConv2DOptions",
        {
            "padding": 0,
            "stride_w": 1,
            "stride_h": 1,
            "depth_multiplier": 2,
            "dilation_w_factor": 1,
            "dilation_h_factor": 1,
            "fused_activation_function": 1,
        },
    ),
    "depthwise_dilated_valid": (
        "DEPTHWISE_CONV_2D",
        [F([1, 9, 9, 3]), F([1, 3, 3, 3], data=rand([1, 3, 3, 3], seed=12)), F([3], data=rand([3], seed=13))],
        [F([1, 5, 5, 3])],
        "DepthwiseConv2DOptions",
        {
            "padding": 1,
            "stride_w": 1,
            "stride_h": 1,
            "depth_multiplier": 1,
            "dilation_w_factor": 2,
            "dilation_h_factor": 2,
        },
    ),
    "depthwise_int8_per_channel": (
        "DEPTHWISE_CONV_2D",
        [
            S8([1, 5, 5, 3], 0.02, 1),
            S8([1, 3, 3, 3], [0.01, 0.03, 0.02], 0, data=rand([1, 3, 3, 3], "int8", seed=3), axis=3),
            dict(
                shape=[3],
                dtype="int32",
                scale=[0.0002, 0.0006, 0.0004],
                zero_point=0,
                data=rand([3], "int32", seed=5, lo=-300, hi=300),
            ),
        ],
        [S8([1, 3, 3, 3], 0.08, -2)],
        "DepthwiseConv2DOptions",
        {
            "padding": 0,
            "stride_w": 2,
            "stride_h": 2,
            "depth_multiplier": 1,
            "dilation_w_factor": 1,
            "dilation_h_factor": 1,
        },
    ),
    "transpose_conv": (
        "TRANSPOSE_CONV",
        [C32([1, 8, 8, 2]), F([2, 3, 3, 3], data=rand([2, 3, 3, 3], seed=14)), F([1, 4, 4, 3])],
        [F([1, 8, 8, 2])],
        "TransposeConvOptions",
        {"padding": 0, "stride_w": 2, "stride_h": 2},
    ),
    "transpose_conv_bias_valid": (
        "TRANSPOSE_CONV",
        [
            C32([1, 9, 9, 2]),
            F([2, 3, 3, 3], data=rand([2, 3, 3, 3], seed=14)),
            F([1, 4, 4, 3]),
            F([2], data=rand([2], seed=15)),
        ],
        [F([1, 9, 9, 2])],
        "TransposeConvOptions",
        {"padding": 1, "stride_w": 2, "stride_h": 2},
    ),
    "fully_connected": (
        "FULLY_CONNECTED",
        [F([2, 6]), F([5, 6], data=rand([5, 6], seed=16)), F([5], data=rand([5], seed=17))],
        [F([2, 5])],
        "FullyConnectedOptions",
        {"fused_activation_function": 1},
    ),
    "fully_connected_no_bias_flatten": (
        "FULLY_CONNECTED",
        [F([2, 3, 4]), F([5, 12], data=rand([5, 12], seed=16)), None],
        [F([2, 5])],
        "FullyConnectedOptions",
        {},
    ),
    "fully_connected_keep_num_dims": (
        "FULLY_CONNECTED",
        [F([2, 3, 4]), F([5, 4], data=rand([5, 4], seed=16)), F([5], data=rand([5], seed=17))],
        [F([2, 3, 5])],
        "FullyConnectedOptions",
        {"keep_num_dims": True},
    ),
    "fully_connected_uint8": (
        "FULLY_CONNECTED",
        [
            U8([2, 6], 0.03, 120),
            U8([5, 6], 0.02, 130, data=rand([5, 6], "uint8", seed=16)),
            dict(shape=[5], dtype="int32", scale=0.0006, data=rand([5], "int32", seed=17, lo=-900, hi=900)),
        ],
        [U8([2, 5], 0.1, 128)],
        "FullyConnectedOptions",
        {},
    ),
    "fully_connected_int8_no_bias": (
        "FULLY_CONNECTED",
        [S8([2, 6], 0.03, -3), S8([5, 6], 0.02, 0, data=rand([5, 6], "int8", seed=16)), None],
        [S8([2, 5], 0.1, 2)],
        "FullyConnectedOptions",
        {},
    ),
    # ---------------------------------------------------------------- pooling
    "average_pool_same": (
        "AVERAGE_POOL_2D",
        [F([1, 5, 5, 3])],
        [F([1, 3, 3, 3])],
        "Pool2DOptions",
        {"padding": 0, "stride_w": 2, "stride_h": 2, "filter_width": 3, "filter_height": 3},
    ),
    "max_pool_valid_relu": (
        "MAX_POOL_2D",
        [F([1, 6, 6, 2])],
        [F([1, 3, 3, 2])],
        "Pool2DOptions",
        {
            "padding": 1,
            "stride_w": 2,
            "stride_h": 2,
            "filter_width": 2,
            "filter_height": 2,
            "fused_activation_function": 1,
        },
    ),
    "average_pool_int8": (
        "AVERAGE_POOL_2D",
        [S8([1, 4, 4, 2])],
        [S8([1, 2, 2, 2])],
        "Pool2DOptions",
        {"padding": 1, "stride_w": 2, "stride_h": 2, "filter_width": 2, "filter_height": 2},
    ),
    "max_pool_uint8": (
        "MAX_POOL_2D",
        [U8([1, 4, 4, 2])],
        [U8([1, 2, 2, 2])],
        "Pool2DOptions",
        {"padding": 1, "stride_w": 2, "stride_h": 2, "filter_width": 2, "filter_height": 2},
    ),
    "l2_pool": (
        "L2_POOL_2D",
        [F([1, 4, 4, 2])],
        [F([1, 2, 2, 2])],
        "Pool2DOptions",
        {"padding": 1, "stride_w": 2, "stride_h": 2, "filter_width": 2, "filter_height": 2},
    ),
    # ---------------------------------------------------------------- movement
    "reshape_tensor": ("RESHAPE", [F([2, 3, 4]), C32([4, -1])], [F([4, 6])], None, {}),
    "reshape_option": ("RESHAPE", [U8([2, 3, 4])], [U8([6, 4])], "ReshapeOptions", {"new_shape": [6, 4]}),
    "squeeze_dims": ("SQUEEZE", [F([1, 3, 1, 4])], [F([3, 1, 4])], "SqueezeOptions", {"squeeze_dims": [0]}),
    "squeeze_all": ("SQUEEZE", [S8([1, 3, 1, 4])], [S8([3, 4])], "SqueezeOptions", {}),
    "expand_dims": ("EXPAND_DIMS", [F([3, 4]), C32([1])], [F([3, 1, 4])], None, {}),
    "transpose": ("TRANSPOSE", [F([2, 3, 4]), C32([2, 0, 1])], [F([4, 2, 3])], None, {}),
    "concatenation": (
        "CONCATENATION",
        [F([2, 3]), F([2, 4])],
        [F([2, 7])],
        "ConcatenationOptions",
        {"axis": -1},
    ),
    "concatenation_uint8": (
        "CONCATENATION",
        [U8([2, 3], 0.05, 128), U8([2, 3], 0.1, 100)],
        [U8([4, 3], 0.1, 120)],
        "ConcatenationOptions",
        {"axis": 0},
    ),
    "pack": ("PACK", [F([2, 3]), F([2, 3])], [F([2, 2, 3])], "PackOptions", {"axis": 0, "values_count": 2}),
    "pack_axis1": (
        "PACK",
        [F([2, 3]), F([2, 3]), F([2, 3])],
        [F([2, 3, 3])],
        "PackOptions",
        {"axis": 1, "values_count": 3},
    ),
    "split": ("SPLIT", [C32([1]), F([2, 6])], [F([2, 3]), F([2, 3])], "SplitOptions", {"num_splits": 2}),
    "slice": ("SLICE", [F([3, 5]), C32([1, 1]), C32([2, 3])], [F([2, 3])], None, {}),
    "slice_int32": ("SLICE", [I32([4, 5]), C32([0, 2]), C32([-1, 2])], [I32([4, 2])], None, {}),
    "strided_slice": (
        "STRIDED_SLICE",
        [F([4, 6]), C32([1, 0]), C32([4, 6]), C32([2, 2])],
        [F([2, 3])],
        "StridedSliceOptions",
        {},
    ),
    "strided_slice_masks_shrink": (
        "STRIDED_SLICE",
        [F([4, 6]), C32([1, 1]), C32([2, 5]), C32([1, 1])],
        [F([6])],
        "StridedSliceOptions",
        {"begin_mask": 2, "end_mask": 2, "shrink_axis_mask": 1},
    ),
    "tile": ("TILE", [F([2, 3]), C32([2, 2])], [F([4, 6])], None, {}),
    "tile_int32": ("TILE", [I32([2, 3]), C32([1, 3])], [I32([2, 9])], None, {}),
    "fill": ("FILL", [C32([2, 3]), F([], data=np.float32(2.5))], [F([2, 3])], None, {}),
    # ---------------------------------------------------------------- spatial
    "pad": ("PAD", [F([1, 3, 3, 2]), C32([[0, 0], [1, 2], [2, 1], [0, 0]])], [F([1, 6, 6, 2])], None, {}),
    "pad_uint8": (
        "PAD",
        [U8([1, 3, 3, 2], 0.05, 120), C32([[0, 0], [1, 1], [1, 1], [0, 0]])],
        [U8([1, 5, 5, 2], 0.05, 120)],
        None,
        {},
    ),
    "padv2_value": (
        "PADV2",
        [F([2, 3]), C32([[1, 1], [0, 2]]), F([], data=np.float32(-3.0))],
        [F([4, 5])],
        None,
        {},
    ),
    "space_to_batch": (
        "SPACE_TO_BATCH_ND",
        [F([1, 4, 4, 2]), C32([2, 2]), C32([[0, 0], [0, 0]])],
        [F([4, 2, 2, 2])],
        None,
        {},
    ),
    "batch_to_space": (
        "BATCH_TO_SPACE_ND",
        [F([4, 2, 2, 2]), C32([2, 2]), C32([[0, 0], [0, 0]])],
        [F([1, 4, 4, 2])],
        None,
        {},
    ),
    "space_to_depth": (
        "SPACE_TO_DEPTH",
        [F([1, 4, 4, 2])],
        [F([1, 2, 2, 8])],
        "SpaceToDepthOptions",
        {"block_size": 2},
    ),
    "depth_to_space_int8": (
        "DEPTH_TO_SPACE",
        [S8([1, 2, 2, 8])],
        [S8([1, 4, 4, 2])],
        "DepthToSpaceOptions",
        {"block_size": 2},
    ),
    "resize_bilinear": (
        "RESIZE_BILINEAR",
        [F([1, 3, 4, 2]), C32([5, 7])],
        [F([1, 5, 7, 2])],
        "ResizeBilinearOptions",
        {},
    ),
    "resize_bilinear_align": (
        "RESIZE_BILINEAR",
        [F([1, 3, 4, 2]), C32([5, 7])],
        [F([1, 5, 7, 2])],
        "ResizeBilinearOptions",
        {"align_corners": True},
    ),
    "resize_bilinear_half_pixel": (
        "RESIZE_BILINEAR",
        [F([1, 3, 4, 2]), C32([6, 8])],
        [F([1, 6, 8, 2])],
        "ResizeBilinearOptions",
        {"half_pixel_centers": True},
    ),
    "resize_bilinear_uint8": (
        "RESIZE_BILINEAR",
        [U8([1, 3, 4, 2]), C32([6, 8])],
        [U8([1, 6, 8, 2])],
        "ResizeBilinearOptions",
        {},
    ),
    "resize_nearest": (
        "RESIZE_NEAREST_NEIGHBOR",
        [F([1, 3, 4, 2]), C32([6, 9])],
        [F([1, 6, 9, 2])],
        "ResizeNearestNeighborOptions",
        {},
    ),
    "resize_nearest_align": (
        "RESIZE_NEAREST_NEIGHBOR",
        [F([1, 3, 4, 2]), C32([5, 7])],
        [F([1, 5, 7, 2])],
        "ResizeNearestNeighborOptions",
        {"align_corners": True},
    ),
    "resize_nearest_half_pixel_int8": (
        "RESIZE_NEAREST_NEIGHBOR",
        [S8([1, 3, 4, 2]), C32([5, 7])],
        [S8([1, 5, 7, 2])],
        "ResizeNearestNeighborOptions",
        {"half_pixel_centers": True},
    ),
    # ---------------------------------------------------------------- reductions
    "mean_keep_dims": (
        "MEAN",
        [F([1, 4, 4, 3]), C32([1, 2])],
        [F([1, 1, 1, 3])],
        "ReducerOptions",
        {"keep_dims": True},
    ),
    "mean_uint8": (
        "MEAN",
        [U8([1, 4, 4, 3]), C32([1, 2])],
        [U8([1, 3])],
        "ReducerOptions",
        {"keep_dims": False},
    ),
    "sum": ("SUM", [F([2, 3, 4]), C32([1])], [F([2, 4])], "ReducerOptions", {}),
    "reduce_prod": (
        "REDUCE_PROD",
        [F([2, 3, 4], feed=rand([2, 3, 4], lo=0.5, hi=1.5)), C32([2])],
        [F([2, 3, 1])],
        "ReducerOptions",
        {"keep_dims": True},
    ),
    "reduce_max": ("REDUCE_MAX", [F([2, 3, 4]), C32([0, 2])], [F([3])], "ReducerOptions", {}),
    "reduce_min_int8": ("REDUCE_MIN", [S8([2, 3, 4]), C32([1])], [S8([2, 4])], "ReducerOptions", {}),
    "reduce_any": ("REDUCE_ANY", [B([2, 3, 4]), C32([1])], [B([2, 4])], "ReducerOptions", {}),
    "arg_max": ("ARG_MAX", [F([3, 7]), C32([1])], [I32([3])], "ArgMaxOptions", {"output_type": 2}),
    "arg_max_int8": ("ARG_MAX", [S8([3, 7]), C32([1])], [I32([3])], "ArgMaxOptions", {"output_type": 2}),
    "arg_min": ("ARG_MIN", [F([3, 7]), C32([0])], [I32([7])], "ArgMinOptions", {"output_type": 2}),
    "topk": ("TOPK_V2", [F([3, 8]), C32([3])], [F([3, 3]), I32([3, 3])], None, {}),
    # ---------------------------------------------------------------- lookup, quantization
    "gather": (
        "GATHER",
        [F([4, 5]), I32([3], feed=np.array([3, 0, 2], np.int32))],
        [F([4, 3])],
        "GatherOptions",
        {"axis": 1},
    ),
    "gather_int8": (
        "GATHER",
        [S8([4, 5]), I32([2, 2], feed=np.array([[3, 0], [1, 1]], np.int32))],
        [S8([2, 2, 5])],
        "GatherOptions",
        {"axis": 0},
    ),
    "embedding_lookup": (
        "EMBEDDING_LOOKUP",
        [I32([3], feed=np.array([2, 0, 1], np.int32)), F([4, 5], data=rand([4, 5], seed=19))],
        [F([3, 5])],
        None,
        {},
    ),
    "quantize_float_int8": ("QUANTIZE", [F([2, 9])], [S8([2, 9], 0.02, 3)], None, {}),
    "quantize_uint8_int8": ("QUANTIZE", [U8([2, 9], 0.02, 128)], [S8([2, 9], 0.02, 0)], None, {}),
    "quantize_int8_rescale": ("QUANTIZE", [S8([2, 9], 0.02, 0)], [S8([2, 9], 0.05, 4)], None, {}),
    "dequantize_int8": ("DEQUANTIZE", [S8([2, 9], 0.02, 3)], [F([2, 9])], None, {}),
    "dequantize_uint8": ("DEQUANTIZE", [U8([2, 9], 0.02, 120)], [F([2, 9])], None, {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_matches_litert(case: str) -> None:
    builtin, inputs, outputs, options_name, options = CASES[case]
    data, feeds = one_op(builtin, inputs, outputs, options_name, **options)
    check(data, feeds)
