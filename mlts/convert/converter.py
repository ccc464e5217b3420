"""convert(): one pass over the ONNX graph in topological order, building the NN model.

Quantized graphs (QDQ or QOperator) become integer NN graphs: see qflow for
how tensors get their quantization, ops/qdq for QuantizeLinear and
DequantizeLinear, ops/qlinear for the QOperator ops.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

import mlts.convert.ops  # noqa: F401  (registers every handler)
from mlts.convert.context import FLOAT_TYPES, Context, Tensor, index_nodes, restore_index, where
from mlts.convert.errors import ConversionError
from mlts.convert.fold import fold_node, foldable
from mlts.convert.load import (
    DEFAULT_DOMAINS,
    MICROSOFT_DOMAIN,
    MICROSOFT_OPS,
    ModelSource,
    default_opset,
    fix_batch,
    fix_input_shapes,
    fix_input_values,
    infer_shapes,
    load_model,
)
from mlts.convert.ops.extension import CUSTOM_DOMAINS, convert_custom
from mlts.convert.qflow import check_emitted, check_quantized_inputs, input_quant
from mlts.convert.quant import ELEM_DTYPES, QUANT8_TYPES, QParams
from mlts.convert.rank import hold_without_unit_axes
from mlts.convert.registry import first_version, lookup
from mlts.convert.simplify import simplify
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.types import Model

NEWEST_TESTED_OPSET = 21


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One model input or output: ONNX name, the NN model's shape, NumPy dtype name.

    Quantized (uint8/int8) tensors also give their scale and zero point:
    real = (value - zero_point) * scale.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float = 0.0
    zero_point: int = 0

    @classmethod
    def of(
        cls,
        name: str,
        shape: tuple[int, ...],
        quant: QParams | None,
        elem: OperandType = OperandType.TENSOR_FLOAT32,
    ) -> TensorInfo:
        if quant is None:
            return cls(name, shape, ELEM_NUMPY[elem])
        return cls(name, shape, quant.dtype, quant.scale, quant.zero_point)


# NumPy dtype of the operands that hold graph inputs and outputs that are not quantized.
ELEM_NUMPY = {
    OperandType.TENSOR_FLOAT32: "float32",
    OperandType.TENSOR_FLOAT16: "float16",
    OperandType.TENSOR_INT32: "int32",
    OperandType.TENSOR_BOOL8: "bool",
}
# Graph input element types held without quantization, and the operand type holding them.
PLAIN_INPUTS = {
    TensorProto.FLOAT: OperandType.TENSOR_FLOAT32,
    TensorProto.FLOAT16: OperandType.TENSOR_FLOAT16,
    TensorProto.INT32: OperandType.TENSOR_INT32,
    TensorProto.INT64: OperandType.TENSOR_INT32,
    TensorProto.BOOL: OperandType.TENSOR_BOOL8,
}


def prepare_input(info: TensorInfo, value: np.ndarray) -> np.ndarray:
    """`value` (as the ONNX model takes it) in the dtype of the NN input `info`; ValueError when it cannot be.

    int64 values are narrowed to int32 only when every value fits.
    """
    arr = np.asarray(value)
    if arr.ndim == 0 and info.shape == (1,):
        arr = arr.reshape(1)  # a scalar input held as a [1] tensor
    want = np.dtype(info.dtype)
    if arr.dtype == want:
        return arr
    if arr.dtype.kind in "iu" and want.kind in "iu":
        info_w = np.iinfo(want)
        if arr.size and (arr.min() < info_w.min or arr.max() > info_w.max):
            raise ValueError(
                f"input '{info.name}' has values in [{arr.min()}, {arr.max()}], outside the range of "
                f"{want} that the NN model holds it in"
            )
        return arr.astype(want)
    if arr.dtype.kind == want.kind or (arr.dtype.kind == "f" and want.kind == "f"):
        return arr.astype(want)
    raise ValueError(f"input '{info.name}' is {arr.dtype}; the NN model takes {want}")


@dataclass(frozen=True, slots=True)
class Conversion:
    """The NN model and how its inputs/outputs map to the ONNX graph's (same order)."""

    model: Model
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    opset: int
    notes: tuple[str, ...] = ()
    # Per operation of model.main: the ONNX node (context.node_label) it was converted from; None for
    # operations the converter added at the model's inputs and outputs (layout, quantization, copies).
    origins: tuple[str | None, ...] = ()


