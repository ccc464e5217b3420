"""Constant folding: a node whose inputs are all constants is evaluated once with onnx.reference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto, helper

from mlts.convert.context import where
from mlts.convert.errors import ConversionError

# Ops that must not be folded: their value differs from run to run.
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def subgraphs(node: NodeProto) -> list[GraphProto]:
    """The graphs held in `node`'s attributes (If branches, Loop and Scan bodies)."""
    out = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def outer_names(graph: GraphProto) -> list[str]:
    """Names `graph` (and the graphs nested in it) read but do not define, in first-use order."""
    defined = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    seen: dict[str, None] = {}
    for n in graph.node:
        for name in n.input:
            if name and name not in defined:
                seen.setdefault(name, None)
        for g in subgraphs(n):
            for name in outer_names(g):
                if name not in defined:
                    seen.setdefault(name, None)
        defined.update(o for o in n.output if o)
    for o in graph.output:
        if o.name not in defined:
            seen.setdefault(o.name, None)
    return list(seen)


def reads(node: NodeProto) -> list[str]:
    """Every value `node` reads: its inputs and the outer values of its subgraphs."""
    names = [n for n in node.input if n]
    for g in subgraphs(node):
        names += outer_names(g)
    return list(dict.fromkeys(names))


def fold_node(
    node: NodeProto, values: dict[str, np.ndarray], opset: int, extra: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """The outputs of `node` computed from the constant `values` of its inputs (and of `extra`: the outer
    values its subgraphs read)."""
    from onnx.reference import ReferenceEvaluator  # heavy import, needed only when folding

    inputs = [n for n in node.input if n] + [n for n in extra if n not in node.input]
    graph = helper.make_graph(
        [node],
        "fold",
        [helper.make_empty_tensor_value_info(n) for n in dict.fromkeys(inputs)],
        [helper.make_empty_tensor_value_info(n) for n in node.output if n],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    try:
        results = ReferenceEvaluator(model).run(None, {n: values[n] for n in inputs})
    except Exception as e:  # the reference ops raise many types
        raise ConversionError(
            f"{where(node)}: constant folding failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    return {name: np.asarray(r) for name, r in zip([n for n in node.output if n], results, strict=True)}


def foldable(node: NodeProto, consts: dict[str, np.ndarray]) -> bool:
    """Every input is a known constant (nodes without inputs, such as Constant, qualify)."""
    if node.op_type in NONDETERMINISTIC or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "DequantizeLinear":
        return False  # a quantized constant stays quantized (see ops/qdq.py)
    return all(n in consts for n in reads(node))
