"""Give the heap memory a client's work freed back to the system once the client is gone.

Drivers keep large freed blocks on the heap for speed (the sample driver raises glibc's trim
threshold so every run does not fault its working set in again), and the heap of a reader thread
keeps what a half-sent 60 MiB frame grew. That is right while a client works and wrong once it left:
the service's resident memory must come back near where it started. `trim()` first collects
reference cycles (a released model's plan can sit in one, holding the model's mapping and its file
descriptor until the collector happens to run), then asks glibc to return every arena's free pages
(`malloc_trim(0)`; elsewhere only the collection is done).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
import time
from collections.abc import Callable

#: Trims after a client leaves are at least this far apart (s), unless no client is left.
MIN_INTERVAL_S = 1.0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


class Trimmer:
    """Trims the heap after clients leave: always when the last one left, else at most once a second."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._trim = _malloc_trim()
        self._clock = clock
        self._lock = threading.Lock()
        self._last = float("-inf")
        self.trims = 0

    def client_left(self, clients_left: int) -> None:
        now = self._clock()
        with self._lock:
            if clients_left and now - self._last < MIN_INTERVAL_S:
                return
            self._last = now
        self.trim()

    def trim(self) -> None:
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        self.trims += 1
