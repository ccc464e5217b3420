"""Constant folding: a node whose inputs are all constants is evaluated once with onnx.reference."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, helper

from mlts.convert.context import where
from mlts.convert.errors import ConversionError

# Ops that must not be folded: their value differs from run to run.
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def fold_node(node: NodeProto, values: dict[str, np.ndarray], opset: int) -> dict[str, np.ndarray]:
    """The outputs of `node` computed from the constant `values` of its inputs."""
    from onnx.reference import ReferenceEvaluator  # heavy import, needed only when folding

    inputs = [n for n in node.input if n]
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
    return all(n in consts for n in node.input if n)
