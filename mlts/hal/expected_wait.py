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

Whether stretching pays is measured, not assumed: a polling reader holds a CPU, and on a machine
with few cores the other side may need it (a driver splitting an LSTM over both cores of two ran
its step 40% slower beside a polling client). Each reader keeps the average length of its
stretched and of its plain waits (an exponential average, weight AVERAGE_WEIGHT) and stretches
while the stretched ones are not longer; every PROBE_EVERY-th eligible wait goes the other way, so
both averages follow a change (another model, a busier machine).

MLTS_POLLING_STRETCH_US sets `max_us` for every client reader (0: never stretch).
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Callable

#: The longest expected answer a window is stretched over (µs), unless MLTS_POLLING_STRETCH_US says otherwise.
STRETCH_MAX_US = 1000
#: The stretch is the expected wait times this (executions of one model vary by a few percent).
STRETCH_FACTOR = 1.25
#: A stretched wait sleeps until this long before the expected answer (the sleep's timer slack is
#: 1 µs: waking then takes about 25 µs here, against about 75 µs with Linux's default 50 µs slack).
WAKE_LEAD_US = 50
ENV = "MLTS_POLLING_STRETCH_US"
#: Every this many eligible waits, one goes the way the averages do not choose.
PROBE_EVERY = 16
#: The weight of a new wait in its way's average.
AVERAGE_WEIGHT = 0.25


_PR_SET_TIMERSLACK = 29
_PR_GET_TIMERSLACK = 30
try:
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # no C library to ask: sleeps keep the default slack
    _prctl = None


def nap(wait: Callable[[float], bool], seconds: float) -> bool:
    """`wait(seconds)` (a blocking wait for an answer) with the calling thread's timer slack at 1 µs,
    restored after: the sleep of a stretched window ends when it should, not up to 50 µs later."""
    if _prctl is None:
        return wait(seconds)
    old = _prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    _prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    try:
        return wait(seconds)
    finally:
        _prctl(_PR_SET_TIMERSLACK, old if old > 0 else 0, 0, 0, 0)


def stretch_max_us(default: int = STRETCH_MAX_US) -> int:
    """MLTS_POLLING_STRETCH_US when set to a whole number (at most 10 000), else `default`."""
    raw = os.environ.get(ENV, "").strip()
    if raw.isdigit():
        return min(int(raw), 10_000)
    return default


class ExpectedWait:
    """The last two waits of one reader, the average wait with and without a stretch, and the plan
    of the next wait's stretch (seconds)."""

    __slots__ = ("max_s", "_last", "_before", "_average", "_eligible", "_way")

    def __init__(self, max_us: int) -> None:
        self.max_s = max(0, max_us) / 1e6
        self._last = math.inf
        self._before = math.inf
        self._average = [0.0, 0.0]  # of plain and of stretched waits; 0.0: none yet
        self._eligible = 0  # waits that could have been stretched
        self._way = -1  # this wait: -1 not eligible (or not asked), 0 plain, 1 stretched

    def record(self, seconds: float) -> None:
        """A wait ended after `seconds`."""
        self._before = self._last
        self._last = seconds
        way = self._way
        if way >= 0:
            avg = self._average[way]
            self._average[way] = seconds if avg == 0.0 else avg + (seconds - avg) * AVERAGE_WEIGHT
            self._way = -1

    def averages(self) -> tuple[float, float]:
        """The average plain and stretched waits (seconds; 0.0 before the first)."""
        return self._average[0], self._average[1]

    def stretch(self) -> tuple[float, float] | None:
        """Plan a wait: (sleep until, poll until) in seconds after it began, or None for a plain wait
        (the last two waits not both within the maximum, or a plain wait measuring faster)."""
        self._way = -1
        longer = max(self._last, self._before) if self.max_s > 0 else math.inf
        if longer > self.max_s:
            return None
        plain, stretched = self._average
        stretch = stretched <= plain if plain and stretched else not stretched
        self._eligible += 1
        if self._eligible % PROBE_EVERY == 0:
            stretch = not stretch
        self._way = int(stretch)
        if not stretch:
            return None
        shorter = min(self._last, self._before)
        return max(0.0, shorter - WAKE_LEAD_US / 1e6), shorter * STRETCH_FACTOR
