"""Gemm and MatMul with a constant 2-D B -> FULLY_CONNECTED (weights [units, in], bias [units]).

A following BatchNormalization, Add of a constant vector and Relu/Clip are
folded in when each is the only reader of the previous result. With a
quantized input the weights and bias are the DequantizeLinear constants (see
_qweights) and only a Relu/Clip is folded: rescaling them is not exact.
NNAPI's FULLY_CONNECTED has no per-channel weights: those become a 1x1
CONV_2D on the input reshaped to [rows, 1, 1, in], the same arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, foldable_batchnorm, fuse_activation, refuse_batchnorm
from mlts.convert.ops._qweights import bias_operand, filter_operand
from mlts.convert.ops.elementwise import emit_with_const
from mlts.convert.qflow import ANY, out_quant
from mlts.convert.quant import QConst, QParams
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperationType


def _bias_of_add(ctx: Context, name: str, units: int) -> tuple[NodeProto, np.ndarray] | None:
    """An Add of a constant that broadcasts as a per-unit bias, when it alone reads `name`."""
    add = ctx.sole_consumer(name, {"Add"})
    if add is None:
        return None
    other = add.input[1] if add.input[0] == name else add.input[0]
    c = ctx.const(other)
    if c is None or not np.issubdtype(c.dtype, np.floating) or c.size not in (1, units):
        return None
    if c.size == units and (c.ndim == 0 or c.shape[-1] != units or c.ndim > len(ctx.shape_of(name))):
        return None
    return add, np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (units,))


def emit_fully_connected(
    ctx: Context, node: NodeProto, weights: np.ndarray, bias: np.ndarray, extra_add: np.ndarray | None = None
) -> None:
    """FULLY_CONNECTED on input 0 flattened to 2-D over its last axis, with the folds, reshaped back."""
    units, k = weights.shape
    x_shape = ctx.shape_of(node.input[0])
    if x_shape[-1] != k:
        raise ConversionError(
            f"{where(node)}: input shape {list(x_shape)} does not match weights for {k} inputs"
        )
    out_name = node.output[0]
    out_shape = tuple(x_shape[:-1]) + (units,)
    act = FusedActivationFunc.NONE
    if extra_add is None:
        bn = foldable_batchnorm(ctx, out_name, units) if len(out_shape) == 2 else None
        if bn is not None:
            bn_node, scale, shift = bn
            weights, bias = weights * scale[:, None], bias * scale + shift
            ctx.absorb(bn_node, "bn_into_gemm")
            out_name = bn_node.output[0]
        add = _bias_of_add(ctx, out_name, units)
        if add is not None and ctx.shape_of(add[0].output[0], add[0]) == out_shape:
            add_node, extra = add
            bias = bias + extra
            ctx.absorb(add_node, "bias_into_fc")
            out_name = add_node.output[0]
        act, out_name = fuse_activation(ctx, out_name)
    weights_op, bias_op = ctx.const_operand(weights), ctx.const_operand(bias)
    _emit(ctx, node, (weights_op, bias_op, units), out_name, act, None, extra_add)


def _emit(
    ctx: Context,
    node: NodeProto,
    params: tuple[int, int, int],
    out_name: str,
    act: FusedActivationFunc,
    quant: QParams | None,
    extra_add: np.ndarray | None = None,
    as_conv: bool = False,
) -> None:
    """FULLY_CONNECTED with (weights, bias, units) on input 0 flattened to 2-D, then the shape restored.

    `as_conv`: a 1x1 CONV_2D instead, whose filter is [units, 1, 1, in].
    """
    weights, bias, units = params
    x_shape = ctx.shape_of(node.input[0])
    k = x_shape[-1]
    out_shape = tuple(x_shape[:-1]) + (units,)
    rows = math.prod(x_shape[:-1])
    if as_conv:
        result = _conv_1x1(ctx, node, (weights, bias, units), rows, k, act, quant)
    else:
        x = (
            ctx.in_layout(node.input[0], False)
            if len(x_shape) == 2
            else ctx.reshaped(node.input[0], (rows, k))
        )
        result = ctx.temp((rows, units), quant=quant)
        ctx.emit(OperationType.FULLY_CONNECTED, [x.operand, weights, bias, ctx.i32(act)], [result.operand])
    if extra_add is not None:
        plus_c = ctx.unique(out_name + "/plus_c")
        emit_with_const(ctx, OperationType.ADD, result, extra_add, plus_c)
        result = ctx.tensors[plus_c]
    if out_shape == result.shape:
        ctx.bind(out_name, result)
    else:
        flat = ctx.unique(out_name + "/2d")
        ctx.bind(flat, result)
        ctx.reshaped(flat, out_shape, out_name)


def _conv_1x1(
    ctx: Context,
    node: NodeProto,
    params: tuple[int, int, int],
    rows: int,
    k: int,
    act: FusedActivationFunc,
    quant: QParams | None,
) -> Tensor:
    """CONV_2D of input 0 as NHWC [rows, 1, 1, k] with a [units, 1, 1, k] filter (result NHWC [rows, 1, 1, units])."""
    weights, bias, units = params
    x = ctx.reshaped(node.input[0], (rows, k, 1, 1))  # ONNX order; its NHWC operand is [rows, 1, 1, k]
    y = ctx.temp((rows, units, 1, 1), nhwc=True, quant=quant)
    geometry = [ctx.i32(v) for v in (0, 0, 0, 0, 1, 1)]
    ins = [x.operand, weights, bias, *geometry, ctx.i32(act), ctx.flag(False), ctx.i32(1), ctx.i32(1)]
    ctx.emit(OperationType.CONV_2D, ins, [y.operand])
    ctx.counts["fc_as_conv"] += 1
    return y


def fc_quantized(
    ctx: Context, node: NodeProto, w: QConst, out_axis: int, b: QConst | None, out_q: QParams | None = None
) -> None:
    """Quantized FULLY_CONNECTED; `w` is 2-D with the units on `out_axis`; `out_q` None: from QuantizeLinear."""
    if w.values.ndim != 2:
        raise ConversionError(f"{where(node)}: weights have shape {list(w.values.shape)}; expected rank 2")
    xq = ctx.tensor(node).quant
    assert xq is not None
    units, k = w.values.shape[out_axis], w.values.shape[1 - out_axis]
    x_shape = ctx.shape_of(node.input[0])
    if x_shape[-1] != k:
        raise ConversionError(
            f"{where(node)}: input shape {list(x_shape)} does not match weights for {k} inputs"
        )
    out_name, act = node.output[0], FusedActivationFunc.NONE
    if out_q is None:
        if len(x_shape) == 2:
            refuse_batchnorm(ctx, node, out_name)
        act, out_name = fuse_activation(ctx, out_name, quantized=True)
        out_q = out_quant(ctx, out_name, xq, ANY)
    perm = (0, 1) if out_axis == 0 else (1, 0)
    filt = filter_operand(ctx, node, xq, w, out_axis, perm, 0, (units, 1, 1, k))
    bias = bias_operand(ctx, node, xq, filt, b)
    _emit(ctx, node, (filt.operand, bias, units), out_name, act, out_q, as_conv=filt.per_channel)


def _gemm_quantized(ctx: Context, node: NodeProto, a: dict) -> None:
    for key in ("alpha", "beta"):
        if float(a.get(key, 1.0)) != 1.0:
            raise ConversionError(f"{where(node)} has {key}={a[key]}; a quantized Gemm supports only {key}=1")
    w = ctx.qconst_input(node, 1, "B (weights)")
    assert w is not None
    b = ctx.qconst_input(node, 2, "C (bias)", required=False)
    fc_quantized(ctx, node, w, 0 if a.get("transB", 0) else 1, b)


@register("Gemm", 7)
def gemm(ctx: Context, node: NodeProto) -> None:
    """alpha*A*B' + beta*C with A at run time (transA=0), B and C constant."""
    a = attrs(node)
    if a.get("transA", 0):
        raise ConversionError(f"{where(node)} has transA=1; only transA=0 is supported")
    if ctx.is_const(node.input[0]) or len(ctx.shape_of(node.input[0])) != 2:
        raise ConversionError(f"{where(node)}: input A must be a rank-2 runtime tensor")
    if ctx.quantized(node.input[0]):
        _gemm_quantized(ctx, node, a)
        return
    b = np.asarray(ctx.const_input(node, 1, "B (weights)"), dtype=np.float64)
    if b.ndim != 2:
        raise ConversionError(f"{where(node)}: B has shape {list(b.shape)}; expected rank 2")
    weights = (b if a.get("transB", 0) else b.T) * float(a.get("alpha", 1.0))
    units = weights.shape[0]
    c = ctx.const_input(node, 2, "C (bias)", required=False)
    bias = np.zeros(units)
    extra = None
    if c is not None:
        c = np.asarray(c, dtype=np.float64) * float(a.get("beta", 1.0))
        if c.size == 1:
            bias = np.full(units, c.reshape(-1)[0])
        elif c.ndim >= 1 and c.shape[-1] == units and c.size == units:
            bias = c.reshape(-1)
        else:
            # C varies along rows: it cannot be a per-unit bias, add it after.
            extra = c.astype(np.float32)
    emit_fully_connected(ctx, node, weights, bias, extra)


