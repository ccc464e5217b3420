"""Quantized ONNX graphs in QDQ format: the integer NN graph emitted, the refusals, and runs against onnxruntime.

Models are built by hand (the `QDQ` builder in tests/convert/quantkit.py) so that every quantization
parameter is known; `test_quantize_static_*` converts onnxruntime's own QDQ
output. Runs compare the sample driver with onnxruntime on the same ONNX file:
onnxruntime requantizes in float and rounds half to even, NNAPI in fixed
point, so outputs may differ by one quantized unit and most must be equal.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from mlts.convert import convert
from mlts.hal.enums import FusedActivationFunc, OperandType
from mlts.hal.types import SymmPerChannelQuantParams
from tests.convert._util import error_of
from tests.convert.quantkit import (
    ELEM,
    QDQ,
    S8,
    T_I32,
    T_PC,
    T_S8,
    T_U8,
    U8,
    add_conv,
    check_vs_ort,
    conv_graph,
    no_float_tensors,
    operand,
    operations,
    ops,
    quantize_tiny_net,
    scalar,
    weights_per_channel,
    weights_per_tensor,
    zp_for,
)
from tests.driver.qkit import quantize

# ------------------------------------------------------------ quantized weights


# ------------------------------------------------------------ inspection


# ------------------------------------------------------------ running against onnxruntime


# ------------------------------------------------------------ graph structure


def test_conv_u8_emits_quantized_conv_with_bias_scale() -> None:
    conv = convert(conv_graph("u8"))
    assert ops(conv) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]
    no_float_tensors(conv)
    (op,) = operations(conv, "CONV_2D")
    x, w, b, y = (operand(conv, i) for i in (*op.inputs[:3], op.outputs[0]))
    assert (x.type, x.scale, x.zero_point) == (T_U8, np.float32(0.05), 128)
    assert w.type == T_U8 and w.dimensions == (8, 3, 3, 4) and 0 <= w.zero_point <= 255 and w.scale > 0
    assert b.type == T_I32 and b.zero_point == 0
    assert b.scale == pytest.approx(float(np.float32(x.scale) * np.float32(w.scale)), rel=1e-7)
    assert (y.type, y.scale, y.zero_point) == (T_U8, np.float32(0.15), 128)
    assert conv.inputs[0].dtype == "uint8" and conv.inputs[0].scale == np.float32(0.05)
    assert (conv.outputs[0].dtype, conv.outputs[0].zero_point) == ("uint8", 128)
    assert "quantized model input 'x' (TENSOR_QUANT8_ASYMM, scale 0.05, zp 128)" in conv.notes
    assert any(n.startswith("quantized model output 'y'") for n in conv.notes)


def test_conv_per_channel_filter_and_zero_bias_scale() -> None:
    conv = convert(conv_graph("pc"))
    (op,) = operations(conv, "CONV_2D")
    w, b = operand(conv, op.inputs[1]), operand(conv, op.inputs[2])
    assert w.type == T_PC and w.scale == 0 and w.zero_point == 0
    assert isinstance(w.extra_params, SymmPerChannelQuantParams)
    assert w.extra_params.channel_dim == 0 and len(w.extra_params.scales) == 8
    assert (b.type, b.scale) == (T_I32, 0.0)


def test_depthwise_per_channel_uses_channel_dim_3() -> None:
    conv = convert(conv_graph("pc", group=4))
    (op,) = operations(conv, "DEPTHWISE_CONV_2D")
    w = operand(conv, op.inputs[1])
    assert w.dimensions == (1, 3, 3, 8) and w.extra_params.channel_dim == 3
    assert scalar(conv.model, op.inputs[9]) == 2  # depth multiplier


def test_int8_weights_with_uint8_input_become_per_channel() -> None:
    conv = convert(conv_graph("s8"))
    (op,) = operations(conv, "CONV_2D")
    w = operand(conv, op.inputs[1])
    assert w.type == T_PC and len(set(w.extra_params.scales)) == 1


def test_signed_conv_uses_signed_operands() -> None:
    conv = convert(conv_graph("s8", S8))
    no_float_tensors(conv)
    (op,) = operations(conv, "CONV_2D")
    assert {operand(conv, i).type for i in (op.inputs[0], op.inputs[1], op.outputs[0])} == {T_S8}
    assert conv.inputs[0].dtype == "int8" and conv.inputs[0].zero_point == 0


def test_float_io_gets_quantize_and_dequantize() -> None:
    conv = convert(conv_graph("u8", float_io=True))
    assert ops(conv) == ["QUANTIZE", "TRANSPOSE", "CONV_2D", "TRANSPOSE", "DEQUANTIZE"]
    assert conv.inputs[0].dtype == conv.outputs[0].dtype == "float32"
    assert "inserted 1 QUANTIZE and 1 DEQUANTIZE at float32 inputs/outputs" in conv.notes
    assert any("QuantizeLinear/DequantizeLinear pairs" in n for n in conv.notes)


def relu_after_conv(through_qdq: bool, clip: bool = False):
    g = QDQ()
    x = g.input_q("x", [1, 4, 6, 6], 0.05, 128)
    c = add_conv(g, x, 0.05, 4, 8, "u8", pads=[1, 1, 1, 1])
    if through_qdq:
        c = g.qdq(c, 0.1, 0)
    bounds = [g.const(np.float32(0)), g.const(np.float32(6))] if clip else []
    r = g.node("Clip" if clip else "Relu", [c, *bounds])
    g.q(r, 0.1, 0, name="y")
    return g.model({"y": TensorProto.UINT8})


@pytest.mark.parametrize("through_qdq", [False, True])
@pytest.mark.parametrize("clip", [False, True])
def test_relu_and_clip_fuse_into_quantized_conv(through_qdq: bool, clip: bool) -> None:
    conv = convert(relu_after_conv(through_qdq, clip))
    assert ops(conv) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]
    (op,) = operations(conv, "CONV_2D")
    want = FusedActivationFunc.RELU6 if clip else FusedActivationFunc.RELU
    assert scalar(conv.model, op.inputs[9]) == want
    assert any("fused 1 Relu/Clip" in n for n in conv.notes)


def test_relu_after_different_quantization_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 4, 6, 6], 0.05, 128)
    r = g.node("Relu", [g.qdq(add_conv(g, x, 0.05, 4, 8, "u8"), 0.1, 128)], "r")
    g.q(r, 0.05, 0, name="y")
    assert "cannot change quantization parameters" in error_of(g.model({"y": TensorProto.UINT8}))


def fc_graph(op: str, kind: str):
    g = QDQ()
    x = g.input_q("x", [2, 3, 16], 0.05, 128) if op == "MatMul" else g.input_q("x", [2, 16], 0.05, 128)
    w = (g.rng.standard_normal((16, 10)) * 0.3).astype(np.float32)  # [in, units] as MatMul's B
    axis = 1 if op == "MatMul" else 0
    w = w if op == "MatMul" else w.T.copy()  # Gemm with transB=1: [units, in]
    if kind == "pc":
        wq, scales = weights_per_channel(w, axis)
        w_name = g.weight(wq, scales, np.zeros(10, S8), axis=axis)
    else:
        wq, ws, wzp = weights_per_tensor(w, U8)
        scales = np.full(10, ws, np.float32)
        w_name = g.weight(wq, ws, wzp)
    if op == "Gemm":
        b_scale = (np.float32(0.05) * scales).astype(np.float32)
        b_values = g.const(np.round(g.rng.standard_normal(10) / b_scale).astype(np.int32))
        b = g.dq(b_values, b_scale, np.zeros(10, np.int32), np.int32, 0)
        y = g.node("Gemm", [x, w_name, b], transB=1)
    else:
        y = g.node("MatMul", [x, w_name])
    g.q(y, 0.2, 128, name="y")
    return g.model({"y": TensorProto.UINT8})


def test_gemm_becomes_fully_connected() -> None:
    conv = convert(fc_graph("Gemm", "u8"))
    assert ops(conv) == ["FULLY_CONNECTED"]
    no_float_tensors(conv)
    (op,) = operations(conv, "FULLY_CONNECTED")
    x, w, b = (operand(conv, i) for i in op.inputs[:3])
    assert w.type == T_U8 and w.dimensions == (10, 16)
    assert b.scale == pytest.approx(float(np.float32(x.scale) * np.float32(w.scale)), rel=1e-7)


def test_per_channel_matmul_becomes_1x1_conv() -> None:
    """NNAPI's FULLY_CONNECTED takes no per-channel weights; a 1x1 CONV_2D does the same arithmetic."""
    conv = convert(fc_graph("MatMul", "pc"))
    assert ops(conv) == ["RESHAPE", "CONV_2D", "RESHAPE"]
    no_float_tensors(conv)
    (op,) = operations(conv, "CONV_2D")
    x, w, b = (operand(conv, i) for i in op.inputs[:3])
    assert x.dimensions == (6, 1, 1, 16)
    assert w.type == T_PC and w.dimensions == (10, 1, 1, 16) and w.extra_params.channel_dim == 0
    assert (b.type, b.scale) == (T_I32, 0.0)  # zero bias, per-channel form
    assert operand(conv, conv.model.main.output_indexes[0]).dimensions == (2, 3, 10)
    assert "emitted 1 per-channel fully connected layers as 1x1 CONV_2D" in conv.notes


