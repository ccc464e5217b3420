"""If -> IF and Loop -> WHILE: each branch or body converted as a model of its own, attached as
referenced subgraphs.

An ONNX branch reads outer values by name; NNAPI's IF passes its branch inputs explicitly. The outer
runtime values either branch reads become the IF's inputs (the same list, in first-use order, for
both branches, each in ONNX layout); outer constants are copied into the branch. Both branches must
give outputs of the same shapes (NNAPI requires the types to match). The condition must be a BOOL
tensor of one value.

Loop becomes a WHILE whose loop values are the carried values, an iteration counter and the trip
count, and the condition: a state value when the body computes it from the data (the body's
condition output, reduced to one BOOL [1], becomes the next value the condition subgraph reads), an
input-only value when the body passes it through and it does not start as a constant true. The
condition subgraph is counter < trip count and the condition; the body is the converted ONNX body
plus the count. Not converted yet: a runtime trip count, scan outputs, bodies reading the iteration
number, branches reading quantized outer values.
"""

from __future__ import annotations

import numpy as np
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
    if c is None or ctx.builder.type_of(c.operand) != OperandType.TENSOR_BOOL8 or c.shape not in ((), (1,)):
        raise ConversionError(
            f"{where(node)}: the condition '{cond}' must be a runtime BOOL tensor of one value"
            f"{ctx.suggestion(cond)}"
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
            sources = ctx.graph_inputs_of(cond)
            hint = (
                f" (the condition '{cond}' is computed from graph input "
                f"{', '.join(repr(n) for n in sources)}: fixing its value with --input-value NAME=V "
                f"inlines the branch it takes)"
                if sources
                else ""
            )
            raise ConversionError(f"{where(node)}: branch '{g.name}': {e}{hint}") from None
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

_F32, _BOOL = OperandType.TENSOR_FLOAT32, OperandType.TENSOR_BOOL8
MAX_TRIP = 2**24  # the float32 counter counts exactly up to here


def _const(values: bytearray, type_: int, fmt: str, items: list, dims=()):
    """A CONSTANT_COPY operand holding `items` packed by struct format `fmt`, appended to `values`."""
    import struct

    from mlts.hal.enums import OperandLifeTime
    from mlts.hal.types import DataLocation, Operand

    values += bytes(-len(values) % 4)
    offset = len(values)
    data = struct.pack(f"<{len(items)}{fmt}", *items)
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


def _loop_subgraphs(body, m: int, n: int, cond: str | None):
    """WHILE's condition and body Models around the converted ONNX body `body`.

    `body` takes m carried values, then (when `cond` is "state") the condition as BOOL [1], then n
    outer values; it gives the m new carried values, then (when "state") the new condition, of any
    shape holding one value. Loop values: m carried; the iteration counter and, when "state", the
    condition (state); the trip count and, when `cond` is "input", the condition (input only); the
    n outer values. The condition subgraph is counter < trip count, and-ed with the condition when
    there is one; the body runs `body`, counts, and reduces its condition to one BOOL [1].
    """
    from dataclasses import replace

    from mlts.hal.enums import OperandLifeTime as L
    from mlts.hal.types import Model, Operand, Operation, Subgraph

    f1 = (1,)
    sub = body.main
    state = cond == "state"
    outer_at = m + (1 if state else 0)  # where the outer values start among the body's inputs

    def as_input(index: int) -> Operand:
        o = sub.operands[index]
        return Operand(o.type, o.dimensions, lifetime=L.SUBGRAPH_INPUT)

    def scalar_in(type_: int) -> Operand:
        return Operand(type_, f1, lifetime=L.SUBGRAPH_INPUT)

    # Condition: inputs in loop-value order -> (counter < trip) [and cond].
    c_ops = [as_input(i) for i in sub.input_indexes[:m]]
    counter_at = len(c_ops)
    c_ops.append(scalar_in(_F32))
    if state:
        c_ops.append(scalar_in(_BOOL))
    trip_at = len(c_ops)
    c_ops.append(scalar_in(_F32))
    if cond == "input":
        c_ops.append(scalar_in(_BOOL))
    c_ops += [as_input(i) for i in sub.input_indexes[outer_at:]]
    c_inputs = tuple(range(len(c_ops)))
    less = len(c_ops)
    c_ops.append(Operand(_BOOL, f1, lifetime=L.SUBGRAPH_OUTPUT if cond is None else L.TEMPORARY_VARIABLE))
    c_opers = [Operation(OperationType.LESS, (counter_at, trip_at), (less,))]
    result = less
    if cond is not None:
        result = len(c_ops)
        c_ops.append(Operand(_BOOL, f1, lifetime=L.SUBGRAPH_OUTPUT))
        c_opers.append(
            Operation(OperationType.LOGICAL_AND, (counter_at + 1 if state else trip_at + 1, less), (result,))
        )
    cond_sub = Subgraph(_with_consumers(c_ops, c_opers), tuple(c_opers), c_inputs, (result,))
    cond_model = Model(cond_sub, (), b"")
    # Body: the converted body's operands, then the counter, trip, [condition input], one, activation,
    # counter + 1, [the condition reduced to BOOL [1]].
    values = bytearray(body.operand_values)
    ops = list(sub.operands)
    base = len(ops)
    ops += [
        scalar_in(_F32),  # counter
        scalar_in(_F32),  # trip count
        _const(values, _F32, "f", [1.0], f1),
        _const(values, OperandType.INT32, "i", [0]),
        Operand(_F32, f1, lifetime=L.SUBGRAPH_OUTPUT),
    ]
    operations = [*sub.operations, Operation(OperationType.ADD, (base, base + 2, base + 3), (base + 4,))]
    outputs = [*sub.output_indexes[:m], base + 4]
    if state:
        made = sub.output_indexes[m]
        if tuple(sub.operands[made].dimensions) != f1:
            # REDUCE_ANY over every axis without keep_dims gives [1] (NNAPI's rule for a full reduction).
            rank = len(sub.operands[made].dimensions)
            ops[made] = replace(ops[made], lifetime=L.TEMPORARY_VARIABLE)
            axes = len(ops)
            ops += [
                _const(values, OperandType.TENSOR_INT32, "i", list(range(rank)), (rank,)),
                _const(values, OperandType.BOOL, "?", [False]),
                Operand(_BOOL, f1, lifetime=L.SUBGRAPH_OUTPUT),
            ]
            operations.append(Operation(OperationType.REDUCE_ANY, (made, axes, axes + 1), (axes + 2,)))
            made = axes + 2
        outputs.append(made)
    inputs = [*sub.input_indexes[:m], base]
    if state:
        inputs.append(sub.input_indexes[m])
    inputs.append(base + 1)
    if cond == "input":
        inputs.append(len(ops))
        ops.append(scalar_in(_BOOL))
    inputs += sub.input_indexes[outer_at:]
    body_sub = Subgraph(_with_consumers(ops, operations), tuple(operations), tuple(inputs), tuple(outputs))
    return cond_model, Model(body_sub, body.referenced, bytes(values), body.pools)


def _loop_condition(ctx: Context, node: NodeProto, g: onnx.GraphProto) -> tuple[str | None, NodeProto | None]:
    """How the Loop's condition is carried: None (always true), "input" (the initial condition never
    changes: the body passes it through) or "state" (the body computes it); and the pass-through node."""
    cond_in, cond_out = g.input[1].name, g.output[0].name
    p = next((n for n in g.node if cond_out in n.output), None)
    passes = cond_out == cond_in or (p is not None and p.op_type == "Identity" and p.input[0] == cond_in)
    first = node.input[1] if len(node.input) > 1 else ""
    always = not first or (ctx.is_const(first) and bool(np.all(ctx.const(first))))
    if passes:
        return (None if always else "input"), (p if cond_out != cond_in else None)
    return "state", None


def _initial_condition(ctx: Context, node: NodeProto) -> int:
    """The operand of the Loop's initial condition: a constant, or a runtime BOOL tensor of one value."""
    name = node.input[1] if len(node.input) > 1 else ""
    if not name or ctx.is_const(name):
        value = bool(np.all(ctx.const(name))) if name else True
        return ctx.builder.add_constant(np.array([value]), _BOOL)
    t = ctx.tensors.get(name)
    if t is None or ctx.builder.type_of(t.operand) != _BOOL or t.shape != (1,):
        raise ConversionError(
            f"{where(node)}: the initial condition '{name}' must be a constant or a runtime BOOL tensor of shape [1]"
        )
    return t.operand


def _trip_count(ctx: Context, node: NodeProto) -> float:
    name = node.input[0] if node.input else ""
    if not name:
        return float("inf")  # no trip count: the condition (or the loop timeout) ends the loop
    trip = ctx.const(name)
    if trip is None or trip.size != 1:
        raise ConversionError(f"{where(node)}: only a constant trip count is supported")
    value = int(np.asarray(trip).reshape(-1)[0])
    if value > MAX_TRIP:
        raise ConversionError(
            f"{where(node)}: trip count {value} is above {MAX_TRIP} (the counter is float32)"
        )
    return float(max(value, 0))


@register("Loop", since=1)
def convert_loop(ctx: Context, node: NodeProto) -> None:
    """Loop with a constant (or no) trip count and no scan outputs -> WHILE.

    The body's condition output may pass its input through (the initial condition, constant or a
    runtime BOOL [1], then holds for every iteration) or be computed by the body from the data: it
    is then a loop value the body updates and the condition subgraph reads.
    """
    from mlts.convert.converter import convert

    trip = _trip_count(ctx, node)
    g = _graph_attr(node, "body")
    carried_names = [n for n in node.input[2:]]
    m = len(carried_names)
    if len(g.output) != 1 + m:
        raise ConversionError(
            f"{where(node)}: scan outputs are not supported ({len(g.output) - 1 - m} given)"
        )
    iter_name, cond_in = g.input[0].name, g.input[1].name
    cond, passthrough = _loop_condition(ctx, node, g)
    nodes = [n for n in g.node if n is not passthrough]
    if any(iter_name in n.input for n in nodes):
        raise ConversionError(f"{where(node)}: bodies reading the iteration number are not supported")
    if cond != "state" and any(cond_in in n.input for n in nodes):
        raise ConversionError(f"{where(node)}: a body reading its condition must also compute it")
    missing = [n for n in carried_names if n not in ctx.tensors]
    if missing:
        raise ConversionError(f"{where(node)}: the loop value '{missing[0]}' must be a runtime float tensor")
    inner = helper.make_graph(nodes, g.name or "body", list(g.input), list(g.output), list(g.initializer))
    outer = [n for n in _outer_names(inner) if n not in {i.name for i in g.input}]
    runtime = [n for n in outer if n in ctx.tensors]
    consts = [n for n in outer if n not in ctx.tensors and ctx.is_const(n)]
    inputs = [
        helper.make_tensor_value_info(i.name, TensorProto.FLOAT, list(ctx.tensors[c].shape))
        for i, c in zip(g.input[2:], carried_names, strict=True)
    ]
    outputs = list(g.output[1:])
    if cond == "state":
        inputs.append(helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [1]))
        outputs.append(g.output[0])
    inputs += [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(ctx.tensors[n].shape)) for n in runtime
    ]
    inits = list(g.initializer) + [numpy_helper.from_array(ctx.consts[n], n) for n in consts]
    body_graph = helper.make_graph(nodes, g.name or "body", inputs, outputs, inits)
    body_proto = helper.make_model(body_graph, opset_imports=[helper.make_opsetid("", ctx.opset)])
    body_proto.ir_version = 10
    try:
        conv = convert(body_proto)
    except ConversionError as e:
        raise ConversionError(f"{where(node)}: body: {e}") from None
    if cond == "state":
        made = conv.model.main.operands[conv.model.main.output_indexes[m]]
        if made.type != _BOOL or int(np.prod(made.dimensions)) != 1:
            raise ConversionError(f"{where(node)}: the body's condition must be a BOOL tensor of one value")
    cond_model, body_model = _loop_subgraphs(conv.model, m, len(runtime), cond)
    f32 = OperandType.TENSOR_FLOAT32
    args = [ctx.in_layout(n, False).operand for n in carried_names]
    args.append(ctx.builder.add_constant(np.zeros(1, np.float32), f32))
    if cond == "state":
        args.append(_initial_condition(ctx, node))
    args.append(ctx.builder.add_constant(np.array([trip], np.float32), f32))
    if cond == "input":
        args.append(_initial_condition(ctx, node))
    args += [ctx.in_layout(n, False).operand for n in runtime]
    cond_ref, body_ref = ctx.builder.add_subgraph(cond_model), ctx.builder.add_subgraph(body_model)
    outs = [
        ctx.new_tensor(name, ctx.tensors[c].shape) for name, c in zip(node.output, carried_names, strict=True)
    ]
    ctx.emit(OperationType.WHILE, [cond_ref, body_ref, *args], [t.operand for t in outs])
