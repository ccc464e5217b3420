"""How long a reader's next answer is likely to take, to stretch its polling window over it.

A polling window (mlts.hal.socket_polling, a burst's result ring) saves the wake-up of a halted CPU
only when the answer comes within it. A client that runs one small model call after call (an audio
model step by step, a camera frame every few hundred microseconds) waits about as long every time:
when the last two waits were both at most `max_us`, the next one, after its usual window, sleeps
until WAKE_LEAD_US before the shorter of them would end (woken at once by an earlier answer), then
polls until STRETCH_FACTOR times it. The sleep keeps the reader off the CPU while the other side
works (it may need both cores); the lead covers the timer's slack (50 µs by default) and the CPU's
wake-up. A longer wait (a large model, a client thinking between calls) leaves the window as it
is. The polling is bounded by `max_us * STRETCH_FACTOR`, and the windows' other rules (off after
long waits, probing after empty windows) still apply.

MLTS_POLLING_STRETCH_US sets `max_us` for every client reader (0: never stretch).
"""

from __future__ import annotations

import math
import os

#: The longest expected answer a window is stretched over (µs), unless MLTS_POLLING_STRETCH_US says otherwise.
STRETCH_MAX_US = 1000
#: The stretch is the expected wait times this (executions of one model vary by a few percent).
STRETCH_FACTOR = 1.25
#: A stretched wait sleeps until this long before the expected answer.
WAKE_LEAD_US = 150
ENV = "MLTS_POLLING_STRETCH_US"


def stretch_max_us(default: int = STRETCH_MAX_US) -> int:
    """MLTS_POLLING_STRETCH_US when set to a whole number (at most 10 000), else `default`."""
    raw = os.environ.get(ENV, "").strip()
    if raw.isdigit():
        return min(int(raw), 10_000)
    return default


class ExpectedWait:
    """The last two waits of one reader, and the stretch of its next polling window (seconds)."""

    __slots__ = ("max_s", "_last", "_before")

    def __init__(self, max_us: int) -> None:
        self.max_s = max(0, max_us) / 1e6
        self._last = math.inf
        self._before = math.inf

    def record(self, seconds: float) -> None:
        """A wait ended after `seconds`."""
        self._before = self._last
        self._last = seconds

    def stretch(self) -> tuple[float, float] | None:
        """(sleep until, poll until) in seconds after the wait began, or None unless both last waits
        were at most the maximum."""
        longer = max(self._last, self._before) if self.max_s > 0 else math.inf
        if longer > self.max_s:
            return None
        shorter = min(self._last, self._before)
        return max(0.0, shorter - WAKE_LEAD_US / 1e6), shorter * STRETCH_FACTOR