def test_float_graphs_are_unchanged() -> None:
    """A float model keeps float32 operands and its folds (the QDQ path is not taken)."""
    g = QDQ()
    g.inits.update(w=g.rng.standard_normal((4, 3, 3, 3)).astype(np.float32), b=np.zeros(4, np.float32))
    g.node("Relu", [g.node("Conv", [g.input_f("x", [1, 3, 5, 5]), "w", "b"])], "y")
    conv = convert(g.model({"y": TensorProto.FLOAT}))
    assert ops(conv) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]
    assert {operand(conv, i).type for i in operations(conv, "CONV_2D")[0].inputs[:3]} == {
        OperandType.TENSOR_FLOAT32
    }


# ------------------------------------------------------------ refusals


def test_float_bias_in_qdq_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 4, 6, 6], 0.05, 128)
    wq, ws, wzp = weights_per_tensor(g.rng.standard_normal((8, 4, 3, 3)).astype(np.float32), U8)
    b = g.const(np.zeros(8, np.float32), "bias")
    g.q(g.node("Conv", [x, g.weight(wq, ws, wzp), b], "conv"), 0.1, 128, name="y")
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert msg.startswith("Conv node 'conv': bias 'bias_")
    assert "is a float32 constant; a quantized Conv needs its bias from a DequantizeLinear" in msg