def _live_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Nodes that contribute to a graph output, in graph order."""
    needed = {o.name for o in graph.output}
    live = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output if o):
            live.append(node)
            needed.update(n for n in node.input if n)
    return live[::-1]


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    shapes: dict[str, tuple[int | None, ...]] = {}
    g = model.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
    return shapes


def _notes(ctx: Context, pruned: int) -> list[str]:
    c = ctx.counts
    plural = {
        "bn_into_conv": "folded {} BatchNormalization into Conv",
        "bn_into_gemm": "folded {} BatchNormalization into Gemm/MatMul",
        "bn_standalone": "converted {} BatchNormalization to MUL+ADD",
        "bias_into_fc": "folded {} Add of a constant vector into FULLY_CONNECTED bias",
        "fused_activation": "fused {} Relu/Clip into the preceding operation",
        "folded_constant": "folded {} constant nodes",
        "dropped_identity": "dropped {} Identity/Dropout/Cast nodes",
        "cancelled_transpose": "removed {} Transpose nodes absorbed by the NHWC layout",
        "layout_transpose": "inserted {} TRANSPOSE for NCHW<->NHWC layout",
        "quantized_constant": "kept {} DequantizeLinear constants as quantized weights, biases and tensors",
        "fc_as_conv": "emitted {} per-channel fully connected layers as 1x1 CONV_2D",
        "fused_squeeze": "folded {} Squeeze of LSTM outputs into the LSTM's output shape",
        "pruned_operation": "removed {} operations whose results nothing reads",
        "extension_operation": "mapped {} nodes to vendor extension operations",
        "fused_hard_swish": "converted {} x*HardSigmoid(x) to HARD_SWISH",
    }
    notes = [text.format(c[key]) for key, text in plural.items() if c[key]]
    pairs = c["folded_dq"] + c["fused_qdq"] // 2
    if pairs:
        notes.append(f"folded {pairs} QuantizeLinear/DequantizeLinear pairs into quantized operands")
    casts = [f"{c[f'op:{op}']} {op}" for op in ("QUANTIZE", "DEQUANTIZE") if c[f"op:{op}"]]
    if casts:
        notes.append(f"inserted {' and '.join(casts)} at float32 inputs/outputs")
    if pruned:
        notes.append(f"removed {pruned} nodes that no output depends on")
    return notes


def _check_domain(node: onnx.NodeProto) -> None:
    if node.domain in DEFAULT_DOMAINS or (node.domain == MICROSOFT_DOMAIN and node.op_type in MICROSOFT_OPS):
        return
    if node.domain in CUSTOM_DOMAINS:
        return
    raise ConversionError(
        f"{where(node)}: op '{node.op_type}' of domain '{node.domain}' is not converted; the converter takes "
        f"the default ONNX domain and {', '.join(sorted(MICROSOFT_OPS))} of {MICROSOFT_DOMAIN} "
        f"(mlts convert --list-ops)"
    )


def _convert_node(ctx: Context, node: onnx.NodeProto) -> None:
    ctx.node = node
    first = len(ctx.emitted)
    _dispatch(ctx, node)
    check_emitted(ctx, node, first)


def _dispatch(ctx: Context, node: onnx.NodeProto) -> None:
    if node.domain in CUSTOM_DOMAINS:
        convert_custom(ctx, node)
        return
    if foldable(node, ctx.consts):
        ctx.consts.update(fold_node(node, ctx.consts, ctx.opset))
        ctx.counts["folded_constant"] += 1
        return
    handler = lookup(node.op_type, ctx.opset)
    if handler is None:
        first = first_version(node.op_type)
        if first is not None:
            raise ConversionError(
                f"{where(node)}: ONNX op '{node.op_type}' is converted from opset {first}; the model imports "
                f"opset {ctx.opset}"
            )
        raise ConversionError(
            f"{where(node)}: no NNAPI operation computes ONNX op '{node.op_type}' on run-time tensors "
            f"(mlts convert --list-ops lists the ONNX ops the converter takes)"
        )
    check_quantized_inputs(ctx, node)
    try:
        handler(ctx, node)
    except ConversionError:
        raise
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ConversionError(f"{where(node)}: conversion failed: {type(e).__name__}: {e}") from None


def _elem_name(elem: int) -> str:
    return TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)


def _add_inputs(
    ctx: Context, graph: onnx.GraphProto, keep_io_layout: bool, notes: list[str]
) -> list[TensorInfo]:
    infos: list[TensorInfo] = []
    for inp in graph.input:
        if inp.name in ctx.consts:
            continue
        if not inp.type.HasField("tensor_type"):
            raise ConversionError(
                f"input '{inp.name}' is a {inp.type.WhichOneof('value')}; NN model inputs are tensors"
            )
        elem = inp.type.tensor_type.elem_type
        if elem not in PLAIN_INPUTS and elem not in ELEM_DTYPES:
            raise ConversionError(
                f"input '{inp.name}' has element type {_elem_name(elem)}; NN model inputs hold FLOAT, FLOAT16, "
                f"INT32, INT64 (as int32), BOOL, and UINT8/INT8 read by DequantizeLinear or QLinear nodes"
            )
        _refuse_runtime_qparams(ctx, inp.name)
        shape = ctx.shape_of(inp.name)
        if not shape:
            if _scalar_input(ctx, inp, elem, infos):
                continue
            notes.append(
                f"model input '{inp.name}' is a scalar (rank 0), held as a [1] tensor: feed one value "
                f"(or fix it with --input-value {inp.name}=V)"
            )
        if any(d == 0 for d in shape):
            raise ConversionError(
                f"input '{inp.name}' has shape {list(shape)}; empty tensors are not supported"
            )
        quant = None if elem in PLAIN_INPUTS else input_quant(ctx, inp.name, elem)
        nhwc = not keep_io_layout and len(shape) == 4 and elem in (TensorProto.FLOAT, TensorProto.FLOAT16)
        nn_shape = Tensor(0, shape, nhwc).nn_shape
        kind = PLAIN_INPUTS.get(elem, OperandType.TENSOR_FLOAT32)
        if quant is None:
            operand = ctx.builder.add_input(kind, nn_shape)
            if elem == TensorProto.INT64:
                notes.append(f"model input '{inp.name}' (int64) is held as int32: its values must fit")
        else:
            operand = ctx.builder.add_input(quant.type, nn_shape, quant.scale, quant.zero_point)
            notes.append(f"quantized model input '{inp.name}' ({quant.describe()})")
        ctx.bind(inp.name, Tensor(operand, shape, nhwc, quant, kind))
        ctx.input_operands.add(operand)
        infos.append(TensorInfo.of(inp.name, nn_shape, quant, kind))
    return infos


# Scalar parameters of NNAPI operations that a rank-0 graph input may feed directly: ONNX op type ->
# input index. The input then is an NN model input of the scalar type (FLOAT32, INT32, BOOL).
SCALAR_READERS = {"Pad": 2}
_SCALAR_TYPES: dict[int, OperandType] = {
    TensorProto.FLOAT: OperandType.FLOAT32,
    TensorProto.INT32: OperandType.INT32,
    TensorProto.BOOL: OperandType.BOOL,
}
_SCALAR_NUMPY = {OperandType.FLOAT32: "float32", OperandType.INT32: "int32", OperandType.BOOL: "bool"}


def _scalar_input(ctx: Context, inp: onnx.ValueInfoProto, elem: int, infos: list[TensorInfo]) -> bool:
    """A rank-0 input every reader takes as an NNAPI scalar parameter becomes a scalar model input."""
    readers = ctx.consumers.get(inp.name, [])
    kind = _SCALAR_TYPES.get(elem)
    if kind is None or not readers or inp.name in ctx.graph_outputs:
        return False
    for node in readers:
        index = SCALAR_READERS.get(node.op_type)
        if index is None or [i for i, n in enumerate(node.input) if n == inp.name] != [index]:
            return False
    operand = ctx.builder.add_input(kind, ())
    ctx.scalar_inputs[inp.name] = operand
    ctx.input_operands.add(operand)
    infos.append(TensorInfo(inp.name, (), _SCALAR_NUMPY[kind]))
    return True


# Quantization-parameter inputs (scales and zero points) by op type: NNAPI takes them as operand
# parameters fixed in the model, never as run-time tensors.
_QPARAM_INPUTS = {
    "QuantizeLinear": (1, 2),
    "DequantizeLinear": (1, 2),
    "QLinearConv": (1, 2, 4, 5, 6, 7),
    "QLinearMatMul": (1, 2, 4, 5, 6, 7),
}


def _refuse_runtime_qparams(ctx: Context, name: str) -> None:
    for node in ctx.consumers.get(name, []):
        indexes = _QPARAM_INPUTS.get(node.op_type, ())
        for i, inp in enumerate(node.input):
            if inp == name and i in indexes:
                raise ConversionError(
                    f"{where(node)} reads its quantization parameter (input {i}) from graph input '{name}'; "
                    f"NNAPI fixes scales and zero points in the model, so they must be constants (initializers)"
                )


def _output_tensor(ctx: Context, out: onnx.ValueInfoProto, nhwc: bool, notes: list[str]) -> Tensor:
    """The operand holding graph output `out`: DEQUANTIZE for a float output of a quantized tensor."""
    name = out.name
    t = ctx.in_layout(name, nhwc)
    if not t.shape:
        notes.append(f"model output '{name}' is a scalar (rank 0), given as a [1] tensor")
    elem = out.type.tensor_type.elem_type
    if elem in ELEM_DTYPES:
        if t.quant is None or t.quant.type != QUANT8_TYPES[ELEM_DTYPES[elem]]:
            got = "float32" if t.quant is None else t.quant.type.name
            raise ConversionError(f"output '{name}' is {_elem_name(elem)} but the converted tensor is {got}")
        notes.append(f"quantized model output '{name}' ({t.quant.describe()})")
    elif t.quant is not None and elem == TensorProto.FLOAT:
        # ONNX gives the float value (a DequantizeLinear output): dequantize at the end.
        out_t = ctx.temp(t.shape, t.nhwc)
        ctx.emit(OperationType.DEQUANTIZE, [t.operand], [out_t.operand])
        return out_t
    return t


def _add_outputs(
    ctx: Context, graph: onnx.GraphProto, keep_io_layout: bool, notes: list[str]
) -> list[TensorInfo]:
    infos = []
    marked: set[int] = set()
    for out in graph.output:
        name = out.name
        if name in ctx.consts and ctx.consts[name].dtype.kind not in "fiub":
            raise ConversionError(
                f"output '{name}' is a constant of dtype {ctx.consts[name].dtype}; NN model outputs hold float, "
                f"integer and bool tensors"
            )
        if name not in ctx.consts and name not in ctx.tensors and name not in ctx.qconsts:
            raise ConversionError(f"output '{name}' is not produced by any node")
        t = _output_tensor(ctx, out, not keep_io_layout and len(ctx.shape_of(name)) == 4, notes)
        if (
            t.operand in marked
            or t.operand in ctx.input_operands
            or ctx.builder.value_of(t.operand) is not None
        ):
            # An operand can be only one output and never an input or constant: copy it.
            copy = ctx.temp(t.shape, t.nhwc, t.quant, t.elem)
            if t.quant is None and t.elem not in FLOAT_TYPES:
                # CAST to the same type is a copy for int32 and bool tensors (RESHAPE takes neither).
                ctx.emit(OperationType.CAST, [t.operand], [copy.operand])
            else:
                ctx.emit(OperationType.RESHAPE, [t.operand, ctx.ints(t.nn_shape)], [copy.operand])
            t = copy
        ctx.builder.mark_outputs(t.operand)
        marked.add(t.operand)
        infos.append(TensorInfo.of(name, t.nn_shape, t.quant, t.elem))
    return infos


def convert(
    onnx_model: ModelSource,
    *,
    batch_size: int = 1,
    keep_io_layout: bool = True,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
    extensions: Iterable[str] = (),
) -> Conversion:
    """Convert an ONNX model (proto, path or bytes) to an NN HAL Model.

    Rank-4 activations are carried in NHWC inside the graph; with
    `keep_io_layout` the model's rank-4 inputs and outputs stay NCHW (one
    TRANSPOSE each), otherwise they are NHWC. `input_shapes` gives the whole
    shape of named graph inputs before shape inference (e.g. {"features":
    [50, 1, 320]} fixes a symbolic time dimension): their symbolic dims take
    the given values, and a value that contradicts a static dim, a wrong rank
    or an unknown name is an error. The symbolic leading (batch) dim of every
    other input becomes `batch_size`; no other dim may be symbolic.
    `input_values` fixes the value of named graph inputs that are
    configuration (a sample rate, a mode flag): each becomes a constant of
    the model, no longer an input of the NN model, and what is computed from
    it folds (see load.fix_input_values for how a value must fit its input).
    `extensions` names the vendor extensions the target driver declares: ONNX
    ops with no NNAPI equivalent (Gelu) become extension operations only when
    their extension is among them. Raises ConversionError.
    """
    model = load_model(onnx_model)
    opset = default_opset(model)
    both = sorted(set(input_shapes or {}) & set(input_values or {}))
    if both:
        raise ConversionError(
            f"input '{both[0]}' is given both a shape and a value; a value fixes the shape too: give one"
        )
    token = index_nodes(model.graph.node)
    try:
        notes = fix_input_values(model, input_values or {})
        notes += fix_input_shapes(model, input_shapes or {})
        notes += fix_batch(model, batch_size, skip=set(input_shapes or {}))
        notes += simplify(model, opset, infer_shapes)
        notes += hold_without_unit_axes(model, infer_shapes(model))
        return _convert(infer_shapes(model), opset, keep_io_layout, frozenset(extensions), notes)
    finally:
        restore_index(token)


def _check_valid(model: Model, origins: Sequence[str | None]) -> None:
    """ConversionError naming the ONNX node when the NN model breaks a HAL 1.3 rule (an operation a
    handler emitted outside NNAPI's limits, such as a rank-5 tensor)."""
    from mlts.hal.errors import HalError
    from mlts.hal.validate import validate_model

    try:
        validate_model(model)
    except HalError as e:
        found = re.search(r"operation (\d+) of main subgraph", e.message)
        origin = origins[int(found.group(1))] if found and int(found.group(1)) < len(origins) else None
        by = f" (converted from ONNX node '{origin}')" if origin else ""
        raise ConversionError(f"the converted model is invalid{by}: {e.message}") from None


def _convert(
    model: onnx.ModelProto, opset: int, keep_io_layout: bool, extensions: frozenset[str], notes: list[str]
) -> Conversion:
    """The NN model of `model`, whose shapes are fixed, folded and inferred."""
    graph = model.graph
    if graph.sparse_initializer:
        raise ConversionError("sparse initializers are not supported; store them as dense tensors")

    nodes = _live_nodes(graph)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in dict.fromkeys(n for n in node.input if n):
            consumers.setdefault(name, []).append(node)
    builder = ModelBuilder()
    ctx = Context(builder, opset, _shapes(model), consumers, {o.name for o in graph.output})
    ctx.extensions = extensions
    for init in graph.initializer:
        ctx.consts[init.name] = numpy_helper.to_array(init)
    ctx.producers = {o: n for n in nodes for o in n.output if o}
    ctx.graph_inputs = [i.name for i in graph.input if i.name not in ctx.consts]

    for node in nodes:
        _check_domain(node)
    io_notes: list[str] = []
    inputs = _add_inputs(ctx, graph, keep_io_layout, io_notes)
    for node in nodes:
        if not ctx.is_absorbed(node):
            _convert_node(ctx, node)
    ctx.node = None
    outputs = _add_outputs(ctx, graph, keep_io_layout, io_notes)
    ctx.counts["pruned_operation"] = builder.prune()
    try:
        nn_model = builder.build()
    except ValueError as e:
        raise ConversionError(f"the converted model is invalid: {e}") from None
    _check_valid(nn_model, builder.operation_origins())

    notes += _notes(ctx, len(graph.node) - len(nodes)) + io_notes
    if opset > NEWEST_TESTED_OPSET:
        notes.append(
            f"opset {opset} is newer than {NEWEST_TESTED_OPSET}, the newest this converter is tested with"
        )
    return Conversion(
        nn_model, tuple(inputs), tuple(outputs), opset, tuple(notes), builder.operation_origins()
    )
