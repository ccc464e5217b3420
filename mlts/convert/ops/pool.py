"""AveragePool, MaxPool, GlobalAveragePool, GlobalMaxPool -> AVERAGE_POOL_2D / MAX_POOL_2D / MEAN on NHWC.

NNAPI pooling never counts padding and has no ceil mode: ceil_mode=1 becomes
extra padding at the end, and count_include_pad=1 becomes an explicit
zero PAD followed by a pool without padding.

On quantized tensors NNAPI's pools keep the input's parameters: MaxPool
output inherits them, an AveragePool output must be quantized with them;
GlobalAveragePool (MEAN) requantizes to its QuantizeLinear's parameters.
"""

from __future__ import annotations

from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, fuse_activation, ints_attr, require_rank, spatial_padding
from mlts.convert.qflow import ANY, EXACT, SAME, out_quant
from mlts.convert.quant import QParams
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperationType


def _ceil_extra(node: NodeProto, size: int, begin: int, end: int, k: int, s: int, out: int) -> int:
    """Padding to add at the end so that NNAPI's floor formula gives the ONNX output size `out`."""
    extra = max(0, (out - 1) * s + k - (size + begin + end))
    got = (size + begin + end + extra - k) // s + 1
    if got != out:
        raise ConversionError(
            f"{where(node)}: output size {out} cannot be reached with kernel {k}, stride {s}, pads ({begin}, {end}) on size {size}"
        )
    return extra


def _pool(
    ctx: Context,
    node: NodeProto,
    op: OperationType,
    *,
    ceil: bool,
    include_pad: bool,
    declared: QParams | None = None,
) -> None:
    a = attrs(node)
    x_shape = ctx.shape_of(node.input[0])
    require_rank(node, x_shape, 4, "input (only 2-D pooling)")
    for extra in node.output[1:]:
        if extra and (ctx.consumers.get(extra) or extra in ctx.graph_outputs):
            raise ConversionError(
                f"{where(node)}: output '{extra}' (Indices) is used; only the pooled values are supported"
            )
    if "kernel_shape" not in a:
        raise ConversionError(f"{where(node)} has no kernel_shape")
    kh, kw = ints_attr(node, a, "kernel_shape", [], 2)
    strides = ints_attr(node, a, "strides", [1, 1], 2)
    dilations = ints_attr(node, a, "dilations", [1, 1], 2)
    if dilations != [1, 1]:
        raise ConversionError(
            f"{where(node)} has dilations {dilations}; pooling supports only dilations [1, 1]"
        )
    if not ceil and a.get("ceil_mode", 0):
        raise ConversionError(
            f"{where(node)} has ceil_mode at opset {ctx.opset}, where the attribute does not exist"
        )
    top, left, bottom, right = spatial_padding(node, a, x_shape[2:], (kh, kw), strides, dilations)
    out_shape = ctx.shape_of(node.output[0], node)
    h, w = x_shape[2], x_shape[3]

    x = ctx.in_layout(node.input[0], True)
    if (
        op == OperationType.AVERAGE_POOL_2D
        and include_pad
        and a.get("count_include_pad", 0)
        and any((top, left, bottom, right))
    ):
        padded_shape = (x_shape[0], x_shape[1], h + top + bottom, w + left + right)
        padded = ctx.temp(padded_shape, nhwc=True, quant=x.quant)  # quantized PAD fills with the zero point
        paddings = ctx.ints([[0, 0], [top, bottom], [left, right], [0, 0]])
        ctx.emit(OperationType.PAD, [x.operand, paddings], [padded.operand])
        x, h, w = padded, padded_shape[2], padded_shape[3]
        top = left = bottom = right = 0
    bottom += _ceil_extra(node, h, top, bottom, kh, strides[0], out_shape[2])
    right += _ceil_extra(node, w, left, right, kw, strides[1], out_shape[3])

    act, out_name = FusedActivationFunc.NONE, node.output[0]
    if declared is None:
        act, out_name = fuse_activation(ctx, node.output[0], quantized=x.quant is not None)
        # A max pool (and a clamp at 0) keeps values on the input's grid; a clamp at 1 or 6 may not.
        exact = op == OperationType.MAX_POOL_2D and act in (
            FusedActivationFunc.NONE,
            FusedActivationFunc.RELU,
        )
        quant = out_quant(ctx, out_name, x.quant, EXACT if exact else SAME)
    else:
        quant = _same(node, x.quant, declared)
    out = ctx.new_tensor(out_name, out_shape, True, quant)
    params = [left, right, top, bottom, strides[1], strides[0], kw, kh, int(act)]
    ctx.emit(op, [x.operand, *(ctx.i32(v) for v in params)], [out.operand])


