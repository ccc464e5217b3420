"""ConversionError cases: one-line messages that name the node, the bad value and what is valid."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from mlts.convert import ConversionError, convert, supported_ops
from tests.convert._util import make_model

N = helper.make_node


def error_of(source, **kwargs) -> str:
    with pytest.raises(ConversionError) as info:
        convert(source, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unsupported_op_names_the_node_and_the_cause() -> None:
    model = make_model([N("Hardmax", ["x"], ["y"], name="hm_3")], {"x": [1, 4]}, ["y"])
    msg = error_of(model)
    assert msg.startswith("Hardmax node 'hm_3': no NNAPI operation computes ONNX op 'Hardmax'")
    assert "--list-ops" in msg
    assert "Hardmax" not in supported_ops()


def test_unnamed_node_is_named_by_op_and_index() -> None:
    model = make_model([N("Relu", ["x"], ["r"]), N("Hardmax", ["r"], ["y"])], {"x": [1, 4]}, ["y"])
    assert error_of(model).startswith("Hardmax node #1 (output 'y'): no NNAPI operation")


def test_foreign_domain_is_unsupported() -> None:
    model = make_model(
        [N("FusedConv", ["x"], ["y"], domain="com.microsoft", name="fc")], {"x": [1, 2]}, ["y"]
    )
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert "domain 'com.microsoft'" in error_of(model)


def test_not_onnx_bytes_and_missing_file(tmp_path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xfe this is not a protobuf \x00\x01")
    assert "is not an ONNX model" in error_of(junk)
    assert "is not an ONNX model" in error_of(b"")
    msg = error_of(tmp_path / "missing.onnx")
    assert "missing.onnx" in msg and "no such file" in msg


def test_grouped_conv_with_dilation_rejected() -> None:
    model = make_model(
        [N("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 2], name="g")],
        {"x": [1, 4, 7, 7]},
        ["y"],
        {"w": np.ones((6, 2, 3, 3), np.float32)},
    )
    msg = error_of(model)
    assert "Conv node 'g' is a grouped convolution (group=2) with dilations [2, 2]" in msg


def test_group_not_dividing_the_channels_rejected() -> None:
    model = make_model(
        [N("Conv", ["x", "w"], ["y"], group=3, name="g")],
        {"x": [1, 4, 5, 5]},
        ["y"],
        {"w": np.ones((6, 2, 3, 3), np.float32)},
    )
    assert "Conv node 'g'" in error_of(model)


def test_bad_auto_pad_and_reflect_pad() -> None:
    conv = make_model(
        [N("Conv", ["x", "w"], ["y"], auto_pad="SAME", name="c")],
        {"x": [1, 2, 5, 5]},
        ["y"],
        {"w": np.ones((3, 2, 3, 3), np.float32)},
    )
    # onnx shape inference rejects the value before the converter sees it; either way one line.
    assert "SAME" in error_of(conv)
    pad = make_model(
        [N("Pad", ["x", "p"], ["y"], mode="reflect", name="p")],
        {"x": [1, 4]},
        ["y"],
        {"p": np.array([0, 4, 0, 0])},
    )
    msg = error_of(pad)
    assert msg.startswith("Pad node 'p': mode 'reflect' pads axis 1 of size 4 by 4 and 0")
    assert "at most 3" in msg


def test_pool_dilation_and_symbolic_spatial_dims() -> None:
    pool = make_model(
        [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], name="mp")],
        {"x": [1, 1, 6, 6]},
        ["y"],
        opset=13,
    )
    assert "dilations [2, 2]" in error_of(pool)
    sym = make_model([N("Relu", ["x"], ["y"])], {"x": [1, 3, "H", 4]}, ["y"])
    assert "dimension 2 is symbolic ('H')" in error_of(sym)


def test_opset_below_first_handler_and_bad_batch() -> None:
    model = make_model([N("HardSwish", ["x"], ["y"])], {"x": [1, 2]}, ["y"], opset=14)
    model.opset_import[0].version = 13
    assert "ONNX op 'HardSwish' is converted from opset 14; the model imports opset 13" in error_of(model)
    assert "batch_size 0" in error_of(
        make_model([N("Relu", ["x"], ["y"])], {"x": [1, 2]}, ["y"]), batch_size=0
    )
