"""Refused calls, logged in aggregate, and a brake on guessing driver buffer tokens.

A client may send thousands of bad calls a second; logging each would let it fill the disk. The
`RefusalLog` writes the first refusal of a client process in each window (a minute) in full, counts
the rest, and when the window is over writes one line: "N refusals from pid P uid U in the last
minute (last: ...)". A client that keeps presenting buffer tokens it does not hold is slowed down by
the `GuessBrake`: per user, a burst of `burst` such tokens, then one per 1/`rate` seconds; each guess
beyond that waits on the guessing client's own thread, so nobody else waits with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mlts.ipc.peer import Peer

log = logging.getLogger("mlts.ipc.service")

#: Seconds one summary line covers.
WINDOW_S = 60.0
#: Unknown buffer tokens a user may present at once, then per second.
GUESS_BURST = 32
GUESS_RATE = 8.0
#: The longest one guess is held back (s), however many connections guess at once.
GUESS_MAX_WAIT_S = 5.0


@dataclass
class _Window:
    peer: Peer
    start: float
    count: int
    last: str


class RefusalLog:
    """Per client process: the first refusal of each window in full, then one summary line per window."""

    def __init__(
        self,
        window: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.window = window
        self._clock = clock
        self._log = logger
        self._lock = threading.Lock()
        self._windows: dict[object, _Window] = {}
        self.total = 0

    def note(self, peer: Peer, what: str) -> bool:
        """Count one refusal of `peer` (`what` says what was refused and why); True when it is the first
        of its window (written in full)."""
        now = self._clock()
        summaries: list[_Window] = []
        first = False
        with self._lock:
            self.total += 1
            key = peer.process_key  # a pid, or a network client's identity on one machine
            window = self._windows.get(key)
            if window is not None and now - window.start >= self.window:
                summaries.append(self._windows.pop(key))
                window = None
            if window is None:
                self._windows[key] = _Window(peer, now, 1, what)
                first = True
            else:
                window.count += 1
                window.last = what
            summaries += self._due(now)
        self._write(summaries)
        if first:
            self._log.warning("refused a call of client %s: %s", peer.describe(), what)
        return first

    def flush(self, pid: object = None) -> None:
        """Write the summaries of windows that are over (or all windows of `pid`, a Peer.process_key: it
        disconnected)."""
        now = self._clock()
        with self._lock:
            summaries = self._due(now)
            if pid is not None and pid in self._windows:
                summaries.append(self._windows.pop(pid))
        self._write(summaries)

    def _due(self, now: float) -> list[_Window]:
        """Windows that are over, taken out of the table (call with the lock held)."""
        over = [pid for pid, w in self._windows.items() if now - w.start >= self.window]
        return [self._windows.pop(pid) for pid in over]

    def _write(self, summaries: list[_Window]) -> None:
        for w in summaries:
            if w.count > 1:  # a single refusal was written in full already
                self._log.warning(
                    "%d refusals from %s in the last %s (last: %s)",
                    w.count,
                    w.peer.describe(),
                    "minute" if self.window == 60.0 else f"{self.window:g} s",
                    w.last,
                )


class GuessBrake:
    """A token bucket per user: how long a client must wait before its next unknown buffer token is answered."""

    def __init__(
        self,
        burst: int = GUESS_BURST,
        rate: float = GUESS_RATE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.rate = rate
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[object, tuple[float, float]] = {}  # user -> (tokens, when counted)

    def charge(self, uid: object) -> float:
        """Count one guess of user `uid` (a Peer.user_key); the seconds the guessing client must wait
        before it is answered."""
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.get(uid, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate) - 1.0
            tokens = max(tokens, -GUESS_MAX_WAIT_S * self.rate)
            self._buckets[uid] = (tokens, now)
        return 0.0 if tokens >= 0 else -tokens / self.rate
