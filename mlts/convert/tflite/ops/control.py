"""IF and WHILE: the referenced TFLite subgraphs become NNAPI referenced subgraphs.

TFLite's NNAPI delegate leaves control flow to the CPU; NNAPI 1.3 defines IF and WHILE, so the
importer maps them (beyond the delegate). IF: input 0 is the condition (a BOOL tensor of one value),
the rest are the branch inputs; then_subgraph_index and else_subgraph_index name subgraphs whose
inputs and outputs match them. WHILE: every input is a loop-carried value (NNAPI's input-output
operands); cond_subgraph_index computes one BOOL from them, body_subgraph_index their next values.
Each subgraph is converted as a model of its own; a subgraph that reaches itself is refused.
"""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperationType

Op = OperationType


def _subgraph(g: Graph, option: str) -> int:
    index = int(g.option(option, -1))
    if not 0 <= index < len(g.model.subgraphs):
        raise g.refuse(f"{option} {index} names no subgraph (the model has {len(g.model.subgraphs)})")
    return index


def _model_operand(g: Graph, index: int, role: str) -> int:
    from mlts.convert.tflite.converter import subgraph_model

    model = subgraph_model(g.session, index, f"{g.where()} {role}")
    return g.builder.add_subgraph(model)


@register("IF", nnapi="IF", max_version=None, note="beyond the delegate (NNAPI 1.3's IF)")
def if_(g: Graph, op: Operator) -> None:
    cond = g.tensor(g.input(0))
    if cond.type != schema.BOOL or cond.size != 1:
        raise g.refuse(f"its condition ({cond.describe()}) is not one BOOL value")
    then_model = _model_operand(g, _subgraph(g, "then_subgraph_index"), "then branch")
    else_model = _model_operand(g, _subgraph(g, "else_subgraph_index"), "else branch")
    inputs = [g.operand(i) for i in op.inputs[1:] if i >= 0]
    outputs = [g.new_operand(i) for i in op.outputs]
    g.emit(Op.IF, [g.operand(g.input(0)), then_model, else_model, *inputs], outputs)


@register("WHILE", nnapi="WHILE", max_version=None, note="beyond the delegate (NNAPI 1.3's WHILE)")
def while_(g: Graph, op: Operator) -> None:
    if len(op.inputs) != len(op.outputs) or any(i < 0 for i in op.inputs):
        raise g.refuse("its inputs and outputs differ in number (every TFLite loop value is carried)")
    cond_model = _model_operand(g, _subgraph(g, "cond_subgraph_index"), "condition")
    body_model = _model_operand(g, _subgraph(g, "body_subgraph_index"), "body")
    inputs = [g.operand(i) for i in op.inputs]
    outputs = [g.new_operand(i) for i in op.outputs]
    g.emit(Op.WHILE, [cond_model, body_model, *inputs], outputs)
