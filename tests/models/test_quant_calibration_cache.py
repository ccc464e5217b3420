"""Calibration ranges shared by the variants of one float model: hit, miss on a changed key, bad files."""

from __future__ import annotations

import importlib
import logging

import numpy as np
import onnx
import pytest

from mlts.models import quantized, zoo

SMALL = "mobilenet_v1_0.25_128"
# The module (the package's attribute of that name is the function quantize).
ort_quantize = importlib.import_module("onnxruntime.quantization.quantize")


@pytest.fixture(scope="module")
def float_model() -> onnx.ModelProto:
    return zoo.load(SMALL)


@pytest.fixture
def calibrations(tmp_path, monkeypatch) -> list[int]:
    """A private cache folder; counts onnxruntime's calibration runs (one per cache miss)."""
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    count: list[int] = []
    real = ort_quantize.create_calibrator

    def counting(*args, **kwargs):
        count.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ort_quantize, "create_calibrator", counting)
    return count


def _build(float_model, suffix: str) -> bytes:
    return quantized.quantize(float_model, quantized.VARIANTS[suffix], 128).SerializeToString()


def _cache_files(tmp_path):
    return sorted((tmp_path / "quant_calibration").glob("*.json"))


def test_variants_of_one_float_model_calibrate_once_and_match_the_zoo(float_model, calibrations, tmp_path):
    built = {s: _build(float_model, s) for s in ("_quant", "_quant_signed", "_quant_perchannel")}
    assert len(calibrations) == 1 and len(_cache_files(tmp_path)) == 1
    # The models made from the shared ranges are byte for byte the zoo's (built in another cache).
    for suffix, data in built.items():
        assert data == zoo.model_path(SMALL + suffix).read_bytes(), suffix


def test_a_changed_key_misses(float_model, calibrations, tmp_path):
    _build(float_model, "_quant")
    other = onnx.ModelProto()
    other.CopyFrom(float_model)
    other.doc_string = "another model"  # other bytes: other ranges file
    quantized.quantize(other, quantized.VARIANTS["_quant"], 128)
    assert len(calibrations) == 2 and len(_cache_files(tmp_path)) == 2
    pre = b"model bytes"
    batch = quantized.calibration_batch(128)
    same = quantized.calibration_cache_path(pre, batch)
    assert quantized.calibration_cache_path(pre, batch.copy()) == same
    assert quantized.calibration_cache_path(pre + b"!", batch) != same
    changed = batch.copy()
    changed.flat[0] += np.float32(1e-3)
    assert quantized.calibration_cache_path(pre, changed) != same  # other images
    assert quantized.calibration_cache_path(pre, quantized.calibration_batch(96)) != same


def test_an_unusable_file_is_ignored_with_a_warning(float_model, calibrations, tmp_path, caplog):
    first = _build(float_model, "_quant")
    (path,) = _cache_files(tmp_path)
    good = path.read_text()
    damaged = {
        "garbage": "{not json",
        "empty_ranges": '{"calibration_method": {"CLS": "CalibrationMethod", "value": "MinMax"}, "data": {}}',
        "wrong_method": good.replace("CalibrationMethod.MinMax", "CalibrationMethod.Entropy"),
    }
    assert damaged["wrong_method"] != good
    for name, text in damaged.items():
        path.write_text(text)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mlts.models"):
            assert not quantized._usable_calibration(path), name
        warnings = [r.getMessage() for r in caplog.records if r.name == "mlts.models"]
        assert len(warnings) == 1 and "ignoring unusable calibration cache" in warnings[0], name
        assert str(path) in warnings[0] and not path.exists(), name
    path.write_text(damaged["garbage"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mlts.models"):
        again = _build(float_model, "_quant")
    assert len(calibrations) == 2 and again == first  # computed again, same model
    assert len([r for r in caplog.records if r.name == "mlts.models"]) == 1
    # Rewritten: the next build hits without a warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mlts.models"):
        _build(float_model, "_quant_signed")
    assert len(calibrations) == 2 and not caplog.records
