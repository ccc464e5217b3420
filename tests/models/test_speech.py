"""The LSTM speech models: signatures, determinism, the two forms agreeing, and healthy recurrences."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from mlts.datasets import speech as data
from mlts.models import speech, zoo
from mlts.models.stats import count_macs, count_params


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module", params=["asr_float", "tts_float"])
def built(request):
    net = speech.NETS[request.param]
    return net, speech.speech_step_model(net), speech.speech_sequence_model(net)


def _dims(vi) -> tuple[int, ...]:
    return tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def test_signatures_match_the_zoo_entries(built):
    net, step, sequence = built
    for model, entry in ((step, zoo.get(net.name)), (sequence, zoo.get(net.name + "_sequence"))):
        onnx.checker.check_model(model, full_check=True)
        assert model.ir_version == 10
        inputs, outputs = entry.signature()
        assert [(i.name, _dims(i)) for i in model.graph.input] == inputs
        assert [(o.name, _dims(o)) for o in model.graph.output] == outputs
    assert sequence.graph.input[0].type.tensor_type.shape.dim[0].dim_param == speech.TIME
    assert [n.op_type for n in step.graph.node].count("LSTM") == net.layers


def test_builds_are_byte_deterministic(built):
    net, step, sequence = built
    assert speech.speech_step_model(net).SerializeToString() == step.SerializeToString()
    assert speech.speech_sequence_model(net).SerializeToString() == sequence.SerializeToString()


def test_step_by_step_with_carried_state_equals_the_whole_sequence(built):
    net, step, sequence = built
    x = data.sequences(net.name, 1, start=7)[0][:30]
    whole = _session(sequence).run(None, {net.input_name: x[:, None, :]})[0]
    one = _session(step)
    names = net.state_names()
    state = {i: np.zeros(s, np.float32) for (i, _), s in zip(names, net.state_shapes(), strict=True)}
    outs = []
    for row in x:
        result = one.run(None, {net.input_name: row[None], **state})
        outs.append(result[0])
        state = {i: v for (i, _), v in zip(names, result[1:], strict=True)}
    # Same float32 arithmetic in a different op order: rounding differences only.
    np.testing.assert_allclose(np.concatenate(outs).reshape(whole.shape), whole, atol=2e-5, rtol=1e-5)


def _gate_preactivations(net: speech.SpeechNet, model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """Run the sequence model exposing every LSTM layer's input; recompute gate inputs in float64."""
    lstm_nodes = [n for n in model.graph.node if n.op_type == "LSTM"]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    extra = [n.input[0] for n in lstm_nodes] + [n.output[0] for n in lstm_nodes]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in extra)
    values = _session(probe).run(extra, {net.input_name: x[:, None, :]})
    inits = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    pre = []
    for k, node in enumerate(lstm_nodes):
        xin, y = values[k][:, 0], values[len(lstm_nodes) + k][:, 0, 0]
        h_prev = np.vstack([np.zeros((1, y.shape[1])), y[:-1]])
        w, r, b = inits[node.input[1]][0], inits[node.input[2]][0], inits[node.input[3]][0]
        pre.append(xin @ w.T + h_prev @ r.T + b[: w.shape[0]] + b[w.shape[0] :])
    return pre


def test_recurrences_neither_saturate_nor_die_out(built):
    net, _, sequence = built
    x = data.sequences(net.name, 1, start=3)[0]
    for layer, pre in enumerate(_gate_preactivations(net, sequence, x)):
        # Trained LSTMs keep most gate inputs in the sigmoid/tanh's responsive range.
        assert (np.abs(pre) > 5).mean() < 0.02, f"layer {layer} saturates"
        assert 0.3 < pre.std() < 3.0, f"layer {layer}: gate input spread {pre.std():.2f}"
    whole = _session(sequence).run(None, {net.input_name: x[:, None, :]})[0]
    # The output still moves at the end of a long sequence: the state did not die out or freeze.
    tail = whole[-20:].reshape(20, -1)
    assert tail.std(0).mean() > 1e-3


def test_outputs_have_realistic_ranges():
    asr = zoo.get("asr_float_sequence")
    x = data.sequences("asr_float", 2)
    session = _session(zoo.load(asr.name))
    probs = np.concatenate([session.run(None, {asr.input_name: s[:, None, :]})[0] for s in x]).reshape(-1, 41)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    assert len(np.unique(probs.argmax(1))) >= 8  # the phone decision changes along the utterance
    assert 0.2 < probs.max(1).mean() < 0.95

    tts = zoo.get("tts_float_sequence")
    session = _session(zoo.load(tts.name))
    frames = np.concatenate(
        [session.run(None, {tts.input_name: s[:, None, :]})[0] for s in data.sequences("tts_float", 2)]
    ).reshape(-1, speech.TTS_VALUES)
    aperiodicity, log_f0, voicing = frames[:, 40:47], frames[:, 47], frames[:, 48]
    assert ((aperiodicity > 0) & (aperiodicity < 1)).all() and ((voicing > 0) & (voicing < 1)).all()
    assert 0.2 < (voicing > 0.5).mean() < 0.95
    assert abs(np.exp(log_f0).mean() - 120) < 40 and log_f0.std() > 0.02
    assert frames[:, 1:40].std(0)[0] > frames[:, 1:40].std(0)[-1]  # higher cepstra are smaller


def test_counts_are_per_step():
    net = speech.ASR
    model = speech.speech_step_model(net)
    lstm = sum(4 * u * (i + u) for i, u in zip((384, 384, 384), net.lstm_units, strict=True))
    fc = 320 * 384 + 384 * 41
    assert count_macs(model) == lstm + fc
    lstm_params = sum(4 * u * (i + u) + 8 * u for i, u in zip((384, 384, 384), net.lstm_units, strict=True))
    assert count_params(model) == lstm_params + fc + 384 + 41
    summary = zoo.summary("asr_float_sequence")
    assert summary["macs_per"] == "step" and summary["form"] == "sequence" and summary["macs"] == lstm + fc
    assert [s["input"] for s in zoo.summary("tts_float")["state"]] == [i for i, _ in speech.TTS.state_names()]
