"""What real exporters write, built by hand: shape arithmetic folded once shapes and values are fixed, If on
a known condition inlined (branches reading other graph inputs), configuration inputs fixed by value,
Pad reflect/edge/wrap, 1-D convolution, rank-5 tensors with unit axes, int32/bool reshapes, global
pooling of 1-D inputs and rank-0 inputs.

Values are checked against onnxruntime on the original graph: float results within the CTS float32
rule (1e-5 + 5 ulp), data movement (Pad, reshapes of integers) exactly.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from mlts.cli import main
from mlts.commands.graph import parse_input_values
from mlts.convert import ConversionError, convert, prepare_input
from mlts.hal.validate import validate_model
from tests.convert._util import assert_close, error_of, op_names, run_ort

N = helper.make_node
F = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, inits=None, opset: int = 13, out_type: int = F) -> onnx.ModelProto:
    """`inputs`: name -> (elem type, shape with str for symbolic dims)."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, out_type, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **kwargs) -> tuple[list[np.ndarray], object]:
    from driver.executor import run_model

    conv = convert(model, **kwargs)
    validate_model(conv.model)
    return run_model(conv.model, [prepare_input(i, feeds[i.name]) for i in conv.inputs]), conv


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


# ------------------------------------------------------------ shape arithmetic


def _flatten_by_shape() -> onnx.ModelProto:
    """y = Relu(Reshape(x, [Shape(x)[0], Shape(x)[-3] * Shape(x)[2], Shape(x)[-1:99]])): a PyTorch `view`
    export (a negative Gather index, a Slice whose end clamps to the rank)."""
    nodes = [
        N("Shape", ["x"], ["s"]),
        N("Gather", ["s", "i0"], ["d0"], axis=0),
        N("Gather", ["s", "i1"], ["d1"], axis=0),
        N("Slice", ["s", "two", "three"], ["d2"]),
        N("Squeeze", ["d2", "ax0"], ["d2s"]),
        N("Mul", ["d1", "d2s"], ["d12"]),
        N("Slice", ["s", "minus1", "far"], ["d3"]),
        N("Unsqueeze", ["d0", "ax0"], ["u0"]),
        N("Unsqueeze", ["d12", "ax0"], ["u1"]),
        N("Concat", ["u0", "u1", "d3"], ["target"], axis=0),
        N("Reshape", ["x", "target"], ["r"]),
        N("Relu", ["r"], ["y"]),
    ]
    inits = {"i0": np.array(0, np.int64), "i1": np.array(-3, np.int64), "two": i64(2), "three": i64(3)}
    inits.update(ax0=i64(0), minus1=i64(-1), far=i64(99))
    return model_of(nodes, {"x": (F, ["N", 3, "H", "W"])}, ["y"], inits)


def test_shape_arithmetic_folds_once_shapes_are_fixed() -> None:
    model = _flatten_by_shape()
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (y,), conv = run(model, {"x": x}, input_shapes={"x": [2, 3, 4, 5]})
    assert_close(y, run_ort(model, {"x": x})[0])
    assert op_names(conv) == ["RESHAPE", "RELU"]
    assert any(n.startswith("folded") and "static shapes" in n for n in conv.notes)


def test_unfixed_symbolic_dims_name_the_input_and_the_option() -> None:
    msg = error_of(_flatten_by_shape())
    assert "input 'x' dimension 2 is symbolic ('H')" in msg and "--input-shape" in msg


