"""The end of a run: the verdict lines, --summary and --junit, the run sections of results.json,
interrupted runs that keep what finished, `mlts devices`' exit status and the stress table's wrapping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.commands.stress import format_results
from mlts.records import ResultsDocument
from tests.cli.clikit import FAST, tiny_conv_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def tiny(tmp_path):
    p = tmp_path / "tiny.onnx"
    tiny_conv_model(p)
    return p


def test_benchmark_ends_with_a_verdict_and_writes_summary_and_junit(tmp_path, tiny):
    out, md, xml = tmp_path / "o", tmp_path / "summary.md", tmp_path / "junit.xml"
    args = ["benchmark", "--model", str(tiny), "--drivers", "^sample-all$", "--out", str(out), *FAST]
    r = CliRunner().invoke(main, [*args, "--images", "4", "--summary", str(md), "--junit", str(xml)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("verdict: ")]
    assert len(starts) == 1
    # The verdict wraps at the terminal's width: its continuation lines are indented.
    verdict, i = lines[starts[0]], starts[0] + 1
    while i < len(lines) and lines[i].startswith("  "):
        verdict, i = verdict + " " + lines[i].strip(), i + 1
    assert verdict.startswith("verdict: 1 of 1 verdicts passed · driver ÷ onnxruntime")
    assert "run noisy: " in verdict and "legend:" in r.stdout
    doc = json.loads((out / "results.json").read_text())
    document = ResultsDocument.from_json(doc)  # the sections pass their checks
    assert document.section("completion") == {
        "complete": True,
        "interrupted": False,
        "planned": 2,
        "done": 2,
        "reason": "all 2 done",
    }
    summary = doc["summary"]
    assert (summary["verdicts_passed"], summary["verdicts_total"], summary["failures"]) == (1, 1, [])
    lo, hi = summary["geomean_ci"]
    assert lo <= summary["geomean_ratio"] <= hi and summary["geomean_rows"] == 1
    assert summary["noisy"] == doc["noise"]["noisy"]
    load = doc["environment"]["load"]
    assert load["before"]["loadavg"] and load["after"]["t_s"] >= load["before"]["t_s"]
    text = md.read_text()
    assert (
        text.startswith("## mlts benchmark: 1 of 1 verdicts passed")
        and "| tiny | driver:sample-all |" in text
    )
    root = ET.parse(xml).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "0")
    assert {tc.get("name") for tc in root.iter("testcase")} == {"cpu:onnxruntime", "driver:sample-all"}


def test_summary_and_junit_paths_are_checked_before_any_work(tmp_path, tiny):
    args = ["benchmark", "--model", str(tiny), "--out", str(tmp_path / "o"), *FAST]
    r = CliRunner().invoke(main, [*args, "--summary", str(tmp_path / "no" / "such" / "dir.md")])
    assert r.exit_code == 2 and "--summary" in r.output and "no such directory" in r.output
    r = CliRunner().invoke(main, [*args, "--junit", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.output
    assert not (tmp_path / "o").exists()


def _interruptible() -> None:
    """In the child before it runs mlts: SIGINT's default action, as a command typed in a shell gets it.
    A process started in the background by a shell without job control (a CI job, say) ignores SIGINT,
    and its children inherit that: mlts would then never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_second_backend(
    tmp_path: Path, tiny: Path, sig: int
) -> tuple[subprocess.CompletedProcess, str]:
    """A benchmark of `tiny` stopped by `sig` once its second backend starts timing; (result, 1st backend)."""
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "mlts", "benchmark", "--model", str(tiny), "--drivers", "^sample-all$"]
    # Each backend times for 2 s: the signal, sent as the second starts, lands well inside it.
    cmd += ["--out", str(out), "--warmup", "0", "--duration", "2", "--iterations", "2", "--images", "4"]
    cmd += [
        "--compile-iterations",
        "1",
        "--summary",
        str(tmp_path / "s.md"),
        "--junit",
        str(tmp_path / "j.xml"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_interruptible
    )
    timing: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:  # off a terminal: one plain progress line per phase
        if line.rstrip().endswith("· warm-up and timing"):
            timing.append(line.split(" · ")[-2])
            if len(timing) == 2:
                proc.send_signal(sig)
                break
    stdout, rest = proc.communicate(timeout=120)
    assert len(timing) == 2, rest
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, rest), timing[0]


