"""convert_tflite(): a TFLite model's main subgraph (or a signature's) as an NN HAL model.

One pass over the subgraph's operators in their stored order (TFLite stores them in execution
order), each mapped by its registered function the way TFLite's NNAPI delegate maps it (see
registry.py and docs/tflite.md). A builtin without a mapping, an operator version above the one the
delegate accepts, or an option it would not map is refused in one line naming the operator, its
index, the subgraph and the reason (and the feature level the delegate would need, where it maps
the builtin above NNAPI 1.3); custom operators are refused, and TFLite's GELU maps to the bundled
vendor extension when a target driver declares it. Input shapes given for the dynamic (-1)
dimensions of the inputs' shape signatures resize the subgraph first (mlts.convert.tflite.shapes).

Before the pass, constant FLOAT16 weights behind DEQUANTIZE become float32 constants and constant
sparse tensors behind DENSIFY become dense constants, so the operators reading them see plain
weights. Variable tensors (the state of LSTM, RNN and SVDF) become extra model inputs, and the
state each such operator writes becomes an extra model output, as the delegate builds its model:
the caller feeds the state in (zeros at the start) and reads the next state back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

import mlts.convert.tflite.ops  # noqa: F401  (registers every mapping)
from mlts.convert.converter import ELEM_NUMPY, Conversion, TensorInfo
from mlts.convert.errors import ConversionError
from mlts.convert.tflite import schema
from mlts.convert.tflite.context import PLAIN, Graph, Refusal, Session
from mlts.convert.tflite.model import Operator, TfliteModel
from mlts.convert.tflite.reader import read_bytes, read_file
from mlts.convert.tflite.registry import LATER, lookup, needs_level
from mlts.convert.tflite.shapes import resize_inputs
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.types import Model

#: How deep IF/WHILE subgraphs may nest.
MAX_SUBGRAPH_DEPTH = 16

TflSource = TfliteModel | str | os.PathLike | bytes

_NUMPY = {
    OperandType.TENSOR_QUANT8_ASYMM: "uint8",
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: "int8",
    OperandType.TENSOR_QUANT16_SYMM: "int16",
    **ELEM_NUMPY,
}


def load_tflite(source: TflSource) -> TfliteModel:
    """A checked TfliteModel from a path, the file's bytes, or an already read model."""
    if isinstance(source, TfliteModel):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return read_bytes(bytes(source))
    return read_file(source)


@dataclass(frozen=True)
class IoPlan:
    """Which TFLite tensors the converted model's inputs and outputs are, in the NN model's order.

    Inputs: the subgraph's (or signature's) inputs, then the variable tensors that became state
    inputs. Outputs: its outputs, then the variable tensors whose next values became state outputs.
    """

    subgraph: int
    signature: str | None
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    state_inputs: int = 0  # the last this many inputs are state (variable) tensors
    #: (input tensor, new shape) of the inputs given shapes other than the file's (input_shapes):
    #: a reference resizes them first (LiteRT's resize_tensor_input).
    resized: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def all_tensors(self) -> set[int]:
        return set(self.inputs) | set(self.outputs)


