"""Reading an ONNX model, fixing its symbolic batch dimension and inferring every static shape."""

from __future__ import annotations

import itertools
import os
from collections.abc import Collection, Iterator, Mapping, Sequence

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import NodeProto, TensorProto, helper, numpy_helper

from mlts.convert.errors import ConversionError
from mlts.hal import files

ModelSource = onnx.ModelProto | str | os.PathLike | bytes
DEFAULT_DOMAINS = ("", "ai.onnx")
MICROSOFT_DOMAIN = "com.microsoft"
# The onnxruntime contrib ops the converter accepts (quantized ops of the QOperator format).
MICROSOFT_OPS = frozenset(
    {
        "QLinearAdd",
        "QLinearMul",
        "QLinearGlobalAveragePool",
        "QLinearAveragePool",
        "QLinearSoftmax",
        "QLinearSigmoid",
        "QLinearConcat",
        "QGemm",
    }
)


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
            data = files.read_bytes(path, what="an ONNX model", limit=files.MAX_ONNX_BYTES)
        except FileNotFoundError:
            raise ConversionError(f"cannot read ONNX model '{path}': no such file") from None
        except files.FileReadError as e:
            raise ConversionError(str(e)) from None
        except OSError as e:
            raise ConversionError(f"cannot read ONNX model '{path}': {e.strerror or e}") from None
        model = _parse(data, what)
        base_dir = os.path.dirname(os.path.abspath(path))
        try:
            _check_external_files(model, base_dir)
            onnx.external_data_helper.load_external_data_for_model(model, base_dir)
        except (OSError, ValueError) as e:
            raise ConversionError(f"cannot load the external data of ONNX model '{path}': {e}") from None
    else:
        raise ConversionError(
            f"cannot convert an object of type {type(source).__name__}; expected an onnx.ModelProto, a path or bytes"
        )
    if not model.HasField("graph") or not model.graph.node or not model.opset_import:
        raise ConversionError(f"{what} is not an ONNX model: it has no graph nodes or no opset import")
    return model


def _graph_tensors(graph: onnx.GraphProto | onnx.FunctionProto) -> Iterator[onnx.TensorProto]:
    """The initializers of `graph` and the tensors of its nodes' attributes, subgraphs included (where
    onnx.load_external_data_for_model looks for external data)."""
    if isinstance(graph, onnx.GraphProto):
        yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _graph_tensors(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _graph_tensors(sub)


def _check_external_files(model: onnx.ModelProto, base_dir: str) -> None:
    """Every external data file the model names is a regular file of bounded size (never a FIFO or device)."""
    helper_module = onnx.external_data_helper
    tensors = itertools.chain(_graph_tensors(model.graph), *map(_graph_tensors, model.functions))
    for tensor in tensors:
        if not helper_module.uses_external_data(tensor):
            continue
        location = helper_module.ExternalDataInfo(tensor).location
        fd, _ = files.open_regular(
            os.path.join(base_dir, location),
            what="external data of an ONNX model",
            limit=files.MAX_ONNX_BYTES,
        )
        os.close(fd)


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


def _runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (the values a caller feeds)."""
    initializers = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def fix_input_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Set every dim of the named graph inputs: symbolic ones take the given values; returns notes.

    A value that contradicts a static dim, a wrong rank or an unknown input
    name is a ConversionError.
    """
    inputs = {i.name: i for i in _runtime_inputs(model)}
    notes = []
    for name, dims in input_shapes.items():
        inp = inputs.get(name)
        if inp is None or not inp.type.HasField("tensor_type"):
            listed = ", ".join(f"'{n}'" for n in inputs) or "none"
            raise ConversionError(
                f"a shape is given for input '{name}', which the model does not have; its inputs: {listed}"
            )
        notes += _set_dims(inp, [int(d) for d in dims])
    return notes


def _set_dims(inp: onnx.ValueInfoProto, dims: list[int]) -> list[str]:
    name = inp.name
    bad = [d for d in dims if d < 1]
    if bad:
        raise ConversionError(f"input_shapes gives input '{name}' shape {dims}; every dimension must be >= 1")
    tt = inp.type.tensor_type
    if not tt.HasField("shape"):
        tt.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in dims)
        return [f"set the shape of input '{name}' (declared without one) to {dims}"]
    declared = [
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
        for d in tt.shape.dim
    ]
    if len(declared) != len(dims):
        raise ConversionError(
            f"input_shapes gives input '{name}' {len(dims)} dimensions {dims}; the model declares rank "
            f"{len(declared)} {declared}"
        )
    notes = []
    for i, (dim, value) in enumerate(zip(tt.shape.dim, dims, strict=True)):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            if dim.dim_value != value:
                raise ConversionError(
                    f"input_shapes gives input '{name}' shape {dims}, but its dimension {i} is fixed to "
                    f"{dim.dim_value} (declared {declared})"
                )
            continue
        label = dim.dim_param or "?"
        dim.Clear()
        dim.dim_value = value
        notes.append(f"fixed symbolic dimension '{label}' of input '{name}' to {value}")
    return notes


