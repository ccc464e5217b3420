"""LSTM, the sequence LSTMs and RNNs, RNN and SVDF with their state as model inputs, against LiteRT.

The state tensors are TFLite variables: the converted model takes them as inputs and (LSTM, RNN,
SVDF) gives their next values as extra outputs. LiteRT's interpreter is set to the same state
before the call and its variables read after it (mlts.bench.litert_reference).
"""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench.litert_reference import LiteRtReference
from mlts.convert.tflite import convert_tflite_plan
from tests.convert.tflite._check import assert_matches, rand, run_nn
from tests.convert.tflite._tflbuild import TflModel

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (ai-edge-litert) is not installed")
TANH, RELU = 4, 1


def _compare(data: bytes, seed: int = 0, scale: float = 1.0) -> list[str]:
    conv, plan = convert_tflite_plan(data)
    rng = np.random.default_rng(seed)
    feeds = [(rng.uniform(-1, 1, t.shape) * scale).astype(np.float32) for t in conv.inputs]
    expected = LiteRtReference(data, 1, plan).run(feeds)
    actual = run_nn(data, feeds)
    for a, e in zip(actual, expected, strict=True):
        assert_matches(a, e)
    return [t.name for t in conv.outputs]


def test_rnn_with_state_in_and_out() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([2, 3], name="x")
    w = g.tensor([4, 3], data=rand([4, 3], seed=1) * 0.5)
    r = g.tensor([4, 4], data=rand([4, 4], seed=2) * 0.5)
    b = g.tensor([4], data=rand([4], seed=3))
    h = g.tensor([2, 4], name="h", variable=True)
    y = g.tensor([2, 4], name="y")
    # TFLite's RNNs default to TANH, which NNAPI's RNN takes; the sample driver's RNN kernels accept
    # only NONE..RELU6 so far, so the run uses RELU (the TANH mapping is checked below).
    g.op("RNN", [x, w, r, b, h], [y], "RNNOptions", fused_activation_function=RELU)
    g.io([x], [y])
    assert _compare(m.finish()) == ["y", "h:next"]


def test_unidirectional_sequence_rnn_time_major() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([5, 2, 3], name="x")
    w = g.tensor([4, 3], data=rand([4, 3], seed=1) * 0.5)
    r = g.tensor([4, 4], data=rand([4, 4], seed=2) * 0.5)
    b = g.tensor([4], data=rand([4], seed=3))
    h = g.tensor([2, 4], name="h", variable=True)
    y = g.tensor([5, 2, 4], name="y")
    g.op(
        "UNIDIRECTIONAL_SEQUENCE_RNN",
        [x, w, r, b, h],
        [y],
        "SequenceRNNOptions",
        time_major=True,
        fused_activation_function=RELU,
    )
    g.io([x], [y])
    assert _compare(m.finish()) == ["y"]


def test_rnn_tanh_activation_is_passed_as_nnapi_recurrent_code_4() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x, h, y = (
        g.tensor([1, 2], name="x"),
        g.tensor([1, 2], name="h", variable=True),
        g.tensor([1, 2], name="y"),
    )
    w, r, b = (
        g.tensor([2, 2], data=np.eye(2)),
        g.tensor([2, 2], data=np.eye(2)),
        g.tensor([2], data=np.zeros(2)),
    )
    g.op("RNN", [x, w, r, b, h], [y], "RNNOptions", fused_activation_function=TANH)
    g.io([x], [y])
    conv, _ = convert_tflite_plan(m.finish())
    op = conv.model.main.operations[0]
    activation = conv.model.main.operands[op.inputs[5]]
    assert activation.type == 1  # INT32
    value = int.from_bytes(
        conv.model.operand_values[activation.location.offset : activation.location.offset + 4], "little"
    )
    assert value == TANH


