"""The fused float32 LSTM cell of driver/native/lstm_kernels.c: the gate products and the cell update in one call.

Used by LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and each direction of BIDIRECTIONAL_SEQUENCE_LSTM when
the compiled kernels are loaded, every weight operand is a constant and there is no layer norm (its
per-row mean needs every unit's gate before any is activated); otherwise they run
`_lstm_cell.step` in NumPy. The weights are packed once at prepare in the kernel's panel layout
(see the C file): eight units' columns of every gate side by side, three such panels interleaved by
rows, so one pass over a group gives 24 units' whole cell update. The projection, when present, follows in NumPy
(`_lstm_cell.project`).

The kernel's sigmoid and tanh are polynomial (Cephes); results agree with the NumPy path to a few
float32 ulp, not bit for bit. The cell comes from `driver.native` (which loads and checks the one
library); MLTS_DRIVER_NATIVE=0 turns it off with every compiled kernel (the tests compare the two
paths by patching this module).
Every buffer a call writes is its own (new, or the execution's workspace), so concurrent
executions of one prepared model share only the constant panels."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from driver import native
from driver.native.layout import CALL_COPY, CALL_LSTM_CELL_F32, LstmConst
from driver.ops._bind import BoundStep, Call
from driver.ops._lstm_cell import LstmConfig, Weights, project
from driver.ops._workspace import CURRENT, Workspace, address, output, scratch

F32 = np.float32
#: Panels per group of the kernel's layout: one pass over a group gives its units' whole cell update.
GROUP = 3
#: mk_lstm_cell_f32 of the compiled kernels (typed by driver.native), or None without them.
_CELL: Any = native.LIB.mk_lstm_cell_f32 if native.LIB is not None else None


def available() -> bool:
    return _CELL is not None


def panels(blocks: Sequence[np.ndarray], gates: int, units: int) -> np.ndarray:
    """Gate-major columns [k_i, gates * units] of each block, stacked by rows, in the kernel's layout
    (see the C file), one flat array written in place (no second copy of the weights): panels of eight
    units' columns of every gate, units padded with zeros to a multiple of eight, in groups of GROUP
    panels interleaved by rows, [groups][sum k_i][GROUP][gates * 8] (the last group the panels left),
    each group where its first panel would be in a plain [panels][sum k_i][gates * 8] array."""
    count = -(-units // 8)
    k = sum(b.shape[0] for b in blocks)
    out = (np.zeros if units % 8 else np.empty)(count * k * gates * 8, dtype=F32)
    for p in range(0, count, GROUP):
        n = min(GROUP, count - p)
        start = p * k * gates * 8
        group = out[start : start + n * k * gates * 8].reshape(k, n, gates, 8)
        u0, u1 = 8 * p, min(units, 8 * (p + n))
        whole = (u1 - u0) // 8  # panels of eight units; a last partial one after them
        row = 0
        for b in blocks:
            kb = b.shape[0]
            v = b.reshape(kb, gates, units)[:, :, u0:u1]
            if whole:
                group[row : row + kb, :whole] = (
                    v[:, :, : whole * 8].reshape(kb, gates, whole, 8).transpose(0, 2, 1, 3)
                )
            if whole < n:
                group[row : row + kb, whole, :, : u1 - u0 - whole * 8] = v[:, :, whole * 8 :]
            row += kb
    return out


def _vector(v: np.ndarray | None) -> np.ndarray | None:
    return None if v is None else np.ascontiguousarray(v, dtype=F32).reshape(-1)


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


def _rows(a: np.ndarray) -> tuple[np.ndarray, int]:
    """`a` [rows, cols] with unit column stride: (array, row stride in floats)."""
    if a.dtype != F32 or a.strides[1] != 4 or a.strides[0] % 4:
        a = np.ascontiguousarray(a, dtype=F32)
    return a, a.strides[0] // 4 if a.shape[0] > 1 else a.shape[1]


class _StepBuffers(NamedTuple):
    """What `FusedCell.step` writes in one workspace: its output buffers and their addresses."""

    ws: Workspace
    step: int
    batch: int
    gates: np.ndarray
    c_new: np.ndarray
    h_pre: np.ndarray
    a_gates: int
    a_c: int
    a_h: int


class FusedCell:
    """One LSTM's packed constants for the kernel. `with_input`: the panels cover the input weights
    too (the LSTM op's step from x and h); otherwise only the recurrent ones (a sequence's steps,
    whose input parts with the bias are computed for all steps at once)."""

    __slots__ = ("cfg", "w", "panels", "_keep", "_const", "_const_ptr")

    def __init__(self, cfg: LstmConfig, w: Weights, with_input: bool) -> None:
        self.cfg = cfg
        self.w = w
        g, u = cfg.gates, cfg.num_units
        if with_input:
            k1, k2 = cfg.input_size, cfg.output_size
            self.panels = panels([w.w_x, w.w_h], g, u)
            bias = _vector(w.bias)
        else:
            k1, k2 = cfg.output_size, 0
            self.panels = panels([w.w_h], g, u)
            bias = None
        peep = [_vector(p) for p in (w.peep_i, w.peep_f, w.peep_o)]
        self._keep = (bias, *peep)  # the arrays the structure points into
        self._const = LstmConst(
            u, k1, k2, g, cfg.activation, cfg.cell_clip, self.panels.ctypes.data, _ptr(bias), *map(_ptr, peep)
        )
        self._const_ptr = ctypes.addressof(self._const)

    def _step_buffers(self, ws: Workspace, batch: int) -> _StepBuffers:
        """The step's outputs in `ws` (the workspace's own output buffers, so that results a run
        returns are copied before the workspace is reused) and their addresses."""
        u = self.cfg.num_units
        gates = output((batch, self.cfg.gates * u), F32, 0)
        c_new = output((batch, u), F32, 2)
        h_pre = output((batch, u), F32, 1) if not self.cfg.projection else scratch("lstm_h", (batch, u), F32)
        bufs = _StepBuffers(
            ws, ws.step, batch, gates, c_new, h_pre, gates.ctypes.data, c_new.ctypes.data, h_pre.ctypes.data
        )
        # Kept by the workspace (not here): a workspace the driver drops takes its buffers with it.
        ws.bound[self] = bufs
        return bufs

    def step(self, x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The LSTM op's step: (h' [batch, output_size], c' [batch, u], gate activations [batch, G*u])."""
        ws = CURRENT.get()
        if ws is None:
            return self._step_alone(x, h, c)
        batch = len(x)
        bufs = cast("_StepBuffers | None", ws.bound.get(self))
        if bufs is None or bufs.step != ws.step or bufs.batch != batch:
            bufs = self._step_buffers(ws, batch)
        # Row strides: a contiguous float32 row-major array's is its width (any with one row).
        if x.dtype != F32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=F32)
        if h.dtype != F32 or not h.flags.c_contiguous:
            h = np.ascontiguousarray(h, dtype=F32)
        if c.dtype != F32 or not c.flags.c_contiguous:
            c = np.ascontiguousarray(c, dtype=F32)
        known = ws.addresses  # the workspace's own arrays (earlier operations' outputs)
        hit = known.get(id(x))
        ax = hit[1] if hit is not None and hit[0] is x else x.ctypes.data
        hit = known.get(id(h))
        ah = hit[1] if hit is not None and hit[0] is h else h.ctypes.data
        hit = known.get(id(c))
        ac = hit[1] if hit is not None and hit[0] is c else c.ctypes.data
        cfg = self.cfg
        _CELL(
            self._const_ptr,
            batch,
            ax,
            cfg.input_size,
            ah,
            cfg.output_size,
            None,
            0,
            ac,
            bufs.a_c,
            bufs.a_h,
            bufs.a_gates,
        )
        h_new = bufs.h_pre if not cfg.projection else project(cfg, self.w, bufs.h_pre)
        return h_new, bufs.c_new, bufs.gates

    def bind_step(self, shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int]) -> BoundStep | None:
        """The LSTM op's `step` as bound calls (driver.bound_steps) for C-contiguous float32 x, h and c
        of `shapes` at `ptrs`: the cell's one call with the arguments `step` passes (so the same
        floats), then a copy of h' into the op's fourth output. Outputs, in the op's order: the gate
        activations, h', c' and the copy of h'. None with a projection (it runs in NumPy) or for
        shapes the op's run would refuse (it then runs, and reports, as before)."""
        cfg = self.cfg
        if cfg.projection or len(shapes) != 3 or not shapes[0] or len(shapes[0]) != 2:
            return None
        batch, u, m = shapes[0][0], cfg.num_units, cfg.output_size
        if batch < 1 or tuple(shapes[0]) != (batch, cfg.input_size):
            return None
        if tuple(shapes[1]) != (batch, m) or tuple(shapes[2]) != (batch, u):
            return None
        xp, hp, cp = ptrs
        gates = output((batch, cfg.gates * u), F32, 0)
        h_new = output((batch, m), F32, 1)
        c_new = output((batch, u), F32, 2)
        h_out = output((batch, m), F32, 3)
        a_h = address(h_new)
        cell = (
            self._const_ptr, batch, xp, cfg.input_size, hp, m, 0, 0, cp, address(c_new), a_h, address(gates),
        )  # fmt: skip
        calls: list[Call] = [
            (CALL_LSTM_CELL_F32, cell, ()),
            (CALL_COPY, (a_h, address(h_out), h_out.nbytes), ()),
        ]
        macs = batch * (cfg.input_size + m) * u * cfg.gates
        return BoundStep(calls, (gates, h_new, c_new, h_out), (self,), macs)

    def _step_alone(
        self, x: np.ndarray, h: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`step` outside a run (new arrays)."""
        cfg = self.cfg
        batch, u = len(x), cfg.num_units
        x, ldx = _rows(x)
        h, ldh = _rows(h)
        if c.dtype != F32 or not c.flags.c_contiguous:
            c = np.ascontiguousarray(c, dtype=F32)
        gates = np.empty((batch, cfg.gates * u), F32)
        c_new = np.empty((batch, u), F32)
        h_pre = np.empty((batch, u), F32)
        _CELL(self._const_ptr, batch, x.ctypes.data, ldx, h.ctypes.data, ldh, None, 0,
              c.ctypes.data, c_new.ctypes.data, h_pre.ctypes.data, gates.ctypes.data)  # fmt: skip
        return project(cfg, self.w, h_pre), c_new, gates

    def sequence(
        self,
        x_steps: np.ndarray,
        out_steps: np.ndarray,
        h: np.ndarray,
        c: np.ndarray,
        reverse: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every step from the input parts `x_steps` [T, batch, G*u] (any strides with unit column
        stride), writing each h' into `out_steps` [T, batch, output_size]; (last h, last c), new
        arrays. `reverse`: from the last time index to the first (a backward direction)."""
        cfg = self.cfg
        batch, u = x_steps.shape[1], cfg.num_units
        if x_steps.dtype != F32 or x_steps.strides[2] != 4 or any(s % 4 for s in x_steps.strides):
            x_steps = np.ascontiguousarray(x_steps, dtype=F32)
        c_buf = np.array(c, dtype=F32, order="C")
        c_ptr = c_buf.ctypes.data
        h_prev = np.array(h, dtype=F32, order="C")
        h_bufs = [np.empty((batch, u), F32), np.empty((batch, u), F32)]
        h_ptrs = [b.ctypes.data for b in h_bufs]
        base = x_steps.ctypes.data
        t_stride, row_stride = x_steps.strides[0], x_steps.strides[1] // 4
        if batch == 1:
            row_stride = x_steps.shape[2]
        m, cst = cfg.output_size, self._const_ptr
        order = range(len(x_steps) - 1, -1, -1) if reverse else range(len(x_steps))
        for n, t in enumerate(order):
            a1 = h_prev.ctypes.data if n == 0 else _ptr_of(h_prev, h_bufs, h_ptrs)
            k = n % 2
            _CELL(cst, batch, a1, m, None, 0, base + t * t_stride, row_stride, c_ptr, c_ptr, h_ptrs[k], None)
            h_new = project(cfg, self.w, h_bufs[k])
            out_steps[t] = h_new
            h_prev = h_new if cfg.projection else h_bufs[k]
        return np.array(h_prev, dtype=F32), c_buf


def _ptr_of(a: np.ndarray, bufs: list[np.ndarray], ptrs: list[int]) -> int:
    for b, p in zip(bufs, ptrs, strict=True):
        if a is b:
            return p
    return a.ctypes.data


def fused_cell(cfg: LstmConfig, weights: Weights | None, with_input: bool) -> FusedCell | None:
    """The fused cell of this LSTM when it computes it (kernels loaded, constant weights, no layer
    norm), else None."""
    if _CELL is None or weights is None or cfg.layer_norm:
        return None
    return FusedCell(cfg, weights, with_input)
