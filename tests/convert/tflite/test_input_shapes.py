"""Input shapes for a TFLite model's dynamic dimensions (`input_shapes`, `mlts convert --input-shape`).

A file stores its tensors' shapes for one size and marks the dimensions that may change with -1 in
`shape_signature`. A shape given for such an input is checked against the signature (a fixed
dimension keeps its size), the shapes that follow from it are recomputed operator by operator, and
the converted model agrees with LiteRT resized the same way (resize_tensor_input, strict): an operator
that cannot follow is refused in one line naming it.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench.litert_reference import LiteRtReference
from mlts.convert import convert
from mlts.convert.errors import ConversionError
from mlts.convert.tflite import convert_tflite, convert_tflite_plan
from tests.convert.tflite._check import assert_matches, rand, run_nn
from tests.convert.tflite._tflbuild import TflModel

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (ai-edge-litert) is not installed")

CONV = {"padding": 0, "stride_w": 2, "stride_h": 2, "dilation_w_factor": 1, "dilation_h_factor": 1}


def _cnn(signature=(-1, -1, -1, 3), reshape: list[int] | None = None) -> bytes:
    """image [1, 8, 8, 3] -> CONV_2D SAME /2 (+RELU) -> MEAN over H, W -> FULLY_CONNECTED -> SOFTMAX;
    or, with `reshape`, CONV_2D -> RESHAPE to that constant shape."""
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([1, 8, 8, 3], name="image", shape_signature=signature)
    w = g.tensor([4, 3, 3, 3], data=rand([4, 3, 3, 3], seed=1) * 0.5)
    b = g.tensor([4], data=rand([4], seed=2))
    y = g.tensor([1, 4, 4, 4], name="features", shape_signature=(-1, -1, -1, 4))
    g.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", fused_activation_function=1, **CONV)
    if reshape is not None:
        shape = g.tensor([len(reshape)], "int32", data=np.asarray(reshape))
        out = g.tensor([1, 64] if -1 in reshape else reshape, name="flat")
        g.op("RESHAPE", [y, shape], [out])
        g.io([x], [out])
        return m.finish()
    axes = g.tensor([2], "int32", data=np.array([1, 2]))
    pooled = g.tensor([1, 4], name="pooled")
    g.op("MEAN", [y, axes], [pooled], "ReducerOptions", keep_dims=False)
    fw = g.tensor([5, 4], data=rand([5, 4], seed=3))
    fb = g.tensor([5], data=rand([5], seed=4))
    logits = g.tensor([1, 5], name="logits")
    g.op("FULLY_CONNECTED", [pooled, fw, fb], [logits], "FullyConnectedOptions")
    probs = g.tensor([1, 5], name="probs")
    g.op("SOFTMAX", [logits], [probs], "SoftmaxOptions", beta=1.0)
    g.io([x], [probs])
    return m.finish()


@pytest.mark.parametrize("shape", [(2, 12, 10, 3), (1, 5, 7, 3), (3, 8, 8, 3)])
def test_new_batch_and_image_size_follow_through_conv_mean_and_fully_connected(shape) -> None:
    data = _cnn()
    conv, plan = convert_tflite_plan(data, input_shapes={"image": shape})
    assert conv.inputs[0].shape == shape and conv.outputs[0].shape == (shape[0], 5)
    assert plan.resized == ((0, shape),)
    assert any("converted with the given shape" in n for n in conv.notes)
    feeds = [rand(shape, seed=5)]
    expected = LiteRtReference(data, 1, plan).run(feeds)
    actual = run_nn(data, feeds, input_shapes={"image": shape})
    assert_matches(actual[0], np.asarray(expected[0]))


def test_a_reshape_with_minus_one_follows_and_a_fixed_one_is_refused() -> None:
    data = _cnn(reshape=[-1, 64])
    conv, plan = convert_tflite_plan(data, input_shapes={"image": (1, 16, 8, 3)})
    assert conv.outputs[0].shape == (2, 64)
    feeds = [rand((1, 16, 8, 3), seed=6)]
    expected = LiteRtReference(data, 1, plan).run(feeds)
    assert_matches(run_nn(data, feeds, input_shapes={"image": (1, 16, 8, 3)})[0], np.asarray(expected[0]))
    fixed = _cnn(reshape=[1, 64])
    with pytest.raises(
        ConversionError,
        match=r"RESHAPE \(operator #1 of subgraph 0 'main'\): cannot follow "
        r"the new input shapes: its constant shape \[1, 64\] holds 64 values, not the new input's 128",
    ):
        convert_tflite(fixed, input_shapes={"image": (2, 8, 8, 3)})  # fmt: skip


@pytest.mark.parametrize(
    "signature, shape, pattern",
    [
        ((-1, -1, -1, 3), (1, 8, 8, 4), r"input 'image' has dimension 3 fixed to 3 by its shape signature \[-1, -1, -1, 3\], not 4"),
        (None, (2, 8, 8, 3), r"input 'image' has dimension 0 fixed to 1 by the file \(no dynamic dimensions\)"),
        ((-1, -1, -1, 3), (1, 8, 8), r"input 'image' has 4 dimensions \[-1, -1, -1, 3\], not 3 \(\[1, 8, 8\]\)"),
    ],
)  # fmt: skip
def test_fixed_dimensions_and_ranks_are_refused_in_one_line(signature, shape, pattern) -> None:
    with pytest.raises(ConversionError, match=pattern) as info:
        convert_tflite(_cnn(signature=signature), input_shapes={"image": shape})
    assert "\n" not in str(info.value) and "--input-shape image" in str(info.value)


def test_an_unknown_input_name_lists_the_inputs() -> None:
    with pytest.raises(
        ConversionError,
        match=r"--input-shape pixels: the model has no input 'pixels' \(its inputs: 'image'\)",
    ):
        convert_tflite(_cnn(), input_shapes={"pixels": (1, 8, 8, 3)})  # fmt: skip


def test_the_files_own_shape_changes_nothing() -> None:
    conv, plan = convert_tflite_plan(_cnn(signature=None), input_shapes={"image": (1, 8, 8, 3)})
    assert plan.resized == () and conv.inputs[0].shape == (1, 8, 8, 3)


def test_a_recurrent_state_keeps_the_files_batch() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([1, 3], name="x", shape_signature=(-1, 3))
    w, r = g.tensor([4, 3], data=rand([4, 3], seed=1)), g.tensor([4, 4], data=rand([4, 4], seed=2))
    b, h = g.tensor([4], data=rand([4], seed=3)), g.tensor([1, 4], name="h", variable=True)
    y = g.tensor([1, 4], name="y")
    g.op("RNN", [x, w, r, b, h], [y], "RNNOptions", fused_activation_function=1)
    g.io([x], [y])
    with pytest.raises(
        ConversionError, match=r"RNN .*its state \(input 4, \[1, 4\]\) keeps the file's batch 1, not 2"
    ):
        convert_tflite(m.finish(), input_shapes={"x": (2, 3)})


def test_convert_entry_point_takes_input_shapes_for_a_tflite_model() -> None:
    conv = convert(_cnn(), input_shapes={"image": (2, 6, 6, 3)})
    assert conv.inputs[0].shape == (2, 6, 6, 3) and conv.outputs[0].shape == (2, 5)


def test_signature_inputs_are_resized_by_their_signature_names() -> None:
    m = TflModel()
    g = m.subgraph("serving")
    x = g.tensor([1, 4], name="t_x", shape_signature=(-1, 4))
    y = g.tensor([1, 4], name="t_y")
    g.op("RELU", [x], [y])
    g.io([x], [y])
    m.signature("serve", 0, [("x", x)], [("y", y)])
    data = m.finish()
    conv, plan = convert_tflite_plan(data, signature="serve", input_shapes={"x": (3, 4)})
    assert conv.inputs[0].shape == (3, 4) and conv.outputs[0].shape == (3, 4)
    feeds = [rand((3, 4), seed=1)]
    expected = LiteRtReference(data, 1, plan).run(feeds)
    assert_matches(
        run_nn(data, feeds, signature="serve", input_shapes={"x": (3, 4)})[0], np.asarray(expected[0])
    )


def test_a_chain_of_shape_operators_follows_a_new_batch_and_length() -> None:
    """FULLY_CONNECTED (keep_num_dims), TRANSPOSE, PAD, STRIDED_SLICE with masks, SPLIT, CONCATENATION,
    RESHAPE with -1 and SUM, resized from [1, 6, 4] to [2, 10, 4]."""
    m = TflModel()
    g = m.subgraph("main")

    def const(values):
        arr = np.asarray(values, np.int32)
        return g.tensor(arr.shape, "int32", data=arr)

    x = g.tensor([1, 6, 4], name="x", shape_signature=(-1, -1, 4))
    fc = g.tensor([1, 6, 5])
    fw, fb = g.tensor([5, 4], data=rand([5, 4], seed=1)), g.tensor([5], data=rand([5], seed=2))
    g.op("FULLY_CONNECTED", [x, fw, fb], [fc], "FullyConnectedOptions", keep_num_dims=True)
    tr = g.tensor([1, 5, 6])
    g.op("TRANSPOSE", [fc, const([0, 2, 1])], [tr])
    padded = g.tensor([1, 5, 8])
    g.op("PAD", [tr, const([[0, 0], [0, 0], [1, 1]])], [padded])
    sliced = g.tensor([1, 3, 4])
    g.op(
        "STRIDED_SLICE", [padded, const([0, 1, 0]), const([0, 4, 0]), const([1, 1, 2])], [sliced],
        "StridedSliceOptions", begin_mask=5, end_mask=5,
    )  # fmt: skip
    halves = [g.tensor([1, 3, 2]), g.tensor([1, 3, 2])]
    g.op("SPLIT", [const([2]), sliced], halves, "SplitOptions", num_splits=2)
    joined = g.tensor([1, 6, 2])
    g.op("CONCATENATION", halves, [joined], "ConcatenationOptions", axis=1)
    flat = g.tensor([6, 2])
    g.op("RESHAPE", [joined, const([-1, 2])], [flat])
    total = g.tensor([1, 2], name="total")
    g.op("SUM", [flat, const([0])], [total], "ReducerOptions", keep_dims=True)
    g.io([x], [total, joined])
    data = m.finish()
    shapes = {"x": (2, 10, 4)}
    conv, plan = convert_tflite_plan(data, input_shapes=shapes)
    assert [t.shape for t in conv.outputs] == [(1, 2), (2, 6, 3)]
    feeds = [rand((2, 10, 4), seed=7)]
    expected = LiteRtReference(data, 1, plan).run(feeds)
    for a, e in zip(run_nn(data, feeds, input_shapes=shapes), expected, strict=True):
        assert_matches(a, np.asarray(e))


def test_a_shape_too_large_for_an_nn_operand_is_refused_before_anything_is_built() -> None:
    with pytest.raises(
        ConversionError, match=r"--input-shape image: shape \[4096, 4096, 4096, 3\] makes a tensor"
    ):
        convert_tflite(_cnn(), input_shapes={"image": (4096, 4096, 4096, 3)})
    # Within the input's limit, an output that would grow past it is refused at its operator.
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([1, 4], name="x", shape_signature=(-1, 4))
    reps = g.tensor([2], "int32", data=np.array([4096, 4096]))
    y = g.tensor([4096, 16384], name="y")
    g.op("TILE", [x, reps], [y])
    g.io([x], [y])
    with pytest.raises(
        ConversionError, match=r"TILE \(operator #0 of subgraph 0 'main'\): shape \[67108864, 16384\]"
    ):
        convert_tflite(m.finish(), input_shapes={"x": (16384, 4)})
