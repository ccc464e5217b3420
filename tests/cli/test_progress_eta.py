"""The progress line's elapsed time and ETA stay true in every phase (a fake clock drives them)."""

from __future__ import annotations

import io
import os
import threading

import pytest

from mlts.commands import _progress
from mlts.commands._progress import TerminalProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture()
def wide(monkeypatch):
    monkeypatch.setattr(_progress.shutil, "get_terminal_size", lambda fallback: os.terminal_size((300, 24)))


def _last(out: io.StringIO) -> str:
    return out.getvalue().split("\r")[-1]


def test_elapsed_time_moves_on_in_a_phase_that_reports_nothing(wide):
    clock, out = Clock(), io.StringIO()
    p = TerminalProgress(out, live=True, clock=clock)
    p.plan(2, 10.0, models=1)
    p.phase("det", "-", "golden outputs for 16 inputs")
    assert "0:00 elapsed" in _last(out)
    clock.wait(95.0)  # one slow golden input, no event for 95 s
    p.tick()
    assert "1:35 elapsed" in _last(out) and "golden outputs for 16 inputs" in _last(out)


def test_a_long_preparation_with_steps_counts_in_the_eta(wide):
    """The 640x640 case: 25 s per golden input used to show "ETA 0:02" throughout."""
    clock, out = Clock(), io.StringIO()
    p = TerminalProgress(out, live=True, clock=clock)
    p.plan(2, 3.0, models=1)  # onnxruntime and one driver, 3 s planned each
    p.phase("det", "-", "golden outputs")
    clock.wait(50.0)
    p.advance(2, 16)  # 25 s an input: 14 inputs, 350 s, are left; then the 2 runs of 3 s
    assert p.eta() == pytest.approx(350.0 + 6.0)
    assert "ETA 5:56" in _last(out)
    clock.wait(10.0)
    p.tick()  # no new step yet: the input under way has taken 10 of its 25 s
    assert p.eta() == pytest.approx(25.0 * 14 - 10.0 + 6.0) and "ETA 5:46" in _last(out)
    clock.wait(30.0)  # slower than the others: the 13 inputs after it are still to come
    assert p.eta() == pytest.approx(25.0 * 13 + 6.0)
    p.advance(3, 16)  # 3 inputs in 90 s: 30 s each from now on
    assert p.eta() == pytest.approx(30.0 * 13 + 6.0)


def test_units_are_timed_from_their_first_phase_and_preparation_is_learned(wide):
    clock, out = Clock(), io.StringIO()
    p = TerminalProgress(out, live=True, clock=clock)
    p.plan(4, 10.0, models=2)  # 2 models x (onnxruntime + a driver)
    p.phase("a", "-", "convert")
    clock.wait(40.0)  # model a takes 40 s to prepare
    p.phase("a", "cpu:onnxruntime", "timing")
    clock.wait(4.0)
    p.unit_done()
    p.phase("a", "driver:x", "timing")
    clock.wait(6.0)
    p.unit_done()
    # Runs took 5 s on average (the preparation is not a run); model b's preparation is expected to
    # take as long as a's did.
    assert p.eta() == pytest.approx(2 * 5.0 + 40.0)
    p.phase("b", "-", "convert")
    clock.wait(10.0)
    assert p.eta() == pytest.approx(30.0 + 2 * 5.0)
    clock.wait(50.0)  # past the expected 40 s: nothing of it is left to count, the runs still are
    assert p.eta() == pytest.approx(2 * 5.0)
    p.phase("b", "cpu:onnxruntime", "timing")
    clock.wait(2.0)
    assert p.eta() == pytest.approx(3.0 + 5.0)


def test_a_run_past_its_estimate_leaves_the_eta_at_the_runs_to_come(wide):
    clock, out = Clock(), io.StringIO()
    p = TerminalProgress(out, live=True, clock=clock)
    p.plan(3, 10.0, models=1)
    p.phase("m", "driver:x", "compilation timings")
    clock.wait(25.0)
    assert p.eta() == pytest.approx(20.0)  # this one's overrun is not negative time
    p.advance(1, 4)  # a phase with steps: 3 more at 25 s each
    assert p.eta() == pytest.approx(75.0 + 20.0)


def test_off_a_terminal_a_quiet_phase_prints_its_status_with_times(wide):
    clock, out = Clock(), io.StringIO()
    p = TerminalProgress(out, live=False, clock=clock)
    p.plan(2, 10.0, models=1)
    p.phase("m", "driver:x", "compilation timings")
    clock.wait(_progress.PLAIN_PERIOD_S - 1)
    p.tick()
    assert out.getvalue().count("\n") == 1  # not yet
    clock.wait(1)
    p.tick()
    lines = out.getvalue().splitlines()
    assert (
        lines[-1]
        == "  model 1 of 1 · backend 1 of 2 · m · driver:x · compilation timings · 0:15 elapsed, ETA 0:10"
    )
    p.tick()
    assert len(out.getvalue().splitlines()) == 2  # at most one line per period


def test_the_ticker_thread_redraws_until_closed():
    out = io.StringIO()
    drawn = threading.Event()

    class Watched(TerminalProgress):
        def tick(self) -> None:
            super().tick()
            drawn.set()

    p = Watched(out, live=True, tick_every=0.01)
    p.plan(1, 1.0)
    p.phase("m", "-", "convert")
    assert drawn.wait(5.0)
    p.close()
    assert not p._ticker.is_alive()
    assert out.getvalue().endswith("\r\x1b[2K")
