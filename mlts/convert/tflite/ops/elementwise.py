"""Binary element-wise operators, comparisons, logic, SELECT and the PReLU family.

ADD/SUB/MUL/DIV carry their fused activation as NNAPI's FuseCode input; INT32 inputs take no
activation (NNAPI 1.3). A rank-0 operand is a [1] tensor (the delegate's scalar-as-tensor rule for
these operators); NNAPI broadcasts like TFLite. LEAKY_RELU becomes PRELU with a one-element alpha:
the float alpha, or for 8-bit inputs the stored value 1 with scale alpha (the delegate's form).
"""

from __future__ import annotations

import numpy as np

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import (
    FLOAT,
    FLOAT_OR_QUANT8,
    FLOAT_QUANT8_INT32,
    activation,
    emit_simple,
    expect_type,
    rank,
)
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType


def _arith(g: Graph, op_type: OperationType, allowed=FLOAT_QUANT8_INT32) -> None:
    code = expect_type(g, 0, allowed)
    act = activation(g, allow=code != schema.INT32)
    emit_simple(g, op_type, [0, 1], [g.int32(act)])


@register("ADD", nnapi="ADD", max_version=2, note="fused activation; INT32 without one")
def add(g: Graph, op: Operator) -> None:
    _arith(g, Op.ADD)


@register("MUL", nnapi="MUL", max_version=3, note="fused activation; INT32 without one")
def mul(g: Graph, op: Operator) -> None:
    _arith(g, Op.MUL)


@register("SUB", nnapi="SUB", max_version=3, note="fused activation; INT32 without one; ranks <= 4")
def sub(g: Graph, op: Operator) -> None:
    for k in (0, 1):
        if rank(g, g.input(k)) > 4:
            raise g.refuse("an input has rank above 4; the NNAPI delegate maps SUB for ranks <= 4")
    _arith(g, Op.SUB)


@register("DIV", nnapi="DIV", max_version=1, note="FLOAT32 only, as the delegate")
def div(g: Graph, op: Operator) -> None:
    _arith(g, Op.DIV, allowed=FLOAT)


@register("MAXIMUM", "MINIMUM", nnapi=("MAXIMUM", "MINIMUM"), max_version=3)
def max_min(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_QUANT8_INT32)
    for k in (0, 1):
        if not g.tensor(g.input(k)).shape and g.value(g.input(k)) is None:
            raise g.refuse("a rank-0 operand computed at run time; the NNAPI delegate needs it constant")
    emit_simple(g, Op.MAXIMUM if op.code.name == "MAXIMUM" else Op.MINIMUM, [0, 1])


@register("POW", nnapi="POW", max_version=1, note="FLOAT32 only")
def pow_(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    emit_simple(g, Op.POW, [0, 1])


_COMPARE = {
    "LESS": Op.LESS,
    "LESS_EQUAL": Op.LESS_EQUAL,
    "GREATER": Op.GREATER,
    "GREATER_EQUAL": Op.GREATER_EQUAL,
    "EQUAL": Op.EQUAL,
    "NOT_EQUAL": Op.NOT_EQUAL,
}


@register(*_COMPARE, nnapi=tuple(_COMPARE), max_version=2, note="FLOAT32, 8-bit, BOOL, INT32 inputs")
def compare(g: Graph, op: Operator) -> None:
    expect_type(g, 0, (schema.FLOAT32, schema.UINT8, schema.INT8, schema.BOOL, schema.INT32))
    emit_simple(g, _COMPARE[op.code.name], [0, 1])


_LOGIC = {"LOGICAL_AND": Op.LOGICAL_AND, "LOGICAL_OR": Op.LOGICAL_OR, "LOGICAL_NOT": Op.LOGICAL_NOT}


@register(*_LOGIC, nnapi=tuple(_LOGIC), max_version=1, note="BOOL inputs")
def logic(g: Graph, op: Operator) -> None:
    expect_type(g, 0, (schema.BOOL,))
    emit_simple(g, _LOGIC[op.code.name], [0] if op.code.name == "LOGICAL_NOT" else [0, 1])


@register(
    "SELECT",
    nnapi="SELECT",
    max_version=2,
    note="condition and values of one shape (SELECT_V2 is not mapped)",
)
def select(g: Graph, op: Operator) -> None:
    expect_type(g, 1, FLOAT_QUANT8_INT32, "value input")
    if g.tensor(g.input(0)).shape != g.tensor(g.input(1)).shape:
        raise g.refuse(
            "its condition and values differ in shape; the NNAPI delegate maps SELECT for equal shapes"
        )
    emit_simple(g, Op.SELECT, [0, 1, 2])


@register("PRELU", nnapi="PRELU", max_version=1)
def prelu(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    emit_simple(g, Op.PRELU, [0, 1])


@register("LEAKY_RELU", nnapi="PRELU", max_version=1, note="alpha as a one-element PRELU slope")
def leaky_relu(g: Graph, op: Operator) -> None:
    code = expect_type(g, 0, FLOAT_OR_QUANT8)
    alpha = float(g.option("alpha", 0.0))
    if code == schema.FLOAT32:
        slope = g.builder.add_constant(np.asarray([alpha], np.float32), OperandType.TENSOR_FLOAT32)
    elif alpha <= 0 or not np.isfinite(alpha):
        raise g.refuse(f"alpha {alpha} cannot be a quantization scale (NNAPI needs a scale > 0)")
    elif code == schema.INT8:
        slope = g.builder.add_constant(
            np.asarray([1], np.int8), OperandType.TENSOR_QUANT8_ASYMM_SIGNED, alpha, 0
        )
    else:
        slope = g.builder.add_constant(np.asarray([1], np.uint8), OperandType.TENSOR_QUANT8_ASYMM, alpha, 0)
    emit_simple(g, Op.PRELU, [0], [slope])
