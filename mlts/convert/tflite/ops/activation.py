"""Activations and normalizations: one NNAPI operation each.

SOFTMAX passes beta and leaves NNAPI's axis at its default (the last, as TFLite); LOG_SOFTMAX has
beta 1 and axis -1 (TFLite fixes both); ELU has alpha 1; LOCAL_RESPONSE_NORMALIZATION passes
radius, bias, alpha and beta as TFLite stores them (both define the sum over 2*radius+1 channels).
"""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import (
    FLOAT,
    FLOAT_OR_QUANT8,
    activation,
    emit_simple,
    expect_output_type,
    expect_type,
    rank,
)
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperationType

Op = OperationType
_SIMPLE = {"RELU": Op.RELU, "RELU_N1_TO_1": Op.RELU1, "RELU6": Op.RELU6, "LOGISTIC": Op.LOGISTIC}


@register(*_SIMPLE, nnapi=("RELU", "RELU1", "RELU6", "LOGISTIC"), max_version=2)
def simple(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    emit_simple(g, _SIMPLE[op.code.name], [0])


@register("TANH", nnapi="TANH", max_version=2)
def tanh(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    emit_simple(g, Op.TANH, [0])


@register("HARD_SWISH", nnapi="HARD_SWISH", max_version=None)
def hard_swish(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    emit_simple(g, Op.HARD_SWISH, [0])


@register("ELU", nnapi="ELU", max_version=1, note="alpha 1; FLOAT32")
def elu(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    emit_simple(g, Op.ELU, [0], [g.float32(1.0)])


@register("SOFTMAX", nnapi="SOFTMAX", max_version=2, note="beta; rank <= 4")
def softmax(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    expect_output_type(g, (schema.FLOAT32, schema.UINT8, schema.INT8))
    if rank(g, g.input(0)) > 4:
        raise g.refuse("its input has rank above 4; the NNAPI delegate maps SOFTMAX for ranks <= 4")
    emit_simple(g, Op.SOFTMAX, [0], [g.float32(float(g.option("beta", 1.0)))])


@register("LOG_SOFTMAX", nnapi="LOG_SOFTMAX", max_version=1, note="beta 1, axis -1; FLOAT32")
def log_softmax(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    emit_simple(g, Op.LOG_SOFTMAX, [0], [g.float32(1.0), g.int32(-1)])


@register("L2_NORMALIZATION", nnapi="L2_NORMALIZATION", max_version=2, note="no fused activation")
def l2_normalization(g: Graph, op: Operator) -> None:
    activation(g, allow=False)
    emit_simple(g, Op.L2_NORMALIZATION, [0])


@register("LOCAL_RESPONSE_NORMALIZATION", nnapi="LOCAL_RESPONSE_NORMALIZATION", max_version=1)
def lrn(g: Graph, op: Operator) -> None:
    params = [
        g.int32(int(g.option("radius", 0))),
        g.float32(float(g.option("bias", 0.0))),
        g.float32(float(g.option("alpha", 0.0))),
        g.float32(float(g.option("beta", 0.0))),
    ]
    emit_simple(g, Op.LOCAL_RESPONSE_NORMALIZATION, [0], params)
