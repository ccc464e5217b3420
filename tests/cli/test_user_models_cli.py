"""`mlts benchmark --model` (and stress, calibrate, validate) on hand-built exports as users bring them.

Symbolic H/W (needs --input-shape, or shapes from --inputs files), a scalar configuration input
(--input-value), a dense-map output (the verdict passes a good driver and fails one whose outputs
are off by 1e-3), token ids into a classifier, an .nnm file (timed, not scored). Several models
share one run: each run starts a driver process, which is most of its time.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlts.cli import main
from tests.bench import usermodels
from tests.cli.clikit import FAST, one_line_error

SHORT = [*FAST, "--no-compilation", "--images", "3"]


@pytest.fixture()
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path / "cache"))
    return CliRunner()


def _rows(out) -> dict[tuple[str, str], dict]:
    return {(r["model"], r["backend"]): r for r in json.loads((out / "results.json").read_text())["results"]}


def _convert(runner, model, nnm, *options) -> None:
    r = runner.invoke(main, ["convert", str(model), *options, "-o", str(nnm)])
    assert r.exit_code == 0, r.output


def test_user_models_of_every_kind_in_one_run(runner, tmp_path):
    dense, rate, tokens = tmp_path / "dense.onnx", tmp_path / "rate.onnx", tmp_path / "tokens.onnx"
    usermodels.symbolic_dense(dense)
    usermodels.rate_scaled(rate)
    usermodels.token_classifier(tokens)
    _convert(runner, tokens, tmp_path / "ids.nnm")
    folder = tmp_path / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for k in range(2):  # H and W come from the files: no --input-shape needed
        np.save(folder / f"image_{k}.npy", rng.uniform(-1, 1, (1, 3, 10, 14)).astype(np.float32))
    out = tmp_path / "o"
    r = runner.invoke(
        main,
        [
            "benchmark", "--model", str(dense), "--model", str(rate), "--model", str(tokens),
            "--model", str(tmp_path / "ids.nnm"), "--inputs", str(folder), "--input-value", "sample_rate=16000",
            "--drivers", "^sample-all$", "--out", str(out), *SHORT,
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    d = rows["dense", "driver:sample-all"]
    assert d["verdict"]["pass"] and d["verdict"]["rule_name"] == "dense-map-error"
    assert d["dataset"] == {
        "name": "files",
        "size": 2,
        "labels": None,
        "inputs": {"image": "image"},
        "folder": str(folder),
    }
    assert "verdict: pass (dense-map-error, first output dense-map)" in r.output
    with open(out / "results.csv", newline="") as f:
        table = {(row["model"], row["backend"]): row for row in csv.DictReader(f)}
    assert table["dense", "driver:sample-all"]["verdict_rule"] == "dense-map-error"
    assert table["dense", "driver:sample-all"]["output_kind"] == "dense-map"
    # The fixed value reached the converter (a constant) and the references (a feed), which agree: the
    # golden outputs are audio * 16000 / 1000, peaks of the 0.5 signal times 16.
    a = rows["rate", "driver:sample-all"]
    assert a["verdict"]["pass"] and a["dataset"]["inputs"] == {"audio": "signal"}
    assert a["accuracy"]["vs_golden"]["golden_max_abs"] == pytest.approx(0.5 * 16, rel=1e-3)
    t = rows["tokens", "driver:sample-all"]
    assert t["dataset"]["inputs"] == {"ids": "tokens"} and t["verdict"]["rule_name"] == "classifier-top1"
    checks = [c["metric"] for c in t["verdict"]["checks"]]
    assert t["verdict"]["pass"] and checks == ["max_abs_error_vs_golden", "top1_agreement_within_tolerance"]
    # The .nnm file: timed, not scored, and said so.
    assert ("ids", "cpu:onnxruntime") not in rows
    n = rows["ids", "driver:sample-all"]
    assert n["status"] == "ok" and "verdict" not in n and "NN graph file" in n["reference_unavailable"]
    assert n["dataset"]["inputs"] == {"ids": "integers"}
    assert "no reference: ids.nnm is an NN graph file" in r.output


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ([], "--input-shape image=1,3,height,width"),
        (["--input-shape", "image=1,3,24"], "--input-shape image: input 'image' of"),
        (["--input-shape", "image=1,4,24,32"], "dimension 1 fixed to 3"),
        (
            ["--input-shape", "picture=1,3,24,32"],
            "no --model file has an input 'picture' (dense.onnx: 'image')",
        ),
        (["--input-shape", "image=1,3,x,2"], "NAME=D1,D2,..."),
        (["--input-value", "image=oops"], "NAME=V or NAME=V0,V1,..."),
        (["--inputs", "/nonexistent-folder"], "no such directory"),
    ],
)
def test_bad_shapes_names_and_folders_are_one_line_errors(runner, tmp_path, options, complaint):
    model = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(model)
    out = tmp_path / "o"
    r = runner.invoke(main, ["benchmark", "--model", str(model), *options, "--out", str(out)])
    assert r.exit_code == 2
    assert complaint in one_line_error(r)
    assert not out.exists()  # refused before any work


def test_a_bad_input_file_and_settings_on_an_nnm_file(runner, tmp_path):
    model, nnm = tmp_path / "dense.onnx", tmp_path / "dense.nnm"
    usermodels.symbolic_dense(model)
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "image.npy").write_bytes(b"not an array")
    r = runner.invoke(main, ["benchmark", "--model", str(model), "--inputs", str(folder)])
    assert r.exit_code == 2 and "image.npy: not a .npy array file" in one_line_error(r)
    _convert(runner, model, nnm, "--input-shape", "image=1,3,8,8")
    r = runner.invoke(main, ["benchmark", "--model", str(nnm), "--input-shape", "image=1,3,8,8"])
    assert r.exit_code == 2 and "dense.nnm is an NN graph file" in one_line_error(r)


def test_a_dense_map_fails_a_driver_off_by_1e_3(runner, tmp_path, monkeypatch):
    """sample-faulty with output_offset=1e-3 (docs/faulty-driver.md): its map is off everywhere by 1e-3."""
    monkeypatch.setenv("MLTS_FAULT", "output_offset=1e-3")
    model = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(model)
    out = tmp_path / "o"
    r = runner.invoke(
        main,
        [
            "benchmark", "--model", str(model), "--input-shape", "image=1,3,16,16",
            "--drivers", "^sample-(all|faulty)$", "--out", str(out), *SHORT,
        ],
    )  # fmt: skip
    assert r.exit_code == 1 and "1 of 3 runs broke an accuracy limit" in one_line_error(r)
    rows = _rows(out)
    good, bad = rows["dense", "driver:sample-all"], rows["dense", "driver:sample-faulty"]
    assert good["verdict"]["pass"] and good["validation_errors"] == []
    assert not bad["verdict"]["pass"] and bad["verdict"]["rule_name"] == "dense-map-error"
    assert [c["metric"] for c in bad["verdict"]["checks"]] == ["max_abs_error_vs_golden"]
    assert bad["accuracy"]["vs_reference"].get("top1_agreement") is None  # no top-1 of a map


def test_an_if_on_a_configuration_input_folds_to_its_branch(runner, tmp_path):
    from mlts.convert import ConversionError, convert

    model = tmp_path / "if.onnx"
    usermodels.if_on_rate(model)
    try:
        convert(model, input_values={"sample_rate": np.array(16000)})
    except ConversionError as e:
        pytest.skip(f"the converter does not fold an If on a fixed input yet: {e}")
    out = tmp_path / "o"
    r = runner.invoke(
        main,
        [
            "benchmark", "--model", str(model), "--input-value", "sample_rate=16000",
            "--drivers", "^sample-all$", "--out", str(out), *SHORT,
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    driver = _rows(out)["if", "driver:sample-all"]
    assert driver["verdict"]["pass"]
    assert driver["accuracy"]["vs_golden"]["golden_max_abs"] == pytest.approx(
        2 * 0.5, rel=1e-3
    )  # the x2 branch


def test_stress_and_validate_take_the_model_and_its_options(runner, tmp_path):
    model = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(model)
    shape = ["--input-shape", "image=1,3,12,12"]
    r = runner.invoke(
        main, ["stress", "inference-stress", "--model", str(model), "--drivers", "^sample-all$"]
    )
    assert r.exit_code == 2 and "--input-shape image=1,3,height,width" in one_line_error(r)
    r = runner.invoke(
        main,
        [
            "stress",
            "inference-stress",
            "--model",
            str(model),
            *shape,
            "--drivers",
            "^sample-all$",
            "--duration",
            "0.3",
        ],
    )
    assert r.exit_code == 0, r.output
    assert f"inference-stress/sample-all/{model}" in r.output and "SUCCESS" in r.output
    out = tmp_path / "v"
    r = runner.invoke(
        main, ["validate", "--driver", "sample-all", "--model", str(model), *shape, "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    cases = json.loads((out / "results.json").read_text())["validate"]["cases"]
    assert {c["name"] for c in cases} >= {
        "dense.onnx: prepareModel",
        "dense.onnx [sync]",
        "dense.onnx [burst]",
    }
    assert all(c["outcome"] == "pass" for c in cases)
    r = runner.invoke(
        main, ["validate", "--driver", "sample-all", "--suite", "model", "--out", str(tmp_path / "w")]
    )
    assert r.exit_code == 2 and "--model FILE" in one_line_error(r)


def test_calibrate_takes_the_options_and_skips_an_nnm_file(runner, tmp_path):
    from mlts.calibrate.measure import CalibrationConfig, measure_workload
    from mlts.calibrate.workloads import parse_model_arguments

    model, dense, nnm = tmp_path / "rate.onnx", tmp_path / "dense.onnx", tmp_path / "dense.nnm"
    usermodels.rate_scaled(model)
    r = runner.invoke(
        main, ["calibrate", "--driver", "sample-all", "--model", str(model), "--input-value", "rate=1"]
    )
    assert r.exit_code == 2 and "no --model file has an input 'rate'" in one_line_error(r)
    # The fixed int64 sample_rate becomes a constant: the float input and output say TENSOR_FLOAT32.
    (workload,) = parse_model_arguments([str(model)], _settings(values={"sample_rate": np.array(16000)}))
    assert workload.operand_type == "TENSOR_FLOAT32" and workload.user.values["sample_rate"] == 16000
    usermodels.symbolic_dense(dense)
    _convert(runner, dense, nnm, "--input-shape", "image=1,3,8,8")
    (workload,) = parse_model_arguments([str(nnm)])
    record = measure_workload(None, workload, CalibrationConfig(), None, lambda message: None)
    assert record["status"] == "skipped" and "NN graph file" in record["reason"]


def _settings(**kw):
    from mlts.bench.user_model import InputSettings

    return InputSettings(**kw, files_option=False)
