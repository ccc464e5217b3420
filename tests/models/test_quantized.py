"""The quantized zoo models: names, structure, quantization parameters, determinism, and that they run."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from mlts.datasets.images import image_batch, quantize_input
from mlts.models import zoo
from mlts.models.quantized import INPUT_SCALE, SOFTMAX_SCALE

SMALL = "mobilenet_v1_0.25_128"
VARIANTS = {
    "_quant": ("uint8", "uint8"),
    "_quant_signed": ("int8", "int8"),
    "_quant_perchannel": ("uint8", "int8 per-channel"),
}


@pytest.fixture(scope="module")
def built() -> dict[str, onnx.ModelProto]:
    return {suffix: zoo.load(SMALL + suffix) for suffix in VARIANTS}


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


@pytest.mark.parametrize("suffix", VARIANTS)
def test_registry_entries(suffix):
    entry = zoo.get(SMALL + suffix)
    dtype, weights = VARIANTS[suffix]
    assert entry.quantized and entry.float_name == SMALL and entry.dtype == dtype and entry.weights == weights
    assert entry.input_scale == 1 / 128 and entry.input_zero_point == (0 if dtype == "int8" else 128)
    summary = zoo.summary(entry.name)
    assert summary["params"] == zoo.summary(SMALL)["params"] and summary["float_model"] == SMALL
    assert summary["input_quantization"] == {"scale": 1 / 128, "zero_point": entry.input_zero_point}


@pytest.mark.parametrize("suffix", VARIANTS)
def test_integer_io_and_qdq_structure(built, suffix):
    model = built[suffix]
    signed = suffix == "_quant_signed"
    elem = onnx.TensorProto.INT8 if signed else onnx.TensorProto.UINT8
    assert model.graph.input[0].type.tensor_type.elem_type == elem
    assert model.graph.output[0].type.tensor_type.elem_type == elem
    ops = {n.op_type for n in model.graph.node}
    assert ops == {"DequantizeLinear", "QuantizeLinear", "Conv", "GlobalAveragePool", "Reshape", "Softmax"}
    inits = _inits(model)
    (dq_in,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "input"]
    assert float(inits[dq_in.input[1]]) == INPUT_SCALE == 0.0078125
    assert int(inits[dq_in.input[2]]) == (0 if signed else 128)
    (q_out,) = [n for n in model.graph.node if n.output[0] == "probabilities"]
    assert q_out.op_type == "QuantizeLinear"
    assert float(inits[q_out.input[1]]) == SOFTMAX_SCALE and int(inits[q_out.input[2]]) == (
        -128 if signed else 0
    )
    assert [o.domain for o in model.opset_import] == [""]


def test_weights_match_the_variant(built):
    def conv_weights(model):
        inits = _inits(model)
        out = []
        for n in model.graph.node:
            if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].ndim == 4:
                attrs = {a.name: a.i for a in n.attribute}
                out.append((inits[n.input[0]], inits[n.input[1]], inits[n.input[2]], attrs.get("axis")))
        return out

    for w, scale, _zp, _ in conv_weights(built["_quant"]):
        assert w.dtype == np.uint8 and scale.ndim == 0
    for w, scale, zp, _ in conv_weights(built["_quant_signed"]):
        assert w.dtype == np.int8 and scale.ndim == 0 and int(zp) == 0
    per_channel = conv_weights(built["_quant_perchannel"])
    assert len(per_channel) == 28
    for w, scale, zp, axis in per_channel:
        assert w.dtype == np.int8 and scale.shape == (w.shape[0],) and not zp.any() and axis in (None, 0)


def test_build_is_byte_deterministic(built):
    again = zoo.get(SMALL + "_quant").build()
    assert again.SerializeToString() == zoo.model_path(SMALL + "_quant").read_bytes()


def test_quantized_models_track_the_float_model(built):
    x = image_batch(24, 128, start=0)
    floats = ort.InferenceSession(str(zoo.model_path(SMALL)))
    want = np.concatenate([floats.run(None, {"input": x[i : i + 1]})[0] for i in range(len(x))])
    for suffix, model in built.items():
        q = quantize_input(x)
        if suffix == "_quant_signed":
            q = (q.astype(np.int16) - 128).astype(np.int8)
        session = ort.InferenceSession(model.SerializeToString())
        got = np.concatenate([session.run(None, {"input": q[i : i + 1]})[0] for i in range(len(q))])
        zp = -128 if suffix == "_quant_signed" else 0
        probs = (got.astype(np.float64) - zp) * SOFTMAX_SCALE
        # Probabilities within a few hundredths of the float model's, and top-1 far above chance.
        assert np.abs(probs - want).mean() < 0.002, suffix
        assert (got.argmax(axis=1) == want.argmax(axis=1)).mean() > 0.25, suffix
