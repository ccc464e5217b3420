"""The 8-bit LSTM kernels as TFLite's NNAPI delegate maps them: QUANTIZED_LSTM and QUANTIZED_16BIT_LSTM.

Fully quantized LSTM (the LSTM operator's full kernel with an int8 input): NNAPI's QUANTIZED_LSTM,
built as the delegate's AddOpsAndTensors does at feature level 4. Its 24 inputs keep TFLite's order,
which is NNAPI's: the input and the previous output (18) as TENSOR_QUANT8_ASYMM_SIGNED, the int8
weights as TENSOR_QUANT8_SYMM, the int16 peephole and layer-norm weights and cell state as
TENSOR_QUANT16_SYMM, the biases as TENSOR_INT32, each with the file's scale; an input TFLite leaves
out is an omitted operand of the type NNAPI expects there (QUANT8_SYMM for the input-gate and
projection weights, INT32 for the biases, QUANT16_SYMM for the rest). Then the cell and projection
clips (FLOAT32) and the quantization of the operator's five intermediate tensors: the scales of the
input, forget, cell and output gates' matmul results (inputs 26-29), then the hidden state's zero
point (INT32) and scale (30, 31). The outputs are the output state and the cell state, which become
the next values of the variable tensors 18 and 19 (extra model outputs `NAME:next`), then the output.

TFLite's own integer LSTM uses the four gate intermediates only with layer normalization; without
it, it computes the gates at the fixed scale 2^-12 whatever the file says, while NNAPI (and the
delegate) take the file's scales: the two agree exactly when the file has 2^-12 there, as TFLite's
quantizer writes for LSTMs without layer normalization.

Basic LSTM kernel (5 inputs: input, previous activation, concatenated weights, concatenated biases,
previous state; uint8 with int16 state): NNAPI's QUANTIZED_16BIT_LSTM, with the delegate's
decomposition (quant_lstm_sup.cc). TFLite's weights [4 * output, columns] stack the gates in the
order input, cell, forget, output; the delegate cuts each gate's rows into its first `output`
columns ("recurrent-to-gate", [output, output]) and the rest ("input-to-gate", [output, input]),
and NNAPI's kernel joins them back in that order, so the product is TFLite's whatever the sizes.
The biases are cut into four [output] vectors. Inputs: input, the input-to-{input, forget, cell,
output} and recurrent-to-* weights (QUANT8_ASYMM, the weights' scale and zero point), the four
biases (INT32, the file's scale), the previous state (input 4, QUANT16_SYMM) and the previous
activation (input 1, QUANT8_ASYMM); outputs: the new state (TFLite's output 1), then the activation
(output 0). TFLite's scratch outputs 2 and 3 have no NNAPI counterpart. The delegate copies the
two outputs back into inputs 1 and 4 after each call (its "feedback loops"); the converted model
takes those as inputs (model inputs, or state inputs when they are variables) and gives the
outputs: a caller feeds them back, as TFLite's own interpreter, which never writes its inputs.
"""

from __future__ import annotations

import numpy as np

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import PLAIN, SYMM, Graph
from mlts.convert.tflite.model import Operator
from mlts.hal.enums import OperandType, OperationType

Op = OperationType
T = OperandType

_QUANT8_WEIGHTS = (1, 2, 3, 4, 5, 6, 7, 8, 16)  # input-to-*, recurrent-to-*, projection
_BIASES = (12, 13, 14, 15, 17)
_INT16 = (9, 10, 11, 19, 20, 21, 22, 23)  # peepholes, cell state, layer-norm weights
_INTERMEDIATES = ("input gate", "forget gate", "cell gate", "output gate", "hidden state")


def _omitted(g: Graph, k: int) -> int:
    """The omitted operand the delegate adds for a left-out input k of the int8 LSTM."""
    if k in (1, 5, 16):
        return g.builder.add_omitted(T.TENSOR_QUANT8_SYMM, (0,), 1.0, 0)
    if k in _BIASES:
        return g.builder.add_omitted(T.TENSOR_INT32, (0,))
    return g.builder.add_omitted(T.TENSOR_QUANT16_SYMM, (0,), 1.0, 0)


def _typed(g: Graph, k: int, code: int, what: str) -> int:
    index = g.input(k)
    t = g.tensor(index)
    if t.type != code:
        raise g.refuse(
            f"its {what} (input {k}, {t.describe()}) is {t.type_name}; NNAPI's QUANTIZED_LSTM takes "
            f"{schema.type_name(code)} there"
        )
    if t.quant is not None and t.quant.per_channel:
        raise g.refuse(
            f"its {what} (input {k}) is quantized per channel; NNAPI's QUANTIZED_LSTM takes one scale per tensor"
        )
    return index


