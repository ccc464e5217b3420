"""Generators of windowed layers: convolutions, pools, fully connected."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlts.crash.random_graph.spec import (
    BIAS_LIMIT,
    FC_MAX_INPUT_SIZE,
    MAX_ELEMENTS,
    MAX_KERNEL,
    Act,
    Op,
    f32_value,
    generates,
)
from mlts.crash.random_graph.state import GraphState, Value, clip_interval, quant_for
from mlts.hal.enums import OperandType, PaddingScheme

# -------------------------------------------------------------- sliding windows: convolutions and pools


@dataclass(slots=True)
class Window:
    """The padding, strides, dilations and layout of one windowed operation, and its output size."""

    explicit: bool
    scheme: int
    pads: tuple[int, int, int, int]  # left, right, top, bottom
    strides: tuple[int, int]  # width, height
    dilations: tuple[int, int]  # width, height
    nchw: bool
    with_layout: bool
    with_dilation: bool
    out_h: int = 0
    out_w: int = 0

    def params(self, g: GraphState, extras: Sequence[int], activation: int) -> list[int]:
        """The parameter operands in NNAPI's order: padding, strides, extras, activation, layout, dilations."""
        if self.explicit:
            head = [g.i32(p) for p in self.pads]
        else:
            head = [g.i32(self.scheme)]
        args = [*head, g.i32(self.strides[0]), g.i32(self.strides[1]), *(g.i32(e) for e in extras)]
        args.append(g.i32(activation))
        if self.with_layout:
            args.append(g.flag(self.nchw))
        if self.with_dilation:
            args += [g.i32(self.dilations[0]), g.i32(self.dilations[1])]
        return args

    def out_dims(self, n: int, c: int) -> tuple[int, ...]:
        return (n, c, self.out_h, self.out_w) if self.nchw else (n, self.out_h, self.out_w, c)