def average_pool_quantized(ctx: Context, node: NodeProto, declared: QParams) -> None:
    """AVERAGE_POOL_2D with declared output parameters (QOperator), which must be the input's."""
    _pool(ctx, node, OperationType.AVERAGE_POOL_2D, ceil=True, include_pad=True, declared=declared)


@register("AveragePool", 1)
def average_pool_1(ctx: Context, node: NodeProto) -> None:
    """No ceil_mode; count_include_pad from opset 7 (absent means 0)."""
    _pool(ctx, node, OperationType.AVERAGE_POOL_2D, ceil=False, include_pad=True)


@register("AveragePool", 10)
def average_pool_10(ctx: Context, node: NodeProto) -> None:
    """ceil_mode appears (dilations from 19 are accepted only when all 1)."""
    _pool(ctx, node, OperationType.AVERAGE_POOL_2D, ceil=True, include_pad=True)


@register("MaxPool", 1)
def max_pool_1(ctx: Context, node: NodeProto) -> None:
    """No ceil_mode; the optional Indices output (opset 8) must be unused."""
    _pool(ctx, node, OperationType.MAX_POOL_2D, ceil=False, include_pad=False)


@register("MaxPool", 10)
def max_pool_10(ctx: Context, node: NodeProto) -> None:
    """ceil_mode and dilations appear (dilations accepted only when all 1)."""
    _pool(ctx, node, OperationType.MAX_POOL_2D, ceil=True, include_pad=False)


def _same(node: NodeProto, xq: QParams | None, declared: QParams) -> QParams:
    if xq != declared:
        raise ConversionError(
            f"{where(node)}: output quantization ({declared.describe()}) differs from the input's "
            f"({xq.describe() if xq else 'float32'}); NNAPI pooling keeps the input's parameters"
        )
    return declared


def global_mean(ctx: Context, node: NodeProto, axes: tuple[int, ...], quant: QParams | None) -> None:
    """MEAN over the ONNX `axes` (the spatial ones), keeping dims, in whichever layout the input has."""
    x = ctx.tensor(node)
    if x.rank != 4:
        if x.rank < 3 or node.op_type != "GlobalAveragePool":
            require_rank(node, x.shape, 4)
        axes = tuple(range(2, x.rank))
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    out = ctx.new_tensor(node.output[0], out_shape, x.nhwc, quant)
    nn_axes = sorted(x.nn_axis(a) for a in axes)
    ctx.emit(OperationType.MEAN, [x.operand, ctx.ints(nn_axes), ctx.i32(1)], [out.operand])


@register("GlobalAveragePool", 1)
def global_average_pool(ctx: Context, node: NodeProto) -> None:
    """MEAN over H and W, keeping dims, in whichever layout the input already has."""
    xq = ctx.tensor(node).quant
    global_mean(ctx, node, (2, 3), out_quant(ctx, node.output[0], xq, ANY))


@register("GlobalMaxPool", 1)
def global_max_pool(ctx: Context, node: NodeProto) -> None:
    """MAX_POOL_2D with a window of the whole image; REDUCE_MAX over the spatial axes for 1-D and 3-D."""
    x_shape = ctx.shape_of(node.input[0])
    if len(x_shape) in (3, 5):
        x = ctx.tensor(node)
        quant = out_quant(ctx, node.output[0], x.quant, EXACT)
        axes = list(range(2, x.rank))
        out = ctx.new_tensor(node.output[0], x_shape[:2] + (1,) * len(axes), x.nhwc, quant)
        nn_axes = sorted(x.nn_axis(a) for a in axes)
        ctx.emit(OperationType.REDUCE_MAX, [x.operand, ctx.ints(nn_axes), ctx.flag(True)], [out.operand])
        return
    require_rank(node, x_shape, 4)
    x = ctx.in_layout(node.input[0], True)
    quant = out_quant(ctx, node.output[0], x.quant, EXACT)
    out = ctx.new_tensor(node.output[0], (x_shape[0], x_shape[1], 1, 1), True, quant)
    params = [0, 0, 0, 0, 1, 1, x_shape[3], x_shape[2], int(FusedActivationFunc.NONE)]
    ctx.emit(OperationType.MAX_POOL_2D, [x.operand, *(ctx.i32(v) for v in params)], [out.operand])
