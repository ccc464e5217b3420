"""Preparation below executions: how the service keeps a compilation from slowing executions.

A driver on an accelerator compiles on the CPU while its executions run on the
accelerator, so compiling model B never slows model A. A driver served from one
Python process shares two things between the two: the cores and the
interpreter lock. The preparation workers therefore

- run at a lower scheduling priority: each of their threads raises its own
  nice value by `PREPARE_NICE` when it starts (on Linux the nice value is a
  property of the thread), so on busy cores the executions' threads run first
  and a preparation takes the time they leave; on idle cores nothing changes;
- shorten the interpreter's switch interval while any preparation runs
  (`SWITCH_INTERVAL_S` instead of CPython's 5 ms), so an execution thread
  waiting for the interpreter lock that a compiling thread holds gets it
  within a fifth of a millisecond rather than five; the interval is restored when
  no preparation runs.

A service that mlts starts runs in a session of its own, so where Linux
groups sessions for scheduling (autogroup, the default of most distributions)
the lower priority ranks preparations below the service's own executions
only: other programs' load does not starve them any more than it would a
service at the default priority. Threads that a driver starts from inside
prepareModel inherit the lower priority: a driver starts its long-lived execution threads when the Device is
made or on the first execution (the sample driver's kernel pool starts on the
first parallel execution).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

from mlts.hal.switch_interval import SHORT_SWITCH_INTERVAL

log = logging.getLogger("mlts.ipc.service")

#: How much lower (in nice steps) the preparation workers run than the executions.
PREPARE_NICE = 10
#: The interpreter's switch interval while a preparation runs (seconds).
SWITCH_INTERVAL_S = 0.0002
#: The largest nice value Linux has.
MAX_NICE = 19


def lower_this_thread(steps: int) -> int | None:
    """Raise the calling thread's nice value by `steps` (at most to 19); the new value, or None where
    the platform has no per-thread priority or refuses."""
    if steps <= 0 or not hasattr(os, "setpriority") or not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        value = min(MAX_NICE, now + steps)
        os.setpriority(os.PRIO_PROCESS, tid, value)
    except OSError as e:
        log.debug("cannot lower the priority of thread %d: %s", tid, e)
        return None
    return value


class Background:
    """What a pool of background (preparation) workers does around its threads and its work."""

    def __init__(self, nice: int = PREPARE_NICE, switch_interval_s: float = SWITCH_INTERVAL_S) -> None:
        if not 0 <= nice <= MAX_NICE:
            raise ValueError(f"nice steps must be between 0 and {MAX_NICE}, got {nice}")
        if not 0 < switch_interval_s:
            raise ValueError(f"the switch interval must be positive, got {switch_interval_s}")
        self.nice = nice
        self.switch_interval_s = switch_interval_s

    def thread_started(self) -> None:
        """Called first on each worker thread: lower its scheduling priority."""
        lower_this_thread(self.nice)

    def running(self) -> contextlib.AbstractContextManager[None]:
        """Around each work: the short switch interval while it runs."""
        return SHORT_SWITCH_INTERVAL.held(self.switch_interval_s)

    def describe(self) -> dict[str, float]:
        return {"nice": self.nice, "switch_interval_ms": self.switch_interval_s * 1000}
