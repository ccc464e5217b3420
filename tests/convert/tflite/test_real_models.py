"""The trained .tflite models of mlts[real-models], end to end against LiteRT; skipped without the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import convert_tflite_plan, load_tflite
from mlts.models.real_tflite import REAL_TFLITE_MODELS, RealModelMissing, find

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (ai-edge-litert) is not installed")
ROOT = Path(__file__).resolve().parents[3]
FLOAT_FLOOR = 64 * float(np.finfo(np.float32).eps)


def _path(name: str) -> Path:
    try:
        return find(name)
    except RealModelMissing as e:
        pytest.skip(f"{e}")


def _feeds(conv, name: str) -> list[list[np.ndarray]]:
    from mlts.bench.tflite_workload import image_feeds, nhwc_image_input
    from mlts.datasets.imageset import folder_set
    from mlts.datasets.real import FOLDER

    image = nhwc_image_input(conv)
    if image is not None:
        pytest.importorskip("PIL", reason="reading the real images needs Pillow")
        return image_feeds(folder_set(FOLDER), *image)
    rng = np.random.default_rng(0)
    return [[rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in conv.inputs]]


@pytest.mark.parametrize("entry", [m for m in REAL_TFLITE_MODELS if m.refused is None], ids=lambda m: m.name)
def test_real_model_converts_and_agrees_with_litert(entry) -> None:
    from driver.executor import run_model
    from mlts.bench.litert_reference import LiteRtReference
    from mlts.hal.validate import validate_model

    model = load_tflite(_path(entry.name))
    conv, plan = convert_tflite_plan(model)
    validate_model(conv.model)
    reference = LiteRtReference(model.data, 1, plan)
    for feed in _feeds(conv, entry.name):
        expected = reference.run(feed)
        actual = [np.asarray(a) for a in run_model(conv.model, feed)]
        for a, e, info in zip(actual, expected, conv.outputs, strict=True):
            a = a.reshape(e.shape)
            if e.dtype.kind == "f":
                limit = FLOAT_FLOOR * max(1.0, float(np.max(np.abs(e))))
                assert float(np.max(np.abs(a.astype(np.float64) - e))) <= limit, info.name
            else:
                d = a.astype(np.int64) - e.astype(np.int64)
                assert float(np.sqrt(np.mean(d * d))) <= 1.0, f"{info.name}: RMS deviation above 1 unit"
                if entry.kind == "image-classifier":
                    assert int(np.argmax(a)) == int(np.argmax(e)), "top-1 differs from LiteRT's"


@pytest.mark.parametrize("entry", [m for m in REAL_TFLITE_MODELS if m.refused], ids=lambda m: m.name)
def test_real_model_the_delegate_cannot_map_is_refused_by_name(entry) -> None:
    with pytest.raises(ConversionError, match=rf"{entry.refused} \(operator #\d+ of subgraph 0"):
        convert_tflite_plan(_path(entry.name))


def test_benchmark_of_a_real_classifier_on_real_images(tmp_path) -> None:
    """mlts benchmark --model real:efficientnet_lite0 --dataset real: LiteRT row, driver row, ground truth."""
    _path("efficientnet_lite0")
    pytest.importorskip("PIL", reason="reading the real images needs Pillow")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable, "-m", "mlts", "benchmark", "--model", "real:efficientnet_lite0", "--dataset", "real",
        "--drivers", "^sample-all$", "--no-compilation", "--warmup", "0", "--duration", "0",
        "--iterations", "3", "--out", str(out), "--quiet",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((out / "results.json").read_text())
    rows = {r["backend"]: r for r in doc["results"]}
    assert set(rows) == {"cpu:litert", "driver:sample-all"}
    for row in rows.values():
        assert row["status"] == "ok" and row["reference"] == "litert"
        assert row["dataset"]["labels"] == "ground_truth" and row["dataset"]["size"] == 3
        assert row["accuracy"]["topk"]["top5"] == 1.0
    assert rows["driver:sample-all"]["accuracy"]["vs_reference"]["top1_agreement"] == 1.0
    assert doc["environment"]["litert"]
    assert "reference" in (out / "results.csv").read_text().splitlines()[0].split(",")
