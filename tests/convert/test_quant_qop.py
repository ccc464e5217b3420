"""Quantized ONNX graphs in QOperator format (QLinearConv, QLinearMatMul, com.microsoft QLinear*): graph and runs.

Each QLinear node declares the quantization of its inputs and output; the
models here are built by hand (see test_quant for the QDQ format and the
tolerance rule against onnxruntime), plus one of onnxruntime's own.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mlts.convert import convert
from mlts.hal.enums import OperandType
from tests.convert._util import error_of
from tests.convert.quantkit import (
    ELEM,
    QDQ,
    S8,
    T_I32,
    T_PC,
    T_U8,
    U8,
    check_vs_ort,
    no_float_tensors,
    operand,
    operations,
    ops,
    weights_per_channel,
    weights_per_tensor,
    zp_for,
)

MS = "com.microsoft"


class QOp(QDQ):
    """A QOperator graph: QLinear* nodes whose (scale, zero point) inputs are constants."""

    def qnode(self, op: str, parts: list, name: str | None = None, domain: str = "", **attrs) -> str:
        """`parts`: tensor names, and (scale, zero point, dtype) triples expanded into two constants."""
        inputs: list[str] = []
        for p in parts:
            inputs.extend(self._params(*p) if isinstance(p, tuple) else [p])
        out = name or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, domain=domain, **attrs))
        return out

    def model(self, outputs: dict[str, int], opset: int = 13) -> onnx.ModelProto:
        model = super().model(outputs, opset)
        model.opset_import.append(helper.make_opsetid(MS, 1))
        return model


def input_u8(g: QOp, shape: list[int], dtype: type = U8) -> str:
    g.inputs.append(helper.make_tensor_value_info("x", ELEM[dtype], shape))
    return "x"


def qconv_graph(kind: str, dtype: type = U8, group: int = 1, float_io: bool = False) -> onnx.ModelProto:
    g = QOp()
    xp = (0.05, zp_for(dtype), dtype)
    yp = (0.15, zp_for(dtype), dtype)
    x = g.q(g.input_f("xf", [1, 4, 6, 6]), *xp) if float_io else input_u8(g, [1, 4, 6, 6], dtype)
    w = (g.rng.standard_normal((8, 4 // group, 3, 3)) * 0.3).astype(np.float32)
    if kind == "pc":
        wq, scales = weights_per_channel(w, 0)
        w_parts = [g.const(wq), g.const(scales), g.const(np.zeros(8, S8))]
    else:
        wq, ws, wzp = weights_per_tensor(w, U8 if kind == "u8" else S8)
        scales = np.full(8, ws, np.float32)
        w_parts = [g.const(wq), g.const(np.float32(ws)), g.const(np.asarray(wzp, wq.dtype))]
    b = g.const(np.round(g.rng.standard_normal(8) / (0.05 * scales)).astype(np.int32))
    y = g.qnode("QLinearConv", [x, xp, *w_parts, yp, b], "conv", group=group, pads=[1, 1, 1, 1])
    if float_io:
        g.dq(y, 0.15, zp_for(dtype), dtype)
        g.nodes[-1].output[0] = "y"
        return g.model({"y": TensorProto.FLOAT})
    g.nodes[-1].output[0] = "y"
    return g.model({"y": ELEM[dtype]})


def test_qlinear_conv_is_quantized_conv() -> None:
    conv = convert(qconv_graph("u8"))
    assert ops(conv) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]
    no_float_tensors(conv)
    (op,) = operations(conv, "CONV_2D")
    x, w, b, y = (operand(conv, i) for i in (*op.inputs[:3], op.outputs[0]))
    assert (x.type, x.scale, x.zero_point) == (T_U8, np.float32(0.05), 128)
    assert w.type == T_U8 and b.type == T_I32
    assert b.scale == pytest.approx(float(np.float32(x.scale) * np.float32(w.scale)), rel=1e-7)
    assert (y.type, y.scale, y.zero_point) == (T_U8, np.float32(0.15), 128)
    assert conv.inputs[0].dtype == "uint8" and conv.inputs[0].scale == np.float32(0.05)


def test_qlinear_depthwise_per_channel() -> None:
    conv = convert(qconv_graph("pc", group=4))
    (op,) = operations(conv, "DEPTHWISE_CONV_2D")
    w = operand(conv, op.inputs[1])
    assert w.type == T_PC and w.extra_params.channel_dim == 3 and operand(conv, op.inputs[2]).scale == 0


def test_float_boundaries_are_quantize_and_dequantize() -> None:
    conv = convert(qconv_graph("u8", float_io=True))
    assert ops(conv) == ["QUANTIZE", "TRANSPOSE", "CONV_2D", "TRANSPOSE", "DEQUANTIZE"]


def qmatmul_graph(kind: str) -> onnx.ModelProto:
    g = QOp()
    xp, yp = (0.05, 128, U8), (0.2, 128, U8)
    w = (g.rng.standard_normal((16, 10)) * 0.3).astype(np.float32)
    if kind == "pc":
        wq, scales = weights_per_channel(w, 1)
        parts = [g.const(wq), g.const(scales), g.const(np.zeros(10, S8))]
    else:
        wq, ws, wzp = weights_per_tensor(w, U8)
        parts = [g.const(wq), g.const(np.float32(ws)), g.const(np.uint8(wzp))]
    g.qnode("QLinearMatMul", [input_u8(g, [3, 16]), xp, *parts, yp], "y")
    return g.model({"y": TensorProto.UINT8})


def binary_graph(op: str, dtype: type = U8) -> onnx.ModelProto:
    g = QOp()
    x = input_u8(g, [1, 4, 6, 6], dtype)
    c = g.const(g.rng.integers(0, 255, (1, 4, 1, 1)).astype(np.uint8).astype(dtype))
    xp, cp, yp = (0.05, zp_for(dtype), dtype), (0.02, zp_for(dtype, 100), dtype), (0.09, zp_for(dtype), dtype)
    g.qnode(op, [x, xp, c, cp, yp], "y", domain=MS)
    return g.model({"y": ELEM[dtype]})


def unary_graph(op: str, out: tuple, dtype: type = U8, **attrs) -> onnx.ModelProto:
    g = QOp()
    x = input_u8(g, [1, 4, 6, 6], dtype)
    g.qnode(op, [x, (0.05, zp_for(dtype), dtype), out], "y", domain=MS, **attrs)
    return g.model({"y": ELEM[dtype]})


def concat_graph() -> onnx.ModelProto:
    g = QOp()
    x = input_u8(g, [1, 4, 6, 6])
    g.inputs.append(helper.make_tensor_value_info("x2", TensorProto.UINT8, [1, 2, 6, 6]))
    parts = [(0.064, 128, U8), x, (0.05, 128, U8), "x2", (0.03, 100, U8)]
    g.qnode("QLinearConcat", parts, "y", domain=MS, axis=1)
    return g.model({"y": TensorProto.UINT8})


def qgemm_graph() -> onnx.ModelProto:
    g = QOp()
    wq, scales = weights_per_channel((g.rng.standard_normal((10, 16)) * 0.3).astype(np.float32), 0)
    b = g.const(np.round(g.rng.standard_normal(10) / (0.05 * scales)).astype(np.int32))
    w_parts = [g.const(wq), g.const(scales), g.const(np.zeros(10, S8))]
    parts = [input_u8(g, [3, 16]), (0.05, 128, U8), *w_parts, b, (0.2, 128, U8)]
    g.qnode("QGemm", parts, "y", domain=MS, transB=1)
    return g.model({"y": TensorProto.UINT8})


def direct_ops_graph() -> onnx.ModelProto:
    """MaxPool, Reshape, Transpose straight on the 8-bit tensor, as onnxruntime's QOperator graphs have them."""
    g = QOp()
    x = input_u8(g, [1, 4, 6, 6])
    p = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    r = g.node("Reshape", [p, g.const(np.array([1, 4, 9], np.int64))])
    t = g.node("Transpose", [r], perm=[0, 2, 1])
    g.qnode("QLinearSigmoid", [t, (0.05, 128, U8), (1 / 256, 0, U8)], "y", domain=MS)
    return g.model({"y": TensorProto.UINT8})


