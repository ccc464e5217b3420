"""QOperator format: QLinearConv, QLinearMatMul and the com.microsoft QLinear* ops -> the quantized NN ops.

Each node declares the (scale, zero point) of its inputs and output. A
runtime input must already be held with exactly those parameters (8-bit
model inputs take them from their readers, see qflow.input_quant); an
8-bit constant input becomes a quantized constant; the output gets the
declared parameters. Weights may be per-axis along the output channels, and
a QLinearConv bias is int32 with the implicit scale x_scale * w_scale.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs
from mlts.convert.ops.activation import unary
from mlts.convert.ops.concat import emit_concat
from mlts.convert.ops.conv import conv_quantized
from mlts.convert.ops.elementwise import binary_quantized
from mlts.convert.ops.gemm import fc_quantized
from mlts.convert.ops.pool import average_pool_quantized, global_mean
from mlts.convert.ops.softmax import axis_softmax, coerced_softmax
from mlts.convert.qflow import check_probability
from mlts.convert.quant import QUANT8_TYPES, QConst, QParams, check_scales, declared_params
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def _declared(ctx: Context, node: NodeProto, scale: int, zp: int, what: str) -> QParams:
    return declared_params(node, ctx.consts, scale, zp, what)


def _input(ctx: Context, node: NodeProto, index: int, scale: int, zp: int) -> str:
    """The name to read input `index` by, after checking it is quantized as the node declares."""
    name = node.input[index]
    q = _declared(ctx, node, scale, zp, f"input '{name}'")
    if name in ctx.consts:
        values = np.asarray(ctx.consts[name])
        if QUANT8_TYPES.get(values.dtype) != q.type:
            raise ConversionError(f"{where(node)}: constant '{name}' is {values.dtype}, expected {q.dtype}")
        qname = f"{name}/q({q.scale!r},{q.zero_point})"
        ctx.qconsts[qname] = QConst(name, values, np.asarray(q.scale), np.asarray(q.zero_point), None)
        return qname
    t = ctx.tensor(node, index)
    if t.quant != q:
        got = t.quant.describe() if t.quant else "float32"
        raise ConversionError(
            f"{where(node)}: input '{name}' is held as ({got}) but the node declares ({q.describe()})"
        )
    return name


def _weight(ctx: Context, node: NodeProto, index: int, axis: int) -> QConst:
    """The constant weight at `index` with its scale and zero point at index + 1, + 2 (per tensor or along `axis`)."""
    values = np.asarray(ctx.const_input(node, index, "weight"))
    scale = np.asarray(ctx.const_input(node, index + 1, "weight scale"), dtype=np.float64)
    zp_in = ctx.const_input(node, index + 2, "weight zero point", required=False)
    zp = np.zeros(scale.shape, np.int64) if zp_in is None else np.asarray(zp_in, dtype=np.int64)
    check_scales(node, scale, "weight")
    name = node.input[index]
    if scale.size == 1 and zp.size == 1:
        return QConst(name, values, scale.reshape(()), zp.reshape(()), None)
    if scale.ndim != 1 or scale.size != values.shape[axis]:
        raise ConversionError(
            f"{where(node)}: weight scale has shape {list(scale.shape)} for weight {list(values.shape)}; "
            f"expected one scale or one per output channel (axis {axis})"
        )
    return QConst(name, values, scale, np.broadcast_to(zp, scale.shape), axis)


def _int32_bias(ctx: Context, node: NodeProto, index: int, xq: QParams, w: QConst) -> QConst | None:
    """An int32 bias whose scale is x_scale * w_scale by definition."""
    values = ctx.const_input(node, index, "bias", required=False)
    if values is None:
        return None
    values = np.asarray(values)
    if values.dtype != np.int32:
        raise ConversionError(f"{where(node)}: bias '{node.input[index]}' is {values.dtype}; expected int32")
    scale = xq.scale * np.asarray(w.scale, np.float64)
    return QConst(
        node.input[index], values, scale, np.zeros(scale.shape, np.int64), None if w.axis is None else 0
    )


@register("QLinearConv", 10)
def qlinear_conv(ctx: Context, node: NodeProto) -> None:
    """CONV_2D / DEPTHWISE_CONV_2D (inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B)."""
    _input(ctx, node, 0, 1, 2)
    xq = _declared(ctx, node, 1, 2, "input")
    w = _weight(ctx, node, 3, 0)
    conv_quantized(ctx, node, w, _int32_bias(ctx, node, 8, xq, w), _declared(ctx, node, 6, 7, "output"))


@register("QLinearMatMul", 10)
def qlinear_matmul(ctx: Context, node: NodeProto) -> None:
    """FULLY_CONNECTED with constant 2-D B (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)."""
    _input(ctx, node, 0, 1, 2)
    w = _weight(ctx, node, 3, 1)
    fc_quantized(ctx, node, w, 1, None, _declared(ctx, node, 6, 7, "output"))


@register("QGemm", 1)
def qgemm(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: FULLY_CONNECTED (A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp); alpha 1, transA 0."""
    a = attrs(node)
    if a.get("transA", 0) or float(a.get("alpha", 1.0)) != 1.0:
        raise ConversionError(f"{where(node)}: only transA=0 and alpha=1 are supported")
    if len(node.input) < 8 or not node.input[7]:
        raise ConversionError(
            f"{where(node)} has a float32 output (no y_scale); only quantized outputs are supported"
        )
    _input(ctx, node, 0, 1, 2)
    out_axis = 0 if a.get("transB", 0) else 1
    w = _weight(ctx, node, 3, out_axis)
    b = _int32_bias(ctx, node, 6, _declared(ctx, node, 1, 2, "input"), w)
    fc_quantized(ctx, node, w, out_axis, b, _declared(ctx, node, 7, 8, "output"))


