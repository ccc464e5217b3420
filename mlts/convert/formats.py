"""One entry point for both model formats: ONNX files and TFLite flatbuffers.

`load_model` reads a path (or bytes) as a TfliteModel when it is a TFLite flatbuffer (its .tflite
suffix or its TFL3 identifier), else as an ONNX ModelProto; `convert` sends a TfliteModel (or a
TFLite path or bytes) to the TFLite importer and everything else to the ONNX converter. Options of
one format that mean nothing for the other are refused in one line rather than ignored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mlts.convert.errors import ConversionError


def is_tflite_source(source: Any) -> bool:
    """Whether `source` is a TFLite model: a TfliteModel, TFLite bytes or a path to a .tflite file."""
    from mlts.convert.tflite import TfliteModel, is_tflite, is_tflite_file

    if isinstance(source, TfliteModel):
        return True
    if isinstance(source, (bytes, bytearray, memoryview)):
        return is_tflite(bytes(source[:8]))
    if isinstance(source, (str, os.PathLike)):
        return is_tflite_file(source)
    return False


def model_format(source: Any) -> str:
    """ "tflite" or "onnx"."""
    return "tflite" if is_tflite_source(source) else "onnx"


def load_model(source: Any):
    """A TfliteModel for a TFLite source, else an ONNX ModelProto (mlts.convert.load.load_model)."""
    if is_tflite_source(source):
        from mlts.convert.tflite import load_tflite

        return load_tflite(source)
    from mlts.convert.load import load_model as load_onnx

    return load_onnx(source)


def convert(
    model: Any,
    *,
    extensions: Iterable[str] = (),
    signature: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    **onnx_options: Any,
):
    """Convert an ONNX or TFLite model to an NN HAL model (see convert_tflite and mlts.convert.converter.convert).

    `signature` applies to TFLite models only; `input_shapes` to both (for a TFLite model, only to
    inputs whose shape signature has dynamic dimensions); the other ONNX options only to ONNX models.
    """
    if is_tflite_source(model):
        from mlts.convert.tflite import convert_tflite

        _refuse_onnx_options(onnx_options)
        return convert_tflite(model, signature=signature, extensions=extensions, input_shapes=input_shapes)
    if signature is not None:
        raise ConversionError(f"a signature ({signature!r}) applies to TFLite models; this is an ONNX model")
    from mlts.convert.converter import convert as convert_onnx

    if input_shapes is not None:
        onnx_options["input_shapes"] = input_shapes
    return convert_onnx(model, extensions=extensions, **onnx_options)


# ONNX options whose default leaves a TFLite model as it is.
_NEUTRAL = {"batch_size": 1, "keep_io_layout": True}


def _refuse_onnx_options(options: dict[str, Any]) -> None:
    for key, value in options.items():
        if value is None or (key in _NEUTRAL and value == _NEUTRAL[key]):
            continue
        if key not in _NEUTRAL and not value:  # an empty mapping or sequence changes nothing
            continue
        raise ConversionError(f"option {key}={value!r} applies to ONNX models, not to a TFLite model")
