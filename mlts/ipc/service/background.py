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
  within 50 µs rather than 5 ms (measured on a 2-core host: 0.2 ms left model A
  +53% slower while the driver compiled, 50 µs +17% to +30%); the interval is restored when
  no preparation runs;
- give way to the executions (`GiveWay`): while a preparation decodes and
  validates a model and the driver compiles it (prepareModel,
  prepareModelFromCache, getSupportedOperations), the thread checks at each
  function call whether an execution runs or ran within the last 2 ms
  (`IDLE_GAP_S`: the gap between a client's calls), and if so it waits,
  without the interpreter lock and without a core, until executions have
  been idle that long. `serviceStatus`
  tells how many preparations are inside the driver now (`compiling`), so a
  client timing executions against a compilation
  (performance-degradation-stress) can start when the driver's own work does,
  not while the service is still decoding (which giving way stretches). On a machine with as many cores as an execution's
  kernel threads use (two, say) lower scheduling priority alone is not enough:
  a compiling thread that holds the interpreter lock when an execution's thread
  needs it makes the execution wait for a thread the scheduler ranks last. The
  wait is bounded (`GIVE_WAY_MAX_S`, then at least `RUN_AT_LEAST_S` of work), so
  executions back to back slow a preparation but never stop it, and a lock the
  preparation holds delays an execution by at most that bound.

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
import time
from collections.abc import Iterator
from typing import Protocol

from mlts.hal.switch_interval import SHORT_SWITCH_INTERVAL

log = logging.getLogger("mlts.ipc.service")

#: How much lower (in nice steps) the preparation workers run than the executions.
PREPARE_NICE = 10
#: The interpreter's switch interval while a preparation runs (seconds).
SWITCH_INTERVAL_S = 0.00005
#: The largest nice value Linux has.
MAX_NICE = 19
#: The longest a preparation waits at once for the executions to end (seconds)...
GIVE_WAY_MAX_S = 0.005
#: ...after which it works at least this long before it gives way again (so it keeps about a sixth of
#: a core under executions back to back, about what its nice value would give it).
RUN_AT_LEAST_S = 0.001
#: A preparation gives way only when executions ran within this long before it started: the check at
#: each function call costs a preparation up to half its time again, which a service with nothing to
#: give way to (a benchmark timing its compilations) does not pay.
RECENT_S = 0.1
#: Executions count as running until this long after the last one ended: a client running a stream
#: (or timing a model) sends its next call within it, and a preparation that ran in that gap would
#: hold the interpreter lock and the caches when the call arrives (measured on a 2-core host: model A
#: +25% to +70% slower while B compiled with no gap, +1% to +11% with 2 ms).
IDLE_GAP_S = 0.002


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


class Executions(Protocol):
    """What `GiveWay` needs of the execution pool (mlts.ipc.service.scheduler.WorkerPool)."""

    quiet_since: float

    @property
    def active(self) -> int: ...

    def wait_quiet(self, timeout: float) -> bool: ...


class GiveWay:
    """Background work on the calling thread gives way to running executions (see the module's text).

    `held()`, when executions run or ran within `RECENT_S`, installs a global trace function on the
    calling thread for the duration: at every Python function call it reads the execution pool's
    running count (three counters summed while nothing runs; it traces no lines) and, when executions
    run, waits for them to end. A thread that is traced already (coverage, a debugger) keeps its
    tracer and does not give way.
    """

    def __init__(
        self,
        executions: Executions,
        max_wait_s: float = GIVE_WAY_MAX_S,
        run_s: float = RUN_AT_LEAST_S,
        idle_gap_s: float = IDLE_GAP_S,
    ) -> None:
        if not (max_wait_s > 0 and run_s > 0 and idle_gap_s >= 0):
            raise ValueError(f"give-way times must be positive, got {max_wait_s}, {run_s} and {idle_gap_s}")
        self.executions = executions
        self.max_wait_s = max_wait_s
        self.run_s = run_s
        self.idle_gap_s = idle_gap_s
        #: Times background work gave way and seconds it waited in all (for the service's status).
        self.waits = 0
        self.waited_s = 0.0
        #: Preparations inside the driver now, and since the service started (`entered_driver`).
        self.in_driver = 0
        self.driver_calls = 0
        self._count_lock = threading.Lock()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        executions = self.executions
        recent = executions.active or time.monotonic() - executions.quiet_since < RECENT_S
        if not recent or sys.gettrace() is not None:
            yield
            return
        sys.settrace(self._hook())
        try:
            yield
        finally:
            sys.settrace(None)

    def _hook(self):  # noqa: ANN202 (a trace function)
        executions, wait_quiet = self.executions, self.executions.wait_quiet
        clock, max_wait, run_s, idle_gap = time.monotonic, self.max_wait_s, self.run_s, self.idle_gap_s
        free_until = 0.0

        def give_way(frame: object, event: str, arg: object) -> None:
            # Called at each Python function call (the global trace function); returns None: no
            # tracing of the function's lines. Waits while executions run or ran within idle_gap,
            # at most max_wait at once; after a wait that ran out, works run_s before checking again.
            nonlocal free_until
            now = clock()
            if (executions.active or now - executions.quiet_since < idle_gap) and now >= free_until:
                t0 = now
                end = t0 + max_wait
                quiet = False
                while True:
                    left = end - clock()
                    if left <= 0 or not wait_quiet(left):
                        break
                    gap = idle_gap - (clock() - executions.quiet_since)
                    if gap <= 0:
                        quiet = True
                        break
                    time.sleep(min(gap, max(0.0, end - clock())))
                t1 = clock()
                self.waits += 1
                self.waited_s += t1 - t0
                if not quiet:
                    free_until = t1 + run_s

        return give_way

    @contextlib.contextmanager
    def in_the_driver(self) -> Iterator[None]:
        """Around the driver's own call of a preparation: counted in `compiling` while it runs."""
        with self._count_lock:
            self.in_driver += 1
            self.driver_calls += 1
        try:
            yield
        finally:
            with self._count_lock:
                self.in_driver -= 1

    def describe(self) -> dict[str, float]:
        return {
            "gave_way": self.waits,
            "gave_way_ms": round(self.waited_s * 1000, 3),
            "compiling": self.in_driver,
            "compilations_started": self.driver_calls,
        }
