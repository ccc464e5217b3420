"""A bounded polling window before a blocking socket read, used only while answers come quickly.

On a virtual machine a blocked reader's CPU halts, and waking it costs tens of microseconds (about
80 us here after a 10 ms wait, 10-40 us after shorter ones): more than a whole small call costs
otherwise. Like a burst's consumer (seed 003, NNAPI's sample driver polls 50 us), a socket reader
that expects an answer soon polls the socket without blocking for a short window first, so neither
side's CPU halts between a call and its answer.

The window is adaptive, so it costs little where it cannot pay: a reader polls only while its
recent waits were short (under `LONG_FACTOR` windows); one wait longer than that (a long execution,
a client thinking between calls) turns polling off until a wait is short again. And as a burst's
rings do (mlts.ipc.burst_ring), after EMPTY_WINDOWS_BEFORE_PROBING windows in a row that found
nothing (a busy machine, where the peer waits for a core), only every PROBE_EVERY-th wait polls
until a window finds the answer again. The polling is a
`poll(2)` of timeout 0 per turn, which releases the GIL on every turn, and is never longer than the
window. MLTS_SOCKET_POLLING_US sets the window of both ends of every connection (0: never poll).

A client's window is also stretched over the answer it expects (mlts.ipc.expected_wait): when its
last two calls were answered within 100 ms, it sleeps until shortly before the answer is due and
polls from then, so a model run call after call is answered to a polling client; the service's
reader does the same for its client's next call when the client's turns took at most 1 ms. A reader whose last two
waits both outlasted its window (plus the stretch's wake lead) does not poll the window at all
(ExpectedWait.expects_after): it sleeps at once and holds no CPU while the other side works.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from mlts.ipc.burst_ring import EMPTY_WINDOWS_BEFORE_PROBING, PROBE_EVERY
from mlts.ipc.expected_wait import PREEMPTED_GAP_US, ExpectedWait, cpu_to_spare, nap

#: The client's window for an answer (a small call takes the service 40-60 us of CPU here).
CLIENT_WINDOW_US = 100
#: The service's window for a client's next call after an answer (the client's own turn-around).
SERVICE_WINDOW_US = 50
#: A wait longer than this many windows turns polling off until a wait is short again.
LONG_FACTOR = 3
ENV = "MLTS_SOCKET_POLLING_US"


def window_us(default: int) -> int:
    """The polling window in microseconds: MLTS_SOCKET_POLLING_US when set to a whole number, else `default`."""
    raw = os.environ.get(ENV, "").strip()
    if raw.isdigit():
        return min(int(raw), 10_000)
    return default


class PollingWindow:
    """Decides, per wait, whether to poll first; keeps the length of the last wait.

    Not thread-safe by itself: one reader at a time uses it (the thread reading the connection).
    """

    __slots__ = ("window", "long", "expected", "_short", "_started", "_empty", "_skipped")

    def __init__(self, window_us: int, stretch_max_us: int = 0) -> None:
        self.window = max(0, window_us) / 1e6
        self.long = self.window * LONG_FACTOR
        self.expected = ExpectedWait(stretch_max_us)  # stretches the window over the expected answer
        self._short = True  # the first wait polls: it learns from its length
        self._started = 0.0
        self._empty = 0  # windows in a row that ended with nothing
        self._skipped = 0

    def poll(self, readable: Callable[[float], bool], allowed: bool = True) -> bool:
        """Start a wait: when recent waits were short (and `allowed`), poll `readable(0)` for up to the
        window, and over the expected answer (mlts.ipc.expected_wait: `readable(t)` sleeps up to t
        seconds, with microsecond precision); True once it is readable (the caller need not block)."""
        now = time.perf_counter()
        self._started = now
        if not allowed or self.window <= 0:
            return False
        stretch = self.expected.stretch()
        if not self._short and stretch is None:
            return False
        window = True
        if self._empty >= EMPTY_WINDOWS_BEFORE_PROBING:
            # The window only on every PROBE_EVERY-th wait; a planned stretch runs on every wait.
            self._skipped += 1
            if self._skipped < PROBE_EVERY:
                if stretch is None:
                    return False
                window = False
            else:
                self._skipped = 0
        clock = time.perf_counter
        # A window that cannot meet the answer is not polled (ExpectedWait.expects_after).
        if (
            window
            and not self.expected.expects_after(self.window)
            and self._spin(readable, now + self.window)
        ):
            return True
        if stretch is not None:
            # Off the CPU until shortly before the expected answer (woken by an earlier one), then poll.
            napped = clock()
            wait = now + stretch[0] - napped
            if wait > 0:
                if nap(readable, wait):
                    self._empty = 0
                    self.expected.record(clock() - now)
                    return True
                self.expected.overslept(wait, clock() - napped)
            if not cpu_to_spare():
                self.expected.back_off()
            elif self._spin(readable, now + stretch[1], PREEMPTED_GAP_US / 1e6):
                return True
        self._empty += 1
        return False

    def _spin(self, readable: Callable[[float], bool], end: float, gap: float = math.inf) -> bool:
        """Poll until `end`; a turn more than `gap` after the one before (the CPU was taken) ends the
        stretch it polls for (ExpectedWait.back_off)."""
        now = self._started
        clock = time.perf_counter
        turn = clock()
        while True:
            if readable(0):
                self._empty = 0
                self.expected.record(clock() - now)
                return True
            t = clock()
            if t >= end:
                return False
            if t - turn > gap and self.expected.lost_cpu():
                return False
            turn = t

    def waited(self) -> None:
        """The wait begun by `poll` ended after a blocking wait: remember how long it took."""
        took = time.perf_counter() - self._started
        self._short = took <= self.long
        self.expected.record(took)