def _intermediate_params(g: Graph, op: Operator) -> list[int]:
    """Inputs 26-31: the four gate scales, then the hidden state's zero point and scale."""
    if len(op.intermediates) != 5:
        raise g.refuse(
            f"it has {len(op.intermediates)} intermediate tensors; NNAPI's QUANTIZED_LSTM needs the 5 whose "
            "quantization gives its gate and hidden state scales"
        )
    params = []
    for k, (index, what) in enumerate(zip(op.intermediates, _INTERMEDIATES, strict=True)):
        q = g.tensor(index).quant
        if q is None or len(q.scales) != 1 or not q.scales[0] > 0 or not np.isfinite(q.scales[0]):
            raise g.refuse(
                f"its {what} intermediate ({g.tensor(index).describe()}) has no single positive quantization scale"
            )
        if k == 4:
            params.append(g.int32(q.zero_point))
        params.append(g.float32(q.scales[0]))
    return params


def _state_output(g: Graph, index: int) -> int:
    """A temporary of the variable tensor's type holding its next value (an extra model output)."""
    kind, scale, zp, _ = g.operand_type(g.tensor(index))
    operand = g.temp(kind, g.shape(index), scale, zp)
    g.state_outputs.append((index, operand))
    return operand


def _clips(g: Graph) -> list[int]:
    cell, proj = float(g.option("cell_clip", 0.0) or 0.0), float(g.option("proj_clip", 0.0) or 0.0)
    if cell < 0 or proj < 0 or not np.isfinite(cell) or not np.isfinite(proj):
        raise g.refuse(f"clips {cell}, {proj} must be finite and >= 0")
    return [g.float32(cell), g.float32(proj)]


def integer_lstm(g: Graph, op: Operator) -> None:
    """The LSTM full kernel with an int8 input as NNAPI's QUANTIZED_LSTM (see the module docstring)."""
    if len(op.inputs) != 24:
        raise g.refuse(
            f"a fully quantized LSTM with {len(op.inputs)} inputs: NNAPI's QUANTIZED_LSTM takes TFLite's "
            "24-input form (the delegate would build an operation NNAPI refuses)"
        )
    if len(op.outputs) != 1:
        raise g.refuse(f"it has {len(op.outputs)} outputs; TFLite's LSTM has 1")
    for k in (18, 19):
        if not g.tensor(g.input(k)).is_variable:
            raise g.refuse(f"its state (input {k}) is not a variable tensor")
    _typed(g, 18, schema.INT8, "previous output")
    _typed(g, 19, schema.INT16, "cell state")
    inputs = []
    for k in range(24):
        if not g.has_input(k):
            inputs.append(_omitted(g, k))
        elif k in (0, 18):
            inputs.append(g.operand(_typed(g, k, schema.INT8, "input" if k == 0 else "previous output")))
        elif k in _QUANT8_WEIGHTS:
            inputs.append(g.operand(_typed(g, k, schema.INT8, "weights"), SYMM))
        elif k in _BIASES:
            inputs.append(g.operand(_typed(g, k, schema.INT32, "bias")))
        else:
            assert k in _INT16
            inputs.append(g.operand(_typed(g, k, schema.INT16, "16-bit weights"), PLAIN))
    inputs += [*_clips(g), *_intermediate_params(g, op)]
    out = g.output(0)
    if g.tensor(out).type != schema.INT8:
        raise g.refuse(f"its output is {g.tensor(out).type_name}; NNAPI's QUANTIZED_LSTM gives INT8")
    outputs = [_state_output(g, g.input(18)), _state_output(g, g.input(19)), g.new_operand(out)]
    g.emit(Op.QUANTIZED_LSTM, inputs, outputs)


# ---------------------------------------------------------------------------- the basic kernel


def _quant(g: Graph, index: int) -> tuple[float, int]:
    q = g.tensor(index).quant
    return (q.scale, q.zero_point) if q is not None else (0.0, 0)


def _expect_quant(g: Graph, index: int, what: str, scale: float, zp: int) -> None:
    got = _quant(g, index)
    if np.float32(got[0]) != np.float32(scale) or got[1] != zp:
        raise g.refuse(
            f"its {what} is quantized with scale {got[0]} and zero point {got[1]}; the NNAPI delegate maps the "
            f"basic LSTM kernel for scale {scale} and zero point {zp}"
        )