def fix_input_values(model: onnx.ModelProto, input_values: Mapping[str, np.ndarray]) -> list[str]:
    """Make the named graph inputs constants of the model (initializers); returns notes.

    A value is taken in the input's element type: integers for integer and
    bool inputs (bool: 0 or 1), any number for float inputs. Its shape must
    fit the declared one: the same rank with the static dims equal, or, for
    an input declared with static dims only, the same number of elements
    (a single value fits a [1] input). An unknown name, a value of the wrong
    kind or out of range, or a shape that does not fit is a ConversionError.
    """
    inputs = {i.name: i for i in _runtime_inputs(model)}
    notes = []
    for name, given in input_values.items():
        inp = inputs.get(name)
        if inp is None or not inp.type.HasField("tensor_type"):
            listed = ", ".join(f"'{n}'" for n in inputs) or "none"
            raise ConversionError(
                f"a value is given for input '{name}', which the model does not have; its inputs: {listed}"
            )
        value = _input_value(inp, np.asarray(given))
        for i, old in enumerate(model.graph.initializer):
            if old.name == name:  # an input with a default value (an initializer of the same name)
                del model.graph.initializer[i]
                break
        model.graph.initializer.append(numpy_helper.from_array(value, name))
        for i, vi in enumerate(model.graph.input):
            if vi.name == name:
                del model.graph.input[i]
                break
        shown = value.reshape(-1)[:8].tolist()
        more = ", ..." if value.size > 8 else ""
        text = str(shown[0]) if value.size == 1 else f"[{', '.join(map(str, shown))}{more}]"
        notes.append(f"fixed input '{name}' to {text} ({value.dtype}, shape {list(value.shape)}): a constant")
    return notes


# NumPy dtype of each ONNX element type a fixed input value may take.
_VALUE_DTYPES: dict[int, type] = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT8: np.int8,
    TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.BOOL: np.bool_,
}


