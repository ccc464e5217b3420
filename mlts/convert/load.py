"""Reading an ONNX model, fixing its symbolic batch dimension and inferring every static shape."""

from __future__ import annotations

import os

import onnx
from google.protobuf.message import DecodeError

from mlts.convert.errors import ConversionError

ModelSource = onnx.ModelProto | str | os.PathLike | bytes
DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(source: ModelSource) -> onnx.ModelProto:
    """A ModelProto from a proto (copied, never modified), a path or serialized bytes."""
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        what = "the given ModelProto"
    elif isinstance(source, (bytes, bytearray)):
        model = _parse(bytes(source), "the given bytes")
        what = "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        what = f"'{path}'"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ConversionError(f"cannot read ONNX model '{path}': no such file") from None
        except OSError as e:
            raise ConversionError(f"cannot read ONNX model '{path}': {e.strerror or e}") from None
        model = _parse(data, what)
        try:
            onnx.external_data_helper.load_external_data_for_model(
                model, os.path.dirname(os.path.abspath(path))
            )
        except (OSError, ValueError) as e:
            raise ConversionError(f"cannot load the external data of ONNX model '{path}': {e}") from None
    else:
        raise ConversionError(
            f"cannot convert an object of type {type(source).__name__}; expected an onnx.ModelProto, a path or bytes"
        )
    if not model.HasField("graph") or not model.graph.node or not model.opset_import:
        raise ConversionError(f"{what} is not an ONNX model: it has no graph nodes or no opset import")
    return model


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ConversionError(f"{what} is not an ONNX model: protobuf parse failed ({e})") from None
    return model


def default_opset(model: onnx.ModelProto) -> int:
    """The opset version of the default ONNX domain."""
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    raise ConversionError("the model imports no opset of the default ONNX domain ('' / 'ai.onnx')")


def fix_batch(model: onnx.ModelProto, batch_size: int) -> list[str]:
    """Set symbolic or unknown leading dims of the graph inputs to `batch_size`; returns notes."""
    if batch_size < 1:
        raise ConversionError(f"batch_size {batch_size} is invalid; expected >= 1")
    initializers = {i.name for i in model.graph.initializer}
    notes = []
    for inp in model.graph.input:
        if inp.name in initializers or not inp.type.HasField("tensor_type"):
            continue
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            raise ConversionError(
                f"input '{inp.name}' has no shape; the converter needs the rank and every dimension but the batch"
            )
        for i, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                if i == 0 and dim.dim_value != batch_size:
                    notes.append(
                        f"batch_size {batch_size} not applied: input '{inp.name}' has a static batch of {dim.dim_value}"
                    )
                continue
            label = dim.dim_param or "?"
            if i != 0:
                raise ConversionError(
                    f"input '{inp.name}' dimension {i} is symbolic ('{label}'); only the batch dimension (0) may be symbolic"
                )
            dim.Clear()
            dim.dim_value = batch_size
            notes.append(f"fixed symbolic batch dimension '{label}' of input '{inp.name}' to {batch_size}")
    return notes


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Static shapes for every tensor: declared intermediate/output shapes are dropped and re-inferred."""
    del model.graph.value_info[:]
    for out in model.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # onnx raises several types (InferenceError, ValidationError, RuntimeError)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConversionError(f"ONNX shape inference failed: {first}") from None
