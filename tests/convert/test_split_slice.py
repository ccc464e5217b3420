"""Split -> SPLIT / SLICE and Slice -> SLICE / STRIDED_SLICE: converted models on the sample driver vs onnxruntime.

Both ops only select elements, so float32 results must equal onnxruntime's
exactly (atol = rtol = 0) and quantized ones bit for bit. Models that start
with a Conv (to get NHWC operands) use the CTS float32 tolerance instead
(atol 1e-5, rtol 5*2^-23): the Conv itself sums in a different order.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from mlts.convert import Conversion, ConversionError, convert
from mlts.hal.enums import OperandLifeTime, OperationType
from tests.convert._util import ATOL as CTS_ATOL
from tests.convert._util import RTOL as CTS_RTOL
from tests.convert._util import (
    assert_close,
    error_of,
    make_model,
    op_names,
    random_feeds,
    run_converted,
    run_ort,
)
from tests.convert.quantkit import ELEM, QDQ, S8, U8, zp_for

N = helper.make_node
R = np.random.default_rng(11)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def check_exact(model: onnx.ModelProto, atol: float = 0.0, rtol: float = 0.0) -> Conversion:
    """The driver's outputs equal onnxruntime's (same shapes, same values within atol + rtol*|value|)."""
    feeds = random_feeds(model)
    conv, actual = run_converted(model, feeds)
    expected = run_ort(model, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert_close(a, e, atol=atol, rtol=rtol)
    return conv


def int_input(conv: Conversion, op, position: int) -> list[int]:
    """The value of a constant INT32 scalar or TENSOR_INT32 input of `op`."""
    operand = conv.model.main.operands[op.inputs[position]]
    assert operand.lifetime == OperandLifeTime.CONSTANT_COPY
    loc = operand.location
    return np.frombuffer(conv.model.operand_values[loc.offset : loc.offset + loc.length], np.int32).tolist()


def only(conv: Conversion, kind: OperationType):
    (op,) = [op for op in conv.model.main.operations if op.type == kind]
    return op


# ------------------------------------------------------------ Split


def split_model(
    shape: list[int], outputs: int, opset: int, split: list[int] | None = None, **attrs
) -> onnx.ModelProto:
    names = [f"y{i}" for i in range(outputs)]
    inits = {}
    ins = ["x"]
    if split is not None and opset >= 13:
        inits["s"] = i64(*split)
        ins.append("s")
    elif split is not None:
        attrs["split"] = split
    return make_model([N("Split", ins, names, name="split", **attrs)], {"x": shape}, names, inits, opset)


def test_equal_split_is_one_split() -> None:
    conv = check_exact(split_model([2, 6, 4], 3, 13, axis=1))
    assert op_names(conv) == ["SPLIT"]
    op = only(conv, OperationType.SPLIT)
    assert (int_input(conv, op, 1), int_input(conv, op, 2), len(op.outputs)) == ([1], [3], 3)


def test_equal_split_given_as_sizes_and_negative_axis() -> None:
    conv = check_exact(split_model([2, 6, 4], 2, 13, split=[2, 2], axis=-1))
    op = only(conv, OperationType.SPLIT)
    assert int_input(conv, op, 1) == [2]


def test_unequal_split_is_one_slice_per_output() -> None:
    conv = check_exact(split_model([3, 7, 2], 3, 13, split=[1, 4, 2], axis=1))
    assert op_names(conv) == ["SLICE"] * 3


@pytest.mark.parametrize("opset", [11, 12])
def test_split_attribute_before_opset_13(opset: int) -> None:
    conv = check_exact(split_model([5, 4], 2, opset, split=[3, 2], axis=-2))
    assert op_names(conv) == ["SLICE"] * 2


@pytest.mark.parametrize(
    ("dim", "parts", "ops"), [(7, 3, ["SLICE"] * 3), (8, 4, ["SPLIT"]), (5, 2, ["SLICE"] * 2)]
)
def test_split_num_outputs_opset_18(dim: int, parts: int, ops: list[str]) -> None:
    """num_outputs: parts of ceil(dim/parts), the last smaller (7 -> 3, 3, 1)."""
    conv = check_exact(split_model([2, dim], parts, 18, axis=1, num_outputs=parts))
    assert op_names(conv) == ops


def test_unused_split_output_gets_no_slice() -> None:
    model = split_model([4, 6], 3, 13, split=[1, 2, 3], axis=1)
    del model.graph.output[1]
    conv = check_exact(model)
    assert op_names(conv) == ["SLICE"] * 2


def check_after_conv(model: onnx.ModelProto) -> Conversion:
    return check_exact(model, atol=CTS_ATOL, rtol=CTS_RTOL)


def conv_then(nodes: list[onnx.NodeProto], outputs: list[str], inits: dict | None = None, opset: int = 13):
    """Conv [1, 3, 6, 5] -> [1, 6, 6, 5] (NHWC inside the NN model), then `nodes` reading 'c'."""
    inits = {"w": R.standard_normal((6, 3, 3, 3)).astype(np.float32), **(inits or {})}
    conv_node = N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    return make_model([conv_node, *nodes], {"x": [1, 3, 6, 5]}, outputs, inits, opset)


def test_split_channels_of_nhwc_tensor() -> None:
    """Splitting NCHW channels (axis 1) of an NHWC operand splits its NN axis 3; no TRANSPOSE before."""
    conv = check_after_conv(conv_then([N("Split", ["c"], ["a", "b"], axis=1)], ["a", "b"]))
    assert op_names(conv)[:3] == ["TRANSPOSE", "CONV_2D", "SPLIT"]  # the input's NCHW -> NHWC, then no more
    assert int_input(conv, only(conv, OperationType.SPLIT), 1) == [3]


def test_unequal_split_of_nhwc_height() -> None:
    nodes = [N("Split", ["c", "s"], ["a", "b"], axis=2), N("Relu", ["b"], ["r"])]
    conv = check_after_conv(conv_then(nodes, ["a", "r"], {"s": i64(2, 4)}))
    assert op_names(conv)[:4] == ["TRANSPOSE", "CONV_2D", "SLICE", "SLICE"]
    first = conv.model.main.operations[2]
    # NHWC begin/size of the first part: rows 0..1 of every column and channel.
    assert (int_input(conv, first, 1), int_input(conv, first, 2)) == ([0, 0, 0, 0], [1, 2, 5, 6])


# ------------------------------------------------------------ Slice


def slice_model(shape: list[int], starts, ends, axes=None, steps=None, opset: int = 13) -> onnx.ModelProto:
    inits = {"st": i64(*starts), "en": i64(*ends)}
    ins = ["x", "st", "en"]
    for key, value in (("ax", axes), ("sp", steps)):
        if value is not None:
            inits[key] = i64(*value)
            ins.append(key)
        elif key == "ax" and steps is not None:
            ins.append("")
    return make_model([N("Slice", ins, ["y"], name="slice")], {"x": shape}, ["y"], inits, opset)


SLICES = {
    "unit_steps": (([4, 5, 6], [1, 0], [3, 4], [0, 2], None), "SLICE"),
    "axes_omitted": (([4, 5], [1, 2], [3, 5]), "SLICE"),
    "negative_starts_huge_ends": (([4, 5, 6], [-3, -2], [INT64_MAX, 100], [1, -1], None), "SLICE"),
    "negative_ends": (([6, 4], [0], [-2], None, None), "SLICE"),
    "explicit_unit_steps": (([6, 4], [1], [5], [0], [1]), "SLICE"),
    "step_2": (([7, 5], [1, 0], [7, 5], [0, 1], [2, 2]), "STRIDED_SLICE"),
    "step_3_huge_end": (([2, 10], [1], [INT64_MAX], [1], [3]), "STRIDED_SLICE"),
    "reverse_whole_axis": (([4, 6], [-1], [INT64_MIN], [1], [-1]), "STRIDED_SLICE"),
    "reverse_part": (([4, 6], [4], [1], [-1], [-1]), "STRIDED_SLICE"),
    "reverse_step_2_to_front": (([3, 9], [INT64_MAX], [-100], [1], [-2]), "STRIDED_SLICE"),
    "mixed_steps": (([5, 6, 3], [0, 5, 2], [5, 0, -4], [0, 1, 2], [2, -2, -1]), "STRIDED_SLICE"),
}


@pytest.mark.parametrize("name", sorted(SLICES))
def test_slice_matches_onnxruntime(name: str) -> None:
    args, kind = SLICES[name]
    conv = check_exact(slice_model(*args))
    assert op_names(conv) == [kind]


def test_slice_opset_10_and_1() -> None:
    check_exact(slice_model([4, 5, 6], [1, -3], [3, INT64_MAX], [0, 2], None, opset=10))
    attr = N("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 1])
    conv = check_exact(make_model([attr], {"x": [4, 5]}, ["y"], opset=9))
    assert op_names(conv) == ["SLICE"]


def test_reverse_slice_uses_end_mask() -> None:
    """End -1 after clamping (through index 0) is STRIDED_SLICE's end_mask bit, here NN axis 1."""
    conv = check_exact(slice_model([4, 6], [-1], [INT64_MIN], [1], [-1]))
    op = only(conv, OperationType.STRIDED_SLICE)
    assert [int_input(conv, op, i) for i in (4, 5, 6)] == [[0], [2], [0]]


