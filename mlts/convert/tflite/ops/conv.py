"""Convolutions and FULLY_CONNECTED, in NHWC as TFLite and NNAPI both lay them out.

CONV_2D: input, filter [out, h, w, in], bias, implicit padding (TFLite's SAME/VALID are NNAPI's),
stride w/h, fused activation, and (only when a dilation is not 1) layout NHWC and the dilations. A
filter reading fewer channels than the input has (grouped convolution) becomes GROUPED_CONV_2D with
num_groups = input channels / filter channels after the strides, and the NHWC layout flag NNAPI
requires there (the delegate leaves it out); no dilation (NNAPI's GROUPED_CONV_2D has none).
DEPTHWISE_CONV_2D adds the depth multiplier. TRANSPOSE_CONV becomes TRANSPOSE_CONV_2D with its
inputs reordered (input, filter, bias, output shape), a zero bias when the file has none, int8
filters always per channel (the delegate's NN_TENSOR_FLAG_FORCE_PER_CHANNEL) and the fused activation. FULLY_CONNECTED gets a
zero bias when it has none (float zeros, or INT32 zeros of scale input x weights scale) and, with
keep_num_dims, a RESHAPE to the output's dimensions.

A float input with 8-bit weights (TFLite's "hybrid" operators, dynamic-range quantization) reads
the weights as TENSOR_QUANT8_SYMM (or per channel) and DEQUANTIZE's them to float32 in the graph,
as the delegate does. Weights stored sparse or as float16 behind DEQUANTIZE arrive here already
dense float32 (see mlts.convert.tflite.converter).
"""

from __future__ import annotations

import numpy as np

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import PER_CHANNEL, PLAIN, SYMM, Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import (
    FLOAT_OR_QUANT8,
    QUANT8,
    activation,
    expect_output_type,
    padding,
    type_of,
)
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType
T = OperandType


def _weights(g: Graph, k: int, input_code: int, flavour: str = PLAIN) -> int:
    """The operand of input k as the operation reads it: dequantized to float32 for a hybrid operator."""
    index = g.input(k)
    t = g.tensor(index)
    if input_code == schema.FLOAT32 and t.type in QUANT8:
        if g.value(index) is None:
            raise g.refuse(f"its 8-bit weights ({t.describe()}) are computed at run time")
        q = g.operand(index, PER_CHANNEL if t.quant is not None and t.quant.per_channel else SYMM)
        out = g.temp(T.TENSOR_FLOAT32, g.shape(index))
        g.emit(Op.DEQUANTIZE, [q], [out])
        g.session.counts["hybrid_weights"] += 1
        return out
    if input_code == schema.FLOAT32 and t.type == schema.FLOAT16:
        raise g.refuse(f"its weights ({t.describe()}) are FLOAT16 not behind a DEQUANTIZE of a constant")
    return g.operand(index, flavour)


def _bias(g: Graph, k: int, input_code: int) -> int:
    index = g.input(k)
    t = g.tensor(index)
    if input_code == schema.FLOAT32 and t.type != schema.FLOAT32:
        return _weights(g, k, input_code)
    return g.operand(index)


def _zero_bias(g: Graph, input_index: int, weights_index: int, units: int) -> int:
    """The bias NNAPI requires where TFLite has none: zeros, INT32 of scale input x weights for 8-bit."""
    x = g.tensor(input_index)
    if x.type == schema.FLOAT32:
        return g.builder.add_constant(np.zeros(units, np.float32), T.TENSOR_FLOAT32)
    w = g.tensor(weights_index)
    sx = (x.quant.scale if x.quant else 0.0) or 1.0
    sw = (w.quant.scale if w.quant else 0.0) or 1.0
    scale = 0.0 if (w.quant is not None and w.quant.per_channel) else float(np.float32(sx) * np.float32(sw))
    return g.builder.add_constant(np.zeros(units, np.int32), T.TENSOR_INT32, scale, 0)


def _dilations(g: Graph) -> list[int]:
    dw, dh = int(g.option("dilation_w_factor", 1)), int(g.option("dilation_h_factor", 1))
    if dw < 1 or dh < 1:
        raise g.refuse(f"dilation factors {dw}x{dh} must be >= 1")
    if dw == 1 and dh == 1:
        return []
    return [g.bool(False), g.int32(dw), g.int32(dh)]


def _strides(g: Graph) -> list[int]:
    sw, sh = int(g.option("stride_w", 1)), int(g.option("stride_h", 1))
    if sw < 1 or sh < 1:
        raise g.refuse(f"strides {sw}x{sh} must be >= 1")
    return [g.int32(sw), g.int32(sh)]


