"""The command line, through click's CliRunner: happy paths and every bad-input path."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from mlts.cli import main
from tests.cli.clikit import one_line_error, tiny_conv_model


@pytest.fixture()
def runner():
    return CliRunner()


@pytest.fixture()
def tiny(tmp_path):
    p = tmp_path / "tiny.onnx"
    tiny_conv_model(p)
    return p


def test_help_lists_commands(runner):
    r = runner.invoke(main, ["--help"])
    assert r.exit_code == 0
    for cmd in ("models", "devices", "convert", "inspect", "benchmark", "compare", "report"):
        assert cmd in r.output


def test_models_json_lists_zoo(runner):
    r = runner.invoke(main, ["models", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    names = {m["name"] for m in doc["models"]}
    assert "mobilenet_v1_1.0_224" in names and "mobilenet_v2_0.35_128" in names
    v1 = next(m for m in doc["models"] if m["name"] == "mobilenet_v1_1.0_224")
    assert v1["dtype"] == "float32" and v1["input_shape"] == [1, 3, 224, 224]
    assert 4.0e6 < v1["params"] < 4.5e6 and 5.4e8 < v1["macs"] < 6.0e8
    assert "synthetic" in doc["note"].lower()


def test_devices_json_reports_sample_driver(runner):
    r = runner.invoke(main, ["devices", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    d = next(x for x in doc if x["name"] == "sample-all")
    assert d["type"] == "CPU"
    perf = {e["type"]: e for e in d["capabilities"]["operand_performance"]}
    assert perf["TENSOR_FLOAT32"]["exec_time"] == pytest.approx(1.1)


def test_convert_then_inspect(runner, tiny, tmp_path):
    out = tmp_path / "tiny.nnm"
    dot = tmp_path / "tiny.dot"
    r = runner.invoke(main, ["convert", str(tiny), "-o", str(out), "--dot", str(dot)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 0 and "digraph" in dot.read_text()
    r = runner.invoke(main, ["inspect", str(out)])
    assert r.exit_code == 0, r.output
    assert "CONV_2D" in r.output
    r = runner.invoke(main, ["inspect", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)


def test_benchmark_writes_results(runner, tiny, tmp_path):
    out = tmp_path / "res"
    r = runner.invoke(
        main,
        [
            "benchmark",
            "--model",
            str(tiny),
            "--out",
            str(out),
            "--iterations",
            "3",
            "--warmup",
            "0.05",
            "--duration",
            "0",
            "--images",
            "2",
            "--compile-seconds",
            "0.1",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema_version"] == 3
    assert (out / "results.csv").is_file() and (out / "report.html").is_file()
    backends = {rec["backend"] for rec in doc["results"]}
    assert backends == {"cpu:onnxruntime", "driver:sample-all"}
    drv = next(rec for rec in doc["results"] if rec["backend"] == "driver:sample-all")
    assert drv["status"] == "ok", drv
    assert drv["accuracy"]["vs_reference"]["cts_pass"] is True
    assert drv["latency_ms"]["min"] <= drv["latency_ms"]["median"] <= drv["latency_ms"]["max"]
    assert drv["iterations"] == 3 and len(drv["latency_ms"]["samples"]) == 3


# ------------------------------------------------------------ bad input


def test_convert_missing_file(runner, tmp_path):
    r = runner.invoke(main, ["convert", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "x.nnm")])
    assert "nope.onnx" in one_line_error(r)
    assert not (tmp_path / "x.nnm").exists()


def test_convert_non_onnx_bytes(runner, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffthis is not a protobuf" * 10)
    r = runner.invoke(main, ["convert", str(bad), "-o", str(tmp_path / "x.nnm")])
    one_line_error(r)
    assert not (tmp_path / "x.nnm").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.onnx"]


def test_inspect_truncated_nnm(runner, tiny, tmp_path):
    out = tmp_path / "t.nnm"
    assert runner.invoke(main, ["convert", str(tiny), "-o", str(out)]).exit_code == 0
    data = out.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    assert "t.nnm" in one_line_error(runner.invoke(main, ["inspect", str(out)]))


def test_inspect_missing_file(runner, tmp_path):
    one_line_error(runner.invoke(main, ["inspect", str(tmp_path / "missing.nnm")]))


def test_unknown_model_regex(runner, tmp_path):
    r = runner.invoke(main, ["benchmark", "--models", "resnet", "--out", str(tmp_path / "o")])
    assert "matches no model" in one_line_error(r)
    assert not (tmp_path / "o").exists()


def test_bad_regex(runner, tmp_path):
    r = runner.invoke(main, ["benchmark", "--models", "mobilenet(", "--out", str(tmp_path / "o")])
    assert "regex" in one_line_error(r)


def test_unknown_driver(runner, tiny, tmp_path):
    r = runner.invoke(
        main, ["benchmark", "--model", str(tiny), "--drivers", "^nosuchdriver$", "--out", str(tmp_path / "o")]
    )
    assert "nosuchdriver" in one_line_error(r)
    assert not (tmp_path / "o").exists()


def test_bad_driver_plugin(runner, tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text("raise RuntimeError('broken plugin')\n")
    r = runner.invoke(main, ["devices", "--driver-plugin", str(plugin)])
    assert "plugin.py" in one_line_error(r)


def test_bad_flag(runner):
    r = runner.invoke(main, ["benchmark", "--iterations", "0"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_verbose_shows_traceback(runner, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    r = runner.invoke(main, ["-v", "convert", str(bad), "-o", str(tmp_path / "x.nnm")])
    assert r.exit_code != 0


FAILING_PLUGIN = '''
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from driver.variants import SampleAll


class Refuses(SampleAll):
    """Answers every query like the sample driver but cannot prepare anything."""

    name = "refuses"

    def __init__(self):
        super().__init__()
        self.name = "refuses"

    def prepareModel(self, model, *args, **kwargs):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "this driver prepares nothing")
'''


def test_driver_failure_is_a_row_and_a_nonzero_exit(runner, tiny, tmp_path):
    plugin = tmp_path / "refuses.py"
    plugin.write_text(FAILING_PLUGIN)
    out = tmp_path / "res"
    r = runner.invoke(
        main,
        [
            "benchmark",
            "--model",
            str(tiny),
            "--driver-plugin",
            str(plugin),
            "--drivers",
            "refuses|sample-all",
            "--out",
            str(out),
            "--iterations",
            "2",
            "--warmup",
            "0",
            "--duration",
            "0",
            "--images",
            "1",
            "--compile-iterations",
            "2",
        ],
    )
    assert "1 of 3 runs failed" in one_line_error(r)
    doc = json.loads((out / "results.json").read_text())
    rows = {rec["backend"]: rec for rec in doc["results"]}
    assert rows["driver:refuses"]["status"] == "error"
    assert "prepares nothing" in rows["driver:refuses"]["error"]
    assert rows["driver:sample-all"]["status"] == "ok"


def test_in_process_driver_gives_the_same_results(runner, tiny, tmp_path):
    out = tmp_path / "res"
    r = runner.invoke(
        main,
        [
            "benchmark",
            "--model",
            str(tiny),
            "--in-process",
            "--out",
            str(out),
            "--iterations",
            "2",
            "--warmup",
            "0",
            "--duration",
            "0",
            "--images",
            "2",
            "--compile-iterations",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    drv = next(rec for rec in doc["results"] if rec["backend"] == "driver:sample-all")
    assert drv["accuracy"]["vs_reference"]["cts_pass"] is True and doc["config"]["in_process"] is True


def test_benchmark_garbage_model_fails_before_any_driver_starts(runner, tmp_path):
    bad = tmp_path / "random.onnx"
    bad.write_bytes(bytes(range(256)) * 3)
    r = runner.invoke(main, ["benchmark", "--model", str(bad), "--out", str(tmp_path / "o")])
    line = one_line_error(r)
    assert "random.onnx" in line and "not an ONNX model" in line and "internal error" not in line
    assert "starting driver" not in r.output
    assert not (tmp_path / "o").exists()


def test_convert_list_ops_prints_the_registry(runner):
    from mlts.convert.registry import versions

    result = runner.invoke(main, ["convert", "--list-ops"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    table = versions()
    for op in ("Resize", "TopK", "ConvTranspose", "Gather", "Where", "LpNormalization"):
        assert any(line.split()[:1] == [op] and f"opset {table[op][0]}-" in line for line in lines), op
    resize = next(line for line in lines if line.split()[:1] == ["Resize"])
    assert "versions from 10, 11, 13, 18, 19" in resize
    assert "Hardmax" not in result.output
    assert any(line.strip() == "QLinearAdd" for line in lines)


def test_convert_refusal_is_one_line_naming_the_node(runner, tmp_path):
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Hardmax", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 10
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = runner.invoke(main, ["convert", str(path), "-o", str(tmp_path / "m.nnm")])
    assert result.exit_code != 0
    assert "Hardmax node #0 (output 'y'): no NNAPI operation computes ONNX op 'Hardmax'" in result.output
    assert "Traceback" not in result.output