def _input_value(inp: onnx.ValueInfoProto, value: np.ndarray) -> np.ndarray:
    """`value` in the element type and shape of graph input `inp`; ConversionError when it does not fit."""
    name, tt = inp.name, inp.type.tensor_type
    elem = tt.elem_type
    dtype = _VALUE_DTYPES.get(elem)
    if dtype is None:
        type_name = TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)
        raise ConversionError(
            f"input '{name}' has element type {type_name}; a value can be given for float, integer and bool inputs"
        )
    kind = value.dtype.kind
    if kind not in "biuf" or value.size == 0:
        raise ConversionError(f"the value given for input '{name}' is not a non-empty array of numbers")
    if np.dtype(dtype).kind in "iub":
        if kind == "f":
            raise ConversionError(
                f"input '{name}' is {TensorProto.DataType.Name(elem)}; the value given, "
                f"{value.reshape(-1)[:4].tolist()}, is not an integer"
            )
        ints = value.astype(np.int64) if kind != "u" else value
        lo, hi = (0, 1) if dtype is np.bool_ else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        if ints.min() < lo or ints.max() > hi:
            raise ConversionError(
                f"input '{name}' is {TensorProto.DataType.Name(elem)}; the value given has values in "
                f"[{ints.min()}, {ints.max()}], outside [{lo}, {hi}]"
            )
    else:
        with np.errstate(over="ignore"):
            cast: np.ndarray = value.astype(dtype)
        if not np.all(np.isfinite(cast[np.isfinite(value)])):
            raise ConversionError(
                f"input '{name}' is {TensorProto.DataType.Name(elem)}; the value given overflows it"
            )
    value = value.astype(dtype)
    if not tt.HasField("shape"):
        return value
    declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
    shown = [d if d is not None else "?" for d in declared]
    if value.ndim == len(declared):
        if all(d is None or d == v for d, v in zip(declared, value.shape, strict=True)):
            return value
    elif None not in declared:
        dims = [int(d) for d in declared if d is not None]
        if int(np.prod(dims, dtype=np.int64)) == value.size:
            return value.reshape(dims)
    raise ConversionError(
        f"the value given for input '{name}' has shape {list(value.shape)} ({value.size} values); the model "
        f"declares shape {shown}"
    )


def fix_batch(model: onnx.ModelProto, batch_size: int, skip: Collection[str] = ()) -> list[str]:
    """Set symbolic or unknown leading dims of the graph inputs (but those in `skip`) to `batch_size`; returns notes."""
    if batch_size < 1:
        raise ConversionError(f"batch_size {batch_size} is invalid; expected >= 1")
    notes = []
    for inp in _runtime_inputs(model):
        if inp.name in skip or not inp.type.HasField("tensor_type"):
            continue
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            raise ConversionError(
                f"input '{inp.name}' has no shape; the converter needs the rank and every dimension but the batch "
                f"(or the whole shape from input_shapes, mlts convert --input-shape)"
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
                    f"input '{inp.name}' dimension {i} is symbolic ('{label}'); only the batch dimension (0) may be "
                    f"symbolic unless the input's whole shape is given (input_shapes, mlts convert --input-shape)"
                )
            dim.Clear()
            dim.dim_value = batch_size
            notes.append(f"fixed symbolic batch dimension '{label}' of input '{inp.name}' to {batch_size}")
    return notes


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Static shapes for every tensor: declared intermediate/output shapes are dropped and re-inferred.

    ONNX has no shape inference for the com.microsoft ops: they are inferred
    through a stand-in default-domain op of the same output shape (QLinearAdd
    as Add, ...), and the shapes are copied back to the model.
    """
    del model.graph.value_info[:]
    for out in model.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    if not any(n.domain == MICROSOFT_DOMAIN for n in model.graph.node):
        return _infer(model)
    proxy = onnx.ModelProto()
    proxy.CopyFrom(model)
    del proxy.graph.node[:]
    proxy.graph.node.extend(_stand_in(n) if n.domain == MICROSOFT_DOMAIN else n for n in model.graph.node)
    inferred = _infer(proxy)
    model.graph.value_info.extend(inferred.graph.value_info)
    for out, known in zip(model.graph.output, inferred.graph.output, strict=True):
        out.type.CopyFrom(known.type)
    return model


# Initializers of more than this many elements are given to shape inference as typed inputs without
# their values: their shapes are what it needs (shape-like values that data propagation reads are small).
_LARGE_INITIALIZER = 1024


def _large(init: onnx.TensorProto) -> bool:
    count = 1
    for d in init.dims:
        count *= d
    return count > _LARGE_INITIALIZER


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the value_info and output types ONNX shape inference gives (large weights are not
    copied into the inference: see _LARGE_INITIALIZER)."""
    g = model.graph
    if not any(_large(i) for i in g.initializer):
        return _infer_all(model)
    proxy = _without_initializers(model)
    declared = {i.name for i in g.input}
    kept = []
    for init in g.initializer:
        if _large(init):
            if init.name not in declared:
                proxy.graph.input.append(
                    helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
                )
        else:
            kept.append(init)
    proxy.graph.initializer.extend(kept)
    inferred = _infer_all(proxy)
    del g.value_info[:]
    g.value_info.extend(inferred.graph.value_info)
    for out, known in zip(g.output, inferred.graph.output, strict=True):
        out.type.CopyFrom(known.type)
    return model


