"""GRU -> its equations, unrolled over the static sequence length (NNAPI 1.3 has no GRU operation).

ONNX packs the gates in the order z, r, h: W [dirs, 3H, in], R [dirs, 3H, H], B [dirs, 6H] (input
biases Wb, then recurrent biases Rb). Per step, with f and g the activations (Sigmoid and Tanh by
default):

    z = f(x Wz' + H Rz' + Wbz + Rbz)
    r = f(x Wr' + H Rr' + Wbr + Rbr)
    h = g(x Wh' + (r * H) Rh' + Rbh + Wbh)          linear_before_reset = 0
    h = g(x Wh' + r * (H Rh' + Rbh) + Wbh)          linear_before_reset != 0
    H' = (1 - z) * h + z * H

The input projections of every step are one FULLY_CONNECTED over the whole sequence; each step is
FULLY_CONNECTED for H Rz'|Rr' and for the candidate, ADD, LOGISTIC/TANH/RELU, MUL and SUB, the
operations of the equations in the same order, so the values are float32 evaluations of ONNX's own
formulas. A reverse direction walks the steps backward; bidirectional runs both and stacks them on
the num_directions axis. Outputs Y [T, dirs, B, H] (layout 1: [B, T, dirs, H]) and Y_h.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import NodeProto

from mlts.convert.context import Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs
from mlts.convert.ops.lstm import DIRECTIONS, used
from mlts.convert.registry import register
from mlts.hal.enums import FusedActivationFunc, OperationType

_ACTS = {"Sigmoid": OperationType.LOGISTIC, "Tanh": OperationType.TANH, "Relu": OperationType.RELU}
NONE = FusedActivationFunc.NONE


def _activations(node: NodeProto, a: dict, dirs: int) -> list[tuple[OperationType, OperationType]]:
    """(f, g) per direction."""
    names = [
        v.decode() if isinstance(v, bytes) else v for v in a.get("activations", ["Sigmoid", "Tanh"] * dirs)
    ]
    if len(names) != 2 * dirs or any(n not in _ACTS for n in names):
        raise ConversionError(
            f"{where(node)} has activations {names}; the converter takes two per direction among "
            f"{', '.join(_ACTS)} (NNAPI's LOGISTIC, TANH, RELU)"
        )
    return [(_ACTS[names[2 * d]], _ACTS[names[2 * d + 1]]) for d in range(dirs)]


class _Gru:
    """One GRU node: its sizes, constants and the operations of its steps."""

    def __init__(self, ctx: Context, node: NodeProto, layout: int) -> None:
        self.ctx, self.node = ctx, node
        a = attrs(node)
        for key in ("clip", "activation_alpha", "activation_beta"):
            if key in a:
                raise ConversionError(f"{where(node)} has attribute {key}; it is not supported")
        self.direction = a.get("direction", "forward")
        if self.direction not in DIRECTIONS:
            raise ConversionError(
                f"{where(node)} has direction '{self.direction}'; ONNX directions are {', '.join(DIRECTIONS)}"
            )
        if layout not in (0, 1):
            raise ConversionError(f"{where(node)} has layout {layout}; expected 0 or 1")
        self.layout = layout
        self.dirs = 2 if self.direction == "bidirectional" else 1
        self.lbr = bool(a.get("linear_before_reset", 0))
        x_shape = ctx.shape_of(node.input[0])
        if len(x_shape) != 3:
            raise ConversionError(f"{where(node)}: X has shape {list(x_shape)}; expected rank 3")
        self.steps, self.batch = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
        self.inputs = x_shape[2]
        w = self._const(1, "W (input weights)", required=True)
        assert w is not None
        if w.ndim != 3 or w.shape[0] != self.dirs or w.shape[1] % 3 or w.shape[2] != self.inputs:
            raise ConversionError(
                f"{where(node)}: W has shape {list(w.shape)}; expected [{self.dirs}, 3*hidden_size, {self.inputs}]"
            )
        h = self.units = w.shape[1] // 3
        if int(a.get("hidden_size", h)) != h:
            raise ConversionError(
                f"{where(node)} has hidden_size {a['hidden_size']} but W has shape {list(w.shape)}"
            )
        r = self._const(2, "R (recurrent weights)", required=True)
        assert r is not None
        if r.shape != (self.dirs, 3 * h, h):
            raise ConversionError(
                f"{where(node)}: R has shape {list(r.shape)}; expected {[self.dirs, 3 * h, h]}"
            )
        b = self._const(3, "B (bias)")
        if b is not None and b.shape != (self.dirs, 6 * h):
            raise ConversionError(
                f"{where(node)}: B has shape {list(b.shape)}; expected {[self.dirs, 6 * h]}"
            )
        self.w, self.r = w, r
        self.b = np.zeros((self.dirs, 6 * h)) if b is None else b
        self.acts = _activations(node, a, self.dirs)
        self._check_sequence_lens()

    def _const(self, index: int, what: str, required: bool = False) -> np.ndarray | None:
        arr = self.ctx.const_input(self.node, index, what, required)
        return None if arr is None else np.asarray(arr, np.float64)

    def _check_sequence_lens(self) -> None:
        name = self.ctx.input(self.node, 4)
        if name is None:
            return
        lens = self.ctx.const(name)
        if lens is None or np.asarray(lens).size != self.batch or np.any(np.asarray(lens) != self.steps):
            raise ConversionError(
                f"{where(self.node)}: sequence_lens must be absent or a constant giving the full length "
                f"{self.steps} for each of the {self.batch} sequences"
            )

    # ------------------------------------------------------------ operations

    def temp(self, shape: Sequence[int]) -> Tensor:
        return self.ctx.temp(tuple(shape))

    def op(self, op: OperationType, ins: list[int], shape: Sequence[int]) -> Tensor:
        out = self.temp(shape)
        self.ctx.emit(op, ins, [out.operand])
        return out

    def fc(
        self, x: Tensor, weights: np.ndarray | None, bias: np.ndarray, w_operand: int | None = None
    ) -> Tensor:
        ctx = self.ctx
        if w_operand is None:
            assert weights is not None
            w_operand = ctx.const_operand(weights.astype(np.float32))
        w = w_operand
        rows = x.shape[0]
        return self.op(
            OperationType.FULLY_CONNECTED,
            [x.operand, w, ctx.const_operand(bias.astype(np.float32)), ctx.i32(NONE)],
            (rows, len(bias)),
        )

    def binary(self, op: OperationType, a: Tensor, b: Tensor | int) -> Tensor:
        other = b if isinstance(b, int) else b.operand
        return self.op(op, [a.operand, other, self.ctx.i32(NONE)], a.shape)

    def initial_state(self, d: int) -> Tensor:
        ctx, node = self.ctx, self.node
        flat = (self.batch, self.units)
        name = ctx.input(node, 5)
        if name is None:
            zeros = ctx.const_operand(np.zeros(flat, np.float32))
            return Tensor(zeros, flat)
        want = (
            (self.dirs, self.batch, self.units) if self.layout == 0 else (self.batch, self.dirs, self.units)
        )
        shape = ctx.shape_of(name)
        if shape != want:
            raise ConversionError(
                f"{where(node)}: initial_h '{name}' has shape {list(shape)}; expected {list(want)}"
            )
        axis = 0 if self.layout == 0 else 1
        if name in ctx.consts:
            value = np.take(np.asarray(ctx.consts[name], np.float32), d, axis=axis).reshape(flat)
            return Tensor(ctx.const_operand(value), flat)
        src = ctx.in_layout(name, False)
        part = self.op(
            OperationType.GATHER,
            [src.operand, ctx.i32(axis), ctx.ints([d])],
            want[:axis] + (1,) + want[axis + 1 :],
        )
        return self.op(OperationType.RESHAPE, [part.operand, ctx.ints(flat)], flat)

    def run(self) -> None:
        ctx, node = self.ctx, self.node
        h, t_n, b_n = self.units, self.steps, self.batch
        x = ctx.in_layout(node.input[0], False)
        if not x.is_float:
            raise ConversionError(f"{where(node)}: X is not a float tensor")
        rows = t_n * b_n
        flat = self.op(OperationType.RESHAPE, [x.operand, ctx.ints([rows, self.inputs])], (rows, self.inputs))
        y_name = node.output[0] if len(node.output) > 0 and used(ctx, node.output[0]) else None
        h_name = node.output[1] if len(node.output) > 1 and used(ctx, node.output[1]) else None
        ys: list[list[Tensor]] = []  # per direction, per step (in time order)
        finals = []
        for d in range(self.dirs):
            wz, wr, wh = (self.w[d, k * h : (k + 1) * h] for k in range(3))
            rz, rr, rh = (self.r[d, k * h : (k + 1) * h] for k in range(3))
            wb, rb = self.b[d, : 3 * h], self.b[d, 3 * h :]
            # Input projections for every step: [rows, 2H] for z|r (both biases), [rows, H] for h.
            xzr = self.fc(flat, np.concatenate([wz, wr]), wb[: 2 * h] + rb[: 2 * h])
            xh = self.fc(flat, wh, wb[2 * h :] if self.lbr else wb[2 * h :] + rb[2 * h :])
            rzr_w = ctx.const_operand(np.concatenate([rz, rr]).astype(np.float32))
            rh_w = ctx.const_operand(rh.astype(np.float32))
            zero_2h, rbh = np.zeros(2 * h), (rb[2 * h :] if self.lbr else np.zeros(h))
            f, g = self.acts[d]
            one = ctx.const_operand(np.ones(1, np.float32))
            state = self.initial_state(d)
            backward = self.direction == "reverse" or d == 1
            order = range(t_n - 1, -1, -1) if backward else range(t_n)
            outs: dict[int, Tensor] = {}
            for t in order:
                idx = (
                    [t * b_n + i for i in range(b_n)]
                    if self.layout == 0
                    else [i * t_n + t for i in range(b_n)]
                )
                if rows == b_n:
                    xzr_t, xh_t = xzr, xh
                else:
                    xzr_t = self.op(
                        OperationType.GATHER, [xzr.operand, ctx.i32(0), ctx.ints(idx)], (b_n, 2 * h)
                    )
                    xh_t = self.op(OperationType.GATHER, [xh.operand, ctx.i32(0), ctx.ints(idx)], (b_n, h))
                pre = self.binary(OperationType.ADD, xzr_t, self.fc(state, None, zero_2h, rzr_w))
                gates = self.op(f, [pre.operand], (b_n, 2 * h))
                z, r = self.temp((b_n, h)), self.temp((b_n, h))
                ctx.emit(OperationType.SPLIT, [gates.operand, ctx.i32(1), ctx.i32(2)], [z.operand, r.operand])
                if self.lbr:
                    cand = self.binary(OperationType.MUL, r, self.fc(state, None, rbh, rh_w))
                else:
                    cand = self.fc(self.binary(OperationType.MUL, r, state), None, rbh, rh_w)
                hh = self.op(g, [self.binary(OperationType.ADD, xh_t, cand).operand], (b_n, h))
                keep = self.binary(
                    OperationType.MUL,
                    self.op(OperationType.SUB, [one, z.operand, ctx.i32(NONE)], (b_n, h)),
                    hh,
                )
                state = self.binary(OperationType.ADD, keep, self.binary(OperationType.MUL, z, state))
                outs[t] = state
            ys.append([outs[t] for t in range(t_n)])
            finals.append(state)
        if y_name is not None:
            self._bind_y(y_name, ys)
        if h_name is not None:
            self._bind_h(h_name, finals)

    def _concat(self, parts: list[Tensor], rows: int) -> Tensor:
        if len(parts) == 1:
            return parts[0]
        return self.op(
            OperationType.CONCATENATION,
            [*(p.operand for p in parts), self.ctx.i32(0)],
            (rows * len(parts), self.units),
        )

    def _bind(
        self, name: str, flat: Tensor, lead: tuple[int, ...], final: tuple[int, ...], perm: list[int] | None
    ) -> None:
        """`flat` ([prod(lead), H] rows) as output `name` of shape `final`, through `lead` + [H] and `perm`."""
        ctx = self.ctx
        shaped = self.op(
            OperationType.RESHAPE, [flat.operand, ctx.ints([*lead, self.units])], (*lead, self.units)
        )
        if perm is not None:
            shaped = self.op(
                OperationType.TRANSPOSE,
                [shaped.operand, ctx.ints(perm)],
                tuple([*lead, self.units][p] for p in perm),
            )
        out = ctx.new_tensor(name, final)
        ctx.emit(OperationType.RESHAPE, [shaped.operand, ctx.ints(list(final))], [out.operand])

    def _bind_y(self, name: str, ys: list[list[Tensor]]) -> None:
        t_n, b_n, d_n = self.steps, self.batch, self.dirs
        # Rows in (t, d, b) order: layout 0 is [T, dirs, B, H] as it is; layout 1 moves B first.
        flat = self._concat([ys[d][t] for t in range(t_n) for d in range(d_n)], b_n)
        if self.layout == 0:
            self._bind(name, flat, (t_n * d_n * b_n,), (t_n, d_n, b_n, self.units), None)
        else:
            self._bind(name, flat, (t_n * d_n, b_n), (b_n, t_n, d_n, self.units), [1, 0, 2])

    def _bind_h(self, name: str, finals: list[Tensor]) -> None:
        b_n, d_n = self.batch, self.dirs
        flat = self._concat(finals, b_n)
        if self.layout == 0:
            self._bind(name, flat, (d_n * b_n,), (d_n, b_n, self.units), None)
        else:
            self._bind(name, flat, (d_n, b_n), (b_n, d_n, self.units), [1, 0, 2])


@register("GRU", 7)
def gru_7(ctx: Context, node: NodeProto) -> None:
    """X [seq_length, batch, input_size]; Y [seq_length, dirs, batch, H], Y_h [dirs, batch, H]."""
    _Gru(ctx, node, 0).run()


@register("GRU", 14)
def gru_14(ctx: Context, node: NodeProto) -> None:
    """Adds layout: 1 puts the batch first (X [batch, seq_length, in], Y [batch, seq_length, dirs, H])."""
    _Gru(ctx, node, int(attrs(node).get("layout", 0))).run()
