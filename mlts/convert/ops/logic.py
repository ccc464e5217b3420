"""Comparisons, logical ops, Where, Max/Min, Pow, PRelu/LeakyRelu, HardSigmoid, Expand (NumPy broadcasting).

- Equal, Greater, GreaterOrEqual, Less, LessOrEqual -> EQUAL, ... (TENSOR_BOOL8
  result); And, Or, Xor -> LOGICAL_AND, LOGICAL_OR, NOT_EQUAL of bools.
- Where -> SELECT with its three inputs tiled to the output shape (SELECT does
  not broadcast); on bool values, OR(AND(c, a), AND(NOT c, b)).
- Max, Min (n inputs) -> a chain of MAXIMUM / MINIMUM.
- Pow -> POW (float; a constant integer exponent is used as float, exactly).
- PRelu -> PRELU; LeakyRelu -> PRELU with alpha as a one-element slope.
- HardSigmoid -> MUL, ADD, MAXIMUM 0, MINIMUM 1 (ONNX's own order of operations).
- Expand -> TILE (LOGICAL_AND with true for bool tensors).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from mlts.convert.context import FLOAT_TYPES, Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs
from mlts.convert.ops._typed import broadcast_binary, expanded, operands_kind
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperandType, OperationType

BOOL = OperandType.TENSOR_BOOL8


def _compare(ctx: Context, node: NodeProto, op: OperationType) -> None:
    broadcast_binary(ctx, node, op, [node.input[0], node.input[1]], node.output[0], BOOL)


def _logical(ctx: Context, node: NodeProto, op: OperationType) -> None:
    if operands_kind(ctx, node, [node.input[0], node.input[1]]) != BOOL:
        raise ConversionError(f"{where(node)}: inputs are not bool tensors")
    broadcast_binary(ctx, node, op, [node.input[0], node.input[1]], node.output[0], BOOL)


def _register_binary(op_type: str, versions: tuple[int, ...], op: OperationType, logical: bool) -> None:
    fn = _logical if logical else _compare
    for since in versions:

        def handler(ctx: Context, node: NodeProto, _op: OperationType = op) -> None:
            fn(ctx, node, _op)

        handler.__name__ = f"{op_type.lower()}_{since}"
        handler.__doc__ = f"{op.name} with broadcasting."
        register(op_type, since)(handler)


for _name, _versions, _op, _logical_op in (
    ("Equal", (7,), OperationType.EQUAL, False),
    ("Greater", (7,), OperationType.GREATER, False),
    ("Less", (7,), OperationType.LESS, False),
    ("GreaterOrEqual", (12,), OperationType.GREATER_EQUAL, False),
    ("LessOrEqual", (12,), OperationType.LESS_EQUAL, False),
    ("And", (7,), OperationType.LOGICAL_AND, True),
    ("Or", (7,), OperationType.LOGICAL_OR, True),
    ("Xor", (7,), OperationType.NOT_EQUAL, True),
):
    _register_binary(_name, _versions, _op, _logical_op)


@register("Where", 9)
def where_9(ctx: Context, node: NodeProto) -> None:
    """SELECT of the inputs tiled to the output shape; bool values through LOGICAL_AND/OR/NOT."""
    cond, a, b = node.input[0], node.input[1], node.input[2]
    kind = operands_kind(ctx, node, [a, b]) if a in ctx.tensors or b in ctx.tensors else None
    out_shape = ctx.shape_of(node.output[0], node)
    if kind is None:
        arr = np.asarray(ctx.const(a))
        kind = BOOL if arr.dtype == np.bool_ else OperandType.TENSOR_INT32 if arr.dtype.kind in "iu" else None
        kind = kind or ctx.float_elem()
    if kind == BOOL:
        not_c = ctx.unique(node.output[0] + "/not")
        c_t = ctx.in_layout(cond, False) if cond in ctx.tensors else None
        if c_t is None:
            raise ConversionError(f"{where(node)}: condition is constant but the node was not folded")
        nc = ctx.new_tensor(not_c, c_t.shape, False, None, BOOL)
        ctx.emit(OperationType.LOGICAL_NOT, [c_t.operand], [nc.operand])
        left = ctx.unique(node.output[0] + "/then")
        right = ctx.unique(node.output[0] + "/else")
        _and(ctx, node, cond, a, left)
        _and(ctx, node, not_c, b, right)
        broadcast_binary(ctx, node, OperationType.LOGICAL_OR, [left, right], node.output[0], BOOL)
        return
    if kind not in (*FLOAT_TYPES, OperandType.TENSOR_INT32):
        raise ConversionError(f"{where(node)}: values are {kind.name}; SELECT takes float and int32 tensors")
    ins = []
    for name, want in ((cond, BOOL), (a, kind), (b, kind)):
        if name in ctx.tensors:
            ins.append(expanded(ctx, node, name, out_shape).operand)
        else:
            arr = np.broadcast_to(np.asarray(ctx.const(name)), out_shape)
            ins.append(ctx.builder.add_constant(np.ascontiguousarray(arr.astype(_np(want))), want))
    out = ctx.new_tensor(node.output[0], out_shape, False, None, kind)
    ctx.emit(OperationType.SELECT, ins, [out.operand])


def _np(kind: OperandType) -> type:
    from mlts.convert.ops._typed import NUMPY_OF

    return NUMPY_OF[kind]


def _and(ctx: Context, node: NodeProto, x: str, y: str, out_name: str) -> None:
    shape = tuple(np.broadcast_shapes(ctx.shape_of(x), ctx.shape_of(y)))
    ins = []
    for n in (x, y):
        if n in ctx.tensors:
            ins.append(ctx.in_layout(n, False).operand)
        else:
            arr = np.asarray(ctx.const(n)).astype(np.bool_)
            ins.append(ctx.builder.add_constant(arr.reshape(arr.shape or (1,)), BOOL))
    out = ctx.new_tensor(out_name, shape, False, None, BOOL)
    ctx.emit(OperationType.LOGICAL_AND, ins, [out.operand])


def _chain(ctx: Context, node: NodeProto, op: OperationType) -> None:
    names = [n for n in node.input if n]
    if len(names) == 1:
        ctx.alias(node.output[0], names[0])
        ctx.counts["dropped_identity"] += 1
        return
    acc = names[0]
    for i, n in enumerate(names[1:], start=1):
        last = i == len(names) - 1
        target = node.output[0] if last else ctx.unique(f"{node.output[0]}/{i}")
        if last:
            broadcast_binary(ctx, node, op, [acc, n], target)
        else:
            # Intermediate results take the broadcast shape of what they combine.
            broadcast_binary(ctx, node, op, [acc, n], target)
        acc = target


@register("Max", 6)
def max_6(ctx: Context, node: NodeProto) -> None:
    """MAXIMUM of every input, pairwise (broadcasting from opset 8)."""
    _chain(ctx, node, OperationType.MAXIMUM)


@register("Min", 6)
def min_6(ctx: Context, node: NodeProto) -> None:
    """MINIMUM of every input, pairwise (broadcasting from opset 8)."""
    _chain(ctx, node, OperationType.MINIMUM)


@register("Pow", 7)
def pow_7(ctx: Context, node: NodeProto) -> None:
    """POW on float tensors; an integer exponent must be a constant (used as float, exactly)."""
    base, exp = node.input[0], node.input[1]
    if base not in ctx.tensors or ctx.tensors[base].elem not in FLOAT_TYPES or ctx.tensors[base].quant:
        raise ConversionError(f"{where(node)}: base '{base}' is not a float run-time tensor; POW takes float")
    if exp in ctx.tensors and ctx.tensors[exp].elem not in FLOAT_TYPES:
        raise ConversionError(
            f"{where(node)}: exponent '{exp}' is an integer run-time tensor; POW takes a float exponent"
        )
    if exp in ctx.consts:
        ctx.consts[exp + "#float"] = np.asarray(ctx.consts[exp]).astype(np.float32)
        exp = exp + "#float"
    broadcast_binary(ctx, node, OperationType.POW, [base, exp], node.output[0])


@register("PRelu", 6)
def prelu(ctx: Context, node: NodeProto) -> None:
    """PRELU: the slope broadcasts to the input (unidirectionally, as ONNX requires)."""
    broadcast_binary(ctx, node, OperationType.PRELU, [node.input[0], node.input[1]], node.output[0])


@register("LeakyRelu", 6)
def leaky_relu(ctx: Context, node: NodeProto) -> None:
    """PRELU with a one-element slope alpha (default 0.01)."""
    alpha = float(attrs(node).get("alpha", 0.01))
    slope = ctx.unique(node.output[0] + "/alpha")
    ctx.consts[slope] = np.array([alpha], np.float32)
    broadcast_binary(ctx, node, OperationType.PRELU, [node.input[0], slope], node.output[0])


@register("HardSigmoid", 6)
def hard_sigmoid(ctx: Context, node: NodeProto) -> None:
    """max(0, min(1, alpha*x + beta)) as MUL, ADD, MINIMUM, MAXIMUM; HARD_SWISH for x * HardSigmoid(x)."""
    from mlts.convert.ops.transformer import emit_hard_swish, hard_swish_of

    mul = hard_swish_of(ctx, node)
    if mul is not None:
        emit_hard_swish(ctx, node, mul)
        return
    a = attrs(node)
    none = ctx.i32(FusedActivationFunc.NONE)
    x = node.input[0]
    steps = [
        (OperationType.MUL, float(a.get("alpha", 0.2)), [none]),
        (OperationType.ADD, float(a.get("beta", 0.5)), [none]),
        (OperationType.MINIMUM, 1.0, []),
        (OperationType.MAXIMUM, 0.0, []),
    ]
    for i, (op, value, extra) in enumerate(steps):
        c = ctx.unique(f"{node.output[0]}/c{i}")
        ctx.consts[c] = np.array([value], np.float32)
        target = node.output[0] if i == len(steps) - 1 else ctx.unique(f"{node.output[0]}/{i}")
        broadcast_binary(ctx, node, op, [x, c], target, extra=extra)
        x = target


@register("Expand", 8)
def expand(ctx: Context, node: NodeProto) -> None:
    """The input broadcast to the output shape (ONNX's shape input broadcasts too)."""
    expanded(ctx, node, node.input[0], ctx.shape_of(node.output[0], node), node.output[0])


@register("Sum", 6)
def sum_6(ctx: Context, node: NodeProto) -> None:
    """ADD of every input, pairwise from the first (broadcasting from opset 8), as ONNX accumulates."""
    names = [n for n in node.input if n]
    if len(names) == 1:
        ctx.alias(node.output[0], names[0])
        ctx.counts["dropped_identity"] += 1
        return
    acc = names[0]
    for i, n in enumerate(names[1:], start=1):
        target = node.output[0] if i == len(names) - 1 else ctx.unique(f"{node.output[0]}/{i}")
        broadcast_binary(
            ctx, node, OperationType.ADD, [acc, n], target, extra=[ctx.i32(FusedActivationFunc.NONE)]
        )
        acc = target
