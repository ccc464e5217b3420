"""run_timed with a fake clock: time advances only inside fn, by scripted durations, so every count is exact.

Durations are dyadic fractions (0.25 s, 0.5 s, ...), so sums and differences are exact in float64 and
the checks use ==, no tolerance. Nothing sleeps and no real time is read.
"""

from __future__ import annotations

import itertools

import pytest

from mlts.bench import timing


class FakeClock:
    """A clock whose time moves only when the fake model runs; records every call index it sees."""

    def __init__(self, durations):
        self.now = 100.0  # not zero: samples must be differences, not raw readings
        self._durations = iter(durations)
        self.calls: list[int] = []

    def __call__(self) -> float:
        return self.now

    def fn(self, index: int) -> None:
        self.calls.append(index)
        self.now += next(self._durations)


def test_warmup_runs_until_its_time_has_passed_and_is_discarded():
    clock = FakeClock(itertools.chain([0.25] * 3, itertools.repeat(0.5)))
    t = timing.run_timed(clock.fn, warmup_s=0.6, min_duration_s=1.0, min_iterations=2, clock=clock)
    # warm-up: 0.25, 0.5 (< 0.6), 0.75 (>= 0.6) -> 3 calls, 0.75 s, none of them in the samples
    assert (t.warmup_iterations, t.warmup_seconds) == (3, 0.75)
    assert t.samples == (0.5, 0.5) and t.duration_seconds == 1.0
    assert clock.calls == [0, 1, 2, 0, 1]  # each phase counts calls from 0


def test_zero_warmup_makes_no_call_and_positive_warmup_at_least_one():
    clock = FakeClock(itertools.repeat(1.0))
    t = timing.run_timed(clock.fn, warmup_s=0, min_duration_s=0, min_iterations=1, clock=clock)
    assert (t.warmup_iterations, t.warmup_seconds, t.samples) == (0, 0.0, (1.0,))
    clock = FakeClock(itertools.repeat(1.0))
    t = timing.run_timed(clock.fn, warmup_s=1e-9, min_duration_s=0, min_iterations=1, clock=clock)
    assert (t.warmup_iterations, t.warmup_seconds) == (1, 1.0)


def test_duration_reached_first_still_waits_for_min_iterations():
    clock = FakeClock(itertools.repeat(0.5))
    t = timing.run_timed(clock.fn, warmup_s=0, min_duration_s=1.0, min_iterations=5, clock=clock)
    assert t.iterations == 5 and t.duration_seconds == 2.5  # 1 s was reached after 2 calls


def test_iterations_reached_first_still_waits_for_min_duration():
    clock = FakeClock(itertools.repeat(0.125))
    t = timing.run_timed(clock.fn, warmup_s=0, min_duration_s=1.0, min_iterations=3, clock=clock)
    assert t.iterations == 8 and t.duration_seconds == 1.0  # exactly 1.0 counts as reached


def test_each_sample_is_the_time_spent_in_fn_only():
    durations = [0.25, 1.0, 0.5, 0.125]
    clock = FakeClock(durations)
    t = timing.run_timed(clock.fn, warmup_s=0, min_duration_s=1.875, min_iterations=1, clock=clock)
    assert t.samples == tuple(durations) and t.duration_seconds == 1.875


def test_max_iterations_caps_both_minimums():
    clock = FakeClock(itertools.repeat(0.25))
    t = timing.run_timed(
        clock.fn, warmup_s=0, min_duration_s=100.0, min_iterations=50, max_iterations=7, clock=clock
    )
    assert t.iterations == 7 and t.duration_seconds == 1.75


def test_time_outside_fn_is_not_counted():
    """A clock that also advances between calls: the gap shows in the duration, not in the samples."""
    clock = FakeClock(itertools.repeat(0.25))
    ticks = iter(range(1000))

    def drifting() -> float:
        return clock.now + next(ticks) * 2**-10  # 1/1024 s per clock read, outside fn

    t = timing.run_timed(clock.fn, warmup_s=0, min_duration_s=0.5, min_iterations=1, clock=drifting)
    # reads: start=0, (1, fn, 2), (3, fn, 4): each sample = 0.25 + 1/1024; the run ends at read 4
    assert t.samples == (0.25 + 2**-10, 0.25 + 2**-10)
    assert t.duration_seconds == 0.5 + 4 * 2**-10


def test_run_control_runs_warmup_then_the_timed_run():
    clock = FakeClock(itertools.repeat(0.25))
    t = timing.RunControl(warmup_s=0.3, min_duration_s=1.0, min_iterations=1).run(clock.fn, clock=clock)
    assert (t.warmup_iterations, t.iterations) == (2, 4)  # 0.5 s >= 0.3 s warm-up, then 1 s
    clock = FakeClock(itertools.repeat(0.25))
    t = timing.RunControl(warmup_s=2.0, min_duration_s=10.0, min_iterations=20).run(clock.fn, clock=clock)
    assert (t.warmup_iterations, t.iterations, t.duration_seconds) == (8, 40, 10.0)


def test_fn_errors_propagate():
    def boom(index: int) -> None:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError, match="model failed"):
        timing.run_timed(boom, warmup_s=0, min_duration_s=0, min_iterations=1, clock=FakeClock([]))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"warmup_s": -1.0}, "warm-up must be"),
        ({"min_duration_s": float("nan")}, "duration must be"),
        ({"min_duration_s": float("inf")}, "duration must be"),
        ({"min_iterations": 0}, "iterations must be >= 1"),
        ({"max_iterations": 0}, "maximum iterations must be >= 1"),
    ],
)
def test_bad_controls_are_refused(kwargs, message):
    args = {"warmup_s": 0.0, "min_duration_s": 1.0, "min_iterations": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        timing.run_timed(lambda i: None, clock=FakeClock([]), **args)
    with pytest.raises(ValueError, match=message):
        timing.RunControl(**args)