RUNS = {
    "conv_u8": lambda: qconv_graph("u8"),
    "conv_s8": lambda: qconv_graph("s8", S8),
    "conv_pc": lambda: qconv_graph("pc"),
    "conv_u8_int8_weights": lambda: qconv_graph("s8"),
    "depthwise_pc_s8": lambda: qconv_graph("pc", S8, group=4),
    "float_io": lambda: qconv_graph("u8", float_io=True),
    "matmul_u8": lambda: qmatmul_graph("u8"),
    "matmul_pc": lambda: qmatmul_graph("pc"),
    "gemm_pc": qgemm_graph,
    "add_u8": lambda: binary_graph("QLinearAdd"),
    "mul_s8": lambda: binary_graph("QLinearMul", S8),
    "global_average_pool": lambda: unary_graph("QLinearGlobalAveragePool", (0.01, 128, U8)),
    "average_pool_s8": lambda: unary_graph(
        "QLinearAveragePool", (0.05, 0, S8), S8, kernel_shape=[3, 3], pads=[1, 1, 1, 1]
    ),
    "softmax": lambda: unary_graph("QLinearSoftmax", (1 / 256, 0, U8), axis=1, opset=13),
    "sigmoid_s8": lambda: unary_graph("QLinearSigmoid", (1 / 256, -128, S8), S8),
    "concat": concat_graph,
    "direct_8bit_ops": direct_ops_graph,
}