def test_slice_of_nhwc_tensor_keeps_layout() -> None:
    """Channels 1..4 and every second column of a Conv output: NHWC begin/end/strides, no TRANSPOSE before."""
    inits = {"st": i64(1, 0), "en": i64(5, 5), "ax": i64(1, 3), "sp": i64(1, 2)}
    nodes = [N("Slice", ["c", "st", "en", "ax", "sp"], ["y"])]
    conv = check_after_conv(conv_then(nodes, ["y"], inits))
    assert op_names(conv)[:3] == ["TRANSPOSE", "CONV_2D", "STRIDED_SLICE"]
    op = only(conv, OperationType.STRIDED_SLICE)
    assert [int_input(conv, op, i) for i in (1, 2, 3)] == [[0, 0, 0, 1], [1, 6, 5, 5], [1, 1, 2, 1]]


# ------------------------------------------------------------ quantized


def qdq_model(op: str, dtype: type) -> onnx.ModelProto:
    """uint8/int8 input -> DequantizeLinear -> op -> QuantizeLinear (same parameters) outputs."""
    g = QDQ()
    xs, xzp = 0.05, zp_for(dtype)
    x = g.input_q("x", [1, 4, 6, 6], xs, xzp, dtype)
    if op == "Split":
        parts = [g.fresh("part") for _ in range(3)]
        g.nodes.append(N("Split", [x, g.const(i64(1, 1, 2))], parts, axis=1))
        outs = [g.q(p, xs, xzp, dtype, name=f"y{i}") for i, p in enumerate(parts)]
    elif op == "SplitEqual":
        parts = [g.fresh("part") for _ in range(2)]
        g.nodes.append(N("Split", [x], parts, axis=-1))
        outs = [g.q(p, xs, xzp, dtype, name=f"y{i}") for i, p in enumerate(parts)]
    else:
        st, en, ax, sp = (g.const(i64(*v)) for v in ((5, 1), (0, 3), (2, 1), (-2, 1)))
        outs = [g.q(g.node("Slice", [x, st, en, ax, sp]), xs, xzp, dtype, name="y")]
    return g.model({name: ELEM[dtype] for name in outs})


