"""Golden outputs: a float64 reference run, independent of both the driver and onnxruntime, cached.

The reference is `onnx.reference` (ONNX's own NumPy implementation of the
operators) evaluating a float64 copy of the model: every float initializer,
input and output becomes DOUBLE, so the only float32 rounding left is that of
the weights themselves (which are the model). Results are cached under
<cache>/golden/ by a key made of the model bytes, the inputs and the
reference's version, so a changed model or dataset never serves stale
outputs; a corrupt cache file is recomputed.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from mlts.datasets.cache import cache_root, cached_file

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def float64_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with float initializers, Constant values, inputs and outputs in float64; shapes re-inferred."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for i, init in enumerate(g.initializer):
        if init.data_type in _FLOAT_TYPES:
            g.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name)
            )
    for node in g.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _FLOAT_TYPES:
                attr.t.CopyFrom(
                    numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float64), attr.t.name)
                )
        if node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to" and attr.i in _FLOAT_TYPES:
                    attr.i = TensorProto.DOUBLE
    for vi in [*g.input, *g.output]:
        if vi.type.tensor_type.elem_type in _FLOAT_TYPES:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    del g.value_info[:]
    return out


def reference_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]]
) -> list[list[np.ndarray]]:
    """Every output of the float64 copy of `model` for each feed (inputs given as any float dtype)."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(float64_copy(model))
    results = []
    for feed in feeds:
        cast = {
            k: np.asarray(v, np.float64) if np.issubdtype(np.asarray(v).dtype, np.floating) else v
            for k, v in feed.items()
        }
        results.append([np.asarray(o, np.float64) for o in evaluator.run(None, cast)])
    return results


def _key(model_bytes: bytes, feeds: Sequence[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256(model_bytes)
    for feed in feeds:
        for name in sorted(feed):
            arr = np.ascontiguousarray(feed[name])
            h.update(f"{name}:{arr.dtype}:{arr.shape}".encode())
            h.update(arr.tobytes())
    h.update(f"onnx{onnx.__version__}".encode())
    return h.hexdigest()[:24]


def _valid_npz(path: Path, count: int) -> bool:
    try:
        with np.load(path) as data:
            return sorted(data.files) == sorted(f"out{i}" for i in range(count)) and all(
                data[f].dtype == np.float64 and np.isfinite(data[f]).all() for f in data.files
            )
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return False


def golden_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], label: str
) -> list[np.ndarray]:
    """The float64 reference's first output for each feed, from the cache when it holds them.

    `label` names the cache file (e.g. the model name) so people can see what it is.
    """
    model_bytes = model.SerializeToString()
    path = cache_root() / "golden" / f"{label}.{_key(model_bytes, feeds)}.npz"

    def build() -> bytes:
        outs = reference_outputs(model, feeds)
        buf = io.BytesIO()
        np.savez(buf, **{f"out{i}": o[0] for i, o in enumerate(outs)})
        return buf.getvalue()

    cached_file(path, lambda p: _valid_npz(p, len(feeds)), build)
    with np.load(path) as data:
        return [data[f"out{i}"] for i in range(len(feeds))]
