"""Parameter and multiply-accumulate counts of ONNX models, counted the way the MobileNet papers do."""

from __future__ import annotations

import math

import onnx
from onnx import shape_inference

# Trainable parameters: which inputs of which ops count. BatchNormalization's
# running mean and variance are statistics, not weights, so they are left out.
_WEIGHT_INPUTS = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (1, 2),
    "MatMul": (0, 1),
    "BatchNormalization": (1, 2),
    "LSTM": (1, 2, 3, 7),  # W, R, B, peepholes P
}


def count_params(model: onnx.ModelProto) -> int:
    """Trainable parameters: elements of constant Conv/Gemm/MatMul/LSTM weights and biases plus BN gamma and beta.

    A MatMul's bias is the constant of the Add that reads its output. Each
    initializer counts once even when several nodes share it.
    """
    sizes = {t.name: math.prod(t.dims) for t in model.graph.initializer}
    matmul_outputs = {n.output[0] for n in model.graph.node if n.op_type == "MatMul"}
    counted: set[str] = set()
    for node in model.graph.node:
        for index in _WEIGHT_INPUTS.get(node.op_type, ()):
            if index < len(node.input) and node.input[index] in sizes:
                counted.add(node.input[index])
        if node.op_type == "Add" and any(i in matmul_outputs for i in node.input):
            counted.update(i for i in node.input if i in sizes)
    return sum(sizes[name] for name in counted)


def _known_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    shapes: dict[str, list[int]] = {t.name: list(t.dims) for t in inferred.graph.initializer}
    g = inferred.graph
    for info in (*g.input, *g.value_info, *g.output):
        dims = info.type.tensor_type.shape.dim
        if info.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = [d.dim_value for d in dims]
    return shapes


def _shape(shapes: dict[str, list[int]], node: onnx.NodeProto, name: str) -> list[int]:
    if name not in shapes:
        raise ValueError(
            f"{node.op_type} node {node.name!r}: shape of {name!r} is unknown after shape inference; "
            "MACs need static shapes (fix the input dimensions)"
        )
    return shapes[name]


def count_macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of Conv (N*OH*OW*Cout*KH*KW*Cin/group), Gemm (M*N*K), MatMul and LSTM.

    An LSTM costs steps*batch*(4H*(input+H) + 3H peephole) per direction: the gate
    products; element-wise gate arithmetic is not counted.
    """
    shapes = _known_shapes(model)
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            out = _shape(shapes, node, node.output[0])
            weight = _shape(shapes, node, node.input[1])
            # weight is [Cout, Cin/group, *kernel]: one output element costs prod(weight[1:]).
            total += math.prod(out) * math.prod(weight[1:])
        elif node.op_type == "Gemm":
            a = _shape(shapes, node, node.input[0])
            out = _shape(shapes, node, node.output[0])
            trans_a = next((at.i for at in node.attribute if at.name == "transA"), 0)
            total += out[0] * out[1] * (a[0] if trans_a else a[1])
        elif node.op_type == "MatMul":
            a = _shape(shapes, node, node.input[0])
            out = _shape(shapes, node, node.output[0])
            total += math.prod(out) * a[-1]
        elif node.op_type == "LSTM":
            x = _shape(shapes, node, node.input[0])
            w = _shape(shapes, node, node.input[1])  # [directions, 4H, input]
            r = _shape(shapes, node, node.input[2])  # [directions, 4H, H]
            peep = 3 * r[2] if len(node.input) > 7 and node.input[7] else 0
            total += x[0] * x[1] * w[0] * (w[1] * (w[2] + r[2]) + peep)
    return total
