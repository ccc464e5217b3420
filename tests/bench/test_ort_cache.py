"""The on-disk cache of onnxruntime's reference outputs: hits, misses on every part of the key, bad files."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mlts.bench import ort_cache
from mlts.bench.reference import OnnxRuntimeReference


def _model(scale: float) -> bytes:
    """y = x * scale, z = x + 1: two outputs, so the cache keeps each feed's outputs in order."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [scale])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"]), helper.make_node("Add", ["x", "one"], ["z"])],
        "g",
        [x],
        [y, z],
        [s, one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def _feeds(seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((2, 3)).astype(np.float32)] for _ in range(3)]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    return tmp_path


class _Counting:
    """onnxruntime on a model, counting its runs (a cache hit runs nothing)."""

    def __init__(self, model: bytes, threads: int = 1) -> None:
        self.ref = OnnxRuntimeReference(model, threads)
        self.calls = 0

    def __call__(self, feed):
        self.calls += 1
        return self.ref.run(feed)


def _outputs(model: bytes, feeds, threads: int = 1, warnings: list | None = None):
    run = _Counting(model, threads)
    out, hit = ort_cache.reference_outputs(
        model, feeds, threads, run, (warnings if warnings is not None else []).append
    )
    return out, hit, run.calls


def test_second_run_is_a_hit_with_the_same_outputs(cache_dir):
    model, feeds = _model(2.0), _feeds()
    first, hit1, calls1 = _outputs(model, feeds)
    second, hit2, calls2 = _outputs(model, feeds)
    assert (hit1, calls1) == (False, 3)
    assert (hit2, calls2) == (True, 0)
    for feed, a, b in zip(feeds, first, second, strict=True):
        x = feed[0]
        # Independent of onnxruntime: the model is x * 2 and x + 1.
        np.testing.assert_array_equal(b[0], x * np.float32(2.0))
        np.testing.assert_array_equal(b[1], x + np.float32(1.0))
        assert [o.dtype for o in a] == [o.dtype for o in b]
        assert len(a) == len(b) == 2


@pytest.mark.parametrize("change", ["model", "inputs", "input_dtype", "threads", "ort_version", "cpu"])
def test_a_changed_key_misses(cache_dir, monkeypatch, change):
    model, feeds, threads = _model(2.0), _feeds(), 1
    _outputs(model, feeds)
    if change == "model":
        model = _model(3.0)
    elif change == "inputs":
        feeds = _feeds(seed=1)
    elif change == "input_dtype":
        # Same bytes, other dtype: the key must see the dtype, not just the bytes.
        feeds = [[f[0].view(np.int32).view(np.float32).reshape(3, 2)] for f in feeds]
    elif change == "threads":
        threads = 2
    elif change == "ort_version":
        monkeypatch.setattr(ort_cache, "_ort_version", lambda: "0.0.0-other")
    else:
        monkeypatch.setattr(ort_cache, "_cpu", lambda: "another CPU|avx512f")
    if change == "input_dtype":
        # Reshaped inputs do not fit the model; the key alone is what is checked here.
        assert ort_cache.cache_key(model, feeds, threads) != ort_cache.cache_key(model, _feeds(), threads)
        return
    out, hit, calls = _outputs(model, feeds, threads)
    assert (hit, calls) == (False, 3)
    if change == "model":
        np.testing.assert_array_equal(out[0][0], feeds[0][0] * np.float32(3.0))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong_count"])
def test_an_unusable_cache_file_is_ignored_with_a_warning_and_replaced(cache_dir, damage):
    model, feeds = _model(2.0), _feeds()
    _outputs(model, feeds)
    path = ort_cache.cache_path(ort_cache.cache_key(model, feeds, 1))
    assert path.is_file()
    if damage == "garbage":
        path.write_bytes(b"not an npz file")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    else:
        # A readable file holding another number of inputs' outputs.
        path.write_bytes(ort_cache._encode([[np.zeros((2, 3), np.float32)]]))
    warnings: list[str] = []
    out, hit, calls = _outputs(model, feeds, warnings=warnings)
    assert (hit, calls) == (False, 3)
    assert len(warnings) == 1 and "ignoring unusable cached onnxruntime outputs" in warnings[0]
    assert str(path) in warnings[0] and "\n" not in warnings[0]
    np.testing.assert_array_equal(out[1][0], feeds[1][0] * np.float32(2.0))
    # Recomputed and rewritten: the next run hits again without a warning.
    warnings.clear()
    _, hit, calls = _outputs(model, feeds, warnings=warnings)
    assert (hit, calls, warnings) == (True, 0, [])


def test_an_unwritable_cache_still_gives_the_outputs(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("MLTS_CACHE_DIR", str(blocker))  # a file, so no folder can be made under it
    warnings: list[str] = []
    out, hit, calls = _outputs(_model(2.0), _feeds(), warnings=warnings)
    assert (hit, calls) == (False, 3) and len(out) == 3
    assert len(warnings) == 1 and "cannot cache onnxruntime outputs" in warnings[0]


def test_onnx_model_helper_is_valid():
    onnx.checker.check_model(onnx.load_from_string(_model(2.0)))
