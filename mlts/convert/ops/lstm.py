"""LSTM -> NNAPI LSTM for one forward time step, UNIDIRECTIONAL_SEQUENCE_LSTM for more steps; reverse
and bidirectional LSTMs as one UNIDIRECTIONAL_SEQUENCE_LSTM per direction.

A reverse direction runs forward over the sequence reversed in time (a GATHER with the time indices
T-1..0), and its outputs are reversed back; the directions' outputs are stacked on ONNX's
num_directions axis by CONCATENATION. Pure data movement: the values are those of the cells.

ONNX packs the gates in the order i, o, f, c: W [1, 4H, in], R [1, 4H, H],
B [1, 8H] (input biases Wb, then recurrent biases Rb) and peepholes
P [1, 3H] (i, o, f). NNAPI takes one operand per gate (inputs 1-15: input
weights i, f, c, o; recurrent weights i, f, c, o; peepholes i, f, o; biases
i, f, c, o) with one bias per gate, Wb_g + Rb_g. Both compute, per step,
c' = f*c + i*g(x W_c' + h R_c' + b_c) and h' = o*h(c') with sigmoid gates;
NNAPI uses one activation for g and h, so ONNX activations must be
[Sigmoid, a, a].

input_forget=1: onnxruntime couples the gates as f = 1 - i, where i uses the
i-gate weights (its f-gate weights are unused). NNAPI's CIFG computes
i = 1 - f with f = sigmoid(pre_f); since sigmoid(-v) = 1 - sigmoid(v), the
negated i-gate weights, bias and peephole as NNAPI's forget gate give the
same f and i.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs
from mlts.convert.registry import register
from mlts.hal.enums import OperandType, OperationType

# Row block of each gate in ONNX's W, R and the B halves; P holds i, o, f.
ONNX_GATE = {"i": 0, "o": 1, "f": 2, "c": 3}
ONNX_PEEPHOLE = {"i": 0, "o": 1, "f": 2}
# NNAPI's activation codes for the cell input and output activation (g = h).
ACTIVATIONS = {"Tanh": 4, "Relu": 1, "Sigmoid": 6}
REFUSED_ATTRS = {
    "clip": "ONNX clips the gate pre-activations, NNAPI's cell_clip clips the cell state",
    "activation_alpha": "NNAPI activations take no parameters",
    "activation_beta": "NNAPI activations take no parameters",
}


@dataclass(frozen=True, slots=True)
class LstmShape:
    """Sizes and options of one forward ONNX LSTM node (layout 0: X [T, batch, in]; 1: [batch, T, in])."""

    steps: int
    batch: int
    inputs: int
    units: int
    layout: int
    activation: int
    cifg: bool
    direction: str = "forward"

    @property
    def directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def state_shape(self) -> tuple[int, ...]:
        """ONNX shape of initial_h/initial_c and Y_h/Y_c."""
        d = self.directions
        return (d, self.batch, self.units) if self.layout == 0 else (self.batch, d, self.units)

    def y_shape(self) -> tuple[int, ...]:
        """ONNX shape of Y: [T, dirs, batch, H] (layout 0) or [batch, T, dirs, H] (layout 1)."""
        t, b, h, d = self.steps, self.batch, self.units, self.directions
        return (t, d, b, h) if self.layout == 0 else (b, t, d, h)


# ------------------------------------------------------------ attributes and shapes


def _activation(node: NodeProto, a: dict) -> int:
    """NNAPI code of ONNX activations [Sigmoid, g, g] (default [Sigmoid, Tanh, Tanh])."""
    acts = [
        v.decode() if isinstance(v, bytes) else v for v in a.get("activations", ["Sigmoid", "Tanh", "Tanh"])
    ]
    if len(acts) != 3 or acts[0] != "Sigmoid" or acts[1] != acts[2] or acts[1] not in ACTIVATIONS:
        raise ConversionError(
            f"{where(node)} has activations {acts}; only [Sigmoid, g, g] with g one of "
            f"{', '.join(ACTIVATIONS)} is supported (NNAPI uses one activation for the cell input and output)"
        )
    return ACTIVATIONS[acts[1]]


DIRECTIONS = ("forward", "reverse", "bidirectional")


def _check_attributes(node: NodeProto, a: dict) -> None:
    direction = a.get("direction", "forward")
    if direction not in DIRECTIONS:
        raise ConversionError(
            f"{where(node)} has direction '{direction}'; ONNX directions are {', '.join(DIRECTIONS)}"
        )
    for key, why in REFUSED_ATTRS.items():
        if key in a:
            raise ConversionError(f"{where(node)} has attribute {key}; it is not supported ({why})")
    if a.get("input_forget", 0) not in (0, 1):
        raise ConversionError(f"{where(node)} has input_forget={a['input_forget']}; expected 0 or 1")


def lstm_shape(ctx: Context, node: NodeProto, layout: int) -> LstmShape:
    """The checked sizes and options of `node`; ConversionError for what NNAPI cannot compute."""
    a = attrs(node)
    _check_attributes(node, a)
    if layout not in (0, 1):
        raise ConversionError(f"{where(node)} has layout {layout}; expected 0 or 1")
    x_shape = ctx.shape_of(node.input[0])
    if len(x_shape) != 3:
        raise ConversionError(f"{where(node)}: X has shape {list(x_shape)}; expected rank 3")
    steps, batch = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
    w = ctx.const_input(node, 1, "W (input weights)")
    assert w is not None
    direction = a.get("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    if w.ndim != 3 or w.shape[0] != dirs or w.shape[1] % 4:
        raise ConversionError(
            f"{where(node)}: W has shape {list(w.shape)}; expected [{dirs}, 4*hidden_size, input_size] "
            f"(direction '{direction}')"
        )
    units = w.shape[1] // 4
    if a.get("hidden_size", units) != units:
        raise ConversionError(
            f"{where(node)} has hidden_size {a['hidden_size']} but W has shape {list(w.shape)} "
            f"(4*hidden_size rows = {4 * units})"
        )
    if w.shape[2] != x_shape[2]:
        raise ConversionError(
            f"{where(node)}: W has shape {list(w.shape)} but X has input_size {x_shape[2]} (shape {list(x_shape)})"
        )
    cifg = a.get("input_forget", 0) == 1
    return LstmShape(steps, batch, x_shape[2], units, layout, _activation(node, a), cifg, direction)


def _check_sequence_lens(ctx: Context, node: NodeProto, s: LstmShape) -> None:
    """sequence_lens must be absent or a constant whose every entry is the static sequence length."""
    name = ctx.input(node, 4)
    if name is None:
        return
    if name not in ctx.consts:
        raise ConversionError(
            f"{where(node)}: sequence_lens '{name}' is computed at run time; only a constant sequence_lens "
            f"whose entries all equal the sequence length {s.steps} is supported"
        )
    lens = np.asarray(ctx.consts[name]).reshape(-1)
    if lens.size != s.batch or np.any(lens != s.steps):
        raise ConversionError(
            f"{where(node)}: sequence_lens is {lens.tolist()}; only the full length {s.steps} for each of "
            f"the {s.batch} sequences is supported"
        )


# ------------------------------------------------------------ weight operands


def _const(
    ctx: Context, node: NodeProto, index: int, what: str, shape: Sequence[int], required: bool = False
) -> np.ndarray | None:
    """Constant input `index` as float64, checked against `shape` (None when optional and absent)."""
    arr = ctx.const_input(node, index, what, required)
    if arr is None:
        return None
    if tuple(arr.shape) != tuple(shape):
        raise ConversionError(f"{where(node)}: {what} has shape {list(arr.shape)}; expected {list(shape)}")
    return np.asarray(arr, dtype=np.float64)


def _gate_rows(packed: np.ndarray, units: int) -> dict[str, np.ndarray]:
    """Per-gate blocks of an ONNX packed tensor whose first axis holds the gates in i, o, f, c order."""
    return {g: packed[k * units : (k + 1) * units] for g, k in ONNX_GATE.items()}


def weight_operands(ctx: Context, node: NodeProto, s: LstmShape, d: int = 0) -> list[int]:
    """NNAPI inputs 1..17 (gate weights, peepholes, biases, omitted projection) from W, R, B, P of
    direction `d`.

    CIFG (input_forget=1): the input gate operands are omitted and the forget
    gate takes the negated input-gate weights, bias and peephole.
    """
    h, n = s.units, s.directions
    w = _const(ctx, node, 1, "W (input weights)", (n, 4 * h, s.inputs), required=True)
    r = _const(ctx, node, 2, "R (recurrent weights)", (n, 4 * h, h), required=True)
    b = _const(ctx, node, 3, "B (bias)", (n, 8 * h))
    p = _const(ctx, node, 7, "P (peephole weights)", (n, 3 * h))
    assert w is not None and r is not None
    bias = np.zeros(4 * h) if b is None else b[d, : 4 * h] + b[d, 4 * h :]
    gates = {
        "w": _gate_rows(w[d], h),
        "r": _gate_rows(r[d], h),
        "b": _gate_rows(bias, h),
    }
    peep = None if p is None else {g: p[d, k * h : (k + 1) * h] for g, k in ONNX_PEEPHOLE.items()}
    if s.cifg:
        for kind in gates.values():
            kind["f"] = -kind["i"]
        if peep is not None:
            peep["f"] = -peep["i"]

    def const(arr: np.ndarray | None) -> int:
        if arr is None:
            return ctx.builder.add_omitted(OperandType.TENSOR_FLOAT32)
        return ctx.const_operand(arr.astype(np.float32))

    def gate(kind: str, g: str) -> int:
        return const(None if s.cifg and g == "i" else gates[kind][g])

    ops = [gate(kind, g) for kind in ("w", "r") for g in "ifco"]
    ops += [const(None if peep is None or (s.cifg and g == "i") else peep[g]) for g in "ifo"]
    ops += [gate("b", g) for g in "ifco"]
    ops += [const(None), const(None)]  # projection weights and bias
    return ops


def state_operand(ctx: Context, node: NodeProto, index: int, what: str, s: LstmShape, d: int = 0) -> int:
    """NNAPI state input [batch, units] of direction `d` from initial_h/initial_c (run time or constant),
    zeros when absent."""
    name = ctx.input(node, index)
    flat = (s.batch, s.units)
    if name is None:
        return ctx.const_operand(np.zeros(flat, np.float32))
    shape = ctx.shape_of(name)
    if shape != s.state_shape():
        raise ConversionError(
            f"{where(node)}: {what} '{name}' has shape {list(shape)}; expected {list(s.state_shape())}"
        )
    axis = 0 if s.layout == 0 else 1  # the num_directions axis
    if name in ctx.consts:
        return ctx.const_operand(
            np.take(np.asarray(ctx.consts[name], np.float32), d, axis=axis).reshape(flat)
        )
    if s.directions == 1:
        return ctx.reshaped(name, flat).operand
    x = ctx.in_layout(name, False)
    part = ctx.temp(shape[:axis] + (1,) + shape[axis + 1 :])
    ctx.emit(OperationType.GATHER, [x.operand, ctx.i32(axis), ctx.ints([d])], [part.operand])
    held = ctx.unique(f"{name}/direction{d}")
    ctx.bind(held, part)
    return ctx.reshaped(held, flat).operand


# ------------------------------------------------------------ outputs


def used(ctx: Context, name: str | None) -> bool:
    """An output name that a converted node reads or the graph returns."""
    if not name:
        return False
    return name in ctx.graph_outputs or bool(ctx.consumers.get(name))


def _squeeze_of(ctx: Context, name: str, size: int) -> tuple[NodeProto, tuple[int, ...]] | None:
    """The Squeeze that alone reads `name` (of `size` elements) and its static output shape, if known."""
    sq = ctx.sole_consumer(name, {"Squeeze"})
    if sq is None or sq.input[0] != name:
        return None
    axes = ctx.input(sq, 1)
    if axes is not None and axes not in ctx.consts:
        return None
    shape = ctx.shapes.get(sq.output[0])
    if shape is None or any(d is None or d < 1 for d in shape):
        return None
    dims = tuple(int(d) for d in shape)  # type: ignore[arg-type]
    return (sq, dims) if math.prod(dims) == size else None


def bind_output(ctx: Context, name: str, src: Tensor, shape: tuple[int, ...]) -> None:
    """Bind ONNX output `name` of `shape` to the same elements as `src` (a RESHAPE unless the dims agree).

    A Squeeze that alone reads `name` is folded in: its output is bound instead.
    """
    squeeze = _squeeze_of(ctx, name, math.prod(shape))
    if squeeze is not None:
        ctx.absorb(squeeze[0], "fused_squeeze")
        name, shape = squeeze[0].output[0], squeeze[1]
    if src.nn_shape == shape:
        ctx.bind(name, replace(src, shape=shape, nhwc=False))
        return
    out = ctx.new_tensor(name, shape)
    ctx.emit(OperationType.RESHAPE, [src.operand, ctx.ints(shape)], [out.operand])


def _output(ctx: Context, node: NodeProto, index: int) -> str | None:
    name = node.output[index] if index < len(node.output) else None
    return name if used(ctx, name) else None


def _tail(ctx: Context, s: LstmShape) -> list[int]:
    """NNAPI inputs 20..22: activation, cell_clip = 0 and proj_clip = 0 (both off)."""
    return [ctx.i32(s.activation), ctx.f32(0.0), ctx.f32(0.0)]


# ------------------------------------------------------------ emission


def emit_step(ctx: Context, node: NodeProto, s: LstmShape, weights: list[int], states: list[int]) -> None:
    """One time step: LSTM on X reshaped to [batch, in]; outputs reshaped back to Y, Y_h, Y_c."""
    x = ctx.reshaped(node.input[0], (s.batch, s.inputs))
    scratch = ctx.temp((s.batch, s.units * (3 if s.cifg else 4)))
    h_out, c_out, out = (ctx.temp((s.batch, s.units)) for _ in range(3))
    ins = [x.operand, *weights, *states, *_tail(ctx, s)]
    ctx.emit(OperationType.LSTM, ins, [scratch.operand, h_out.operand, c_out.operand, out.operand])
    for index, src, shape in (
        (0, out, s.y_shape()),
        (1, h_out, s.state_shape()),
        (2, c_out, s.state_shape()),
    ):
        name = _output(ctx, node, index)
        if name is not None:
            bind_output(ctx, name, src, shape)


def emit_sequence(ctx: Context, node: NodeProto, s: LstmShape, weights: list[int], states: list[int]) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM on X as it is (time_major = layout 0); the state outputs only when used."""
    x = ctx.tensor(node, 0)
    y_flat = (s.steps, s.batch, s.units) if s.layout == 0 else (s.batch, s.steps, s.units)
    out = ctx.temp(y_flat)
    names = [_output(ctx, node, i) for i in range(3)]
    outs = [out]
    if names[1] is not None or names[2] is not None:
        outs += [ctx.temp((s.batch, s.units)) for _ in range(2)]
    ins = [x.operand, *weights, *states, *_tail(ctx, s), ctx.flag(s.layout == 0)]
    ctx.emit(OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [t.operand for t in outs])
    shapes = (s.y_shape(), s.state_shape(), s.state_shape())
    for name, src, shape in zip(names, outs, shapes, strict=False):
        if name is not None:
            bind_output(ctx, name, src, shape)


