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


def _ranks_at_most_4(g: Graph, name: str) -> None:
    for k in (0, 1):
        if rank(g, g.input(k)) > 4:
            raise g.refuse(f"an input has rank above 4; the NNAPI delegate maps {name} for ranks <= 4")


def _arith(g: Graph, op_type: OperationType, allowed=FLOAT_QUANT8_INT32) -> None:
    _ranks_at_most_4(g, op_type.name)
    code = expect_type(g, 0, allowed)
    act = activation(g, allow=code != schema.INT32)
    emit_simple(g, op_type, [0, 1], [g.int32(act)])


@register("ADD", nnapi="ADD", max_version=2, note="fused activation; INT32 without one; ranks <= 4")
def add(g: Graph, op: Operator) -> None:
    _arith(g, Op.ADD)


@register("MUL", nnapi="MUL", max_version=3, note="fused activation; INT32 without one; ranks <= 4")
def mul(g: Graph, op: Operator) -> None:
    _arith(g, Op.MUL)


@register("SUB", nnapi="SUB", max_version=3, note="fused activation; INT32 without one; ranks <= 4")
def sub(g: Graph, op: Operator) -> None:
    _arith(g, Op.SUB)


@register("DIV", nnapi="DIV", max_version=1, note="FLOAT32 only, as the delegate; ranks <= 4")
def div(g: Graph, op: Operator) -> None:
    _arith(g, Op.DIV, allowed=FLOAT)


#: NNAPI's operand type of SQUARED_DIFFERENCE's intermediate difference, by the inputs' type.
_DIFF_TYPE = {
    schema.FLOAT32: OperandType.TENSOR_FLOAT32,
    schema.INT32: OperandType.TENSOR_INT32,
    schema.UINT8: OperandType.TENSOR_QUANT8_ASYMM,
    schema.INT8: OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
}


def difference_quantization(g: Graph, code: int, out_index: int) -> tuple[float, int]:
    """(scale, zero point) of the difference the delegate gives an 8-bit SQUARED_DIFFERENCE.

    The output's range is [0, max_output] and output = diff^2, so the difference spans
    [-sqrt(max_output), sqrt(max_output)]: codes [1, 255] around zero point 128 for uint8, [-127, 127]
    around 0 for int8, scale 2 * sqrt(max_output) / 254. Computed in float32, as the delegate does.
    """
    q = g.tensor(out_index).quant
    scale = np.float32(q.scale if q else 0.0)
    zp = q.zero_point if q else 0
    top, diff_zp = (255, 128) if code == schema.UINT8 else (127, 0)
    max_output = np.float32(np.float32(top - zp) * scale)
    diff_scale = np.float32(np.float32(2.0) * np.sqrt(max_output, dtype=np.float32) / np.float32(254.0))
    if not np.isfinite(diff_scale) or diff_scale <= 0:
        raise g.refuse(
            f"its output (scale {float(scale)}, zero point {zp}) has no positive range, so the difference the "
            "delegate computes would have scale 0, which NNAPI refuses"
        )
    return float(diff_scale), diff_zp


@register(
    "SQUARED_DIFFERENCE",
    nnapi=("SUB", "MUL"),
    max_version=2,
    note="SUB then MUL (the delegate's lowering); 8-bit: the difference requantized first",
)
def squared_difference(g: Graph, op: Operator) -> None:
    _ranks_at_most_4(g, "SQUARED_DIFFERENCE")
    code = expect_type(g, 0, FLOAT_QUANT8_INT32)
    out = g.output(0)
    scale, zp = difference_quantization(g, code, out) if code in (schema.UINT8, schema.INT8) else (0.0, 0)
    diff = g.temp(_DIFF_TYPE[code], g.shape(out), scale, zp)
    none = g.int32(0)
    g.emit(Op.SUB, [g.operand(g.input(0)), g.operand(g.input(1)), none], [diff])
    g.emit(Op.MUL, [diff, diff, none], [g.new_operand(out)])


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
