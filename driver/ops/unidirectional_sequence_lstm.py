"""UNIDIRECTIONAL_SEQUENCE_LSTM: an LSTM run over every time step of a sequence (NNAPI HAL 1.2-1.3, float32 and float16).

Inputs (24, or 28 with the layer-norm weights 24..27): 0 input [max_time, batch, input_size] when
time_major, else [batch, max_time, input_size]; 1..22 as LSTM (see `_lstm_cell`); 23 time_major BOOL.
Outputs: 0 output [max_time, batch, output_size] (batch-major when not time_major), and since
HAL 1.3 optionally 1 output_state_out [batch, output_size] and 2 cell_state_out [batch, num_units],
the states after the last step (the initial states when max_time is 0).

The input part of every gate for all steps is one product ([max_time * batch, input_size] times the
packed input weights); each step then adds one whole-batch product with the recurrent weights.
max_time may be unknown (0) at prepare; it is taken from the run-time input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _lstm_native
from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._lstm_cell import (
    C_IN,
    H_IN,
    LstmConfig,
    Weights,
    check_declared,
    check_prepare_shapes,
    check_run_shapes,
    input_part,
    pack_weights,
    parse_config,
    prepacked,
    runtime_operands,
    step,
)
from driver.ops._params import F32, bool_param, float_outputs
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "UNIDIRECTIONAL_SEQUENCE_LSTM"
TIME_MAJOR = 23
LN_FIRST = 24


def _input_dims(ins: Sequence[ArgInfo], cfg: LstmConfig, time_major: bool) -> tuple[int, int]:
    """(max_time, batch) from the input's declared shape, 0 where unknown."""
    shape = ins[0].shape
    check_declared(NAME, "input 0 (input)", shape, (0, 0, cfg.input_size))
    if not shape:
        return 0, 0
    t, b = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    return int(t), int(b)


def _check_outputs(outs: Sequence[ArgInfo], cfg: LstmConfig, time_major: bool, t: int, b: int) -> None:
    float_outputs(NAME, outs)
    m = cfg.output_size
    expected = ((t, b, m) if time_major else (b, t, m), (b, m), (b, cfg.num_units))
    labels = ("output", "output_state_out", "cell_state_out")
    for i, out in enumerate(outs):
        check_declared(NAME, f"output {i} ({labels[i]})", out.shape, expected[i])


def _time_major_view(a: np.ndarray, time_major: bool) -> np.ndarray:
    """`a` as a [max_time, batch, ...] view (no copy)."""
    return a if time_major else a.swapaxes(0, 1)


def _sequence(
    cfg: LstmConfig,
    w: Weights,
    x: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    time_major: bool,
    fused: _lstm_native.FusedCell | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output in the input's layout, last h, last c): one input GEMM, then one step per time index
    (in the fused cell when there is one)."""
    x_part = input_part(cfg, w, x.reshape(-1, cfg.input_size))
    x_part = x_part.reshape(*x.shape[:2], cfg.gates * cfg.num_units)
    out = np.empty((*x.shape[:2], cfg.output_size), dtype=F32)
    x_steps, out_steps = _time_major_view(x_part, time_major), _time_major_view(out, time_major)
    if fused is not None and len(x_steps) and x_steps.shape[1]:
        h, c = fused.sequence(x_steps, out_steps, h, c)
        return out, h, c
    for t in range(len(x_steps)):
        h, c, _ = step(cfg, w, x_steps[t], h, c)
        out_steps[t] = h
    return out, np.array(h, dtype=F32), np.array(c, dtype=F32)


@register(OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (24, 28), outs, len(outs))
    if len(outs) not in (1, 3):
        raise invalid(f"{NAME}: expected 1 or 3 outputs, got {len(outs)}")
    cfg = parse_config(NAME, ins, LN_FIRST)
    time_major = bool_param(NAME, "time_major", ins, TIME_MAJOR)
    t, batch = _input_dims(ins, cfg, time_major)
    check_prepare_shapes(NAME, ins, cfg, batch)
    _check_outputs(outs, cfg, time_major, t, batch)
    packed = prepacked(ins, cfg)
    runtime = runtime_operands(ins, cfg)
    fused = _lstm_native.fused_cell(cfg, packed, False)
    n_out = len(outs)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        if x.ndim != 3 or x.shape[2] != cfg.input_size:
            raise invalid(f"{NAME}: input has shape {x.shape}, expected rank 3 ending in {cfg.input_size}")
        check_run_shapes(NAME, cfg, args, runtime, x.shape[1 if time_major else 0])
        w = packed if packed is not None else pack_weights(cfg, args)
        out, h, c = _sequence(cfg, w, x, args[H_IN], args[C_IN], time_major, fused)
        return [out, h, c][:n_out]

    return run
