"""Conv -> CONV_2D or DEPTHWISE_CONV_2D (explicit padding, NHWC), folding a following BatchNormalization and activation.

A Conv whose input is quantized becomes the quantized NN op: 8-bit filter
and int32 bias from the DequantizeLinear constants (see _qweights), output
parameters from the QuantizeLinear after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import (
    attrs,
    foldable_batchnorm,
    fuse_activation,
    ints_attr,
    refuse_batchnorm,
    require_rank,
    spatial_padding,
)
from mlts.convert.ops._qweights import bias_operand, filter_operand
from mlts.convert.qflow import ANY, out_quant
from mlts.convert.quant import QConst, QParams
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperationType


@dataclass(frozen=True, slots=True)
class ConvShape:
    """What the NN op needs besides operands: kind, channels, strides, dilations, padding, output shape."""

    depthwise: bool
    groups: int  # > 1 only for a grouped (not depthwise) convolution: GROUPED_CONV_2D
    cout: int
    cin: int
    strides: list[int]
    dilations: list[int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    out_shape: tuple[int, ...]


def conv_shape(
    ctx: Context,
    node: NodeProto,
    a: dict[str, Any],
    w_shape: Sequence[int],
    grouped: bool = False,
    shapes: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> ConvShape:
    """Check the input against the ONNX weight shape [Cout, Cin/group, KH, KW] and read the geometry.

    With `grouped`, any valid group count is taken (GROUPED_CONV_2D, which has no dilation);
    otherwise only group 1 and depthwise. `shapes`: the (input, output) shapes when they are not the
    node's own (a 1-D convolution computed as a 2-D one).
    """
    x_shape = ctx.shape_of(node.input[0]) if shapes is None else shapes[0]
    require_rank(node, x_shape, 4, "input (only 2-D convolution)")
    if len(w_shape) != 4:
        raise ConversionError(
            f"{where(node)}: weight has shape {list(w_shape)}; expected rank 4 [Cout, Cin/group, KH, KW]"
        )
    cout, cin_per_group, kh, kw = w_shape
    cin = x_shape[1]
    group = int(a.get("group", 1))
    depthwise = group != 1 and group == cin and cin_per_group == 1 and cout % cin == 0
    grouped_ok = grouped and cin % group == 0 and cout % group == 0 and cin_per_group * group == cin
    if group != 1 and not depthwise and not grouped_ok:
        raise ConversionError(
            f"{where(node)} has group={group} with {cin} input and {cout} output channels; "
            f"only group=1 or depthwise (group == input channels, output channels a multiple of it) is supported"
        )
    if not depthwise and cin_per_group * group != cin:
        raise ConversionError(
            f"{where(node)}: weight expects {cin_per_group} input channels, input has {cin}"
        )
    strides = ints_attr(node, a, "strides", [1, 1], 2)
    dilations = ints_attr(node, a, "dilations", [1, 1], 2)
    pads = spatial_padding(node, a, x_shape[2:], (kh, kw), strides, dilations)
    out_shape = ctx.shape_of(node.output[0], node) if shapes is None else shapes[1]
    groups = group if group > 1 and not depthwise else 1
    if groups > 1 and dilations != [1, 1]:
        raise ConversionError(
            f"{where(node)} is a grouped convolution (group={group}) with dilations {dilations}; "
            f"NNAPI's GROUPED_CONV_2D has no dilation"
        )
    return ConvShape(depthwise, groups, cout, cin, strides, dilations, pads, out_shape)


def emit_conv(
    ctx: Context,
    g: ConvShape,
    x_name: str,
    filt: int,
    bias: int,
    out_name: str,
    act: FusedActivationFunc,
    quant: QParams | None,
) -> None:
    """CONV_2D / DEPTHWISE_CONV_2D (explicit padding, NHWC) from `x_name` to a new tensor `out_name`."""
    x = ctx.in_layout(x_name, True)
    out = ctx.new_tensor(out_name, g.out_shape, True, quant)
    top, left, bottom, right = g.pads
    pads = [ctx.i32(v) for v in (left, right, top, bottom, g.strides[1], g.strides[0])]
    dil = [ctx.i32(g.dilations[1]), ctx.i32(g.dilations[0])]
    if g.groups > 1:
        ins = [x.operand, filt, bias, *pads, ctx.i32(g.groups), ctx.i32(act), ctx.flag(False)]
        ctx.emit(OperationType.GROUPED_CONV_2D, ins, [out.operand])
    elif g.depthwise:
        multiplier = ctx.i32(g.cout // g.cin)
        ins = [x.operand, filt, bias, *pads, multiplier, ctx.i32(act), ctx.flag(False), *dil]
        ctx.emit(OperationType.DEPTHWISE_CONV_2D, ins, [out.operand])
    else:
        ins = [x.operand, filt, bias, *pads, ctx.i32(act), ctx.flag(False), *dil]
        ctx.emit(OperationType.CONV_2D, ins, [out.operand])


def _attrs_2d(node: NodeProto, a: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a 1-D Conv for the same convolution over [N, C, 1, L]: a height-1 kernel."""
    out = dict(a)
    for key, default in (("strides", 1), ("dilations", 1)):
        values = list(a.get(key, [default]))
        if len(values) != 1:
            raise ConversionError(f"{where(node)} has {key} {values}; a 1-D convolution takes one value")
        out[key] = [1, values[0]]
    if "kernel_shape" in a:
        out["kernel_shape"] = [1, *a["kernel_shape"]]
    if "pads" in a:
        pads = list(a["pads"])
        if len(pads) != 2:
            raise ConversionError(f"{where(node)} has pads {pads}; a 1-D convolution takes [begin, end]")
        out["pads"] = [0, pads[0], 0, pads[1]]
    return out


