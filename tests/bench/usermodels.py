"""Small hand-built ONNX exports with what real ones have: symbolic dims, configuration inputs, state.

Each builder writes the model to `path` and returns it; the weights are seeded.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(nodes, name, inputs, outputs, inits, path, opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what onnxruntime reads
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return model


def symbolic_dense(path, channels: int = 4) -> onnx.ModelProto:
    """image [N, 3, H, W] (H, W symbolic) -> 3x3 conv -> Relu -> 1x1 conv -> Sigmoid: maps [N, 1, H, W]."""
    rng = np.random.default_rng(11)
    w1 = numpy_helper.from_array(rng.normal(0, 0.4, (channels, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.4, (1, channels, 1, 1)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Sigmoid", ["c2"], ["maps"]),
    ]
    return _save(
        nodes,
        "dense",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "height", "width"])],
        [helper.make_tensor_value_info("maps", TensorProto.FLOAT, ["N", 1, "height", "width"])],
        [w1, w2],
        path,
    )


def rate_scaled(path, samples: int = 2048) -> onnx.ModelProto:
    """audio [1, samples] and a rank-0 int64 sample_rate: out = audio * (sample_rate / 1000)."""
    k = numpy_helper.from_array(np.array(1000.0, np.float32), "k")
    nodes = [
        helper.make_node("Cast", ["sample_rate"], ["rate_f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["rate_f", "k"], ["gain"]),
        helper.make_node("Mul", ["audio", "gain"], ["out"]),
    ]
    return _save(
        nodes,
        "rate",
        [
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, samples]),
            helper.make_tensor_value_info("sample_rate", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, samples])],
        [k],
        path,
    )


def if_on_rate(path, samples: int = 2048) -> onnx.ModelProto:
    """An If on Equal(sample_rate, 16000) whose branches read the graph input audio: x2 or x0.5."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["audio", "two"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, samples])],
        [two],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["audio", "half"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, samples])],
        [half],
    )
    k = numpy_helper.from_array(np.array(16000, np.int64), "k")
    nodes = [
        helper.make_node("Equal", ["sample_rate", "k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["out"], then_branch=then_g, else_branch=else_g),
    ]
    return _save(
        nodes,
        "if_rate",
        [
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, samples]),
            helper.make_tensor_value_info("sample_rate", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, samples])],
        [k],
        path,
    )


def lstm_with_state(path, steps: int = 5, features: int = 6, hidden: int = 4) -> onnx.ModelProto:
    """x [steps, 1, features] and h0 [1, 1, hidden] (LSTM initial_h) -> Y [steps, 1, 1, hidden]."""
    rng = np.random.default_rng(12)
    w = numpy_helper.from_array(rng.normal(0, 0.5, (1, 4 * hidden, features)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.normal(0, 0.5, (1, 4 * hidden, hidden)).astype(np.float32), "R")
    node = helper.make_node("LSTM", ["x", "W", "R", "", "", "h0"], ["y"], hidden_size=hidden)
    return _save(
        [node],
        "lstm",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, features]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 1, hidden]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 1, 1, hidden])],
        [w, r],
        path,
    )


def token_classifier(path, vocab: int = 20, classes: int = 5) -> onnx.ModelProto:
    """ids [1, 8] int64 -> Gather(table [vocab, classes]) -> ReduceMean over tokens -> Softmax: [1, classes]."""
    rng = np.random.default_rng(13)
    table = numpy_helper.from_array(rng.normal(0, 1, (vocab, classes)).astype(np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("ReduceMean", ["emb"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Softmax", ["mean"], ["probs"], axis=-1),
    ]
    return _save(
        nodes,
        "tokens",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])],
        [table],
        path,
    )
