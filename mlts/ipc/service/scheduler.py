"""A bounded pool of worker threads that runs queued work, highest priority first.

The service has one pool for executions and one for preparations, so a long
compile never delays executions. Each client (an owner: the service passes the
client's app, so connections of one program share a queue) has its own queue,
ordered by (priority, arrival). A free worker takes the highest-priority work
at the head of any queue; among clients whose first work has that priority,
the clients take turns. So HIGH work of any client starts before LOW/MEDIUM
work waiting anywhere (seed 002: higher priorities may preempt or starve lower
ones), and clients of equal priority share the workers fairly.

When every worker is busy and one of them runs work at a lower priority (of
any client), new higher-priority work does not wait for a worker: it starts at
once on an extra thread (at most `workers` such at a time). The driver pauses the lower-priority execution
at its next checkpoint (it preempts), so the number of executions making
progress stays within the pool's size. An extra thread that finished its work
waits a while (`SPARE_IDLE_S`) for the next preempting work, so a stream of
high-priority calls does not start a thread for each.

A pool made with a `Background` (the preparation pool) runs below the
executions: its threads lower their own scheduling priority and its work runs
with a short interpreter switch interval (mlts.ipc.service.background).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from mlts.ipc.service.background import Background

log = logging.getLogger("mlts.ipc.service")

#: How long an extra (preempting) thread waits for more such work before it ends.
SPARE_IDLE_S = 5.0


class WorkerPool:
    """`workers` daemon threads taking work from one priority queue."""

    def __init__(self, name: str, workers: int, background: Background | None = None) -> None:
        if workers < 1:
            raise ValueError(f"{name}: a worker pool needs at least 1 worker, got {workers}")
        self.name = name
        self.workers = workers
        self.background = background
        self._queues: dict[int, list[tuple[int, int, tuple[Callable[[], None], int, int]]]] = {}
        self._turns: deque[int] = deque()  # owners with queued work, in serving order
        self._queued = 0
        self._running: dict[tuple[int, int], int] = {}  # (owner, priority) -> works running
        self._extra = 0  # preempting works on their own threads
        self._extra_works: deque[tuple[Callable[[], None], int, int]] = deque()  # for idle extra threads
        self._extra_idle = 0  # idle extra threads not yet promised one of `_extra_works`
        self._seq = itertools.count()
        lock = threading.RLock()
        # The condition's own lock, entered directly where nothing waits or notifies (one C call each,
        # where entering the Condition goes through Python code).
        self._lock = lock
        self._cond = threading.Condition(lock)
        self._extra_cond = threading.Condition(lock)
        self._busy = 0
        self._inline = 0  # slots taken by callers running work on their own thread
        #: When `active` last fell to 0 (time.monotonic()).
        self.quiet_since = -math.inf
        self._quiet = threading.Condition(lock)  # notified when nothing runs any more (`wait_quiet`)
        self._quiet_waiters = 0
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{n}", daemon=True) for n in range(workers)
        ]
        for t in self._threads:
            t.start()

    def submit(self, work: Callable[[], None], priority: int = 1, owner: int = 0) -> None:
        """Queue `work` of client `owner`: higher `priority` starts first, whoever queued it; equal
        priorities in arrival order within a client, the clients taking turns."""
        with self._cond:
            if self._stopping:
                raise RuntimeError(f"{self.name} is stopping")
            if self._busy + self._inline >= self.workers and self._outranks(owner, priority):
                self._extra += 1
                self._mark(owner, priority, 1)
                if self._extra_idle:
                    self._extra_idle -= 1
                    self._extra_works.append((work, owner, priority))
                    self._extra_cond.notify()
                    return
                threading.Thread(
                    target=self._run_extra,
                    args=((work, owner, priority),),
                    name=f"{self.name}-preempt",
                    daemon=True,
                ).start()
                return
            queue = self._queues.get(owner)
            if queue is None:
                queue = self._queues[owner] = []
                self._turns.append(owner)
            heapq.heappush(queue, (-priority, next(self._seq), (work, owner, priority)))
            self._queued += 1
            self._cond.notify()

    def _take(self) -> tuple[Callable[[], None], int, int]:
        """The next work: the highest priority first; among the clients whose first work has it, the
        first in turn, who then goes last (call with the lock held, work queued)."""
        turns, queues = self._turns, self._queues
        owner = turns[0]
        if len(turns) > 1:
            best = queues[owner][0][0]  # -priority of the head
            for other in turns:
                head = queues[other][0][0]
                if head < best:
                    best, owner = head, other
        turns.remove(owner)
        queue = queues[owner]
        _, _, item = heapq.heappop(queue)
        if queue:
            turns.append(owner)
        else:
            del queues[owner]
        self._queued -= 1
        return item

    def _outranks(self, owner: int, priority: int) -> bool:
        """Running work at a lower priority (of any client), and room for one more preempting thread."""
        if self._extra >= self.workers:
            return False
        return any(p < priority for (_, p) in self._running)

    def _mark(self, owner: int, priority: int, delta: int) -> None:
        key = (owner, priority)
        n = self._running.get(key, 0) + delta
        if n:
            self._running[key] = n
        else:
            self._running.pop(key, None)

    def _call(self, work: Callable[[], None]) -> None:
        if self.background is None:
            work()
            return
        with self.background.running():
            work()

    def _run_extra(self, item: tuple[Callable[[], None], int, int]) -> None:
        if self.background is not None:
            self.background.thread_started()
        while True:
            work, owner, priority = item
            try:
                self._call(work)
            except BaseException as e:  # work reports its own errors
                log.error("%s: work raised %s: %s", self.name, type(e).__name__, e, exc_info=True)
            with self._cond:
                self._extra -= 1
                self._ended()
                self._mark(owner, priority, -1)
                if self._stopping:  # `stop` waits for the preempting works (workers' slots are unchanged)
                    self._cond.notify_all()
                # Idle: `submit` hands the next preempting work to this thread (taking it off the idle
                # count) instead of starting one.
                self._extra_idle += 1
                end = time.monotonic() + SPARE_IDLE_S
                while not self._extra_works and not self._stopping:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._extra_cond.wait(left)
                if not self._extra_works:
                    self._extra_idle -= 1
                    return
                item = self._extra_works.popleft()

    def _loop(self) -> None:
        if self.background is not None:
            self.background.thread_started()
        while True:
            with self._cond:
                while not self._stopping and (not self._queued or self._busy + self._inline >= self.workers):
                    self._cond.wait()
                if not self._queued:
                    return
                work, owner, priority = self._take()
                self._busy += 1
                self._mark(owner, priority, 1)
            try:
                self._call(work)
            except BaseException as e:  # work reports its own errors; this keeps the worker alive
                log.error("%s: work raised %s: %s", self.name, type(e).__name__, e, exc_info=True)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._ended()
                    self._mark(owner, priority, -1)
                    if self._queued or self._stopping:
                        self._cond.notify()

    def try_inline(self, owner: int = 0, priority: int | None = None) -> bool:
        """Take a worker slot for the calling thread when the pool is idle (nothing queued, a slot free).

        Running work on the thread that received it saves two thread hand-offs; the slot keeps the
        number of works running at once within `workers`. With `priority`, the work counts as running
        at it (higher-priority work then preempts it). Call `end_inline(owner, priority)` afterwards.
        """
        lock = self._lock
        lock.acquire()  # not `with`: every inline execution passes here, and nothing below raises
        if self._stopping or self._queued or self._busy + self._inline >= self.workers:
            lock.release()
            return False
        self._inline += 1
        if priority is not None:
            self._mark(owner, priority, 1)
        lock.release()
        return True

    def end_inline(self, owner: int = 0, priority: int | None = None) -> None:
        with self._lock:
            self._inline -= 1
            self._ended()
            if priority is not None:
                self._mark(owner, priority, -1)
            if self._queued:  # waking idle workers for nothing costs a GIL hand-off each
                self._cond.notify()

    def wait_quiet(self, timeout: float) -> bool:
        """Block until no work runs in the pool, at most `timeout` seconds; whether it is quiet.

        Background work (a preparation) calls this to give way to the executions: it waits without the
        interpreter lock or a core, and the pool wakes it when its last running work ends."""
        with self._lock:
            if not self.active:
                return True
            self._quiet_waiters += 1
            try:
                return self._quiet.wait_for(lambda: not self.active, timeout)
            finally:
                self._quiet_waiters -= 1

    @property
    def active(self) -> int:
        """Works running now, on workers, inline or preempting (read without the lock, as `GiveWay` does
        at every function call of a preparation, it is a hint, not a promise)."""
        return self._busy + self._inline + self._extra

    def _ended(self) -> None:
        """A work ended, its count already lowered (call with the lock held): when nothing runs any more,
        note when and wake the `wait_quiet` callers."""
        if not (self._busy or self._inline or self._extra):
            self.quiet_since = time.monotonic()
            if self._quiet_waiters:
                self._quiet.notify_all()

    def runs_below(self, priority: int) -> bool:
        """Whether work of a lower priority than `priority` runs in the pool now (paused work counts), or
        any work waits in it."""
        with self._lock:
            return bool(self._queued) or any(p < priority for (_, p) in self._running)

    def idle(self) -> bool:
        """Whether nothing runs or waits in the pool now (read without the lock: a hint, not a promise)."""
        return not (self._busy or self._inline or self._queued)

    def status(self) -> dict[str, int]:
        with self._cond:
            return {"workers": self.workers, "busy": self._busy + self._inline, "queued": self._queued}

    def stop(self, timeout: float) -> bool:
        """Let queued work finish, then end the threads; True if they ended within `timeout`."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._extra_cond.notify_all()
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        with self._cond:  # preempting works end on their own threads
            while self._extra and time.monotonic() < end:
                self._cond.wait(max(0.0, min(0.05, end - time.monotonic())))
            extra = self._extra
        return not extra and not any(t.is_alive() for t in self._threads)
