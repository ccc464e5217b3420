"""The progress display: a live bar with ETA on a terminal, plain lines otherwise, nothing when quiet."""

from __future__ import annotations

import io

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
    assert out.getvalue() == "  m · driver:x · timing\n  m · convert\n  detail\n"
    assert "\r" not in out.getvalue()


def test_live_bar_shows_counts_phase_and_eta_then_disappears(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    p = TerminalProgress(out, live=True)
    p.plan(4, 10.0)
    p.phase("mobilenet", "driver:x", "timing")
    assert "0/4 mobilenet · driver:x · timing" in out.getvalue()
    assert "ETA 0:40" in out.getvalue()  # 4 planned units of 10 s, none started
    now[0] += 30.0
    p.unit_done()  # one unit took 30 s: 3 left at the measured 30 s each
    assert p.eta() == 90.0 and "1/4" in out.getvalue().split("\r")[-1]
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
