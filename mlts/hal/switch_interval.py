"""The interpreter's switch interval, shortened while some work must get the interpreter lock quickly.

CPython hands the interpreter lock to a waiting thread only after the holder has had it for the switch
interval (5 ms by default). Work that must not wait that long behind another thread's Python code (an
execution behind a compilation, a high-priority execution behind the lower ones it is pausing) holds
a short interval for as long as it matters. One holder count per process, since the interval is the
interpreter's: the first holder saves the interval and shortens it, the last one restores it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

#: The interval holders ask for: a fifth of a millisecond.
SHORT_S = 0.0002


class ShortSwitchInterval:
    """The process's switch interval, shortened while at least one holder is inside."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._saved = 0.0

    def enter(self, interval_s: float = SHORT_S) -> None:
        """Hold the short interval (pair with `leave`)."""
        with self._lock:
            if self._inside == 0:
                self._saved = sys.getswitchinterval()
                if interval_s < self._saved:
                    sys.setswitchinterval(interval_s)
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                sys.setswitchinterval(self._saved)

    @contextlib.contextmanager
    def held(self, interval_s: float = SHORT_S) -> Iterator[None]:
        self.enter(interval_s)
        try:
            yield
        finally:
            self.leave()

    def active(self) -> bool:
        return self._inside > 0


#: One per process: the switch interval is the interpreter's.
SHORT_SWITCH_INTERVAL = ShortSwitchInterval()