@pytest.mark.parametrize("op", ["Split", "SplitEqual", "Slice"])
@pytest.mark.parametrize("dtype", [U8, S8], ids=["u8", "s8"])
def test_quantized_selection_is_exact(op: str, dtype: type) -> None:
    model = qdq_model(op, dtype)
    feeds = {"x": R.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (1, 4, 6, 6)).astype(dtype)}
    conv, actual = run_converted(model, feeds)
    for a, e in zip(actual, run_ort(model, feeds), strict=True):
        assert a.dtype == e.dtype == dtype
        np.testing.assert_array_equal(a, e)
    assert not any(o.type == 3 for o in conv.model.main.operands), "float32 operand in a quantized graph"


def test_quantized_split_cannot_requantize() -> None:
    """A QuantizeLinear with other parameters on a Split output is refused: SPLIT keeps the input's."""
    model = qdq_model("Split", U8)
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.output[0] == "y1")
    scale = next(i for i in model.graph.initializer if i.name == q.input[1])
    scale.CopyFrom(numpy_helper.from_array(np.array(0.1, np.float32), scale.name))
    with pytest.raises(ConversionError, match="this op cannot change quantization parameters"):
        convert(model)


# ------------------------------------------------------------ refusals


def test_split_refusals() -> None:
    msg = error_of(split_model([2, 6], 2, 13, split=[2, 3], axis=1))
    assert msg.startswith(
        "Split node 'split': split [2, 3] does not cut axis 1 of size 6 into non-empty parts"
    )
    msg = error_of(split_model([2, 7], 2, 13, axis=1))
    assert msg == "Split node 'split': axis 1 of size 7 cannot be split into 2 equal parts"
    msg = error_of(split_model([2, 5], 4, 18, axis=1, num_outputs=4))
    assert msg == "Split node 'split': num_outputs 4 leaves an empty last part of axis 1 (size 5)"


def test_slice_refusals() -> None:
    msg = error_of(slice_model([4, 5], [3], [1], [0], None))
    assert msg.startswith("Slice node 'slice': axis 0 of size 4 sliced from 3 to 1 by 1 is empty")
    model = slice_model([4, 5], [0], [2], [0], [0])
    assert "steps [0] hold a 0" in error_of(model)
    model = slice_model([4, 5], [0, 1], [2, 3], [1, -1], None)
    assert "axes [1, -1] repeat an axis" in error_of(model)
    # A run-time starts: the converter has no integer run-time tensors, so a float graph input stands in.
    runtime = make_model(
        [N("Slice", ["x", "st", "en"], ["y"], name="slice")], {"x": [4, 5], "st": [1]}, ["y"], {"en": i64(3)}
    )
    msg = error_of(runtime)
    assert (
        msg
        == "Slice node 'slice': starts 'st' is a graph input, fed at run time; the converter needs starts as a "
        "constant fixed in the model (an initializer): fix its value with --input-value st=V (input_values)"
    )