def test_bias_scale_must_be_input_times_weight_scale() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 4, 6, 6], 0.05, 128)
    wq, ws, wzp = weights_per_tensor(g.rng.standard_normal((8, 4, 3, 3)).astype(np.float32), U8)
    b = g.dq(g.const(np.zeros(8, np.int32)), 0.05 * ws * 1.01, 0, np.int32)
    g.q(g.node("Conv", [x, g.weight(wq, ws, wzp), b], "conv"), 0.1, 128, name="y")
    assert "input scale * weight scale is" in error_of(g.model({"y": TensorProto.UINT8}))


def test_reshape_with_other_quantization_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 4, 2, 2], 0.05, 128)
    g.q(g.node("Reshape", [x, g.const(np.array([1, 16], np.int64))], "flat"), 0.1, 128, name="y")
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert msg.startswith(
        "Reshape node 'flat': output 'flat' is quantized with (TENSOR_QUANT8_ASYMM, scale 0.1"
    )
    assert "cannot change quantization parameters" in msg


def test_per_channel_weight_with_nonzero_zero_point_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 4, 6, 6], 0.05, 128)
    wq, scales = weights_per_channel(g.rng.standard_normal((8, 4, 3, 3)).astype(np.float32), 0)
    zp = np.zeros(8, S8)
    zp[3] = 5
    g.q(g.node("Conv", [x, g.weight(wq, scales, zp, axis=0)], "conv"), 0.1, 128, name="y")
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert "per-channel weight 'dequantizelinear_" in msg and "has zero point 5 at channel 3" in msg


def test_unsupported_quantized_op_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 8], 0.05, 128)
    g.q(g.node("Tanh", [x], "tanh"), 1 / 128, 128, name="y")
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert msg.startswith("Tanh node 'tanh' reads the quantized tensor")
    assert "quantized Tanh is not supported" in msg and "Conv" in msg


@pytest.mark.parametrize("op", ["Softmax", "Sigmoid"])
def test_probability_output_needs_scale_one_over_256(op: str) -> None:
    g = QDQ()
    x = g.input_q("x", [1, 8], 0.05, 128)
    g.q(g.node(op, [x], "p"), 1 / 255, 0, name="y")
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert msg.startswith(f"{op} node 'p': output 'p' is quantized with scale 0.003921569")
    assert "needs scale 1/256 (0.00390625) and zero point 0 (uint8)" in msg


