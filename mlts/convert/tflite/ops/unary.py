"""One-input math operators and CAST: one NNAPI operation each, with the delegate's type rules.

COS has no NNAPI operation: the delegate computes sin(pi/2 - x), a SUB from a constant pi/2 (float32,
the input's shape) then SIN, and so does the importer. The two roundings (of pi/2 - x, then of the
sine) make it differ from TFLite's cos by about one float32 ulp of pi/2 - x (<= 3e-7 for |x| <= 2).
"""

from __future__ import annotations

import numpy as np

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import (
    FLOAT,
    QUANT8,
    emit_simple,
    expect_output_type,
    expect_type,
    type_of,
)
from mlts.convert.tflite.registry import needs_level, register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType
T = OperandType
_FLOAT_ONLY = {"ABS": Op.ABS, "EXP": Op.EXP, "LOG": Op.LOG, "SQRT": Op.SQRT, "SIN": Op.SIN}


@register(*_FLOAT_ONLY, nnapi=tuple(_FLOAT_ONLY), max_version=1, note="FLOAT32")
def float_unary(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    emit_simple(g, _FLOAT_ONLY[op.code.name], [0])


@register("RSQRT", nnapi="RSQRT", max_version=2, note="FLOAT32 (8-bit needs feature level 7)")
def rsqrt(g: Graph, op: Operator) -> None:
    if type_of(g, 0) in QUANT8:
        raise g.refuse(needs_level(7, f"its input is {schema.type_name(type_of(g, 0))} (8-bit RSQRT)"))
    expect_type(g, 0, FLOAT)
    emit_simple(g, Op.RSQRT, [0])


@register("COS", nnapi=("SUB", "SIN"), max_version=1, note="sin(pi/2 - x) (the delegate's lowering); FLOAT32")
def cos(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    shape = g.shape(g.input(0))
    half_pi = g.builder.add_constant(np.full(shape, np.pi / 2, np.float32), T.TENSOR_FLOAT32)
    diff = g.temp(T.TENSOR_FLOAT32, g.shape(g.output(0)))
    g.emit(Op.SUB, [half_pi, g.operand(g.input(0)), g.int32(0)], [diff])
    g.emit(Op.SIN, [diff], [g.new_operand(g.output(0))])


@register("NEG", nnapi="NEG", max_version=2, note="FLOAT32, INT32")
def neg(g: Graph, op: Operator) -> None:
    expect_type(g, 0, (schema.FLOAT32, schema.INT32))
    emit_simple(g, Op.NEG, [0])


@register("FLOOR", nnapi="FLOOR", max_version=1)
def floor(g: Graph, op: Operator) -> None:
    emit_simple(g, Op.FLOOR, [0])


_CAST_TYPES = (schema.FLOAT32, schema.INT32, schema.UINT8, schema.INT8)


@register("CAST", nnapi="CAST", max_version=1, note="FLOAT32, INT32, UINT8, INT8 to one another")
def cast(g: Graph, op: Operator) -> None:
    expect_type(g, 0, _CAST_TYPES)
    expect_output_type(g, _CAST_TYPES)
    emit_simple(g, Op.CAST, [0])