@pytest.mark.parametrize(
    ("sig", "status", "name"), [(signal.SIGINT, 130, "SIGINT (Ctrl-C)"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_an_interrupted_benchmark_keeps_the_finished_backend_of_its_first_model(
    tmp_path, tiny, sig, status, name
):
    result, first = _interrupt_second_backend(tmp_path, tiny, sig)
    assert result.returncode == status, result.stderr
    assert f"interrupted by {name}; 1 of 2 runs finished and kept" in result.stderr
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [r["backend"] for r in doc["results"]] == [first]
    assert doc["completion"]["interrupted"] and not doc["completion"]["complete"]
    assert (doc["completion"]["planned"], doc["completion"]["done"]) == (2, 1)
    assert name in doc["completion"]["reason"]
    assert (tmp_path / "o" / "results.csv").is_file() and (tmp_path / "o" / "report.html").is_file()
    assert "INCOMPLETE: 1 of 2" in (tmp_path / "s.md").read_text()
    errors = [e.get("message") for e in ET.parse(tmp_path / "j.xml").getroot().iter("error")]
    assert any(m.startswith("incomplete: 1 of 2") for m in errors)
    assert "INCOMPLETE: 1 of 2" in result.stdout  # the verdict lines of what finished


def test_stress_quick_is_a_short_run_with_the_run_sections(tmp_path):
    out, md, xml = tmp_path / "o", tmp_path / "s.md", tmp_path / "j.xml"
    args = ["stress", "memory-mapped-model-load-stress", "--drivers", "^sample-all$", "--quick"]
    args += [
        "--models",
        "^mobilenet_v1_0.25_128$",
        "--out",
        str(out),
        "--summary",
        str(md),
        "--junit",
        str(xml),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["duration_s"] == 1.0 and doc["config"]["random_count"] == 50
    assert doc["completion"]["complete"] and (doc["completion"]["planned"], doc["completion"]["done"]) == (
        1,
        1,
    )
    assert doc["summary"]["verdicts_passed"] == doc["summary"]["verdicts_total"] == 1
    assert "verdict: 1 of 1 tests as expected · run noisy: " in r.stdout
    assert md.read_text().startswith("## mlts stress: 1 of 1 tests as expected")
    assert ET.parse(xml).getroot().get("tests") == "1"


def test_a_long_stress_reason_is_wrapped_not_cut():
    reason = "mobilenet_v1_0.25_128 median latency grew +314% (95% interval +196% to +429%) " * 3 + "END"
    record = {
        "test": "performance-degradation-stress/sample-all",
        "outcome": "FAILURE",
        "expected": "SUCCESS",
        "iterations": 669,
        "duration_s": 5.4,
        "reason": reason,
        "as_expected": False,
    }
    for width in (80, 120, 200):
        lines = format_results([record], width=width)
        assert all(len(line) <= width for line in lines[2:]), (width, lines)
        text = " ".join(" ".join(line.split()) for line in lines[2:])
        assert " ".join(reason.split()) + " <-- unexpected" in text  # every word, in order


BOOM = """
from driver.variants import SampleAll


class Boom(SampleAll):
    name = "boom"

    def __init__(self, **options):
        raise RuntimeError("no accelerator found at /dev/accel0")
"""


def test_devices_exits_1_when_a_plugin_driver_is_unavailable(tmp_path):
    plugin = tmp_path / "boom.py"
    plugin.write_text(BOOM)
    args = ["devices", "--driver-plugin", str(plugin)]
    r = CliRunner().invoke(main, [*args, "--drivers", "^(boom|sample-all)$"])
    assert r.exit_code == 1, r.output
    assert r.stderr.strip().splitlines()[-1] == "mlts devices: 1 of 2 drivers UNAVAILABLE: boom"
    assert "boom  (plugin" in r.stdout and "UNAVAILABLE" in r.stdout and "sample-all  (" in r.stdout
    r = CliRunner().invoke(main, [*args, "--drivers", "^boom$", "--json"])
    assert r.exit_code == 1, r.output
    (info,) = json.loads(r.stdout)
    assert info["name"] == "boom" and "no accelerator found" in info["error"]