def test_batchnorm_in_qdq_graph_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 4, 3, 3], 0.05, 128)
    stats = [g.const(np.ones(4, np.float32)) for _ in range(4)]
    g.q(g.node("BatchNormalization", [x, *stats], "bn"), 0.05, 128, name="y")
    assert "quant_pre_process" in error_of(g.model({"y": TensorProto.UINT8}))


def test_weight_only_quantization_is_refused() -> None:
    g = QDQ()
    x = g.input_f("x", [1, 4, 6, 6])
    wq, ws, wzp = weights_per_tensor(g.rng.standard_normal((8, 4, 3, 3)).astype(np.float32), U8)
    g.node("Conv", [x, g.weight(wq, ws, wzp)], "y")
    assert "computes in float32" in error_of(g.model({"y": TensorProto.FLOAT}))


def test_dequantize_with_other_parameters_is_refused() -> None:
    g = QDQ()
    xq = g.q(g.input_f("x", [1, 8]), 0.05, 128)
    g.node("Identity", [g.dq(xq, 0.1, 128)], "y")
    assert "the parameters must match" in error_of(g.model({"y": TensorProto.FLOAT}))


def test_float_op_before_quantize_is_refused() -> None:
    """Only model inputs are quantized at run time: a float op feeding a QuantizeLinear would stay float."""
    g = QDQ()
    r = g.node("Relu", [g.input_f("x", [1, 8])], "relu")
    g.node("Identity", [g.dq(g.q(r, 0.05, 0, name="q"), 0.05, 0)], "y")
    msg = error_of(g.model({"y": TensorProto.FLOAT}))
    assert msg.startswith("QuantizeLinear node 'q': input 'relu' is computed in float32")


def test_requantizing_quantize_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 8], 0.05, 128)
    g.q(x, 0.1, 128, name="y")
    assert "requantizing it to (TENSOR_QUANT8_ASYMM, scale 0.1, zp 128) is not supported" in error_of(
        g.model({"y": TensorProto.UINT8})
    )


def test_tensor_read_in_float_and_quantized_is_refused() -> None:
    g = QDQ()
    x = g.input_q("x", [1, 8], 0.05, 128)
    a = g.node("Add", [x, x], "a")
    g.q(a, 0.1, 128, name="y")
    g.node("Relu", [a], "z")
    msg = error_of(g.model({"y": TensorProto.UINT8, "z": TensorProto.FLOAT}))
    assert "tensor 'a' is read by QuantizeLinear node 'y' and by Relu node 'z'" in msg


# ------------------------------------------------------------ runs against onnxruntime


def one_op(op: str, dtype: type = U8, **attrs):
    """A model around one QDQ op on a [1, 4, 6, 6] input; output quantized like the input unless stated."""
    g = QDQ()
    xs, xzp = 0.05, zp_for(dtype)
    x = g.input_q("x", [1, 4, 6, 6], xs, xzp, dtype)
    out_scale, out_zp = xs, xzp
    if op == "Add":
        other = g.input_q("x2", [1, 4, 6, 6], 0.03, zp_for(dtype, 100), dtype)
        y, out_scale = g.node("Add", [x, other]), 0.08
    elif op == "AddConst":
        c = quantize(g.rng.standard_normal((1, 4, 1, 1)).astype(np.float32), 0.02, zp_for(dtype), dtype)
        y, out_scale = g.node("Add", [x, g.weight(c, 0.02, zp_for(dtype))]), 0.07
    elif op == "Mul":
        c = quantize(g.rng.standard_normal((4, 1, 1)).astype(np.float32), 0.02, zp_for(dtype, 120), dtype)
        y, out_scale = g.node("Mul", [x, g.weight(c, 0.02, zp_for(dtype, 120))]), 0.1
    elif op == "Concat":
        other = g.input_q("x2", [1, 2, 6, 6], 0.03, zp_for(dtype, 100), dtype)
        y, out_scale = g.node("Concat", [x, other], axis=1), 0.064  # no exact scale ratios: fewer ties
    elif op == "GlobalAveragePool":
        y, out_scale, out_zp = g.node(op, [x]), 0.01, zp_for(dtype)
    elif op == "Softmax":
        y, out_scale, out_zp = g.node(op, [x], axis=1), 1 / 256, zp_for(dtype, 0)
    elif op == "Sigmoid":
        y, out_scale, out_zp = g.node(op, [x]), 1 / 256, zp_for(dtype, 0)
    elif op == "Chain":
        r = g.qdq(g.node("Reshape", [x, g.const(np.array([1, 4, 3, 12], np.int64))]), xs, xzp, dtype)
        t = g.qdq(g.node("Transpose", [r], perm=[0, 3, 1, 2]), xs, xzp, dtype)
        y = g.node("Flatten", [g.node("Relu", [t])])
    elif op == "Pad":
        y = g.node("Pad", [x, g.const(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))])
    else:
        y = g.node(op, [x], **attrs)
    g.q(y, out_scale, out_zp, dtype, name="y")
    return g.model({"y": ELEM[dtype]})