def test_range_constant_of_shape_expand_where_and_resize_sizes_fold() -> None:
    """Resize to twice the input's size computed from Shape; a mask from Range < length; Expand to shape."""
    nodes = [
        N("Shape", ["x"], ["s"]),
        N("Slice", ["s", "two", "four"], ["hw"]),
        N("Mul", ["hw", "two"], ["hw2"]),
        N("Slice", ["s", "zero", "two"], ["nc"]),
        N("Concat", ["nc", "hw2"], ["sizes"], axis=0),
        N("Resize", ["x", "", "", "sizes"], ["up"], mode="nearest"),
        N("Gather", ["s", "three"], ["w"], axis=0),
        N("Range", ["zero_s", "w", "one_s"], ["ramp"]),
        N("Cast", ["ramp"], ["rampf"], to=F),
        N("Less", ["ramp", "cut"], ["keep"]),
        N("ConstantOfShape", ["hw"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        N("Where", ["keep", "rampf", "neg"], ["row"]),
        N("Mul", ["ones", "row"], ["plane"]),
        N("Expand", ["plane", "s"], ["full"]),
        N("Add", ["x", "full"], ["y"]),
    ]
    inits = {
        "two": i64(2), "four": i64(4), "zero": i64(0), "three": np.array(3, np.int64),
        "zero_s": np.array(0, np.int64), "one_s": np.array(1, np.int64), "cut": np.array(3, np.int64),
        "neg": np.array(-1.0, np.float32),
    }  # fmt: skip
    model = model_of(nodes, {"x": (F, [1, 2, "H", "W"])}, ["up", "y"], inits)
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 5)).astype(np.float32)
    got, conv = run(model, {"x": x}, input_shapes={"x": [1, 2, 3, 5]})
    for a, e in zip(got, run_ort(model, {"x": x}), strict=True):
        assert_close(a, e)
    assert got[0].shape == (1, 2, 6, 10)
    assert not {"RANGE", "EQUAL", "LESS", "SELECT"} & set(op_names(conv))


