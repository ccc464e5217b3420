"""Golden outputs: the float64 reference is float64, agrees with hand computation, and is cached safely."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.datasets import golden


def _tiny_lstm() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x [T, 1, 2] -> LSTM(hidden 3) -> Y; returns the model and its float32 weights."""
    rng = np.random.default_rng(5)
    w = {
        "W": rng.normal(0, 0.6, (1, 12, 2)).astype(np.float32),
        "R": rng.normal(0, 0.6, (1, 12, 3)).astype(np.float32),
        "B": rng.normal(0, 0.2, (1, 24)).astype(np.float32),
    }
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=3)
    graph = helper.make_graph(
        [node],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["time", 1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model, w


def _lstm64(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """ONNX LSTM (gates i, o, f, c; zero initial state) in float64, one gate at a time."""
    W, R, B = (w[k][0].astype(np.float64) for k in "WRB")
    H = R.shape[1]
    h, c = np.zeros(H), np.zeros(H)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    out = []
    for xt in x[:, 0].astype(np.float64):
        gate = [
            W[k * H : (k + 1) * H] @ xt
            + R[k * H : (k + 1) * H] @ h
            + B[k * H : (k + 1) * H]
            + B[(4 + k) * H : (5 + k) * H]
            for k in range(4)
        ]
        i, o, f, g = sig(gate[0]), sig(gate[1]), sig(gate[2]), np.tanh(gate[3])
        c = f * c + i * g
        h = o * np.tanh(c)
        out.append(h.copy())
    return np.array(out)[:, None, None, :]


def test_float64_copy_is_float64_throughout():
    model, _ = _tiny_lstm()
    copy = golden.float64_copy(model)
    assert all(t.data_type == TensorProto.DOUBLE for t in copy.graph.initializer)
    assert copy.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert model.graph.initializer[0].data_type == TensorProto.FLOAT  # the original is untouched


def test_reference_matches_a_hand_written_float64_lstm():
    model, w = _tiny_lstm()
    x = np.random.default_rng(1).normal(size=(9, 1, 2))
    (out,) = golden.reference_outputs(model, [{"x": x}])[0]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, _lstm64(x, w), rtol=1e-12, atol=1e-14)


def test_golden_outputs_are_cached_and_a_corrupt_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    model, w = _tiny_lstm()
    feeds = [
        {"x": np.full((4, 1, 2), 0.5, np.float32)},
        {"x": np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 1, 2)},
    ]
    steps: list[tuple[int, int]] = []
    first = golden.golden_outputs(model, feeds, "tiny", lambda done, total: steps.append((done, total)))
    assert steps == [(1, 2), (2, 2)]  # each feed of the long float64 run is a step
    (folder,) = [p for p in (tmp_path / "golden").glob("tiny.*") if p.is_dir()]
    paths = sorted(folder.glob("*.npz"), key=lambda p: p.stat().st_mtime_ns)
    assert len(paths) == 2  # one file per input
    np.testing.assert_allclose(first[1], _lstm64(feeds[1]["x"], w), rtol=1e-12, atol=1e-14)
    stamps = [p.stat().st_mtime_ns for p in paths]
    again = golden.golden_outputs(model, feeds, "tiny")
    assert [p.stat().st_mtime_ns for p in paths] == stamps and all(
        np.array_equal(a, b) for a, b in zip(first, again, strict=True)
    )
    paths[0].write_bytes(b"PK\x03\x04 not really a zip")
    steps.clear()
    rebuilt = golden.golden_outputs(model, feeds, "tiny", lambda done, total: steps.append((done, total)))
    assert all(np.array_equal(a, b) for a, b in zip(first, rebuilt, strict=True))
    assert steps == [(1, 2), (2, 2)]  # the good file counts at once, the corrupt one is recomputed
    assert paths[1].stat().st_mtime_ns == stamps[1]


def test_only_inputs_not_cached_are_computed(tmp_path, monkeypatch):
    """A run over more inputs computes only the new ones; another model never reads the cache of this one."""
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    model, _ = _tiny_lstm()
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((3, 1, 2)).astype(np.float32)} for _ in range(4)]
    golden.golden_all_outputs(model, feeds[:2], "tiny")
    computed: list[int] = []
    real = golden._run_feeds
    monkeypatch.setattr(
        golden, "_run_feeds", lambda ev, fs, on=None: computed.append(len(fs)) or real(ev, fs, on)
    )
    outs = golden.golden_all_outputs(model, feeds, "tiny")
    assert sum(computed) == 2 and len(outs) == 4
    for feed, got in zip(feeds, outs, strict=True):
        np.testing.assert_array_equal(got[0], golden.reference_outputs(model, [feed])[0][0])
    other = golden.float64_copy(model)  # another model (its bytes differ): its own cache folder
    other.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros((1, 12, 2), np.float32), "W"))
    computed.clear()
    golden.golden_all_outputs(other, feeds[:1], "tiny")
    assert computed == [1] and len(list((tmp_path / "golden").glob("tiny.*"))) == 4  # 2 folders, 2 locks


