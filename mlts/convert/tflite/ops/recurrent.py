"""Recurrent operators: LSTM, the sequence LSTMs and RNNs, RNN and SVDF, float32 as the delegate maps them.

The inputs keep TFLite's order, which is NNAPI's; optional inputs TFLite leaves out are NNAPI's
omitted operands. The state tensors are TFLite variables: they are model inputs here (the caller
feeds them, zeros at the start). LSTM, RNN and SVDF also write their next state, which becomes a
model output (`NAME:next`), as the delegate adds it: NNAPI's LSTM outputs are the scratch buffer,
the output state, the cell state and the output; RNN's and SVDF's the state and the output. The
sequence operators (UNIDIRECTIONAL_SEQUENCE_LSTM/RNN, BIDIRECTIONAL_SEQUENCE_LSTM) give only their
outputs, as the delegate maps them. Recurrent activations are NNAPI's recurrent codes (NONE, RELU,
RELU6, TANH, SIGMOID). A float LSTM with 8-bit weights ("hybrid") DEQUANTIZEs them first; the int8
LSTM and the basic (uint8) LSTM kernel are NNAPI's QUANTIZED_LSTM and QUANTIZED_16BIT_LSTM
(mlts.convert.tflite.ops.quantized_lstm).

SVDF's state has TFLite's shape but NNAPI's meaning: TFLite shifts the memory before it writes the
newest activation, NNAPI after, so NNAPI's state is TFLite's shifted one slot towards the oldest
with the last slot 0. Both start from zeros and agree on every output; the state the model gives
back is NNAPI's (the delegate passes the tensor as is and carries NNAPI's state between calls).
"""

from __future__ import annotations

import numpy as np

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import SYMM, Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import QUANT8, expect_type
from mlts.convert.tflite.ops.quantized_lstm import basic_lstm, integer_lstm
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType
T = OperandType
RECURRENT_ACTIVATIONS = {0: "NONE", 1: "RELU", 3: "RELU6", 4: "TANH", 6: "SIGMOID"}


def _activation(g: Graph) -> int:
    code = int(g.option("fused_activation_function", 0) or 0)
    if code not in RECURRENT_ACTIVATIONS:
        name = schema.ACTIVATION_NAMES.get(code, str(code))
        raise g.refuse(
            f"activation {name} is not a recurrent activation NNAPI defines (NONE, RELU, RELU6, TANH, SIGMOID)"
        )
    return code


def _input(g: Graph, k: int, hybrid: bool) -> int:
    """Operand of input k: omitted when absent, DEQUANTIZEd 8-bit weights for a hybrid operator."""
    if not g.has_input(k):
        return g.omitted(T.TENSOR_FLOAT32)
    index = g.input(k)
    t = g.tensor(index)
    if hybrid and t.type in QUANT8:
        if g.value(index) is None:
            raise g.refuse(f"its 8-bit weights ({t.describe()}) are computed at run time")
        q = g.operand(index, SYMM)
        out = g.temp(T.TENSOR_FLOAT32, g.shape(index))
        g.emit(Op.DEQUANTIZE, [q], [out])
        return out
    return g.operand(index)


def _float_only(g: Graph, what: str) -> None:
    expect_type(g, 0, (schema.FLOAT32,))
    for k in range(1, len(g.op.inputs)):  # type: ignore[union-attr]
        if g.has_input(k) and g.tensor(g.input(k)).type in QUANT8:
            raise g.refuse(
                f"its 8-bit weights make it a hybrid {what}, which the NNAPI delegate does not map"
            )


def _state_output(g: Graph, state_input: int) -> int:
    """A temporary holding the next value of variable `state_input` (a model output)."""
    operand = g.temp(T.TENSOR_FLOAT32, g.shape(state_input))
    g.state_outputs.append((state_input, operand))
    return operand


def _check_state(g: Graph, k: int) -> int:
    index = g.input(k)
    if not g.tensor(index).is_variable:
        raise g.refuse(f"its state (input {k}) is not a variable tensor")
    return index


@register("RNN", nnapi="RNN", max_version=1, note="the next state is an extra model output")
def rnn(g: Graph, op: Operator) -> None:
    if len(op.inputs) != 5:
        raise g.refuse(f"it has {len(op.inputs)} inputs; the NNAPI delegate maps RNN with 5")
    _float_only(g, "RNN")
    state = _check_state(g, 4)
    inputs = [g.operand(g.input(k)) for k in range(5)] + [g.int32(_activation(g))]
    g.emit(Op.RNN, inputs, [_state_output(g, state), g.new_operand(g.output(0))])


@register(
    "UNIDIRECTIONAL_SEQUENCE_RNN", nnapi="UNIDIRECTIONAL_SEQUENCE_RNN", max_version=1, note="time_major"
)
def sequence_rnn(g: Graph, op: Operator) -> None:
    _float_only(g, "UNIDIRECTIONAL_SEQUENCE_RNN")
    _check_state(g, 4)
    inputs = [g.operand(g.input(k)) for k in range(5)]
    params = [g.int32(_activation(g)), g.int32(1 if g.option("time_major", False) else 0)]
    g.emit(Op.UNIDIRECTIONAL_SEQUENCE_RNN, inputs + params, [g.new_operand(g.output(0))])


