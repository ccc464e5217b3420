"""If -> IF and Loop -> WHILE: each branch or body converted as a model of its own, attached as
referenced subgraphs.

An ONNX branch reads outer values by name; NNAPI's IF passes its branch inputs explicitly. The outer
runtime values either branch reads become the IF's inputs (the same list, in first-use order, for
both branches, each in ONNX layout); outer constants are copied into the branch. Both branches must
give outputs of the same shapes (NNAPI requires the types to match). The condition must be a BOOL
tensor of one value.

Loop becomes a WHILE whose loop values are the carried values, an iteration counter and the trip
count; its condition subgraph is counter < trip count, its body the converted ONNX body plus the
count. Not converted yet: a Loop whose condition depends on the data (the body would need comparison
operators), a runtime trip count, scan outputs, bodies reading the iteration number, branches
reading quantized outer values.
"""

from __future__ import annotations

import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper

from mlts.convert.context import Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.registry import register
from mlts.hal.enums import OperandType, OperationType


def _graph_attr(node: NodeProto, name: str) -> onnx.GraphProto:
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    raise ConversionError(f"{where(node)}: attribute '{name}' (a graph) is missing")


def _outer_names(graph: onnx.GraphProto) -> list[str]:
    """Names `graph` reads but does not define, in first-use order."""
    defined = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    seen: dict[str, None] = {}
    for n in graph.node:
        for name in n.input:
            if name and name not in defined:
                seen.setdefault(name, None)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                for name in _outer_names(a.g):
                    if name not in defined:
                        seen.setdefault(name, None)
        defined.update(n.output)
    for o in graph.output:
        if o.name not in defined:
            seen.setdefault(o.name, None)
    return list(seen)


def _branch_model(ctx: Context, graph: onnx.GraphProto, runtime: list[str], consts: list[str], opset: int):
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(ctx.tensors[n].shape)) for n in runtime
    ]
    inits = list(graph.initializer) + [numpy_helper.from_array(ctx.consts[n], n) for n in consts]
    body = helper.make_graph(list(graph.node), graph.name or "branch", inputs, list(graph.output), inits)
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@register("If", since=1)
def convert_if(ctx: Context, node: NodeProto) -> None:
    from mlts.convert.converter import convert

    cond = node.input[0]
    c = ctx.tensors.get(cond)
    if c is None or ctx.builder.type_of(c.operand) != OperandType.TENSOR_BOOL8 or c.shape != (1,):
        raise ConversionError(
            f"{where(node)}: the condition '{cond}' must be a runtime BOOL tensor of one value"
        )
    branches = [_graph_attr(node, "then_branch"), _graph_attr(node, "else_branch")]
    outer = list(dict.fromkeys(n for g in branches for n in _outer_names(g)))
    runtime = [n for n in outer if n in ctx.tensors]
    consts = [n for n in outer if n not in ctx.tensors and ctx.is_const(n)]
    unknown = [n for n in outer if n not in runtime and n not in consts]
    if unknown:
        raise ConversionError(
            f"{where(node)}: a branch reads '{unknown[0]}', which is not defined before the If"
        )
    if any(ctx.tensors[n].quant is not None for n in runtime):
        raise ConversionError(f"{where(node)}: branches reading quantized values are not supported")
    converted = []
    for g in branches:
        try:
            converted.append(convert(_branch_model(ctx, g, runtime, consts, ctx.opset)))
        except ConversionError as e:
            raise ConversionError(f"{where(node)}: branch '{g.name}': {e}") from None
    shapes = [tuple(o.shape for o in conv.outputs) for conv in converted]
    if shapes[0] != shapes[1]:
        raise ConversionError(
            f"{where(node)}: the branches give outputs of shapes {shapes[0]} and {shapes[1]}"
        )
    if any(o.dtype != "float32" for o in converted[0].outputs):
        raise ConversionError(f"{where(node)}: only float32 branch outputs are supported")
    subgraphs = [ctx.builder.add_subgraph(conv.model) for conv in converted]
    args = [ctx.in_layout(n, False).operand for n in runtime]
    outs: list[Tensor] = [
        ctx.new_tensor(name, shape) for name, shape in zip(node.output, shapes[0], strict=True)
    ]
    ctx.emit(OperationType.IF, [c.operand, *subgraphs, *args], [t.operand for t in outs])


