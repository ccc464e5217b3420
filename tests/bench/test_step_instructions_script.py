"""benchmarks/step_instructions.py's own parts: both step paths run a recurrent model's steps with
the states carried (without valgrind), the profile lines it reads from callgrind_annotate
(benchmarks/callgrind_dumps.py), and the arguments it refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import callgrind_dumps  # noqa: E402
import step_instructions as script  # noqa: E402


@pytest.mark.parametrize("path", ["session", "execute"])
def test_both_paths_run_the_steps(path, capsys) -> None:
    script.measure(["tts_float"], 2, 1, 1, path, markers=False)
    assert capsys.readouterr().out.strip() == f"tts_float {path} n=2 threads=1"


def test_the_profile_lines_are_per_step_self_costs(tmp_path, monkeypatch) -> None:
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text("events: Ir\nsummary: 1000\n")
    listing = (
        "1,000 (100.0%)  PROGRAM TOTALS\n"
        "1,000 (100.0%)  ./Programs/python.c:main [python]\n"
        "  600 (60.00%)  lstm_kernels.c:panel_dot [_kernels.so]\n"
        "   50 ( 5.00%)  ceval.c:_PyEval_EvalFrameDefault [libpython]\n"
    )

    class Done:
        stdout = listing

    monkeypatch.setattr(callgrind_dumps.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(callgrind_dumps.subprocess, "run", lambda *a, **k: Done())
    rows = callgrind_dumps.top(str(dump), 5, 10)
    assert [r.split()[0] for r in rows] == ["60", "5"]
    assert "panel_dot" in rows[0] and "60.0%" in rows[0]


@pytest.mark.parametrize("argv", [["nope_float"], ["--steps", "0"], ["--threads", "0"]])
def test_bad_arguments_exit_2(argv, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["step_instructions.py", *argv])
    with pytest.raises(SystemExit) as info:
        script.main()
    assert info.value.code == 2
