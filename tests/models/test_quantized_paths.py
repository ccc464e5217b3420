"""The sample driver's three kernel paths give the same bytes on whole quantized networks.

The networks end at their 8-bit logits (the SOFTMAX after them is cut off: on random images its
output is nearly all zeros, which would hide a difference upstream).

NNAPI's 8-bit arithmetic is exact (int32 sums, one rounding in the requantization), so the compiled
integer GEMM (AVX512-VNNI or AVX2, whichever the library was built for), the compiled float32-staged
path (MLTS_DRIVER_QGEMM=0) and the NumPy path (MLTS_DRIVER_NATIVE=0) must agree on every output byte,
not only within a tolerance. Each path runs in its own private driver service, so each reads its own
environment at start.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from mlts.convert import convert
from mlts.hal.enums import DTYPE_NAME, OperandType
from mlts.models import zoo
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session

SMALL = "mobilenet_v1_0.25_128"
VARIANTS = ("_quant", "_quant_signed", "_quant_perchannel")
FACTORY = "driver.variants:SampleAll"
PATHS = {
    "compiled": {},
    "no integer GEMM": {"MLTS_DRIVER_QGEMM": "0"},
    "numpy": {"MLTS_DRIVER_NATIVE": "0"},
}


def _inputs(model, seed: int) -> list[np.ndarray]:
    """Random 8-bit images over the whole range of the input's type (not a flat or all-zero input)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in model.main.input_indexes:
        op = model.main.operands[i]
        dtype = np.dtype(DTYPE_NAME[OperandType(op.type)])
        info = np.iinfo(dtype)
        out.append(rng.integers(info.min, info.max + 1, op.dimensions, dtype=np.int64).astype(dtype))
    return out


def logits_model(name: str):
    """The zoo's quantized network up to its 8-bit logits (what feeds DEQUANTIZE, SOFTMAX, QUANTIZE)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(zoo.load(name))
    graph = proto.graph
    softmax = next(i for i, node in enumerate(graph.node) if node.op_type == "Softmax")
    logits = graph.node[softmax - 1].input[0]  # the DequantizeLinear before the Softmax reads them
    elem_type = graph.output[0].type.tensor_type.elem_type
    del graph.node[softmax - 1 :]
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(logits, elem_type, [1, 1001]))
    return convert(proto).model


@pytest.fixture(scope="module")
def devices():
    opened = {
        name: RemoteDevice.start(FACTORY, name=f"sample-all ({name})", env=env) for name, env in PATHS.items()
    }
    try:
        for name, env in PATHS.items():  # each service really runs with its path's switch
            with open(f"/proc/{opened[name].process.pid}/environ", "rb") as f:
                environ = set(f.read().split(b"\0"))
            assert all(f"{k}={v}".encode() in environ for k, v in env.items()), name
        yield opened
    finally:
        for device in opened.values():
            device.close()


@pytest.mark.parametrize("suffix", VARIANTS)
def test_every_kernel_path_gives_the_same_bytes(devices, suffix):
    model = logits_model(SMALL + suffix)
    feeds = [_inputs(model, seed) for seed in (1, 2)]
    results: dict[str, list[list[np.ndarray]]] = {}
    for name, device in devices.items():
        with Session(device, model) as session:
            results[name] = [session.run(feed)[0] for feed in feeds]
    reference = results["compiled"]
    for feed_outputs in reference:
        assert len(np.unique(feed_outputs[0])) > 32, "a degenerate output would prove nothing"
    for name, outputs in results.items():
        for k, (got, want) in enumerate(zip(outputs, reference, strict=True)):
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and g.shape == w.shape
                diff = np.flatnonzero(g.view(np.uint8) != w.view(np.uint8))
                assert diff.size == 0, (
                    f"{SMALL + suffix}, input {k}: {name} differs from compiled at {diff[:5]}"
                )
