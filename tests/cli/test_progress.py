"""The progress display: a live bar with ETA on a terminal, plain lines otherwise, nothing when quiet."""

from __future__ import annotations

import io
import os

from mlts.commands import _progress
from mlts.commands._progress import TerminalProgress, make_progress


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = TerminalProgress(out, live=False)
    p.plan(2, 5.0)
    p.phase("m", "driver:x", "timing")
    p.phase("m", "-", "convert")
    p.log("detail")
    p.unit_done()
    p.close()
    assert (
        out.getvalue()
        == "  model 1 · backend 1 · m · driver:x · timing\n  model 1 · backend 1 · m · convert\n  detail\n"
    )
    assert "\r" not in out.getvalue()


def test_live_bar_shows_counts_phase_and_eta_then_disappears(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    p = TerminalProgress(out, live=True)
    p.plan(4, 10.0)
    p.phase("mobilenet", "driver:x", "timing")
    assert "mobilenet · driver:x · timing" in out.getvalue()
    assert "ETA 0:40" in out.getvalue()  # 4 planned units of 10 s, none started
    now[0] += 30.0
    p.unit_done()  # one unit took 30 s: 3 left at the measured 30 s each
    assert p.eta() == 90.0 and "ETA 1:30" in out.getvalue().split("\r")[-1]
    p.log("hidden without detail")
    assert "hidden" not in out.getvalue()
    p.close()
    assert out.getvalue().endswith("\r\x1b[2K")


def test_quiet_is_silent_and_vlog_turns_on_detail(monkeypatch):
    assert type(make_progress(quiet=True, verbose=False)) is _progress.Progress
    monkeypatch.setenv("MLTS_VLOG", "1")
    assert _progress.detail_wanted(False)
    monkeypatch.setenv("MLTS_VLOG", "0")
    assert not _progress.detail_wanted(False) and _progress.detail_wanted(True)


def test_the_count_names_model_and_backend_of_all_planned(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(_progress.shutil, "get_terminal_size", lambda fallback: os.terminal_size((200, 24)))
    out = io.StringIO()
    p = TerminalProgress(out, live=True)
    p.phase("zoo models", "-", "building 3 zoo models")  # before the plan: not a model of the run
    assert out.getvalue().split("\r")[-1].startswith("\x1b[2K0:00 elapsed")
    p.plan(6, 10.0, models=3)  # 3 models x 2 backends
    p.phase("a", "-", "convert")
    assert (
        out.getvalue()
        .split("\r")[-1]
        .startswith("\x1b[2Kmodel 1 of 3 · 0:00 elapsed, ETA 1:00 · a · convert")
    )
    p.phase("a", "cpu:onnxruntime", "timing")
    p.unit_done()
    p.phase("a", "driver:x", "timing")
    assert "model 1 of 3 · backend 2 of 2 ·" in out.getvalue().split("\r")[-1]
    p.unit_done()
    p.phase("b", "-", "golden outputs")
    p.advance(40, 100)  # a long phase advances within itself
    last = out.getvalue().split("\r")[-1]
    assert "model 2 of 3 ·" in last and "backend" not in last and last.endswith("golden outputs (40/100)")
    p.phase("b", "cpu:onnxruntime", "compilation timings")
    p.advance(7)
    assert "model 2 of 3 · backend 1 of 2 ·" in out.getvalue().split("\r")[-1]
    assert out.getvalue().endswith("compilation timings (7)")


def test_off_a_terminal_a_long_phase_prints_a_status_line_periodically(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    p = TerminalProgress(out, live=False)
    p.plan(2, 60.0, models=1)
    p.phase("m", "-", "golden outputs")
    for step in range(1, 101):
        now[0] += 1.0  # one step a second
        p.advance(step, 100)
    lines = out.getvalue().splitlines()
    # One line for the phase, then one per PLAIN_PERIOD_S (15 s) of the 100 s phase, never more.
    assert lines[0] == "  model 1 of 1 · m · golden outputs"
    assert len(lines) == 1 + int(100 // _progress.PLAIN_PERIOD_S)
    # ETA: the phase's 85 steps left at 1 s each, then the 2 planned runs of 60 s.
    assert lines[1] == "  model 1 of 1 · m · golden outputs (15/100) · 0:15 elapsed, ETA 3:25"
    assert "\r" not in out.getvalue()