def basic_lstm(g: Graph, op: Operator) -> None:
    """TFLite's basic (uint8) LSTM kernel as NNAPI's QUANTIZED_16BIT_LSTM (see the module docstring)."""
    if int(g.option("kernel_type", 0) or 0) != 1:
        raise g.refuse("it has 5 inputs but its kernel_type is not BASIC")
    if len(op.outputs) < 2:
        raise g.refuse(f"it has {len(op.outputs)} outputs; TFLite's basic LSTM kernel has 4")
    x_i, prev_out_i, w_i, b_i, prev_state_i = (g.input(k) for k in range(5))
    out_i, state_i = g.output(0), g.output(1)
    for index, code, what in (
        (x_i, schema.UINT8, "input"),
        (prev_out_i, schema.UINT8, "previous activation"),
        (w_i, schema.UINT8, "weights"),
        (b_i, schema.INT32, "biases"),
        (prev_state_i, schema.INT16, "previous state"),
        (out_i, schema.UINT8, "output"),
        (state_i, schema.INT16, "state output"),
    ):
        if g.tensor(index).type != code:
            raise g.refuse(
                f"its {what} is {g.tensor(index).type_name}; the basic LSTM kernel takes {schema.type_name(code)}"
            )
    # The delegate's Validate: input and output at scale 1/128, zero point 128; the state at 16/32768
    # (its test reads "scale == 16/32768 || zero point == 0"; NNAPI requires both, so both are checked).
    _expect_quant(g, x_i, "input", 1 / 128, 128)
    _expect_quant(g, out_i, "output", 1 / 128, 128)
    _expect_quant(g, prev_out_i, "previous activation", 1 / 128, 128)
    _expect_quant(g, state_i, "state output", 16 / 32768, 0)
    _expect_quant(g, prev_state_i, "previous state", 16 / 32768, 0)
    weights, biases = g.value(w_i), g.value(b_i)
    if weights is None or biases is None:
        raise g.refuse("its weights or biases are computed at run time; the delegate maps constant ones only")
    w, x = g.tensor(w_i), g.tensor(x_i)
    if len(w.shape) != 2 or len(x.shape) != 2 or w.shape[0] % 4:
        raise g.refuse(f"its weights {list(w.shape)} are not [4 * output, input + output] for a rank-2 input")
    units = w.shape[0] // 4
    depth = w.shape[1] - units
    if depth != x.shape[1] or depth < 1 or tuple(g.tensor(b_i).shape) != (4 * units,):
        raise g.refuse(
            f"its weights {list(w.shape)} and biases {list(g.tensor(b_i).shape)} do not fit a {x.shape[1]}-wide "
            f"input and {units} units"
        )
    w_scale, w_zp = _quant(g, w_i)
    if not w_scale > 0:
        raise g.refuse("its weights have no quantization scale > 0")
    b_scale, b_zp = _quant(g, b_i)
    if b_zp != 0 or not np.isclose(b_scale, w_scale / 128, rtol=1e-6, atol=0):
        raise g.refuse(
            f"its biases have scale {b_scale} and zero point {b_zp}; NNAPI's QUANTIZED_16BIT_LSTM requires "
            f"weights scale / 128 = {w_scale / 128} and 0"
        )
    rows = np.asarray(weights, np.uint8).reshape(4, units, units + depth)
    cell_first = (0, 2, 1, 3)  # TFLite's (and the biases') gate blocks: input, cell, forget, output
    gates = ("input", "forget", "cell", "output")

    def block(gate: int, first: bool) -> int:
        part = rows[cell_first[gate], :, :units] if first else rows[cell_first[gate], :, units:]
        return g.builder.add_constant(np.ascontiguousarray(part), T.TENSOR_QUANT8_ASYMM, w_scale, w_zp)

    input_to = [block(k, False) for k in range(len(gates))]
    recurrent_to = [block(k, True) for k in range(len(gates))]
    split = np.asarray(biases, np.int32).reshape(4, units)
    bias_of = [
        g.builder.add_constant(np.ascontiguousarray(split[cell_first[k]]), T.TENSOR_INT32, b_scale, 0)
        for k in range(len(gates))
    ]
    inputs = [
        g.operand(x_i), *input_to, *recurrent_to, *bias_of, g.operand(prev_state_i), g.operand(prev_out_i)
    ]  # fmt: skip
    g.emit(Op.QUANTIZED_16BIT_LSTM, inputs, [g.new_operand(state_i), g.new_operand(out_i)])
