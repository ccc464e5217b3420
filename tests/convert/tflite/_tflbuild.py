"""Hand-built .tflite files for the importer's tests, written with the flatbuffers builder and the
`tflite` package's generated builder functions (TFLite's schema).

    m = TflModel()
    g = m.subgraph()
    x = g.tensor([1, 4, 4, 3], "float32", name="x")
    w = g.tensor([2, 1, 1, 3], "float32", data=weights)
    ...
    g.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", padding=1, stride_w=1, stride_h=1)
    g.io([x], [y])
    data = m.finish()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

from mlts.convert.tflite import schema

DTYPES = {
    "float32": 0,
    "float16": 1,
    "int32": 2,
    "uint8": 3,
    "int64": 4,
    "bool": 6,
    "int16": 7,
    "int8": 9,
}
TYPE_NAMES = {code: name for name, code in DTYPES.items()}


def _field(name: str) -> str:
    # schema field names -> generated method suffixes: stride_w -> StrideW, dilation_h_factor -> DilationHFactor
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


@dataclass
class _Tensor:
    shape: tuple[int, ...]
    type: int
    name: str
    buffer: int
    quant: tuple | None = None  # (scales, zero_points, axis)
    variable: bool = False
    sparsity: dict | None = None
    signature: tuple[int, ...] | None = None


@dataclass
class _Op:
    code: int
    inputs: list[int]
    outputs: list[int]
    options_name: str | None
    options: dict[str, Any]
    custom: str | None = None
    custom_options: bytes = b""
    version: int = 1
    intermediates: list[int] = field(default_factory=list)


@dataclass
class TflSubgraph:
    model: TflModel
    name: str = ""
    tensors: list[_Tensor] = field(default_factory=list)
    ops: list[_Op] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def tensor(
        self,
        shape,
        dtype: str = "float32",
        data=None,
        *,
        name: str | None = None,
        scale=None,
        zero_point=None,
        axis: int = 0,
        variable: bool = False,
        sparsity: dict | None = None,
        raw: bytes | None = None,
        shape_signature=None,
    ) -> int:
        """Add a tensor; `data` (any array) makes it a constant stored as `dtype`."""
        buffer = 0
        if raw is not None:
            buffer = self.model.buffer(raw)
        elif data is not None:
            arr = np.asarray(data).astype(schema.dtype_of(DTYPES[dtype]))
            buffer = self.model.buffer(arr.tobytes())
        quant = None
        if scale is not None:
            scales = [float(s) for s in np.atleast_1d(scale)]
            zps = [int(z) for z in np.atleast_1d(zero_point if zero_point is not None else 0)]
            if len(zps) == 1 and len(scales) > 1:
                zps = zps * len(scales)
            quant = (scales, zps, axis)
        index = len(self.tensors)
        self.tensors.append(
            _Tensor(
                tuple(int(d) for d in shape),
                DTYPES[dtype],
                name or f"t{index}",
                buffer,
                quant,
                variable,
                sparsity,
                None if shape_signature is None else tuple(shape_signature),
            )
        )
        return index

    def op(
        self,
        builtin: str,
        inputs,
        outputs,
        options_name: str | None = None,
        *,
        version: int = 1,
        custom: str | None = None,
        intermediates=(),
        **options,
    ) -> None:
        code = schema.builtin_codes()["CUSTOM" if custom else builtin]
        self.ops.append(
            _Op(
                code,
                list(inputs),
                list(outputs),
                options_name,
                options,
                custom,
                b"",
                version,
                list(intermediates),
            )
        )

    def io(self, inputs, outputs) -> None:
        self.inputs, self.outputs = list(inputs), list(outputs)


class TflModel:
    def __init__(self) -> None:
        self.buffers: list[bytes] = [b""]
        self.subgraphs: list[TflSubgraph] = []
        self.signatures: list[tuple[str, int, list[tuple[str, int]], list[tuple[str, int]]]] = []

    def buffer(self, data: bytes) -> int:
        self.buffers.append(bytes(data))
        return len(self.buffers) - 1

    def subgraph(self, name: str = "") -> TflSubgraph:
        sg = TflSubgraph(self, name)
        self.subgraphs.append(sg)
        return sg

    def signature(self, key: str, subgraph: int, inputs, outputs) -> None:
        self.signatures.append((key, subgraph, list(inputs), list(outputs)))

    # ------------------------------------------------------------------ writing

    def finish(self) -> bytes:
        b = flatbuffers.Builder(1024)
        codes: dict[tuple[int, str | None, int], int] = {}
        for sg in self.subgraphs:
            for op in sg.ops:
                codes.setdefault((op.code, op.custom, op.version), len(codes))
        code_offsets = []
        for code, custom, version in codes:
            custom_off = b.CreateString(custom) if custom else None
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, version)
            if custom_off is not None:
                tflite.OperatorCodeAddCustomCode(b, custom_off)
            code_offsets.append(tflite.OperatorCodeEnd(b))
        buffer_offsets = []
        for data in self.buffers:
            vec = b.CreateNumpyVector(np.frombuffer(data, dtype=np.uint8)) if data else None
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffer_offsets.append(tflite.BufferEnd(b))
        sg_offsets = [self._subgraph(b, sg, codes) for sg in self.subgraphs]
        sig_offsets = [self._signature(b, *s) for s in self.signatures]
        desc = b.CreateString("mlts test model")
        codes_vec = self._vector(b, "Model", "OperatorCodes", code_offsets)
        sgs_vec = self._vector(b, "Model", "Subgraphs", sg_offsets)
        bufs_vec = self._vector(b, "Model", "Buffers", buffer_offsets)
        sigs_vec = self._vector(b, "Model", "SignatureDefs", sig_offsets) if sig_offsets else None
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_vec)
        tflite.ModelAddSubgraphs(b, sgs_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, bufs_vec)
        if sigs_vec is not None:
            tflite.ModelAddSignatureDefs(b, sigs_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _vector(b, table: str, name: str, offsets: list[int]) -> int:
        getattr(tflite, f"{table}Start{name}Vector")(b, len(offsets))
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def _subgraph(self, b, sg: TflSubgraph, codes) -> int:
        tensors = [self._tensor(b, t) for t in sg.tensors]
        ops = [self._op(b, op, codes) for op in sg.ops]
        tensors_vec = self._vector(b, "SubGraph", "Tensors", tensors)
        ops_vec = self._vector(b, "SubGraph", "Operators", ops)
        ins = b.CreateNumpyVector(np.asarray(sg.inputs, dtype=np.int32))
        outs = b.CreateNumpyVector(np.asarray(sg.outputs, dtype=np.int32))
        name = b.CreateString(sg.name)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensors_vec)
        tflite.SubGraphAddInputs(b, ins)
        tflite.SubGraphAddOutputs(b, outs)
        tflite.SubGraphAddOperators(b, ops_vec)
        tflite.SubGraphAddName(b, name)
        return tflite.SubGraphEnd(b)

    def _tensor(self, b, t: _Tensor) -> int:
        shape = b.CreateNumpyVector(np.asarray(t.shape, dtype=np.int32))
        signature = b.CreateNumpyVector(np.asarray(t.signature, dtype=np.int32)) if t.signature else None
        name = b.CreateString(t.name)
        quant = None
        if t.quant is not None:
            scales, zps, axis = t.quant
            s = b.CreateNumpyVector(np.asarray(scales, dtype=np.float32))
            z = b.CreateNumpyVector(np.asarray(zps, dtype=np.int64))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, s)
            tflite.QuantizationParametersAddZeroPoint(b, z)
            tflite.QuantizationParametersAddQuantizedDimension(b, axis)
            quant = tflite.QuantizationParametersEnd(b)
        sparsity = self._sparsity(b, t.sparsity) if t.sparsity is not None else None
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        if signature is not None:
            tflite.TensorAddShapeSignature(b, signature)
        tflite.TensorAddType(b, t.type)
        tflite.TensorAddBuffer(b, t.buffer)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if t.variable:
            tflite.TensorAddIsVariable(b, True)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        return tflite.TensorEnd(b)

    def _sparsity(self, b, sp: dict) -> int:
        dims = []
        for d in sp["dims"]:
            if d[0] == "dense":
                tflite.DimensionMetadataStart(b)
                tflite.DimensionMetadataAddFormat(b, 0)
                tflite.DimensionMetadataAddDenseSize(b, d[1])
                dims.append(tflite.DimensionMetadataEnd(b))
                continue
            _, segments, indices = d
            vecs = []
            for values in (segments, indices):
                v = b.CreateNumpyVector(np.asarray(values, dtype=np.int32))
                tflite.Int32VectorStart(b)
                tflite.Int32VectorAddValues(b, v)
                vecs.append(tflite.Int32VectorEnd(b))
            tflite.DimensionMetadataStart(b)
            tflite.DimensionMetadataAddFormat(b, 1)
            tflite.DimensionMetadataAddArraySegmentsType(b, 1)
            tflite.DimensionMetadataAddArraySegments(b, vecs[0])
            tflite.DimensionMetadataAddArrayIndicesType(b, 1)
            tflite.DimensionMetadataAddArrayIndices(b, vecs[1])
            dims.append(tflite.DimensionMetadataEnd(b))
        order = b.CreateNumpyVector(np.asarray(sp["order"], dtype=np.int32))
        block_map = b.CreateNumpyVector(np.asarray(sp.get("block_map", []), dtype=np.int32))
        dims_vec = self._vector(b, "SparsityParameters", "DimMetadata", dims)
        tflite.SparsityParametersStart(b)
        tflite.SparsityParametersAddTraversalOrder(b, order)
        tflite.SparsityParametersAddBlockMap(b, block_map)
        tflite.SparsityParametersAddDimMetadata(b, dims_vec)
        return tflite.SparsityParametersEnd(b)

    def _op(self, b, op: _Op, codes) -> int:
        options = self._options(b, op.options_name, op.options) if op.options_name else None
        ins = b.CreateNumpyVector(np.asarray(op.inputs, dtype=np.int32))
        outs = b.CreateNumpyVector(np.asarray(op.outputs, dtype=np.int32))
        custom = b.CreateNumpyVector(np.frombuffer(op.custom_options, np.uint8)) if op.custom else None
        inter = (
            b.CreateNumpyVector(np.asarray(op.intermediates, dtype=np.int32)) if op.intermediates else None
        )
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, codes[(op.code, op.custom, op.version)])
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            union, kind, off = options
            getattr(tflite, f"Operator{'Add' + union}Type")(b, kind)
            getattr(tflite, f"OperatorAdd{union}")(b, off)
        if custom is not None:
            tflite.OperatorAddCustomOptions(b, custom)
        if inter is not None:
            tflite.OperatorAddIntermediates(b, inter)
        return tflite.OperatorEnd(b)

    def _options(self, b, name: str, values: dict[str, Any]):
        from tflite.BuiltinOptions import BuiltinOptions

        union, kind = "BuiltinOptions", getattr(BuiltinOptions, name, None)
        if kind is None:
            from tflite.BuiltinOptions2 import BuiltinOptions2

            union, kind = "BuiltinOptions2", getattr(BuiltinOptions2, name)
        vectors = {}
        for key, value in values.items():
            if isinstance(value, (list, tuple)):
                vectors[key] = b.CreateNumpyVector(np.asarray(value, dtype=np.int32))
        getattr(tflite, f"{name}Start")(b)
        for key, value in values.items():
            adder = getattr(tflite, f"{name}Add{_field(key)}")
            adder(b, vectors[key] if key in vectors else value)
        return union, kind, getattr(tflite, f"{name}End")(b)

    def _signature(self, b, key: str, subgraph: int, inputs, outputs) -> int:
        def maps(entries):
            offs = []
            for name, index in entries:
                n = b.CreateString(name)
                tflite.TensorMapStart(b)
                tflite.TensorMapAddName(b, n)
                tflite.TensorMapAddTensorIndex(b, index)
                offs.append(tflite.TensorMapEnd(b))
            return offs

        ins = self._vector(b, "SignatureDef", "Inputs", maps(inputs))
        outs = self._vector(b, "SignatureDef", "Outputs", maps(outputs))
        k = b.CreateString(key)
        tflite.SignatureDefStart(b)
        tflite.SignatureDefAddInputs(b, ins)
        tflite.SignatureDefAddOutputs(b, outs)
        tflite.SignatureDefAddSignatureKey(b, k)
        tflite.SignatureDefAddSubgraphIndex(b, subgraph)
        return tflite.SignatureDefEnd(b)
