"""A TFLite model as plain records: what the reader checked and the converter reads.

Every index in these records was checked against the file (operator codes, tensors, buffers,
subgraphs); every shape is static and every constant's bytes are a read-only view of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlts.convert.tflite import schema


@dataclass(frozen=True, slots=True)
class Quantization:
    """A tensor's affine quantization as the file states it: real = (q - zero_point) * scale.

    One scale: per-tensor. Several: per channel along `axis` (TFLite's quantized_dimension).
    """

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1

    @property
    def scale(self) -> float:
        """TFLite's per-tensor ("legacy") scale: the one scale, or 0 for a per-channel tensor."""
        return self.scales[0] if len(self.scales) == 1 else 0.0

    @property
    def zero_point(self) -> int:
        return self.zero_points[0] if len(self.zero_points) == 1 else 0


@dataclass(frozen=True, slots=True)
class DimMetadata:
    """One dimension of a sparse tensor: DENSE with its size, or SPARSE_CSR with segments and indices."""

    format: int
    dense_size: int
    segments: np.ndarray | None
    indices: np.ndarray | None


@dataclass(frozen=True, slots=True)
class Sparsity:
    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    dims: tuple[DimMetadata, ...]


@dataclass(frozen=True, slots=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    type: int  # schema.TENSOR_TYPES code
    buffer: int
    quant: Quantization | None = None
    sparsity: Sparsity | None = None
    is_variable: bool = False
    shape_signature: tuple[int, ...] | None = None

    @property
    def type_name(self) -> str:
        return schema.type_name(self.type)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def describe(self) -> str:
        return f"tensor {self.index} '{self.name}' ({self.type_name} {list(self.shape)})"


@dataclass(frozen=True, slots=True)
class OperatorCode:
    builtin: int  # BuiltinOperator code (CUSTOM for custom operators)
    version: int
    custom: str | None = None

    @property
    def name(self) -> str:
        return schema.builtin_name(self.builtin)


@dataclass(frozen=True, slots=True)
class Operator:
    index: int
    code: OperatorCode
    inputs: tuple[int, ...]  # -1: an optional input left out
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(default_factory=dict)
    options_name: str | None = None
    intermediates: tuple[int, ...] = ()
    custom_options: bytes = b""


@dataclass(frozen=True, slots=True)
class Subgraph:
    index: int
    name: str
    tensors: tuple[Tensor, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: tuple[Operator, ...]

    def label(self) -> str:
        return f"subgraph {self.index}" + (f" '{self.name}'" if self.name else "")


@dataclass(frozen=True, slots=True)
class Signature:
    """A SignatureDef: named inputs and outputs (name -> tensor index) of one subgraph."""

    key: str
    subgraph: int
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class TfliteModel:
    """A checked TFLite model. `data` is the file's bytes; buffers are read-only views into it."""

    version: int
    description: str
    subgraphs: tuple[Subgraph, ...]
    buffers: tuple[memoryview | None, ...]
    signatures: tuple[Signature, ...]
    metadata: tuple[str, ...]
    data: bytes = field(repr=False)
    path: str | None = None

    @property
    def label(self) -> str:
        return f"TFLite model '{self.path}'" if self.path else "the TFLite model"

    def constant(self, sg: Subgraph, index: int) -> np.ndarray | None:
        """The stored value of a dense tensor with data (read-only, in its shape), else None.

        Sparse tensors have no dense value here: mlts.convert.tflite.sparsity densifies them.
        """
        t = sg.tensors[index]
        raw = self.buffers[t.buffer]
        if raw is None or t.sparsity is not None:
            return None
        dtype = schema.dtype_of(t.type)
        assert dtype is not None  # the reader refuses constants NumPy cannot hold
        return np.frombuffer(raw, dtype=dtype).reshape(t.shape)

    def stored(self, sg: Subgraph, index: int) -> np.ndarray | None:
        """The raw stored elements of a tensor with data (sparse tensors: the non-zero values), flat."""
        t = sg.tensors[index]
        raw = self.buffers[t.buffer]
        if raw is None:
            return None
        dtype = schema.dtype_of(t.type)
        assert dtype is not None
        return np.frombuffer(raw, dtype=dtype)

    def signature(self, key: str) -> Signature:
        for s in self.signatures:
            if s.key == key:
                return s
        keys = ", ".join(repr(s.key) for s in self.signatures) or "none"
        from mlts.convert.errors import ConversionError

        raise ConversionError(f"{self.label} has no signature {key!r}; its signatures: {keys}")
