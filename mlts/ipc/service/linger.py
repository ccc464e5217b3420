"""Anticipation: a higher-priority execution's priority ticket is left a moment after its answer.

A client running a HIGH model call after call leaves a gap between two of its executions: the answer
travels, the client's thread wakes, its next call travels and the service's reader wakes to read it.
When the LOW executions the first one paused resume in that gap, they take the cores exactly when
those two threads need one to wake on, and a scheduler may let a running thread finish its time
slice first (measured on a 2-core host: the wake-ups on either side of the gap were the largest part
of the HIGH model's extra latency under a LOW load). Like an anticipatory I/O scheduler, which
waits briefly after a request for the same process's next one, the service keeps an execution's
tickets (mlts.hal.qos.holding_tickets) for `seconds` after its answer is sent, when lower-priority
work is in the execution pool: a next execution of that priority arriving meanwhile holds its own
ticket, so the lower ones stay paused across the gap; when none comes they resume after `seconds`.
Seed 002 lets higher priorities starve lower ones; this holds them at most `seconds` longer per
higher-priority execution, and never pauses work of the same or a higher priority.

One thread leaves the lingering tickets when they are due (started on first use).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from mlts.hal import qos

#: How long a higher-priority execution's ticket is kept after its answer, by default (seconds).
DEFAULT_LINGER_S = 0.001


class Linger:
    """Leaves tickets `seconds` after they are handed over (`keep`)."""

    def __init__(self, seconds: float = DEFAULT_LINGER_S) -> None:
        if not 0 <= seconds <= 1:
            raise ValueError(f"the priority linger must be between 0 and 1 s, got {seconds}")
        self.seconds = seconds
        self._cond = threading.Condition(threading.Lock())
        self._due: list[tuple[float, int, list[Callable[[], None]]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.kept = 0  # tickets' blocks kept so far (serviceStatus)

    def keep(self, held: list[Callable[[], None]]) -> bool:
        """Take the leaves in `held` (the list `qos.holding_tickets()` gave) to call `seconds` from now;
        False (nothing taken) when lingering is off or stopped, or `held` is empty."""
        if not held or self.seconds <= 0:
            return False
        releases = held.copy()
        with self._cond:
            if self._stopping:
                return False
            held.clear()
            heapq.heappush(self._due, (time.monotonic() + self.seconds, next(self._seq), releases))
            self.kept += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="priority-linger", daemon=True)
                self._thread.start()
            elif self._due[0][2] is releases:  # due before everything else: the thread sleeps too long
                self._cond.notify()
        return True

    def _loop(self) -> None:
        due = self._due
        while True:
            with self._cond:
                while True:
                    if self._stopping and not due:
                        return
                    if due:
                        left = due[0][0] - time.monotonic()
                        if left <= 0 or self._stopping:
                            releases = heapq.heappop(due)[2]
                            break
                        self._cond.wait(left)
                    else:
                        self._cond.wait()
            qos.leave_held(releases)

    def stop(self) -> None:
        """Leave every kept ticket now; later `keep` calls take nothing."""
        with self._cond:
            self._stopping = True
            pending = [r for _, _, r in self._due]
            self._due.clear()
            self._cond.notify_all()
            thread = self._thread
        for releases in pending:
            qos.leave_held(releases)
        if thread is not None:
            thread.join(1.0)