RUNS = {
    "conv_u8": lambda: conv_graph("u8"),
    "conv_s8_strided": lambda: conv_graph("s8", S8, strides=[2, 2]),
    "conv_pc_dilated": lambda: conv_graph("pc", dilations=[2, 2]),
    "conv_s8_pc": lambda: conv_graph("pc", S8),
    "conv_u8_int8_weights": lambda: conv_graph("s8"),
    "depthwise_u8": lambda: conv_graph("u8", group=4),
    "depthwise_s8_pc_strided": lambda: conv_graph("pc", S8, group=4, strides=[2, 1]),
    "float_io": lambda: conv_graph("u8", float_io=True),
    "relu_fused": lambda: relu_after_conv(True),
    "relu6_fused": lambda: relu_after_conv(False, clip=True),
    "gemm_u8": lambda: fc_graph("Gemm", "u8"),
    "matmul_pc": lambda: fc_graph("MatMul", "pc"),
    "add_u8": lambda: one_op("Add"),
    "add_const_s8": lambda: one_op("AddConst", S8),
    "mul_const_u8": lambda: one_op("Mul"),
    "concat_requantized": lambda: one_op("Concat"),
    "max_pool": lambda: one_op("MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
    "average_pool_s8": lambda: one_op("AveragePool", S8, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "global_average_pool": lambda: one_op("GlobalAveragePool"),
    "softmax_u8": lambda: one_op("Softmax"),
    "softmax_s8": lambda: one_op("Softmax", S8),
    "sigmoid_u8": lambda: one_op("Sigmoid"),
    "reshape_transpose_relu_flatten": lambda: one_op("Chain"),
    "pad": lambda: one_op("Pad"),
}


@pytest.mark.parametrize("case", sorted(RUNS))
def test_runs_within_one_unit_of_onnxruntime(case: str) -> None:
    conv = check_vs_ort(RUNS[case]())
    assert conv.outputs[0].dtype == "float32" or not any(
        o.type == OperandType.TENSOR_FLOAT32 for o in conv.model.main.operands
    )


# ------------------------------------------------------------ onnxruntime's quantizer


@pytest.mark.parametrize("variant", ["u8", "s8", "per_channel"])
def test_quantize_static_output_converts_and_runs(tmp_path, variant: str) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType

    signed = variant == "s8"
    model = quantize_tiny_net(
        tmp_path,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8 if signed else QuantType.QUInt8,
        weight_type=QuantType.QUInt8 if variant == "u8" else QuantType.QInt8,
        per_channel=variant == "per_channel",
    )
    conv = check_vs_ort(model, min_equal=0.6)
    # Flatten, then the Gemm: FULLY_CONNECTED; for per-channel weights a 1x1 CONV_2D that reads the pooled
    # NHWC [1, 1, 1, C] directly (Flatten and the reshape back cancel out), then a reshape to [1, units].
    fc = ["CONV_2D", "RESHAPE"] if variant == "per_channel" else ["RESHAPE", "FULLY_CONNECTED"]
    assert ops(conv) == [
        "QUANTIZE",
        "TRANSPOSE",
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "ADD",
        "MEAN",
        *fc,
        "DEQUANTIZE",
    ]
    filt = operand(conv, operations(conv, "CONV_2D")[0].inputs[1])
    assert filt.type == {"u8": T_U8, "s8": T_S8, "per_channel": T_PC}[variant]
    assert any("QuantizeLinear/DequantizeLinear pairs" in n for n in conv.notes)
