"""The basic RNN cell shared by RNN, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN.

One step, for a batch: h' = act(x·W^T + aux·W_aux^T + h·R^T + b), with `act` the activation by
TFLite's codes, as the reference implementation's activation functor takes them: 0 NONE, 1 RELU,
2 RELU1, 3 RELU6, 4 TANH, 6 SIGMOID (TFLite's RNN layers default to TANH, which its NNAPI delegate
passes on). TENSOR_FLOAT16 operands are computed in float32 and rounded at the end
of every step (the state that feeds the next step is the float16 value, as in NNAPI's kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._activation import relu1
from driver.ops._base import ArgInfo, expect_type
from driver.ops._lstm_cell import ACTIVATIONS as _LSTM_ACTIVATIONS
from driver.ops._params import int_param
from driver.ops._typed import FLOAT_TENSORS, op_failed
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid


def float_type(name: str, ins: Sequence[ArgInfo], tensors: Sequence[int], outs: Sequence[ArgInfo]) -> int:
    """The common tensor type (TENSOR_FLOAT32 or TENSOR_FLOAT16) of every present tensor operand."""
    first = ins[0]
    expect_type(name, "input 0", first, *FLOAT_TENSORS)
    for k in tensors:
        if not ins[k].omitted:
            expect_type(name, f"input {k}", ins[k], OperandType(first.type))
    for i, o in enumerate(outs):
        expect_type(name, f"output {i}", o, OperandType(first.type))
    return first.type


# The recurrent activations by code: the LSTMs' (0 NONE, 1 RELU, 3 RELU6, 4 TANH, 6 SIGMOID) and the
# FuseCode RELU1 (2) the RNN's documentation names.
ACTIVATIONS = {**_LSTM_ACTIVATIONS, 2: relu1}
ACTIVATION_LABELS = "0 (none), 1 (relu), 2 (relu1), 3 (relu6), 4 (tanh), 6 (sigmoid)"


def activation(name: str, ins: Sequence[ArgInfo], index: int) -> int:
    """The constant recurrent activation code at input `index`."""
    code = int_param(name, "fused activation", ins, index)
    if code not in ACTIVATIONS:
        raise invalid(f"{name}: fused activation is {code}, expected one of {ACTIVATION_LABELS}")
    return code


def step(
    x: np.ndarray,
    h: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray,
    act: int,
    aux: np.ndarray | None = None,
    w_aux: np.ndarray | None = None,
) -> np.ndarray:
    """One RNN step in float32: act(x·W^T + aux·W_aux^T + h·R^T + b), shape [batch, num_units]."""
    y = x.astype(np.float32) @ w.astype(np.float32).T
    if aux is not None and w_aux is not None:
        y += aux.astype(np.float32) @ w_aux.astype(np.float32).T
    y += h.astype(np.float32) @ r.astype(np.float32).T
    y += b.astype(np.float32)
    return np.asarray(ACTIVATIONS[act](y), np.float32)


def check_shape(name: str, what: str, arr: Any, expected: tuple[int, ...]) -> None:
    """A run-time argument must have exactly `expected` (a 0 in `expected` matches any size)."""
    shape = tuple(np.shape(arr))
    if len(shape) != len(expected) or any(e and s != e for s, e in zip(shape, expected, strict=True)):
        want = "[" + ", ".join(str(e) if e else "?" for e in expected) + "]"
        raise op_failed(f"{name}: {what} has shape {list(shape)}, expected {want}")


def declared_dims(name: str, what: str, arg: ArgInfo, rank: int) -> tuple[int, ...]:
    """The declared dimensions of a tensor of fixed `rank` (zeros when unknown)."""
    shape = tuple(arg.value.shape) if arg.value is not None else tuple(arg.shape)
    if not shape:
        return (0,) * rank
    if len(shape) != rank:
        raise invalid(f"{name}: {what} has rank {len(shape)}, expected {rank}")
    return shape


def unify(name: str, what: str, *sizes: tuple[str, int]) -> int:
    """The one size several declared dimensions must share (0 = unknown); a mismatch is invalid."""
    known = {s for _, s in sizes if s}
    if len(known) > 1:
        listed = ", ".join(f"{label} {s}" for label, s in sizes if s)
        raise invalid(f"{name}: {what} disagrees: {listed}")
    return known.pop() if known else 0


def cell_dims(name: str, ins: Sequence[ArgInfo], state: str) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Declared dims of the weights (input 1) and the state (input 4, called `state`), and num_units.

    num_units is unified over the weights rows, both recurrent_weights dims (input 2),
    the bias size (input 3) and the state columns.
    """
    w = declared_dims(name, "input 1 (weights)", ins[1], 2)
    r = declared_dims(name, "input 2 (recurrent_weights)", ins[2], 2)
    b = declared_dims(name, "input 3 (bias)", ins[3], 1)
    h = declared_dims(name, f"input 4 ({state})", ins[4], 2)
    units = unify(
        name,
        "num_units",
        ("weights rows", w[0]),
        ("recurrent_weights rows", r[0]),
        ("recurrent_weights columns", r[1]),
        ("bias size", b[0]),
        (f"{state} columns", h[1]),
    )
    return w, h, units


def check_cell(name: str, state: str, r: Any, b: Any, h: Any, units: int, batch: int) -> None:
    """Check the actual recurrent_weights [units, units], bias [units] and state [batch, units]."""
    check_shape(name, "input 2 (recurrent_weights)", r, (units, units))
    check_shape(name, "input 3 (bias)", b, (units,))
    check_shape(name, f"input 4 ({state})", h, (batch, units))