# ---------------------------------------------------------------- Loop -> WHILE


def _scalar_const(values: bytearray, type_: int, fmt: str, value, dims=()):
    import struct

    from mlts.hal.enums import OperandLifeTime
    from mlts.hal.types import DataLocation, Operand

    values += bytes(-len(values) % 4)
    offset = len(values)
    data = struct.pack("<" + fmt, value)
    values += data
    return Operand(
        type_,
        tuple(dims),
        0,
        lifetime=OperandLifeTime.CONSTANT_COPY,
        location=DataLocation(0, offset, len(data)),
    )


def _with_consumers(operands, operations):
    from dataclasses import replace

    counts = [0] * len(operands)
    for op in operations:
        for i in op.inputs:
            counts[i] += 1
    return tuple(replace(o, number_of_consumers=counts[i]) for i, o in enumerate(operands))


def _loop_subgraphs(body, m: int, n: int):
    """WHILE's condition and body Models around the converted ONNX body `body` (inputs: m carried, n outer).

    Loop values: m carried, then the iteration counter (state), then the trip count and the n outer
    values (input only). The condition is counter < trip count; the body runs `body` and counts.
    """
    from mlts.hal.enums import OperandLifeTime as L
    from mlts.hal.types import Model, Operand, Operation, Subgraph

    f1 = (1,)
    sub = body.main
    carried = [sub.operands[i] for i in sub.input_indexes]
    as_input = [Operand(o.type, o.dimensions, lifetime=L.SUBGRAPH_INPUT) for o in carried]
    # Condition: inputs (m carried, counter, trip, n outer) -> counter < trip.
    cvalues = bytearray()
    c_ops = [*as_input[:m], Operand(OperandType.TENSOR_FLOAT32, f1, lifetime=L.SUBGRAPH_INPUT)]
    c_ops += [Operand(OperandType.TENSOR_FLOAT32, f1, lifetime=L.SUBGRAPH_INPUT), *as_input[m:]]
    c_ops.append(Operand(OperandType.TENSOR_BOOL8, f1, lifetime=L.SUBGRAPH_OUTPUT))
    cond_op = Operation(OperationType.LESS, (m, m + 1), (len(c_ops) - 1,))
    cond = Subgraph(
        _with_consumers(c_ops, [cond_op]), (cond_op,), tuple(range(len(c_ops) - 1)), (len(c_ops) - 1,)
    )
    cond_model = Model(cond, (), bytes(cvalues))
    # Body: the converted body's operands, then the counter, trip, one, activation, counter + 1.
    values = bytearray(body.operand_values)
    ops = list(sub.operands)
    base = len(ops)
    ops += [
        Operand(OperandType.TENSOR_FLOAT32, f1, lifetime=L.SUBGRAPH_INPUT),  # counter
        Operand(OperandType.TENSOR_FLOAT32, f1, lifetime=L.SUBGRAPH_INPUT),  # trip count
        _scalar_const(values, OperandType.TENSOR_FLOAT32, "f", 1.0, f1),
        _scalar_const(values, OperandType.INT32, "i", 0),
        Operand(OperandType.TENSOR_FLOAT32, f1, lifetime=L.SUBGRAPH_OUTPUT),
    ]
    count = Operation(OperationType.ADD, (base, base + 2, base + 3), (base + 4,))
    operations = (*sub.operations, count)
    inputs = (*sub.input_indexes[:m], base, base + 1, *sub.input_indexes[m:])
    outputs = (*sub.output_indexes, base + 4)
    body_sub = Subgraph(_with_consumers(ops, operations), operations, inputs, outputs)
    return cond_model, Model(body_sub, body.referenced, bytes(values), body.pools)


