"""ONNX LSTM -> NNAPI LSTM (one step) / UNIDIRECTIONAL_SEQUENCE_LSTM: converted models on the sample driver vs onnxruntime.

Tolerance: |driver - onnxruntime| <= 1e-5 + 1e-5*|onnxruntime|. Both compute in
float32 but in different orders (the driver multiplies packed gate matrices
with NumPy's BLAS, onnxruntime runs its own GEMMs and activation kernels);
over up to 20 recurrent steps of values of order 1 the differences stay near
1e-6, so 1e-5 has margin and still catches a wrong gate, bias or state.

onnxruntime does not implement layout=1: those models are checked against
onnxruntime running the same weights with layout 0 on the transposed inputs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.convert import Conversion, convert
from mlts.hal.enums import OperandLifeTime, OperationType
from tests.convert._util import assert_close, error_of, op_names, run_converted, run_ort
from tests.convert.lstmkit import NAMES, Case, N, _batch_first, _model, lstm_model

ATOL = RTOL = 1e-5


def reference(c: Case) -> list[np.ndarray]:
    """onnxruntime's outputs; for layout 1 from the layout-0 twin, transposed back."""
    if c.layout == 0:
        model, feeds = lstm_model(c)
        return run_ort(model, feeds)
    model, feeds = lstm_model(replace(c, layout=0))
    outs = run_ort(model, feeds)
    # Y [T, 1, B, H] -> [B, T, 1, H]; Y_h, Y_c [1, B, H] -> [B, 1, H].
    return [y.transpose(2, 0, 1, 3) if y.ndim == 4 else _batch_first(y) for y in outs]


def lstm_operations(conv: Conversion) -> list:
    kinds = (OperationType.LSTM, OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM)
    return [op for op in conv.model.main.operations if op.type in kinds]