@pytest.mark.parametrize("case", sorted(RUNS))
def test_runs_within_one_unit_of_onnxruntime(case: str) -> None:
    conv = check_vs_ort(RUNS[case]())
    assert conv.outputs[0].dtype == "float32" or not any(
        o.type == OperandType.TENSOR_FLOAT32 for o in conv.model.main.operands
    )


def test_com_microsoft_ops_get_shapes_and_ops() -> None:
    conv = convert(binary_graph("QLinearAdd"))
    assert ops(conv) == ["ADD"]  # NCHW in and out: broadcast in ONNX order, no transpose
    c = operand(conv, operations(conv, "ADD")[0].inputs[1])
    assert (c.type, c.scale, c.zero_point, c.dimensions) == (T_U8, np.float32(0.02), 100, (4, 1, 1))
    assert conv.outputs[0].shape == (1, 4, 6, 6)
    conv = convert(unary_graph("QLinearGlobalAveragePool", (0.01, 128, U8)))
    assert ops(conv) == ["MEAN"] and conv.outputs[0].shape == (1, 4, 1, 1)


# ------------------------------------------------------------ refusals


def test_average_pool_that_requantizes_is_refused() -> None:
    model = unary_graph("QLinearAveragePool", (0.04, 128, U8), kernel_shape=[2, 2])
    msg = error_of(model)
    assert msg.startswith("QLinearAveragePool node 'y': output quantization (TENSOR_QUANT8_ASYMM, scale 0.04")
    assert "NNAPI pooling keeps the input's parameters" in msg


def test_input_with_other_declared_parameters_is_refused() -> None:
    g = QOp()
    x = input_u8(g, [1, 8])
    a = g.qnode("QLinearSigmoid", [x, (0.05, 128, U8), (1 / 256, 0, U8)], "a", domain=MS)
    g.qnode("QLinearSigmoid", [a, (0.5, 0, U8), (1 / 256, 0, U8)], "y", domain=MS)
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert "input 'a' is held as (TENSOR_QUANT8_ASYMM, scale 0.00390625, zp 0) but the node declares" in msg


def test_other_com_microsoft_ops_are_refused() -> None:
    model = unary_graph("QLinearLeakyRelu", (0.05, 128, U8))
    msg = error_of(model)
    assert msg.startswith("QLinearLeakyRelu node 'y': op 'QLinearLeakyRelu' of domain 'com.microsoft' is not")
    assert "QLinearAdd" in msg and "of com.microsoft" in msg


def test_qlinear_softmax_needs_nnapi_output_scale() -> None:
    msg = error_of(unary_graph("QLinearSoftmax", (1 / 255, 0, U8), axis=1, opset=13))
    assert "needs scale 1/256 (0.00390625) and zero point 0 (uint8)" in msg


def test_uint8_input_without_parameters_is_refused() -> None:
    g = QOp()
    g.node("Tanh", [input_u8(g, [1, 8])], "y")
    msg = error_of(g.model({"y": TensorProto.UINT8}))
    assert msg.startswith("input 'x' is uint8 but no DequantizeLinear or QLinear node reads it")


# ------------------------------------------------------------ onnxruntime's QOperator quantizer


@pytest.mark.parametrize("signed", [False, True])
def test_quantize_static_qoperator_output_converts_and_runs(tmp_path, signed: bool) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType

    from tests.convert.quantkit import quantize_tiny_net

    kind = QuantType.QInt8 if signed else QuantType.QUInt8
    model = quantize_tiny_net(
        tmp_path, quant_format=QuantFormat.QOperator, activation_type=kind, weight_type=kind
    )
    assert {n.op_type for n in model.graph.node} >= {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool"}
    conv = check_vs_ort(model, min_equal=0.6)
    assert "CONV_2D" in ops(conv) and "DEPTHWISE_CONV_2D" in ops(conv) and "MEAN" in ops(conv)
