"""The converter's extension mapping (ONNX Gelu, the extension's own domain), the GELU zoo model, `mlts devices`."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from driver.executor import run_model
from driver.extensions import ACTIVATIONS
from mlts.cli import main
from mlts.convert import convert
from mlts.convert.errors import ConversionError
from mlts.hal import example_extension as E
from mlts.hal.extensions import extensions_used
from mlts.models import gelu_mlp, zoo

OFFERED = [E.NAME]


def _gelu_graph(domain: str = "", approximate: str | None = "none", op_type: str = "Gelu") -> onnx.ModelProto:
    kwargs = {} if approximate is None else {"approximate": approximate}
    node = helper.make_node(op_type, ["x"], ["y"], name="act", domain=domain, **kwargs)
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 7]) for n in ("x", "y")]
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], "g", io[:1], io[1:]), opset_imports=opsets)
    model.ir_version = 10
    return model


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


X = np.random.default_rng(5).standard_normal((3, 7)).astype(np.float32) * 3


@pytest.mark.parametrize("approximate", ["none", "tanh", None])
def test_onnx_gelu_becomes_the_extension_operation(approximate: str | None) -> None:
    model = _gelu_graph(approximate=approximate)
    conv = convert(model, extensions=OFFERED)
    assert extensions_used(conv.model) == (E.NAME,)
    got = run_model(conv.model, [X], (ACTIVATIONS,))[0]
    np.testing.assert_allclose(got, _ort(model, X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_without_a_driver_offering_it_onnx_gelu_is_its_definition_in_nnapi_arithmetic(
    approximate: str,
) -> None:
    model = _gelu_graph(approximate=approximate)
    conv = convert(model)
    assert extensions_used(conv.model) == ()
    got = run_model(conv.model, [X])[0]
    np.testing.assert_allclose(got, _ort(model, X), rtol=1e-5, atol=1e-5)


def test_without_a_driver_offering_it_the_extension_domain_node_is_refused_clearly() -> None:
    with pytest.raises(ConversionError, match=f"no NNAPI equivalent.*'{E.NAME}'.*no target driver offers"):
        convert(_gelu_graph(domain=E.NAME))


def test_a_custom_domain_node_maps_to_the_extension() -> None:
    model = _gelu_graph(domain=E.NAME, approximate="tanh")
    conv = convert(model, extensions=OFFERED)
    got = run_model(conv.model, [X], (ACTIVATIONS,))[0]
    want = _ort(_gelu_graph(approximate="tanh"), X)  # onnxruntime cannot run the custom domain itself
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConversionError, match="no target driver offers"):
        convert(model)


def test_unknown_op_of_the_custom_domain_and_a_bad_mode_are_refused() -> None:
    with pytest.raises(ConversionError, match=f"unsupported op 'Swish' of domain '{E.NAME}'"):
        convert(_gelu_graph(domain=E.NAME, op_type="Swish"), extensions=OFFERED)
    with pytest.raises(ConversionError, match="approximate='erf'"):
        convert(_gelu_graph(approximate="erf"), extensions=OFFERED)


def test_the_gelu_zoo_model_matches_onnxruntime() -> None:
    entry = zoo.get(gelu_mlp.NAME)
    proto = entry.build()
    conv = convert(proto, extensions=OFFERED)
    assert extensions_used(conv.model) == (E.NAME,)
    x = np.random.default_rng(11).standard_normal(entry.input_shape).astype(np.float32)
    got = run_model(conv.model, [x], (ACTIVATIONS,))[0]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": x})[0]
    # fp32 CTS tolerance (atol 1e-5 + rtol 5e-7 |e|) would be tight across two matmuls; 1e-5 both ways.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # GELU sees both signs: the block is not a plain linear map.
    assert np.any(np.abs(got - x) > 0.1)


def test_devices_lists_extensions_with_their_operand_types() -> None:
    r = CliRunner().invoke(main, ["devices", "--drivers", "^sample-(all|minimal)$", "--json"])
    assert r.exit_code == 0, r.output
    by_name = {d["name"]: d for d in json.loads(r.output)}
    assert by_name["sample-all"]["extensions"] == [
        {"name": E.NAME, "operand_types": [{"type": 0, "is_tensor": False, "byte_size": 4}]}
    ]
    assert by_name["sample-minimal"]["extensions"] == []
    r = CliRunner().invoke(main, ["devices", "--drivers", "^sample-all$"])
    assert f"{E.NAME}: operand types 0 (scalar, 4 bytes)" in r.output


def test_convert_command_maps_gelu_only_with_the_extension(tmp_path) -> None:
    custom = tmp_path / "custom.onnx"
    onnx.save(_gelu_graph(domain=E.NAME), str(custom))
    r = CliRunner().invoke(main, ["convert", str(custom), "-o", str(tmp_path / "custom.nnm")])
    assert r.exit_code == 2 and "no target driver offers" in r.output and "Traceback" not in r.output
    onnx_path = tmp_path / "gelu.onnx"
    onnx.save(_gelu_graph(), str(onnx_path))
    out = tmp_path / "gelu.nnm"
    r = CliRunner().invoke(main, ["convert", str(onnx_path), "-o", str(out), "--extension", E.NAME])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["inspect", str(out)])
    assert f"extensions: {E.NAME} (prefix 1)" in r.output
    r = CliRunner().invoke(main, ["convert", str(onnx_path), "-o", str(out), "--extension", "gelu"])
    assert r.exit_code == 2 and "reverse-domain" in r.output
