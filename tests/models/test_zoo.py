"""The zoo registry and its on-disk cache: reuse, versioned rebuilds, corruption recovery, concurrent builders."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import onnx
import pytest

from mlts.models import zoo
from mlts.models.mobilenet import mobilenet_v1

MLTS_NAMES = [
    "mobilenet_v1_1.0_224",
    "mobilenet_v1_0.75_192",
    "mobilenet_v1_0.5_160",
    "mobilenet_v1_0.25_128",
    "mobilenet_v2_0.35_128",
    "mobilenet_v2_0.5_160",
    "mobilenet_v2_0.75_192",
    "mobilenet_v2_1.0_224",
]
SMALL = "mobilenet_v1_0.25_128"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    return tmp_path / "models"


@pytest.fixture
def counting(monkeypatch) -> list[int]:
    """Swap the small model's builder for a fast, counting, uncalibrated one; returns the call log."""
    calls: list[int] = []
    fast = mobilenet_v1(0.25, 128, seed=1, calibrate=False)

    def build() -> onnx.ModelProto:
        calls.append(1)
        time.sleep(0.2)  # long enough for concurrent callers to overlap
        return fast

    monkeypatch.setitem(zoo._REGISTRY, SMALL, replace(zoo.get(SMALL), builder=build))
    return calls


QUANT_NAMES = [
    f"{base}{suffix}"
    for suffix in ("_quant", "_quant_signed", "_quant_perchannel")
    for base in (
        "mobilenet_v1_1.0_224",
        "mobilenet_v1_0.75_192",
        "mobilenet_v1_0.5_160",
        "mobilenet_v1_0.25_128",
        "mobilenet_v2_1.0_224",
    )
]

SPEECH_NAMES = ["asr_float", "asr_float_sequence", "tts_float", "tts_float_sequence"]
EXTENSION_NAMES = ["gelu_mlp_block"]  # needs the vendor extension com.example.mlts.activations
LOOP_NAMES = ["iterative_refinement"]  # a data-dependent ONNX Loop (NNAPI WHILE)


def test_registry_has_mltss_names_and_shapes():
    models = zoo.list_models()
    assert [m.name for m in models] == MLTS_NAMES + QUANT_NAMES + SPEECH_NAMES + EXTENSION_NAMES + LOOP_NAMES
    for m in models[: len(MLTS_NAMES)]:
        resolution = int(m.name.rsplit("_", 1)[1])
        assert m.input_shape == (1, 3, resolution, resolution) and m.output_shape == (1, 1001)
        assert m.family == m.name[:12] and m.dtype == "float32" and m.synthetic
        assert zoo.get(m.name) is m


def test_unknown_name_lists_close_matches_and_valid_names():
    with pytest.raises(zoo.UnknownModelError) as info:
        zoo.get("mobilenet_v1_1.0_225")
    message = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in message
    assert "'mobilenet_v1_1.0_225'" in message and "did you mean mobilenet_v1_1.0_224" in message
    assert all(name in message for name in MLTS_NAMES)
    with pytest.raises(zoo.UnknownModelError, match="valid names"):
        zoo.get("resnet50")


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert zoo.cache_dir() == tmp_path / "a" / "models"
    monkeypatch.delenv("MLTS_CACHE_DIR")
    assert zoo.cache_dir() == tmp_path / "xdg" / "mlts" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert zoo.cache_dir() == tmp_path / "home" / ".cache" / "mlts" / "models"


def test_built_once_then_reused(cache, counting):
    path = zoo.model_path(SMALL)
    assert path.parent == cache and zoo.GENERATOR_VERSION in path.name
    stamp = path.stat().st_mtime_ns
    assert zoo.model_path(SMALL) == path and path.stat().st_mtime_ns == stamp
    assert zoo.load(SMALL).graph.name == "mobilenet_v1_0.25_128"
    assert len(counting) == 1
    assert [p.name for p in cache.iterdir() if p.suffix == ".tmp"] == []


def test_new_generator_version_rebuilds(cache, counting, monkeypatch):
    old = zoo.model_path(SMALL)
    monkeypatch.setattr(zoo, "GENERATOR_VERSION", "999")
    new = zoo.model_path(SMALL)
    assert new != old and "999" in new.name and len(counting) == 2


@pytest.mark.parametrize("library", ["numpy", "onnx", "onnxruntime"])
def test_a_library_version_that_shapes_the_bytes_is_in_the_cache_key(monkeypatch, library):
    quant = zoo.get(SMALL + "_quant")
    before = {m.name: m.cache_key for m in (zoo.get(SMALL), quant, zoo.get("asr_float"))}
    real = zoo._dist_version
    monkeypatch.setattr(zoo, "_dist_version", lambda name: "0.0-other" if name == library else real(name))
    after = {m.name: m.cache_key for m in (zoo.get(SMALL), quant, zoo.get("asr_float"))}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == ({quant.name} if library == "onnxruntime" else set(before))
    assert all("0.0-other" in after[name] for name in changed)


@pytest.mark.parametrize("damage", ["garbage", "truncate", "empty"])
def test_corrupt_cached_file_is_rebuilt(cache, counting, damage):
    path = zoo.model_path(SMALL)
    data = path.read_bytes()
    path.write_bytes(
        {"garbage": b"not an onnx model", "truncate": data[: len(data) // 2], "empty": b""}[damage]
    )
    assert zoo.model_path(SMALL) == path and len(counting) == 2
    assert path.read_bytes() == data


def test_concurrent_threads_build_once(cache, counting):
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(zoo.model_path(SMALL))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1 and len(counting) == 1
    onnx.checker.check_model(str(results[0]))


def test_concurrent_processes_end_with_the_same_valid_file(cache):
    code = f"from mlts.models import zoo; print(zoo.model_path({SMALL!r}))"
    env = dict(os.environ, MLTS_CACHE_DIR=str(cache.parent))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    paths = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(paths) == 1
    data = Path(paths.pop()).read_bytes()
    expected = zoo.get(SMALL).build().SerializeToString()
    assert hashlib.sha256(data).digest() == hashlib.sha256(expected).digest()


def test_an_unchanged_cached_file_is_checked_once_per_process_and_a_changed_one_again(
    cache, counting, monkeypatch
):
    checks: list[Path] = []
    real = zoo._is_valid

    def counted(path: Path, entry) -> bool:
        checks.append(path)
        return real(path, entry)

    monkeypatch.setattr(zoo, "_is_valid", counted)
    monkeypatch.setattr(zoo, "_checked", {})
    path = zoo.model_path(SMALL)  # built, then checked
    assert zoo.model_path(SMALL) == path and zoo.model_path(SMALL) == path
    assert len(checks) == 1 and len(counting) == 1
    # Damaged in place (another size): checked again, found invalid and rebuilt.
    data = path.read_bytes()
    path.write_bytes(data[:100])
    assert zoo.model_path(SMALL) == path and len(checks) >= 2 and len(counting) == 2
    assert onnx.load(str(path)).graph.name == "mobilenet_v1_0.25_128"
