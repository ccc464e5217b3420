"""Per-operation profiles: onnxruntime's trace parsed on a real model, layers matched across the
converter and onnxruntime's fusions, the summaries and pairs checked against hand-computed values."""

from __future__ import annotations

import glob
import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.bench.ort_profile import parse_trace, profile_onnxruntime
from mlts.bench.profile import OnnxGraphIndex, driver_entries, pair_layers, reference_entries, summarize
from mlts.convert.converter import convert
from mlts.hal.enums import OperationType as Op
from mlts.hal.operation_times import from_pairs


def conv_bn_relu_model() -> onnx.ModelProto:
    """x[1,3,16,16] -> conv1 -> bn1 -> relu1 -> conv2 -> relu2 -> pool -> flat -> softmax: named nodes."""
    rng = np.random.default_rng(5)

    def init(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [
        init("w1", (8, 3, 3, 3)),
        init("w2", (8, 8, 3, 3)),
        init("b2", (8,)),
        numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "scale"),
        init("bias", (8,)),
        init("mean", (8,)),
        numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Softmax", ["f"], ["y"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def _runs(n):
    def run(fn):
        out = []
        for i in range(n):
            fn(i)
            out.append(0.001)
        return out

    return run


def test_onnxruntime_profile_of_a_real_model_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "mlts-ort-profile-*")))
    model = conv_bn_relu_model()
    feeds = [[np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)]]
    prof = profile_onnxruntime(model.SerializeToString(), 1, feeds, _runs(4))
    assert prof.runs == 4
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "mlts-ort-profile-*"))) == before
    assert list(tmp_path.iterdir()) == []
    types = {n.op_type for n in prof.nodes}
    assert "Conv" in types and "Softmax" in types
    assert all(n.us >= 0 for n in prof.nodes)
    # Every node onnxruntime ran traces back to a node of the graph, fused ones included.
    index = OnnxGraphIndex(model.graph)
    conv = convert(model)
    layers = {o for o in conv.origins if o}
    convs = [n for n in prof.nodes if n.op_type == "Conv"]
    assert {index.layer_of(n.name, layers) for n in convs} == {"conv1", "conv2"}
    entries = reference_entries(prof, model.graph, conv.origins)
    assert {e["layer"] for e in entries if e["type"] == "Conv"} == {"conv1", "conv2"}


def test_converter_records_the_onnx_node_of_each_operation():
    conv = convert(conv_bn_relu_model())
    ops = conv.model.main.operations
    assert len(conv.origins) == len(ops)
    by_origin = {}
    for op, origin in zip(ops, conv.origins, strict=True):
        by_origin.setdefault(origin, []).append(Op(op.type).name)
    # BatchNormalization and Relu fold into conv1's CONV_2D; relu2 into conv2's.
    assert "CONV_2D" in by_origin["conv1"] and "CONV_2D" in by_origin["conv2"]
    assert "bn1" not in by_origin and "relu1" not in by_origin and "relu2" not in by_origin
    assert "SOFTMAX" in by_origin["softmax"]


def _event(name, ts, dur, op="Conv"):
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}


def test_trace_parsing_takes_each_nodes_median_over_runs():
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
        {"cat": "Session", "name": "model_run", "ts": 400, "dur": 100},
        _event("a", 10, 50),  # a cold first run
        _event("a", 210, 5),
        _event("a", 410, 7),
        _event("b", 20, 3, "Relu"),
        _event("b", 220, 1, "Relu"),
        _event("b", 420, 1, "Relu"),
        _event("b", 425, 1, "Relu"),  # two kernel calls in one run add up: runs of 3, 1 and 2 µs
        _event("c", 150, 99),  # between runs: session overhead, not a run's
        {"cat": "Node", "name": "a_fence_before", "ts": 12, "dur": 1},
    ]
    nodes, runs = parse_trace(events)
    assert runs == 3
    assert [(n.name, n.op_type, n.us) for n in nodes] == [("a", "Conv", 7.0), ("b", "Relu", 2.0)]


@pytest.mark.parametrize("trace", [{}, [], [{"cat": "Node", "name": "a_kernel_time", "ts": 1}]])
def test_a_trace_that_is_not_onnxruntimes_is_refused(trace):
    with pytest.raises(ValueError):
        parse_trace(trace)


def test_summaries_and_layer_pairs():
    records = [from_pairs([(0, 1000), (1, 3000), (2, 500)]), from_pairs([(0, 3000), (1, 5000), (2, 500)])]
    entries = driver_entries(records, [Op.CONV_2D, Op.CONV_2D, Op.SOFTMAX], ["l1", "l2", None])
    assert [(e["name"], e["us"]) for e in entries] == [
        ("#0 CONV_2D", 2.0),
        ("#1 CONV_2D", 4.0),
        ("#2 SOFTMAX", 0.5),
    ]
    s = summarize(entries, 2)
    assert s["total_us"] == 6.5
    assert [t["name"] for t in s["top"]] == ["#1 CONV_2D", "#0 CONV_2D", "#2 SOFTMAX"]
    assert s["by_type"][0] == {"type": "CONV_2D", "count": 2, "us": 6.0, "share": 6.0 / 6.5}
    assert s["by_layer"] == {"l1": 2.0, "l2": 4.0}
    pairs = pair_layers(s["by_layer"], {"l1": 0.5, "l2": 2.0, "other": 1.0})
    assert [(p["layer"], p["ratio"]) for p in pairs["pairs"]] == [("l2", 2.0), ("l1", 4.0)]
    # l1 loses 1.5 µs and l2 2.0 µs: l2 comes first and is the kernel to look at first.
    assert pairs["slowest"] == "l2"
    assert pairs["coverage"] == {"driver": 1.0, "reference": 2.5 / 3.5}
