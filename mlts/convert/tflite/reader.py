"""Reading a .tflite file: the flatbuffer parsed with the `tflite` package, every byte treated as hostile.

The `tflite` package is TFLite's schema compiled by flatc into Python (one module per table). Its
accessors do no bounds checking beyond Python's own, so this module checks, before it uses a value:
the file identifier, that every vector's declared length fits in the file (so no loop runs past
it and nothing is allocated from a declared size), that every index (operator code, tensor,
buffer, subgraph) is in range, that shapes are static and non-negative, that element counts and
byte sizes stay below NN operand limits, and that every constant's stored bytes match its declared
shape. Any other inconsistency the accessors meet (an offset out of the file, a truncated table)
becomes a one-line ConversionError naming the file and what was being read: never a traceback.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import schema
from mlts.convert.tflite.model import (
    DimMetadata,
    Operator,
    OperatorCode,
    Quantization,
    Signature,
    Sparsity,
    Subgraph,
    Tensor,
    TfliteModel,
)
from mlts.hal import files

#: The largest .tflite file read: a flatbuffer addresses at most 2 GiB; larger models keep their
#: weights after it (Buffer.offset/size), which this cap also bounds.
MAX_TFLITE_BYTES = 4 * files.GiB
#: The largest tensor (bytes) a model may declare: NN operand sizes are 32-bit.
MAX_TENSOR_BYTES = (1 << 31) - 1
#: The largest rank the importer reads (NNAPI operations take at most rank 4-6; this only bounds loops).
MAX_RANK = 8

_ACCESS_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError)
T = TypeVar("T")


def is_tflite(data: bytes | memoryview) -> bool:
    """Whether `data` starts like a TFLite flatbuffer (root offset, then the TFL3 identifier)."""
    return len(data) >= 8 and bytes(data[4:8]) == schema.FILE_IDENTIFIER


def read_file(path: str | os.PathLike) -> TfliteModel:
    """Read and check the .tflite file at `path` (a regular file of at most MAX_TFLITE_BYTES)."""
    name = os.fspath(path)
    try:
        data = files.read_bytes(name, what="a TFLite model", limit=MAX_TFLITE_BYTES)
    except FileNotFoundError:
        raise ConversionError(f"cannot read TFLite model '{name}': no such file") from None
    except files.FileReadError as e:
        raise ConversionError(str(e)) from None
    except OSError as e:
        raise ConversionError(f"cannot read TFLite model '{name}': {e.strerror or e}") from None
    return read_bytes(data, name)


def read_bytes(data: bytes, path: str | None = None) -> TfliteModel:
    """Parse and check a TFLite flatbuffer held in memory."""
    return _Reader(bytes(data), path).model()


class _Reader:
    def __init__(self, data: bytes, path: str | None) -> None:
        self.data = data
        self.path = path
        self.where = f"TFLite model '{path}'" if path else "the TFLite model"

    # ------------------------------------------------------------------ checks

    def fail(self, what: str) -> ConversionError:
        return ConversionError(f"{self.where}: {what}")

    def access(self, what: str, fn: Callable[[], T]) -> T:
        """fn() with any error of the generated accessors turned into a one-line 'corrupt' error."""
        try:
            return fn()
        except ConversionError:
            raise
        except (struct.error, IndexError):
            raise self.fail(f"corrupt file: cannot read {what} (an offset points outside the file)") from None
        except _ACCESS_ERRORS as e:
            raise self.fail(f"corrupt file: cannot read {what} ({type(e).__name__}: {e})") from None

    def length(self, what: str, fn: Callable[[], int], elem_bytes: int) -> int:
        """A vector's declared length, refused when its elements could not fit in the file."""
        n = self.access(f"the length of {what}", fn)
        if not isinstance(n, int) or n < 0 or n * elem_bytes > len(self.data):
            raise self.fail(
                f"corrupt file: {what} declares {n} elements, more than the file's {len(self.data)} bytes hold"
            )
        return n

    def numbers(self, what: str, fn: Callable[[], Any], count: int) -> np.ndarray:
        """A numeric vector as a NumPy view ([] when absent), checked to hold `count` elements."""
        value = self.access(what, fn)
        if isinstance(value, int):  # the accessors return 0 for an absent vector
            return np.zeros(0, dtype=np.int64)
        if not isinstance(value, np.ndarray) or value.ndim != 1 or len(value) != count:
            raise self.fail(f"corrupt file: {what} could not be read")
        return value

    def text(self, what: str, fn: Callable[[], Any]) -> str:
        value = self.access(what, fn)
        if value is None:
            return ""
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return str(value)

    # ------------------------------------------------------------------ model

    def model(self) -> TfliteModel:
        import tflite

        if len(self.data) < 8:
            raise self.fail(f"truncated: {len(self.data)} bytes, not a TFLite flatbuffer")
        if not is_tflite(self.data):
            raise self.fail("not a TFLite flatbuffer (no 'TFL3' file identifier at bytes 4-8)")
        root = struct.unpack_from("<I", self.data, 0)[0]
        if root + 4 > len(self.data):
            raise self.fail(
                f"corrupt file: the root table offset {root} is past the end ({len(self.data)} bytes)"
            )
        m = self.access("the root table", lambda: tflite.Model.GetRootAs(self.data, 0))
        version = self.access("the schema version", m.Version)
        codes = [
            self.operator_code(m, i) for i in range(self.length("operator_codes", m.OperatorCodesLength, 4))
        ]
        buffers = tuple(self.buffer(m, i) for i in range(self.length("buffers", m.BuffersLength, 4)))
        count = self.length("subgraphs", m.SubgraphsLength, 4)
        if count == 0:
            raise self.fail("the model has no subgraph")
        subgraphs = tuple(self.subgraph(m, i, codes, buffers) for i in range(count))
        signatures = tuple(
            self.signature(m, i, subgraphs)
            for i in range(self.length("signature_defs", m.SignatureDefsLength, 4))
        )
        metadata = tuple(
            self.text(f"metadata {i}", functools.partial(_metadata_name, m, i))
            for i in range(self.length("metadata", m.MetadataLength, 4))
        )
        return TfliteModel(
            version=int(version),
            description=self.text("the description", m.Description),
            subgraphs=subgraphs,
            buffers=buffers,
            signatures=signatures,
            metadata=metadata,
            data=self.data,
            path=self.path,
        )

    def operator_code(self, m, i: int) -> OperatorCode:
        what = f"operator code {i}"
        oc = self.access(what, lambda: m.OperatorCodes(i))
        # Codes above 127 live in builtin_code; older files only fill the int8 deprecated field.
        code = max(int(self.access(what, oc.BuiltinCode)), int(self.access(what, oc.DeprecatedBuiltinCode)))
        version = int(self.access(what, oc.Version))
        custom = self.access(what, oc.CustomCode)
        return OperatorCode(code, version, custom.decode("utf-8", "replace") if custom else None)

    def buffer(self, m, i: int) -> memoryview | None:
        what = f"buffer {i}"
        b = self.access(what, lambda: m.Buffers(i))
        offset = int(self.access(what, b.Offset))
        size = int(self.access(what, b.Size))
        if offset > 1:
            # Weights kept after the flatbuffer (models over 2 GiB): offset from the start of the file.
            if size < 0 or offset + size > len(self.data):
                raise self.fail(
                    f"corrupt file: buffer {i} declares {size} bytes at offset {offset}, past the end of the "
                    f"file ({len(self.data)} bytes)"
                )
            return memoryview(self.data)[offset : offset + size] if size else None
        n = self.length(f"buffer {i}", b.DataLength, 1)
        if n == 0:
            return None
        # A read-only view into the file's bytes (np.frombuffer checks the range).
        return self.numbers(what, b.DataAsNumpy, n).data

    # ------------------------------------------------------------------ subgraphs

    def subgraph(self, m, k: int, codes: list[OperatorCode], buffers) -> Subgraph:
        g = self.access(f"subgraph {k}", lambda: m.Subgraphs(k))
        name = self.text(f"subgraph {k}'s name", g.Name)
        label = f"subgraph {k}" + (f" '{name}'" if name else "")
        tensors = tuple(
            self.tensor(g, i, label, buffers)
            for i in range(self.length(f"{label}'s tensors", g.TensorsLength, 4))
        )
        inputs = self.indices(f"{label}'s inputs", g.InputsLength, g.InputsAsNumpy, len(tensors))
        outputs = self.indices(f"{label}'s outputs", g.OutputsLength, g.OutputsAsNumpy, len(tensors))
        operators = tuple(
            self.operator(g, i, label, codes, len(tensors))
            for i in range(self.length(f"{label}'s operators", g.OperatorsLength, 4))
        )
        return Subgraph(k, name, tensors, inputs, outputs, operators)

    def indices(self, what: str, length, values, limit: int, optional: bool = False) -> tuple[int, ...]:
        n = self.length(what, length, 4)
        arr = self.numbers(what, values, n)
        out = tuple(int(v) for v in arr)
        for v in out:
            if not (0 <= v < limit or (optional and v == -1)):
                raise self.fail(f"{what} name tensor {v}, but the subgraph has {limit} tensors")
        return out

    def tensor(self, g, i: int, label: str, buffers) -> Tensor:
        what = f"tensor {i} of {label}"
        t = self.access(what, lambda: g.Tensors(i))
        name = self.text(f"{what}'s name", t.Name)
        if name:
            what = f"tensor {i} '{name}' of {label}"
        rank = self.length(f"{what}'s shape", t.ShapeLength, 4)
        if rank > MAX_RANK:
            raise self.fail(f"{what} has rank {rank}; the importer reads tensors of rank <= {MAX_RANK}")
        shape = tuple(int(d) for d in self.numbers(f"{what}'s shape", t.ShapeAsNumpy, rank))
        sig_rank = self.length(f"{what}'s shape signature", t.ShapeSignatureLength, 4)
        signature = (
            tuple(
                int(d) for d in self.numbers(f"{what}'s shape signature", t.ShapeSignatureAsNumpy, sig_rank)
            )
            if sig_rank
            else None
        )
        if any(d < 0 for d in shape):
            raise self.fail(f"{what} has shape {list(shape)}: a negative dimension")
        code = int(self.access(what, t.Type))
        buffer = int(self.access(what, t.Buffer))
        if not 0 <= buffer < len(buffers):
            raise self.fail(f"{what} names buffer {buffer}, but the model has {len(buffers)} buffers")
        dtype = schema.dtype_of(code)
        size = 1
        for d in shape:
            size *= d
        itemsize = dtype.itemsize if dtype is not None else 1
        if size * itemsize > MAX_TENSOR_BYTES:
            raise self.fail(
                f"{what} declares {size} elements ({size * itemsize} bytes); NN operands hold at most "
                f"{MAX_TENSOR_BYTES} bytes"
            )
        quant = self.quantization(t, what, rank)
        sparsity = self.sparsity(t, what, rank)
        tensor = Tensor(
            index=i,
            name=name,
            shape=shape,
            type=code,
            buffer=buffer,
            quant=quant,
            sparsity=sparsity,
            is_variable=bool(self.access(what, t.IsVariable)),
            shape_signature=signature,
        )
        raw = buffers[buffer]
        if raw is not None:
            self.check_data(tensor, raw, what)
        return tensor

    def check_data(self, t: Tensor, raw: memoryview, what: str) -> None:
        dtype = schema.dtype_of(t.type)
        if dtype is None:
            raise self.fail(f"{what} is a constant of type {t.type_name}, which NN operands cannot hold")
        if t.sparsity is not None:
            if len(raw) % dtype.itemsize:
                raise self.fail(f"{what}: {len(raw)} stored bytes are not whole {t.type_name} values")
            return
        if len(raw) != t.size * dtype.itemsize:
            raise self.fail(
                f"{what} has {len(raw)} bytes of data; its shape {list(t.shape)} of {t.type_name} needs "
                f"{t.size * dtype.itemsize}"
            )

    def quantization(self, t, what: str, rank: int) -> Quantization | None:
        q = self.access(f"{what}'s quantization", t.Quantization)
        if q is None:
            return None
        qwhat = f"{what}'s quantization"
        if int(self.access(qwhat, q.DetailsType)) != 0:
            raise self.fail(f"{what} uses custom quantization details, which NNAPI cannot represent")
        n = self.length(f"{qwhat} scales", q.ScaleLength, 4)
        if n == 0:
            return None  # min/max only (a calibration leftover): not quantized
        scales = self.numbers(f"{qwhat} scales", q.ScaleAsNumpy, n)
        nz = self.length(f"{qwhat} zero points", q.ZeroPointLength, 8)
        zps = self.numbers(f"{qwhat} zero points", q.ZeroPointAsNumpy, nz)
        if nz not in (0, n):
            raise self.fail(f"{what} has {n} scales but {nz} zero points")
        axis = int(self.access(qwhat, q.QuantizedDimension))
        if n > 1 and not 0 <= axis < max(rank, 1):
            raise self.fail(
                f"{what} is quantized per channel along dimension {axis}, outside its rank {rank}"
            )
        if not np.all(np.isfinite(scales)) or np.any(scales < 0):
            raise self.fail(f"{what} has a quantization scale that is negative or not finite")
        zero_points = tuple(int(z) for z in zps) if nz else (0,) * n
        return Quantization(tuple(float(s) for s in scales), zero_points, axis)

    def sparsity(self, t, what: str, rank: int) -> Sparsity | None:
        s = self.access(f"{what}'s sparsity", t.Sparsity)
        if s is None:
            return None
        swhat = f"{what}'s sparsity"
        n_order = self.length(f"{swhat} traversal order", s.TraversalOrderLength, 4)
        order = tuple(
            int(v) for v in self.numbers(f"{swhat} traversal order", s.TraversalOrderAsNumpy, n_order)
        )
        n_map = self.length(f"{swhat} block map", s.BlockMapLength, 4)
        block_map = tuple(int(v) for v in self.numbers(f"{swhat} block map", s.BlockMapAsNumpy, n_map))
        n_dims = self.length(f"{swhat} dimension metadata", s.DimMetadataLength, 4)
        if n_order > MAX_RANK * 2 or n_dims != n_order:
            raise self.fail(f"{swhat} has {n_order} traversal dimensions and {n_dims} dimension metadata")
        dims = tuple(self.dim_metadata(s, k, swhat) for k in range(n_dims))
        return Sparsity(order, block_map, dims)

    def dim_metadata(self, s, k: int, swhat: str) -> DimMetadata:
        import tflite

        what = f"{swhat} dimension {k}"
        d = self.access(what, lambda: s.DimMetadata(k))
        fmt = int(self.access(what, d.Format))
        dense = int(self.access(what, d.DenseSize))
        if fmt == schema.DIM_DENSE:
            return DimMetadata(fmt, dense, None, None)
        if fmt != schema.DIM_SPARSE_CSR:
            raise self.fail(f"{what} has format {fmt}; the schema defines DENSE (0) and SPARSE_CSR (1)")
        vectors = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}
        arrays = []
        for label, type_fn, table_fn in (
            ("segments", d.ArraySegmentsType, d.ArraySegments),
            ("indices", d.ArrayIndicesType, d.ArrayIndices),
        ):
            kind = int(self.access(what, type_fn))
            table = self.access(what, table_fn)
            if kind not in vectors or table is None:
                raise self.fail(f"{what} has no {label} array")
            vec = vectors[kind]()
            self.access(what, functools.partial(_init, vec, table))
            size = {1: 4, 2: 2, 3: 1}[kind]
            n = self.length(f"{what} {label}", vec.ValuesLength, size)
            arrays.append(self.numbers(f"{what} {label}", vec.ValuesAsNumpy, n).astype(np.int64))
        return DimMetadata(fmt, dense, arrays[0], arrays[1])

    # ------------------------------------------------------------------ operators

    def operator(self, g, i: int, label: str, codes: list[OperatorCode], tensors: int) -> Operator:
        what = f"operator {i} of {label}"
        op = self.access(what, lambda: g.Operators(i))
        index = int(self.access(what, op.OpcodeIndex))
        if not 0 <= index < len(codes):
            raise self.fail(f"{what} names operator code {index}, but the model has {len(codes)}")
        code = codes[index]
        what = f"{code.name if code.custom is None else code.custom} ({what})"
        inputs = self.indices(f"{what} inputs", op.InputsLength, op.InputsAsNumpy, tensors, optional=True)
        outputs = self.indices(f"{what} outputs", op.OutputsLength, op.OutputsAsNumpy, tensors)
        intermediates = self.indices(
            f"{what} intermediates", op.IntermediatesLength, op.IntermediatesAsNumpy, tensors
        )
        options, options_name = self.options(op, what)
        custom = b""
        if code.custom is not None:
            n = self.length(f"{what} custom options", op.CustomOptionsLength, 1)
            custom = bytes(self.numbers(f"{what} custom options", op.CustomOptionsAsNumpy, n))
        return Operator(i, code, inputs, outputs, options, options_name, intermediates, custom)

    def options(self, op, what: str) -> tuple[dict[str, Any], str | None]:
        """The operator's builtin options as {schema field name: value} (vectors as tuples)."""
        for union, type_fn, table_fn in (
            ("BuiltinOptions", op.BuiltinOptionsType, op.BuiltinOptions),
            ("BuiltinOptions2", op.BuiltinOptions2Type, op.BuiltinOptions2),
        ):
            code = int(self.access(f"{what} options", type_fn))
            if code == 0:
                continue
            cls = schema.options_class(union, code)
            if cls is None:
                raise self.fail(f"{what} has options of unknown kind {code} (newer than the schema read)")
            table = self.access(f"{what} options", table_fn)
            if table is None:
                raise self.fail(f"corrupt file: {what} declares options it does not store")
            obj = cls()
            self.access(f"{what} options", functools.partial(_init, obj, table))
            values: dict[str, Any] = {}
            for accessor, name, vector in schema.option_fields(cls):
                fn = getattr(obj, accessor)
                if vector:
                    n_fn = getattr(obj, accessor[: -len("AsNumpy")] + "Length")
                    n = self.length(f"{what} option {name}", n_fn, 1)
                    arr = self.access(f"{what} option {name}", fn)
                    values[name] = () if isinstance(arr, int) else tuple(arr.tolist())[:n]
                else:
                    values[name] = self.access(f"{what} option {name}", fn)
            return values, schema.options_name(union, code)
        return {}, None

    # ------------------------------------------------------------------ signatures

    def signature(self, m, i: int, subgraphs: tuple[Subgraph, ...]) -> Signature:
        what = f"signature {i}"
        s = self.access(what, lambda: m.SignatureDefs(i))
        key = self.text(f"{what}'s key", s.SignatureKey)
        k = int(self.access(what, s.SubgraphIndex))
        if not 0 <= k < len(subgraphs):
            raise self.fail(f"signature {key!r} names subgraph {k}, but the model has {len(subgraphs)}")
        limit = len(subgraphs[k].tensors)

        def maps(label: str, length, get) -> tuple[tuple[str, int], ...]:
            out = []
            for j in range(self.length(f"signature {key!r} {label}", length, 4)):
                entry = self.access(f"signature {key!r} {label} {j}", functools.partial(get, j))
                name = self.text(f"signature {key!r} {label} {j}", entry.Name)
                index = int(self.access(f"signature {key!r} {label} {j}", entry.TensorIndex))
                if not 0 <= index < limit:
                    raise self.fail(f"signature {key!r} {label} {name!r} names tensor {index} of {limit}")
                out.append((name, index))
            return tuple(out)

        return Signature(
            key,
            k,
            maps("inputs", s.InputsLength, s.Inputs),
            maps("outputs", s.OutputsLength, s.Outputs),
        )


def _metadata_name(m: Any, i: int) -> Any:
    return m.Metadata(i).Name()


def _init(obj: Any, table: Any) -> None:
    """Point a generated table object at a union member's table (its bytes and position)."""
    obj.Init(table.Bytes, table.Pos)