def test_every_output_is_kept():
    """golden_all_outputs keeps each output of a model with several (boxes and scores, say)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (outs,) = golden.golden_all_outputs(model, [{"x": x}], "two")
    np.testing.assert_array_equal(outs[0], np.maximum(x, 0))
    np.testing.assert_array_equal(outs[1], -x.astype(np.float64))


@pytest.mark.parametrize("model_name", ["asr_float", "tts_float"])
def test_zoo_golden_outputs_agree_with_onnxruntime(model_name):
    import onnxruntime as ort

    from mlts.datasets.speech import sequences
    from mlts.models import zoo

    entry = zoo.get(model_name + "_sequence")
    proto = zoo.load(entry.name)
    seqs = sequences(model_name, 2)
    feeds = [{entry.input_name: s[:, None, :]} for s in seqs]
    gold = golden.golden_outputs(proto, feeds, model_name + "-test")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for feed, g in zip(feeds, gold, strict=True):
        # onnxruntime computes in float32: its rounding over a few hundred steps stays far below 1e-4.
        np.testing.assert_allclose(session.run(None, feed)[0], g, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_inference_batch_norm_is_computed_in_inference_mode(opset):
    """BatchNormalization with its default momentum is inference mode: (x - mean) * scale / sqrt(var + eps) + bias.

    Checked against that formula in float64 NumPy to 1e-12 (the folded Mul + Add rounds only in float64).
    """
    rng = np.random.default_rng(3)
    p = {k: rng.uniform(0.5, 2.0, 4).astype(np.float32) for k in ("scale", "bias", "mean", "var")}
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3)
    graph = helper.make_graph(
        [node],
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3, 3])],
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    (y,) = golden.reference_outputs(model, [{"x": x}])[0]
    c = {k: v.astype(np.float64).reshape(1, 4, 1, 1) for k, v in p.items()}
    want = (x.astype(np.float64) - c["mean"]) * c["scale"] / np.sqrt(
        c["var"] + np.float64(np.float32(1e-3))
    ) + c["bias"]
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "channels, out_channels, group, kernel, stride, dilation, pad",
    [
        (4, 6, 1, (3, 2), (2, 1), (2, 1), "EXPLICIT"),
        (4, 6, 1, (1, 1), (1, 1), (1, 1), "NOTSET"),
        (6, 6, 6, (3, 3), (2, 2), (1, 1), "SAME_UPPER"),
        (6, 12, 6, (3, 3), (1, 2), (1, 1), "SAME_LOWER"),
        (6, 12, 3, (3, 2), (2, 1), (2, 1), "VALID"),
    ],
)
def test_golden_conv_matches_onnx_reference_conv(
    channels, out_channels, group, kernel, stride, dilation, pad
):
    """The vectorised float64 Conv of the golden run gives onnx.reference's own Conv results."""
    from onnx.reference import ReferenceEvaluator

    from mlts.datasets._golden_conv import Conv

    attrs = dict(group=group, strides=list(stride), dilations=list(dilation), kernel_shape=list(kernel))
    if pad == "EXPLICIT":
        attrs["pads"] = [1, 0, 2, 1]
    elif pad != "NOTSET":
        attrs["auto_pad"] = pad
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in "xwb"],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(7)
    feeds = {
        "x": rng.standard_normal((2, channels, 9, 8)),
        "w": rng.standard_normal((out_channels, channels // group, *kernel)),
        "b": rng.standard_normal(out_channels),
    }
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = ReferenceEvaluator(model, new_ops=[Conv]).run(None, feeds)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_golden_outputs_split_among_workers_equal_one_process(tmp_path, monkeypatch):
    """Many feeds go to worker processes; the outputs, in feed order, are those of one process."""
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MLTS_GOLDEN_WORKERS", "2")
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(11)]
    monkeypatch.setattr(golden, "PARALLEL_SECONDS", 0.0)  # workers even for this quick model
    got = golden.golden_outputs(model, feeds, "split")
    want = [o[0] for o in golden.reference_outputs(model, feeds)]
    assert len(got) == len(feeds)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, e)
