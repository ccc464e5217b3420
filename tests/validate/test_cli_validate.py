"""`mlts validate` through CliRunner: outputs, exit status, bad input as one line, replay."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.validate.results import ValidateSection

FAST = r"^ADD/TENSOR_FLOAT32: operation input count|^timing \[sync\]$|alive"


@pytest.fixture()
def runner():
    return CliRunner()


def test_passing_run_writes_every_output(runner, tmp_path):
    out = tmp_path / "out"
    junit = tmp_path / "junit.xml"
    args = ["validate", "--driver", "sample-all", "--suite", "validation,behaviour", "--out", str(out)]
    result = runner.invoke(main, [*args, "--junit", str(junit), "--filter", FAST])
    assert result.exit_code == 0, result.output
    assert "sample-all: passed" in result.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["kind"] == "validate"
    section = ValidateSection.from_json(doc["validate"])
    assert section.suites == ("validation", "behaviour") and not section.failed
    assert section.summary()["behaviour"]["pass"] == 1
    assert ValidateSection.from_json(section.to_json()) == section
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and int(root.get("tests")) == len(section.cases)
    assert int(root.get("failures")) == 0
    page = (out / "report.html").read_text()
    assert "PASSED" in page and "ADD" in page and "<script" not in page and "http" not in page
    load = doc["environment"]["load"]  # the machine's load around the run, as benchmark and stress record
    assert load["before"]["loadavg"] and load["after"] is not None


def test_deliberate_restarts_are_explained(runner, tmp_path):
    out = tmp_path / "out"
    args = ["validate", "--driver", "sample-all", "--suite", "behaviour", "--out", str(out)]
    result = runner.invoke(main, [*args, "--filter", "^queries stable across restarts$"])
    assert result.exit_code == 0, result.output
    section = ValidateSection.from_json(json.loads((out / "results.json").read_text())["validate"])
    reasons = [f"behaviour: queries stable across restarts: a deliberate restart ({n} of 2)" for n in (1, 2)]
    assert section.restarts == 2 and list(section.restart_reasons) == reasons
    assert f"driver restarts: 2\n  {reasons[0]}\n  {reasons[1]}\n" in result.stdout


def test_failing_run_exits_1_with_reproducers(runner, tmp_path):
    out = tmp_path / "out"
    args = ["validate", "--driver", "sample-faulty", "--option", "skip_validation=1", "--suite", "validation"]
    result = runner.invoke(main, [*args, "--out", str(out), "--filter", FAST])
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.stdout
    section = ValidateSection.from_json(json.loads((out / "results.json").read_text())["validate"])
    failing = [c for c in section.cases if c.failed]
    assert failing and all(c.reproducer for c in failing)
    page = (out / "report.html").read_text()
    assert "FAILED" in page and "reproducers/" in page
    # The reproducer fails again on the faulty driver and passes on sample-all.
    again = runner.invoke(main, [*args[:5], "--replay", failing[0].reproducer])
    assert again.exit_code == 1 and again.stdout.startswith("FAIL: replay:")
    good = runner.invoke(main, ["validate", "--driver", "sample-all", "--replay", failing[0].reproducer])
    assert good.exit_code == 0 and good.stdout.startswith("PASS: replay:"), good.output


def _one_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1
    return lines[0]


def test_unknown_suite(runner, tmp_path):
    line = _one_line(runner.invoke(main, ["validate", "--driver", "sample-all", "--suite", "nope"]), 2)
    assert "unknown suite" in line and "validation" in line


def test_unknown_driver(runner):
    line = _one_line(runner.invoke(main, ["validate", "--driver", "no-such-driver"]), 2)
    assert "no-such-driver" in line and "sample-all" in line


def test_driver_that_cannot_start(runner, tmp_path):
    args = ["validate", "--driver", "sample-faulty", "--option", "crash_rate=2", "--out", str(tmp_path / "o")]
    line = _one_line(runner.invoke(main, args), 1)
    assert "cannot be validated" in line and "crash_rate" in line


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("garbage.json", b"\x00not json", "not a reproducer"),
        ("other.json", b'{"format": "something-else"}', "not a reproducer"),
        ("model.nnm", b"NNMODEL\x00garbage", "not a readable .nnm"),
        ("data.txt", b"hello", "not a reproducer"),
    ],
)
def test_garbage_replay_file(runner, tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_bytes(content)
    line = _one_line(runner.invoke(main, ["validate", "--driver", "sample-all", "--replay", str(path)]), 2)
    assert needle in line


def test_missing_replay_file(runner, tmp_path):
    line = _one_line(
        runner.invoke(main, ["validate", "--driver", "sample-all", "--replay", str(tmp_path / "x.json")]), 2
    )
    assert "no such file" in line


def test_driver_serve_offers_no_prevalidate(runner):
    result = runner.invoke(main, ["driver", "serve", "--help"])
    assert "--no-prevalidate" in result.output


def test_plugin_driver_is_picked_without_a_name(runner, tmp_path):
    plugin = tmp_path / "my_npu.py"
    plugin.write_text(
        "from driver.variants import SampleAll\n\n\nclass MyNpu(SampleAll):\n    name = 'my-npu'\n",
        encoding="utf-8",
    )
    args = [
        "validate",
        "--driver-plugin",
        str(plugin),
        "--suite",
        "behaviour",
        "--filter",
        r"^timing \[sync\]$",
    ]
    result = runner.invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("my-npu: passed: 1 cases")
