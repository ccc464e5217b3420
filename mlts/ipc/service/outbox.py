"""A connection's bounded queue of outgoing bytes: no thread of the service ever waits for a client to read.

Any thread posts whole frames. While nothing waits in the queue a post is one non-blocking send (the
usual case: the frame fits in the socket's buffer). What the socket does not take is queued, with
duplicates of the frame's file descriptors, and the connection's writer thread (started the first
time it is needed) sends it as the client reads. Two bounds make a client that does not read harmless:

- the queue holds at most `max_bytes`: a post beyond that drops the client at once (its connection
  is shut down; nobody waits for it);
- the writer must make progress within `stall_timeout` seconds of the first byte that waited (or
  of its last progress): a client that takes nothing for that long is dropped.

`wait_for_room()` lets the connection's reader stop taking new calls from a client whose output
piles up (more than `pause_bytes` queued), so a client that floods calls without reading its replies
costs the service no more than its queue.
"""

from __future__ import annotations

import array
import logging
import math
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

log = logging.getLogger("mlts.ipc.service")

_DONTWAIT = int(socket.MSG_DONTWAIT)
_NOSIGNAL = int(getattr(socket, "MSG_NOSIGNAL", 0))
#: Bytes of replies one client may have waiting in the service (beyond its socket's buffer).
DEFAULT_MAX_BYTES = 4 << 20
#: With this much waiting, the client's reader takes no new call until the client reads.
DEFAULT_PAUSE_BYTES = 256 << 10


def _rights(fds: Sequence[int]) -> list[tuple[int, int, array.array]]:
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []


class Outbox:
    """The queue and writer thread of one connection's socket."""

    def __init__(
        self,
        sock: socket.socket,
        stall_timeout: float,
        on_drop: Callable[[str], None],
        max_bytes: int = DEFAULT_MAX_BYTES,
        pause_bytes: int = DEFAULT_PAUSE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sock = sock
        self.stall_timeout = stall_timeout
        self.max_bytes = max_bytes
        self.pause_bytes = min(pause_bytes, max_bytes)
        self._on_drop = on_drop
        self._clock = clock
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the writer waits for data here
        self._room = threading.Condition(self._lock)  # the reader waits for the queue to drain here
        # Frames not yet (wholly) sent: [bytes left to send, the fds still to attach (owned dups)].
        self._queue: deque[list] = deque()
        self.queued = 0  # bytes in the queue (read without the lock as a hint)
        self._progress = 0.0  # when the writer last sent something, or the queue began
        self._writer: threading.Thread | None = None
        self.closed = False
        #: Why the client was dropped (None while it is not).
        self.dropped: str | None = None

    # ------------------------------------------------------------ posting (any thread)

    def post(self, data: bytes, fds: Sequence[int] = ()) -> bool:
        """Send the frame `data` (with `fds`, still owned by the caller) or queue what the socket does not
        take; False once the connection is closed or was dropped (now or before)."""
        with self._lock:
            if self.closed:
                return False
            sent = 0
            if not self._queue:
                try:
                    if fds:
                        sent = self.sock.sendmsg([data], _rights(fds), _DONTWAIT | _NOSIGNAL)
                    else:
                        sent = self.sock.send(data, _DONTWAIT | _NOSIGNAL)
                except BlockingIOError:
                    sent = 0
                except OSError as e:
                    self._drop(f"cannot send to it ({e})")
                    return False
                if sent == len(data):
                    return True
                if sent:
                    fds = ()  # they travelled with the first byte
            rest = len(data) - sent
            if self.queued + rest > self.max_bytes:
                self._drop(
                    f"it does not read its replies: {self.queued + rest} bytes would wait for it, "
                    f"at most {self.max_bytes} may"
                )
                return False
            try:
                owned = tuple(os.dup(fd) for fd in fds)
            except OSError as e:
                self._drop(f"cannot keep the descriptors of a reply for it ({e})")
                return False
            if not self._queue:
                self._progress = self._clock()
            self._queue.append([memoryview(data)[sent:], owned])
            self.queued += rest
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="client-writer", daemon=True)
                self._writer.start()
            else:
                self._work.notify()
        return True

    def wait_for_room(self, timeout: float | None = None) -> bool:
        """Return once fewer than `pause_bytes` wait to be sent (True) or the connection is gone (False);
        with `timeout`, also after that many seconds (True if there is room then)."""
        if self.queued < self.pause_bytes:
            return not self.closed
        end = None if timeout is None else self._clock() + timeout
        with self._lock:
            while self.queued >= self.pause_bytes and not self.closed:
                left = None if end is None else end - self._clock()
                if left is not None and left <= 0:
                    break
                self._room.wait(0.5 if left is None else min(left, 0.5))
            return not self.closed and self.queued < self.pause_bytes

    # ------------------------------------------------------------ the writer thread

    def _write_loop(self) -> None:
        poller = select.poll()
        poller.register(self.sock, select.POLLOUT)
        while True:
            with self._lock:
                while not self._queue and not self.closed:
                    self._work.wait()
                if self.closed:
                    return
                left = self._progress + self.stall_timeout - self._clock()
                if left <= 0:
                    self._drop(
                        f"it took no data for {self.stall_timeout:g} s ({self.queued} bytes wait for it)"
                    )
                    return
            try:
                poller.poll(max(1, math.ceil(min(left, 0.5) * 1000)))
            except OSError:
                pass
            with self._lock:
                if self.closed:
                    return
                item = self._queue[0]
                view, fds = item
                try:
                    if fds:
                        sent = self.sock.sendmsg([view], _rights(fds), _DONTWAIT | _NOSIGNAL)
                    else:
                        sent = self.sock.send(view, _DONTWAIT | _NOSIGNAL)
                except BlockingIOError:
                    continue
                except OSError as e:
                    self._drop(f"cannot send to it ({e})")
                    return
                if not sent:
                    continue
                self._progress = self._clock()
                self.queued -= sent
                if fds:
                    _close_all(fds)
                    item[1] = ()
                if sent == len(view):
                    self._queue.popleft()
                else:
                    item[0] = view[sent:]
                if self.queued < self.pause_bytes:
                    self._room.notify_all()

    # ------------------------------------------------------------ ending

    def _drop(self, why: str) -> None:
        """Give up on the client (called with the lock held): nothing more is sent, the reader wakes."""
        if self.closed:
            return
        self.dropped = why
        self._close_locked()
        self._on_drop(why)

    def close(self) -> None:
        """Discard what waits (the client is gone or being disconnected) and end the writer."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self.closed:
            return
        self.closed = True
        for _, fds in self._queue:
            _close_all(fds)
        self._queue.clear()
        self.queued = 0
        self._work.notify_all()
        self._room.notify_all()


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