def reverse_time(ctx: Context, t: Tensor, axis: int) -> Tensor:
    """`t` (float, ONNX order) with axis `axis` reversed: a GATHER with indices n-1..0."""
    n = t.shape[axis]
    out = ctx.temp(t.shape, elem=t.elem)
    ctx.emit(
        OperationType.GATHER, [t.operand, ctx.i32(axis), ctx.ints(list(range(n - 1, -1, -1)))], [out.operand]
    )
    return out


def stack(ctx: Context, parts: list[Tensor], axis: int, name: str, shape: tuple[int, ...]) -> None:
    """Bind ONNX output `name` of `shape`: `parts` each given a unit axis at `axis`, concatenated there."""
    widened = []
    for p in parts:
        dims = p.shape[:axis] + (1,) + p.shape[axis:]
        w = ctx.temp(dims, elem=p.elem)
        ctx.emit(OperationType.RESHAPE, [p.operand, ctx.ints(dims)], [w.operand])
        widened.append(w)
    if len(widened) == 1:
        ctx.bind(name, replace(widened[0], shape=shape))
        return
    out = ctx.new_tensor(name, shape)
    ctx.emit(OperationType.CONCATENATION, [*(w.operand for w in widened), ctx.i32(axis)], [out.operand])


def emit_directions(ctx: Context, node: NodeProto, s: LstmShape) -> None:
    """Reverse or bidirectional: one UNIDIRECTIONAL_SEQUENCE_LSTM per direction, reversed ones over the
    sequence reversed in time; the outputs stacked on the num_directions axis."""
    x = ctx.in_layout(node.input[0], False)
    time_axis = 0 if s.layout == 0 else 1
    y_flat = (s.steps, s.batch, s.units) if s.layout == 0 else (s.batch, s.steps, s.units)
    names = [_output(ctx, node, i) for i in range(3)]
    ys, hs, cs = [], [], []
    for d in range(s.directions):
        backward = s.direction == "reverse" or d == 1
        weights = weight_operands(ctx, node, s, d)
        states = [
            state_operand(ctx, node, 5, "initial_h", s, d),
            state_operand(ctx, node, 6, "initial_c", s, d),
        ]
        src = reverse_time(ctx, x, time_axis) if backward and s.steps > 1 else x
        out = ctx.temp(y_flat)
        h_out, c_out = ctx.temp((s.batch, s.units)), ctx.temp((s.batch, s.units))
        ins = [src.operand, *weights, *states, *_tail(ctx, s), ctx.flag(s.layout == 0)]
        outs = [out] + ([h_out, c_out] if names[1] is not None or names[2] is not None else [])
        ctx.emit(OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [t.operand for t in outs])
        ys.append(reverse_time(ctx, out, time_axis) if backward and s.steps > 1 and names[0] else out)
        hs.append(h_out)
        cs.append(c_out)
    dir_axis = 1 if s.layout == 0 else 2
    state_axis = 0 if s.layout == 0 else 1
    if names[0] is not None:
        stack(ctx, ys, dir_axis, names[0], s.y_shape())
    for name, parts in ((names[1], hs), (names[2], cs)):
        if name is not None:
            stack(ctx, parts, state_axis, name, s.state_shape())


def convert_lstm(ctx: Context, node: NodeProto, layout: int) -> None:
    s = lstm_shape(ctx, node, layout)
    _check_sequence_lens(ctx, node, s)
    if s.direction != "forward":
        emit_directions(ctx, node, s)
        return
    weights = weight_operands(ctx, node, s)
    states = [state_operand(ctx, node, 5, "initial_h", s), state_operand(ctx, node, 6, "initial_c", s)]
    if s.steps == 1:
        emit_step(ctx, node, s, weights, states)
    else:
        emit_sequence(ctx, node, s, weights, states)


@register("LSTM", 7)
def lstm_7(ctx: Context, node: NodeProto) -> None:
    """X [seq_length, batch, input_size]; Y [seq_length, 1, batch, H], Y_h and Y_c [1, batch, H]."""
    convert_lstm(ctx, node, 0)


@register("LSTM", 14)
def lstm_14(ctx: Context, node: NodeProto) -> None:
    """Adds layout: 1 puts the batch first (X [batch, seq_length, in], Y [batch, seq_length, 1, H])."""
    convert_lstm(ctx, node, int(attrs(node).get("layout", 0)))