@pytest.mark.parametrize("bias", [True, False])
def test_svdf(bias: bool) -> None:
    rank, units, memory, batch, size = 1, 3, 4, 2, 5
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([batch, size], name="x")
    wf = g.tensor([units * rank, size], data=rand([units * rank, size], seed=1))
    wt = g.tensor([units * rank, memory], data=rand([units * rank, memory], seed=2))
    b = g.tensor([units], data=rand([units], seed=3)) if bias else -1
    s = g.tensor([batch, memory * units * rank], name="state", variable=True)
    y = g.tensor([batch, units], name="y")
    g.op("SVDF", [x, wf, wt, b, s], [y], "SVDFOptions", rank=rank, fused_activation_function=1)
    g.io([x], [y])
    # From a zero state (how both start) the outputs agree. The state is carried in NNAPI's layout:
    # TFLite's shifted one slot towards the oldest, the last slot 0 (the delegate passes it as is).
    data = m.finish()
    conv, plan = convert_tflite_plan(data)
    feeds = [rand([batch, size], seed=4), np.zeros([batch, memory * units * rank], np.float32)]
    expected = LiteRtReference(data, 1, plan).run(feeds)
    actual = run_nn(data, feeds)
    assert_matches(actual[0], expected[0])
    tflite_state = expected[1].reshape(batch, units * rank, memory)
    nnapi_state = np.concatenate([tflite_state[:, :, 1:], np.zeros_like(tflite_state[:, :, :1])], axis=2)
    assert_matches(actual[1], nnapi_state.reshape(batch, -1))


def _lstm_inputs(
    g, n_input: int, units: int, cifg: bool = False, peephole: bool = False, projection: int = 0
):
    out = projection or units
    w = lambda rows, cols, seed: g.tensor([rows, cols], data=rand([rows, cols], seed=seed) * 0.4)  # noqa: E731
    v = lambda n, seed: g.tensor([n], data=rand([n], seed=seed) * 0.4)  # noqa: E731
    ins = [
        -1 if cifg else w(units, n_input, 1), w(units, n_input, 2), w(units, n_input, 3), w(units, n_input, 4),
        -1 if cifg else w(units, out, 5), w(units, out, 6), w(units, out, 7), w(units, out, 8),
        -1 if (cifg or not peephole) else v(units, 9), v(units, 10) if peephole else -1, v(units, 11) if peephole else -1,
        -1 if cifg else v(units, 12), v(units, 13), v(units, 14), v(units, 15),
        w(out, units, 16) if projection else -1, -1,
    ]  # fmt: skip
    return ins, out


@pytest.mark.parametrize("variant", ["plain", "cifg_peephole", "projection"])
def test_lstm_full_kernel_with_states(variant: str) -> None:
    batch, n_input, units = 2, 3, 4
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([batch, n_input], name="x")
    weights, out = _lstm_inputs(
        g, n_input, units, cifg=variant == "cifg_peephole", peephole=variant == "cifg_peephole",
        projection=3 if variant == "projection" else 0,
    )  # fmt: skip
    h = g.tensor([batch, out], name="h", variable=True)
    c = g.tensor([batch, units], name="c", variable=True)
    y = g.tensor([batch, out], name="y")
    g.op(
        "LSTM",
        [x, *weights, h, c],
        [y],
        "LSTMOptions",
        fused_activation_function=TANH,
        cell_clip=0.0,
        proj_clip=0.0,
    )
    g.io([x], [y])
    assert _compare(m.finish()) == ["y", "h:next", "c:next"]


def test_unidirectional_sequence_lstm() -> None:
    steps, batch, n_input, units = 4, 2, 3, 4
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([batch, steps, n_input], name="x")
    weights, out = _lstm_inputs(g, n_input, units)
    h = g.tensor([batch, out], name="h", variable=True)
    c = g.tensor([batch, units], name="c", variable=True)
    y = g.tensor([batch, steps, out], name="y")
    g.op(
        "UNIDIRECTIONAL_SEQUENCE_LSTM", [x, *weights, h, c], [y], "UnidirectionalSequenceLSTMOptions",
        fused_activation_function=TANH, cell_clip=10.0, time_major=False,
    )  # fmt: skip
    g.io([x], [y])
    assert _compare(m.finish()) == ["y"]


def test_bidirectional_sequence_lstm_merged() -> None:
    steps, batch, n_input, units = 3, 1, 2, 3
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([steps, batch, n_input], name="x")
    fw, _ = _lstm_inputs(g, n_input, units)
    bw, _ = _lstm_inputs(g, n_input, units)
    states = [g.tensor([batch, units], name=n, variable=True) for n in ("fh", "fc", "bh", "bc")]
    y = g.tensor([steps, batch, 2 * units], name="y")
    inputs = [x, *fw, *bw, *states, -1, *([-1] * 8)]
    g.op(
        "BIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y], "BidirectionalSequenceLSTMOptions",
        fused_activation_function=TANH, merge_outputs=True, time_major=True,
    )  # fmt: skip
    g.io([x], [y])
    assert _compare(m.finish()) == ["y"]
