"""The timed run loop: a time-based warm-up that is discarded, then timed calls.

Warm-up: fn is called until warmup_s has passed on the clock (at least once when warmup_s > 0, never
when it is 0). Timed run: fn is called until BOTH min_duration_s has passed and min_iterations calls
were made, or until max_iterations calls (a cap that wins over both minimums). Each sample is
clock() after minus clock() before, around fn only. fn receives the call index, counted from 0 in the
warm-up and again from 0 in the timed run, so samples[i] belongs to call i (callers cycle inputs by it).

Early stop (optional, mlts.bench.stopping): with a `warmup_rule` the warm-up also ends as soon as its
calls have settled, and with a `precision` rule the timed run also ends at the first checkpoint where
the median's 95% interval is narrow enough; the limits above are then upper bounds. `Timed.stopped`
and `Timed.warmup_stopped` say which ended each ("precise"/"stable" or "bound").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mlts.bench.stopping import BOUND, PRECISE, STABLE, PrecisionRule, PrecisionWatch, StableRule

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Timed:
    """The outcome of run_timed: timed samples (seconds per call) and what the warm-up took."""

    samples: tuple[float, ...]
    warmup_iterations: int
    warmup_seconds: float
    duration_seconds: float
    stopped: str = BOUND
    warmup_stopped: str = BOUND
    checks: int = 0

    @property
    def iterations(self) -> int:
        return len(self.samples)


@dataclass(frozen=True, slots=True)
class RunControl:
    """Warm-up seconds, minimum timed seconds and iterations, and an optional iteration cap."""

    warmup_s: float
    min_duration_s: float
    min_iterations: int
    max_iterations: int | None = None
    precision: PrecisionRule | None = None
    warmup_rule: StableRule | None = None

    def __post_init__(self) -> None:
        _check_control(self.warmup_s, self.min_duration_s, self.min_iterations, self.max_iterations)

    def run(self, fn: Callable[[int], object], *, clock: Clock = time.perf_counter) -> Timed:
        """run_timed with these settings."""
        return run_timed(
            fn,
            warmup_s=self.warmup_s,
            min_duration_s=self.min_duration_s,
            min_iterations=self.min_iterations,
            max_iterations=self.max_iterations,
            clock=clock,
            precision=self.precision,
            warmup_rule=self.warmup_rule,
        )


def _check_control(
    warmup_s: float, min_duration_s: float, min_iterations: int, max_iterations: int | None
) -> None:
    """ValueError (one line) on negative or non-finite times and on iteration counts below 1."""
    for name, value in (("warm-up", warmup_s), ("duration", min_duration_s)):
        if not (value >= 0 and value != float("inf")):
            raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")
    if min_iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {min_iterations}")
    if max_iterations is not None and max_iterations < 1:
        raise ValueError(f"maximum iterations must be >= 1, got {max_iterations}")


def _warm_up(
    fn: Callable[[int], object], warmup_s: float, clock: Clock, rule: StableRule | None
) -> tuple[int, float, str]:
    """Call fn until warmup_s has passed (none if 0) or, with `rule`, its calls have settled;
    returns (calls made, seconds taken, what ended it)."""
    if warmup_s == 0:
        return 0, 0.0, BOUND
    start = clock()
    calls = 0
    durations: list[float] = []
    last = start
    while True:
        fn(calls)
        calls += 1
        after = clock()
        durations.append(after - last)  # one clock reading per call, as without a rule
        last = after
        elapsed = after - start
        if elapsed >= warmup_s:
            return calls, elapsed, BOUND
        if rule is not None and rule.stable(durations):
            return calls, elapsed, STABLE


def run_timed(
    fn: Callable[[int], object],
    *,
    warmup_s: float,
    min_duration_s: float,
    min_iterations: int,
    clock: Clock = time.perf_counter,
    max_iterations: int | None = None,
    precision: PrecisionRule | None = None,
    warmup_rule: StableRule | None = None,
) -> Timed:
    """Warm up (discarded), then time calls until both minimums are met or max_iterations is reached,
    or (with `precision`) the median is precise, whichever comes first."""
    _check_control(warmup_s, min_duration_s, min_iterations, max_iterations)
    warmup_calls, warmup_seconds, warmup_stopped = _warm_up(fn, warmup_s, clock, warmup_rule)
    watch = PrecisionWatch(precision) if precision is not None else None
    samples: list[float] = []
    stopped = BOUND
    start = clock()
    after = start
    while True:
        before = clock()
        fn(len(samples))
        after = clock()
        samples.append(after - before)
        done = after - start >= min_duration_s and len(samples) >= min_iterations
        if done or (max_iterations is not None and len(samples) >= max_iterations):
            break
        if watch is not None and watch.stop(samples, after - start):
            stopped = PRECISE
            break
    return Timed(
        tuple(samples),
        warmup_calls,
        warmup_seconds,
        after - start,
        stopped=stopped,
        warmup_stopped=warmup_stopped,
        checks=0 if watch is None else watch.checks,
    )
