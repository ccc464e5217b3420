"""Deadlines as NNAPI's HAL takes them: an absolute CLOCK_MONOTONIC time point in nanoseconds.

`TimePoint` is the one deadline type from the runtime to the driver: a tool's setting is relative
(`--deadline-ms`, `QosSettings.deadline_ms`) and becomes a TimePoint when a call is made
(`after_ms`); from there the same value travels through the execution seam, the wire and the
service to the driver. It is an `int` at run time (no cost on the hot path), a type of its own to
the type checker, so a duration or a wall-clock time cannot be passed where a deadline is meant.

The checks are NNAPI's, defined here once:

- before the work: a preparation or an execution whose deadline passed before it started fails
  with MISSED_DEADLINE_PERSISTENT (`check_before`, as the sample driver's prepareModel and execute);
- during the work: at the driver's checkpoints (before every operation, and between the steps of a
  preparation) a deadline that passed meanwhile fails it with MISSED_DEADLINE_TRANSIENT (`missed`).

A deadline has passed when the clock is beyond it (`now > deadline`, NNAPI's hasDeadlinePassed).
"""

from __future__ import annotations

import time
from typing import NewType

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError

#: An absolute deadline: time.monotonic_ns() (CLOCK_MONOTONIC) at which the work must be done.
TimePoint = NewType("TimePoint", int)


def now() -> TimePoint:
    """The current CLOCK_MONOTONIC time, in the deadlines' unit."""
    return TimePoint(time.monotonic_ns())


def after_ns(ns: int, start: int | None = None) -> TimePoint:
    """The deadline `ns` nanoseconds after `start` (default: now)."""
    return TimePoint((time.monotonic_ns() if start is None else start) + ns)


def after_ms(ms: float, start: int | None = None) -> TimePoint:
    """The deadline `ms` milliseconds after `start` (default: now)."""
    return after_ns(int(ms * 1e6), start)


def has_passed(deadline: TimePoint | None, at: int | None = None) -> bool:
    """Whether the clock (or `at`) is beyond `deadline`; never for no deadline."""
    return deadline is not None and (time.monotonic_ns() if at is None else at) > deadline


def seconds_left(deadline: TimePoint, at: int | None = None) -> float:
    """Seconds from now (or `at`) until `deadline`; 0 once it has passed."""
    return max(0.0, (deadline - (time.monotonic_ns() if at is None else at)) / 1e9)


def check_before(deadline: TimePoint | None, what: str, at: int | None = None) -> None:
    """MISSED_DEADLINE_PERSISTENT when the deadline passed before the work (`what`) started (now, or
    at `at` when the work was asked for earlier)."""
    if deadline is not None and (time.monotonic_ns() if at is None else at) > deadline:
        raise HalError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"{what}: the deadline had already passed")


def missed(what: str) -> HalError:
    """The error of a checkpoint that finds the deadline passed during the work: MISSED_DEADLINE_TRANSIENT."""
    return HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed {what}")
