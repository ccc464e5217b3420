"""Gather, ArgMax/ArgMin, TopK, Tile and Cast on tensors held in ONNX order.

- Gather -> GATHER; negative indices (ONNX allows them, NNAPI does not) are
  wrapped at conversion time for constant indices and by LESS/ADD/SELECT for
  run-time ones. A scalar index drops the axis (a RESHAPE after).
- ArgMax/ArgMin -> ARGMAX/ARGMIN (the first index on ties, ONNX's default);
  keepdims=1 adds a RESHAPE; select_last_index=1 has no NNAPI equivalent.
- TopK -> TOPK_V2 on the last axis (other axes through TRANSPOSE; the int32
  indices through float32, exact for axes below 2^24 elements). NNAPI puts
  the larger index first among equal values and ONNX the smaller, so the input
  is reversed along the axis by a GATHER first and the indices mapped back
  (n - 1 - i, by a GATHER from a table); largest=0 takes the top k of -x. sorted=0 lets any order do:
  the sorted one is given.
- Tile -> TILE with constant repeats.
- Cast between float32, float16 and int32 (int64 is held as int32) -> CAST
  (float to int truncates toward zero, as ONNX); to bool -> NOT_EQUAL 0; from
  bool -> SELECT of 1 and 0.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto

from mlts.convert.context import FLOAT_TYPES, Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.ops._typed import NUMPY_OF
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperandType, OperationType

INT = OperandType.TENSOR_INT32
BOOL = OperandType.TENSOR_BOOL8


def _onnx_order(ctx: Context, node: NodeProto, index: int = 0) -> Tensor:
    name = ctx.input(node, index)
    if name is None:
        raise ConversionError(f"{where(node)} has no input {index}")
    if name not in ctx.tensors and name not in ctx.consts and name not in ctx.qconsts:
        raise ConversionError(f"{where(node)}: input '{name}' is not produced by any converted node")
    return ctx.in_layout(name, False)


def _int_const(ctx: Context, node: NodeProto, index: int, what: str) -> np.ndarray:
    value = ctx.const_input(node, index, what)
    assert value is not None
    return np.asarray(value).astype(np.int64).reshape(-1)


@register("Gather", 1)
def gather(ctx: Context, node: NodeProto) -> None:
    """GATHER along `axis`; negative indices wrapped."""
    x = _onnx_order(ctx, node)
    axis = norm_axis(node, int(attrs(node).get("axis", 0)), x.rank)
    dim = x.shape[axis]
    out_shape = ctx.shape_of(node.output[0], node)
    idx_name = node.input[1]
    if idx_name in ctx.consts:
        idx = np.asarray(ctx.consts[idx_name]).astype(np.int64)
        if idx.size and (idx.min() < -dim or idx.max() >= dim):
            raise ConversionError(
                f"{where(node)}: indices {idx.min()}..{idx.max()} are out of range for axis {axis} of size {dim}"
            )
        idx = np.where(idx < 0, idx + dim, idx).astype(np.int32)
        scalar = idx.ndim == 0
        indices = ctx.builder.add_constant(idx.reshape(-1) if scalar else idx, INT)
    else:
        it = ctx.in_layout(idx_name, False)
        if it.elem != INT or it.quant is not None:
            raise ConversionError(
                f"{where(node)}: indices '{idx_name}' are {it.elem.name}; GATHER takes int32"
            )
        scalar = False
        zero = ctx.builder.add_constant(np.zeros(1, np.int32), INT)
        neg = ctx.temp(it.shape, False, None, BOOL)
        ctx.emit(OperationType.LESS, [it.operand, zero], [neg.operand])
        wrapped = ctx.temp(it.shape, False, None, INT)
        none = ctx.i32(FusedActivationFunc.NONE)
        dim_c = ctx.builder.add_constant(np.array([dim], np.int32), INT)
        ctx.emit(OperationType.ADD, [it.operand, dim_c, none], [wrapped.operand])
        fixed = ctx.temp(it.shape, False, None, INT)
        ctx.emit(OperationType.SELECT, [neg.operand, wrapped.operand, it.operand], [fixed.operand])
        indices = fixed.operand
    if scalar:
        mid = ctx.temp(x.shape[:axis] + (1,) + x.shape[axis + 1 :], False, x.quant, x.elem)
        ctx.emit(OperationType.GATHER, [x.operand, ctx.i32(axis), indices], [mid.operand])
        out = ctx.new_tensor(node.output[0], out_shape, False, x.quant, x.elem)
        ctx.emit(OperationType.RESHAPE, [mid.operand, ctx.ints(out_shape)], [out.operand])
        return
    out = ctx.new_tensor(node.output[0], out_shape, False, x.quant, x.elem)
    ctx.emit(OperationType.GATHER, [x.operand, ctx.i32(axis), indices], [out.operand])


def _arg(ctx: Context, node: NodeProto, op: OperationType) -> None:
    a = attrs(node)
    if a.get("select_last_index", 0):
        raise ConversionError(
            f"{where(node)} has select_last_index=1; NNAPI's {op.name} returns the first index of equal values"
        )
    x = _onnx_order(ctx, node)
    if x.elem == BOOL:
        raise ConversionError(
            f"{where(node)}: input is bool; {op.name} takes float, int32 and quant8 tensors"
        )
    axis = norm_axis(node, int(a.get("axis", 0)), x.rank)
    reduced = x.shape[:axis] + x.shape[axis + 1 :]
    if not reduced:
        reduced = (1,)
    keep = bool(a.get("keepdims", 1))
    out_shape = ctx.shape_of(node.output[0], node)
    if keep and x.rank > 1:
        # EXPAND_DIMS, not RESHAPE: NNAPI 1.3's RESHAPE takes no TENSOR_INT32.
        mid = ctx.temp(reduced, False, None, INT)
        ctx.emit(op, [x.operand, ctx.i32(axis)], [mid.operand])
        out = ctx.new_tensor(node.output[0], out_shape, False, None, INT)
        ctx.emit(OperationType.EXPAND_DIMS, [mid.operand, ctx.i32(axis)], [out.operand])
        return
    if x.rank == 1:
        raise ConversionError(
            f"{where(node)}: the result of a rank-1 input is a scalar; NNAPI tensors have rank >= 1"
            if not keep
            else f"{where(node)}: input has rank 1; NNAPI's {op.name} needs rank >= 2 to keep the axis"
        )
    out = ctx.new_tensor(node.output[0], out_shape, False, None, INT)
    ctx.emit(op, [x.operand, ctx.i32(axis)], [out.operand])


@register("ArgMax", 1)
def argmax(ctx: Context, node: NodeProto) -> None:
    """ARGMAX, keepdims by RESHAPE."""
    _arg(ctx, node, OperationType.ARGMAX)


@register("ArgMin", 1)
def argmin(ctx: Context, node: NodeProto) -> None:
    """ARGMIN, keepdims by RESHAPE."""
    _arg(ctx, node, OperationType.ARGMIN)


def _transpose(ctx: Context, t: Tensor, perm: list[int]) -> Tensor:
    out = ctx.temp(tuple(t.shape[p] for p in perm), False, t.quant, t.elem)
    ctx.emit(OperationType.TRANSPOSE, [t.operand, ctx.ints(perm)], [out.operand])
    return out


def _topk(ctx: Context, node: NodeProto, k: int, axis: int, largest: bool) -> None:
    x = _onnx_order(ctx, node)
    if x.elem == BOOL or x.quant is not None:
        raise ConversionError(
            f"{where(node)}: input is {x.elem.name if x.quant is None else 'quantized'}; "
            f"the converter maps TopK on float and int32 tensors"
        )
    axis = norm_axis(node, axis, x.rank)
    n = x.shape[axis]
    if not 1 <= k <= n:
        raise ConversionError(f"{where(node)}: k={k} is out of range for axis {axis} of size {n}")
    perm = list(range(x.rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    if axis != x.rank - 1:
        x = _transpose(ctx, x, perm)
    # Reverse the axis so that NNAPI's "larger index first" among equal values is ONNX's "smaller first".
    rev = ctx.temp(x.shape, False, None, x.elem)
    ctx.emit(
        OperationType.GATHER,
        [x.operand, ctx.i32(x.rank - 1), ctx.ints(list(range(n - 1, -1, -1)))],
        [rev.operand],
    )
    src = rev
    if not largest:
        src = ctx.temp(x.shape, False, None, x.elem)
        ctx.emit(OperationType.NEG, [rev.operand], [src.operand])
    top_shape = x.shape[:-1] + (k,)
    values = ctx.temp(top_shape, False, None, x.elem)
    rev_idx = ctx.temp(top_shape, False, None, INT)
    ctx.emit(OperationType.TOPK_V2, [src.operand, ctx.i32(k)], [values.operand, rev_idx.operand])
    if not largest:
        neg = ctx.temp(top_shape, False, None, x.elem)
        ctx.emit(OperationType.NEG, [values.operand], [neg.operand])
        values = neg
    # Index i of the reversed axis is n - 1 - i: looked up in a table (GATHER takes int32 tensors).
    idx = ctx.temp(top_shape, False, None, INT)
    table = ctx.ints(list(range(n - 1, -1, -1)))
    ctx.emit(OperationType.GATHER, [table, ctx.i32(0), rev_idx.operand], [idx.operand])
    for name, t in zip(node.output, (values, idx), strict=True):
        if not name:
            continue
        if axis != x.rank - 1:
            t = _transpose_any(ctx, t, perm)
        ctx.bind(name, t)


def _transpose_any(ctx: Context, t: Tensor, perm: list[int]) -> Tensor:
    """TRANSPOSE; an int32 tensor goes through float32 and back (exact below 2^24; TRANSPOSE takes no int32)."""
    if t.elem != INT:
        return _transpose(ctx, t, perm)
    as_float = ctx.temp(t.shape, False, None, OperandType.TENSOR_FLOAT32)
    ctx.emit(OperationType.CAST, [t.operand], [as_float.operand])
    moved = _transpose(ctx, as_float, perm)
    back = ctx.temp(moved.shape, False, None, INT)
    ctx.emit(OperationType.CAST, [moved.operand], [back.operand])
    return back


@register("TopK", 1)
def topk_1(ctx: Context, node: NodeProto) -> None:
    """k attribute, largest values, last axis by default."""
    a = attrs(node)
    _topk(ctx, node, int(a["k"]), int(a.get("axis", -1)), True)


@register("TopK", 10)
def topk_10(ctx: Context, node: NodeProto) -> None:
    """k a constant input."""
    a = attrs(node)
    _topk(ctx, node, int(_int_const(ctx, node, 1, "k")[0]), int(a.get("axis", -1)), True)


@register("TopK", 11)
def topk_11(ctx: Context, node: NodeProto) -> None:
    """largest and sorted attributes (sorted=0 allows the sorted order)."""
    a = attrs(node)
    k = int(_int_const(ctx, node, 1, "k")[0])
    _topk(ctx, node, k, int(a.get("axis", -1)), bool(a.get("largest", 1)))


@register("Tile", 6)
def tile(ctx: Context, node: NodeProto) -> None:
    """TILE with constant repeats."""
    x = _onnx_order(ctx, node)
    reps = _int_const(ctx, node, 1, "repeats")
    if len(reps) != x.rank or (reps < 1).any():
        raise ConversionError(
            f"{where(node)}: repeats {reps.tolist()} must give a positive count for each of the {x.rank} axes"
        )
    if x.elem == BOOL:
        raise ConversionError(f"{where(node)}: input is bool; NNAPI's TILE takes float, int32 and quant8")
    out = ctx.new_tensor(node.output[0], ctx.shape_of(node.output[0], node), False, x.quant, x.elem)
    ctx.emit(OperationType.TILE, [x.operand, ctx.ints(reps.tolist())], [out.operand])


_CAST_TARGETS: dict[int, OperandType] = {
    TensorProto.FLOAT: OperandType.TENSOR_FLOAT32,
    TensorProto.FLOAT16: OperandType.TENSOR_FLOAT16,
    TensorProto.INT32: INT,
    TensorProto.INT64: INT,
    TensorProto.BOOL: BOOL,
}


_ONNX_OF = {
    OperandType.TENSOR_FLOAT32: TensorProto.FLOAT,
    OperandType.TENSOR_FLOAT16: TensorProto.FLOAT16,
    INT: TensorProto.INT32,
    BOOL: TensorProto.BOOL,
}


@register("Cast", 6)
def cast(ctx: Context, node: NodeProto) -> None:
    """CAST between float32, float16 and int32; NOT_EQUAL 0 to bool; SELECT(1, 0) from bool."""
    _cast(ctx, node, int(attrs(node).get("to", 0)))


@register("CastLike", 15)
def cast_like(ctx: Context, node: NodeProto) -> None:
    """Cast to the element type of the second input."""
    like = node.input[1]
    if like in ctx.consts:
        arr = np.asarray(ctx.consts[like])
        to = {
            "f": TensorProto.FLOAT16 if arr.dtype == np.float16 else TensorProto.FLOAT,
            "b": TensorProto.BOOL,
        }.get(arr.dtype.kind, TensorProto.INT32)
        if arr.dtype == np.float64:
            to = TensorProto.DOUBLE
    elif like in ctx.tensors and ctx.tensors[like].quant is None:
        to = _ONNX_OF[ctx.tensors[like].elem]
    else:
        raise ConversionError(f"{where(node)}: the type of '{like}' is not a float, int or bool tensor")
    _cast(ctx, node, to)


def _cast(ctx: Context, node: NodeProto, to: int) -> None:
    target = _CAST_TARGETS.get(to)
    if target is None:
        name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else str(to)
        raise ConversionError(
            f"{where(node)} casts to {name}; NN tensors hold FLOAT, FLOAT16, INT32 (and INT64 as int32) and BOOL"
        )
    src_name = node.input[0]
    x = ctx.tensor(node)
    if target not in FLOAT_TYPES:
        x = ctx.in_layout(src_name, False)  # int32 and bool results stay in ONNX order (see _typed)
    if x.quant is not None:
        raise ConversionError(f"{where(node)}: input '{src_name}' is quantized; casting it is not supported")
    if x.elem == target:
        ctx.alias(node.output[0], src_name)
        ctx.counts["dropped_identity"] += 1
        return
    if target == BOOL:
        zero = ctx.builder.add_constant(np.zeros(1, NUMPY_OF[x.elem]), x.elem)
        out = ctx.new_tensor(node.output[0], x.shape, x.nhwc, None, BOOL)
        ctx.emit(OperationType.NOT_EQUAL, [x.operand, zero], [out.operand])
        return
    if x.elem == BOOL:
        dims = x.nn_shape
        one = ctx.builder.add_constant(np.ones(dims, NUMPY_OF[target]), target)
        zero = ctx.builder.add_constant(np.zeros(dims, NUMPY_OF[target]), target)
        out = ctx.new_tensor(node.output[0], x.shape, x.nhwc, None, target)
        ctx.emit(OperationType.SELECT, [x.operand, one, zero], [out.operand])
        return
    if x.elem not in (*FLOAT_TYPES, INT):
        raise ConversionError(f"{where(node)}: input is {x.elem.name}; CAST takes float and int32 tensors")
    out = ctx.new_tensor(node.output[0], x.shape, x.nhwc, None, target)
    ctx.emit(OperationType.CAST, [x.operand], [out.operand])