def _conv_1d(ctx: Context, node: NodeProto) -> None:
    """A 1-D convolution ([N, C, L] input, [M, C/group, K] weight) as the 2-D one over [N, C, 1, L]."""
    if ctx.quantized(node.input[0]) or node.input[1] in ctx.qconsts:
        raise ConversionError(
            f"{where(node)}: a 1-D convolution is converted with float input and weights only"
        )
    n, c, length = ctx.shape_of(node.input[0])
    w_shape = ctx.shape_of(node.input[1])
    if len(w_shape) != 3:
        raise ConversionError(
            f"{where(node)}: weight has shape {list(w_shape)}; expected [Cout, Cin/group, K]"
        )
    out_shape = ctx.shape_of(node.output[0], node)
    x4 = ctx.unique(node.input[0] + "/as_2d")
    ctx.reshaped(node.input[0], (n, c, 1, length), x4)
    shapes = ((n, c, 1, length), (out_shape[0], out_shape[1], 1, out_shape[2]))
    w4_shape = (w_shape[0], w_shape[1], 1, w_shape[2])
    g = conv_shape(ctx, node, _attrs_2d(node, attrs(node)), w4_shape, True, shapes)
    if node.input[1] in ctx.tensors:
        w4 = ctx.unique(node.input[1] + "/as_2d")
        ctx.reshaped(node.input[1], w4_shape, w4)
        out4 = ctx.unique(node.output[0] + "/as_2d")
        _conv_runtime_weights(ctx, node, g, w4, x4, out4)
        ctx.reshaped(out4, out_shape, node.output[0])
        return
    w = np.asarray(ctx.const_input(node, 1, "weight"), dtype=np.float64)
    _float_conv(ctx, node, g, w[:, :, None, :], x4, rank=3)


@register("Conv", 1)
def conv(ctx: Context, node: NodeProto) -> None:
    """2-D convolution: CONV_2D (group 1), DEPTHWISE_CONV_2D, or GROUPED_CONV_2D (other groups); a 1-D
    convolution as the 2-D one of height 1."""
    if len(ctx.shape_of(node.input[0])) == 3:
        _conv_1d(ctx, node)
        return
    if ctx.quantized(node.input[0]):
        qw = ctx.qconst_input(node, 1, "weight")
        assert qw is not None
        conv_quantized(ctx, node, qw, ctx.qconst_input(node, 2, "bias", required=False))
        return
    if node.input[1] in ctx.tensors:
        g = conv_shape(ctx, node, attrs(node), ctx.shape_of(node.input[1]), grouped=True)
        _conv_runtime_weights(ctx, node, g, node.input[1], node.input[0], None)
        return
    w = np.asarray(ctx.const_input(node, 1, "weight"), dtype=np.float64)
    g = conv_shape(ctx, node, attrs(node), w.shape, grouped=True)
    _float_conv(ctx, node, g, w, node.input[0])