@register("SVDF", nnapi="SVDF", max_version=1, note="optional bias; the next state is an extra model output")
def svdf(g: Graph, op: Operator) -> None:
    if len(op.inputs) != 5:
        raise g.refuse(f"it has {len(op.inputs)} inputs; the NNAPI delegate maps SVDF with 5")
    _float_only(g, "SVDF")
    state = _check_state(g, 4)
    inputs = [g.operand(g.input(k)) for k in range(3)] + [_input(g, 3, False), g.operand(state)]
    params = [g.int32(int(g.option("rank", 1))), g.int32(_activation(g))]
    g.emit(Op.SVDF, inputs + params, [_state_output(g, state), g.new_operand(g.output(0))])


def _lstm_common(g: Graph, op: Operator, what: str) -> bool:
    """Checks shared by the LSTMs; True for a hybrid (float input, 8-bit weights) operator."""
    if len(op.inputs) not in (20, 24):
        raise g.refuse(
            f"it has {len(op.inputs)} inputs; the NNAPI delegate maps the full {what} kernel (20 or 24)"
        )
    x = g.tensor(g.input(0))
    if x.type == schema.INT8:
        raise g.refuse(
            f"a fully quantized (int8) {what}: TFLite's NNAPI delegate maps NNAPI's QUANTIZED_LSTM for the LSTM "
            "operator only"
        )
    expect_type(g, 0, (schema.FLOAT32,))
    weights = g.tensor(g.input(4))
    return weights.type in QUANT8


def _clips(g: Graph) -> list[int]:
    cell, proj = float(g.option("cell_clip", 0.0) or 0.0), float(g.option("proj_clip", 0.0) or 0.0)
    if cell < 0 or proj < 0 or not np.isfinite(cell) or not np.isfinite(proj):
        raise g.refuse(f"clips {cell}, {proj} must be finite and >= 0")
    return [g.float32(cell), g.float32(proj)]


def _scratch_units(g: Graph) -> int:
    cifg = not g.has_input(1)  # no input-to-input weights: coupled input and forget gates
    units = g.tensor(g.input(4)).shape[0]
    return units * (3 if cifg else 4)


@register(
    "LSTM",
    nnapi=("LSTM", "QUANTIZED_LSTM", "QUANTIZED_16BIT_LSTM"),
    max_version=3,
    note="full kernel: float (hybrid weights dequantized) LSTM, int8 QUANTIZED_LSTM with the 5 intermediates' "
    "scales; basic kernel: QUANTIZED_16BIT_LSTM; next states are extra model outputs",
)
def lstm(g: Graph, op: Operator) -> None:
    if len(op.inputs) == 5:
        basic_lstm(g, op)
        return
    if len(op.inputs) in (20, 24) and g.tensor(g.input(0)).type == schema.INT8:
        integer_lstm(g, op)
        return
    hybrid = _lstm_common(g, op, "LSTM")
    out_state, cell_state = _check_state(g, 18), _check_state(g, 19)
    inputs = [g.operand(g.input(0))] + [_input(g, k, hybrid) for k in range(1, 18)]
    inputs += [g.operand(out_state), g.operand(cell_state), g.int32(_activation(g)), *_clips(g)]
    if len(op.inputs) == 24:
        inputs += [_input(g, k, hybrid) for k in range(20, 24)]
    batch = g.shape(g.input(0))[0]
    scratch = g.temp(T.TENSOR_FLOAT32, (batch, _scratch_units(g)))
    outputs = [scratch, _state_output(g, out_state), _state_output(g, cell_state), g.new_operand(g.output(0))]
    g.emit(Op.LSTM, inputs, outputs)


@register(
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    nnapi="UNIDIRECTIONAL_SEQUENCE_LSTM",
    max_version=2,
    note="float; time_major; layer normalization weights when given",
)
def sequence_lstm(g: Graph, op: Operator) -> None:
    if _lstm_common(g, op, "UNIDIRECTIONAL_SEQUENCE_LSTM"):
        raise g.refuse("its 8-bit weights make it hybrid, which the NNAPI delegate does not map")
    if g.option("diagonal_recurrent_tensors", False):
        raise g.refuse("diagonal recurrent weights have no NNAPI form")
    inputs = [_input(g, k, False) for k in range(20)]
    inputs += [g.int32(_activation(g)), *_clips(g), g.bool(bool(g.option("time_major", False)))]
    inputs += [_input(g, k, False) if len(op.inputs) == 24 else g.omitted() for k in range(20, 24)]
    g.emit(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, inputs, [g.new_operand(g.output(0))])


@register(
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    nnapi="BIDIRECTIONAL_SEQUENCE_LSTM",
    max_version=1,
    note="float; merge_outputs, time_major; no layer normalization (TFLite has none)",
)
def bidirectional_lstm(g: Graph, op: Operator) -> None:
    if len(op.inputs) != 48:
        raise g.refuse(f"it has {len(op.inputs)} inputs; TFLite's BIDIRECTIONAL_SEQUENCE_LSTM has 48")
    _float_only(g, "BIDIRECTIONAL_SEQUENCE_LSTM")
    merge = bool(g.option("merge_outputs", False))
    if len(op.outputs) != (1 if merge else 2):
        raise g.refuse(
            f"it has {len(op.outputs)} outputs; with merge_outputs={merge} NNAPI gives {1 if merge else 2}"
        )
    inputs = [_input(g, k, False) for k in range(48)]
    inputs += [g.int32(_activation(g)), *_clips(g), g.bool(merge), g.bool(bool(g.option("time_major", True)))]
    inputs += [g.omitted() for _ in range(8)]
    g.emit(Op.BIDIRECTIONAL_SEQUENCE_LSTM, inputs, [g.new_operand(i) for i in op.outputs])