def _vad_like(opset: int = 16) -> onnx.ModelProto:
    """sr (rank 0 int64) chooses a branch that reads the graph inputs x and state (outer scope)."""
    then_branch = helper.make_graph(
        [N("Mul", ["x", "state"], ["t_mul"]), N("Relu", ["t_mul"], ["t_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", F, None)],
    )
    else_branch = helper.make_graph(
        [N("Sub", ["x", "state"], ["e_out"])], "else", [], [helper.make_tensor_value_info("e_out", F, None)]
    )
    nodes = [
        N("Equal", ["sr", "k16"], ["is16"]),
        N("If", ["is16"], ["y"], then_branch=then_branch, else_branch=else_branch, name="pick"),
    ]
    inputs = {"x": (F, [1, 8]), "state": (F, [1, 8]), "sr": (TensorProto.INT64, [])}
    return model_of(nodes, inputs, ["y"], {"k16": np.array(16000, np.int64)}, opset=opset)


@pytest.mark.parametrize("sr", [16000, 8000])
def test_if_on_a_fixed_configuration_input_inlines_the_branch_reading_outer_inputs(sr: int) -> None:
    model = _vad_like()
    rng = np.random.default_rng(2)
    feeds = {
        "x": rng.standard_normal((1, 8)).astype(np.float32),
        "state": rng.standard_normal((1, 8)).astype(np.float32),
    }
    (y,), conv = run(model, feeds, input_values={"sr": np.asarray(sr)})
    assert_close(y, run_ort(model, {**feeds, "sr": np.asarray(sr, np.int64)})[0])
    assert [i.name for i in conv.inputs] == ["x", "state"]
    assert "IF" not in op_names(conv)
    assert f"fixed input 'sr' to {sr} (int64, shape []): a constant" in conv.notes
    assert "inlined 1 If nodes whose condition is known at conversion" in conv.notes


@pytest.mark.parametrize("sr", [16000, 8000])
def test_if_on_a_run_time_configuration_input_becomes_nnapi_if(sr: int) -> None:
    """Not fixed, the rank-0 sample rate is a one-value input and the If an NNAPI IF reading x and state."""
    model = _vad_like()
    rng = np.random.default_rng(2)
    x, state = (rng.standard_normal((1, 8)).astype(np.float32) for _ in range(2))
    feeds = {"x": x, "state": state, "sr": np.asarray(sr, np.int64)}
    (y,), conv = run(model, feeds)
    assert_close(y, run_ort(model, feeds)[0])
    assert "IF" in op_names(conv) and [i.name for i in conv.inputs] == ["x", "state", "sr"]


def test_if_condition_that_is_no_single_value_names_the_inputs_it_comes_from() -> None:
    then_branch = helper.make_graph(
        [N("Neg", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, None)]
    )
    else_branch = helper.make_graph(
        [N("Abs", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)]
    )
    nodes = [
        N("Greater", ["x", "zero"], ["big"]),
        N("If", ["big"], ["y"], then_branch=then_branch, else_branch=else_branch, name="pick"),
    ]
    model = model_of(nodes, {"x": (F, [1, 3])}, ["y"], {"zero": np.zeros(1, np.float32)})
    msg = error_of(model)
    assert msg.startswith("If node 'pick': the condition 'big' must be a runtime BOOL tensor of one value")
    assert "computed from graph input 'x'" in msg


def test_input_values_errors() -> None:
    model = _vad_like()
    with pytest.raises(
        ConversionError,
        match="a value is given for input 'rate', which the model does not have; its inputs: 'x', 'state', 'sr'",
    ):
        convert(model, input_values={"rate": np.asarray(1)})
    with pytest.raises(
        ConversionError, match=r"input 'sr' is INT64; the value given, \[16000.5\], is not an integer"
    ):
        convert(model, input_values={"sr": np.asarray(16000.5)})
    with pytest.raises(ConversionError, match=r"has shape \[2\] \(2 values\); the model declares shape \[\]"):
        convert(model, input_values={"sr": np.asarray([1, 2])})
    with pytest.raises(ConversionError, match="given both a shape and a value"):
        convert(model, input_values={"sr": np.asarray(1)}, input_shapes={"sr": [1]})
    with pytest.raises(ConversionError, match=r"outside \[-128, 127\]"):
        convert(
            model_of([N("Cast", ["c"], ["y"], to=F)], {"c": (TensorProto.INT8, [1])}, ["y"]),
            input_values={"c": np.asarray(300)},
        )


def test_input_value_fixes_a_vector_input_of_float_type() -> None:
    model = model_of([N("Mul", ["x", "gain"], ["y"])], {"x": (F, [2, 3]), "gain": (F, [3])}, ["y"])
    x = np.ones((2, 3), np.float32)
    (y,), conv = run(model, {"x": x}, input_values={"gain": np.asarray([1, 2.5, -3])})
    np.testing.assert_array_equal(y, x * np.array([1, 2.5, -3], np.float32))
    assert [i.name for i in conv.inputs] == ["x"]


def test_parse_input_values() -> None:
    got = parse_input_values(("sr=16000", "gain=1,2.5", "mode=-1", "t=1e-3"))
    assert got["sr"].dtype == np.int64 and got["sr"].shape == () and int(got["sr"]) == 16000
    assert got["gain"].dtype == np.float64 and got["gain"].tolist() == [1.0, 2.5]
    assert int(got["mode"]) == -1 and float(got["t"]) == 1e-3
    import click

    for bad in ("sr", "=3", "sr=", "sr=abc", "sr=1,,2", "sr=0x10"):
        with pytest.raises(click.BadParameter):
            parse_input_values((bad,))
    with pytest.raises(click.BadParameter, match="given twice"):
        parse_input_values(("a=1", "a=2"))
    with pytest.raises(click.BadParameter, match="64-bit range"):
        parse_input_values((f"a={2**70}",))


def test_convert_command_input_value(tmp_path) -> None:
    path = tmp_path / "vad.onnx"
    onnx.save(_vad_like(), str(path))
    out = tmp_path / "vad.nnm"
    r = CliRunner().invoke(main, ["convert", str(path), "-o", str(out), "--input-value", "sr=16000"])
    assert r.exit_code == 0, r.output
    assert "fixed input 'sr' to 16000" in r.output
    r = CliRunner().invoke(main, ["convert", str(path), "-o", str(out), "--input-value", "sr=fast"])
    assert r.exit_code == 2 and "is not NAME=V or NAME=V0,V1,... with decimal numbers" in r.output
    r = CliRunner().invoke(main, ["convert", str(path), "-o", str(out), "--input-value", "rate=1"])
    assert r.exit_code == 2 and "which the model does not have" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["convert", "--help"])
    assert "--input-value" in r.output and "sr=16000" in r.output


