"""LayerNormalization, Erf and Gelu (when no vendor extension provides GELU) as NNAPI arithmetic.

- LayerNormalization (opset 17) over the axes [axis, rank), as the ONNX function body defines it:
  Mean = MEAN(X), D = X - Mean, Var = MEAN(D * D), InvStdDev = 1 / SQRT(Var + epsilon),
  Y = D * InvStdDev * Scale + B; the optional Mean and InvStdDev outputs when something reads them.
  The decomposed form exporters write (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)
  converts node by node to the same operations.
- Erf has no NNAPI operation: erf(x) = s (1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-x^2)),
  t = 1 / (1 + p |x|), s the sign of x (Abramowitz and Stegun 7.1.26). Its error is below 1.5e-7
  for every x in exact arithmetic; evaluated in float32, the cancellation in 1 - (...) near 0 adds
  rounding: the maximum against float64 math.erf, measured on the sample driver over [-6, 6], is
  4.7e-7, below ERF_MAX_ERROR (tests/convert/test_transformer_ops.py measures it on a dense grid).
  Within the float32 rule (1e-5 + 5 ulp) of any network using it; onnxruntime's own erf is 5e-8.
- Gelu (opset 20) without the com.example.mlts.activations extension: approximate="none" is
  x * 0.5 * (1 + erf(x / sqrt(2))) with that Erf; "tanh" is
  x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), both as ONNX defines them.
- x * HardSigmoid(x) with alpha 1/6 and beta 1/2 (how exporters write HardSwish) is HARD_SWISH.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto

from mlts.convert.context import FLOAT_TYPES, Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs, norm_axis
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperandType, OperationType

# Abramowitz and Stegun 7.1.26.
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
#: A bound on |erf decomposition - erf| in float32 (measured 4.7e-7 on the sample driver over [-6, 6]).
ERF_MAX_ERROR = 5e-7
NONE = FusedActivationFunc.NONE


class _Ops:
    """Emit float operations on tensors of one shape and layout (constants broadcast as [1])."""

    def __init__(self, ctx: Context, like: Tensor) -> None:
        self.ctx, self.like = ctx, like

    def const(self, value: float) -> int:
        return self.ctx.const_operand(np.array([value], np.float32))

    def new(self, shape: tuple[int, ...] | None = None) -> Tensor:
        return self.ctx.temp(
            self.like.shape if shape is None else shape, self.like.nhwc, None, self.like.elem
        )

    def unary(self, op: OperationType, a: Tensor) -> Tensor:
        out = self.new(a.shape)
        self.ctx.emit(op, [a.operand], [out.operand])
        return out

    def binary(
        self, op: OperationType, a: Tensor | int, b: Tensor | int, shape: tuple[int, ...] | None = None
    ) -> Tensor:
        ins = [x if isinstance(x, int) else x.operand for x in (a, b)]
        if shape is None:
            shape = next(x.shape for x in (a, b) if not isinstance(x, int))
        out = self.new(shape)
        extra = (
            [self.ctx.i32(NONE)]
            if op in (OperationType.ADD, OperationType.SUB, OperationType.MUL, OperationType.DIV)
            else []
        )
        self.ctx.emit(op, [*ins, *extra], [out.operand])
        return out

    def erf(self, x: Tensor) -> Tensor:
        """The Abramowitz-Stegun decomposition of erf(x) (see the module doc)."""
        mul, add = OperationType.MUL, OperationType.ADD
        ax = self.unary(OperationType.ABS, x)
        t = self.binary(
            OperationType.DIV,
            self.const(1.0),
            self.binary(add, self.binary(mul, ax, self.const(ERF_P)), self.const(1.0)),
            x.shape,
        )
        poly = self.binary(mul, t, self.const(ERF_A[4]))
        for a in reversed(ERF_A[:4]):
            poly = self.binary(mul, t, self.binary(add, poly, self.const(a)))
        e = self.unary(OperationType.EXP, self.unary(OperationType.NEG, self.binary(mul, x, x)))
        y = self.binary(OperationType.SUB, self.const(1.0), self.binary(mul, poly, e), x.shape)
        neg = self.ctx.temp(x.shape, x.nhwc, None, OperandType.TENSOR_BOOL8)
        self.ctx.emit(OperationType.LESS, [x.operand, self.const(0.0)], [neg.operand])
        out = self.new(x.shape)
        self.ctx.emit(
            OperationType.SELECT,
            [neg.operand, self.unary(OperationType.NEG, y).operand, y.operand],
            [out.operand],
        )
        return out


def _float_input(ctx: Context, node: NodeProto) -> Tensor:
    x = ctx.tensor(node)
    if x.quant is not None or x.elem not in FLOAT_TYPES:
        what = "quantized" if x.quant is not None else x.elem.name
        raise ConversionError(
            f"{where(node)}: input is {what}; {node.op_type} is converted for float tensors"
        )
    return x


@register("Erf", 9)
def erf(ctx: Context, node: NodeProto) -> None:
    """Abramowitz-Stegun 7.1.26 with ABS, DIV, MUL, ADD, EXP, LESS, SELECT (error <= ERF_MAX_ERROR)."""
    x = _float_input(ctx, node)
    ctx.bind(node.output[0], _Ops(ctx, x).erf(x))


def emit_gelu(ctx: Context, node: NodeProto, approximate: str) -> None:
    """Gelu from its ONNX definition (see the module doc)."""
    x = _float_input(ctx, node)
    ops = _Ops(ctx, x)
    mul, add = OperationType.MUL, OperationType.ADD
    if approximate == "tanh":
        cube = ops.binary(mul, ops.binary(mul, x, x), x)
        inner = ops.binary(
            mul,
            ops.binary(add, x, ops.binary(mul, cube, ops.const(0.044715))),
            ops.const(math.sqrt(2 / math.pi)),
        )
        core = ops.unary(OperationType.TANH, inner)
    else:
        core = ops.erf(ops.binary(OperationType.DIV, x, ops.const(math.sqrt(2.0))))
    half = ops.binary(mul, x, ops.const(0.5))
    ctx.bind(node.output[0], ops.binary(mul, half, ops.binary(add, core, ops.const(1.0))))


def _layer_norm(ctx: Context, node: NodeProto) -> None:
    a = attrs(node)
    if int(a.get("stash_type", 1)) != 1:
        raise ConversionError(
            f"{where(node)} has stash_type {a['stash_type']}; only 1 (float32) is supported"
        )
    _float_input(ctx, node)
    x = ctx.in_layout(node.input[0], False)
    axis = norm_axis(node, int(a.get("axis", -1)), x.rank)
    eps = float(a.get("epsilon", 1e-5))
    axes = list(range(axis, x.rank))
    reduced = x.shape[:axis] + (1,) * len(axes)
    ops = _Ops(ctx, x)

    def mean(t: Tensor) -> Tensor:
        out = ops.new(reduced)
        ctx.emit(OperationType.MEAN, [t.operand, ctx.ints(axes), ctx.i32(1)], [out.operand])
        return out

    mu = mean(x)
    d = ops.binary(OperationType.SUB, x, mu, x.shape)
    var = mean(ops.binary(OperationType.MUL, d, d))
    std = ops.unary(OperationType.SQRT, ops.binary(OperationType.ADD, var, ops.const(eps)))
    inv = ops.binary(OperationType.DIV, ops.const(1.0), std, reduced)
    y = ops.binary(OperationType.MUL, d, inv, x.shape)
    scale = ctx.const_input(node, 1, "Scale")
    if scale is not None:
        y = ops.binary(OperationType.MUL, y, ctx.const_operand(np.asarray(scale, np.float32)), x.shape)
    bias = ctx.const_input(node, 2, "B", required=False)
    if bias is not None:
        y = ops.binary(OperationType.ADD, y, ctx.const_operand(np.asarray(bias, np.float32)), x.shape)
    ctx.bind(node.output[0], y)
    for index, value in ((1, mu), (2, inv)):
        if index < len(node.output) and node.output[index]:
            ctx.bind(node.output[index], value)


@register("LayerNormalization", 17)
def layer_normalization(ctx: Context, node: NodeProto) -> None:
    """MEAN, SUB, MUL, MEAN, ADD, SQRT, DIV, MUL (Scale), ADD (B): ONNX's function body."""
    _layer_norm(ctx, node)


def hard_swish_of(ctx: Context, node: NodeProto) -> NodeProto | None:
    """The Mul reading x and HardSigmoid(x) (alpha 1/6, beta 1/2) when it alone reads the HardSigmoid."""
    a = attrs(node)
    if not (np.float32(a.get("alpha", 0.2)) == np.float32(1 / 6) and float(a.get("beta", 0.5)) == 0.5):
        return None
    mul = ctx.sole_consumer(node.output[0], {"Mul"})
    if mul is None or sorted(mul.input) != sorted([node.input[0], node.output[0]]):
        return None
    return mul


def emit_hard_swish(ctx: Context, node: NodeProto, mul: NodeProto) -> None:
    """HARD_SWISH for x * HardSigmoid(x): x * relu6(x + 3) / 6, the same function."""
    x = _float_input(ctx, node)
    ctx.absorb(mul, "fused_hard_swish")
    out = ctx.new_tensor(mul.output[0], x.shape, x.nhwc, None, x.elem)
    ctx.emit(OperationType.HARD_SWISH, [x.operand], [out.operand])
