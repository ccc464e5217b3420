"""Burst message queues: a single-producer single-consumer ring of messages in a memfd, and its eventfd.

Layout of the memfd (little-endian, see docs/burst-protocol.md):

    offset   0  u64 write counter  (bytes ever published; written by the producer only)
    offset  64  u64 read counter   (bytes ever consumed; written by the consumer only)
    offset 128  u32 closed flag    (set by the producer when it will publish nothing more)
    offset 192  data, `capacity` bytes, used as a circular buffer

A message is a u32 length followed by that many payload bytes, possibly
wrapping round the end of the data area. The producer copies the whole
message, then stores the new write counter, then signals the eventfd; the
consumer reads the write counter, then the message, then stores its read
counter. The counters are on separate cache lines and only grow; each side
keeps its own copy of the counter it owns and never trusts the other side's
values: a counter that moves backwards, a fill level past the capacity or a
length past what was published is reported as a `RingError`, never read.
"""

from __future__ import annotations

import mmap
import os
import select
import struct
import sys
import time

from mlts.hal.fence import is_eventfd

HEADER_BYTES = 192
_WRITE_AT = 0
_READ_AT = 64
_CLOSED_AT = 128
_U32 = struct.Struct("<I")
#: The smallest and largest data areas accepted from the other side.
MIN_CAPACITY = 256
MAX_CAPACITY = 16 << 20
DEFAULT_CAPACITY = 64 << 10
#: The polling window before a blocking wait (NNAPI's sample driver polls for 50 µs).
DEFAULT_POLLING_US = 50


class RingError(Exception):
    """The ring's shared state is inconsistent (a hostile or broken peer); the burst cannot go on."""


class MessageTooLarge(ValueError):
    """A message does not fit in the ring at all; it is refused, never truncated."""


def ring_bytes(capacity: int) -> int:
    """The memfd size of a ring with `capacity` data bytes."""
    return HEADER_BYTES + capacity


