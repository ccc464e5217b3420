"""--priority, --preference, --deadline-ms and --loop-timeout-ms on benchmark, stress and calibrate."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.runtime.qos_settings import QosSettings
from tests.cli.clikit import FAST, tiny_conv_model


@pytest.mark.parametrize("command", ["benchmark", "stress", "calibrate"])
@pytest.mark.parametrize(
    "args",
    [
        ["--priority", "urgent"],
        ["--preference", "fastest"],
        ["--deadline-ms", "0"],
        ["--deadline-ms", "-5"],
        ["--deadline-ms", "1e12"],
        ["--prepare-deadline-ms", "0"],
        ["--prepare-deadline-ms", "nan"],
        ["--loop-timeout-ms", "16000"],
        ["--loop-timeout-ms", "nan"],
    ],
)
def test_bad_qos_values_are_usage_errors(command, args):
    r = CliRunner().invoke(main, [command, *args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output


def test_benchmark_records_the_qos_settings_and_retries(tmp_path):
    model = tmp_path / "tiny.onnx"
    tiny_conv_model(model)
    out = tmp_path / "o"
    args = [
        "benchmark",
        "--model",
        str(model),
        "--drivers",
        "^sample-all$",
        "--images",
        "1",
        "--out",
        str(out),
    ]
    args += [*FAST, "--no-compilation", "--priority", "high", "--preference", "low-power"]
    args += ["--deadline-ms", "60000", "--prepare-deadline-ms", "120000", "--loop-timeout-ms", "100"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    want = {
        "priority": "high",
        "preference": "low-power",
        "deadline_ms": 60000.0,
        "prepare_deadline_ms": 120000.0,
        "loop_timeout_ms": 100.0,
    }
    driver_rows = [row for row in doc["results"] if row["backend"].startswith("driver:")]
    assert driver_rows and all(row["qos"] == want for row in driver_rows)
    assert all(row["retries"] == {"retries": 0, "errors": {}, "error_classes": {}} for row in driver_rows)
    # Each driver row carries the harness's own cost per call, measured on the row's connection.
    for row in driver_rows:
        overhead = row["harness_overhead"]
        assert overhead["method"] == "ping" and overhead["calls"] > 0
        assert 0 < overhead["median_ci95_us"][0] <= overhead["median_us"] <= overhead["median_ci95_us"][1]
    assert all("harness_overhead" not in row for row in doc["results"] if row["backend"] == "cpu:onnxruntime")


def test_settings_round_trip_and_reach_the_session():
    s = QosSettings.from_names("low", "sustained-speed", 12.5, 0, 250)
    assert QosSettings.from_dict(s.to_dict()) == s
    assert s.session_kwargs() == {
        "priority": 0,
        "preference": 2,
        "deadline_ms": 12.5,
        "prepare_deadline_ms": 250,
        "loop_timeout_ms": 0,
    }
    # Results written before preparation had its own deadline read back without one.
    assert QosSettings.from_dict({"deadline_ms": 5.0}).prepare_deadline_ms is None
    with pytest.raises(ValueError, match="prepare deadline 0 ms outside"):
        QosSettings.from_names(prepare_deadline_ms=0)
    with pytest.raises(ValueError, match="priority 'x' is not one of low, medium, high"):
        QosSettings.from_names("x")
