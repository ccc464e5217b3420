"""TFLite (.tflite) models as NN HAL models, mapped the way TFLite's NNAPI delegate maps them.

`load_tflite` reads and checks a file (mlts.convert.tflite.reader), `convert_tflite` converts its
main subgraph or a signature (mlts.convert.tflite.converter); `is_tflite_file` tells a .tflite file
from an ONNX one by its flatbuffer identifier. docs/tflite.md describes the mapping.
"""

from __future__ import annotations

import os

from mlts.convert.tflite.converter import IoPlan, convert_tflite, convert_tflite_plan, load_tflite
from mlts.convert.tflite.model import TfliteModel
from mlts.convert.tflite.reader import is_tflite

TFLITE_SUFFIX = ".tflite"


def is_tflite_file(path: str | os.PathLike) -> bool:
    """Whether `path` names a TFLite model: by its .tflite suffix, else by the first 8 bytes of a regular
    file (a FIFO, a device or a folder is no TFLite model: it is never opened, so nothing blocks)."""
    import stat

    name = os.fspath(path)
    if name.lower().endswith(TFLITE_SUFFIX):
        return True
    try:
        if not stat.S_ISREG(os.stat(name).st_mode):
            return False
        with open(name, "rb", buffering=0) as f:
            return is_tflite(f.read(8))
    except OSError:
        return False


__all__ = [
    "TFLITE_SUFFIX",
    "IoPlan",
    "TfliteModel",
    "convert_tflite",
    "convert_tflite_plan",
    "is_tflite",
    "is_tflite_file",
    "load_tflite",
]
