"""Structural tests: what the converter emits (folds, fusions, layout transposes, versioned handlers)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from mlts.convert import ConversionError, convert
from mlts.hal.enums import FusedActivationFunc, OperandLifeTime, OperationType
from tests.convert._util import assert_close, check, make_model, op_names, random_feeds, run_nn, run_ort

N = helper.make_node
R = np.random.default_rng(7)


def f32(*shape: int, positive: bool = False) -> np.ndarray:
    a = R.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def scalar_value(model, index: int):
    """The value of a CONSTANT_COPY scalar operand."""
    op = model.main.operands[index]
    assert op.lifetime == OperandLifeTime.CONSTANT_COPY
    raw = model.operand_values[op.location.offset : op.location.offset + op.location.length]
    return np.frombuffer(raw, dtype={1: np.int32, 6: np.bool_}.get(op.type, np.float32))[0]


def convnet(opset: int = 13, clip6: bool = True):
    inits = {
        "w": f32(8, 3, 3, 3),
        "b": f32(8),
        "g": f32(8, positive=True),
        "be": f32(8),
        "mu": f32(8),
        "var": f32(8, positive=True),
    }
    nodes = [
        N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"]),
    ]
    if clip6:
        inits.update(lo=np.float32(0), hi=np.float32(6))
        nodes.append(N("Clip", ["n", "lo", "hi"], ["r"]))
    else:
        nodes.append(N("Relu", ["n"], ["r"]))
    inits["dw"] = f32(8, 1, 3, 3)
    nodes.append(N("Conv", ["r", "dw"], ["y"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]))
    return make_model(nodes, {"x": ["N", 3, 10, 10]}, ["y"], inits, opset)


def test_batchnorm_folded_and_relu6_fused() -> None:
    conv = check(convnet())
    ops = op_names(conv)
    assert "MUL" not in ops and "ADD" not in ops and "RELU6" not in ops and "RELU" not in ops
    assert any("BatchNormalization into Conv" in n for n in conv.notes)
    first = next(op for op in conv.model.main.operations if op.type == OperationType.CONV_2D)
    assert len(first.inputs) == 13
    assert scalar_value(conv.model, first.inputs[9]) == FusedActivationFunc.RELU6
    assert scalar_value(conv.model, first.inputs[10]) == 0  # layout NHWC (BOOL false)


def test_depthwise_detected_with_multiplier() -> None:
    conv = convert(convnet())
    dw = [op for op in conv.model.main.operations if op.type == OperationType.DEPTHWISE_CONV_2D]
    assert len(dw) == 1 and len(dw[0].inputs) == 14
    assert conv.model.main.operands[dw[0].inputs[1]].dimensions == (1, 3, 3, 8)
    assert scalar_value(conv.model, dw[0].inputs[9]) == 1


def test_two_transposes_with_io_layout_none_without() -> None:
    model = convnet(clip6=False)
    kept = check(model)
    assert op_names(kept).count("TRANSPOSE") == 2
    assert kept.inputs[0].shape == (1, 3, 10, 10) and kept.outputs[0].shape == (1, 8, 5, 5)
    raw = convert(model, keep_io_layout=False)
    assert "TRANSPOSE" not in op_names(raw)
    assert raw.inputs[0].shape == (1, 10, 10, 3) and raw.outputs[0].shape == (1, 5, 5, 8)
    feeds = random_feeds(model)
    (expected,) = run_ort(model, feeds)
    (actual,) = run_nn(raw, {"x": feeds["x"].transpose(0, 2, 3, 1)})
    assert_close(actual, expected.transpose(0, 2, 3, 1))


def test_batch_size_fixes_symbolic_batch() -> None:
    conv = convert(convnet(), batch_size=3)
    assert conv.inputs[0].shape == (3, 3, 10, 10) and conv.outputs[0].shape == (3, 8, 5, 5)
    assert any("batch dimension 'N'" in n for n in conv.notes)


def test_flatten_needs_transpose_only_when_spatial() -> None:
    inits = {"w": f32(4, 3, 3, 3), "fw": f32(2, 4)}
    pooled = [
        N("Conv", ["x", "w"], ["c"]),
        N("GlobalAveragePool", ["c"], ["p"]),
        N("Flatten", ["p"], ["f"]),
        N("Gemm", ["f", "fw"], ["y"], transB=1),
    ]
    assert op_names(check(make_model(pooled, {"x": [1, 3, 6, 6]}, ["y"], inits))).count("TRANSPOSE") == 1
    inits["fw"] = f32(2, 64)
    spatial = [
        N("Conv", ["x", "w"], ["c"]),
        N("Flatten", ["c"], ["f"]),
        N("Gemm", ["f", "fw"], ["y"], transB=1),
    ]
    assert op_names(check(make_model(spatial, {"x": [1, 3, 6, 6]}, ["y"], inits))).count("TRANSPOSE") == 2


def test_per_channel_constant_becomes_channel_vector() -> None:
    inits = {"w": f32(4, 3, 3, 3), "k": f32(4, 1, 1)}
    conv = check(
        make_model(
            [N("Conv", ["x", "w"], ["c"]), N("Mul", ["c", "k"], ["y"])], {"x": [1, 3, 6, 6]}, ["y"], inits
        )
    )
    mul = next(op for op in conv.model.main.operations if op.type == OperationType.MUL)
    assert conv.model.main.operands[mul.inputs[1]].dimensions == (4,)


def test_clip_opset6_attributes_vs_opset11_inputs() -> None:
    old = make_model([N("Clip", ["x"], ["y"], min=0.0, max=6.0)], {"x": [2, 5]}, ["y"], None, opset=10)
    new = make_model(
        [N("Clip", ["x", "lo", "hi"], ["y"])],
        {"x": [2, 5]},
        ["y"],
        {"lo": np.float32(0), "hi": np.float32(6)},
        opset=11,
    )
    assert op_names(check(old)) == ["RELU6"] == op_names(check(new))
    # At opset 11 attributes are not read: a Clip without inputs is unbounded, i.e. dropped.
    assert op_names(
        convert(
            make_model([N("Clip", ["x"], ["t"]), N("Relu", ["t"], ["y"])], {"x": [2, 5]}, ["y"], None, 11)
        )
    ) == ["RELU"]


def test_squeeze_opset11_attr_vs_opset13_input() -> None:
    old = make_model([N("Squeeze", ["x"], ["y"], axes=[1])], {"x": [2, 1, 3]}, ["y"], None, opset=11)
    new = make_model(
        [N("Squeeze", ["x", "ax"], ["y"])], {"x": [2, 1, 3]}, ["y"], {"ax": np.array([1])}, opset=13
    )
    assert check(old).outputs[0].shape == (2, 3) == check(new).outputs[0].shape
    # From opset 13 axes is an input: an attribute is not read and the missing input is an error.
    with pytest.raises(ConversionError, match="Unsqueeze"):
        convert(make_model([N("Unsqueeze", ["x"], ["y"], axes=[1])], {"x": [2, 3]}, ["y"], None, opset=13))


def test_softmax_opset11_flattens_opset13_single_axis() -> None:
    x = {"x": [2, 3, 4]}
    old = check(make_model([N("Softmax", ["x"], ["y"], axis=1)], x, ["y"], None, opset=11))
    new = check(make_model([N("Softmax", ["x"], ["y"], axis=1)], x, ["y"], None, opset=13))
    assert op_names(old) == ["RESHAPE", "SOFTMAX", "RESHAPE"] and op_names(new) == ["SOFTMAX"]


def test_shape_subgraph_folded_to_one_reshape() -> None:
    nodes = [
        N("Shape", ["x"], ["s"]),
        N("Gather", ["s", "i0"], ["n"], axis=0),
        N("Unsqueeze", ["n", "a0"], ["nu"]),
        N("Concat", ["nu", "m1"], ["shape"], axis=0),
        N("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = {"i0": np.array(0), "a0": np.array([0]), "m1": np.array([-1])}
    conv = check(make_model(nodes, {"x": [2, 3, 4]}, ["y"], inits))
    assert op_names(conv) == ["RESHAPE"] and conv.outputs[0].shape == (2, 12)


def test_builder_lifetimes_and_consumers_in_converted_model() -> None:
    conv = convert(convnet())
    sub = conv.model.main
    assert [sub.operands[i].lifetime for i in sub.input_indexes] == [OperandLifeTime.SUBGRAPH_INPUT]
    assert [sub.operands[i].lifetime for i in sub.output_indexes] == [OperandLifeTime.SUBGRAPH_OUTPUT]
    for i, operand in enumerate(sub.operands):
        assert operand.number_of_consumers == sum(op.inputs.count(i) for op in sub.operations)


def test_initializer_listed_as_input_is_a_constant() -> None:
    model = make_model([N("Add", ["x", "k"], ["y"])], {"x": [2, 3], "k": [3]}, ["y"], {"k": f32(3)})
    conv = check(model)
    assert [i.name for i in conv.inputs] == ["x"]


def test_nhwc_io_for_reshape_produced_rank4_output() -> None:
    model = make_model(
        [N("Reshape", ["x", "s"], ["y"])], {"x": [1, 24]}, ["y"], {"s": np.array([1, 2, 3, 4])}
    )
    conv = convert(model, keep_io_layout=False)
    assert conv.outputs[0].shape == (1, 3, 4, 2) and op_names(conv) == ["RESHAPE", "TRANSPOSE"]
    feeds = random_feeds(model)
    (actual,) = run_nn(conv, feeds)
    assert_close(actual, feeds["x"].reshape(1, 2, 3, 4).transpose(0, 2, 3, 1))


def test_reshape_round_trips_cost_nothing() -> None:
    """Unsqueeze then Squeeze (and Reshape chains back to the start) leave no RESHAPE behind."""
    import numpy as np
    from onnx import helper

    from tests.convert._util import make_model, run_converted

    axes = np.array([0, 1], np.int64)
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axes"], ["u"]),
        helper.make_node("Reshape", ["u", "flat"], ["f"]),
        helper.make_node("Reshape", ["f", "back"], ["b"]),
        helper.make_node("Squeeze", ["b", "axes"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    consts = {"axes": axes, "flat": np.array([1, -1], np.int64), "back": np.array([1, 1, 2, 3], np.int64)}
    model = make_model(nodes, {"x": [2, 3]}, ["y"], consts)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    conv, (out,) = run_converted(model, {"x": x})
    assert [OperationType(op.type).name for op in conv.model.main.operations] == ["RELU"]
    assert any("removed" in note and "nothing reads" in note for note in conv.notes)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
