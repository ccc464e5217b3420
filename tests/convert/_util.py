"""Helpers for converter tests: tiny ONNX models, onnxruntime references, CTS tolerance checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.convert import Conversion, ConversionError, convert
from mlts.hal.validate import validate_model

ATOL = 1e-5
RTOL = 5 * 2**-23


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, Sequence[int | str]],
    outputs: Sequence[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 13,
) -> onnx.ModelProto:
    """A model (IR 10) with float32 inputs of the given shapes and outputs of unspecified shape."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_nn(conv: Conversion, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run through the sample driver; skip (naming the op) when the driver lacks a kernel the model uses."""
    import pytest

    from driver.executor import run_model
    from driver.ops import kernel_for
    from mlts.hal.enums import OperationType

    missing = sorted(
        {OperationType(op.type).name for op in conv.model.main.operations if kernel_for(op.type) is None}
    )
    if missing:
        pytest.skip(f"the sample driver has no kernel for {', '.join(missing)} yet")

    return run_model(conv.model, [feeds[i.name] for i in conv.inputs])


def random_feeds(model: onnx.ModelProto, seed: int = 0, batch_size: int = 1) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs; symbolic dims become `batch_size`."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value or batch_size for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def assert_close(actual: np.ndarray, expected: np.ndarray, atol: float = ATOL, rtol: float = RTOL) -> None:
    """The CTS rule: |actual - expected| <= atol + rtol*|expected| elementwise, same shape."""
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == np.float32, actual.dtype
    err = np.abs(actual.astype(np.float64) - expected) - (atol + rtol * np.abs(expected.astype(np.float64)))
    worst = float(err.max()) if err.size else 0.0
    assert worst <= 0, (
        f"exceeds tolerance by {worst:.3g} (max abs diff {np.abs(actual - expected).max():.3g})"
    )


def check(model: onnx.ModelProto, atol: float = ATOL, seed: int = 0, **kwargs) -> Conversion:
    """Convert, run through the sample driver and onnxruntime on the same random inputs, compare."""
    feeds = random_feeds(model, seed, kwargs.get("batch_size", 1))
    conv = convert(model, **kwargs)
    expected = run_ort(model, feeds)
    actual = run_nn(conv, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert_close(a, e, atol=atol)
    return conv


def op_names(conv: Conversion) -> list[str]:
    from mlts.hal.enums import OperationType

    return [OperationType(op.type).name for op in conv.model.main.operations]


def run_converted(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[Conversion, list[np.ndarray]]:
    """Convert, validate the NN model and run it on the sample driver's executor."""
    from driver.executor import run_model

    conv = convert(model)
    validate_model(conv.model)
    return conv, run_model(conv.model, [feeds[i.name] for i in conv.inputs])


def error_of(model: onnx.ModelProto) -> str:
    """The one-line ConversionError message converting `model` raises."""
    with pytest.raises(ConversionError) as info:
        convert(model)
    message = str(info.value)
    assert "\n" not in message
    return message
