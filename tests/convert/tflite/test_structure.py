"""Several subgraphs (IF, WHILE), signatures, refusals: what the importer maps and what it refuses, and why."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import convert_tflite, convert_tflite_plan
from mlts.hal.enums import OperationType
from tests.convert.tflite._check import assert_matches, check, one_op, rand, run_litert, run_nn
from tests.convert.tflite._tflbuild import TflModel


def _while_model(limit: int = 5) -> bytes:
    """while i < limit: i, x = i + 1, x + x  (i: INT32 [1], x: FLOAT32 [2, 3])."""
    m = TflModel()
    main, cond, body = m.subgraph("main"), m.subgraph("cond"), m.subgraph("body")
    i, x = main.tensor([1], "int32", name="i"), main.tensor([2, 3], name="x")
    i2, x2 = main.tensor([1], "int32", name="i_out"), main.tensor([2, 3], name="x_out")
    main.op("WHILE", [i, x], [i2, x2], "WhileOptions", cond_subgraph_index=1, body_subgraph_index=2)
    main.io([i, x], [i2, x2])
    ci, cx = cond.tensor([1], "int32"), cond.tensor([2, 3])
    lim = cond.tensor([], "int32", np.int32(limit))
    c = cond.tensor([], "bool")
    cond.op("LESS", [ci, lim], [c])
    cond.io([ci, cx], [c])
    bi, bx = body.tensor([1], "int32"), body.tensor([2, 3])
    one = body.tensor([1], "int32", np.array([1], np.int32))
    bi2, bx2 = body.tensor([1], "int32"), body.tensor([2, 3])
    body.op("ADD", [bi, one], [bi2], "AddOptions")
    body.op("ADD", [bx, bx], [bx2], "AddOptions")
    body.io([bi, bx], [bi2, bx2])
    return m.finish()


def test_while_loop_becomes_nnapi_while_with_its_subgraphs() -> None:
    data = _while_model()
    conv = convert_tflite(data)
    assert [op.type for op in conv.model.main.operations] == [OperationType.WHILE]
    assert len(conv.model.referenced) == 2
    feeds = [np.array([1], np.int32), rand([2, 3])]
    out = check(data, feeds)
    assert out[0][0] == 5 and np.allclose(out[1], feeds[1] * 16)


def _if_model(then_index: int = 1) -> bytes:
    m = TflModel()
    main, then, other = m.subgraph("main"), m.subgraph("then"), m.subgraph("else")
    c, x, y = main.tensor([1], "bool", name="c"), main.tensor([3], name="x"), main.tensor([3], name="y")
    main.op("IF", [c, x], [y], "IfOptions", then_subgraph_index=then_index, else_subgraph_index=2)
    main.io([c, x], [y])
    tx, ty = then.tensor([3]), then.tensor([3])
    then.op("ADD", [tx, tx], [ty], "AddOptions")
    then.io([tx], [ty])
    ex, ey = other.tensor([3]), other.tensor([3])
    other.op("MUL", [ex, ex], [ey], "MulOptions")
    other.io([ex], [ey])
    return m.finish()


@pytest.mark.parametrize("condition", [True, False])
def test_if_becomes_nnapi_if(condition: bool) -> None:
    data = _if_model()
    conv = convert_tflite(data)
    assert conv.model.main.operations[0].type == OperationType.IF
    check(data, [np.array([condition]), rand([3])])


def test_a_subgraph_that_reaches_itself_is_refused() -> None:
    with pytest.raises(ConversionError, match=r"IF \(operator #0 of subgraph 0 'main'\).*reaches itself"):
        convert_tflite(_if_model(then_index=0))


def _signature_model() -> bytes:
    """Two signatures: 'add' on subgraph 0, 'scale' on subgraph 1."""
    m = TflModel()
    a, b = m.subgraph("add"), m.subgraph("scale")
    x, y, z = (
        a.tensor([4], name="serving_x:0"),
        a.tensor([4], name="serving_y:0"),
        a.tensor([4], name="Identity"),
    )
    a.op("ADD", [x, y], [z], "AddOptions")
    a.io([x, y], [z])
    u = b.tensor([4], name="u")
    k = b.tensor([4], data=np.full(4, 3.0, np.float32))
    v = b.tensor([4], name="v")
    b.op("MUL", [u, k], [v], "MulOptions")
    b.io([u], [v])
    m.signature("add", 0, [("y", y), ("x", x)], [("sum", z)])
    m.signature("scale", 1, [("value", u)], [("scaled", v)])
    return m.finish()


def test_signatures_name_and_order_inputs_and_pick_the_subgraph() -> None:
    from mlts.bench.litert_reference import LiteRtReference

    data = _signature_model()
    conv, plan = convert_tflite_plan(data, signature="add")
    assert [t.name for t in conv.inputs] == ["y", "x"] and [t.name for t in conv.outputs] == ["sum"]
    feeds = [rand([4], seed=1), rand([4], seed=2)]
    reference = LiteRtReference(data, 1, plan)
    assert_matches(run_nn(data, feeds, signature="add")[0], reference.run(feeds)[0])

    conv, plan = convert_tflite_plan(data, signature="scale")
    assert plan.subgraph == 1 and [t.name for t in conv.inputs] == ["value"]
    feeds = [rand([4], seed=3)]
    out = run_nn(data, feeds, signature="scale")[0]
    assert_matches(out, LiteRtReference(data, 1, plan).run(feeds)[0])
    assert np.allclose(out, feeds[0] * 3)
    with pytest.raises(ConversionError, match=r"no signature 'predict'; its signatures: 'add', 'scale'"):
        convert_tflite(data, signature="predict")


def test_default_is_the_main_subgraph_with_its_tensor_names() -> None:
    conv = convert_tflite(_signature_model())
    assert [t.name for t in conv.inputs] == ["serving_x:0", "serving_y:0"]


REFUSALS = {
    "unmapped_builtin": (
        ("SQUARE", [dict(shape=[4])], [dict(shape=[4])]),
        {},
        r"SQUARE \(operator #0 of subgraph 0 'main'\): TFLite's NNAPI delegate maps no NNAPI operation for it "
        r"at any feature level",
    ),
    "batch_matmul_needs_feature_level_6": (
        (
            "BATCH_MATMUL",
            [dict(shape=[2, 3]), dict(shape=[3, 4])],
            [dict(shape=[2, 4])],
            "BatchMatMulOptions",
        ),
        {},
        r"BATCH_MATMUL .*maps it from NNAPI feature level 6 \(Android 13\) on; the importer targets feature "
        r"level 4 \(NNAPI 1.3\)",
    ),
    "mirror_pad_needs_feature_level_7": (
        (
            "MIRROR_PAD",
            [dict(shape=[3, 3]), dict(shape=[2, 2], dtype="int32", data=np.ones([2, 2]))],
            [dict(shape=[5, 5])],
            "MirrorPadOptions",
        ),
        {},
        r"MIRROR_PAD .*NNAPI's MIRROR_PAD operation: TFLite's NNAPI delegate maps it from NNAPI feature level 7",
    ),
    "reverse_v2_needs_feature_level_7": (
        (
            "REVERSE_V2",
            [dict(shape=[3, 3]), dict(shape=[1], dtype="int32", data=np.zeros(1))],
            [dict(shape=[3, 3])],
        ),
        {},
        r"REVERSE_V2 .*NNAPI's REVERSE operation: TFLite's NNAPI delegate maps it from NNAPI feature level 7",
    ),
    "rsqrt_int8_needs_feature_level_7": (
        (
            "RSQRT",
            [dict(shape=[4], dtype="int8", scale=0.1, zero_point=0)],
            [dict(shape=[4], dtype="int8", scale=0.1)],
        ),
        {},
        r"RSQRT .*its input is INT8 \(8-bit RSQRT\): TFLite's NNAPI delegate maps it from NNAPI feature level 7",
    ),
    "pack_last_axis_needs_feature_level_6": (
        ("PACK", [dict(shape=[2, 3]), dict(shape=[2, 3])], [dict(shape=[2, 3, 2])], "PackOptions"),
        {"axis": 2, "values_count": 2},
        r"PACK .*packs along a new last dimension \(NNAPI's PACK\): .*feature level 6",
    ),
    "add_rank_5": (
        (
            "ADD",
            [dict(shape=[1, 1, 2, 2, 2]), dict(shape=[1, 1, 2, 2, 2])],
            [dict(shape=[1, 1, 2, 2, 2])],
            "AddOptions",
        ),
        {},
        r"ADD .*an input has rank above 4; the NNAPI delegate maps ADD for ranks <= 4",
    ),
    "mean_rank_5": (
        (
            "MEAN",
            [dict(shape=[1, 2, 2, 2, 2]), dict(shape=[1], dtype="int32", data=np.array([1]))],
            [dict(shape=[1, 2, 2, 2])],
            "ReducerOptions",
        ),
        {},
        r"MEAN .*its input has rank above 4",
    ),
    "split_v_zero_size": (
        (
            "SPLIT_V",
            [
                dict(shape=[2, 4]),
                dict(shape=[3], dtype="int32", data=np.array([2, 0, 2])),
                dict(shape=[1], dtype="int32", data=np.array([1])),
            ],
            [dict(shape=[2, 2]), dict(shape=[2, 0]), dict(shape=[2, 2])],
            "SplitVOptions",
        ),
        {"num_splits": 3},
        r"SPLIT_V .*include 0; the NNAPI delegate maps non-zero split sizes only",
    ),
    "split_v_run_time_sizes": (
        (
            "SPLIT_V",
            [
                dict(shape=[2, 4]),
                dict(shape=[2], dtype="int32"),
                dict(shape=[1], dtype="int32", data=np.array([1])),
            ],
            [dict(shape=[2, 2]), dict(shape=[2, 2])],
            "SplitVOptions",
        ),
        {"num_splits": 2},
        r"SPLIT_V .*its size_splits \(input 1, .*\) is computed at run time; NNAPI takes it as a constant",
    ),
    "unpack_last_axis": (
        ("UNPACK", [dict(shape=[2, 3])], [dict(shape=[2])] * 3, "UnpackOptions"),
        {"num": 3, "axis": 1},
        r"UNPACK .*unpacks along the last dimension, which the NNAPI delegate does not map",
    ),
    "dilated_grouped_conv": (
        (
            "CONV_2D",
            [
                dict(shape=[1, 5, 5, 4]),
                dict(shape=[4, 3, 3, 2], data=np.ones([4, 3, 3, 2])),
                dict(shape=[4], data=np.zeros(4)),
            ],
            [dict(shape=[1, 5, 5, 4])],
            "Conv2DOptions",
        ),
        {"padding": 0, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 2, "dilation_h_factor": 2},
        r"CONV_2D .*a dilated grouped convolution: NNAPI's GROUPED_CONV_2D has no dilation",
    ),
    "squared_difference_rank_5": (
        (
            "SQUARED_DIFFERENCE",
            [dict(shape=[1, 1, 1, 2, 2]), dict(shape=[1, 1, 1, 2, 2])],
            [dict(shape=[1, 1, 1, 2, 2])],
        ),
        {},
        r"SQUARED_DIFFERENCE .*an input has rank above 4",
    ),
    "version_above_the_delegate": (
        ("ADD", [dict(shape=[4]), dict(shape=[4])], [dict(shape=[4])], "AddOptions"),
        {"version": 5},
        r"ADD .*operator version 5; the NNAPI delegate maps versions up to 2",
    ),
    "fused_tanh": (
        ("ADD", [dict(shape=[4]), dict(shape=[4])], [dict(shape=[4])], "AddOptions"),
        {"fused_activation_function": 4},
        r"ADD .*fused activation TANH has no NNAPI fused-activation code",
    ),
    "int32_activation": (
        (
            "MUL",
            [dict(shape=[4], dtype="int32"), dict(shape=[4], dtype="int32")],
            [dict(shape=[4], dtype="int32")],
            "MulOptions",
        ),
        {"fused_activation_function": 1},
        r"MUL .*fused activation RELU: the NNAPI delegate maps this operator without a fused activation only",
    ),
    "div_int32": (
        (
            "DIV",
            [dict(shape=[4], dtype="int32"), dict(shape=[4], dtype="int32")],
            [dict(shape=[4], dtype="int32")],
            "DivOptions",
        ),
        {},
        r"DIV .*its input is INT32; the NNAPI delegate maps it for FLOAT32",
    ),
    "strided_slice_ellipsis": (
        (
            "STRIDED_SLICE",
            [
                dict(shape=[4, 6]),
                dict(shape=[2], dtype="int32", data=np.array([0, 0])),
                dict(shape=[2], dtype="int32", data=np.array([2, 2])),
                dict(shape=[2], dtype="int32", data=np.array([1, 1])),
            ],
            [dict(shape=[2, 2])],
            "StridedSliceOptions",
        ),
        {"ellipsis_mask": 1},
        r"STRIDED_SLICE .*ellipsis_mask is set",
    ),
    "conv_without_bias": (
        (
            "CONV_2D",
            [dict(shape=[1, 4, 4, 2]), dict(shape=[3, 1, 1, 2], data=np.ones([3, 1, 1, 2])), None],
            [dict(shape=[1, 4, 4, 3])],
            "Conv2DOptions",
        ),
        {"padding": 0, "stride_w": 1, "stride_h": 1},
        r"CONV_2D .*without a bias: the NNAPI delegate does not map it",
    ),
    "gather_batch_dims": (
        (
            "GATHER",
            [dict(shape=[2, 4]), dict(shape=[2, 1], dtype="int32", feed=np.zeros([2, 1], np.int32))],
            [dict(shape=[2, 1])],
            "GatherOptions",
        ),
        {"axis": 1, "batch_dims": 1},
        r"GATHER .*batch_dims is set",
    ),
    "reshape_int32": (
        (
            "RESHAPE",
            [dict(shape=[2, 3], dtype="int32"), dict(shape=[1], dtype="int32", data=np.array([6]))],
            [dict(shape=[6], dtype="int32")],
        ),
        {},
        r"RESHAPE .*its input is INT32: TFLite's NNAPI delegate maps it from NNAPI feature level 6",
    ),
    "gelu_without_extension": (
        ("GELU", [dict(shape=[4])], [dict(shape=[4])], "GeluOptions"),
        {},
        r"GELU .*needs the vendor extension 'com.example.mlts.activations', which no target driver declares",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_name_operator_subgraph_and_reason(case: str) -> None:
    args, options, pattern = REFUSALS[case]
    version = options.pop("version", 1) if "version" in options else 1
    data, _ = one_op(*args, version=version, **options)
    with pytest.raises(ConversionError, match=pattern) as info:
        convert_tflite(data)
    assert "\n" not in str(info.value)


def test_custom_operators_are_refused_by_name() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x, y = g.tensor([4], name="x"), g.tensor([4], name="y")
    g.op("CUSTOM", [x], [y], custom="MyVendorOp")
    g.io([x], [y])
    with pytest.raises(
        ConversionError, match=r"custom operator 'MyVendorOp' \(operator #0 of subgraph 0 'main'\)"
    ):
        convert_tflite(m.finish())


def test_gelu_maps_to_the_vendor_extension_a_driver_declares() -> None:
    from mlts.hal import example_extension

    data, _ = one_op("GELU", [dict(shape=[2, 5])], [dict(shape=[2, 5])], "GeluOptions", approximate=True)
    conv = convert_tflite(data, extensions=[example_extension.NAME])
    assert conv.model.extension_name_to_prefix and any("vendor extension" in n for n in conv.notes)


def test_per_channel_fully_connected_weights_are_refused() -> None:
    data, _ = one_op(
        "FULLY_CONNECTED",
        [
            dict(shape=[1, 4], dtype="int8", scale=0.1, zero_point=0),
            dict(shape=[2, 4], dtype="int8", scale=[0.1, 0.2], zero_point=0, data=np.ones([2, 4])),
            None,
        ],
        [dict(shape=[1, 2], dtype="int8", scale=0.5, zero_point=0)],
        "FullyConnectedOptions",
    )
    with pytest.raises(
        ConversionError, match=r"FULLY_CONNECTED .*quantized per channel; NNAPI's FULLY_CONNECTED takes one"
    ):
        convert_tflite(data)


def test_quantization_parameters_carry_over_unchanged() -> None:
    data, _ = one_op(
        "CONV_2D",
        [
            dict(shape=[1, 3, 3, 2], dtype="int8", scale=0.0173, zero_point=-7),
            dict(
                shape=[2, 1, 1, 2],
                dtype="int8",
                scale=[0.011, 0.023],
                zero_point=0,
                data=np.ones([2, 1, 1, 2]),
                axis=0,
            ),
            dict(
                shape=[2],
                dtype="int32",
                scale=[0.0173 * 0.011, 0.0173 * 0.023],
                zero_point=0,
                data=np.zeros(2),
            ),
        ],
        [dict(shape=[1, 3, 3, 2], dtype="int8", scale=0.0419, zero_point=11)],
        "Conv2DOptions",
        padding=0,
        stride_w=1,
        stride_h=1,
    )
    conv = convert_tflite(data)
    operands = conv.model.main.operands
    op = conv.model.main.operations[0]
    x, w, b = (operands[i] for i in op.inputs[:3])
    y = operands[op.outputs[0]]
    assert (x.type, np.float32(x.scale), x.zero_point) == (14, np.float32(0.0173), -7)  # QUANT8_ASYMM_SIGNED
    assert w.type == 11 and w.extra_params.scales == (float(np.float32(0.011)), float(np.float32(0.023)))
    assert w.extra_params.channel_dim == 0 and b.type == 4 and b.scale == 0.0
    assert (np.float32(y.scale), y.zero_point) == (np.float32(0.0419), 11)
    assert conv.inputs[0].dtype == "int8" and conv.inputs[0].zero_point == -7


def test_scalar_tensors_are_one_element_operands() -> None:
    data, feeds = one_op(
        "MUL", [dict(shape=[]), dict(shape=[], data=np.float32(2.0))], [dict(shape=[])], "MulOptions"
    )
    conv = convert_tflite(data)
    assert conv.inputs[0].shape == (1,)
    expected = run_litert(data, feeds)
    assert_matches(run_nn(data, feeds)[0], expected[0])
