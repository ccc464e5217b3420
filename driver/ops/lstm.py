"""LSTM: one step of a long short-term memory cell over a batch (NNAPI HAL 1.0-1.3, float32 and float16).

Inputs (23, or 27 with the layer-norm weights 23..26): 0 input [batch, input_size], 1..17 weights,
biases, peepholes and projection (see `_lstm_cell`), 18 output_state_in [batch, output_size],
19 cell_state_in [batch, num_units], 20 activation, 21 cell_clip, 22 proj_clip. Outputs:
0 scratch_buffer [batch, num_units * (3 with CIFG, else 4)], 1 output_state_out, 2 cell_state_out,
3 output (= output_state_out). The step's arithmetic is `_lstm_cell.step`.

NNAPI leaves the scratch buffer's contents unspecified; here it holds the gate activations of the
step, per batch row in the order i, f, g, o (no i under CIFG).

With the fused cell (constant weights, no layer norm) and no projection the step also binds into a
run of compiled calls (driver.bound_steps): the cell's one call and the copy of h' into output 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _lstm_native
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._lstm_cell import (
    C_IN,
    H_IN,
    INPUT_GATE,
    LstmConfig,
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
from driver.ops._params import float_outputs
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "LSTM"
LN_FIRST = 23


def _batch(ins: Sequence[ArgInfo], cfg: LstmConfig) -> int:
    """The batch size from the input's declared [batch, input_size] (0 when unknown)."""
    check_declared(NAME, "input 0 (input)", ins[0].shape, (0, cfg.input_size))
    return int(ins[0].shape[0]) if ins[0].shape else 0


def _cifg_undecided(ins: Sequence[ArgInfo]) -> bool:
    """The input-gate operands are all model inputs, so a request may still leave them out (CIFG)."""
    return all(ins[k].value is None and not ins[k].omitted for k in INPUT_GATE)


def _scratch_gates(outs: Sequence[ArgInfo], ins: Sequence[ArgInfo], cfg: LstmConfig) -> int:
    """How many gates the declared scratch buffer holds: the config's, or 3 when it is sized for a CIFG
    that only the request can choose (input-gate operands left without a value)."""
    shape = outs[0].shape
    if not cfg.cifg and len(shape) == 2 and shape[1] == 3 * cfg.num_units and _cifg_undecided(ins):
        return 3
    return cfg.gates


def _check_outputs(outs: Sequence[ArgInfo], cfg: LstmConfig, batch: int, gates: int) -> None:
    float_outputs(NAME, outs)
    u, m = cfg.num_units, cfg.output_size
    expected = ((batch, u * gates), (batch, m), (batch, u), (batch, m))
    labels = ("scratch_buffer", "output_state_out", "cell_state_out", "output")
    for i, (out, shape, label) in enumerate(zip(outs, expected, labels, strict=True)):
        check_declared(NAME, f"output {i} ({label})", out.shape, shape)


def _run_input(x: np.ndarray, cfg: LstmConfig) -> np.ndarray:
    if x.ndim != 2 or x.shape[1] != cfg.input_size:
        raise invalid(f"{NAME}: input has shape {x.shape}, expected [batch, {cfg.input_size}]")
    return x


@register(OperationType.LSTM)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (23, 27), outs, 4)
    cfg = parse_config(NAME, ins, LN_FIRST)
    batch = _batch(ins, cfg)
    check_prepare_shapes(NAME, ins, cfg, batch)
    gates = _scratch_gates(outs, ins, cfg)
    _check_outputs(outs, cfg, batch, gates)
    packed = prepacked(ins, cfg)
    runtime = runtime_operands(ins, cfg)
    fused = _lstm_native.fused_cell(cfg, packed, True)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        if gates != cfg.gates:
            raise invalid(
                f"{NAME}: output 0 (scratch_buffer) is sized for CIFG ({gates} gates), but the request "
                "gives values for the input-gate operands (inputs 1, 5, 12)"
            )
        x = _run_input(args[0], cfg)
        check_run_shapes(NAME, cfg, args, runtime, len(x))
        if fused is not None:
            h, c, activations = fused.step(x, args[H_IN], args[C_IN])
            return [activations, h, c, h.copy()]
        w = packed if packed is not None else pack_weights(cfg, args)
        h, c, activations = step(cfg, w, input_part(cfg, w, x), args[H_IN], args[C_IN])
        return [activations.reshape(len(x), -1), h, c, h.copy()]

    if fused is None or gates != cfg.gates or cfg.projection:
        return run
    cell = fused

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run`'s fused step for C-contiguous float32 input, output state and cell state
        (driver.bound_steps)."""
        return cell.bind_step(shapes, ptrs)

    return Kernel(run, binding=Binding(bind, (0, H_IN, C_IN)))
