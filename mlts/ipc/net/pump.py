"""A thread that watches file descriptors (fences, burst ring eventfds) for one network bridge.

`watch(fd, callback)` calls `callback()` on the pump's thread whenever `fd` is readable until the
callback returns False or `unwatch(fd)` is called. The thread starts with the first watch and ends
with `stop()`; a callback that raises ends the bridge through `on_error`.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger("mlts.ipc.net")


class Pump:
    def __init__(self, name: str, on_error: Callable[[BaseException], None]) -> None:
        self.name = name
        self._on_error = on_error
        self._lock = threading.Lock()
        self._watches: dict[int, Callable[[], bool]] = {}
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, fd: int, callback: Callable[[], bool]) -> None:
        with self._lock:
            if self._stopped:
                return
            self._watches[fd] = callback
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self._poke()

    def unwatch(self, fd: int) -> None:
        with self._lock:
            self._watches.pop(fd, None)
        self._poke()

    def _poke(self) -> None:
        try:
            os.eventfd_write(self._wake, 1)
        except OSError:
            pass

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._stopped:
                        return
                    watches = dict(self._watches)
                poller = select.poll()
                poller.register(self._wake, select.POLLIN)
                for fd in watches:
                    poller.register(fd, select.POLLIN)
                ready = poller.poll()
                for fd, events in ready:
                    if events & select.POLLNVAL:
                        self.unwatch(fd)  # closed by its owner without unwatching first
                        continue
                    if fd == self._wake:
                        try:
                            os.eventfd_read(self._wake)
                        except BlockingIOError:
                            pass
                        continue
                    with self._lock:
                        callback = self._watches.get(fd)
                    if callback is not None and not callback():
                        self.unwatch(fd)
        except BaseException as e:  # a bridge whose pump fails ends
            if not self._stopped:
                log.warning("%s failed: %s: %s", self.name, type(e).__name__, e)
                self._on_error(e)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._watches.clear()
            thread = self._thread
        self._poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(2.0)
        try:
            os.close(self._wake)
        except OSError:
            pass
