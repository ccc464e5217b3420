"""asr_float and tts_float end to end: converted, run step by step on the sample driver, scored vs golden."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlts.bench import recurrent
from mlts.cli import main
from mlts.convert import convert
from mlts.datasets.golden import golden_outputs
from mlts.datasets.speech import sequences
from mlts.hal.enums import OperationType
from mlts.models import zoo
from mlts.runtime.discovery import discover, open_device
from mlts.runtime.session import Session

# The driver's float32 LSTM and the float64 golden run differ by float32 rounding accumulated over the
# steps of a sequence; measured ~1e-6, so 1e-4 leaves room while catching any real arithmetic error.
MAX_ABS = 1e-4


@pytest.fixture(scope="module")
def device():
    dev = open_device(discover()["sample-all"])
    yield dev
    dev.close()


def _golden(name: str, seqs: list[np.ndarray]) -> list[np.ndarray]:
    entry = zoo.get(name)
    return golden_outputs(
        zoo.load(name + "_sequence"), [{entry.input_name: s[:, None, :]} for s in seqs], name
    )


@pytest.mark.parametrize("name", ["asr_float", "tts_float"])
def test_step_model_on_the_driver_matches_golden(device, name):
    entry = zoo.get(name)
    conv = convert(zoo.load(name))
    ops = [OperationType(op.type) for op in conv.model.main.operations]
    assert ops.count(OperationType.LSTM) == 3 and OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM not in ops
    sig = recurrent.StepSignature.of(entry, conv)
    seqs = [s[:40] for s in sequences(name, 2, start=11)]
    session = Session(device, conv.model)
    try:
        run = recurrent.run_sequences(session.run, sig, len(conv.inputs), seqs, warmup_s=0.05)
    finally:
        session.close()
    acc = recurrent.score(name, sig, run, _golden(name, seqs), None)
    assert recurrent.validation_errors(acc) == []
    errors = acc["vs_golden"]["outputs"][entry.output_name]
    assert errors["max_abs_error"] < MAX_ABS, errors


@pytest.mark.parametrize("name", ["asr_float", "tts_float"])
def test_sequence_model_converts_to_one_sequence_lstm_per_layer(name):
    from driver.executor import run_model

    entry = zoo.get(name + "_sequence")
    x = sequences(name, 1, start=2)[0][:25]
    conv = convert(zoo.load(entry.name), input_shapes={entry.input_name: (len(x), 1, x.shape[1])})
    ops = [OperationType(op.type) for op in conv.model.main.operations]
    assert ops.count(OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM) == 3 and OperationType.LSTM not in ops
    (out,) = run_model(conv.model, [x[:, None, :]])
    (gold,) = _golden(name, [x])
    assert np.max(np.abs(out - gold)) < MAX_ABS


def test_benchmark_command_scores_both_models(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "benchmark",
            "--models",
            "^(asr|tts)_float$",
            "--drivers",
            "sample-all",
            "--sequences",
            "1",
            "--warmup",
            "0.05",
            "--compile-seconds",
            "0.2",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["model"], r["backend"]): r for r in doc["results"]}
    assert set(rows) == {
        (m, b) for m in ("asr_float", "tts_float") for b in ("cpu:onnxruntime", "driver:sample-all")
    }
    steps = len(sequences("asr_float", 1)[0])
    for (model, backend), r in rows.items():
        assert r["status"] == "ok" and r["mode"] == "step-by-step" and r["latency_unit"] == "step"
        assert r["steps"] == (steps if model == "asr_float" else len(sequences("tts_float", 1)[0]))
        assert r["latency_ms"]["median"] > 0 and r["validation_errors"] == []
        metric = r["accuracy"]["vs_golden"]["metric"]
        assert (
            metric["name"] == ("PhoneErrorRate" if model == "asr_float" else "MelCepLogF0") and metric["ok"]
        )
        assert ("vs_reference" in r["accuracy"]) == backend.startswith("driver")
    assert "PER 0.00%" in result.output and "MCD" in result.output


def test_benchmark_runs_the_whole_sequence_form_per_sequence(tmp_path):
    args = ["benchmark", "--models", "^tts_float_sequence$", "--drivers", "sample-all", "--sequences", "2"]
    args += ["--warmup", "0.05"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "results.json").read_text())["results"]
    lengths = [len(s) for s in sequences("tts_float", 2)]
    assert [r["backend"] for r in rows] == ["cpu:onnxruntime", "driver:sample-all"]
    for r in rows:
        assert (
            r["mode"] == "whole-sequence" and r["latency_unit"] == "sequence" and r["steps"] == sum(lengths)
        )
        assert r["latency_ms"]["max"] >= r["step_latency_ms"]["max"] > 0
        assert r["accuracy"]["vs_golden"]["metric"]["ok"] and r["validation_errors"] == []
    assert rows[1]["accuracy"]["vs_reference"]["outputs"]["acoustic_frames"]["max_abs_error"] < 1e-4


def test_nnapi_reference_partitions_the_lstm_step_model(tmp_path):
    """float-fast takes every float operation; the result matches the golden outputs as sample-all does."""
    args = [
        "benchmark",
        "--models",
        "^asr_float$",
        "--drivers",
        "sample-(float-fast|quant)",
        "--sequences",
        "1",
    ]
    args += ["--nnapi-reference-only", "--warmup", "0.05", "--no-compilation", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = {r["backend"]: r for r in json.loads((tmp_path / "results.json").read_text())["results"]}
    assert set(rows) == {"cpu:onnxruntime", "nnapi-reference"}
    row = rows["nnapi-reference"]
    coverage = row["partition"]["coverage"]
    assert coverage["sample-float-fast"] > 0 and coverage["sample-quant"] == 0 and coverage["cpu"] == 0
    assert row["accuracy"]["vs_golden"]["metric"]["ok"] and row["validation_errors"] == []
