"""GATHER and the table lookups."""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import emit_simple, expect_type, rank
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType


@register("GATHER", nnapi="GATHER", max_version=2, note="INT32 positions of rank >= 1; batch_dims 0")
def gather(g: Graph, op: Operator) -> None:
    expect_type(g, 0, (schema.FLOAT32, schema.FLOAT16, schema.INT32, schema.UINT8, schema.INT8))
    positions = g.tensor(g.input(1))
    if positions.type != schema.INT32:
        raise g.refuse("its positions are not INT32")
    if not positions.shape:
        raise g.refuse("its positions are a scalar (rank 0), which NNAPI's GATHER does not take")
    if int(g.option("batch_dims", 0) or 0):
        raise g.refuse(
            "batch_dims is set; NNAPI's GATHER has no batch dimensions (the delegate would drop it)"
        )
    n = max(rank(g, g.input(0)), 1)
    axis = int(g.option("axis", 0))
    if not -n <= axis < n:
        raise g.refuse(f"axis {axis} is outside its rank-{n} input")
    g.emit(
        Op.GATHER,
        [g.operand(g.input(0)), g.int32(axis), g.operand(g.input(1))],
        [g.new_operand(g.output(0))],
    )


@register("EMBEDDING_LOOKUP", nnapi="EMBEDDING_LOOKUP", max_version=1, note="FLOAT32 values")
def embedding_lookup(g: Graph, op: Operator) -> None:
    expect_type(g, 1, (schema.FLOAT32,), "values")
    emit_simple(g, Op.EMBEDDING_LOOKUP, [0, 1])


@register("HASHTABLE_LOOKUP", nnapi="HASHTABLE_LOOKUP", max_version=1, note="FLOAT32 output")
def hashtable_lookup(g: Graph, op: Operator) -> None:
    if g.tensor(g.output(0)).type != schema.FLOAT32:
        raise g.refuse("its output is not FLOAT32; the NNAPI delegate maps HASHTABLE_LOOKUP for FLOAT32")
    emit_simple(g, Op.HASHTABLE_LOOKUP, [0, 1, 2], outputs=2)


@register("LSH_PROJECTION", nnapi="LSH_PROJECTION", max_version=1, note="SPARSE as NNAPI's type 3")
def lsh_projection(g: Graph, op: Operator) -> None:
    kind = int(g.option("type", 0))
    if kind not in (1, 2):
        raise g.refuse(f"projection type {kind} is neither SPARSE (1) nor DENSE (2)")
    inputs = [g.operand(g.input(0)), g.operand(g.input(1))]
    if g.has_input(2):
        if kind == 1:
            raise g.refuse("a SPARSE projection with weights, which the NNAPI delegate does not map")
        inputs.append(g.operand(g.input(2)))
    else:
        inputs.append(g.omitted(OperandType.TENSOR_FLOAT32))
    inputs.append(g.int32(3 if kind == 1 else 2))
    g.emit(Op.LSH_PROJECTION, inputs, [g.new_operand(g.output(0))])
