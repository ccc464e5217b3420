"""Patterns of exported transformers and mobile nets: LayerNormalization (op and decomposed), Erf, Gelu
(op, erf form, tanh form), HardSwish (op and x*HardSigmoid(x)), Softmax on any axis, MatMul of two
computed tensors (attention), against onnxruntime within the CTS float32 rule (1e-5 + 5 ulp), and
Erf against float64 math.erf within its documented bound.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

from mlts.convert import convert
from mlts.convert.ops.transformer import ERF_MAX_ERROR
from mlts.hal.validate import validate_model
from tests.convert._util import check, error_of, make_model, op_names

N = helper.make_node


def _model(
    nodes, inputs: dict, outputs: list[str], inits: dict | None = None, opset: int = 17
) -> onnx.ModelProto:
    return make_model(nodes, inputs, outputs, inits, opset=opset)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from driver.executor import run_model

    conv = convert(model)
    validate_model(conv.model)
    return run_model(conv.model, [feeds[i.name] for i in conv.inputs])


def test_erf_error_is_within_its_documented_bound() -> None:
    x = (np.arange(-10000, 10001) * 6e-4).astype(np.float32)
    model = _model([N("Erf", ["x"], ["y"])], {"x": [x.size]}, ["y"], opset=13)
    (y,) = _run(model, {"x": x})
    exact = np.array([math.erf(float(v)) for v in x])
    assert float(np.max(np.abs(y - exact))) <= ERF_MAX_ERROR
    assert y[x.size // 2] == 0.0 and np.all(np.sign(y) == np.sign(x))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_op_without_the_extension(approximate: str) -> None:
    model = _model([N("Gelu", ["x"], ["y"], approximate=approximate)], {"x": [2, 5, 16]}, ["y"], opset=20)
    conv = check(model)
    assert "TANH" in op_names(conv) if approximate == "tanh" else "EXP" in op_names(conv)


def _gelu_erf_form() -> onnx.ModelProto:
    """x * 0.5 * (1 + erf(x / sqrt 2)), as PyTorch exports nn.GELU() before opset 20."""
    nodes = [
        N("Div", ["x", "sqrt2"], ["d"]),
        N("Erf", ["d"], ["e"]),
        N("Add", ["e", "one"], ["p"]),
        N("Mul", ["x", "p"], ["m"]),
        N("Mul", ["m", "half"], ["y"]),
    ]
    inits = {
        "sqrt2": np.array(math.sqrt(2), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    return _model(nodes, {"x": [1, 8, 32]}, ["y"], inits, opset=13)


def _gelu_tanh_form() -> onnx.ModelProto:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    nodes = [
        N("Pow", ["x", "three"], ["c"]),
        N("Mul", ["c", "k"], ["ck"]),
        N("Add", ["x", "ck"], ["s"]),
        N("Mul", ["s", "r"], ["sr"]),
        N("Tanh", ["sr"], ["t"]),
        N("Add", ["t", "one"], ["p"]),
        N("Mul", ["x", "half"], ["hx"]),
        N("Mul", ["hx", "p"], ["y"]),
    ]
    inits = {
        "three": np.array(3.0, np.float32),
        "k": np.array(0.044715, np.float32),
        "r": np.array(math.sqrt(2 / math.pi), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    return _model(nodes, {"x": [1, 8, 32]}, ["y"], inits, opset=13)


@pytest.mark.parametrize("build", [_gelu_erf_form, _gelu_tanh_form])
def test_gelu_as_exporters_write_it(build) -> None:
    check(build())


@pytest.mark.parametrize(
    ("shape", "axis", "bias", "extra_outputs"),
    [
        ([2, 5, 16], -1, True, False),
        ([2, 5, 16], 1, False, False),
        ([1, 4, 6, 6], 1, True, False),
        ([3, 12], -1, True, True),
    ],
)
def test_layer_normalization_op(shape: list[int], axis: int, bias: bool, extra_outputs: bool) -> None:
    rng = np.random.default_rng(4)
    norm = shape[axis:]
    inits = {"scale": rng.standard_normal(norm).astype(np.float32)}
    ins = ["x", "scale"]
    if bias:
        inits["b"] = rng.standard_normal(norm).astype(np.float32)
        ins.append("b")
    outs = ["y", "mean", "inv"] if extra_outputs else ["y"]
    node = N("LayerNormalization", ins, outs, axis=axis, epsilon=1e-5)
    conv = check(_model([node], {"x": shape}, outs, inits))
    assert "MEAN" in op_names(conv) and "SQRT" in op_names(conv)


def test_layer_normalization_decomposed() -> None:
    """ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add: how older exporters write LayerNorm."""
    rng = np.random.default_rng(5)
    nodes = [
        N("ReduceMean", ["x"], ["mu"], axes=[-1]),
        N("Sub", ["x", "mu"], ["d"]),
        N("Pow", ["d", "two"], ["sq"]),
        N("ReduceMean", ["sq"], ["var"], axes=[-1]),
        N("Add", ["var", "eps"], ["ve"]),
        N("Sqrt", ["ve"], ["std"]),
        N("Div", ["d", "std"], ["n"]),
        N("Mul", ["n", "g"], ["s"]),
        N("Add", ["s", "b"], ["y"]),
    ]
    inits = {
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "g": rng.standard_normal(24).astype(np.float32),
        "b": rng.standard_normal(24).astype(np.float32),
    }
    check(_model(nodes, {"x": [1, 10, 24]}, ["y"], inits, opset=13))


def test_layer_normalization_refusals() -> None:
    node = N("LayerNormalization", ["x", "s"], ["y"], stash_type=0, name="ln")
    model = _model([node], {"x": [2, 4]}, ["y"], {"s": np.ones(4, np.float32)})
    assert error_of(model).startswith("LayerNormalization node 'ln' has stash_type 0; only 1 (float32)")


def test_hard_swish_op_and_pattern() -> None:
    op = _model([N("HardSwish", ["x"], ["y"])], {"x": [1, 4, 5, 5]}, ["y"], opset=14)
    assert "HARD_SWISH" in op_names(check(op))
    pattern = _model(
        [N("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5), N("Mul", ["x", "h"], ["y"])],
        {"x": [2, 7]},
        ["y"],
        opset=14,
    )
    conv = check(pattern)
    assert op_names(conv) == ["HARD_SWISH"]
    assert "converted 1 x*HardSigmoid(x) to HARD_SWISH" in conv.notes
    other = _model(
        [N("HardSigmoid", ["x"], ["h"], alpha=0.2, beta=0.5), N("Mul", ["x", "h"], ["y"])],
        {"x": [2, 7]},
        ["y"],
    )
    assert "HARD_SWISH" not in op_names(check(other))


@pytest.mark.parametrize(
    ("shape", "axis"), [([2, 3, 4, 5], 1), ([2, 3, 4, 5], 0), ([2, 3, 4, 5], -2), ([6, 7], 0)]
)
def test_softmax_on_any_axis(shape: list[int], axis: int) -> None:
    # A Conv first makes the rank-4 tensor NHWC inside the graph: the axis must be remapped.
    if len(shape) == 4:
        w = np.random.default_rng(1).standard_normal((shape[1], shape[1], 1, 1)).astype(np.float32)
        nodes = [N("Conv", ["x", "w"], ["c"]), N("Softmax", ["c"], ["y"], axis=axis)]
        check(_model(nodes, {"x": shape}, ["y"], {"w": w}, opset=13))
    else:
        check(_model([N("Softmax", ["x"], ["y"], axis=axis)], {"x": shape}, ["y"], opset=13))


def test_attention_matmuls_of_computed_tensors() -> None:
    """softmax(q k^T / sqrt d) v with q, k, v [B, H, S, D] computed at run time."""
    b, h, s, d = 2, 3, 5, 4
    nodes = [
        N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        N("MatMul", ["q", "kt"], ["scores"]),
        N("Mul", ["scores", "scale"], ["scaled"]),
        N("Softmax", ["scaled"], ["p"], axis=-1),
        N("MatMul", ["p", "v"], ["y"]),
    ]
    inits = {"scale": np.array(1 / math.sqrt(d), np.float32)}
    model = _model(nodes, {"q": [b, h, s, d], "k": [b, h, s, d], "v": [b, h, s, d]}, ["y"], inits, opset=13)
    conv = check(model)
    names = op_names(conv)
    assert names.count("FULLY_CONNECTED") == 2 * b * h and "SPLIT" in names


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([3, 4], [4, 5]),
        ([2, 3, 4], [4, 5]),
        ([2, 3, 4], [2, 4, 5]),
        ([1, 3, 4], [2, 4, 6]),
        ([4], [4, 3]),
        ([3, 4], [4]),
        ([2, 3, 4, 5], [5]),
        ([2, 1, 3, 4], [1, 3, 4, 2]),
        ([1, 3, 4], [2, 3, 4, 6]),
    ],
)
def test_matmul_of_two_run_time_tensors_broadcasts(a: list[int], b: list[int]) -> None:
    model = _model([N("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"], opset=13)
    check(model)


def test_matmul_with_constant_first_input() -> None:
    w = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    check(_model([N("MatMul", ["w", "x"], ["y"])], {"x": [2, 4, 5]}, ["y"], {"w": w}, opset=13))


def test_matmul_batch_beyond_rank_4_is_refused() -> None:
    model = _model(
        [N("MatMul", ["a", "b"], ["y"], name="mm")], {"a": [2, 2, 2, 3, 4], "b": [2, 2, 2, 4, 3]}, ["y"]
    )
    assert "NNAPI tensors have rank <= 4" in error_of(model)
