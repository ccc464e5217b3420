"""scripts/build_and_run_benchmark.sh: MLTS's options, with -b (the installed environment) and --quick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_and_run_benchmark.sh"


def _run(args: list[str], tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["MLTS_VENV"] = sys.prefix  # the environment running the tests is the "build"
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


def test_scoring_with_skip_build_and_quick_writes_the_report(tmp_path):
    out = tmp_path / "res"
    args = ["-b", "--quick", "-m", "^mobilenet_v1_0.25_128$", "-f", "^sample-all$", "-o", str(out), "scoring"]
    args += ["--", "--images", "2", "--duration", "0.2", "--warmup", "0.05", "--compile-iterations", "2"]
    r = _run(args, tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    assert f"mlts: report: {out / 'report.html'}" in r.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["quick"] is True and doc["config"]["drivers"] == ["sample-all"]
    assert {row["backend"] for row in doc["results"]} == {"cpu:onnxruntime", "driver:sample-all"}
    assert (out / "results.csv").is_file() and (out / "report.html").stat().st_size > 10_000
    assert (out / "summary.md").read_text().startswith("## mlts benchmark: 1 of 1 verdicts passed")


def test_include_nnapi_reference_adds_the_runtimes_choice(tmp_path):
    out = tmp_path / "res"
    args = ["-b", "-q", "-r", "-m", "^mobilenet_v1_0.25_128$", "-o", str(out)]
    args += [
        "--",
        "--images",
        "1",
        "--duration",
        "0",
        "--warmup",
        "0",
        "--iterations",
        "2",
        "--no-compilation",
    ]
    r = _run(args, tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    rows = json.loads((out / "results.json").read_text())["results"]
    chosen = [row for row in rows if row["backend"] == "nnapi-reference"]
    assert len(chosen) == 1 and chosen[0]["status"] == "ok", chosen
    coverage = chosen[0]["partition"]["coverage"]
    assert coverage["sample-all"] > 0 and coverage["cpu"] == 0  # sample-all runs every operation


def test_bad_options_are_one_line_errors(tmp_path):
    for args, expected in (
        (["-b", "--bogus"], "unknown option --bogus"),
        (["-b", "no-such-mode"], "unknown MODE 'no-such-mode'"),
        (["-b", "-f"], "-f needs a regex"),
        (["-b", "scoring", "other"], "one MODE only"),
    ):
        r = _run(args, tmp_path, timeout=30)
        assert r.returncode == 2, (args, r.stderr)
        assert expected in r.stderr.strip().splitlines()[-1]


def test_skip_build_without_an_installed_environment_says_so(tmp_path):
    env = dict(os.environ, MLTS_VENV=str(tmp_path / "nothing"))
    r = subprocess.run(["bash", str(SCRIPT), "-b"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 2 and "run once without -b" in r.stderr


def test_a_stress_mode_runs_through_the_script(tmp_path):
    out = tmp_path / "res"
    args = [
        "-b",
        "-m",
        "^mobilenet_v1_0.25_128$",
        "-o",
        str(out),
        "model-loading-stress",
        "--",
        "--duration",
        "0.5",
    ]
    r = _run(args, tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["kind"] == "stress" and [row["outcome"] for row in doc["results"]] == ["SUCCESS"]
    assert doc["config"]["drivers"] == ["sample-all"]  # the fault-injection driver is not picked by default
    assert f"mlts: report: {out / 'report.html'}" in r.stdout
