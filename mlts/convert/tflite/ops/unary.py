"""One-input math operators and CAST: one NNAPI operation each, with the delegate's type rules."""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import FLOAT, emit_simple, expect_output_type, expect_type
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperationType

Op = OperationType
_FLOAT_ONLY = {"ABS": Op.ABS, "EXP": Op.EXP, "LOG": Op.LOG, "RSQRT": Op.RSQRT, "SQRT": Op.SQRT, "SIN": Op.SIN}


@register(*_FLOAT_ONLY, nnapi=tuple(_FLOAT_ONLY), max_version=1, note="FLOAT32")
def float_unary(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    emit_simple(g, _FLOAT_ONLY[op.code.name], [0])


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