CASES = {
    "t1_b1_plain": Case(1, 1, 3, 4, bias=False),
    "t1_b2_peep_init": Case(1, 2, 5, 3, peep=True, init="input"),
    "t5_b1": Case(5, 1, 3, 4),
    "t7_b2_peep_init": Case(7, 2, 16, 32, peep=True, init="input"),
    "t20_b1_const_init": Case(20, 1, 40, 64, peep=True, init="const"),
    "t4_b3_no_bias_const_init": Case(4, 3, 6, 8, bias=False, init="const"),
    "seq_lens": Case(6, 2, 4, 5, seq_lens=True, init="input"),
    "seq_lens_t1": Case(1, 2, 4, 5, seq_lens=True),
    "relu": Case(5, 2, 4, 6, act="Relu", init="input", x_scale=8.0),
    "relu_t1": Case(1, 2, 4, 6, act="Relu", init="input", x_scale=8.0),
    "sigmoid_peep": Case(5, 2, 4, 6, act="Sigmoid", peep=True),
    "input_forget": Case(6, 2, 4, 5, input_forget=1),
    "input_forget_peep_init": Case(6, 2, 4, 5, input_forget=1, peep=True, init="input"),
    "input_forget_t1_peep": Case(1, 2, 4, 5, input_forget=1, peep=True, init="input"),
    "layout1_t1": Case(1, 2, 4, 5, layout=1, peep=True, init="input"),
    "layout1_t6": Case(6, 3, 4, 5, layout=1, peep=True, init="input"),
    "layout1_const_init_seq_lens": Case(6, 2, 4, 5, layout=1, init="const", seq_lens=True),
    "opset7": Case(5, 2, 4, 5, opset=7, peep=True, init="input"),
    "opset7_t1": Case(1, 2, 4, 5, opset=7),
    "only_y": Case(5, 2, 4, 5, init="input", outputs=("Y",)),
    "only_y_h": Case(5, 2, 4, 5, init="input", outputs=("Y_h",)),
    "only_y_c": Case(5, 2, 4, 5, peep=True, outputs=("Y_c",)),
    "y_h_and_y_c": Case(5, 2, 4, 5, outputs=("Y_h", "Y_c")),
    "only_y_t1": Case(1, 2, 4, 5, init="input", outputs=("Y",)),
    "only_y_c_t1": Case(1, 2, 4, 5, init="input", outputs=("Y_c",)),
    "layout1_only_y_h": Case(6, 2, 4, 5, layout=1, init="input", outputs=("Y_h",)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lstm_matches_onnxruntime(name: str) -> None:
    c = CASES[name]
    model, feeds = lstm_model(c)
    conv, actual = run_converted(model, feeds)
    expected = reference(c)
    assert len(actual) == len(expected) == len(c.outputs)
    for a, e in zip(actual, expected, strict=True):
        assert_close(a, e, atol=ATOL, rtol=RTOL)
    (op,) = lstm_operations(conv)
    if c.steps == 1:
        assert (op.type, len(op.inputs), len(op.outputs)) == (OperationType.LSTM, 23, 4)
    else:
        states = "Y_h" in c.outputs or "Y_c" in c.outputs
        want = (OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM, 24, 3 if states else 1)
        assert (op.type, len(op.inputs), len(op.outputs)) == want


def _lifetimes(conv: Conversion, op, positions: range | list[int]) -> list[OperandLifeTime]:
    return [OperandLifeTime(conv.model.main.operands[op.inputs[i]].lifetime) for i in positions]


def test_optional_operands_omitted_or_zero() -> None:
    """No peepholes: inputs 9-11 and the projection 16-17 are NO_VALUE; no bias: zero constants 12-15."""
    model, _ = lstm_model(Case(5, 2, 4, 5, bias=False))
    conv = convert(model)
    (op,) = lstm_operations(conv)
    assert set(_lifetimes(conv, op, [9, 10, 11, 16, 17])) == {OperandLifeTime.NO_VALUE}
    assert OperandLifeTime.NO_VALUE not in _lifetimes(conv, op, range(12, 16))


def test_input_forget_is_cifg() -> None:
    """input_forget=1: the input-gate operands (1, 5, 12) and cell_to_input (9) are omitted."""
    model, _ = lstm_model(Case(5, 2, 4, 5, input_forget=1, peep=True))
    conv = convert(model)
    (op,) = lstm_operations(conv)
    assert set(_lifetimes(conv, op, [1, 5, 9, 12])) == {OperandLifeTime.NO_VALUE}
    assert OperandLifeTime.NO_VALUE not in _lifetimes(conv, op, [2, 3, 4, 6, 7, 8, 10, 11, 13, 14, 15])


def test_unused_outputs_emit_no_reshape() -> None:
    """Y and Y_c are named but nothing reads them: one RESHAPE for X, one for Y_h."""
    model, feeds = lstm_model(Case(1, 2, 4, 5, outputs=("Y_h",)))
    model.graph.node[0].output[:] = list(NAMES)
    conv, actual = run_converted(model, feeds)
    assert op_names(conv) == ["RESHAPE", "LSTM", "RESHAPE"]
    assert_close(actual[0], run_ort(model, feeds)[0], atol=ATOL, rtol=RTOL)


def _weights(rng: np.random.Generator, inputs: int, units: int, prefix: str) -> dict[str, np.ndarray]:
    return {
        f"{prefix}W": (rng.standard_normal((1, 4 * units, inputs)) / np.sqrt(inputs)).astype(np.float32),
        f"{prefix}R": (rng.standard_normal((1, 4 * units, units)) / np.sqrt(units)).astype(np.float32),
        f"{prefix}B": (rng.standard_normal((1, 8 * units)) * 0.5).astype(np.float32),
    }


def test_two_layer_stack_squeezes_without_copies() -> None:
    """LSTM -> Squeeze(num_directions) -> LSTM -> Squeeze: the sequence ops' outputs are the squeezed tensors."""
    rng = np.random.default_rng(3)
    inits = {**_weights(rng, 6, 8, "a"), **_weights(rng, 8, 5, "b"), "ax": np.array([1], np.int64)}
    nodes = [
        N("LSTM", ["x", "aW", "aR", "aB"], ["y1"], hidden_size=8),
        N("Squeeze", ["y1", "ax"], ["s1"]),
        N("LSTM", ["s1", "bW", "bR", "bB"], ["y2"], hidden_size=5),
        N("Squeeze", ["y2", "ax"], ["out"]),
    ]
    feeds = {"x": rng.standard_normal((9, 2, 6)).astype(np.float32)}
    model = _model(nodes, feeds, ["out"], inits, 14)
    conv, actual = run_converted(model, feeds)
    assert op_names(conv) == ["UNIDIRECTIONAL_SEQUENCE_LSTM"] * 2
    assert_close(actual[0], run_ort(model, feeds)[0], atol=ATOL, rtol=RTOL)


def test_one_step_stack_with_squeeze_attribute() -> None:
    """Opset 11 (Squeeze axes as an attribute): one-step layers chained through Y and Y_h."""
    rng = np.random.default_rng(4)
    inits = {**_weights(rng, 6, 8, "a"), **_weights(rng, 8, 5, "b")}
    nodes = [
        N("LSTM", ["x", "aW", "aR", "aB"], ["y1"], hidden_size=8),
        N("Squeeze", ["y1"], ["s1"], axes=[1]),
        N("LSTM", ["s1", "bW", "bR", "bB"], ["", "h2"], hidden_size=5),
        N("Squeeze", ["h2"], ["out"], axes=[0]),
    ]
    feeds = {"x": rng.standard_normal((1, 3, 6)).astype(np.float32)}
    model = _model(nodes, feeds, ["out"], inits, 11)
    conv, actual = run_converted(model, feeds)
    assert op_names(conv).count("LSTM") == 2 and op_names(conv)[-1] == "LSTM"
    assert_close(actual[0], run_ort(model, feeds)[0], atol=ATOL, rtol=RTOL)


# ------------------------------------------------------------ refusals


def _with_attrs(c: Case, **extra) -> onnx.ModelProto:
    model, _ = lstm_model(c)
    model.graph.node[0].attribute.extend(helper.make_attribute(k, v) for k, v in extra.items())
    return model


DIRECTION_CASES = {
    "reverse_t5": Case(5, 2, 4, 5, direction="reverse", peep=True, init="input"),
    "reverse_t1": Case(1, 2, 4, 5, direction="reverse", init="const"),
    "bidirectional_t6": Case(6, 2, 4, 5, direction="bidirectional", peep=True, init="input"),
    "bidirectional_const_init": Case(4, 3, 6, 8, direction="bidirectional", init="const"),
    "bidirectional_no_init_only_y": Case(5, 1, 3, 4, direction="bidirectional", outputs=("Y",)),
    "bidirectional_only_states": Case(
        5, 2, 3, 4, direction="bidirectional", init="input", outputs=("Y_h", "Y_c")
    ),
    "bidirectional_layout1": Case(6, 2, 4, 5, direction="bidirectional", layout=1, init="input"),
    "reverse_layout1": Case(6, 3, 4, 5, direction="reverse", layout=1, init="input"),
    "bidirectional_cifg": Case(5, 2, 4, 5, direction="bidirectional", input_forget=1, init="input"),
}


@pytest.mark.parametrize("name", sorted(DIRECTION_CASES))
def test_reverse_and_bidirectional_match_onnxruntime(name: str) -> None:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM per direction; reverse ones read the sequence reversed in time."""
    c = DIRECTION_CASES[name]
    model, feeds = lstm_model(c)
    conv, actual = run_converted(model, feeds)
    expected = reference(c)
    assert len(actual) == len(expected) == len(c.outputs)
    for a, e in zip(actual, expected, strict=True):
        assert_close(a, e, atol=ATOL, rtol=RTOL)
    kinds = [op.type for op in lstm_operations(conv)]
    assert kinds == [OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM] * c.dirs


def test_unknown_direction_is_refused() -> None:
    msg = error_of(_with_attrs(Case(3, 1, 2, 3), direction="sideways"))
    assert msg.startswith("LSTM node 'lstm' has direction 'sideways'; ONNX directions are forward, reverse")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"clip": 1.0}, "has attribute clip; it is not supported (ONNX clips the gate pre-activations"),
        ({"activation_alpha": [0.1]}, "has attribute activation_alpha"),
        ({"hidden_size": 4}, "has hidden_size 4 but W has shape [1, 12, 2]"),
    ],
)
def test_unsupported_attributes_are_refused(extra: dict, fragment: str) -> None:
    model, _ = lstm_model(Case(3, 1, 2, 3))
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name not in extra]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in extra.items()])
    assert fragment in error_of(model)


@pytest.mark.parametrize(
    "acts",
    [
        ["Sigmoid", "Tanh", "Relu"],
        ["Tanh", "Tanh", "Tanh"],
        ["Sigmoid", "LeakyRelu", "LeakyRelu"],
        ["Sigmoid"],
    ],
)
def test_unsupported_activations_are_refused(acts: list[str]) -> None:
    msg = error_of(_with_attrs(Case(3, 1, 2, 3), activations=acts))
    assert msg.startswith(f"LSTM node 'lstm' has activations {acts}; only [Sigmoid, g, g] with g one of Tanh")


def test_run_time_weights_are_refused() -> None:
    model, _ = lstm_model(Case(3, 1, 2, 3))
    w = next(i for i in model.graph.initializer if i.name == "W")
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w.dims)))
    model.graph.initializer.remove(w)
    msg = error_of(model)
    assert msg == (
        "LSTM node 'lstm': W (input weights) 'W' is a graph input, fed at run time; the converter needs "
        "W (input weights) as a constant fixed in the model (an initializer)"
    )


def test_partial_sequence_lengths_are_refused() -> None:
    model, _ = lstm_model(Case(5, 2, 3, 4, seq_lens=True))
    lens = next(i for i in model.graph.initializer if i.name == "L")
    lens.CopyFrom(numpy_helper.from_array(np.array([5, 3], np.int32), "L"))
    msg = error_of(model)
    assert msg == (
        "LSTM node 'lstm': sequence_lens is [5, 3]; only the full length 5 for each of the 2 sequences is supported"
    )


def test_wrong_initial_state_shape_is_refused() -> None:
    model, _ = lstm_model(Case(5, 2, 3, 4, init="const"))
    h0 = next(i for i in model.graph.initializer if i.name == "h0")
    h0.CopyFrom(numpy_helper.from_array(np.zeros((2, 1, 4), np.float32), "h0"))
    assert "initial_h 'h0' has shape [2, 1, 4]; expected [1, 2, 4]" in error_of(model)
