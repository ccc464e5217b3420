"""CLI abuse: absurd numbers, unwritable --out, broken plugins and drivers, unconvertible models."""

from __future__ import annotations

import csv
import json
import re

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from mlts.cli import main
from tests.cli.clikit import tiny_conv_model

FAST = ["--warmup", "0", "--duration", "0", "--iterations", "2", "--no-compilation"]
ABSURD = ["1e308", "inf", "-inf", "nan", "-1"]


def _one_line(result) -> str:
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines, result.output
    return lines[-1]


@pytest.mark.parametrize("value", ABSURD)
@pytest.mark.parametrize(
    "command",
    [
        ["stress", "inference-stress", "--duration"],
        ["stress", "inference-stress", "--grace"],
        ["stress", "inference-stress", "--kill-rate"],
        ["stress", "inference-stress", "--degradation-limit"],
        ["benchmark", "--duration"],
        ["benchmark", "--warmup"],
        ["benchmark", "--compile-seconds"],
    ],
)
def test_absurd_durations_are_usage_errors(command, value):
    if value == "-1" and command[-1] == "--degradation-limit":
        pytest.skip("-1 % is a valid degradation limit (an improvement is required)")
    r = CliRunner().invoke(main, [*command, value])
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{command[-1]}'" in _one_line(r)


@pytest.mark.parametrize(
    ("command", "value"),
    [
        (["stress", "inference-stress", "--seed"], str(2**64)),
        (["stress", "inference-stress", "--random-count"], str(10**12)),
        (["benchmark", "--seed"], "-5"),
        (["benchmark", "--iterations"], str(10**9)),
    ],
)
def test_counts_out_of_range_are_usage_errors(command, value):
    r = CliRunner().invoke(main, [*command, value])
    assert r.exit_code == 2 and f"Invalid value for '{command[-1]}'" in _one_line(r)


def test_input_shape_dimensions_are_bounded(tmp_path):
    model = tmp_path / "m.onnx"
    tiny_conv_model(model)
    args = ["convert", str(model), "-o", str(tmp_path / "m.nnm"), "--input-shape", f"x=1,3,{2**40},8"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "at most 2147483647" in _one_line(r)


@pytest.mark.parametrize("command", [["stress", "--help"], ["benchmark", "--help"]])
def test_help_documents_every_range(command):
    options = CliRunner().invoke(main, command).output.split("Options:", 1)[1]
    for option in ("--duration", "--seed") + (("--grace",) if command[0] == "stress" else ("--warmup",)):
        block = re.search(rf"\n  {option} (.*?)(?=\n  -)", options, re.DOTALL)
        assert block and ("<=x<=" in block[1] or "<x<=" in block[1]), (option, block)


def test_stress_duration_and_grace_in_range_are_accepted_up_to_a_week():
    r = CliRunner().invoke(main, ["stress", "nope-mode", "--duration", "604800", "--grace", "3600"])
    assert r.exit_code == 2 and "unknown stress mode" in r.output  # the numbers themselves passed


def test_unwritable_out_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    model = tmp_path / "m.onnx"
    tiny_conv_model(model)
    args = [
        "benchmark",
        "--model",
        str(model),
        "--drivers",
        "^sample-all$",
        *FAST,
        "--out",
        str(blocker / "o"),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert _one_line(r).startswith(f"Error: --out {blocker / 'o'}: cannot write there")
    assert "starting driver" not in r.output and "m on" not in r.output


def test_plugin_calling_sys_exit_is_reported_as_broken(tmp_path):
    plugin = tmp_path / "exits.py"
    plugin.write_text("import sys\nsys.exit(3)\n")
    r = CliRunner().invoke(main, ["devices", "--driver-plugin", str(plugin)])
    assert r.exit_code == 2, r.output
    assert "is broken: it called sys.exit(3) while being imported" in _one_line(r)


RAISING_PLUGIN = """
from driver.variants import SampleAll


class Boom(SampleAll):
    name = "boom"

    def __init__(self, **options):
        raise RuntimeError("no accelerator found at /dev/accel0")
"""


@pytest.mark.parametrize("in_process", [False, True])
def test_driver_constructor_error_is_one_line_without_traceback(tmp_path, in_process):
    plugin = tmp_path / "boom.py"
    plugin.write_text(RAISING_PLUGIN)
    model = tmp_path / "m.onnx"
    tiny_conv_model(model)
    args = ["benchmark", "--driver-plugin", str(plugin), "--drivers", "^boom$", "--model", str(model)]
    args += [*FAST, "--out", str(tmp_path / "o"), *(["--in-process"] if in_process else [])]
    r = CliRunner().invoke(main, args)
    assert r.exit_code != 0
    line = _one_line(r)
    assert "RuntimeError: no accelerator found at /dev/accel0" in line
    assert "File " not in r.output and "^^^" not in r.output


def _argmax_model(path) -> None:
    """Einsum: an operation the converter does not support (no NNAPI equivalent)."""
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["x"], ["y"], equation="ij->i")],
        "argmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_unconvertible_model_becomes_error_rows_and_others_run(tmp_path):
    good, bad, broken = tmp_path / "relu.onnx", tmp_path / "argmax.onnx", tmp_path / "broken.onnx"
    tiny_conv_model(good)
    _argmax_model(bad)
    broken.write_bytes(b"\x08\x07garbage that is not a protobuf model")
    out = tmp_path / "o"
    args = ["benchmark", "--drivers", "^sample-all$", *FAST, "--out", str(out), "--quiet"]
    for m in (bad, good, broken):
        args += ["--model", str(m)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    doc = json.loads((out / "results.json").read_text())
    rows = {(row["model"], row["backend"]): row for row in doc["results"]}
    assert rows[("relu", "driver:sample-all")]["status"] == "ok"
    assert rows[("relu", "cpu:onnxruntime")]["status"] == "ok"
    for name, path, reason in (("argmax", bad, "Einsum"), ("broken", broken, "not an ONNX model")):
        for backend in ("cpu:onnxruntime", "driver:sample-all"):
            row = rows[(name, backend)]
            assert row["status"] == "error" and str(path) in row["error"] and reason in row["error"], row
    with open(out / "results.csv", newline="") as f:
        assert {row["model"] for row in csv.DictReader(f)} == {"relu", "argmax", "broken"}
    assert (out / "report.html").exists()
    assert "4 of 6 runs failed" in _one_line(r)