def _check_bias(g: Graph, op: Operator, what: str) -> None:
    if len(op.inputs) < 3 or op.inputs[2] < 0:
        raise g.refuse(f"{what} without a bias: the NNAPI delegate does not map it (NNAPI requires a bias)")


@register(
    "CONV_2D",
    nnapi=("CONV_2D", "GROUPED_CONV_2D"),
    max_version=5,
    note="bias required; dilation; hybrid weights dequantized; grouped: GROUPED_CONV_2D",
)
def conv_2d(g: Graph, op: Operator) -> None:
    code = type_of(g, 0)
    if code not in FLOAT_OR_QUANT8:
        raise g.refuse(
            f"its input is {schema.type_name(code)}; NNAPI's CONV_2D takes FLOAT32 or 8-bit inputs"
        )
    _check_bias(g, op, "CONV_2D")
    x, w = g.tensor(g.input(0)), g.tensor(g.input(1))
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise g.refuse("its input and filter must be rank 4 (NHWC, OHWI)")
    inputs = [g.operand(g.input(0)), _weights(g, 1, code), _bias(g, 2, code)]
    act = g.int32(activation(g))
    if w.shape[3] == x.shape[3]:
        params = [g.int32(padding(g)), *_strides(g), act, *_dilations(g)]
        g.emit(Op.CONV_2D, inputs + params, [g.new_operand(g.output(0))])
        return
    # A filter that reads fewer channels than the input has: grouped convolution, which the delegate
    # maps to GROUPED_CONV_2D with num_groups = input channels / filter channels after the strides.
    # The delegate leaves out the data layout flag, which NNAPI's GROUPED_CONV_2D requires (input 8;
    # NNAPI's validation would refuse its operation): the importer passes NHWC (false).
    if w.shape[3] == 0 or x.shape[3] % w.shape[3] or w.shape[0] % (x.shape[3] // w.shape[3]):
        raise g.refuse(
            f"its filter reads {w.shape[3]} channels of a {x.shape[3]}-channel input and gives {w.shape[0]}: "
            "no whole number of groups"
        )
    if _dilations(g):
        raise g.refuse(
            "a dilated grouped convolution: NNAPI's GROUPED_CONV_2D has no dilation (the delegate would build "
            "an invalid operation)"
        )
    groups = g.int32(x.shape[3] // w.shape[3])
    params = [g.int32(padding(g)), *_strides(g), groups, act, g.bool(False)]
    g.emit(Op.GROUPED_CONV_2D, inputs + params, [g.new_operand(g.output(0))])


@register(
    "DEPTHWISE_CONV_2D",
    nnapi="DEPTHWISE_CONV_2D",
    max_version=3,
    note="depth multiplier checked against the shapes",
)
def depthwise_conv_2d(g: Graph, op: Operator) -> None:
    code = type_of(g, 0)
    if code not in FLOAT_OR_QUANT8:
        raise g.refuse(
            f"its input is {schema.type_name(code)}; NNAPI's DEPTHWISE_CONV_2D takes FLOAT32 or 8-bit"
        )
    _check_bias(g, op, "DEPTHWISE_CONV_2D")
    x, w = g.tensor(g.input(0)), g.tensor(g.input(1))
    if len(x.shape) != 4 or len(w.shape) != 4 or w.shape[0] != 1:
        raise g.refuse("its input must be rank 4 (NHWC) and its filter [1, h, w, channels]")
    multiplier = int(g.option("depth_multiplier", 1))
    if x.shape[3] * multiplier != w.shape[3]:
        raise g.refuse(
            f"depth multiplier {multiplier} of a {x.shape[3]}-channel input does not give the filter's "
            f"{w.shape[3]} channels; NNAPI would refuse the operation"
        )
    inputs = [g.operand(g.input(0)), _weights(g, 1, code), _bias(g, 2, code)]
    params = [
        g.int32(padding(g)),
        *_strides(g),
        g.int32(multiplier),
        g.int32(activation(g)),
        *_dilations(g),
    ]
    g.emit(Op.DEPTHWISE_CONV_2D, inputs + params, [g.new_operand(g.output(0))])


@register(
    "TRANSPOSE_CONV",
    nnapi="TRANSPOSE_CONV_2D",
    max_version=4,
    note="inputs reordered; zero bias added when absent; int8 filters per channel; fused activation",
)
def transpose_conv(g: Graph, op: Operator) -> None:
    shape_index, w_index, x_index = g.input(0), g.input(1), g.input(2)
    code = g.tensor(x_index).type
    if code not in FLOAT_OR_QUANT8:
        raise g.refuse(
            f"its input is {schema.type_name(code)}; NNAPI's TRANSPOSE_CONV_2D takes FLOAT32 or 8-bit"
        )
    if g.value(shape_index) is None or g.value(w_index) is None:
        raise g.refuse("its output shape or filter is computed at run time (dynamically-sized tensors)")
    act = activation(g)
    out_shape = g.ints(0, "output shape")
    if len(out_shape) != 4:
        raise g.refuse(f"its output shape {out_shape} is not rank 4")
    w = g.tensor(w_index)
    flavour = PER_CHANNEL if w.type == schema.INT8 else PLAIN
    weights = g.operand(w_index, flavour)
    if g.has_input(3):
        bias = g.operand(g.input(3))
    else:
        x = g.tensor(x_index)
        if x.type == schema.FLOAT32:
            bias = g.builder.add_constant(np.zeros(out_shape[3], np.float32), T.TENSOR_FLOAT32)
        else:
            sx = (x.quant.scale if x.quant else 0.0) or 1.0
            sw = w.quant.scale if (w.quant and not w.quant.per_channel) else 0.0
            scale = 0.0 if flavour == PER_CHANNEL else float(np.float32(sx) * np.float32(sw or 1.0))
            bias = g.builder.add_constant(np.zeros(out_shape[3], np.int32), T.TENSOR_INT32, scale, 0)
    inputs = [g.operand(x_index), weights, bias, g.operand(shape_index)]
    params = [g.int32(padding(g)), *_strides(g), g.int32(act), g.bool(False)]
    g.emit(Op.TRANSPOSE_CONV_2D, inputs + params, [g.new_operand(g.output(0))])


@register(
    "FULLY_CONNECTED",
    nnapi=("FULLY_CONNECTED", "RESHAPE"),
    max_version=5,
    note="zero bias added when absent; keep_num_dims via RESHAPE; default weights format, per-tensor weights",
)
def fully_connected(g: Graph, op: Operator) -> None:
    code = type_of(g, 0)
    if code not in FLOAT_OR_QUANT8:
        raise g.refuse(
            f"its input is {schema.type_name(code)}; NNAPI's FULLY_CONNECTED takes FLOAT32 or 8-bit"
        )
    expect_output_type(g, (schema.FLOAT32, schema.UINT8, schema.INT8))
    if int(g.option("weights_format", 0) or 0) != 0:
        raise g.refuse("its weights are in a shuffled format (SHUFFLED4x16INT8), which NNAPI has no form for")
    x_index, w_index = g.input(0), g.input(1)
    x, w = g.tensor(x_index), g.tensor(w_index)
    if len(w.shape) != 2:
        raise g.refuse(f"its weights have shape {list(w.shape)}; NNAPI takes [units, input size]")
    if code != schema.FLOAT32 and w.quant is not None and w.quant.per_channel:
        raise g.refuse(
            "its weights are quantized per channel; NNAPI's FULLY_CONNECTED takes one weights scale"
        )
    units, depth = w.shape
    size = x.size
    if len(x.shape) < 2 or depth == 0 or size % depth:
        raise g.refuse(
            f"its input {list(x.shape)} does not flatten to rows of the weights' {depth} inputs (NNAPI needs rank >= 2)"
        )
    weights = _weights(g, 1, code)
    bias = _bias(g, 2, code) if g.has_input(2) else _zero_bias(g, x_index, w_index, units)
    fc_shape = (size // depth, units)
    inputs = [g.operand(x_index), weights, bias, g.int32(activation(g))]
    out_index = g.output(0)
    out_shape = g.shape(out_index)
    if bool(g.option("keep_num_dims", False)) or tuple(out_shape) != fc_shape:
        if int(np.prod(out_shape)) != fc_shape[0] * units:
            raise g.refuse(f"its output {list(out_shape)} does not hold the {fc_shape[0]}x{units} results")
        kind, scale, zp, _ = g.operand_type(g.tensor(out_index))
        tmp = g.temp(kind, fc_shape, scale, zp)
        g.emit(Op.FULLY_CONNECTED, inputs, [tmp])
        g.emit(Op.RESHAPE, [tmp, g.int32_vector(out_shape)], [g.new_operand(out_index)])
        return
    g.emit(Op.FULLY_CONNECTED, inputs, [g.new_operand(out_index)])
