"""Conv -> CONV_2D or DEPTHWISE_CONV_2D (explicit padding, NHWC), folding a following BatchNormalization and activation."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import (
    attrs,
    foldable_batchnorm,
    fuse_activation,
    ints_attr,
    require_rank,
    spatial_padding,
)
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


@register("Conv", 1)
def conv(ctx: Context, node: NodeProto) -> None:
    """2-D convolution; group 1 or depthwise (group == input channels)."""
    a = attrs(node)
    x_shape = ctx.shape_of(node.input[0])
    require_rank(node, x_shape, 4, "input (only 2-D convolution)")
    w = np.asarray(ctx.const_input(node, 1, "weight"), dtype=np.float64)
    if w.ndim != 4:
        raise ConversionError(
            f"{where(node)}: weight has shape {list(w.shape)}; expected rank 4 [Cout, Cin/group, KH, KW]"
        )
    cout, cin_per_group, kh, kw = w.shape
    b = ctx.const_input(node, 2, "bias", required=False)
    bias = np.zeros(cout) if b is None else np.asarray(b, dtype=np.float64).reshape(-1)
    cin = x_shape[1]
    group = int(a.get("group", 1))
    depthwise = group != 1 and group == cin and cin_per_group == 1 and cout % cin == 0
    if group != 1 and not depthwise:
        raise ConversionError(
            f"{where(node)} has group={group} with {cin} input and {cout} output channels; "
            f"only group=1 or depthwise (group == input channels, output channels a multiple of it) is supported"
        )
    if not depthwise and cin_per_group != cin:
        raise ConversionError(
            f"{where(node)}: weight expects {cin_per_group} input channels, input has {cin}"
        )
    strides = ints_attr(node, a, "strides", [1, 1], 2)
    dilations = ints_attr(node, a, "dilations", [1, 1], 2)
    top, left, bottom, right = spatial_padding(node, a, x_shape[2:], (kh, kw), strides, dilations)
    out_shape = ctx.shape_of(node.output[0], node)

    out_name = node.output[0]
    bn = foldable_batchnorm(ctx, out_name, cout)
    if bn is not None:
        bn_node, scale, shift = bn
        w = w * scale[:, None, None, None]
        bias = bias * scale + shift
        ctx.absorb(bn_node, "bn_into_conv")
        out_name = bn_node.output[0]
    act, out_name = fuse_activation(ctx, out_name)

    x = ctx.in_layout(node.input[0], True)
    if depthwise:
        filt = ctx.const_operand(w.transpose(1, 2, 3, 0))  # [1, KH, KW, Cout]
    else:
        filt = ctx.const_operand(w.transpose(0, 2, 3, 1))  # [Cout, KH, KW, Cin]
    bias_op = ctx.const_operand(bias)
    out = ctx.new_tensor(out_name, out_shape, nhwc=True)
    pads = [ctx.i32(v) for v in (left, right, top, bottom, strides[1], strides[0])]
    dil = [ctx.i32(dilations[1]), ctx.i32(dilations[0])]
    if depthwise:
        ins = [x.operand, filt, bias_op, *pads, ctx.i32(cout // cin), ctx.i32(act), ctx.flag(False), *dil]
        ctx.emit(OperationType.DEPTHWISE_CONV_2D, ins, [out.operand])
    else:
        ins = [x.operand, filt, bias_op, *pads, ctx.i32(act), ctx.flag(False), *dil]
        ctx.emit(OperationType.CONV_2D, ins, [out.operand])
