"""One thread that waits on the input fences of every fenced execution, so no worker ever waits on a fence.

A wait ends in one of three ways, each reported once to its callback:
every fence signalled (`None`), a fence signalled with error or the wait's
deadline passed (a HalError), or the wait was cancelled because its client
went away (a HalError the callback may ignore).
"""

from __future__ import annotations

import logging
import math
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.fence import FenceState, SyncFence

log = logging.getLogger("mlts.ipc.service")

#: Called once with None (all fences signalled) or the error that ended the wait.
Done = Callable[[HalError | None], None]


@dataclass
class _Wait:
    owner: object
    fences: list[SyncFence]
    deadline: float | None  # time.monotonic() seconds
    expired: HalError
    done: Done
    pending: set[int] = field(default_factory=set)


class FenceWatcher:
    """Waits on many fences at once with one poll loop; woken by an eventfd when a wait is added."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: list[_Wait] = []
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="fence-watcher", daemon=True)
        self._thread.start()

    def add(
        self,
        owner: object,
        fences: list[SyncFence],
        deadline: float | None,
        expired: HalError,
        done: Done,
    ) -> None:
        """Wait for all `fences` (owned by the watcher from now on) until `deadline`; then call `done`."""
        wait = _Wait(owner, fences, deadline, expired, done, {f.fd for f in fences})
        with self._lock:
            if self._stopping:
                stopping = True
            else:
                stopping = False
                self._waits.append(wait)
        if stopping:
            self._finish(wait, HalError(ErrorStatus.DEVICE_UNAVAILABLE, "the service is stopping"))
            return
        os.eventfd_write(self._wake, 1)

    def cancel(self, owner: object, error: HalError) -> None:
        """End every wait of `owner` with `error`."""
        with self._lock:
            mine = [w for w in self._waits if w.owner is owner]
            self._waits = [w for w in self._waits if w.owner is not owner]
        for wait in mine:
            self._finish(wait, error)

    def count(self) -> int:
        with self._lock:
            return len(self._waits)

    def _finish(self, wait: _Wait, error: HalError | None) -> None:
        for fence in wait.fences:
            fence.close()
        try:
            wait.done(error)
        except Exception as e:
            log.error("fence wait callback raised %s: %s", type(e).__name__, e, exc_info=True)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    waits, self._waits = self._waits, []
                    break
                waits = list(self._waits)
            poller = select.poll()
            poller.register(self._wake, select.POLLIN)
            now = time.monotonic()
            timeout: float | None = None
            for wait in waits:
                for fd in wait.pending:
                    poller.register(fd, select.POLLIN)
                if wait.deadline is not None:
                    left = max(0.0, wait.deadline - now)
                    timeout = left if timeout is None else min(timeout, left)
            ms = None if timeout is None else math.ceil(timeout * 1000)
            ready = {fd for fd, _ in poller.poll(ms)}
            if self._wake in ready:
                try:
                    os.eventfd_read(self._wake)
                except BlockingIOError:
                    pass
            now = time.monotonic()
            for wait in waits:
                outcome = self._progress(wait, ready, now)
                if outcome is False or outcome is True:
                    continue
                with self._lock:
                    if wait not in self._waits:
                        continue  # cancelled meanwhile
                    self._waits.remove(wait)
                self._finish(wait, outcome)
        for wait in waits:
            self._finish(wait, HalError(ErrorStatus.DEVICE_UNAVAILABLE, "the service is stopping"))

    @staticmethod
    def _progress(wait: _Wait, ready: set[int], now: float) -> HalError | None | bool:
        """None when the wait is complete, a HalError when it failed, False while it goes on."""
        for fence in wait.fences:
            if fence.fd in wait.pending and fence.fd in ready:
                if fence.state() == FenceState.ERROR:
                    return HalError(ErrorStatus.GENERAL_FAILURE, "an input fence was signalled with an error")
                wait.pending.discard(fence.fd)
        if not wait.pending:
            return None
        if wait.deadline is not None and now >= wait.deadline:
            return wait.expired
        return False

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
        os.eventfd_write(self._wake, 1)
        self._thread.join(5.0)
        os.close(self._wake)
