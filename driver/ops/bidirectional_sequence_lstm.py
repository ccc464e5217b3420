"""BIDIRECTIONAL_SEQUENCE_LSTM: a forward and a backward LSTM over one sequence (NNAPI HAL 1.2-1.3).

Inputs (61): 0 input, [max_time, batch, input_size] when time_major else batch-major; 1-17 the
forward cell's weights, biases, peepholes and projection and 18-34 the backward cell's, each in
LSTM's order (LSTM inputs 1-17); 35 forward output state, 36 forward cell state, 37 backward output
state, 38 backward cell state; 39 aux_input (optional, shaped like the input with aux_input_size
features); 40-43 forward and 44-47 backward aux input-to-{input, forget, cell, output} weights
[units, aux_input_size] (optional); 48 activation; 49 cell_clip; 50 proj_clip; 51 merge_outputs
(BOOL); 52 time_major (BOOL); 53-56 forward and 57-60 backward layer-norm weights (optional).
All tensors TENSOR_FLOAT32 with FLOAT32 clips, or TENSOR_FLOAT16 with FLOAT16 clips (computed in
float32, rounded at the end). Each cell's optional parts (CIFG, peepholes, projection, layer
norm) follow LSTM's rules; the arithmetic of one step is `_lstm_cell.step` (or, for a direction
with constant weights and no layer norm, the compiled cell of `_lstm_native`).

Linking: without aux_input both cells read the input; with aux_input and aux weights
(cross-linking) each gate also adds aux_input·aux_weights^T; with aux_input but no aux weights
(parallel linking, HAL 1.3) the backward cell reads aux_input instead of the input. The forward
cell runs t = 0..T-1 and the backward cell t = T-1..0 from their initial states.

Outputs: 0 forward output [.., fw_output_size], or with merge_outputs both outputs concatenated
(forward first); 1 backward output (absent with merge_outputs); then optionally (HAL 1.3) the last
forward output and cell states and the last backward output and cell states: 1, 2, 5 or 6 outputs.
Optional inputs may be NO_VALUE operands or request inputs without a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from driver.ops import _lstm_native
from driver.ops._base import ArgInfo, Run, expect_type, register
from driver.ops._lstm_cell import (
    LstmConfig,
    Weights,
    check_prepare_shapes,
    input_part,
    pack_weights,
    parse_config,
    step,
)
from driver.ops._params import bool_param
from driver.ops._typed import FLOAT_TENSORS, NP_DTYPE, SCALAR_OF, op_failed
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "BIDIRECTIONAL_SEQUENCE_LSTM"
T = OperandType
F32 = np.float32
FW_W, BW_W = tuple(range(1, 18)), tuple(range(18, 35))
FW_H, FW_C, BW_H, BW_C = 35, 36, 37, 38
AUX = 39
FW_AUX, BW_AUX = (40, 41, 42, 43), (44, 45, 46, 47)
ACT, CELL_CLIP, PROJ_CLIP, MERGE, TIME_MAJOR = 48, 49, 50, 51, 52
FW_LN, BW_LN = (53, 54, 55, 56), (57, 58, 59, 60)
OPTIONAL = (
    1,
    5,
    9,
    10,
    11,
    12,
    16,
    17,
    18,
    22,
    26,
    27,
    28,
    29,
    33,
    34,
    AUX,
    *FW_AUX,
    *BW_AUX,
    *FW_LN,
    *BW_LN,
)
TENSORS = (*range(0, 48), *FW_LN, *BW_LN)


def _as_f32(arg: ArgInfo) -> ArgInfo:
    """A float16 operand described as its float32 twin (the LSTM cell helpers check for float32)."""
    if arg.type == T.TENSOR_FLOAT16:
        value = None if arg.value is None else np.asarray(arg.value, dtype=F32)
        return replace(arg, type=int(T.TENSOR_FLOAT32), value=value)
    if arg.type == T.FLOAT16:
        return replace(arg, type=int(T.FLOAT32))
    return arg


def _cell_operands(ins: Sequence[ArgInfo], first: ArgInfo, weights: tuple, h: int, c: int, ln: tuple) -> list:
    """One direction's operands in LSTM's numbering: input, 17 weights, states, activation, clips, layer norm."""
    return [
        first,
        *(ins[k] for k in weights),
        ins[h],
        ins[c],
        ins[ACT],
        ins[CELL_CLIP],
        ins[PROJ_CLIP],
        *(ins[k] for k in ln),
    ]


@dataclass(frozen=True, slots=True)
class Cell:
    """One direction: its LSTM configuration, operand indexes in this op, and constant packed weights."""

    cfg: LstmConfig
    operands: tuple[int, ...]  # this op's operand index for each LSTM operand index (-1 for the input)
    aux: tuple[int, ...]  # aux weight operands per packed gate (cross-linking), else ()
    packed: Weights | None


def _cell(ins: Sequence[ArgInfo], side: str, first: int, linking: str) -> Cell:
    weights, h, c, ln, aux = (
        (FW_W, FW_H, FW_C, FW_LN, FW_AUX) if side == "forward" else (BW_W, BW_H, BW_C, BW_LN, BW_AUX)
    )
    operands = (first, *weights, h, c, ACT, CELL_CLIP, PROJ_CLIP, *ln)
    cell_ins = _cell_operands(ins, ins[first], weights, h, c, ln)
    label = f"{NAME} ({side} cell, operands numbered as LSTM's)"
    cfg = parse_config(label, cell_ins, 23)
    aux_used: tuple[int, ...] = ()
    if linking == "cross":
        aux_used = aux[1:] if cfg.cifg else aux
        for k in aux_used:
            if ins[k].omitted:
                raise invalid(f"{NAME}: input {k} ({side} aux weights) is required with cross-linking")
        if cfg.cifg and not ins[aux[0]].omitted:
            raise invalid(
                f"{NAME}: input {aux[0]} ({side} aux input-to-input weights) must be omitted with CIFG"
            )
    consts = [a.value for a in cell_ins]
    needed = [k for k in cfg.tensor_shapes(0) if k not in (18, 19)]
    packed = pack_weights(cfg, consts) if all(consts[k] is not None for k in needed) else None
    return Cell(cfg, operands, aux_used, packed)


def _linking(ins: Sequence[ArgInfo]) -> str:
    has_aux = not ins[AUX].omitted
    weights = [not ins[k].omitted for k in (*FW_AUX, *BW_AUX)]
    if not has_aux:
        if any(weights):
            raise invalid(f"{NAME}: aux weights are given but input {AUX} (aux_input) is omitted")
        return "none"
    return "cross" if any(weights) else "parallel"


def _check_types(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> int:
    expect_type(NAME, "input 0 (input)", ins[0], *FLOAT_TENSORS)
    ft = T(ins[0].type)
    for k in TENSORS:
        if not ins[k].omitted:
            expect_type(NAME, f"input {k}", ins[k], ft)
    for k in (CELL_CLIP, PROJ_CLIP):
        expect_type(NAME, f"input {k}", ins[k], SCALAR_OF[ft])
    for i, o in enumerate(outs):
        expect_type(NAME, f"output {i}", o, ft)
    return ft


class _Plan:
    """The cells for one pattern of present optional inputs."""

    def __init__(self, ins: Sequence[ArgInfo]) -> None:
        f32 = [_as_f32(a) for a in ins]
        self.linking = _linking(f32)
        self.fw = _cell(f32, "forward", 0, self.linking)
        self.bw = _cell(f32, "backward", AUX if self.linking == "parallel" else 0, self.linking)
        # The compiled cell of each direction with constant weights and no layer norm.
        self.fw_fused = _lstm_native.fused_cell(self.fw.cfg, self.fw.packed, False)
        self.bw_fused = _lstm_native.fused_cell(self.bw.cfg, self.bw.packed, False)


def _run_cell(
    cell: Cell,
    args: Sequence[Any],
    x: np.ndarray,
    aux: np.ndarray | None,
    reverse: bool,
    fused: _lstm_native.FusedCell | None = None,
):
    """(outputs [T, B, m], last h, last c) of one direction over time-major x (the steps in the
    compiled cell `fused` when given)."""
    cfg = cell.cfg
    values = [None if k < 0 else args[k] for k in cell.operands]
    w = cell.packed if cell.packed is not None else pack_weights(cfg, [_f32(v) for v in values])
    steps, batch = x.shape[:2]
    if x.shape[2] != cfg.input_size:
        raise op_failed(
            f"{NAME}: a cell input has {x.shape[2]} features, its weights expect {cfg.input_size}"
        )
    part = input_part(cfg, w, x.reshape(-1, cfg.input_size).astype(F32))
    if cell.aux:
        if aux is None:
            raise op_failed(f"{NAME}: cross-linking needs input {AUX} (aux_input)")
        w_aux = np.concatenate([np.asarray(args[k], F32) for k in cell.aux], axis=0)
        if w_aux.shape != (cfg.gates * cfg.num_units, aux.shape[2]):
            raise op_failed(f"{NAME}: aux weights {list(w_aux.shape)} do not fit aux_input {list(aux.shape)}")
        part = part + aux.reshape(-1, aux.shape[2]).astype(F32) @ w_aux.T
    part = part.reshape(steps, batch, -1)
    h, c = _f32(args[cell.operands[18]]), _f32(args[cell.operands[19]])
    if h.shape != (batch, cfg.output_size) or c.shape != (batch, cfg.num_units):
        raise op_failed(
            f"{NAME}: states {list(h.shape)} and {list(c.shape)} do not fit batch {batch} and the weights"
        )
    out = np.empty((steps, batch, cfg.output_size), dtype=F32)
    if fused is not None and steps and batch:
        h, c = fused.sequence(part, out, h, c, reverse)
        return out, h, c
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        h, c, _ = step(cfg, w, part[t], h, c)
        out[t] = h
    return out, np.array(h, F32), np.array(c, F32)


def _f32(v: Any) -> Any:
    return None if v is None else np.asarray(v, dtype=F32)


@register(OperationType.BIDIRECTIONAL_SEQUENCE_LSTM)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    if len(ins) != 61:
        raise invalid(f"{NAME}: expected 61 inputs, got {len(ins)}")
    ft = _check_types(ins, outs)
    merge = bool_param(NAME, "input 51 (merge_outputs)", ins, MERGE)
    time_major = bool_param(NAME, "input 52 (time_major)", ins, TIME_MAJOR)
    allowed = (1, 5) if merge else (2, 6)
    if len(outs) not in allowed:
        raise invalid(
            f"{NAME}: expected {' or '.join(map(str, allowed))} outputs with merge_outputs={merge}, got {len(outs)}"
        )
    plans: dict[tuple[int, ...], _Plan] = {(): _Plan(ins)}
    base = plans[()]
    batch = 0
    if ins[0].shape and len(ins[0].shape) == 3:
        batch = int(ins[0].shape[1] if time_major else ins[0].shape[0])
    for cell, side in ((base.fw, "forward"), (base.bw, "backward")):
        cell_ins = [_as_f32(ins[0] if k < 0 else ins[k]) for k in cell.operands]
        check_prepare_shapes(f"{NAME} ({side} cell, operands numbered as LSTM's)", cell_ins, cell.cfg, batch)
    dtype = NP_DTYPE[ft]
    with_state = len(outs) > 2

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        missing = tuple(k for k in OPTIONAL if args[k] is None and not ins[k].omitted)
        if missing not in plans:
            plans[missing] = _Plan(
                [replace(a, omitted=True) if k in missing else a for k, a in enumerate(ins)]
            )
        plan = plans[missing]
        x = np.asarray(args[0])
        if x.ndim != 3:
            raise op_failed(f"{NAME}: input 0 has shape {list(x.shape)}, expected rank 3")
        xt = x if time_major else x.swapaxes(0, 1)
        aux = None if plan.linking == "none" else np.asarray(args[AUX])
        at = None if aux is None else (aux if time_major else aux.swapaxes(0, 1))
        if at is not None and (at.ndim != 3 or at.shape[:2] != xt.shape[:2]):
            raise op_failed(
                f"{NAME}: aux_input {list(at.shape)} and input {list(x.shape)} differ in time or batch"
            )
        cross = at if plan.linking == "cross" else None
        fw, fw_h, fw_c = _run_cell(plan.fw, args, xt, cross, False, plan.fw_fused)
        bw_x = at if at is not None and plan.linking == "parallel" else xt
        bw, bw_h, bw_c = _run_cell(plan.bw, args, bw_x, cross, True, plan.bw_fused)
        ys = [np.concatenate([fw, bw], axis=2)] if merge else [fw, bw]
        ys = [y if time_major else y.swapaxes(0, 1) for y in ys]
        if with_state:
            ys += [fw_h, fw_c, bw_h, bw_c]
        return [np.ascontiguousarray(y, dtype=dtype) for y in ys]

    return run