class Ring:
    """One direction of a burst: this process is either its producer or its consumer."""

    def __init__(self, fd: int, size: int, event_fd: int, *, owner: bool) -> None:
        if sys.byteorder != "little":  # the counters are native words; the layout is little-endian
            raise OSError("burst rings need a little-endian machine")
        self.fd = fd
        self.event_fd = event_fd
        self.size = size
        self.capacity = size - HEADER_BYTES
        self._map = mmap.mmap(fd, size)
        self._view = memoryview(self._map)
        self._data = self._view[HEADER_BYTES:]
        # The counters and the flag as aligned 8- and 4-byte words, read and written whole: struct's
        # pack_into zeroes its destination before writing it, so a peer could read a counter as 0.
        self._words = self._view[:HEADER_BYTES].cast("Q")
        self._flags = self._view[:HEADER_BYTES].cast("I")
        self._owner = owner
        # Each side's private copy of the counter it owns; the shared one is only ever written.
        self._write = 0
        self._read = 0
        self._closed = False
        self._poller: select.poll | None = None  # made at the first blocking wait

    # ------------------------------------------------------------ creating and adopting

    @classmethod
    def create(cls, capacity: int = DEFAULT_CAPACITY, name: str = "mlts-burst") -> Ring:
        """A new zeroed ring and its eventfd (both owned by the returned object)."""
        if not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
            raise ValueError(f"ring capacity {capacity} is outside {MIN_CAPACITY}..{MAX_CAPACITY}")
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        event = -1
        try:
            os.ftruncate(fd, ring_bytes(capacity))
            event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            return cls(fd, ring_bytes(capacity), event, owner=True)
        except BaseException:
            os.close(fd)
            if event >= 0:
                os.close(event)
            raise

    @classmethod
    def adopt(cls, fd: int, size: object, event_fd: int, what: str) -> Ring:
        """Map a ring received from another process; takes ownership of both fds.

        Raises ValueError naming `what` when the size, the file or the eventfd is wrong.
        """
        try:
            if type(size) is not int or not MIN_CAPACITY <= size - HEADER_BYTES <= MAX_CAPACITY:
                raise ValueError(
                    f"{what}: size {size!r} must be {HEADER_BYTES} + {MIN_CAPACITY}..{MAX_CAPACITY} bytes"
                )
            try:
                actual = os.fstat(fd).st_size
            except OSError as e:
                raise ValueError(f"{what}: cannot inspect the ring's fd: {e}") from None
            if actual < size:
                raise ValueError(f"{what}: the ring claims {size} bytes but its memory holds {actual}")
            if not is_eventfd(event_fd):
                raise ValueError(f"{what}: its event fd is not an eventfd")
            os.set_blocking(event_fd, False)
            try:
                return cls(fd, size, event_fd, owner=True)
            except OSError as e:
                raise ValueError(f"{what}: cannot map the ring: {e}") from None
        except BaseException:
            os.close(fd)
            os.close(event_fd)
            raise

    # ------------------------------------------------------------ producer

    def write(self, payload: bytes | bytearray | memoryview, timeout: float | None = 0.0) -> bool:
        """Publish one message and signal the consumer.

        Non-blocking with `timeout` 0 (False when the ring has no room now); otherwise waits up to
        `timeout` seconds (None: for ever) for room. MessageTooLarge if it could never fit.
        """
        n = len(payload)
        if n + 4 > self.capacity:
            raise MessageTooLarge(
                f"a burst message of {n} bytes does not fit in a ring of {self.capacity} bytes"
            )
        limit = None if timeout is None else time.monotonic() + timeout
        while self.capacity - self._used_by_consumer() < n + 4:
            if limit is not None and time.monotonic() >= limit:
                return False
            time.sleep(0.0001)
        w = self._write
        self._put(w, _U32.pack(n))
        self._put(w + 4, payload)
        self._write = w + 4 + n
        # The message is complete before the counter that publishes it.
        self._words[_WRITE_AT // 8] = self._write
        self.signal()
        return True

    def _used_by_consumer(self) -> int:
        read = self._words[_READ_AT // 8]
        used = self._write - read
        if not 0 <= used <= self.capacity:
            raise RingError(f"the consumer's read counter {read} is inconsistent with {self._write} written")
        return used

    def _put(self, at: int, data: bytes | bytearray | memoryview) -> None:
        start = at % self.capacity
        first = min(len(data), self.capacity - start)
        self._data[start : start + first] = data[:first]
        if first < len(data):
            self._data[: len(data) - first] = data[first:]

    def signal(self) -> None:
        try:
            os.eventfd_write(self.event_fd, 1)
        except BlockingIOError:
            pass  # the counter is saturated: the consumer is woken anyway

    def mark_closed(self) -> None:
        """Tell the consumer nothing more will come (and wake it)."""
        self._flags[_CLOSED_AT // 4] = 1
        self.signal()

    # ------------------------------------------------------------ consumer

    def peer_closed(self) -> bool:
        return self._flags[_CLOSED_AT // 4] != 0

    def pending(self) -> bool:
        """Whether a message (or an inconsistency to report) waits to be read."""
        return self._words[_WRITE_AT // 8] != self._read

    def read(self, max_message: int | None = None) -> bytes | None:
        """The next message's payload, or None when the ring is empty; RingError when it is inconsistent."""
        written = self._words[_WRITE_AT // 8]
        r = self._read
        available = written - r
        if available == 0:
            return None
        if available < 0:
            raise RingError(f"the write counter moved backwards ({written} after {r} were read)")
        if available > self.capacity:
            raise RingError(f"the write counter claims {available} unread bytes in a ring of {self.capacity}")
        if available < 4:
            raise RingError(f"{available} bytes were published, less than a message header")
        length = _U32.unpack_from(self._get(r, 4))[0]
        limit = self.capacity - 4 if max_message is None else min(max_message, self.capacity - 4)
        if length > available - 4 or length > limit:
            raise RingError(f"a message claims {length} bytes but {available - 4} were published")
        payload = self._get(r + 4, length)
        self._read = r + 4 + length
        self._words[_READ_AT // 8] = self._read
        return payload

    def _get(self, at: int, n: int) -> bytes:
        start = at % self.capacity
        first = min(n, self.capacity - start)
        if first == n:
            return bytes(self._data[start : start + n])
        return bytes(self._data[start:]) + bytes(self._data[: n - first])

    def wait(self, timeout: float | None, polling_us: int = DEFAULT_POLLING_US) -> bool:
        """Poll for `polling_us`, then block on the eventfd; True once a message (or closing) is pending
        or the eventfd was signalled (the caller checks what happened).

        Returns False after `timeout` seconds (None: no limit) with nothing pending.
        """
        if self.pending() or self.peer_closed():
            return True
        if polling_us > 0:
            until = time.perf_counter_ns() + polling_us * 1000
            while time.perf_counter_ns() < until:
                if self.pending():
                    return True
        limit = None if timeout is None else time.monotonic() + timeout
        poller = self._poller
        if poller is None:
            poller = self._poller = select.poll()
            poller.register(self.event_fd, select.POLLIN)
        while True:
            # A signal sent after the check above leaves the eventfd readable, so none is missed.
            if self.pending() or self.peer_closed():
                return True
            if limit is None:
                wait_ms = -1
            else:
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    return False
                wait_ms = max(1, int(remaining * 1000))
            if poller.poll(wait_ms):
                try:
                    os.eventfd_read(self.event_fd)
                except BlockingIOError:
                    pass
                # Woken: a message, or a signal meant for this side itself (a burst being released).
                return True

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._data.release()
        self._words.release()
        self._flags.release()
        self._view.release()
        self._map.close()
        if self._owner:
            os.close(self.fd)
            os.close(self.event_fd)
