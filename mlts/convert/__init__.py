"""ONNX and TFLite -> NN HAL Model: NCHW ONNX graphs become NHWC NNAPI operations, TFLite maps as its NNAPI delegate.

`convert` and `load_model` take either format (mlts.convert.formats); the ONNX converter is
mlts.convert.converter, the TFLite importer mlts.convert.tflite.
"""

from mlts.convert.converter import Conversion, TensorInfo, prepare_input
from mlts.convert.errors import ConversionError
from mlts.convert.formats import convert, load_model, model_format
from mlts.convert.registry import supported_ops

__all__ = [
    "Conversion",
    "ConversionError",
    "TensorInfo",
    "convert",
    "load_model",
    "model_format",
    "prepare_input",
    "supported_ops",
]
