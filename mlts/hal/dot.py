"""Graphviz dump of a Model (NNAPI's graphDump): operations as boxes, operands as ellipses.

The main subgraph is drawn at top level and each referenced subgraph as a
cluster. Constants are small and grey; subgraph inputs and outputs are filled.
A SUBGRAPH operand points (dotted) at the cluster it references.
"""

from __future__ import annotations

from mlts.hal.describe import operand_dims_text, operand_type_name, operation_type_name
from mlts.hal.enums import OperandLifeTime
from mlts.hal.types import Model, Operand, Subgraph

_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)


def quote(text: str) -> str:
    """A dot double-quoted string; newlines become centred line breaks."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'


def _operand_node(model: Model, sg: Subgraph, k: int, i: int, o: Operand) -> str:
    dims = operand_dims_text(o)
    label = f"#{i} {operand_type_name(o.type, model)}" + (f"\n{dims}" if dims else "")
    attrs = ["shape=ellipse"]
    if o.lifetime in _CONSTANT:
        attrs += ["fontsize=8", "color=grey60", "fontcolor=grey40", "style=filled", "fillcolor=grey95"]
    elif o.lifetime == OperandLifeTime.NO_VALUE:
        label = f"#{i} (no value)"
        attrs += ["style=dashed", "fontsize=8", "color=grey60"]
    elif o.lifetime == OperandLifeTime.SUBGRAPH:
        label = f"#{i} subgraph {o.location.offset}"
        attrs += ["style=dotted"]
    if i in sg.input_indexes:
        attrs += ["style=filled", "fillcolor=palegreen", "penwidth=2"]
    elif i in sg.output_indexes:
        attrs += ["style=filled", "fillcolor=lightsalmon", "penwidth=2"]
    return f"{_tensor_id(k, i)} [label={quote(label)}, {', '.join(attrs)}];"


def _tensor_id(k: int, i: int) -> str:
    return f"s{k}_t{i}"


def _op_id(k: int, j: int) -> str:
    return f"s{k}_op{j}"


def _subgraph_body(model: Model, sg: Subgraph, k: int, indent: str) -> tuple[list[str], list[str]]:
    """(node lines, edge lines); edges go at top level so clusters can be linked."""
    nodes = [indent + _operand_node(model, sg, k, i, o) for i, o in enumerate(sg.operands)]
    edges = []
    n = len(sg.operands)
    for j, op in enumerate(sg.operations):
        nodes.append(
            f"{indent}{_op_id(k, j)} [label={quote(operation_type_name(op.type, model))}, shape=box];"
        )
        for pos, i in enumerate(op.inputs):
            if 0 <= i < n:
                edges.append(f"{_tensor_id(k, i)} -> {_op_id(k, j)} [label={quote(str(pos))}, fontsize=8];")
        for i in op.outputs:
            if 0 <= i < n:
                edges.append(f"{_op_id(k, j)} -> {_tensor_id(k, i)};")
    for i, o in enumerate(sg.operands):
        target = o.location.offset + 1  # cluster k+1 draws referenced[k]
        if o.lifetime == OperandLifeTime.SUBGRAPH and 0 < target <= len(model.referenced):
            if model.referenced[target - 1].operands:
                edges.append(
                    f"{_tensor_id(k, i)} -> {_tensor_id(target, 0)} "
                    f"[lhead=cluster_{target}, style=dotted, arrowhead=empty];"
                )
    return nodes, edges


def to_dot(model: Model, *, name: str = "model") -> str:
    """The model as a Graphviz digraph (main subgraph plus one cluster per referenced subgraph)."""
    lines = [
        f"digraph {quote(name)} {{",
        "  compound=true;",
        "  rankdir=TB;",
        '  node [fontname="Helvetica"];',
    ]
    nodes, edges = _subgraph_body(model, model.main, 0, "  ")
    lines += nodes
    for k, sg in enumerate(model.referenced, start=1):
        sub_nodes, sub_edges = _subgraph_body(model, sg, k, "    ")
        lines += [
            f"  subgraph cluster_{k} {{",
            f"    label={quote(f'subgraph {k - 1}')};",
            "    style=rounded;",
        ]
        lines += sub_nodes
        lines.append("  }")
        edges += sub_edges
    lines += ["  " + e for e in edges]
    lines.append("}")
    return "\n".join(lines) + "\n"
