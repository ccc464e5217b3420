"""Reductions, arg-max/min and top-k.

MEAN takes keep_dims as an INT32 scalar; NNAPI's 8-bit MEAN keeps its input's quantization, so an
output quantized differently gets the delegate's requantization: MEAN into the input's scale and zero
point, then ADD of a one-element zero (scale 1) into the output's. That rounds twice where TFLite's
MEAN rounds once: up to one unit apart. REDUCE_* take keep_dims as a BOOL scalar. A rank-0 axis is a [1]
axes tensor. ARG_MAX/ARG_MIN and TOPK_V2 take their axis or k as a constant scalar.
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
    emit_simple,
    expect_type,
    rank,
)
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType


def _scalar_output_check(g: Graph, name: str) -> None:
    if not g.tensor(g.output(0)).shape:
        raise g.refuse(f"it reduces to a scalar, which NNAPI's {name} cannot give")


@register(
    "MEAN",
    nnapi=("MEAN", "ADD"),
    max_version=2,
    note="rank <= 4; output quantized differently: MEAN then an ADD of 0 that requantizes",
)
def mean(g: Graph, op: Operator) -> None:
    code = expect_type(g, 0, FLOAT_OR_QUANT8)
    _scalar_output_check(g, "MEAN")
    if rank(g, g.input(0)) > 4:
        raise g.refuse("its input has rank above 4; the NNAPI delegate maps MEAN for ranks <= 4")
    qi, qo = g.tensor(g.input(0)).quant, g.tensor(g.output(0)).quant
    pi = (qi.scale, qi.zero_point) if qi else (0.0, 0)
    po = (qo.scale, qo.zero_point) if qo else (0.0, 0)
    keep = g.int32(1 if g.option("keep_dims", False) else 0)
    if pi == po or code == schema.FLOAT32:
        emit_simple(g, Op.MEAN, [0, 1], [keep])
        return
    # The delegate's AppendRequantize: MEAN keeps the input's quantization, then ADD of a one-element
    # zero (scale 1, zero point 0) rescales into the output's.
    kind, scale, zp, _ = g.operand_type(g.tensor(g.input(0)))
    out = g.output(0)
    tmp = g.temp(kind, g.shape(out), scale, zp)
    g.emit(Op.MEAN, [g.operand(g.input(0)), g.operand(g.input(1)), keep], [tmp])
    dtype = np.uint8 if kind == OperandType.TENSOR_QUANT8_ASYMM else np.int8
    zero = g.builder.add_constant(np.zeros(1, dtype), kind, 1.0, 0)
    g.emit(Op.ADD, [tmp, zero, g.int32(0)], [g.new_operand(out)])


_REDUCE = {
    "SUM": (Op.REDUCE_SUM, FLOAT),
    "REDUCE_PROD": (Op.REDUCE_PROD, FLOAT),
    "REDUCE_MAX": (Op.REDUCE_MAX, FLOAT_OR_QUANT8),
    "REDUCE_MIN": (Op.REDUCE_MIN, FLOAT_OR_QUANT8),
    "REDUCE_ANY": (Op.REDUCE_ANY, (schema.BOOL,)),
}


def reduce(g: Graph, op: Operator) -> None:
    nn_op, types = _REDUCE[op.code.name]
    expect_type(g, 0, types)
    if not g.tensor(g.input(0)).shape:
        raise g.refuse("its input is a scalar")
    _scalar_output_check(g, nn_op.name)
    emit_simple(g, nn_op, [0, 1], [g.bool(bool(g.option("keep_dims", False)))])


register("SUM", "REDUCE_PROD", nnapi=("REDUCE_SUM", "REDUCE_PROD"), max_version=1, note="FLOAT32; keep_dims")(
    reduce
)
register(
    "REDUCE_MAX",
    "REDUCE_MIN",
    "REDUCE_ANY",
    nnapi=("REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY"),
    max_version=2,
    note="keep_dims",
)(reduce)


@register("ARG_MAX", "ARG_MIN", nnapi=("ARGMAX", "ARGMIN"), max_version=2, note="constant axis; INT32 output")
def arg(g: Graph, op: Operator) -> None:
    expect_type(g, 0, (schema.FLOAT16, schema.FLOAT32, schema.INT32, schema.UINT8, schema.INT8))
    if g.tensor(g.input(1)).type not in (schema.INT32, schema.INT64):
        raise g.refuse("its axis is not an integer constant")
    axis = g.ints(1, "axis")
    if len(axis) != 1:
        raise g.refuse(f"its axis {axis} is not one value")
    if g.tensor(g.output(0)).type != schema.INT32:
        raise g.refuse("its output type is not INT32; NNAPI gives INT32 indices")
    n = max(rank(g, g.input(0)), 1)
    if not -n <= axis[0] < n:
        raise g.refuse(f"axis {axis[0]} is outside its rank-{n} input")
    emit_simple(g, Op.ARGMAX if op.code.name == "ARG_MAX" else Op.ARGMIN, [0], [g.int32(axis[0])])


@register("TOPK_V2", nnapi="TOPK_V2", max_version=2, note="constant INT32 k")
def topk(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_QUANT8_INT32)
    if g.tensor(g.input(1)).type != schema.INT32:
        raise g.refuse("its k is not an INT32 constant")
    k = g.ints(1, "k")
    if len(k) != 1:
        raise g.refuse(f"its k {k} is not one value")
    emit_simple(g, Op.TOPK_V2, [0], [g.int32(k[0])], outputs=2)
