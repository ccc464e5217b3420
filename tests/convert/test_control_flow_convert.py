"""ONNX If -> NNAPI IF, run on the sample driver, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from driver.executor import run_model
from mlts.convert import convert
from mlts.convert.errors import ConversionError
from mlts.hal.enums import OperationType


def _branch(name: str, op: str, extra: list | None = None) -> onnx.GraphProto:
    """A branch reading the outer x and y (and the outer constant w) by name."""
    nodes = [helper.make_node(op, ["x", "y"], ["t"]), helper.make_node("Add", ["t", "w"], [f"{name}_out"])]
    nodes += extra or []
    out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])
    return helper.make_graph(nodes, name, [], [out])


def if_model(else_shape=(2, 3)) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")
    then_g = _branch("then", "Add")
    else_g = _branch("else", "Mul")
    if else_shape != (2, 3):
        else_g = helper.make_graph(
            [helper.make_node("Concat", ["x", "y"], ["else_out"], axis=0)],
            "else",
            [],
            [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, list(else_shape))],
        )
    node = helper.make_node("If", ["cond"], ["out"], then_branch=then_g, else_branch=else_g)
    relu = helper.make_node("Relu", ["out"], ["z"])
    graph = helper.make_graph(
        [node, relu],
        "if_model",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, [1]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("cond", [True, False])
def test_if_matches_onnxruntime(cond: bool) -> None:
    proto = if_model()
    conv = convert(proto)
    assert [op.type for op in conv.model.main.operations].count(OperationType.IF) == 1
    assert len(conv.model.referenced) == 2
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    feeds = {"cond": np.array([cond]), "x": x, "y": y}
    (want,) = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    (got,) = run_model(conv.model, [feeds[i.name] for i in conv.inputs])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=5 * 2**-23)
    # The float64 reference written from the spec.
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(
        got, np.maximum((x64 + y64 if cond else x64 * y64) + 0.5, 0), atol=1e-5, rtol=1e-6
    )


def test_branches_of_different_shapes_are_refused_in_one_line() -> None:
    with pytest.raises(ConversionError, match="the branches give outputs of shapes") as e:
        convert(if_model(else_shape=(4, 3)))
    assert "\n" not in str(e.value)


def loop_model(trip: int) -> onnx.ModelProto:
    """v = v * 0.5 + x, `trip` times (a loop-carried state; x read from outside the body)."""
    half = numpy_helper.from_array(np.full((3,), 0.5, np.float32), "half")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mul", ["v_in", "half"], ["h"]),
            helper.make_node("Add", ["h", "x"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [3]),
        ],
    )
    m = numpy_helper.from_array(np.array(trip, np.int64), "M")
    t = numpy_helper.from_array(np.array(True), "T")
    node = helper.make_node("Loop", ["M", "T", "v0"], ["v"], body=body)
    graph = helper.make_graph(
        [node],
        "loop_model",
        [
            helper.make_tensor_value_info("v0", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [3])],
        [m, t, half],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("trip", [0, 1, 7])
def test_loop_with_a_carried_state_matches_onnxruntime(trip: int) -> None:
    proto = loop_model(trip)
    conv = convert(proto)
    assert [op.type for op in conv.model.main.operations] == [OperationType.WHILE]
    v0 = np.array([1.0, -2.0, 3.0], np.float32)
    x = np.array([0.25, 0.5, -1.0], np.float32)
    feeds = {"v0": v0, "x": x}
    (want,) = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    (got,) = run_model(conv.model, [feeds[i.name] for i in conv.inputs])
    ref = v0.astype(np.float64)
    for _ in range(trip):
        ref = ref * 0.5 + x
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=5 * 2**-23)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-6)


def refine_model(trip: int | None, shape=(3,), tol: float = 1e-4, initial: str = "const") -> onnx.ModelProto:
    """v = v * 0.5 + x while the mean squared change is above `tol` (at most `trip` times): a condition
    the body computes from the data. `initial` "runtime": the loop starts only when mean(x) > 0."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v_in", "half"], ["h"]),
            helper.make_node("Add", ["h", "x"], ["v_out"]),
            helper.make_node("Sub", ["v_out", "v_in"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["d2"]),
            helper.make_node("ReduceMean", ["d2"], ["msd"], keepdims=1),
            helper.make_node("Greater", ["msd", "tol"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, None),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, list(shape)),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [1] * len(shape)),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, list(shape)),
        ],
    )
    inits = [
        numpy_helper.from_array(np.full(shape, 0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(tol, np.float32), "tol"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    nodes = []
    m_name = ""
    if trip is not None:
        inits.append(numpy_helper.from_array(np.array(trip, np.int64), "M"))
        m_name = "M"
    if initial == "runtime":
        nodes += [
            helper.make_node("ReduceMean", ["x"], ["xm"], keepdims=1),
            helper.make_node("Reshape", ["xm", "one"], ["xm1"]),
            helper.make_node("Greater", ["xm1", "zero"], ["c0"]),
        ]
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
        cond0 = "c0"
    else:
        inits.append(numpy_helper.from_array(np.array(True), "T"))
        cond0 = "T"
    nodes.append(helper.make_node("Loop", [m_name, cond0, "v0"], ["v"], body=body))
    graph = helper.make_graph(
        nodes,
        "refine",
        [
            helper.make_tensor_value_info("v0", TensorProto.FLOAT, list(shape)),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
        ],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, list(shape))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def _refine_reference(v0, x, trip, tol, start=True) -> tuple[np.ndarray, int]:
    """ONNX Loop semantics in float64: run while the condition holds and fewer than trip iterations ran."""
    v, x64, cond, i = v0.astype(np.float64), x.astype(np.float64), start, 0
    while cond and (trip is None or i < trip):
        new = v * 0.5 + x64
        cond = bool(np.mean((new - v) ** 2) > tol)
        v, i = new, i + 1
    return v, i


@pytest.mark.parametrize(
    "trip, shape, initial",
    [
        (50, (3,), "const"),
        (None, (3,), "const"),
        (3, (3,), "const"),
        (50, (4, 5), "const"),
        (50, (4, 5), "runtime"),
    ],
)
def test_loop_with_a_data_dependent_condition_matches_onnxruntime(trip, shape, initial) -> None:
    tol = 1e-4
    proto = refine_model(trip, shape, tol, initial)
    conv = convert(proto)
    assert [op.type for op in conv.model.main.operations][-1] == OperationType.WHILE
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    counts = set()
    for seed in range(4):
        rng = np.random.default_rng(seed)
        v0 = (rng.standard_normal(shape) * 4).astype(np.float32)
        x = (rng.standard_normal(shape) + (0.3 if seed % 2 else -0.3)).astype(np.float32)
        feeds = {"v0": v0, "x": x}
        (want,) = session.run(None, feeds)
        (got,) = run_model(conv.model, [feeds[i.name] for i in conv.inputs])
        start = initial == "const" or float(np.mean(x.astype(np.float64))) > 0
        ref, iterations = _refine_reference(v0, x, trip, tol, start)
        counts.add(iterations)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=5 * 2**-23)
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
    # The number of iterations depends on the data (or is the trip count when that ends the loop first).
    assert len(counts) > 1 or counts == {3} or (initial == "runtime" and 0 in counts)


def test_loop_condition_of_more_than_one_value_is_refused() -> None:
    proto = refine_model(10, (2, 3))
    body = proto.graph.node[0].attribute[0].g
    body.node[4].attribute[0].i = 0  # ReduceMean without keepdims... and over one axis only: [2] values
    body.node[4].attribute.append(helper.make_attribute("axes", [1]))
    with pytest.raises(ConversionError, match="condition must be a BOOL tensor of one value") as e:
        convert(proto)
    assert "\n" not in str(e.value)


def test_loop_whose_passed_through_condition_starts_false_runs_no_iteration() -> None:
    proto = loop_model(7)
    t = next(i for i in proto.graph.initializer if i.name == "T")
    t.CopyFrom(numpy_helper.from_array(np.array(False), "T"))
    conv = convert(proto)
    v0 = np.array([1.0, -2.0, 3.0], np.float32)
    x = np.array([0.25, 0.5, -1.0], np.float32)
    (want,) = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"v0": v0, "x": x}
    )
    (got,) = run_model(conv.model, [{"v0": v0, "x": x}[i.name] for i in conv.inputs])
    np.testing.assert_array_equal(got, v0)
    np.testing.assert_array_equal(want, v0)
