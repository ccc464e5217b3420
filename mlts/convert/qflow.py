"""How quantization flows through an ONNX graph: which tensors are quantized, and with what.

QDQ format: a float tensor whose only readers are QuantizeLinear nodes with
identical (scale, zero point) is held in a quantized operand with those
parameters; the QuantizeLinear outputs and the DequantizeLinear outputs
after them are the same operand. An op's output parameters therefore come
from the QuantizeLinear nodes that read it, under one of three rules:

- EXACT: the op only moves, selects or clamps at zero values already on the
  input's grid (Reshape, Transpose, MaxPool, Relu, Pad with 0, ...): an
  unquantized output inherits the input's parameters, a quantized one must
  repeat them;
- SAME: the NN op needs the input's parameters but its float result is not on
  the grid (AveragePool, Clip to 6): the output must be quantized, with them;
- ANY: the NN op requantizes (Conv, Add, Softmax, ...): the output must be
  quantized, with the input's 8-bit type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnx import NodeProto

from mlts.convert.errors import ConversionError
from mlts.convert.quant import (
    ELEM_DTYPES,
    QUANT8_TYPES,
    QParams,
    activation_params,
    declared_params,
    scale_text,
)
from mlts.hal.enums import OperandType, OperationType

if TYPE_CHECKING:
    from mlts.convert.context import Context

EXACT, SAME, ANY = "exact", "same", "any"
QUANT8_OPERANDS = frozenset(QUANT8_TYPES.values()) | {OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL}

# Quantized inputs of QOperator nodes: op type -> [(input, its scale input, its zero point input)].
QLINEAR_INPUTS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "QLinearConv": ((0, 1, 2), (3, 4, 5)),
    "QLinearMatMul": ((0, 1, 2), (3, 4, 5)),
    "QLinearAdd": ((0, 1, 2), (3, 4, 5)),
    "QLinearMul": ((0, 1, 2), (3, 4, 5)),
    "QLinearGlobalAveragePool": ((0, 1, 2),),
    "QLinearAveragePool": ((0, 1, 2),),
    "QLinearSoftmax": ((0, 1, 2),),
    "QLinearSigmoid": ((0, 1, 2),),
    "QGemm": ((0, 1, 2), (3, 4, 5)),
}


def qlinear_inputs(node: NodeProto) -> tuple[tuple[int, int, int], ...]:
    """(input, scale input, zero point input) of each quantized input of a QOperator node."""
    if node.op_type == "QLinearConcat":
        return tuple((i, i + 1, i + 2) for i in range(2, len(node.input) - 2, 3))
    return QLINEAR_INPUTS.get(node.op_type, ())


def _name(node: NodeProto) -> str:
    return f"{node.op_type} node '{node.name or node.output[0]}'"


def quant_of(ctx: Context, name: str) -> QParams | None:
    """QParams of the QuantizeLinear nodes reading float tensor `name` (None when none does)."""
    readers = [n for n in ctx.consumers.get(name, []) if not ctx.is_absorbed(n)]
    qs = [n for n in readers if n.op_type == "QuantizeLinear" and n.input[0] == name]
    if not qs:
        return None
    others = [n for n in readers if n not in qs]
    if others:
        raise ConversionError(
            f"tensor '{name}' is read by {_name(qs[0])} and by {_name(others[0])}; a quantized tensor "
            f"may be read only through QuantizeLinear (float consumers of it are not supported)"
        )
    if name in ctx.graph_outputs:
        raise ConversionError(
            f"tensor '{name}' is a graph output and is also quantized by {_name(qs[0])}; "
            f"its float value cannot be produced exactly"
        )
    first = activation_params(qs[0], ctx.consts, None)
    for q in qs[1:]:
        other = activation_params(q, ctx.consts, None)
        if other != first:
            raise ConversionError(
                f"tensor '{name}' is quantized by {_name(qs[0])} ({first.describe()}) and by "
                f"{_name(q)} ({other.describe()}); one tensor can have only one set of parameters"
            )
    return first


def _unquantized_reason(ctx: Context, name: str) -> str:
    if name in ctx.graph_outputs:
        return "it is a float graph output"
    readers = ctx.consumers.get(name, [])
    if not readers:
        return "nothing reads it"
    return f"it is read by {_name(readers[0])}, not by QuantizeLinear"


def out_quant(ctx: Context, name: str, like: QParams | None, rule: str) -> QParams | None:
    """The QParams of output `name` of the node being converted, whose (first) input has `like`.

    Float inputs give a float output (None). See the module docstring for the rules.
    """
    if like is None:
        return None
    node = ctx.node
    who = _name(node) if node is not None else f"the producer of '{name}'"
    q = ctx.quant_of(name)
    if q is None:
        if rule == EXACT:
            return like
        raise ConversionError(
            f"{who}: output '{name}' is not quantized ({_unquantized_reason(ctx, name)}); the quantized "
            f"op needs a QuantizeLinear on its output"
        )
    if rule in (EXACT, SAME) and q != like:
        raise ConversionError(
            f"{who}: output '{name}' is quantized with ({q.describe()}) but input has ({like.describe()}); "
            f"this op cannot change quantization parameters"
        )
    if q.type != like.type:
        raise ConversionError(
            f"{who}: output '{name}' is {q.type.name} but the input is {like.type.name}; "
            f"NNAPI needs input and output of the same 8-bit type"
        )
    return q


# Ops that pass 8-bit values through unchanged (QOperator graphs apply them to the 8-bit tensors directly).
VALUE_PRESERVING = frozenset(
    {
        "Dropout",
        "Flatten",
        "GlobalMaxPool",
        "Identity",
        "MaxPool",
        "Relu",
        "Reshape",
        "Slice",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
    }
)


def _readers_through(ctx: Context, name: str) -> list[tuple[str, NodeProto]]:
    """(tensor, reader) pairs of `name` and of the outputs of value-preserving ops on it."""
    found, todo, seen = [], [name], set()
    while todo:
        t = todo.pop()
        for node in ctx.consumers.get(t, []):
            if id(node) in seen:
                continue
            seen.add(id(node))
            found.append((t, node))
            if node.op_type in VALUE_PRESERVING and node.input[0] == t:
                todo.append(node.output[0])
    return found


def input_quant(ctx: Context, name: str, elem: int) -> QParams:
    """QParams of an 8-bit graph input, from the DequantizeLinear / QLinear* nodes that read it.

    Value-preserving ops between them (MaxPool, Reshape, ...) are looked through.
    """
    found: list[tuple[NodeProto, QParams]] = []
    for t, node in _readers_through(ctx, name):
        if node.op_type == "DequantizeLinear" and node.input[0] == t:
            found.append((node, activation_params(node, ctx.consts, ELEM_DTYPES[elem])))
        for index, s, z in qlinear_inputs(node):
            if index < len(node.input) and node.input[index] == t:
                found.append((node, declared_params(node, ctx.consts, s, z, f"input '{t}'")))
    if not found:
        raise ConversionError(
            f"input '{name}' is {'uint8' if elem == 2 else 'int8'} but no DequantizeLinear or QLinear node "
            f"reads it, so its scale and zero point are unknown"
        )
    node0, first = found[0]
    for node, q in found[1:]:
        if q != first:
            raise ConversionError(
                f"input '{name}' is read with ({first.describe()}) by {_name(node0)} and with "
                f"({q.describe()}) by {_name(node)}; one tensor can have only one set of parameters"
            )
    if first.type != QUANT8_TYPES[ELEM_DTYPES[elem]]:
        raise ConversionError(
            f"input '{name}' has a zero point of another type than its own ({first.type.name})"
        )
    return first


def qdq_activation(ctx: Context, name: str) -> tuple[NodeProto, NodeProto, NodeProto] | None:
    """(QuantizeLinear, DequantizeLinear, Relu/Clip) when `name` reaches an activation only through one Q->DQ pair."""
    q = ctx.sole_consumer(name, {"QuantizeLinear"})
    if q is None or q.input[0] != name:
        return None
    dq = ctx.sole_consumer(q.output[0], {"DequantizeLinear"})
    if dq is None or dq.input[0] != q.output[0]:
        return None
    act = ctx.sole_consumer(dq.output[0], {"Relu", "Clip"})
    if act is None or act.input[0] != dq.output[0]:
        return None
    params = activation_params(q, ctx.consts, None)
    if activation_params(dq, ctx.consts, None) != params or ctx.quant_of(act.output[0]) != params:
        return None
    return q, dq, act


def probability_quant(ctx: Context, name: str, like: QParams | None, nn_op: str) -> QParams | None:
    """Output QParams of SOFTMAX / LOGISTIC, which NNAPI fixes at scale 1/256, zero point 0 (uint8) or -128 (int8)."""
    q = out_quant(ctx, name, like, ANY)
    if q is None:
        return None
    check_probability(ctx.node, name, q, nn_op)
    return q


def check_probability(node: NodeProto | None, name: str, q: QParams, nn_op: str) -> None:
    want_zp = 0 if q.dtype == "uint8" else -128
    if q.scale != 1.0 / 256.0 or q.zero_point != want_zp:
        who = _name(node) if node is not None else f"the producer of '{name}'"
        raise ConversionError(
            f"{who}: output '{name}' is quantized with scale {scale_text(q.scale)} and zero point {q.zero_point}; "
            f"NNAPI's quantized {nn_op} needs scale 1/256 (0.00390625) and zero point {want_zp} ({q.dtype})"
        )


# ONNX ops that may read quantized tensors (QDQ float ops between DequantizeLinear and QuantizeLinear,
# value-preserving ops on 8-bit tensors, and the QOperator ops).
QUANT_OPS = frozenset(
    {
        "Add", "AveragePool", "Clip", "Concat", "Conv", "DequantizeLinear", "Dropout", "Flatten", "Gemm",
        "GlobalAveragePool", "GlobalMaxPool", "Identity", "MatMul", "MaxPool", "Mul", "Pad", "QuantizeLinear",
        "ReduceMean", "Relu", "Reshape", "Shape", "Sigmoid", "Slice", "Softmax", "Split", "Squeeze", "Transpose",
        "Unsqueeze",
        "QLinearConv", "QLinearMatMul", *QLINEAR_INPUTS, "QLinearConcat",
    }
)  # fmt: skip


def check_quantized_inputs(ctx: Context, node: NodeProto) -> None:
    """ConversionError when `node` reads a quantized tensor but has no quantized conversion."""
    if node.op_type in QUANT_OPS:
        return
    name = next((n for n in node.input if n and ctx.quantized(n)), None)
    if name is None:
        return
    if node.op_type == "BatchNormalization":
        raise ConversionError(
            f"{_name(node)} reads the quantized tensor '{name}': folding BatchNormalization into quantized "
            f"weights is not exact; fold it before quantizing (onnxruntime's quant_pre_process does)"
        )
    ops = sorted(QUANT_OPS - {"Dropout", "Identity", "Shape"})
    raise ConversionError(
        f"{_name(node)} reads the quantized tensor '{name}'; quantized {node.op_type} is not supported "
        f"(quantized ops: {', '.join(ops)})"
    )


def check_emitted(ctx: Context, node: NodeProto, first: int) -> None:
    """No operation emitted for `node` since `first` mixes float32 and 8-bit tensors (QUANTIZE/DEQUANTIZE aside)."""
    b = ctx.builder
    for op, ins, outs in ctx.emitted[first:]:
        if op in (OperationType.QUANTIZE, OperationType.DEQUANTIZE):
            continue
        types = {b.type_of(i) for i in (*ins, *outs)}
        if OperandType.TENSOR_FLOAT32 in types and types & QUANT8_OPERANDS:
            raise ConversionError(
                f"{_name(node)}: its {op.name} would mix float32 and quantized tensors; only fully quantized "
                f"or fully float operations are supported"
            )