def _float_conv(
    ctx: Context, node: NodeProto, g: ConvShape, w: np.ndarray, x_name: str, rank: int = 4
) -> None:
    """The float convolution of `x_name` with constant 4-D weights `w`, folding a BatchNormalization and a
    Relu/Clip after it; `rank` 3: the ONNX output is the result without its height axis (a 1-D Conv)."""
    b = ctx.const_input(node, 2, "bias", required=False)
    bias = np.zeros(g.cout) if b is None else np.asarray(b, dtype=np.float64).reshape(-1)

    out_name = node.output[0]
    bn = foldable_batchnorm(ctx, out_name, g.cout)
    if bn is not None:
        bn_node, scale, shift = bn
        w = w * scale[:, None, None, None]
        bias = bias * scale + shift
        ctx.absorb(bn_node, "bn_into_conv")
        out_name = bn_node.output[0]
    act, out_name = fuse_activation(ctx, out_name)
    # NN filter layouts: [1, KH, KW, Cout] (depthwise) or [Cout, KH, KW, Cin/groups].
    filt = ctx.const_operand(w.transpose(1, 2, 3, 0) if g.depthwise else w.transpose(0, 2, 3, 1))
    if rank == 4:
        emit_conv(ctx, g, x_name, filt, ctx.const_operand(bias), out_name, act, None)
        return
    out4 = ctx.unique(out_name + "/as_2d")
    emit_conv(ctx, g, x_name, filt, ctx.const_operand(bias), out4, act, None)
    n, m, _, length = g.out_shape
    ctx.reshaped(out4, (n, m, length), out_name)


def conv_quantized(
    ctx: Context, node: NodeProto, w: QConst, b: QConst | None, out_q: QParams | None = None
) -> None:
    """The quantized op; `out_q` None (QDQ) takes the output parameters from the QuantizeLinear after it."""
    g = conv_shape(ctx, node, attrs(node), w.values.shape)
    xq = ctx.tensor(node).quant
    assert xq is not None
    out_name, act = node.output[0], FusedActivationFunc.NONE
    if out_q is None:
        refuse_batchnorm(ctx, node, out_name)
        act, out_name = fuse_activation(ctx, out_name, quantized=True)
        out_q = out_quant(ctx, out_name, xq, ANY)
    perm, channel_dim = ((1, 2, 3, 0), 3) if g.depthwise else ((0, 2, 3, 1), 0)
    filt = filter_operand(ctx, node, xq, w, 0, perm, channel_dim)
    bias = bias_operand(ctx, node, xq, filt, b)
    emit_conv(ctx, g, node.input[0], filt.operand, bias, out_name, act, out_q)


def _conv_runtime_weights(
    ctx: Context, node: NodeProto, g: ConvShape, w_name: str, x_name: str, out_name: str | None
) -> None:
    """Weights (and bias) given at run time: the filter is the weight tensor `w_name` moved to NHWC order.

    Depthwise convolutions become GROUPED_CONV_2D, whose filter has that same layout. `out_name` None:
    the node's output (a Relu/Clip after it fused); else the result's name (no fusion).
    """
    if g.depthwise:
        if g.dilations != [1, 1]:
            raise ConversionError(
                f"{where(node)} is a depthwise convolution with dilations {g.dilations} and weights given at run "
                f"time; only constant weights can be dilated (GROUPED_CONV_2D has no dilation)"
            )
        g = ConvShape(False, g.cin, g.cout, g.cin, g.strides, g.dilations, g.pads, g.out_shape)
    filt = ctx.in_layout(w_name, True).operand
    b = ctx.input(node, 2)
    if b is None:
        bias = ctx.const_operand(np.zeros(g.cout, np.float32))
    elif b in ctx.tensors:
        bias = ctx.tensors[b].operand
    else:
        bias = ctx.const_operand(np.asarray(ctx.consts[b]).reshape(-1))
    act = FusedActivationFunc.NONE
    if out_name is None:
        act, out_name = fuse_activation(ctx, node.output[0])
    emit_conv(ctx, g, x_name, filt, bias, out_name, act, None)
