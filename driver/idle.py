"""The sample driver's idle watchdog: what a prepared model keeps between executions is let go when idle.

Between successive executions (a burst, a benchmark loop) the sample driver
keeps what makes the next one cheap: each plan's workspaces (the operations'
output and scratch buffers, and the kernels' state bound to them) and the
layouts of recent requests (which also keep the requests' pools mapped). A
driver in a high-performance state holds such resources while work comes
quickly; once none has come for the idle period (factory option
`idle_release_ms`), the watchdog releases them, and the next execution makes
them again. Nothing in flight is touched: a running execution holds its own
workspace and layout; only what waits for the next one is dropped.

One daemon thread per device looks every half period; `sweep(now)` does one
look on demand (tests drive it with their own clock).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable

log = logging.getLogger("driver.idle")

#: The longest idle period the option accepts (one day).
MAX_IDLE_MS = 86_400_000


class IdleWatchdog:
    """Calls each watched object's release function once it has been idle `period_s` seconds."""

    def __init__(
        self, period_s: float, clock: Callable[[], float] = time.monotonic, *, thread: bool = True
    ) -> None:
        if not 0 < period_s <= MAX_IDLE_MS / 1000:
            raise ValueError(f"idle period {period_s} s outside (0, {MAX_IDLE_MS // 1000}] s")
        self.period = period_s
        self.clock = clock
        self.released = 0  # releases made, for tests and status
        self._lock = threading.Lock()
        # id -> [weak reference to the object, its release function, last use, released since]
        self._watched: dict[int, list] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._run, name="idle-watchdog", daemon=True)
            self._thread.start()

    def watch(self, obj: object, release: Callable[[], None]) -> None:
        """Watch `obj` (held weakly) from now on; `release()` lets its kept resources go."""
        key = id(obj)

        def gone(_ref: object) -> None:
            self._forget(key)

        ref = weakref.ref(obj, gone)
        with self._lock:
            self._watched[key] = [ref, release, self.clock(), False]

    def touch(self, obj: object) -> None:
        """`obj` was used now (an execution ended): idle from now on."""
        entry = self._watched.get(id(obj))
        if entry is not None:
            entry[2] = self.clock()
            entry[3] = False

    def unwatch(self, obj: object) -> None:
        self._forget(id(obj))

    def _forget(self, key: int) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def sweep(self, now: float | None = None) -> int:
        """Release what has been idle a whole period by `now` (the clock's time by default); how many."""
        now = self.clock() if now is None else now
        with self._lock:
            due = [e for e in self._watched.values() if not e[3] and now - e[2] >= self.period]
            for entry in due:
                entry[3] = True  # once per idle stretch: the next use starts a new one
        count = 0
        for ref, release, _, _ in due:
            obj = ref()
            if obj is None:
                continue
            try:
                release()
            except Exception as e:  # a release that fails costs memory, never the driver
                log.warning("releasing idle resources of %r failed: %s: %s", obj, type(e).__name__, e)
                continue
            count += 1
        if count:
            self.released += count
            log.debug(
                "released the kept resources of %d prepared model(s) idle for %.3f s", count, self.period
            )
        return count

    def _run(self) -> None:
        while not self._stop.wait(self.period / 2):
            self.sweep()

    def close(self) -> None:
        """Stop looking (the thread ends within half a period); idempotent."""
        self._stop.set()

    def __len__(self) -> int:
        return len(self._watched)