def _batch_operand(ctx: Context, name: str, batch: tuple[int, ...], rows: int, cols: int) -> Tensor:
    """Input `name` (float, ONNX order) as [prod(batch), rows, cols]: broadcast over `batch` by TILE."""
    t = ctx.in_layout(name, False)
    if not t.is_float:
        raise ConversionError(
            f"{where(ctx.node) if ctx.node else 'MatMul'}: input '{name}' is "
            f"{'quantized' if t.quant is not None else t.elem.name}; a MatMul of two run-time tensors is "
            f"converted for float tensors"
        )
    own = (1,) * (len(batch) - (t.rank - 2)) + tuple(t.shape[:-2]) if t.rank >= 2 else (1,) * len(batch)
    if own != batch:
        wide = ctx.reshaped(name, own + (rows, cols))
        if wide.nhwc:  # TILE's multiples are in ONNX axis order
            wide = ctx.relayout(wide, False)
        reps = [b // o for b, o in zip(batch, own, strict=True)] + [1, 1]
        tiled = ctx.temp(batch + (rows, cols), elem=t.elem)
        ctx.emit(OperationType.TILE, [wide.operand, ctx.ints(reps)], [tiled.operand])
        name = ctx.unique(name + "/tiled")
        ctx.bind(name, tiled)
    return ctx.reshaped(name, (math.prod(batch), rows, cols))


def matmul_runtime(ctx: Context, node: NodeProto) -> None:
    """MatMul where B is computed (or A constant): HAL 1.3 has no BATCH_MATMUL, and FULLY_CONNECTED
    takes run-time weights. Per matrix of the (broadcast) batch: FULLY_CONNECTED(A_i, B_i^T, 0), with
    B^T from one TRANSPOSE, the matrices cut apart by SPLIT and joined by CONCATENATION."""
    a_shape, b_shape = ctx.shape_of(node.input[0]), ctx.shape_of(node.input[1])
    if not a_shape or not b_shape:
        raise ConversionError(f"{where(node)}: MatMul inputs need rank >= 1")
    m, k = (1, a_shape[0]) if len(a_shape) == 1 else a_shape[-2:]
    k2, n = (b_shape[0], 1) if len(b_shape) == 1 else b_shape[-2:]
    if k != k2:
        raise ConversionError(f"{where(node)}: shapes {list(a_shape)} and {list(b_shape)} do not multiply")
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])))
    except ValueError:
        raise ConversionError(
            f"{where(node)}: batch dims of {list(a_shape)} and {list(b_shape)} do not broadcast"
        ) from None
    out_shape = ctx.shape_of(node.output[0], node)
    if len(batch) + 2 > 4:
        raise ConversionError(
            f"{where(node)}: the product has batch dims {list(batch)}; NNAPI tensors have rank <= 4"
        )
    a = _batch_operand(ctx, node.input[0], batch, m, k)
    b = _batch_operand(ctx, node.input[1], batch, k, n)
    count = math.prod(batch)
    bt = ctx.temp((count, n, k), elem=b.elem)
    ctx.emit(OperationType.TRANSPOSE, [b.operand, ctx.ints([0, 2, 1])], [bt.operand])
    if count == 1:
        a_parts, b_parts = [a], [bt]
    else:
        a_parts = [ctx.temp((1, m, k), elem=a.elem) for _ in range(count)]
        b_parts = [ctx.temp((1, n, k), elem=b.elem) for _ in range(count)]
        for src, parts in ((a, a_parts), (bt, b_parts)):
            ctx.emit(
                OperationType.SPLIT, [src.operand, ctx.i32(0), ctx.i32(count)], [p.operand for p in parts]
            )
    zeros = ctx.const_operand(np.zeros(n, np.float32))
    products = []
    for a_i, b_i in zip(a_parts, b_parts, strict=True):
        w = ctx.temp((n, k), elem=b.elem)
        ctx.emit(OperationType.RESHAPE, [b_i.operand, ctx.ints([n, k])], [w.operand])
        y = ctx.temp((m, n), elem=a.elem)
        ctx.emit(OperationType.FULLY_CONNECTED, [a_i.operand, w.operand, zeros, ctx.i32(0)], [y.operand])
        products.append(y)
    if count == 1:
        result = products[0]
    else:
        result = ctx.temp((count * m, n), elem=a.elem)
        ctx.emit(OperationType.CONCATENATION, [*(p.operand for p in products), ctx.i32(0)], [result.operand])
    flat = ctx.unique(node.output[0] + "/2d")
    ctx.bind(flat, result)
    ctx.reshaped(flat, out_shape, node.output[0])