@register("Loop", since=1)
def convert_loop(ctx: Context, node: NodeProto) -> None:
    """Loop with a constant trip count and no scan outputs -> WHILE.

    The body's condition output must be its condition input passed through (Identity) or a constant
    true: a data-dependent condition needs comparison operators in the body.
    """
    from mlts.convert.converter import convert

    trip = ctx.const(node.input[0]) if node.input[0] else None
    if trip is None or trip.size != 1:
        raise ConversionError(f"{where(node)}: only a constant trip count is supported")
    if (
        len(node.input) > 1
        and node.input[1]
        and not (ctx.is_const(node.input[1]) and bool(ctx.const(node.input[1])))
    ):
        raise ConversionError(f"{where(node)}: only a constant true initial condition is supported")
    g = _graph_attr(node, "body")
    carried_names = [n for n in node.input[2:]]
    m = len(carried_names)
    if len(g.output) != 1 + m:
        raise ConversionError(
            f"{where(node)}: scan outputs are not supported ({len(g.output) - 1 - m} given)"
        )
    iter_name, cond_in = g.input[0].name, g.input[1].name
    cond_out = g.output[0].name
    producers = {o: n for n in g.node for o in n.output}
    p = producers.get(cond_out)
    if not (cond_out == cond_in or (p is not None and p.op_type == "Identity" and p.input[0] == cond_in)):
        raise ConversionError(f"{where(node)}: the body's condition must pass its input through (Identity)")
    nodes = [n for n in g.node if n is not p]
    if any(iter_name in n.input or cond_in in n.input for n in nodes):
        raise ConversionError(
            f"{where(node)}: bodies reading the iteration number or condition are not supported"
        )
    missing = [n for n in carried_names if n not in ctx.tensors]
    if missing:
        raise ConversionError(f"{where(node)}: the loop value '{missing[0]}' must be a runtime float tensor")
    inner = helper.make_graph(
        nodes, g.name or "body", list(g.input[2:]), list(g.output[1:]), list(g.initializer)
    )
    outer = [n for n in _outer_names(inner) if n not in {i.name for i in g.input}]
    runtime = [n for n in outer if n in ctx.tensors]
    consts = [n for n in outer if n not in ctx.tensors and ctx.is_const(n)]
    inputs = [
        helper.make_tensor_value_info(i.name, TensorProto.FLOAT, list(ctx.tensors[c].shape))
        for i, c in zip(g.input[2:], carried_names, strict=True)
    ]
    inputs += [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(ctx.tensors[n].shape)) for n in runtime
    ]
    inits = list(g.initializer) + [numpy_helper.from_array(ctx.consts[n], n) for n in consts]
    body_graph = helper.make_graph(nodes, g.name or "body", inputs, list(g.output[1:]), inits)
    body_proto = helper.make_model(body_graph, opset_imports=[helper.make_opsetid("", ctx.opset)])
    body_proto.ir_version = 10
    try:
        body = convert(body_proto).model
    except ConversionError as e:
        raise ConversionError(f"{where(node)}: body: {e}") from None
    cond_model, body_model = _loop_subgraphs(body, m, len(runtime))
    import numpy as np

    counter = ctx.const_operand(np.zeros(1, np.float32))
    limit = ctx.const_operand(np.asarray(trip, np.float32).reshape(1))
    args = [ctx.in_layout(n, False).operand for n in carried_names]
    args += [counter, limit] + [ctx.in_layout(n, False).operand for n in runtime]
    cond_ref, body_ref = ctx.builder.add_subgraph(cond_model), ctx.builder.add_subgraph(body_model)
    outs = [
        ctx.new_tensor(name, ctx.tensors[c].shape) for name, c in zip(node.output, carried_names, strict=True)
    ]
    ctx.emit(OperationType.WHILE, [cond_ref, body_ref, *args], [t.operand for t in outs])
