"""The golden run's vectorised kernels agree with onnxruntime and with onnx.reference's loops.

Each case is one ONNX node on seeded random data: the float64 kernel (through the golden run) is
compared with onnxruntime's float32 result (an independent implementation) within float32 rounding,
and, where onnx.reference's own kernel is correct, with it in float64 to 1e-12.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from mlts.datasets import golden


def _model(node: onnx.NodeProto, x_shape, inits: dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _check(model: onnx.ModelProto, x: np.ndarray, against_reference: bool = True) -> None:
    ours = golden.reference_outputs(model, [{"x": x}])[0][0]
    assert ours.dtype == np.float64
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"x": x})[0]
    assert ours.shape == theirs.shape
    scale = max(1.0, float(np.abs(theirs).max()))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5 * scale)
    if against_reference:
        slow = ReferenceEvaluator(golden.float64_copy(model)).run(None, {"x": x.astype(np.float64)})[0]
        np.testing.assert_allclose(ours, slow, rtol=1e-12, atol=1e-12)


POOLS = [
    ("MaxPool", [1, 3, 9, 11], {"kernel_shape": [3, 3]}),
    ("MaxPool", [2, 2, 10, 10], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", [1, 2, 11, 9], {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", [1, 2, 12, 12], {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
    ("MaxPool", [1, 2, 13, 12], {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("MaxPool", [1, 2, 13, 12], {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("MaxPool", [1, 2, 10, 10], {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 2]}),
    ("MaxPool", [1, 3, 17], {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}),
    ("AveragePool", [1, 3, 9, 11], {"kernel_shape": [3, 3]}),
    ("AveragePool", [1, 2, 10, 10], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        [1, 2, 10, 10],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", [1, 2, 11, 9], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    (
        "AveragePool",
        [1, 2, 11, 9],
        {
            "kernel_shape": [2, 3],
            "strides": [2, 2],
            "pads": [1, 0, 0, 1],
            "ceil_mode": 1,
            "count_include_pad": 1,
        },
    ),
    ("AveragePool", [1, 2, 13, 12], {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("AveragePool", [1, 2, 12, 12], {"kernel_shape": [2, 2], "auto_pad": "VALID", "strides": [2, 2]}),
]


@pytest.mark.parametrize("op,shape,attrs", POOLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(POOLS)])
def test_pools(op, shape, attrs):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    model = _model(helper.make_node(op, ["x"], ["y"], **attrs), shape, {}, 19 if "dilations" in attrs else 13)
    # onnx.reference's ceil_mode splits the extra pad over both ends and its SAME_LOWER output is a
    # row short: onnxruntime alone judges those.
    _check(model, x, against_reference="ceil_mode" not in attrs and attrs.get("auto_pad") != "SAME_LOWER")


TRANSPOSES = [
    ([1, 4, 5, 5], (4, 3, 2, 2), {"strides": [2, 2]}),
    ([2, 4, 5, 6], (4, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ([1, 4, 5, 5], (4, 1, 3, 3), {"group": 2, "strides": [2, 1], "pads": [0, 1, 1, 0]}),
    ([1, 2, 4, 4], (2, 3, 3, 3), {"dilations": [2, 2], "strides": [1, 1]}),
    ([1, 2, 5, 5], (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [10, 10]}),
    ([1, 2, 5, 5], (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ([1, 2, 5, 5], (2, 3, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ([1, 3, 16], (3, 2, 4), {"strides": [2], "pads": [1, 1]}),
]


@pytest.mark.parametrize("shape,w_shape,attrs", TRANSPOSES, ids=[str(i) for i in range(len(TRANSPOSES))])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(shape, w_shape, attrs, bias):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    inits = {"w": rng.standard_normal(w_shape).astype(np.float32)}
    names = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
        names.append("b")
    model = _model(helper.make_node("ConvTranspose", names, ["y"], **attrs), shape, inits, 13)
    # onnx.reference's grouped ConvTranspose reshapes the weights wrongly and its col2im refuses
    # output_shape and auto_pad: onnxruntime alone judges those.
    _check(model, x, against_reference=not {"group", "output_shape", "auto_pad"} & set(attrs))


@pytest.mark.parametrize("size", [1, 3, 5])
@pytest.mark.parametrize("batch", [1, 2])
def test_lrn_sums_the_channels_around_each_channel(size, batch):
    x = np.random.default_rng(5).standard_normal((batch, 7, 3, 4)).astype(np.float32)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.75, bias=1.5)
    # onnx.reference's LRN fills in channel 0 only (it loops over the batch): onnxruntime judges.
    _check(_model(node, x.shape, {}, 13), x, against_reference=False)


def test_lrn_of_an_even_size_follows_the_spec_window():
    """Size 4 (onnxruntime takes odd sizes only): channels c-1 .. c+2, by hand in float64."""
    x = np.random.default_rng(8).standard_normal((1, 6, 2, 2)).astype(np.float32)
    node = helper.make_node("LRN", ["x"], ["y"], size=4, alpha=0.25, beta=0.5, bias=2.0)
    (ours,) = golden.reference_outputs(_model(node, x.shape, {}, 13), [{"x": x}])[0]
    x64 = x.astype(np.float64)
    want = np.empty_like(x64)
    for c in range(6):
        window = np.sum(x64[:, max(0, c - 1) : min(6, c + 3)] ** 2, axis=1)
        want[:, c] = x64[:, c] / (2.0 + 0.25 / 4 * window) ** 0.5
    np.testing.assert_allclose(ours, want, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("attrs", [{"strides": [2], "pads": [3, 3]}, {"group": 2, "dilations": [2]}])
def test_conv_1d_runs_as_2d(attrs):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 4, 40)).astype(np.float32)
    w = rng.standard_normal((6, 4 // attrs.get("group", 1), 7)).astype(np.float32)
    model = _model(helper.make_node("Conv", ["x", "w"], ["y"], **attrs), x.shape, {"w": w}, 13)
    _check(model, x)
