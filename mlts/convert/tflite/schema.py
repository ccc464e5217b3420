"""Names and codes of TFLite's schema (tensorflow/lite/schema/schema.fbs) that the importer reads.

The generated accessors come from the `tflite` package (one module per table of the schema); this
module keeps the few enums the importer needs as plain tables, so the rest of the importer never
imports generated code.
"""

from __future__ import annotations

import functools
import importlib
import re

import numpy as np

# TensorType: code -> (name, NumPy dtype or None when NumPy cannot hold it).
TENSOR_TYPES: dict[int, tuple[str, np.dtype | None]] = {
    0: ("FLOAT32", np.dtype("<f4")),
    1: ("FLOAT16", np.dtype("<f2")),
    2: ("INT32", np.dtype("<i4")),
    3: ("UINT8", np.dtype("u1")),
    4: ("INT64", np.dtype("<i8")),
    5: ("STRING", None),
    6: ("BOOL", np.dtype("?")),
    7: ("INT16", np.dtype("<i2")),
    8: ("COMPLEX64", np.dtype("<c8")),
    9: ("INT8", np.dtype("i1")),
    10: ("FLOAT64", np.dtype("<f8")),
    11: ("COMPLEX128", np.dtype("<c16")),
    12: ("UINT64", np.dtype("<u8")),
    13: ("RESOURCE", None),
    14: ("VARIANT", None),
    15: ("UINT32", np.dtype("<u4")),
    16: ("UINT16", np.dtype("<u2")),
    17: ("INT4", None),
    18: ("BFLOAT16", None),
}
FLOAT32, FLOAT16, INT32, UINT8, INT64, STRING, BOOL, INT16 = 0, 1, 2, 3, 4, 5, 6, 7
INT8 = 9

# ActivationFunctionType.
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = 0, 1, 2, 3, 4, 5
ACTIVATION_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}

# Padding: the schema's SAME=0, VALID=1; TFLite's kernels (and so the NNAPI delegate) use SAME=1,
# VALID=2, which are NNAPI's PaddingScheme codes.
PADDING_NAMES = {0: "SAME", 1: "VALID"}

# DimensionType of sparse tensors.
DIM_DENSE, DIM_SPARSE_CSR = 0, 1

# The file identifier every TFLite flatbuffer carries at bytes 4..8.
FILE_IDENTIFIER = b"TFL3"


def type_name(code: int) -> str:
    """The TensorType name of `code` ("FLOAT32"), or "type <code>" for a code the schema lacks."""
    entry = TENSOR_TYPES.get(code)
    return entry[0] if entry else f"type {code}"


def dtype_of(code: int) -> np.dtype | None:
    """The little-endian NumPy dtype of TensorType `code`, None when NumPy cannot hold it."""
    entry = TENSOR_TYPES.get(code)
    return entry[1] if entry else None


@functools.cache
def builtin_names() -> dict[int, str]:
    """BuiltinOperator code -> name, from the schema the `tflite` package was generated from."""
    from tflite.BuiltinOperator import BuiltinOperator

    return {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


@functools.cache
def builtin_codes() -> dict[str, int]:
    """BuiltinOperator name -> code."""
    return {name: code for code, name in builtin_names().items()}


def builtin_name(code: int) -> str:
    """The BuiltinOperator name of `code`, or "builtin <code>" for a code newer than the schema."""
    return builtin_names().get(code, f"builtin {code}")


@functools.cache
def _options_names(union: str) -> dict[int, str]:
    module = importlib.import_module(f"tflite.{union}")
    enum = getattr(module, union)
    return {
        v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int) and k != "NONE"
    }


@functools.cache
def options_class(union: str, code: int):
    """The generated table class of member `code` of union `union` (BuiltinOptions or BuiltinOptions2)."""
    name = _options_names(union).get(code)
    if name is None:
        return None
    module = importlib.import_module(f"tflite.{name}")
    return getattr(module, name)


def options_name(union: str, code: int) -> str | None:
    return _options_names(union).get(code)


_SKIP = re.compile(r"^(Init|GetRootAs.*|.*BufferHasIdentifier)$")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@functools.cache
def option_fields(cls) -> tuple[tuple[str, str, bool], ...]:
    """(accessor, schema field name, is_vector) of every scalar or numeric-vector field of an options table."""
    names = {m for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m))}
    out = []
    for m in sorted(names):
        if _SKIP.match(m) or m.endswith(("Length", "IsNone", "AsNumpy")):
            continue
        vector = f"{m}AsNumpy" in names
        if f"{m}Length" in names and not vector:
            continue  # a vector of tables or strings: no option the importer reads
        out.append((f"{m}AsNumpy" if vector else m, _CAMEL.sub("_", m).lower(), vector))
    return tuple(out)