@register("QLinearAdd", 1)
def qlinear_add(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: ADD (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    names = [_input(ctx, node, 0, 1, 2), _input(ctx, node, 3, 4, 5)]
    binary_quantized(ctx, node, OperationType.ADD, names, _declared(ctx, node, 6, 7, "output"))


@register("QLinearMul", 1)
def qlinear_mul(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: MUL (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    names = [_input(ctx, node, 0, 1, 2), _input(ctx, node, 3, 4, 5)]
    binary_quantized(ctx, node, OperationType.MUL, names, _declared(ctx, node, 6, 7, "output"))


@register("QLinearGlobalAveragePool", 1)
def qlinear_global_average_pool(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: MEAN over the spatial axes (X, x_scale, x_zp, y_scale, y_zp; channels_last)."""
    _input(ctx, node, 0, 1, 2)
    axes = (1, 2) if attrs(node).get("channels_last", 0) else (2, 3)
    global_mean(ctx, node, axes, _declared(ctx, node, 3, 4, "output"))


@register("QLinearAveragePool", 1)
def qlinear_average_pool(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: AVERAGE_POOL_2D (X, x_scale, x_zp, y_scale, y_zp); NCHW only, output quantized as input."""
    if attrs(node).get("channels_last", 0):
        raise ConversionError(f"{where(node)} has channels_last=1; only NCHW pooling is supported")
    _input(ctx, node, 0, 1, 2)
    average_pool_quantized(ctx, node, _declared(ctx, node, 3, 4, "output"))


@register("QLinearSoftmax", 1)
def qlinear_softmax(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: SOFTMAX (X, x_scale, x_zp, y_scale, y_zp); `opset` picks the ONNX Softmax semantics."""
    _input(ctx, node, 0, 1, 2)
    out_q = _declared(ctx, node, 3, 4, "output")
    check_probability(node, node.output[0], out_q, "SOFTMAX")
    a = attrs(node)
    if int(a.get("opset", 13)) < 13:
        coerced_softmax(ctx, node, a.get("axis", 1), out_q)
    else:
        axis_softmax(ctx, node, a.get("axis", -1), out_q)


@register("QLinearSigmoid", 1)
def qlinear_sigmoid(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: LOGISTIC (X, x_scale, x_zp, y_scale, y_zp)."""
    _input(ctx, node, 0, 1, 2)
    out_q = _declared(ctx, node, 3, 4, "output")
    check_probability(node, node.output[0], out_q, "LOGISTIC")
    unary(ctx, node, OperationType.LOGISTIC, quant=out_q)


@register("QLinearConcat", 1)
def qlinear_concat(ctx: Context, node: NodeProto) -> None:
    """com.microsoft: CONCATENATION (y_scale, y_zp, then X, x_scale, x_zp per input; axis)."""
    count = (len(node.input) - 2) // 3
    if count < 1 or len(node.input) != 2 + 3 * count:
        raise ConversionError(
            f"{where(node)} has {len(node.input)} inputs; expected 2 + 3 per concatenated tensor"
        )
    names = [_input(ctx, node, i, i + 1, i + 2) for i in range(2, len(node.input), 3)]
    emit_concat(ctx, node, names, _declared(ctx, node, 0, 1, "output"))
