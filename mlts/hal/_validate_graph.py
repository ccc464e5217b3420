"""Validation of a subgraph's structure: inputs/outputs, operation order, consumers, control flow, references."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

from mlts.hal._validate_common import OPERATION_TYPE_CODES, is_int, op_label, split_type, type_label
from mlts.hal._validate_operand import CONSTANT_LIFETIMES
from mlts.hal._validate_operation import check_operation
from mlts.hal.enums import OperandLifeTime, OperandType, OperationType
from mlts.hal.errors import invalid
from mlts.hal.types import Model, Operand, Operation, Subgraph

L = OperandLifeTime
_WRITABLE = frozenset({L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT})
# Operands whose value exists before the first operation runs.
_AVAILABLE = CONSTANT_LIFETIMES | {L.SUBGRAPH_INPUT, L.NO_VALUE, L.SUBGRAPH}


#: The deepest nesting of IF and WHILE operations a model may have (a documented limit of this HAL
#: implementation: drivers run subgraphs recursively, and NNAPI sets no bound of its own).
MAX_NESTING = 64


def subgraph_label(index: int) -> str:
    """-1 is the main subgraph; 0.. index Model.referenced (as SUBGRAPH operands do)."""
    return "main subgraph" if index < 0 else f"referenced subgraph {index}"


def check_io_lists(sub: Subgraph, label: str) -> None:
    """input_indexes/output_indexes are in range, unique, and match the SUBGRAPH_INPUT/OUTPUT lifetimes exactly."""
    n = len(sub.operands)
    for name, indexes, lifetime in (
        ("input_indexes", sub.input_indexes, L.SUBGRAPH_INPUT),
        ("output_indexes", sub.output_indexes, L.SUBGRAPH_OUTPUT),
    ):
        if not isinstance(indexes, (tuple, list)):
            raise invalid(f"{label}: {name} must be a tuple of ints, got {type(indexes).__name__}")
        seen: set[int] = set()
        for pos, i in enumerate(indexes):
            if not is_int(i) or not 0 <= i < n:
                raise invalid(f"{label}: {name}[{pos}] is {i!r}; valid operand indexes are 0..{n - 1}")
            if i in seen:
                raise invalid(f"{label}: {name}[{pos}] repeats operand {i}; each operand may appear once")
            seen.add(i)
            if sub.operands[i].lifetime != lifetime:
                raise invalid(
                    f"{label}: {name}[{pos}] is operand {i} whose lifetime is "
                    f"{L(sub.operands[i].lifetime).name}, expected {lifetime.name}"
                )
        for i, operand in enumerate(sub.operands):
            if operand.lifetime == lifetime and i not in seen:
                raise invalid(f"operand {i} of {label} has lifetime {lifetime.name} but is not in {name}")
    if not sub.output_indexes:
        raise invalid(f"{label}: no outputs; a subgraph must produce at least one output")


def check_operations(model: Model, sub: Subgraph, label: str, ext_prefixes: Set[int]) -> None:
    """Operation types, operand indexes, write-once/write-before-read order and consumer counts."""
    operands = sub.operands
    n = len(operands)
    if not isinstance(sub.operations, (tuple, list)) or not sub.operations:
        raise invalid(f"{label}: no operations; a subgraph must contain at least one operation")
    writer = [-1] * n
    consumers = [0] * n
    for k, op in enumerate(sub.operations):
        if not isinstance(op, Operation):
            raise invalid(f"operation {k} of {label}: expected an Operation record, got {type(op).__name__}")
        where = f"operation {k} of {label} ({op_label(op.type)})"
        _check_op_type(op.type, where, ext_prefixes)
        for role, indexes in (("input", op.inputs), ("output", op.outputs)):
            if not isinstance(indexes, (tuple, list)):
                raise invalid(f"{where}: {role}s must be a tuple of ints, got {type(indexes).__name__}")
            for pos, i in enumerate(indexes):
                if not is_int(i) or not 0 <= i < n:
                    raise invalid(
                        f"{where}: {role} {pos} is operand {i!r}; valid operand indexes are 0..{n - 1}"
                    )
        for pos, i in enumerate(op.inputs):
            consumers[i] += 1
            if operands[i].lifetime not in _AVAILABLE and writer[i] < 0:
                raise invalid(
                    f"{where}: input {pos} reads operand {i} before any operation writes it "
                    "(operations must be in execution order)"
                )
        for pos, i in enumerate(op.outputs):
            lifetime = operands[i].lifetime
            if lifetime not in _WRITABLE:
                raise invalid(
                    f"{where}: output {pos} is operand {i} of lifetime {L(lifetime).name}; "
                    "outputs must be TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT"
                )
            if writer[i] >= 0:
                raise invalid(
                    f"{where}: output {pos} writes operand {i}, already written by operation {writer[i]}; "
                    "each operand is written exactly once"
                )
            writer[i] = k
        if op.type in (OperationType.IF, OperationType.WHILE):
            _check_control_flow(model, sub, op, where)
        else:
            check_operation(model, sub, op, where)
    for i, operand in enumerate(operands):
        if operand.lifetime in _WRITABLE and writer[i] < 0:
            raise invalid(
                f"operand {i} of {label} ({L(operand.lifetime).name}) is never written by an operation"
            )
        if operand.number_of_consumers != consumers[i]:
            raise invalid(
                f"operand {i} of {label}: number_of_consumers {operand.number_of_consumers} != "
                f"{consumers[i]} (times it appears as an operation input)"
            )


def _check_op_type(code: Any, where: str, ext_prefixes: Set[int]) -> None:
    if not is_int(code) or code < 0:
        raise invalid(f"{where}: type {code!r} is not an operation type code")
    if code in OPERATION_TYPE_CODES:
        return
    prefix, _ = split_type(code)
    if prefix == 0:
        raise invalid(
            f"{where}: type {code} is neither an OperationType (0..101, OEM_OPERATION 10000) nor an extension operation"
        )
    if prefix not in ext_prefixes:
        raise invalid(
            f"{where}: extension operation prefix {prefix} is not declared in extension_name_to_prefix"
        )


def _branch(model: Model, sub: Subgraph, op: Operation, pos: int, where: str) -> Subgraph:
    """The subgraph referenced by input `pos` of a control-flow operation."""
    if pos >= len(op.inputs):
        raise invalid(f"{where}: {len(op.inputs)} inputs; input {pos} must reference a subgraph")
    operand = sub.operands[op.inputs[pos]]
    if operand.lifetime != L.SUBGRAPH:
        raise invalid(f"{where}: input {pos} (operand {op.inputs[pos]}) must be a SUBGRAPH operand")
    return model.referenced[operand.location.offset]


def _incompatible(
    a: Operand, b: Operand, left: str = "outside", right: str = "in the referenced subgraph"
) -> str | None:
    """Why two operands a control-flow operation pairs are not compatible (NNAPI: same type,
    rank and known dimensions, scale, zero point and extra params), or None."""
    if a.type != b.type:
        return f"{type_label(a.type)} {left} but {type_label(b.type)} {right}"
    da, db = tuple(a.dimensions), tuple(b.dimensions)
    if da and db and (len(da) != len(db) or any(x and y and x != y for x, y in zip(da, db, strict=True))):
        return f"dimensions {list(da)} {left} but {list(db)} {right}"
    if a.scale != b.scale or a.zero_point != b.zero_point:
        return (
            f"scale {a.scale} and zero point {a.zero_point} {left} but {b.scale} and {b.zero_point} {right}"
        )
    if a.extra_params != b.extra_params:
        return f"of different extra params {left} and {right}"
    return None


def _match_types(
    outer: Sequence[int], inner: Sequence[int], sub: Subgraph, ref: Subgraph, what: str, where: str
) -> None:
    # WHILE bodies may return more values (state) than the loop outputs: pair the common prefix.
    for j, (a, b) in enumerate(zip(outer, inner, strict=False)):
        reason = _incompatible(sub.operands[a], ref.operands[b])
        if reason is not None:
            raise invalid(f"{where}: {what} {j} is {reason}")


def _check_control_flow(model: Model, sub: Subgraph, op: Operation, where: str) -> None:
    """IF/WHILE: referenced subgraphs exist and their input/output counts and types line up."""
    if op.type == OperationType.IF:
        if not op.inputs:
            raise invalid(f"{where}: no inputs; IF takes a condition, two subgraphs and the branch inputs")
        cond_operand = sub.operands[op.inputs[0]]
        if cond_operand.lifetime == L.NO_VALUE:
            raise invalid(
                f"{where}: input 0 (condition, operand {op.inputs[0]}) is omitted (NO_VALUE); an IF needs "
                "a condition: it is not an optional input"
            )
        if cond_operand.type != OperandType.TENSOR_BOOL8 or tuple(cond_operand.dimensions) != (1,):
            raise invalid(
                f"{where}: input 0 (condition, operand {op.inputs[0]}) is {type_label(cond_operand.type)} "
                f"{list(cond_operand.dimensions)}; it must be a TENSOR_BOOL8 holding one value"
            )
        then_g, else_g = _branch(model, sub, op, 1, where), _branch(model, sub, op, 2, where)
        args = op.inputs[3:]
        for name, g in (("then", then_g), ("else", else_g)):
            if len(g.input_indexes) != len(args) or len(g.output_indexes) != len(op.outputs):
                raise invalid(
                    f"{where}: {name} branch takes {len(g.input_indexes)} inputs and gives "
                    f"{len(g.output_indexes)} outputs; IF passes {len(args)} and expects {len(op.outputs)}"
                )
            _match_types(args, g.input_indexes, sub, g, f"{name} branch input", where)
            _match_types(op.outputs, g.output_indexes, sub, g, f"{name} branch output", where)
        return
    cond, body = _branch(model, sub, op, 0, where), _branch(model, sub, op, 1, where)
    args = op.inputs[2:]
    if not op.outputs or len(op.outputs) > len(args):
        raise invalid(
            f"{where}: {len(op.outputs)} outputs for {len(args)} loop inputs; "
            "WHILE needs 1..(number of loop inputs) outputs"
        )
    if len(cond.input_indexes) != len(args) or len(cond.output_indexes) != 1:
        raise invalid(
            f"{where}: condition takes {len(cond.input_indexes)} inputs and gives "
            f"{len(cond.output_indexes)} outputs; expected {len(args)} and 1"
        )
    if len(body.input_indexes) != len(args) or not len(op.outputs) <= len(body.output_indexes) <= len(args):
        raise invalid(
            f"{where}: body takes {len(body.input_indexes)} inputs and gives {len(body.output_indexes)} "
            f"outputs; expected {len(args)} inputs and {len(op.outputs)}..{len(args)} outputs"
        )
    cond_type = cond.operands[cond.output_indexes[0]].type
    if cond_type != OperandType.TENSOR_BOOL8:
        raise invalid(f"{where}: condition output is {type_label(cond_type)}; it must be TENSOR_BOOL8")
    _match_types(args, cond.input_indexes, sub, cond, "condition input", where)
    _match_types(args, body.input_indexes, sub, body, "body input", where)
    _match_types(op.outputs, body.output_indexes, sub, body, "body output", where)
    for j, (i, o) in enumerate(zip(body.input_indexes, body.output_indexes, strict=False)):
        reason = _incompatible(body.operands[o], body.operands[i], "as a body output", "as a body input")
        if reason is not None:
            raise invalid(f"{where}: loop variable {j} is {reason}; the body must return what it takes")


def check_references(model: Model) -> None:
    """No cycles among subgraph references, every referenced subgraph reachable from main, and IF/WHILE
    nested at most MAX_NESTING levels deep (main's operations are level 1)."""
    graphs = (model.main, *model.referenced)

    def edges(node: int) -> list[int]:
        # Node 0 is main; node r + 1 is referenced subgraph r.
        return [o.location.offset + 1 for o in graphs[node].operands if o.lifetime == L.SUBGRAPH]

    state = [0] * len(graphs)  # 0 unseen, 1 on the DFS stack, 2 done
    depth = [0] * len(graphs)  # levels of control flow below a subgraph (known once it is done)
    stack: list[tuple[int, list[int]]] = [(0, edges(0))]
    state[0] = 1
    while stack:
        node, todo = stack[-1]
        if not todo:
            state[node] = 2
            depth[node] = max((depth[child] + 1 for child in edges(node)), default=0)
            if depth[node] > MAX_NESTING:
                raise invalid(
                    f"{subgraph_label(node - 1)} nests IF/WHILE operations {depth[node]} levels deep; at "
                    f"most {MAX_NESTING} levels of control flow are supported"
                )
            stack.pop()
            continue
        nxt = todo.pop()
        if state[nxt] == 1:
            raise invalid(
                f"{subgraph_label(node - 1)} references {subgraph_label(nxt - 1)}, "
                "which is already on the reference path: subgraph references must not form a cycle"
            )
        if state[nxt] == 0:
            state[nxt] = 1
            stack.append((nxt, edges(nxt)))
    for node, s in enumerate(state):
        if s == 0:
            raise invalid(
                f"{subgraph_label(node - 1)} is never referenced from the main subgraph; unused subgraphs are invalid"
            )