def _out_size(scheme: int, size: int, k: int, stride: int, dilation: int, before: int, after: int) -> int:
    eff = (k - 1) * dilation + 1
    if scheme == PaddingScheme.SAME:
        return -(-size // stride)
    if scheme == PaddingScheme.VALID:
        return (size - eff + stride) // stride
    return (size + before + after - eff) // stride + 1


def _window(g: GraphState, nchw: bool, h: int, w: int, kh: int, kw: int, dilation: bool) -> Window:
    """Random window parameters for a kh x kw window on h x w (kh <= h, kw <= w); padding stays below the window."""
    dw = dh = 1
    if dilation and g.chance(0.25):
        dw = g.rand.randint(1, 2) if (kw - 1) * 2 + 1 <= w else 1
        dh = g.rand.randint(1, 2) if (kh - 1) * 2 + 1 <= h else 1
    with_dilation = dilation and (dw > 1 or dh > 1 or g.chance(0.1))
    with_layout = nchw or with_dilation or g.chance(0.3)
    explicit = g.chance(0.4)
    pads = (0, 0, 0, 0)
    scheme = 0
    if explicit:
        pads = tuple(g.rand.randint(0, k - 1) for k in (kw, kw, kh, kh))  # type: ignore[assignment]
    else:
        scheme = g.rand.choice((PaddingScheme.SAME, PaddingScheme.VALID))
    win = Window(
        explicit, int(scheme), pads, (g.rand.randint(1, 3), g.rand.randint(1, 3)), (dw, dh),
        nchw, with_layout, with_dilation,
    )  # fmt: skip
    left, right, top, bottom = pads
    win.out_h = _out_size(win.scheme, h, kh, win.strides[1], dh, top, bottom)
    win.out_w = _out_size(win.scheme, w, kw, win.strides[0], dw, left, right)
    return win


def nhwc(dims: tuple[int, ...], nchw: bool) -> tuple[int, int, int, int]:
    """(N, H, W, C) of rank-4 `dims` laid out NCHW (`nchw`) or NHWC."""
    n, a, b, c = dims
    return (n, b, c, a) if nchw else (n, a, b, c)


def windowed(g: GraphState, quant: bool, dilation: bool) -> tuple[Value, tuple[int, int, int, int], Window]:
    """A rank-4 input, its NHWC dimensions and random window parameters (kernel, padding, strides, layout)."""
    x = g.source(quant, lambda t: len(t.dims) == 4, lambda: g.shape(4))
    nchw = g.chance(0.3)
    n, h, w, c = nhwc(x.dims, nchw)
    kh, kw = g.rand.randint(1, min(MAX_KERNEL, h)), g.rand.randint(1, min(MAX_KERNEL, w))
    return x, (n, kh, kw, c), _window(g, nchw, h, w, kh, kw, dilation)


def _normalised(g: GraphState, shape: tuple[int, ...], axes: tuple[int, ...], gain: float) -> np.ndarray:
    """Float32 weights of `shape` whose absolute values sum to `gain` over `axes` (per output channel)."""
    w = g.values.uniform(-1.0, 1.0, size=shape)
    norm = np.maximum(np.abs(w).sum(axis=axes, keepdims=True), 1e-3)
    return (w * (gain / norm)).astype(np.float32)


def weights_and_bias(
    g: GraphState, x: Value, shape: tuple[int, ...], axes: tuple[int, ...], cout: int, quant: bool
) -> tuple[int, int, float]:
    """Constant weights of `shape` and a bias of `cout`: their operands and the bound of the layer's output."""
    gain = g.rand.uniform(0.5, 1.5)
    bias = g.values.uniform(-0.5, 0.5, size=cout)
    bound = gain * x.bound + 0.5
    if not quant:
        w = g.builder.add_constant(_normalised(g, shape, axes, gain), OperandType.TENSOR_FLOAT32)
        return w, g.builder.add_constant(bias.astype(np.float32), OperandType.TENSOR_FLOAT32), bound
    assert x.quant is not None
    q = g.values.integers(0, 256, size=shape, dtype=np.uint8)
    zp = g.rand.randint(100, 155)
    l1 = float(np.abs(q.astype(np.int64) - zp).sum(axis=axes).max())
    w_scale = f32_value(gain / max(l1, 1.0))
    b_scale = f32_value(np.float32(x.quant[0]) * np.float32(w_scale))
    w = g.builder.add_constant(q, OperandType.TENSOR_QUANT8_ASYMM, w_scale, zp)
    b_q = np.clip(np.round(bias / b_scale), -BIAS_LIMIT, BIAS_LIMIT).astype(np.int32)
    return w, g.builder.add_constant(b_q, OperandType.TENSOR_INT32, b_scale), bound


def finish_layer(
    g: GraphState, op: Op, args: list[Value | int], win: Window | None, extras: Sequence[int],
    dims: tuple[int, ...], bound: float, quant: bool,
) -> None:  # fmt: skip
    """Append the parameters (window ones when given, then the activation) and emit the layer."""
    if quant:
        code = int(g.rand.choice(tuple(Act)))
        lo, hi = clip_interval(code, -bound, bound)
        q: tuple[float, int] | None = quant_for(lo, hi)
    else:
        code, lo, hi = g.activation(-bound, bound)
        q = None
    args += win.params(g, extras, code) if win is not None else [g.i32(code)]
    g.emit(op, args, dims, lo, hi, q)


@generates(Op.CONV_2D, quant=True, min_rank=4)
def _conv(g: GraphState, quant: bool) -> None:
    x, (n, kh, kw, cin), win = windowed(g, quant, dilation=True)
    cout = g.dim(max(MAX_ELEMENTS // (n * win.out_h * win.out_w), 1))
    wgt, bias, bound = weights_and_bias(g, x, (cout, kh, kw, cin), (1, 2, 3), cout, quant)
    finish_layer(g, Op.CONV_2D, [x, wgt, bias], win, (), win.out_dims(n, cout), bound, quant)


@generates(Op.DEPTHWISE_CONV_2D, quant=True, min_rank=4)
def _depthwise(g: GraphState, quant: bool) -> None:
    x, (n, kh, kw, cin), win = windowed(g, quant, dilation=True)
    room = max(MAX_ELEMENTS // (n * win.out_h * win.out_w * cin), 1)
    mult = g.rand.randint(1, min(3, room))
    cout = cin * mult
    wgt, bias, bound = weights_and_bias(g, x, (1, kh, kw, cout), (0, 1, 2), cout, quant)
    finish_layer(g, Op.DEPTHWISE_CONV_2D, [x, wgt, bias], win, (mult,), win.out_dims(n, cout), bound, quant)


def _pool(g: GraphState, op: Op, quant: bool) -> None:
    x, (n, kh, kw, c), win = windowed(g, quant, dilation=False)
    # Every window holds at least one input element (padding < window), so the result stays in [lo, hi].
    code = g.rand.choice(tuple(Act))
    args: list[Value | int] = [x, *win.params(g, (kw, kh), code)]
    if quant:
        g.emit(op, args, win.out_dims(n, c), 0, 0, x.quant)
    else:
        g.emit(op, args, win.out_dims(n, c), *clip_interval(code, x.lo, x.hi))


for _op in (Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D):
    generates(_op, quant=True, min_rank=4)(lambda g, q, op=_op: _pool(g, op, q))


def _fc_split(dims: tuple[int, ...]) -> int | None:
    """The first flattened axis: the largest trailing product of at most FC_MAX_INPUT_SIZE, keeping a batch axis."""
    best = None
    for j in range(len(dims) - 1, 0, -1):
        if math.prod(dims[j:]) > FC_MAX_INPUT_SIZE:
            break
        best = j
    return best


@generates(Op.FULLY_CONNECTED, quant=True, min_rank=2)
def _fully_connected(g: GraphState, quant: bool) -> None:
    def make() -> tuple[int, ...]:
        dims = g.shape(g.rank(2))
        return (*dims[:-1], min(dims[-1], FC_MAX_INPUT_SIZE))

    x = g.source(quant, lambda t: _fc_split(t.dims) is not None, make)
    j = _fc_split(x.dims)
    assert j is not None
    size, batch = math.prod(x.dims[j:]), math.prod(x.dims[:j])
    units = g.dim()
    wgt, bias, bound = weights_and_bias(g, x, (units, size), (1,), units, quant)
    finish_layer(g, Op.FULLY_CONNECTED, [x, wgt, bias], None, (), (batch, units), bound, quant)
