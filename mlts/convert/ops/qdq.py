"""QuantizeLinear and DequantizeLinear: folded into quantized operands, or QUANTIZE/DEQUANTIZE at float boundaries.

- DequantizeLinear of a constant: a quantized constant (QConst) that the
  reading Conv/Gemm/MatMul/Add/Mul turns into a filter, bias or 8-bit operand.
- QuantizeLinear of a tensor already quantized with the same parameters (its
  producer took them from this node): the output is the same operand.
- QuantizeLinear of a float32 model input: QUANTIZE.
- DequantizeLinear of a quantized tensor with its own parameters: the output
  is the same operand; a float graph output gets its DEQUANTIZE at the end.
Anything else would requantize or compute in float, and is refused.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.quant import activation_params, const_of_dq
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def _quantize(ctx: Context, node: NodeProto) -> None:
    q = activation_params(node, ctx.consts, None)
    t = ctx.tensor(node)
    if t.quant is None:
        if t.operand not in ctx.input_operands:
            raise ConversionError(
                f"{where(node)}: input '{node.input[0]}' is computed in float32 (its producer has float inputs); "
                f"only model inputs may be quantized from float32"
            )
        out = ctx.new_tensor(node.output[0], t.shape, t.nhwc, q)
        ctx.emit(OperationType.QUANTIZE, [t.operand], [out.operand])
        return
    if t.quant != q:
        raise ConversionError(
            f"{where(node)}: '{node.input[0]}' is already quantized ({t.quant.describe()}); requantizing it to "
            f"({q.describe()}) is not supported"
        )
    ctx.alias(node.output[0], node.input[0])
    ctx.counts["folded_q"] += 1


def _dequantize(ctx: Context, node: NodeProto) -> None:
    src = node.input[0]
    if src in ctx.consts:
        ctx.qconsts[node.output[0]] = const_of_dq(node, ctx.consts)
        ctx.counts["quantized_constant"] += 1
        return
    t = ctx.tensor(node)
    if t.quant is None:
        raise ConversionError(
            f"{where(node)}: input '{src}' is float32; DequantizeLinear needs an 8-bit tensor"
        )
    q = activation_params(node, ctx.consts, np.dtype(t.quant.dtype))
    if q != t.quant:
        raise ConversionError(
            f"{where(node)} dequantizes '{src}' with ({q.describe()}) but it is quantized with "
            f"({t.quant.describe()}); the parameters must match"
        )
    ctx.alias(node.output[0], src)
    ctx.counts["folded_dq"] += 1


@register("QuantizeLinear", 10)
def quantize_linear(ctx: Context, node: NodeProto) -> None:
    """Per-tensor; axis (13), saturate (19), block_size and output_dtype (21) are read where they matter."""
    _quantize(ctx, node)


@register("DequantizeLinear", 10)
def dequantize_linear(ctx: Context, node: NodeProto) -> None:
    """Per-tensor on run-time tensors; constants may be per-axis (13) as weights; no blocked quantization."""
    _dequantize(ctx, node)