@register("MatMul", 1)
def matmul(ctx: Context, node: NodeProto) -> None:
    """A (run time, rank >= 2) times constant 2-D B: FULLY_CONNECTED; otherwise see matmul_runtime."""
    b_const = ctx.const(node.input[1])
    if (
        (
            ctx.is_const(node.input[0])
            or node.input[1] in ctx.tensors
            or (b_const is not None and b_const.ndim != 2)
            or len(ctx.shape_of(node.input[0])) < 2
        )
        and not ctx.quantized(node.input[0])
        and node.input[1] not in ctx.qconsts
    ):
        matmul_runtime(ctx, node)
        return
    if len(ctx.shape_of(node.input[0])) < 2:
        raise ConversionError(f"{where(node)}: input A must have rank >= 2")
    if ctx.quantized(node.input[0]):
        w = ctx.qconst_input(node, 1, "B (weights)")
        assert w is not None
        fc_quantized(ctx, node, w, 1, None)
        return
    if node.input[1] in ctx.qconsts:
        ctx.const_input(node, 1, "B (weights)")  # raises: quantized weights, float input
    b = ctx.const(node.input[1])
    if b is None or b.ndim != 2:
        got = "computed at run time" if b is None else f"of shape {list(b.shape)}"
        raise ConversionError(f"{where(node)}: input B is {got}; only a constant 2-D B is supported")
    b = np.asarray(b, dtype=np.float64)
    emit_fully_connected(ctx, node, b.T, np.zeros(b.shape[1]))