# ------------------------------------------------------------ Pad


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize(
    ("shape", "pads", "layout"),
    [
        ([1, 1, 10], [0, 0, 3, 0, 0, 2], "rank3"),
        ([2, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], "nhwc"),
        ([4, 7], [1, 2, 3, 4], "rank2"),
    ],
)
def test_pad_modes_equal_onnxruntime_exactly(
    mode: str, shape: list[int], pads: list[int], layout: str
) -> None:
    nodes = [N("Pad", ["x", "p"], ["y"], mode=mode)]
    inits = {"p": np.array(pads, np.int64)}
    if layout == "nhwc":  # a Conv first: the padded tensor is NHWC inside the graph
        inits["w"] = np.eye(shape[1], dtype=np.float32).reshape(shape[1], shape[1], 1, 1)
        nodes = [N("Conv", ["x", "w"], ["c"]), N("Pad", ["c", "p"], ["y"], mode=mode)]
    model = model_of(nodes, {"x": (F, shape)}, ["y"], inits, opset=19)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    (y,), conv = run(model, {"x": x})
    np.testing.assert_array_equal(y, run_ort(model, {"x": x})[0])
    assert "GATHER" in op_names(conv)


def test_negative_constant_pads_crop() -> None:
    model = model_of(
        [N("Pad", ["x", "p"], ["y"])], {"x": (F, [3, 8])}, ["y"], {"p": i64(-1, 2, 0, -3)}, opset=13
    )
    x = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)
    (y,), _ = run(model, {"x": x})
    np.testing.assert_array_equal(y, run_ort(model, {"x": x})[0])


def test_rank0_fill_value_input_is_a_scalar_model_input() -> None:
    model = model_of(
        [N("Pad", ["x", "p", "v"], ["y"])], {"x": (F, [2, 3]), "v": (F, [])}, ["y"], {"p": i64(1, 0, 0, 2)}
    )
    feeds = {"x": np.ones((2, 3), np.float32), "v": np.asarray(-4.5, np.float32)}
    (y,), conv = run(model, feeds)
    np.testing.assert_array_equal(y, run_ort(model, feeds)[0])
    assert conv.inputs[1].shape == () and conv.inputs[1].dtype == "float32"


def test_rank0_input_read_as_a_tensor_is_held_as_one_value() -> None:
    model = model_of(
        [N("Mul", ["x", "s"], ["y"]), N("Add", ["s", "s"], ["z"])],
        {"x": (F, [2, 3]), "s": (F, [])},
        ["y", "z"],
    )
    feeds = {"x": np.full((2, 3), 2.0, np.float32), "s": np.asarray(3.0, np.float32)}
    (y, z), conv = run(model, feeds)
    ey, ez = run_ort(model, feeds)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(z.reshape(()), ez)
    assert conv.inputs[1].shape == (1,) and any("held as a [1] tensor" in n for n in conv.notes)


