"""`mlts benchmark` and `mlts calibrate` on .tflite models: LiteRT rows, --reference, the reference named on rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mlts.bench.reference_choice import ReferenceChoiceError, TwinReference, framework_of, resolve
from mlts.bench.sources import ModelSource
from tests.convert.tflite._tflbuild import TflModel

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (ai-edge-litert) is not installed")
ROOT = Path(__file__).resolve().parents[2]


def _relu_tflite(path: Path, shape_signature=None) -> Path:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([1, 4, 4, 3], name="image", shape_signature=shape_signature)
    k = g.tensor([3], data=np.array([0.5, -0.25, 1.0], np.float32))
    t = g.tensor([1, 4, 4, 3])
    y = g.tensor([1, 4, 4, 3], name="out")
    g.op("ADD", [x, k], [t], "AddOptions")
    g.op("RELU", [t], [y])
    g.io([x], [y])
    path.write_bytes(m.finish())
    return path


def _relu_onnx(path: Path) -> Path:
    """The same model as an ONNX file with NCHW input and output."""
    k = helper.make_tensor("k", TensorProto.FLOAT, [1, 3, 1, 1], [0.5, -0.25, 1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["image", "k"], ["t"]), helper.make_node("Relu", ["t"], ["out"])],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 4, 4])],
        [k],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def _mlts(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mlts", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_resolve_keeps_each_model_with_a_reference_it_can_have(tmp_path) -> None:
    tfl = ModelSource("net", _relu_tflite(tmp_path / "net.tflite"))
    onx = ModelSource("net", _relu_onnx(tmp_path / "net.onnx"))
    zoo = ModelSource("mobilenet_v1_0.25_128", None, "mobilenet_v1_0.25_128")
    assert framework_of(tfl) == "litert" and framework_of(onx) == framework_of(zoo) == "onnxruntime"
    assert resolve([tfl, onx, zoo], "auto") == [tfl, onx, zoo]
    with pytest.raises(
        ReferenceChoiceError, match=r"it is a TFLite model: it has no ONNX graph for onnxruntime"
    ):
        resolve([tfl], "onnxruntime")
    with pytest.raises(ReferenceChoiceError, match=r"it is an ONNX model: LiteRT runs TFLite models only"):
        resolve([onx], "litert")
    (paired,) = resolve([tfl, onx], "both")
    assert paired.path == tfl.path and paired.twin == onx.path
    with pytest.raises(ReferenceChoiceError, match=r"once as .tflite and once as ONNX"):
        resolve([tfl], "both")
    with pytest.raises(ReferenceChoiceError, match=r"zoo model .* exists only as ONNX"):
        resolve([zoo], "both")


def test_twin_reference_moves_nhwc_inputs_to_nchw_and_back(tmp_path) -> None:
    from mlts.convert.tflite import convert_tflite

    conv = convert_tflite(_relu_tflite(tmp_path / "net.tflite"))
    twin = TwinReference(_relu_onnx(tmp_path / "net.onnx").read_bytes(), 1, conv)
    x = np.random.default_rng(0).standard_normal([1, 4, 4, 3]).astype(np.float32)
    (out,) = twin.run([x])
    np.testing.assert_allclose(out, np.maximum(x + np.array([0.5, -0.25, 1.0], np.float32), 0), rtol=1e-6)


def test_benchmark_tflite_rows_name_litert(tmp_path) -> None:
    model = _relu_tflite(tmp_path / "net.tflite")
    out = tmp_path / "out"
    proc = _mlts(
        "benchmark", "--model", str(model), "--drivers", "^sample-all$", "--no-compilation", "--warmup", "0",
        "--duration", "0", "--iterations", "2", "--images", "2", "--out", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    rows = {r["backend"]: r for r in doc["results"]}
    assert list(rows) == ["cpu:litert", "driver:sample-all"]
    assert all(r["reference"] == "litert" for r in rows.values())
    assert rows["driver:sample-all"]["accuracy"]["vs_reference"]["max_abs_error"] <= 1e-6
    assert rows["cpu:litert"]["dataset"]["name"] != "synthetic"  # an NHWC image input runs on the images


def test_benchmark_reference_both_adds_the_onnx_twin_row(tmp_path) -> None:
    tfl, onx = _relu_tflite(tmp_path / "net.tflite"), _relu_onnx(tmp_path / "net.onnx")
    out = tmp_path / "out"
    proc = _mlts(
        "benchmark", "--model", str(tfl), "--model", str(onx), "--reference", "both", "--drivers", "^sample-all$",
        "--no-compilation", "--warmup", "0", "--duration", "0", "--iterations", "2", "--images", "2",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    assert list(rows) == ["cpu:litert", "cpu:onnxruntime", "driver:sample-all"]
    twin = rows["cpu:onnxruntime"]
    assert twin["status"] == "ok" and twin["reference"] == "litert"
    assert twin["accuracy"]["vs_reference"]["max_abs_error"] <= 1e-6


def test_benchmark_refuses_onnxruntime_for_a_tflite_model_in_one_line(tmp_path) -> None:
    model = _relu_tflite(tmp_path / "net.tflite")
    proc = _mlts(
        "benchmark", "--model", str(model), "--reference", "onnxruntime", "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "it has no ONNX graph for onnxruntime to run" in lines[0]
    assert not (tmp_path / "o" / "results.json").exists()


def test_convert_command_writes_a_tflite_model_as_nnm(tmp_path) -> None:
    model = _relu_tflite(tmp_path / "net.tflite")
    proc = _mlts("convert", str(model), "-o", str(tmp_path / "net.nnm"))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and (tmp_path / "net.nnm").stat().st_size > 0
    proc = _mlts("convert", str(model), "-o", str(tmp_path / "x.nnm"), "--input-shape", "image=1,8,8,3")
    assert proc.returncode == 2 and "input 'image' has dimension 1 fixed to 4 by the file" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.nnm").exists()
    dynamic = _relu_tflite(tmp_path / "dyn.tflite", shape_signature=(-1, -1, -1, 3))
    proc = _mlts("convert", str(dynamic), "-o", str(tmp_path / "d.nnm"), "--input-shape", "image=2,8,6,3")
    assert proc.returncode == 0, proc.stderr
    assert "converted with the given shape [2, 8, 6, 3]" in proc.stdout


def test_select_models_gives_a_tflite_source_its_input_shapes(tmp_path) -> None:
    from mlts.bench.sources import ModelSelectionError, select_models
    from mlts.bench.user_model import InputSettings

    dynamic = _relu_tflite(tmp_path / "dyn.tflite", shape_signature=(-1, -1, -1, 3))
    (source,) = select_models(None, (str(dynamic),), InputSettings({"image": (2, 5, 5, 3)}))
    assert source.input_shapes == (("image", (2, 5, 5, 3)),)
    with pytest.raises(ModelSelectionError, match=r"--input-value image: input 'image' of .* is a TFLite"):
        select_models(None, (str(dynamic),), InputSettings({}, {"image": np.zeros(1)}))


def test_benchmark_runs_a_tflite_model_at_the_input_shape_given(tmp_path) -> None:
    model = _relu_tflite(tmp_path / "net.tflite", shape_signature=(-1, -1, -1, 3))
    out = tmp_path / "out"
    proc = _mlts(
        "benchmark", "--model", str(model), "--input-shape", "image=2,5,3,3", "--drivers", "^sample-all$",
        "--no-compilation", "--warmup", "0", "--duration", "0", "--iterations", "1", "--images", "1",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    assert rows["driver:sample-all"]["status"] == "ok"
    assert rows["driver:sample-all"]["accuracy"]["vs_reference"]["max_abs_error"] <= 1e-6


def test_calibrate_infers_the_operand_type_of_a_tflite_model(tmp_path) -> None:
    from mlts.bench.reference_choice import reference_for_model
    from mlts.calibrate.measure import cpu_run  # noqa: F401  (the CPU run dispatches on the model's format)
    from mlts.calibrate.workloads import parse_model_argument
    from mlts.convert import load_model

    path = _relu_tflite(tmp_path / "net.tflite")
    workload = parse_model_argument(str(path))
    assert workload.operand_type == "TENSOR_FLOAT32" and workload.path == path
    reference = reference_for_model(load_model(path), 1)
    assert reference.backend == "cpu:litert"
    x = np.ones([1, 4, 4, 3], np.float32)
    np.testing.assert_allclose(reference.run([x])[0], np.maximum(x + [0.5, -0.25, 1.0], 0))


def test_validate_model_suite_runs_a_tflite_model_against_litert(tmp_path) -> None:
    model = _relu_tflite(tmp_path / "relu.tflite")
    out = tmp_path / "v"
    r = _mlts(
        "validate", "--driver", "sample-all", "--suite", "model", "--model", str(model), "--out", str(out)
    )
    assert r.returncode == 0, r.stderr + r.stdout
    cases = json.loads((out / "results.json").read_text())["validate"]["cases"]
    by_name = {c["name"]: c for c in cases}
    assert by_name["relu.tflite: load and convert"]["outcome"] == "pass"
    # The first path has no float64 reference; it says how far it is from LiteRT (exact here: ADD, RELU).
    first = next(c for c in cases if c["name"].startswith("relu.tflite [") and c["outcome"] == "skip")
    assert "max|driver - LiteRT| is 0," in first["reason"]


def test_stress_takes_a_tflite_model_file(tmp_path) -> None:
    model = _relu_tflite(tmp_path / "relu.tflite")
    out = tmp_path / "s"
    r = _mlts(
        "stress", "inference-stress", "--model", str(model), "--drivers", "^sample-all$",
        "--duration", "1", "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    (row,) = json.loads((out / "results.json").read_text())["results"]
    assert row["outcome"] == "SUCCESS" and row["model"].endswith("relu.tflite")