def _without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` without its initializers (copied without ever serializing them)."""
    g = model.graph
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    og = out.graph
    og.name = g.name
    og.node.extend(g.node)
    og.input.extend(g.input)
    og.output.extend(g.output)
    og.value_info.extend(g.value_info)
    og.sparse_initializer.extend(g.sparse_initializer)
    return out


def _infer_all(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        inferred = onnx.shape_inference.infer_shapes(
            model, check_type=False, strict_mode=False, data_prop=True
        )
        for _ in range(len(model.graph.node)):  # a Loop's shapes may unlock a later Loop's
            known = _loop_output_shapes(inferred)
            if not known:
                break
            inferred.graph.value_info.extend(known)
            inferred = onnx.shape_inference.infer_shapes(
                inferred, check_type=False, strict_mode=False, data_prop=True
            )
        return inferred
    except Exception as e:  # onnx raises several types (InferenceError, ValidationError, RuntimeError)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConversionError(f"ONNX shape inference failed: {first}") from None


def _static_shape(value: onnx.ValueInfoProto | None) -> tuple[int, ...] | None:
    if (
        value is None
        or not value.type.HasField("tensor_type")
        or not value.type.tensor_type.HasField("shape")
    ):
        return None
    dims = value.type.tensor_type.shape.dim
    return tuple(d.dim_value for d in dims) if all(d.HasField("dim_value") for d in dims) else None


def _loop_output_shapes(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Shapes of Loop outputs that ONNX leaves unknown (a loop-carried value may change shape between
    iterations): a carried value keeps its initial static shape when the body declares that same
    shape for its new value."""
    g = model.graph
    values = {v.name: v for v in [*g.input, *g.value_info, *g.output]}
    found = []
    for node in g.node:
        if node.op_type != "Loop":
            continue
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is None:
            continue
        for k, (start, out) in enumerate(zip(node.input[2:], node.output, strict=False)):
            shape = _static_shape(values.get(start))
            if shape is None or _static_shape(values.get(out)) is not None or 1 + k >= len(body.output):
                continue
            if _static_shape(body.output[1 + k]) == shape:
                elem = values[start].type.tensor_type.elem_type
                found.append(helper.make_tensor_value_info(out, elem, list(shape)))
    return found


def _stand_in(node: NodeProto) -> NodeProto:
    """A default-domain node with the output shape of com.microsoft `node` (itself when there is none)."""
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    ins, out = list(node.input), [node.output[0]]
    if node.op_type in ("QLinearAdd", "QLinearMul") and len(ins) >= 4:
        return helper.make_node(node.op_type[len("QLinear") :], [ins[0], ins[3]], out)
    if node.op_type == "QLinearGlobalAveragePool" and not a.get("channels_last", 0):
        return helper.make_node("GlobalAveragePool", ins[:1], out)
    if node.op_type == "QLinearAveragePool" and not a.get("channels_last", 0):
        return helper.make_node(
            "AveragePool", ins[:1], out, **{k: v for k, v in a.items() if k != "channels_last"}
        )
    if node.op_type == "QLinearSoftmax":
        return helper.make_node("Softmax", ins[:1], out, axis=a.get("axis", -1))
    if node.op_type == "QLinearSigmoid":
        return helper.make_node("Sigmoid", ins[:1], out)
    if node.op_type == "QLinearConcat":
        return helper.make_node("Concat", ins[2::3], out, axis=a.get("axis", 0))
    if node.op_type == "QGemm" and len(ins) >= 4:
        keep = {k: v for k, v in a.items() if k in ("transA", "transB")}
        return helper.make_node("Gemm", [ins[0], ins[3]], out, **keep)
    return node