def convert_tflite(
    source: TflSource,
    *,
    signature: str | None = None,
    extensions: Iterable[str] = (),
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Conversion:
    """Convert a TFLite model (path, bytes or TfliteModel) to an NN HAL model.

    The main subgraph is subgraph 0 with its inputs and outputs, or with `signature` the subgraph
    that signature names, with the signature's inputs and outputs in its order and under its names.
    `extensions`: the vendor extensions the target driver declares. `input_shapes`: whole shapes for
    inputs (by name) whose shape signature has dynamic (-1) dimensions; the shapes that depend on
    them are recomputed (mlts.convert.tflite.shapes). Raises ConversionError.
    """
    return convert_tflite_plan(source, signature=signature, extensions=extensions, input_shapes=input_shapes)[
        0
    ]


def convert_tflite_plan(
    source: TflSource,
    *,
    signature: str | None = None,
    extensions: Iterable[str] = (),
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Conversion, IoPlan]:
    """convert_tflite and the IoPlan that says which TFLite tensor each NN input and output holds."""
    model = load_tflite(source)
    if signature is not None:
        sig = model.signature(signature)
        sg = model.subgraphs[sig.subgraph]
        inputs = [(name, i) for name, i in sig.inputs]
        outputs = [(name, i) for name, i in sig.outputs]
    else:
        sg = model.subgraphs[0]
        inputs = [(sg.tensors[i].name, i) for i in sg.inputs]
        outputs = [(sg.tensors[i].name, i) for i in sg.outputs]
    resized: dict[int, tuple[int, ...]] = {}
    if input_shapes:
        model, resized = resize_inputs(model, sg.index, inputs, input_shapes)
        sg = model.subgraphs[sg.index]
    session = Session(model, frozenset(extensions))
    if not outputs:
        raise ConversionError(f"{model.label}: {sg.label()} has no outputs")
    session.stack.append(sg.index)
    g = Graph(session, sg)
    in_infos = _add_inputs(g, inputs)
    _run(g, state=True)
    out_infos = _mark_outputs(g, outputs)
    state_in, state_out = _state_io(g)
    notes = _notes(session) + _io_notes(g, state_in, resized)
    dropped = g.builder.prune()
    if dropped:
        notes.append(f"removed {dropped} operations whose results nothing reads")
    try:
        nn = g.builder.build()
    except ValueError as e:
        raise ConversionError(f"{model.label}: the converted model is invalid: {e}") from None
    conv = Conversion(
        nn,
        tuple(in_infos + state_in),
        tuple(out_infos + state_out),
        model.version,
        tuple(notes),
        g.builder.operation_origins(),
    )
    plan = IoPlan(
        sg.index,
        signature,
        tuple(i for _, i in inputs) + tuple(i for i, _ in g.state_inputs),
        tuple(i for _, i in outputs) + tuple(i for i, _ in g.state_outputs),
        tuple(t.name for t in conv.inputs),
        tuple(t.name for t in conv.outputs),
        len(g.state_inputs),
        tuple(sorted(resized.items())),
    )
    return conv, plan


def subgraph_model(session: Session, index: int, where: str) -> Model:
    """Subgraph `index` (an IF branch, a WHILE condition or body) as a model of its own."""
    model = session.model
    if index in session.stack:
        chain = " -> ".join(str(i) for i in [*session.stack, index])
        raise ConversionError(f"{model.label}: {where}: subgraph {index} reaches itself (subgraphs {chain})")
    if len(session.stack) >= MAX_SUBGRAPH_DEPTH:
        raise ConversionError(f"{model.label}: {where}: subgraphs nest deeper than {MAX_SUBGRAPH_DEPTH}")
    sg = model.subgraphs[index]
    session.stack.append(index)
    try:
        g = Graph(session, sg)
        _add_inputs(g, [(sg.tensors[i].name, i) for i in sg.inputs])
        _run(g, state=False)
        _mark_outputs(g, [(sg.tensors[i].name, i) for i in sg.outputs])
        g.builder.prune()
        try:
            return g.builder.build()
        except ValueError as e:
            raise ConversionError(f"{model.label}: {sg.label()} (from {where}) is invalid: {e}") from None
    finally:
        session.stack.pop()


# ---------------------------------------------------------------------------- inputs and outputs


def _info(g: Graph, name: str, operand: int) -> TensorInfo:
    b = g.builder
    kind = OperandType(b.type_of(operand))
    dtype = _NUMPY.get(kind)
    if dtype is None:
        raise ConversionError(
            f"{g.model.label}: '{name}' is {kind.name}, which model inputs and outputs cannot be"
        )
    scale, zp = b.quant_of(operand) if kind in _QUANT else (0.0, 0)
    return TensorInfo(name, tuple(b.dims_of(operand)), dtype, scale, zp)


_QUANT = (
    OperandType.TENSOR_QUANT8_ASYMM,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
    OperandType.TENSOR_QUANT16_SYMM,
)


def _add_inputs(g: Graph, inputs: Sequence[tuple[str, int]]) -> list[TensorInfo]:
    infos = []
    for name, index in inputs:
        t = g.tensor(index)
        if (index, PLAIN) in g.operands:
            raise ConversionError(f"{g.model.label}: {g.sg.label()} lists input {t.describe()} twice")
        try:
            kind, scale, zp, extra = g.operand_type(t)
        except Refusal as e:
            raise ConversionError(f"{g.model.label}: input '{name}': {e}") from None
        if extra is not None:
            raise ConversionError(
                f"{g.model.label}: input '{name}' ({t.describe()}) cannot be an NN model input"
            )
        operand = g.builder.add_input(kind, g.shape(index), scale, zp)
        g.operands[(index, PLAIN)] = operand
        infos.append(_info(g, name or f"input_{index}", operand))
    return infos


def _copy(g: Graph, operand: int) -> int:
    """A copy of `operand` (a model output must be written by an operation, and only once)."""
    b = g.builder
    kind = b.type_of(operand)
    scale, zp = b.quant_of(operand)
    copy = b.add_operand(kind, b.dims_of(operand), scale, zp)
    if kind in (OperandType.TENSOR_INT32, OperandType.TENSOR_BOOL8):
        b.add_operation(OperationType.CAST, [operand], [copy])
    else:
        b.add_operation(
            OperationType.RESHAPE, [operand, b.add_int32_tensor(list(b.dims_of(operand)))], [copy]
        )
    return copy


def _mark_outputs(g: Graph, outputs: Sequence[tuple[str, int]]) -> list[TensorInfo]:
    infos = []
    marked: set[int] = set()
    for name, index in outputs:
        operand = g.operands.get((index, PLAIN))
        if operand is None:
            if g.value(index) is None:
                raise ConversionError(
                    f"{g.model.label}: output '{name}' ({g.tensor(index).describe()}) is written by no operator"
                )
            operand = g.operand(index)
        if operand in marked or not _is_temporary(g, operand):
            operand = _copy(g, operand)
        g.builder.mark_outputs(operand)
        marked.add(operand)
        infos.append(_info(g, name or f"output_{index}", operand))
    return infos


def _is_temporary(g: Graph, operand: int) -> bool:
    return g.builder.value_of(operand) is None and not g.builder.is_input(operand)


def _state_io(g: Graph) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The model inputs added for variable tensors and the outputs holding their next values."""
    ins: list[TensorInfo] = []
    outs: list[TensorInfo] = []
    for index, operand in g.state_inputs:
        ins.append(_info(g, f"{g.tensor(index).name or index}", operand))
    order = {index: k for k, (index, _) in enumerate(g.state_inputs)}
    g.state_outputs.sort(key=lambda item: order.get(item[0], len(order)))
    for index, operand in g.state_outputs:
        g.builder.mark_outputs(operand)
        outs.append(_info(g, f"{g.tensor(index).name or index}:next", operand))
    return ins, outs


# ---------------------------------------------------------------------------- the pass


def _prepass(g: Graph) -> set[int]:
    """Constant FLOAT16 weights behind DEQUANTIZE and sparse constants behind DENSIFY, folded."""
    absorbed: set[int] = set()
    for op in g.sg.operators:
        name = op.code.name if op.code.custom is None else None
        if name not in ("DEQUANTIZE", "DENSIFY") or len(op.inputs) != 1 or len(op.outputs) != 1:
            continue
        src, dst = op.inputs[0], op.outputs[0]
        if src < 0:
            continue
        g.op = op
        value = g.value(src)
        if value is None:
            continue
        if name == "DENSIFY":
            if g.tensor(src).sparsity is None:
                continue
            g.values[dst] = value
            g.session.counts["densified"] += 1
        elif g.tensor(src).type == schema.FLOAT16 and g.tensor(dst).type == schema.FLOAT32:
            g.values[dst] = value.astype(np.float32)
            g.session.counts["fp16_weights"] += 1
        else:
            continue
        if g.tensor(dst).shape != tuple(value.shape) and value.size != g.tensor(dst).size:
            raise ConversionError(
                f"{g.model.label}: {g.where(op)}: its output's shape does not hold its input"
            )
        absorbed.add(op.index)
    g.op = None
    return absorbed


def _run(g: Graph, *, state: bool) -> None:
    absorbed = _prepass(g)
    for op in g.sg.operators:
        if op.index in absorbed:
            continue
        g.op = op
        _state_inputs(g, op, state)
        _dispatch(g, op)
    g.op = None


def _state_inputs(g: Graph, op: Operator, allowed: bool) -> None:
    """Variable tensors an operator reads before any writes them become model inputs (main subgraph only)."""
    for index in op.inputs:
        if index < 0 or (index, PLAIN) in g.operands:
            continue
        t = g.tensor(index)
        if not t.is_variable:
            continue
        if not allowed:
            raise ConversionError(
                f"{g.model.label}: {g.where(op)}: it reads variable {t.describe()} inside a control-flow "
                "subgraph, which the importer does not map"
            )
        kind, scale, zp, _ = g.operand_type(t)
        operand = g.builder.add_input(kind, g.shape(index), scale, zp)
        g.operands[(index, PLAIN)] = operand
        g.state_inputs.append((index, operand))


def _dispatch(g: Graph, op: Operator) -> None:
    model = g.model
    where = g.where(op)
    if op.code.custom is not None:
        raise ConversionError(
            f"{model.label}: {where}: custom operators have no NNAPI operation, and no vendor extension a "
            "target driver declares provides it"
        )
    if op.code.name == "GELU":
        from mlts.convert.tflite.extension import gelu

        _guard(g, op, where, lambda: gelu(g, op))
        return
    mapping = lookup(op.code.name)
    if mapping is None:
        later = LATER.get(op.code.name)
        if later is not None:
            raise ConversionError(
                f"{model.label}: {where}: "
                + needs_level(later.feature_level, f"NNAPI's {later.nnapi} operation")
            )
        raise ConversionError(
            f"{model.label}: {where}: TFLite's NNAPI delegate maps no NNAPI operation for it at any "
            "feature level (docs/tflite.md lists the builtins the importer maps)"
        )
    if mapping.max_version is not None and op.code.version > mapping.max_version:
        raise ConversionError(
            f"{model.label}: {where}: operator version {op.code.version}; the NNAPI delegate maps versions "
            f"up to {mapping.max_version}"
        )
    _guard(g, op, where, lambda: mapping.handler(g, op))


def _guard(g: Graph, op: Operator, where: str, fn) -> None:
    try:
        fn()
    except Refusal as e:
        raise ConversionError(f"{g.model.label}: {where}: {e}") from None
    except ConversionError:
        raise
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ConversionError(
            f"{g.model.label}: {where}: conversion failed: {type(e).__name__}: {e}"
        ) from None


# ---------------------------------------------------------------------------- notes


def _notes(session: Session) -> list[str]:
    c = session.counts
    texts = {
        "fp16_weights": "stored {} FLOAT16 weights behind DEQUANTIZE as float32 constants",
        "densified": "densified {} sparse constant tensors",
        "hybrid_weights": "dequantized {} 8-bit weights of hybrid (float input) operators in the graph",
        "extension_operation": "mapped {} operators to vendor extension operations",
    }
    return [text.format(c[key]) for key, text in texts.items() if c[key]]


def _io_notes(g: Graph, state_in: list[TensorInfo], resized: Mapping[int, tuple[int, ...]]) -> list[str]:
    notes = []
    for name, t in ((t.name, t) for t in (g.tensor(i) for i in g.sg.inputs)):
        if t.index in resized:
            notes.append(
                f"input '{name}' converted with the given shape {list(t.shape)} (shape signature "
                f"{list(t.shape_signature or t.shape)}); the shapes that follow from it were recomputed"
            )
        elif t.shape_signature is not None and any(d < 0 for d in t.shape_signature):
            notes.append(
                f"input '{name}' has dynamic dimensions {list(t.shape_signature)}; converted with the file's "
                f"shape {list(t.shape)} (give another with --input-shape {name}=...)"
            )
    for info in state_in:
        notes.append(
            f"state tensor '{info.name}' is a model input (TFLite keeps it in a variable: feed zeros to start) and "
            f"its next value the output '{info.name}:next'"
        )
    return notes