# ------------------------------------------------------------ convolutions, rank 5, integer reshapes


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [2, 1], "strides": [2]},
        {"dilations": [2], "pads": [2, 2]},
        {"group": 2},
        {"group": 4},
        {"auto_pad": "SAME_UPPER"},
    ],
)
def test_conv_1d(attrs: dict) -> None:
    rng = np.random.default_rng(5)
    group = attrs.get("group", 1)
    w = rng.standard_normal((4, 4 // group, 3)).astype(np.float32)
    model = model_of(
        [N("Conv", ["x", "w", "b"], ["c"], **attrs), N("Relu", ["c"], ["y"])],
        {"x": (F, [2, 4, 17])},
        ["y"],
        {"w": w, "b": rng.standard_normal(4).astype(np.float32)},
    )
    x = rng.standard_normal((2, 4, 17)).astype(np.float32)
    (y,), _ = run(model, {"x": x})
    assert_close(y, run_ort(model, {"x": x})[0])


def test_conv_1d_with_run_time_weights() -> None:
    rng = np.random.default_rng(11)
    model = model_of(
        [N("Conv", ["x", "w"], ["y"], pads=[1, 1])], {"x": (F, [1, 3, 9]), "w": (F, [2, 3, 3])}, ["y"]
    )
    feeds = {
        "x": rng.standard_normal((1, 3, 9)).astype(np.float32),
        "w": rng.standard_normal((2, 3, 3)).astype(np.float32),
    }
    (y,), _ = run(model, feeds)
    assert_close(y, run_ort(model, feeds)[0])


def test_rank5_qkv_split_is_held_without_unit_axes() -> None:
    """Reshape [1, S, 3, H, D] -> Transpose [3, 1, H, S, D] -> Slice/Squeeze and Gather: q, k, v."""
    s, h, d = 5, 2, 3
    nodes = [
        N("Reshape", ["x", "shape5"], ["r5"]),
        N("Transpose", ["r5"], ["t5"], perm=[2, 0, 3, 1, 4]),
        N("Slice", ["t5", "s0", "s1", "ax0"], ["q5"]),
        N("Squeeze", ["q5", "ax0"], ["q"]),
        N("Gather", ["t5", "one"], ["k"], axis=0),
        N("Split", ["t5"], ["a", "b", "c"], axis=0),
        N("Squeeze", ["c", "ax0"], ["v"]),
        N("Add", ["q", "k"], ["qk"]),
        N("Mul", ["qk", "v"], ["y"]),
    ]
    inits = {
        "shape5": i64(1, s, 3, h, d),
        "s0": i64(0),
        "s1": i64(1),
        "ax0": i64(0),
        "one": np.array(1, np.int64),
    }
    model = model_of(nodes, {"x": (F, [1, s, 3 * h * d])}, ["y"], inits)
    x = np.random.default_rng(6).standard_normal((1, s, 3 * h * d)).astype(np.float32)
    (y,), conv = run(model, {"x": x})
    assert_close(y, run_ort(model, {"x": x})[0])
    assert any("rank-5 tensors without their unit axes" in n for n in conv.notes)


def test_channel_shuffle_through_rank5() -> None:
    nodes = [
        N("Reshape", ["x", "s5"], ["r"]),
        N("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
        N("Reshape", ["t", "s4"], ["y"]),
    ]
    model = model_of(
        nodes, {"x": (F, [1, 6, 4, 4])}, ["y"], {"s5": i64(1, 2, 3, 4, 4), "s4": i64(1, 6, 4, 4)}
    )
    x = np.random.default_rng(7).standard_normal((1, 6, 4, 4)).astype(np.float32)
    (y,), _ = run(model, {"x": x})
    np.testing.assert_array_equal(y, run_ort(model, {"x": x})[0])


def test_rank5_that_cannot_be_held_is_refused_naming_the_node() -> None:
    nodes = [N("Reshape", ["x", "s5"], ["r"]), N("Softmax", ["r"], ["y"], axis=-1, name="sm")]
    model = model_of(nodes, {"x": (F, [2, 6, 4, 4])}, ["y"], {"s5": i64(2, 2, 3, 4, 4)})
    msg = error_of(model)
    assert msg.startswith("the converted model is invalid (converted from ONNX node 'sm'): ")
    assert "has rank 5; its rank must be at most 4" in msg


@pytest.mark.parametrize(
    ("src", "dst"), [([2, 6], [2, 6, 1]), ([2, 6], [1, 2, 1, 6]), ([2, 6], [3, 4]), ([2, 3, 2], [6, 2])]
)
def test_int32_reshapes_are_exact(src: list[int], dst: list[int]) -> None:
    i32 = TensorProto.INT32
    model = model_of(
        [N("Reshape", ["x", "s"], ["y"])],
        {"x": (i32, src)},
        ["y"],
        {"s": np.array(dst, np.int64)},
        out_type=i32,
    )
    big = np.iinfo(np.int32)
    x = np.random.default_rng(8).integers(big.min, big.max, src, dtype=np.int64).astype(np.int32)
    x.flat[0], x.flat[1] = big.min, big.max
    (y,), conv = run(model, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(dst))
    if len(dst) > len(src) and np.prod(dst) == np.prod(src) and [d for d in dst if d != 1] == src:
        assert set(op_names(conv)) == {"EXPAND_DIMS"}


def test_bool_reshape_is_exact() -> None:
    b = TensorProto.BOOL
    nodes = [N("Greater", ["x", "zero"], ["g"]), N("Reshape", ["g", "s"], ["y"])]
    model = model_of(
        nodes, {"x": (F, [2, 6])}, ["y"], {"zero": np.zeros(1, np.float32), "s": i64(3, 4)}, out_type=b
    )
    x = np.random.default_rng(9).standard_normal((2, 6)).astype(np.float32)
    (y,), _ = run(model, {"x": x})
    np.testing.assert_array_equal(y, (x > 0).reshape(3, 4))


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
def test_global_pooling_of_1d_inputs(op: str) -> None:
    model = model_of([N(op, ["x"], ["y"])], {"x": (F, [2, 5, 9])}, ["y"])
    x = np.random.default_rng(10).standard_normal((2, 5, 9)).astype(np.float32)
    (y,), _ = run(model, {"x": x})
    assert_close(y, run_ort(model, {"x": x})[0])


def test_value_computed_from_an_input_refusal_suggests_the_options() -> None:
    """A Reshape target computed from a graph input at run time: the refusal names it and the options."""
    nodes = [
        N("Cast", ["n"], ["n64"], to=TensorProto.INT64),
        N("Concat", ["n64", "m1"], ["t"], axis=0),
        N("Reshape", ["x", "t"], ["y"], name="r"),
    ]
    model = model_of(nodes, {"x": (F, [4, 6]), "n": (F, [1])}, ["y"], {"m1": i64(-1)})
    msg = error_of(model)
    assert msg.startswith("Reshape node 'r': shape 't' is computed at run time")
    assert "computed from graph input 'n': fixing its value (--input-value NAME=V, input_values)" in msg


def test_folding_follows_onnx_integer_semantics() -> None:
    """-shape // 2 truncates toward zero (ONNX Div on integers), a negative-step Slice, Mod's sign rule:
    the folded constants are onnxruntime's."""
    nodes = [
        N("Shape", ["x"], ["s"]),
        N("Neg", ["s"], ["ns"]),
        N("Div", ["ns", "two"], ["half"]),
        N("Mod", ["ns", "three"], ["m"]),
        N("Add", ["half", "m"], ["hm"]),
        N("Slice", ["hm", "last", "before_first", "zero", "minus1"], ["rev"]),
        N("Cast", ["rev"], ["revf"], to=F),
        N("Add", ["x", "revf"], ["y"]),
    ]
    inits = {
        "two": i64(2),
        "three": i64(3),
        "last": i64(-1),
        "before_first": i64(-100),
        "zero": i64(0),
        "minus1": i64(-1),
    }
    model = model_of(nodes, {"x": (F, [2, 5, 3])}, ["y"], inits)
    x = np.zeros((2, 5, 3), np.float32)
    (y,), conv = run(model, {"x": x})
    np.testing.assert_array_equal(y, run_ort(model, {"x": x})[0])
    assert op_names(conv) == ["ADD"]
